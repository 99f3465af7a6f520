//! The agent's control socket, `<data_dir>/run/control.sock`: how `taskgate
//! run`, `stop`, `status`, `logs`, `restart` and `drain` reach a running
//! agent. One JSON request line per connection, answered by one JSON reply
//! line, or by a stream of them for what follows an allocation (an event
//! per line, then its end). Access control is the run dir's mode, 0700:
//! only root reaches the socket (see [`crate::Engine::open_with`]); and the
//! commands talk only to a socket root or their own user serves. The
//! agent's side, the server, is [`crate::agent::ControlServer`].

use crate::alloc::{AllocStatus, RestartRefused, RestartScope};
use crate::data_dir::DataDir;
use crate::job::Job;
use crate::state::{AllocRecord, TaskRecord};
use crate::task_state::TaskEvent;
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// One allocation and its tasks, as the state database holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocEntry {
    pub alloc: AllocRecord,
    pub tasks: Vec<TaskRecord>,
}

/// Every allocation of a state database: those it could read, with their
/// tasks, and those it could not, each named with why (one hides no other,
/// as one skipped by a restore stops no other).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub allocs: Vec<AllocEntry>,
    pub unreadable: Vec<UnreadableAlloc>,
}

/// An allocation whose record, or one of its tasks' records, cannot be
/// decoded (written by another version, or damaged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnreadableAlloc {
    pub alloc_id: String,
    pub why: String,
}

impl std::fmt::Display for UnreadableAlloc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "allocation {} cannot be read: {}",
            self.alloc_id, self.why
        )
    }
}

/// The longest request line the server reads: a job with its environment
/// fits (the jobspec caps it at `ARG_MAX` per task), garbage does not.
pub const MAX_REQUEST_BYTES: usize = 16 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControlRequest {
    /// Nomad's `alloc restart`; `alloc` is the id or a unique prefix of it.
    Restart { alloc: String, scope: RestartScope },
    /// Places the job's first group (or the named one); answered with
    /// [`ControlAnswer::Placed`], then, with `follow`, as a [`Self::Follow`].
    Submit {
        job: Job,
        group: Option<String>,
        follow: bool,
    },
    /// Sends the allocation a stop; answered once it is delivered, then,
    /// with `follow`, with its events from before the stop, as a
    /// [`Self::Follow`].
    Stop {
        alloc: String,
        #[serde(default)]
        follow: bool,
    },
    /// Every allocation in the state database, with its tasks.
    Status,
    /// The allocation's events from now on, one per line, then its end.
    Follow { alloc: String },
    /// Stops every allocation; answered once all are finished, after which
    /// the agent exits.
    Drain,
}

/// One line of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ControlAnswer {
    Done,
    Placed {
        alloc_id: String,
    },
    Status(StatusReport),
    Event(TaskEvent),
    /// A follower fell this many events behind and lost them.
    Missed(u64),
    /// The allocation is finished; the last line of a follow.
    Finished(AllocStatus),
}

/// What the server writes per line.
pub type ControlReply = Result<ControlAnswer, ControlError>;

/// Why the agent did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ControlError {
    #[error("no allocation {0:?} in this agent")]
    NoSuchAlloc(String),
    #[error("{prefix:?} names more than one allocation: {}", matches.join(", "))]
    AmbiguousAlloc {
        prefix: String,
        matches: Vec<String>,
    },
    #[error("allocation {alloc_id} has already finished ({})", status.client.as_str())]
    Finished {
        alloc_id: String,
        status: AllocStatus,
    },
    #[error(
        "allocation {0} is not run by this agent: its record could not be restored (see the agent's log)"
    )]
    NotRestored(String),
    /// Why is its source, which error chains print after this.
    #[error("restart refused")]
    Refused(#[from] RestartRefused),
    #[error("the job was not placed: {0}")]
    NotPlaced(String),
    #[error("the agent's state database: {0}")]
    State(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The agent was told to go (the signal's name) before it took this
    /// request up: nothing of it was done.
    #[error("the agent is exiting ({0}) and takes no more requests: nothing was done; send it again once an agent serves")]
    Exiting(String),
    /// The agent was told to go while it carried this request out (a
    /// restart, a drain): what it had done stands, the rest is not done.
    #[error("the agent exited ({0}) before it carried this request out: what it had begun stands (see `taskgate status`)")]
    LeftUnfinished(String),
}

/// Why [`ControlServer::bind`] failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another agent already serves {}", .0.display())]
    AlreadyServed(PathBuf),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a request got no answer, or the answer it got.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No socket, or a stale one nobody listens on.
    #[error("no agent is running with this data dir: no control socket at {}", .0.display())]
    NoAgent(PathBuf),
    #[error("permission denied on {}: run it with sudo", .0.display())]
    PermissionDenied(PathBuf),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the agent at {} closed the connection without a reply", .0.display())]
    NoReply(PathBuf),
    /// Whoever listens on the socket is neither root nor this user: not an
    /// agent to send a job to, or to believe (the data dir is not root's).
    #[error(
        "the control socket {} is served by uid {uid}, not by root or by you (uid {me}): \
         not talking to it (is the data dir another user's?)",
        path.display()
    )]
    NotAnAgent { path: PathBuf, uid: u32, me: u32 },
    #[error("the agent's reply was not understood: {0}")]
    BadReply(String),
    #[error("the agent answered {0:?}, which does not answer this request")]
    Unexpected(Box<ControlAnswer>),
    #[error(transparent)]
    Control(#[from] ControlError),
}

/// Whether an agent serves `data_dir` right now; a socket this user may
/// not reach is an error (run it with sudo), not "no agent".
pub fn agent_serves(data_dir: &DataDir) -> Result<bool, RequestError> {
    match connect(data_dir.control_socket()) {
        Ok(_) => Ok(true),
        Err(RequestError::NoAgent(_)) => Ok(false),
        Err(other) => Err(other),
    }
}

/// Connects to the control socket at `path`, if root or this user listens
/// there (the kernel says who, `SO_PEERCRED`): in a data dir another user
/// can write, that user's listener would be sent the job, environment and
/// all, and its answers believed.
fn connect(path: PathBuf) -> Result<(PathBuf, UnixStream), RequestError> {
    let stream = match UnixStream::connect(&path) {
        Ok(stream) => stream,
        Err(err) => return Err(connect_error(path, err)),
    };
    let uid = getsockopt(&stream, PeerCredentials)
        .map_err(|errno| io_error("asking who serves", &path, errno.into()))?
        .uid();
    let me = nix::unistd::geteuid().as_raw();
    if uid != 0 && uid != me {
        return Err(RequestError::NotAnAgent { path, uid, me });
    }
    Ok((path, stream))
}

/// A reply stream: each line the agent sends for one request.
pub struct Replies {
    path: PathBuf,
    lines: BufReader<UnixStream>,
}

impl Replies {
    /// The next line; `NoReply` once the agent hung up.
    pub fn next_answer(&mut self) -> Result<ControlAnswer, RequestError> {
        let mut line = String::new();
        let read = self
            .lines
            .read_line(&mut line)
            .map_err(|source| io_error("reading from", &self.path, source))?;
        if read == 0 {
            return Err(RequestError::NoReply(self.path.clone()));
        }
        let reply: ControlReply =
            serde_json::from_str(&line).map_err(|err| RequestError::BadReply(err.to_string()))?;
        Ok(reply?)
    }

    /// The connection, for a caller that waits on it beside other things.
    pub fn socket(&self) -> &UnixStream {
        self.lines.get_ref()
    }
}

/// An agent that hung up on the connection (it exited, say: a reset or a
/// broken pipe is how the kernel tells) gave no reply; else an I/O error.
fn io_error(what: &'static str, path: &Path, source: std::io::Error) -> RequestError {
    use std::io::ErrorKind::{BrokenPipe, ConnectionReset};
    match source.kind() {
        ConnectionReset | BrokenPipe => RequestError::NoReply(path.to_path_buf()),
        _ => RequestError::Io {
            what,
            path: path.to_path_buf(),
            source,
        },
    }
}

/// Sends `req` to the agent serving `data_dir`; the replies follow.
pub fn send(data_dir: &DataDir, req: &ControlRequest) -> Result<Replies, RequestError> {
    let (path, mut stream) = connect(data_dir.control_socket())?;
    let mut line = serde_json::to_vec(req).expect("a request serialises");
    line.push(b'\n');
    // An agent that answers before it read the whole request (one over
    // its limit) hangs up: its answer waits in the socket, read next.
    match stream.write_all(&line) {
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ) => {}
        sent => sent.map_err(|source| io_error("sending to", &path, source))?,
    }
    Ok(Replies {
        path,
        lines: BufReader::new(stream),
    })
}

/// Sends `req` and waits for its one reply (for a restart: until it is
/// done; for a drain: until every allocation finished).
pub fn request(data_dir: &DataDir, req: &ControlRequest) -> Result<ControlAnswer, RequestError> {
    send(data_dir, req)?.next_answer()
}

/// What a failed connect means to the user.
fn connect_error(path: PathBuf, source: std::io::Error) -> RequestError {
    match source.kind() {
        // A socket file no one listens on is a dead agent's.
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => RequestError::NoAgent(path),
        // The run dir is root's only.
        ErrorKind::PermissionDenied => RequestError::PermissionDenied(path),
        _ => RequestError::Io {
            what: "connecting to",
            path,
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{ClientStatus, DesiredStatus};

    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
        serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
    }

    #[test]
    fn requests_and_replies_survive_the_wire() {
        let mut requests = vec![
            ControlRequest::Status,
            ControlRequest::Drain,
            ControlRequest::Stop {
                alloc: "5f0c".into(),
                follow: true,
            },
            ControlRequest::Follow {
                alloc: "5f0c".into(),
            },
            ControlRequest::Submit {
                job: crate::job::builtin_default(),
                group: Some("g".into()),
                follow: true,
            },
        ];
        for scope in [
            RestartScope::Task("web".into()),
            RestartScope::Running,
            RestartScope::All,
        ] {
            requests.push(ControlRequest::Restart {
                alloc: "5f0c".into(),
                scope,
            });
        }
        for req in requests {
            assert_eq!(round_trip(&req), req);
        }
        let finished = AllocStatus {
            desired: DesiredStatus::Stop,
            client: ClientStatus::Complete,
        };
        for reply in [
            Ok(ControlAnswer::Done),
            Ok(ControlAnswer::Placed {
                alloc_id: "5f0c".into(),
            }),
            Ok(ControlAnswer::Missed(3)),
            Ok(ControlAnswer::Finished(finished)),
            Err(ControlError::NoSuchAlloc("5f0c".into())),
            Err(ControlError::AmbiguousAlloc {
                prefix: "5f".into(),
                matches: vec!["5f0c".into(), "5f1d".into()],
            }),
            Err(ControlError::Finished {
                alloc_id: "5f0c".into(),
                status: finished,
            }),
            Err(ControlError::Refused(RestartRefused::TaskNotRunning(
                "web".into(),
            ))),
            Err(ControlError::BadRequest("EOF".into())),
        ] {
            assert_eq!(round_trip(&reply), reply);
        }
    }

    /// Only root reaches the socket (tests run as root cannot be refused).
    #[test]
    fn a_caller_refused_the_socket_is_told_to_use_sudo() {
        let err = connect_error(
            PathBuf::from("/var/lib/taskgate/run/control.sock"),
            std::io::Error::from(ErrorKind::PermissionDenied),
        );
        assert_eq!(
            err.to_string(),
            "permission denied on /var/lib/taskgate/run/control.sock: run it with sudo"
        );
    }
}
