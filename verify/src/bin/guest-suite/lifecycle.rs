//! Module lifecycle: unload is refused while a file is open, and load/unload cycles and
//! file open/close leave nothing behind.

use std::path::Path;
use std::time::Duration;

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Builder, Device};

use crate::harness::{check, fails_as, sh};

const KMEMLEAK: &str = "/sys/kernel/debug/kmemleak";

fn loaded() -> bool {
    Path::new("/sys/module/krcore").exists()
}

fn module_path() -> Result<String, String> {
    std::env::var("KRCORE_KO")
        .map_err(|_| "KRCORE_KO is not set (the VM runner sets it with --module)".into())
}

/// kB figures of /proc/meminfo that a leaking module would grow, read after every slab
/// cache gave back its empty and per-CPU partial slabs: those come and go with the
/// kernel's other work (hundreds of kB between two readings otherwise), while a leaked
/// object pins its slab.
fn meminfo() -> Result<[(String, i64); 3], String> {
    shrink_slabs();
    let s = std::fs::read_to_string("/proc/meminfo").map_err(|e| e.to_string())?;
    let get = |key: &str| -> Result<(String, i64), String> {
        let line = s
            .lines()
            .find(|l| l.starts_with(&format!("{key}:")))
            .ok_or(format!("{key} not in meminfo"))?;
        let kb = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .ok_or(format!("bad line {line}"))?;
        Ok((key.to_string(), kb))
    };
    Ok([get("SUnreclaim")?, get("VmallocUsed")?, get("Percpu")?])
}

/// Opens the device, queries it, sets up and maps a ring (with a polling thread when
/// `sqpoll`), runs a NOP through it, and closes everything.
fn use_device(sqpoll: bool) -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    dev.query_devices().map_err(|e| e.to_string())?;
    let b = if sqpoll {
        Builder::new(16).sqpoll(100)
    } else {
        Builder::new(16)
    };
    let mut ring = b.build(dev).map_err(|e| e.to_string())?;
    // SAFETY: a NOP names no memory.
    unsafe { ring.submission().push(&Sqe::nop(1)) }.map_err(|e| e.to_string())?;
    // With a polling thread the CQE may come after submit returns: wait for it.
    ring.submit_and_wait(1).map_err(|e| e.to_string())?;
    check(ring.completions().count() == 1, || {
        "NOP did not complete".into()
    })
}

/// Asks each SLUB cache to free the slabs it holds empty (its `shrink` file); a kernel
/// without /sys/kernel/slab is read as it is.
fn shrink_slabs() {
    let Ok(caches) = std::fs::read_dir("/sys/kernel/slab") else {
        return;
    };
    for cache in caches.flatten() {
        // A cache that refuses (an alias, a read-only file) is read as it is.
        let _ = std::fs::write(cache.path().join("shrink"), "1");
    }
}

/// Loads the module again with `params` (none: its defaults).
pub(crate) fn reload(params: &[&str]) -> Result<(), String> {
    let ko = module_path()?;
    sh(&["rmmod", "krcore"])?;
    let mut argv = vec!["insmod", ko.as_str()];
    argv.extend_from_slice(params);
    sh(&argv).map(|_| ())
}

fn cycle(ko: &str, sqpoll: bool) -> Result<(), String> {
    sh(&["insmod", ko])?;
    use_device(sqpoll)?;
    sh(&["rmmod", "krcore"]).map(|_| ())
}

/// Whether the kernel runs kmemleak (the test kernels do; a distribution's does not):
/// its allocation hook, which every slab allocation calls, is in the symbol table.
fn kmemleak() -> bool {
    std::fs::read_to_string("/proc/kallsyms")
        .is_ok_and(|syms| syms.lines().any(|l| l.ends_with(" kmemleak_alloc")))
}

/// Forgets what kmemleak has seen so far, where the kernel runs it.
fn clear_kmemleak() -> Result<(), String> {
    if !kmemleak() {
        return Ok(());
    }
    std::fs::write(KMEMLEAK, "clear").map_err(|e| format!("{KMEMLEAK}: {e}"))
}

/// Scans with kmemleak; fails with the first reports if it finds objects leaked since
/// the last clear. On a kernel without kmemleak it says so: the debug kernel's run
/// (make vm-test-debug) is the one that judges leaks.
fn check_kmemleak(what: &str) -> Result<(), String> {
    if !kmemleak() {
        println!(
            "  kmemleak is not in this kernel: leaks after {what} are judged on the debug kernel"
        );
        return Ok(());
    }
    // kmemleak reports an object only once it is older than 5 s, and only when its
    // checksum did not change since the previous scan: so wait, then scan twice.
    std::thread::sleep(Duration::from_secs(6));
    for _ in 0..2 {
        std::fs::write(KMEMLEAK, "scan").map_err(|e| format!("{KMEMLEAK}: {e}"))?;
    }
    let report = std::fs::read_to_string(KMEMLEAK).map_err(|e| format!("{KMEMLEAK}: {e}"))?;
    let leaks = report.matches("unreferenced object").count();
    println!("  kmemleak after {what}: {leaks} reports");
    let head: Vec<&str> = report.lines().take(24).collect();
    check(leaks == 0, || {
        format!(
            "kmemleak found {leaks} leaked objects after {what}; first reports:\n{}",
            head.join("\n")
        )
    })
}

/// Whether the kernel runs KASAN: its report function is in the symbol table (read
/// from kallsyms, which unlike the boot log cannot have scrolled away).
fn kasan() -> bool {
    std::fs::read_to_string("/proc/kallsyms")
        .is_ok_and(|syms| syms.lines().any(|l| l.ends_with(" kasan_report")))
}

/// rmmod is refused while a file of the module's is open: /dev/krcore, and each
/// inspection file in debugfs (closed after the module went, it would be released
/// through the module's freed file operations).
pub fn unload_refused_while_open() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let r = sh(&["rmmod", "krcore"]);
    check(r.is_err() && loaded(), || {
        "rmmod succeeded while /dev/krcore was open".into()
    })?;
    println!("  rmmod refused: {}", r.unwrap_err());
    drop(dev);
    check(loaded(), || "module gone".into())?;
    for name in ["counters", "peers"] {
        let path = format!("/sys/kernel/debug/krcore/{name}");
        let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let r = sh(&["rmmod", "krcore"]);
        let refused = r.is_err() && loaded();
        if !refused {
            // Loaded again before the file closes, so the test's failure is reported
            // rather than the kernel's.
            let _ = module_path().and_then(|ko| sh(&["insmod", &ko]));
        }
        check(refused, || format!("rmmod succeeded while {path} was open"))?;
        println!("  rmmod refused with {path} open");
        drop(file);
    }
    check(loaded(), || "module gone".into())
}

pub fn open_close_no_kmemleak() -> Result<(), String> {
    clear_kmemleak()?;
    for i in 0..200 {
        use_device(i % 20 == 0)?;
    }
    check_kmemleak("200 open/query/ring/close")
}

pub fn load_unload_50_cycles() -> Result<(), String> {
    let ko = module_path()?;
    sh(&["rmmod", "krcore"])?;
    // Warm-up cycles first, so one-time allocations (sysfs nodes, caches) are not counted.
    for i in 0..3 {
        cycle(&ko, i == 0)?;
    }
    clear_kmemleak()?;
    let result = judge_growth(&ko);
    let reload = sh(&["insmod", &ko]);
    result?;
    reload?;
    check_kmemleak("50 load/unload cycles")
}

/// Budgets far below one leaked module image (~100 kB of text and data per cycle would
/// be 5 MB) yet above most of the noise of unrelated kernel activity: 40 to 400 kB of
/// SUnreclaim over 50 cycles, in spikes that do not repeat. A leak is a trend, so a
/// window over budget is judged by a second one: the figure fails only if both grew
/// past it. Under KASAN, freed slab objects wait in its quarantine, counted in
/// SUnreclaim (the previous module grew it by 632 kB there as well): kmemleak judges
/// that kernel.
fn judge_growth(ko: &str) -> Result<(), String> {
    let budget_kb = [256i64, 256, 64];
    let kasan = kasan();
    let mut over = [false; 3];
    for window in 0..2 {
        let before = meminfo()?;
        for i in 0..50 {
            cycle(ko, i % 10 == 0).map_err(|e| format!("cycle {i}: {e}"))?;
        }
        let after = meminfo()?;
        let mut any = false;
        for (k, ((name, b), (_, a))) in before.iter().zip(after.iter()).enumerate() {
            let judged = !(kasan && name == "SUnreclaim") && (window == 0 || over[k]);
            let budget = budget_kb[k];
            println!(
                "  {name}: {b} kB -> {a} kB ({:+} kB over 50 cycles, budget {})",
                a - b,
                if judged {
                    format!("{budget} kB")
                } else {
                    "none here".into()
                }
            );
            over[k] = judged && a - b > budget;
            any |= over[k];
            check(!(over[k] && window == 1), || {
                format!(
                    "{name} grew by {} kB in each of two runs of 50 load/unload cycles",
                    a - b
                )
            })?;
        }
        if !any {
            return Ok(());
        }
        println!("  over budget: 50 more cycles judge whether it is a trend");
    }
    Ok(())
}

/// A CONNECT to another node that comes before the pool was built (here prewarm is
/// off; with it on, a CONNECT right after the load can beat the prewarm work) builds
/// the pool on the port's address and dials the node: `Unreachable` here (nothing
/// listens there), never `Verbs` as if it were a loopback CONNECT to a stranger's
/// address; and the pool is then built, as a loopback CONNECT finds.
pub fn first_remote_connect_builds_the_pool() -> Result<(), String> {
    let ko = module_path()?;
    sh(&["rmmod", "krcore"])?;
    let result = sh(&["insmod", &ko, "prewarm=0"]).and_then(|_| {
        let dev = Device::open().map_err(|e| e.to_string())?;
        let own = dev.query_devices().map_err(|e| e.to_string())?.node_gid();
        let mut ring = Builder::new(8).build(dev).map_err(|e| e.to_string())?;
        fails_as(
            "a first CONNECT, to another node, with no pool",
            ring.connect("192.0.2.99", 0),
            |e| e.reason() == Some(Reason::Unreachable),
            "it did not fail Unreachable",
        )?;
        let gid = own.ok_or("no RoCE v2 IPv4 GID")?;
        let vqp = ring
            .connect(gid, 0)
            .map_err(|e| format!("loopback CONNECT: {e}"))?;
        ring.disconnect(vqp).map_err(|e| e.to_string())
    });
    let _ = sh(&["rmmod", "krcore"]);
    let reload = sh(&["insmod", &ko]);
    result?;
    reload.map(|_| ())
}
