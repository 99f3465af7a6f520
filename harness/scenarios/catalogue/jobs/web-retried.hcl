# One service task restarted once: attempt 2 follows a lost or killed attempt 1.
job "web-retried" {
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
        attempts = 1
        interval = "60s"
        delay    = "10ms"
        mode     = "fail"
      }
    }
  }
}
