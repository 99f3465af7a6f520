# One batch task that succeeds; the policy would allow two more attempts.
job "web-done" {
  type = "batch"

  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo web done"]
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
