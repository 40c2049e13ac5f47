//! Listening: a service whose clients, from any node, each get a virtual QP in one ring.
//!
//! A CONNECT for a service (not a pairing one) is a link's first end, on its own port
//! (see `message`); a ring that LISTENs on the service's port takes each: a peer's
//! Hello, or a CONNECT of this node's, is *offered* to the listening ring, which binds a
//! virtual QP of its own to it and completes its LISTEN once more with that virtual QP
//! and the client's address and port (multishot, as io_uring's accept; the entry's CQEs
//! in [`opcode`]); the CONNECT completes then too.
//!
//! Two halves, each under the locks the rest keeps (see [`fabric`]):
//! - in every links shard (a link lives in the shard of its peer node and ports) a
//!   [`Listener`] entry names the listen. A CONNECT for its port marks its new link
//!   offered and, once until the ring has looked, owes the listen a nudge
//!   ([`Completion::Offered`]), routed as any completion to the ring's inbox;
//! - in the ring, each listen remembers the shards that nudged it, and the ring takes
//!   their offers ([`Ring::accept_offers`]) under its own lock, then the membership's
//!   and the shard's, in order: each offer becomes a virtual QP (across nodes bound to
//!   the set QP its Hello came on, and answered with our Hello; here, to the QP opposite
//!   the connecting end's), and the LISTEN gets a CQE.
//!
//! So nothing waits in the SQ (a LISTEN is taken at once), the inbox holds at most one
//! nudge per listen and shard, and every offer is accepted, refused by name (no room in
//! the ring's virtual QP table: `TableFull`; the client's part of it used up: `Quota`;
//! the connecting end is refused), or, when the listen ends, kept for the next listen
//! until its deadline.
//!
//! What an accepted virtual QP costs: no share of the listening user's (it holds the
//! connecting end's link, counted against that end's maker, or the peer's), so a client
//! cannot spend the server's quota; and one client, a user of this node or another node
//! ([`Client`]), may hold at most a quarter of the listening ring's virtual QPs
//! ([`CLIENT_SHARE`]), so no client fills the server's table for the others. A pairing CONNECT of this node's on the same four-tuple fails
//! `ServiceTaken`: the listen holds that port.
//!
//! LISTEN, UNLISTEN and a ring's close hold the membership lock while they visit the
//! shards one after another, so a service's listener entries are the same in every
//! shard whenever another LISTEN looks (shard 0's decides `ServiceTaken`).
//!
//! Room: a listen owes one last CQE (without `MORE`) from the moment it listens, which
//! the room rule counts like a request in flight; an accepted peer's CQE is written only
//! while the rule leaves room, else the offer waits for the next submission.
//!
//! [`opcode`]: super::opcode
//! [`fabric`]: super::fabric

use super::cluster::peers::NO_USER;
use super::cqe::{Cqe, CqeFlags, Reason};
use super::fabric::{Fabric, Members as _, Qps};
use super::message::{Holder, Messages};
use super::ports::Hold;
use super::ring::RingMem;
use super::ring_state::{Client, Completion, Ring};
use super::shares::Share;
use super::sqe::Sqe;
use super::submit::{Held, Stall, Step};
use super::wrid::WrId;
use super::Store;

/// Services a node's rings may listen on at once (each shard's listener table).
pub const MAX_LISTENERS: usize = 32;

/// Listens one ring may hold at once.
pub const RING_LISTENS: usize = 4;

/// Writes a listened service's line of the module's `peers` file:
/// `listen service S uid U ring R offers N` (`uid`: the user holding the port, see
/// `ports`; `offers`: connecting ends offered and not taken yet).
pub fn write_listen_line(
    service: u32,
    uid: u32,
    ring: u16,
    offers: usize,
    w: &mut impl core::fmt::Write,
) -> core::fmt::Result {
    writeln!(
        w,
        "listen service {service} uid {uid} ring {ring} offers {offers}"
    )
}

/// A shard's note that a ring listens on a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Listener {
    service: u32,
    /// The listen, as a routing id: its ring and generation, and its index in the
    /// ring's listens as the slot.
    listen: WrId,
    /// A nudge is owed or on its way: the ring has not looked since.
    nudged: bool,
    /// The nudge is owed: the next settle routes it (kept here, not in the owed
    /// completions, so no sequence of listens and Hellos owes more than one).
    owed: bool,
}

/// An offered link: a connecting end the listening ring may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The link, in its shard.
    pub link: u32,
    /// The peer node (this node's own, for a CONNECT of this node's).
    pub gid: [u8; 16],
    /// Across nodes, the set QP the peer's Hello came on, which the taking virtual QP
    /// binds to; here, the connecting end's QP, whose opposite it binds to.
    pub qp: u32,
    /// The link's end the taking virtual QP holds.
    pub end: u8,
    /// The connecting end's port.
    pub peer_port: u16,
    /// The connecting end is on another node.
    pub far: bool,
    /// The user (slot) whose CONNECT made the link, here (see `Messages::made_by`).
    pub maker: u32,
}

impl Offer {
    /// Who is connecting: this node's user, or the other node.
    pub fn client(&self) -> Client {
        match self.far {
            true => Client::Node(u32::from_be_bytes([
                self.gid[12],
                self.gid[13],
                self.gid[14],
                self.gid[15],
            ])),
            false => Client::User(self.maker),
        }
    }
}

/// One client may hold at most 1/`CLIENT_SHARE` of a listening ring's virtual QPs
/// (at least one) through the listen's accepts.
pub const CLIENT_SHARE: usize = 4;

/// One of a ring's listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Listening {
    service: u32,
    /// The LISTEN's `user_data`: every CQE of the listen carries it.
    user_data: u64,
    /// Shards that may hold offers for it, a bit each.
    due: u64,
}

impl<S: Store> Messages<S> {
    /// Makes `listen` the listener of `service` in this shard; links announced for the
    /// service and not taken yet are offered to it. Whether there were any. Fails
    /// `ServiceTaken` when another listen has the service, `TableFull` when the table
    /// is.
    pub fn add_listener(&mut self, service: u32, listen: WrId) -> Result<bool, Reason> {
        if self.listener(service).is_some() {
            return Err(Reason::ServiceTaken);
        }
        let free = self.listeners.iter_mut().find(|l| l.is_none());
        let slot = free.ok_or(Reason::TableFull)?;
        *slot = Some(Listener {
            service,
            listen,
            nudged: false,
            owed: false,
        });
        Ok(self.mark_offers(service, true))
    }

    /// Removes `listen`'s entry for `service`; its offers not taken stay as
    /// announcements for the next CONNECT.
    pub fn remove_listener(&mut self, service: u32, listen: WrId) {
        for e in self.listeners.iter_mut() {
            if e.is_some_and(|l| l.service == service && l.listen == listen) {
                *e = None;
            }
        }
        self.mark_offers(service, false);
    }

    /// Marks the links waiting for the listen on `service` (a peer's CONNECT announced
    /// here, or a CONNECT of this node's, that no listen took yet) offered or not;
    /// whether there were any.
    fn mark_offers(&mut self, service: u32, offered: bool) -> bool {
        let mut any = false;
        for l in self.links.values_mut() {
            if let Some(e) = l.open_end().filter(|_| !l.pair) {
                if l.port_of(e) as u32 == service {
                    l.offered = offered;
                    any = true;
                }
            }
        }
        any
    }

    fn listener(&mut self, service: u32) -> Option<&mut Listener> {
        self.listeners
            .iter_mut()
            .flatten()
            .find(|l| l.service == service)
    }

    /// Link `h`, just made by a CONNECT for a listener (a peer's Hello, or a CONNECT of
    /// this node's): offered to the listen on its open end's port, if there is one,
    /// which is nudged unless it already was. Whether it was offered.
    pub(super) fn offer(&mut self, h: u32) -> bool {
        let Some(port) = self
            .links
            .get(h)
            .and_then(|l| l.open_end().map(|e| l.port_of(e)))
        else {
            return false;
        };
        let Some(l) = self.listener(port as u32) else {
            return false;
        };
        if !l.nudged {
            (l.nudged, l.owed) = (true, true);
        }
        if let Some(l) = self.links.get_mut(h) {
            l.offered = true;
        }
        true
    }

    /// Whether a listener's nudge is owed.
    pub(super) fn nudges_owed(&self) -> bool {
        self.listeners.iter().flatten().any(|l| l.owed)
    }

    /// Routes the nudges owed ([`Completion::Offered`], to each listen's routing id);
    /// returns how many.
    pub(super) fn route_nudges(&mut self, mut route: impl FnMut(WrId, Completion)) -> usize {
        let k = self.index;
        let mut n = 0;
        for l in self.listeners.iter_mut().flatten().filter(|l| l.owed) {
            l.owed = false;
            route(l.listen, Completion::Offered { shard: k });
            n += 1;
        }
        n
    }

    /// The services listened on here, each with the ring that listens (its id).
    pub fn listeners(&self) -> impl Iterator<Item = (u32, u16)> + '_ {
        self.listeners
            .iter()
            .flatten()
            .map(|l| (l.service, l.listen.ring))
    }

    /// Offers here for `service` not taken yet.
    pub fn offers(&self, service: u32) -> usize {
        self.links
            .iter()
            .filter_map(|(h, _)| self.offer_of(h, service))
            .count()
    }

    /// Link `h` as an offer to the listen on `service`, if it is one.
    fn offer_of(&self, h: u32, service: u32) -> Option<Offer> {
        let l = self.links.get(h)?;
        let e = l.open_end()?;
        let live = l.offered && !l.far.is_some_and(|f| f.broken());
        (live && l.port_of(e) as u32 == service).then_some(Offer {
            link: h,
            gid: l.gid,
            // The QP a virtual QP taking it binds to: the peer's Hello's, or (here) the
            // one the CONNECT's end must reach.
            qp: l.ends[0].qp,
            end: e,
            peer_port: l.ports[(1 - e) as usize & 1],
            far: l.far.is_some(),
            maker: l.maker,
        })
    }

    /// The listener of `service` looks at its offers here now: an offer made after
    /// this (the caller holds the shard) nudges it again.
    pub fn looked(&mut self, service: u32) {
        if let Some(l) = self.listener(service) {
            l.nudged = false;
        }
    }

    /// The oldest link offered to the listener of `service`, not taken yet.
    pub fn next_offer(&self, service: u32) -> Option<Offer> {
        self.links
            .iter()
            .find_map(|(h, _)| self.offer_of(h, service))
    }

    /// Answers offer `link`: taken by a virtual QP bound to physical QP `qp` (`Some`:
    /// its end is bound; across nodes, paired with the peer's, which our Hello
    /// answers), or refused (`None`: a peer's end is told to leave, this node's
    /// CONNECT fails its sends `Refused`).
    pub fn answer_offer(&mut self, link: u32, taken: Option<u32>, qps: &(impl Qps<S> + ?Sized)) {
        let Some(qp) = taken else {
            return self.refuse(link, qps);
        };
        self.answered(link);
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        l.offered = false;
        match &mut l.far {
            Some(f) => {
                l.ends[0].holder = Holder::Bound;
                l.ends[0].qp = qp;
                l.ends[1].holder = Holder::Bound;
                f.hello = true;
                self.enqueue(link);
                self.flush_due(qps);
            }
            None => {
                l.ends[1].holder = Holder::Bound;
                l.ends[1].qp = qp;
                self.answer_connect(link, Completion::Done);
            }
        }
    }
}

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// Listens held now.
    pub(crate) fn listening(&self) -> usize {
        self.listens.iter().flatten().count()
    }

    /// LISTEN for `service` (entry `ud`): the ring's listener entry in every shard.
    pub(super) fn listen<'f, F: Fabric<S>>(
        &mut self,
        ud: u64,
        service: u32,
        f: &'f F,
        held: &mut Held<'f, S, F>,
    ) -> Step {
        // Its first CQE now, and the last one it owes from now on.
        if !self.has_room_for(2) {
            return Step::Wait(Stall::CqFull);
        }
        if self.listens.iter().flatten().any(|l| l.service == service) {
            self.emit(Cqe::err(ud, Reason::ServiceTaken));
            return Step::Taken;
        }
        let Some(i) = self.listens.iter().position(Option::is_none) else {
            self.emit(Cqe::err(ud, Reason::TableFull));
            return Step::Taken;
        };
        let listen = WrId {
            ring: self.id,
            ring_gen: self.gen,
            slot: i as u32,
        };
        // The port is its user's while it listens (see `ports`), and the listen one of
        // its user's share (see `shares`).
        let creds = self.creds;
        if let Err(why) = f.take_share(creds.user, Share::Listens) {
            self.emit(Cqe::err(ud, why));
            return Step::Taken;
        }
        if let Err(why) = f.ports(|p| p.bind(service as u16, Hold::Listen, creds)) {
            f.give_share(creds.user, Share::Listens, 1);
            self.emit(Cqe::err(ud, why));
            return Step::Taken;
        }
        self.hold_members(f, held);
        let mut due = 0u64;
        for k in 0..f.shards().min(64) {
            self.hold_shard(f, held, k);
            match held.shard(k).add_listener(service, listen) {
                Ok(offers) => due |= (offers as u64) << k,
                Err(why) => {
                    for j in 0..k {
                        self.hold_shard(f, held, j);
                        held.shard(j).remove_listener(service, listen);
                    }
                    f.ports(|p| p.release(service as u16));
                    f.give_share(creds.user, Share::Listens, 1);
                    self.emit(Cqe::err(ud, why));
                    return Step::Taken;
                }
            }
        }
        self.listens[i] = Some(Listening {
            service,
            user_data: ud,
            due,
        });
        self.emit(Cqe {
            flags: CqeFlags::MORE.bits(),
            ..Cqe::ok(ud, 0, 0)
        });
        Step::Taken
    }

    /// UNLISTEN of `service` (entry `ud`): the listen's last CQE (`Cancelled`), then
    /// the entry's.
    pub(super) fn unlisten<'f, F: Fabric<S>>(
        &mut self,
        ud: u64,
        service: u32,
        f: &'f F,
        held: &mut Held<'f, S, F>,
    ) -> Cqe {
        let i = self
            .listens
            .iter()
            .position(|l| l.is_some_and(|l| l.service == service));
        let Some(i) = i else {
            return Cqe::err(ud, Reason::NotListening);
        };
        let l = self.end_listen(i, f, held);
        // The listen's last CQE is the ring's own (its LISTEN came through the SQ),
        // whoever carries the UNLISTEN.
        self.emit_to(0, Cqe::err(l.user_data, Reason::Cancelled));
        Cqe::ok(ud, 0, 0)
    }

    /// Takes listen `i` out of every shard and of the ring; returns it.
    fn end_listen<'f, F: Fabric<S>>(
        &mut self,
        i: usize,
        f: &'f F,
        held: &mut Held<'f, S, F>,
    ) -> Listening {
        let l = self.listens[i].take().expect("a listen");
        let listen = WrId {
            ring: self.id,
            ring_gen: self.gen,
            slot: i as u32,
        };
        self.hold_members(f, held);
        for k in 0..f.shards().min(64) {
            self.hold_shard(f, held, k);
            held.shard(k).remove_listener(l.service, listen);
        }
        f.ports(|p| p.release(l.service as u16));
        f.give_share(self.creds.user, Share::Listens, 1);
        l
    }

    /// Ends every listen without a CQE (the ring is closing).
    pub(super) fn drop_listens<F: Fabric<S>>(&mut self, f: &F) {
        let mut held = Held::NONE;
        for i in 0..RING_LISTENS {
            if self.listens[i].is_some() {
                self.end_listen(i, f, &mut held);
            }
        }
    }

    /// Nudges for listen `slot` (`Completion::Offered`, routed here or gathered by an
    /// inbox): the shards in `shards`, a bit each, have offers for it.
    pub fn nudged(&mut self, slot: u32, shards: u64) {
        if let Some(Some(l)) = self.listens.get_mut(slot as usize) {
            l.due |= shards;
        }
    }

    /// Whether a listen was nudged and has not looked yet.
    pub fn offers_due(&self) -> bool {
        self.listens.iter().flatten().any(|l| l.due != 0)
    }

    /// Takes the offers of every shard that nudged a listen of this ring: a virtual QP
    /// and a CQE each (or a refusal, by name). The caller holds the ring's lock and no
    /// other; the router calls it for rings it routed nudges to, and every submission
    /// does. Returns how many offers it took. Offers left for want of CQ room wait for
    /// the next call.
    pub fn accept_offers<F: Fabric<S>>(&mut self, f: &F) -> usize {
        if self.closed || !self.offers_due() {
            return 0;
        }
        let mut held = Held::NONE;
        self.take_offers(f, &mut held)
    }

    fn take_offers<'f, F: Fabric<S>>(&mut self, f: &'f F, held: &mut Held<'f, S, F>) -> usize {
        let mut n = 0;
        for i in 0..RING_LISTENS {
            while let Some(l) = self.listens[i].filter(|l| l.due != 0) {
                let k = l.due.trailing_zeros();
                self.hold_members(f, held);
                self.hold_shard(f, held, k);
                held.shard(k).looked(l.service);
                loop {
                    if !self.has_room_for(1) {
                        // The rest waits for CQ room; its bit stays.
                        return n;
                    }
                    let Some(o) = held.shard(k).next_offer(l.service) else {
                        break;
                    };
                    n += 1;
                    let cqe = self.take_offer(l.user_data, k, o, f, held);
                    self.emit(cqe);
                }
                if let Some(l) = &mut self.listens[i] {
                    l.due &= !(1 << k);
                }
            }
        }
        n
    }

    /// Offer `o` of shard `k` (held, with the membership) for the listen `user_data`:
    /// its CQE.
    fn take_offer<'f, F: Fabric<S>>(
        &mut self,
        user_data: u64,
        k: u32,
        o: Offer,
        f: &'f F,
        held: &mut Held<'f, S, F>,
    ) -> Cqe {
        let flags = (CqeFlags::MORE | CqeFlags::ACCEPT).bits();
        let peer = accept_aux(&o.gid, 0);
        let refuse = |held: &mut Held<'f, S, F>, why: Reason| {
            held.shard(k).answer_offer(o.link, None, f);
            Cqe {
                flags,
                aux: peer,
                port: o.peer_port,
                ..Cqe::err(user_data, why)
            }
        };
        if self.tables.vqps.len() == self.tables.vqps.capacity() {
            return refuse(held, Reason::TableFull);
        }
        // The accepted virtual QP holds the connecting end's link, counted against that
        // end's maker (see `message`; across nodes, the peer's): it is no share of the
        // listening user's, whose own CONNECTs stay its own. One client may hold only
        // its part of the ring's table.
        let client = o.client();
        let held_by = self
            .tables
            .vqps
            .iter()
            .filter(|(_, v)| v.accepted == Some(client))
            .count();
        if held_by >= (self.tables.vqps.capacity() / CLIENT_SHARE).max(1) {
            return refuse(held, Reason::Quota);
        }
        // Across nodes, the set QP the peer's Hello came on; here, a loopback QP
        // connected to the connecting end's.
        let conn = match o.far {
            true => held.members().accept(o.gid, o.qp),
            false => held
                .members()
                .connect(o.gid, o.peer_port as u32, Some(o.qp), NO_USER),
        };
        let conn = match conn {
            Ok(c) if (c.qp as usize) < f.count() && (!o.far || c.qp == o.qp) => c,
            Ok(c) => {
                held.members().disconnect(c.qp, NO_USER);
                return refuse(held, Reason::Verbs);
            }
            Err(_) => return refuse(held, Reason::Unreachable),
        };
        held.shard(k).answer_offer(o.link, Some(conn.qp), f);
        let h = self.bind_vqp(conn, k, o.link, o.end, 0, Some(client), f);
        Cqe {
            flags,
            port: o.peer_port,
            ..Cqe::ok(user_data, h as i32, accept_aux(&o.gid, conn.qpn))
        }
    }
}

/// A LISTEN's `aux` for a peer at `gid` (IPv4-mapped, as every node krcore reaches):
/// the physical QP number in the low 32 bits, as CONNECT's, and the peer's IPv4
/// address in the high 32 (GID bytes 12..16, most significant first).
pub const fn accept_aux(gid: &[u8; 16], qpn: u32) -> u64 {
    let ip = u32::from_be_bytes([gid[12], gid[13], gid[14], gid[15]]);
    (ip as u64) << 32 | qpn as u64
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::far::tests::{carry, node, node_with, owed, recv, send};
    use super::super::message::Tuple;
    use super::*;
    use crate::cluster::notice::Notice;
    use crate::engine::{RecvStep, SendStep};
    use std::vec;

    const SERVICE: u32 = 70;

    /// A client's CONNECT for the listen on [`SERVICE`], from an ephemeral port.
    fn client() -> Tuple {
        Tuple {
            local: 40000,
            peer: SERVICE as u16,
            pair: false,
        }
    }

    /// Server S's listen (ring 3, generation 1, listen 0), as its routing id.
    fn listen() -> WrId {
        WrId {
            ring: 3,
            ring_gen: 1,
            slot: 0,
        }
    }

    #[test]
    fn a_listener_pairs_with_a_peer_it_never_connected_to() {
        let ((nc, mut c), (ns, mut s)) = (node(11), node(12));
        assert_eq!(s.add_listener(SERVICE, listen()), Ok(false));
        assert_eq!(
            s.add_listener(SERVICE, listen()),
            Err(Reason::ServiceTaken),
            "one listener per service"
        );
        // The client CONNECTs; its Hello reaches the server: offered, the listen nudged.
        let (cl, _) = c.join_far(ns.gid, client(), 1, &nc).unwrap();
        carry(&nc, &ns, &mut s);
        assert_eq!(
            owed(&mut s, &ns),
            vec![(listen().encode(), Completion::Offered { shard: 0 })]
        );
        s.looked(SERVICE);
        let o = s.next_offer(SERVICE).expect("offered");
        assert_eq!((o.gid, o.qp), (nc.gid, 1));
        // A pairing CONNECT of the server's node on the same four-tuple cannot take it:
        // the listen holds it.
        let same = Tuple {
            local: SERVICE as u16,
            peer: 40000,
            pair: true,
        };
        assert_eq!(s.join_far(nc.gid, same, 1, &ns), Err(Reason::ServiceTaken));
        // Taken: our Hello answers, the client pairs, and messages flow both ways.
        s.answer_offer(o.link, Some(o.qp), &ns);
        assert_eq!(s.next_offer(SERVICE), None);
        carry(&ns, &nc, &mut c);
        assert_eq!(s.recv(o.link, 0, recv(90, 0x9000), &ns), RecvStep::Queued);
        carry(&ns, &nc, &mut c);
        match c.send(cl, 0, send(1, 8, Some(5))) {
            SendStep::DeliverFar { r, .. } => assert_eq!(r.addr, 0x9000),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.recv(cl, 0, recv(10, 0x1000), &nc), RecvStep::Queued);
        carry(&nc, &ns, &mut s);
        assert!(matches!(
            s.send(o.link, 0, send(2, 8, None)),
            SendStep::DeliverFar { r, .. } if r.addr == 0x1000
        ));
    }

    /// A CONNECT a listen took is answered: its link lives past the deadline a CONNECT
    /// waits for an answer (it was refused then, telling the server its end left, so a
    /// client slower than the deadline lost its echo).
    #[test]
    fn a_taken_connect_outlives_the_answer_deadline() {
        let ((nc, mut c), (ns, mut s)) = (node(11), node(12));
        s.add_listener(SERVICE, listen()).unwrap();
        let (cl, _) = c.join_far(ns.gid, client(), 1, &nc).unwrap();
        c.settle(0, 100, &nc, |_, _| {});
        carry(&nc, &ns, &mut s);
        s.settle(0, 100, &ns, |_, _| {});
        let o = s.next_offer(SERVICE).expect("offered");
        s.answer_offer(o.link, Some(o.qp), &ns);
        carry(&ns, &nc, &mut c);
        assert_eq!(s.recv(o.link, 0, recv(90, 0x9000), &ns), RecvStep::Queued);
        carry(&ns, &nc, &mut c);
        // Long past both deadlines: nothing is refused, nothing leaves.
        let mut failed = vec![];
        c.settle(10_000, 100, &nc, |w, x| failed.push((w.encode(), x)));
        s.settle(10_000, 100, &ns, |w, x| failed.push((w.encode(), x)));
        assert_eq!(failed, vec![]);
        assert_eq!(
            carry(&nc, &ns, &mut s),
            0,
            "no notice: the client did not leave"
        );
        assert!(matches!(
            c.send(cl, 0, send(1, 8, None)),
            SendStep::DeliverFar { r, .. } if r.addr == 0x9000
        ));
    }

    #[test]
    fn one_nudge_until_the_ring_looks() {
        let ((na, mut a), (ns, mut s)) = (node(11), node(12));
        let (nb, mut b) = node(13);
        s.add_listener(SERVICE, listen()).unwrap();
        a.join_far(ns.gid, client(), 1, &na).unwrap();
        b.join_far(ns.gid, client(), 1, &nb).unwrap();
        carry(&na, &ns, &mut s);
        carry(&nb, &ns, &mut s);
        assert_eq!(owed(&mut s, &ns).len(), 1, "two offers, one nudge");
        s.looked(SERVICE);
        // Both still offered; a third peer after the look nudges again.
        let (nd, mut d) = node(14);
        d.join_far(ns.gid, client(), 1, &nd).unwrap();
        carry(&nd, &ns, &mut s);
        assert_eq!(owed(&mut s, &ns).len(), 1);
        let mut n = 0;
        while let Some(o) = s.next_offer(SERVICE) {
            s.answer_offer(o.link, Some(o.qp), &ns);
            n += 1;
        }
        assert_eq!(n, 3);
    }

    /// However a listen comes and goes while peers' Hellos arrive, a shard owes each
    /// listener one nudge at most, beside (never in) the completions it owes.
    #[test]
    fn listens_coming_and_going_owe_one_nudge_at_most() {
        let (ns, mut s) = node(12);
        for i in 0..100u64 {
            let (nc, mut c) = node(20 + (i % 200) as u8);
            s.add_listener(SERVICE, listen()).unwrap();
            c.join_far(ns.gid, client(), 1, &nc).unwrap();
            carry(&nc, &ns, &mut s);
            s.remove_listener(SERVICE, listen());
        }
        s.add_listener(SERVICE, listen()).unwrap();
        assert!(s.owed.is_empty(), "nudges take no room from completions");
        let mut line = std::string::String::new();
        let (service, ring) = s.listeners().next().expect("listening");
        write_listen_line(service, 1000, ring, s.offers(SERVICE), &mut line).unwrap();
        let want = std::format!("listen service 70 uid 1000 ring 3 offers {}\n", s.links());
        assert!(
            s.links() > 0 && line == want,
            "every peer's end offered: {line:?}"
        );
        let got = owed(&mut s, &ns);
        assert!(got.len() <= 1, "{got:?}");
    }

    #[test]
    fn announcements_before_a_listen_are_offered_and_given_back_after() {
        let ((nc, mut c), (ns, mut s)) = (node(11), node(12));
        c.join_far(ns.gid, client(), 1, &nc).unwrap();
        carry(&nc, &ns, &mut s);
        assert!(
            owed(&mut s, &ns).is_empty(),
            "nobody listens: kept for a CONNECT"
        );
        assert_eq!(s.add_listener(SERVICE, listen()), Ok(true));
        assert!(s.next_offer(SERVICE).is_some());
        // The listen ends before it took the offer: the next listen gets it, within
        // the deadline; no CONNECT of this node's takes it.
        s.remove_listener(SERVICE, listen());
        assert_eq!(s.next_offer(SERVICE), None);
        let same = Tuple {
            local: SERVICE as u16,
            peer: 40000,
            pair: true,
        };
        assert_eq!(s.join_far(nc.gid, same, 1, &ns), Err(Reason::ServiceTaken));
        assert_eq!(s.add_listener(SERVICE, listen()), Ok(true));
    }

    #[test]
    fn a_refused_offer_tells_the_peer_to_leave() {
        let ((nc, mut c), (ns, mut s)) = (node(11), node(12));
        s.add_listener(SERVICE, listen()).unwrap();
        let (cl, _) = c.join_far(ns.gid, client(), 1, &nc).unwrap();
        carry(&nc, &ns, &mut s);
        let o = s.next_offer(SERVICE).unwrap();
        s.answer_offer(o.link, None, &ns);
        let back: std::vec::Vec<_> = ns.wire.borrow().iter().map(|&(_, n)| n).collect();
        assert!(matches!(back[..], [Notice::Leave { .. }]), "{back:?}");
        assert_eq!(s.links(), 0, "nothing kept of it here");
        carry(&ns, &nc, &mut c);
        // The client's sends fail by name instead of waiting for a receive.
        assert_eq!(
            c.send(cl, 0, send(1, 8, None)),
            SendStep::Fail(Reason::Refused)
        );
    }

    /// Every connecting virtual QP is its own offer, however many share a node and a
    /// service: a listen serves many client processes per node.
    #[test]
    fn each_connecting_end_is_its_own_offer() {
        let ((nc, mut c), (ns, mut s)) = (node_with(11, 64), node_with(12, 64));
        s.add_listener(SERVICE, listen()).unwrap();
        let mut clients = vec![];
        for port in 40000..40008u16 {
            let t = Tuple {
                local: port,
                ..client()
            };
            clients.push((port, c.join_far(ns.gid, t, 1, &nc).unwrap().0));
        }
        carry(&nc, &ns, &mut s);
        let mut taken = vec![];
        while let Some(o) = s.next_offer(SERVICE) {
            s.answer_offer(o.link, Some(o.qp), &ns);
            taken.push((o.peer_port, o.link));
        }
        assert_eq!(taken.len(), 8, "one offer per client");
        carry(&ns, &nc, &mut c);
        // Each server end receives only its own client's message.
        for (i, &(port, link)) in taken.iter().enumerate() {
            assert_eq!(
                s.recv(link, 0, recv(90 + i as u64, 0x9000 + i as u64 * 0x100), &ns),
                RecvStep::Queued
            );
            let _ = port;
        }
        carry(&ns, &nc, &mut c);
        for (i, &(port, cl)) in clients.iter().enumerate() {
            let (_, link) = taken.iter().find(|t| t.0 == port).copied().unwrap();
            let j = taken.iter().position(|t| t.1 == link).unwrap() as u64;
            match c.send(cl, 0, send(i as u64, 8, None)) {
                SendStep::DeliverFar { r, .. } => assert_eq!(r.addr, 0x9000 + j * 0x100),
                other => panic!("{other:?}"),
            }
        }
    }

    /// A peer's CONNECTs waiting for a listen are its share of the shard (one in
    /// [`PEER_SHARE`]): past it they are refused at once, and another node's CONNECT
    /// still gets a link.
    #[test]
    fn a_peer_cannot_fill_the_links() {
        let ((np, mut p), (ns, mut s)) = (node_with(11, 64), node_with(12, 64));
        let (nq, mut q) = node_with(13, 64);
        let mut ends = vec![];
        for port in 40000..40064u16 {
            let t = Tuple {
                local: port,
                ..client()
            };
            ends.push(p.join_far(ns.gid, t, 1, &np).unwrap().0);
        }
        // The Hellos go as the QP has room for notices (each carried frees some).
        while carry(&np, &ns, &mut s) > 0 {
            p.settle(0, 10_000, &np, |_, _| {});
        }
        let share = 64 / crate::engine::far::PEER_SHARE;
        assert!(s.links() >= share, "its share kept");
        while carry(&ns, &np, &mut p) > 0 {
            s.settle(0, 10_000, &ns, |_, _| {});
        }
        let refused = ends
            .iter()
            .filter(|&&l| p.send(l, 0, send(1, 8, None)) == SendStep::Fail(Reason::Refused))
            .count();
        assert_eq!(
            refused,
            64 - share,
            "each refused by name, none left waiting"
        );
        q.join_far(ns.gid, client(), 1, &nq).unwrap();
        carry(&nq, &ns, &mut s);
        assert_eq!(s.links(), share + 1, "another node's CONNECT still lands");
    }

    /// A CONNECT for a listener never pairs with another CONNECT: a user that connects
    /// to a peer's service gets nothing the peer's clients send to this node's listen.
    #[test]
    fn a_connect_for_a_listener_never_takes_a_listens_peer() {
        let ((nb, mut b), (na, mut a)) = (node(11), node(12));
        a.add_listener(SERVICE, listen()).unwrap();
        // Another user on A connects to B for the same service number.
        let thief = Tuple {
            local: 41000,
            ..client()
        };
        let (_, _) = a.join_far(nb.gid, thief, 1, &na).unwrap();
        // B's client connects to A's service: offered to A's listen, not the thief.
        b.join_far(na.gid, client(), 1, &nb).unwrap();
        carry(&nb, &na, &mut a);
        let o = a.next_offer(SERVICE).expect("offered to the listen");
        assert_eq!(o.peer_port, 40000);
        // B had nobody listening on the service: the thief's Hello waits there, unanswered.
        carry(&na, &nb, &mut b);
        assert_eq!(b.next_offer(SERVICE), None);
    }

    /// A CONNECT nobody listens for is refused after the deadline: its sends fail
    /// `Refused`, and nothing of it stays with the peer.
    #[test]
    fn an_unanswered_connect_is_refused_after_the_deadline() {
        let ((nc, mut c), (ns, mut s)) = (node(11), node(12));
        let (cl, _) = c.join_far(ns.gid, client(), 1, &nc).unwrap();
        carry(&nc, &ns, &mut s);
        assert_eq!(s.links(), 1, "kept for a listen to come");
        assert!(!s.quiet(), "the sweep must come back for it");
        nc.qps[1].borrow_mut().hold();
        assert_eq!(c.send(cl, 0, send(1, 8, None)), SendStep::Waits);
        let route = |_: WrId, _: Completion| {};
        s.settle(1_000, 10_000, &ns, route);
        s.settle(10_999, 10_000, &ns, route);
        assert_eq!(s.links(), 1, "within the deadline");
        s.settle(11_001, 10_000, &ns, route);
        assert_eq!(s.links(), 0, "refused, and told");
        carry(&ns, &nc, &mut c);
        assert_eq!(
            owed(&mut c, &nc),
            vec![(1, Completion::Failed(Reason::Refused))]
        );
        assert_eq!(
            c.send(cl, 0, send(2, 8, None)),
            SendStep::Fail(Reason::Refused)
        );
    }

    /// On one node: a CONNECT for the listen on this node is offered to it, and the
    /// two ends exchange messages; a CONNECT with nobody listening is refused after
    /// the deadline.
    #[test]
    fn a_listen_takes_a_connect_of_its_own_node() {
        let (ns, mut s) = node(12);
        s.add_listener(SERVICE, listen()).unwrap();
        let (cl, ce) = s.join(ns.gid, client(), 0, None).unwrap();
        assert_eq!(owed(&mut s, &ns).len(), 1, "the listen is nudged");
        let o = s.next_offer(SERVICE).expect("offered");
        assert_eq!((o.link, o.end, o.peer_port, o.far), (cl, 1, 40000, false));
        s.answer_offer(o.link, Some(1), &ns);
        assert_eq!(s.next_offer(SERVICE), None);
        assert_eq!(s.recv(cl, 1, recv(9, 0x9000), &ns), RecvStep::Queued);
        assert!(
            matches!(s.send(cl, ce, send(1, 8, None)), SendStep::Deliver(r) if r.addr == 0x9000)
        );
        // With nobody listening on 71: refused after the deadline.
        let lonely = Tuple {
            peer: 71,
            ..client()
        };
        let (l2, e2) = s.join(ns.gid, lonely, 0, None).unwrap();
        ns.qps[0].borrow_mut().hold();
        assert_eq!(s.send(l2, e2, send(5, 8, None)), SendStep::Waits);
        let mut got = vec![];
        s.settle(0, 100, &ns, |w, c| got.push((w.encode(), c)));
        s.settle(101, 100, &ns, |w, c| got.push((w.encode(), c)));
        assert_eq!(got, vec![(5, Completion::Failed(Reason::Refused))]);
        assert_eq!(
            s.send(l2, e2, send(6, 8, None)),
            SendStep::Fail(Reason::Refused)
        );
        s.leave(l2, e2, &ns);
        assert_eq!(s.links(), 1, "the refused link goes with its end");
    }

    /// A set that fails forgets the peer's CONNECTs waiting for a listen here: nothing
    /// keeps the shard busy after (it kept counting one).
    #[test]
    fn a_failed_set_forgets_waiting_connects() {
        let ((nc, mut c), (ns, mut s)) = (node(11), node(12));
        c.join_far(ns.gid, client(), 1, &nc).unwrap();
        carry(&nc, &ns, &mut s);
        assert!(!s.quiet());
        s.fail_far(crate::engine::QpBits::one(1), &ns);
        let _ = owed(&mut s, &ns);
        assert!(
            s.links() == 0 && s.quiet(),
            "nothing left, nothing to sweep"
        );
    }

    /// On one node, one user's pairing CONNECTs on one four-tuple pair in order: the
    /// reverse one takes the oldest half-open link, equal ports pair first with
    /// second and third with fourth, so each end has exactly one other.
    #[test]
    fn pairs_on_one_four_tuple_of_one_node_pair_in_order() {
        let (n, mut m) = node(11);
        let ab = Tuple {
            local: 5000,
            peer: 6000,
            pair: true,
        };
        let ba = Tuple {
            local: 6000,
            peer: 5000,
            pair: true,
        };
        let (h1, _) = m.join(n.gid, ab, 0, None).unwrap();
        let (h2, _) = m.join(n.gid, ab, 0, None).unwrap();
        assert_ne!(h1, h2, "a second half-open link");
        let open = m.half_open(&n.gid, ba);
        assert_eq!(
            m.join(n.gid, ba, 0, open),
            Some((h1, 1)),
            "the oldest first"
        );
        let open = m.half_open(&n.gid, ba);
        assert_eq!(m.join(n.gid, ba, 0, open), Some((h2, 1)));
        let same = Tuple {
            local: 7000,
            peer: 7000,
            pair: true,
        };
        let mut ends = std::vec::Vec::new();
        for _ in 0..4 {
            let open = m.half_open(&n.gid, same);
            ends.push(m.join(n.gid, same, 0, open).unwrap());
        }
        assert_eq!(ends[1], (ends[0].0, 1));
        assert_eq!(ends[3], (ends[2].0, 1));
        assert_ne!(ends[0].0, ends[2].0, "two links, each of two ends");
    }

    /// A CONNECT of this node's that departed before any listen took it is offered to no
    /// listen that comes after.
    #[test]
    fn a_departed_connect_is_offered_to_no_listen() {
        let (n, mut m) = node(11);
        let (h, e) = m.join(n.gid, client(), 0, None).unwrap();
        m.await_listen(h, 99);
        m.depart(h, e, &n);
        assert_eq!(
            owed(&mut m, &n),
            vec![(99, Completion::Failed(Reason::Cancelled))]
        );
        assert_eq!(m.add_listener(SERVICE, listen()), Ok(false), "not offered");
        m.leave(h, e, &n);
        assert_eq!(m.links(), 0);
    }

    /// A pairing Hello that finds no end here holds nothing; the end that comes later
    /// pairs with the peer's all the same, and messages flow.
    #[test]
    fn pairing_holds_nothing_until_both_ends_come() {
        let ((na, mut a), (nb, mut b)) = (node(11), node(12));
        let t = Tuple {
            local: 5000,
            peer: 6000,
            pair: true,
        };
        let (al, _) = a.join_far(nb.gid, t, 1, &na).unwrap();
        carry(&na, &nb, &mut b);
        assert_eq!(
            b.links(),
            0,
            "nothing kept for a peer that pairs with nobody"
        );
        let back = Tuple {
            local: 6000,
            peer: 5000,
            pair: true,
        };
        let (bl, _) = b.join_far(na.gid, back, 1, &nb).unwrap();
        carry(&nb, &na, &mut a);
        carry(&na, &nb, &mut b);
        carry(&nb, &na, &mut a);
        assert_eq!(b.recv(bl, 0, recv(9, 0x9000), &nb), RecvStep::Queued);
        carry(&nb, &na, &mut a);
        assert!(matches!(
            a.send(al, 0, send(1, 8, None)),
            SendStep::DeliverFar { r, .. } if r.addr == 0x9000
        ));
    }

    /// A CONNECT whose peer never answers (its shard had no room even to refuse) is
    /// refused here after twice the deadline, and the peer is told (it waited forever).
    #[test]
    fn a_connect_the_peer_never_answers_is_refused_here() {
        let (nc, mut c) = node(11);
        let (h, _) = c.join_far([9; 16], client(), 1, &nc).unwrap();
        c.await_listen(h, 99);
        nc.wire.borrow_mut().clear();
        let mut got = vec![];
        for now in [0, 10_000, 10_001, 20_001] {
            c.settle(now, 10_000, &nc, |w, x| got.push((w.encode(), x)));
        }
        assert_eq!(got, vec![(99, Completion::Failed(Reason::Refused))]);
        let told: std::vec::Vec<_> = nc.wire.borrow().iter().map(|&(_, n)| n).collect();
        assert!(matches!(told[..], [Notice::Leave { .. }]), "{told:?}");
    }

    /// A shard full of links that only wait to send their last notices says so: a
    /// CONNECT then waits for them instead of failing `TableFull` (8 processes cycling
    /// CONNECT/DISCONNECT across nodes got `TableFull` before).
    #[test]
    fn links_that_only_owe_notices_are_draining() {
        let (nc, mut c) = node(11);
        let ns = node(12).0;
        let t = |p: u16| Tuple {
            local: p,
            peer: p,
            pair: true,
        };
        // Pairing CONNECTs whose Hellos went; then the QP has no room left for
        // notices (none completed), and they all depart: their Leaves wait.
        let mut ends = vec![];
        while let Ok(e) = c.join_far(ns.gid, t(5000 + ends.len() as u16), 1, &nc) {
            ends.push(e);
        }
        while nc.qps[1].borrow().notice_room() {
            nc.qps[1].borrow_mut().notice_posted();
        }
        assert!(!c.draining());
        for (h, e) in ends {
            c.leave(h, e, &nc);
        }
        assert!(c.draining(), "full of departed links owing a Leave");
        assert_eq!(c.join_far(ns.gid, t(9000), 1, &nc), Err(Reason::TableFull));
        // Their notices complete: they go, and a CONNECT finds room.
        while !nc.qps[1].borrow().notice_room() || nc.wire.borrow().len() < 100 {
            nc.qps[1].borrow_mut().notice_done();
            c.settle(0, 10_000, &nc, |_, _| {});
            if !c.draining() {
                break;
            }
        }
        assert!(!c.draining() && c.join_far(ns.gid, t(9000), 1, &nc).is_ok());
    }
}
