# Every lifecycle stage in one group. Nomad's ordering:
#   prestart (init runs to completion; log-shipper is a sidecar and keeps running)
#   -> main (server, the leader) -> poststart (announce, once the main task started)
#   -> poststop (cleanup, after the main task and the sidecar have stopped).
job "lifecycle" {
  # Batch: the server's exit 0 after three ticks is completion.
  type = "batch"

  group "web" {
    # Group-level default for every task below.
    restart {
      attempts = 3
      interval = "10m"
      delay    = "250ms"
      mode     = "fail"
    }

    task "init" {
      driver = "exec"

      lifecycle {
        hook = "prestart"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"init: preparing $DATA_DIR\""]
      }

      env {
        DATA_DIR = "/tmp/taskgate-data"
      }
    }

    task "log-shipper" {
      driver = "exec"

      lifecycle {
        hook    = "prestart"
        sidecar = true
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"log-shipper: up\"; exec sleep 1000"]
      }

      resources {
        cpu    = 50
        memory = 32
      }

      kill_timeout = "1s"
      kill_signal  = "SIGTERM"
    }

    task "server" {
      driver = "exec"
      leader = true
      user   = "nobody"

      config {
        command = "/bin/sh"
        args    = ["-c", "for i in 1 2 3; do echo \"server: tick $i\"; sleep 1; done"]
      }

      resources {
        cpu    = 200
        memory = 128
      }

      # Overrides only `attempts` and `mode`; interval and delay come from the group.
      restart {
        attempts = 1
        mode     = "delay"
      }

      logs {
        max_files     = 3
        max_file_size = 5
      }
    }

    task "announce" {
      driver = "exec"

      lifecycle {
        hook = "poststart"
      }

      config {
        command = "/bin/echo"
        args    = ["announce: server started"]
      }
    }

    task "cleanup" {
      driver = "exec"

      lifecycle {
        hook = "poststop"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"cleanup: removing $DATA_DIR\""]
      }

      env {
        DATA_DIR = "/tmp/taskgate-data"
      }

      kill_timeout = "1m30s"
    }
  }
}
