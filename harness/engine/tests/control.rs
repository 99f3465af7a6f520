//! The agent's control socket against the fake driver: what a client is
//! told for each kind of request, and the socket file's life. No root.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::control::{
    self, BindError, ControlError, ControlReply, ControlRequest, ControlServer, Registry,
    RequestError,
};
use taskgate_engine::fake_driver::FakeDriver;
use taskgate_engine::jobspec::{Group, Job, JobType, Task};
use taskgate_engine::task_state::{EventKind, TaskEvent};
use taskgate_engine::{AllocHandle, Engine, EngineConfig, RestartRefused, RestartScope};
use tokio::sync::mpsc::UnboundedReceiver;

/// How long a step may take before the test calls it hung.
fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// An engine on the fake driver in a temp dir, with the registry a control
/// server of its would answer from. The runtime drops first, ending every
/// alloc runner and connection still open.
struct Agent {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    driver: FakeDriver,
    registry: Registry,
    dir: tempfile::TempDir,
}

impl Agent {
    fn new() -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("data");
        let driver = FakeDriver::new(data_dir.join("run"));
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("the test's own user");
        let config = EngineConfig {
            data_dir,
            executor_bin: "/nonexistent".into(),
            chroot_env: BTreeMap::new(),
            default_user: me.name,
            pids_max: 8,
            clock: Arc::new(taskgate_engine::clock::SystemClock::default()),
            restart_seed: 0,
        };
        let engine = Engine::open_with(config, Arc::new(driver.clone())).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        Agent {
            rt,
            engine,
            driver,
            registry: Registry::default(),
            dir,
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket(&self) -> PathBuf {
        control::socket_path(&self.data_dir())
    }

    fn serve(&self) -> Result<ControlServer, BindError> {
        let _rt = self.rt.enter();
        ControlServer::bind(&self.data_dir(), self.registry.clone())
    }

    /// Places a batch alloc of one main task, `web`, which runs until
    /// stopped, and registers it under its id.
    fn submit(&self) -> AllocHandle {
        let job = Job {
            name: "j".into(),
            version: 0,
            job_type: JobType::Batch,
            groups: vec![Group {
                name: "g".into(),
                tasks: vec![Task::new("web", "/bin/true", vec![])],
            }],
        };
        let _rt = self.rt.enter();
        let alloc = self.engine.submit(&job, None).unwrap();
        self.registry
            .insert(alloc.alloc_id.clone(), alloc.control());
        alloc
    }

    /// Sends a restart as `taskgate restart` does, from a thread of its own
    /// so that a server that never answers fails the test instead of hanging it.
    fn restart(&self, alloc: &str, scope: RestartScope) -> Result<(), RequestError> {
        let (data_dir, req) = (
            self.data_dir(),
            ControlRequest::Restart {
                alloc: alloc.to_string(),
                scope,
            },
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(control::request(&data_dir, &req)));
        rx.recv_timeout(idle()).expect("the agent did not answer")
    }

    /// Sends `bytes` as they are and reads the one reply line.
    fn send_raw(&self, bytes: &[u8]) -> ControlReply {
        let mut stream = UnixStream::connect(self.socket()).unwrap();
        stream.set_read_timeout(Some(idle())).unwrap();
        stream.write_all(bytes).unwrap();
        let mut reply = String::new();
        BufReader::new(&stream).read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap()
    }

    /// The next `Started` event of the alloc.
    fn next_start(&self, events: &mut UnboundedReceiver<TaskEvent>) -> TaskEvent {
        let started = async {
            loop {
                let event = events.recv().await.expect("the alloc ended first");
                if event.kind == EventKind::Started {
                    return event;
                }
            }
        };
        self.rt
            .block_on(async { tokio::time::timeout(idle(), started).await })
            .expect("no task started")
    }

    /// Stops the alloc and waits for its end.
    fn stop_and_wait(&self, alloc: AllocHandle) {
        alloc.stop();
        self.rt
            .block_on(async { tokio::time::timeout(idle(), alloc.wait()).await })
            .expect("alloc hung");
    }
}

/// What the agent answered to a request it did not carry out.
fn refusal(result: Result<(), RequestError>) -> ControlError {
    match result {
        Err(RequestError::Control(err)) => err,
        other => panic!("expected the agent's refusal, got {other:?}"),
    }
}

fn assert_no_agent_at(socket: &Path, result: Result<(), RequestError>) {
    assert!(
        matches!(&result, Err(RequestError::NoAgent(path)) if path == socket),
        "{result:?}"
    );
}

#[test]
fn an_unknown_alloc_is_no_such_alloc() {
    let agent = Agent::new();
    let _server = agent.serve().unwrap();
    assert_eq!(
        refusal(agent.restart("5f0c", RestartScope::Running)),
        ControlError::NoSuchAlloc("5f0c".into())
    );
}

#[test]
fn a_malformed_line_is_a_bad_request() {
    let agent = Agent::new();
    let _server = agent.serve().unwrap();
    let reply = agent.send_raw(b"{\"Restart\": 7}\n");
    assert!(
        matches!(reply, Err(ControlError::BadRequest(_))),
        "{reply:?}"
    );
}

/// The server reads no more than its limit, then answers: a line one byte
/// too long is refused whole, not cut short and taken.
#[test]
fn an_overlong_request_is_a_bad_request() {
    let agent = Agent::new();
    let _server = agent.serve().unwrap();
    let reply = agent.send_raw(&vec![b' '; control::MAX_REQUEST_BYTES + 1]);
    assert!(
        matches!(&reply, Err(ControlError::BadRequest(why)) if why.contains("longer")),
        "{reply:?}"
    );
}

/// A dead agent's socket file, which no one answers on, is replaced.
#[test]
fn a_stale_socket_is_replaced() {
    let agent = Agent::new();
    drop(UnixListener::bind(agent.socket()).unwrap());
    assert!(agent.socket().exists());
    assert_no_agent_at(
        &agent.socket(),
        agent.restart("5f0c", RestartScope::Running),
    );
    let _server = agent.serve().unwrap();
    assert_eq!(
        refusal(agent.restart("5f0c", RestartScope::Running)),
        ControlError::NoSuchAlloc("5f0c".into())
    );
}

#[test]
fn a_served_socket_refuses_a_second_server() {
    let agent = Agent::new();
    let _first = agent.serve().unwrap();
    let second = agent.serve();
    assert!(
        matches!(&second, Err(BindError::AlreadyServed(path)) if *path == agent.socket()),
        "{:?}",
        second.err()
    );
    assert_eq!(
        refusal(agent.restart("5f0c", RestartScope::Running)),
        ControlError::NoSuchAlloc("5f0c".into())
    );
}

#[test]
fn the_socket_is_gone_once_the_server_stops() {
    let agent = Agent::new();
    let server = agent.serve().unwrap();
    assert!(agent.socket().exists());
    drop(server);
    assert!(!agent.socket().exists());
    assert_no_agent_at(
        &agent.socket(),
        agent.restart("5f0c", RestartScope::Running),
    );
}

/// Once stopped, an alloc takes no restart: refused as terminal, or as
/// finished if the alloc runner is gone.
#[test]
fn a_stopped_alloc_refuses_a_restart() {
    let agent = Agent::new();
    let _server = agent.serve().unwrap();
    let alloc = agent.submit();
    let alloc_id = alloc.alloc_id.clone();
    agent.stop_and_wait(alloc);
    let refused = refusal(agent.restart(&alloc_id, RestartScope::All));
    assert!(
        matches!(
            refused,
            ControlError::Refused(RestartRefused::AllocTerminal | RestartRefused::AllocFinished)
        ),
        "{refused:?}"
    );
}

/// As in Nomad, a unique prefix of an id names its alloc; a prefix two ids
/// share names neither, and the empty one none.
#[test]
fn an_alloc_is_named_by_a_unique_prefix_of_its_id() {
    let agent = Agent::new();
    let _server = agent.serve().unwrap();
    let alloc = agent.submit();
    let id = alloc.alloc_id.clone();
    let sibling = format!("{}-sibling", &id[..4]);
    agent.registry.insert(sibling.clone(), alloc.control());
    agent.stop_and_wait(alloc);

    // Reaching the stopped alloc is being refused by it.
    let refused = refusal(agent.restart(&id[..8], RestartScope::Running));
    assert!(matches!(refused, ControlError::Refused(_)), "{refused:?}");
    let mut both = vec![id.clone(), sibling];
    both.sort();
    assert_eq!(
        refusal(agent.restart(&id[..4], RestartScope::Running)),
        ControlError::AmbiguousAlloc {
            prefix: id[..4].to_string(),
            matches: both,
        }
    );
    assert_eq!(
        refusal(agent.restart("", RestartScope::Running)),
        ControlError::NoSuchAlloc(String::new())
    );
}

/// A restart of a running task is answered once it is done, and the task
/// starts again; a task the alloc does not have is refused by name.
#[test]
fn a_running_task_restarts_on_request() {
    let agent = Agent::new();
    let _server = agent.serve().unwrap();
    let mut alloc = agent.submit();
    agent.next_start(&mut alloc.events);

    agent
        .restart(&alloc.alloc_id, RestartScope::Task("web".into()))
        .unwrap();
    assert_eq!(agent.next_start(&mut alloc.events).task, "web");
    assert_eq!(agent.driver.starts("web"), 2);
    assert_eq!(
        refusal(agent.restart(&alloc.alloc_id, RestartScope::Task("db".into()))),
        ControlError::Refused(RestartRefused::NoSuchTask("db".into()))
    );
    agent.stop_and_wait(alloc);
}
