//! Collecting a finished allocation removes its alloc dir whatever its
//! tasks left in it. A task of any user can build a tree far deeper than
//! the agent can hold directories open (or recurse) for. No root. The only
//! test of this binary: it lowers the process's fd limit.

mod support;

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use support::*;
use taskgate_engine::fake_driver::Exit;
use taskgate_engine::EngineConfig;

/// Deeper than the fd limit the test sets: a walk that holds one
/// directory open per level runs out of fds.
const DEPTH: usize = 400;
const FD_LIMIT: u64 = 128;

#[test]
fn a_finished_allocs_dir_deeper_than_the_fd_limit_is_collected() {
    let rt = runtime();
    let home = Home::new();
    home.driver.script("web", [Exit::Code(0), Exit::Code(0)]);
    let config = EngineConfig {
        default_user: own_user(),
        keep_finished: 1,
        faults: home.faults.clone(),
        ..EngineConfig::for_fake(home.data_dir())
    };
    let engine = taskgate_engine::Engine::open_on_fake(config, &home.driver).unwrap();
    let run_one = || {
        let alloc = {
            let _rt = rt.enter();
            engine
                .submit(&job(vec![task("web", None, false)]), None)
                .unwrap()
        };
        let id = alloc.alloc_id.clone();
        rt.block_on(async { tokio::time::timeout(idle(), alloc.wait()).await })
            .expect("alloc hung");
        id
    };
    let first = run_one();
    // What a task could leave in its own dir: `mkdir d; cd d` in a loop
    // (the path made here stays under PATH_MAX; the task's need not).
    let local = home.data_dir().alloc(&first).join("web/local");
    std::fs::create_dir_all(local.join("d/".repeat(DEPTH))).unwrap();
    // Finishing a second one takes the first beyond the one kept.
    run_one();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, FD_LIMIT, hard).unwrap();
    let collected = engine.collect_finished(&[]);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    collected.unwrap();
    let left = home.data_dir().alloc(&first).exists();
    assert!(
        !left,
        "{} is still there",
        home.data_dir().alloc(&first).display()
    );
}
