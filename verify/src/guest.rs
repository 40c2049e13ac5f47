//! Guest-side helpers shared by the VM suite and the in-VM figures: the loaded module's
//! parameters, the CPU time a thread has used, the clock timings need, and the stages
//! of a short-lived process timed from its spawn.

use std::time::{Duration, Instant};

const PARAMS: &str = "/sys/module/krcore/parameters";

/// The value of module parameter `name`.
pub fn param(name: &str) -> Result<String, String> {
    let path = format!("{PARAMS}/{name}");
    let v = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    Ok(v.trim().to_string())
}

/// A module parameter set for a while, restored on drop.
pub struct Param {
    name: &'static str,
    old: String,
}

impl Param {
    /// Sets parameter `name` to `value` (it must be writable: mode 0644).
    pub fn set(name: &'static str, value: &str) -> Result<Param, String> {
        let old = param(name)?;
        let path = format!("{PARAMS}/{name}");
        std::fs::write(&path, value).map_err(|e| format!("{path}: {e}"))?;
        Ok(Param { name, old })
    }
}

impl Drop for Param {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("{PARAMS}/{}", self.name), &self.old);
    }
}

/// getrusage(2) for `who` (`RUSAGE_THREAD` or `RUSAGE_SELF`).
fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage to fill.
    unsafe { libc::getrusage(who, &mut ru) };
    ru
}

/// A timeval as a Duration.
fn tv(t: libc::timeval) -> Duration {
    Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000)
}

/// CPU time (user and system) the calling thread has used.
pub fn thread_cpu() -> Duration {
    let ru = rusage(libc::RUSAGE_THREAD);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Waits (up to `limit`) until the guest's clocksource is the TSC. Multi-guest runs boot
/// without waiting for it (their functional tests need no fine clock), and the kernel
/// switches only once its refined calibration is done, which on a loaded host comes
/// seconds after boot; until then it runs on jiffies, whose 4 ms ticks would be every
/// timing's resolution. Programs that time things call this first.
pub fn wait_for_tsc(limit: Duration) -> Result<(), String> {
    let file = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    let t = std::time::Instant::now();
    loop {
        let clock = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        if clock.trim() == "tsc" {
            return Ok(());
        }
        if t.elapsed() > limit {
            return Err(format!(
                "timings need the TSC clocksource; this guest is still on {:?} after {limit:?} (4 ms ticks on jiffies)",
                clock.trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for a launcher and the processes it spawns,
/// so a process's stages can count from its spawn.
pub fn mono_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// What a stretch of a process's life cost it besides wall time: CPU time (user and
/// system, every thread) and page faults (minor and major). A fresh process's first
/// touches of its code and data are faults, each a trap (and, under emulation, a
/// translation of the code it reaches).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cost {
    /// CPU time, microseconds.
    pub cpu_us: f64,
    /// Page faults.
    pub faults: u64,
}

impl Cost {
    /// The calling process's cost from its start.
    pub fn now() -> Cost {
        let ru = rusage(libc::RUSAGE_SELF);
        Cost {
            cpu_us: (tv(ru.ru_utime) + tv(ru.ru_stime)).as_secs_f64() * 1e6,
            faults: (ru.ru_minflt + ru.ru_majflt) as u64,
        }
    }

    /// What was spent from `earlier` to `self`.
    pub fn since(self, earlier: Cost) -> Cost {
        Cost {
            cpu_us: self.cpu_us - earlier.cpu_us,
            faults: self.faults.saturating_sub(earlier.faults),
        }
    }
}

/// A short-lived process's bootstrap, stage by stage: (name, microseconds), the first
/// being its exec (from the launcher's spawn to now); beside each, its [`Cost`] where
/// it was measured here.
pub struct Stages {
    /// The stages so far, in order.
    pub list: Vec<(String, f64)>,
    /// Each stage's cost, in the same order (`None`: timed elsewhere); the exec's is
    /// the process's before its main (the loader's and the runtime's).
    pub costs: Vec<Option<Cost>>,
    last: Instant,
    last_cost: Cost,
}

impl Stages {
    /// Starts with the exec: from `spawn_ns` ([`mono_ns`] in the launcher) to now.
    pub fn new(spawn_ns: u64) -> Stages {
        let cost = Cost::now();
        Stages {
            list: vec![(
                "exec".into(),
                mono_ns().saturating_sub(spawn_ns) as f64 / 1e3,
            )],
            costs: vec![Some(cost)],
            last: Instant::now(),
            last_cost: cost,
        }
    }

    /// Runs `f` as stage `name`, timed (and its cost counted) from the end of the
    /// previous stage.
    pub fn time<T, E>(&mut self, name: &str, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let v = f()?;
        self.list
            .push((name.into(), self.last.elapsed().as_secs_f64() * 1e6));
        let cost = Cost::now();
        self.costs.push(Some(cost.since(self.last_cost)));
        self.last = Instant::now();
        self.last_cost = cost;
        Ok(v)
    }

    /// Adds a stage timed elsewhere; the next counts from now.
    pub fn push(&mut self, name: &str, d: Duration) {
        self.list.push((name.into(), d.as_secs_f64() * 1e6));
        self.costs.push(None);
        self.last = Instant::now();
        self.last_cost = Cost::now();
    }

    /// Adds a verbs client's rdma_cm stages, each under its own name.
    pub fn push_cm(&mut self, s: &crate::cm_verbs::Stages) {
        for (name, d) in [
            ("event channel+id", s.id),
            ("resolve addr", s.resolve_addr),
            ("resolve route", s.resolve_route),
            ("PD+CQ+QP", s.qp),
            ("REG_MR", s.reg_mr),
            ("connect", s.connect),
        ] {
            self.push(name, d);
        }
    }
}
