# Fault sets: one run per listed point, each with its action.

scenario "prestart-hook-error" {
  about = "every prestart hook boundary returns an error: the task is never exec'd, the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-settled"
    each {
      points = ["web:hook.prestart.*"]
      action = "error"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "prestart-hook-panic" {
  about = "every prestart hook boundary panics: the runner survives, the task is never exec'd"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-settled"
    each {
      points = ["web:hook.prestart.*"]
      action = "panic"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "slow-boundaries" {
  about = "a slow boundary (each sidecar hook, then each update boundary during the stop)"
  job   = "jobs/report.hcl"
  faults {
    host    = "process"
    then    = "stop-when-running"
    each {
      points = [
        "sidecar:hook.prestart.*",
        "ar.update_received",
        "ar.alloc_state_set",
        "ar.task_runners_updated",
        "ar.kill_started",
      ]
      action = "delay(20)"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "executor-fault" {
  about = "the executor fails after its cgroup, after its mounts, before exec: nothing is leaked"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-settled"
    each {
      points = [
        "web:ex.after_cgroup",
        "web:ex.after_mounts",
        "web:ex.before_exec",
      ]
      action = "error"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "executor-fault-after-stop" {
  about = "the stop reaches the alloc runner after web's start was committed, and its executor then fails before exec, no restart left: the failed launch fails the task (as Nomad's does), the stop does not make it complete"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "run-to-end"
    each {
      points = ["web:ex.after_cgroup", "web:ex.after_mounts", "web:ex.before_exec"]
      action = "error"
      # The executor waits after its cgroup until the alloc runner began
      # the stop's kill (an error there takes effect after the wait): the
      # launch fails after the stop on any machine.
      with = [
        "web:tr.start_committed=stop-alloc",
        "web:ex.after_cgroup=await(ar.kill_started@1)",
      ]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "prestart-fault-after-stop" {
  about = "the stop reaches the alloc runner while web's prestart hooks run, then a later hook fails, or a panic at its boundary panics the runner (a hook's points are outside its panic guard), no restart left: either fails the task, whatever the stop, and nothing is exec'd"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "run-to-end"
    each {
      points = ["web:hook.prestart.before.task_dir", "web:hook.prestart.before.log_files", "web:hook.prestart.before.task_env"]
      action = "error"
      # The runner goes on past its first hook only once the alloc runner
      # began the stop's kill.
      with   = ["web:hook.prestart.after.validate=stop-alloc", "web:hook.prestart.after.validate=await(ar.kill_started@1)"]
    }
    each {
      points = ["web:hook.prestart.before.task_dir", "web:hook.prestart.before.log_files", "web:hook.prestart.before.task_env"]
      action = "panic"
      with   = ["web:hook.prestart.after.validate=stop-alloc", "web:hook.prestart.after.validate=await(ar.kill_started@1)"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "runner-panic-while-stopping" {
  about = "the stop kills web, and a panic at an exited or stop hook's boundary panics its task runner: the runner's cleanup records the task failed, and the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-running"
    each {
      points = ["web:hook.exited.*", "web:hook.stop.*"]
      action = "panic"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "runner-panic-in-prekill" {
  about = "the stop begins web's kill, and a panic at a prekill hook's boundary panics its task runner: the runner's cleanup kills the running task, records it killed and failed, and the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-running"
    each {
      points = ["web:hook.prekill.*"]
      action = "panic"
    }
  }
  expect {
    status = "failed"
  }
}

scenario "runner-panic-agent-kill" {
  about = "web's runner panics as web starts, and the agent dies in the panic's cleanup, before it killed web or recorded it failed: the restored agent finishes that cleanup (web killed, recorded failed), and the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:tr.after_driver_start", "web:hook.poststart.after.persist_handle"]
      action = "panic"
      # The cleanup reaches tr.main_exited first.
      with   = ["web:tr.main_exited=kill"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "executor-death-at-shutdown" {
  about = "the stop kills web, and its executor dies just before the exited hook shuts it down: the runner destroys the cgroup, socket, spec and root the executor left (it once left them)"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-running"
    each {
      points = ["web:hook.exited.before.executor_shutdown"]
      action = "kill-executor"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "death-before-stop" {
  about = "web's tree (an OOM kill, say) or its executor is SIGKILLed as its task starts, and only then does the stop reach its runner, still in its poststart hooks: the task failed, or its attempt was lost, before it was told to die, and with no restart left the alloc fails"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-running"
    # The runner reaches its supervision only once the stop told it to die
    # (and, for the tree, once its executor recorded the exit).
    each {
      points = ["web:tr.after_driver_start"]
      action = "kill-task-tree"
      with   = ["web:hook.poststart.before.persist_handle=await(web:ex.task_exited@1)", "web:hook.poststart.after.persist_handle=await(web:tr.kill_asked@1)"]
    }
    each {
      points = ["web:tr.after_driver_start"]
      action = "kill-executor"
      with   = ["web:hook.poststart.after.persist_handle=await(web:tr.kill_asked@1)"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "death-at-kill" {
  about = "the stop tells web's runner to die, its executor tells the runner the task is running, and only then is web's executor or tree SIGKILLed, as the kill begins: the kill ended the attempt, and the alloc completes"
  job   = "jobs/web.hcl"
  faults {
    host    = "process"
    then    = "stop-when-running"
    each {
      points = ["web:tr.killing"]
      action = "kill-executor"
    }
    each {
      points = ["web:tr.killing"]
      action = "kill-task-tree"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "agent-kill" {
  about = "the agent is SIGKILLed at a boundary and restarted: no task lost, none started twice"
  job   = "jobs/report.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "stop-when-running"
    each {
      points = [
        "leader:tr.start_condition_met",
        "leader:tr.before_prestart",
        "leader:tr.after_prestart",
        "leader:tr.before_driver_start",
        "leader:tr.after_driver_start",
        "leader:tr.start_committed",
        "leader:hook.prestart.*",
        "leader:hook.poststart.*",
        "sidecar:tr.start_condition_met",
        "sidecar:tr.before_prestart",
        "sidecar:tr.after_prestart",
        "sidecar:tr.before_driver_start",
        "sidecar:tr.after_driver_start",
        "sidecar:tr.start_committed",
        "sidecar:hook.prestart.*",
        "sidecar:hook.poststart.*",
        "ar.update_received",
        "ar.alloc_state_set",
        "ar.task_runners_updated",
        "ar.kill_started",
        "ar.update_applied",
        "harness.stop_delivered",
        "leader:tr.killing",
        "sidecar:tr.killing",
        "leader:hook.prekill.*",
        "sidecar:hook.prekill.*",
        "leader:hook.exited.before.executor_shutdown",
      ]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "agent-kill-twice" {
  about = "the agent dies as the tasks run or as a stop begins its kill, and the agent restored to stop them dies too, as it tells a task to die or handles a task's exit: a third agent finishes the kill in order, and nothing is lost or started again"
  job   = "jobs/report.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "stop-when-running"
    each {
      points        = ["sidecar:tr.after_driver_start", "ar.alloc_state_set", "leader:tr.killing",
                       "leader:hook.prekill.after.shutdown_delay"]
      action        = "kill"
      restored_kill = ["leader:tr.killing", "sidecar:tr.killing",
                       "leader:hook.exited.before.executor_shutdown",
                       "sidecar:hook.exited.before.executor_shutdown"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "sidecar-outlives-mains" {
  about = "a stop with a leader, a second main task and a poststart sidecar: the sidecar is told to die only once both main tasks exited (Nomad #13055)"
  job   = "jobs/kill-order.hcl"
  faults {
    then = "stop-when-running"
    each {
      # A slow death for the worker: a sidecar told with the main tasks
      # would be told before the worker exited.
      points = ["worker:tr.killing"]
      action = "delay(50)"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "shutdown-delay-agent-kill" {
  about = "a stop reaches a leader with a shutdown delay and the agent dies before or during the delay: the restored agent kills the leader, and the sidecar only after it"
  job   = "jobs/shutdown-delay.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "stop-when-running"
    each {
      points = ["leader:hook.prekill.before.shutdown_delay", "leader:hook.prekill.after.shutdown_delay"]
      action = "kill"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "shutdown-delay-tree-killed" {
  about = "a leader's tree is SIGKILLed during its shutdown delay: its end is the kill's, the alloc completes, and the sidecar is told only after"
  job   = "jobs/shutdown-delay.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["leader:hook.prekill.after.shutdown_delay"]
      action = "kill-task-tree"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "kill-grace" {
  about = "a plain stop: the leader exits on its kill signal after its shutdown delay; the task that ignores the signal is SIGKILLed only after its own shutdown delay and grace"
  job   = "jobs/stubborn.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["stubborn:tr.killing"]
      action = "delay(1)"
    }
  }
  expect {
    status = "complete"
  }
}
