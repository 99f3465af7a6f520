# One batch task, no restarts, whose first run lasts until it is killed
# (its trap exits 0) and whose second completes at once: a restart carried
# through shows as a second run that ends the alloc.
job "runs-twice" {
  type = "batch"
  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "if [ -e /local/ran ]; then echo web done; exit 0; fi; : > /local/ran; trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
