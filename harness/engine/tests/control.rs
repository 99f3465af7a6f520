//! The agent's control socket against the fake driver: what a client is
//! told for each kind of request, and the socket file's life. No root.

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use taskgate_engine::agent::{Agent, ControlServer, Followed, Following};
use taskgate_engine::control::{
    self, BindError, ControlAnswer, ControlError, ControlReply, ControlRequest, RequestError,
};
use taskgate_engine::fake_driver::{Exit, FakeDriver};
use taskgate_engine::jobspec::{Group, Job, JobType, Task};
use taskgate_engine::task_state::EventKind;
use taskgate_engine::RestartScope;
use taskgate_engine::{ClientStatus, DataDir, DesiredStatus, Engine, EngineConfig, RestartRefused};
use taskgate_faults::{points, Action, Await, Faults};

/// How long a step may take before the test calls it hung.
fn idle() -> Duration {
    taskgate_faults::patience::step()
}

/// An agent on the fake driver in a temp dir. The runtime drops first,
/// ending every alloc runner and connection still open.
struct Home {
    rt: tokio::runtime::Runtime,
    agent: Arc<Agent>,
    driver: FakeDriver,
    faults: Faults,
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home::keeping(taskgate_engine::DEFAULT_KEEP_FINISHED)
    }

    /// A home whose engine keeps `keep_finished` finished allocations.
    fn keeping(keep_finished: usize) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let me = nix::unistd::User::from_uid(nix::unistd::getuid())
            .unwrap()
            .expect("the test's own user");
        let config = EngineConfig {
            default_user: me.name,
            keep_finished,
            ..EngineConfig::for_fake(DataDir::new(dir.path().join("data")))
        };
        let driver = config.fake_driver();
        let faults = config.faults.clone();
        let engine = Engine::open_on_fake(config, &driver).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        Home {
            rt,
            agent: Agent::new(engine),
            driver,
            faults,
            dir,
        }
    }

    fn data_dir(&self) -> DataDir {
        DataDir::new(self.dir.path().join("data"))
    }

    fn socket(&self) -> PathBuf {
        self.data_dir().control_socket()
    }

    fn serve(&self) -> Result<ControlServer, BindError> {
        let _rt = self.rt.enter();
        Ok(ControlServer::bind(&self.data_dir())?.serve(self.agent.clone()))
    }

    /// Places a batch alloc of one main task, `web`, which runs until
    /// stopped.
    fn submit(&self) -> Following {
        let _rt = self.rt.enter();
        self.agent.submit(&web_job(), None).unwrap()
    }

    /// [`Home::submit`] from a thread of its own, for a placement a test
    /// holds (or panics) at a fault point while it acts beside it.
    fn submit_on_a_thread(&self) -> std::thread::JoinHandle<Result<Following, ControlError>> {
        let (agent, handle) = (self.agent.clone(), self.rt.handle().clone());
        std::thread::spawn(move || {
            let _rt = handle.enter();
            agent.submit(&web_job(), None)
        })
    }

    /// Sends `req` as the CLI does, from a thread of its own so that a
    /// server that never answers fails the test instead of hanging it.
    fn request(&self, req: ControlRequest) -> Result<ControlAnswer, RequestError> {
        let data_dir = self.data_dir();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(control::request(&data_dir, &req)));
        rx.recv_timeout(idle()).expect("the agent did not answer")
    }

    /// Every line the agent answers `req` with, up to its end.
    fn stream(&self, req: ControlRequest) -> Vec<ControlAnswer> {
        let data_dir = self.data_dir();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut replies = control::send(&data_dir, &req).unwrap();
            loop {
                let answer = replies.next_answer();
                let end = !matches!(
                    answer,
                    Ok(ControlAnswer::Event(_) | ControlAnswer::Placed { .. })
                );
                if tx.send(answer).is_err() || end {
                    return;
                }
            }
        });
        let mut lines = Vec::new();
        loop {
            match rx.recv_timeout(idle()).expect("the agent's stream stalled") {
                Ok(answer) => lines.push(answer),
                Err(RequestError::NoReply(_)) => return lines,
                Err(err) => panic!("{err}; so far {lines:?}"),
            }
            if matches!(lines.last(), Some(ControlAnswer::Finished(_))) {
                return lines;
            }
        }
    }

    fn restart(&self, alloc: &str, scope: RestartScope) -> Result<ControlAnswer, RequestError> {
        self.request(ControlRequest::Restart {
            alloc: alloc.to_string(),
            scope,
        })
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
    fn next_start(&self, following: &mut Following) -> String {
        let started = async {
            loop {
                match following.next().await {
                    Followed::Event(e) if e.kind == EventKind::Started => return e.task,
                    Followed::Finished(s) => panic!("the alloc ended first: {s:?}"),
                    _ => {}
                }
            }
        };
        self.rt
            .block_on(async { tokio::time::timeout(idle(), started).await })
            .expect("no task started")
    }

    /// Follows the alloc to its end.
    fn finish(&self, following: &mut Following) -> ClientStatus {
        let finished = async {
            loop {
                if let Followed::Finished(status) = following.next().await {
                    return status.client;
                }
            }
        };
        self.rt
            .block_on(async { tokio::time::timeout(idle(), finished).await })
            .expect("alloc hung")
    }

    /// Stops the alloc and waits for its end.
    fn stop_and_wait(&self, mut following: Following) {
        self.agent.stop(&following.alloc_id).unwrap();
        self.finish(&mut following);
    }
}

fn web_job() -> Job {
    Job {
        name: "j".into(),
        version: 0,
        job_type: JobType::Batch,
        groups: vec![Group {
            name: "g".into(),
            tasks: vec![Task::new("web", "/bin/true", vec![])],
        }],
    }
}

/// What the agent answered to a request it did not carry out.
fn refusal(result: Result<ControlAnswer, RequestError>) -> ControlError {
    match result {
        Err(RequestError::Control(err)) => err,
        other => panic!("expected the agent's refusal, got {other:?}"),
    }
}

fn assert_no_agent_at(socket: &Path, result: Result<ControlAnswer, RequestError>) {
    assert!(
        matches!(&result, Err(RequestError::NoAgent(path)) if path == socket),
        "{result:?}"
    );
}

#[test]
fn an_unknown_alloc_is_no_such_alloc() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    assert_eq!(
        refusal(home.restart("5f0c", RestartScope::Running)),
        ControlError::NoSuchAlloc("5f0c".into())
    );
    for req in [
        ControlRequest::Stop {
            alloc: "5f0c".into(),
            follow: false,
        },
        ControlRequest::Follow {
            alloc: "5f0c".into(),
        },
    ] {
        assert_eq!(
            refusal(home.request(req)),
            ControlError::NoSuchAlloc("5f0c".into())
        );
    }
}

#[test]
fn a_malformed_line_is_a_bad_request() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let reply = home.send_raw(b"{\"Restart\": 7}\n");
    assert!(
        matches!(reply, Err(ControlError::BadRequest(_))),
        "{reply:?}"
    );
}

/// An agent told to go answers what waited in the kernel's backlog too,
/// connections it had not accepted yet: nothing was done, and why (they
/// were reset with the listener).
#[test]
fn a_client_in_the_backlog_is_told_the_agent_exits() {
    let home = Home::new();
    // One thread: nothing the server spawns runs before the signal is set.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bound = {
        let _rt = rt.enter();
        ControlServer::bind(&home.data_dir()).unwrap()
    };
    // Connected and sent before anything is served: in the backlog.
    let mut client = UnixStream::connect(home.socket()).unwrap();
    let mut line = serde_json::to_vec(&ControlRequest::Status).unwrap();
    line.push(b'\n');
    client.write_all(&line).unwrap();
    rt.block_on(async {
        let server = bound.serve(home.agent.clone());
        tokio::time::timeout(idle(), server.leave("SIGTERM")).await
    })
    .expect("the server did not close");
    let mut reply = String::new();
    BufReader::new(client).read_line(&mut reply).unwrap();
    let reply: ControlReply = serde_json::from_str(&reply).expect("a reply line");
    assert_eq!(reply, Err(ControlError::Exiting("SIGTERM".into())));
}

/// The server reads no more than its limit, then answers: a line one byte
/// too long is refused whole, not cut short and taken.
#[test]
fn an_overlong_request_is_a_bad_request() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let reply = home.send_raw(&vec![b' '; control::MAX_REQUEST_BYTES + 1]);
    assert!(
        matches!(&reply, Err(ControlError::BadRequest(why)) if why.contains("longer")),
        "{reply:?}"
    );
}

/// A request far over the limit (a job whose environment is too big) is
/// refused with the server's reason: the client, still writing when the
/// server answered and hung up, reads that answer. (It said the agent
/// closed the connection without a reply.)
#[test]
fn a_request_far_over_the_limit_is_told_why() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut job = web_job();
    let big = "x".repeat(control::MAX_REQUEST_BYTES + (4 << 20));
    job.groups[0].tasks[0].env.insert("BIG".into(), big);
    let reply = home.request(ControlRequest::Submit {
        job,
        group: None,
        follow: false,
    });
    assert!(
        matches!(&reply, Err(RequestError::Control(ControlError::BadRequest(why))) if why.contains("longer")),
        "{reply:?}"
    );
    assert!(home.driver.calls().is_empty(), "placed");
}

/// A dead agent's socket file, which no one answers on, is replaced.
#[test]
fn a_stale_socket_is_replaced() {
    let home = Home::new();
    drop(UnixListener::bind(home.socket()).unwrap());
    assert!(home.socket().exists());
    assert!(!control::agent_serves(&home.data_dir()).unwrap());
    assert_no_agent_at(&home.socket(), home.restart("5f0c", RestartScope::Running));
    let _server = home.serve().unwrap();
    assert!(control::agent_serves(&home.data_dir()).unwrap());
    assert_eq!(
        refusal(home.restart("5f0c", RestartScope::Running)),
        ControlError::NoSuchAlloc("5f0c".into())
    );
}

#[test]
fn a_served_socket_refuses_a_second_server() {
    let home = Home::new();
    let _first = home.serve().unwrap();
    let second = home.serve();
    assert!(
        matches!(&second, Err(BindError::AlreadyServed(path)) if *path == home.socket()),
        "{:?}",
        second.err()
    );
    assert_eq!(
        refusal(home.restart("5f0c", RestartScope::Running)),
        ControlError::NoSuchAlloc("5f0c".into())
    );
}

#[test]
fn the_socket_is_gone_once_the_server_stops() {
    let home = Home::new();
    let server = home.serve().unwrap();
    assert!(home.socket().exists());
    drop(server);
    assert!(!home.socket().exists());
    assert_no_agent_at(&home.socket(), home.restart("5f0c", RestartScope::Running));
}

/// Once finished, an alloc takes no restart and no stop, and a follower is
/// told its end at once.
#[test]
fn a_finished_alloc_refuses_a_restart_and_a_stop() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let following = home.submit();
    let alloc_id = following.alloc_id.clone();
    home.stop_and_wait(following);
    assert_eq!(
        refusal(home.restart(&alloc_id, RestartScope::All)),
        ControlError::Refused(RestartRefused::AllocFinished)
    );
    let finished = refusal(home.request(ControlRequest::Stop {
        alloc: alloc_id[..8].to_string(),
        follow: true,
    }));
    assert!(
        matches!(&finished, ControlError::Finished { alloc_id: id, status }
            if *id == alloc_id && status.desired == DesiredStatus::Stop),
        "{finished:?}"
    );
    let lines = home.stream(ControlRequest::Follow { alloc: alloc_id });
    assert!(
        matches!(lines.as_slice(), [ControlAnswer::Finished(s)] if s.client == ClientStatus::Complete),
        "{lines:?}"
    );
}

/// An alloc that ends while a request is resolving its name is told
/// finished: the request takes its record as it is once the alloc is no
/// longer live, not as it was read before (a harness's restored agent
/// exited on a stop refused as "not restored").
#[test]
fn an_alloc_ending_as_its_name_resolves_is_finished() {
    let home = Home::new();
    let mut following = home.submit();
    home.next_start(&mut following);
    let alloc_id = following.alloc_id.clone();
    let (_, control) = home.agent.control(&alloc_id).unwrap();
    home.faults
        .configure(None, points::AGENT_RESOLVED, Action::Park);
    let resolving = {
        let agent = home.agent.clone();
        let alloc_id = alloc_id.clone();
        std::thread::spawn(move || agent.stop(&alloc_id))
    };
    (home.faults)
        .wait_any(&[Await::Parked(points::AGENT_RESOLVED.into())], idle())
        .unwrap();
    control.stop();
    assert_eq!(home.finish(&mut following), ClientStatus::Complete);
    home.faults.release(None, points::AGENT_RESOLVED);
    let stopped = resolving.join().unwrap();
    assert!(
        matches!(&stopped, Err(ControlError::Finished { alloc_id: id, .. }) if *id == alloc_id),
        "{stopped:?}"
    );
}

/// A stop of an allocation recorded but not yet adopted (its id read from
/// `status`, as a script may) waits for the placement and stops it: it is
/// not refused as one no agent restored.
#[test]
fn a_stop_of_an_alloc_being_placed_reaches_it() {
    let home = Home::new();
    home.faults
        .configure(None, points::AGENT_RECORDED, Action::Park);
    let placing = home.submit_on_a_thread();
    (home.faults)
        .wait_any(&[Await::Parked(points::AGENT_RECORDED.into())], idle())
        .unwrap();
    let recorded = home.agent.status().unwrap();
    let [entry] = recorded.allocs.as_slice() else {
        panic!("one alloc recorded: {recorded:?}");
    };
    let alloc_id = entry.alloc.alloc_id.clone();
    // Whichever comes first: the stop's answer, or the stop waiting for
    // the placement.
    let (first, came) = std::sync::mpsc::channel();
    let stopping = {
        let (agent, alloc_id, first) = (home.agent.clone(), alloc_id.clone(), first.clone());
        std::thread::spawn(move || {
            let stopped = agent.stop(&alloc_id);
            let _ = first.send(Some(stopped.clone()));
            stopped
        })
    };
    let faults = home.faults.clone();
    std::thread::spawn(move || {
        let awaiting = Await::Passed(points::AGENT_AWAITING_PLACEMENT.into());
        if faults.wait_any(&[awaiting], idle()).is_ok() {
            let _ = first.send(None);
        }
    });
    let answered_first = came
        .recv_timeout(idle())
        .expect("the stop neither answered nor waited");
    home.faults.release(None, points::AGENT_RECORDED);
    let mut following = placing.join().unwrap().expect("placed");
    let stopped = stopping.join().unwrap();
    assert!(
        answered_first.is_none() && stopped.as_ref() == Ok(&alloc_id),
        "the stop answered {stopped:?} before the placement was adopted"
    );
    assert_eq!(home.finish(&mut following), ClientStatus::Complete);
    let record = home
        .agent
        .engine()
        .state()
        .alloc(&alloc_id)
        .unwrap()
        .unwrap();
    assert_eq!(record.desired, DesiredStatus::Stop);
}

/// A follower that hangs up is let go at once, not at its allocation's
/// next event: a quiet service's `logs -f` or `run`, cut short, must not
/// each hold one of the agent's connections (and fds) until then.
#[test]
fn a_follower_that_hangs_up_is_let_go_at_once() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut following = home.submit();
    home.next_start(&mut following);
    let follow = ControlRequest::Follow {
        alloc: following.alloc_id.clone(),
    };
    drop(control::send(&home.data_dir(), &follow).unwrap());
    let left = (home.faults).wait_any(
        &[Await::Passed(points::CONTROL_FOLLOWER_LEFT.into())],
        idle(),
    );
    home.stop_and_wait(following);
    assert!(left.is_ok(), "the agent held the connection");
}

/// A unique prefix of an id names its alloc, and the empty one none.
#[test]
fn an_alloc_is_named_by_a_unique_prefix_of_its_id() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut following = home.submit();
    let id = following.alloc_id.clone();
    home.next_start(&mut following);
    home.restart(&id[..8], RestartScope::Running).unwrap();
    assert_eq!(home.next_start(&mut following), "web");
    assert_eq!(
        refusal(home.restart("", RestartScope::Running)),
        ControlError::NoSuchAlloc(String::new())
    );
    home.stop_and_wait(following);
}

/// A restart of a running task is answered once it is done, and the task
/// starts again; a task the alloc does not have is refused by name.
#[test]
fn a_running_task_restarts_on_request() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut following = home.submit();
    let id = following.alloc_id.clone();
    home.next_start(&mut following);

    assert_eq!(
        home.restart(&id, RestartScope::Task("web".into())).unwrap(),
        ControlAnswer::Done
    );
    assert_eq!(home.next_start(&mut following), "web");
    assert_eq!(home.driver.starts("web"), 2);
    assert_eq!(
        refusal(home.restart(&id, RestartScope::Task("db".into()))),
        ControlError::Refused(RestartRefused::NoSuchTask("db".into()))
    );
    home.stop_and_wait(following);
}

/// A submitted job is placed, its events stream from the first, and its
/// end closes the stream; the agent's status lists it.
#[test]
fn a_submitted_job_streams_its_events_to_its_end() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    home.driver.script("web", [Exit::Code(0)]);
    let lines = home.stream(ControlRequest::Submit {
        job: web_job(),
        group: None,
        follow: true,
    });
    let Some(ControlAnswer::Placed { alloc_id }) = lines.first() else {
        panic!("{lines:?}")
    };
    let kinds: Vec<EventKind> = (lines.iter())
        .filter_map(|l| match l {
            ControlAnswer::Event(e) => Some(e.kind),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds[..2],
        [EventKind::Received, EventKind::TaskSetup],
        "{lines:?}"
    );
    assert!(kinds.contains(&EventKind::Started), "{lines:?}");
    assert!(kinds.contains(&EventKind::Terminated), "{lines:?}");
    assert!(
        matches!(lines.last(), Some(ControlAnswer::Finished(s)) if s.client == ClientStatus::Complete),
        "{lines:?}"
    );
    let Ok(ControlAnswer::Status(entries)) = home.request(ControlRequest::Status) else {
        panic!("no status")
    };
    let entries = entries.allocs;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].alloc.alloc_id, *alloc_id);
    assert_eq!(entries[0].alloc.client, ClientStatus::Complete);
    assert_eq!(entries[0].tasks[0].task, "web");
}

/// A job that cannot be placed is refused with why.
#[test]
fn a_job_without_the_group_is_not_placed() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let refused = refusal(home.request(ControlRequest::Submit {
        job: web_job(),
        group: Some("nope".into()),
        follow: false,
    }));
    assert!(
        matches!(&refused, ControlError::NotPlaced(why) if why.contains("no group \"nope\"")),
        "{refused:?}"
    );
}

/// Only the group placed has its users checked: a user missing for a task
/// of another group, which this placement never runs, refuses nothing.
#[test]
fn only_the_placed_groups_users_are_checked() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut job = web_job();
    let mut other = job.groups[0].clone();
    other.name = "other".into();
    other.tasks[0].user = Some("no-such-user-xyz".into());
    job.groups.push(other);
    let answer = home.request(ControlRequest::Submit {
        job,
        group: None,
        follow: false,
    });
    let Ok(ControlAnswer::Placed { alloc_id }) = answer else {
        panic!("{answer:?}");
    };
    let following = home.agent.follow(&alloc_id).unwrap();
    home.stop_and_wait(following);
}

/// A stop is answered once delivered; a follower sees the kill and the end.
#[test]
fn a_stop_ends_a_followed_alloc() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut following = home.submit();
    let id = following.alloc_id.clone();
    home.next_start(&mut following);
    let data_dir = home.data_dir();
    let follow_id = id.clone();
    let follower = std::thread::spawn(move || {
        let req = ControlRequest::Follow { alloc: follow_id };
        let mut replies = control::send(&data_dir, &req).unwrap();
        let mut lines = Vec::new();
        while let Ok(answer) = replies.next_answer() {
            lines.push(answer);
        }
        lines
    });
    assert_eq!(
        home.request(ControlRequest::Stop {
            alloc: id,
            follow: false
        })
        .unwrap(),
        ControlAnswer::Done
    );
    assert_eq!(home.finish(&mut following), ClientStatus::Complete);
    let lines = follower.join().unwrap();
    assert!(
        matches!(lines.last(), Some(ControlAnswer::Finished(s)) if s.desired == DesiredStatus::Stop),
        "{lines:?}"
    );
}

/// A stop that follows is answered once delivered, then streams the
/// stop's events from before it was sent: the task's "Killing" and
/// "Killed", then the end.
#[test]
fn a_following_stop_streams_its_events_from_the_first() {
    let home = Home::new();
    let _server = home.serve().unwrap();
    let mut following = home.submit();
    let id = following.alloc_id.clone();
    home.next_start(&mut following);
    let stop = ControlRequest::Stop {
        alloc: id,
        follow: true,
    };
    let mut replies = control::send(&home.data_dir(), &stop).unwrap();
    assert_eq!(replies.next_answer().unwrap(), ControlAnswer::Done);
    let mut kinds = Vec::new();
    let end = loop {
        match replies.next_answer().unwrap() {
            ControlAnswer::Event(event) => kinds.push(event.kind),
            ControlAnswer::Finished(status) => break status,
            other => panic!("{other:?} in a stop's stream"),
        }
    };
    assert_eq!(end.desired, DesiredStatus::Stop);
    let killing = kinds.iter().position(|k| *k == EventKind::Killing);
    let killed = kinds.iter().position(|k| *k == EventKind::Killed);
    assert!(killing.is_some() && killing < killed, "{kinds:?}");
    assert_eq!(home.finish(&mut following), ClientStatus::Complete);
}

/// A drain stops every alloc and is answered once all have finished.
#[test]
fn a_drain_stops_every_alloc() {
    let home = Home::new();
    let server = home.serve().unwrap();
    let mut first = home.submit();
    let mut second = home.submit();
    home.next_start(&mut first);
    home.next_start(&mut second);
    assert_eq!(home.agent.live_count(), 2);
    assert_eq!(
        home.request(ControlRequest::Drain).unwrap(),
        ControlAnswer::Done
    );
    assert_eq!(home.agent.live_count(), 0);
    home.rt
        .block_on(async { tokio::time::timeout(idle(), server.drained()).await })
        .expect("the server never said it drained");
    for mut following in [first, second] {
        assert_eq!(home.finish(&mut following), ClientStatus::Complete);
    }
    // A drained agent places nothing more.
    let refused = refusal(home.request(ControlRequest::Submit {
        job: web_job(),
        group: None,
        follow: false,
    }));
    assert!(
        matches!(&refused, ControlError::NotPlaced(why) if why.contains("draining")),
        "{refused:?}"
    );
}

/// A request the server took before it closed is answered before the close
/// ends: a drain that reaches a foreground run just as its own alloc
/// finished is carried out to its end, not dropped as the run exits.
#[test]
fn a_server_closes_once_every_request_it_took_is_answered() {
    let home = Home::new();
    let server = home.serve().unwrap();
    let mut following = home.submit();
    home.next_start(&mut following);
    home.faults
        .configure(None, points::CONTROL_ANSWERING, Action::Park);
    let drain = {
        let data_dir = home.data_dir();
        std::thread::spawn(move || control::request(&data_dir, &ControlRequest::Drain))
    };
    (home.faults)
        .wait_any(&[Await::Parked(points::CONTROL_ANSWERING.into())], idle())
        .unwrap();
    let mut closing = {
        let _rt = home.rt.enter();
        Box::pin(server.close())
    };
    let waits = (closing.as_mut())
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        .is_pending();
    home.faults.release(None, points::CONTROL_ANSWERING);
    assert!(waits, "the server closed with a drain it took unanswered");
    home.rt
        .block_on(async { tokio::time::timeout(idle(), closing).await })
        .expect("the close never ended");
    assert_eq!(drain.join().unwrap().unwrap(), ControlAnswer::Done);
    assert_eq!(home.finish(&mut following), ClientStatus::Complete);
}

/// An alloc whose runner goes with the agent's runtime (the agent exits
/// and leaves its tasks running) has not finished: it stays counted, so a
/// drain waiting on it never tells its client every allocation finished.
#[test]
fn an_alloc_whose_runner_went_with_the_runtime_is_still_counted() {
    let home = Home::new();
    let mut following = home.submit();
    home.next_start(&mut following);
    let Home { rt, agent, .. } = home;
    rt.shutdown_timeout(idle());
    assert_eq!(
        agent.live_count(),
        1,
        "a drain would take the alloc for finished"
    );
}

/// A prefix names an allocation only if it is unique among every one the
/// agent knows, finished ones too, as `status` and `logs` take it (and
/// Nomad does): a stop meant for a finished allocation never stops a
/// running one that shares its prefix.
#[test]
fn a_prefix_a_finished_alloc_shares_is_ambiguous() {
    let home = Home::new();
    let mut following = home.submit();
    home.next_start(&mut following);
    let live = following.alloc_id.clone();
    let state = home.agent.engine().state();
    let finished = taskgate_engine::state::AllocRecord {
        alloc_id: format!("{}-finished", &live[..2]),
        client: ClientStatus::Complete,
        ..state.alloc(&live).unwrap().unwrap()
    };
    state.put_alloc(&finished).unwrap();
    let stopped = home.agent.stop(&live[..2]);
    assert!(
        matches!(stopped, Err(ControlError::AmbiguousAlloc { .. })),
        "{stopped:?}"
    );
    home.stop_and_wait(following);
}

/// One allocation whose record cannot be read (written by another
/// version, or damaged) hides no other from `status`, as it stops no other
/// from being restored.
#[test]
fn an_unreadable_record_hides_no_other_allocation() {
    let home = Home::new();
    let mut following = home.submit();
    home.next_start(&mut following);
    (home.agent.engine().state())
        .put_raw_alloc("0bad", b"{not a record")
        .unwrap();
    let status = home.agent.status();
    let alloc_id = following.alloc_id.clone();
    home.stop_and_wait(following);
    let report = status.expect("a status");
    let read: Vec<&str> = (report.allocs.iter())
        .map(|e| e.alloc.alloc_id.as_str())
        .collect();
    assert_eq!(read, [alloc_id.as_str()]);
    let unreadable: Vec<&str> = (report.unreadable.iter())
        .map(|u| u.alloc_id.as_str())
        .collect();
    assert_eq!(unreadable, ["0bad"]);
}

/// A placement that panics where it is counted (a fault injected there) is
/// counted out as it unwinds: a drain after it does not wait for an alloc
/// that was never placed.
#[test]
fn a_placement_that_panics_is_counted_out() {
    let home = Home::new();
    home.faults
        .configure(None, points::AGENT_PLACING, Action::Panic);
    let placing = home.submit_on_a_thread();
    assert!(placing.join().is_err(), "the injected panic never came");
    assert!(home.agent.drain().is_empty());
    assert_eq!(
        home.agent.live_count(),
        0,
        "a drain waits for a placement that panicked"
    );
}

/// A drain that begins while a job is being placed (past the drain check)
/// waits for the alloc it places, and stops it: the agent never exits
/// beside an alloc it placed once it had drained.
#[test]
fn a_drain_waits_for_an_alloc_being_placed() {
    let home = Home::new();
    home.faults
        .configure(None, points::AGENT_PLACING, Action::Park);
    let placing = home.submit_on_a_thread();
    (home.faults)
        .wait_any(&[Await::Parked(points::AGENT_PLACING.into())], idle())
        .unwrap();
    assert!(home.agent.drain().is_empty());
    let waits = home.agent.live_count();
    home.faults.release(None, points::AGENT_PLACING);
    let placed = placing.join().unwrap().map(|f| f.alloc_id);
    assert_eq!(waits, 1, "the drain found nothing to wait for ({placed:?})");
    home.rt
        .block_on(async { tokio::time::timeout(idle(), home.agent.idle()).await })
        .expect("the alloc placed as the drain began was never stopped");
}

/// A finished allocation whose follower has yet to read it (a foreground
/// `run` waiting out a drain before it prints its alloc's end and logs)
/// is not removed as later ones finish, however few an agent keeps.
#[test]
fn a_finished_allocation_still_followed_is_kept() {
    let home = Home::keeping(1);
    let state = home.agent.engine().state();
    let mut own = home.submit();
    home.next_start(&mut own);
    home.agent.stop(&own.alloc_id).unwrap();
    home.finish(&mut own);
    for _ in 0..2 {
        let mut other = home.submit();
        home.next_start(&mut other);
        home.stop_and_wait(other);
    }
    let kept = state.alloc(&own.alloc_id).unwrap().is_some();
    assert!(
        kept && home.data_dir().alloc(&own.alloc_id).exists(),
        "{} removed while followed",
        own.alloc_id
    );
    let own_id = own.alloc_id.clone();
    drop(own);
    // Once its follower is gone, it goes with the next finish.
    let mut last = home.submit();
    home.next_start(&mut last);
    home.stop_and_wait(last);
    assert!(state.alloc(&own_id).unwrap().is_none(), "{own_id} kept");
    assert!(!home.data_dir().alloc(&own_id).exists());
}

/// A long-running agent keeps the newest finished allocations, records and
/// alloc dirs (their logs), and removes the rest as each one finishes:
/// one an older agent finished (no finish time) first. Never removed: a
/// running allocation, and the one finishing (its followers read it next).
#[test]
fn the_longest_finished_allocations_are_removed() {
    let home = Home::keeping(2);
    let state = home.agent.engine().state();
    let data_dir = home.data_dir();
    let ids = || -> Vec<String> {
        let mut ids: Vec<String> = (state.allocs().unwrap().into_iter())
            .map(|a| a.alloc_id)
            .collect();
        ids.sort();
        ids
    };
    // An allocation an older agent finished: no finish time in its record.
    let mut old = home.submit();
    let old_id = old.alloc_id.clone();
    home.next_start(&mut old);
    home.stop_and_wait(old);
    let untimed = taskgate_engine::state::AllocRecord {
        finished_at_ms: None,
        stop_sent: false,
        ..state.alloc(&old_id).unwrap().unwrap()
    };
    state.put_alloc(&untimed).unwrap();
    let mut running = home.submit();
    let running_id = running.alloc_id.clone();
    home.next_start(&mut running);
    let mut all = vec![old_id.clone(), running_id.clone()];
    for _ in 0..2 {
        let mut following = home.submit();
        home.next_start(&mut following);
        all.push(following.alloc_id.clone());
        home.stop_and_wait(following);
    }
    all.sort();
    // Two finished beside the untimed one, and the last of them spared.
    assert_eq!(ids(), all, "removed while running or finishing");
    home.stop_and_wait(running);
    let kept = ids();
    assert!(
        !kept.contains(&old_id),
        "the untimed {old_id} is kept: {kept:?}"
    );
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(state.tasks(&old_id).unwrap().is_empty());
    assert!(!data_dir.alloc(&old_id).exists());
    for id in &kept {
        assert!(data_dir.alloc(id).exists(), "{id}'s alloc dir is gone");
    }
}
