# Stop races: a stop update raced against one task runner, every
# ordering of its boundaries against the update's, plus random schedules.

scenario "sidecar-stop" {
  about = "the report: stop while the sidecar is between its start condition and its start"
  job   = "jobs/report.hcl"
  stop_race {
    task = "sidecar"
  }
  expect {
    status = "complete"
  }
}

scenario "single-task-stop" {
  about = "the report's race with a single task"
  job   = "jobs/web.hcl"
  stop_race {
    task = "web"
  }
  expect {
    status = "complete"
  }
}

scenario "prestart-stop" {
  about = "stop while the main task waits behind a prestart task"
  job   = "jobs/init.hcl"
  stop_race {
    task = "web"
  }
  expect {
    status = "complete"
  }
}

scenario "poststop-after-stop" {
  about = "stop races the leader; the poststop task must still run after the alloc is terminal"
  job "poststop" {
    group "g" {
      task "leader" {
        driver       = "exec"
        leader       = true
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
        }
        resources {
          memory = 32
        }
        restart {
          attempts = 0
          interval = "60s"
          delay    = "10ms"
          mode     = "fail"
        }
      }
      task "cleanup" {
        driver       = "exec"
        kill_timeout = "250ms"
        lifecycle {
          hook = "poststop"
        }
        config {
          command = "/bin/sh"
          args    = ["-c", "echo cleanup done"]
        }
        resources {
          memory = 32
        }
        restart {
          attempts = 0
          interval = "60s"
          delay    = "10ms"
          mode     = "fail"
        }
      }
    }
  }
  stop_race {
    task = "leader"
  }
  expect {
    status = "complete"
  }
}
