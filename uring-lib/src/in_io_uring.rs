//! krcore entries inside io_uring itself, for a program that already runs an io_uring
//! loop: an entry travels as an `IORING_OP_URING_CMD` on the ring's file and completes
//! into io_uring's CQ, beside the program's file and socket I/O, in its links.
//!
//! The io_uring must be set up with `IORING_SETUP_SQE128 | IORING_SETUP_CQE32` (the
//! entry is 64 bytes; the completion's first extra word carries `aux` or the reason).
//! With the `io-uring` crate:
//!
//! ```no_run
//! # fn f(ring: &krcore_uring::Ring, read: krcore_uring::abi::sqe::Sqe) {
//! use io_uring::{cqueue, opcode, squeue, types, IoUring};
//! use std::os::fd::AsRawFd;
//! let mut u: IoUring<squeue::Entry128, cqueue::Entry32> = IoUring::builder().build(64).unwrap();
//! let e = opcode::UringCmd80::new(types::Fd(ring.as_raw_fd()), krcore_uring::in_io_uring::CMD_OP)
//!     .cmd(krcore_uring::in_io_uring::command(&read))
//!     .build()
//!     .user_data(1);
//! unsafe { u.submission().push(&e).unwrap() };
//! u.submit_and_wait(1).unwrap();
//! let c = u.completion().next().unwrap();
//! let done = krcore_uring::in_io_uring::outcome("read", c.result(), c.big_cqe()[0]);
//! # }
//! ```
//!
//! Not carried (`Reason::NotThroughUring`): LISTEN, REG_MR and RECV; use the ring's own
//! submission for those.

use crate::Error;
use krcore_abi::cqe::{Cqe, Reason};

pub use krcore_abi::engine::command;
/// The `cmd_op` of a krcore entry's command.
pub const CMD_OP: u32 = krcore_abi::engine::URING_CMD_ENTRY;

/// The result of a command's completion (`res` and the 32-byte CQE's first extra word):
/// `res` and `aux` (a CONNECT's port in bits 32..48 beside its QP number), or the
/// failure with its reason.
pub fn outcome(op: &'static str, res: i32, extra: u64) -> Result<(i32, u64), Error> {
    if res >= 0 {
        return Ok((res, extra));
    }
    match u16::try_from(extra).ok().and_then(Reason::from_u16) {
        Some(r) if r != Reason::None => Err(Error::failed(
            op,
            &Cqe {
                res,
                reason: r as u16,
                ..Cqe::default()
            },
        )),
        // io_uring's own refusal (the command never reached an entry): the errno alone.
        _ => Err(Error::errno(op, krcore_abi::errno::Errno(-res))),
    }
}
