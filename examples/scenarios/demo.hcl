# A scenario file: run it with
#   sudo taskgate explore --scenario examples/scenarios/demo.hcl leader-prestart-errors
scenario "leader-prestart-errors" {
  about = "every prestart hook of the leader fails in turn: the task never runs, the alloc fails"
  # Inline, with no restarts: under the jobspec's default policy the next
  # attempt (15 s later) would pass, and the alloc complete.
  job "errors" {
    type = "batch"
    group "g" {
      task "leader" {
        driver = "exec"
        leader = true
        config {
          command = "/bin/sh"
          args    = ["-c", "echo leader up"]
        }
        restart {
          attempts = 0
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "stop-when-settled"
    each {
      points = ["leader:hook.prestart.*"]
      action = "error"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "demo-sidecar-stop" {
  about = "a stop update raced against the sidecar's runner, every ordering"
  job   = "../sidecar.hcl"
  stop_race {
    task = "sidecar"
  }
  expect {
    status = "complete"
  }
}
