# The restart policy's account across restores and intervals: every
# attempt counted, lost ones too (an executor that died while the agent
# was down, an attempt committed by an agent killed before its launch); a
# restart delay kept, with its jitter, across an agent kill inside it; an
# interval that expires during the run grants its attempts again, across a
# restore too; a stop asked before a restart is decided leaves none decided.

scenario "executor-death-agent-down" {
  about = "a running task's executor is SIGKILLed, then the agent, before it saw that; the restored agent finds the attempt lost and restarts it by the policy (one attempt left)"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:hook.poststart.after.persist_handle"]
      action = "kill-executor"
      with   = ["web:hook.poststart.after.persist_handle=kill"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "executor-death-agent-down-final" {
  about = "as executor-death-agent-down, with no restart left: the lost attempt is the task's last, and the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:hook.poststart.after.persist_handle"]
      action = "kill-executor"
      with   = ["web:hook.poststart.after.persist_handle=kill"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "lost-attempt-second-kill" {
  about = "as executor-death-agent-down, the agent killed before the launch it made was written, and the restored agent dies too once it decided the lost attempt's restart: the third agent finds the restart counted and decided, waits the rest of its delay, and runs the last attempt; the lost attempt is not lost and counted again"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points        = ["web:hook.poststart.after.persist_handle"]
      action        = "kill-executor"
      with          = ["web:hook.poststart.after.persist_handle=kill"]
      restored_kill = ["web:tr.restart_delay"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "failure-second-kill" {
  about = "the agent dies as web's first attempt starts, before the launch was written; the restored agent reattaches, sees attempt 1 fail, decides its restart, and dies as the delay begins: the third agent finds the restart decided and runs attempt 2, which completes; attempt 1's failure is not counted twice"
  job   = "jobs/web-fails-once.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points        = ["web:tr.after_driver_start"]
      action        = "kill"
      restored_kill = ["web:tr.restart_delay"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "lost-attempt-second-kill-last" {
  about = "as lost-attempt-second-kill, the restored agent killed once it committed the last attempt, before it launched it: the third agent finds that attempt lost too, the policy's last, and the alloc fails"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points        = ["web:hook.poststart.after.persist_handle"]
      action        = "kill-executor"
      with          = ["web:hook.poststart.after.persist_handle=kill"]
      restored_kill = ["web:tr.start_committed"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "lost-attempt-second-kill-final" {
  about = "as executor-death-agent-down-final, and the restored agent dies too, as it finds the attempt lost or as its runner ends: the third agent still finds the lost attempt the task's last (no decision of the dead agents starts another), and the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points        = ["web:hook.poststart.after.persist_handle"]
      action        = "kill-executor"
      with          = ["web:hook.poststart.after.persist_handle=kill"]
      restored_kill = ["web:tr.restoring", "web:tr.main_exited"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "failure-before-restored-stop" {
  about = "web's tree is SIGKILLed as its task starts (it failed), then the agent dies before its runner saw that; the agent is restored with a stop: the failure came before any runner was told to die, and with no restart left the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "stop-when-running"
    each {
      points = ["web:tr.after_driver_start"]
      action = "kill-task-tree"
      with   = ["web:hook.poststart.before.persist_handle=await(web:ex.task_exited@1)", "web:hook.poststart.after.persist_handle=kill"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "lost-launch-agent-kill" {
  about = "the agent dies after committing an attempt with no restart left, before or after its executor was spawned (held unbound): the restored agent finds it lost, and the alloc fails; nothing of the task ever ran"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:tr.start_committed"]
      action = "kill"
    }
    each {
      points = ["web:ex.spawned"]
      action = "kill"
      # The executor is held unbound until the restored runner gave up on
      # it, and that runner looks for it only once it is held: else the
      # new agent could destroy it before it got that far.
      with = [
        "web:ex.before_bind=await(web:tr.main_exited@1)",
        "web:tr.restoring=await(web:ex.before_bind@1)",
      ]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "interval-across-restore" {
  about = "a batch task fails at once, is restarted, fails again 1.5 s later, then completes; its 1 s interval expired meanwhile, so the second failure is restarted too, though the agent died at its end and a new one decided"
  job "interval" {
    type = "batch"
    group "g" {
      task "web" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "n=$(cat /local/runs 2>/dev/null || echo 0); n=$((n + 1)); echo $n > /local/runs; echo web run $n; case $n in 1) exit 1;; 2) sleep 1.5; exit 1;; esac"]
        }
        restart {
          attempts = 1
          interval = "1s"
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
      points = ["web:hook.exited.before.executor_shutdown"]
      action = "kill"
      hit    = 2
    }
  }
  expect {
    status = "complete"
  }
}

scenario "restart-delay-agent-kill" {
  about = "a batch task fails three times, each restart about a second later: its delay plus the jitter the harness's seed draws for it; the agent dies as the first delay begins, and the restored agent waits the rest of it"
  job   = "jobs/web-failing-slowly.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["web:tr.restart_delay"]
      action = "kill"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "stop-during-restart-delay" {
  about = "a stop arrives while a failed task waits out its 30 s restart delay: the wait ends at once, no further attempt is decided, and the alloc is stopped, not failed"
  job "slow-restart" {
    type = "batch"
    group "g" {
      task "web" {
        driver       = "exec"
        kill_timeout = "250ms"
        config {
          command = "/bin/sh"
          args    = ["-c", "echo web fails; exit 1"]
        }
        restart {
          attempts = 2
          interval = "60s"
          delay    = "30s"
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "run-to-end"
    each {
      points = ["web:tr.restart_delay"]
      action = "stop-alloc"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "stop-before-restart-decision" {
  about = "a failing batch task with restarts left is stopped in its exited hooks, and its runner goes on only once the stop's kill was asked of it: no restart is decided, the task is killed between attempts, and the alloc is stopped, not failed"
  job   = "jobs/web-failing.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["web:hook.exited.before.executor_shutdown"]
      action = "stop-alloc"
      with   = ["web:hook.exited.after.executor_shutdown=await(web:tr.kill_asked@1)"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "user-restart-then-failure" {
  about = "a user restart, then a real failure: the restart is not counted against the policy, so its one attempt restarts the failure"
  job "flaky" {
    type = "batch"
    group "g" {
      task "web" {
        driver       = "exec"
        # The kill signal does nothing by default: one that comes before a
        # run has counted itself is lost, and SIGKILL after the grace ends
        # that run, so every run is counted before it can end (with INT, a
        # restart's kill could end run 1 uncounted, and run 2 then waited
        # for ever as run 1 again).
        kill_signal  = "SIGURG"
        kill_timeout = "5s"
        config {
          command = "/bin/sh"
          args    = ["-c", "if [ -e /local/ran-twice ]; then trap 'exit 0' URG; echo web run 3; sleep 3600 & wait; fi; if [ -e /local/ran-once ]; then : > /local/ran-twice; echo web run 2 fails; exit 1; fi; : > /local/ran-once; trap 'exit 0' URG; echo web run 1; sleep 3600 & wait"]
        }
        restart {
          attempts = 1
          interval = "60s"
          delay    = "10ms"
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "run-to-end"
    each {
      points = ["web:hook.poststart.after.persist_handle"]
      action = "restart-alloc"
      with   = ["web:tr.after_driver_start@3=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "prestart-task-fails" {
  about = "a prestart task exits 1, is restarted by its policy and completes: the main task starts only after that"
  job "init-retried" {
    group "g" {
      task "init" {
        driver       = "exec"
        kill_timeout = "250ms"
        lifecycle {
          hook = "prestart"
        }
        config {
          command = "/bin/sh"
          args    = ["-c", "if [ -e /local/failed-once ]; then echo init done; exit 0; fi; touch /local/failed-once; echo init fails; exit 1"]
        }
        restart {
          attempts = 1
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
          args    = ["-c", "trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
        }
        restart {
          attempts = 0
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "stop-when-running"
    each {
      # The failure's own restart delay, a moment longer.
      points = ["init:tr.restart_delay"]
      action = "delay(1)"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "prestart-task-fails-final" {
  about = "a prestart task exits 1 with no restart left: the alloc fails and the main task never starts; the siblings' kill is held a second, so that a start wrongly let through would reach its exec"
  job "init-fails" {
    group "g" {
      task "init" {
        driver       = "exec"
        kill_timeout = "250ms"
        lifecycle {
          hook = "prestart"
        }
        config {
          command = "/bin/sh"
          args    = ["-c", "echo init fails; exit 1"]
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
          args    = ["-c", "trap 'exit 0' INT TERM; echo web up; sleep 3600 & wait"]
        }
        restart {
          attempts = 0
          mode     = "fail"
        }
      }
    }
  }
  faults {
    then = "run-to-end"
    each {
      # Widens the window a wrong start would need: the verdict on a
      # correct engine never depends on it, only how surely a start that
      # a failed prestart task let through reaches its exec.
      points = ["init:tr.kill_asked"]
      action = "delay(1000)"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "attempts-left" {
  about = "a service and its sidecar with restarts left: a setup failure, an executor or a task tree SIGKILLed, an executor frozen until the stop reaches it, an update, a restart of the running or of all tasks, at the service's start; retried by the policy, then stopped"
  job   = "jobs/retried-pair.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["web:hook.prestart.before.task_env"]
      action = "error"
    }
    each {
      points = ["web:hook.poststart.after.persist_handle", "proxy:hook.poststart.after.persist_handle"]
      action = "kill-executor"
    }
    each {
      points = ["web:hook.poststart.after.persist_handle", "proxy:hook.poststart.after.persist_handle"]
      action = "kill-task-tree"
    }
    each {
      points = ["web:hook.poststart.after.persist_handle"]
      action = "sigstop-executor"
      with   = ["web:tr.kill_asked=await(web:hook.poststart.after.persist_handle@1)", "web:tr.kill_asked=sigcont-executor"]
    }
    each {
      points = ["proxy:hook.poststart.after.persist_handle"]
      action = "update-alloc"
    }
    each {
      points = ["proxy:hook.poststart.after.persist_handle"]
      action = "restart-alloc"
    }
    each {
      points = ["proxy:hook.poststart.after.persist_handle"]
      action = "restart-all-tasks"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "attempts-left-agent-kill" {
  about = "the agent dies as the service's attempt is committed, as its sidecar's tree is SIGKILLed, or in a restart's exited hooks; the restored agent counts every attempt and restarts within the policy"
  job   = "jobs/retried-pair.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:tr.start_committed"]
      action = "kill"
    }
    each {
      points = ["proxy:hook.poststart.after.persist_handle"]
      action = "kill-task-tree"
      with   = ["proxy:hook.exited.before.executor_shutdown=kill"]
    }
  }
  expect {
    status = "complete"
  }
}
