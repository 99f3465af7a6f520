# Restart policies, agent kills on any attempt, and executors or task trees
# dying under a running task.

scenario "failing-batch-agent-kill" {
  about = "a batch task fails every attempt (3 allowed); the agent dies at a boundary of attempt 2 and restores: still the policy's attempts, alloc failed (B1 covers the boundaries after the launch)"
  job   = "jobs/web-failing.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.start_condition_met", "web:tr.before_prestart", "web:tr.after_prestart",
                "web:tr.before_driver_start", "web:tr.start_committed",
                "web:hook.exited.after.executor_shutdown"]
      action = "kill"
      hit    = 2
    }
  }
  expect {
    status = "failed"
  }
}

scenario "service-success-agent-kill" {
  about = "a service task exits 0 every attempt, restarted on success as a failure is (3 allowed); the agent dies at a boundary of attempt 2 and restores: still the policy's attempts, the last success no completion, alloc failed"
  job   = "jobs/service-done.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.start_condition_met", "web:tr.start_committed",
                "web:hook.exited.after.executor_shutdown"]
      action = "kill"
      hit    = 2
    }
  }
  expect {
    status = "failed"
  }
}

scenario "batch-agent-kill" {
  about = "a batch task that succeeds; the agent dies at a boundary and restores: it completes, and never runs again"
  job   = "jobs/web-done.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.before_prestart", "web:tr.start_committed", "web:ex.spawned",
                "web:tr.after_driver_start", "web:hook.poststart.after.persist_handle",
                "web:hook.exited.before.executor_shutdown"]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "delay-mode-stop" {
  about = "a task failing in delay mode restarts without end; a stop on its third start ends it"
  job "delay" {
    group "g" {
      task "web" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "echo web fails; exit 1"]
        }
        restart {
          attempts = 1
          interval = "1s"
          delay    = "10ms"
          mode     = "delay"
        }
      }
    }
  }
  faults {
    then = "run-to-end"
    each {
      points = ["web:tr.after_driver_start"]
      action = "stop-alloc"
      hit    = 3
    }
  }
  expect {
    status = "complete"
  }
}

scenario "delay-mode-agent-kill" {
  about = "a batch task failing in delay mode uses up its attempt, and the agent dies as it begins to wait out the rest of the interval: the restored agent waits out that rest (not a restart delay), and the third attempt, in the next window, completes"
  job "delay" {
    type = "batch"
    group "g" {
      task "web" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "if [ -e /local/failed-twice ]; then echo web done; exit 0; fi; if [ -e /local/failed-once ]; then touch /local/failed-twice; else touch /local/failed-once; fi; echo web fails; exit 1"]
        }
        restart {
          attempts = 1
          interval = "1s"
          delay    = "10ms"
          mode     = "delay"
        }
      }
    }
  }
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.restart_delay"]
      action = "kill"
      hit    = 2
    }
  }
  expect {
    status = "complete"
  }
}

scenario "task-tree-killed" {
  about = "a running task's whole tree is SIGKILLed behind the engine's back: it restarts once, then the alloc stops"
  job   = "jobs/web-retried.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["web:hook.poststart.after.persist_handle"]
      action = "kill-task-tree"
      with   = ["web:tr.after_driver_start@2=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "frozen-executor" {
  about = "a running task's executor is SIGSTOPped, and continued only when the kill reaches its runner (which then asks the executor whether its task exited, and stops it); the kill waits until the executor was stopped, which a stop delivered once the task runs can overtake"
  job   = "jobs/report.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["leader:hook.poststart.after.persist_handle"]
      action = "sigstop-executor"
      with   = ["leader:tr.kill_asked=await(leader:hook.poststart.after.persist_handle@1)", "leader:tr.kill_asked=sigcont-executor"]
    }
    each {
      points = ["sidecar:hook.poststart.after.persist_handle"]
      action = "sigstop-executor"
      with   = ["sidecar:tr.kill_asked=await(sidecar:hook.poststart.after.persist_handle@1)", "sidecar:tr.kill_asked=sigcont-executor"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "completed-batch-agent-kill" {
  about = "the agent dies after a batch task completed, before its death was recorded (B2, fixed): the restored agent never runs it again"
  job   = "jobs/web-done.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.main_exited"]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "kill-path-agent-kill" {
  about = "the agent dies after a killed task's exit was handled, before its death was recorded (B2, fixed): the restored agent reports it killed"
  job   = "jobs/report.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "stop-when-running"
    each {
      points = ["leader:hook.exited.after.executor_shutdown", "leader:hook.stop.*"]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "attempt-2-agent-kill" {
  about = "the agent dies after attempt 2's executor started, before its handle was persisted (B1, fixed): the restored agent reattaches to attempt 2, not attempt 1, and attempt 2 completes under its own executor"
  job   = "jobs/web-fails-once.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.after_driver_start", "web:hook.poststart.before.persist_handle"]
      action = "kill"
      hit    = 2
    }
  }
  expect {
    status = "complete"
  }
}

scenario "agent-kill-before-bind" {
  about = "the agent dies before its executor bound the socket (B4, fixed): the restored agent destroys that executor before it launches another"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:ex.spawned"]
      action = "kill"
      # The restored runner looks for the executor only once it is held
      # unbound: else it could destroy it before it got that far.
      with = [
        "web:ex.before_bind=await(web:tr.after_driver_start@1)",
        "web:tr.restoring=await(web:ex.before_bind@1)",
      ]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "executor-death-restart" {
  about = "a running task's executor is SIGKILLed (B3, fixed): its task tree is killed before the restart launches attempt 2, then the alloc stops"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "process"
    then    = "run-to-end"
    each {
      points = ["web:hook.poststart.after.persist_handle"]
      action = "kill-executor"
      with   = ["web:tr.after_driver_start@2=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "init-agent-kill" {
  about = "the agent dies before the prestart task ran, while it ran, or once the main task ran; the restored agent neither skips it nor runs it again"
  job   = "jobs/init.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["init:tr.start_condition_met", "init:tr.after_prestart", "init:tr.after_driver_start", "web:tr.after_driver_start"]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "init-agent-kill-to-end" {
  about = "the agent dies once a batch job's main task started, after its prestart task completed; the restored agent runs the alloc to its end, with no stop to race, and never runs the prestart task again"
  job "init-batch" {
    type = "batch"
    group "g" {
      task "init" {
        driver       = "exec"
        kill_timeout = "250ms"
        lifecycle {
          hook = "prestart"
        }
        config {
          command = "/bin/sh"
          args    = ["-c", "echo init done"]
        }
        restart {
          attempts = 0
          interval = "60s"
          delay    = "10ms"
          mode     = "fail"
        }
      }
      task "web" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "echo web done"]
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
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.after_driver_start"]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}
