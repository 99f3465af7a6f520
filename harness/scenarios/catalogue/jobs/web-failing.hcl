# One batch task failing every attempt; three attempts in all.
job "web-failing" {
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
        delay    = "10ms"
        mode     = "fail"
      }
    }
  }
}
