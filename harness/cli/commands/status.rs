//! `taskgate status`: every allocation in the state database as Nomad's
//! `alloc status` shows one: the alloc's statuses, a task table (state,
//! exit, restarts, start and finish times) and the recent task events; or
//! the same as JSON with `--json`, for scripts. While an agent runs it holds
//! the database (redb allows one process at a time, and redb 2 has no
//! read-only open), so the agent is asked over its control socket. Without
//! one it reads a copy of the database, never the database itself: an agent
//! starting meanwhile must not find it held.

use super::agent_config::ClientArgs;
use anyhow::Context;
use serde::Serialize;
use taskgate_engine::agent::{AllocEntry, StatusReport};
use taskgate_engine::control::{self, ControlAnswer, ControlError, ControlRequest, RequestError};
use taskgate_engine::state::{AllocRecord, TaskRecord};
use taskgate_engine::task_state::{EventKind, Outcome, TaskEvent, TaskState};
use taskgate_engine::DataDir;
use taskgate_executor::ExitResult;

/// Events shown per task without `--verbose`, as Nomad's `alloc status`.
const RECENT_EVENTS: usize = 3;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub client: ClientArgs,
    /// Show every recorded task event, not only the last three.
    #[arg(long, conflicts_with = "json")]
    pub verbose: bool,
    /// Print JSON (every recorded event, the last 10 per task; times in ms
    /// since the epoch) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// One allocation, as `--json` prints it.
#[derive(Serialize)]
struct AllocView {
    id: String,
    job: String,
    group: String,
    desired_status: &'static str,
    client_status: &'static str,
    tasks: Vec<TaskView>,
}

#[derive(Serialize)]
struct TaskView {
    name: String,
    state: &'static str,
    failed: bool,
    exit_code: Option<i32>,
    signal: Option<i32>,
    restarts: u32,
    started_at_ms: Option<u64>,
    finished_at_ms: Option<u64>,
    events: Vec<EventView>,
}

#[derive(Serialize)]
struct EventView {
    time_ms: u64,
    kind: &'static str,
    attempt: u32,
    failed: bool,
    message: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let report = read_status(&args.client)?;
    let views: Vec<AllocView> = (report.allocs.iter())
        .map(|e| alloc_view(&e.alloc, &e.tasks))
        .collect();
    if args.json {
        crate::commands::say!("{}", serde_json::to_string_pretty(&views)?);
    } else {
        if views.is_empty() && report.unreadable.is_empty() {
            crate::commands::say!("no allocations in {}", args.client.data_dir.display());
        }
        for (n, alloc) in views.iter().enumerate() {
            if n > 0 {
                crate::commands::say!();
            }
            crate::commands::say_part!("{}", render(alloc, args.verbose));
        }
    }
    // Each one shown, the others named after them: the status is not whole.
    for unreadable in &report.unreadable {
        super::say_err!("error: {unreadable}");
    }
    anyhow::ensure!(
        report.unreadable.is_empty(),
        "{} allocation(s) could not be read",
        report.unreadable.len()
    );
    Ok(())
}

/// Every allocation with its tasks: from the agent serving the data dir,
/// else from the state database itself.
pub fn read_status(client: &ClientArgs) -> anyhow::Result<StatusReport> {
    let ask = || match control::request(&client.data_dir, &ControlRequest::Status) {
        Ok(ControlAnswer::Status(entries)) => Ok(Some(entries)),
        Ok(other) => Err(RequestError::Unexpected(Box::new(other)).into()),
        // No agent, or one that exits as it was asked (a drain's end, a
        // signal).
        Err(
            RequestError::NoAgent(_)
            | RequestError::NoReply(_)
            | RequestError::Control(ControlError::Exiting(_)),
        ) => Ok(None),
        Err(err) => Err(anyhow::Error::from(err)),
    };
    if let Some(entries) = ask()? {
        return Ok(entries);
    }
    match client.read_state() {
        Ok(state) => Ok(taskgate_engine::agent::read_entries(&state)?),
        // An agent started between the two, and wrote as the copy was read.
        Err(err) => ask()?.with_context(|| format!("{err:#}")),
    }
}

/// The allocation `name` is the id of, or a prefix unique among all
/// (those that cannot be read too).
pub fn find_alloc<'a>(
    report: &'a StatusReport,
    name: &str,
    data_dir: &DataDir,
) -> anyhow::Result<&'a AllocEntry> {
    let ids: Vec<String> = (report.allocs.iter().map(|e| e.alloc.alloc_id.clone()))
        .chain(report.unreadable.iter().map(|u| u.alloc_id.clone()))
        .collect();
    let id = match taskgate_engine::agent::find_id(ids.iter(), name) {
        Ok(id) => id,
        Err(ControlError::NoSuchAlloc(_)) => {
            anyhow::bail!("no allocation {name:?} in {}", data_dir.display())
        }
        Err(err) => return Err(err.into()),
    };
    if let Some(unreadable) = report.unreadable.iter().find(|u| u.alloc_id == id) {
        anyhow::bail!("{unreadable}");
    }
    Ok((report.allocs.iter())
        .find(|e| e.alloc.alloc_id == id)
        .expect("found among these"))
}

fn alloc_view(alloc: &AllocRecord, tasks: &[TaskRecord]) -> AllocView {
    AllocView {
        id: alloc.alloc_id.clone(),
        job: alloc.job.name.clone(),
        group: alloc.group.clone(),
        desired_status: alloc.desired.as_str(),
        client_status: alloc.client.as_str(),
        tasks: tasks.iter().map(task_view).collect(),
    }
}

fn task_view(task: &TaskRecord) -> TaskView {
    let (state, result, failed) = match &task.state {
        TaskState::Pending => ("pending", None, false),
        TaskState::Running { .. } => ("running", None, false),
        TaskState::Dead { outcome } => {
            let result = match outcome {
                Outcome::Exited { result, .. } => Some(result),
                Outcome::Killed { result } => result.as_ref(),
                Outcome::NeverStarted { .. } | Outcome::Failed { .. } => None,
            };
            ("dead", result, outcome.failed())
        }
    };
    let last_start = task
        .events
        .iter()
        .rev()
        .find(|e| matches!(e.kind, EventKind::Started | EventKind::Restored))
        .map(|e| e.time_ms);
    TaskView {
        name: task.task.clone(),
        state,
        failed,
        exit_code: result.and_then(|r| r.exit_code),
        signal: result.and_then(|r| r.signal),
        restarts: task.restarts,
        started_at_ms: result.map(|r| r.started_at_ms).or(last_start),
        finished_at_ms: finished_at(&task.state, result, &task.events),
        events: task.events.iter().map(event_view).collect(),
    }
}

/// When a dead task finished: its exit, else its last event.
fn finished_at(
    state: &TaskState,
    result: Option<&ExitResult>,
    events: &[TaskEvent],
) -> Option<u64> {
    if !state.is_dead() {
        return None;
    }
    result
        .map(|r| r.exited_at_ms)
        .or_else(|| events.last().map(|e| e.time_ms))
}

fn event_view(event: &TaskEvent) -> EventView {
    EventView {
        time_ms: event.time_ms,
        kind: event.kind.label(),
        attempt: event.attempt,
        failed: event.fails_task,
        message: event.message.clone(),
    }
}

fn render(alloc: &AllocView, verbose: bool) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(format!("ID            = {}", alloc.id));
    line(format!("Job           = {}", alloc.job));
    line(format!("Task Group    = {}", alloc.group));
    line(format!("Desired       = {}", alloc.desired_status));
    line(format!("Client Status = {}", alloc.client_status));
    line(String::new());
    line(format!(
        "{:<14} {:<8} {:<6} {:<12} {:>8}  {:<19}  {:<19}",
        "Task", "State", "Failed", "Exit", "Restarts", "Started", "Finished"
    ));
    for t in &alloc.tasks {
        line(format!(
            "{:<14} {:<8} {:<6} {:<12} {:>8}  {:<19}  {:<19}",
            t.name,
            t.state,
            t.failed,
            exit_text(t),
            t.restarts,
            time_text(t.started_at_ms),
            time_text(t.finished_at_ms)
        ));
    }
    for t in &alloc.tasks {
        let skip = if verbose {
            0
        } else {
            t.events.len().saturating_sub(RECENT_EVENTS)
        };
        line(String::new());
        line(format!("Task \"{}\" recent events:", t.name));
        line(format!("{:<19}  {:<15}  {}", "Time", "Type", "Description"));
        for e in &t.events[skip..] {
            let failed = if e.failed { " (failed the task)" } else { "" };
            line(format!(
                "{:<19}  {:<15}  {}{failed}",
                time_text(Some(e.time_ms)),
                e.kind,
                e.message
            ));
        }
    }
    out
}

fn exit_text(task: &TaskView) -> String {
    match (task.exit_code, task.signal) {
        (_, Some(signal)) => format!("signal {signal}"),
        (Some(code), None) => format!("exit {code}"),
        (None, None) => "-".into(),
    }
}

/// UTC, to the second; `-` when unknown.
fn time_text(ms: Option<u64>) -> String {
    ms.filter(|&ms| ms > 0)
        .and_then(|ms| chrono::DateTime::from_timestamp_millis(ms as i64))
        .map_or_else(|| "-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_engine::state::StateDb;
    use taskgate_engine::task_state::TaskEvent;

    fn exited(code: i32) -> TaskState {
        TaskState::Dead {
            outcome: Outcome::Exited {
                result: ExitResult {
                    exit_code: Some(code),
                    signal: None,
                    oom_killed: false,
                    started_at_ms: 1_796_235_045_598,
                    exited_at_ms: 1_796_235_047_000,
                },
                failed: code != 0,
            },
        }
    }

    fn record(name: &str, state: TaskState, events: Vec<TaskEvent>) -> TaskRecord {
        TaskRecord {
            state,
            events,
            restarts: 2,
            ..TaskRecord::new(name)
        }
    }

    fn event(kind: EventKind, time_ms: u64, fails_task: bool) -> TaskEvent {
        TaskEvent {
            time_ms,
            fails_task,
            ..TaskEvent::new("web", kind, 3, "said")
        }
    }

    #[test]
    fn a_failed_task_shows_its_exit_times_and_the_event_that_failed_it() {
        let events = vec![
            event(EventKind::Received, 1_796_235_040_000, false),
            event(EventKind::Started, 1_796_235_045_598, false),
            event(EventKind::Terminated, 1_796_235_047_000, false),
            event(EventKind::NotRestarting, 1_796_235_047_001, true),
        ];
        let view = task_view(&record("web", exited(3), events));
        assert_eq!((view.state, view.failed), ("dead", true));
        assert_eq!(exit_text(&view), "exit 3");
        assert_eq!(time_text(view.started_at_ms), "2026-12-02 18:10:45");
        assert_eq!(time_text(view.finished_at_ms), "2026-12-02 18:10:47");
        let alloc = AllocView {
            id: "a1".into(),
            job: "j".into(),
            group: "g".into(),
            desired_status: "run",
            client_status: "failed",
            tasks: vec![view],
        };
        let text = render(&alloc, false);
        assert!(text.contains("Client Status = failed"), "{text}");
        assert!(
            text.contains(
                "web            dead     true   exit 3              2  2026-12-02 18:10:45  2026-12-02 18:10:47"
            ),
            "{text}"
        );
        // The last three events only, the failing one flagged.
        assert!(!text.contains("Received"), "{text}");
        assert!(
            text.contains("Not Restarting   said (failed the task)"),
            "{text}"
        );
        assert!(render(&alloc, true).contains("Received"));
    }

    #[test]
    fn a_running_task_has_its_start_and_no_finish() {
        let events = vec![event(EventKind::Started, 1_796_235_045_598, false)];
        let running = record("web", TaskState::Running { attempt: 1 }, events);
        let view = task_view(&running);
        assert_eq!((view.state, exit_text(&view)), ("running", "-".to_string()));
        assert_eq!(view.started_at_ms, Some(1_796_235_045_598));
        assert_eq!(view.finished_at_ms, None);
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["state"], "running");
        assert_eq!(json["events"][0]["kind"], "Started");
    }

    /// A `status` with no agent running reads the state database; an agent
    /// that starts meanwhile must still get it (redb lets one process hold
    /// a database at a time).
    #[test]
    fn an_agent_starts_while_a_status_reads_the_state() {
        let dir = tempfile::tempdir().unwrap();
        let client = ClientArgs {
            data_dir: DataDir::new(dir.path()),
        };
        let written = StateDb::open(&client.data_dir.state_db()).unwrap();
        written.put_task("a1", &TaskRecord::new("web")).unwrap();
        drop(written);
        let reading = client.read_state().unwrap();
        let agent = StateDb::open(&client.data_dir.state_db());
        assert!(
            agent.is_ok(),
            "the agent cannot open the state: {:?}",
            agent.err()
        );
        assert_eq!(reading.tasks("a1").unwrap()[0].task, "web");
    }

    /// An agent that hangs up without a reply (it exited as asked, a
    /// drain's end) is no agent: the status is read from the database.
    #[test]
    fn an_agent_that_hangs_up_is_read_around() {
        let home = tempfile::tempdir().unwrap();
        let client = ClientArgs {
            data_dir: DataDir::new(home.path()),
        };
        std::fs::create_dir_all(client.data_dir.run()).unwrap();
        let state = StateDb::open(&client.data_dir.state_db()).unwrap();
        let alloc = AllocRecord {
            alloc_id: "a1".into(),
            job: taskgate_engine::jobspec::builtin_default(),
            group: "g".into(),
            alloc_dir: home.path().join("allocs/a1"),
            desired: taskgate_engine::DesiredStatus::Run,
            client: taskgate_engine::ClientStatus::Complete,
            finished_at_ms: None,
            stop_sent: false,
        };
        state.put_alloc(&alloc).unwrap();
        drop(state);
        let listener =
            std::os::unix::net::UnixListener::bind(client.data_dir.control_socket()).unwrap();
        let hangs_up = std::thread::spawn(move || drop(listener.accept().unwrap()));
        let entries = read_status(&client).expect("read around the agent");
        hangs_up.join().unwrap();
        let ids: Vec<&str> = (entries.allocs.iter())
            .map(|e| e.alloc.alloc_id.as_str())
            .collect();
        assert_eq!(ids, ["a1"]);
    }
}
