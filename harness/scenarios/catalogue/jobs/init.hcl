# A prestart task that must complete before the main service starts.
job "init" {
  group "g" {
    task "init" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook = "prestart"
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "echo init done"]
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
        attempts = 0
        interval = "60s"
        delay    = "10ms"
        mode     = "fail"
      }
    }
  }
}
