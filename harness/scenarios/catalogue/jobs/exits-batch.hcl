# A batch alloc whose tasks end on their own with restarts left: `web`
# (a main task) exits 1 and `proxy` (a poststart sidecar) exits 0, each
# 200 ms after it starts; both are restarted by their policies. The leader
# runs until stopped.
job "exits-batch" {
  type = "batch"

  group "g" {
    task "leader" {
      driver       = "exec"
      leader       = true
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; sleep 0.2 & wait; echo web fails; exit 1"]
      }
      restart {
        attempts = 3
        interval = "60s"
        delay    = "200ms"
        mode     = "fail"
      }
    }
    task "proxy" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; sleep 0.2 & wait; echo proxy done"]
      }
      restart {
        attempts = 3
        interval = "60s"
        delay    = "200ms"
        mode     = "fail"
      }
    }
  }
}
