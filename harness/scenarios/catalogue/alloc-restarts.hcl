# User restarts (Nomad's `alloc restart`): the harness, in a user's place,
# restarts the running tasks (`restart-alloc`) or all tasks
# (`restart-all-tasks`) of an alloc with every lifecycle. A restart takes
# its tasks down leader first and sidecars last, starts nothing until they
# are down, and brings them back in lifecycle order, the completed prestart
# task only when all tasks restart (Nomad #19403). A stop racing it ends
# the alloc stopped; one asked after a stop is refused, by a restored
# agent too.

scenario "restart-races" {
  about = "a restart of the running tasks lands at each boundary of the alloc's first start; the stop follows once everything has started"
  job   = "jobs/lifecycle.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["init:tr.after_driver_start", "proxy:tr.start_committed", "proxy:tr.after_driver_start",
                "leader:tr.before_prestart", "leader:tr.before_driver_start", "leader:tr.start_committed",
                "leader:tr.after_driver_start", "worker:tr.after_driver_start",
                "logship:tr.start_committed", "logship:tr.after_driver_start"]
      action = "restart-alloc"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-all-races" {
  about = "a restart of all tasks lands at each boundary of the alloc's first start: the completed prestart task runs again before the main tasks"
  job   = "jobs/lifecycle.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["init:tr.after_driver_start", "proxy:tr.after_driver_start",
                "leader:tr.before_prestart", "leader:tr.start_committed", "leader:tr.after_driver_start",
                "logship:tr.start_committed", "logship:tr.after_driver_start"]
      action = "restart-all-tasks"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-stop-race" {
  about = "once everything runs, a restart of the running tasks, or of all tasks, is under way when the stop arrives, at each of its boundaries: the alloc ends stopped, nothing started after the stop"
  job   = "jobs/lifecycle.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["ar.restart_received", "leader:tr.restart_signaled", "worker:tr.restart_signaled",
                "proxy:tr.restart_signaled", "ar.restart_targets_down"]
      action = "stop-alloc"
      with   = ["logship:tr.after_driver_start=restart-alloc"]
    }
    each {
      points = ["ar.restart_received", "init:tr.restart_signaled", "proxy:tr.restart_signaled",
                "ar.restart_targets_down"]
      action = "stop-alloc"
      with   = ["logship:tr.after_driver_start=restart-all-tasks"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-stop-agent-death" {
  about = "a stop arrives while a restart of the running tasks, or of all tasks, has its targets down, and the agent dies as it takes the stop's command (queued behind the restart's) before applying it: the restored agent stops the alloc, and nothing but the poststop task starts after the stop"
  job   = "jobs/lifecycle.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["ar.update_received"]
      action = "kill"
      with   = ["logship:tr.after_driver_start=restart-alloc", "ar.restart_targets_down=stop-alloc"]
    }
    each {
      points = ["ar.update_received"]
      action = "kill"
      with   = ["logship:tr.after_driver_start=restart-all-tasks", "ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-siblings-across-restore" {
  about = "a restart has the main task down and has told the prestart sidecar to stop when the agent dies: the restored agent brings the sidecar back before the main task, as the restart would have (it once started the main task while the sidecar was still going down)"
  job   = "jobs/runs-twice-beside-sidecar.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["proxy:tr.restart_signaled", "proxy:hook.prekill.before.shutdown_delay"]
      action = "kill"
      # The restored sidecar's runner is held 300 ms as it restores (only
      # the restored agent reaches tr.restoring): the window in which the
      # bug let web start ahead of it.
      # The restart waits for web's first output: by then its first run
      # made its marker and set its trap, however slow the machine.
      with   = ["web:hook.poststart.before.persist_handle=await(web:ex.task_output@1)",
                "web:hook.poststart.after.persist_handle=restart-alloc",
                "proxy:tr.restoring=delay(300)"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-target-panics" {
  about = "once everything runs, a restart's main target panics its task runner as it is told to restart: the restart holds the next wave until the runner's cleanup has killed that task (the cleanup is held 300 ms to widen the window a restart once went through, taking a gone runner for a task down)"
  job   = "jobs/lifecycle.hcl"
  faults {
    host = "process"
    then = "run-to-end"
    each {
      points = ["leader:tr.restart_signaled", "leader:hook.prekill.*", "worker:tr.restart_signaled"]
      action = "panic"
      with   = ["logship:tr.after_driver_start=restart-alloc", "leader:tr.main_exited=delay(300)",
                "worker:tr.main_exited=delay(300)"]
    }
    each {
      points = ["leader:tr.restart_signaled"]
      action = "panic"
      with   = ["logship:tr.after_driver_start=restart-all-tasks", "leader:tr.main_exited=delay(300)"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "restart-executor-death" {
  about = "a task's executor dies just as a restart tells the task to stop: the restart destroys the tree it left before the task comes back (it once went on without, and the old tree outlived the alloc)"
  job   = "jobs/lifecycle.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["worker:hook.prekill.before.shutdown_delay", "proxy:hook.prekill.before.shutdown_delay"]
      action = "kill-executor"
      with   = ["logship:tr.after_driver_start=restart-alloc",
                "ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-task-tree-death" {
  about = "a task's whole tree dies just as a restart tells it to stop: the restart brings it back once, and the alloc ends complete"
  job   = "jobs/lifecycle.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["worker:hook.prekill.before.shutdown_delay", "proxy:hook.prekill.before.shutdown_delay"]
      action = "kill-task-tree"
      with   = ["logship:tr.after_driver_start=restart-alloc",
                "ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-meets-exit" {
  about = "a restart reaches a service task just as it exits 0 with restarts left (its runner sees both at once): the exit is the task's own, and the restart, still asked, cuts short the 3 s delay its policy gives, holding up neither the restart nor the stop behind it"
  job "restart-exit" {
    type = "service"
    group "g" {
      task "other" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "trap 'exit 0' INT TERM; echo other up; sleep 3600 & wait"]
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
          args    = ["-c", "echo web done"]
        }
        restart {
          attempts = 2
          interval = "60s"
          delay    = "3s"
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "run-to-end"
    each {
      points = ["web:tr.after_driver_start"]
      action = "restart-alloc"
      # web starts once other runs (so the restart is accepted), and its
      # runner looks again only once the restart was asked and the exit
      # recorded.
      with = ["web:tr.before_driver_start=await(other:hook.poststart.after.persist_handle@1)",
              "web:tr.after_driver_start=await(web:tr.restart_asked@1)",
              "web:hook.poststart.after.persist_handle=await(web:ex.task_exited@1)",
              "ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "failure-before-restart" {
  about = "web's tree is SIGKILLed as a user restart is asked of it (it failed), and its runner sees the restart and the exit at once: the failure came before the restart reached it, so its policy (no restart left) judges it, and the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["web:tr.restart_asked"]
      action = "kill-task-tree"
      # The restart is asked while web's runner is in its poststart hooks,
      # which it leaves only once the executor recorded the exit: both are
      # ready when it next looks.
      with   = ["web:hook.poststart.before.persist_handle=restart-alloc",
                "web:hook.poststart.after.persist_handle=await(web:ex.task_exited@1)",
                "ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "failure-before-restart-retried" {
  about = "as failure-before-restart, with a restart left after a 3 s delay: the policy restarts web, and the user's restart, still asked, cuts the delay short: attempt 2 runs at once"
  job "retried" {
    group "g" {
      task "web" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
        }
        restart {
          attempts = 1
          interval = "60s"
          delay    = "3s"
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "run-to-end"
    each {
      points = ["web:tr.restart_asked"]
      action = "kill-task-tree"
      with   = ["web:hook.poststart.before.persist_handle=restart-alloc",
                "web:hook.poststart.after.persist_handle=await(web:ex.task_exited@1)",
                "web:tr.after_driver_start@2=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-shutdown-delay-executor-death" {
  about = "a restart reaches the leader, and its executor dies during its shutdown delay: the lost attempt is the restart's end, not a failure the policy (no restart left) fails the task for"
  job   = "jobs/shutdown-delay.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["leader:hook.prekill.after.shutdown_delay"]
      action = "kill-executor"
      with   = ["proxy:hook.poststart.after.persist_handle=restart-alloc",
                "ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-races-service-exits" {
  about = "a restart of the running or of all tasks meets a service task's exit 0 and a sidecar's exit 1, each with restarts left: in their exited hooks, or in their restart delays"
  job   = "jobs/exits.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["web:hook.exited.before.executor_shutdown", "web:tr.restart_delay"]
      action = "restart-alloc"
      with   = ["ar.restart_targets_down=stop-alloc"]
    }
    each {
      points = ["proxy:tr.restart_delay"]
      action = "restart-all-tasks"
      with   = ["ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-races-batch-exits" {
  about = "as restart-races-service-exits in a batch alloc: a main task's exit 1 and a sidecar's exit 0, each with restarts left"
  job   = "jobs/exits-batch.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["proxy:hook.exited.before.executor_shutdown"]
      action = "restart-alloc"
      with   = ["ar.restart_targets_down=stop-alloc"]
    }
    each {
      points = ["web:tr.restart_delay"]
      action = "restart-all-tasks"
      with   = ["ar.restart_targets_down=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-after-stop-restored" {
  about = "the agent dies as a stop begins its kill; the restored agent, stopping, is asked to restart the running tasks while the task's runner is held before it looks for the executor, the task still running: the restart is refused, and the stop stays final"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["ar.kill_started"]
      action = "kill"
      # Given to the restored agent (only it reaches tr.restoring): the
      # restart is sent, and the runner held until the update handler has
      # it, so it finds the alloc stopping, not finished.
      with = ["web:tr.restoring=restart-alloc",
              "web:tr.restoring=await(ar.restart_received@1)"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-carried-across-restore" {
  about = "a user restart dooms web (its runner found it running), and the agent dies before it signals; while no agent runs, web's tree dies of a SIGKILL, or its executor dies: the restored agent carries the dead runner's restart through, not web's policy (no restart left), and web's second run completes"
  job   = "jobs/runs-twice.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    # The restored agent (only it reaches tr.restoring) finds the tree
    # killed, or the executor gone, before it looks for the executor.
    each {
      points = ["web:tr.restart_signaled"]
      action = "kill"
      # As web's first output shows, its first run made its marker: the
      # second then completes (it once ran on, killed before it had).
      with   = ["web:hook.poststart.before.persist_handle=await(web:ex.task_output@1)",
                "web:hook.poststart.after.persist_handle=restart-alloc",
                "web:tr.restoring=kill-task-tree"]
    }
    each {
      points = ["web:tr.restart_signaled"]
      action = "kill"
      with   = ["web:hook.poststart.before.persist_handle=await(web:ex.task_output@1)",
                "web:hook.poststart.after.persist_handle=restart-alloc",
                "web:tr.restoring=kill-executor"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-exit-0-across-restore" {
  about = "a user restart's SIGINT ends a batch task (its trap exits 0), and the agent dies before the runner goes on: the exit 0 is the restart's end, not a completion, so the restored agent carries the restart through and web runs again (and completes)"
  job   = "jobs/runs-twice.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:hook.exited.before.executor_shutdown"]
      action = "kill"
      # The restart's SIGINT waits for web's first output: its trap is set.
      with   = ["web:hook.poststart.before.persist_handle=await(web:ex.task_output@1)",
                "web:hook.poststart.after.persist_handle=restart-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-kept-across-restore" {
  about = "as failure-before-restart-retried, with the agent killed, beside a poststart sidecar: a user restart finds web's first run already failed (exit 1), and stays owed (the policy's 3 s delay is to be cut short); the agent dies as the runner keeps the restart, or as the delay begins: the restored agent still cuts the delay short, starts the sidecar again only once web runs (it once showed web running, and started the sidecar first), and web's second run completes"
  job   = "jobs/fails-then-completes-beside-sidecar.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    # The runner supervises web only once web has failed and the restart
    # was asked: the restart wins, and its peek finds the failure. Killed
    # as it keeps the restart, the restored web's runner is held 300 ms as
    # it restores: the window in which the sidecar started first.
    each {
      points = ["web:tr.restart_kept"]
      action = "kill"
      with   = ["web:hook.poststart.before.persist_handle=restart-alloc",
                "web:hook.poststart.after.persist_handle=await(web:ex.task_exited@1)",
                "web:hook.poststart.after.persist_handle=await(web:tr.restart_asked@1)",
                "web:tr.restoring=delay(300)"]
    }
    each {
      points = ["web:tr.restart_delay"]
      action = "kill"
      with   = ["web:hook.poststart.before.persist_handle=restart-alloc",
                "web:hook.poststart.after.persist_handle=await(web:ex.task_exited@1)",
                "web:hook.poststart.after.persist_handle=await(web:tr.restart_asked@1)"]
    }
  }
  expect {
    status = "complete"
  }
}
