//! A node's connection sets, one per peer node it talks to, each owning a fixed block of
//! the device's physical QP slots (kmod/cluster/peer.rs runs remote CONNECT on it).
//!
//! The engine accounts, routes and recovers physical QPs by index
//! ([`Qps`](super::super::engine::Qps)). The loopback pool takes the first indices; after it
//! come the remote sets' blocks, `qps_per_set` each, block `i` for table entry `i`. So a
//! remote QP is accounted, routed by its QP number and recovered exactly as a pooled one
//! is, and the entry a failing QP belongs to is found from its index ([`Peers::of_qp`]).
//!
//! A CONNECT naming a peer asks [`Peers::dial`]: an entry whose set is up is used (a bind,
//! microseconds), one being connected is waited for, and a peer not in the table takes a
//! free entry, or the least recently used entry no virtual QP is bound to (its old set is
//! torn down first): the caller then connects the entry's QPs (rdma_cm, milliseconds),
//! reports the first once it is up ([`Peers::first_up`]: CONNECTs waiting bind to it
//! while the rest is made) and then the outcome ([`Peers::attempt_done`]). A table
//! whose every entry is in use answers `Full`, which CONNECT reports by name: nothing
//! waits for room.
//!
//! A peer's request for a set ([`Peers::request`]) is answered by the rule of
//! [`conn_set`](super::conn_set); an accepted set is adopted into the peer's entry,
//! connection by connection ([`Peers::adopted`]), and both nodes then use it. Evicting
//! an idle set, on either node, closes it for both: the other node's virtual QPs on it
//! fail (`QpError`) and its next CONNECT makes a new one.

use core::ops::Range;

use super::super::engine::{QpBits, Store, MAX_QPS};
use super::conn_set::{Action, Answer, Attempt, ConnSet, State};

/// The user of the kernel's own CONNECTs (prewarming, a listen's accept; no account's
/// slot, nor any uid, is `u32::MAX`): not counted against anyone's dials or sets.
pub const NO_USER: u32 = u32::MAX;

/// Dials to other nodes one user may have in progress at once; a CONNECT that would
/// start another fails `Quota`. A dial to an address that never answers holds its
/// entry until the CM gives up (seconds), so without this one user's CONNECTs to such
/// addresses would hold the whole table and fail every other user's first contact.
pub const DIALS_PER_USER: usize = 2;

/// How long a dial may wait for one of the device's workers to take it, ms: past it the
/// attempt is failed (the set backs off) and its CONNECTs end `Unreachable`. Workers
/// take dials oldest first, so a wait this long means every worker stayed on dials
/// that never answer; nobody's CONNECT waits on them longer than this.
pub const DIAL_WAIT_MS: i64 = 10_000;

/// Users an entry names as holding virtual QPs on it ([`Peer::pins`]).
pub const PIN_USERS: usize = 4;

/// One user may hold virtual QPs on at most 1/`PEER_SHARE` of the peer table's entries
/// (at least one) through its own CONNECTs: past them, a CONNECT to another node is
/// refused `Quota`, so no user keeps the others from every new node.
pub const PEER_SHARE: usize = 4;

/// A user holding virtual QPs on a peer's set ([`Peer::pins`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The user (its account's slot); [`NO_USER`] for a free place.
    pub user: u32,
    /// Its virtual QPs bound to the set.
    pub vqps: u32,
}

impl Pin {
    const FREE: Pin = Pin {
        user: NO_USER,
        vqps: 0,
    };
}

/// One peer node and our set to it.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// Its address (an IPv4-mapped GID: what a CONNECT names).
    pub addr: [u8; 16],
    /// Our set to it.
    pub set: ConnSet,
    /// Virtual QPs bound to the set's QPs: while any is, the entry is never reused.
    pub bound: u32,
    /// The users (accounts' slots) whose own CONNECTs hold virtual QPs bound to it, and how many
    /// each: what pins the entry against a user's share ([`Peers::pinned_by`]). A user
    /// past the first [`PIN_USERS`] is counted in `bound` alone: it keeps an entry that
    /// others pin anyway.
    pub pins: [Pin; PIN_USERS],
    /// When a CONNECT last used or started it, ms (the least recent goes first).
    pub last_used_ms: i64,
    /// A CONNECT asked for its set to be made and no caller has taken the job yet
    /// ([`Peers::take_job`]).
    pub asked: bool,
    /// When it was asked for, ms: workers take the oldest first, and one asked for
    /// [`DIAL_WAIT_MS`] is failed.
    pub asked_ms: i64,
    /// The user (its account's slot, as shares count it) whose CONNECT asked for the
    /// attempt under way ([`NO_USER`]: the kernel's own, or none).
    pub dialer: u32,
    /// The number of our latest attempt, unique over the table's life (across its
    /// entries, so an entry reused for another node never takes a number a worker
    /// still holds): a worker's reports name it, and one that does not match (its
    /// attempt was given up meanwhile) changes nothing.
    pub attempt: u32,
    /// Its set was lost while virtual QPs were bound to it: they keep failing on its
    /// slots until released, and the peer's next set takes another entry (so no old
    /// virtual QP, with what it imported from the peer's earlier incarnation, ever
    /// reaches the new one). Freed when the last is released.
    pub retired: bool,
    /// The peer said virtual QPs of its own are bound to the set ([`Notice::Use`]): the
    /// entry is never evicted while they are, whatever this node binds.
    ///
    /// [`Notice::Use`]: super::notice::Notice::Use
    pub far_busy: bool,
    /// What the peer is still to be told of this node's use of the set, when it changed
    /// (whether virtual QPs are bound: see [`Peers::next_tell`]).
    pub tell: Option<bool>,
    /// What the peer last heard of this node's use of the set (nothing bound, for a set
    /// it was told nothing of): a change back to it before it was told goes unsaid.
    pub heard: bool,
}

/// What a CONNECT to a peer does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dial {
    /// The set is up: bind to one of these physical QPs.
    Use {
        /// The entry.
        peer: u32,
        /// Its physical QP slots.
        qps: Range<u32>,
    },
    /// Connect these physical QP slots to the peer, then report the outcome.
    Connect {
        /// The entry.
        peer: u32,
        /// Its physical QP slots.
        qps: Range<u32>,
        /// The entry held another peer (this node), whose set, if any, must be torn
        /// down first, and whose cached records go with it.
        evicts: Option<u16>,
    },
    /// A connection to the peer is under way (ours or its), or the last one failed and
    /// the set backs off: try again later.
    Wait,
    /// Every entry has virtual QPs bound or a connection under way.
    Full,
}

/// What a CONNECT to another node does, as [`Peers::connect`] decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connect {
    /// Bind to physical QP slot `slot` of entry `peer`'s set (the service picks the QP).
    Bind {
        /// The entry.
        peer: u32,
        /// The slot.
        slot: u32,
    },
    /// The set is being made (a job waits for a caller, or one is running): wait.
    InProgress,
    /// The last attempt failed and the set backs off: the node is unreachable.
    Unreachable,
    /// Every entry has virtual QPs bound or a connection under way.
    Full,
    /// The asking user has [`DIALS_PER_USER`] dials in progress already.
    Quota,
    /// The address names no node (not IPv4-mapped: rdma_cm reaches nodes by IPv4).
    NotANode,
}

/// [`Peers::connect`]'s decision, and what the caller must do first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectStep {
    /// What the CONNECT does.
    pub outcome: Connect,
    /// An entry whose QPs the caller closes before anything else: the node's set, found
    /// broken or its adoption given up.
    pub close: Option<u32>,
    /// A node whose set broke: what this node cached of its exports goes (it may have
    /// restarted).
    pub lost_node: Option<u16>,
    /// Another node's idle entry taken for this one: its QPs are closed too, and what
    /// was cached of that node's exports goes.
    pub evicted: Option<(u32, u16)>,
}

/// How a worker's report of its attempt ([`Peers::attempt_done`]) leaves the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The attempt became the set: install the connections it made.
    Set,
    /// It did not (it failed, yielded, or was given up): close the connections it made.
    Dropped,
    /// It did not, and the partial set it began goes with it: close the connections it
    /// made and the entry's installed QPs (what was bound to them fails), and what was
    /// cached of the node's exports.
    Lost,
}

/// [`Peers::request`]'s answer, and what the caller must do first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestStep {
    /// Accept the connection, or refuse it.
    pub answer: Answer,
    /// The entry that adopts it (when accepted).
    pub peer: u32,
    /// An entry whose QPs the caller closes first: the set we had with the peer.
    pub close: Option<u32>,
    /// A node whose set went: what this node cached of its exports goes.
    pub lost_node: Option<u16>,
    /// Another node's idle entry taken for this one: its QPs are closed too, and what
    /// was cached of that node's exports goes.
    pub evicted: Option<(u32, u16)>,
}

/// The node id of an IPv4-mapped address (its low 16 bits), or `None` for any other GID.
pub fn node_of(addr: &[u8; 16]) -> Option<u16> {
    let mapped = addr[..10].iter().all(|&b| b == 0) && addr[10] == 0xff && addr[11] == 0xff;
    mapped.then(|| u16::from_be_bytes([addr[14], addr[15]]))
}

/// A node's peers, over a table the caller provides (its length is the capacity).
pub struct Peers<S: Store> {
    table: S::Buf<Option<Peer>>,
    /// Attempts begun so far (the last one's number).
    attempts: u32,
    me: u16,
    first_qp: u32,
    qps_per_set: u32,
}

impl Peer {
    /// Its set is gone: neither node's virtual QPs use it, and those bound here keep
    /// the entry, retired, until they are released.
    fn gone(&mut self) {
        self.far_busy = false;
        self.tell = None;
        self.heard = false;
        if self.bound > 0 {
            self.retired = true;
        }
    }

    /// Whether its set is made or being made by our own attempt (never evicted then).
    fn dialing(&self) -> bool {
        matches!(
            self.set.state(),
            State::Connecting { .. } | State::Partial { .. }
        )
    }

    /// Whether its set, or what of it is up, carries virtual QPs (told of, bound).
    fn live(&self) -> bool {
        matches!(
            self.set.state(),
            State::Ready { .. } | State::Partial { .. } | State::Adopting { .. }
        )
    }

    /// A new set begins for the entry (dialed or adopted): nothing of the peer's is
    /// bound to it yet, and the peer is to be told of this node's use, if any, once it
    /// is up.
    fn new_set(&mut self) {
        self.far_busy = false;
        self.heard = false;
        self.tell = (self.bound > 0).then_some(true);
    }

    /// A new entry for the node at `addr` (id `node`), seen from node `me` at `now_ms`.
    /// Whether user `user`'s own CONNECTs hold virtual QPs on it.
    fn pinned(&self, user: u32) -> bool {
        user != NO_USER && self.pins.iter().any(|q| q.user == user)
    }

    fn new(addr: &[u8; 16], me: u16, node: u16, now_ms: i64) -> Peer {
        Peer {
            addr: *addr,
            set: ConnSet::new(me, node),
            bound: 0,
            pins: [Pin::FREE; PIN_USERS],
            last_used_ms: now_ms,
            asked: false,
            asked_ms: now_ms,
            dialer: NO_USER,
            attempt: 0,
            retired: false,
            far_busy: false,
            tell: None,
            heard: false,
        }
    }
}

impl<S: Store> Peers<S> {
    /// No peers yet, for node `me`, whose sets take physical QP slots from `first_qp`
    /// on, `qps_per_set` (at least 1) each.
    pub fn new(table: S::Buf<Option<Peer>>, me: u16, first_qp: u32, qps_per_set: u32) -> Self {
        assert!(qps_per_set > 0);
        let mut p: Self = Peers {
            table,
            attempts: 0,
            me,
            first_qp,
            qps_per_set,
        };
        let t: &mut [Option<Peer>] = p.table.as_mut();
        t.fill(None);
        p
    }

    /// This node is `me` (its id becomes known once its address is): every set's rule
    /// uses it.
    pub fn set_me(&mut self, me: u16) {
        if self.me == me {
            return;
        }
        self.me = me;
        for p in self.table.as_mut().iter_mut().flatten() {
            p.set.set_me(me);
        }
    }

    /// Physical QP slots the table can use, all entries together.
    pub fn qp_slots(&self) -> u32 {
        self.table.as_ref().len() as u32 * self.qps_per_set
    }

    /// Entry `peer`, if it holds one.
    pub fn get(&self, peer: u32) -> Option<&Peer> {
        self.table.as_ref().get(peer as usize)?.as_ref()
    }

    /// The entry of the peer at `addr` (not a retired one).
    pub fn find(&self, addr: &[u8; 16]) -> Option<u32> {
        self.table
            .as_ref()
            .iter()
            .position(|e| e.as_ref().is_some_and(|p| p.addr == *addr && !p.retired))
            .map(|i| i as u32)
    }

    /// Writes one line per peer entry: `peer ADDR node N set STATE qps A-B bound K
    /// idle_ms T`, then `bound_there` when the peer said virtual QPs of its own are
    /// bound to the set (it is not evicted), and `retired` at the end of a retired
    /// entry's line (its set was lost while virtual QPs were bound to it).
    pub fn write(&self, now_ms: i64, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        for (i, p) in self.table.as_ref().iter().enumerate() {
            let Some(p) = p else { continue };
            let a = &p.addr;
            let qps = self.qps(i as u32);
            write!(
                w,
                "peer {}.{}.{}.{} node {} set {} qps {}-{} bound {} idle_ms {}",
                a[12],
                a[13],
                a[14],
                a[15],
                node_of(a).unwrap_or(0),
                p.set.state().name(),
                qps.start,
                qps.end - 1,
                p.bound,
                now_ms.saturating_sub(p.last_used_ms).max(0)
            )?;
            let there = if p.far_busy { " bound_there" } else { "" };
            writeln!(w, "{there}{}", if p.retired { " retired" } else { "" })?;
        }
        Ok(())
    }

    /// Entry `peer`'s physical QP slots.
    pub fn qps(&self, peer: u32) -> Range<u32> {
        let first = self.first_qp + peer * self.qps_per_set;
        first..first + self.qps_per_set
    }

    /// The entry whose set physical QP slot `qp` belongs to.
    pub fn of_qp(&self, qp: u32) -> Option<u32> {
        // A search, not a division: the kernel build's objtool rejects a division's
        // panic path (and there are few entries).
        let n = self.table.as_ref().len() as u32;
        (0..n).find(|&i| self.qps(i).contains(&qp) && self.get(i).is_some())
    }

    /// A CONNECT at `now_ms` to the peer at `addr`, node `node` of incarnation
    /// `incarnation` (from its node record). `broken` as for
    /// [`connect`](Self::connect): a set found broken may be evicted even though its peer
    /// said it used it (its word can no longer change).
    pub fn dial(
        &mut self,
        addr: &[u8; 16],
        node: u16,
        incarnation: u64,
        now_ms: i64,
        broken: impl Fn(u32) -> bool,
    ) -> Dial {
        let (i, evicts) = match self.find(addr) {
            Some(i) => (i, None),
            None => match self.claim(&broken) {
                Some(c) => c,
                None => return Dial::Full,
            },
        };
        let me = self.me;
        let qps = self.qps(i);
        let next = self.attempts.wrapping_add(1);
        let e = &mut self.table.as_mut()[i as usize];
        let p = e.get_or_insert(Peer::new(addr, me, node, now_ms));
        p.last_used_ms = now_ms;
        match p.set.want(incarnation, now_ms) {
            Action::Use => Dial::Use { peer: i, qps },
            Action::Wait => Dial::Wait,
            Action::Connect => {
                p.new_set();
                p.attempt = next;
                self.attempts = next;
                Dial::Connect {
                    peer: i,
                    qps,
                    evicts,
                }
            }
        }
    }

    /// A CONNECT at `now_ms` to the node at `addr` for `service`. `broken(peer)` says
    /// whether entry `peer`'s set broke (the CM said so, or the recovery failed a QP of
    /// it): such a set is lost (retired if virtual QPs are bound) and a new one made.
    /// A set to make is left as a job ([`take_job`](Self::take_job)).
    pub fn connect(
        &mut self,
        addr: &[u8; 16],
        service: u32,
        now_ms: i64,
        user: u32,
        broken: impl Fn(u32) -> bool,
    ) -> ConnectStep {
        let mut step = ConnectStep {
            outcome: Connect::NotANode,
            close: None,
            lost_node: None,
            evicted: None,
        };
        let Some(node) = node_of(addr) else {
            return step;
        };
        // A CONNECT that would start a dial counts against its user's; one to a node
        // whose set is up, being made (by anyone) or backing off does not. Decided
        // before anything changes, so a refusal leaves the table as it was.
        if user != NO_USER && self.dialing(user) >= DIALS_PER_USER {
            let starts = match self.find(addr) {
                None => true,
                Some(p) => broken(p) || self.get(p).is_none_or(|e| e.set.would_dial(0, now_ms)),
            };
            if starts {
                step.outcome = Connect::Quota;
                return step;
            }
        }
        // A node this user holds nothing on takes one of its share of the table.
        let pinned = self
            .find(addr)
            .is_some_and(|p| self.get(p).is_some_and(|e| e.pinned(user)));
        if user != NO_USER && !pinned && self.pinned_by(user) >= self.peer_share() {
            step.outcome = Connect::Quota;
            return step;
        }
        if let Some(p) = self.find(addr) {
            if broken(p) && self.lost(p, None) {
                step.close = Some(p);
                step.lost_node = Some(node);
            }
            // Asked for and no worker took it in time: failed, so the set backs off.
            if self
                .get(p)
                .is_some_and(|e| e.asked && now_ms - e.asked_ms >= DIAL_WAIT_MS)
            {
                let attempt = self.entry(p).map(|e| {
                    e.asked = false;
                    e.attempt
                });
                if let Some(attempt) = attempt {
                    self.attempt_done(p, attempt, Attempt::Failed, now_ms);
                }
            }
        }
        // An adoption that did not complete in time: it is lost (what was bound to its
        // first connections fails), its connections go, and we dial.
        let stale = self.find(addr).filter(|&p| {
            self.get(p).is_some_and(
                |e| matches!(e.set.state(), State::Adopting { until_ms, .. } if now_ms >= until_ms),
            )
        });
        if let Some(p) = stale.filter(|&p| self.lost(p, None)) {
            step.close = Some(p);
            step.lost_node = Some(node);
        }
        step.outcome = match self.dial(addr, node, 0, now_ms, &broken) {
            Dial::Use { peer, qps } => {
                // The service's own QP of the set when it is up, else the first that is
                // (a set still being made). checked_rem: no panic path (the kernel
                // build's objtool rejects one).
                let k = service.checked_rem(self.qps_per_set).unwrap_or(0);
                let up = self.get(peer).map_or(0, |e| e.set.up(self.qps_per_set));
                let k = if up & 1u32.checked_shl(k).unwrap_or(0) != 0 {
                    k
                } else {
                    up.trailing_zeros()
                };
                Connect::Bind {
                    peer,
                    slot: qps.start + k,
                }
            }
            Dial::Connect { peer, evicts, .. } => {
                step.evicted = evicts.map(|gone| (peer, gone));
                if let Some(p) = self.entry(peer) {
                    p.asked = true;
                    p.asked_ms = now_ms;
                    p.dialer = user;
                }
                Connect::InProgress
            }
            Dial::Wait => match self
                .find(addr)
                .and_then(|p| self.get(p))
                .map(|p| p.set.state())
            {
                Some(State::Backoff { .. }) => Connect::Unreachable,
                _ => Connect::InProgress,
            },
            Dial::Full => Connect::Full,
        };
        step
    }

    /// Entries user `user`'s own CONNECTs hold virtual QPs on.
    pub fn pinned_by(&self, user: u32) -> usize {
        self.table
            .as_ref()
            .iter()
            .flatten()
            .filter(|p| p.pinned(user))
            .count()
    }

    /// Entries one user may pin: its share of the table ([`PEER_SHARE`]).
    pub fn peer_share(&self) -> usize {
        (self.table.as_ref().len() / PEER_SHARE).max(1)
    }

    /// Dials user `user` asked for that are under way.
    fn dialing(&self, user: u32) -> usize {
        self.table
            .as_ref()
            .iter()
            .flatten()
            .filter(|p| p.dialer == user && p.dialing())
            .count()
    }

    /// Whether a dial was asked for and not taken yet (the device's worker has work).
    pub fn job_waiting(&self) -> bool {
        self.table.as_ref().iter().flatten().any(|p| p.asked)
    }

    /// The set asked for longest ago that no worker took yet: its entry, address and
    /// attempt's number (which the worker's reports name), now taken (each stays asked
    /// for until taken, so CONNECTs to other nodes meanwhile ask for theirs). Oldest
    /// first, so new dials (a user's to addresses that never answer, say) never keep an
    /// older one from a worker.
    pub fn take_job(&mut self) -> Option<(u32, [u8; 16], u32)> {
        let t = self.table.as_mut();
        let (i, p) = t
            .iter_mut()
            .enumerate()
            .filter_map(|(i, e)| e.as_mut().filter(|p| p.asked).map(|p| (i, p)))
            .min_by_key(|(_, p)| p.asked_ms)?;
        p.asked = false;
        Some((i as u32, p.addr, p.attempt))
    }

    /// A free entry, or the least recently used one nothing is bound to, on either node
    /// (the peer's word counts while its set is up and not `broken`), and nothing is
    /// connecting (emptied here; the node it held).
    fn claim(&mut self, broken: &impl Fn(u32) -> bool) -> Option<(u32, Option<u16>)> {
        let t = self.table.as_mut();
        if let Some(i) = t.iter().position(Option::is_none) {
            return Some((i as u32, None));
        }
        let (i, _) = t
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|p| (i, p)))
            .filter(|(i, p)| {
                let used_there = p.far_busy
                    && matches!(p.set.state(), State::Ready { .. })
                    && !broken(*i as u32);
                p.bound == 0 && !used_there && !p.dialing()
            })
            .min_by_key(|(_, p)| p.last_used_ms)?;
        let node = t[i].take().and_then(|p| node_of(&p.addr));
        Some((i as u32, node))
    }

    /// The peer at `addr`, node `node` of incarnation `incarnation`, asks at `now_ms`
    /// for connection `index` of a new set: the answer ([`ConnSet::answer`]), with the
    /// entry that adopts it and what the caller closes first, or `None` when the table
    /// has no room (refuse it). Connection 0 begins the set (whatever we had with the
    /// peer is dropped: it asks only when it has none); a later one joins an adoption
    /// under way, and is refused when none is. `broken` as for
    /// [`connect`](Self::connect).
    pub fn request(
        &mut self,
        addr: &[u8; 16],
        node: u16,
        incarnation: u64,
        index: u32,
        now_ms: i64,
        broken: impl Fn(u32) -> bool,
    ) -> Option<RequestStep> {
        let mut step = RequestStep {
            answer: Answer::Accept,
            peer: 0,
            close: None,
            lost_node: None,
            evicted: None,
        };
        if index > 0 {
            step.peer = self.find(addr)?;
            if !self.entry(step.peer)?.set.adopt_more(index, now_ms) {
                step.answer = Answer::Refuse;
            }
            return Some(step);
        }
        let lose = |t: &mut Self, p: u32, step: &mut RequestStep| {
            if t.lost(p, None) {
                step.close = Some(p);
                step.lost_node = Some(node);
            }
        };
        if let Some(p) = self.find(addr) {
            if broken(p) {
                lose(self, p, &mut step);
            }
        }
        if let Some(p) = self.find(addr) {
            step.answer = self.get(p)?.set.answer();
            if step.answer == Answer::Refuse {
                step.peer = p;
                return Some(step);
            }
            // The peer has no set: whatever we had with it is gone.
            lose(self, p, &mut step);
        }
        let p = match self.find(addr) {
            Some(p) => p,
            None => {
                let (p, evicts) = self.claim(&broken)?;
                step.evicted = evicts.map(|gone| (p, gone));
                p
            }
        };
        let me = self.me;
        let e = self.table.as_mut()[p as usize].get_or_insert(Peer::new(addr, me, node, now_ms));
        e.set.adopt(incarnation, now_ms);
        e.new_set();
        // Our own attempt, if not yet started, is not wanted now.
        e.asked = false;
        e.last_used_ms = now_ms;
        step.peer = p;
        Some(step)
    }

    /// Connection `index` of `count` of the set entry `peer` adopts is here at
    /// `now_ms` (its QP installed in slot `index` of the entry's block): whether the set
    /// is now up.
    pub fn adopted(&mut self, peer: u32, index: u32, count: u32, now_ms: i64) -> bool {
        self.entry(peer)
            .is_some_and(|p| p.set.adopted(index, count, now_ms))
    }

    /// The first connection of our attempt `attempt` on entry `peer` is up: whether it
    /// is to be installed in the entry's first slot and used at once (the attempt is
    /// still under way); when not, the caller closes it.
    pub fn first_up(&mut self, peer: u32, attempt: u32) -> bool {
        self.entry(peer)
            .is_some_and(|p| p.attempt == attempt && p.set.first_up())
    }

    /// Our attempt `attempt` on entry `peer` ended at `now_ms`: whether it became the set
    /// and what the caller closes when not (the peer's set was adopted meanwhile, the
    /// attempt failed, or its set was lost and another begun).
    pub fn attempt_done(&mut self, peer: u32, attempt: u32, how: Attempt, now_ms: i64) -> Ended {
        let Some(p) = self.entry(peer).filter(|p| p.attempt == attempt) else {
            return Ended::Dropped;
        };
        let partial = matches!(p.set.state(), State::Partial { .. });
        if p.set.attempt_done(how, now_ms) {
            return Ended::Set;
        }
        if !partial {
            return Ended::Dropped;
        }
        p.gone();
        Ended::Lost
    }

    /// Entry `peer`'s set broke, or its peer's node record shows `incarnation`: whether
    /// the set is gone (its virtual QPs then fail, and its QPs are torn down).
    pub fn lost(&mut self, peer: u32, incarnation: Option<u64>) -> bool {
        let Some(p) = self.entry(peer) else {
            return false;
        };
        let gone = p.set.lost(incarnation);
        if gone {
            p.gone();
        }
        gone
    }

    /// A virtual QP of user `user`'s own CONNECT ([`NO_USER`]: one a listen accepted,
    /// which the peer asked for) was bound to entry `peer`'s set (the first one is told
    /// to the peer).
    pub fn bind(&mut self, peer: u32, user: u32) {
        if let Some(p) = self.entry(peer) {
            if p.bound == 0 {
                p.tell = Some(true);
            }
            p.bound += 1;
            if user == NO_USER {
                return;
            }
            let at = p.pins.iter().position(|q| q.user == user);
            if let Some(q) = at.or_else(|| p.pins.iter().position(|q| q.user == NO_USER)) {
                p.pins[q] = Pin {
                    user,
                    vqps: p.pins[q].vqps + 1,
                };
            }
        }
    }

    /// The peer whose set physical QP slot `qp` belongs to said whether virtual QPs of
    /// its own are bound to it ([`Notice::Use`](super::notice::Notice::Use)).
    pub fn far_use(&mut self, qp: u32, busy: bool) {
        if let Some(p) = self.of_qp(qp).and_then(|p| self.entry(p)) {
            p.far_busy = busy;
        }
    }

    /// The next change of this node's use of a set the peer is to be told of, on an
    /// entry whose first slot is not in `skip` (slots that had no room this time): the entry, the slot to tell it on, and whether virtual QPs are
    /// bound, when that is not what the peer last heard (a use that began and ended, or
    /// ended and began again, before it was told says nothing). Only a set that is up
    /// or being adopted is told (one being made is told once up: the caller asks again
    /// then).
    pub fn next_tell(&self, skip: QpBits) -> Option<(u32, u32, bool)> {
        (0..self.table.as_ref().len() as u32).find_map(|i| {
            let p = self.get(i)?;
            let slot = self.qps(i).start;
            // Told on the first slot, which is up whenever anything of the set is.
            let live = p.live() && p.set.up(self.qps_per_set) & 1 != 0;
            // A slot past the sets is never told (it could never be skipped).
            let skipped = slot as usize >= MAX_QPS || skip.contains(slot);
            let busy = p.tell.filter(|&b| b != p.heard)?;
            (live && !skipped && !p.retired).then_some((i, slot, busy))
        })
    }

    /// Entry `peer`'s peer was told `busy` ([`next_tell`](Self::next_tell)): nothing is
    /// left to tell unless the use changed meanwhile.
    pub fn told(&mut self, peer: u32, busy: bool) {
        if let Some(p) = self.entry(peer) {
            p.heard = busy;
            if p.tell == Some(busy) {
                p.tell = None;
            }
        }
    }

    /// A listen takes a peer's end whose Hello came on physical QP slot `qp` from the
    /// node at `addr` (see the engine's `listen`): binds to that slot's entry and
    /// returns it, when the slot belongs to `addr`'s set and is up (the set's, or what
    /// of it is made or adopted so far); not to a retired set's, which keeps an earlier
    /// incarnation of the peer.
    pub fn accept(&mut self, addr: &[u8; 16], qp: u32) -> Option<u32> {
        let p = self.of_qp(qp)?;
        let e = self.get(p)?;
        let k = qp - self.qps(p).start;
        let up = e.set.up(self.qps_per_set) & 1u32.checked_shl(k).unwrap_or(0) != 0;
        if e.addr != *addr || e.retired || !e.live() || !up {
            return None;
        }
        self.bind(p, NO_USER);
        Some(p)
    }

    /// A virtual QP bound to entry `peer`'s set by user `user` (as [`bind`](Self::bind)
    /// was told) was released.
    pub fn unbind(&mut self, peer: u32, user: u32) {
        let e = self.table.as_mut().get_mut(peer as usize);
        if let Some(e) = e {
            if let Some(p) = e {
                p.bound = p.bound.saturating_sub(1);
                if let Some(q) = p
                    .pins
                    .iter_mut()
                    .find(|q| q.user == user && user != NO_USER)
                {
                    q.vqps -= 1;
                    if q.vqps == 0 {
                        *q = Pin::FREE;
                    }
                }
                if p.retired && p.bound == 0 {
                    *e = None;
                } else if p.bound == 0 {
                    p.tell = Some(false);
                }
            }
        }
    }

    fn entry(&mut self, peer: u32) -> Option<&mut Peer> {
        self.table.as_mut().get_mut(peer as usize)?.as_mut()
    }
}

#[cfg(any(test, feature = "alloc"))]
impl Peers<super::super::engine::VecStore> {
    /// Room for `n` peers (tests, benchmarks).
    pub fn with_capacity(n: usize, me: u16, first_qp: u32, qps_per_set: u32) -> Self {
        Peers::new(alloc::vec![None; n], me, first_qp, qps_per_set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::conn_set::{ADOPT_MS, SET_CONNECT_MS};

    /// The entry's current attempt ended `how` at `now`: whether it became the set.
    fn done(p: &mut Peers<crate::engine::VecStore>, peer: u32, how: Attempt, now: i64) -> bool {
        let attempt = p.get(peer).map_or(0, |e| e.attempt);
        p.attempt_done(peer, attempt, how, now) == Ended::Set
    }

    fn addr(n: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[10..12].fill(0xff);
        a[12..].copy_from_slice(&[192, 0, 2, n]);
        a
    }

    #[test]
    fn a_first_contact_connects_once_and_later_ones_use_the_set() {
        let mut p = Peers::with_capacity(4, 1, 4, 2);
        let Dial::Connect { peer, qps, evicts } = p.dial(&addr(12), 2, 7, 0, |_| false) else {
            panic!("first contact connects");
        };
        assert_eq!((qps, evicts), (4..6, None));
        assert_eq!(
            p.dial(&addr(12), 2, 7, 1, |_| false),
            Dial::Wait,
            "one attempt at a time"
        );
        done(&mut p, peer, Attempt::Established, 2);
        assert_eq!(
            p.dial(&addr(12), 2, 7, 3, |_| false),
            Dial::Use { peer, qps: 4..6 }
        );
        assert_eq!(
            (p.of_qp(4), p.of_qp(5), p.of_qp(3)),
            (Some(0), Some(0), None)
        );
        // A second peer takes the next block.
        let Dial::Connect { qps, .. } = p.dial(&addr(13), 3, 1, 4, |_| false) else {
            panic!()
        };
        assert_eq!(qps, 6..8);
        assert_eq!(p.of_qp(7), Some(1));
        assert_eq!(p.of_qp(8), None, "no entry there");
    }

    #[test]
    fn the_table_is_written_one_line_per_peer() {
        let mut p = Peers::with_capacity(4, 1, 4, 2);
        let Dial::Connect { peer, .. } = p.dial(&addr(12), 12, 7, 100, |_| false) else {
            panic!()
        };
        done(&mut p, peer, Attempt::Established, 150);
        p.bind(peer, NO_USER);
        p.far_use(5, true);
        let _ = p.dial(&addr(13), 13, 1, 200, |_| false);
        let mut s = alloc::string::String::new();
        p.write(1_100, &mut s).unwrap();
        assert_eq!(
            s,
            "peer 192.0.2.12 node 524 set ready qps 4-5 bound 1 idle_ms 1000 bound_there\n\
             peer 192.0.2.13 node 525 set connecting qps 6-7 bound 0 idle_ms 900\n"
        );
    }

    #[test]
    fn a_full_table_reuses_only_idle_entries_least_recent_first() {
        let mut p = Peers::with_capacity(2, 1, 0, 1);
        for (n, t) in [(10u8, 0i64), (11, 1)] {
            let Dial::Connect { peer, .. } = p.dial(&addr(n), n as u16, 1, t, |_| false) else {
                panic!()
            };
            done(&mut p, peer, Attempt::Established, t);
        }
        p.bind(1, NO_USER);
        // Entry 0 (peer .10) is idle and least recent: it goes, its set torn down.
        assert_eq!(
            p.dial(&addr(20), 20, 1, 5, |_| false),
            Dial::Connect {
                peer: 0,
                qps: 0..1,
                evicts: node_of(&addr(10))
            }
        );
        assert_eq!(p.find(&addr(10)), None);
        assert_eq!(
            p.connect(&addr(22), 0, 5, NO_USER, |_| false).lost_node,
            None,
            "no idle entry: nobody evicted"
        );
        // Entry 0 is connecting, entry 1 bound: no room.
        assert_eq!(p.dial(&addr(21), 21, 1, 6, |_| false), Dial::Full);
        assert_eq!(
            p.request(&addr(21), 21, 1, 0, 6, |_| false),
            None,
            "nor for a request"
        );
        p.unbind(1, NO_USER);
        assert!(matches!(
            p.dial(&addr(21), 21, 1, 7, |_| false),
            Dial::Connect {
                peer: 1,
                evicts: Some(_),
                ..
            }
        ));
    }

    /// Dials the node at `.n` at time 0 and brings its set up: its entry.
    fn up(p: &mut Peers<crate::engine::VecStore>, n: u8) -> u32 {
        let Dial::Connect { peer, .. } = p.dial(&addr(n), n as u16, 1, 0, |_| false) else {
            panic!("a first contact connects")
        };
        done(p, peer, Attempt::Established, 0);
        peer
    }

    /// A set the peer said it uses is never evicted, however idle it is here: the
    /// table is full then (the other node's importers and clients keep their set).
    #[test]
    fn a_set_the_peer_uses_is_never_evicted() {
        let mut p = Peers::with_capacity(1, 1, 4, 2);
        up(&mut p, 10);
        p.far_use(5, true);
        assert_eq!(
            p.dial(&addr(20), 20, 1, 5, |_| false),
            Dial::Full,
            "the peer's in use"
        );
        assert_eq!(p.request(&addr(20), 20, 1, 0, 5, |_| false), None);
        p.far_use(5, false);
        assert!(matches!(
            p.dial(&addr(20), 20, 1, 6, |_| false),
            Dial::Connect {
                evicts: Some(_),
                ..
            }
        ));
        // A set that is lost takes the peer's word with it.
        let mut p = Peers::with_capacity(1, 1, 4, 2);
        let peer = up(&mut p, 10);
        p.far_use(4, true);
        assert!(p.lost(peer, None));
        assert!(!p.get(peer).unwrap().far_busy);
    }

    /// The peer's word holds only for the set it came on while that set is up: a set
    /// found broken (the peer went, and can no longer say otherwise) may be evicted,
    /// and a set made again starts with no word from the peer.
    #[test]
    fn the_peers_word_holds_only_for_its_live_set() {
        let mut p = Peers::with_capacity(1, 1, 4, 2);
        let peer = up(&mut p, 10);
        p.far_use(4, true);
        assert!(matches!(
            p.dial(&addr(20), 20, 1, 5, |_| true),
            Dial::Connect {
                evicts: Some(_),
                ..
            }
        ));
        // The new entry's attempt fails; a word on its slot is taken, then its set is
        // made again: the word went with the old attempt.
        assert!(!done(&mut p, peer, Attempt::Failed, 6));
        p.far_use(4, true);
        assert!(matches!(
            p.dial(&addr(20), 20, 1, 1_000_000, |_| false),
            Dial::Connect { evicts: None, .. }
        ));
        assert!(!p.get(peer).unwrap().far_busy);
    }

    /// The peer is told when this node's use of a set begins and ends, once each
    /// (binds between change nothing), and not before the set is up.
    #[test]
    fn the_peer_is_told_as_the_use_changes() {
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        let Dial::Connect { peer, .. } = p.dial(&addr(10), 10, 1, 0, |_| false) else {
            panic!()
        };
        assert_eq!(p.next_tell(QpBits::EMPTY), None);
        p.bind(peer, NO_USER);
        assert_eq!(
            p.next_tell(QpBits::EMPTY),
            None,
            "not while the set is being made"
        );
        done(&mut p, peer, Attempt::Established, 0);
        assert_eq!(p.next_tell(QpBits::EMPTY), Some((peer, 4, true)));
        assert_eq!(p.next_tell(QpBits::one(4)), None, "its slot had no room");
        p.told(peer, true);
        assert_eq!(p.next_tell(QpBits::EMPTY), None);
        p.bind(peer, NO_USER);
        p.unbind(peer, NO_USER);
        assert_eq!(p.next_tell(QpBits::EMPTY), None, "still bound");
        p.unbind(peer, NO_USER);
        assert_eq!(p.next_tell(QpBits::EMPTY), Some((peer, 4, false)));
        // Bound again before it was told: what the peer heard holds, nothing goes.
        p.bind(peer, NO_USER);
        assert_eq!(p.next_tell(QpBits::EMPTY), None);
        p.unbind(peer, NO_USER);
        p.told(peer, false);
        assert_eq!(p.next_tell(QpBits::EMPTY), None);
        // Told false, then bound and the tell's answer comes late: the latest use goes.
        p.bind(peer, NO_USER);
        p.told(peer, false);
        assert_eq!(
            p.next_tell(QpBits::EMPTY),
            Some((peer, 4, true)),
            "a stale answer clears nothing"
        );
    }

    /// A use that begins and ends before the peer is told (a CONNECT whose join failed,
    /// retried) sends nothing: each tell is a notice on the set's QP.
    #[test]
    fn a_use_that_ends_before_it_is_told_says_nothing() {
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        let peer = up(&mut p, 10);
        for _ in 0..100 {
            p.bind(peer, NO_USER);
            p.unbind(peer, NO_USER);
        }
        assert_eq!(p.next_tell(QpBits::EMPTY), None);
        p.bind(peer, NO_USER);
        assert_eq!(p.next_tell(QpBits::EMPTY), Some((peer, 4, true)));
    }

    /// A user's CONNECTs to addresses that never answer hold at most
    /// [`DIALS_PER_USER`] entries: its next new node fails `Quota`, while another
    /// user's first contact, and a wait for a dial already under way, go on.
    #[test]
    fn a_users_dials_in_progress_are_bounded() {
        let mut p = Peers::with_capacity(8, 1, 0, 1);
        let (mallory, alice) = (3, 4);
        for n in 0..DIALS_PER_USER as u8 {
            let step = p.connect(&addr(30 + n), 0, 0, mallory, |_| false);
            assert_eq!(step.outcome, Connect::InProgress);
        }
        assert_eq!(
            p.connect(&addr(40), 0, 1, mallory, |_| false).outcome,
            Connect::Quota
        );
        assert_eq!(
            p.connect(&addr(30), 0, 1, mallory, |_| false).outcome,
            Connect::InProgress,
            "waiting for its own dial is no new one"
        );
        assert_eq!(
            p.connect(&addr(41), 0, 1, alice, |_| false).outcome,
            Connect::InProgress
        );
        assert_eq!(
            p.connect(&addr(30), 0, 1, alice, |_| false).outcome,
            Connect::InProgress,
            "another's dial to the same node is waited for"
        );
        assert_eq!(
            p.connect(&addr(42), 0, 1, NO_USER, |_| false).outcome,
            Connect::InProgress
        );
        // A dial that ends frees its user's turn.
        let first = p.find(&addr(30)).unwrap();
        done(&mut p, first, Attempt::Failed, 2);
        assert_eq!(
            p.connect(&addr(40), 0, 3, mallory, |_| false).outcome,
            Connect::InProgress
        );
    }

    /// A user's own virtual QPs pin at most its share of the table (a quarter): a
    /// CONNECT to one more node is refused `Quota`, and another user still reaches new
    /// nodes; more virtual QPs on a node it holds, a listen's accepts, and a node let
    /// go do not count.
    #[test]
    fn a_user_pins_only_its_share_of_the_table() {
        let mut p = Peers::with_capacity(8, 1, 0, 1);
        let (mallory, alice) = (3, 4);
        assert_eq!(p.peer_share(), 2);
        // A set made by the kernel's own CONNECT (as a prewarm makes it): up.
        let up = |p: &mut Peers<crate::engine::VecStore>, n: u8| {
            assert_eq!(
                p.connect(&addr(n), 0, 0, NO_USER, |_| false).outcome,
                Connect::InProgress
            );
            let (peer, ..) = p.take_job().expect("a dial to make");
            done(p, peer, Attempt::Established, 0);
            peer
        };
        let bind = |p: &mut Peers<crate::engine::VecStore>, n: u8, user: u32| {
            let peer = p.find(&addr(n)).unwrap_or_else(|| up(p, n));
            let c = p.connect(&addr(n), 0, 1, user, |_| false).outcome;
            assert!(matches!(c, Connect::Bind { .. }), "{c:?}");
            p.bind(peer, user);
            peer
        };
        let first = bind(&mut p, 11, mallory);
        bind(&mut p, 12, mallory);
        up(&mut p, 13);
        let c = p.connect(&addr(13), 0, 1, mallory, |_| false).outcome;
        assert_eq!(c, Connect::Quota, "a third node");
        assert_eq!(p.pinned_by(mallory), 2);
        bind(&mut p, 11, mallory);
        assert_eq!(p.pinned_by(mallory), 2, "a node it holds already");
        bind(&mut p, 13, alice);
        let far = up(&mut p, 14);
        let slot = p.qps(far).start;
        assert!(p.accept(&addr(14), slot).is_some());
        assert_eq!(
            (p.pinned_by(alice), p.pinned_by(NO_USER)),
            (1, 0),
            "accepts pin nothing"
        );
        // All of one node let go: it may reach another.
        p.unbind(first, mallory);
        assert_eq!(p.pinned_by(mallory), 2, "one of two left on node 11");
        p.unbind(first, mallory);
        assert_eq!(p.pinned_by(mallory), 1);
        assert!(matches!(
            p.connect(&addr(13), 0, 2, mallory, |_| false).outcome,
            Connect::Bind { .. }
        ));
    }

    /// An evicted node's set closes, and what this node cached of its exports goes
    /// with it (a name it revoked meanwhile must not import from the cache).
    #[test]
    fn an_evicted_nodes_set_and_cached_records_go() {
        let mut p = Peers::with_capacity(1, 1, 0, 1);
        let step = p.connect(&addr(10), 0, 0, NO_USER, |_| false);
        assert_eq!((step.close, step.lost_node), (None, None));
        let peer = p.find(&addr(10)).unwrap();
        p.take_job();
        done(&mut p, peer, Attempt::Established, 0);
        let step = p.connect(&addr(11), 0, 1, NO_USER, |_| false);
        assert_eq!(step.outcome, Connect::InProgress);
        assert_eq!(
            (step.close, step.evicted),
            (None, Some((peer, node_of(&addr(10)).unwrap()))),
            "the idle set to .10 goes, and its records"
        );
    }

    /// A set found broken with virtual QPs bound retires, and the new set's entry is
    /// taken from another node: both are closed, both nodes' records go (one step
    /// names both, neither hiding the other).
    #[test]
    fn a_lost_set_and_an_eviction_in_one_step_both_close() {
        let mut p = Peers::with_capacity(2, 1, 0, 1);
        let a = up(&mut p, 12);
        p.bind(a, NO_USER);
        let b = up(&mut p, 13);
        let step = p.connect(&addr(12), 0, 5, NO_USER, |q| q == a);
        assert_eq!(step.outcome, Connect::InProgress);
        assert_eq!((step.close, step.lost_node), (Some(a), node_of(&addr(12))));
        assert_eq!(step.evicted, Some((b, node_of(&addr(13)).unwrap())));
        assert!(p.get(a).unwrap().retired);
    }

    /// An entry reused for another node never matches a report of the attempt it held
    /// before: attempts are numbered across the table, so the old worker's connections
    /// are never installed in the new node's slots.
    #[test]
    fn a_reused_entry_takes_no_report_of_its_earlier_attempt() {
        let mut p = Peers::with_capacity(1, 0xffff, 4, 2);
        p.connect(&addr(12), 0, 0, NO_USER, |_| false);
        let (peer, _, old) = p.take_job().unwrap();
        // The peer dials too and wins (the lower id): its set is adopted, whole.
        let s = p.request(&addr(12), 12, 1, 0, 1, |_| false).unwrap();
        assert_eq!((s.answer, s.peer), (Answer::Accept, peer));
        p.adopted(peer, 0, 2, 1);
        assert!(p.adopted(peer, 1, 2, 1));
        // Idle, so another node's CONNECT takes the entry for a new attempt.
        let step = p.connect(&addr(13), 0, 2, NO_USER, |_| false);
        assert_eq!(step.evicted, Some((peer, node_of(&addr(12)).unwrap())));
        let (again, _, new) = p.take_job().unwrap();
        assert_eq!(again, peer);
        assert_ne!(old, new);
        assert!(
            !p.first_up(peer, old),
            "the old worker's first connection is not .13's"
        );
        assert_eq!(
            p.attempt_done(peer, old, Attempt::Established, 3),
            Ended::Dropped
        );
        assert!(p.first_up(peer, new));
    }

    #[test]
    fn a_lost_set_is_rebuilt_by_the_next_connect_away_from_its_bound_vqps() {
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        let Dial::Connect { peer, .. } = p.dial(&addr(12), 2, 7, 0, |_| false) else {
            panic!()
        };
        done(&mut p, peer, Attempt::Established, 0);
        assert!(!p.lost(peer, Some(7)), "same incarnation");
        assert!(p.lost(peer, Some(8)), "the peer restarted");
        // Nothing was bound: the same slots again.
        assert_eq!(
            p.dial(&addr(12), 2, 8, 1, |_| false),
            Dial::Connect {
                peer,
                qps: 4..6,
                evicts: None
            }
        );
        done(&mut p, peer, Attempt::Established, 1);
        p.bind(peer, NO_USER);
        assert!(p.lost(peer, None), "broke with a virtual QP bound");
        // The bound virtual QP keeps the old slots; the next set takes the other block.
        assert_eq!(
            p.dial(&addr(12), 2, 9, 2, |_| false),
            Dial::Connect {
                peer: 1,
                qps: 6..8,
                evicts: None
            }
        );
        done(&mut p, 1, Attempt::Established, 2);
        p.bind(1, NO_USER);
        assert_eq!(
            p.of_qp(4),
            Some(peer),
            "the old block is still the retired entry's"
        );
        assert_eq!(
            p.dial(&addr(20), 20, 1, 3, |_| false),
            Dial::Full,
            "nor free for another peer"
        );
        p.unbind(peer, NO_USER);
        assert_eq!(p.of_qp(4), None, "freed with its last virtual QP");
        assert!(matches!(
            p.dial(&addr(20), 20, 1, 4, |_| false),
            Dial::Connect { peer: 0, .. }
        ));
    }

    /// Both nodes dial each other at once; whatever order the requests arrive in, the
    /// lower id's attempt becomes the one set, which the other adopts, and CONNECTs on
    /// both bind to it.
    #[test]
    fn both_at_once_through_the_table() {
        for order in [[0, 1], [1, 0]] {
            let (mut a, mut b) = (
                Peers::with_capacity(2, 1, 0, 2),
                Peers::with_capacity(2, 2, 0, 2),
            );
            let never = |_| false;
            assert!(matches!(
                a.dial(&addr(12), 2, 20, 0, |_| false),
                Dial::Connect { .. }
            ));
            assert!(matches!(
                b.dial(&addr(11), 1, 10, 0, |_| false),
                Dial::Connect { .. }
            ));
            let mut steps = [None, None];
            for e in order {
                if e == 0 {
                    steps[0] = a.request(&addr(12), 2, 20, 0, 1, never);
                } else {
                    steps[1] = b.request(&addr(11), 1, 10, 0, 1, never);
                }
            }
            let [Some(sa), Some(sb)] = steps else {
                panic!("room on both")
            };
            assert_eq!((sa.answer, sb.answer), (Answer::Refuse, Answer::Accept));
            assert_eq!(sb.close, None, "nothing of 2's was up");
            // 1's second connection joins 2's adoption; 2's own attempt was refused.
            let s1 = b.request(&addr(11), 1, 10, 1, 2, never).unwrap();
            assert_eq!((s1.answer, s1.peer), (Answer::Accept, sb.peer));
            assert!(!b.adopted(sb.peer, 0, 2, 2));
            assert!(b.adopted(sb.peer, 1, 2, 2), "complete");
            assert!(done(&mut a, sa.peer, Attempt::Established, 3));
            assert!(
                !done(&mut b, sb.peer, Attempt::Yielded, 3),
                "2 closes what it connected"
            );
            assert!(matches!(
                a.dial(&addr(12), 2, 20, 4, |_| false),
                Dial::Use { .. }
            ));
            assert!(matches!(
                b.dial(&addr(11), 1, 10, 4, |_| false),
                Dial::Use { .. }
            ));
        }
    }

    /// A request from a peer we have a set with means it lost it: ours goes (retired if
    /// bound, the new one elsewhere); a second connection with no adoption under way,
    /// or one from a peer we refuse, is refused.
    #[test]
    fn a_request_replaces_what_the_peer_lost() {
        let never = |_| false;
        let mut b = Peers::with_capacity(2, 2, 0, 2);
        assert_eq!(
            b.request(&addr(11), 1, 10, 1, 0, never).map(|s| s.answer),
            None,
            "no entry for a stray second connection"
        );
        let s = b.request(&addr(11), 1, 10, 0, 0, never).unwrap();
        b.adopted(s.peer, 0, 2, 0);
        b.adopted(s.peer, 1, 2, 0);
        b.bind(s.peer, NO_USER);
        let again = b.request(&addr(11), 1, 11, 0, 5, never).unwrap();
        assert_eq!(again.answer, Answer::Accept);
        assert_eq!((again.close, again.lost_node), (Some(s.peer), Some(1)));
        assert_ne!(
            again.peer, s.peer,
            "the old set's bound virtual QP keeps its slots"
        );
        assert!(b.get(s.peer).unwrap().retired);
        // A node with the lower id keeps a set it made against a late request.
        let mut a = Peers::with_capacity(2, 1, 0, 2);
        let Dial::Connect { peer, .. } = a.dial(&addr(12), 2, 20, 0, |_| false) else {
            panic!()
        };
        done(&mut a, peer, Attempt::Established, 1);
        let late = a.request(&addr(12), 2, 20, 0, 2, never).unwrap();
        assert_eq!((late.answer, late.close), (Answer::Refuse, None));
        // Unless it is broken: then the peer's new one is adopted.
        let fresh = a.request(&addr(12), 2, 20, 0, 3, |_| true).unwrap();
        assert_eq!((fresh.answer, fresh.close), (Answer::Accept, Some(peer)));
        let s2 = a.request(&addr(12), 2, 20, 1, 4, never).unwrap();
        assert_eq!(s2.answer, Answer::Accept);
    }

    /// A listen binds only to a QP of the set of the node whose Hello came on it, while
    /// that set is up, and not to a retired one.
    #[test]
    fn accept_binds_only_a_live_set_of_that_node() {
        let mut b = Peers::with_capacity(2, 1, 4, 2);
        let never = |_| false;
        assert_eq!(b.accept(&addr(11), 4), None, "no set yet");
        let s = b.request(&addr(11), 1, 10, 0, 0, never).unwrap();
        assert_eq!(
            b.accept(&addr(11), 4),
            None,
            "adopting, its QP not here yet"
        );
        b.adopted(s.peer, 0, 2, 0);
        assert_eq!(
            b.accept(&addr(11), 4),
            Some(s.peer),
            "adopting: its QP is there"
        );
        assert_eq!(b.accept(&addr(11), 5), None, "the second is not yet");
        b.adopted(s.peer, 1, 2, 0);
        let q = b.qps(s.peer);
        assert_eq!(b.accept(&addr(11), q.start + 1), Some(s.peer));
        assert_eq!(b.get(s.peer).unwrap().bound, 2, "each accept binds");
        assert_eq!(b.accept(&addr(12), q.start), None, "another node's Hello");
        assert_eq!(b.accept(&addr(11), q.end), None, "not a QP of the set");
        // The peer restarted: the old set retires (virtual QPs bound) and takes none.
        b.request(&addr(11), 1, 11, 0, 5, never).unwrap();
        assert!(b.get(s.peer).unwrap().retired);
        assert_eq!(b.accept(&addr(11), q.start), None);
    }

    /// The node's id comes after the table is made (once its address is known): the
    /// rule uses it for sets made before too.
    #[test]
    fn the_rule_uses_the_id_learned_late() {
        let mut p = Peers::with_capacity(2, 0, 0, 2);
        assert!(matches!(
            p.dial(&addr(12), 2, 20, 0, |_| false),
            Dial::Connect { .. }
        ));
        p.set_me(3);
        let s = p.request(&addr(12), 2, 20, 0, 1, |_| false).unwrap();
        assert_eq!(s.answer, Answer::Accept, "3 > 2: the peer's attempt wins");
    }

    /// Workers take dials oldest first, and a dial no worker took in
    /// [`DIAL_WAIT_MS`] fails (`Unreachable`, backing off), never waiting longer.
    #[test]
    fn dials_are_taken_oldest_first_and_never_wait_past_their_deadline() {
        let never = |_| false;
        let mut p = Peers::with_capacity(3, 1, 0, 2);
        for (n, t) in [(11, 0), (12, 5), (13, 10)] {
            let s = p.connect(&addr(n), 0, t, 1000 + n as u32, never);
            assert_eq!(s.outcome, Connect::InProgress);
        }
        // Entry 0's set is made and idle, so a later dial evicts it and takes its
        // place, first in the table: the oldest is still taken first.
        assert_eq!(p.take_job().map(|j| j.1), Some(addr(11)));
        let x = p.find(&addr(11)).unwrap();
        done(&mut p, x, Attempt::Established, 11);
        assert_eq!(
            p.connect(&addr(14), 0, 12, 2000, never).outcome,
            Connect::InProgress
        );
        assert_eq!(p.find(&addr(14)), Some(x), "entry 0, evicted");
        assert_eq!(p.take_job().map(|j| j.1), Some(addr(12)));
        // Waiting for a worker: in progress until the deadline, then failed.
        let late = 10 + DIAL_WAIT_MS;
        assert_eq!(
            p.connect(&addr(13), 0, late - 1, 3000, never).outcome,
            Connect::InProgress
        );
        assert_eq!(
            p.connect(&addr(13), 0, late, 3000, never).outcome,
            Connect::Unreachable
        );
        let e = p.get(p.find(&addr(13)).unwrap()).unwrap();
        assert!(!e.asked && matches!(e.set.state(), State::Backoff { .. }));
        assert_eq!(
            p.take_job().map(|j| j.1),
            Some(addr(14)),
            "13's job is gone"
        );
        assert_eq!(p.take_job(), None);
    }

    #[test]
    fn connect_decides_bind_dial_wait_and_refusals() {
        let mut p = Peers::with_capacity(1, 1, 4, 2);
        let never = |_| false;
        let step = p.connect(&[9; 16], 0, 0, NO_USER, never);
        assert_eq!(step.outcome, Connect::NotANode, "not IPv4-mapped");
        let step = p.connect(&addr(12), 0, 0, NO_USER, never);
        assert_eq!((step.outcome, step.close), (Connect::InProgress, None));
        assert!(p.job_waiting(), "a worker has a dial to make");
        assert_eq!(
            p.take_job(),
            Some((0, addr(12), 1)),
            "the set is asked for once"
        );
        assert!(!p.job_waiting(), "taken: a waiter kicks no worker");
        assert_eq!(p.take_job(), None);
        assert_eq!(
            p.connect(&addr(12), 0, 1, NO_USER, never).outcome,
            Connect::InProgress
        );
        done(&mut p, 0, Attempt::Failed, 2);
        assert_eq!(
            p.connect(&addr(12), 0, 3, NO_USER, never).outcome,
            Connect::Unreachable,
            "backing off"
        );
        let step = p.connect(&addr(12), 0, 200, NO_USER, never);
        assert_eq!(
            step.outcome,
            Connect::InProgress,
            "tried again after the backoff"
        );
        p.take_job();
        done(&mut p, 0, Attempt::Established, 201);
        assert_eq!(
            p.connect(&addr(12), 3, 202, NO_USER, never).outcome,
            Connect::Bind { peer: 0, slot: 5 },
            "service 3 on the set's second QP"
        );
        p.bind(0, NO_USER);
        assert_eq!(
            p.connect(&addr(13), 0, 203, NO_USER, never).outcome,
            Connect::Full
        );
        // The set broke: closed, the node's records dropped, a new set asked for (the
        // old entry retired: a virtual QP is bound; no entry is free for the new one).
        let step = p.connect(&addr(12), 0, 204, NO_USER, |_| true);
        assert_eq!(
            (step.close, step.lost_node, step.outcome),
            (Some(0), node_of(&addr(12)), Connect::Full)
        );
        p.unbind(0, NO_USER);
        assert_eq!(
            p.connect(&addr(12), 0, 205, NO_USER, never).outcome,
            Connect::InProgress
        );
        assert_eq!(node_of(&addr(12)), Some(u16::from_be_bytes([2, 12])));
    }

    /// A first contact binds once the set's first connection is up, to that one; the
    /// service's own QP is used once the rest is made behind it.
    #[test]
    fn a_first_contact_binds_at_the_first_connection() {
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        let never = |_| false;
        assert_eq!(
            p.connect(&addr(12), 3, 0, 7, never).outcome,
            Connect::InProgress
        );
        let (peer, _, attempt) = p.take_job().unwrap();
        assert_eq!(
            p.connect(&addr(12), 3, 1, 7, never).outcome,
            Connect::InProgress
        );
        assert!(p.first_up(peer, attempt));
        assert_eq!(
            p.connect(&addr(12), 3, 2, 7, never).outcome,
            Connect::Bind { peer, slot: 4 },
            "service 3's QP is not up yet: the first"
        );
        p.bind(peer, NO_USER);
        assert_eq!(
            p.next_tell(QpBits::EMPTY),
            Some((peer, 4, true)),
            "told on the first"
        );
        assert_eq!(p.accept(&addr(12), 5), None, "nothing on the second yet");
        assert_eq!(p.dialing(7), 1, "still the user's dial");
        assert_eq!(
            p.attempt_done(peer, attempt, Attempt::Established, 3),
            Ended::Set
        );
        assert_eq!(
            p.connect(&addr(12), 3, 4, 7, never).outcome,
            Connect::Bind { peer, slot: 5 }
        );
        assert_eq!(p.dialing(7), 0);
    }

    /// The rest of a partial set failing takes it: what was bound keeps the entry,
    /// retired (its virtual QPs fail), and the next CONNECT makes a set elsewhere; a
    /// partial set nothing was bound to backs off in place.
    #[test]
    fn a_partial_set_whose_rest_fails_is_lost() {
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        let never = |_| false;
        p.connect(&addr(12), 0, 0, NO_USER, never);
        let (peer, _, attempt) = p.take_job().unwrap();
        assert!(p.first_up(peer, attempt));
        p.bind(peer, NO_USER);
        assert_eq!(
            p.attempt_done(peer, attempt, Attempt::Failed, 1),
            Ended::Lost
        );
        assert!(p.get(peer).unwrap().retired);
        assert_eq!(
            p.next_tell(QpBits::EMPTY),
            None,
            "nothing told on a lost set"
        );
        assert_eq!(
            p.connect(&addr(12), 0, 2, NO_USER, never).outcome,
            Connect::InProgress
        );
        assert_ne!(p.find(&addr(12)), Some(peer), "not on the retired block");
        // Nothing bound: the entry stays, backing off.
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        p.connect(&addr(12), 0, 0, NO_USER, never);
        let (peer, _, attempt) = p.take_job().unwrap();
        assert!(p.first_up(peer, attempt));
        assert_eq!(
            p.attempt_done(peer, attempt, Attempt::Failed, 1),
            Ended::Lost
        );
        assert_eq!(p.find(&addr(12)), Some(peer));
        assert_eq!(
            p.connect(&addr(12), 0, 2, NO_USER, never).outcome,
            Connect::Unreachable
        );
    }

    /// A worker whose partial set was lost while it made the rest (found broken at a
    /// CONNECT, which began another attempt) installs nothing of it: its reports name
    /// the old attempt.
    #[test]
    fn a_worker_of_a_lost_attempt_installs_nothing() {
        let mut p = Peers::with_capacity(2, 1, 4, 2);
        p.connect(&addr(12), 0, 0, NO_USER, |_| false);
        let (peer, _, old) = p.take_job().unwrap();
        assert!(p.first_up(peer, old));
        let step = p.connect(&addr(12), 0, 1, NO_USER, |_| true);
        assert_eq!(
            (step.close, step.outcome),
            (Some(peer), Connect::InProgress)
        );
        let (again, _, new) = p.take_job().unwrap();
        assert_eq!(again, peer, "nothing bound: the same entry");
        assert!(!p.first_up(peer, old));
        assert_eq!(
            p.attempt_done(peer, old, Attempt::Established, 2),
            Ended::Dropped
        );
        assert_eq!(
            p.connect(&addr(12), 0, 3, NO_USER, |_| false).outcome,
            Connect::InProgress
        );
        assert!(p.first_up(peer, new));
        assert_eq!(
            p.attempt_done(peer, new, Attempt::Established, 4),
            Ended::Set
        );
    }

    /// An adoption half done is used; given up late, what was bound to it fails
    /// (retired), never reaching the set dialed after it.
    #[test]
    fn a_half_adopted_set_is_used_and_lost_whole() {
        let mut b = Peers::with_capacity(2, 2, 4, 2);
        let never = |_| false;
        let s = b.request(&addr(11), 1, 10, 0, 0, never).unwrap();
        assert_eq!(
            b.connect(&addr(11), 1, 1, NO_USER, never).outcome,
            Connect::InProgress
        );
        b.adopted(s.peer, 0, 2, 1);
        assert_eq!(
            b.connect(&addr(11), 1, 2, NO_USER, never).outcome,
            Connect::Bind {
                peer: s.peer,
                slot: 4
            }
        );
        b.bind(s.peer, NO_USER);
        let late = b.connect(&addr(11), 1, 1 + ADOPT_MS, NO_USER, never);
        assert_eq!(
            (late.close, late.outcome),
            (Some(s.peer), Connect::InProgress)
        );
        assert!(b.get(s.peer).unwrap().retired);
        assert_ne!(b.find(&addr(11)), Some(s.peer));
    }

    /// An adoption whose dialer is slow but within its own bound for each connection
    /// (a starved guest) is never given up: each of its connections asked for or up
    /// gives it ADOPT_MS again, so this node's CONNECT uses it and the peer's next
    /// connection joins it, however long the set takes as a whole.
    #[test]
    fn a_slow_adoption_making_progress_stands() {
        const { assert!(ADOPT_MS > SET_CONNECT_MS) };
        let mut b = Peers::with_capacity(2, 2, 4, 3);
        let never = |_| false;
        let s = b.request(&addr(11), 1, 10, 0, 0, never).unwrap();
        let mut now = SET_CONNECT_MS;
        assert!(
            !b.adopted(s.peer, 0, 3, now),
            "the first is up just within the dialer's bound"
        );
        now += SET_CONNECT_MS;
        let c = b.connect(&addr(11), 1, now, NO_USER, never);
        assert_eq!(
            (c.close, c.outcome),
            (
                None,
                Connect::Bind {
                    peer: s.peer,
                    slot: 4
                }
            )
        );
        let more = b.request(&addr(11), 1, 10, 1, now, never).unwrap();
        assert_eq!((more.answer, more.peer), (Answer::Accept, s.peer));
        now += SET_CONNECT_MS;
        assert!(!b.adopted(s.peer, 1, 3, now));
        now += SET_CONNECT_MS;
        assert_eq!(
            b.request(&addr(11), 1, 10, 2, now, never).map(|s| s.answer),
            Some(Answer::Accept)
        );
        now += SET_CONNECT_MS;
        assert!(
            b.adopted(s.peer, 2, 3, now),
            "the whole set, 5 bounds after its start"
        );
        assert_eq!(b.get(s.peer).unwrap().set.state().name(), "ready");
        // One that stops making progress is given up once ADOPT_MS has passed.
        let mut c = Peers::with_capacity(2, 2, 4, 2);
        let s = c.request(&addr(11), 1, 10, 0, 0, never).unwrap();
        c.adopted(s.peer, 0, 2, 5);
        assert_eq!(
            c.connect(&addr(11), 1, 4 + ADOPT_MS, NO_USER, never).close,
            None
        );
        assert_eq!(
            c.connect(&addr(11), 1, 5 + ADOPT_MS, NO_USER, never).close,
            Some(s.peer)
        );
        // A request repeated for a connection it has is no progress.
        let mut d = Peers::with_capacity(2, 2, 4, 3);
        let s = d.request(&addr(11), 1, 10, 0, 0, never).unwrap();
        d.adopted(s.peer, 0, 3, 0);
        assert!(d.request(&addr(11), 1, 10, 1, 1, never).is_some());
        d.adopted(s.peer, 1, 3, 1);
        assert!(
            d.request(&addr(11), 1, 10, 1, ADOPT_MS, never).is_some(),
            "joins, renews nothing"
        );
        assert_eq!(
            d.connect(&addr(11), 1, 1 + ADOPT_MS, NO_USER, never).close,
            Some(s.peer)
        );
    }
}
