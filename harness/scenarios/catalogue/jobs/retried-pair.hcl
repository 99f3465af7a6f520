# A service and its poststart sidecar, each with restarts left: a fault
# that ends an attempt is retried, after a short delay.
job "retried-pair" {
  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 2
        interval = "60s"
        delay    = "100ms"
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
        attempts = 2
        interval = "60s"
        delay    = "100ms"
        mode     = "fail"
      }
    }
  }
}
