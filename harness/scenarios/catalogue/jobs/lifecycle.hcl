# Every lifecycle: a prestart task that completes, a prestart sidecar, a
# leader and a second main task, a poststart sidecar and a poststop task.
# Each service runs until it is told to stop; none may be restarted by its
# policy, so every run beyond the first is a user restart's.
job "lifecycle" {
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
        mode     = "fail"
      }
    }
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
    task "leader" {
      driver       = "exec"
      leader       = true
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "worker" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo worker up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "logship" {
      driver       = "exec"
      kill_timeout = "250ms"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo logship up; sleep 3600 & wait"]
      }
      restart {
        attempts = 0
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
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
