# One batch task failing every attempt, with a restart delay long enough
# to measure (and its jitter): three attempts in all, about a second apart.
job "web-failing-slowly" {
  type = "batch"

  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo web fails; exit 1"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 2
        interval = "60s"
        delay    = "1s"
        mode     = "fail"
      }
    }
  }
}
