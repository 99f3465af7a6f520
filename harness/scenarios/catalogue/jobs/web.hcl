# One service task, no restarts: a fault that stops its start is final.
job "web" {
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
        attempts = 0
        interval = "60s"
        delay    = "10ms"
        mode     = "fail"
      }
    }
  }
}
