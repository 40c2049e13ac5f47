//! A krcore ring: the SQ and CQ mapped from `/dev/krcore`, the application's side of
//! abi's ring protocol, and the enter ioctl.

use krcore_abi::cqe::Cqe;
use krcore_abi::errno::Errno;
use krcore_abi::ioctl::{IOC_ENTER, IOC_REGISTER_EVENTFD, IOC_SETUP};
use krcore_abi::layout::{
    EnterArgs, EnterFlags, EventfdArgs, SetupFlags, SetupParams, SqFlags, OFF_CQ_RING, OFF_SQ_RING,
};
use krcore_abi::ring::{CqConsumer, RawRing, SqProducer};
use krcore_abi::sqe::Sqe;
use std::os::fd::AsRawFd;

use crate::mmap::Mmap;
use crate::{Device, Error};

/// Sizes and options of a ring.
#[derive(Clone, Copy, Debug)]
pub struct Builder {
    params: SetupParams,
}

impl Builder {
    /// A ring with `sq_entries` submission entries (rounded up to a power of two) and,
    /// unless [`cq_entries`](Self::cq_entries) says otherwise, twice as many completions.
    pub fn new(sq_entries: u32) -> Builder {
        Builder {
            params: SetupParams {
                sq_entries,
                ..SetupParams::default()
            },
        }
    }

    /// A kernel thread polls the SQ: submitting needs no syscall while it runs; it sleeps
    /// after `idle_ms` without work and [`Ring::submit`] wakes it when needed.
    pub fn sqpoll(mut self, idle_ms: u32) -> Builder {
        self.params.flags |= SetupFlags::SQPOLL.bits();
        self.params.sq_idle_ms = idle_ms;
        self
    }

    /// Completion queue entries (rounded up; at least the SQ's).
    pub fn cq_entries(mut self, n: u32) -> Builder {
        self.params.cq_entries = n;
        self
    }

    /// Sets the rings up on `dev` (once per open file) and maps them.
    pub fn build(self, dev: Device) -> Result<Ring, Error> {
        let mut p = self.params;
        // SAFETY: `p` is a SetupParams the kernel reads and writes back.
        unsafe { dev.ioctl_raw(IOC_SETUP, &mut p as *mut SetupParams as usize) }
            .map_err(|e| e.context("ring setup"))?;
        let fd = dev.as_raw_fd();
        let sq_map = Mmap::new(fd, p.sq_off.map_len as usize, OFF_SQ_RING)?;
        let cq_map = Mmap::new(fd, p.cq_off.map_len as usize, OFF_CQ_RING)?;
        // SAFETY: the kernel laid the rings out as `p` says; the maps are page-aligned,
        // at least map_len long, and outlive the views (field order in Ring).
        let (sq, cq) = unsafe {
            (
                RawRing::new(sq_map.as_ptr(), p.sq_entries),
                RawRing::new(cq_map.as_ptr(), p.cq_entries),
            )
        };
        let sqpoll = SetupFlags::from_bits_truncate(p.flags).contains(SetupFlags::SQPOLL);
        Ok(Ring {
            sq: SqProducer::new(sq),
            cq: CqConsumer::new(cq),
            params: p,
            sqpoll,
            enters: 0,
            _sq_map: sq_map,
            _cq_map: cq_map,
            dev,
        })
    }
}

/// The queue was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushError;

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("submission queue is full")
    }
}

impl std::error::Error for PushError {}

/// A ring. Entries are pushed, [`submit`](Ring::submit)ted through the enter ioctl, and
/// their completions read back from [`completions`](Ring::completions).
pub struct Ring {
    // The views go before the maps they point into, the maps before the file.
    sq: SqProducer<RawRing<Sqe>>,
    cq: CqConsumer<RawRing<Cqe>>,
    params: SetupParams,
    sqpoll: bool,
    enters: u64,
    _sq_map: Mmap,
    _cq_map: Mmap,
    dev: Device,
}

impl Ring {
    /// What the kernel granted at setup.
    pub fn params(&self) -> &SetupParams {
        &self.params
    }

    /// The device file.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Queues an entry for the next submit.
    ///
    /// # Safety
    /// Memory the entry names (through its MR) must stay registered and valid until the
    /// entry's completion is read.
    pub unsafe fn push(&mut self, sqe: &Sqe) -> Result<(), PushError> {
        self.sq.push(*sqe).map_err(|_| PushError)
    }

    /// Free SQ slots.
    pub fn sq_space(&mut self) -> u32 {
        self.sq.space()
    }

    /// The kernel's SQ flags (need-wakeup, CQ overflow, tail overrun).
    pub fn sq_flags(&self) -> SqFlags {
        self.sq.flags()
    }

    /// Publishes queued entries and has the kernel take them; returns how many it took
    /// (fewer than queued when credits or CQ room ran out: the rest stay queued). With
    /// [`Builder::sqpoll`] the polling thread takes them: no syscall unless it sleeps,
    /// and the count returned is how many were published.
    pub fn submit(&mut self) -> Result<u32, Error> {
        if self.sqpoll {
            self.sq.publish();
            let n = self.sq.unread();
            if self.sq.needs_wakeup() {
                self.enter(0, EnterFlags::SQ_WAKEUP)?;
            }
            return Ok(n);
        }
        self.enter(0, EnterFlags::empty())
    }

    /// As [`submit`](Self::submit), then waits until `want` completions are ready.
    pub fn submit_and_wait(&mut self, want: u32) -> Result<u32, Error> {
        self.sq.publish();
        let wake = if self.sqpoll && self.sq.needs_wakeup() {
            EnterFlags::SQ_WAKEUP
        } else {
            EnterFlags::empty()
        };
        self.enter(want, EnterFlags::GETEVENTS | wake)
    }

    /// Has the kernel signal `fd`, an eventfd(2), whenever the ring gains completions;
    /// `None` unregisters.
    pub fn register_eventfd(&mut self, fd: Option<std::os::fd::RawFd>) -> Result<(), Error> {
        let args = EventfdArgs {
            fd: fd.unwrap_or(-1),
            resv: [0; 3],
        };
        // SAFETY: `args` is an EventfdArgs the kernel only reads.
        unsafe {
            self.dev
                .ioctl_raw(IOC_REGISTER_EVENTFD, &args as *const EventfdArgs as usize)
        }
        .map_err(|e| e.context("register eventfd"))?;
        Ok(())
    }

    /// Enter ioctls this ring has made: its syscalls on the data path.
    pub fn enters(&self) -> u64 {
        self.enters
    }

    fn enter(&mut self, min_complete: u32, flags: EnterFlags) -> Result<u32, Error> {
        self.enters += 1;
        self.sq.publish();
        let args = EnterArgs {
            to_submit: self.sq.unread(),
            min_complete,
            flags: flags.bits(),
            resv: [0; 5],
        };
        // SAFETY: `args` is an EnterArgs the kernel only reads.
        let n = unsafe {
            self.dev
                .ioctl_raw(IOC_ENTER, &args as *const EnterArgs as usize)
        }
        .map_err(|e| e.context("enter"))?;
        Ok(n as u32)
    }

    /// The completions ready now; the slots go back to the kernel when the iterator drops.
    pub fn completions(&mut self) -> Completions<'_> {
        Completions { cq: &mut self.cq }
    }
}

/// Ready completions, oldest first.
pub struct Completions<'a> {
    cq: &'a mut CqConsumer<RawRing<Cqe>>,
}

impl Iterator for Completions<'_> {
    type Item = Cqe;
    fn next(&mut self) -> Option<Cqe> {
        self.cq.pop()
    }
}

impl Drop for Completions<'_> {
    fn drop(&mut self) {
        self.cq.release();
    }
}

/// What a failed completion says, for messages: the errno and the reason.
pub fn describe_failure(cqe: &Cqe) -> Option<String> {
    let reason = cqe.failure()?;
    let errno = std::io::Error::from_raw_os_error(-cqe.res);
    Some(format!(
        "{} ({}; errno {})",
        reason.describe(),
        errno,
        Errno(-cqe.res).0
    ))
}
