# Open bugs: each scenario must show its known violation on every run
# (a strict expected failure), so the marker cannot outlive the bug.

scenario "b1-stale-handle" {
  about = "an agent killed after attempt 2's executor started, before its handle was persisted"
  job   = "jobs/web-failing.hcl"
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
    status = "failed"
    known_violation {
      bug       = "B1: stale executor handle on attempt 2 or later"
      invariant = "no process of a task outlives its executor unobserved"
    }
  }
}

scenario "b3-executor-death" {
  about = "a running task's executor is SIGKILLed; the restart launches attempt 2, then the alloc stops"
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
    known_violation {
      bug       = "B3: an executor that dies leaves its task running"
      invariant = "at most one live process tree per task"
    }
  }
}

scenario "b4-two-executors" {
  about = "an agent killed before its executor bound the socket; the restored agent launches another"
  job   = "jobs/web-retried.hcl"
  faults {
    host    = "agent"
    restore = "run"
    then    = "stop-when-running"
    each {
      points = ["web:ex.spawned"]
      action = "kill"
      with   = ["web:ex.before_bind=await(web:tr.after_driver_start@1)"]
    }
  }
  expect {
    status = "complete"
    known_violation {
      bug       = "B4: two executors for one attempt"
      invariant = "no process of a task outlives its executor unobserved"
    }
  }
}
