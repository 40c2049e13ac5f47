//! REG_MR in three steps, so user memory is never pinned under a shared lock.
//!
//! Pinning pages can sleep for long (page faults, reclaim) and reaches the caller's
//! address space, so the engine does not pin. Submission *takes* a REG_MR entry and
//! stops (`Stall::Register`), leaving a [`Registration`] in the ring; the caller
//! [`claim`](Ring::claim_registration)s it under its lock, pins and registers with no
//! lock held, then hands the result to [`finish_registration`](Ring::finish_registration)
//! under the lock again, which records the MR, exports it when it grants remote access,
//! and writes the CQE. A ring holds one registration at a time: a second submitter finds
//! it in progress and stops as well (its claim returns `None`).
//!
//! Only the process that set up the ring may pin memory, and only through a thread of
//! its own ([`Caller::Owner`]): pinning charges the pages to the caller's address space
//! and memlock limit, and the SQ polling thread has no user address space of its own.
//! Any other caller gets [`Reason::NotOwner`] for the entry.
//!
//! [`Reason::NotOwner`]: super::cqe::Reason::NotOwner

use super::backend::MrKeys;
use super::cqe::{Cqe, Reason};
use super::errno::Errno;
use super::export::{Export, ExportError};
use super::fabric::Fabric;
use super::ring::RingMem;
use super::ring_state::{LocalMr, Ring};
use super::shares::Share;
use super::sqe::{MrAccess, Sqe};
use super::Store;

/// Who is submitting, as the kernel tells the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A thread of the process that set up the ring (the enter or one-op ioctl).
    Owner,
    /// Anyone else: the SQ polling thread, or another process holding the file.
    Other,
}

/// What the kernel tells the engine about a submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// Who submits.
    pub caller: Caller,
    /// The time, in ms (for throttling; see `blame`).
    pub now_ms: i64,
}

impl Context {
    /// The ring's owner, at time 0 (tests and benchmarks without a clock).
    pub const OWNER: Context = Context {
        caller: Caller::Owner,
        now_ms: 0,
    };
}

/// A REG_MR taken from the SQ, to be pinned by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The entry's `user_data`.
    pub user_data: u64,
    /// Start address in the owner's address space.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Rights.
    pub access: MrAccess,
}

/// The ring's registration slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    /// None in progress.
    None,
    /// Taken from the SQ, not yet claimed.
    Taken(Registration),
    /// Being pinned by a caller.
    Claimed,
}

impl Pending {
    /// CQEs it owes (the room rule counts them).
    pub(crate) fn owes(&self) -> usize {
        match self {
            Pending::None => 0,
            _ => 1,
        }
    }
}

/// Attempts at drawing an unused descriptor before giving up (a collision of two 64-bit
/// random values is already improbable).
const DRAWS: usize = 4;

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// Claims the registration submission stopped at, once.
    pub fn claim_registration(&mut self) -> Option<Registration> {
        match self.registration {
            Pending::Taken(r) => {
                self.registration = Pending::Claimed;
                Some(r)
            }
            _ => None,
        }
    }

    /// Completes the claimed registration `r` with the caller's result: records the MR
    /// and its export (when it grants remote access) and writes the CQE (`res` = MR
    /// handle, `aux` = descriptor). A closed ring, or a full table, gets the MR
    /// deregistered.
    pub fn finish_registration<F: Fabric<S>>(
        &mut self,
        r: Registration,
        result: Result<MrKeys, Errno>,
        f: &F,
    ) {
        debug_assert_eq!(self.registration, Pending::Claimed);
        self.registration = Pending::None;
        let ud = r.user_data;
        let keys = match result {
            Ok(k) => k,
            Err(e) => return self.emit(Cqe::err_errno(ud, Reason::Verbs, e)),
        };
        if self.is_closed() {
            f.dereg_mr(keys);
            return self.emit(Cqe::err(ud, Reason::RingClosed));
        }
        let remote = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_ATOMIC;
        let descriptor = if r.access.bits() & remote.bits() != 0 {
            match self.export(&r, keys.rkey, f) {
                Ok(d) => d,
                Err(why) => {
                    f.dereg_mr(keys);
                    return self.emit(Cqe::err(ud, why));
                }
            }
        } else {
            0
        };
        let mr = LocalMr {
            addr: r.addr,
            len: r.len,
            access: r.access,
            keys,
            descriptor,
            sends: 0,
            recvs: 0,
        };
        let cqe = match self.tables.mrs.insert(mr) {
            Ok(h) => Cqe::ok(ud, h as i32, descriptor),
            Err(_) => {
                if descriptor != 0 {
                    f.exports(|e| e.remove(descriptor));
                    f.give_share(self.creds.user, Share::Exports, 1);
                }
                f.dereg_mr(keys);
                Cqe::err(ud, Reason::TableFull)
            }
        };
        self.emit(cqe);
    }

    /// Records an export of `r` under a fresh descriptor, taking this user's share of
    /// the table (see `shares`): why not, when the share or the table is used up.
    fn export<F: Fabric<S>>(&self, r: &Registration, rkey: u32, f: &F) -> Result<u64, Reason> {
        f.take_share(self.creds.user, Share::Exports)?;
        let d = self.draw(r, rkey, f);
        if d.is_none() {
            f.give_share(self.creds.user, Share::Exports, 1);
        }
        d.ok_or(Reason::TableFull)
    }

    /// Inserts the export under a fresh descriptor; `None` when the table is full.
    fn draw<F: Fabric<S>>(&self, r: &Registration, rkey: u32, f: &F) -> Option<u64> {
        for _ in 0..DRAWS {
            let descriptor = f.descriptor();
            let e = Export {
                descriptor,
                owner: (self.id, self.gen),
                addr: r.addr,
                len: r.len,
                access: r.access,
                rkey,
            };
            match f.exports(|x| x.insert(e)) {
                Ok(()) => return Some(descriptor),
                Err(ExportError::Full) => return None,
                Err(ExportError::Taken) => continue,
            }
        }
        None
    }
}
