// SPDX-License-Identifier: GPL-2.0
//! The device's keys for receives advertised to peer kernels: abi's `cluster::keys`
//! chooses which key an advert takes and when one let go may be made again;
//! fastreg.c registers, destroys and makes them.
//!
//! Lock order: [`AdvertKeys`]'s mutex is taken inside a QP's or a links shard's lock
//! (an advert is posted, a key let go), and only fastreg.c's keys mutex inside it.

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::abi::cluster::keys::{Keys as KeyStates, Let, NoKey, Slot};
use crate::abi::engine::ADVERT_KEYS;
use crate::abi::errno::Errno;
use crate::engine::store::{KBuf, KStore};
use crate::shim::{self, IbPd, Keys, KrMr};

/// The device's advert keys: their states, and fastreg.c's keys they name.
pub(crate) struct AdvertKeys {
    hw: *mut Keys,
    states: Pin<KBox<Mutex<KeyStates<KStore>>>>,
}

// SAFETY: `hw` is used only under `states`'s mutex (and fastreg.c's own), or at drop.
unsafe impl Send for AdvertKeys {}
// SAFETY: as above.
unsafe impl Sync for AdvertKeys {}

impl AdvertKeys {
    /// `ADVERT_KEYS` keys on `pd`, all free.
    pub(crate) fn new(pd: *mut IbPd) -> Result<Pin<KBox<AdvertKeys>>> {
        let slots = KBuf::filled(ADVERT_KEYS as usize, Slot::default(), GFP_KERNEL)?;
        let states = KBox::pin_init(new_mutex!(KeyStates::new(slots), "krcore_advert_keys"), GFP_KERNEL)?;
        // SAFETY: a live PD (the Hw's, allocated before and freed after these).
        let hw = unsafe { shim::krcore_keys_alloc(pd, ADVERT_KEYS) };
        // SAFETY: pointer inspection only.
        match unsafe { shim::krcore_shim_ptr_err(hw.cast()) } {
            0 => Ok(KBox::pin(AdvertKeys { hw, states }, GFP_KERNEL)?),
            e => Err(Error::from_errno(e as i32)),
        }
    }

    /// Gives the keys the device's local QP their registrations run on, connected over
    /// GID `sgid_index` of `port` (`gid`, its netdev's `mac`).
    pub(crate) fn attach(&self, port: u32, sgid_index: u32, gid: &[u8; 16], mac: &[u8; 6]) -> Result<(), Errno> {
        // SAFETY: the keys live as long as this; `gid` is 16 bytes, `mac` 6.
        match unsafe { shim::krcore_keys_local(self.hw, port, sgid_index, gid.as_ptr(), mac.as_ptr()) } {
            0 => Ok(()),
            r => Err(Errno(-r)),
        }
    }

    /// A key for an advert: made over `len` bytes at `addr` of `mr`, its registration
    /// completed. Its rkey; `EAGAIN` while none is free.
    pub(crate) fn advert(&self, mr: *mut KrMr, addr: u64, len: u32) -> Result<u32, Errno> {
        let mut states = self.states.lock();
        let i = match states.next() {
            Ok(i) => i,
            Err(NoKey::Busy) => return Err(Errno::EAGAIN),
            Err(NoKey::Dead) => return Err(Errno::ENODEV),
        };
        let (mut rkey, mut lost) = (0, false);
        // SAFETY: the keys live as long as this; `mr` is held by the receive being
        // advertised.
        let r = unsafe { shim::krcore_key_post(self.hw, i as u32, mr, addr, len, &mut rkey, &mut lost) };
        if lost {
            states.lose(i);
        }
        if r != 0 {
            return Err(Errno(-r));
        }
        states.hold(i, rkey);
        Ok(rkey)
    }

    /// The receive holding `rkey` let it go (`closed`: the NIC closed it).
    pub(crate) fn release(&self, rkey: u32, closed: bool) {
        self.states.lock().release(rkey, closed, |l| self.let_go(l));
    }

    /// fastreg.c lets key `l.index` go as `l` says (the states' lock held): whether it
    /// is usable again.
    fn let_go(&self, l: Let) -> bool {
        // SAFETY: the keys live as long as this.
        unsafe { shim::krcore_key_let(self.hw, l.index as u32, l.remake) }
    }

    /// The device goes: every key is destroyed (before the PD), none made again.
    pub(crate) fn drain(&self) {
        let mut states = self.states.lock();
        if states.kill() {
            // SAFETY: the keys live as long as this; destroyed once (kill's answer).
            unsafe { shim::krcore_keys_drain(self.hw) };
        }
    }
}

impl Drop for AdvertKeys {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; nothing reaches it any more.
        unsafe { shim::krcore_keys_free(self.hw) };
    }
}
