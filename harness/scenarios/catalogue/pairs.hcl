# Depth 2 across actors: task a's runner held at each boundary on its way
# to running, while an event happens when task b reaches one of its own.
# b waits at its boundary until a is held, so each pair happens in this
# order on any machine.

scenario "held-runner-stop" {
  about = "a held before its start while b's boundary delivers the stop: a never starts, or is killed"
  job   = "jobs/two-services.hcl"
  faults {
    then = "run-to-end"
    pairs {
      park  = ["a:tr.start_condition_met", "a:tr.before_prestart", "a:tr.after_prestart",
               "a:tr.before_driver_start", "a:tr.start_committed", "a:tr.after_driver_start"]
      event = "stop-alloc"
      at    = ["b:tr.after_driver_start", "b:hook.poststart.after.persist_handle"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "held-runner-crash" {
  about = "the agent dies at b's boundary while a is held; the restored agent stops: nothing lost or started twice"
  job   = "jobs/two-services.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "run-to-end"
    pairs {
      park  = ["a:tr.start_condition_met", "a:tr.before_prestart", "a:tr.after_prestart",
               "a:tr.before_driver_start", "a:tr.start_committed", "a:tr.after_driver_start"]
      event = "kill"
      at    = ["b:tr.after_driver_start", "b:hook.poststart.after.persist_handle"]
    }
  }
  expect {
    status = "complete"
  }
}

scenario "held-runner-executor-death" {
  about = "b's executor is SIGKILLed while a is held; then the alloc stops"
  job   = "jobs/two-services.hcl"
  faults {
    then = "run-to-end"
    pairs {
      park  = ["a:tr.before_prestart", "a:tr.before_driver_start", "a:tr.after_driver_start"]
      event = "kill-executor"
      at    = ["b:hook.poststart.after.persist_handle"]
      with  = ["b:tr.main_exited=stop-alloc"]
    }
  }
  expect {
    status = "failed"
  }
}

scenario "stopped-runner-crash" {
  about = "a's runner finds the alloc stopped before its start, and the agent dies right there; the restored agent never starts a"
  job   = "jobs/two-services.hcl"
  faults {
    host    = "agent"
    restore = "stop"
    then    = "run-to-end"
    each {
      points = ["a:tr.observed_terminal"]
      action = "kill"
      # b's start delivers the stop while a waits before its prestart, until
      # the alloc runner has told the task runners (waiting for b's start
      # alone raced a's prestart against the update's handling).
      with   = ["b:tr.after_driver_start=stop-alloc", "a:tr.before_prestart=await(ar.task_runners_updated@1)"]
    }
  }
  expect {
    status = "complete"
  }
}
