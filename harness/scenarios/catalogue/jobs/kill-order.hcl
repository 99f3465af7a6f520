# A leader, a second main task and a poststart sidecar, all services.
job "kill-order" {
  group "g" {
    task "leader" {
      driver       = "exec"
      leader       = true
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "worker" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo worker up; sleep 3600 & wait"]
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
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
