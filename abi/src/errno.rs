//! Linux errno values, as the positive numbers of `<asm-generic/errno-base.h>`.
//!
//! The kernel returns them negated from an ioctl and stores them negated in a CQE's
//! result; both sides of the ABI name them through [`Errno`] so a user can recover the
//! reason for any rejection.

/// A Linux errno value (positive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct Errno(pub i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Errno = Errno(1);
    /// No such entry (an unknown virtual QP, MR or device).
    pub const ENOENT: Errno = Errno(2);
    /// I/O error (a completion with a failed work-request status).
    pub const EIO: Errno = Errno(5);
    /// No such device or address (nothing mapped at an mmap offset).
    pub const ENXIO: Errno = Errno(6);
    /// Argument list too long: a user struct larger than this ABI knows.
    pub const E2BIG: Errno = Errno(7);
    /// Try again: a queue is full or credits are exhausted.
    pub const EAGAIN: Errno = Errno(11);
    /// Out of memory.
    pub const ENOMEM: Errno = Errno(12);
    /// Permission denied: an access outside what a memory region allows.
    pub const EACCES: Errno = Errno(13);
    /// Bad address: a user pointer the kernel could not read or write.
    pub const EFAULT: Errno = Errno(14);
    /// Device or resource busy.
    pub const EBUSY: Errno = Errno(16);
    /// No such device.
    pub const ENODEV: Errno = Errno(19);
    /// Invalid argument.
    pub const EINVAL: Errno = Errno(22);
    /// Inappropriate ioctl for device: an unknown ioctl command.
    pub const ENOTTY: Errno = Errno(25);
    /// No space left: a table of fixed capacity is full.
    pub const ENOSPC: Errno = Errno(28);
    /// Result out of range: an index or length beyond its bound.
    pub const ERANGE: Errno = Errno(34);
    /// Protocol error: the two sides disagree on the ABI version.
    pub const EPROTO: Errno = Errno(71);
    /// Network unreachable: no pooled connection reaches that peer.
    pub const ENETUNREACH: Errno = Errno(101);
    /// Operation not supported.
    pub const EOPNOTSUPP: Errno = Errno(95);
    /// Interrupted by a signal while waiting.
    pub const EINTR: Errno = Errno(4);
    /// Too many users: the per-user accounting table is full.
    pub const EUSERS: Errno = Errno(87);
    /// Quota exceeded: a user holds as many rings or polling threads as allowed.
    pub const EDQUOT: Errno = Errno(122);
    /// Timed out: no progress within the request deadline.
    pub const ETIMEDOUT: Errno = Errno(110);
    /// Timer expired: a wait the caller bounded (enter's `TIMEOUT`) ended first, as
    /// `io_uring_enter` reports it.
    pub const ETIME: Errno = Errno(62);
    /// Operation canceled: flushed because its ring or QP went away.
    pub const ECANCELED: Errno = Errno(125);
    /// Message too long.
    pub const EMSGSIZE: Errno = Errno(90);
    /// No route to the host: the peer node did not answer or refused the connection.
    pub const EHOSTUNREACH: Errno = Errno(113);
    /// Already in progress: the peer node's own connection attempt wins (both nodes
    /// dialed each other at once).
    pub const EALREADY: Errno = Errno(114);
    /// In progress: a connection to the peer node is being made.
    pub const EINPROGRESS: Errno = Errno(115);
    /// Address in use (a service held with that node already).
    pub const EADDRINUSE: Errno = Errno(98);
    /// File exists (a name taken).
    pub const EEXIST: Errno = Errno(17);
    /// Cross-device link (a resource on another node).
    pub const EXDEV: Errno = Errno(18);
    /// Connection reset by peer (the peer node closed the connection set).
    pub const ECONNRESET: Errno = Errno(104);
    /// Connection refused.
    pub const ECONNREFUSED: Errno = Errno(111);
    /// Stale: a peer kernel's FRESH proof out of time or replayed (answered with a
    /// challenge instead).
    pub const ESTALE: Errno = Errno(116);

    /// The value as the kernel returns it: negative.
    pub const fn to_neg(self) -> i32 {
        -self.0
    }
}
