//! The agent's side of the control socket: each connection is answered on
//! the Tokio runtime, concurrently with every other.

use super::{Agent, CountedUntilDropped, Followed, Following};
use crate::control::{
    BindError, ControlAnswer, ControlError, ControlReply, ControlRequest, MAX_REQUEST_BYTES,
};
use crate::data_dir::DataDir;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// The pause after a failed accept.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a client has to send its request line, and to take the first
/// reply: a client stopped halfway (a Ctrl-Z) must not hold a closing
/// server for good. Generous: a client writes its one line at once.
const CLIENT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// The control socket, bound and not served yet: an agent binds it before
/// it restores anything (a second agent of the data dir fails here and
/// restores nothing), and serves it once it has restored (a client never
/// finds a restored alloc missing). Connections wait in the kernel's
/// backlog meanwhile. The drop removes the socket file.
pub struct BoundSocket {
    path: PathBuf,
    /// Taken when served: the server removes the file from then on.
    listener: Option<tokio::net::UnixListener>,
}

/// Serves the control socket until dropped; the drop removes the socket file.
pub struct ControlServer {
    path: PathBuf,
    accepting: JoinHandle<()>,
    /// Requests taken and not yet answered.
    answering: Arc<watch::Sender<usize>>,
    drained: Arc<Notify>,
    /// Set to the signal's name once the agent is told to go.
    exiting: watch::Sender<Option<&'static str>>,
}

impl ControlServer {
    /// Binds `<data_dir>/run/control.sock` (whose dir the engine made). A
    /// socket file nobody answers on is a dead agent's, and replaced. Call
    /// within a Tokio runtime.
    pub fn bind(data_dir: &DataDir) -> Result<BoundSocket, BindError> {
        let path = data_dir.control_socket();
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
        // Bound (and listening) under a name of its own, then renamed into
        // place: whoever sees control.sock appear can connect at once.
        let fresh = path.with_file_name(format!(".control.sock.{}", std::process::id()));
        let _ = std::fs::remove_file(&fresh);
        let listener = tokio::net::UnixListener::bind(&fresh).map_err(io("binding"))?;
        if let Err(source) = std::fs::rename(&fresh, &path) {
            let _ = std::fs::remove_file(&fresh);
            return Err(io("renaming the socket into place")(source));
        }
        Ok(BoundSocket {
            path,
            listener: Some(listener),
        })
    }

    /// Resolves once a drain request was carried out: every allocation
    /// stopped and finished. The agent exits then.
    pub async fn drained(&self) {
        self.drained.notified().await
    }

    /// Takes no more connections, and resolves once every request taken
    /// is answered: a drain among them, to its end. What streams after an
    /// answer (an allocation's events) is not waited for.
    pub async fn close(mut self) {
        self.accepting.abort();
        // Once it has ended, every connection it took is counted.
        let _ = (&mut self.accepting).await;
        let _ = self.answering.subscribe().wait_for(|n| *n == 0).await;
    }

    /// The agent is told to go by `signal`: takes no more connections
    /// than the kernel had taken, answers each request taken and not yet
    /// carried out that nothing was done, and one under way (a restart
    /// waiting for its task to go down, a drain) that it was left
    /// unfinished; resolves once all are answered. A client that connected
    /// before the signal never meets a closed connection in their stead.
    pub async fn leave(mut self, signal: &'static str) {
        self.exiting.send_replace(Some(signal));
        // The accepting loop ends by itself once it took what waited.
        let _ = (&mut self.accepting).await;
        let _ = self.answering.subscribe().wait_for(|n| *n == 0).await;
    }
}

impl BoundSocket {
    /// Serves `agent` on the socket, each connection concurrently.
    pub fn serve(mut self, agent: Arc<Agent>) -> ControlServer {
        let listener = self.listener.take().expect("served once");
        let path = self.path.clone();
        let drained = Arc::new(Notify::new());
        let on_drain = drained.clone();
        let answering = Arc::new(watch::Sender::new(0));
        let taken = answering.clone();
        let exiting = watch::Sender::new(None);
        let exit_notice = exiting.subscribe();
        let accepting = tokio::spawn(async move {
            let mut notice = exit_notice.clone();
            let serve = |stream| {
                // Counted before any await: a close that ended the loop
                // finds every connection it took counted.
                let counted = CountedUntilDropped::new(&taken);
                let served = (agent.clone(), on_drain.clone(), exit_notice.clone());
                tokio::spawn(answer(stream, served, counted));
            };
            loop {
                let accepted = tokio::select! {
                    biased;
                    accepted = listener.accept() => accepted,
                    _ = told_to_go(&mut notice) => {
                        // What the kernel took before the signal is told
                        // too, not reset with the listener. Asked of the
                        // kernel itself (the reactor may not have seen it).
                        for stream in backlog(listener) {
                            serve(stream);
                        }
                        return;
                    }
                };
                match accepted {
                    Ok((stream, _)) => serve(stream),
                    Err(err) => {
                        tracing::warn!(error = %err, "accepting a control connection");
                        // Out of fds, say: give some time to close rather
                        // than spin on the same error.
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                }
            }
        });
        ControlServer {
            path,
            accepting,
            answering,
            drained,
            exiting,
        }
    }
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        if self.listener.is_some() {
            remove_socket(&self.path);
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.accepting.abort();
        remove_socket(&self.path);
    }
}

fn remove_socket(path: &Path) {
    if let Err(err) = std::fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %err, "removing the control socket");
    }
}

/// Reads one request, carries it out, writes the reply (or the stream of
/// them) and hangs up. Counted as answering until its first reply is sent.
async fn answer(
    stream: tokio::net::UnixStream,
    (agent, drained, mut exiting): (Arc<Agent>, Arc<Notify>, Exiting),
    answering: CountedUntilDropped,
) {
    let (mut read, mut write) = stream.into_split();
    // A client that has not sent its whole line by then is told at once.
    let read_one = tokio::select! {
        biased;
        signal = told_to_go(&mut exiting) => Err(ControlError::Exiting(signal.into())),
        read = tokio::time::timeout(CLIENT_PATIENCE, read_request(&mut read)) => {
            read.unwrap_or_else(|_| {
                Err(ControlError::BadRequest(format!(
                    "no request line within {CLIENT_PATIENCE:?}"
                )))
            })
        }
    };
    let request = match read_one {
        Ok(request) => request,
        Err(err) => return send_first(&mut write, &Err(err)).await.unwrap_or(()),
    };
    taskgate_faults::fault_point!(
        agent.engine().faults(),
        taskgate_faults::points::CONTROL_ANSWERING
    );
    let already_told = *exiting.borrow();
    if let Some(signal) = already_told {
        return send_first(&mut write, &Err(ControlError::Exiting(signal.into())))
            .await
            .unwrap_or(());
    }
    // Polled first, so what completes at once (a placement) is done and
    // answered whenever the signal came; what waits (a restart, a drain)
    // is left where it got to.
    let carried_out = tokio::select! {
        biased;
        reply = carry_out(request, &agent) => reply,
        signal = told_to_go(&mut exiting) => Err(ControlError::LeftUnfinished(signal.into())),
    };
    let following = match carried_out {
        Ok(Reply::Line(answer)) => return send_first(&mut write, &Ok(answer)).await.unwrap_or(()),
        Ok(Reply::Drained) => {
            // Answered first: the agent exits once told.
            let _ = send_first(&mut write, &Ok(ControlAnswer::Done)).await;
            return drained.notify_one();
        }
        Ok(Reply::Placed(following)) => {
            let placed = ControlAnswer::Placed {
                alloc_id: following.alloc_id.clone(),
            };
            if send_first(&mut write, &Ok(placed)).await.is_err() {
                return;
            }
            following
        }
        Ok(Reply::Stopped(following)) => {
            if send_first(&mut write, &Ok(ControlAnswer::Done))
                .await
                .is_err()
            {
                return;
            }
            following
        }
        Ok(Reply::Follow(following)) => following,
        Err(err) => return send_first(&mut write, &Err(err)).await.unwrap_or(()),
    };
    drop(answering);
    if stream_events(following, read, write).await == Streamed::ClientLeft {
        taskgate_faults::fault_point!(
            agent.engine().faults(),
            taskgate_faults::points::CONTROL_FOLLOWER_LEFT
        );
    }
}

/// Every connection waiting in `listener`'s backlog, accepted now.
fn backlog(listener: tokio::net::UnixListener) -> Vec<tokio::net::UnixStream> {
    let Ok(listener) = listener.into_std() else {
        return Vec::new();
    };
    // Non-blocking still: the first accept that would wait ends the backlog.
    std::iter::from_fn(|| listener.accept().ok())
        .filter_map(|(stream, _)| {
            stream.set_nonblocking(true).ok()?;
            tokio::net::UnixStream::from_std(stream).ok()
        })
        .collect()
}

/// Says when the agent is told to go, and by which signal.
type Exiting = watch::Receiver<Option<&'static str>>;

/// Resolves with the signal once the agent is told to go; never, if the
/// server is dropped first (the process is ending anyway).
async fn told_to_go(exiting: &mut Exiting) -> &'static str {
    let told = exiting
        .wait_for(Option::is_some)
        .await
        .map(|signal| *signal);
    match told {
        Ok(signal) => signal.expect("waited for"),
        Err(_) => std::future::pending().await,
    }
}

/// What a request is answered with.
enum Reply {
    Line(ControlAnswer),
    /// Done, and the agent may exit.
    Drained,
    /// Placed; its events follow.
    Placed(Following),
    /// Stopped; its events, from before the stop, follow.
    Stopped(Following),
    Follow(Following),
}

async fn carry_out(request: ControlRequest, agent: &Arc<Agent>) -> Result<Reply, ControlError> {
    match request {
        ControlRequest::Restart { alloc, scope } => {
            tracing::info!(alloc, %scope, "restart requested on the control socket");
            agent.restart(&alloc, scope).await?;
            Ok(Reply::Line(ControlAnswer::Done))
        }
        ControlRequest::Submit { job, group, follow } => {
            let following = agent.submit(&job, group.as_deref())?;
            tracing::info!(alloc = following.alloc_id, job = job.name, "placed");
            if follow {
                Ok(Reply::Placed(following))
            } else {
                let alloc_id = following.alloc_id;
                Ok(Reply::Line(ControlAnswer::Placed { alloc_id }))
            }
        }
        ControlRequest::Stop { alloc, follow } => {
            // Followed before the stop is sent: none of its events is missed.
            let following = follow.then(|| agent.follow(&alloc)).transpose()?;
            let id = agent.stop(&alloc)?;
            tracing::info!(alloc = id, "stop requested on the control socket");
            Ok(following.map_or(Reply::Line(ControlAnswer::Done), Reply::Stopped))
        }
        ControlRequest::Status => agent
            .status()
            .map(|entries| Reply::Line(ControlAnswer::Status(entries)))
            .map_err(|e| ControlError::State(e.to_string())),
        ControlRequest::Follow { alloc } => Ok(Reply::Follow(agent.follow(&alloc)?)),
        ControlRequest::Drain => {
            let stopped = agent.drain();
            tracing::info!(allocs = stopped.len(), "drain: stopping every allocation");
            agent.idle().await;
            Ok(Reply::Drained)
        }
    }
}

/// How an event stream ended.
#[derive(PartialEq, Eq)]
enum Streamed {
    /// Its end was sent, or the agent is going (the client is told by the
    /// connection's end).
    Ended,
    /// The follower hung up first.
    ClientLeft,
}

/// Writes each event of the allocation as it happens, then its end. A
/// follower that hangs up stops the stream, not the allocation, at once:
/// a quiet allocation may have no next event to fail to send for days.
async fn stream_events(
    mut following: Following,
    mut read: OwnedReadHalf,
    mut write: OwnedWriteHalf,
) -> Streamed {
    loop {
        let next = tokio::select! {
            next = following.next() => next,
            () = hung_up(&mut read) => return Streamed::ClientLeft,
        };
        let (answer, last) = match next {
            Followed::Event(event) => (ControlAnswer::Event(event), false),
            Followed::Missed(n) => (ControlAnswer::Missed(n), false),
            Followed::Finished(status) => (ControlAnswer::Finished(status), true),
            Followed::Gone => return Streamed::Ended,
        };
        if send(&mut write, &Ok(answer)).await.is_err() {
            return Streamed::ClientLeft;
        }
        if last {
            return Streamed::Ended;
        }
    }
}

/// Resolves once the follower closed its end of the connection. A client
/// sends its one request line and then only reads (closing its sending
/// side ends its stream too); whatever else it sends is ignored.
async fn hung_up(read: &mut OwnedReadHalf) {
    let mut ignored = [0u8; 256];
    while let Ok(1..) = read.read(&mut ignored).await {}
}

/// The first reply to a request, which the client has [`CLIENT_PATIENCE`]
/// to take.
async fn send_first(write: &mut OwnedWriteHalf, reply: &ControlReply) -> std::io::Result<()> {
    (tokio::time::timeout(CLIENT_PATIENCE, send(write, reply)).await)
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

async fn send(write: &mut OwnedWriteHalf, reply: &ControlReply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).expect("a reply serialises");
    line.push(b'\n');
    write.write_all(&line).await.inspect_err(|err| {
        tracing::debug!(error = %err, "the control client left before the reply");
    })
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
