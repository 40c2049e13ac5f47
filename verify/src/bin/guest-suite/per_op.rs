//! The one-ioctl-per-op path (abi/src/compat.rs): the same engine as the rings, one
//! operation per ioctl, with 12 requests in flight.

use krcore_uring::abi::compat::OneOp;
use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::ioctl::IOC_DIRECT;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Builder, Device};

use crate::datapath::{ok, run, Buf, LOCAL_GID};
use crate::harness::check;

pub fn reads_and_rejects_like_the_ring() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut p = Builder::new(16)
        .build_per_op(dev)
        .map_err(|e| e.to_string())?;
    check(p.pop(false).map_err(|e| e.to_string())?.is_none(), || {
        "a pop on an idle file returned a completion".into()
    })?;
    let (v, _) = ok(&mut p, Sqe::connect(1, LOCAL_GID, 0))?;
    let v = v as u32;
    let mut buf = Buf::new(512);
    for (i, b) in buf.bytes_mut()[..96].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13).wrapping_add(5);
    }
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (mr, descriptor) = ok(&mut p, Sqe::reg_mr(2, buf.addr(), 4096, access))?;
    let (rmr, _) = ok(&mut p, Sqe::import_mr(3, v, buf.addr(), 4096, descriptor))?;
    let (mr, rmr, a) = (mr as u32, rmr as u32, buf.addr());

    // One READ per ioctl.
    let (n, _) = ok(
        &mut p,
        Sqe::one_sided(Opcode::Read, 4, v, mr, a + 2048, 8, rmr, a),
    )?;
    check(
        n == 8 && buf.bytes()[2048..2056] == buf.bytes()[..8],
        || format!("READ: res {n}, bytes {:?}", &buf.bytes()[2048..2056]),
    )?;

    // Twelve in flight: push them one ioctl each, then pop them one ioctl each.
    let before = p.ioctls();
    for k in 0..12u64 {
        let read = Sqe::one_sided(
            Opcode::Read,
            100 + k,
            v,
            mr,
            a + 2048 + 8 * k,
            8,
            rmr,
            a + 8 * k,
        );
        // SAFETY: as in `one`.
        unsafe { p.push(&read) }.map_err(|e| e.to_string())?;
    }
    let mut got = Vec::new();
    while got.len() < 12 {
        let c = p
            .pop(true)
            .map_err(|e| e.to_string())?
            .ok_or("WAIT returned nothing")?;
        got.push(c);
    }
    got.sort_by_key(|c| c.user_data);
    for (k, c) in got.iter().enumerate() {
        check(c.user_data == 100 + k as u64 && c.res == 8, || {
            format!("pipelined READ {k}: {c:?}")
        })?;
    }
    check(buf.bytes()[2048..2144] == buf.bytes()[..96], || {
        "pipelined READs moved the wrong bytes".into()
    })?;
    check(p.ioctls() - before == 24, || {
        format!("{} ioctls for 12 pushes and 12 pops", p.ioctls() - before)
    })?;

    // A bad entry is answered, not dropped, with the ring path's reason.
    let bad = Sqe::one_sided(Opcode::Read, 9, 0x0100_0003, mr, a, 8, rmr, a);
    let c = run(&mut p, bad)?;
    check(c.failure() == Some(Reason::BadVqp), || {
        format!("bad vQP: {c:?}")
    })?;
    // The kernel-direct benchmark baseline is off unless the module was loaded for it.
    let mut op = OneOp {
        sqe: Sqe::one_sided(Opcode::Read, 10, v, mr, a + 2048, 8, rmr, a),
        ..OneOp::default()
    };
    // SAFETY: `op` is a OneOp the kernel reads and writes back.
    let r = unsafe {
        p.device()
            .ioctl_raw(IOC_DIRECT, &mut op as *mut OneOp as usize)
    };
    let direct_on = std::env::var("KRCORE_PARAMS").is_ok_and(|p| p.contains("bench_direct=1"));
    if direct_on {
        check(r.is_ok() && op.cqe.res == 8, || {
            format!("IOC_DIRECT: {r:?}, {:?}", op.cqe)
        })?;
    } else {
        check(
            r.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EPERM),
            || format!("IOC_DIRECT without bench_direct=1: {r:?}"),
        )?;
    }
    println!(
        "  READ, 12 pipelined READs (24 ioctls), a bad vQP (BadVqp) through IOC_ONE; IOC_DIRECT {}",
        if direct_on {
            "served"
        } else {
            "refused (EPERM)"
        }
    );
    Ok(())
}
