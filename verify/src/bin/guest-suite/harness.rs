//! A tiny test harness: run, time and report each test; never stop at the first failure.

use std::process::{Command, ExitCode};
use std::time::Instant;

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
        let result = std::panic::catch_unwind(t.run).unwrap_or_else(|p| {
            Err(p
                .downcast_ref::<String>()
                .cloned()
                .or(p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default())
        });
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
