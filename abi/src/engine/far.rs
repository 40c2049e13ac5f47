//! Message links across nodes: one end here, one on another node, joined through the
//! two nodes' kernels over the set between them.
//!
//! A link is a four-tuple (see `message`): a virtual QP here that CONNECTs from port
//! `p` to node B's port `s` is joined with the virtual QP the listen on `s` at B
//! accepts for it (see `listen`), or, when both CONNECTs pair, with the one on B that
//! names `s` and `p` back. A second link with the same node and ports is refused
//! (`ServiceTaken`). The kernels tell each other about their ends with [`Notice`]s,
//! small SENDs on the set's QP the ends are bound to (their ports pick it), into kernel
//! receives the module keeps posted there:
//!
//! - `Hello`: an end joined, with both ports (and the peer's end, once known). A Hello
//!   for a listen is kept here, offered to it, until the deadline; a pairing Hello pairs
//!   with the end here that names its ports back, and is not kept when there is none
//!   (that end's own Hello, later, finds the sender's waiting, which pairs and answers).
//! - `Advert`: a RECV at this end (buffer, length, and the rkey of the MR it is in: the
//!   kernel's, never a user's), numbered per link (`seq`: 0, 1, ...). The peer's kernel
//!   keeps the adverts in order in its link, as the receives of the far end, and takes
//!   only the one whose turn it is (a duplicate is not a second buffer).
//! - A SEND (or WRITE_IMM) takes the oldest advert and goes out as an RDMA WRITE into
//!   it followed, on the same QP, by a `Data` notice
//!   ([`SendKind::DeliverFar`](super::backend::SendKind::DeliverFar)); RC keeps them
//!   in order, so when the notice arrives the bytes are there, and the receiving kernel
//!   completes its oldest advertised receive with the length and immediate. The notice
//!   names the advert it filled (`seq`): one that is not the oldest's (a duplicate, a
//!   replay) completes nothing. A SEND
//!   that finds no advert waits in its end, as on one node, until one arrives or the
//!   deadline passes (`NoReceiver`). A SEND longer than the receive it meets fails
//!   `TooLong`; unlike on one node, the receive stays for the next message.
//! - `Leave`, then `Left`: an end that goes (DISCONNECT, its ring closed) tells the
//!   peer, whose waiting sends then fail `NoReceiver`; its advertised receives are the
//!   peer's to fill until the peer answers `Left` (every `Data` for them came before),
//!   so only then are they cancelled and their memory free to go. A peer that does not
//!   answer within the deadline has the QP failed (so no late write lands) and the
//!   receives are cancelled.
//!
//! Notices are sent lazily: a link owes them (flags, and a cursor over its receives
//! not yet advertised), sits once in the shard's due list, and each is posted when its
//! QP has room ([`NOTICE_ROOM`](super::qp::NOTICE_ROOM) beyond the requests' depth);
//! otherwise it waits there, to be sent when a notice completes or by the next sweep.
//! No table grows with what users do: a flood of RECVs is advertised as room allows.
//!
//! A set QP that fails ends every link on it: receives fail `QpError` (nothing can
//! arrive any more), waiting sends too, and the peer's adverts are forgotten.

use super::backend::{SendKind, SendWr};
use super::cluster::notice::{link_id, split_link_id, Notice, NO_LINK};
use super::cqe::Reason;
use super::fabric::Qps;
use super::message::{End, Holder, Link, Messages, PostedRecv, Target, Tuple, WaitingSend, NIL};
use super::qp::Posted;
use super::qp_bits::QpBits;
use super::ring_state::Completion;
use super::wrid::{backend_index, backend_wr_id};
use super::Store;

/// The `wr_id` of every notice posted on its own (signaled; its completion only frees
/// room, see [`PhysQp::notice_done`](super::qp::PhysQp::notice_done)).
pub const NOTICE_WR_ID: u64 = backend_wr_id(0x4000_0000);
/// The `wr_id` of the WRITE before a `Data` notice (unsignaled: completes only when
/// flushed, and is then dropped).
pub const FAR_WRITE_WR_ID: u64 = backend_wr_id(0x4000_0001);
/// The `wr_id` of a receive the peer's kernel advertised (never routed to a ring).
pub const FAR_RECV: u64 = u64::MAX;

/// Keys for receives advertised to peer kernels, device-wide (kmod/engine/fastreg.c):
/// an advert waits while none is free.
pub const ADVERT_KEYS: u32 = 256;

/// A peer's share of a shard's links for its ends waiting there (see `on_hello`): one
/// in this many.
pub const PEER_SHARE: usize = 4;

/// Kernel receives for notices kept posted on each set QP (kmod/cluster/cm.c posts them; its
/// `KRCORE_NOTICE_RECVS` is this).
pub const NOTICE_RECVS: u32 = 64;

const NOTICE_RECV_BASE: u32 = 0x5000_0000;

/// The `wr_id` of notice receive `i` of a set QP (cm.c computes the same:
/// `U64_MAX - (0x50000000 + i)`).
pub const fn notice_recv_wr_id(i: u32) -> u64 {
    backend_wr_id(NOTICE_RECV_BASE + i)
}

/// Which notice receive a `wr_id` is, if it is one.
pub const fn notice_recv_index(wr_id: u64) -> Option<u32> {
    backend_index(wr_id, NOTICE_RECV_BASE, NOTICE_RECVS)
}

/// A receive of this node's leaves its link: the key made for it (when it was
/// advertised) is let go, `closed` when the peer's `Data` already closed it at the NIC;
/// otherwise the backend closes it before the memory can go.
pub(super) fn let_key_go<S: Store>(qps: &(impl Qps<S> + ?Sized), r: &PostedRecv, closed: bool) {
    if r.mr != 0 && r.rkey != 0 {
        qps.release_key(r.rkey, closed);
    }
}

/// A link's far end, and what this kernel owes the peer's about it.
#[derive(Clone, Copy, Debug)]
pub struct Far {
    /// The peer kernel's id for its end ([`NO_LINK`] until its Hello).
    pub(super) id: u64,
    /// Our Hello is owed.
    pub(super) hello: bool,
    /// Our Leave is owed.
    pub(super) leave: bool,
    /// A Left is owed to the peer (its end left).
    left: bool,
    /// The local end left and waits for the peer's Left, since (ms; `i64::MIN` until
    /// the next sweep reads the clock).
    pub(super) retract_since: Option<i64>,
    /// The first receive of the local end not advertised yet ([`NIL`]: none).
    pub(super) cursor: u32,
    /// The `seq` of the local end's next advert.
    adverts_out: u32,
    /// The `seq` of the advert the next `Data` fills: the local end's oldest advertised
    /// receive (adverts go out, and are filled, in order).
    filled: u32,
    /// The `seq` the peer's next advert must carry.
    adverts_in: u32,
    /// In the shard's due list.
    queued: bool,
    /// Its QP failed: nothing more goes out or comes in.
    broken: bool,
}

impl Far {
    /// Whether its QP failed (the link is over).
    pub(super) fn broken(&self) -> bool {
        self.broken
    }

    const NEW: Far = Far {
        id: NO_LINK,
        hello: false,
        leave: false,
        left: false,
        retract_since: None,
        cursor: NIL,
        adverts_out: 0,
        filled: 0,
        adverts_in: 0,
        queued: false,
        broken: false,
    };
}

impl WaitingSend {
    /// The request that carries it into `r`, a receive the peer kernel advertised for
    /// its end `to`.
    pub(super) fn far_kind(&self, r: &PostedRecv, to: u64) -> SendKind {
        let (remote_addr, rkey) = match self.target {
            Target::Receive => (r.addr, r.rkey),
            Target::Remote { remote_addr, rkey } => (remote_addr, rkey),
        };
        SendKind::DeliverFar {
            remote_addr,
            rkey,
            to,
            seq: r.seq,
            inv: r.rkey,
            imm: self.imm,
        }
    }
}

impl<S: Store> Messages<S> {
    /// A CONNECT by `t` of a virtual QP bound to set QP `qp` to the node at `gid`: a
    /// new end, announced with our Hello (a pairing one pairs with the peer's when
    /// either's Hello reaches the other's end; see `on_hello`). Fails `ServiceTaken`
    /// while a link of this node with that node has the same ports, and `TableFull`
    /// when the links are used up.
    pub fn join_far(
        &mut self,
        gid: [u8; 16],
        t: Tuple,
        qp: u32,
        qps: &(impl Qps<S> + ?Sized),
    ) -> Result<(u32, u8), Reason> {
        let ports = [t.local, t.peer];
        let in_use = self.links.iter().any(|(_, l)| {
            // A link that is over sends its last notices by id.
            let live = matches!(l.ends[0].holder, Holder::Open | Holder::Bound);
            live && l.far.is_some() && l.gid == gid && l.ports == ports
        });
        if in_use {
            return Err(Reason::ServiceTaken);
        }
        let bound = End {
            holder: Holder::Bound,
            qp,
            ..End::OPEN
        };
        let mut l = Link::new(gid, ports, [bound, End::OPEN], Some(Far::NEW));
        l.pair = t.pair;
        if !t.pair {
            // Refused here if the peer never answers (see `expire_unanswered`).
            l.unanswered_since = Some(i64::MIN);
        }
        let h = self.links.insert(l).map_err(|_| Reason::TableFull)?;
        if !t.pair {
            self.unanswered += 1;
        }
        if let Some(f) = self.far_mut(h) {
            f.hello = true;
        }
        self.enqueue(h);
        self.flush_due(qps);
        Ok((h, 0))
    }

    /// A receive was just queued at the local end of far link `link`: advertised when
    /// there is room.
    pub(super) fn advertise(&mut self, link: u32, qps: &(impl Qps<S> + ?Sized)) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        let tail = l.ends[0].recvs.tail;
        let Some(f) = &mut l.far else { return };
        if f.cursor == NIL {
            f.cursor = tail;
        }
        self.enqueue(link);
        self.flush_due(qps);
    }

    /// Whether far link `link` is broken (its QP failed).
    pub fn far_broken(&self, link: u32) -> bool {
        self.links
            .get(link)
            .and_then(|l| l.far)
            .is_some_and(|f| f.broken)
    }

    /// The local end of far link `link` goes: see the module doc.
    pub(super) fn depart_far(&mut self, link: u32, qps: &(impl Qps<S> + ?Sized)) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if l.ends[0].holder != Holder::Bound {
            return;
        }
        l.ends[0].holder = Holder::Gone;
        let qp = l.ends[0].qp;
        let connecting = core::mem::take(&mut l.connect_wr);
        if connecting != 0 {
            let _ = self
                .owed
                .push((connecting, Completion::Failed(Reason::Cancelled)));
        }
        // Its waiting sends can never go now, and nothing more goes into the peer's
        // receives.
        while let Some(s) = l.ends[0].waiting.pop(&mut self.waiting) {
            qps.qp(qp, |q, _| q.release_held());
            let _ = self
                .owed
                .push((s.wr_id, Completion::Failed(Reason::NoReceiver)));
        }
        while l.ends[1].recvs.pop(&mut self.recvs).is_some() {}
        let paired = l.ends[1].holder == Holder::Bound;
        let head = l.ends[0].recvs.head;
        let Some(f) = &mut l.far else { return };
        let hello_sent = !f.hello;
        f.hello = false;
        if f.broken {
            return;
        }
        if paired {
            f.leave = true;
            // Receives the peer knows of are its to fill until it answers.
            if head != NIL && f.cursor != head {
                f.retract_since = Some(i64::MIN);
                self.retracting += 1;
            }
        } else if hello_sent {
            // It may have paired with us meanwhile: it must know we left.
            f.leave = true;
        }
        self.enqueue(link);
        self.flush_due(qps);
    }

    /// The local end of far link `link` is released (its receives cancelled, its sends
    /// done; or the device is gone): the link goes once nothing is owed to the peer.
    pub(super) fn leave_far(&mut self, link: u32, qps: &(impl Qps<S> + ?Sized)) {
        self.depart_far(link, qps);
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        while let Some(r) = l.ends[0].recvs.pop(&mut self.recvs) {
            let_key_go(qps, &r, false);
        }
        while l.ends[0].waiting.pop(&mut self.waiting).is_some() {}
        l.ends[0].holder = Holder::Left;
        if let Some(f) = &mut l.far {
            f.cursor = NIL;
            if f.retract_since.take().is_some() {
                self.retracting -= 1;
            }
        }
        self.reap(link);
    }

    /// A notice from the kernel at `gid`, arrived on set QP `qp`; `invalidated` is the
    /// key its SEND closed at this NIC, as the completion says (never the notice's own
    /// word).
    pub fn on_notice(
        &mut self,
        gid: &[u8; 16],
        qp: u32,
        n: Notice,
        invalidated: Option<u32>,
        qps: &(impl Qps<S> + ?Sized),
    ) {
        match n {
            Notice::Hello {
                to_port,
                from_port,
                from,
                to,
                pair,
            } => self.on_hello(gid, qp, (to_port, from_port, pair), from, to),
            Notice::Advert {
                to,
                seq,
                addr,
                len,
                rkey,
            } => {
                let r = PostedRecv {
                    wr_id: FAR_RECV,
                    addr,
                    len,
                    mr: 0,
                    rkey,
                    seq,
                };
                self.on_advert(gid, to, r, qps)
            }
            Notice::Data { to, seq, len, imm } => {
                self.on_data(gid, qp, (to, seq), len, imm, invalidated, qps)
            }
            Notice::Leave {
                to_port,
                from_port,
                to,
                from,
            } => self.on_leave(gid, qp, [to_port, from_port], to, from, qps),
            Notice::Left { to } => self.on_left(gid, to, qps),
            // About exports: the device's (`cluster::revoke`), never a shard's.
            Notice::Revoke { .. }
            | Notice::RevokeAck { .. }
            | Notice::Use { .. }
            | Notice::Farewell { .. } => {}
        }
        self.flush_due(qps);
    }

    /// A Hello from the peer's end `from` on its port `hello.1` for our port
    /// `hello.0`: the answer to ours (`to`), or a new end that pairs with ours, or one
    /// for the listen on our port (offered to it; kept for a listen to come until the
    /// deadline), or a pairing one kept for our CONNECT to come.
    fn on_hello(&mut self, gid: &[u8; 16], qp: u32, hello: (u16, u16, bool), from: u64, to: u64) {
        let (port, peer_port, pair) = hello;
        let ports = [port, peer_port];
        if to != NO_LINK {
            if let Some(h) = self.mine(to, gid) {
                let l = self.links.get(h).expect("mine");
                let f = l.far.expect("far");
                if l.ports == ports
                    && l.ends[0].holder == Holder::Bound
                    && l.ends[1].holder == Holder::Open
                {
                    return self.pair(h, from);
                }
                if l.ends[1].holder == Holder::Bound && f.id == from {
                    return;
                }
            }
            // The end it names is gone or taken: its end must not wait for ours.
            return self.tell_to_leave(*gid, qp, ports, from);
        }
        let (mut waiting, mut taken) = (None, false);
        for (h, l) in self.links.iter() {
            if l.far.is_none() || l.gid != *gid || l.ports != ports {
                continue;
            }
            // A repeat of a Hello we hold or paired with (a duplicate on the wire).
            if l.far.is_some_and(|f| f.id == from) {
                return;
            }
            match (l.ends[0].holder, l.ends[1].holder) {
                // Our pairing end waits for this one.
                (Holder::Bound, Holder::Open) if pair && l.pair => waiting = Some(h),
                // That four-tuple is in use: no second link with it.
                (Holder::Open | Holder::Bound, _) => taken = true,
                // A link that is over may still wait for its last notices.
                (Holder::Gone | Holder::Left, _) => {}
            }
        }
        if let Some(h) = waiting {
            // It never heard of our end (its Hello went before ours arrived, or ours
            // was dropped for having no end there): tell it.
            self.pair(h, from);
            if let Some(f) = self.far_mut(h) {
                f.hello = true;
            }
            return self.enqueue(h);
        }
        if taken {
            return self.tell_to_leave(*gid, qp, ports, from);
        }
        // A pairing end with none here to pair with is not kept: when ours comes, its
        // Hello finds the peer's end waiting, which pairs and answers. So no peer holds
        // links here by pairing with nobody.
        if pair {
            return;
        }
        // A peer's ends waiting here for a listen are its share of the shard: past it,
        // refused at once, so no peer fills the links every other node and this node's
        // users need.
        if self.announced_by(gid) >= self.links.capacity() / PEER_SHARE {
            return self.tell_to_leave(*gid, qp, ports, from);
        }
        let mut l = Link::new(
            *gid,
            ports,
            [
                End {
                    holder: Holder::Open,
                    qp,
                    ..End::OPEN
                },
                End {
                    holder: Holder::Bound,
                    ..End::OPEN
                },
            ],
            Some(Far {
                id: from,
                ..Far::NEW
            }),
        );
        // A CONNECT for our listener waits for one until the deadline.
        l.unanswered_since = Some(i64::MIN);
        let Ok(h) = self.links.insert(l) else {
            // No room: refused (if a link can be had to say so; the peer's own deadline
            // ends it otherwise).
            return self.tell_to_leave(*gid, qp, ports, from);
        };
        self.unanswered += 1;
        // A ring that listens on the port takes it (see `listen`).
        self.offer(h);
    }

    /// Whether links here wait only to send their last notices (their local end left):
    /// they go as the notices do, so a CONNECT that finds the table full waits for them
    /// rather than fail (see the submission's `connect`).
    pub fn draining(&self) -> bool {
        self.links.iter().any(|(_, l)| {
            l.far.is_some() && matches!(l.ends[0].holder, Holder::Left | Holder::Gone)
        })
    }

    /// Links of the peer at `gid` with no end here yet (its CONNECTs waiting for a listen
    /// or a pairing CONNECT).
    fn announced_by(&self, gid: &[u8; 16]) -> usize {
        self.links
            .iter()
            .filter(|(_, l)| l.gid == *gid && l.far.is_some() && l.ends[0].holder == Holder::Open)
            .count()
    }

    /// The peer's end `from` finds no end here, and never will: told to leave.
    fn tell_to_leave(&mut self, gid: [u8; 16], qp: u32, ports: [u16; 2], from: u64) {
        let far = Far {
            id: from,
            leave: true,
            ..Far::NEW
        };
        self.owe_only(gid, qp, ports, far, Holder::Bound);
    }

    /// Pairs our end of far link `h` with the peer's end `from`; a CONNECT waiting
    /// for it completes, and no longer waits for an answer (`expire_unanswered` would
    /// otherwise end the live link).
    fn pair(&mut self, h: u32, from: u64) {
        self.answered(h);
        let Some(l) = self.links.get_mut(h) else {
            return;
        };
        l.ends[1].holder = Holder::Bound;
        if let Some(f) = &mut l.far {
            f.id = from;
        }
        self.answer_connect(h, Completion::Done);
        // Receives posted meanwhile are advertised now.
        self.enqueue(h);
    }

    /// A link with no local end, kept only until what `far` owes the peer's end is
    /// sent (a Leave: the end it names here is gone; a Left: the answer to its Leave),
    /// then gone.
    fn owe_only(&mut self, gid: [u8; 16], qp: u32, ports: [u16; 2], far: Far, peer: Holder) {
        let t = self.links.insert(Link::new(
            gid,
            ports,
            [
                End {
                    holder: Holder::Left,
                    qp,
                    ..End::OPEN
                },
                End {
                    holder: peer,
                    ..End::OPEN
                },
            ],
            Some(far),
        ));
        if let Ok(t) = t {
            self.enqueue(t);
        }
    }

    fn on_advert(&mut self, gid: &[u8; 16], to: u64, r: PostedRecv, qps: &(impl Qps<S> + ?Sized)) {
        let Some(h) = self.mine(to, gid) else { return };
        let l = self.links.get_mut(h).expect("mine");
        if l.ends[0].holder != Holder::Bound || l.ends[1].holder != Holder::Bound {
            return;
        }
        // In turn only: a duplicate would have two messages written into one buffer.
        let Some(f) = l.far.as_mut().filter(|f| f.adverts_in == r.seq) else {
            return;
        };
        if l.ends[1].recvs.push_back(&mut self.recvs, r).is_err() {
            return;
        }
        f.adverts_in = f.adverts_in.wrapping_add(1);
        self.drain_waiting(h, qps);
    }

    /// Sends of far link `h` that waited for adverts go, while there are both.
    fn drain_waiting(&mut self, h: u32, qps: &(impl Qps<S> + ?Sized)) {
        loop {
            let Some(l) = self.links.get_mut(h) else {
                return;
            };
            let (qp, to) = (l.ends[0].qp, l.far.map_or(NO_LINK, |f| f.id));
            if l.ends[0].waiting.is_empty() || l.ends[1].recvs.is_empty() {
                return;
            }
            let s = l.ends[0].waiting.pop(&mut self.waiting).expect("waiting");
            let r = l.ends[1].recvs.pop(&mut self.recvs).expect("advert");
            if !s.fits(&r) {
                let _ = l.ends[1].recvs.push_front(&mut self.recvs, r);
                qps.qp(qp, |q, _| q.release_held());
                self.owe(s.wr_id, Completion::Failed(Reason::TooLong));
                continue;
            }
            let wr = SendWr {
                wr_id: s.wr_id,
                kind: s.far_kind(&r, to),
                local: s.local,
                signaled: true,
                flags: s.flags,
            };
            let out = qps.qp(qp, |q, post| {
                if q.failed() {
                    q.release_held();
                    return Err(Some(q.fail_reason()));
                }
                q.release_held();
                q.reserve(Posted {
                    wr_id: s.wr_id,
                    delivery: None,
                });
                let wr = SendWr {
                    signaled: q.next_signaled(true),
                    ..wr
                };
                post.post_send(&[wr]).map_err(|_| {
                    q.unreserve_last(1);
                    q.hold();
                    None
                })
            });
            match out {
                Ok(()) => {}
                Err(Some(why)) => self.owe(s.wr_id, Completion::Failed(why)),
                Err(None) => {
                    // Not posted: both wait again, first in line.
                    let l = self.links.get_mut(h).expect("live");
                    let _ = l.ends[0].waiting.push_front(&mut self.waiting, s);
                    let _ = l.ends[1].recvs.push_front(&mut self.recvs, r);
                    return;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(
        &mut self,
        gid: &[u8; 16],
        qp: u32,
        (to, seq): (u64, u32),
        len: u32,
        imm: Option<u32>,
        invalidated: Option<u32>,
        qps: &(impl Qps<S> + ?Sized),
    ) {
        let Some(h) = self.mine(to, gid) else { return };
        let l = self.links.get_mut(h).expect("mine");
        let head = l.ends[0].recvs.head;
        let Some(f) = l.far.as_mut() else { return };
        // Only an advertised receive can be filled, and only by the Data for its advert:
        // a duplicate or replayed one completes no receive that got no bytes.
        if head == NIL || f.cursor == head || seq != f.filled {
            return;
        }
        let key = self.recvs.get(head).map(|n| n.val.rkey);
        if invalidated.is_none() || invalidated != key {
            // The peer's Data left the receive's key open at our NIC: it could write
            // into the buffer after the receive completes. No completion; the QP fails
            // (its links end, each key is closed before its memory is let go).
            qps.qp(qp, |q, _| q.fail_with(Reason::RemoteError));
            return;
        }
        let l = self.links.get_mut(h).expect("mine");
        let f = l.far.as_mut().expect("far");
        f.filled = f.filled.wrapping_add(1);
        let r = l.ends[0].recvs.pop(&mut self.recvs).expect("head");
        let_key_go(qps, &r, true);
        // A sender never sends past the advert (it fails the SEND instead): checked all
        // the same, the receive fails rather than report more than it holds.
        let c = if len > r.len {
            Completion::Failed(Reason::TooLong)
        } else {
            Completion::Received { byte_len: len, imm }
        };
        self.owe(r.wr_id, c);
    }

    fn on_leave(
        &mut self,
        gid: &[u8; 16],
        qp: u32,
        ports: [u16; 2],
        to: u64,
        from: u64,
        qps: &(impl Qps<S> + ?Sized),
    ) {
        let h = if to != NO_LINK {
            self.mine(to, gid)
        } else {
            self.links
                .iter()
                .find(|(_, l)| {
                    l.gid == *gid && l.ports == ports && l.far.is_some_and(|f| f.id == from)
                })
                .map(|(h, _)| h)
        };
        let Some(h) = h else {
            // Ours is gone already; it still waits for the answer.
            if to != NO_LINK {
                let far = Far {
                    id: from,
                    left: true,
                    ..Far::NEW
                };
                self.owe_only(*gid, qp, ports, far, Holder::Gone);
            }
            return;
        };
        let l = self.links.get_mut(h).expect("found");
        if l.ends[0].holder == Holder::Open {
            // An announcement no CONNECT or listen took.
            self.answered(h);
            self.remove_link(h);
            return;
        }
        // Never joined: refused (no listen took it in time, or it had no room).
        l.refused |= l.ends[1].holder == Holder::Open;
        l.ends[1].holder = Holder::Gone;
        let qp = l.ends[0].qp;
        while l.ends[1].recvs.pop(&mut self.recvs).is_some() {}
        let why = match l.refused {
            true => Reason::Refused,
            false => Reason::NoReceiver,
        };
        let connecting = core::mem::take(&mut l.connect_wr);
        if connecting != 0 {
            let _ = self.owed.push((connecting, Completion::Failed(why)));
        }
        while let Some(s) = l.ends[0].waiting.pop(&mut self.waiting) {
            qps.qp(qp, |q, _| q.release_held());
            let _ = self.owed.push((s.wr_id, Completion::Failed(why)));
        }
        if let Some(f) = &mut l.far {
            f.left = to != NO_LINK;
            // Both left: every Data of the peer's came before its Leave.
            if f.retract_since.is_some() {
                self.finish_retract(h, qps);
            }
        }
        self.enqueue(h);
    }

    fn on_left(&mut self, gid: &[u8; 16], to: u64, qps: &(impl Qps<S> + ?Sized)) {
        let Some(h) = self.mine(to, gid) else { return };
        if self.far_mut(h).is_some_and(|f| f.retract_since.is_some()) {
            self.finish_retract(h, qps);
        }
        self.reap(h);
    }

    /// The retraction of far link `h`'s receives is over: each is cancelled.
    fn finish_retract(&mut self, h: u32, qps: &(impl Qps<S> + ?Sized)) {
        let Some(l) = self.links.get_mut(h) else {
            return;
        };
        while let Some(r) = l.ends[0].recvs.pop(&mut self.recvs) {
            let_key_go(qps, &r, false);
            let _ = self
                .owed
                .push((r.wr_id, Completion::Failed(Reason::Cancelled)));
        }
        if let Some(f) = &mut l.far {
            f.cursor = NIL;
            if f.retract_since.take().is_some() {
                self.retracting -= 1;
            }
        }
    }

    /// Retractions the peer did not answer within `deadline_ms` at `now_ms`: the QP is
    /// failed (no late write lands) and the receives are cancelled.
    pub(super) fn expire_far(
        &mut self,
        now_ms: i64,
        deadline_ms: i64,
        qps: &(impl Qps<S> + ?Sized),
    ) {
        if self.retracting == 0 {
            return;
        }
        self.each_far(|m, h| {
            let l = m.links.get_mut(h).expect("live");
            let qp = l.ends[0].qp;
            let Some(f) = &mut l.far else { return };
            match f.retract_since {
                Some(i64::MIN) => f.retract_since = Some(now_ms),
                Some(t) if now_ms - t > deadline_ms => {
                    qps.qp(qp, |q, _| q.fail_with(Reason::Deadline));
                    m.finish_retract(h, qps);
                }
                _ => {}
            }
        });
    }

    /// Runs `f` on every far link, by handle.
    fn each_far(&mut self, mut f: impl FnMut(&mut Self, u32)) {
        for i in 0..self.links.capacity() {
            let h = self.links.handle_at(i);
            if let Some(h) = h.filter(|&h| self.links.get(h).is_some_and(|l| l.far.is_some())) {
                f(self, h);
            }
        }
    }

    /// Set QPs in `failed` failed: every far link on one ends (see the module doc).
    pub fn fail_far(&mut self, failed: QpBits, qps: &(impl Qps<S> + ?Sized)) {
        if failed.is_empty() {
            return;
        }
        self.each_far(|m, h| {
            let l = m.links.get_mut(h).expect("live");
            let qp = l.ends[0].qp;
            let hit = failed.contains(qp);
            let Some(f) = &mut l.far else { return };
            if !hit || f.broken {
                return;
            }
            f.broken = true;
            (f.hello, f.leave, f.left, f.cursor) = (false, false, false, NIL);
            if f.retract_since.take().is_some() {
                m.retracting -= 1;
            }
            if l.ends[1].holder == Holder::Bound {
                l.ends[1].holder = Holder::Gone;
            }
            while l.ends[1].recvs.pop(&mut m.recvs).is_some() {}
            // They end for the reason the QP failed (the peer went, a deadline).
            let why = Completion::Failed(qps.qp(qp, |q, _| q.fail_reason()));
            let connecting = core::mem::take(&mut l.connect_wr);
            if connecting != 0 {
                let _ = m.owed.push((connecting, why));
            }
            while let Some(s) = l.ends[0].waiting.pop(&mut m.waiting) {
                qps.qp(qp, |q, _| q.release_held());
                let _ = m.owed.push((s.wr_id, why));
            }
            while let Some(r) = l.ends[0].recvs.pop(&mut m.recvs) {
                let_key_go(qps, &r, false);
                let _ = m.owed.push((r.wr_id, why));
            }
            if matches!(l.ends[0].holder, Holder::Open | Holder::Left) {
                m.answered(h);
                m.remove_link(h);
            }
        });
    }

    /// Posts what the due links owe, each notice when its QP has room.
    pub(super) fn flush_due(&mut self, qps: &(impl Qps<S> + ?Sized)) {
        while let Some(h) = self.due.front() {
            loop {
                let Some((qp, n, mr)) = self.next_notice(h) else {
                    self.due.pop();
                    if let Some(f) = self.far_mut(h) {
                        f.queued = false;
                    }
                    self.reap(h);
                    break;
                };
                if qp as usize >= qps.count() {
                    // Never installed: nothing can go (the link ends with its set).
                    if let Some(f) = self.far_mut(h) {
                        f.broken = true;
                    }
                    continue;
                }
                let mut n = n;
                let sent = qps.qp(qp, |q, post| {
                    if !q.notice_room() {
                        return false;
                    }
                    // An advert's key is made for its receive alone, registered before
                    // the advert goes.
                    if let Notice::Advert {
                        rkey, addr, len, ..
                    } = &mut n
                    {
                        match post.map_recv(mr, *addr, *len) {
                            Ok(k) => *rkey = k,
                            Err(_) => return false,
                        }
                    }
                    let ok = post.post_notice(&n.encode()).is_ok();
                    if ok {
                        q.notice_posted();
                    } else if let Notice::Advert { rkey, .. } = n {
                        qps.release_key(rkey, false);
                    }
                    ok
                });
                if !sent {
                    // No room on that QP, or no key to be had now: a notice's
                    // completion or the sweep resumes.
                    return;
                }
                self.notice_sent(h, &n);
            }
        }
    }

    /// The next notice far link `h` owes, the QP it goes on, and for an advert its
    /// receive's MR.
    fn next_notice(&self, h: u32) -> Option<(u32, Notice, u64)> {
        let l = self.links.get(h)?;
        let f = l.far?;
        if f.broken {
            return None;
        }
        let (qp, me) = (l.ends[0].qp, link_id(self.index, h));
        if f.hello {
            return Some((
                qp,
                Notice::Hello {
                    to_port: l.ports[1],
                    from_port: l.ports[0],
                    from: me,
                    to: f.id,
                    pair: l.pair,
                },
                0,
            ));
        }
        let live = l.ends[0].holder == Holder::Bound && l.ends[1].holder == Holder::Bound;
        if live && f.cursor != NIL {
            let r = self.recvs.get(f.cursor)?.val;
            return Some((
                qp,
                Notice::Advert {
                    to: f.id,
                    seq: f.adverts_out,
                    addr: r.addr,
                    len: r.len,
                    rkey: 0,
                },
                r.mr,
            ));
        }
        if f.leave {
            let n = Notice::Leave {
                to_port: l.ports[1],
                from_port: l.ports[0],
                to: f.id,
                from: me,
            };
            return Some((qp, n, 0));
        }
        if f.left {
            return Some((qp, Notice::Left { to: f.id }, 0));
        }
        None
    }

    /// Notice `n` of far link `h` went out.
    fn notice_sent(&mut self, h: u32, n: &Notice) {
        let Some(l) = self.links.get_mut(h) else {
            return;
        };
        let Some(f) = &mut l.far else { return };
        match n {
            Notice::Hello { .. } => f.hello = false,
            Notice::Advert { rkey, .. } => {
                // The receive remembers its key: its Data must close it.
                if let Some(r) = self.recvs.get_mut(f.cursor) {
                    r.val.rkey = *rkey;
                }
                f.cursor = self.recvs.get(f.cursor).map_or(NIL, |n| n.next);
                f.adverts_out = f.adverts_out.wrapping_add(1);
            }
            Notice::Leave { .. } => f.leave = false,
            Notice::Left { .. } => f.left = false,
            Notice::Data { .. }
            | Notice::Revoke { .. }
            | Notice::RevokeAck { .. }
            | Notice::Use { .. }
            | Notice::Farewell { .. } => {}
        }
    }

    /// Puts far link `h` in the due list (once).
    pub(super) fn enqueue(&mut self, h: u32) {
        if let Some(f) = self.far_mut(h) {
            if !f.queued {
                f.queued = true;
                let r = self.due.push(h);
                debug_assert!(r.is_ok(), "due outsizes links");
            }
        }
    }

    /// Removes far link `h` once its local end is released and nothing is owed.
    fn reap(&mut self, h: u32) {
        let done = self.links.get(h).is_some_and(|l| {
            l.ends[0].holder == Holder::Left
                && l.far
                    .is_some_and(|f| !f.queued && f.retract_since.is_none())
        });
        if done {
            self.remove_link(h);
        }
    }

    /// Our far link the peer at `gid` names `to`.
    fn mine(&self, to: u64, gid: &[u8; 16]) -> Option<u32> {
        let (k, h) = split_link_id(to);
        let l = self.links.get(h)?;
        (k == self.index && l.far.is_some() && l.gid == *gid).then_some(h)
    }

    fn far_mut(&mut self, h: u32) -> Option<&mut Far> {
        self.links.get_mut(h)?.far.as_mut()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    extern crate std;
    use super::*;
    use crate::engine::fabric::Post;
    use crate::engine::{PhysQp, PostError, RecvStep, SendStep, Sge, VecStore};
    use crate::sqe::SqeFlags;
    use core::cell::RefCell;
    use std::vec;
    use std::vec::Vec;

    /// One node's side of a set: its QPs, and what it put on the wire.
    pub(crate) struct Node {
        pub(crate) gid: [u8; 16],
        pub(crate) qps: Vec<RefCell<PhysQp<VecStore>>>,
        /// Notices posted, with their QP, oldest first (a `Data` after its WRITE).
        pub(crate) wire: RefCell<Vec<(u32, Notice)>>,
        /// Requests posted that carry a message (their WRITE and `Data` notice).
        pub(crate) writes: RefCell<Vec<SendWr>>,
        /// The key each `Data` on the wire invalidates, in the order of `wire`'s Data.
        pub(crate) invs: RefCell<Vec<u32>>,
        /// Keys made for receives ([`key`]), and those let go, with whether the NIC had
        /// already closed them.
        pub(crate) mapped: RefCell<Vec<u32>>,
        pub(crate) released: RefCell<Vec<(u32, bool)>>,
    }

    /// The key the fake NIC makes for a receive at `addr`.
    pub(crate) fn key(addr: u64) -> u32 {
        0x4b00_0000 | (addr as u32 & 0x00ff_ffff)
    }

    struct Wire<'a> {
        node: &'a Node,
        qp: u32,
    }

    impl Post for Wire<'_> {
        fn post_send(&mut self, wrs: &[SendWr]) -> Result<(), PostError> {
            for w in wrs {
                if let SendKind::DeliverFar {
                    to, seq, imm, inv, ..
                } = w.kind
                {
                    self.node.writes.borrow_mut().push(*w);
                    self.node.invs.borrow_mut().push(inv);
                    let n = Notice::Data {
                        to,
                        seq,
                        len: w.local.len,
                        imm,
                    };
                    self.node.wire.borrow_mut().push((self.qp, n));
                }
            }
            Ok(())
        }
        fn post_notice(&mut self, n: &[u8; 32]) -> Result<(), PostError> {
            let n = Notice::decode(n).expect("a notice");
            self.node.wire.borrow_mut().push((self.qp, n));
            Ok(())
        }
        fn map_recv(&mut self, mr: u64, addr: u64, _len: u32) -> Result<u32, PostError> {
            assert_ne!(mr, 0, "a receive of this node's names its MR");
            self.node.mapped.borrow_mut().push(key(addr));
            Ok(key(addr))
        }
    }

    impl Qps<VecStore> for Node {
        fn count(&self) -> usize {
            self.qps.len()
        }
        fn qp<R>(&self, i: u32, f: impl FnOnce(&mut PhysQp<VecStore>, &mut dyn Post) -> R) -> R {
            let mut q = self.qps[i as usize].borrow_mut();
            f(&mut q, &mut Wire { node: self, qp: i })
        }
        fn release_key(&self, rkey: u32, closed: bool) {
            self.released.borrow_mut().push((rkey, closed));
        }
    }

    /// Carries notices both ways until none is left: the Hellos of ends that pair, and
    /// their answers.
    pub(crate) fn meet(
        na: &Node,
        a: &mut Messages<VecStore>,
        nb: &Node,
        b: &mut Messages<VecStore>,
    ) {
        while carry(na, nb, b) + carry(nb, na, a) > 0 {}
    }

    /// A CONNECT that pairs port `p` with the peer's port `p`.
    pub(crate) fn pair(p: u16) -> Tuple {
        Tuple {
            local: p,
            peer: p,
            pair: true,
        }
    }

    pub(crate) fn node(last: u8) -> (Node, Messages<VecStore>) {
        node_with(last, 8)
    }

    /// A node whose shard holds `links` links.
    pub(crate) fn node_with(last: u8, links: usize) -> (Node, Messages<VecStore>) {
        let mut gid = [0u8; 16];
        gid[10..12].fill(0xff);
        gid[12..].copy_from_slice(&[192, 0, 2, last]);
        let n = Node {
            gid,
            qps: (0..2)
                .map(|_| RefCell::new(PhysQp::new(vec![Posted::EMPTY; 8])))
                .collect(),
            wire: RefCell::new(Vec::new()),
            writes: RefCell::new(Vec::new()),
            invs: RefCell::new(Vec::new()),
            mapped: RefCell::new(Vec::new()),
            released: RefCell::new(Vec::new()),
        };
        (n, Messages::with_capacity(links, 32))
    }

    /// Carries what `from` put on the wire to `to`'s links; how many notices. Each
    /// notice posted on its own frees its room when it "completes" here.
    pub(crate) fn carry(from: &Node, to: &Node, m: &mut Messages<VecStore>) -> usize {
        let sent: Vec<_> = from.wire.borrow_mut().drain(..).collect();
        let mut invs = from
            .invs
            .borrow_mut()
            .drain(..)
            .collect::<Vec<_>>()
            .into_iter();
        for &(qp, n) in &sent {
            let mut inv = None;
            if matches!(n, Notice::Data { .. }) {
                inv = invs.next();
            } else {
                from.qps[qp as usize].borrow_mut().notice_done();
            }
            m.on_notice(&from.gid, qp, n, inv, to);
        }
        sent.len()
    }

    pub(crate) fn recv(wr_id: u64, addr: u64) -> PostedRecv {
        PostedRecv {
            wr_id,
            addr,
            len: 64,
            mr: 0x77,
            rkey: 0,
            seq: 0,
        }
    }

    pub(crate) fn send(wr_id: u64, len: u32, imm: Option<u32>) -> WaitingSend {
        WaitingSend {
            wr_id,
            local: Sge {
                addr: 0x9000,
                len,
                lkey: 1,
            },
            target: Target::Receive,
            imm,
            flags: SqeFlags::empty(),
            since_ms: 0,
        }
    }

    pub(crate) fn owed(m: &mut Messages<VecStore>, n: &Node) -> Vec<(u64, Completion)> {
        let mut got = Vec::new();
        m.settle(0, 5_000, n, |w, c| got.push((w.encode(), c)));
        got
    }

    /// A SEND from node A's end: what it met.
    fn a_sends(m: &mut Messages<VecStore>, link: u32, s: WaitingSend) -> SendStep {
        m.send(link, 0, s)
    }

    /// A peer's notices delivered twice (a duplicate on the wire, or a replay) change
    /// nothing: a second Advert is not a second buffer to write into, and a second Data
    /// completes no receive that got no bytes.
    #[test]
    fn duplicate_adverts_and_data_change_nothing() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        // Crossing Hellos, each arriving twice: the repeat changes nothing (it used
        // to be taken for a second link on the same ports, and told to leave).
        for (from, to, m) in [(&na, &nb, &mut b), (&nb, &na, &mut a)] {
            let hellos: Vec<_> = from.wire.borrow_mut().drain(..).collect();
            for &(qp, n) in hellos.iter().flat_map(|x| [x, x]) {
                m.on_notice(&from.gid, qp, n, None, to);
            }
        }
        let told: Vec<_> = [&na, &nb]
            .iter()
            .flat_map(|n| n.wire.borrow().iter().map(|&(_, n)| n).collect::<Vec<_>>())
            .collect();
        assert!(
            told.iter().all(|n| matches!(n, Notice::Hello { .. })),
            "no Leave: {told:?}"
        );
        meet(&na, &mut a, &nb, &mut b);
        for (w, addr) in [(80, 0x8000), (81, 0x8100)] {
            assert_eq!(b.recv(b7, 0, recv(w, addr), &nb), RecvStep::Queued);
        }
        // Each advert arrives twice.
        let adverts: Vec<_> = nb.wire.borrow_mut().drain(..).collect();
        assert_eq!(adverts.len(), 2);
        for &(qp, n) in adverts.iter().flat_map(|x| [x, x]) {
            a.on_notice(&nb.gid, qp, n, None, &na);
        }
        // Two sends take the two buffers; a third finds none and waits.
        for (w, len) in [(1, 5), (2, 6)] {
            assert!(matches!(
                a_sends(&mut a, a7, send(w, len, None)),
                SendStep::DeliverFar { .. }
            ));
        }
        assert_eq!(
            a_sends(&mut a, a7, send(3, 7, None)),
            SendStep::Waits,
            "no third buffer"
        );
        // Its credit held while it waits, as a submission holds it.
        na.qps[1].borrow_mut().hold();
        // Their Data notices, the first twice: each receive completes once, with its own.
        let far_b7 = link_id(b.index, b7);
        let data = |seq, len| Notice::Data {
            to: far_b7,
            seq,
            len,
            imm: None,
        };
        for (n, addr) in [
            (data(0, 5), 0x8000),
            (data(0, 5), 0x8000),
            (data(1, 6), 0x8100),
            (data(1, 6), 0x8100),
        ] {
            b.on_notice(&na.gid, 1, n, Some(key(addr)), &nb);
        }
        let got = owed(&mut b, &nb);
        let rx = |byte_len| Completion::Received {
            byte_len,
            imm: None,
        };
        assert_eq!(got, vec![(80, rx(5)), (81, rx(6))]);
        // A third receive: only the Data for its advert fills it, not a replay.
        assert_eq!(b.recv(b7, 0, recv(82, 0x8200), &nb), RecvStep::Queued);
        carry(&nb, &na, &mut a);
        b.on_notice(&na.gid, 1, data(0, 5), Some(key(0x8000)), &nb);
        assert!(
            owed(&mut b, &nb).is_empty(),
            "a replayed Data fills nothing"
        );
        b.on_notice(&na.gid, 1, data(2, 7), Some(key(0x8200)), &nb);
        assert_eq!(owed(&mut b, &nb), vec![(82, rx(7))]);
    }

    /// A receive is written through a key made for it alone, which the peer's `Data`
    /// must close at our NIC: one that leaves it open (or closes another) completes
    /// nothing and fails the QP; every key is let go, closed or to be closed.
    #[test]
    fn a_data_that_leaves_the_receives_key_open_fails_the_qp() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        meet(&na, &mut a, &nb, &mut b);
        carry(&nb, &na, &mut a);
        for (w, addr) in [(80, 0x8000), (81, 0x8100), (82, 0x8200)] {
            assert_eq!(b.recv(b7, 0, recv(w, addr), &nb), RecvStep::Queued);
        }
        assert_eq!(
            *nb.mapped.borrow(),
            vec![key(0x8000), key(0x8100), key(0x8200)]
        );
        // The advert carries the key made for its receive, not the MR's.
        carry(&nb, &na, &mut a);
        match a_sends(&mut a, a7, send(1, 5, None)) {
            SendStep::DeliverFar { r, .. } => assert_eq!(r.rkey, key(0x8000)),
            other => panic!("{other:?}"),
        }
        // Sent as a sender must: the Data closes the key, the receive completes.
        let far_b7 = link_id(b.index, b7);
        let data = |seq| Notice::Data {
            to: far_b7,
            seq,
            len: 4,
            imm: None,
        };
        b.on_notice(&na.gid, 1, data(0), Some(key(0x8000)), &nb);
        assert_eq!(owed(&mut b, &nb).len(), 1);
        assert_eq!(*nb.released.borrow(), vec![(key(0x8000), true)]);
        let data = data(1);
        for inv in [None, Some(key(0x8200)), Some(key(0x8000))] {
            b.on_notice(&na.gid, 1, data, inv, &nb);
            assert!(owed(&mut b, &nb).is_empty(), "{inv:?} left the key open");
            assert!(nb.qps[1].borrow().failed(), "the QP fails");
            nb.qps[1].borrow_mut().revive();
        }
        // The QP's failure ends the link: the open keys are let go, to be closed.
        nb.qps[1].borrow_mut().fail_with(Reason::RemoteError);
        b.fail_far(QpBits::one(1), &nb);
        assert_eq!(owed(&mut b, &nb).len(), 2);
        assert_eq!(
            nb.released.borrow()[1..],
            [(key(0x8100), false), (key(0x8200), false)]
        );
    }

    /// An advertised receive cancelled (the peer left first, then its ring let it go)
    /// lets its key go too: none is kept open, nor lost from the device's keys.
    #[test]
    fn a_cancelled_advertised_receive_lets_its_key_go() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        meet(&na, &mut a, &nb, &mut b);
        carry(&nb, &na, &mut a);
        assert_eq!(b.recv(b7, 0, recv(80, 0x8000), &nb), RecvStep::Queued);
        assert_eq!(*nb.mapped.borrow(), vec![key(0x8000)]);
        assert_eq!(b.cancel_recv(b7, 0, &nb), Some(80));
        assert_eq!(*nb.released.borrow(), vec![(key(0x8000), false)]);
    }

    #[test]
    fn two_services_pair_and_each_gets_only_its_own_messages() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        // Both ends of service 7 and of 8 (the service picks the QP: 7 on 1, 8 on 0).
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        let (a8, _) = a.join_far(nb.gid, pair(8), 0, &na).unwrap();
        assert_eq!(
            a.join_far(nb.gid, pair(7), 1, &na),
            Err(Reason::ServiceTaken),
            "one end per node and service"
        );
        // B's CONNECTs come after A's Hellos, which found no end there and were
        // dropped: B's Hellos find A's ends waiting, which pair and answer.
        assert_eq!(carry(&na, &nb, &mut b), 2);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        let (b8, _) = b.join_far(na.gid, pair(8), 0, &nb).unwrap();
        meet(&na, &mut a, &nb, &mut b);
        carry(&nb, &na, &mut a);
        // B posts a receive on each service: advertised to A, into the right end.
        for (link, w, addr) in [(b7, 70, 0x7000), (b8, 80, 0x8000)] {
            assert_eq!(b.recv(link, 0, recv(w, addr), &nb), RecvStep::Queued);
        }
        assert_eq!(carry(&nb, &na, &mut a), 2, "two adverts");
        // A's SEND on 8 goes into B's service-8 receive, and no other.
        let far_b8 = link_id(b.index, b8);
        match a_sends(&mut a, a8, send(1, 5, Some(8))) {
            SendStep::DeliverFar { r, to } => {
                assert_eq!((r.addr, r.rkey, to), (0x8000, key(0x8000), far_b8));
                assert_eq!(r.wr_id, FAR_RECV, "never a ring's");
            }
            other => panic!("{other:?}"),
        }
        // Its notice completes B's receive 80 with the length and immediate.
        b.on_notice(
            &na.gid,
            0,
            Notice::Data {
                to: far_b8,
                seq: 0,
                len: 5,
                imm: Some(8),
            },
            Some(key(0x8000)),
            &nb,
        );
        assert_eq!(
            owed(&mut b, &nb),
            vec![(
                80,
                Completion::Received {
                    byte_len: 5,
                    imm: Some(8)
                }
            )]
        );
        // A message longer than the receive fails; the receive stays for the next.
        assert_eq!(
            a_sends(&mut a, a7, send(2, 65, None)),
            SendStep::Fail(Reason::TooLong)
        );
        assert!(matches!(
            a_sends(&mut a, a7, send(3, 64, None)),
            SendStep::DeliverFar { r, .. } if r.addr == 0x7000
        ));
    }

    #[test]
    fn a_send_waits_for_an_advert_and_goes_when_it_arrives() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        // Hellos crossing: each pairs on the other's.
        carry(&na, &nb, &mut b);
        carry(&nb, &na, &mut a);
        na.qps[1].borrow_mut().hold();
        assert_eq!(a_sends(&mut a, a7, send(5, 8, Some(1))), SendStep::Waits);
        assert_eq!(b.recv(b7, 0, recv(50, 0x5000), &nb), RecvStep::Queued);
        carry(&nb, &na, &mut a);
        // The advert posted the waiting send: a WRITE into B's buffer, its notice after.
        let w = na.writes.borrow_mut().pop().expect("posted");
        assert_eq!(w.wr_id, 5);
        assert!(matches!(
            w.kind,
            SendKind::DeliverFar {
                remote_addr: 0x5000,
                ..
            }
        ));
        carry(&na, &nb, &mut b);
        assert_eq!(
            owed(&mut b, &nb),
            vec![(
                50,
                Completion::Received {
                    byte_len: 8,
                    imm: Some(1)
                }
            )]
        );
    }

    #[test]
    fn leaving_with_advertised_receives_waits_for_the_peers_answer() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        meet(&na, &mut a, &nb, &mut b);
        for (w, addr) in [(70, 0x7000), (71, 0x7100)] {
            b.recv(b7, 0, recv(w, addr), &nb);
        }
        carry(&nb, &na, &mut a);
        // B's end leaves: A may still be writing into its receives.
        b.depart(b7, 0, &nb);
        assert_eq!(b.cancel_recv(b7, 0, &nb), None, "the peer has not answered");
        assert!(!b.quiet(), "the sweep watches the retraction");
        // A takes the Leave: its sends to B fail from now, and it answers.
        carry(&nb, &na, &mut a);
        assert_eq!(
            a_sends(&mut a, a7, send(9, 4, None)),
            SendStep::Fail(Reason::NoReceiver)
        );
        carry(&na, &nb, &mut b);
        assert_eq!(
            owed(&mut b, &nb),
            vec![
                (70, Completion::Failed(Reason::Cancelled)),
                (71, Completion::Failed(Reason::Cancelled))
            ]
        );
        b.leave(b7, 0, &nb);
        assert_eq!(b.links(), 0, "nothing left of it");
        // A's end leaves too: B answers for an end it no longer has.
        a.leave(a7, 0, &na);
        carry(&na, &nb, &mut b);
        carry(&nb, &na, &mut a);
        assert_eq!((a.links(), b.links()), (0, 0));
    }

    #[test]
    fn an_unanswered_retraction_fails_the_qp_after_the_deadline() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (_, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        meet(&na, &mut a, &nb, &mut b);
        b.recv(b7, 0, recv(70, 0x7000), &nb);
        b.depart(b7, 0, &nb);
        // The peer never answers.
        let mut got = Vec::new();
        b.settle(1_000, 5_000, &nb, |w, c| got.push((w.encode(), c)));
        assert!(got.is_empty(), "the clock starts at the first sweep");
        b.settle(6_001, 5_000, &nb, |w, c| got.push((w.encode(), c)));
        assert_eq!(got, vec![(70, Completion::Failed(Reason::Cancelled))]);
        assert!(nb.qps[1].borrow().failed(), "no late write can land");
    }

    #[test]
    fn a_failed_set_qp_ends_its_links() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        let (a8, _) = a.join_far(nb.gid, pair(8), 0, &na).unwrap();
        carry(&na, &nb, &mut b);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        carry(&nb, &na, &mut a);
        a.recv(a7, 0, recv(70, 0x7000), &na);
        a.recv(a8, 0, recv(80, 0x8000), &na);
        // The peer closed the set (its module went): the receive ends for that reason.
        na.qps[1].borrow_mut().fail_with(Reason::PeerGone);
        a.fail_far(QpBits::one(1), &na);
        assert_eq!(
            owed(&mut a, &na),
            vec![(70, Completion::Failed(Reason::PeerGone))],
            "only the link on the failed QP, for the QP's reason"
        );
        assert_eq!(
            a.recv(a7, 0, recv(71, 0x7100), &na),
            RecvStep::Fail(Reason::QpError)
        );
        assert!(a.far_broken(a7) && !a.far_broken(a8));
        let _ = b7;
    }

    #[test]
    fn notices_wait_for_room_and_go_in_order() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        carry(&nb, &na, &mut a);
        // Receives past the notice room wait in the link, not in a table.
        let n = crate::engine::NOTICE_ROOM as u64 + 4;
        for i in 0..n {
            assert_eq!(
                a.recv(a7, 0, recv(100 + i, 0x1000 * i), &na),
                RecvStep::Queued
            );
        }
        assert_eq!(na.wire.borrow().len() as u64, n - 4, "as room allows");
        carry(&na, &nb, &mut b);
        // Room came back: the sweep posts the rest, in order.
        owed(&mut a, &na);
        carry(&na, &nb, &mut b);
        for i in 0..n {
            match b.send(b7, 0, send(200 + i, 8, None)) {
                SendStep::DeliverFar { r, .. } => assert_eq!(r.addr, 0x1000 * i),
                other => panic!("send {i}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_hello_for_a_gone_end_is_answered_with_a_leave() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        let far_a7 = link_id(a.index, a7);
        a.leave(a7, 0, &na);
        // A's Hello and Leave (the end left unpaired) reach B: nothing is kept.
        carry(&na, &nb, &mut b);
        assert_eq!(b.links(), 0);
        // A Hello naming an end of B's that does not exist gets a Leave back.
        b.on_notice(
            &na.gid,
            1,
            Notice::Hello {
                to_port: 7,
                from_port: 7,
                from: far_a7,
                to: link_id(0, 5),
                pair: true,
            },
            None,
            &nb,
        );
        let back: Vec<_> = nb.wire.borrow().iter().map(|&(_, n)| n).collect();
        assert!(
            matches!(back[..], [Notice::Leave { to, .. }] if to == far_a7),
            "{back:?}"
        );
    }

    #[test]
    fn only_an_advertised_receive_is_filled() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let (b7, _) = b.join_far(na.gid, pair(7), 1, &nb).unwrap();
        // Not paired yet: the receive is queued, not advertised.
        assert_eq!(b.recv(b7, 0, recv(70, 0x7000), &nb), RecvStep::Queued);
        let data = Notice::Data {
            to: link_id(b.index, b7),
            seq: 0,
            len: 4,
            imm: None,
        };
        b.on_notice(&na.gid, 1, data, Some(key(0x7000)), &nb);
        assert!(owed(&mut b, &nb).is_empty(), "a Data for it is ignored");
        // From another node, never.
        let (a7, _) = a.join_far(nb.gid, pair(7), 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        carry(&nb, &na, &mut a);
        let mut other = na.gid;
        other[15] = 99;
        b.on_notice(&other, 1, data, Some(key(0x7000)), &nb);
        assert!(owed(&mut b, &nb).is_empty());
        b.on_notice(&na.gid, 1, data, Some(key(0x7000)), &nb);
        assert_eq!(owed(&mut b, &nb).len(), 1, "from its peer, once advertised");
        let _ = a7;
    }
}
