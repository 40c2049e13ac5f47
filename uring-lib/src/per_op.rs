//! The one-ioctl-per-op interface (the original KRCore's `qpush`/`qpop`): every
//! operation crosses into the kernel on its own, through the same engine as the rings.
//! For applications ported from that interface and for comparing against it; new code
//! wants [`Ring`](crate::Ring), which crosses once per batch.

use krcore_abi::compat::{OneFlags, OneOp};
use krcore_abi::cqe::Cqe;
use krcore_abi::ioctl::{IOC_ONE, IOC_SETUP};
use krcore_abi::layout::SetupParams;
use krcore_abi::sqe::Sqe;

use crate::{Builder, Device, Error};

/// A file set up for one ioctl per operation. Its rings exist but are not mapped: the
/// kernel fills and drains them on the caller's behalf.
pub struct PerOp {
    dev: Device,
    params: SetupParams,
    ioctls: u64,
}

impl Builder {
    /// Sets up `dev` for the one-ioctl-per-op interface instead of mapped rings.
    #[doc(hidden)]
    pub fn build_per_op(self, dev: Device) -> Result<PerOp, Error> {
        let mut p = self.params();
        // SAFETY: `p` is a SetupParams the kernel reads and writes back.
        unsafe { dev.ioctl_raw(IOC_SETUP, &mut p as *mut SetupParams as usize) }
            .map_err(|e| e.context("per-op setup"))?;
        Ok(PerOp {
            dev,
            params: p,
            ioctls: 0,
        })
    }
}

impl PerOp {
    /// What the kernel granted at setup.
    pub fn params(&self) -> &SetupParams {
        &self.params
    }

    /// Submits one entry (one ioctl). `EAGAIN` when the SQ is full: pop first.
    ///
    /// # Safety
    /// Memory the entry names (through its MR) must stay registered and valid until the
    /// entry's completion is popped.
    pub unsafe fn push(&mut self, sqe: &Sqe) -> Result<(), Error> {
        self.call(OneFlags::PUSH, Some(sqe)).map(|_| ())
    }

    /// Takes one completion (one ioctl), waiting for it with `wait`.
    pub fn pop(&mut self, wait: bool) -> Result<Option<Cqe>, Error> {
        let wait = if wait {
            OneFlags::WAIT
        } else {
            OneFlags::empty()
        };
        self.call(OneFlags::POP | wait, None)
    }

    /// Submits one entry and takes one completion in the same ioctl (not necessarily
    /// this entry's: completions come in the order the kernel routes them).
    ///
    /// # Safety
    /// As for [`push`](Self::push).
    pub unsafe fn push_pop(&mut self, sqe: &Sqe, wait: bool) -> Result<Option<Cqe>, Error> {
        let wait = if wait {
            OneFlags::WAIT
        } else {
            OneFlags::empty()
        };
        match self.call(OneFlags::PUSH | OneFlags::POP | wait, Some(sqe))? {
            // The push is in; an interrupted wait leaves the pop to a retry.
            None if wait.contains(OneFlags::WAIT) => self.pop(true),
            c => Ok(c),
        }
    }

    /// The device file.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// ioctls made so far: this interface's syscalls on the data path.
    pub fn ioctls(&self) -> u64 {
        self.ioctls
    }

    fn call(&mut self, flags: OneFlags, sqe: Option<&Sqe>) -> Result<Option<Cqe>, Error> {
        let mut op = OneOp {
            sqe: sqe.copied().unwrap_or_default(),
            flags: flags.bits(),
            ..OneOp::default()
        };
        loop {
            self.ioctls += 1;
            // SAFETY: `op` is a OneOp the kernel reads and writes back.
            match unsafe { self.dev.ioctl_raw(IOC_ONE, &mut op as *mut OneOp as usize) } {
                // Interrupted before anything was pushed: nothing happened, try again.
                Err(e) if e.raw_os_error() == Some(krcore_abi::errno::Errno::EINTR.0) => continue,
                Err(e) => return Err(e.context("one-op ioctl")),
                Ok(_) => return Ok((op.popped == 1).then_some(op.cqe)),
            }
        }
    }
}
