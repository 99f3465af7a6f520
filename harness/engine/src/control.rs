//! The agent's control socket, `<data_dir>/run/control.sock`, where
//! `taskgate restart` asks a running agent to restart an allocation's tasks.
//! One JSON request line and one JSON reply line per connection, as on an
//! executor's socket. Access control is the run dir's mode, 0700: only root
//! reaches the socket (see [`crate::Engine::open_with`]).

use crate::alloc::{RestartRefused, RestartScope};
use crate::alloc_runner::AllocControl;
use crate::engine::run_dir;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

/// The longest request line the server reads; a restart request is tiny.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// The pause after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Where the agent with this data dir listens.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    run_dir(data_dir).join("control.sock")
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlRequest {
    /// Nomad's `alloc restart`; `alloc` is the id or a unique prefix of it.
    Restart { alloc: String, scope: RestartScope },
}

/// The one line the server answers with.
pub type ControlReply = Result<(), ControlError>;

/// Why the agent did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ControlError {
    #[error("no allocation {0:?} runs in this agent")]
    NoSuchAlloc(String),
    #[error("{prefix:?} names more than one allocation: {}", matches.join(", "))]
    AmbiguousAlloc {
        prefix: String,
        matches: Vec<String>,
    },
    /// Why is its source, which error chains print after this.
    #[error("restart refused")]
    Refused(#[from] RestartRefused),
    #[error("bad request: {0}")]
    BadRequest(String),
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

/// Why [`request`] got no answer, or the answer it got.
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
    #[error("the agent's reply was not understood: {0}")]
    BadReply(String),
    #[error(transparent)]
    Control(#[from] ControlError),
}

/// The allocations a control server answers for, by id. Clones share one
/// map, so allocs placed after the server started can be added.
#[derive(Clone, Default)]
pub struct Registry {
    allocs: Arc<Mutex<BTreeMap<String, AllocControl>>>,
}

impl Registry {
    pub fn insert(&self, alloc_id: String, control: AllocControl) {
        self.lock().insert(alloc_id, control);
    }

    /// The alloc `name` is the id of, or else the one whose id it is a
    /// unique prefix of, as Nomad allows.
    fn find(&self, name: &str) -> Result<AllocControl, ControlError> {
        let allocs = self.lock();
        if let Some(control) = allocs.get(name) {
            return Ok(control.clone());
        }
        // An empty name is no one's prefix: it must not pick a lone alloc.
        let matches: Vec<&String> = (allocs.keys())
            .filter(|id| !name.is_empty() && id.starts_with(name))
            .collect();
        match matches.as_slice() {
            [] => Err(ControlError::NoSuchAlloc(name.to_string())),
            [id] => Ok(allocs[*id].clone()),
            _ => Err(ControlError::AmbiguousAlloc {
                prefix: name.to_string(),
                matches: matches.into_iter().cloned().collect(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, AllocControl>> {
        self.allocs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Serves the control socket on the Tokio runtime until dropped; the drop
/// removes the socket file.
pub struct ControlServer {
    path: PathBuf,
    accepting: JoinHandle<()>,
}

impl ControlServer {
    /// Binds `<data_dir>/run/control.sock` (whose dir the engine made) and
    /// serves it, each connection concurrently. A socket file nobody
    /// answers on is a dead agent's, and replaced. Call within a Tokio
    /// runtime.
    pub fn bind(data_dir: &Path, registry: Registry) -> Result<ControlServer, BindError> {
        let path = socket_path(data_dir);
        let io = |what| {
            let path = path.clone();
            move |source| BindError::Io { what, path, source }
        };
        if path.symlink_metadata().is_ok() {
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                return Err(BindError::AlreadyServed(path));
            }
            std::fs::remove_file(&path).map_err(io("removing the stale socket"))?;
        }
        let listener = tokio::net::UnixListener::bind(&path).map_err(io("binding"))?;
        let accepting = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(answer(stream, registry.clone()));
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "accepting a control connection");
                        // Out of fds, say: give some time to close rather
                        // than spin on the same error.
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                }
            }
        });
        Ok(ControlServer { path, accepting })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.accepting.abort();
        if let Err(err) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %err, "removing the control socket");
        }
    }
}

/// Reads one request, carries it out, writes the reply and hangs up.
async fn answer(stream: tokio::net::UnixStream, registry: Registry) {
    let (read, mut write) = stream.into_split();
    let mut line =
        serde_json::to_vec(&carry_out(read, &registry).await).expect("a reply serialises");
    line.push(b'\n');
    if let Err(err) = write.write_all(&line).await {
        tracing::warn!(error = %err, "the control client left before the reply");
    }
}

async fn carry_out(read: impl tokio::io::AsyncRead + Unpin, registry: &Registry) -> ControlReply {
    let ControlRequest::Restart { alloc, scope } = read_request(read).await?;
    tracing::info!(alloc, %scope, "restart requested on the control socket");
    Ok(registry.find(&alloc)?.restart(scope).await?)
}

async fn read_request(
    read: impl tokio::io::AsyncRead + Unpin,
) -> Result<ControlRequest, ControlError> {
    let mut line = Vec::new();
    tokio::io::BufReader::new(read.take(MAX_REQUEST_BYTES as u64 + 1))
        .read_until(b'\n', &mut line)
        .await
        .map_err(|err| ControlError::BadRequest(format!("reading the request: {err}")))?;
    if line.len() > MAX_REQUEST_BYTES {
        return Err(ControlError::BadRequest(format!(
            "the request is longer than {MAX_REQUEST_BYTES} bytes"
        )));
    }
    serde_json::from_slice(&line).map_err(|err| ControlError::BadRequest(err.to_string()))
}

/// Sends `req` to the agent serving `data_dir` and waits for its reply
/// (for a restart: until it is done).
pub fn request(data_dir: &Path, req: &ControlRequest) -> Result<(), RequestError> {
    let path = socket_path(data_dir);
    let io = |what| {
        let path = path.clone();
        move |source| RequestError::Io { what, path, source }
    };
    let mut stream = match std::os::unix::net::UnixStream::connect(&path) {
        Ok(stream) => stream,
        Err(err) => return Err(connect_error(path, err)),
    };
    let mut line = serde_json::to_vec(req).expect("a request serialises");
    line.push(b'\n');
    stream.write_all(&line).map_err(io("sending to"))?;
    let mut reply = String::new();
    let read = (BufReader::new(&stream).read_line(&mut reply)).map_err(io("reading from"))?;
    if read == 0 {
        return Err(RequestError::NoReply(path));
    }
    let reply: ControlReply =
        serde_json::from_str(&reply).map_err(|err| RequestError::BadReply(err.to_string()))?;
    Ok(reply?)
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

    fn round_trip<T: Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
        serde_json::from_str(&serde_json::to_string(value).unwrap()).unwrap()
    }

    #[test]
    fn requests_and_replies_survive_the_wire() {
        for scope in [
            RestartScope::Task("web".into()),
            RestartScope::Running,
            RestartScope::All,
        ] {
            let req = ControlRequest::Restart {
                alloc: "5f0c".into(),
                scope,
            };
            assert_eq!(round_trip(&req), req);
        }
        for reply in [
            Ok(()),
            Err(ControlError::NoSuchAlloc("5f0c".into())),
            Err(ControlError::AmbiguousAlloc {
                prefix: "5f".into(),
                matches: vec!["5f0c".into(), "5f1d".into()],
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
