# One batch task whose first attempt fails and whose second completes: an
# in-place update can land before, during or after the restart.
job "web-updated" {
  type = "batch"

  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "if [ ! -e /local/failed-once ]; then touch /local/failed-once; echo web fails once; exit 1; fi; echo web done"]
      }
      meta {
        owner = "taskgate"
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 1
        interval = "60s"
        delay    = "50ms"
        mode     = "fail"
      }
    }
  }
}
