// SPDX-License-Identifier: GPL-2.0
//! A device's connection sets to peer kernels: abi's peer table
//! (abi/src/cluster/peers.rs), which decides, over cm.c's connections, which this file
//! holds and closes, under the membership lock.
//!
//! A CONNECT naming another node's address binds to a physical QP of the device's set to
//! that node, in the slots after the pool's (abi's `qp_budget`: [`QPS_PER_SET`] per
//! set, so abi's recovery groups a set's QPs as it groups a loopback pair). When there is
//! no set yet, the membership answers `EINPROGRESS`: the engine stops at the CONNECT
//! (`Stall::Remote`), and one of the device's workers makes the set with no lock held
//! (devctx's `dial`, one rdma_cm connection per QP, milliseconds), while the CONNECT and
//! others to the node wait for its first connection: that one is installed as soon as it
//! is up ([`PeerSets::first_up`]) and they bind to it, while the worker makes the rest
//! behind them; every later CONNECT binds in microseconds. A set whose connections broke (the
//! peer disconnected or went) is closed at the next CONNECT, which builds a new one; a
//! failed attempt backs off (abi's conn_set), and CONNECTs meanwhile fail with
//! `Unreachable`.
//!
//! One set joins a pair of nodes: a peer's request for a set is answered by abi's rule
//! (conn_set: the lower id's attempt wins when both dial at once) and the accepted
//! connections are adopted into the peer's entry ([`PeerSets::request`],
//! [`PeerSets::adopt`], called by cm.c's listener), so CONNECTs on both nodes bind to
//! the one set.
//!
//! A node's id is the low 16 bits of its IPv4 address (as in its MetaServer record);
//! one-sided requests on a set reach the peer's exports imported by name (meta/mod.rs);
//! two-sided messages cross it as abi's far.rs says, its notices received into kernel
//! buffers cm.c keeps posted on every set QP. Not yet: the peer's incarnation checked
//! at CONNECT (0 for every node here).

use kernel::prelude::*;

use core::sync::atomic::Ordering;

use crate::abi::cluster::conn_set::{Answer, Attempt, State};
use crate::abi::cluster::notice::Notice;
use crate::abi::cluster::peers::{node_of, Connect, Ended, Peers, NO_USER};
use crate::abi::engine::{Connection, QpBits};
use crate::abi::errno::Errno;
use crate::engine::backend::POOL_QPS;
use crate::engine::backend::SetEnd;
use crate::engine::fabric::Shared;
use crate::shim::{self, CmConn, IbQp};
use crate::engine::store::{KBuf, KStore};

pub(crate) use crate::abi::engine::qp_budget::{PEER_SETS_MAX, QPS_PER_SET};

/// Peer nodes a device keeps sets to (`max_peers`, within 1..=[`PEER_SETS_MAX`]).
pub(crate) fn max_peers() -> usize {
    // SAFETY: reads a module parameter.
    let n = unsafe { shim::krcore_shim_max_peers() } as usize;
    n.clamp(1, PEER_SETS_MAX)
}

/// One connected QP of a set.
#[derive(Clone, Copy)]
pub(crate) struct PeerQp {
    /// cm.c's handle.
    pub(crate) conn: *mut CmConn,
    pub(crate) qp: *mut IbQp,
    pub(crate) qpn: u32,
}

/// A set to connect, taken by the caller that dials.
#[derive(Clone, Copy)]
pub(crate) struct DialJob {
    peer: u32,
    /// The peer's address (an IPv4-mapped GID).
    pub(crate) addr: [u8; 16],
    /// The attempt's number (abi's `Peer::attempt`): its reports name it.
    attempt: u32,
}

/// The device's sets.
pub(crate) struct PeerSets {
    table: Peers<KStore>,
    /// Slot `i` (physical QP `POOL_QPS + i`), [`QPS_PER_SET`] for each entry.
    qps: KBuf<Option<PeerQp>>,
}

// SAFETY: the handles are used only under the membership mutex.
unsafe impl Send for PeerSets {}

impl PeerSets {
    /// Writes the peer table (abi's `Peers::write`) at `now_ms`.
    pub(crate) fn write(&self, now_ms: i64, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        self.table.write(now_ms, w)
    }

    /// No sets yet, for node `me`, room for `peers` (at most [`PEER_SETS_MAX`]).
    pub(crate) fn new(me: u16, peers: usize) -> Result<PeerSets> {
        let peers = peers.min(PEER_SETS_MAX);
        let table = KBuf::filled(peers, None, GFP_KERNEL)?;
        Ok(PeerSets {
            table: Peers::new(table, me, POOL_QPS as u32, QPS_PER_SET as u32),
            qps: KBuf::filled(peers * QPS_PER_SET, None, GFP_KERNEL)?,
        })
    }

    /// This node's address is `own` (the pool's GID): its id, for the both-at-once
    /// rule.
    pub(crate) fn set_me(&mut self, own: &[u8; 16]) {
        if let Some(me) = node_of(own) {
            self.table.set_me(me);
        }
    }

    /// A CONNECT at `now_ms` to the node at `addr` (not this device's), for `service`:
    /// abi's decision (`Peers::connect`), carried out.
    pub(crate) fn connect(
        &mut self,
        shared: &Shared,
        addr: &[u8; 16],
        service: u32,
        now_ms: i64,
        user: u32,
    ) -> Result<Connection, Errno> {
        // Only the node's own entry is asked about: look first, with the handles.
        // Asked of the node's own entry, and of entries that might be evicted.
        let qps = self.qps.as_ref();
        let step = self
            .table
            .connect(addr, service, now_ms, user, |p| set_broken(shared, qps, p));
        self.drop_sets(shared, step.close, step.lost_node, step.evicted);
        match step.outcome {
            Connect::Bind { peer, slot } => {
                let q = self.qps.as_ref()[(slot as usize) - POOL_QPS].ok_or(Errno::EHOSTUNREACH)?;
                self.table.bind(peer, user);
                self.tell(shared);
                Ok(Connection {
                    qp: slot,
                    qpn: q.qpn,
                    peer: true,
                })
            }
            Connect::InProgress => Err(Errno::EINPROGRESS),
            Connect::Unreachable => Err(Errno::EHOSTUNREACH),
            Connect::Full => Err(Errno::ENOSPC),
            Connect::Quota => Err(Errno::EDQUOT),
            Connect::NotANode => Err(Errno::ENETUNREACH),
        }
    }

    /// Starts a set to `addr` at `now_ms` if there is none (prewarming): whether a dial
    /// is due.
    pub(crate) fn prewarm(&mut self, shared: &Shared, addr: &[u8; 16], now_ms: i64) -> bool {
        matches!(self.connect(shared, addr, 0, now_ms, NO_USER), Err(Errno::EINPROGRESS))
    }

    /// The number of the first QP of the set to `addr`, when it is up.
    pub(crate) fn ready(&self, addr: &[u8; 16]) -> Option<u32> {
        let p = self.table.find(addr)?;
        matches!(self.table.get(p)?.set.state(), State::Ready { .. })
            .then(|| self.qps.as_ref()[self.table.qps(p).start as usize - POOL_QPS].map(|q| q.qpn))
            .flatten()
    }

    /// The node id of the peer whose set physical QP `qp` belongs to.
    pub(crate) fn node_of_qp(&self, qp: u32) -> Option<u16> {
        let addr = self.table.get(self.table.of_qp(qp)?)?.addr;
        Some(u16::from_be_bytes([addr[14], addr[15]]))
    }

    /// A listen takes a peer's end whose Hello came on physical QP `qp` from `addr`
    /// (abi's `Peers::accept` decides): bound to that QP.
    pub(crate) fn accept(
        &mut self,
        shared: &Shared,
        addr: &[u8; 16],
        qp: u32,
    ) -> Result<Connection, Errno> {
        let slot = (qp as usize).checked_sub(POOL_QPS).ok_or(Errno::EHOSTUNREACH)?;
        let q = (*self.qps.as_ref().get(slot).ok_or(Errno::EHOSTUNREACH)?).ok_or(Errno::EHOSTUNREACH)?;
        self.table.accept(addr, qp).ok_or(Errno::EHOSTUNREACH)?;
        self.tell(shared);
        Ok(Connection {
            qp,
            qpn: q.qpn,
            peer: true,
        })
    }

    /// A virtual QP bound to physical QP `qp` for user `user` was released.
    pub(crate) fn disconnect(&mut self, shared: &Shared, qp: u32, user: u32) {
        if let Some(p) = self.table.of_qp(qp) {
            self.table.unbind(p, user);
            self.tell(shared);
        }
    }

    /// The peer whose set QP `qp` is said whether virtual QPs of its own are bound to
    /// the set (a `Use` notice): while they are, the set is never evicted here.
    pub(crate) fn far_use(&mut self, qp: u32, busy: bool) {
        self.table.far_use(qp, busy);
    }

    /// Tells each peer of a change in this node's use of its set (abi's
    /// `Peers::next_tell`), on the set's first QP; one with no room for the notice is
    /// told once a notice of that QP completes (`Shared::tells_waiting`).
    pub(crate) fn tell(&mut self, shared: &Shared) {
        // Set before trying: a notice completing while a post finds no room sees it,
        // and tells again once this lock is let go.
        shared.tells_waiting.store(true, Ordering::SeqCst);
        let (mut tried, mut waiting) = (QpBits::EMPTY, false);
        while let Some((peer, slot, busy)) = self.table.next_tell(tried) {
            tried.insert(slot);
            if shared.post_notice(slot, &Notice::Use { busy }) {
                self.table.told(peer, busy);
            } else {
                // A failed QP completes no notice: its set goes, and the word with it.
                waiting |= !shared.qps[slot as usize].lock().acct.failed();
            }
        }
        shared.tells_waiting.store(waiting, Ordering::SeqCst);
    }

    /// Whether a CONNECT asked for a set the device's worker did not take yet.
    pub(crate) fn job_waiting(&self) -> bool {
        self.table.job_waiting()
    }

    /// A set to connect, if a CONNECT asked for one and the worker did not take it yet.
    pub(crate) fn take_job(&mut self) -> Option<DialJob> {
        self.table
            .take_job()
            .map(|(peer, addr, attempt)| DialJob { peer, addr, attempt })
    }

    /// The first connection of `job`'s set is up: installed in the entry's first slot,
    /// where CONNECTs waiting for the set bind at once while the caller makes the rest
    /// (abi's `Peers::first_up`), unless the attempt was given up meanwhile (then it is
    /// closed). The slot installed, for the recovery to forget.
    pub(crate) fn first_up(&mut self, shared: &Shared, job: &DialJob, q: PeerQp) -> Option<u32> {
        if !self.table.first_up(job.peer, job.attempt) {
            shared.let_go(q.conn);
            return None;
        }
        let slot = self.table.qps(job.peer).start;
        self.install(shared, slot, q, &job.addr);
        log_set(&job.addr, format_args!("first connection up, dialed here: in use"));
        forget_cached(shared, &job.addr);
        // Bound while it was being made (a listen's accept): told now it is up.
        self.tell(shared);
        Some(slot)
    }

    /// The caller dialed `job` at `now_ms`, ending `how`: `rest` holds the QPs it
    /// connected after the first ([`first_up`](Self::first_up) installed that one),
    /// all of them when established. When the attempt became the set they are
    /// installed into their slots (whose accounting starts anew: an earlier set's there
    /// failed); otherwise (it failed, or the peer's set was adopted meanwhile) they are
    /// closed, and so is the partial set's first when the attempt's end takes it
    /// (abi's `Ended::Lost`). The slots installed, for the recovery to forget.
    pub(crate) fn dialed(
        &mut self,
        shared: &Shared,
        job: DialJob,
        rest: &[Option<PeerQp>; QPS_PER_SET - 1],
        how: Attempt,
        now_ms: i64,
    ) -> Option<core::ops::Range<u32>> {
        let how = match how {
            Attempt::Established if !rest.iter().all(Option::is_some) => Attempt::Failed,
            h => h,
        };
        let ended = self.table.attempt_done(job.peer, job.attempt, how, now_ms);
        let slots = self.table.qps(job.peer);
        for (slot, q) in slots.clone().skip(1).zip(rest.iter()) {
            let Some(q) = *q else { continue };
            if ended == Ended::Set {
                self.install(shared, slot, q, &job.addr);
            } else {
                shared.let_go(q.conn);
            }
        }
        match ended {
            Ended::Set => log_set(&job.addr, format_args!("up, dialed here")),
            Ended::Dropped => {}
            Ended::Lost => {
                log_set(&job.addr, format_args!("lost: the rest of it could not be made"));
                self.close(shared, job.peer);
                forget_cached(shared, &job.addr);
            }
        }
        (ended == Ended::Set).then_some(slots)
    }

    /// Installs a connected QP of a set to `addr` in `slot`, its accounting started
    /// anew.
    fn install(&mut self, shared: &Shared, slot: u32, q: PeerQp, addr: &[u8; 16]) {
        let end = SetEnd {
            conn: q.conn,
            gid: *addr,
        };
        shared.install_qp(slot as usize, q.qp, q.qpn, Some(end));
        self.qps.as_mut()[slot as usize - POOL_QPS] = Some(q);
        // Only now may the peer's notices land: a notice completion for a QP number the
        // router does not know yet would be dropped (a lost Revoke goes unanswered).
        // SAFETY: a live connection this set holds (cm.c's mutex is innermost).
        unsafe { shim::krcore_cm_notices_start(q.conn) };
    }

    /// The peer kernel at `addr` asks at `now_ms` for connection `index` of a set
    /// (cm.c's listener, before accepting): abi's answer (`Peers::request`), with what
    /// it drops closed first. `Ok` to accept; `EALREADY` when our own attempt wins.
    pub(crate) fn request(
        &mut self,
        shared: &Shared,
        addr: &[u8; 16],
        index: u32,
        now_ms: i64,
    ) -> Result<(), Errno> {
        let node = node_of(addr).ok_or(Errno::EINVAL)?;
        if index as usize >= QPS_PER_SET {
            return Err(Errno::EINVAL);
        }
        let qps = self.qps.as_ref();
        let step = self
            .table
            .request(addr, node, 0, index, now_ms, |p| set_broken(shared, qps, p))
            .ok_or(Errno::ENOSPC)?;
        self.drop_sets(shared, step.close, step.lost_node, step.evicted);
        match step.answer {
            Answer::Accept => Ok(()),
            Answer::Refuse => {
                log_set(addr, format_args!("refused the peer's attempt: ours wins (both at once)"));
                Err(Errno::EALREADY)
            }
        }
    }

    /// Connection `index` of the set the peer at `addr` asked for was accepted (cm.c):
    /// installed into the adopting entry's slot, when that adoption is still under way.
    /// The slot it was installed in, if it was, and the set's slots, when the set is
    /// now complete: for the recovery to forget (each as it is installed).
    pub(crate) fn adopt(
        &mut self,
        shared: &Shared,
        addr: &[u8; 16],
        index: u32,
        q: PeerQp,
    ) -> (Option<u32>, Option<core::ops::Range<u32>>) {
        let Some(p) = self.table.find(addr) else {
            return (None, None);
        };
        let adopting = self.table.get(p).map(|e| e.set.state());
        if !matches!(adopting, Some(State::Adopting { .. })) || index as usize >= QPS_PER_SET {
            return (None, None);
        }
        let slot = self.table.qps(p).start + index;
        if let Some(old) = self.qps.as_mut()[slot as usize - POOL_QPS].take() {
            // A connection of an adoption given up and begun again: replaced.
            shared.install_qp(slot as usize, core::ptr::null_mut(), old.qpn, None);
            shared.let_go(old.conn);
        }
        // SAFETY: `q.conn` is the live connection cm.c just accepted and listed.
        if !unsafe { shim::krcore_cm_own(q.conn) } {
            return (None, None);
        }
        self.install(shared, slot, q, addr);
        let now = crate::clock::coarse_ms();
        if !self.table.adopted(p, index, QPS_PER_SET as u32, now) {
            return (Some(slot), None);
        }
        log_set(addr, format_args!("up, adopted (the peer dialed it)"));
        forget_cached(shared, addr);
        self.tell(shared);
        (Some(slot), Some(self.table.qps(p)))
    }

    /// What a step of abi's table lets go: the node's own set (`close`, its node's
    /// records `lost`) and another node's entry taken for it (`evicted`), each closed
    /// and its node's cached records dropped.
    fn drop_sets(
        &mut self,
        shared: &Shared,
        close: Option<u32>,
        lost: Option<u16>,
        evicted: Option<(u32, u16)>,
    ) {
        let (gone, node) = (evicted.map(|e| e.0), evicted.map(|e| e.1));
        for p in [close, gone].into_iter().flatten() {
            self.close(shared, p);
        }
        for n in [lost, node].into_iter().flatten() {
            shared.meta.peer_lost(n);
        }
    }

    /// Closes entry `peer`'s set: nothing posts on its QPs from here.
    fn close(&mut self, shared: &Shared, peer: u32) {
        for s in self.table.qps(peer) {
            if let Some(q) = self.qps.as_mut()[s as usize - POOL_QPS].take() {
                // The number stays: the slot's accounting is still swept (fabric.rs).
                shared.install_qp(s as usize, core::ptr::null_mut(), q.qpn, None);
                shared.let_go(q.conn);
            }
        }
    }

    /// The device is going: cm.c tore every connection down already; let go of the
    /// handles (dialed and adopted alike; the drains' go with theirs).
    pub(crate) fn forget(&mut self) {
        for q in self.qps.as_mut().iter_mut().filter_map(Option::take) {
            // SAFETY: a handle cm_connect gave, released once.
            unsafe { shim::krcore_shim_cm_put(q.conn) };
        }
    }
}

/// Whether a connection of entry `peer`'s set broke: the CM said so (the peer
/// disconnected, its device went), or the recovery failed one of its QPs (a peer that
/// vanished: retries exhausted, or requests stuck past the deadline). Only the
/// connections installed count: a slot a partly made set has not filled yet still
/// holds its earlier set's failed accounting (kept for the sweep), which says nothing
/// of this set. `qps`: the set slots' connections (a free function, for abi's
/// decisions that ask it of any entry while the table is borrowed).
fn set_broken(shared: &Shared, qps: &[Option<PeerQp>], peer: u32) -> bool {
    let first = peer as usize * QPS_PER_SET;
    (first..first + QPS_PER_SET).any(|k| {
        let Some(q) = qps.get(k).copied().flatten() else {
            return false;
        };
        shared.qps[POOL_QPS + k].lock().acct.failed()
            // SAFETY: a live handle (released only by `close` and `forget`).
            || unsafe { shim::krcore_shim_cm_broken(q.conn) }
    })
}

/// A set to the node at `addr` came up: what was cached of its exports before goes. A
/// lookup with no set (RESOLVE_NAME) cached what no Revoke can reach, and the node may
/// have revoked or restarted since.
fn forget_cached(shared: &Shared, addr: &[u8; 16]) {
    if let Some(node) = node_of(addr) {
        shared.meta.peer_lost(node);
    }
}

/// Says what became of the set to the node at `addr`.
pub(crate) fn log_set(addr: &[u8; 16], what: core::fmt::Arguments<'_>) {
    let [a, b, c, d] = [addr[12], addr[13], addr[14], addr[15]];
    pr_info!("set to {a}.{b}.{c}.{d}: {what}\n");
}
