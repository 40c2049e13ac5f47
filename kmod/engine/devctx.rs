// SPDX-License-Identifier: GPL-2.0
//! A device context: one RDMA device's verbs objects, the engine's accounting of its
//! physical QPs, its exported MRs, its message links, and the rings bound to it, each
//! part under its own lock, so rings on different physical QPs never wait for each
//! other and ring-local work (NOP, rejected entries, reaping) waits for no other ring.
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
//!    exports, its ring table (`rings`), a ring's completion inbox (ring/ctx.rs), the
//!    CQ's arming (`arm`), the freed rings' counters (`retired`), what rings asked of
//!    the MetaServer (meta/mod.rs's
//!    `krcore_meta`), the set connections being drained (fabric.rs's `krcore_drains`),
//!    the peer kernels' challenges (`auth`, taken by cm.c's listener with none held);
//!
//! and the registry's `users` mutex (device.rs, the per-user quotas) is a leaf too.
//! cm.c's per-connection mutex is taken under a QP's (a notice receive taken and posted
//! again) and under the drains' (a drain begun), and takes nothing. cm.c's listener
//! answers a peer's request for a set under rdma_cm's handler mutex, taking 2, then 5
//! (abi's both-at-once rule); so nothing here destroys an rdma_cm id under 5: a set's
//! connections are closed on cm.c's workqueue. Routing takes a notice (under 3) to its
//! shard (6), a revocation's to every ring (4, one at a time) and to 7. The
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

use core::ffi::c_long;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::time::Ktime;

use crate::abi::compat::{OneFlags, OneOp};
use crate::abi::stats::Counters;
use crate::abi::cluster::auth::{Gate, Refusal, NONCE_LEN};
use crate::abi::cluster::conn_set::Attempt;
use crate::abi::cluster::notice::{Notice, NOTICE_LEN};
use crate::abi::cqe::{Cqe, Reason};
use crate::abi::engine::{
    complete_wc, direct_complete, is_backend_wr_id, notice_recv_index, sweep, Caller,
    Completion, Context, Links, FAR_WRITE_WR_ID, NOTICE_WR_ID,
    ExportSlot, Exports, Fabric, MessageStorage, Messages, PhysQp, Posted, Qps, Recovery,
    Registration, Slot, Stall, Wc, WcStatus, DIRECT_WR_ID, MAX_LISTENERS, write_listen_line,
};
use crate::abi::errno::Errno;
use crate::abi::layout::{EnterArgs, EnterFlags, SetupParams};
use crate::abi::waiter::{Wait, WaitPolicy};
use crate::engine::backend::{self, CqArm, CqPoll, Hw, QpPost, SetEnd, POOL_QPS, QPS, SEND_DEPTH};
use crate::engine::cq_events::CqEvents;
use crate::engine::fabric::{drain_of, MemberState, QpCell, Shared};
use crate::meta::MetaNet;
use crate::cluster::peer::{PeerQp, PeerSets, QPS_PER_SET};
use crate::ring::ctx::{RingAreas, RingCell, RingCtx};
use crate::shim::{self, IbCq, IbDevice, IbPd, WcC};
use crate::engine::store::KBuf;

/// Peer kernels' challenges a device keeps outstanding at most.
const AUTH_CHALLENGES: usize = 64;

/// The tick-updated clock the engine's times come from, ms.
pub(crate) fn coarse_ms() -> i64 {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_coarse_ms() }
}

/// The requests' deadline (`request_timeout_ms`), ms.
pub(crate) fn deadline_ms() -> i64 {
    // SAFETY: reads a module parameter.
    unsafe { shim::krcore_shim_request_timeout_ms() as i64 }
}

/// The monotonic clock, us.
fn now_us() -> u64 {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_now_us() }
}

/// How long `IOC_DIRECT` waits for its completion before failing the QP.
const DIRECT_PATIENCE_MS: i64 = 1000;

/// Work completions taken from the CQ per poll.
const POLL_BATCH: usize = 16;

/// Exported MRs a device can hold (a power of two; one slot always stays free).
const EXPORTS: usize = 1024;

/// Shards a device's message links are spread over, each under its own lock (at most
/// 64: a listen keeps the shards that hold offers for it in a word).
const SHARDS: usize = 8;
/// Links (pairs of virtual QPs for messages) a shard can hold.
const LINKS: usize = 512;
/// Receives a shard can hold waiting for messages.
const RECVS: usize = 1024;
/// Sends a shard can hold waiting for receives: each holds a send credit, so the pool's
/// send queues bound them (all may be on one shard's links).
const WAITING: usize = POOL_QPS * SEND_DEPTH as usize;

/// What a step of [`DevCtx::until`] asks for next.
enum Next<T> {
    /// Finished with a value.
    Done(T),
    /// Poll again (after a scheduling point).
    Again,
    /// Register memory for the ring without the lock, then step again.
    Register(Registration),
}

/// How a wait (`DevCtx::until`) ended.
enum Ended<T> {
    /// Its step finished with a value.
    Done(T),
    /// A signal is pending.
    Interrupted,
    /// The caller's bound passed first.
    TimedOut,
}

/// Work a submission leaves: a registration its caller carries out without the ring's
/// lock, or a wait for another node (a connection set, the MetaServer, a revocation's
/// answers) or MetaServer work due, which the device's workers do if anyone can: no
/// caller does network work.
enum Work {
    Register(Registration),
    Remote,
}

/// The rings bound to a device, by slot (a leaf lock).
struct RingTable {
    rings: KVec<Option<Arc<RingCell>>>,
    /// Generation of each slot, bumped on reuse.
    gens: KVec<u16>,
}

/// A device context.
#[pin_data]
pub(crate) struct DevCtx {
    /// The CQ's poller; routing holds it.
    #[pin]
    cq: Mutex<CqPoll>,
    /// QPs, membership, exports (fabric.rs).
    shared: Shared,
    #[pin]
    rings: Mutex<RingTable>,
    #[pin]
    arm: Mutex<CqArm>,
    /// A ring may have completions in its inbox, or closed. Set by a swap, as verify's
    /// loom model of this routing sets it (see its device.rs).
    dirty: AtomicBool,
    /// Arming the CQ found completions that routing left there, because the busy hint
    /// said there were none (a closed connection's flushed receives): the next route
    /// polls the CQ whatever the hint says. Without it the arm would find them again,
    /// and a waiter would go round arming and never sleep.
    unpolled: AtomicBool,
    /// Processes asleep waiting for completions: while any is, the CQ stays armed.
    sleepers: AtomicU32,
    /// Rings with an eventfd registered: while any has one, the CQ stays armed too, so
    /// their completions are routed, and the eventfd told, with nobody in the kernel
    /// (an application's event loop waits on the eventfd, not in enter).
    listeners: AtomicU32,
    /// Counters of the rings freed from the table, as they last stood (a leaf lock).
    #[pin]
    retired: Mutex<Counters>,
    /// The device is gone.
    dead: AtomicBool,
    /// The PD and CQ, fixed from creation to removal, for cm.c's request handler
    /// (which must not wait for the membership lock: a CONNECT holding it may be
    /// closing a connection in cm.c).
    verbs: (AtomicPtr<IbPd>, AtomicPtr<IbCq>),
    /// cm.c's request handlers and dials using `verbs` now; the removal waits for them.
    cm_pins: AtomicU32,
    /// Peer kernels' notices dropped (short or malformed).
    bad_notices: AtomicU64,
    /// Peer kernels' challenges issued and proofs refused (abi's `cluster::auth`; a
    /// leaf lock).
    #[pin]
    auth: Mutex<Gate<AUTH_CHALLENGES>>,
    /// A request's deadline (the `request_timeout_ms` parameter at creation).
    deadline_ms: i64,
    /// Set QPs failed and said so in the kernel log, a bit per slot (see
    /// [`say_failed_sets`](Self::say_failed_sets)).
    failed_sets: AtomicU64,
    /// The CQ's event work (cq_events.rs).
    events: CqEvents,
    /// The connection to the MetaServer, and the region if this node serves it.
    meta: MetaNet,
}

impl DevCtx {
    /// Allocates the context of `ib`: PD, CQ, the engine's pool accounting.
    pub(crate) fn new(ib: *mut IbDevice) -> Result<Arc<DevCtx>> {
        let events = CqEvents::new()?;
        let mut cells = KVec::with_capacity(QPS, GFP_KERNEL)?;
        for _ in 0..QPS {
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
        let mut shards = KVec::with_capacity(SHARDS, GFP_KERNEL)?;
        for _ in 0..SHARDS {
            let mut m = Messages::new(MessageStorage {
                links: KBuf::filled(LINKS, Slot::EMPTY, GFP_KERNEL)?,
                half_open: KBuf::filled(LINKS, 0u32, GFP_KERNEL)?,
                recvs: KBuf::filled(RECVS, Slot::EMPTY, GFP_KERNEL)?,
                waiting: KBuf::filled(WAITING, Slot::EMPTY, GFP_KERNEL)?,
                owed: KBuf::filled(RECVS + WAITING, (0, Completion::Done), GFP_KERNEL)?,
                due: KBuf::filled(LINKS, 0u32, GFP_KERNEL)?,
            });
            m.set_index(shards.len() as u32);
            shards.push(m, GFP_KERNEL)?;
        }
        // The verbs objects last; a failure after them drops them (Hw releases them).
        let hw = Hw::new(ib, events.raw())?;
        let cq_ptr = hw.cq();
        let poll = CqPoll::new(cq_ptr)?;
        let (verbs_pd, _) = hw.pd_cq();
        let members = MemberState {
            hw,
            // This node's id is set from its address once the pool is built (peer.rs).
            peers: PeerSets::new(0)?,
            registering: 0,
            recovery: Recovery::new(2),
        };
        // From here a failure drops `members`, whose Hw releases the verbs objects.
        let shared = Shared::new(cells, members, shards, exports)?;
        let meta = MetaNet::new()?;
        let ctx = Arc::pin_init(
            pin_init!(DevCtx {
                cq <- new_mutex!(poll, "krcore_cq"),
                shared,
                rings <- new_mutex!(
                    RingTable {
                        rings: KVec::new(),
                        gens: KVec::new(),
                    },
                    "krcore_rings"
                ),
                arm <- new_mutex!(CqArm(cq_ptr), "krcore_cq_arm"),
                dirty: AtomicBool::new(false),
                unpolled: AtomicBool::new(false),
                sleepers: AtomicU32::new(0),
                listeners: AtomicU32::new(0),
                retired <- new_mutex!(Counters::ZERO, "krcore_retired"),
                dead: AtomicBool::new(false),
                verbs: (AtomicPtr::new(verbs_pd), AtomicPtr::new(cq_ptr)),
                cm_pins: AtomicU32::new(0),
                bad_notices: AtomicU64::new(0),
                auth <- new_mutex!(Gate::new(), "krcore_auth"),
                // SAFETY: reads a module parameter.
                deadline_ms: unsafe { shim::krcore_shim_request_timeout_ms() } as i64,
                failed_sets: AtomicU64::new(0),
                events,
                meta,
            }),
            GFP_KERNEL,
        )?;
        ctx.events.bind(&*ctx);
        Ok(ctx)
    }

    /// The CQ had an event (cq_events.rs): route what it holds, waking the rings that
    /// gained completions, and arm it again while anyone sleeps or listens.
    pub(crate) fn cq_event(&self) {
        loop {
            self.route();
            let armed_for = self.sleepers.load(Ordering::Acquire)
                + self.listeners.load(Ordering::Acquire);
            if armed_for == 0 || !self.arm_cq() {
                return;
            }
        }
    }

    /// Arms the CQ for its next event; `true` when it holds completions already (route
    /// again, now polling it, rather than wait).
    fn arm_cq(&self) -> bool {
        let missed = self.arm.lock().arm();
        if missed {
            self.unpolled.store(true, Ordering::Release);
        }
        missed
    }

    /// Builds the QP pool if the device can have one now (the prewarm work item), then
    /// serves the MetaServer if this is its node, registers with it, and connects to
    /// the `cm_peer` kernel, if one is named.
    pub(crate) fn prewarm(&self) {
        // SAFETY: reads a module parameter.
        if unsafe { shim::krcore_shim_prewarm_enabled() } && self.shared.members().prewarm() {
            pr_debug!("QP pool ready\n");
            self.meta_up();
            self.dial_peer();
        }
    }

    /// Serves the MetaServer's region if this node is named for it, then registers this
    /// node (a MetaServer not up yet is tried again at the next request).
    fn meta_up(&self) {
        let dev = self.shared.members().g.hw.peer_resources();
        let Some((ib, pd, _, gid)) = dev else { return };
        self.meta.serve_if_named(&crate::meta::Device { ib, pd, gid });
        if self.shared.meta.id().is_none() {
            self.shared.meta.ask_register();
            self.meta_work();
        }
    }

    /// Prewarms the set to the kernel named by the `cm_peer` parameter (peer.rs), with
    /// no lock held while it connects, and says how long it took.
    fn dial_peer(&self) {
        let mut peer = [0u8; 16];
        // SAFETY: `peer` has the 16 bytes of a GID.
        if unsafe { shim::krcore_shim_cm_peer_gid(peer.as_mut_ptr()) } != 0 {
            return;
        }
        // SAFETY: plain call.
        let now = unsafe { shim::krcore_shim_coarse_ms() };
        if !self.shared.members().g.peers.prewarm(&self.shared, &peer, now) {
            return;
        }
        let started = now_us();
        self.dial();
        let us = now_us() - started;
        let [a, b, c, d] = [peer[12], peer[13], peer[14], peer[15]];
        match self.shared.members().g.peers.ready(&peer) {
            Some(qpn) => {
                pr_info!("connected to the peer kernel at {a}.{b}.{c}.{d} in {us} us, QP {qpn}\n")
            }
            None => pr_warn!("no connection to the peer kernel at {a}.{b}.{c}.{d} after {us} us\n"),
        }
    }

    /// The device's network work, on one of the module's workers (cq_events.rs), never
    /// on a caller's thread: the connection sets CONNECTs asked for, and the
    /// MetaServer's jobs, whoever's they are (several workers at once, each taking the
    /// next job). When it did any, every ring is woken, so entries that waited for it
    /// are taken again (a waiter steps, an eventfd is told).
    pub(crate) fn net_work(&self) {
        let mut did = false;
        // Bounded: what comes due meanwhile is another kick's.
        for _ in 0..64 {
            if self.dead.load(Ordering::Acquire) {
                return;
            }
            let dialed = self.dial();
            if !dialed && !self.meta_work() {
                break;
            }
            did = true;
        }
        // Answers from other nodes (a revocation's) come through the CQ.
        if self.route() > 0 || did {
            let n = self.rings.lock().rings.len();
            for r in (0..n).filter_map(|slot| self.ring_at(slot)) {
                r.ctx.lock().wake();
            }
        }
    }

    /// Queues the device's network work (see [`net_work`](Self::net_work)) if a worker
    /// has any to do: a dial asked for, or MetaServer work due (a wait for another
    /// node's answer, a revocation's, needs none: its completion wakes the ring). Under
    /// the submitting ring's lock.
    fn kick_net(&self) {
        if self.shared.meta.due() || self.shared.members().g.peers.job_waiting() {
            self.events.kick_net();
        }
    }

    /// Runs the MetaServer's due jobs (meta/mod.rs). Whether there were any.
    fn meta_work(&self) -> bool {
        if !self.shared.meta.due() {
            return false;
        }
        let dev = self.shared.members().g.hw.peer_resources();
        let dev = dev.map(|(ib, pd, _, gid)| crate::meta::Device { ib, pd, gid });
        self.meta.work(&self.shared.meta, dev)
    }

    /// What cm.c tells a node asking for this node's MetaServer.
    pub(crate) fn meta_offer(&self) -> shim::MetaOffer {
        self.meta.offer()
    }

    /// Makes the connection set a CONNECT asked for (peer.rs), with no lock held.
    /// Whether there was one to make.
    fn dial(&self) -> bool {
        let job = {
            let mut m = self.shared.members();
            m.g.peers.take_job().map(|j| (j, m.g.hw.peer_resources()))
        };
        let Some((job, verbs)) = job else {
            return false;
        };
        // Pinned while it dials, as cm.c's request handlers: the removal waits for the
        // pin before it destroys the PD and CQ the dial's QPs are created on (cm.c tears
        // the dial itself down first, so the wait is short).
        let pinned = self.cm_pin().is_some();
        let verbs = verbs.filter(|_| pinned);
        // SAFETY: plain calls; no lock held (tests use the delay to make two nodes'
        // dials overlap).
        unsafe { shim::krcore_shim_msleep(shim::krcore_shim_cm_dial_delay_ms()) };
        let mut made: [Option<PeerQp>; QPS_PER_SET] = [None; QPS_PER_SET];
        let mut how = Attempt::Failed;
        if let Some((ib, pd, cq, gid)) = verbs {
            how = Attempt::Established;
            for (index, q) in made.iter_mut().enumerate() {
                let (mut conn, mut qp, mut qpn) = (core::ptr::null_mut(), core::ptr::null_mut(), 0);
                // SAFETY: the device, PD and CQ live while the pin is held (the removal
                // waits for it), and cm.c tears this connection down (or refuses it)
                // before the removal; the GIDs are 16 bytes each.
                let r = unsafe {
                    shim::krcore_shim_cm_connect(
                        ib, pd, cq, gid.as_ptr(), job.addr.as_ptr(), 10_000, shim::CM_PEER,
                        index as u8, &mut conn, &mut qp, &mut qpn,
                    )
                };
                if r == Errno::EALREADY.to_neg() {
                    // Both at once: the peer's attempt wins; its set is adopted here.
                    crate::cluster::peer::log_set(&job.addr, "our attempt yielded to the peer's");
                    how = Attempt::Yielded;
                    break;
                }
                if r != 0 {
                    let [a, b, c, d] = [job.addr[12], job.addr[13], job.addr[14], job.addr[15]];
                    pr_warn!("no connection to the peer kernel at {a}.{b}.{c}.{d}: error {r}\n");
                    how = Attempt::Failed;
                    break;
                }
                *q = Some(PeerQp { conn, qp, qpn });
            }
        }
        // A removal that began meanwhile tore the connections down: they are let go,
        // never installed.
        if self.dead.load(Ordering::SeqCst) {
            how = Attempt::Failed;
        }
        // SAFETY: plain call (the clock the peer table's other times come from).
        let now = unsafe { shim::krcore_shim_coarse_ms() };
        self.shared.members().dialed(job, &made, how, now);
        if pinned {
            self.cm_unpin();
        }
        true
    }

    /// A peer kernel at `addr` asks for connection `index` of a set (cm.c's listener):
    /// whether to accept it (see peer.rs).
    pub(crate) fn cm_request(&self, addr: &[u8; 16], index: u32) -> Result<(), Errno> {
        // SAFETY: plain call.
        let now = unsafe { shim::krcore_shim_coarse_ms() };
        let mut m = self.shared.members();
        let MemberState { peers, hw, .. } = &mut *m.g;
        // A request before this node's pool was built: no id for the rule yet, and no
        // CONNECT of ours to compete with; refused until the pool is up (the peer
        // retries).
        let own = hw.pool_gid().ok_or(Errno::EAGAIN)?;
        peers.set_me(&own);
        peers.request(&self.shared, addr, index, now)
    }

    /// The connection accepted for it: adopted into the set (see peer.rs); whether it
    /// was.
    pub(crate) fn cm_adopt(&self, addr: &[u8; 16], index: u32, q: PeerQp) -> bool {
        self.shared.members().adopt(addr, index, q)
    }

    /// The PD and CQ a peer kernel's connection is accepted with (cm.c), pinned: the
    /// removal waits until [`cm_unpin`](Self::cm_unpin).
    pub(crate) fn cm_pin(&self) -> Option<(*mut IbPd, *mut IbCq)> {
        // SeqCst with the removal's store and load: one of the two sees the other.
        self.cm_pins.fetch_add(1, Ordering::SeqCst);
        if self.dead.load(Ordering::SeqCst) {
            self.cm_unpin();
            return None;
        }
        Some((self.verbs.0.load(Ordering::Relaxed), self.verbs.1.load(Ordering::Relaxed)))
    }

    /// A peer kernel's hello from IPv4 address `from` (cm.c, pinned): `nonce` is issued
    /// as its challenge (abi's `cluster::auth`).
    pub(crate) fn cm_challenge(&self, from: u32, nonce: [u8; NONCE_LEN]) {
        self.auth.lock().challenge(from, nonce, coarse_ms())
    }

    /// A peer kernel's proof from `from` answering challenge `nonce`: spent, and
    /// whether its tag may be checked.
    pub(crate) fn cm_redeem(&self, from: u32, nonce: &[u8; NONCE_LEN]) -> Result<(), Refusal> {
        self.auth.lock().redeem(from, nonce, coarse_ms())
    }

    /// That proof's tag was wrong.
    pub(crate) fn cm_bad_tag(&self, from: u32) {
        self.auth.lock().bad_tag(from, coarse_ms())
    }

    /// Ends a [`cm_pin`](Self::cm_pin).
    pub(crate) fn cm_unpin(&self) {
        self.cm_pins.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sets up a ring on this device; returns it and its areas (which the file maps
    /// without any lock).
    pub(crate) fn attach(&self, p: &mut SetupParams) -> Result<(Arc<RingCell>, RingAreas)> {
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        let mut t = self.rings.lock();
        let slot = match t.rings.iter().position(|r| r.is_none()) {
            Some(i) => i,
            None if t.rings.len() < u16::MAX as usize => {
                // Both tables grow together or not at all: a failure between two pushes
                // would leave them of different lengths.
                t.rings.reserve(1, GFP_KERNEL)?;
                t.gens.reserve(1, GFP_KERNEL)?;
                t.rings.push(None, GFP_KERNEL)?;
                t.gens.push(0, GFP_KERNEL)?;
                t.rings.len() - 1
            }
            None => return Err(EMFILE),
        };
        let gen = t.gens[slot].wrapping_add(1);
        let ctx = RingCtx::setup(p, slot as u16, gen)?;
        let areas = ctx.areas();
        let ring = RingCell::new(ctx, slot as u16, gen)?;
        t.gens[slot] = gen;
        t.rings[slot] = Some(ring.clone());
        Ok((ring, areas))
    }

    /// Submits for `ring` as `caller`, routes completions, and with GETEVENTS waits
    /// until `min_complete` CQEs are ready. Returns SQEs taken.
    pub(crate) fn enter(&self, ring: &RingCell, args: &EnterArgs, caller: Caller) -> Result<c_long> {
        let flags = args.validate()?;
        let deadline = flags
            .contains(EnterFlags::TIMEOUT)
            .then(|| now_us() + args.timeout_us as u64);
        let mut taken = 0u32;
        let done = self.until(ring, deadline, |ctx| {
            let (n, work) = self.submit(ctx, args.to_submit - taken, caller)?;
            taken += n;
            match work {
                Some(Work::Register(r)) => return Ok(Next::Register(r)),
                // The workers do it; this caller waits for its CQEs as for any other.
                Some(Work::Remote) => self.kick_net(),
                None => {}
            }
            Ok(
                if !flags.contains(EnterFlags::GETEVENTS)
                    || ctx.engine().cq_unread() >= args.min_complete
                {
                    Next::Done(())
                } else {
                    Next::Again
                },
            )
        })?;
        match done {
            Ended::Interrupted if taken == 0 => Err(Errno::EINTR.into()),
            Ended::TimedOut if taken == 0 => Err(Errno::ETIME.into()),
            _ => Ok(taken as c_long),
        }
    }

    /// The one-op ioctl (abi/src/compat.rs): pushes `op.sqe` into `ring`'s SQ and runs
    /// the same submission as enter, then pops one CQE into `op.cqe`, waiting for it with
    /// `WAIT`. A wait interrupted after a push returns with `popped` 0.
    pub(crate) fn one(&self, ring: &RingCell, op: &mut OneOp, caller: Caller) -> Result {
        let flags = op.validate()?;
        let pushed = flags.contains(OneFlags::PUSH);
        if pushed && !ring.ctx.lock().app_push(op.sqe) {
            return Err(EAGAIN);
        }
        op.popped = 0;
        let popped = self.until(ring, None, |ctx| {
            match self.submit(ctx, u32::MAX, caller)? {
                (_, Some(Work::Register(r))) => return Ok(Next::Register(r)),
                (_, Some(Work::Remote)) => self.kick_net(),
                _ => {}
            }
            if !flags.contains(OneFlags::POP) {
                return Ok(Next::Done(None));
            }
            let c = ctx.app_pop();
            Ok(if c.is_some() || !flags.contains(OneFlags::WAIT) {
                Next::Done(c)
            } else {
                Next::Again
            })
        })?;
        match popped {
            Ended::Interrupted | Ended::TimedOut if !pushed => Err(Errno::EINTR.into()),
            Ended::Interrupted | Ended::TimedOut | Ended::Done(None) => Ok(()),
            Ended::Done(Some(c)) => {
                op.cqe = c;
                op.popped = 1;
                Ok(())
            }
        }
    }

    /// Runs `step` under `ring`'s lock (after taking in what was routed to it) until it
    /// is done or a signal arrives (`None`), carrying out the registrations it asks for
    /// without the lock, and routing the CQ after each step. Between steps it polls or
    /// sleeps as abi's `WaitPolicy` says (polling for `wait_spin_us`, the module
    /// parameter), sleeping on the ring's wait queue with the CQ armed, so a waiting
    /// process costs no CPU: a routed completion wakes it, and so does a slice passing
    /// (deadlines and recovery advance in its steps). A wait with a `deadline` (us, the
    /// `now_us` clock) ends there.
    fn until<T>(
        &self,
        ring: &RingCell,
        deadline: Option<u64>,
        mut step: impl FnMut(&mut RingCtx) -> Result<Next<T>>,
    ) -> Result<Ended<T>> {
        // Made at the first step that found nothing, so a call that needs no wait reads
        // neither the parameter nor the clock.
        let mut policy: Option<WaitPolicy> = None;
        // Whether the CQ was routed since the last step: a wait is decided only by a
        // step that saw what was there.
        let mut routed = false;
        loop {
            let mut ctx = ring.ctx.lock();
            ring.absorb_mail(&mut ctx);
            let next = step(&mut ctx);
            // CQEs the step wrote itself (NOPs, rejections, control entries) reach the
            // eventfd and other waiters as routed ones do.
            ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            match next? {
                Next::Done(v) => {
                    drop(ctx);
                    // Route what our own submission may have completed already.
                    self.route();
                    return Ok(Ended::Done(v));
                }
                Next::Register(r) => {
                    drop(ctx);
                    self.register(ring, r);
                    continue;
                }
                Next::Again => {}
            }
            if !routed {
                drop(ctx);
                self.route();
                routed = true;
                continue;
            }
            routed = false;
            if kernel::current!().signal_pending() {
                return Ok(Ended::Interrupted);
            }
            let policy = policy.get_or_insert_with(|| {
                // SAFETY: reads a module parameter.
                WaitPolicy::new(unsafe { shim::krcore_shim_wait_spin_us() }).until(deadline)
            });
            let timeout_us = match policy.next(now_us()) {
                Wait::Sleep { timeout_us } => timeout_us,
                Wait::TimedOut => return Ok(Ended::TimedOut),
                Wait::Poll => {
                    drop(ctx);
                    // SAFETY: plain scheduling point, no locks held.
                    unsafe { shim::krcore_shim_cond_resched() };
                    continue;
                }
            };
            // The generation is read under the ring's lock, after a step that saw every
            // CQE routed before it, and the CQ armed after that: a completion from here
            // on moves the generation (the router wakes under this lock, and counts
            // this sleeper, registered before the lock goes), or was missed by the arm
            // (then poll again at once).
            let wq = ctx.waitq();
            let seen = wq.generation();
            let missed = self.arm_cq();
            self.sleepers.fetch_add(1, Ordering::AcqRel);
            drop(ctx);
            if !missed {
                // A signal shows in the next round.
                let _ = wq.sleep(seen, timeout_us);
            } else {
                // The next round polls what the arm found; a scheduling point meanwhile,
                // so a waiter never keeps the CPU from whoever does the work it waits on.
                // SAFETY: plain scheduling point, no locks held.
                unsafe { shim::krcore_shim_cond_resched() };
            }
            self.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Takes up to `max` SQEs of `ctx`'s ring for `caller`; returns how many, and the
    /// registration it stopped at, claimed for this caller to carry out.
    fn submit(
        &self,
        ctx: &mut RingCtx,
        max: u32,
        caller: Caller,
    ) -> Result<(u32, Option<Work>)> {
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        let ring = ctx.engine();
        let cx = Context {
            caller,
            // The tick-updated clock: one load per submission, where ktime_get reads the
            // clocksource (throttling needs ms, not ns).
            // SAFETY: plain call.
            now_ms: unsafe { shim::krcore_shim_coarse_ms() },
        };
        match ring.submit(&self.shared, max, cx) {
            Ok(s) if s.stall == Some(Stall::Register) => {
                Ok((s.taken, ring.claim_registration().map(Work::Register)))
            }
            Ok(s) if s.stall == Some(Stall::Remote) => Ok((s.taken, Some(Work::Remote))),
            // A revoked export's names wait to be taken out of the MetaServer.
            Ok(s) if self.shared.meta.due() => Ok((s.taken, Some(Work::Remote))),
            Ok(s) => Ok((s.taken, None)),
            Err(_) => Err(EINVAL),
        }
    }

    /// Pins and registers `r` for `ring` with no lock held, then records it.
    fn register(&self, ring: &RingCell, r: Registration) {
        let pd = {
            let mut m = self.shared.members();
            let pd = m.g.hw.pd();
            if pd.is_some() {
                m.g.registering += 1;
            }
            pd
        };
        let result = match pd {
            Some(pd) => backend::register(pd, r.addr, r.len, r.hw_access()),
            None => Err(Errno::ENODEV),
        };
        {
            let mut ctx = ring.ctx.lock();
            let e = ctx.engine();
            e.finish_registration(r, result, &self.shared);
            e.publish();
            ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            if ctx.engine().is_closed() {
                // The registration was what kept it.
                ring.touch();
                self.dirty.swap(true, Ordering::AcqRel);
            }
        }
        if pd.is_some() {
            self.shared.members().g.registering -= 1;
        }
        self.route();
    }

    /// The device's counters: the freed rings', every live ring's, and the recovery's.
    pub(crate) fn counters(&self) -> Counters {
        let mut c = *self.retired.lock();
        let n = self.rings.lock().rings.len();
        for slot in 0..n {
            if let Some(r) = self.ring_at(slot) {
                c.add(&r.ctx.lock().engine().stats());
            }
        }
        c.recoveries = self.shared.members().g.recovery.recovered();
        let auth = self.auth.lock();
        (c.auth_refused, c.auth_limited) = (auth.refused, auth.limited);
        c.bad_notices = self.bad_notices.load(Ordering::Relaxed);
        c
    }

    /// Writes the device's pool (a line per loopback QP), its listened services (a line
    /// each, with the offers waiting in every shard) and peer table (abi's
    /// `Peers::write`).
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
            write_listen_line(service, ring, offers, w)?;
        }
        let now = coarse_ms();
        self.shared.members().g.peers.write(now, w)
    }

    /// Registers eventfd `fd` for `ring` (-1: none), counting it among the listeners
    /// that keep the CQ armed; the first arms it now.
    pub(crate) fn set_eventfd(&self, ring: &RingCell, fd: i32) -> Result {
        let (had, r, has) = {
            let mut ctx = ring.ctx.lock();
            let had = ctx.has_eventfd();
            let r = ctx.set_eventfd(fd);
            (had, r, ctx.has_eventfd())
        };
        match (had, has) {
            (false, true) => {
                self.listeners.fetch_add(1, Ordering::AcqRel);
                // Route what is there and arm: from here, events route.
                self.cq_event();
            }
            (true, false) => {
                self.listeners.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        r
    }

    /// One step of `ring`'s polling thread: take SQEs, route completions. Whether
    /// anything happened; `None` when the device is gone.
    /// The polling thread is not the ring owner: a REG_MR it takes fails with
    /// `NotOwner` (it has no user address space to pin from). A hostile SQ tail parks
    /// the ring (NEED_WAKEUP set) until the application repairs it and wakes the thread.
    pub(crate) fn poll_step(&self, ring: &RingCell) -> Option<bool> {
        let (taken, remote) = {
            let mut ctx = ring.ctx.lock();
            ring.absorb_mail(&mut ctx);
            let taken = self.submit(&mut ctx, u32::MAX, Caller::Other);
            ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            match taken {
                Ok((t, work)) => {
                    // A CONNECT to a node with no set yet, or a MetaServer request: the
                    // device's workers do the network work, not this ring's thread.
                    let remote = matches!(work, Some(Work::Remote));
                    if remote {
                        self.kick_net();
                    }
                    (t, remote)
                }
                Err(e) if e == EINVAL => {
                    ctx.engine().sq().park();
                    return None;
                }
                Err(_) => return None,
            }
        };
        let routed = self.route();
        if remote && taken == 0 && routed == 0 {
            // Its entry waits for another node: a moment, rather than spin on it.
            // SAFETY: plain sleep, no lock held.
            unsafe { shim::krcore_shim_msleep(1) };
        }
        Some(taken > 0 || routed > 0)
    }

    /// Need-wakeup, poller side: `true` when `ring`'s poller may sleep.
    pub(crate) fn prepare_sleep(&self, ring: &RingCell) -> bool {
        ring.ctx.lock().engine().sq().prepare_sleep()
    }

    /// The poller of `ring` runs again: clear NEED_WAKEUP.
    pub(crate) fn woken(&self, ring: &RingCell) {
        ring.ctx.lock().engine().sq().woken();
    }

    /// Routes what the CQ and the recovery hold to the rings (each to its inbox), then
    /// has every ring that gained completions take them in, publish and wake, and frees
    /// closed rings with nothing left. Cheap when nothing is outstanding anywhere and no
    /// ring is marked (NOP and control traffic never take the CQ's lock). Returns the
    /// completions polled.
    fn route(&self) -> usize {
        let unpolled = self.unpolled.load(Ordering::Acquire);
        if !self.shared.busy() && !self.dirty.load(Ordering::Acquire) && !unpolled {
            return 0;
        }
        let mut cq = self.cq.lock();
        // Quiesced for the device's removal (see `quiesce`).
        if self.dead.load(Ordering::SeqCst) {
            return 0;
        }
        let forced = self.unpolled.swap(false, Ordering::AcqRel);
        let polled = if self.shared.busy() || forced {
            let polled = self.drain(&mut cq);
            self.recover();
            polled
        } else {
            0
        };
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.flush_rings();
        }
        polled
    }

    /// The ring in `slot`, if any.
    fn ring_at(&self, slot: usize) -> Option<Arc<RingCell>> {
        self.rings.lock().rings.get(slot).cloned().flatten()
    }

    /// Routes completion `c` of request `id` to its ring's inbox.
    fn deliver(&self, id: crate::abi::engine::WrId, c: Completion) {
        if let Some(r) = self.ring_at(id.ring as usize) {
            r.deliver(id, c);
            self.dirty.swap(true, Ordering::AcqRel);
        }
    }

    /// Has every marked ring take in its completions, publish and wake (its sleepers
    /// counted under its lock); frees closed rings with nothing left. Called under the
    /// CQ's lock, so completions reach each ring in routing order.
    fn flush_rings(&self) {
        let n = self.rings.lock().rings.len();
        for slot in 0..n {
            let Some(r) = self.ring_at(slot) else {
                continue;
            };
            if !r.take_dirty() {
                continue;
            }
            let mut ctx = r.ctx.lock();
            r.absorb(&mut ctx);
            if ctx.engine().is_closed() {
                if ctx.engine().release_idle(&self.shared) {
                    let last = ctx.engine().stats();
                    drop(ctx);
                    self.retired.lock().add(&last);
                    let mut t = self.rings.lock();
                    if t.rings[slot].as_ref().is_some_and(|x| Arc::ptr_eq(x, &r)) {
                        t.rings[slot] = None;
                    }
                }
            } else {
                // Offers its listens were nudged for (abi's listen.rs): under the ring's
                // lock, then the membership's and a shard's, in the order above.
                ctx.engine().accept_offers(&self.shared);
                ctx.engine().publish();
                ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            }
        }
    }

    /// One step of abi's recovery of failed pooled QPs (engine/recovery.rs): sends that
    /// waited too long for a receive fail and what the busy links shards owe is routed,
    /// stuck QPs fail, each under its own lock; then, only if a QP failed or is being
    /// recovered, under the membership lock, pairs fail, flush and are re-armed
    /// together. Nonzero when rings may have new CQEs.
    fn recover(&self) -> usize {
        let now = Ktime::ktime_get().to_ms();
        let busy = self.shared.links_busy();
        let route = |id, c| self.deliver(id, c);
        let (mut n, failed) = sweep(&self.shared, busy, self.deadline_ms, now, route);
        // The membership lock only while a QP is failed or being recovered.
        if failed != 0 || self.shared.members_busy.load(Ordering::Acquire) {
            let mut m = self.shared.members();
            let MemberState { hw, recovery, .. } = &mut *m.g;
            let before = recovery.recovered();
            n += recovery.step(&self.shared, hw, failed, now, route);
            if recovery.recovered() != before {
                crate::inspect::trace_recovery(failed.trailing_zeros(), recovery.recovered());
            }
        }
        self.say_failed_sets(failed);
        n
    }

    /// Says in the kernel log, once per failure, that a set's QP failed and why: every
    /// message link on it ends (its virtual QPs' requests fail), and the next CONNECT
    /// to that node makes a new set. Rare and visible to users, so not left to dynamic
    /// debug: a run that fails for it says so.
    fn say_failed_sets(&self, failed: u64) {
        let sets = failed & !((1u64 << POOL_QPS) - 1);
        let new = sets & !self.failed_sets.swap(sets, Ordering::AcqRel);
        for i in (POOL_QPS..QPS.min(64)).filter(|&i| new & (1 << i) != 0) {
            let (why, peer) = {
                let c = self.shared.qps[i].lock();
                (c.acct.fail_reason(), c.post.peer)
            };
            let qpn = self.shared.qpns[i].load(Ordering::Relaxed);
            if let Some(SetEnd { gid, .. }) = peer {
                let what = format_args!("QP {qpn} failed ({}): its message links end", why.name());
                crate::cluster::peer::log_set(&gid, what);
            }
        }
    }

    /// Polls the CQ dry, routing every completion. Returns how many it polled.
    fn drain(&self, cq: &mut CqPoll) -> usize {
        // Initializing this buffer is a visible part of an empty enter under emulation:
        // only callers with something outstanding come here.
        let mut wcs = [WcC::default(); POLL_BATCH];
        let mut polled = 0;
        loop {
            let n = cq.poll(&mut wcs);
            polled += n;
            for c in &wcs[..n] {
                // A drained set connection's marker (before its QP number, which may
                // be no slot's any more).
                if let Some((k, recv)) = drain_of(c.wr_id) {
                    self.shared.drains.lock().seen(k, recv);
                    continue;
                }
                if let Some((qp, wc)) = self.wc(c) {
                    self.route_wc(qp, &wc);
                }
            }
            if n < POLL_BATCH {
                return polled;
            }
        }
    }

    /// A polled work completion in the engine's terms, with its physical QP's index.
    fn wc(&self, c: &WcC) -> Option<(u32, Wc)> {
        let qp = self.shared.qp_index(c.qp_num)?;
        Some((
            qp,
            Wc {
                wr_id: c.wr_id,
                status: WcStatus::from_ib(c.status),
                byte_len: c.byte_len,
                imm: (c.has_imm != 0).then_some(c.imm),
                recv: c.recv != 0,
            },
        ))
    }

    /// Routes one work completion of physical QP `qp` to the rings it completes (or to
    /// the recovery, for its own requests).
    fn route_wc(&self, qp: u32, wc: &Wc) {
        if wc.status != WcStatus::Success && qp as usize >= POOL_QPS {
            self.shared.fail_set_qp(qp);
        }
        if wc.wr_id == NOTICE_WR_ID {
            // Room for the next notice (the sweep posts the links' that wait for it).
            self.shared.qp(qp, |q, _| q.notice_done());
            self.shared.flush_revocations();
            return;
        }
        if let Some(i) = notice_recv_index(wc.wr_id) {
            if wc.recv && wc.status == WcStatus::Success {
                self.notice_in(qp, i, wc.byte_len);
            }
            return;
        }
        if wc.wr_id == FAR_WRITE_WR_ID {
            // A message's WRITE, flushed: its notice's completion says the rest.
            return;
        }
        if is_backend_wr_id(wc.wr_id) {
            self.shared.members().g.recovery.on_completion(qp, wc.wr_id);
            return;
        }
        complete_wc(&self.shared, qp, wc, |id, done| self.deliver(id, done));
    }

    /// Notice receive `i` of set QP `qp` completed: the peer kernel's notice, taken
    /// (and the receive posted again) and handed to its links shard (abi's far.rs).
    fn notice_in(&self, qp: u32, i: u32, byte_len: u32) {
        let mut b = [0u8; NOTICE_LEN];
        let gid = {
            // Under the QP's lock: a set's close clears `peer` there before it lets the
            // connection go.
            let c = self.shared.qps[qp as usize].lock();
            let Some(end) = c.post.peer else { return };
            // SAFETY: a live connection (see above); `b` has room for a notice.
            if unsafe { shim::krcore_cm_take_notice(end.conn, i, b.as_mut_ptr()) } != 0 {
                return;
            }
            end.gid
        };
        self.take_notice(&gid, qp, &b, byte_len);
        // SAFETY: reads a module parameter.
        if unsafe { shim::krcore_shim_test_notice_echo() } {
            // Test only: as if the peer had sent it twice, then a short SEND.
            self.take_notice(&gid, qp, &b, byte_len);
            self.take_notice(&gid, qp, &b, byte_len / 2);
        }
    }

    /// The peer kernel at `gid` sent `byte_len` bytes of `b` on set QP `qp`: a notice for
    /// its links shard, or about an export.
    fn take_notice(&self, gid: &[u8; 16], qp: u32, b: &[u8; NOTICE_LEN], byte_len: u32) {
        // A short or malformed notice is dropped and counted (a peer of another
        // version, a bug, or a hostile kernel).
        let Ok(n) = Notice::received(b, byte_len) else {
            self.bad_notices.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match (n, n.shard(gid, self.shared.shards())) {
            // abi's shard is one of ours (a made-up id names none).
            (_, Some(k)) => self.shared.shard(k).on_notice(gid, qp, n, &self.shared),
            (Notice::Revoke { rkey }, _) => self.revoked_far(gid, qp, rkey),
            (Notice::RevokeAck { rkey }, _) => {
                if self.shared.revocations.lock().acked(rkey, qp) {
                    self.touch_closed_rings();
                }
            }
            _ => {}
        }
    }

    /// The node at `gid` revoked its export `rkey` (its Revoke arrived on set QP `qp`):
    /// what was cached of it goes, every ring's imports of it are marked dead (each
    /// under its ring's lock, so no request validated before is still unposted), then
    /// the answer is owed on the same QP, after every request of ours on it.
    fn revoked_far(&self, gid: &[u8; 16], qp: u32, rkey: u32) {
        if let Some(node) = crate::abi::cluster::peers::node_of(gid) {
            self.shared.meta.revoked_far(node, rkey);
        }
        let first = (POOL_QPS as u32..QPS as u32)
            .find(|&i| self.shared.qps[i as usize].lock().post.peer.is_some_and(|p| p.gid == *gid));
        if let Some(first) = first {
            let set = first..first + QPS_PER_SET as u32;
            let n = self.rings.lock().rings.len();
            for r in (0..n).filter_map(|slot| self.ring_at(slot)) {
                r.ctx.lock().engine().revoke_far(rkey, set.clone());
            }
        }
        if !self.shared.revocations.lock().owe_ack(qp, rkey) {
            // No room to answer: the peer's wait ends at its deadline, failing the QP.
            return;
        }
        self.shared.flush_revocations();
    }

    /// Closed rings may be waiting for a revocation to finish before their memory goes:
    /// the router looks at them again.
    fn touch_closed_rings(&self) {
        let n = self.rings.lock().rings.len();
        for r in (0..n).filter_map(|slot| self.ring_at(slot)) {
            r.touch();
        }
        self.dirty.store(true, Ordering::Release);
    }

    /// `IOC_DIRECT` (engine/direct.rs): posts `op.sqe` straight to its physical QP and
    /// polls for its completion, holding the CQ's lock so no one else routes meanwhile;
    /// `op.cqe` gets the CQE the ring path would have produced.
    pub(crate) fn direct(&self, ring: &RingCell, op: &mut OneOp) -> Result {
        op.validate()?;
        let mut cq = self.cq.lock();
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        op.popped = 1;
        let posted_on = match ring.ctx.lock().engine().direct(&op.sqe, &self.shared) {
            Ok(qp) => qp,
            Err(c) => {
                op.cqe = c;
                return Ok(());
            }
        };
        let started = Ktime::ktime_get().to_ms();
        let mut gave_up = false;
        let mut wcs = [WcC::default(); POLL_BATCH];
        let result = loop {
            let n = cq.poll(&mut wcs);
            let mut mine = None;
            for c in &wcs[..n] {
                let Some((qp, wc)) = self.wc(c) else {
                    continue;
                };
                if wc.wr_id == DIRECT_WR_ID {
                    mine = Some(direct_complete(&self.shared, qp, op.sqe.user_data, op.sqe.len, &wc));
                } else {
                    // Flushes of a recycled QP, say: route them as usual.
                    self.route_wc(qp, &wc);
                }
            }
            if let Some(c) = mine {
                break c;
            }
            if n == 0 {
                // Not interruptible: a pending "signal" is often only task work (an
                // io_uring of the same process tearing down), and giving up means
                // failing the QP. A request that has not completed within a second is
                // given up on: the QP fails and recovery moves it to the error state, so
                // the request flushes and completes (before its flush marker, so before
                // the pair can be re-armed).
                // SIGKILL is never task work: a dying caller gives up at once.
                // SAFETY: plain query of current.
                let dying = unsafe { shim::krcore_shim_fatal_signal_pending() };
                let patience_over = Ktime::ktime_get().to_ms() - started > DIRECT_PATIENCE_MS;
                if !gave_up && (dying || patience_over) {
                    gave_up = true;
                    self.shared.qp(posted_on, |q, _| q.fail());
                }
                if gave_up {
                    self.recover();
                    if !self.shared.qp(posted_on, |q, _| q.failed()) {
                        // Re-armed without its flush (the marker was lost too): the
                        // queues were emptied, nothing more will come.
                        break Cqe::err(op.sqe.user_data, Reason::QpError);
                    }
                }
                // CQ lock held on purpose (see above); rxe's work runs on these CPUs.
                // SAFETY: plain scheduling point; sleeping under a mutex is allowed.
                unsafe { shim::krcore_shim_cond_resched() };
            }
        };
        op.cqe = result;
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.flush_rings();
        }
        Ok(())
    }

    /// The file of `ring` was closed: no more CQEs; freed once idle.
    pub(crate) fn detach(&self, ring: &RingCell) {
        {
            let mut ctx = ring.ctx.lock();
            if ctx.has_eventfd() {
                // A closed ring listens no more (its CQEs are dropped from here).
                let _ = ctx.set_eventfd(-1);
                self.listeners.fetch_sub(1, Ordering::AcqRel);
            }
            ctx.engine().close(&self.shared);
        }
        ring.touch();
        self.dirty.swap(true, Ordering::AcqRel);
        self.route();
        // Its exports' names leave the MetaServer now, by the device's workers (an MR
        // still in flight is revoked when its ring is freed; the next network work
        // takes those). Under its lock: see `CqEvents::kick_net`.
        let _ctx = ring.ctx.lock();
        if !self.dead.load(Ordering::Acquire) {
            self.kick_net();
        }
    }

    /// The device is going away: wait for registrations pinning without the lock (they
    /// hold the PD), stop routing, destroy its QPs (nothing touches memory any more),
    /// then release every ring's MRs and bindings, then the CQ and PD, then the CQ's
    /// event work. Idempotent.
    /// cm.c is about to tear this device's connections down: nothing polls the CQ from
    /// here (their QPs' flushed completions stay there, naming freed QPs); a routing
    /// under way finishes first.
    pub(crate) fn quiesce(&self) {
        let _cq = self.cq.lock();
        self.dead.store(true, Ordering::SeqCst);
    }

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
        // cm.c's request handlers that pinned the PD and CQ before: each ends within its
        // QP's creation and accept.
        while self.cm_pins.load(Ordering::SeqCst) != 0 {
            // SAFETY: plain sleep; the CQ lock held is not one they take.
            unsafe { shim::krcore_shim_msleep(1) };
        }
        // cm.c tore this device's connections down before the removal began.
        self.shared.members().g.peers.forget();
        self.shared.drains.lock().forget();
        self.shared.uninstall_pool();
        self.shared.members().g.hw.destroy_qps();
        let n = self.rings.lock().rings.len();
        for slot in 0..n {
            if let Some(r) = self.ring_at(slot) {
                let mut ctx = r.ctx.lock();
                ctx.engine().abandon(&self.shared);
                // A sleeper finds the device gone at once.
                ctx.waitq().wake();
            }
        }
        cq.cq = core::ptr::null_mut();
        self.arm.lock().0 = core::ptr::null_mut();
        self.shared.members().g.hw.destroy();
        drop(cq);
        // The CQ is gone: no event queues the work any more; wait for a running one.
        self.events.stop();
    }
}

/// The periodic tick of a device context (the device watch's delayed work).
#[no_mangle]
extern "C" fn krcore_rs_dev_tick(ctx: *mut core::ffi::c_void) {
    // SAFETY: as for krcore_rs_dev_prewarm: the watch is stopped before the context goes.
    let dev = unsafe { &*ctx.cast::<DevCtx>() };
    if dev.shared.meta.check() {
        dev.meta_work();
    }
    // A closed ring's revocation that found no room tries again (room comes by the
    // revocations' deadline, whoever's they are).
    if dev.shared.revoke_waiting.swap(false, Ordering::AcqRel) {
        dev.touch_closed_rings();
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
