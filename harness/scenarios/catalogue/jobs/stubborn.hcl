# A leader that exits on its kill signal and a second task that ignores
# it, so that only SIGKILL ends it, after its shutdown delay and grace.
# Both report their kill signal (SIGINT, the default) by running the lab's
# witness from its trap, so the oracle sees that the signal reached them.
job "stubborn" {
  group "g" {
    task "leader" {
      driver         = "exec"
      leader         = true
      kill_timeout   = "400ms"
      shutdown_delay = "200ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "trap '/bin/kill-signal-received; exit 0' INT; echo leader up; sleep 3600 & wait"]
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
        args    = ["-c", "trap /bin/kill-signal-received INT; trap '' TERM; echo stubborn up; sleep 3600 & while true; do wait; done"]
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
