# A batch task whose first run fails (exit 1) and whose second completes,
# beside a poststart sidecar: a restart it is owed must bring web back
# before the sidecar.
job "fails-then-completes-beside-sidecar" {
  type = "batch"
  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "if [ -e /local/ran ]; then echo web done; exit 0; fi; : > /local/ran; echo web failed; exit 1"]
      }
      restart {
        attempts = 1
        interval = "60s"
        delay    = "3s"
        mode     = "fail"
      }
    }
    task "logship" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo logship up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
