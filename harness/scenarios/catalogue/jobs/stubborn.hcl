# A leader that exits on its kill signal and a second task that ignores
# it, so that only SIGKILL ends it, after its shutdown delay and grace.
job "stubborn" {
  group "g" {
    task "leader" {
      driver         = "exec"
      leader         = true
      kill_timeout   = "400ms"
      shutdown_delay = "200ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap 'exit 0' INT TERM; echo leader up; sleep 3600 & wait"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
    task "stubborn" {
      driver         = "exec"
      kill_timeout   = "400ms"
      shutdown_delay = "100ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '' INT TERM; echo stubborn up; while true; do sleep 1; done"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 0
        mode     = "fail"
      }
    }
  }
}
