//! The harness in the server's place: it delivers an alloc's stop, and its
//! next job version as an in-place update, each recorded in the fault log
//! just before it is sent (the oracle pairs deliveries with the update
//! handler's receipts in that order); and in a user's place, a restart.

use crate::lab::lock;
use std::sync::{Arc, Condvar, Mutex};
use taskgate_engine::jobspec::Job;
use taskgate_engine::{AllocControl, AllocUpdate, RestartScope};
use taskgate_faults::points::{HARNESS_STOP_DELIVERED, HARNESS_UPDATE_DELIVERED};
use taskgate_faults::{patience, Detail, Faults, Intervention};
use taskgate_oracle::history::{JOB_VERSION_ENV, JOB_VERSION_META};

pub struct Server {
    alloc: AllocControl,
    /// The run's fault points, where deliveries are recorded.
    faults: Faults,
    /// The last version this server sent (or the alloc's, before any).
    job: Mutex<Job>,
}

impl Server {
    /// The server of an alloc running `job`, reached through `alloc`,
    /// recording its deliveries in the run's `faults`.
    pub fn new(alloc: AllocControl, job: Job, faults: Faults) -> Server {
        Server {
            alloc,
            faults,
            job: Mutex::new(job),
        }
    }

    /// Delivers the update `what` asks for: `stop-alloc` or `update-alloc`;
    /// or the restart, `restart-alloc` (the running tasks) or
    /// `restart-all-tasks`, queued behind the updates before it. A refused
    /// restart is fine: the oracle judges what the engine did.
    /// A version is recorded and sent as one step under the lock, so the
    /// fault log's order of versions is the order the alloc runner gets
    /// them. The stop's point is reached before the lock: a fault there
    /// may deliver again.
    pub fn deliver(&self, what: Intervention) {
        if what == Intervention::StopAlloc {
            self.faults.reach(None, HARNESS_STOP_DELIVERED);
        }
        let restart = match what {
            Intervention::RestartAlloc => Some(RestartScope::Running),
            Intervention::RestartAllTasks => Some(RestartScope::All),
            _ => None,
        };
        if let Some(scope) = restart {
            drop(self.alloc.restart(scope));
            return;
        }
        let mut job = lock(&self.job);
        let update = match what {
            Intervention::StopAlloc => AllocUpdate::stop(),
            Intervention::UpdateAlloc => {
                *job = next_version(&job);
                let version = job.version;
                self.faults.record_detail(
                    None,
                    HARNESS_UPDATE_DELIVERED,
                    Detail::JobVersion { version },
                );
                AllocUpdate::in_place(job.clone())
            }
            other => unreachable!("{} is not an update", other.as_str()),
        };
        self.alloc.update(update);
    }
}

/// The servers of the allocations the harness follows, which its
/// interventions deliver to.
#[derive(Default)]
pub struct Servers {
    list: Mutex<Vec<Arc<Server>>>,
    added: Condvar,
}

impl Servers {
    pub fn add(&self, server: Arc<Server>) {
        lock(&self.list).push(server);
        self.added.notify_all();
    }

    /// Delivers `what` to every allocation followed. One that comes before
    /// the harness follows any waits for it: an alloc's runners may reach
    /// a point before its submit (or a restored agent's restore) returned
    /// its control (delivered to none, a stop there was lost, and a fault
    /// awaiting it hung).
    pub fn deliver(&self, what: Intervention) {
        // Followed already, as is usual: delivered at once, as before.
        let mut list = lock(&self.list).clone();
        if list.is_empty() {
            list = taskgate_faults::blocking(|| self.wait_for_one(what));
        }
        for server in list {
            server.deliver(what);
        }
    }

    /// The servers once the harness follows an allocation; a loud failure
    /// if it never does.
    fn wait_for_one(&self, what: Intervention) -> Vec<Arc<Server>> {
        let (list, waited) = self
            .added
            .wait_timeout_while(lock(&self.list), patience::step(), |l| l.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        assert!(
            !waited.timed_out(),
            "{} delivered, but the harness followed no allocation",
            what.as_str()
        );
        list.clone()
    }
}

/// `job`'s next version, an in-place change: every task's env and meta
/// carry the version number, so the oracle can tell which version, whole
/// or not, each attempt started with; and its kill timeout is halved
/// (`taskgate_oracle::updates::kill_timeout_of`), so a running attempt
/// killed with the new one would be killed too soon.
pub fn next_version(job: &Job) -> Job {
    let mut next = job.clone();
    next.version += 1;
    let version = next.version.to_string();
    for task in next.groups.iter_mut().flat_map(|g| &mut g.tasks) {
        task.env.insert(JOB_VERSION_ENV.into(), version.clone());
        task.meta.insert(JOB_VERSION_META.into(), version.clone());
        task.kill_timeout /= 2;
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_version_is_an_in_place_change_carrying_its_number() {
        let job = crate::jobs::job("j", vec![crate::jobs::service("web")]);
        let next = next_version(&next_version(&job));
        assert_eq!(next.version, 2);
        let web = &next.groups[0].tasks[0];
        assert_eq!(web.env[JOB_VERSION_ENV], "2");
        assert_eq!(web.meta[JOB_VERSION_META], "2");
        let first = job.groups[0].tasks[0].kill_timeout;
        assert_eq!(
            web.kill_timeout,
            taskgate_oracle::updates::kill_timeout_of(first, 2)
        );
        assert_eq!(job.check_in_place("g", &next), Ok(()));
    }
}
