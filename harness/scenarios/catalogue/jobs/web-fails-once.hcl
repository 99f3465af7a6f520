# One batch task whose first attempt fails at once and whose second runs
# a second, then completes: an agent killed around attempt 2's start must
# find attempt 2 again, not lose it.
job "web-fails-once" {
  type = "batch"

  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "if [ -e /local/failed-once ]; then echo web runs; sleep 1; echo web done; exit 0; fi; : > /local/failed-once; echo web fails once; exit 1"]
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
