//! Rings through the real module: setup, mmap, enter, the engine in the kernel, and the
//! kernel's defences against a hostile application.

use std::os::fd::AsRawFd;

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::ioctl::IOC_ENTER;
use krcore_uring::abi::layout::{EnterArgs, SetupParams, SqFlags, OFF_CQ_RING, OFF_SQ_RING};
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::{Builder, Device, Ring};

use crate::harness::check;

fn ring(sq: u32) -> Result<Ring, String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    Builder::new(sq).build(dev).map_err(|e| e.to_string())
}

fn push(r: &mut Ring, sqe: Sqe) -> Result<(), String> {
    // SAFETY: the entries pushed here name no memory of ours that could go away.
    unsafe { r.submission().push(&sqe) }.map_err(|e| e.to_string())
}

pub fn nop_batches_complete_in_order() -> Result<(), String> {
    let mut r = ring(64)?;
    let p = *r.params();
    check((p.sq_entries, p.cq_entries) == (64, 128), || {
        format!("granted {p:?}")
    })?;
    let mut next = 0u64;
    for batch in [1u64, 8, 32, 64] {
        for i in 0..batch {
            push(&mut r, Sqe::nop(next + i))?;
        }
        let taken = r.submit().map_err(|e| e.to_string())?;
        check(taken as u64 == batch, || {
            format!("batch {batch}: kernel took {taken}")
        })?;
        let got: Vec<_> = r.completions().collect();
        check(got.len() as u64 == batch, || {
            format!("batch {batch}: {} CQEs", got.len())
        })?;
        for (k, c) in got.iter().enumerate() {
            check(c.user_data == next + k as u64 && c.res == 0, || {
                format!("CQE {k}: {c:?}")
            })?;
        }
        next += batch;
    }
    println!("  {next} NOPs through the kernel engine, in order");
    Ok(())
}

pub fn bad_entries_get_reasons() -> Result<(), String> {
    let mut r = ring(8)?;
    let cases = [
        (
            Sqe {
                opcode: 200,
                ..Sqe::nop(1)
            },
            Reason::BadOpcode,
        ),
        (
            Sqe {
                resv: 7,
                ..Sqe::nop(2)
            },
            Reason::ReservedNonzero,
        ),
        (
            Sqe {
                flags: 0x80,
                ..Sqe::nop(3)
            },
            Reason::UnknownFlags,
        ),
        (
            Sqe {
                len: 4,
                ..Sqe::nop(4)
            },
            Reason::ReservedNonzero,
        ),
        (
            Sqe::one_sided(Opcode::Read, 5, 0x0100_0003, 1, 0x1000, 8, 1, 0x2000),
            Reason::BadVqp,
        ),
    ];
    for (sqe, _) in &cases {
        push(&mut r, *sqe)?;
    }
    r.submit().map_err(|e| e.to_string())?;
    let got: Vec<_> = r.completions().collect();
    check(got.len() == cases.len(), || {
        format!("{} CQEs for {} entries", got.len(), cases.len())
    })?;
    for (c, (sqe, want)) in got.iter().zip(&cases) {
        println!(
            "  user_data {}: {}",
            c.user_data,
            krcore_uring::describe_failure(c).unwrap_or_default()
        );
        check(
            c.user_data == sqe.user_data && c.failure() == Some(*want),
            || format!("{c:?}, want {want:?}"),
        )?;
    }
    Ok(())
}

pub fn full_cq_overflows_without_loss() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let mut r = Builder::new(8)
        .cq_entries(8)
        .build(dev)
        .map_err(|e| e.to_string())?;
    for round in 0..3u64 {
        for i in 0..8 {
            push(&mut r, Sqe::nop(round * 8 + i))?;
        }
        r.submit().map_err(|e| e.to_string())?;
    }
    check(r.sq_flags().contains(SqFlags::CQ_OVERFLOW), || {
        "CQ_OVERFLOW not set with 16 completions waiting".into()
    })?;
    let mut got = Vec::new();
    for _ in 0..10 {
        got.extend(r.completions().map(|c| c.user_data));
        r.submit().map_err(|e| e.to_string())?; // moves overflowed CQEs into the CQ
    }
    check(got == (0..24).collect::<Vec<_>>(), || {
        format!("got {got:?}")
    })?;
    check(!r.sq_flags().contains(SqFlags::CQ_OVERFLOW), || {
        "CQ_OVERFLOW still set".into()
    })
}

/// A second shared mapping of `len` bytes of the device at `off`, as a hostile
/// application would make one; unmapped by the caller.
pub(crate) fn map(dev: &Device, len: usize, off: u64) -> Result<*mut u8, i32> {
    // SAFETY: a fresh shared mapping of the device; unmapped by the caller.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            dev.as_raw_fd(),
            off as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(p.cast())
}

pub fn hostile_tail_is_rejected() -> Result<(), String> {
    let mut r = ring(8)?;
    push(&mut r, Sqe::nop(1))?;
    r.submit().map_err(|e| e.to_string())?;
    let _ = r.completions().count();
    // A second mapping of the same SQ, written as a hostile application would.
    let len = r.params().sq_off.map_len as usize;
    let tail_off = r.params().sq_off.tail as usize;
    let sq = map(r.device(), len, OFF_SQ_RING).map_err(|e| format!("mmap SQ: errno {e}"))?;
    // SAFETY: inside the mapping; a plain store is what a hostile app would do.
    unsafe { std::ptr::write_volatile(sq.add(tail_off).cast::<u32>(), 1_000_000) };
    // Enter directly: the library's submit would publish its own, honest tail first.
    let args = EnterArgs {
        to_submit: 8,
        ..EnterArgs::default()
    };
    // SAFETY: `args` outlives the call; the kernel only reads it.
    let err = unsafe {
        r.device()
            .ioctl_raw(IOC_ENTER, &args as *const EnterArgs as usize)
    }
    .err()
    .and_then(|e| e.raw_os_error());
    let flags = r.sq_flags();
    // SAFETY: mapped above.
    unsafe { libc::munmap(sq.cast(), len) };
    println!("  enter with tail 1000000: errno {err:?}, flags {flags:?}");
    check(err == Some(libc::EINVAL), || {
        format!("enter with a hostile tail: {err:?}")
    })?;
    check(flags.contains(SqFlags::TAIL_OVERRUN), || {
        "TAIL_OVERRUN not set".into()
    })?;
    check(r.completions().count() == 0, || {
        "a CQE appeared for nothing".into()
    })
}

pub fn setup_and_mmap_errors() -> Result<(), String> {
    let dev = Device::open().map_err(|e| e.to_string())?;
    let setup = |p: &mut SetupParams| -> i32 {
        // SAFETY: `p` outlives the call.
        match unsafe {
            dev.ioctl_raw(
                krcore_uring::abi::ioctl::IOC_SETUP,
                p as *mut SetupParams as usize,
            )
        } {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(-1),
        }
    };
    check(
        setup(&mut SetupParams {
            sq_entries: 0,
            ..Default::default()
        }) == libc::EINVAL,
        || "0 entries accepted".into(),
    )?;
    check(
        setup(&mut SetupParams {
            sq_entries: 1 << 20,
            ..Default::default()
        }) == libc::EINVAL,
        || "2^20 entries accepted".into(),
    )?;
    check(
        setup(&mut SetupParams {
            sq_entries: 8,
            resv: 1,
            ..Default::default()
        }) == libc::EINVAL,
        || "reserved accepted".into(),
    )?;
    let mut p = SetupParams {
        sq_entries: 8,
        ..Default::default()
    };
    check(setup(&mut p) == 0, || "valid setup failed".into())?;
    check(
        setup(&mut SetupParams {
            sq_entries: 8,
            ..Default::default()
        }) == libc::EBUSY,
        || "second setup accepted".into(),
    )?;
    check(
        map(&dev, 4096, 0x1234_5000).err() == Some(libc::EINVAL),
        || "mmap at an unknown offset".into(),
    )?;
    check(
        map(&dev, 1 << 20, OFF_CQ_RING).err() == Some(libc::EINVAL),
        || "mmap longer than the ring".into(),
    )?;
    let cq = map(&dev, p.cq_off.map_len as usize, OFF_CQ_RING)
        .map_err(|e| format!("mmap CQ: errno {e}"))?;
    // The mapping keeps the ring alive after the file is closed.
    drop(dev);
    // SAFETY: inside the mapping.
    let entries =
        unsafe { std::ptr::read_volatile(cq.add(p.cq_off.ring_entries as usize).cast::<u32>()) };
    // SAFETY: mapped above.
    unsafe { libc::munmap(cq.cast(), p.cq_off.map_len as usize) };
    check(entries == p.cq_entries, || {
        format!("CQ header says {entries} entries after close")
    })
}
