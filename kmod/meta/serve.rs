// SPDX-License-Identifier: GPL-2.0
//! The MetaServer's kernel answering its members: abi's `meta::serve` on the region in
//! this kernel's memory, its only writer. Members READ it one-sided; neither the
//! region's key nor their connection's QP lets them write it (meta.c, cm.c).

use core::sync::atomic::{fence, Ordering};

use crate::abi::meta::request::{Refusal, Reply, Request, REPLY_LEN};
use crate::abi::meta::serve::{serve, Shares};
use crate::abi::meta::tables::{Remote, Unreachable, Writable};
use crate::shim;

use super::{MetaNet, TABLES};

/// The region as this kernel reaches it: `len` bytes at `at`, mapped for the CPU.
struct Local {
    region: *mut shim::MetaRegion,
    at: *mut u8,
    len: usize,
}

impl Local {
    /// The address of `n` bytes at `off`, when they lie in the region.
    fn range(&self, off: u64, n: usize) -> Result<*mut u8, Unreachable> {
        match usize::try_from(off).ok().and_then(|o| o.checked_add(n).map(|end| (o, end))) {
            // SAFETY: inside the mapping (checked).
            Some((o, end)) if end <= self.len => Ok(unsafe { self.at.add(o) }),
            _ => Err(Unreachable),
        }
    }
}

impl Remote for Local {
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Unreachable> {
        let p = self.range(off, buf.len())?;
        // SAFETY: in the region (checked), which lives while the serving lock is held;
        // only this kernel writes it, under that lock.
        unsafe { core::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
}

impl Writable for Local {
    fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Unreachable> {
        let p = self.range(off, data.len())?;
        // Every earlier step of a frame's rewrite is visible to a member's READ before
        // any byte of this one (frame.rs's contract).
        fence(Ordering::Release);
        // SAFETY: as in `read`; members' NICs only read these bytes. Then handed to
        // the device, ordered before the next step (meta.c).
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len());
            shim::krcore_shim_meta_region_wrote(self.region, off, data.len() as u32);
        }
        Ok(())
    }
}

impl MetaNet {
    /// A member's SEND closed a key of this node: the region is checked by the next
    /// network work, queued now.
    pub(crate) fn invalidated(&self, events: &crate::engine::cq_events::CqEvents) {
        if self.ask_probe() {
            events.kick_net();
        }
    }

    /// Answers request `req` from the member at `from` into `reply`: false when this
    /// node serves no region (no reply goes; the member's wait ends it).
    pub(crate) fn serve(&self, from: [u8; 4], req: &[u8], reply: &mut [u8; REPLY_LEN]) -> bool {
        let mut serving = self.serving.lock();
        let region = self.region.load(Ordering::Acquire);
        if region.is_null() || !self.ready.load(Ordering::Acquire) {
            return false;
        }
        let mut local = Local {
            region,
            // SAFETY: a live region (freed only by `remove`, under this lock).
            at: unsafe { shim::krcore_shim_meta_region_va(region) },
            len: TABLES.bytes(),
        };
        let answer = match Request::decode(req) {
            Some(r) => {
                let s = &mut *serving;
                let mut shares = Shares {
                    held: s.held.as_mut(),
                    owners: s.owners.as_mut(),
                    // SAFETY: reads a module parameter.
                    share: unsafe { shim::krcore_shim_max_names(true) } as u16,
                };
                serve(&mut local, &self.served(), &mut shares, from, &r, &mut s.window[..])
            }
            None => Reply::Refused(Refusal::Malformed),
        };
        *reply = answer.encode();
        true
    }
}
