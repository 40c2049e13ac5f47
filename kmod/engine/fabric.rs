// SPDX-License-Identifier: GPL-2.0
//! The engine's [`Fabric`] on one device: a mutex per pooled QP (its accounting and the
//! verbs object and scratch it is posted through), a mutex per links shard (message
//! links, their receives and waiting sends), the membership mutex (the device's verbs
//! objects, recovery), the exports mutex, the revocations' mutex (exports other nodes
//! are told of) and the drains' (set connections closing). The lock order is written in
//! devctx.rs.
//!
//! Hints let a caller skip the CQ and the recovery when nothing can be there without
//! taking these locks: abi's [`BusyHint`] (QPs that may have requests posted or have
//! failed, kept in each QP's section; see engine/route.rs), a flag set when the
//! membership's lock is released with QPs being recovered, a bit per shard set when
//! its lock is released with work for the recovery (waiting sends, owed completions),
//! and a flag while a set connection is drained (its flushes and markers are coming).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::lock::mutex::MutexBackend;
use kernel::sync::lock::Guard;
use kernel::sync::{Arc, Mutex};

use crate::abi::engine::{
    BusyHint, Connection, Exports, Fabric, Links, Members, Messages, MrKeys,
    PhysQp, Ports, Post, Qps, Recovery, Share, SHARES, one_more,
};
use crate::device::USERS;
use crate::abi::cqe::Reason;
use crate::abi::engine::{Export, Located};
use crate::abi::errno::Errno;
use crate::abi::meta::client::Answer;
use crate::abi::meta::record::{Grant, NAME_LEN};
use crate::engine::backend::{self, Hw, QpPost, SetEnd, POOL_QPS, QPS};
use crate::engine::keys::AdvertKeys;
use crate::meta::Meta;
use crate::abi::cluster::conn_set::Attempt;
use crate::abi::cluster::drain::{Begun, Drains};
use crate::abi::cluster::notice::Notice;
use crate::abi::cluster::revoke::{Progress, Revocations};
use crate::cluster::peer::{DialJob, PeerQp, PeerSets, QPS_PER_SET};
use crate::shim::{self, CmConn, IbQp};
use crate::engine::store::KStore;
use crate::engine::qp_bits::AtomicQpBits;
use crate::abi::engine::QpBits;

/// One pooled QP, under its mutex.
pub(crate) struct QpCell {
    pub(crate) acct: PhysQp<KStore>,
    pub(crate) post: QpPost,
}

/// What the membership mutex guards.
pub(crate) struct MemberState {
    pub(crate) hw: Hw,
    /// The device's connection sets to peer kernels.
    pub(crate) peers: PeerSets,
    pub(crate) recovery: Recovery,
    /// Registrations pinning memory with no lock held, each holding a
    /// [`backend::PdRef`].
    pub(crate) registering: u32,
}

/// The shared parts of a device, each under its own lock.
pub(crate) struct Shared {
    pub(crate) qps: KVec<Arc<Mutex<QpCell>>>,
    /// Each pooled QP's number, once the pool is built (0 before: no RC QP is QP 0).
    pub(crate) qpns: [AtomicU32; QPS],
    pub(crate) members: Pin<KBox<Mutex<MemberState>>>,
    /// The links shards (abi's `shard_of` picks one per peer and service).
    links: KVec<Pin<KBox<Mutex<Messages<KStore>>>>>,
    pub(crate) exports: Pin<KBox<Mutex<Exports<KStore>>>>,
    /// The node's held ports (abi's `ports`; a leaf).
    pub(crate) ports: Pin<KBox<Mutex<Ports<KStore>>>>,
    /// Each user's shares of this device's tables (abi's `shares`), by user slot
    /// (device.rs's user table): atomics, so the data path takes no lock for them.
    shares: KVec<[AtomicU32; SHARES]>,
    /// The exports' epoch as their lock last left it (abi's `Fabric::exports_epoch`).
    exports_epoch: AtomicU64,
    /// QPs that may have completions coming.
    pub(crate) busy_qps: BusyHint<AtomicU32>,
    /// The recovery has QPs to recover (see the module doc).
    pub(crate) members_busy: AtomicBool,
    /// Shards with work for the recovery, a bit each (see the module doc).
    links_busy: AtomicU32,
    /// What rings asked of the MetaServer (meta/mod.rs; a leaf lock).
    pub(crate) meta: Meta,
    /// Revocations of exports other nodes may hold, and answers owed to theirs (abi's
    /// `cluster::revoke`): taken after a shard's lock, before a QP's.
    pub(crate) revocations: Pin<KBox<Mutex<Revocations>>>,
    /// Set QP slots with a live connection, a bit each (whom a revocation asks).
    far_live: AtomicQpBits,
    /// A change in this node's use of a set is still to be told to its peer (its QP had
    /// no room for the notice): the next notice completion tells it (peer.rs).
    pub(crate) tells_waiting: AtomicBool,
    /// A revocation found the table full (its DEREG_MR or ring close waits for room):
    /// the device's tick marks closed rings so theirs are tried again.
    pub(crate) revoke_waiting: AtomicBool,
    /// Set connections closed and being drained before their QPs go (taken before only
    /// cm.c's connection lock).
    drains: Pin<KBox<Mutex<SetDrains>>>,
    /// A drain runs: its flushes are coming, so the CQ is polled (see `busy`).
    draining: AtomicBool,
    /// The keys of receives advertised to peer kernels (the Hw's; engine/keys.rs,
    /// whose lock is taken inside a QP's and a shard's).
    keys: KeysPtr,
}

/// The Hw's keys, reached without the membership lock.
#[derive(Clone, Copy)]
struct KeysPtr(*const AdvertKeys);

// SAFETY: AdvertKeys is Sync (its own mutex).
unsafe impl Send for KeysPtr {}
// SAFETY: as above.
unsafe impl Sync for KeysPtr {}

impl KeysPtr {
    fn get(&self) -> &AdvertKeys {
        // SAFETY: the Hw's keys, live as long as the Shared holding this (which owns
        // the Hw).
        unsafe { &*self.0 }
    }
}

/// A set connection's handle, as the drains hold it.
#[derive(Clone, Copy)]
pub(crate) struct Conn(*mut CmConn);

// SAFETY: the handles are used only under the drains' mutex.
unsafe impl Send for Conn {}

/// Connections drained at once, and as many waiting for a drain: more than a device's
/// sets ever let go of between two routings.
const DRAINS: usize = 16;

/// Set connections closed and being drained before their QPs go (abi's
/// `cluster::drain`; its lock is taken before only cm.c's and fastreg.c's).
pub(crate) type SetDrains = Drains<Conn, DRAINS, DRAINS>;

/// Moves `c`'s QP to the error state with the markers behind everything (cm.c).
fn begin_drain(c: Conn, send: u64, recv: u64) -> Begun {
    // SAFETY: a handle Rust holds, released once (here, when its markers return, or at
    // the device's removal).
    match unsafe { shim::krcore_cm_drain(c.0, send, recv) } {
        r if r < 0 => Begun::TornDown,
        1 => Begun::Draining { recv: false },
        _ => Begun::Draining { recv: true },
    }
}

/// Closes `c`, drained or torn down already (its completions are all routed).
fn close_drained(c: Conn) {
    // SAFETY: as above; closed once.
    unsafe { shim::krcore_shim_cm_close_later(c.0) };
}

impl Shared {
    /// The shared parts over `cells`, `members` and `shards` (at most 32, a power of
    /// two).
    pub(crate) fn new(
        cells: KVec<QpCell>,
        members: MemberState,
        shards: KVec<Messages<KStore>>,
        exports: Exports<KStore>,
        ports: Ports<KStore>,
    ) -> Result<Shared> {
        if !shards.len().is_power_of_two() || shards.len() > 32 {
            return Err(EINVAL);
        }
        let advert_keys = members.hw.advert_keys();
        let mut qps = KVec::with_capacity(cells.len(), GFP_KERNEL)?;
        for mut c in cells {
            c.post.advert_keys = advert_keys;
            qps.push(Arc::pin_init(new_mutex!(c, "krcore_qp"), GFP_KERNEL)?, GFP_KERNEL)?;
        }
        let mut links = KVec::with_capacity(shards.len(), GFP_KERNEL)?;
        for m in shards {
            links.push(KBox::pin_init(new_mutex!(m, "krcore_links"), GFP_KERNEL)?, GFP_KERNEL)?;
        }
        Ok(Shared {
            qps,
            qpns: [const { AtomicU32::new(0) }; QPS],
            members: KBox::pin_init(new_mutex!(members, "krcore_members"), GFP_KERNEL)?,
            links,
            exports: KBox::pin_init(new_mutex!(exports, "krcore_exports"), GFP_KERNEL)?,
            ports: KBox::pin_init(new_mutex!(ports, "krcore_ports"), GFP_KERNEL)?,
            shares: {
                let mut v = KVec::with_capacity(USERS, GFP_KERNEL)?;
                for _ in 0..USERS {
                    v.push([const { AtomicU32::new(0) }; SHARES], GFP_KERNEL)?;
                }
                v
            },
            exports_epoch: AtomicU64::new(0),
            busy_qps: BusyHint::new(AtomicU32::new(0)),
            members_busy: AtomicBool::new(false),
            links_busy: AtomicU32::new(0),
            meta: Meta::new()?,
            revocations: KBox::pin_init(
                new_mutex!(Revocations::new(), "krcore_revocations"),
                GFP_KERNEL,
            )?,
            far_live: AtomicQpBits::new(),
            revoke_waiting: AtomicBool::new(false),
            tells_waiting: AtomicBool::new(false),
            drains: KBox::pin_init(new_mutex!(SetDrains::new(), "krcore_drains"), GFP_KERNEL)?,
            draining: AtomicBool::new(false),
            keys: KeysPtr(advert_keys),
        })
    }

    /// Whether any set QP has a live connection (its peer's notices may come).
    pub(crate) fn sets_live(&self) -> bool {
        !self.far_live.load().is_empty()
    }

    /// Whether the CQ or the recovery may have anything (a hint; see the module doc).
    pub(crate) fn busy(&self) -> bool {
        self.busy_qps.any()
            || self.members_busy.load(Ordering::Acquire)
            || self.links_busy.load(Ordering::Acquire) != 0
            || self.draining.load(Ordering::Acquire)
    }

    /// Lets go of a set connection nothing posts on any more: drained, then closed, in
    /// the drains' turn.
    pub(crate) fn let_go(&self, conn: *mut CmConn) {
        let mut d = self.drains.lock();
        if let Err(c) = d.let_go(Conn(conn), &mut begin_drain, &mut close_drained) {
            // More than the sets ever let go of between two routings: closing undrained
            // risks a stale completion, so say so.
            pr_warn!("a set connection closed undrained: no drain free\n");
            // SAFETY: a handle Rust holds, closed once.
            unsafe { shim::krcore_shim_cm_close_later(c.0) };
        }
        self.draining.store(d.busy(), Ordering::Release);
    }

    /// Takes a completion's `wr_id` if it is a drain's marker (its drain may end).
    pub(crate) fn drain_marker(&self, wr_id: u64) -> bool {
        let Some((k, recv)) = SetDrains::marker_of(wr_id) else {
            return false;
        };
        let mut d = self.drains.lock();
        d.seen(k, recv, &mut begin_drain, &mut close_drained);
        self.draining.store(d.busy(), Ordering::Release);
        true
    }

    /// The device is going: cm.c tore the connections down; let go of the handles.
    pub(crate) fn forget_drains(&self) {
        let mut d = self.drains.lock();
        // SAFETY: handles Rust held, each released once.
        d.forget(|c| unsafe { shim::krcore_shim_cm_put(c.0) });
        self.draining.store(false, Ordering::Release);
    }

    /// The shards with work for the recovery, a bit each (a hint, as `busy`).
    pub(crate) fn links_busy(&self) -> u32 {
        self.links_busy.load(Ordering::Acquire)
    }

    /// Index of the pooled QP numbered `qpn`.
    pub(crate) fn qp_index(&self, qpn: u32) -> Option<u32> {
        self.qpns
            .iter()
            .position(|q| qpn != 0 && q.load(Ordering::Relaxed) == qpn)
            .map(|i| i as u32)
    }

    /// Gives the QP cells the pool's verbs objects once it is built (membership held).
    fn install_pool(&self, hw: &Hw) {
        for (i, cell) in self.qps.iter().enumerate() {
            if let Some((qp, qpn)) = hw.pool_qp(i) {
                cell.lock().post.qp = qp;
                self.qpns[i].store(qpn, Ordering::Relaxed);
            }
        }
    }

    /// Gives slot `i` (a peer set's, peer.rs) the QP `qp` numbered `qpn` of the
    /// connection `set` (its accounting started anew, listening for the peer's
    /// notices), or none (null, `None`: nothing posts on it or takes its notices from
    /// here; the number stays, so its accounting is still swept).
    pub(crate) fn install_qp(&self, i: usize, qp: *mut IbQp, qpn: u32, set: Option<SetEnd>) {
        {
            let mut c = self.qps[i].lock();
            c.post.qp = qp;
            c.post.peer = set;
        }
        if set.is_some() {
            self.qp(i as u32, |q, _| {
                q.revive();
                q.set_listening(true);
            });
            self.far_live.insert(i as u32);
        } else {
            self.qp(i as u32, |q, _| q.set_listening(false));
            self.far_live.remove(i as u32);
            // Nothing of it lands any more: no answer is awaited from it.
            self.revocations.lock().lost(QpBits::one(i as u32));
        }
        self.qpns[i].store(qpn, Ordering::Relaxed);
    }

    /// A work completion of set slot `i` failed: its QP is in the error state, whether
    /// the peer closed (the CM told cm.c, which moved it there so its work flushes) or
    /// its retries ran out (a notice's). If the slot still holds that connection, the
    /// QP is lost (abi's `PhysQp::lost` names why) before its flushed requests take
    /// their reasons; the sweep then ends its links and says so (devctx.rs). A notice's
    /// completion is the engine's only word of it otherwise (it sees requests').
    pub(crate) fn fail_set_qp(&self, i: u32) {
        let mut c = self.qps[i as usize].lock();
        let Some(end) = c.post.peer else {
            // Closed here: its drain's flushes.
            return;
        };
        // SAFETY: `end.conn` is live while it is installed: peer.rs lets a connection
        // go only after clearing it here, under this lock.
        let closed = unsafe { shim::krcore_shim_cm_broken(end.conn) };
        let QpCell { acct, post } = &mut *c;
        self.busy_qps.section(acct, post, |q, _| q.lost(closed));
    }

    /// Every QP slot fits the revocations' sets (a notice for a slot past them could
    /// never be marked as having no room).
    const _SLOTS_FIT: () = assert!(crate::engine::backend::QPS <= crate::abi::engine::MAX_QPS);

    /// Fails the set QPs `slots` that never answered a revocation by its deadline:
    /// nothing of theirs lands after.
    fn fail_silent(&self, slots: QpBits) {
        for i in slots.iter().filter(|&i| (i as usize) < self.qps.len()) {
            self.qp(i, |q, _| q.fail_with(Reason::Deadline));
        }
    }

    /// Posts the revocation notices due (abi's `cluster::revoke`), each when its QP has
    /// room; what has none waits for a notice's completion on that QP, and holds up no
    /// other QP's.
    pub(crate) fn flush_revocations(&self) {
        let mut r = self.revocations.lock();
        let mut full = QpBits::EMPTY;
        while let Some(due) = r.next_due(full) {
            let live = (due.slot as usize) < self.qps.len();
            let sent = live && self.post_notice(due.slot, &due.notice);
            if !sent && live {
                full.insert(due.slot);
                continue;
            }
            r.sent(due);
        }
    }

    /// Posts notice `n` on set QP slot `slot` (a live one) if it has room for one:
    /// whether it did. One that had none waits for a notice of that QP to complete.
    pub(crate) fn post_notice(&self, slot: u32, n: &Notice) -> bool {
        let b = n.encode();
        self.qp(slot, |q, post| {
            let ok = q.notice_room() && post.post_notice(&b).is_ok();
            if ok {
                q.notice_posted();
            }
            ok
        })
    }

    /// The pool is being destroyed: no QP is posted on from here (membership not held).
    pub(crate) fn uninstall_pool(&self) {
        for cell in self.qps.iter() {
            cell.lock().post.qp = core::ptr::null_mut();
        }
    }
}

/// The membership lock, held.
pub(crate) struct MembersGuard<'a> {
    shared: &'a Shared,
    pub(crate) g: Guard<'a, MemberState, MutexBackend>,
}

impl MembersGuard<'_> {
    /// Prewarms the pool (see backend.rs), giving the QP cells their verbs objects.
    pub(crate) fn prewarm(&mut self) -> bool {
        let built = self.g.hw.prewarm();
        if built {
            self.shared.install_pool(&self.g.hw);
        }
        built
    }
}

impl MembersGuard<'_> {
    /// The first connection of a caller's dial is up: see [`PeerSets::first_up`].
    /// Whether it was installed (CONNECTs to the node bind to it from now on).
    pub(crate) fn first_up(&mut self, job: &DialJob, q: PeerQp) -> bool {
        let MemberState { peers, recovery, .. } = &mut *self.g;
        let installed = peers.first_up(self.shared, job, q);
        if let Some(slot) = installed {
            recovery.revive(slot);
        }
        installed.is_some()
    }

    /// A caller dialed `job` at `now_ms` (devctx's `dial`): see [`PeerSets::dialed`].
    pub(crate) fn dialed(
        &mut self,
        job: DialJob,
        rest: &[Option<PeerQp>; QPS_PER_SET - 1],
        how: Attempt,
        now_ms: i64,
    ) -> bool {
        let MemberState { peers, recovery, .. } = &mut *self.g;
        let up = peers.dialed(self.shared, job, rest, how, now_ms);
        for slot in up.clone().into_iter().flatten() {
            recovery.revive(slot);
        }
        up.is_some()
    }

    /// A peer's connection was accepted for the set it asked for: see
    /// [`PeerSets::adopt`]. Whether it was adopted. Its slot's recovery starts anew as
    /// it is installed: a recovery of the connection it replaced (an adoption the
    /// peer gave up and began again) must not fail it, nor its set once up.
    pub(crate) fn adopt(&mut self, addr: &[u8; 16], index: u32, q: PeerQp) -> bool {
        let MemberState { peers, recovery, .. } = &mut *self.g;
        let (installed, up) = peers.adopt(self.shared, addr, index, q);
        for slot in Iterator::chain(installed.into_iter(), up.into_iter().flatten()) {
            recovery.revive(slot);
        }
        installed.is_some()
    }
}

impl Drop for MembersGuard<'_> {
    fn drop(&mut self) {
        let work = !self.g.recovery.quiet();
        self.shared.members_busy.store(work, Ordering::Release);
    }
}

/// A links shard's lock, held.
pub(crate) struct ShardGuard<'a> {
    shared: &'a Shared,
    k: u32,
    g: Guard<'a, Messages<KStore>, MutexBackend>,
}

impl core::ops::Deref for ShardGuard<'_> {
    type Target = Messages<KStore>;
    fn deref(&self) -> &Messages<KStore> {
        &self.g
    }
}

impl core::ops::DerefMut for ShardGuard<'_> {
    fn deref_mut(&mut self) -> &mut Messages<KStore> {
        &mut self.g
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        // Still under the shard's lock: the bit follows the state it describes. Only
        // this lock changes this bit, so reading it first is exact, and spares the
        // read-modify-write when it stays (a CONNECT's or a matched message's case).
        let bit = 1u32 << self.k;
        let busy = !self.g.quiet();
        let was = self.shared.links_busy.load(Ordering::Relaxed) & bit != 0;
        if busy && !was {
            self.shared.links_busy.fetch_or(bit, Ordering::Release);
        } else if !busy && was {
            self.shared.links_busy.fetch_and(!bit, Ordering::Release);
        }
    }
}

impl Links<KStore> for Shared {
    type Shard<'a> = ShardGuard<'a>;

    fn shards(&self) -> u32 {
        self.links.len() as u32
    }

    fn shard(&self, k: u32) -> ShardGuard<'_> {
        ShardGuard {
            shared: self,
            k,
            g: self.links[k as usize].lock(),
        }
    }
}

impl Members<KStore> for MembersGuard<'_> {

    fn connect(
        &mut self,
        gid: [u8; 16],
        service: u32,
        opposite: Option<u32>,
        user: u32,
    ) -> Result<Connection, Errno> {
        if self.g.hw.pool_gid().is_none() && !self.g.hw.is_local_gid(&gid) {
            // Another node, and no pool yet (the prewarm work has not run, or prewarm
            // is off): the pool is built on the port's address first, which is this
            // node's id and the set's source; else the CONNECT would be taken for a
            // loopback one to an address that is not ours.
            self.prewarm();
        }
        if let Some(own) = self.g.hw.pool_gid() {
            // This node's id, for the both-at-once rule (known once the pool is).
            self.g.peers.set_me(&own);
            if gid != own {
                let now = crate::clock::coarse_ms();
                return self.g.peers.connect(self.shared, &gid, service, now, user);
            }
        }
        let built = self.g.hw.pool_qp(0).is_some();
        let c = self.g.hw.connect(gid, service, opposite);
        if !built {
            self.shared.install_pool(&self.g.hw);
        }
        c
    }

    fn disconnect(&mut self, qp: u32, user: u32) {
        // Pooled QPs and peer sets stay connected for the next CONNECT; the engine
        // tracks bindings, the peer table how many a set has, and whose.
        self.g.peers.disconnect(self.shared, qp, user);
    }

    fn accept(&mut self, gid: [u8; 16], qp: u32) -> Result<Connection, Errno> {
        self.g.peers.accept(self.shared, &gid, qp)
    }

    fn import_named(&mut self, name: &[u8; NAME_LEN], qp: u32, user: u32) -> Answer<(Export, Grant)> {
        // A pooled QP connects this node to itself; a set's, to its peer.
        let node = match (qp as usize) < POOL_QPS {
            true => self.shared.meta.id(),
            false => self.g.peers.node_of_qp(qp),
        };
        match node {
            Some(node) => self.shared.meta.import(name, node, user),
            // Not registered yet: asking registers (or says why not).
            None if (qp as usize) < POOL_QPS => self.shared.meta.import(name, 0, user),
            None => Answer::Failed(Reason::NotOnPeer),
        }
    }

    fn resolve_named(&mut self, name: &[u8; NAME_LEN], user: u32) -> Answer<(Located, Export, Grant)> {
        self.shared.meta.resolve(name, user)
    }
}

impl Qps<KStore> for Shared {
    fn count(&self) -> usize {
        self.qps.len()
    }

    fn in_use(&self, i: u32) -> bool {
        // Numbered once a QP was installed; a peer slot whose set was closed keeps its
        // number (peer.rs), so its accounting is still swept.
        self.qpns[i as usize].load(Ordering::Relaxed) != 0
    }

    fn qp<R>(&self, i: u32, f: impl FnOnce(&mut PhysQp<KStore>, &mut dyn Post) -> R) -> R {
        let mut cell = self.qps[i as usize].lock();
        let QpCell { acct, post } = &mut *cell;
        self.busy_qps.section(acct, post, f)
    }

    fn release_key(&self, rkey: u32, closed: bool) {
        // (A key is let go under a QP's or a shard's lock: the keys' is inside them.)
        // After the device's removal each call is refused there.
        self.keys.get().release(rkey, closed);
    }
}

impl Fabric<KStore> for Shared {
    type Members<'a> = MembersGuard<'a>;

    fn members(&self) -> MembersGuard<'_> {
        MembersGuard {
            shared: self,
            g: self.members.lock(),
        }
    }

    fn exports<R>(&self, f: impl FnOnce(&mut Exports<KStore>) -> R) -> R {
        let mut e = self.exports.lock();
        let r = f(&mut e);
        // Published before the lock goes: see `Fabric::exports_epoch`.
        self.exports_epoch.store(e.removals(), Ordering::Release);
        r
    }

    fn exports_epoch(&self) -> u64 {
        self.exports_epoch.load(Ordering::Acquire)
    }

    fn ports<R>(&self, f: impl FnOnce(&mut Ports<KStore>) -> R) -> R {
        f(&mut self.ports.lock())
    }

    fn take_share(&self, user: u32, s: Share) -> Result<(), Reason> {
        let Some(c) = self.shares.get(user as usize) else {
            return Err(Reason::Quota);
        };
        // SAFETY: a plain read of a module parameter.
        let param = unsafe { shim::krcore_shim_max_share(s as u32) };
        let limit = s.limit(param, crate::engine::devctx::RECVS as u32);
        c[s as usize]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| one_more(n, limit))
            .map(|_| ())
            .map_err(|_| Reason::Quota)
    }

    fn give_share(&self, user: u32, s: Share, n: u32) {
        if let Some(c) = self.shares.get(user as usize) {
            let _ = c[s as usize].fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                Some(m.saturating_sub(n))
            });
        }
    }

    fn unchecked_wire(&self) -> Option<(u64, u32)> {
        let (mut addr, mut rkey) = (0, 0);
        // SAFETY: reads module parameters into locals.
        unsafe { shim::krcore_shim_test_unchecked_wire(&mut addr, &mut rkey) }
            .then_some((addr, rkey))
    }

    fn dereg_mr(&self, keys: MrKeys) {
        backend::dereg_mr(keys)
    }

    fn descriptor(&self) -> u64 {
        backend::descriptor()
    }

    fn publish(&self, name: &[u8; NAME_LEN], export: &Export, grant: Grant) -> Answer<()> {
        self.meta.publish(name, export, grant)
    }

    fn unpublish(&self, descriptor: u64) -> bool {
        let rkey = self.meta.published_rkey(descriptor);
        // Imported elsewhere perhaps: every node with a set is told before it goes. A
        // full table takes nothing away yet: the caller waits for room.
        if let Some(rkey) = rkey {
            let live = self.far_live.load();
            let now = crate::clock::coarse_ms();
            let silent = {
                let mut r = self.revocations.lock();
                if r.begin(rkey, live, now) {
                    QpBits::EMPTY
                } else {
                    // Room from revocations past their deadline (a closed ring's may
                    // have nobody to end them), whose silent QPs fail.
                    let silent = r.expire(now, crate::clock::deadline_ms());
                    if !r.begin(rkey, live, now) {
                        drop(r);
                        self.revoke_waiting.store(true, Ordering::Release);
                        self.fail_silent(silent);
                        return false;
                    }
                    silent
                }
            };
            self.fail_silent(silent);
        }
        self.meta.unpublish(descriptor);
        if rkey.is_some() {
            self.flush_revocations();
        }
        true
    }

    fn revoke_far(&self, rkey: u32) -> Answer<()> {
        let now = crate::clock::coarse_ms();
        let deadline = crate::clock::deadline_ms();
        let progress = self.revocations.lock().progress(rkey, now, deadline);
        match progress {
            Progress::Done => Answer::Done(()),
            Progress::Pending => {
                self.flush_revocations();
                Answer::Pending
            }
            // Silent nodes' QPs fail: nothing of theirs lands after.
            Progress::TimedOut(slots) => {
                self.fail_silent(slots);
                Answer::Done(())
            }
        }
    }
}
