//! Submission: take SQEs, validate them, do control operations, and post data
//! operations to the shared physical QPs in chains.
//!
//! An SQE that cannot proceed now (no credit, no in-flight slot, no room for its CQE, or
//! its object busy with sends in flight) is not taken: it waits in the SQ, and so do all
//! after it, keeping the ring's order. Everything else is taken and owes one CQE.
//!
//! Locks (see [`fabric`](super::fabric)): the caller holds the ring's. A one-sided
//! request claims its credit in one section of its QP's lock and is posted, with the
//! rest of its chain, in another; the exports' lock is taken to resolve an import. A
//! two-sided message takes its link's shard and keeps it while entries after it use the
//! same shard, and while the chain holding the receives it matched is unposted (a failed
//! post puts them back under it, first in line again): before another shard is taken,
//! the chain is posted and the shard let go. Only control entries take the device's
//! membership lock, once per call, held to its end; taken after a shard, that shard is
//! let go first (members come before shards in the order).

use super::backend::{Connection, PostError, SendKind, SendWr, Sge};
use super::cqe::{Cqe, Reason};
use super::errno::Errno;
use super::export::Export;
use super::fabric::{Fabric, Members, Qps};
use super::layout::SqFlags;
use super::message::{
    port_key, shard_of, Messages, PostedRecv, RecvStep, SendStep, Target, Tuple, WaitingSend,
};
use super::meta::client::Answer;
use super::meta::record::Grant;
use super::ports::Hold;
use super::qp::{Delivery, Posted};
use super::register::{Caller, Context, Pending, Registration};
use super::ring::{RingError, RingMem};
use super::ring_state::{let_vqp_go, revoke, Client, Completion, Inflight, Ring, Vqp};
use super::shares::Share;
use super::sqe::{Sqe, SqeFlags};
use super::validate::{validate, Op};
use super::wrid::WrId;
use super::Store;

/// Requests gathered into one `post_send` call at most.
pub const CHAIN: usize = 16;

/// Ephemeral ports a CONNECT tries when its port's links shard is full, each landing in
/// a shard as if at random: one full shard of a device's 8 is passed at the next try 7
/// times in 8, and within these but for 1 in 8^16.
const SHARD_TRIES: u32 = 16;

/// Why submission stopped before the SQ was empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The ring owes as many CQEs as its overflow list holds: reap the CQ.
    CqFull,
    /// A physical QP has no credit for the virtual QP: completions will return some.
    NoCredit,
    /// Every in-flight slot is used.
    InflightFull,
    /// DISCONNECT or DEREG_MR waits for its object's sends to complete.
    Busy,
    /// A REG_MR was taken (or is still being registered): the caller registers it
    /// outside its locks (see `register`), then submits again.
    Register,
    /// An entry waits for another node: a CONNECT for the node's connection set (the
    /// membership said `EINPROGRESS`), a PUBLISH or IMPORT_NAME for the MetaServer (the
    /// answer was `Pending`), a DEREG_MR for a revocation's answers. The device's own
    /// workers do the network work (never the caller); the caller waits for its CQEs
    /// as for any other, or returns, and submits again. The entry stays in the SQ.
    Remote,
}

/// What one submission call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    /// SQEs taken.
    pub taken: u32,
    /// Why it stopped early, if it did.
    pub stall: Option<Stall>,
}

/// Requests for one physical QP, posted together, each holding a credit it claimed.
/// Kept in the ring and used in place, so a submission neither re-initializes nor copies
/// it (it is about 1.5 KiB; moving it in and out of the ring per call cost more than the
/// rest of an empty submission).
pub struct Chain {
    qp: u32,
    n: usize,
    wrs: [SendWr; CHAIN],
    /// What each takes in its QP's order when posted.
    posted: [Posted; CHAIN],
    /// For a SEND, the receive it took (link, the receive's end, the receive): put back
    /// if the post fails.
    took: [Option<(u32, u8, PostedRecv)>; CHAIN],
}

impl Chain {
    /// An empty chain.
    pub const fn new() -> Chain {
        Chain {
            qp: 0,
            n: 0,
            wrs: [NO_WR; CHAIN],
            posted: [Posted::EMPTY; CHAIN],
            took: [None; CHAIN],
        }
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new()
    }
}

const NO_WR: SendWr = SendWr {
    wr_id: 0,
    kind: SendKind::Send { imm: None },
    local: Sge {
        addr: 0,
        len: 0,
        lkey: 0,
    },
    signaled: false,
    flags: SqeFlags::empty(),
};

pub(super) enum Step {
    Taken,
    /// Taken, and submission stops after it.
    TakenThen(Stall),
    Wait(Stall),
}

/// The locks a submission holds across entries (see the module doc).
pub(super) struct Held<'f, S: Store, F: Fabric<S> + 'f> {
    members: Option<F::Members<'f>>,
    shard: Option<(u32, F::Shard<'f>)>,
}

impl<'f, S: Store, F: Fabric<S>> Held<'f, S, F> {
    pub(super) const NONE: Self = Held {
        members: None,
        shard: None,
    };

    /// The membership, held (the caller took it).
    pub(super) fn members(&mut self) -> &mut F::Members<'f> {
        self.members.as_mut().expect("members held")
    }

    /// Shard `k`, held (the caller took it).
    pub(super) fn shard(&mut self, k: u32) -> &mut Messages<S> {
        match &mut self.shard {
            Some((j, g)) if *j == k => g,
            _ => panic!("shard {k} not held"),
        }
    }
}

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// Takes up to `max` SQEs in context `cx`, validating against this ring's tables and
    /// the node's exports, matching two-sided messages in their links' shards.
    /// Fails, taking none, when the SQ tail is hostile.
    pub fn submit<F: Fabric<S>>(
        &mut self,
        f: &F,
        max: u32,
        cx: Context,
    ) -> Result<Submitted, RingError> {
        self.flush_overflow();
        self.settle(f);
        if self.registration != Pending::None {
            self.publish();
            return Ok(Submitted {
                taken: 0,
                stall: Some(Stall::Register),
            });
        }
        let ready = match self.sq.ready() {
            Ok(n) => n,
            Err(e) => {
                self.sq.set_flag(SqFlags::TAIL_OVERRUN, true);
                return Err(e);
            }
        };
        let (mut taken, mut stall) = (0, None);
        let throttled = self.blame.throttled(cx.now_ms);
        let mut held: Held<'_, S, F> = Held::NONE;
        while taken < ready.min(max) {
            if !self.has_room() {
                stall = Some(Stall::CqFull);
                break;
            }
            let Some(sqe) = self.sq.peek(taken) else {
                break;
            };
            match self.step(&sqe, f, &mut held, cx, throttled) {
                Step::Taken => taken += 1,
                Step::TakenThen(s) => {
                    taken += 1;
                    stall = Some(s);
                    break;
                }
                Step::Wait(s) => {
                    stall = Some(s);
                    break;
                }
            }
        }
        self.flush_chain(f, &mut held);
        drop(held);
        self.sq.consume(taken);
        self.stats.taken += taken as u64;
        // Offers its listens were nudged for, or found when they began (see `listen`).
        self.accept_offers(f);
        self.publish();
        Ok(Submitted { taken, stall })
    }

    /// One entry's step. Inlined into both callers: `submit`'s loop is the hot path,
    /// and with a second caller (io_uring's `submit_one`) the compiler stopped inlining
    /// it there, which cost every entry about 42 instructions (counted under -icount).
    #[inline(always)]
    pub(super) fn step<'f, F: Fabric<S>>(
        &mut self,
        sqe: &Sqe,
        f: &'f F,
        held: &mut Held<'f, S, F>,
        cx: Context,
        throttled: bool,
    ) -> Step {
        let ud = sqe.user_data;
        let op = match validate(sqe, &mut self.tables, f) {
            Ok(op) => op,
            Err(r) => {
                self.emit(Cqe::err(ud, r));
                return Step::Taken;
            }
        };
        let t = &mut self.tables;
        let cqe = match op {
            Op::Nop => Cqe::ok(ud, 0, 0),
            Op::RegMr { .. } if cx.caller != Caller::Owner => Cqe::err(ud, Reason::NotOwner),
            Op::Send { .. } | Op::Recv { .. } if throttled => Cqe::err(ud, Reason::Throttled),
            Op::RegMr { addr, len, access } => {
                self.registration = Pending::Taken(Registration {
                    user_data: ud,
                    addr,
                    len,
                    access,
                });
                // Our unposted requests go out before the caller drops its locks.
                self.flush_chain(f, held);
                return Step::TakenThen(Stall::Register);
            }
            Op::DeregMr { mr } => {
                let m = *t.mrs.get(mr).expect("validated");
                if m.recvs > 0 {
                    Cqe::err(ud, Reason::Busy)
                } else if m.sends > 0 {
                    return self.wait_for_sends(f, held);
                } else {
                    // Nodes that may have imported it are told, and answer, first (its
                    // memory stays registered, and the MR here, until they have); with
                    // no room to tell them yet, it waits for room.
                    if !revoke(f, m.descriptor, (self.id, self.gen), self.creds.user)
                        || f.revoke_far(m.keys.rkey) == Answer::Pending
                    {
                        return self.remote(f, held);
                    }
                    self.tables.mrs.remove(mr);
                    f.dereg_mr(m.keys);
                    Cqe::ok(ud, 0, 0)
                }
            }
            // Room first: a link end, once joined, is given up only by a disconnect.
            Op::Connect { .. } if t.vqps.len() == t.vqps.capacity() => {
                Cqe::err(ud, Reason::TableFull)
            }
            Op::Connect { gid, tuple } => return self.connect(ud, gid, tuple, f, held),
            Op::Listen { service } => return self.listen(ud, service, f, held),
            Op::Unlisten { service } => self.unlisten(ud, service, f, held),
            Op::ResolveName { name } => {
                self.hold_members(f, held);
                let creds = self.creds;
                let (uid, in_group) = (creds.uid, |g| creds.in_group(g));
                match held.members().resolve_named(&name, self.creds.user) {
                    Answer::Pending => return self.remote(f, held),
                    Answer::Failed(why) => Cqe::err(ud, why),
                    // Where a name lives is its mode's to tell, as its bytes are.
                    Answer::Done((_, e, g)) if g.rights(uid, in_group, e.access).is_empty() => {
                        Cqe::err(ud, Reason::NotPermitted)
                    }
                    Answer::Done((at, _, _)) => Cqe::ok(
                        ud,
                        at.node as i32,
                        (u32::from_be_bytes(at.ipv4) as u64) << 32,
                    ),
                }
            }
            Op::Disconnect { vqp } => {
                let v = *t.vqps.get(vqp).expect("validated");
                self.hold_members(f, held);
                self.hold_shard(f, held, v.shard);
                // Its end departs first: across nodes the peer is told (its answer frees
                // our receives), and a CONNECT still waiting for its listen ends
                // `Cancelled`.
                held.shard(v.shard).depart(v.link, v.end, f);
                self.cancel_recvs(vqp, held.shard(v.shard), f);
                let t = &mut self.tables;
                let v = *t.vqps.get(vqp).expect("validated");
                if v.sends > 0 || v.recvs > 0 {
                    // Sends in flight or waiting for a receive, or a message being
                    // delivered: all end within the request deadline.
                    return self.wait_for_sends(f, held);
                }
                t.vqps.remove(vqp);
                t.rmrs.drain_where(|_, r| r.vqp == vqp);
                held.shard(v.shard).leave(v.link, v.end, f);
                f.qp(v.qp, |q, _| q.unbind());
                held.members().disconnect(v.qp, v.binder(self.creds.user));
                let_vqp_go(f, self.creds.user, &v);
                Cqe::ok(ud, 0, 0)
            }
            Op::ImportMr {
                vqp,
                addr,
                len,
                descriptor,
                export,
                checked,
            } => match t.rmrs.insert(super::ring_state::RemoteMr {
                vqp,
                addr,
                len,
                descriptor,
                rkey: export.rkey,
                access: export.access,
                checked,
                across: false,
            }) {
                Ok(h) => Cqe::ok(ud, h as i32, 0),
                Err(_) => Cqe::err(ud, Reason::TableFull),
            },
            Op::Publish { mr, name, mode } => {
                let m = *t.mrs.get(mr).expect("validated");
                let export = Export {
                    descriptor: m.descriptor,
                    owner: (self.id, self.gen),
                    addr: m.addr,
                    len: m.len,
                    access: m.access,
                    rkey: m.keys.rkey,
                };
                let grant = Grant {
                    uid: self.creds.uid,
                    gid: self.creds.gid,
                    mode,
                };
                match f.publish(&name, &export, grant) {
                    Answer::Done(()) => Cqe::ok(ud, 0, 0),
                    Answer::Failed(why) => Cqe::err(ud, why),
                    Answer::Pending => return self.remote(f, held),
                }
            }
            Op::ImportName {
                vqp,
                name,
                len,
                owner,
            } => {
                let v = *t.vqps.get(vqp).expect("validated");
                self.hold_members(f, held);
                let creds = self.creds;
                let (uid, in_group) = (creds.uid, |g| creds.in_group(g));
                match held.members().import_named(&name, v.qp, self.creds.user) {
                    Answer::Pending => return self.remote(f, held),
                    Answer::Failed(why) => Cqe::err(ud, why),
                    // Nothing more is said (its owner, its length) to a user the name's
                    // mode grants nothing.
                    Answer::Done((e, g)) if g.rights(uid, in_group, e.access).is_empty() => {
                        Cqe::err(ud, Reason::NotPermitted)
                    }
                    // Whose name it is: the uid the caller named, else the caller's
                    // own or root's (see `NameFlags::OWNED_BY`).
                    Answer::Done((_, g))
                        if !owner.map_or(g.uid == uid || g.uid == 0, |o| o == g.uid) =>
                    {
                        Cqe::err(ud, Reason::WrongOwner)
                    }
                    Answer::Done((e, _)) if len > e.len => Cqe::err(ud, Reason::RemoteRange),
                    // The export's rights that the name's mode grants this user.
                    Answer::Done((e, g)) => {
                        match self.tables.rmrs.insert(super::ring_state::RemoteMr {
                            vqp,
                            addr: e.addr,
                            len: if len == 0 { e.len } else { len },
                            descriptor: 0,
                            rkey: e.rkey,
                            access: g.rights(uid, in_group, e.access),
                            checked: 0,
                            across: true,
                        }) {
                            Ok(h) => Cqe::ok(ud, h as i32, e.addr),
                            Err(_) => Cqe::err(ud, Reason::TableFull),
                        }
                    }
                }
            }
            Op::Send {
                vqp,
                mr,
                kind,
                local,
                flags,
            } => {
                let v = *t.vqps.get(vqp).expect("validated");
                if self.chain.n == CHAIN || (self.chain.n > 0 && self.chain.qp != v.qp) {
                    self.flush_chain(f, held);
                }
                let credit = f.qp(v.qp, |q, _| {
                    if q.failed() {
                        return Err(());
                    }
                    let ok = q.may_post(v.sends);
                    if ok {
                        q.claim();
                    }
                    Ok(ok)
                });
                match credit {
                    Err(()) => Cqe::err(ud, Reason::QpError),
                    Ok(false) => return Step::Wait(Stall::NoCredit),
                    Ok(true) => {
                        let inf = Inflight {
                            user_data: ud,
                            vqp,
                            mr,
                            len: local.len,
                            recv: false,
                            connect: false,
                            sink: self.sink,
                        };
                        return self.send(v, inf, kind, local, flags, f, held, cx);
                    }
                }
            }
            Op::Recv { vqp, mr, local } => {
                let v = *t.vqps.get(vqp).expect("validated");
                let token = t.mrs.get(mr).expect("validated").keys.token;
                let inf = Inflight {
                    user_data: ud,
                    vqp,
                    mr,
                    len: local.len,
                    recv: true,
                    connect: false,
                    sink: self.sink,
                };
                if self.tables.inflight.len() == self.tables.inflight.capacity() {
                    return Step::Wait(Stall::InflightFull);
                }
                // Its place in the shard's receives is this user's share (see
                // `shares`), given back when it completes.
                if let Err(why) = f.take_share(self.creds.user, Share::Recvs) {
                    self.emit(Cqe::err(ud, why));
                    return Step::Taken;
                }
                let Some(wr_id) = self.track(inf) else {
                    return Step::Wait(Stall::InflightFull);
                };
                let r = PostedRecv {
                    wr_id,
                    addr: local.addr,
                    len: local.len,
                    mr: token,
                    rkey: 0,
                    seq: 0,
                };
                self.hold_shard(f, held, v.shard);
                match held.shard(v.shard).recv(v.link, v.end, r, f) {
                    RecvStep::Queued => {}
                    RecvStep::Fail(why) => self.fail_unposted(wr_id, why, why.errno()),
                    RecvStep::Deliver { send, qp } => {
                        let from = (v.shard, v.link, 1 - v.end);
                        self.deliver_waiting(send, qp, r, from, f, held)
                    }
                }
                return Step::Taken;
            }
        };
        self.emit(cqe);
        Step::Taken
    }

    /// A request of virtual QP `v` that claimed its credit: tracked, matched with a
    /// receive if it needs one (SEND and WRITE_IMM, see `message`), and gathered into
    /// the chain.
    #[allow(clippy::too_many_arguments)]
    fn send<'f, F: Fabric<S>>(
        &mut self,
        v: Vqp,
        inf: Inflight,
        kind: SendKind,
        local: Sge,
        flags: SqeFlags,
        f: &'f F,
        held: &mut Held<'f, S, F>,
        cx: Context,
    ) -> Step {
        let Some(wr_id) = self.track(inf) else {
            f.qp(v.qp, |q, _| q.unclaim(1));
            return Step::Wait(Stall::InflightFull);
        };
        let target = match kind {
            SendKind::Send { .. } => Some(Target::Receive),
            SendKind::Write {
                remote_addr,
                rkey,
                imm: Some(_),
            } => Some(Target::Remote { remote_addr, rkey }),
            _ => None,
        };
        let mut far = false;
        let (kind, took) = match (target, kind) {
            (Some(target), SendKind::Send { imm } | SendKind::Write { imm, .. }) => {
                let s = WaitingSend {
                    wr_id,
                    local,
                    target,
                    imm,
                    flags,
                    since_ms: cx.now_ms,
                };
                self.hold_shard(f, held, v.shard);
                match held.shard(v.shard).send(v.link, v.end, s) {
                    SendStep::Deliver(r) => (s.kind(&r), Some((v.link, 1 - v.end, r, imm))),
                    // The receive is the peer node's: its kernel completes it.
                    SendStep::DeliverFar { r, to } => {
                        far = true;
                        (s.far_kind(&r, to), Some((v.link, 1 - v.end, r, imm)))
                    }
                    SendStep::Waits => {
                        f.qp(v.qp, |q, _| {
                            q.unclaim(1);
                            q.hold();
                        });
                        return Step::Taken;
                    }
                    SendStep::Fail(why) => {
                        f.qp(v.qp, |q, _| q.unclaim(1));
                        self.fail_unposted(wr_id, why, why.errno());
                        return Step::Taken;
                    }
                }
            }
            (_, k) => (k, None),
        };
        let c = &mut self.chain;
        c.qp = v.qp;
        c.wrs[c.n] = SendWr {
            wr_id,
            kind,
            local,
            signaled: false,
            flags,
        };
        c.posted[c.n] = Posted {
            wr_id,
            delivery: took.filter(|_| !far).map(|(_, _, r, imm)| Delivery {
                recv: r.wr_id,
                byte_len: local.len,
                imm,
            }),
        };
        c.took[c.n] = took.map(|(link, end, r, _)| (link, end, r));
        c.n += 1;
        Step::Taken
    }

    /// Takes an in-flight slot for CONNECT `ud` of virtual QP `vqp`, waiting for its
    /// listen (the caller checked there is one free), counted as a request of the
    /// virtual QP (a DISCONNECT waits for it); returns its `wr_id`.
    fn track_connect(&mut self, ud: u64, vqp: u32) -> u64 {
        let inf = Inflight {
            user_data: ud,
            vqp,
            mr: 0,
            len: 0,
            recv: false,
            connect: true,
            sink: self.sink,
        };
        let slot = self.tables.inflight.insert(inf).expect("room checked");
        if let Some(v) = self.tables.vqps.get_mut(vqp) {
            v.sends += 1;
        }
        WrId {
            ring: self.id,
            ring_gen: self.gen,
            slot,
        }
        .encode()
    }

    /// Takes an in-flight slot for `inf` and counts it on its virtual QP and MR (undone by
    /// `release_counts` when it completes); returns its `wr_id`, or `None` when every
    /// slot is in use.
    fn track(&mut self, inf: Inflight) -> Option<u64> {
        let t = &mut self.tables;
        let slot = t.inflight.insert(inf).ok()?;
        let (v, m) = (
            t.vqps.get_mut(inf.vqp).expect("validated"),
            t.mrs.get_mut(inf.mr).expect("validated"),
        );
        if inf.recv {
            v.recvs += 1;
            m.recvs += 1;
        } else {
            v.sends += 1;
            m.sends += 1;
        }
        Some(
            WrId {
                ring: self.id,
                ring_gen: self.gen,
                slot,
            }
            .encode(),
        )
    }

    /// CONNECT (entry `ud`) to `gid` by `t`: a port for it (an ephemeral one unless
    /// it names its own), a physical QP (the node's set: waits for it, see
    /// [`Stall::Remote`]), and its end of a link (none for service 0).
    fn connect<'f, F: Fabric<S>>(
        &mut self,
        ud: u64,
        gid: [u8; 16],
        mut t: Tuple,
        f: &'f F,
        held: &mut Held<'f, S, F>,
    ) -> Step {
        let creds = self.creds;
        // A CONNECT for a listen completes when the listen takes it: it holds an
        // in-flight slot until then.
        let waits = t.peer != 0 && !t.pair;
        if waits && self.tables.inflight.len() == self.tables.inflight.capacity() {
            return Step::Wait(Stall::InflightFull);
        }
        // The virtual QP is this user's share (see `shares`), given back with it.
        if let Err(why) = f.take_share(creds.user, Share::Vqps) {
            self.emit(Cqe::err(ud, why));
            return Step::Taken;
        }
        let ephemeral = t.local == 0;
        let port = match (t.peer, t.local) {
            (0, _) => Ok(0),
            (_, 0) => f.ports(|p| p.ephemeral(creds.uid)),
            (_, p) => f
                .ports(|ports| ports.bind(p, Hold::Named, creds))
                .map(|()| p),
        };
        t.local = match port {
            Ok(p) => p,
            Err(why) => {
                f.give_share(creds.user, Share::Vqps, 1);
                self.emit(Cqe::err(ud, why));
                return Step::Taken;
            }
        };
        let mut k = shard_of(&gid, port_key(t.local, t.peer), f.shards());
        self.hold_members(f, held);
        self.hold_shard(f, held, k);
        // A full shard does not refuse an ephemeral port: another port lands in another
        // shard. (A user may fill a shard with ports it names, within its share, but
        // never another user's ephemeral CONNECTs.)
        let mut tries = 0;
        let crowded = |m: &Messages<S>| m.links_full() || !m.may_make(creds.user);
        while t.peer != 0 && ephemeral && crowded(held.shard(k)) && tries < SHARD_TRIES {
            tries += 1;
            let old = t.local;
            match f.ports(|p| p.ephemeral(creds.uid)) {
                Ok(p) => t.local = p,
                Err(_) => break,
            }
            f.ports(|p| p.release(old));
            k = shard_of(&gid, port_key(t.local, t.peer), f.shards());
            self.hold_shard(f, held, k);
        }
        let release = |f: &F| {
            f.ports(|p| p.release(t.local));
            f.give_share(creds.user, Share::Vqps, 1);
        };
        let open = held.shard(k).half_open(&gid, t);
        let m = held.members();
        let cqe = match m.connect(
            gid,
            port_key(t.local, t.peer),
            open.map(|o| o.qp),
            self.creds.user,
        ) {
            Err(Errno::EINPROGRESS) => {
                // Taken again when the set is up: its port with it.
                release(f);
                return self.remote(f, held);
            }
            Err(e) => {
                release(f);
                let why = match e {
                    Errno::ENODEV => Reason::NoDevice,
                    Errno::EHOSTUNREACH => Reason::Unreachable,
                    // The peer table has no entry to give a new node (all in use).
                    Errno::ENOSPC => Reason::TableFull,
                    // This user's dials in progress are as many as it may have.
                    Errno::EDQUOT => Reason::Quota,
                    _ => Reason::Verbs,
                };
                Cqe::err_errno(ud, why, e)
            }
            Ok(conn) if conn.qp as usize >= f.count() => {
                m.disconnect(conn.qp, self.creds.user);
                release(f);
                Cqe::err(ud, Reason::Verbs)
            }
            Ok(conn) => {
                // Across nodes the link is made with the peer's kernel (see `far`);
                // here, with a pairing end or a listen's (see `message`).
                // A new link (not the second end of a half-open one) is its maker's,
                // within half the shard (see `Messages::may_make`).
                let makes = t.peer != 0 && (conn.peer || open.is_none());
                let joined = match (t.peer, conn.peer) {
                    _ if makes && !held.shard(k).may_make(creds.user) => Err(Reason::Quota),
                    (0, _) => Ok((0, 0)),
                    (_, true) => held.shard(k).join_far(gid, t, conn.qp, f),
                    (_, false) => held
                        .shard(k)
                        .join(gid, t, conn.qp, open)
                        .ok_or(Reason::TableFull),
                };
                match joined {
                    // Full of links that only wait to send their last notices (fast
                    // CONNECT/DISCONNECT cycles), the shard's or this user's half of
                    // it: they go as the notices complete, so the CONNECT waits for
                    // them rather than fail.
                    Err(Reason::TableFull | Reason::Quota)
                        if conn.peer && held.shard(k).draining() =>
                    {
                        held.members().disconnect(conn.qp, self.creds.user);
                        release(f);
                        return Step::Wait(Stall::Busy);
                    }
                    Err(why) => {
                        held.members().disconnect(conn.qp, self.creds.user);
                        release(f);
                        Cqe::err(ud, why)
                    }
                    Ok((link, end)) => {
                        if makes {
                            held.shard(k).made_by(link, creds.user);
                        }
                        let h = self.bind_vqp(conn, k, link, end, t.local, None, f);
                        if waits {
                            // Its CQE comes when the listen takes it, or refuses.
                            let wr_id = self.track_connect(ud, h);
                            held.shard(k).await_listen(link, wr_id);
                            return Step::Taken;
                        }
                        Cqe {
                            port: t.local,
                            ..Cqe::ok(ud, h as i32, conn.qpn as u64)
                        }
                    }
                }
            }
        };
        if let Some(tr) = self.trace {
            (tr.connect)(self.id, &gid, t.peer as u32, &cqe);
        }
        self.emit(cqe);
        Step::Taken
    }

    /// A new virtual QP bound to `conn`'s physical QP, at end `end` of link `link` in
    /// shard `k` (a CONNECT's, or an accepted offer's), holding `port` (a CONNECT's;
    /// released when it goes); the caller checked there is room. Returns its handle.
    #[allow(clippy::too_many_arguments)] // what a binding records, each its own
    pub(super) fn bind_vqp<F: Fabric<S>>(
        &mut self,
        conn: Connection,
        k: u32,
        link: u32,
        end: u8,
        port: u16,
        accepted: Option<Client>,
        f: &F,
    ) -> u32 {
        let h = self.tables.vqps.insert(Vqp {
            qp: conn.qp,
            qpn: conn.qpn,
            sends: 0,
            recvs: 0,
            shard: k,
            link,
            end,
            port,
            doomed: false,
            accepted,
        });
        let h = h.expect("room checked");
        f.qp(conn.qp, |q, _| q.bind());
        self.stats.connects += 1;
        h
    }

    /// Holds the membership lock for the rest of the call, letting a shard go first.
    pub(super) fn hold_members<'f, F: Fabric<S>>(&mut self, f: &'f F, held: &mut Held<'f, S, F>) {
        if held.members.is_none() {
            self.let_shard_go(f, held);
            held.members = Some(f.members());
        }
    }

    /// Holds shard `k`, letting another go first.
    pub(super) fn hold_shard<'f, F: Fabric<S>>(
        &mut self,
        f: &'f F,
        held: &mut Held<'f, S, F>,
        k: u32,
    ) {
        if !matches!(held.shard, Some((j, _)) if j == k) {
            self.let_shard_go(f, held);
            held.shard = Some((k, f.shard(k)));
        }
    }

    /// Lets the held shard go, posting the chain first if it holds receives matched
    /// under it (a failed post puts them back under the same lock).
    fn let_shard_go<'f, F: Fabric<S>>(&mut self, f: &'f F, held: &mut Held<'f, S, F>) {
        if held.shard.is_some() {
            let c = &self.chain;
            if c.took[..c.n].iter().any(Option::is_some) {
                self.flush_chain(f, held);
            }
            held.shard = None;
        }
    }

    /// An entry waits for another node: our unposted requests go out first (the
    /// caller drops its locks for the network work).
    fn remote<'f, F: Fabric<S>>(&mut self, f: &'f F, held: &mut Held<'f, S, F>) -> Step {
        self.flush_chain(f, held);
        Step::Wait(Stall::Remote)
    }

    /// The object's sends may be in our own unposted chain: post it, then wait.
    fn wait_for_sends<'f, F: Fabric<S>>(&mut self, f: &'f F, held: &mut Held<'f, S, F>) -> Step {
        self.flush_chain(f, held);
        Step::Wait(Stall::Busy)
    }

    /// Cancels virtual QP `vqp`'s receives no message has taken yet.
    pub(crate) fn cancel_recvs(
        &mut self,
        vqp: u32,
        messages: &mut Messages<S>,
        qps: &(impl Qps<S> + ?Sized),
    ) {
        let Some(&v) = self.tables.vqps.get(vqp) else {
            return;
        };
        while let Some(w) = messages.cancel_recv(v.link, v.end, qps) {
            self.complete(WrId::decode(w), Completion::Failed(Reason::Cancelled));
        }
    }

    /// Posts `send`, a SEND another ring left waiting on physical QP `qp` (holding its
    /// credit there), into our receive `r`. If the post fails (or the QP failed), the
    /// receive fails and the send waits again, first in its end (`from`: its shard, held,
    /// its link and end).
    fn deliver_waiting<'f, F: Fabric<S>>(
        &mut self,
        send: WaitingSend,
        qp: u32,
        r: PostedRecv,
        from: (u32, u32, u8),
        f: &'f F,
        held: &mut Held<'f, S, F>,
    ) {
        let posted = Posted {
            wr_id: send.wr_id,
            delivery: Some(Delivery {
                recv: r.wr_id,
                byte_len: send.local.len,
                imm: send.imm,
            }),
        };
        let wr = SendWr {
            wr_id: send.wr_id,
            kind: send.kind(&r),
            local: send.local,
            signaled: true,
            flags: send.flags,
        };
        let out = f.qp(qp, |q, post| {
            if q.failed() {
                let why = q.fail_reason();
                return Err((why, why.errno()));
            }
            q.release_held();
            q.reserve(posted);
            let wr = SendWr {
                signaled: q.next_signaled(true),
                ..wr
            };
            post.post_send(&[wr]).map_err(|e| {
                q.unreserve_last(1);
                q.hold();
                (Reason::Verbs, e.errno)
            })
        });
        if let Err((why, errno)) = out {
            held.shard(from.0).unmatch_send(from.1, from.2, send);
            self.fail_unposted(r.wr_id, why, errno);
        }
    }

    /// Posts the chain in one section of its QP's lock, where its requests take their
    /// places in the QP's order; requests that did not go out fail (with the backend's
    /// errno, or `QpError` when the QP failed meanwhile), and the receives they took are
    /// put back.
    pub(super) fn flush_chain<'f, F: Fabric<S>>(&mut self, f: &'f F, held: &mut Held<'f, S, F>) {
        let chain = &mut self.chain;
        let n = chain.n;
        if n == 0 {
            return;
        }
        chain.n = 0;
        let out = f.qp(chain.qp, |q, post| {
            q.unclaim(n as u32);
            if q.failed() {
                let why = q.fail_reason();
                return Err((0, why, why.errno()));
            }
            for (i, wr) in chain.wrs[..n].iter_mut().enumerate() {
                q.reserve(chain.posted[i]);
                wr.signaled = q.next_signaled(i == n - 1);
            }
            post.post_send(&chain.wrs[..n])
                .map_err(|PostError { posted, errno }| {
                    let posted = posted.min(n);
                    q.unreserve_last(n - posted);
                    // An unsignaled request ends what went out: no completion may ever
                    // retire it, so the QP's accounting can only be settled by
                    // recycling it.
                    if posted > 0 && !chain.wrs[posted - 1].signaled {
                        q.fail();
                    }
                    (posted, Reason::Verbs, errno)
                })
        });
        if let Err((posted, why, errno)) = out {
            // Newest first, so each receive put back at the front keeps its place.
            for i in (posted..n).rev() {
                let wr_id = self.chain.wrs[i].wr_id;
                if let Some((link, end, r)) = self.chain.took[i].take() {
                    let (_, g) = held.shard.as_mut().expect("held since it was matched");
                    g.unmatch_recv(link, end, r);
                }
                self.fail_unposted(wr_id, why, errno);
            }
        }
    }
}
