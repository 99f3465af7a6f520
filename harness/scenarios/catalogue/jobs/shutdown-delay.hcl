# A leader with a shutdown delay and a poststart sidecar, both services.
job "shutdown-delay" {
  group "g" {
    task "leader" {
      driver         = "exec"
      leader         = true
      kill_timeout   = "250ms"
      shutdown_delay = "200ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "proxy" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo proxy up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
