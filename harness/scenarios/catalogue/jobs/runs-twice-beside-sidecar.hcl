# runs-twice.hcl's batch task beside a prestart sidecar: a restart carried
# through shows as web's second run, which must come after the sidecar is
# back, and ends the alloc.
job "runs-twice-beside-sidecar" {
  type = "batch"
  group "g" {
    task "proxy" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo proxy up; sleep 3600 & wait"]
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
        args    = ["-c", "if [ -e /local/ran ]; then echo web done; exit 0; fi; : > /local/ran; trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
