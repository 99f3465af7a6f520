# The default alloc `taskgate run` uses without a file (see jobspec::builtin_default):
# a leader that prints a few lines and exits after ~1 s, and a poststart sidecar
# that runs alongside it until the leader's exit makes the alloc runner kill it.
job "demo" {
  # Batch: the leader's exit 0 is completion (a service would restart it).
  type = "batch"

  group "app" {
    task "leader" {
      driver = "exec"
      leader = true

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"leader: $GREETING\"; sleep 1; echo \"leader: done\""]
      }

      env {
        GREETING = "hello from taskgate"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }

    task "sidecar" {
      driver = "exec"

      lifecycle {
        hook    = "poststart"
        sidecar = true
      }

      config {
        command = "/bin/sh"
        # PID 1 of its namespace ignores signals it has no handler for: the
        # trap makes the stop signal end it promptly.
        args = ["-c", "trap 'echo \"sidecar: stopping\"; exit 0' INT TERM; echo \"sidecar: up\"; sleep 1000 & wait"]
      }

      resources {
        cpu    = 50
        memory = 32
      }

      kill_timeout = "2s"
    }
  }
}
