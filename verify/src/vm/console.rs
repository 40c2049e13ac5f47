//! Reading the guest console: the command's exit marker and the kernel log's verdict.

/// Printed by the guest's init with the command's exit status.
pub const EXIT_MARKER: &str = "KRCORE-EXIT=";
/// Printed by the guest's init, with what failed, when it could not set the guest up.
pub const SETUP_FAILED: &str = "KRCORE-SETUP-FAILED: ";
/// Printed by the guest's init, with the clocksource, when the guest has no TSC clock.
pub const COARSE_CLOCK: &str = "KRCORE-COARSE-CLOCK: ";
/// Printed by the guest's init when its setup is done and the command starts.
pub const RUN_START: &str = "KRCORE-RUN-START";
/// The guest's init dumps dmesg between these two lines after the command.
pub const DMESG_START: &str = "KRCORE-DMESG-START";
/// See [`DMESG_START`].
pub const DMESG_END: &str = "KRCORE-DMESG-END";

/// Kernel log patterns that fail a run whatever the command returned: the kernel's own
/// warnings and oopses, kmemleak, and the debug kernel's checkers (lockdep, sleeping in
/// atomic context, KASAN, list debugging), whose reports do not all carry a WARNING or
/// BUG header.
pub const FAILURE_PATTERNS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "Oops",
    "Kernel panic",
    "Call Trace",
    "general protection fault",
    "suspected memory leak",
    "UBSAN:",
    "KASAN:",
    "possible circular locking dependency",
    "possible recursive locking",
    "inconsistent lock state",
    "DEBUG_LOCKS_WARN_ON",
    "sleeping function called from invalid context",
    "list_add corruption",
    "list_del corruption",
    "blocked for more than",
];

/// What a finished console says.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The command's exit status, if the guest got that far.
    pub exit: Option<i32>,
    /// Kernel log lines that match a [`FAILURE_PATTERNS`] entry, from the time krcore
    /// was first loaded on.
    pub kernel_problems: Vec<String>,
    /// Matching lines from before krcore was loaded: the kernel's own boot, which no
    /// code of ours has run in yet (the debug kernel under TCG now and then reports an
    /// interrupt during early CPU setup). Shown, but not held against the run.
    pub boot_problems: Vec<String>,
    /// The dumped kernel log.
    pub dmesg: Vec<String>,
    /// What the guest's setup failed at, if it did.
    pub setup_failed: Option<String>,
    /// The clocksource the guest booted with, when it was not the TSC.
    pub coarse_clock: Option<String>,
    /// The command's own console lines (kernel lines left out), its last
    /// [`OUTPUT_KEPT`]: repeated under a failure's report, so that the end of a long
    /// log (all a CI summary may keep) still says why.
    pub output: Vec<String>,
    /// The command's first [`WHY_KEPT`] lines that say an error (see [`says_why`]):
    /// shown last under a failure's report, since the command's last lines are often a
    /// state dump printed after its error.
    pub why: Vec<String>,
}

/// How many of the command's error lines a [`Verdict`] keeps.
pub const WHY_KEPT: usize = 3;

/// Whether a line of the command's says why it failed: an error printed by a program
/// or the smoke script, not a counter of failures.
pub fn says_why(line: &str) -> bool {
    !line.contains("failed, all reasons")
        && [
            "Error",
            "error:",
            "FAILED",
            " failed",
            "timed out",
            " not ",
            "no ",
        ]
        .iter()
        .any(|w| line.contains(w))
}

/// How many of the command's last console lines a [`Verdict`] keeps.
pub const OUTPUT_KEPT: usize = 12;

/// The module's line once it is loaded: kernel lines before it (or, on the quiet live
/// console, before [`RUN_START`]) are the boot's.
pub const LOADED_MARKER: &str = "krcore: loaded";

/// Reads a whole console transcript.
pub fn judge(console: &str) -> Verdict {
    let mut v = Verdict::default();
    let mut in_dmesg = false;
    // Per stream: the live console, then the dmesg dump, which starts over at boot.
    let mut loaded = false;
    let mut running = false;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if line == DMESG_START {
            loaded = false;
        }
        // The live console is quiet (no info lines): the run's start, which the guest's
        // init prints after loading krcore, marks it there.
        loaded |= line.contains(LOADED_MARKER) || line == RUN_START;
        if line == RUN_START {
            running = true;
        } else if let Some(rest) = line.strip_prefix(EXIT_MARKER) {
            running = false;
            v.exit = rest.trim().parse().ok();
        } else if let Some(rest) = line.strip_prefix(SETUP_FAILED) {
            v.setup_failed = Some(rest.to_string());
        } else if let Some(rest) = line.strip_prefix(COARSE_CLOCK) {
            v.coarse_clock = Some(rest.to_string());
        } else if line == DMESG_START {
            in_dmesg = true;
        } else if line == DMESG_END {
            in_dmesg = false;
        } else if in_dmesg {
            v.dmesg.push(line.to_string());
        } else if running && !line.starts_with('[') {
            if v.output.len() == OUTPUT_KEPT {
                v.output.remove(0);
            }
            v.output.push(line.to_string());
            if v.why.len() < WHY_KEPT && says_why(line) {
                v.why.push(line.to_string());
            }
        }
        // A panic may strike before the dump: kernel lines anywhere on the console count,
        // but only kernel lines (they start with a "[ time]" stamp), so that a test's own
        // output never trips the scan.
        let is_kernel_line = in_dmesg || line.starts_with('[');
        if is_kernel_line && FAILURE_PATTERNS.iter().any(|p| line.contains(p)) {
            let list = if loaded {
                &mut v.kernel_problems
            } else {
                &mut v.boot_problems
            };
            if !list.iter().any(|l| l == line) {
                list.push(line.to_string());
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_commands_last_lines() {
        let mut c = String::from("boot says hi\nKRCORE-RUN-START\n");
        for i in 0..20 {
            c += &format!("line {i}\n[   3.0] a kernel line\n");
        }
        c += "KRCORE-EXIT=1\nKRCORE-DMESG-START\n[ 1.0] krcore: loaded\nKRCORE-DMESG-END\n";
        let v = judge(&c);
        let want: Vec<String> = (8..20).map(|i| format!("line {i}")).collect();
        assert_eq!(
            v.output, want,
            "the last {OUTPUT_KEPT}, kernel lines left out"
        );
    }

    #[test]
    fn keeps_the_commands_first_error_lines() {
        let c = "KRCORE-RUN-START\nconnecting\nError: connect: Unreachable\n\
                 b: failed; the module's peers file:\n  failed, all reasons 3\n\
                 b: no set in 30 s\nlast\nKRCORE-EXIT=1\n";
        let v = judge(c);
        assert_eq!(
            v.why,
            [
                "Error: connect: Unreachable",
                "b: failed; the module's peers file:",
                "b: no set in 30 s"
            ],
            "counters left out"
        );
    }

    #[test]
    fn clean_run() {
        let v = judge(
            "boot\nKRCORE-EXIT=0\nKRCORE-DMESG-START\n[    1.0] krcore: loaded\nKRCORE-DMESG-END\n",
        );
        assert_eq!(v.exit, Some(0));
        assert!(v.kernel_problems.is_empty());
        assert_eq!(v.dmesg.len(), 1);
    }

    #[test]
    fn oops_fails_even_with_exit_zero() {
        let v = judge("KRCORE-EXIT=0\nKRCORE-DMESG-START\n[ 1.0] krcore: loaded, ABI version 1\n[ 2.0] BUG: kernel NULL pointer dereference\n[ 2.0] Call Trace:\nKRCORE-DMESG-END\n");
        assert_eq!(v.kernel_problems.len(), 2);
    }

    #[test]
    fn debug_checkers_fail_the_run() {
        for report in [
            "[ 3.0] ==================================================================\n[ 3.0] BUG: KASAN: slab-use-after-free in krcore_rs_release+0x1/0x2",
            "[ 3.0] WARNING: possible circular locking dependency detected",
            "[ 3.0] BUG: sleeping function called from invalid context at mm/gup.c:1",
            "[ 3.0] list_del corruption. prev->next should be ff11, but was 0",
        ] {
            let v = judge(&format!(
                "KRCORE-EXIT=0\nKRCORE-DMESG-START\n[ 1.0] krcore: loaded\n{report}\nKRCORE-DMESG-END\n"
            ));
            assert!(!v.kernel_problems.is_empty(), "{report}");
        }
    }

    #[test]
    fn boot_reports_before_the_module_are_set_apart() {
        let boot = "[ 0.1] BUG: KASAN: wild-memory-access in do_raw_spin_lock+0xe5/0x2a0";
        let console = format!(
            "{boot}\n[ 1.0] krcore: loaded\nKRCORE-EXIT=0\nKRCORE-DMESG-START\n{boot}\n\
             [ 1.0] krcore: loaded\n[ 9.0] krcore: unloaded\nKRCORE-DMESG-END\n"
        );
        let v = judge(&console);
        assert!(v.kernel_problems.is_empty());
        assert_eq!(v.boot_problems, [boot]);
        let v = judge(&console.replace("[ 9.0] krcore: unloaded", "[ 9.0] WARNING: at krcore"));
        assert_eq!(
            v.kernel_problems.len(),
            1,
            "after the load, everything counts"
        );
    }

    #[test]
    fn a_quiet_console_counts_from_the_runs_start() {
        // No "krcore: loaded" on the live console (it is quiet), and no dump (the guest
        // hung after the report): the report still counts, and is not called the boot's.
        let kasan = "[ 71.0] BUG: KASAN: slab-use-after-free in krcore_shim_poll_cq";
        let v = judge(&format!("KRCORE-RUN-START\n{kasan}\n"));
        assert_eq!((v.kernel_problems.len(), v.boot_problems.len()), (1, 0));
    }

    #[test]
    fn test_output_is_not_kernel_log() {
        let v = judge("test says WARNING: nothing\nKRCORE-EXIT=1\n");
        assert_eq!(v.exit, Some(1));
        assert!(v.kernel_problems.is_empty());
    }

    #[test]
    fn setup_failure_is_named() {
        let v = judge("KRCORE-SETUP-FAILED: insmod /x/krcore.ko\n");
        assert_eq!(v.setup_failed.as_deref(), Some("insmod /x/krcore.ko"));
        assert_eq!(v.exit, None);
    }

    #[test]
    fn panic_without_exit() {
        let v =
            judge("[ 1.0] krcore: loaded\n[ 3.1] Kernel panic - not syncing: Fatal exception\n");
        assert_eq!(v.exit, None);
        assert_eq!(v.kernel_problems.len(), 1);
        // Before the module: set apart, but the run still fails for want of an exit.
        let v = judge("[ 0.1] Kernel panic - not syncing: Fatal exception\n");
        assert_eq!((v.exit, v.boot_problems.len()), (None, 1));
    }
}
