# One service task that exits 0 at once: a service is restarted on success
# (Nomad's onSuccess), so it runs three times and then fails.
job "service-done" {
  type = "service"

  group "g" {
    task "web" {
      driver       = "exec"
      kill_timeout = "250ms"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo web done"]
      }
      resources {
        memory = 32
      }
      restart {
        attempts = 2
        interval = "60s"
        delay    = "10ms"
        mode     = "fail"
      }
    }
  }
}
