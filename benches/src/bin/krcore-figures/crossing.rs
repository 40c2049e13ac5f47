//! Ring crossing: NOPs per operation at batch 1, 8, 32 and 128 through krcore's ring
//! (one enter ioctl per batch), krcore's one-ioctl-per-op path, io_uring's own NOP
//! through the io-uring crate, and krcore's NOP carried by io_uring (its URING_CMD,
//! beside io_uring's NOP in an io_uring of the same entry sizes), in the same guest.

use std::os::fd::AsRawFd;
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use krcore_benches::record::Record;
use krcore_uring::abi::ioctl::{ioc, IOC_ENTER_VALUE, IOC_MAGIC};
use krcore_uring::abi::sqe::Sqe;
use krcore_uring::in_io_uring::{command, CMD_OP};
use krcore_uring::{Builder, Device, Ring};

/// Batch sizes measured.
pub const BATCHES: [u32; 4] = [1, 8, 32, 128];

fn time_batches(iters: usize, mut f: impl FnMut()) -> Vec<std::time::Duration> {
    (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

/// The fixed cost of one crossing, stage by stage (group `enter-stage`, x 0): an ioctl
/// the module refuses at decode (the VFS ioctl dispatch and the file's lookup, nothing
/// of krcore's), krcore's enter with nothing to take or wait for, and io_uring's.
fn stages(out: &mut Vec<Record>) {
    const ITERS: usize = 40_000;
    let r = Builder::new(8)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    // Number 0x7f of krcore's type: ENOTTY at decode.
    let refused = ioc(0, IOC_MAGIC, 0x7f, 0);
    let s = time_batches(ITERS, || {
        // SAFETY: refused before the argument is looked at.
        let e = unsafe { r.device().ioctl_raw(refused, 0) };
        assert!(e.is_err());
    });
    out.push(Record::times("enter-stage", "ioctl-refused", 0, s, 1));
    let s = time_batches(ITERS, || {
        // SAFETY: IOC_ENTER_VALUE's argument is a value; 0 takes and waits for nothing.
        unsafe { r.device().ioctl_raw(IOC_ENTER_VALUE, 0) }.unwrap();
    });
    out.push(Record::times("enter-stage", "krcore-empty-enter", 0, s, 1));
    let u = io_uring::IoUring::new(8).expect("io_uring in the guest");
    let s = time_batches(ITERS, || {
        // SAFETY: nothing to submit, nothing to wait for, no argument.
        unsafe { u.submitter().enter::<libc::sigset_t>(0, 0, 0, None) }.unwrap();
    });
    out.push(Record::times(
        "enter-stage",
        "io_uring-empty-enter",
        0,
        s,
        1,
    ));
}

/// `iters` rounds of `batch` NOPs through ring `r`, each entered with `enter`.
fn nop_batches(
    r: &mut Ring,
    batch: u32,
    iters: usize,
    enter: fn(&mut Ring, u32) -> Result<u32, krcore_uring::Error>,
) -> Vec<std::time::Duration> {
    time_batches(iters, || {
        // One lock of the ring for the batch, as io_uring's pushes go through one
        // `SubmissionQueue` below.
        let mut sq = r.submission();
        for i in 0..batch {
            // SAFETY: NOPs name no memory.
            unsafe { sq.push(&Sqe::nop(i as u64)) }.unwrap();
        }
        drop(sq);
        enter(r, batch).unwrap();
        assert_eq!(r.completions().count(), batch as usize);
    })
}

/// Every ring-crossing figure.
pub fn figures(out: &mut Vec<Record>) {
    stages(out);
    for batch in BATCHES {
        let iters = (40_000 / batch as usize).max(300);
        let mut r = Builder::new(256)
            .build(Device::open().expect("open /dev/krcore"))
            .expect("ring");
        let s = nop_batches(&mut r, batch, iters, Ring::submit_and_wait);
        out.push(Record::times("nop", "krcore-enter", batch, s, batch));
        // The same enter with its arguments copied in from memory (IOC_ENTER), as every
        // enter was before IOC_ENTER_VALUE: the argument copy's cost, side by side.
        let s = nop_batches(&mut r, batch, iters, Ring::submit_and_wait_copying_args);
        out.push(Record::times("nop", "krcore-enter-copy", batch, s, batch));

        let mut p = Builder::new(256)
            .build_per_op(Device::open().expect("open /dev/krcore"))
            .expect("per-op setup");
        let s = time_batches(iters, || {
            for i in 0..batch {
                // SAFETY: NOPs name no memory.
                let c = unsafe { p.push_pop(&Sqe::nop(i as u64), true) }.unwrap();
                assert!(c.is_some_and(|c| c.res == 0));
            }
        });
        out.push(Record::times("nop", "krcore-per-op", batch, s, batch));

        let mut u = io_uring::IoUring::new(256).expect("io_uring in the guest");
        let s = time_batches(iters, || {
            {
                let mut sq = u.submission();
                for i in 0..batch {
                    // SAFETY: a NOP references no memory.
                    unsafe {
                        sq.push(&io_uring::opcode::Nop::new().build().user_data(i as u64))
                            .unwrap()
                    };
                }
            }
            u.submit_and_wait(batch as usize).unwrap();
            assert_eq!(u.completion().count(), batch as usize);
        });
        out.push(Record::times("nop", "io_uring", batch, s, batch));

        // krcore's NOP carried by io_uring (IORING_OP_URING_CMD on a ring's file), and
        // io_uring's own NOP in an io_uring of the same entry sizes (SQE128, CQE32).
        let r = Builder::new(8)
            .build(Device::open().expect("open /dev/krcore"))
            .expect("ring");
        let nop = opcode::UringCmd80::new(types::Fd(r.as_raw_fd()), CMD_OP)
            .cmd(command(&Sqe::nop(0)))
            .build();
        let s = big_batches(batch, iters, |i| nop.clone().user_data(i));
        out.push(Record::times("nop", "krcore-in-io_uring", batch, s, batch));
        let s = big_batches(batch, iters, |i| {
            opcode::Nop::new().build().user_data(i).into()
        });
        out.push(Record::times("nop", "io_uring-sqe128", batch, s, batch));
    }
}

/// `iters` rounds of `batch` entries made by `entry` through an io_uring with 128-byte
/// SQEs and 32-byte CQEs, each round one submit-and-wait; every completion must succeed.
fn big_batches(
    batch: u32,
    iters: usize,
    entry: impl Fn(u64) -> squeue::Entry128,
) -> Vec<std::time::Duration> {
    let mut u: IoUring<squeue::Entry128, cqueue::Entry32> = IoUring::builder()
        .build(256)
        .expect("io_uring with SQE128 and CQE32 in the guest");
    time_batches(iters, || {
        {
            let mut sq = u.submission();
            for i in 0..batch {
                // SAFETY: the entries name no memory.
                unsafe { sq.push(&entry(i as u64)).unwrap() };
            }
        }
        u.submit_and_wait(batch as usize).unwrap();
        let mut n = 0;
        for c in u.completion() {
            assert!(c.result() >= 0, "{c:?}");
            n += 1;
        }
        assert_eq!(n, batch as usize);
    })
}

/// The crossing figures as instruction counts: in a guest whose clock advances one
/// nanosecond per instruction, each record's "ns" is instructions. Relabelled, and each
/// NOP batch printed with krcore's enter against io_uring's NOP (`[icount]` lines).
pub fn instructions(out: &mut [Record]) {
    for r in out.iter_mut() {
        r.unit = "insn".into();
    }
    let median = |series: &str, x: u32| {
        out.iter()
            .find(|r| r.group == "nop" && r.series == series && r.x == x)
            .map(|r| r.median)
    };
    for batch in BATCHES {
        if let (Some(k), Some(u)) = (median("krcore-enter", batch), median("io_uring", batch)) {
            println!(
                "[icount] NOP at batch {batch}: krcore's ring {k:.0} instructions an op, \
                 io_uring {u:.0}: {:.2}x",
                k / u
            );
        }
    }
}
