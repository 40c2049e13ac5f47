//! Two-sided messages, demultiplexed per virtual QP.
//!
//! Many virtual QPs share a physical QP, and with it one receive queue: a receive posted
//! there would take whichever message arrived first, whoever sent it. So the engine never
//! posts a user's RECV to the hardware. Virtual QPs that CONNECT to the same peer and
//! service pair up, in the order they connect, into a *link* with two ends. A RECV waits
//! in its end; a SEND from the other end takes the oldest one and goes out as a
//! kernel-built write into that buffer ([`SendKind::Deliver`]), whose completion
//! completes both the SEND and the RECV. No MR is remotely writable for this: the
//! backend makes a key for exactly the bytes written, for that write alone (a fast
//! registration before it, an invalidation after it, on the same QP), from the
//! receiving MR named in the receiver's table. Nothing of it comes from user space.
//!
//! WRITE_IMM consumes a receive too, as in RC: its bytes go to the remote range it
//! names, and the receive it takes completes with its length and immediate.
//!
//! A SEND that finds no receive waits in its end, holding its credit on its physical QP,
//! until the peer posts one (whose RECV then posts it), until the request deadline passes,
//! or until the peer disconnects; then it fails with `NoReceiver`. Where RC would retry
//! (RNR) and then break the shared QP for everyone, here nothing breaks. A SEND longer
//! than the receive it meets fails both with `TooLong`, as RC fails both.
//!
//! Order, as an RC QP keeps it: an end's sends are matched in the order taken, receives
//! are consumed oldest first.
//!
//! A device's links are spread over shards, each a [`Messages`] behind its own lock
//! ([`Links`](super::fabric::Links)): the shard of a link is that of its peer and
//! service ([`shard_of`]), so both ends of a link, and every CONNECT that may join it,
//! meet in one shard, and messages on other services go on under other locks.
//!
//! Completions for requests of other rings (a waiting send failed when its peer left,
//! or by the deadline) cannot be written from inside one ring's submission: they are
//! *owed* here, and the caller routes them ([`Messages::settle`]) where it reaches
//! every ring, as it routes work completions.
//!
//! [`SendKind::Deliver`]: super::backend::SendKind::Deliver

use super::backend::{SendKind, Sge};
use super::cqe::Reason;
use super::fabric::Qps;
use super::ring_state::Completion;
use super::sqe::SqeFlags;
use super::table::{Fifo, Slot, Table};
use super::wrid::WrId;
use super::Store;

/// End of a list.
pub(super) const NIL: u32 = u32::MAX;

/// The longest RECV (bytes): the backend writes a message with a key made for its
/// receive alone, a fast registration of at most 257 pages (1 MiB, not page-aligned).
pub const MAX_RECV: u32 = 1 << 20;

/// The shard, of `shards` (a power of two), holding the links to `gid`/`service`: a
/// multiply-xorshift of the GID's two halves and the service, cheap on the CONNECT
/// path, spreading consecutive services. A user who picks services that all land in
/// one shard only queues behind itself and whoever shares that shard; no lock is held
/// long (every section is bounded).
pub fn shard_of(gid: &[u8; 16], service: u32, shards: u32) -> u32 {
    debug_assert!(shards.is_power_of_two());
    let half = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&gid[i..i + 8]);
        u64::from_le_bytes(w)
    };
    let mut h =
        (half(0) ^ half(8).rotate_left(29) ^ service as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // The top bits depend on every input bit; fold them down for the mask.
    h ^= h >> 32;
    h ^= h >> 16;
    (h as u32) & (shards - 1)
}

/// A RECV waiting for a message: where it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostedRecv {
    /// The receiving ring's `wr_id` for it.
    pub wr_id: u64,
    /// Buffer address.
    pub addr: u64,
    /// Buffer length.
    pub len: u32,
    /// The receiving MR's backend token ([`MrKeys::token`](super::backend::MrKeys)):
    /// what a key for this buffer alone is made from; 0 for a receive a peer kernel
    /// advertised.
    pub mr: u64,
    /// The key the bytes are written with: for a receive of this node's, 0 until it is
    /// advertised to a peer kernel, then the key made for it alone (see `far`); for a
    /// receive the peer kernel advertised, the key it sent.
    pub rkey: u32,
    /// A receive the peer kernel advertised: its advert's `seq` (see `far`), which the
    /// `Data` notice for it carries; 0 for a receive of this node's.
    pub seq: u32,
}

/// Where a message's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Into the receive it takes (SEND).
    Receive,
    /// Into an imported remote range, the receive only being told (WRITE_IMM).
    Remote {
        /// Remote address.
        remote_addr: u64,
        /// The export's rkey.
        rkey: u32,
    },
}

/// A SEND (or WRITE_IMM) waiting for a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitingSend {
    /// The sending ring's `wr_id` for it.
    pub wr_id: u64,
    /// The message.
    pub local: Sge,
    /// Where its bytes go.
    pub target: Target,
    /// Immediate data (SEND_IMM, WRITE_IMM).
    pub imm: Option<u32>,
    /// FENCE / SOLICITED.
    pub flags: SqeFlags,
    /// When it began to wait, ms.
    pub since_ms: i64,
}

impl WaitingSend {
    /// Whether it fits receive `r` (a WRITE_IMM writes elsewhere: always).
    pub fn fits(&self, r: &PostedRecv) -> bool {
        self.target != Target::Receive || self.local.len <= r.len
    }

    /// The request that carries it, matched with receive `r`.
    pub fn kind(&self, r: &PostedRecv) -> SendKind {
        match self.target {
            Target::Receive => SendKind::Deliver {
                remote_addr: r.addr,
                mr: r.mr,
            },
            Target::Remote { remote_addr, rkey } => SendKind::Write {
                remote_addr,
                rkey,
                imm: None,
            },
        }
    }
}

/// A node of a list threaded through a [`Table`].
#[derive(Clone, Copy, Debug)]
pub struct Node<T> {
    pub(super) val: T,
    pub(super) next: u32,
}

/// A FIFO threaded through a table: head and tail handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct List {
    pub(super) head: u32,
    pub(super) tail: u32,
}

impl List {
    pub(super) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };

    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    pub(super) fn push_back<T, S: Store>(
        &mut self,
        t: &mut Table<Node<T>, S>,
        val: T,
    ) -> Result<(), T> {
        let h = t.insert(Node { val, next: NIL }).map_err(|n| n.val)?;
        match t.get_mut(self.tail) {
            Some(last) => last.next = h,
            None => self.head = h,
        }
        self.tail = h;
        Ok(())
    }

    pub(super) fn push_front<T, S: Store>(
        &mut self,
        t: &mut Table<Node<T>, S>,
        val: T,
    ) -> Result<(), T> {
        let h = t
            .insert(Node {
                val,
                next: self.head,
            })
            .map_err(|n| n.val)?;
        if self.head == NIL {
            self.tail = h;
        }
        self.head = h;
        Ok(())
    }

    pub(super) fn front<'a, T, S: Store>(&self, t: &'a Table<Node<T>, S>) -> Option<&'a T> {
        t.get(self.head).map(|n| &n.val)
    }

    pub(super) fn pop<T, S: Store>(&mut self, t: &mut Table<Node<T>, S>) -> Option<T> {
        let n = t.remove(self.head)?;
        self.head = n.next;
        if self.head == NIL {
            self.tail = NIL;
        }
        Some(n.val)
    }
}

/// Who holds an end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Holder {
    /// Nobody yet: the link waits for a second CONNECT.
    Open,
    /// A virtual QP.
    Bound,
    /// Its virtual QP is going (disconnecting, or its ring closed): the end is never
    /// taken again, so a message for the one that left never reaches a newcomer; its
    /// receives are still to be cancelled by its ring.
    Gone,
    /// Its virtual QP was released: nothing of it is left here.
    Left,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct End {
    pub(super) holder: Holder,
    /// The physical QP its virtual QP is bound to.
    pub(super) qp: u32,
    /// Receives posted at this end, oldest first (for a far end: the receives its
    /// kernel advertised).
    pub(super) recvs: List,
    /// Sends from this end waiting for the other end's receives, oldest first.
    pub(super) waiting: List,
}

impl End {
    pub(super) const OPEN: End = End {
        holder: Holder::Open,
        qp: 0,
        recvs: List::EMPTY,
        waiting: List::EMPTY,
    };
}

/// Two virtual QPs joined for two-sided messages: on this node, or (with `far`) one
/// here and one on another node (see `far`). A four-tuple, as a TCP connection: the
/// peer node and each end's port.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub(super) gid: [u8; 16],
    /// End 0's port and end 1's.
    pub(super) ports: [u16; 2],
    pub(super) ends: [End; 2],
    /// Across nodes: end 0 is here, end 1 on the node at `gid`.
    pub(super) far: Option<super::far::Far>,
    /// Made by CONNECTs that pair (each named its port and the other's), not by a
    /// CONNECT that asks for a listener.
    pub(super) pair: bool,
    /// Its open end is offered to the listen on its port (see `listen`): only that
    /// listen takes it.
    pub(super) offered: bool,
    /// The peer end never came: nobody listened within the deadline, or the listener
    /// refused. Sends fail `Refused`.
    pub(super) refused: bool,
    /// A CONNECT for a listener that no listen took yet (ms; `i64::MIN` until the next
    /// sweep reads the clock): refused after the deadline.
    pub(super) unanswered_since: Option<i64>,
    /// The `wr_id` of end 0's CONNECT while it waits for its listen (0: none): its
    /// completion is owed when the listen takes it, or it is refused.
    pub(super) connect_wr: u64,
    /// The user (slot) whose CONNECT made it, counted against that user's half of the
    /// shard until it goes ([`NO_MAKER`]: a peer's, or uncounted).
    pub(super) maker: u32,
}

/// The [`Link::maker`] of a link no local user made.
pub const NO_MAKER: u32 = u32::MAX;

impl Link {
    pub(super) const fn new(
        gid: [u8; 16],
        ports: [u16; 2],
        ends: [End; 2],
        far: Option<super::far::Far>,
    ) -> Link {
        Link {
            gid,
            ports,
            ends,
            far,
            pair: false,
            offered: false,
            refused: false,
            unanswered_since: None,
            connect_wr: 0,
            maker: NO_MAKER,
        }
    }

    /// The end of it that no virtual QP holds yet, waiting for a listen or a pairing
    /// CONNECT: across nodes end 0 (the peer's came first), here end 1.
    pub(super) fn open_end(&self) -> Option<u8> {
        let e = if self.far.is_some() { 0 } else { 1 };
        (self.ends[e].holder == Holder::Open).then_some(e as u8)
    }

    /// This node's port of it: end 0's (the one a listen on a port would hold is the
    /// open end's).
    pub(super) fn port_of(&self, end: u8) -> u16 {
        self.ports[end as usize & 1]
    }
}

/// What a CONNECT names: its own port (the kernel picks an ephemeral one when the entry
/// names none) and the peer's, and whether it pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuple {
    /// This end's port.
    pub local: u16,
    /// The peer end's port (the service).
    pub peer: u16,
    /// It pairs with a CONNECT on the peer port that names `local` back, rather than
    /// asking for the listener on `peer`.
    pub pair: bool,
}

/// The key [`shard_of`] spreads a link by, and the pool picks a link's physical QP by,
/// from its two ports: symmetric (the same from either end, so both ends of a link on
/// one node, and a peer's notices naming it by ports, meet in one shard), and mixing
/// both (equal ports spread too).
pub const fn port_key(a: u16, b: u16) -> u32 {
    let (a, b) = (a as u32, b as u32);
    (a + b) ^ a.wrapping_mul(b)
}

/// The storage [`Messages`] is built from; its sizes are the device's limits.
pub struct MessageStorage<S: Store> {
    /// Links (at most one per virtual QP).
    pub links: S::Buf<Slot<Link>>,
    /// Links waiting for their second end; as many as `links`.
    pub half_open: S::Buf<u32>,
    /// Receives posted and not yet matched, device-wide.
    pub recvs: S::Buf<Slot<Node<PostedRecv>>>,
    /// Sends waiting for a receive, device-wide. Each holds a send credit, so the
    /// physical QPs' depths summed suffice.
    pub waiting: S::Buf<Slot<Node<WaitingSend>>>,
    /// Completions owed to rings; as many as `recvs`, `waiting` and `links` together
    /// (a CONNECT waiting for its listen is owed one).
    pub owed: S::Buf<(u64, Completion)>,
    /// Links across nodes with notices due to the peer kernel; as many as `links`.
    pub due: S::Buf<u32>,
    /// Links each user made here, by user slot (`Creds::user`): the kernel sizes it to
    /// its user table (a slot past it is not counted).
    pub made: S::Buf<u16>,
}

/// A link waiting for its second end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HalfOpen {
    /// The link.
    pub link: u32,
    /// Its first end's physical QP.
    pub qp: u32,
}

/// What a SEND met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendStep {
    /// The oldest receive at the peer: deliver into it.
    Deliver(PostedRecv),
    /// The oldest receive the peer node's kernel advertised for end `to` (its id):
    /// deliver into it and tell it ([`SendKind::DeliverFar`]).
    ///
    /// [`SendKind::DeliverFar`]: super::backend::SendKind::DeliverFar
    DeliverFar {
        /// The receive.
        r: PostedRecv,
        /// The peer's end.
        to: u64,
    },
    /// No receive yet: the send waits (the caller holds its credit).
    Waits,
    /// It can never be received (the peer left), or no room to wait.
    Fail(Reason),
}

/// What a RECV met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvStep {
    /// The oldest send waiting at the peer, from physical QP `qp`: post it (its credit
    /// is held there).
    Deliver {
        /// The send.
        send: WaitingSend,
        /// The sender's physical QP.
        qp: u32,
    },
    /// Queued for a later SEND.
    Queued,
    /// The receive completes with this reason now: the waiting send it met was too long
    /// (that send fails too), or the device's receive table is full.
    Fail(Reason),
}

/// The device's links, with their receives and waiting sends.
pub struct Messages<S: Store> {
    pub(super) links: Table<Link, S>,
    half_open: Fifo<u32, S>,
    pub(super) recvs: Table<Node<PostedRecv>, S>,
    pub(super) waiting: Table<Node<WaitingSend>, S>,
    pub(super) owed: Fifo<(u64, Completion), S>,
    /// No waiting send expires before this, ms.
    pub(super) next_expiry_ms: i64,
    /// Links across nodes with notices due, each once (see `far`).
    pub(super) due: Fifo<u32, S>,
    /// Which shard of the device this is (a link's id on the wire names it).
    pub(super) index: u32,
    /// Links across nodes whose local end left and waits for the peer's answer.
    pub(super) retracting: u32,
    /// Links made by a CONNECT for a listener that no listen took yet (see
    /// [`Link::unanswered_since`]).
    pub(super) unanswered: u32,
    /// The services rings listen on (see `listen`).
    pub(super) listeners: [Option<super::listen::Listener>; super::listen::MAX_LISTENERS],
    /// Links each user made here (see [`MessageStorage::made`]).
    made: S::Buf<u16>,
}

impl<S: Store> Messages<S> {
    /// Empty, over `storage`.
    pub fn new(storage: MessageStorage<S>) -> Self {
        let m = Messages {
            links: Table::new(storage.links),
            half_open: Fifo::new(storage.half_open),
            recvs: Table::new(storage.recvs),
            waiting: Table::new(storage.waiting),
            owed: Fifo::new(storage.owed),
            next_expiry_ms: i64::MAX,
            due: Fifo::new(storage.due),
            index: 0,
            retracting: 0,
            unanswered: 0,
            listeners: [None; super::listen::MAX_LISTENERS],
            made: storage.made,
        };
        assert!(m.half_open.capacity() >= m.links.capacity());
        assert!(m.due.capacity() >= m.links.capacity());
        assert!(
            m.owed.capacity() >= m.recvs.capacity() + m.waiting.capacity() + m.links.capacity()
        );
        m
    }

    /// Names this shard `k` of its device (a link's id on the wire carries it).
    pub fn set_index(&mut self, k: u32) {
        self.index = k;
    }

    /// Links in use.
    pub fn links(&self) -> usize {
        self.links.len()
    }

    /// Whether no link more fits.
    pub fn links_full(&self) -> bool {
        self.links.len() >= self.links.capacity()
    }

    /// Whether user `user` may make another link here: it made fewer than half the
    /// shard's, so no one user fills a shard other users' links (and peers' Hellos)
    /// need, whatever ports it names.
    pub fn may_make(&self, user: u32) -> bool {
        self.made
            .as_ref()
            .get(user as usize)
            .is_none_or(|&n| (n as usize) < self.links.capacity() / 2)
    }

    /// Link `h` was just made by user `user`'s CONNECT: counted as its.
    pub fn made_by(&mut self, h: u32, user: u32) {
        let Some(n) = self.made.as_mut().get_mut(user as usize) else {
            return;
        };
        if let Some(l) = self.links.get_mut(h).filter(|l| l.maker == NO_MAKER) {
            l.maker = user;
            *n += 1;
        }
    }

    /// Removes link `h`, giving its maker's count back.
    pub(super) fn remove_link(&mut self, h: u32) -> Option<Link> {
        let l = self.links.remove(h)?;
        if let Some(n) = self.made.as_mut().get_mut(l.maker as usize) {
            *n = n.saturating_sub(1);
        }
        Some(l)
    }

    /// Links user `user` made here and that have not gone yet.
    pub fn made_count(&self, user: u32) -> u32 {
        self.made
            .as_ref()
            .get(user as usize)
            .map_or(0, |&n| n as u32)
    }

    /// Receives posted and not yet matched.
    pub fn recvs(&self) -> usize {
        self.recvs.len()
    }

    /// Sends waiting for a receive.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether nothing here needs the recovery's step: no send waiting for a receive
    /// (it may expire), nothing owed.
    pub fn quiet(&self) -> bool {
        self.waiting() == 0
            && !self.owes()
            && self.due.is_empty()
            && self.retracting == 0
            && self.unanswered == 0
    }

    /// For a pairing CONNECT on this node by `t`: the oldest pairing link waiting for
    /// its second end that named `t`'s ports the other way round, with its first end's
    /// physical QP (the QP the new end must reach: its partner).
    pub fn half_open(&self, gid: &[u8; 16], t: Tuple) -> Option<HalfOpen> {
        if !t.pair {
            return None;
        }
        let mut found = None;
        self.half_open.any(|h| {
            found = self
                .links
                .get(h)
                .filter(|l| l.gid == *gid && l.ports == [t.peer, t.local])
                .map(|l| HalfOpen {
                    link: h,
                    qp: l.ends[0].qp,
                });
            found.is_some()
        });
        found
    }

    /// Puts a virtual QP bound to physical QP `qp` at an end of a link on this node:
    /// the second end of `open` (what [`half_open`](Self::half_open) found for `t` just
    /// before, in the same critical section), else the first of a new link, which waits
    /// for a pairing CONNECT (`t.pair`) or for the listen on `t.peer` to take it (one
    /// that listens now is nudged). Returns the link and the end, or `None` when the
    /// device's links are used up. One user's pairing CONNECTs on one four-tuple
    /// of this node pair in order, as one user's `SO_REUSEPORT` sockets share a port:
    /// each takes the oldest half-open link waiting for its ports, else opens one
    /// (with equal ports, the first and second make a link, the third and fourth
    /// another); the port itself is its user's alone (see `ports`).
    pub fn join(
        &mut self,
        gid: [u8; 16],
        t: Tuple,
        qp: u32,
        open: Option<HalfOpen>,
    ) -> Option<(u32, u8)> {
        let bound = End {
            holder: Holder::Bound,
            qp,
            ..End::OPEN
        };
        if let Some(HalfOpen { link, .. }) = open {
            self.half_open.remove(link);
            self.links.get_mut(link)?.ends[1] = bound;
            return Some((link, 1));
        }
        let mut l = Link::new(gid, [t.local, t.peer], [bound, End::OPEN], None);
        l.pair = t.pair;
        if !t.pair {
            l.unanswered_since = Some(i64::MIN);
        }
        let h = self.links.insert(l).ok()?;
        if t.pair {
            let r = self.half_open.push(h);
            debug_assert!(r.is_ok(), "half_open outsizes links");
        } else {
            self.unanswered += 1;
            self.offer(h);
        }
        Some((h, 0))
    }

    /// A SEND from end `end` of `link`, taken at `s.since_ms`.
    pub fn send(&mut self, link: u32, end: u8, s: WaitingSend) -> SendStep {
        let Some(l) = self.links.get_mut(link) else {
            return SendStep::Fail(Reason::NoLink);
        };
        let (me, peer) = (end as usize & 1, 1 - (end as usize & 1));
        if l.ends[peer].holder != Holder::Bound && l.ends[peer].holder != Holder::Open
            || l.ends[me].holder != Holder::Bound
        {
            return SendStep::Fail(match l.refused {
                true => Reason::Refused,
                false => Reason::NoReceiver,
            });
        }
        // Behind an earlier waiting send, or with no receive: wait, in order.
        if l.ends[me].waiting.is_empty() {
            if let Some(r) = l.ends[peer].recvs.pop(&mut self.recvs) {
                if let Some(far) = l.far {
                    if !s.fits(&r) {
                        // Across nodes only the send fails: the receive stays for the
                        // next message (see `far`).
                        let _ = l.ends[peer].recvs.push_front(&mut self.recvs, r);
                        return SendStep::Fail(Reason::TooLong);
                    }
                    return SendStep::DeliverFar { r, to: far.id };
                }
                if !s.fits(&r) {
                    self.owe(r.wr_id, Completion::Failed(Reason::TooLong));
                    return SendStep::Fail(Reason::TooLong);
                }
                return SendStep::Deliver(r);
            }
        }
        if l.ends[me].waiting.push_back(&mut self.waiting, s).is_err() {
            return SendStep::Fail(Reason::TableFull);
        }
        self.next_expiry_ms = self.next_expiry_ms.min(s.since_ms);
        SendStep::Waits
    }

    /// A RECV posted at end `end` of `link`. A waiting send on a physical QP that failed
    /// meanwhile is failed with `QpError` (owed) and its credit released, as the SEND
    /// path fails a send on a failed QP.
    pub fn recv(
        &mut self,
        link: u32,
        end: u8,
        r: PostedRecv,
        qps: &(impl Qps<S> + ?Sized),
    ) -> RecvStep {
        let Some(l) = self.links.get_mut(link) else {
            return RecvStep::Fail(Reason::NoLink);
        };
        if l.far.is_some_and(|f| f.broken()) {
            return RecvStep::Fail(Reason::QpError);
        }
        let (me, peer) = (end as usize & 1, 1 - (end as usize & 1));
        let qp = l.ends[peer].qp;
        while let Some(s) = l.ends[peer].waiting.pop(&mut self.waiting) {
            let failed = qps.qp(qp, |q, _| q.failed().then(|| q.fail_reason()));
            let why = if let Some(why) = failed {
                why
            } else if !s.fits(&r) {
                Reason::TooLong
            } else {
                return RecvStep::Deliver { send: s, qp };
            };
            qps.qp(qp, |q, _| q.release_held());
            let _ = self.owed.push((s.wr_id, Completion::Failed(why)));
            if why == Reason::TooLong {
                // RC fails the receive a too-long message consumed, too.
                return RecvStep::Fail(why);
            }
        }
        match l.ends[me].recvs.push_back(&mut self.recvs, r) {
            Ok(()) => {
                if l.far.is_some() {
                    self.advertise(link, qps);
                }
                RecvStep::Queued
            }
            Err(_) => RecvStep::Fail(Reason::TableFull),
        }
    }

    /// Puts back a receive that a SEND took but could not post (it goes first again).
    pub fn unmatch_recv(&mut self, link: u32, end: u8, r: PostedRecv) {
        if let Some(l) = self.links.get_mut(link) {
            // Room: it was just removed.
            let _ = l.ends[end as usize & 1]
                .recvs
                .push_front(&mut self.recvs, r);
        }
    }

    /// Puts back a send that a RECV took but could not post (it goes first again).
    pub fn unmatch_send(&mut self, link: u32, end: u8, s: WaitingSend) {
        if let Some(l) = self.links.get_mut(link) {
            let _ = l.ends[end as usize & 1]
                .waiting
                .push_front(&mut self.waiting, s);
        }
    }

    /// Takes the oldest unmatched receive of end `end` (to cancel it); the key made for
    /// it, if it was advertised, is let go.
    pub fn cancel_recv(&mut self, link: u32, end: u8, qps: &(impl Qps<S> + ?Sized)) -> Option<u64> {
        let l = self.links.get_mut(link)?;
        if let Some(far) = &mut l.far {
            // Advertised receives are the peer's to fill until it answers our leaving.
            if far.retract_since.is_some() {
                return None;
            }
            let head = l.ends[0].recvs.head;
            let r = l.ends[0].recvs.pop(&mut self.recvs)?;
            if far.cursor == head {
                far.cursor = l.ends[0].recvs.head;
            }
            super::far::let_key_go(qps, &r, false);
            return Some(r.wr_id);
        }
        l.ends[end as usize & 1]
            .recvs
            .pop(&mut self.recvs)
            .map(|r| r.wr_id)
    }

    /// The virtual QP at end `end` is going (its ring closed, or it disconnects): the
    /// end is never joined nor matched again, and the peer's waiting sends, which can
    /// never be received now, fail with `NoReceiver` (owed), releasing their credits.
    /// Idempotent.
    pub fn depart(&mut self, link: u32, end: u8, qps: &(impl Qps<S> + ?Sized)) {
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if l.far.is_some() {
            return self.depart_far(link, qps);
        }
        let (me, peer) = (end as usize & 1, 1 - (end as usize & 1));
        if l.ends[me].holder != Holder::Bound {
            return;
        }
        l.ends[me].holder = Holder::Gone;
        let qp = l.ends[peer].qp;
        while let Some(s) = l.ends[peer].waiting.pop(&mut self.waiting) {
            qps.qp(qp, |q, _| q.release_held());
            let _ = self
                .owed
                .push((s.wr_id, Completion::Failed(Reason::NoReceiver)));
        }
        if l.ends[peer].holder == Holder::Open {
            // Its other end never comes now: no listen or pairing CONNECT takes it.
            l.ends[peer].holder = Holder::Left;
            l.offered = false;
            self.half_open.remove(link);
            self.answered(link);
            self.answer_connect(link, Completion::Failed(Reason::Cancelled));
        }
    }

    /// End 0 of link `h` was made by CONNECT `wr_id`, which completes when a listen
    /// takes the link, or fails when it is refused or its set goes.
    pub fn await_listen(&mut self, h: u32, wr_id: u64) {
        if let Some(l) = self.links.get_mut(h) {
            l.connect_wr = wr_id;
        }
    }

    /// The CONNECT that made link `h`, if it still waits, completes with `c`: `Done`
    /// once the peer end is bound, a failure when it never will be.
    pub(super) fn answer_connect(&mut self, h: u32, c: Completion) {
        let Some(l) = self.links.get_mut(h) else {
            return;
        };
        let wr_id = core::mem::take(&mut l.connect_wr);
        if wr_id != 0 {
            self.owe(wr_id, c);
        }
    }

    /// Link `h` no longer waits for a listen (taken, refused, or gone).
    pub(super) fn answered(&mut self, h: u32) {
        if let Some(l) = self.links.get_mut(h) {
            if l.unanswered_since.take().is_some() {
                self.unanswered -= 1;
            }
        }
    }

    /// Links that waited for a listen more than `deadline_ms` at `now_ms` are refused:
    /// a peer's CONNECT is told to leave (its sends fail `Refused` there), a CONNECT
    /// here fails its sends `Refused`. Cheap when none waits.
    fn expire_unanswered(&mut self, now_ms: i64, deadline_ms: i64, qps: &(impl Qps<S> + ?Sized)) {
        if self.unanswered == 0 {
            return;
        }
        for i in 0..self.links.capacity() {
            let Some(h) = self.links.handle_at(i) else {
                continue;
            };
            let l = self.links.get_mut(h).expect("live");
            // A CONNECT of ours to another node waits twice as long: the peer's own
            // deadline answers first, unless the peer never answers at all.
            let ours_far = l.far.is_some() && l.ends[0].holder == Holder::Bound;
            let limit = if ours_far {
                2 * deadline_ms
            } else {
                deadline_ms
            };
            match l.unanswered_since {
                Some(i64::MIN) => l.unanswered_since = Some(now_ms),
                Some(t) if now_ms - t > limit => {
                    self.refuse(h, qps);
                }
                _ => {}
            }
        }
    }

    /// Link `h`'s open end will never come (no listen took it in time, or the listen had
    /// no room): refused, as [`expire_unanswered`](Self::expire_unanswered) says.
    pub(super) fn refuse(&mut self, h: u32, qps: &(impl Qps<S> + ?Sized)) {
        self.answered(h);
        let Some(l) = self.links.get_mut(h) else {
            return;
        };
        l.offered = false;
        let far = l.far.is_some();
        if let Some(f) = &mut l.far {
            if l.ends[0].holder == Holder::Open {
                // A peer's end that asked for our listen: told to leave; the link goes
                // once that is sent.
                l.ends[0].holder = Holder::Left;
                (f.hello, f.leave) = (false, true);
                self.enqueue(h);
                self.flush_due(qps);
                return;
            }
            // Our CONNECT the peer never answered: it is told we gave up.
            f.leave = true;
        }
        if far {
            self.enqueue(h);
        }
        let Some(l) = self.links.get_mut(h) else {
            return;
        };
        if l.ends[1].holder != Holder::Open {
            return;
        }
        l.ends[1].holder = Holder::Gone;
        l.refused = true;
        let qp = l.ends[0].qp;
        while let Some(s) = l.ends[0].waiting.pop(&mut self.waiting) {
            qps.qp(qp, |q, _| q.release_held());
            let _ = self
                .owed
                .push((s.wr_id, Completion::Failed(Reason::Refused)));
        }
        self.answer_connect(h, Completion::Failed(Reason::Refused));
        if far {
            self.flush_due(qps);
        }
    }

    /// The virtual QP at end `end` is released: it departs, anything still in its lists
    /// is dropped (its receives were cancelled and its sends are done, except when the
    /// device is gone), and the link goes once the other end has left too (or never
    /// came): until then that end's receives stay for its ring to cancel.
    pub fn leave(&mut self, link: u32, end: u8, qps: &(impl Qps<S> + ?Sized)) {
        if self.links.get(link).is_some_and(|l| l.far.is_some()) {
            return self.leave_far(link, qps);
        }
        self.depart(link, end, qps);
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        let (me, peer) = (end as usize & 1, 1 - (end as usize & 1));
        while l.ends[me].recvs.pop(&mut self.recvs).is_some() {}
        while l.ends[me].waiting.pop(&mut self.waiting).is_some() {
            qps.qp(l.ends[me].qp, |q, _| q.release_held());
        }
        l.ends[me].holder = Holder::Left;
        if matches!(l.ends[peer].holder, Holder::Open | Holder::Left) || l.refused {
            self.remove_link(link);
        }
    }

    /// Fails every send that has waited more than `deadline_ms` at `now_ms` with
    /// `NoReceiver` (owed), releasing its credit. Cheap when nothing can have expired.
    fn expire(&mut self, now_ms: i64, deadline_ms: i64, qps: &(impl Qps<S> + ?Sized)) {
        if self.waiting.is_empty() || now_ms - self.next_expiry_ms <= deadline_ms {
            return;
        }
        let mut next = i64::MAX;
        let Messages {
            links,
            waiting,
            owed,
            ..
        } = self;
        for l in links.values_mut() {
            for e in l.ends.iter_mut() {
                while let Some(s) = e.waiting.front(waiting).copied() {
                    if now_ms - s.since_ms <= deadline_ms {
                        next = next.min(s.since_ms);
                        break;
                    }
                    e.waiting.pop(waiting);
                    qps.qp(e.qp, |q, _| q.release_held());
                    let _ = owed.push((s.wr_id, Completion::Failed(Reason::NoReceiver)));
                }
            }
        }
        self.next_expiry_ms = next;
    }

    /// Expires waiting sends at `now_ms` (see `expire`), then routes
    /// everything owed; returns how many completions it routed.
    pub fn settle(
        &mut self,
        now_ms: i64,
        deadline_ms: i64,
        qps: &(impl Qps<S> + ?Sized),
        mut route: impl FnMut(WrId, Completion),
    ) -> usize {
        // Refusals first: a send that waited for a link the deadline refuses fails by
        // that name.
        self.expire_unanswered(now_ms, deadline_ms, qps);
        self.expire(now_ms, deadline_ms, qps);
        self.expire_far(now_ms, deadline_ms, qps);
        self.flush_due(qps);
        self.drain_owed(|w, c| route(WrId::decode(w), c)) + self.route_nudges(route)
    }

    /// Owes `c` to the request `wr_id` of some ring.
    pub(super) fn owe(&mut self, wr_id: u64, c: Completion) {
        let r = self.owed.push((wr_id, c));
        debug_assert!(r.is_ok(), "owed outsizes what can be owed");
    }

    /// Whether completions are owed (a listen's nudge among them).
    pub fn owes(&self) -> bool {
        !self.owed.is_empty() || self.nudges_owed()
    }

    /// Routes every owed completion; returns how many.
    fn drain_owed(&mut self, mut route: impl FnMut(u64, Completion)) -> usize {
        let mut n = 0;
        while let Some((w, c)) = self.owed.pop() {
            route(w, c);
            n += 1;
        }
        n
    }
}

#[cfg(any(test, feature = "alloc"))]
impl Messages<super::VecStore> {
    /// Room for `links` links and `n` receives and `n` waiting sends (tests, benchmarks).
    pub fn with_capacity(links: usize, n: usize) -> Self {
        use alloc::vec;
        Messages::new(MessageStorage {
            links: vec![Slot::EMPTY; links],
            half_open: vec![0; links],
            recvs: vec![Slot::EMPTY; n],
            waiting: vec![Slot::EMPTY; n],
            owed: vec![(0, Completion::Done); 2 * n + links],
            due: vec![0; links],
            made: vec![0; 64],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_spread_services_and_stay_in_range() {
        let gid = [0xfe; 16];
        let mut seen = [0u32; 8];
        for service in 0..800 {
            let k = shard_of(&gid, service, 8);
            assert!(k < 8);
            seen[k as usize] += 1;
        }
        // Each of 8 shards gets its share of consecutive services, within a factor 2.
        assert!(seen.iter().all(|&n| (50..=200).contains(&n)), "{seen:?}");
        assert_eq!(shard_of(&gid, 7, 1), 0);
    }
}
