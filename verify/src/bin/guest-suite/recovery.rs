//! A shared pooled QP that fails is recovered, and nothing waits forever: a SEND to a
//! peer with no receive posted exhausts the pair's finite RNR retries (the pool's QPs
//! retry a bounded number of times, never indefinitely), fails the RC pair on the wire,
//! and completes with an error in bounded time; another process using that pair sees a
//! few QpError completions, not a dead pair.

use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::Builder;

use crate::datapath::{ok, open, run, Buf, LOCAL_GID};
use crate::harness::check;
use crate::isolation::Child;

/// The pool pair this test breaks (service 3 of 2 pairs: pair 1), away from the others.
const SERVICE: u32 = 3;

/// How long a SEND nobody receives may take to fail: the RNR retries (a few ms on
/// hardware) stretched by emulation.
const SEND_BOUND: Duration = Duration::from_secs(5);

pub fn unreceived_send_fails_the_pair_which_recovers() -> Result<(), String> {
    let mut r = open(Builder::new(64))?;
    // `v` sends; nobody posts a receive on the other end of the pair.
    let (v, _) = ok(&mut r, Sqe::connect(1, LOCAL_GID, SERVICE))?;
    let buf = Buf::new(8);
    let (mr, _) = ok(
        &mut r,
        Sqe::reg_mr(2, buf.addr(), 64, MrAccess::LOCAL_WRITE),
    )?;
    let sent = Instant::now();
    let c = run(
        &mut r,
        Sqe::two_sided(Opcode::Send, 5, v as u32, mr as u32, buf.addr(), 8),
    )?;
    let send_took = sent.elapsed();
    check(
        matches!(c.failure(), Some(Reason::RemoteError | Reason::QpError)),
        || format!("SEND with no receive anywhere: {c:?}"),
    )?;
    check(send_took < SEND_BOUND, || {
        format!("the unreceived SEND took {send_took:?} to fail")
    })?;
    // Another process READs through the same pair: a few QpErrors while it recovers.
    let reader = Child::spawn(|| {
        let mut r = open(Builder::new(64))?;
        let (v, _) = ok(&mut r, Sqe::connect(1, LOCAL_GID, SERVICE))?;
        let v = v as u32;
        let mut buf = Buf::new(512);
        buf.bytes_mut()[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
        let (mr, descriptor) = ok(&mut r, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
        let a = buf.addr();
        let (rmr, _) = ok(&mut r, Sqe::import_mr(3, v, a, 4096, descriptor))?;
        let read = |ud| Sqe::one_sided(Opcode::Read, ud, v, mr as u32, a + 2048, 8, rmr as u32, a);
        let start = Instant::now();
        let (mut tries, mut qp_errors) = (0u64, 0);
        loop {
            tries += 1;
            let c = run(&mut r, read(100 + tries))?;
            match c.failure() {
                None => break,
                Some(Reason::QpError) => qp_errors += 1,
                Some(other) => return Err(format!("READ while recovering: {other:?} ({c:?})")),
            }
            check(start.elapsed() < Duration::from_secs(5), || {
                format!("the pair did not recover within 5 s ({qp_errors} QpError completions)")
            })?;
            std::thread::sleep(Duration::from_millis(5));
        }
        check(buf.bytes()[2048..2056] == buf.bytes()[..8], || {
            "READ after recovery moved the wrong bytes".into()
        })?;
        Ok(format!(
            "{:?} ({qp_errors} QpError completions)",
            start.elapsed()
        ))
    })?
    .join()?;
    println!(
        "  unreceived SEND failed after {send_took:?} ({:?}); another process READ \
         through the pair after {reader}",
        c.failure()
    );
    Ok(())
}
