//! Nothing waits forever, and a shared pooled QP that fails is recovered.
//!
//! A SEND to a peer that never posts a receive waits for one (the engine matches
//! messages, see abi's engine/message.rs) and fails with `NoReceiver` at the request
//! deadline, breaking nothing: another process READs through the same pair throughout.
//! A request that does break the pair (a READ of memory deregistered under it) fails
//! with `RemoteError`; another process using the pair sees a few QpError completions
//! while the pair is recovered, not a dead pair.

use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::{Cqe, Reason};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Ring};

use crate::datapath::{collect, ok, open, run, Buf, LOCAL_GID};
use crate::harness::check;
use crate::isolation::Child;

/// The pool pair these tests use (service 3 of 2 pairs: pair 1), away from the others.
const SERVICE: u32 = 3;

/// Slack on top of the request deadline for an emulated machine.
const SLACK: Duration = Duration::from_secs(5);

/// A few jiffies, the resolution of the clock the deadline runs on.
const TICKS: Duration = Duration::from_millis(50);

/// The module's request deadline.
fn deadline() -> Result<Duration, String> {
    let ms = verify::guest::param("request_timeout_ms")?;
    ms.parse()
        .map(Duration::from_millis)
        .map_err(|e| format!("request_timeout_ms {ms:?}: {e}"))
}

/// A process that connects to `SERVICE` and READs its own exported memory through the
/// pair until `until` says stop, retrying a QpError after 5 ms; returns its READs and
/// QpErrors. Any other failure, wrong bytes, or 5 s without a good READ is an error.
fn reader(until: impl Fn(u64) -> bool) -> Result<(u64, u64), String> {
    let mut r = open(Builder::new(64))?;
    let (v, _) = ok(
        &mut r,
        Sqe::pair(1, LOCAL_GID, SERVICE as u16, SERVICE as u16),
    )?;
    let v = v as u32;
    let mut buf = Buf::new(512);
    buf.bytes_mut()[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mr, descriptor) = ok(&mut r, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
    let a = buf.addr();
    let (rmr, _) = ok(&mut r, Sqe::import_mr(3, v, a, 4096, descriptor))?;
    let read = |ud| Sqe::one_sided(Opcode::Read, ud, v, mr as u32, a + 2048, 8, rmr as u32, a);
    let (mut good, mut qp_errors, mut last_good) = (0u64, 0u64, Instant::now());
    while !until(good) {
        let c = run(&mut r, read(100 + good + qp_errors))?;
        match c.failure() {
            None => {
                good += 1;
                last_good = Instant::now();
                check(buf.bytes()[2048..2056] == buf.bytes()[..8], || {
                    "READ moved the wrong bytes".into()
                })?;
            }
            Some(Reason::QpError) => {
                qp_errors += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Some(other) => return Err(format!("READ: {other:?} ({c:?})")),
        }
        check(last_good.elapsed() < Duration::from_secs(5), || {
            format!("no good READ for 5 s ({qp_errors} QpError completions)")
        })?;
    }
    Ok((good, qp_errors))
}

pub fn unreceived_send_fails_by_the_deadline_breaking_nothing() -> Result<(), String> {
    let deadline = deadline()?;
    let mut r = open(Builder::new(64))?;
    // `v` sends; its peer connects and never posts a receive.
    let (v, _) = ok(
        &mut r,
        Sqe::pair(1, LOCAL_GID, SERVICE as u16, SERVICE as u16),
    )?;
    let (_peer, _) = ok(
        &mut r,
        Sqe::pair(2, LOCAL_GID, SERVICE as u16, SERVICE as u16),
    )?;
    let buf = Buf::new(8);
    let (mr, _) = ok(
        &mut r,
        Sqe::reg_mr(3, buf.addr(), 64, MrAccess::LOCAL_WRITE),
    )?;
    // Another process READs through the same pair while the SEND waits.
    let sent = Instant::now();
    let stop = sent + deadline;
    let reading = Child::spawn(move || {
        let (good, qp_errors) = reader(|_| Instant::now() > stop)?;
        check(qp_errors == 0, || {
            format!("{qp_errors} READs failed while a SEND waited")
        })?;
        Ok(good.to_string())
    })?;
    let c = run(
        &mut r,
        Sqe::two_sided(Opcode::Send, 5, v as u32, mr as u32, buf.addr(), 8),
    )?;
    let took = sent.elapsed();
    let reads = reading.join()?;
    println!(
        "  unreceived SEND: {:?} after {took:?} (deadline {deadline:?}); another process \
         made {reads} READs through the pair meanwhile, none failed",
        c.failure()
    );
    check(c.failure() == Some(Reason::NoReceiver), || {
        format!("SEND with no receive: {c:?}")
    })?;
    // The clock the deadline runs on ticks in jiffies: a few ms early is on time.
    check(took + TICKS >= deadline && took < deadline + SLACK, || {
        format!("the unreceived SEND took {took:?} to fail (deadline {deadline:?})")
    })
}

/// Breaks pool pair `service` maps to: a READ of memory this ring exported, deregistered
/// in the same batch before the READ is posted, meets an rkey that no longer exists (a
/// remote access error, which moves the RC pair to the error state). Its own virtual
/// QP, disconnected after, so its import goes too. `buf` holds the local MR `local` at
/// its start and room for the exported one at 2048. Returns the READ's CQE.
pub fn break_pair(r: &mut Ring, service: u32, local: u32, buf: &Buf) -> Result<Cqe, String> {
    let (v, _) = ok(r, Sqe::pair(9, LOCAL_GID, service as u16, service as u16))?;
    let v = v as u32;
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let target = buf.addr() + 2048;
    let (x, descriptor) = ok(r, Sqe::reg_mr(10, target, 64, access))?;
    let (rmr, _) = ok(r, Sqe::import_mr(11, v, target, 64, descriptor))?;
    for e in [
        Sqe::one_sided(
            Opcode::Read,
            12,
            v,
            local,
            buf.addr(),
            8,
            rmr as u32,
            target,
        ),
        Sqe::dereg_mr(13, x as u32),
    ] {
        // SAFETY: the local buffer is registered and outlives the wait.
        unsafe { r.submission().push(&e) }.map_err(|e| e.to_string())?;
    }
    let c = collect(r, 2)?;
    check(c[1].failure().is_none(), || format!("DEREG_MR: {:?}", c[1]))?;
    ok(r, Sqe::disconnect(14, v))?;
    Ok(c[0])
}

pub fn a_broken_pair_recovers() -> Result<(), String> {
    let mut r = open(Builder::new(64))?;
    let buf = Buf::new(512);
    let (local, _) = ok(
        &mut r,
        Sqe::reg_mr(2, buf.addr(), 64, MrAccess::LOCAL_WRITE),
    )?;
    let t = Instant::now();
    let c = break_pair(&mut r, SERVICE, local as u32, &buf)?;
    check(
        matches!(c.failure(), Some(Reason::RemoteError | Reason::QpError)),
        || format!("READ of deregistered memory: {c:?}"),
    )?;
    // Another process READs through the same pair: a few QpErrors while it recovers.
    let report = Child::spawn(|| {
        reader(|good| good > 0).map(|(_, qp_errors)| format!("{qp_errors} QpError completions"))
    })?
    .join()?;
    println!(
        "  pair broken ({:?}); another process READ through it {:?} later ({report})",
        c.failure(),
        t.elapsed()
    );
    Ok(())
}
