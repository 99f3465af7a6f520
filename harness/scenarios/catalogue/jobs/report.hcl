# The report's alloc: a leader and a poststart sidecar, both services.
job "report" {
  group "g" {
    task "leader" {
      driver       = "exec"
      leader       = true
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        interval = "60s"
        delay    = "10ms"
        mode     = "fail"
      }
    }
    task "sidecar" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo sidecar up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        interval = "60s"
        delay    = "10ms"
        mode     = "fail"
      }
    }
  }
}
