// SPDX-License-Identifier: GPL-2.0
//! Routing: the device CQ's completions polled, under the CQ's lock, and handed to the
//! rings they belong to (abi's routing), the peer kernels' notices taken in, failed QPs
//! recovered, and the CQ armed while anyone sleeps or listens.

use core::sync::atomic::Ordering;

use crate::abi::cluster::notice::{Notice, NOTICE_LEN};
use crate::abi::engine::{
    complete_wc, Completion, Fabric, FAR_WRITE_WR_ID, is_backend_wr_id, Links,
    notice_recv_index, NOTICE_WR_ID, QpBits, Qps, sweep, Wc, WcStatus,
};
use crate::engine::backend::{CqPoll, SetEnd, POOL_QPS, QPS};
use crate::engine::fabric::MemberState;
use crate::cluster::peer::QPS_PER_SET;
use crate::shim::{self, WcC};

use super::{DevCtx, POLL_BATCH};

/// Passes a CQ event's work makes before it yields its worker (see `cq_event`).
const EVENT_PASSES: u32 = 16;

impl DevCtx {
    /// The CQ had an event (cq_events.rs): route what it holds, waking the rings that
    /// gained completions, and arm it again while anyone sleeps or listens, or a set is
    /// up: a peer's notices must be taken (and their receives posted again) with nobody
    /// here waiting, or the peer's QP meets no receive and stalls.
    /// Bounded: a removal under way (its flushed completions must not keep it
    /// polling a CQ nobody routes) ends it unarmed, and after [`EVENT_PASSES`] passes
    /// that each found more it queues itself again rather than hold its worker.
    pub(crate) fn cq_event(&self) {
        for _ in 0..EVENT_PASSES {
            self.route();
            if self.dead.load(Ordering::Acquire) {
                return;
            }
            let armed_for = self.sleepers.load(Ordering::Acquire)
                + self.listeners.load(Ordering::Acquire)
                + u32::from(self.shared.sets_live());
            if armed_for == 0 || !self.arm_cq() {
                return;
            }
        }
        // Under the CQ's lock, which the removal takes to mark the device dying before
        // it stops the work: a kick from a user's call (set_eventfd) then comes before
        // the stop or not at all.
        let _cq = self.cq.lock();
        if !self.dead.load(Ordering::Acquire) {
            self.events.kick();
        }
    }

    /// Arms the CQ for its next event; `true` when it holds completions already (route
    /// again, now polling it, rather than wait).
    pub(crate) fn arm_cq(&self) -> bool {
        let missed = self.arm.lock().arm();
        if missed {
            self.unpolled.store(true, Ordering::Release);
        }
        missed
    }

    /// Routes what the CQ and the recovery hold to the rings (each to its inbox), then
    /// has every ring that gained completions take them in, publish and wake, and frees
    /// closed rings with nothing left. Cheap when nothing is outstanding anywhere and no
    /// ring is marked (NOP and control traffic never take the CQ's lock). Returns the
    /// completions polled.
    pub(crate) fn route(&self) -> usize {
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

    /// Routes completion `c` of request `id` to its ring's inbox.
    pub(crate) fn deliver(&self, id: crate::abi::engine::WrId, c: Completion) {
        if let Some(r) = self.rings.at(id.ring as usize) {
            r.deliver(id, c);
            self.dirty.swap(true, Ordering::AcqRel);
        }
    }

    /// Has every marked ring take in its completions, publish and wake (its sleepers
    /// counted under its lock); frees closed rings with nothing left. Called under the
    /// CQ's lock, so completions reach each ring in routing order.
    pub(crate) fn flush_rings(&self) {
        self.rings.each(|slot, r| {
            if !r.take_dirty() {
                return;
            }
            let mut ctx = r.ctx.lock();
            r.absorb(&mut ctx);
            if ctx.engine().is_closed() {
                if ctx.engine().release_idle(&self.shared) {
                    let last = ctx.engine().stats();
                    drop(ctx);
                    self.rings.free(slot, &r, &last);
                }
            } else {
                // Offers its listens were nudged for (abi's listen.rs): under the ring's
                // lock, then the membership's and a shard's, in the order above.
                ctx.engine().accept_offers(&self.shared);
                ctx.engine().publish();
                ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
            }
        });
    }

    /// One step of abi's recovery of failed pooled QPs (engine/recovery.rs): sends that
    /// waited too long for a receive fail and what the busy links shards owe is routed,
    /// stuck QPs fail, each under its own lock; then, only if a QP failed or is being
    /// recovered, under the membership lock, pairs fail, flush and are re-armed
    /// together. Nonzero when rings may have new CQEs.
    pub(crate) fn recover(&self) -> usize {
        let now = crate::clock::now_ms();
        let busy = self.shared.links_busy();
        let route = |id, c| self.deliver(id, c);
        let (mut n, failed) = sweep(&self.shared, busy, self.deadline_ms, now, route);
        // The membership lock only while a QP is failed or being recovered.
        if !failed.is_empty() || self.shared.members_busy.load(Ordering::Acquire) {
            let mut m = self.shared.members();
            let MemberState { hw, recovery, .. } = &mut *m.g;
            let before = recovery.recovered();
            n += recovery.step(&self.shared, hw, failed, now, route);
            if recovery.recovered() != before {
                crate::inspect::trace_recovery(failed.first().unwrap_or(0), recovery.recovered());
            }
        }
        self.say_failed_sets(failed);
        n
    }

    /// Says in the kernel log, once per failure, that a set's QP failed and why: every
    /// message link on it ends (its virtual QPs' requests fail), and the next CONNECT
    /// to that node makes a new set. Rare and visible to users, so not left to dynamic
    /// debug: a run that fails for it says so.
    fn say_failed_sets(&self, failed: QpBits) {
        let sets = failed - QpBits::range(0, POOL_QPS as u32);
        let new = sets - self.failed_sets.swap(sets);
        for i in new.iter().map(|i| i as usize).filter(|&i| i < self.shared.qps.len()) {
            let (why, peer) = {
                let c = self.shared.qps[i].lock();
                (c.acct.fail_reason(), c.post.peer)
            };
            let qpn = self.shared.qpns[i].load(Ordering::Relaxed);
            if let Some(SetEnd { gid, .. }) = peer {
                crate::cluster::peer::log_set(
                    &gid,
                    format_args!("QP {qpn} failed ({}): its message links end", why.name()),
                );
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
                if self.shared.drain_marker(c.wr_id) {
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
    pub(crate) fn wc(&self, c: &WcC) -> Option<(u32, Wc)> {
        let qp = self.shared.qp_index(c.qp_num)?;
        Some((
            qp,
            Wc {
                wr_id: c.wr_id,
                status: WcStatus::from_ib(c.status),
                byte_len: c.byte_len,
                imm: (c.has_imm != 0).then_some(c.imm),
                recv: c.recv != 0,
                invalidated: (c.has_inv != 0).then_some(c.inv_rkey),
            },
        ))
    }

    /// Routes one work completion of physical QP `qp` to the rings it completes (or to
    /// the recovery, for its own requests).
    pub(crate) fn route_wc(&self, qp: u32, wc: &Wc) {
        if wc.status != WcStatus::Success && qp as usize >= POOL_QPS {
            self.shared.fail_set_qp(qp);
        }
        if wc.wr_id == NOTICE_WR_ID {
            // Room for the next notice (the sweep posts the links' that wait for it).
            self.shared.qp(qp, |q, _| q.notice_done());
            self.shared.flush_revocations();
            if self.shared.tells_waiting.load(Ordering::Acquire) {
                let mut m = self.shared.members();
                let MemberState { peers, .. } = &mut *m.g;
                peers.tell(&self.shared);
            }
            return;
        }
        if let Some(i) = notice_recv_index(wc.wr_id) {
            if wc.recv && wc.status == WcStatus::Success {
                self.notice_in(qp, i, wc.byte_len, wc.invalidated);
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
    fn notice_in(&self, qp: u32, i: u32, byte_len: u32, inv: Option<u32>) {
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
        self.take_notice(&gid, qp, &b, byte_len, inv);
        // SAFETY: reads a module parameter.
        if unsafe { shim::krcore_shim_test_notice_echo() } {
            // Test only: as if the peer had sent it twice, then a short SEND.
            self.take_notice(&gid, qp, &b, byte_len, inv);
            self.take_notice(&gid, qp, &b, byte_len / 2, inv);
        }
    }

    /// The peer kernel at `gid` sent `byte_len` bytes of `b` on set QP `qp` (a SEND that
    /// closed key `inv` here, if it said so): a notice for its links shard, or about an
    /// export.
    fn take_notice(
        &self,
        gid: &[u8; 16],
        qp: u32,
        b: &[u8; NOTICE_LEN],
        byte_len: u32,
        inv: Option<u32>,
    ) {
        // A short or malformed notice is dropped and counted (a peer of another
        // version, a bug, or a hostile kernel).
        let Ok(n) = Notice::received(b, byte_len) else {
            self.bad_notices.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if inv.is_some() && !n.may_invalidate() {
            self.bad_notices.fetch_add(1, Ordering::Relaxed);
            self.shared.fail_set_qp(qp);
            return;
        }
        match (n, n.shard(gid, self.shared.shards())) {
            // abi's shard is one of ours (a made-up id names none).
            (_, Some(k)) => self.shared.shard(k).on_notice(gid, qp, n, inv, &self.shared),
            (Notice::Revoke { rkey }, _) => self.revoked_far(gid, qp, rkey),
            (Notice::Use { busy }, _) => self.shared.members().g.peers.far_use(qp, busy),
            (Notice::Farewell { tag }, _) => {
                // Under the QP's lock, as `notice_in` reads the connection.
                let c = self.shared.qps[qp as usize].lock();
                // SAFETY: a live connection (see `notice_in`); the tag is TAG_LEN bytes.
                let proved = c.post.peer.is_some_and(|end| unsafe {
                    shim::krcore_shim_cm_farewell(end.conn, tag.as_ptr())
                });
                if !proved {
                    // A farewell no key made: a forgery (or a bug), changing nothing.
                    self.bad_notices.fetch_add(1, Ordering::Relaxed);
                }
            }
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
    pub(crate) fn revoked_far(&self, gid: &[u8; 16], qp: u32, rkey: u32) {
        if let Some(node) = crate::abi::cluster::peers::node_of(gid) {
            self.shared.meta.revoked_far(node, rkey);
        }
        // The set the Revoke came on: its QPs are where the node's live imports are
        // bound. (An earlier set of the same node, retired with virtual QPs still bound
        // after the node restarted, may come first in the slots: its QPs failed, and
        // what is bound to them fails anyway.)
        let first = (qp as usize)
            .checked_sub(POOL_QPS)
            .filter(|_| (qp as usize) < QPS)
            .map(|k| (POOL_QPS + k - k % QPS_PER_SET) as u32);
        if let Some(first) = first {
            let set = first..first + QPS_PER_SET as u32;
            self.rings.each(|_, r| {
                r.ctx.lock().engine().revoke_far(rkey, set.clone());
            });
        }
        if !self.shared.revocations.lock().owe_ack(qp, rkey) {
            // No room to answer: the peer's wait ends at its deadline, failing the QP.
            return;
        }
        self.shared.flush_revocations();
    }

    /// Closed rings may be waiting for a revocation to finish before their memory goes:
    /// the router looks at them again.
    pub(crate) fn touch_closed_rings(&self) {
        self.rings.each(|_, r| r.touch());
        self.dirty.store(true, Ordering::Release);
    }
}
