# In-place updates: the harness, in the server's place, delivers the
# alloc's next job version (a new env entry and a new meta entry, both
# carrying the version). Every attempt must start with one whole version,
# never an older one than its runner had been given.

scenario "update-races" {
  about = "an update lands at each boundary of web's first attempt, its failure and its restart delay, and of its second attempt, which completes"
  job   = "jobs/web-updated.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["web:tr.start_condition_met", "web:tr.before_prestart",
                "web:hook.prestart.before.task_env", "web:hook.prestart.after.task_env",
                "web:tr.before_driver_start", "web:tr.start_committed", "web:tr.after_driver_start",
                "web:hook.exited.before.executor_shutdown", "web:hook.exited.after.executor_shutdown"]
      action = "update-alloc"
    }
    each {
      points = ["web:tr.start_condition_met", "web:tr.before_prestart",
                "web:hook.prestart.before.task_env", "web:tr.start_committed"]
      action = "update-alloc"
      hit    = 2
    }
  }
  expect {
    status = "complete"
  }
}

scenario "update-held-runner" {
  about = "a is held at each boundary of its start while b's start delivers an update: a starts with the update whole, or before it"
  job   = "jobs/two-services.hcl"
  faults {
    then = "stop-when-running"
    pairs {
      park  = ["a:tr.start_condition_met", "a:tr.before_prestart", "a:tr.after_prestart",
               "a:tr.before_driver_start", "a:tr.start_committed", "a:tr.after_driver_start"]
      event = "update-alloc"
      at    = ["b:tr.after_driver_start"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "update-hook-faults" {
  about = "web's update hooks fail or panic while an update waits for web's restart: the update is taken by the next attempt instead, whole"
  job   = "jobs/web-updated.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["web:hook.update.*"]
      action = "error"
      with   = ["web:hook.exited.before.executor_shutdown@1=update-alloc",
                "web:hook.exited.before.executor_shutdown@1=await(ar.update_applied@1)"]
    }
    each {
      points = ["web:hook.update.*"]
      action = "panic"
      with   = ["web:hook.exited.before.executor_shutdown@1=update-alloc",
                "web:hook.exited.before.executor_shutdown@1=await(ar.update_applied@1)"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "update-agent-kill" {
  about = "the agent dies while applying an update, or in web's update hooks; the restored agent lets web run on: the update is whole or not there, never lost once the runner had it"
  job   = "jobs/web-updated.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "run-to-end"
    each {
      points = ["ar.update_received", "ar.alloc_state_set", "ar.task_runners_updated", "ar.update_applied",
                "web:hook.update.before.task_env", "web:hook.update.after.task_env"]
      action = "kill"
      with   = ["web:hook.exited.before.executor_shutdown@1=update-alloc",
                "web:hook.exited.before.executor_shutdown@1=await(ar.update_applied@1)"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "update-every-task" {
  about = "an update reaches an alloc of two running tasks, one that ignores its kill signal; a restart follows: each task's attempt is killed with the kill timeout it started with (the update's is half), and each next attempt starts with the update's env, meta and kill timeout"
  job   = "jobs/stubborn.hcl"
  faults {
    then = "run-to-end"
    each {
      points = ["ar.update_applied"]
      action = "restart-alloc"
      with   = ["stubborn:hook.poststart.after.persist_handle=await(leader:hook.poststart.after.persist_handle@1)",
                "stubborn:hook.poststart.after.persist_handle=update-alloc",
                "leader:tr.after_driver_start@2=await(stubborn:tr.after_driver_start@2)",
                "leader:tr.after_driver_start@2=stop-alloc"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "after-stop-in-poststop" {
  about = "an update, a restart of the running tasks, or of all tasks, arrives while a stopped alloc's poststop task runs, after the stop was applied: the stop stays final (desired stop kept, no restart accepted)"
  job   = "jobs/lifecycle.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["cleanup:tr.after_driver_start"]
      action = "update-alloc"
      with   = ["cleanup:hook.exited.before.executor_shutdown=await(ar.update_applied@2)"]
    }
    each {
      points = ["cleanup:tr.after_driver_start"]
      action = "restart-alloc"
      with   = ["cleanup:hook.exited.before.executor_shutdown=await(ar.restart_received@1)"]
    }
    each {
      points = ["cleanup:tr.after_driver_start"]
      action = "restart-all-tasks"
      with   = ["cleanup:hook.exited.before.executor_shutdown=await(ar.restart_received@1)"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "after-stop" {
  about = "an update, a restart of the running tasks, or of all tasks, arrives once a stop told the leader to die: the stop stays final (desired stop, no restart accepted, nothing started)"
  job   = "jobs/report.hcl"
  faults {
    then = "stop-when-running"
    each {
      points = ["leader:tr.kill_asked"]
      action = "update-alloc"
    }
    each {
      points = ["leader:tr.kill_asked"]
      action = "restart-alloc"
    }
    each {
      points = ["leader:tr.kill_asked"]
      action = "restart-all-tasks"
    }
  }
  expect {
    status = "complete"
  }
}

scenario "setup-failure-update-agent-kill" {
  about = "web's setup fails with an update waiting, and the agent dies in the update hooks, before the restart policy decided the failure: the restored agent counts it all the same (no attempt left, the alloc fails) and never sets web up again"
  job   = "jobs/web.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-settled"
    each {
      points = ["web:hook.update.before.task_env", "web:hook.update.after.task_env"]
      action = "kill"
      with   = ["web:hook.prestart.before.validate=update-alloc",
                "web:hook.prestart.before.task_env=await(ar.update_applied@1)",
                "web:hook.prestart.after.task_env=error"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "setup-failure-update-agent-kill-retried" {
  about = "as setup-failure-update-agent-kill, with a restart left: the restored agent decides the failure (restart 1 of 1), web runs once more, and the stop ends it"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:hook.update.before.task_env", "web:hook.update.after.task_env"]
      action = "kill"
      with   = ["web:hook.prestart.before.validate=update-alloc",
                "web:hook.prestart.before.task_env=await(ar.update_applied@1)",
                "web:hook.prestart.after.task_env@1=error"]
    }
  }
  expect {
    status = "complete"
  }
}
