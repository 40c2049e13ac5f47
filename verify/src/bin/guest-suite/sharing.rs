//! Several processes on the same pooled QPs, a process killed with requests in flight,
//! and connect/disconnect churn.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device};

use crate::datapath::{collect, ok, Buf, LOCAL_GID};
use crate::harness::{check, sh};

/// Service the sharing workers connect to: they share the two QPs of one pooled pair.
const SERVICE: u32 = 1;
/// A port on the other pooled pair: the kernel picks the pair as the link's port key
/// (abi's `port_key`) modulo the pairs, here `(s + s) ^ (s * s)`: odd for 1, even for 2.
const OTHER_SERVICE: u32 = 2;
const READS: u64 = 64;

/// `guest-suite worker ID run|hang [SERVICE]`: a separate process reading and writing
/// its own memory through a shared pooled QP of `service`; exits 0 only if every
/// completion is its own and right.
pub fn worker(id: u64, hang: bool, service: Option<u32>) -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(64).build(dev).map_err(|e| e.to_string())?;
    let service = service.unwrap_or(SERVICE);
    let (v, qpn) = ok(
        &mut r,
        Sqe::pair(1, LOCAL_GID, service as u16, service as u16),
    )?;
    let v = v as u32;
    let mut buf = Buf::new(512);
    for (i, b) in buf.bytes_mut()[..1024].iter_mut().enumerate() {
        *b = (id as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let (mr, descriptor) = ok(&mut r, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
    let (rmr, _) = ok(&mut r, Sqe::import_mr(3, v, buf.addr(), 4096, descriptor))?;
    let (mr, rmr, a) = (mr as u32, rmr as u32, buf.addr());
    println!("  worker {id}: service {service} qpn {qpn}");
    // Batches of READs of its own first KiB into the second KiB, tagged with its id.
    let tag = |i: u64| (id << 32) | i;
    for batch in 0..READS / 16 {
        for k in 0..16 {
            let i = batch * 16 + k;
            let off = (i % 128) * 8;
            let sqe = Sqe::one_sided(Opcode::Read, tag(i), v, mr, a + 1024 + off, 8, rmr, a + off);
            // SAFETY: the buffer is registered and outlives the wait.
            unsafe { r.submission().push(&sqe) }.map_err(|e| e.to_string())?;
        }
        if hang {
            r.submit().map_err(|e| e.to_string())?;
            continue;
        }
        for c in collect(&mut r, 16)? {
            check(c.user_data >> 32 == id, || {
                format!(
                    "worker {id} got a completion of worker {}",
                    c.user_data >> 32
                )
            })?;
            check(c.res == 8, || format!("worker {id}: {c:?}"))?;
        }
    }
    if hang {
        // Killed here, requests in flight.
        std::thread::sleep(Duration::from_secs(60));
    }
    let n = (READS * 8) as usize;
    check(buf.bytes()[1024..1024 + n] == buf.bytes()[..n], || {
        format!("worker {id}: READ data differs")
    })?;
    Ok(())
}

fn spawn(id: u64, hang: bool) -> Result<std::process::Child, String> {
    spawn_on(id, hang, SERVICE, Stdio::inherit())
}

fn spawn_on(id: u64, hang: bool, service: u32, out: Stdio) -> Result<std::process::Child, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    Command::new(me)
        .args(["worker", &id.to_string(), if hang { "hang" } else { "run" }])
        .arg(service.to_string())
        .stdout(out)
        .spawn()
        .map_err(|e| e.to_string())
}

pub fn processes_share_pooled_qps() -> Result<(), String> {
    let kids: Vec<_> = (1..=4)
        .map(|id| spawn(id, false))
        .collect::<Result<_, _>>()?;
    for (i, mut k) in kids.into_iter().enumerate() {
        let st = k.wait().map_err(|e| e.to_string())?;
        check(st.success(), || format!("worker {} failed: {st}", i + 1))?;
    }
    println!("  4 processes x {READS} READs on one pooled pair: each got exactly its own");
    Ok(())
}

/// Processes on different pooled pairs post, complete and are routed at once (each
/// pair under its own QP locks, every ring under its own): 3 workers on each of two
/// services start together; every one gets exactly its own completions and data, and
/// the two services really were on different physical QPs.
pub fn rings_on_different_qps_at_once() -> Result<(), String> {
    let kids: Vec<_> = (1..=6u64)
        .map(|id| {
            let service = if id % 2 == 0 { SERVICE } else { OTHER_SERVICE };
            spawn_on(id, false, service, Stdio::piped()).map(|k| (service, k))
        })
        .collect::<Result<_, _>>()?;
    let mut qpns = [Vec::new(), Vec::new()];
    for (service, k) in kids {
        let out = k.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        check(out.status.success(), || {
            format!("a worker of service {service} failed: {}", out.status)
        })?;
        let qpn: u64 = text
            .split("qpn ")
            .nth(1)
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("no qpn in the worker's output: {text}"))?;
        qpns[service as usize - 1].push(qpn);
    }
    check(qpns[0].iter().all(|q| !qpns[1].contains(q)), || {
        format!("the two services shared a physical QP: {qpns:?}")
    })?;
    println!("  6 processes x {READS} READs at once on two pooled pairs: each got exactly its own");
    Ok(())
}

/// MRs on the device, as `rdma` lists them.
fn mrs() -> Result<usize, String> {
    Ok(sh(&["rdma", "res", "show", "mr"])?.lines().count())
}

pub fn kill_9_in_flight_cleans_up() -> Result<(), String> {
    // The module's own keys (fast-registration MRs: the device's, and the pool's once it
    // is built) are always listed: counted first, with the pool built.
    {
        let dev = Device::open().map_err(|e| e.to_string())?;
        let mut r = Builder::new(8).build(dev).map_err(|e| e.to_string())?;
        ok(&mut r, Sqe::connect(0, LOCAL_GID, 0))?;
    }
    let base = mrs()?;
    let mut k = spawn(9, true)?;
    std::thread::sleep(Duration::from_millis(300));
    // The probe below must see a live MR, or its "none left" would prove nothing.
    let live = mrs()?;
    check(live == base + 1, || {
        format!("expected the module's {base} MRs and the worker's one, rdma shows {live}")
    })?;
    k.kill().map_err(|e| e.to_string())?;
    let st = k.wait().map_err(|e| e.to_string())?;
    println!("  worker killed: {st}");
    // The device still serves others after the kill.
    let mut w = spawn(10, false)?;
    let st = w.wait().map_err(|e| e.to_string())?;
    check(st.success(), || {
        format!("worker after the kill failed: {st}")
    })?;
    // Both processes are gone: every MR they registered (pinned pages) is released.
    let left = mrs()?;
    println!(
        "  MRs left after both exited: {} (the module's {base})",
        left
    );
    check(left == base, || {
        format!(
            "{} of the workers' MRs still registered",
            left as i64 - base as i64
        )
    })
}

pub fn thousand_connect_disconnect_cycles() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(64).build(dev).map_err(|e| e.to_string())?;
    ok(&mut r, Sqe::connect(0, LOCAL_GID, 0)).map(|_| ())?; // pool warm
    let slab = || -> i64 {
        let s = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("SUnreclaim:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let before = slab();
    let t = Instant::now();
    let mut worst = Duration::ZERO;
    for i in 0..1000u64 {
        let c0 = Instant::now();
        let (v, _) = ok(&mut r, Sqe::connect(i, LOCAL_GID, 0))?;
        worst = worst.max(c0.elapsed());
        ok(&mut r, Sqe::disconnect(i, v as u32))?;
    }
    let per = t.elapsed() / 1000;
    let after = slab();
    println!("  1000 CONNECT+DISCONNECT: {per:?} per cycle (worst CONNECT {worst:?}), SUnreclaim {before} -> {after} kB");
    check(after - before < 256, || {
        format!("SUnreclaim grew {} kB over 1000 cycles", after - before)
    })
}
