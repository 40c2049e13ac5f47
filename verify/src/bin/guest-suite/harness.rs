//! A tiny test harness: run, time and report each test; never stop at the first failure.

use std::process::{Command, ExitCode};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one test may run before the harness declares it hung (the slowest, 50
/// module load/unload cycles, takes about 150 s on the debug kernel).
const HUNG_AFTER: Duration = Duration::from_secs(420);

/// Watches one test: if it has not finished within [`HUNG_AFTER`], prints where every
/// thread of this process is in the kernel and the kernel's blocked tasks (sysrq `w`,
/// into the kernel log the VM runner prints), and exits, so a hang fails the run in
/// minutes with its whereabouts instead of at the VM's timeout with none. Dropping the
/// returned sender ends the watch.
fn watchdog(name: &'static str) -> mpsc::Sender<()> {
    let (done, wait) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if wait.recv_timeout(HUNG_AFTER) != Err(mpsc::RecvTimeoutError::Timeout) {
            return;
        }
        println!(
            "test {name} ... HUNG (no end after {} s); its threads:",
            HUNG_AFTER.as_secs()
        );
        if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
            for t in tasks.flatten() {
                let p = t.path();
                let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
                let stack = std::fs::read_to_string(p.join("stack")).unwrap_or_default();
                println!(
                    "  task {} ({}):\n{stack}",
                    t.file_name().to_string_lossy(),
                    comm.trim()
                );
            }
        }
        let _ = std::fs::write("/proc/sysrq-trigger", "w");
        std::process::exit(2);
    });
    done
}

/// A named test.
pub struct Test {
    pub name: &'static str,
    pub run: fn() -> Result<(), String>,
}

/// Runs the tests whose names contain any filter (all when none), prints a verdict per
/// test and the closing `N passed, N failed` line.
pub fn run_all(tests: &[Test], filters: &[String]) -> ExitCode {
    let (mut passed, mut failed) = (0, 0);
    for t in tests
        .iter()
        .filter(|t| filters.is_empty() || filters.iter().any(|f| t.name.contains(f.as_str())))
    {
        let start = Instant::now();
        let watch = watchdog(t.name);
        let result = std::panic::catch_unwind(t.run).unwrap_or_else(|p| {
            Err(p
                .downcast_ref::<String>()
                .cloned()
                .or(p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default())
        });
        drop(watch);
        let ms = start.elapsed().as_millis();
        match result {
            Ok(()) => {
                passed += 1;
                println!("test {} ... ok ({ms} ms)", t.name);
            }
            Err(e) => {
                failed += 1;
                println!("test {} ... FAILED ({ms} ms): {e}", t.name);
            }
        }
    }
    println!("guest-suite: {passed} passed, {failed} failed");
    if failed == 0 && passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs a command; returns its stdout, or its stderr as the error when it fails.
pub fn sh(argv: &[&str]) -> Result<String, String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| format!("{}: {e}", argv[0]))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Fails with `msg` unless `cond`.
pub fn check(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// Prints how `what` ended (`  what: error`) and fails with `want` unless it failed as
/// `is` says.
pub fn fails_as<T>(
    what: &str,
    r: Result<T, krcore_uring::Error>,
    is: impl FnOnce(&krcore_uring::Error) -> bool,
    want: &str,
) -> Result<(), String> {
    let e = r.err();
    println!(
        "  {what}: {}",
        e.as_ref().map(|e| e.to_string()).unwrap_or_default()
    );
    check(e.as_ref().is_some_and(is), || format!("{what}: {want}"))
}
