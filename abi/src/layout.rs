//! Ring memory layout: what user space maps, at which offsets, and who writes what.
//!
//! Each ring is one mapping: a [`RingHeader`] then the entry array at
//! [`ENTRIES_OFFSET`]. The SQ ring (64-byte [`Sqe`](super::sqe::Sqe)s) is mapped at
//! [`OFF_SQ_RING`], the CQ ring (32-byte [`Cqe`](super::cqe::Cqe)s) at [`OFF_CQ_RING`].
//! Indices are free-running `u32`s; an entry lives at `index & ring_mask`.

use super::bitflags::bitflags;
use super::errno::Errno;

/// mmap offset of the SQ ring.
pub const OFF_SQ_RING: u64 = 0;
/// mmap offset of the CQ ring.
pub const OFF_CQ_RING: u64 = 0x800_0000;

/// Largest SQ a ring may ask for.
pub const MAX_SQ_ENTRIES: u32 = 4096;
/// Largest CQ a ring may ask for.
pub const MAX_CQ_ENTRIES: u32 = 8192;

/// The header at the start of each ring mapping. Producer and consumer indices sit on
/// separate cache lines so the two sides do not false-share.
#[derive(Clone, Copy, Debug)]
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
pub struct RingHeader {
    /// Consumer index. SQ: written by the kernel. CQ: written by the application.
    pub head: u32,
    /// Padding to the next cache line.
    pub pad0: [u32; 15],
    /// Producer index. SQ: written by the application. CQ: written by the kernel.
    pub tail: u32,
    /// Padding to the next cache line.
    pub pad1: [u32; 15],
    /// `ring_entries - 1`. Written by the kernel at setup; the kernel never reads it back.
    pub ring_mask: u32,
    /// Number of entries, a power of two. Written by the kernel at setup.
    pub ring_entries: u32,
    /// SQ: [`SqFlags`], written by the kernel. CQ: unused.
    pub flags: u32,
    /// SQ: entries the kernel could not take (bad tail); CQ: completions dropped because
    /// their ring was gone. Written by the kernel.
    pub dropped: u32,
    /// CQ: completions that waited in the kernel's overflow list. Written by the kernel.
    pub overflow: u32,
    /// Reserved.
    pub resv: [u32; 11],
}

/// Where the entry array starts in a ring mapping.
pub const ENTRIES_OFFSET: usize = core::mem::size_of::<RingHeader>();

const _: () = assert!(core::mem::offset_of!(RingHeader, head) == 0);
const _: () = assert!(core::mem::offset_of!(RingHeader, tail) == 64);
const _: () = assert!(core::mem::offset_of!(RingHeader, ring_mask) == 128);
const _: () = assert!(core::mem::offset_of!(RingHeader, flags) == 136);
const _: () = assert!(ENTRIES_OFFSET == 192);

bitflags! {
    /// Flags in the SQ ring header, set by the kernel.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct SqFlags: u32 {
        /// The polling thread sleeps: the enter ioctl with [`EnterFlags::SQ_WAKEUP`] wakes it.
        const NEED_WAKEUP = 1 << 0;
        /// Completions are waiting in the kernel's overflow list: reap the CQ and enter.
        const CQ_OVERFLOW = 1 << 1;
        /// The SQ tail claimed more entries than the ring holds; nothing was taken.
        const TAIL_OVERRUN = 1 << 2;
    }
}

bitflags! {
    /// Setup flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct SetupFlags: u32 {
        /// A kernel thread polls the SQ, so submission needs no syscall.
        const SQPOLL = 1 << 0;
        /// Bind to the device [`SetupParams::dev_index`] names (as the device query lists
        /// it) rather than the first one.
        const DEVICE = 1 << 1;
    }
}

bitflags! {
    /// Enter flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    #[repr(transparent)]
    pub struct EnterFlags: u32 {
        /// Wait for `min_complete` completions.
        const GETEVENTS = 1 << 0;
        /// Wake the polling thread.
        const SQ_WAKEUP = 1 << 1;
        /// With [`GETEVENTS`](Self::GETEVENTS): wait at most
        /// [`EnterArgs::timeout_us`]; the call fails with `ETIME` if it took no SQE and
        /// fewer than `min_complete` completions are ready by then.
        const TIMEOUT = 1 << 2;
    }
}

/// Where each field of a ring lives in its mapping (the setup ioctl's answer).
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
pub struct RingOffsets {
    /// Offset of the head index.
    pub head: u32,
    /// Offset of the tail index.
    pub tail: u32,
    /// Offset of the ring mask.
    pub ring_mask: u32,
    /// Offset of the entry count.
    pub ring_entries: u32,
    /// Offset of the flags word.
    pub flags: u32,
    /// Offset of the dropped counter.
    pub dropped: u32,
    /// Offset of the entry array.
    pub entries: u32,
    /// Length to mmap.
    pub map_len: u32,
}

impl RingOffsets {
    /// The offsets of a ring of `entries` entries of `entry_size` bytes.
    pub const fn of(entries: u32, entry_size: usize) -> RingOffsets {
        RingOffsets {
            head: core::mem::offset_of!(RingHeader, head) as u32,
            tail: core::mem::offset_of!(RingHeader, tail) as u32,
            ring_mask: core::mem::offset_of!(RingHeader, ring_mask) as u32,
            ring_entries: core::mem::offset_of!(RingHeader, ring_entries) as u32,
            flags: core::mem::offset_of!(RingHeader, flags) as u32,
            dropped: core::mem::offset_of!(RingHeader, dropped) as u32,
            entries: ENTRIES_OFFSET as u32,
            map_len: (ENTRIES_OFFSET + entries as usize * entry_size) as u32,
        }
    }
}

/// Argument of the setup ioctl.
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
pub struct SetupParams {
    /// In: SQ entries wanted (rounded up to a power of two). Out: granted.
    pub sq_entries: u32,
    /// In: CQ entries wanted, 0 for twice the SQ. Out: granted.
    pub cq_entries: u32,
    /// In: [`SetupFlags`].
    pub flags: u32,
    /// In: with SQPOLL, idle milliseconds before the poller sleeps (0: 1000).
    pub sq_idle_ms: u32,
    /// Out: feature bits (none defined yet).
    pub features: u32,
    /// In, with [`SetupFlags::DEVICE`]: the kernel's index of the RDMA device to bind to
    /// (`dev_index` of the device query). Out: the device bound.
    pub dev_index: u32,
    /// In, with [`SetupFlags::DEVICE`]: its port, 0 for the first (the one the module
    /// serves; ports past it are refused with `EINVAL`). Out: the port bound.
    pub port: u32,
    /// Reserved, must be zero.
    pub resv: u32,
    /// Out: the SQ ring's offsets.
    pub sq_off: RingOffsets,
    /// Out: the CQ ring's offsets.
    pub cq_off: RingOffsets,
}

const _: () = assert!(core::mem::size_of::<SetupParams>() == 96);

/// Argument of the enter ioctl.
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
pub struct EnterArgs {
    /// SQEs to take at most.
    pub to_submit: u32,
    /// With [`EnterFlags::GETEVENTS`]: completions to wait for.
    pub min_complete: u32,
    /// [`EnterFlags`].
    pub flags: u32,
    /// With [`EnterFlags::TIMEOUT`]: the longest the call waits, in microseconds;
    /// otherwise zero.
    pub timeout_us: u32,
    /// Reserved, must be zero.
    pub resv: [u32; 4],
}

const _: () = assert!(core::mem::size_of::<EnterArgs>() == 32);

/// Argument of the eventfd registration ioctl.
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
pub struct EventfdArgs {
    /// An eventfd(2) to signal whenever the ring gains completions; -1 unregisters.
    pub fd: i32,
    /// Reserved, must be zero.
    pub resv: [u32; 3],
}

const _: () = assert!(core::mem::size_of::<EventfdArgs>() == 16);

impl EventfdArgs {
    /// Checks the fields user space sets.
    pub fn validate(&self) -> Result<(), Errno> {
        if self.resv != [0; 3] || self.fd < -1 {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }
}

impl EnterArgs {
    /// Bits of [`to_submit`](Self::to_submit) and [`min_complete`](Self::min_complete)
    /// in a packed enter (more than any ring holds).
    const PACKED_COUNT_BITS: u32 = 24;

    /// The arguments as [`IOC_ENTER_VALUE`](super::ioctl::IOC_ENTER_VALUE)'s 64-bit
    /// value: `to_submit` in bits 0-23, `min_complete` in 24-47, `flags` in 48-63; `None`
    /// when a field does not fit (then use `IOC_ENTER`).
    pub const fn pack(&self) -> Option<u64> {
        let max = 1 << Self::PACKED_COUNT_BITS;
        if self.to_submit >= max
            || self.min_complete >= max
            || self.flags > 0xffff
            || self.timeout_us != 0
        {
            return None;
        }
        let resv = self.resv;
        let mut i = 0;
        while i < resv.len() {
            if resv[i] != 0 {
                return None;
            }
            i += 1;
        }
        Some(
            self.to_submit as u64
                | (self.min_complete as u64) << Self::PACKED_COUNT_BITS
                | (self.flags as u64) << (2 * Self::PACKED_COUNT_BITS),
        )
    }

    /// The arguments a packed value stands for (every value stands for some; they are
    /// validated as any others).
    pub const fn unpack(v: u64) -> EnterArgs {
        let mask = (1u64 << Self::PACKED_COUNT_BITS) - 1;
        EnterArgs {
            to_submit: (v & mask) as u32,
            min_complete: ((v >> Self::PACKED_COUNT_BITS) & mask) as u32,
            flags: (v >> (2 * Self::PACKED_COUNT_BITS)) as u32,
            timeout_us: 0,
            resv: [0; 4],
        }
    }

    /// Checks the fields user space sets.
    pub fn validate(&self) -> Result<EnterFlags, Errno> {
        let flags = EnterFlags::from_bits(self.flags).ok_or(Errno::EINVAL)?;
        // A bound only on a wait, and a wait bound only when it says so.
        let timed = flags.contains(EnterFlags::TIMEOUT);
        if self.resv != [0; 4]
            || (timed && !flags.contains(EnterFlags::GETEVENTS))
            || (!timed && self.timeout_us != 0)
        {
            return Err(Errno::EINVAL);
        }
        Ok(flags)
    }
}

impl SetupParams {
    /// Validates the request and fills in what the kernel grants: power-of-two sizes,
    /// the CQ at least as large as the SQ, the offsets, and a polling thread's idle time
    /// capped at `max_idle_ms` (it may spin that long).
    pub fn normalize(
        &mut self,
        sqe_size: usize,
        cqe_size: usize,
        max_idle_ms: u32,
    ) -> Result<(), Errno> {
        let Some(flags) = SetupFlags::from_bits(self.flags) else {
            return Err(Errno::EINVAL);
        };
        // Without DEVICE the device fields must be zero, so they can be told apart.
        let device_fields = self.dev_index != 0 || self.port != 0;
        if self.resv != 0
            || self.features != 0
            || (device_fields && !flags.contains(SetupFlags::DEVICE))
        {
            return Err(Errno::EINVAL);
        }
        if self.sq_entries == 0 || self.sq_entries > MAX_SQ_ENTRIES {
            return Err(Errno::EINVAL);
        }
        let sq = self.sq_entries.next_power_of_two();
        let cq = if self.cq_entries == 0 {
            2 * sq
        } else {
            self.cq_entries
        };
        if cq > MAX_CQ_ENTRIES {
            return Err(Errno::EINVAL);
        }
        let cq = cq.next_power_of_two().max(sq);
        self.sq_entries = sq;
        self.cq_entries = cq;
        // A polling thread spins for up to its idle time: the module caps it.
        if self.sq_idle_ms == 0 {
            self.sq_idle_ms = 1000;
        }
        self.sq_idle_ms = self.sq_idle_ms.min(max_idle_ms.max(1));
        self.sq_off = RingOffsets::of(sq, sqe_size);
        self.cq_off = RingOffsets::of(cq, cqe_size);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_args_pack_round_trip_or_refuse() {
        let a = EnterArgs {
            to_submit: MAX_SQ_ENTRIES,
            min_complete: MAX_CQ_ENTRIES,
            flags: (EnterFlags::GETEVENTS | EnterFlags::SQ_WAKEUP).bits(),
            ..EnterArgs::default()
        };
        assert_eq!(EnterArgs::unpack(a.pack().unwrap()), a);
        let too_many = EnterArgs {
            to_submit: 1 << 24,
            ..a
        };
        assert_eq!(too_many.pack(), None);
        let reserved = EnterArgs {
            resv: [0, 0, 1, 0],
            ..a
        };
        assert_eq!(reserved.pack(), None);
        let timed = EnterArgs {
            flags: (EnterFlags::GETEVENTS | EnterFlags::TIMEOUT).bits(),
            timeout_us: 1,
            ..a
        };
        assert_eq!(timed.pack(), None, "a bound travels by address");
        // Unknown flag bits survive packing and are refused by validation, as unpacked.
        let unknown = EnterArgs::unpack(1 << 63);
        assert_eq!(unknown.validate(), Err(Errno::EINVAL));
    }

    #[test]
    fn a_timeout_needs_its_flag_and_a_wait() {
        let ok = EnterArgs {
            flags: (EnterFlags::GETEVENTS | EnterFlags::TIMEOUT).bits(),
            timeout_us: 500,
            ..EnterArgs::default()
        };
        assert_eq!(
            ok.validate(),
            Ok(EnterFlags::GETEVENTS | EnterFlags::TIMEOUT)
        );
        let unflagged = EnterArgs {
            flags: EnterFlags::GETEVENTS.bits(),
            ..ok
        };
        assert_eq!(unflagged.validate(), Err(Errno::EINVAL));
        let no_wait = EnterArgs {
            flags: EnterFlags::TIMEOUT.bits(),
            ..ok
        };
        assert_eq!(no_wait.validate(), Err(Errno::EINVAL));
        let reserved = EnterArgs {
            resv: [0, 0, 0, 9],
            ..ok
        };
        assert_eq!(reserved.validate(), Err(Errno::EINVAL));
    }

    #[test]
    fn normalize_rounds_and_bounds() {
        let mut p = SetupParams {
            sq_entries: 100,
            ..Default::default()
        };
        p.normalize(64, 32, 10_000).unwrap();
        assert_eq!((p.sq_entries, p.cq_entries), (128, 256));
        assert_eq!(p.sq_off.map_len, 192 + 128 * 64);
        let mut p = SetupParams {
            sq_entries: 8,
            cq_entries: 2,
            ..Default::default()
        };
        p.normalize(64, 32, 10_000).unwrap();
        assert_eq!(p.cq_entries, 8, "the CQ is never smaller than the SQ");
        for bad in [
            SetupParams {
                sq_entries: 0,
                ..Default::default()
            },
            SetupParams {
                sq_entries: MAX_SQ_ENTRIES + 1,
                ..Default::default()
            },
            SetupParams {
                sq_entries: 8,
                cq_entries: MAX_CQ_ENTRIES + 1,
                ..Default::default()
            },
            SetupParams {
                sq_entries: 8,
                flags: 1 << 9,
                ..Default::default()
            },
            SetupParams {
                sq_entries: 8,
                resv: 1,
                ..Default::default()
            },
            // A device named without the flag that says so.
            SetupParams {
                sq_entries: 8,
                dev_index: 3,
                ..Default::default()
            },
            SetupParams {
                sq_entries: 8,
                port: 1,
                ..Default::default()
            },
        ] {
            let mut p = bad;
            assert_eq!(p.normalize(64, 32, 10_000), Err(Errno::EINVAL), "{bad:?}");
        }
    }

    #[test]
    fn a_device_is_named_with_its_flag() {
        let mut p = SetupParams {
            sq_entries: 8,
            flags: SetupFlags::DEVICE.bits(),
            dev_index: 3,
            port: 1,
            ..Default::default()
        };
        p.normalize(64, 32, 10_000).unwrap();
        assert_eq!((p.dev_index, p.port), (3, 1));
    }

    #[test]
    fn idle_time_is_capped() {
        let mut p = SetupParams {
            sq_entries: 8,
            sq_idle_ms: u32::MAX,
            ..SetupParams::default()
        };
        p.normalize(64, 32, 10_000).unwrap();
        assert_eq!(p.sq_idle_ms, 10_000);
    }
}
