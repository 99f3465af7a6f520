# Two independent main tasks: one runner can be held while the other
# reaches a boundary, in either order.
job "two" {
  group "g" {
    task "a" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo a up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "b" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo b up; sleep 3600 & wait"]
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
