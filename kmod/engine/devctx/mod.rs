// SPDX-License-Identifier: GPL-2.0
//! A device context: one RDMA device's verbs objects, the engine's accounting of its
//! physical QPs, its exported MRs, its message links, and the rings bound to it, each
//! part under its own lock, so rings on different physical QPs never wait for each
//! other and ring-local work (NOP, rejected entries, reaping) waits for no other ring.
//!
//! Here: the context, its creation and removal, and what inspection reads. Its work is
//! in a file per concern: the rings' side (`enter.rs`: setup, enter and its waits, the
//! one-op ioctl, SQPOLL's step, close), routing (`route.rs`: the CQ, notices, recovery),
//! the kernel-direct baseline (`direct.rs`), entries io_uring carries (`uring.rs`), and
//! which network work runs when (`net.rs`). The objects it holds do their own work,
//! each beside its fields and lock: the rings' table (engine/rings.rs), the cluster's
//! dials on the peer sets (cluster/net.rs's `Net`, what cm.c's listener asks too) and
//! the MetaServer's jobs on its link (meta/work.rs's `MetaNet`).
//!
//! # Lock order
//!
//! krcore's locks are always taken in this order and never the other way:
//!
//! 1. a file's `setup_lock` (ring/file.rs): serializes IOC_SETUP on one file;
//! 2. the registry's `devices` mutex (device.rs): which devices exist;
//! 3. a device's `cq` mutex (here): polling the CQ and routing what it holds, so
//!    completions reach each ring in the order the CQ gave them;
//! 4. a ring's `ctx` mutex (ring/ctx.rs): everything of that ring's engine;
//! 5. the device's membership mutex (fabric.rs): the verbs objects and the pool's
//!    bindings, recovery; taken by CONNECT, DISCONNECT, LISTEN and UNLISTEN, taking a
//!    listen's offers (by the router too, under 3 and 4), ring close and the recovery,
//!    never by messages or one-sided requests;
//! 6. one links shard's mutex (fabric.rs): the message links of the peers and services
//!    abi's `shard_of` maps there, their receives and waiting sends, and the services
//!    rings listen on; taken by two-sided messages, CONNECT, DISCONNECT, LISTEN (every
//!    shard in turn, under 5), ring close and the recovery; never two;
//! 7. the device's revocations (fabric.rs, abi's `cluster::revoke`): exports other nodes
//!    are told of, and answers owed to theirs; taken by DEREG_MR and ring close (through
//!    the engine's `unpublish`/`revoke_far`) and by routing, which post notices under it;
//! 8. one pooled QP's mutex (fabric.rs): its accounting and posting on it; never two;
//! 9. leaves, under which nothing is taken but cm.c's per-connection mutex: the device's
//!    exports, its ring table and the freed rings' counters (rings.rs), a ring's completion inbox (ring/ctx.rs), the
//!    CQ's arming (`arm`), what rings asked of
//!    the MetaServer (meta/mod.rs's
//!    `krcore_meta`), the node's held ports (fabric.rs's `krcore_ports`, taken under 4,
//!    5 or 6 by CONNECT, LISTEN and a virtual QP's release), the set connections being drained (fabric.rs's `krcore_drains`),
//!    the door's gate of peer kernels' challenges (cluster/door.rs, taken by
//!    cm.c's listener with none held);
//!
//! and the registry's `users` mutex (device.rs, the per-user quotas) is a leaf too.
//! The keys of advertised receives (engine/keys.rs's `krcore_advert_keys`, abi's
//! `cluster::keys`) are taken under a shard's, a QP's and the membership's (an
//! advert's key made, or let go), and take only fastreg.c's `krcore_keys` mutex, the
//! innermost lock of all (under which a key's registration on the device's local QP is
//! waited for, at most a second). The MetaServer's serving (meta/mod.rs's
//! `krcore_meta_serving`) is taken by a member's request on its connection's CQ
//! workqueue with nothing held (after the registry's `devices`, let go), and by the
//! device's removal; it takes nothing. The serving workqueue then takes cm.c's
//! per-connection mutex, with nothing held, to post the reply.
//! cm.c's per-connection mutex is taken under a QP's (a notice receive taken and posted
//! again) and under the drains' (a drain begun), and takes nothing. cm.c's listener
//! answers a peer's request for a set under rdma_cm's handler mutex, taking 2, then 5
//! (abi's both-at-once rule); so nothing here destroys an rdma_cm id under 5: a set's
//! connections are closed on cm.c's workqueue. Routing takes a notice (under 3) to its
//! shard (6), a revocation's to every ring (4, one at a time) and to 7, and a peer's
//! word of its use of a set (`Use`) to 5, as it does a notice completion while this
//! node's own word waits for room (5, then a QP's, 8). The
//! MetaServer connection's mutex (meta/mod.rs's `krcore_meta_link`) is taken with none of
//! these held, by network work and the device's removal only, and only the MetaServer
//! leaf is taken inside it. abi's
//! engine takes 5-9 as its `fabric` module says (verify's fake fabric checks that order in
//! every property test and fuzzing run). Routing runs under 3 and a QP's 8 and hands a
//! completion to its ring's inbox (9); the ring takes it in under its own lock (4), from
//! the router with nothing but 3 held. A ring's wait queue (ring/wait.rs) is woken under the
//! ring's mutex and slept on with no lock held.
//!
//! None is held while user memory is touched: ioctl arguments are copied in before and
//! out after (the device query collects its rows first), REG_MR pins with no lock held
//! (the engine's `register` protocol; the registration is counted so the device's
//! removal waits for it instead of freeing the PD under it), and mmap takes no lock at
//! all (a file's ring areas are reference-counted and reached through its binding).
//! None is held across a wait for a peer either, except IOC_DIRECT's bounded benchmark
//! wait (under 3). Every function here must be called from a context that may sleep.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

use crate::abi::stats::Counters;
use crate::abi::engine::{
    Completion, Exports, ExportSlot, Fabric, Links, MAX_LISTENERS, Messages, MessageStorage,
    HeldPort, PhysQp, PortStorage, Ports, Posted, Qps, Recovery, Slot, write_listen_line,
};
use crate::engine::backend::{CqArm, CqPoll, Hw, QpPost, POOL_QPS, SEND_DEPTH};
use crate::engine::cq_events::CqEvents;
use crate::engine::fabric::{MemberState, QpCell, Shared};
use crate::meta::MetaNet;
use crate::cluster::door::Door;
use crate::cluster::peer::PeerSets;
use crate::shim::{self, IbDevice};
use crate::engine::store::KBuf;
use crate::engine::qp_bits::AtomicQpBits;
use crate::engine::rings::Rings;

mod direct;
mod net;
mod enter;
mod route;
mod uring;

pub(crate) use uring::Carried;

/// Work completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;

/// Exported MRs a device can hold (a power of two; one slot always stays free).
const EXPORTS: usize = 1024;

/// Slots of the device's held ports (abi's `ports`; a power of two, twice the ports it
/// holds): a port per link at most, and the listens'.
const PORT_SLOTS: usize = 2 * SHARDS * LINKS * 2;

/// Shards a device's message links are spread over, each under its own lock (at most
/// 64: a listen keeps the shards that hold offers for it in a word).
const SHARDS: usize = 8;
/// Links (pairs of virtual QPs for messages) a shard can hold.
const LINKS: usize = 512;
/// Receives a shard can hold waiting for messages (a user may hold half: abi's
/// `Share::limit`).
pub(crate) const RECVS: usize = 2048;
/// Sends a shard can hold waiting for receives: each holds a send credit, so the pool's
/// send queues bound them (all may be on one shard's links).
const WAITING: usize = POOL_QPS * SEND_DEPTH as usize;

/// A device context.
#[pin_data]
pub(crate) struct DevCtx {
    /// The CQ's poller; routing holds it.
    #[pin]
    pub(crate) cq: Mutex<CqPoll>,
    /// QPs, membership, exports (fabric.rs).
    pub(crate) shared: Shared,
    /// The rings bound to the device (rings.rs).
    #[pin]
    pub(crate) rings: Rings,
    #[pin]
    pub(crate) arm: Mutex<CqArm>,
    /// A ring may have completions in its inbox, or closed. Set by a swap, as verify's
    /// loom model of this routing sets it (see its device.rs).
    pub(crate) dirty: AtomicBool,
    /// Arming the CQ found completions that routing left there, because the busy hint
    /// said there were none (no hint foresaw them: a drain's flushes are one, and the
    /// hint covers those now): the next route polls the CQ whatever the hint says.
    /// Without it the arm would find them again, and a waiter would go round arming and
    /// never sleep.
    pub(crate) unpolled: AtomicBool,
    /// Processes asleep waiting for completions: while any is, the CQ stays armed.
    pub(crate) sleepers: AtomicU32,
    /// Rings with an eventfd registered: while any has one, the CQ stays armed too, so
    /// their completions are routed, and the eventfd told, with nobody in the kernel
    /// (an application's event loop waits on the eventfd, not in enter).
    pub(crate) listeners: AtomicU32,
    /// The device is gone.
    pub(crate) dead: AtomicBool,
    /// What cm.c's listener asks before it accepts a peer kernel (cluster/door.rs).
    #[pin]
    pub(crate) door: Door,
    /// Peer kernels' notices dropped (short or malformed).
    pub(crate) bad_notices: AtomicU64,
    /// A request's deadline (the `request_timeout_ms` parameter at creation).
    pub(crate) deadline_ms: i64,
    /// Set QPs failed and said so in the kernel log, a bit per slot (see
    /// [`say_failed_sets`](Self::say_failed_sets)).
    pub(crate) failed_sets: AtomicQpBits,
    /// The CQ's event work (cq_events.rs).
    pub(crate) events: CqEvents,
    /// The connection to the MetaServer, and the region if this node serves it.
    pub(crate) meta: MetaNet,
}
impl DevCtx {
    /// Allocates the context of `ib`: PD, CQ, the engine's pool accounting.
    pub(crate) fn new(ib: *mut IbDevice) -> Result<Arc<DevCtx>> {
        let events = CqEvents::new()?;
        // The pool's QPs and the sets' the device keeps, at most QPS.
        let peers = crate::engine::backend::peer_sets(ib);
        let slots = POOL_QPS + peers * crate::cluster::peer::QPS_PER_SET;
        let mut cells = KVec::with_capacity(slots, GFP_KERNEL)?;
        for _ in 0..slots {
            let acct = PhysQp::new(KBuf::filled(SEND_DEPTH as usize, Posted::EMPTY, GFP_KERNEL)?);
            cells.push(
                QpCell {
                    acct,
                    post: QpPost::new()?,
                },
                GFP_KERNEL,
            )?;
        }
        let exports = Exports::new(KBuf::filled(EXPORTS, ExportSlot::EMPTY, GFP_KERNEL)?);
        // Seeded from the CSPRNG: the first ephemeral ports are not guessable.
        let ports = Ports::new(
            PortStorage {
                slots: KBuf::filled(PORT_SLOTS, HeldPort::EMPTY, GFP_KERNEL)?,
            },
            crate::engine::backend::descriptor() as u32,
        );
        let mut shards = KVec::with_capacity(SHARDS, GFP_KERNEL)?;
        for _ in 0..SHARDS {
            let mut m = Messages::new(MessageStorage {
                links: KBuf::filled(LINKS, Slot::EMPTY, GFP_KERNEL)?,
                half_open: KBuf::filled(LINKS, 0u32, GFP_KERNEL)?,
                recvs: KBuf::filled(RECVS, Slot::EMPTY, GFP_KERNEL)?,
                waiting: KBuf::filled(WAITING, Slot::EMPTY, GFP_KERNEL)?,
                owed: KBuf::filled(RECVS + WAITING + LINKS, (0, Completion::Done), GFP_KERNEL)?,
                due: KBuf::filled(LINKS, 0u32, GFP_KERNEL)?,
                made: KBuf::filled(crate::device::USERS, 0u16, GFP_KERNEL)?,
            });
            m.set_index(shards.len() as u32);
            shards.push(m, GFP_KERNEL)?;
        }
        // The verbs objects last; a failure after them drops them (Hw releases them).
        let hw = Hw::new(ib, events.raw(), peers)?;
        let cq_ptr = hw.cq();
        let poll = CqPoll::new(cq_ptr)?;
        let (verbs_pd, _) = hw.pd_cq();
        let members = MemberState {
            hw,
            // This node's id is set from its address once the pool is built (peer.rs).
            peers: PeerSets::new(0, peers)?,
            registering: 0,
            recovery: Recovery::new(2),
        };
        // From here a failure drops `members`, whose Hw releases the verbs objects.
        let shared = Shared::new(cells, members, shards, exports, ports)?;
        let meta = MetaNet::new()?;
        let ctx = Arc::pin_init(
            pin_init!(DevCtx {
                cq <- new_mutex!(poll, "krcore_cq"),
                shared,
                rings <- Rings::new(),
                arm <- new_mutex!(CqArm(cq_ptr), "krcore_cq_arm"),
                dirty: AtomicBool::new(false),
                unpolled: AtomicBool::new(false),
                sleepers: AtomicU32::new(0),
                listeners: AtomicU32::new(0),
                dead: AtomicBool::new(false),
                door <- Door::new(verbs_pd, cq_ptr),
                bad_notices: AtomicU64::new(0),
                deadline_ms: crate::clock::deadline_ms(),
                failed_sets: AtomicQpBits::new(),
                events,
                meta,
            }),
            GFP_KERNEL,
        )?;
        ctx.events.bind(&*ctx);
        Ok(ctx)
    }

    /// This node's address on the device, once its pool is built.
    pub(crate) fn pool_gid(&self) -> Option<[u8; 16]> {
        self.shared.members().g.hw.pool_gid()
    }

    /// The device's counters: the freed rings', every live ring's, and the recovery's.
    pub(crate) fn counters(&self) -> Counters {
        let mut c = self.rings.counters();
        c.recoveries = self.shared.members().g.recovery.recovered();
        let door = self.door.counts();
        (c.auth_refused, c.auth_replayed) = (door.refused, door.replayed);
        (c.auth_fresh, c.auth_stale) = (door.fresh, door.stale);
        c.bad_notices = self.bad_notices.load(Ordering::Relaxed);
        c
    }

    /// Writes the device's pool (a line per loopback QP), its listened services (a line
    /// each, with its user and the offers waiting in every shard), the ports CONNECTs
    /// hold (abi's `Ports::write`) and the peer table (abi's `Peers::write`).
    pub(crate) fn write_peers(&self, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        for i in 0..POOL_QPS as u32 {
            self.shared.qp(i, |q, _| q.write_pool_line(i, w))?;
        }
        // Every shard holds the same listener entries (abi's listen.rs): shard 0's.
        let mut listens = [None; MAX_LISTENERS];
        for (slot, l) in listens.iter_mut().zip(self.shared.shard(0).listeners()) {
            *slot = Some(l);
        }
        for (service, ring) in listens.into_iter().flatten() {
            let shards = self.shared.shards();
            let offers = (0..shards).map(|k| self.shared.shard(k).offers(service)).sum();
            let uid = self.shared.ports(|p| p.get(service as u16).map_or(0, |h| h.uid));
            write_listen_line(service, uid, ring, offers, w)?;
        }
        self.shared.ports(|p| p.write(w))?;
        let now = crate::clock::coarse_ms();
        self.shared.members().g.peers.write(now, w)
    }

    /// cm.c is about to tear this device's connections down: each peer is told (a
    /// proved farewell), then nothing polls the CQ from here (their QPs' flushed
    /// completions stay there, naming freed QPs); a routing under way finishes first.
    pub(crate) fn quiesce(&self) {
        // Its peers told first, while the CQ is still routed.
        self.farewell();
        let _cq = self.cq.lock();
        self.dead.store(true, Ordering::SeqCst);
        self.door.shut();
    }

    /// The device is going away: wait for registrations pinning without the lock (they
    /// hold the PD), stop routing, destroy its QPs (nothing touches memory any more),
    /// then release every ring's MRs and bindings, then the CQ and PD, then the CQ's
    /// event work. Idempotent.
    pub(crate) fn remove(&self) {
        loop {
            if self.shared.members().g.registering == 0 {
                break;
            }
            // A registration pins a bounded range; it ends within its page faults.
            // SAFETY: plain sleep, no lock held.
            unsafe { shim::krcore_shim_msleep(1) };
        }
        // The MetaServer connection and region, before the verbs they use (a job running
        // on the connection ends within its bounded verb first).
        self.meta.remove();
        let mut cq = self.cq.lock();
        self.dead.store(true, Ordering::SeqCst);
        // cm.c's request handlers that pinned the PD and CQ before (the CQ lock held is
        // not one they take).
        self.door.close();
        // cm.c tore this device's connections down before the removal began.
        self.shared.members().g.peers.forget();
        self.shared.forget_drains();
        self.shared.uninstall_pool();
        self.shared.members().g.hw.destroy_qps();
        self.rings.each(|_, r| {
            let mut ctx = r.ctx.lock();
            ctx.engine().abandon(&self.shared);
            // io_uring waits for the commands it carried: each fails now.
            ctx.hand_back(0);
            // A sleeper finds the device gone at once.
            ctx.waitq().wake();
        });
        cq.cq = core::ptr::null_mut();
        self.arm.lock().0 = core::ptr::null_mut();
        self.shared.members().g.hw.destroy();
        drop(cq);
        // The CQ is gone: no event queues the work any more; wait for a running one.
        self.events.stop();
    }
}

/// The MetaServer tick of a device context (the device watch's delayed work, every
/// `meta_check_ms`).
#[no_mangle]
extern "C" fn krcore_rs_dev_tick(ctx: *mut core::ffi::c_void) {
    // SAFETY: as for krcore_rs_dev_prewarm: the watch is stopped before the context goes.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    // The MetaServer's node also checks that no member closed its region's key.
    let probe = dev.meta.ask_probe();
    if dev.shared.meta.check() || probe {
        // On the network workers, never here: a worker running MetaServer work leaves
        // it to another that runs it (meta/mod.rs's `working`), and only a worker's
        // pass wakes the rings its answers are for.
        dev.events.kick_net();
    }
}

/// The expiry of a device context (the device watch's other delayed work, every
/// second whatever the parameters).
#[no_mangle]
extern "C" fn krcore_rs_dev_expire(ctx: *mut core::ffi::c_void) {
    // SAFETY: as for krcore_rs_dev_prewarm: the watch is stopped before the context goes.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    // A closed ring's revocation that found no room tries again (room comes by the
    // revocations' deadline, whoever's they are).
    if dev.shared.revoke_waiting.swap(false, Ordering::AcqRel) {
        dev.touch_closed_rings();
        dev.route();
    } else if dev.listeners.load(Ordering::Acquire) > 0 {
        // Rings whose completions nobody waits for in krcore (an eventfd, a poll, io_uring
        // commands): what waits on a deadline there (a SEND for a receive, a CONNECT for
        // a listen) expires here, as a sleeping enter's slices expire it.
        dev.route();
    }
}

/// The prewarm work item of a device context.
#[no_mangle]
extern "C" fn krcore_rs_dev_prewarm(ctx: *mut core::ffi::c_void) {
    // SAFETY: `ctx` is the DevCtx the watch was started on; the registry keeps it alive
    // and stops the watch (waiting for this work) before dropping it.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    dev.prewarm();
}
