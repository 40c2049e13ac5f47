//! The one-ioctl-per-op path: the original KRCore's `qpush`/`qpop` system calls, kept so
//! applications written against them (and the benchmarks) can cross the boundary once
//! per operation instead of once per batch.
//!
//! One [`IOC_ONE`](super::ioctl::IOC_ONE) call may push one SQE and pop one CQE. Both go
//! through the file's own rings and the same engine as the enter ioctl: the kernel
//! produces into the SQ and consumes from the CQ on the caller's behalf, so validation,
//! credits and completion routing are exactly the ring path's. A file that uses this
//! path must not also drive the mapped rings itself: the two would race for the same
//! indices (the kernel still treats every index as hostile, so this garbles only the
//! file's own entries).

use super::bitflags::bitflags;
use super::cqe::Cqe;
use super::errno::Errno;
use super::sqe::Sqe;

bitflags! {
    /// What one [`OneOp`] call does, in this order.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct OneFlags: u32 {
        /// Submit [`OneOp::sqe`]. `EAGAIN` when the SQ is full (reap first). An entry
        /// that waits for another node (a first contact, the MetaServer) stays in the
        /// SQ until a later call takes it (with `WAIT`, this one).
        const PUSH = 1 << 0;
        /// Return one completion in [`OneOp::cqe`] if there is one.
        const POP = 1 << 1;
        /// With `POP`: wait until there is one (interruptible: `EINTR`).
        const WAIT = 1 << 2;
    }
}

/// Argument of the one-op ioctl.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "zerocopy",
    derive(
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::KnownLayout,
        zerocopy::Immutable
    )
)]
#[repr(C)]
pub struct OneOp {
    /// In, with [`OneFlags::PUSH`]: the request.
    pub sqe: Sqe,
    /// Out, when `popped` is 1: the completion.
    pub cqe: Cqe,
    /// [`OneFlags`].
    pub flags: u32,
    /// Out: 1 when `cqe` holds a completion, else 0.
    pub popped: u32,
    /// Reserved, must be zero.
    pub resv: [u32; 6],
}

const _: () = assert!(core::mem::size_of::<OneOp>() == 128);
const _: () = assert!(core::mem::offset_of!(OneOp, cqe) == 64);
const _: () = assert!(core::mem::offset_of!(OneOp, flags) == 96);

impl OneOp {
    /// Checks the fields user space sets: known flags, `WAIT` only with `POP`, zeroed
    /// reserved words.
    pub fn validate(&self) -> Result<OneFlags, Errno> {
        let f = OneFlags::from_bits(self.flags).ok_or(Errno::EINVAL)?;
        if self.resv != [0; 6] || (f.contains(OneFlags::WAIT) && !f.contains(OneFlags::POP)) {
            return Err(Errno::EINVAL);
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_rejects_unknown_and_reserved() {
        let mut op = OneOp {
            flags: (OneFlags::PUSH | OneFlags::POP | OneFlags::WAIT).bits(),
            ..OneOp::default()
        };
        assert!(op.validate().is_ok());
        op.flags = OneFlags::WAIT.bits();
        assert_eq!(op.validate(), Err(Errno::EINVAL), "WAIT without POP");
        op.flags = 1 << 7;
        assert_eq!(op.validate(), Err(Errno::EINVAL));
        op.flags = OneFlags::POP.bits();
        op.resv[5] = 1;
        assert_eq!(op.validate(), Err(Errno::EINVAL));
    }
}
