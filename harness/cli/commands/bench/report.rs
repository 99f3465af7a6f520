//! What the bench measured, and how it is printed: statistics, the
//! report table and its JSON.

use super::search::Search;
use super::*;

#[derive(Default)]
pub(super) struct Latency {
    pub(super) taskgate: Vec<Duration>,
    /// launch, wait, shutdown.
    pub(super) phases: [Vec<Duration>; 3],
    pub(super) runc: Vec<Duration>,
    pub(super) floor: Vec<Duration>,
}

/// One executor's memory, in KiB, from /proc.
#[derive(Serialize)]
pub(super) struct Memory {
    pub(super) pid: i32,
    pub(super) vm_rss_kib: u64,
    pub(super) rss_anon_kib: u64,
    pub(super) rss_file_kib: u64,
    /// Proportional share: the binary's pages count once across executors.
    pub(super) pss_kib: u64,
    pub(super) threads: u64,
}

impl Memory {
    pub(super) fn of(pid: i32) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .with_context(|| format!("reading /proc/{pid}/smaps_rollup"))?;
        let field = |text: &str, name: &str| -> anyhow::Result<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .with_context(|| format!("no {name} for pid {pid}"))
        };
        Ok(Memory {
            pid,
            vm_rss_kib: field(&status, "VmRSS")?,
            rss_anon_kib: field(&status, "RssAnon")?,
            rss_file_kib: field(&status, "RssFile")?,
            pss_kib: field(&rollup, "Pss")?,
            threads: field(&status, "Threads")?,
        })
    }
}

pub(super) struct EngineRun {
    pub(super) allocs: usize,
    pub(super) concurrency: usize,
    pub(super) elapsed: Duration,
    pub(super) to_exec: Vec<Duration>,
    /// Stops that outlived the kill timeout and were SIGKILLed.
    pub(super) escalated: usize,
}

/// Nearest-rank summary of samples, in milliseconds.
#[derive(Serialize, Clone, Copy)]
pub(super) struct Stats {
    pub(super) min: f64,
    pub(super) median: f64,
    pub(super) p90: f64,
    pub(super) p99: f64,
    pub(super) max: f64,
}

impl Stats {
    pub(super) fn of(samples: &[Duration]) -> Stats {
        // Microsecond resolution is all a wall clock around process starts can claim.
        let mut ms: Vec<f64> = samples
            .iter()
            .map(|d| (d.as_secs_f64() * 1e6).round() / 1e3)
            .collect();
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| ms[((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Stats {
            min: ms[0],
            median: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: ms[ms.len() - 1],
        }
    }
}

pub(super) struct Report {
    pub(super) binary: PathBuf,
    pub(super) linkage: Linkage,
    pub(super) build: &'static str,
    pub(super) runs: usize,
    pub(super) pause: Duration,
    pub(super) taskgate: Stats,
    pub(super) phases: [Stats; 3],
    pub(super) runc: Stats,
    pub(super) floor: Stats,
    pub(super) memory: Vec<Memory>,
    pub(super) engine: EngineRun,
    pub(super) engine_to_exec: Stats,
    /// `None` in a build without fault points, or with `--no-search`.
    pub(super) search: Option<Search>,
}

impl Report {
    pub(super) fn new(
        bench: &Bench,
        pause: Duration,
        lat: Latency,
        memory: Vec<Memory>,
        engine: EngineRun,
        search: Option<Search>,
    ) -> Report {
        Report {
            binary: bench.executor.executor_bin.clone(),
            linkage: bench.executor_linkage,
            build: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            runs: lat.taskgate.len(),
            pause,
            taskgate: Stats::of(&lat.taskgate),
            phases: lat.phases.each_ref().map(|p| Stats::of(p)),
            runc: Stats::of(&lat.runc),
            floor: Stats::of(&lat.floor),
            memory,
            engine_to_exec: Stats::of(&engine.to_exec),
            engine,
            search,
        }
    }

    pub(super) fn ratio(&self) -> f64 {
        self.taskgate.median / self.runc.median
    }

    pub(super) fn mean_rss_kib(&self) -> f64 {
        self.memory.iter().map(|m| m.vm_rss_kib as f64).sum::<f64>() / self.memory.len() as f64
    }

    pub(super) fn max_rss_kib(&self) -> u64 {
        self.memory.iter().map(|m| m.vm_rss_kib).max().unwrap_or(0)
    }

    pub(super) fn allocs_per_sec(&self) -> f64 {
        self.engine.allocs as f64 / self.engine.elapsed.as_secs_f64()
    }

    /// The figures as a table, for a person (stdout, or stderr beside the
    /// JSON).
    pub(super) fn print_table(&self, out: &mut dyn std::io::Write) {
        let met = |ok: bool| if ok { "met" } else { "NOT met" };
        crate::commands::say_to!(
            out,
            "taskgate bench: {} build ({}, linked {}), /bin/true under full isolation",
            self.build,
            self.binary.display(),
            self.linkage.as_str(),
        );
        crate::commands::say_to!(
            out,
            "  {} interleaved runs each, {} ms pause before each",
            self.runs,
            self.pause.as_millis()
        );
        if self.build == "debug" {
            crate::commands::say_to!(out, "  (debug build: for real numbers use dist/build-release.sh, target/release/taskgate)");
        } else if self.linkage == Linkage::Dynamic {
            crate::commands::say_to!(out, "  (a dynamically linked executor: dist/build-release.sh links it statically, as installed)");
        }
        crate::commands::say_to!(out);
        crate::commands::say_to!(
            out,
            "start-to-exit wall time, ms        {:>8} {:>8} {:>8} {:>8}",
            "min",
            "median",
            "p90",
            "max"
        );
        let mut row = |name: &str, s: &Stats| {
            crate::commands::say_to!(
                out,
                "  {name:<32} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                s.min,
                s.median,
                s.p90,
                s.max
            )
        };
        row("taskgate launch+wait+shutdown", &self.taskgate);
        for (name, s) in [
            "launch (to exec'd)",
            "wait (to exit seen)",
            "shutdown (cleaned up)",
        ]
        .iter()
        .zip(&self.phases)
        {
            row(&format!("  {name}"), s);
        }
        row("runc run", &self.runc);
        row("unshare+chroot floor", &self.floor);
        crate::commands::say_to!(
            out,
            "  taskgate/runc: median ratio {:.3} (target <= {TARGET_RATIO}: {}), min ratio {:.3}",
            self.ratio(),
            met(self.ratio() <= TARGET_RATIO),
            self.taskgate.min / self.runc.min
        );
        crate::commands::say_to!(
            out,
            "  taskgate/floor median ratio {:.2}; floor/runc {:.3}",
            self.taskgate.median / self.floor.median,
            self.floor.median / self.runc.median
        );
        crate::commands::say_to!(out);
        let mean = self.mean_rss_kib();
        let n = self.memory.len() as f64;
        let avg = |f: fn(&Memory) -> u64| self.memory.iter().map(|m| f(m) as f64).sum::<f64>() / n;
        crate::commands::say_to!(
            out,
            "executor resident memory, {} running tasks (per executor process)",
            self.memory.len()
        );
        crate::commands::say_to!(
            out,
            "  VmRSS mean {:.0} KiB ({:.2} MiB), max {} KiB (target < 4 MiB: {})",
            mean,
            mean / 1024.0,
            self.max_rss_kib(),
            met(self.max_rss_kib() < RSS_TARGET_KIB)
        );
        crate::commands::say_to!(
            out,
            "  of which anon {:.0} KiB, file {:.0} KiB; PSS {:.0} KiB; {:.0} threads",
            avg(|m| m.rss_anon_kib),
            avg(|m| m.rss_file_kib),
            avg(|m| m.pss_kib),
            avg(|m| m.threads)
        );
        crate::commands::say_to!(out);
        let e = &self.engine_to_exec;
        crate::commands::say_to!(
            out,
            "engine: {} allocs, at most {} in flight, each stopped at Started",
            self.engine.allocs,
            self.engine.concurrency
        );
        crate::commands::say_to!(
            out,
            "  {:.1} allocs started-and-stopped per second ({:.0} ms each, {:.2} s total)",
            self.allocs_per_sec(),
            1e3 / self.allocs_per_sec(),
            self.engine.elapsed.as_secs_f64()
        );
        crate::commands::say_to!(
            out,
            "  submit-to-exec ms: p50 {:.2}, p99 {:.2} (min {:.2}, max {:.2})",
            e.median,
            e.p99,
            e.min,
            e.max
        );
        crate::commands::say_to!(
            out,
            "  {} of {} stops came before the task's SIGINT trap and waited out the {} ms kill_timeout",
            self.engine.escalated,
            self.engine.allocs,
            KILL_TIMEOUT.as_millis()
        );
        crate::commands::say_to!(out);
        match &self.search {
            Some(search) => search.print(out),
            None if cfg!(feature = "failpoints") => {
                crate::commands::say_to!(out, "search: skipped (--no-search)")
            }
            None => crate::commands::say_to!(
                out,
                "search: timed only by a build with fault points \
                 (dist/build-release.sh --features failpoints)"
            ),
        }
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        json!({
            "build": self.build,
            "binary": self.binary,
            "executor_linkage": self.linkage,
            "latency_ms": {
                "runs": self.runs,
                "pause_ms": self.pause.as_millis() as u64,
                "taskgate": self.taskgate,
                "taskgate_launch": self.phases[0],
                "taskgate_wait": self.phases[1],
                "taskgate_shutdown": self.phases[2],
                "runc": self.runc,
                "unshare_chroot_floor": self.floor,
                "median_ratio_taskgate_runc": round3(self.ratio()),
                "min_ratio_taskgate_runc": round3(self.taskgate.min / self.runc.min),
                "median_ratio_floor_runc": round3(self.floor.median / self.runc.median),
                "target_ratio": TARGET_RATIO,
                "target_met": self.ratio() <= TARGET_RATIO,
            },
            "executor_memory": {
                "tasks": self.memory,
                "vm_rss_mean_kib": round3(self.mean_rss_kib()),
                "vm_rss_max_kib": self.max_rss_kib(),
                "target_kib": RSS_TARGET_KIB,
                "target_met": self.max_rss_kib() < RSS_TARGET_KIB,
            },
            "engine": {
                "allocs": self.engine.allocs,
                "concurrency": self.engine.concurrency,
                "elapsed_s": round3(self.engine.elapsed.as_secs_f64()),
                "allocs_per_sec": round3(self.allocs_per_sec()),
                "submit_to_exec_ms": self.engine_to_exec,
                "stops_escalated_to_sigkill": self.engine.escalated,
                "kill_timeout_ms": KILL_TIMEOUT.as_millis() as u64,
            },
            "search": self.search.as_ref().map(Search::to_json),
        })
    }
}
