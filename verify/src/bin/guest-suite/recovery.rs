//! A shared pooled QP that fails is recovered: one application's bad request (a READ
//! with a wrong rkey fails the RC QP on the wire) costs the other users of that pair a
//! few QpError completions, not the pair.

use std::time::{Duration, Instant};

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device};

use crate::datapath::{ok, run, Buf, LOCAL_GID};
use crate::harness::check;

/// The pool pair this test breaks (service 3 of 2 pairs: pair 1), away from the others.
const SERVICE: u32 = 3;

pub fn bad_rkey_fails_the_pair_which_recovers() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(64).build(dev).map_err(|e| e.to_string())?;
    let (v, _) = ok(&mut r, Sqe::connect(1, LOCAL_GID, SERVICE))?;
    let v = v as u32;
    let mut buf = Buf::new(512);
    buf.bytes_mut()[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mr, keys) = ok(&mut r, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
    let rkey = (keys >> 32) as u32;
    let a = buf.addr();
    let (good, _) = ok(&mut r, Sqe::import_mr(3, v, a, 4096, rkey))?;
    // The kernel cannot know a peer's rkeys (only the MetaServer could): a wrong one is
    // imported as given, and the NIC rejects the READ.
    let (bad, _) = ok(&mut r, Sqe::import_mr(4, v, a, 4096, rkey ^ 0x5a5a))?;
    let read = |ud, rmr| Sqe::one_sided(Opcode::Read, ud, v, mr as u32, a + 2048, 8, rmr as u32, a);
    let c = run(&mut r, read(5, bad))?;
    check(
        matches!(c.failure(), Some(Reason::RemoteError | Reason::QpError)),
        || format!("READ with a wrong rkey: {c:?}"),
    )?;
    let failed_at = Instant::now();
    let (mut tries, mut qp_errors) = (0u64, 0);
    loop {
        tries += 1;
        let c = run(&mut r, read(100 + tries, good))?;
        match c.failure() {
            None => break,
            Some(Reason::QpError) => qp_errors += 1,
            Some(other) => return Err(format!("READ while recovering: {other:?} ({c:?})")),
        }
        check(failed_at.elapsed() < Duration::from_secs(5), || {
            format!("the pair did not recover within 5 s ({qp_errors} QpError completions)")
        })?;
        std::thread::sleep(Duration::from_millis(5));
    }
    check(buf.bytes()[2048..2056] == buf.bytes()[..8], || {
        "READ after recovery moved the wrong bytes".into()
    })?;
    println!(
        "  wrong rkey: {:?}; recovered after {:?} ({qp_errors} QpError completions meanwhile)",
        Reason::RemoteError,
        failed_at.elapsed()
    );
    Ok(())
}
