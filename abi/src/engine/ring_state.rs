//! One ring's kernel-side state: its SQ and CQ, its tables, and the overflow list that
//! keeps every completion when the CQ is full.
//!
//! Room rule: an SQE is taken only while `in-flight + overflowed < overflow capacity`.
//! Each taken SQE owes exactly one CQE, which goes to the CQ or, when that is full, to the
//! overflow list; so the list can always hold what is owed and no completion is dropped.

use super::backend::MrKeys;
use super::cqe::{Cqe, CqeFlags, Reason};
use super::errno::Errno;
use super::fabric::{Fabric, Members as _};
use super::layout::SqFlags;
use super::meta::client::Answer;
use super::ports::Creds;
use super::ring::{CqProducer, RingMem, SqConsumer};
use super::shares::Share;
use super::sqe::{MrAccess, Sqe};
use super::submit::Chain;
use super::table::{Fifo, Slot, Table};
use super::wrid::WrId;
use super::Store;

/// A virtual QP: a ring's handle on a shared physical QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vqp {
    /// Index of the physical QP.
    pub qp: u32,
    /// The physical QP's number.
    pub qpn: u32,
    /// Send-queue requests in flight.
    pub sends: u32,
    /// Receives posted and not completed.
    pub recvs: u32,
    /// The links shard its link is in ([`shard_of`](super::message::shard_of)).
    pub shard: u32,
    /// Its link for two-sided messages, in that shard (see `message`).
    pub link: u32,
    /// Its end of the link (0 or 1).
    pub end: u8,
    /// The port its CONNECT holds (see `ports`; 0: none, as an accepted one's, whose
    /// listen holds it).
    pub port: u16,
    /// Its CONNECT failed (refused, or its set went) before the ring learned its
    /// handle: released at the ring's next call that reaches the device
    /// ([`Ring::settle`]).
    pub doomed: bool,
    /// A listen accepted it from this client (`None`: the ring's own CONNECT, counted in
    /// its user's share; an accepted one is not, see `listen`).
    pub accepted: Option<Client>,
}

impl Vqp {
    /// The user its binding was made for, given its ring's `user` (its account's slot,
    /// see `shares`): that user's for its own CONNECT, none ([`NO_USER`]) for one a
    /// listen accepted.
    ///
    /// [`NO_USER`]: super::cluster::peers::NO_USER
    pub fn binder(&self, user: u32) -> u32 {
        match self.accepted {
            None => user,
            Some(_) => super::cluster::peers::NO_USER,
        }
    }
}

/// Who a listen accepted a virtual QP from: what one client may hold of a listening
/// ring is bounded (see `listen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// A CONNECT of this node's, by the user in this slot of the user table (the
    /// link's maker; `NO_MAKER` for one not counted).
    User(u32),
    /// A CONNECT from the node at this IPv4 address.
    Node(u32),
}

/// A registered local MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalMr {
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Rights.
    pub access: MrAccess,
    /// Keys from the backend.
    pub keys: MrKeys,
    /// Its export's descriptor (see `export`); 0 when it grants no
    /// remote access.
    pub descriptor: u64,
    /// Send-queue requests in flight that use it.
    pub sends: u32,
    /// Receives posted into it.
    pub recvs: u32,
}

/// A remote MR imported for one virtual QP: a range of an export, named by its
/// descriptor, which every use resolves again (so a revoked export stops at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMr {
    /// The virtual QP whose peer owns it.
    pub vqp: u32,
    /// Remote start address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// The exporter's descriptor.
    pub descriptor: u64,
    /// The export as last resolved: its rkey and remote rights, and the exports' epoch
    /// (read before that lookup) at which it was live.
    pub rkey: u32,
    /// See `rkey`.
    pub access: MrAccess,
    /// See `rkey`.
    pub checked: u64,
    /// Another node's export, resolved through the MetaServer (IMPORT_NAME): not in
    /// this node's exports table, so never resolved again here; its exporter's
    /// revocation marks it (`checked` = [`REVOKED_ACROSS`]).
    pub across: bool,
}

/// `RemoteMr::checked` of an import from another node whose exporter revoked it: every
/// request through it fails `BadDescriptor`.
pub const REVOKED_ACROSS: u64 = u64::MAX;

/// A request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inflight {
    /// The SQE's user_data.
    pub user_data: u64,
    /// Virtual QP handle.
    pub vqp: u32,
    /// Local MR handle.
    pub mr: u32,
    /// Bytes requested.
    pub len: u32,
    /// Whether it is a receive.
    pub recv: bool,
    /// A CONNECT waiting for the listen it asked for (see `connect`): `vqp` is its
    /// virtual QP, bound meanwhile; `mr` names none.
    pub connect: bool,
    /// Where its CQE goes: 0, the ring's CQ; else the io_uring command that carried it
    /// (see [`Ring::submit_one`]). Set by the kernel, never read from an entry.
    pub sink: u64,
}

/// A ring's tables.
pub struct Tables<S: Store> {
    /// Virtual QPs.
    pub vqps: Table<Vqp, S>,
    /// Local MRs.
    pub mrs: Table<LocalMr, S>,
    /// Imported remote MRs.
    pub rmrs: Table<RemoteMr, S>,
    /// Requests in flight.
    pub inflight: Table<Inflight, S>,
}

/// The storage a ring is built from; its sizes are the ring's limits.
pub struct RingStorage<S: Store> {
    /// Virtual QP slots.
    pub vqps: S::Buf<Slot<Vqp>>,
    /// Local MR slots.
    pub mrs: S::Buf<Slot<LocalMr>>,
    /// Remote MR slots.
    pub rmrs: S::Buf<Slot<RemoteMr>>,
    /// In-flight slots.
    pub inflight: S::Buf<Slot<Inflight>>,
    /// Overflow list; must be larger than `inflight`.
    pub overflow: S::Buf<Cqe>,
    /// CQEs of entries io_uring carried, until the caller hands them back to it (see
    /// [`Ring::submit_one`]); as large as `overflow`.
    pub diverted: S::Buf<super::uring::Diverted>,
}

/// How a completion ended, as the engine sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A send-queue request completed.
    Done,
    /// A receive completed.
    Received {
        /// Bytes received.
        byte_len: u32,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// It failed.
    Failed(Reason),
    /// Not a request's: a nudge for the ring's listen whose index is the routing id's
    /// slot, saying links shard `shard` holds offers for it (see `listen`).
    Offered {
        /// The shard.
        shard: u32,
    },
}

/// Counters a ring keeps: the device's kind ([`Counters`](super::stats::Counters)),
/// for one ring (`rings` is 1, `recoveries` the device's alone).
pub type RingStats = super::stats::Counters;

/// What the kernel logs at the engine's connect and failure points (its dynamic
/// debug): plain function pointers, so the engine stays generic and allocation-free.
#[derive(Clone, Copy, Debug)]
pub struct Trace {
    /// A CONNECT's outcome (its completion), with the ring's id, the node's GID and the
    /// service.
    pub connect: fn(ring: u16, gid: &[u8; 16], service: u32, cqe: &Cqe),
    /// Any completion that reports a failure, with the ring's id.
    pub failure: fn(ring: u16, cqe: &Cqe),
}

/// One ring, kernel side.
pub struct Ring<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> {
    pub(crate) id: u16,
    pub(crate) gen: u16,
    pub(crate) sq: SqConsumer<Q>,
    pub(crate) cq: CqProducer<C>,
    /// The ring's tables.
    pub tables: Tables<S>,
    overflow: Fifo<Cqe, S>,
    /// CQEs owed to io_uring commands (see [`uring`](super::uring)).
    pub(crate) diverted: Fifo<super::uring::Diverted, S>,
    /// The io_uring command of the entry being taken (0: none, its CQE goes to the CQ).
    pub(crate) sink: u64,
    /// Whether CQ_OVERFLOW is set in the SQ flags, so publishing writes it on change only.
    overflow_flag: bool,
    pub(crate) closed: bool,
    pub(crate) stats: RingStats,
    pub(crate) chain: Chain,
    /// The pairs this ring broke, and its throttling.
    pub(crate) blame: super::blame::Blame,
    /// A REG_MR taken from the SQ, registered by the caller outside its locks
    /// (see [`register`](super::register)).
    pub(crate) registration: super::register::Pending,
    /// Where connect and failure points are logged, if anywhere.
    pub(crate) trace: Option<Trace>,
    /// Its listens (see `listen`).
    pub(crate) listens: [Option<super::listen::Listening>; super::listen::RING_LISTENS],
    /// Whose ports its CONNECTs and LISTENs hold (see `ports`), and whose shares its
    /// requests take (see `shares`).
    pub(crate) creds: Creds,
    /// Receives completed since their share was last given back (see `shares`).
    recvs_done: u32,
    /// Virtual QPs whose CONNECT failed, to release (see [`Vqp::doomed`]).
    doomed: u32,
}

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// A ring with id `id` (generation `gen`) over fresh SQ and CQ memory.
    pub fn new(id: u16, gen: u16, sq: Q, cq: C, storage: RingStorage<S>) -> Self {
        let overflow = Fifo::new(storage.overflow);
        let diverted = Fifo::new(storage.diverted);
        let inflight = Table::new(storage.inflight);
        assert!(
            overflow.capacity() > inflight.capacity(),
            "the overflow list must outsize the in-flight table"
        );
        Ring {
            id,
            gen,
            sq: SqConsumer::new(sq),
            cq: CqProducer::new(cq),
            tables: Tables {
                vqps: Table::new(storage.vqps),
                mrs: Table::new(storage.mrs),
                rmrs: Table::new(storage.rmrs),
                inflight,
            },
            overflow,
            diverted,
            sink: 0,
            overflow_flag: false,
            closed: false,
            stats: RingStats {
                rings: 1,
                ..RingStats::ZERO
            },
            chain: Chain::new(),
            blame: super::blame::Blame::default(),
            registration: super::register::Pending::None,
            trace: None,
            listens: [None; super::listen::RING_LISTENS],
            creds: Creds {
                uid: 0,
                gid: 0,
                groups: super::ports::Groups::NONE,
                bind_low: true,
                user: 0,
            },
            recvs_done: 0,
            doomed: 0,
        }
    }

    /// The ring's id and generation, as its `wr_id`s carry them.
    pub fn identity(&self) -> (u16, u16) {
        (self.id, self.gen)
    }

    /// Logs connect and failure points through `trace` from now on.
    pub fn set_trace(&mut self, trace: Trace) {
        self.trace = Some(trace);
    }

    /// Counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Pairs this ring's requests broke (see `blame`).
    pub fn strikes(&self) -> u32 {
        self.blame.strikes()
    }

    /// The SQ, kernel side.
    pub fn sq(&mut self) -> &mut SqConsumer<Q> {
        &mut self.sq
    }

    /// Completions published and not yet reaped (for waiting on `min_complete`).
    pub fn cq_unread(&self) -> u32 {
        self.cq.unread()
    }

    /// Completions waiting in the overflow list.
    pub fn overflowed(&self) -> usize {
        self.overflow.len()
    }

    /// Whether another SQE may be taken (the room rule; a registration in progress owes
    /// one CQE too, and so does each listen, its last).
    pub(crate) fn has_room(&self) -> bool {
        self.has_room_for(1)
    }

    /// Whether `n` more CQEs may be owed under the room rule.
    pub(crate) fn has_room_for(&self, n: usize) -> bool {
        self.tables.inflight.len()
            + self.overflow.len()
            + self.registration.owes()
            + self.listening()
            + n
            <= self.overflow.capacity()
    }

    /// Queues a CQE: to the CQ when it has room and nothing overflowed before it (order
    /// is kept), to the overflow list otherwise.
    pub(crate) fn emit(&mut self, cqe: Cqe) {
        self.emit_to(self.sink, cqe)
    }

    /// Queues the CQE of an entry whose sink is `sink`: an io_uring command's goes to
    /// the diverted list (room checked when it was taken), whatever the ring's state.
    /// Inlined: every completion passes here, and the ring's own CQ is the common case.
    #[inline]
    pub(crate) fn emit_to(&mut self, sink: u64, cqe: Cqe) {
        self.stats.completed += 1;
        if cqe.res < 0 {
            self.count_failure(&cqe);
        }
        if sink != 0 {
            return self.divert(sink, cqe);
        }
        if self.closed {
            return;
        }
        if self.overflow.is_empty() {
            if let Err(c) = self.cq.push(cqe) {
                self.stats.cq_overflows += 1;
                let r = self.overflow.push(c);
                debug_assert!(r.is_ok(), "room rule broken");
            }
        } else {
            self.stats.cq_overflows += 1;
            let r = self.overflow.push(cqe);
            debug_assert!(r.is_ok(), "room rule broken");
        }
    }

    /// Counts (and traces) a failed completion.
    #[cold]
    fn count_failure(&mut self, cqe: &Cqe) {
        if let Some(r) = cqe.failure() {
            self.stats.failed[r as usize] += 1;
            if let Some(t) = self.trace {
                (t.failure)(self.id, cqe);
            }
        }
    }

    /// Queues the CQE of an entry io_uring carried, for its command.
    #[cold]
    #[inline(never)]
    fn divert(&mut self, sink: u64, cqe: Cqe) {
        if sink == super::uring::CANCELLED {
            // Its command was completed when io_uring cancelled it.
            return;
        }
        let r = self.diverted.push(super::uring::Diverted { sink, cqe });
        debug_assert!(r.is_ok(), "uring room rule broken");
    }

    /// Moves overflowed CQEs into the CQ as far as it has room.
    pub(crate) fn flush_overflow(&mut self) {
        while let Some(c) = self.overflow.front() {
            if self.cq.push(c).is_err() {
                break;
            }
            self.overflow.pop();
        }
    }

    /// Publishes the CQ tail and the overflow flag.
    pub fn publish(&mut self) {
        self.flush_overflow();
        self.cq.publish();
        let overflowing = !self.overflow.is_empty();
        if overflowing != self.overflow_flag {
            self.overflow_flag = overflowing;
            self.sq.set_flag(SqFlags::CQ_OVERFLOW, overflowing);
        }
    }

    /// Routes a completion to this ring. Returns `false` if it is not for this ring (other
    /// id or generation) or names no request in flight here.
    pub fn complete(&mut self, id: WrId, c: Completion) -> bool {
        if (id.ring, id.ring_gen) != (self.id, self.gen) {
            return false;
        }
        if let Completion::Offered { shard } = c {
            self.nudged(id.slot, 1u64.checked_shl(shard).unwrap_or(0));
            return true;
        }
        let Some(inf) = self.tables.inflight.remove(id.slot) else {
            self.stats.stray += 1;
            return false;
        };
        // A work-request error (a flush is `QpError`) broke the shared QP.
        if c == Completion::Failed(Reason::RemoteError) {
            self.blame.strike();
        }
        self.release_counts(&inf);
        if inf.connect {
            return self.connected(&inf, c);
        }
        let cqe = match c {
            Completion::Done => Cqe::ok(inf.user_data, inf.len as i32, 0),
            Completion::Received { byte_len, imm } => {
                let mut cqe = Cqe::ok(inf.user_data, byte_len as i32, imm.unwrap_or(0) as u64);
                if imm.is_some() {
                    cqe.flags = CqeFlags::IMM.bits();
                }
                cqe
            }
            Completion::Failed(r) => Cqe::err(inf.user_data, r),
            Completion::Offered { .. } => return false,
        };
        self.emit_to(inf.sink, cqe);
        true
    }

    /// The answer to CONNECT `inf`, waiting for its listen: its CQE (the virtual QP, the
    /// physical QP number, the port), or its failure, after which its virtual QP goes.
    fn connected(&mut self, inf: &Inflight, c: Completion) -> bool {
        let Some(v) = self.tables.vqps.get_mut(inf.vqp) else {
            return false;
        };
        if inf.sink == super::uring::CANCELLED && c != Completion::Failed(Reason::Cancelled) {
            // Its command was cancelled: nobody will learn its handle, so it goes as a
            // failed one does (a DISCONNECT or the ring's close releases a cancelled one).
            if !v.doomed {
                v.doomed = true;
                self.doomed += 1;
            }
            return true;
        }
        let cqe = match c {
            Completion::Done => Cqe {
                port: v.port,
                ..Cqe::ok(inf.user_data, inf.vqp as i32, v.qpn as u64)
            },
            Completion::Failed(why) => {
                // A DISCONNECT or the ring's close releases a cancelled one; any other
                // goes here, the caller never having learned its handle.
                if why != Reason::Cancelled && !v.doomed {
                    v.doomed = true;
                    self.doomed += 1;
                }
                Cqe::err(inf.user_data, why)
            }
            _ => return false,
        };
        self.emit_to(inf.sink, cqe);
        true
    }

    /// Fails an in-flight request that never reached the wire.
    pub(crate) fn fail_unposted(&mut self, wr_id: u64, reason: Reason, errno: Errno) {
        if let Some(inf) = self.tables.inflight.remove(WrId::decode(wr_id).slot) {
            self.release_counts(&inf);
            self.emit_to(inf.sink, Cqe::err_errno(inf.user_data, reason, errno));
        }
    }

    fn release_counts(&mut self, inf: &Inflight) {
        self.recvs_done += inf.recv as u32;
        if let Some(v) = self.tables.vqps.get_mut(inf.vqp) {
            if inf.recv {
                v.recvs -= 1
            } else {
                v.sends -= 1
            }
        }
        if let Some(m) = self.tables.mrs.get_mut(inf.mr) {
            if inf.recv {
                m.recvs -= 1
            } else {
                m.sends -= 1
            }
        }
    }

    /// Closes the ring: no CQE is written any more; completions still retire its
    /// requests; its virtual QPs leave their links for messages. Call
    /// [`release_idle`](Self::release_idle) until it returns `true`.
    pub fn close<F: Fabric<S>>(&mut self, f: &F) {
        self.closed = true;
        // Its listens end first: no offer goes to it from now on.
        self.drop_listens(f);
        // Its virtual QPs depart their links now: a CONNECT meanwhile never joins a
        // closing ring, and sends waiting for its receives fail at once.
        for (_, v) in self.tables.vqps.iter() {
            f.shard(v.shard).depart(v.link, v.end, f);
        }
        // Its exports are revoked now, not when its MRs go idle: an importer's next
        // request fails instead of reaching memory whose owner is gone.
        for (_, m) in self.tables.mrs.iter() {
            revoke(f, m.descriptor, (self.id, self.gen), self.creds.user);
        }
        // Unclaimed, it was never pinned; claimed, its caller still finishes it (and,
        // the ring being closed, deregisters it).
        if matches!(self.registration, super::register::Pending::Taken(_)) {
            self.registration = super::register::Pending::None;
        }
    }

    /// Another node revoked its export `rkey`, imported here through virtual QPs bound
    /// to physical QPs `qps` (the set to that node): each such import is marked, so its
    /// next request fails `BadDescriptor`. How many were.
    pub fn revoke_far(&mut self, rkey: u32, qps: core::ops::Range<u32>) -> usize {
        let Tables { rmrs, vqps, .. } = &mut self.tables;
        let mut n = 0;
        for r in rmrs.values_mut() {
            let on = vqps.get(r.vqp).is_some_and(|v| qps.contains(&v.qp));
            if r.across && r.rkey == rkey && on && r.checked != REVOKED_ACROSS {
                r.checked = REVOKED_ACROSS;
                n += 1;
            }
        }
        n
    }

    /// Sets whose ports the ring's CONNECTs and LISTENs hold: the kernel's ring
    /// setup passes its opener's (a new ring's are root's, for tests).
    pub fn set_creds(&mut self, creds: Creds) {
        self.creds = creds;
    }

    /// Gives back what its completions released since the last call, which reached no
    /// device state: the shares of completed receives (see `shares`), and the virtual
    /// QPs of failed CONNECTs. Every call that reaches the device makes it first.
    pub fn settle<F: Fabric<S>>(&mut self, f: &F) {
        self.give_recvs(f);
        if self.doomed == 0 {
            return;
        }
        let mut m = f.members();
        self.release_vqps(f, &mut m, |v| v.doomed);
        // One with requests still in flight (its handle guessed) goes at a later call.
        self.doomed = self.tables.vqps.iter().filter(|(_, v)| v.doomed).count() as u32;
    }

    /// Gives back the shares of the receives completed since the last call.
    fn give_recvs<F: Fabric<S>>(&mut self, f: &F) {
        if self.recvs_done > 0 {
            f.give_share(
                self.creds.user,
                Share::Recvs,
                core::mem::take(&mut self.recvs_done),
            );
        }
    }

    /// Releases the virtual QPs `pick` chooses that have nothing in flight (the caller
    /// holds the membership, `m`): their links left, their bindings, ports and shares
    /// given back.
    fn release_vqps<'f, F: Fabric<S>>(
        &mut self,
        f: &'f F,
        m: &mut F::Members<'f>,
        pick: impl Fn(&Vqp) -> bool,
    ) {
        let user = self.creds.user;
        let rmrs = &mut self.tables.rmrs;
        self.tables.vqps.drain_where(|h, v| {
            let go = pick(v) && v.sends == 0 && v.recvs == 0;
            if go {
                rmrs.drain_where(|_, r| r.vqp == h);
                f.shard(v.shard).leave(v.link, v.end, f);
                f.qp(v.qp, |q, _| q.unbind());
                m.disconnect(v.qp, v.binder(user));
                let_vqp_go(f, user, v);
            }
            go
        });
    }

    /// Whether the ring was closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Releases everything at once, in flight or not, writing no CQE: for when the
    /// device is gone. The caller guarantees the hardware can no longer touch the ring's
    /// memory (its QPs are destroyed); the ring may be freed afterwards.
    pub fn abandon<F: Fabric<S>>(&mut self, f: &F) {
        self.closed = true;
        self.drop_listens(f);
        let (owner, user) = ((self.id, self.gen), self.creds.user);
        let mut recvs = 0;
        // io_uring waits for every command it carried: those fail here, by name.
        for i in 0..self.tables.inflight.capacity() {
            let Some(h) = self.tables.inflight.handle_at(i) else {
                continue;
            };
            let Some(inf) = self.tables.inflight.get(h).copied().filter(|i| i.sink != 0) else {
                continue;
            };
            self.tables.inflight.remove(h);
            recvs += inf.recv as u32;
            self.emit_to(inf.sink, Cqe::err(inf.user_data, Reason::RingClosed));
        }
        self.tables.inflight.drain_where(|_, i| {
            recvs += i.recv as u32;
            true
        });
        f.give_share(self.creds.user, Share::Recvs, recvs);
        self.settle(f);
        self.tables.rmrs.drain_where(|_, _| true);
        if !self.tables.vqps.is_empty() {
            let mut m = f.members();
            self.tables.vqps.drain_where(|_, v| {
                f.shard(v.shard).leave(v.link, v.end, f);
                if (v.qp as usize) < f.count() {
                    f.qp(v.qp, |q, _| q.unbind());
                }
                m.disconnect(v.qp, v.binder(user));
                let_vqp_go(f, user, v);
                true
            });
        }
        self.tables.mrs.drain_where(|_, m| {
            revoke(f, m.descriptor, owner, user);
            f.dereg_mr(m.keys);
            true
        });
    }

    /// Releases every virtual QP and MR with nothing in flight; returns `true` when
    /// nothing is left (the ring's memory may be freed).
    pub fn release_idle<F: Fabric<S>>(&mut self, f: &F) -> bool {
        let (owner, user) = ((self.id, self.gen), self.creds.user);
        // What its last completions gave back (receives a DISCONNECT cancelled among
        // them), whether or not virtual QPs remain.
        self.give_recvs(f);
        if !self.tables.vqps.is_empty() {
            let mut m = f.members();
            // Receives no message took are cancelled: only a peer's SEND would complete
            // them, and the peer may never send.
            for i in 0..self.tables.vqps.capacity() {
                if let Some(h) = self.tables.vqps.handle_at(i) {
                    let k = self.tables.vqps.get(h).expect("live").shard;
                    self.cancel_recvs(h, &mut f.shard(k), f);
                }
            }
            // Every idle one goes, those of failed CONNECTs with them (the membership
            // is held: `settle` would take it again).
            self.give_recvs(f);
            self.doomed = 0;
            self.release_vqps(f, &mut m, |_| true);
        }
        self.tables.mrs.drain_where(|_, m| {
            let mut idle = m.sends == 0 && m.recvs == 0;
            if idle {
                // Other nodes told of its revocation answer first (the ring is
                // marked again when they have, or when the table has room for it).
                idle = revoke(f, m.descriptor, owner, user)
                    && f.revoke_far(m.keys.rkey) != Answer::Pending;
            }
            if idle {
                f.dereg_mr(m.keys);
            }
            idle
        });
        self.tables.vqps.is_empty()
            && self.tables.mrs.is_empty()
            && self.tables.inflight.is_empty()
            && self.registration == super::register::Pending::None
    }
}

/// Gives back released virtual QP `v`'s port and user `user`'s share of it (an accepted
/// one's holds none).
pub(crate) fn let_vqp_go<S: Store>(f: &impl Fabric<S>, user: u32, v: &Vqp) {
    f.ports(|p| p.release(v.port));
    if v.accepted.is_none() {
        f.give_share(user, Share::Vqps, 1);
    }
}

/// Removes export `descriptor` if `owner` (a ring's id and generation) still holds it;
/// a descriptor already revoked (at close) is left alone. `false` when it cannot go
/// yet: other nodes must be told of it and the revocations' table is full (nothing was
/// done; the caller tries again). Its share goes back to `user` (see `shares`).
pub(crate) fn revoke<S: Store>(
    f: &impl Fabric<S>,
    descriptor: u64,
    owner: (u16, u16),
    user: u32,
) -> bool {
    let mine = f.exports(|exports| exports.get(descriptor).is_some_and(|e| e.owner == owner));
    // Its names in the MetaServer go first, and other nodes are told: only then may
    // the export go (a revocation with no room would otherwise never be sent).
    if !mine || !f.unpublish(descriptor) {
        return !mine;
    }
    let gone = f.exports(|exports| {
        let mine = exports.get(descriptor).is_some_and(|e| e.owner == owner);
        if mine {
            exports.remove(descriptor);
        }
        mine
    });
    if gone {
        f.give_share(user, Share::Exports, 1);
    }
    true
}
