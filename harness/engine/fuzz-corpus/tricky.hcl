# Everything the parser must survive in a valid job: comments holding
# brackets {[( and quotes ", escapes, numbers and booleans where strings go.
/* a block comment { [ ( */
job "tricky" {
  group "g" {
    restart { attempts = 1 } // a group-wide policy
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"{[(\" # not a comment", "tab\there"]
      }
      env {
        PORT = 8080
        FLAG = true
        TEXT = "a\tb\n\"c\""
      }
      kill_signal = "TERM"
      lifecycle {
        hook    = "poststart"
        sidecar = false
      }
    }
  }
}
