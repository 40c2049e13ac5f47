//! Guest-side helpers shared by the VM suite and the in-VM figures: the loaded module's
//! parameters, the CPU time a thread has used, and the clock timings need.

use std::time::Duration;

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

/// CPU time (user and system) the calling thread has used.
pub fn thread_cpu() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage to fill.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
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
