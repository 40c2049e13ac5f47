//! Recovery of failed physical QPs, a connected group at a time (a loopback RC pair
//! restarts together: both ends go back to PSN 0).
//!
//! A QP the engine reports failed has its whole group moved to the error state, each
//! with a flush marker posted behind its requests (a signaled request whose wr_id no
//! ring can own). A QP has settled once its marker completed and its receives flushed,
//! or once [`FLUSH_PATIENCE_MS`] passed (a NIC that lost the marker). When every QP of
//! the group has settled, the engine retires what is still owed ([`PhysQp::recycle`])
//! and the backend resets and reconnects the group. A group the backend cannot re-arm
//! stays failed for good.
//!
//! Nothing waits forever: a QP whose send queue made no progress for the deadline (a
//! peer or NIC that never answers, despite the wire's finite retries) is failed here
//! with `Deadline`, which its requests then complete with; a SEND that waited the
//! deadline for a receive fails with `NoReceiver` (see [`message`](super::message)).
//! The step also expires waiting sends and routes the completions each shard of
//! [`Messages`](super::message::Messages) owes to rings, a shard at a time.

use super::cqe::Reason;
use super::errno::Errno;
use super::fabric::{Links, Qps};
use super::qp_bits::{QpBits, MAX_QPS};
use super::ring_state::Completion;
use super::wrid::{backend_wr_id, is_backend_wr_id, WrId};
use super::Store;

/// How long a failed QP may take to flush before its group is re-armed anyway.
pub const FLUSH_PATIENCE_MS: i64 = 500;

/// The default deadline of a send request: past it with no completion on its QP, the
/// QP is failed and its requests complete with `Deadline` (the module's
/// `request_timeout_ms` sets it). The wire's own retries end far sooner on a live
/// fabric.
pub const DEFAULT_DEADLINE_MS: i64 = 5_000;

/// The hardware half of recovery: what only the backend can do to its QPs.
pub trait Rearm {
    /// Moves QP `qp` to the error state and posts `marker` (a signaled request) behind
    /// its requests; `false` when the marker could not be posted.
    fn to_error(&mut self, qp: u32, marker: u64) -> bool;
    /// Resets the `n` QPs from `first` on and connects them again.
    fn rearm(&mut self, first: u32, n: u32) -> Result<(), Errno>;
}

/// The part of a recovery step that takes no device-wide lock, at time `now_ms`, run
/// by every routing that may have work: one QP's section at a time, fails the QPs
/// whose send queue made no progress for `deadline_ms` with `Deadline`; if any QP is
/// failed, ends the message links across nodes on it in every shard; then in each
/// shard of `busy` (a bit each: those whose lock was last let go with sends waiting,
/// notices due or completions owed) and each the links' ending left owing, one shard
/// at a time, expires the sends that waited more than `deadline_ms` for a receive,
/// posts the notices due and routes what the shard owes. Returns the completions
/// routed and the failed QPs: if any, or while the [`Recovery`] is not
/// [`quiet`](Recovery::quiet), its [`step`](Recovery::step) follows under the
/// membership lock.
pub fn sweep<S: Store>(
    f: &(impl Links<S> + ?Sized),
    busy: u32,
    deadline_ms: i64,
    now_ms: i64,
    route: impl FnMut(WrId, Completion),
) -> (usize, QpBits) {
    let mut failed = QpBits::EMPTY;
    for i in 0..f.count().min(MAX_QPS) {
        if !f.in_use(i as u32) {
            continue;
        }
        let fl = f.qp(i as u32, |q, _| {
            if !q.failed() && q.stuck(now_ms, deadline_ms) {
                q.fail_with(Reason::Deadline);
            }
            q.failed()
        });
        if fl {
            failed.insert(i as u32);
        }
    }
    // Message links across nodes on a failed QP end (see `far`); what that owes is
    // routed with the rest.
    let mut busy = busy;
    if !failed.is_empty() {
        for k in 0..f.shards().min(32) {
            let mut s = f.shard(k);
            s.fail_far(failed, f);
            if !s.quiet() {
                busy |= 1 << k;
            }
        }
    }
    let owed = settle_links(f, busy, deadline_ms, now_ms, route);
    (owed, failed)
}

/// The links' part of [`sweep`]: in each shard of `busy`, one at a time, expires the
/// sends that waited more than `deadline_ms` at `now_ms` and routes what it owes.
/// Returns the completions routed.
pub fn settle_links<S: Store>(
    f: &(impl Links<S> + ?Sized),
    busy: u32,
    deadline_ms: i64,
    now_ms: i64,
    mut route: impl FnMut(WrId, Completion),
) -> usize {
    let mut owed = 0;
    for k in 0..f.shards().min(32) {
        if busy & (1 << k) != 0 {
            owed += f.shard(k).settle(now_ms, deadline_ms, f, &mut route);
        }
    }
    owed
}

/// Recovery state of up to [`MAX_QPS`] physical QPs (when each went to the error state
/// is kept in its [`PhysQp`](super::qp::PhysQp)).
pub struct Recovery {
    group: u32,
    /// In the error state, waiting to be re-armed.
    errored: QpBits,
    /// Of those, the ones whose marker completed.
    flushed: QpBits,
    /// Groups whose re-arming failed: left failed.
    broken: QpBits,
    /// Groups recovered so far (re-armed, or found beyond re-arming).
    recovered: u64,
}

impl Recovery {
    /// Recovery of QPs connected in groups of `group` (at least 1) consecutive QPs.
    pub const fn new(group: u32) -> Recovery {
        assert!(group > 0);
        Recovery {
            group,
            errored: QpBits::EMPTY,
            flushed: QpBits::EMPTY,
            broken: QpBits::EMPTY,
            recovered: 0,
        }
    }

    /// Groups recovered so far (the device's `recoveries` counter).
    pub fn recovered(&self) -> u64 {
        self.recovered
    }

    /// The wr_id of QP `qp`'s flush marker (the backend's request 0 is the kernel-direct
    /// baseline's).
    pub const fn marker(qp: u32) -> u64 {
        backend_wr_id(1 + qp)
    }

    /// Whether some QP waits to be re-armed: its flush must be polled for.
    pub fn busy(&self) -> bool {
        !self.errored.is_empty()
    }

    /// Whether a [`step`](Self::step) would do nothing: no QP being recovered, failed or
    /// with requests posted, no send waiting for a receive, nothing owed. The caller
    /// may then skip the step (and reading the clock for it). A caller that cannot
    /// afford every lock for this keeps each part's answer as it changes
    /// ([`PhysQp::quiet`](super::qp::PhysQp::quiet),
    /// [`Messages::quiet`](super::message::Messages::quiet), [`Recovery::quiet`]) and
    /// combines them itself.
    pub fn idle<S: Store>(&self, f: &(impl Links<S> + ?Sized)) -> bool {
        self.quiet()
            && (0..f.shards()).all(|k| f.shard(k).quiet())
            && (0..f.count() as u32).all(|i| f.qp(i, |q, _| q.quiet()))
    }

    /// The part of [`idle`](Self::idle) under the membership lock: no QP being
    /// recovered.
    pub fn quiet(&self) -> bool {
        self.errored.is_empty()
    }

    /// Takes a completion of the backend's own request `wr_id` on QP `qp`; `false` if it
    /// is a ring's, to be routed.
    pub fn on_completion(&mut self, qp: u32, wr_id: u64) -> bool {
        if !is_backend_wr_id(wr_id) {
            return false;
        }
        if wr_id == Self::marker(qp) {
            self.flushed.insert(qp);
        }
        true
    }

    /// The part of a step under the membership lock, at time `now_ms`, after
    /// [`sweep`] found the QPs in `failed` failed: fails every group with a
    /// failed QP, then recycles and re-arms every group that settled, retiring what is
    /// owed through `route`. Returns the QPs recycled (nonzero: rings may have new
    /// CQEs). Nothing to do, and no need to call it, while [`quiet`](Self::quiet) and
    /// no QP failed.
    pub fn step<S: Store, B: Rearm>(
        &mut self,
        qps: &(impl Qps<S> + ?Sized),
        hw: &mut B,
        failed: QpBits,
        now_ms: i64,
        mut route: impl FnMut(WrId, Completion),
    ) -> usize {
        let n = qps.count().min(MAX_QPS);
        if self.errored.is_empty() && failed.is_empty() {
            return 0;
        }
        let g = self.group as usize;
        let mut recycled = 0;
        // A plain loop, no `%` or `step_by` by a runtime value: the kernel build's
        // objtool rejects the division's panic path.
        let mut first = 0;
        while first + g <= n {
            let group = first..first + g;
            first += g;
            // Newly failed, and failed still: `failed` was swept before the membership
            // lock was taken, and a peer set's slot may have had a new connection
            // installed since. One being recovered already took its group with it (a
            // set's slot given a new connection is not failed again for its sibling).
            let in_recovery = self.errored | self.broken;
            let newly = |e: usize| {
                (failed - in_recovery).contains(e as u32) && qps.qp(e as u32, |q, _| q.failed())
            };
            if let Some(first) = group.clone().find(|&e| newly(e)) {
                // The group fails for its first failed QP's reason (a peer that went
                // takes both of its set's QPs, whichever the CM told of first).
                let why = qps.qp(first as u32, |q, _| q.fail_reason());
                for e in group.clone() {
                    qps.qp(e as u32, |q, _| q.fail_with(why));
                    self.move_to_error(qps, hw, e, now_ms);
                }
            }
            // Only the QPs in the error state are recycled: a peer set's slot given a
            // new connection meanwhile ([`revive`](Self::revive)) is left alone, and
            // holds up none of the others.
            let bits = self.errored & QpBits::range(group.start as u32, g as u32);
            let members = || bits.iter().map(|e| e as usize);
            if bits.is_empty() || !members().all(|e| self.settled(qps, e, now_ms)) {
                continue;
            }
            self.errored -= bits;
            self.flushed -= bits;
            // Re-armed while still failed, so no ring posts on a QP being reset (posts
            // check in the QP's section); usable from its recycling on.
            let rearmed = hw.rearm(group.start as u32, g as u32).is_ok();
            self.recovered += 1;
            if !rearmed {
                // Its virtual QPs get QpError from now on.
                self.broken |= bits;
            }
            for e in members() {
                qps.qp(e as u32, |q, _| {
                    q.recycle(&mut route);
                    if !rearmed {
                        q.fail();
                    }
                });
            }
            recycled += bits.len() as usize;
        }
        recycled
    }

    /// QP `qp` (one the backend cannot re-arm: a peer set's) has a new connection:
    /// forget that it was broken or being recovered, so no recovery of the connection
    /// it replaced fails or recycles it, and it is failed and recovered anew if it
    /// fails. Call as each connection is installed, under the lock [`step`](Self::step)
    /// is taken under.
    pub fn revive(&mut self, qp: u32) {
        self.broken.remove(qp);
        self.errored.remove(qp);
        self.flushed.remove(qp);
    }

    fn move_to_error<S: Store, B: Rearm>(
        &mut self,
        qps: &(impl Qps<S> + ?Sized),
        hw: &mut B,
        qp: usize,
        now_ms: i64,
    ) {
        let qp = qp as u32;
        if (self.errored | self.broken).contains(qp) {
            return;
        }
        self.errored.insert(qp);
        qps.qp(qp, |q, _| q.errored_ms = now_ms);
        // Without a marker, only the patience tells when the flush is over.
        let _ = hw.to_error(qp, Self::marker(qp));
    }

    /// Whether failed QP `qp` is done flushing.
    fn settled<S: Store>(&self, qps: &(impl Qps<S> + ?Sized), qp: usize, now_ms: i64) -> bool {
        let qp = qp as u32;
        self.errored.contains(qp)
            && (self.flushed.contains(qp)
                || now_ms - qps.qp(qp, |q, _| q.errored_ms) > FLUSH_PATIENCE_MS)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::engine::{Delivery, Messages, NoPost, PhysQp, Post, Posted, VecStore};
    use core::cell::RefCell;
    use std::vec;
    use std::vec::Vec;

    #[derive(Default)]
    struct Hw {
        errored: Vec<(u32, u64)>,
        rearmed: Vec<(u32, u32)>,
        fail_rearm: bool,
    }

    impl Rearm for Hw {
        fn to_error(&mut self, qp: u32, marker: u64) -> bool {
            self.errored.push((qp, marker));
            true
        }
        fn rearm(&mut self, first: u32, n: u32) -> Result<(), Errno> {
            self.rearmed.push((first, n));
            if self.fail_rearm {
                Err(Errno::EIO)
            } else {
                Ok(())
            }
        }
    }

    /// Four QPs and one links shard with no locks of their own (the tests serialize
    /// everything): a `RefCell` per part, which also catches a section re-entered.
    struct Serial {
        qps: Vec<RefCell<PhysQp<VecStore>>>,
        links: RefCell<Messages<VecStore>>,
    }

    impl core::ops::Index<usize> for Serial {
        type Output = RefCell<PhysQp<VecStore>>;
        fn index(&self, i: usize) -> &Self::Output {
            &self.qps[i]
        }
    }

    impl Qps<VecStore> for Serial {
        fn count(&self) -> usize {
            self.qps.len()
        }
        fn qp<R>(&self, i: u32, f: impl FnOnce(&mut PhysQp<VecStore>, &mut dyn Post) -> R) -> R {
            f(&mut self.qps[i as usize].borrow_mut(), &mut NoPost)
        }
    }

    impl Links<VecStore> for Serial {
        type Shard<'a> = core::cell::RefMut<'a, Messages<VecStore>>;
        fn shards(&self) -> u32 {
            1
        }
        fn shard(&self, _: u32) -> Self::Shard<'_> {
            self.links.borrow_mut()
        }
    }

    /// A recovery over four QPs, with what its steps routed.
    struct Bed {
        r: Recovery,
        hw: Hw,
        q: Serial,
        deadline_ms: i64,
        owed: Vec<(u32, Completion)>,
    }

    impl Bed {
        fn new(deadline_ms: i64) -> Bed {
            Bed::with_qps(4, deadline_ms)
        }

        fn with_qps(n: usize, deadline_ms: i64) -> Bed {
            Bed {
                r: Recovery::new(2),
                hw: Hw::default(),
                q: Serial {
                    qps: (0..n)
                        .map(|_| RefCell::new(PhysQp::new(vec![Posted::EMPTY; 8])))
                        .collect(),
                    links: RefCell::new(Messages::with_capacity(4, 4)),
                },
                deadline_ms,
                owed: Vec::new(),
            }
        }

        /// A whole step at `now_ms`, as the kernel takes it: the sweep over every
        /// shard, then the membership's part. Returns what it reports.
        fn at(&mut self, now_ms: i64) -> usize {
            let owed = &mut self.owed;
            let mut route = |id: WrId, c| owed.push((id.slot, c));
            let (n, failed) = sweep(&self.q, u32::MAX, self.deadline_ms, now_ms, &mut route);
            n + self.r.step(&self.q, &mut self.hw, failed, now_ms, route)
        }
    }

    fn posted(wr_id: u64) -> Posted {
        Posted {
            wr_id,
            delivery: None,
        }
    }

    /// A request of ring 1 in its in-flight slot `slot`.
    fn request(slot: u32) -> Posted {
        posted(
            WrId {
                ring: 1,
                ring_gen: 1,
                slot,
            }
            .encode(),
        )
    }

    #[test]
    fn a_failed_qp_takes_its_pair_through_flush_and_rearm() {
        let mut b = Bed::new(DEFAULT_DEADLINE_MS);
        b.q[3].borrow_mut().reserve(request(9));
        b.q[3].borrow_mut().fail();
        assert_eq!(b.at(0), 0, "nothing settled yet");
        assert_eq!(
            b.hw.errored,
            [(2, Recovery::marker(2)), (3, Recovery::marker(3))]
        );
        let q = &b.q;
        assert!(
            q[2].borrow().failed() && q[3].borrow().failed() && !q[0].borrow().failed(),
            "the pair, only"
        );
        assert!(b.r.busy());
        assert!(!b.r.on_completion(3, 9), "a ring's completion is routed");
        assert!(b.r.on_completion(3, Recovery::marker(3)));
        assert_eq!(b.at(10), 0, "QP 2's marker is missing");
        assert!(b.r.on_completion(2, Recovery::marker(2)));
        assert_eq!(b.at(20), 2);
        assert_eq!(b.hw.rearmed, [(2, 2)]);
        assert_eq!(b.owed, [(9, Completion::Failed(Reason::QpError))]);
        let q = &b.q;
        assert!(!q[2].borrow().failed() && !q[3].borrow().failed() && !b.r.busy());
    }

    /// A device of [`MAX_QPS`] QPs (126 peer sets after a pool of 4): QPs past the first
    /// 64 fail, flush and are re-armed as the first ones are, each group on its own.
    #[test]
    fn qps_past_the_first_word_are_recovered_alike() {
        let mut b = Bed::with_qps(MAX_QPS, DEFAULT_DEADLINE_MS);
        b.q[201].borrow_mut().reserve(request(9));
        b.q[201].borrow_mut().fail();
        b.q[254].borrow_mut().fail();
        b.at(0);
        let errored: Vec<u32> = b.hw.errored.iter().map(|e| e.0).collect();
        assert_eq!(errored, [200, 201, 254, 255]);
        assert!(!b.q[199].borrow().failed() && !b.q[202].borrow().failed());
        assert!(b.r.on_completion(200, Recovery::marker(200)));
        assert!(b.r.on_completion(201, Recovery::marker(201)));
        assert_eq!(
            b.at(10),
            2,
            "200 and 201 flushed; 254's wait for their patience"
        );
        assert_eq!(b.hw.rearmed, [(200, 2)]);
        assert_eq!(b.owed, [(9, Completion::Failed(Reason::QpError))]);
        assert_eq!(b.at(1 + FLUSH_PATIENCE_MS), 2);
        assert_eq!(b.hw.rearmed, [(200, 2), (254, 2)]);
        assert!(b.r.quiet() && !b.q[255].borrow().failed());
    }

    #[test]
    fn the_pair_fails_for_its_first_qps_reason() {
        let mut b = Bed::new(DEFAULT_DEADLINE_MS);
        b.q[3].borrow_mut().reserve(request(9));
        // The CM told of QP 3's peer first; QP 2's request goes with it, and says why.
        b.q[3].borrow_mut().fail_with(Reason::PeerGone);
        b.q[2].borrow_mut().reserve(request(8));
        b.at(0);
        assert_eq!(b.q[2].borrow().fail_reason(), Reason::PeerGone);
        assert!(b.r.on_completion(2, Recovery::marker(2)));
        assert!(b.r.on_completion(3, Recovery::marker(3)));
        b.at(10);
        b.owed.sort_by_key(|o| o.0);
        assert_eq!(
            b.owed,
            [
                (8, Completion::Failed(Reason::PeerGone)),
                (9, Completion::Failed(Reason::PeerGone))
            ]
        );
    }

    #[test]
    fn a_set_slot_given_a_new_connection_is_left_to_it() {
        // A group the backend cannot re-arm: a peer set's two QPs.
        let mut b = Bed::new(DEFAULT_DEADLINE_MS);
        b.hw.fail_rearm = true;
        b.q[2].borrow_mut().reserve(request(8));
        b.q[2].borrow_mut().fail();
        b.at(0);
        assert!(b.q[3].borrow().failed(), "the set's other QP fails with it");
        // Slot 3 gets a new connection (its set made again) before the flush settled,
        // and a request is posted on it.
        b.q[3].borrow_mut().revive();
        b.r.revive(3);
        b.q[3].borrow_mut().reserve(request(9));
        assert_eq!(b.at(1 + FLUSH_PATIENCE_MS), 1, "slot 2 alone is recycled");
        assert_eq!(b.owed, [(8, Completion::Failed(Reason::QpError))]);
        assert!(b.q[2].borrow().failed(), "left failed: beyond re-arming");
        b.at(2 + FLUSH_PATIENCE_MS);
        assert!(!b.q[3].borrow().failed(), "the new connection stands");
        assert!(b.r.quiet());
        assert_eq!(b.owed.len(), 1, "and its request is still its own");
    }

    #[test]
    fn a_failure_swept_before_a_new_connection_does_not_fail_it() {
        let mut b = Bed::new(DEFAULT_DEADLINE_MS);
        b.hw.fail_rearm = true;
        b.q[3].borrow_mut().fail();
        let (_, failed) = sweep(&b.q, 0, b.deadline_ms, 0, |_, _| {});
        assert_eq!(failed, QpBits::one(3));
        // Installed anew (under the membership lock) between the sweep and the step.
        b.q[3].borrow_mut().revive();
        b.r.revive(3);
        b.r.step(&b.q, &mut b.hw, failed, 0, |_, _| {});
        assert!(!b.q[3].borrow().failed() && !b.q[2].borrow().failed());
        assert!(b.hw.errored.is_empty() && b.r.quiet());
    }

    #[test]
    fn idle_only_with_nothing_to_do() {
        let b = Bed::new(DEFAULT_DEADLINE_MS);
        assert!(b.r.idle(&b.q));
        b.q[1].borrow_mut().reserve(posted(7));
        assert!(!b.r.idle(&b.q), "a request posted");
        let b = Bed::new(DEFAULT_DEADLINE_MS);
        b.q[2].borrow_mut().fail();
        assert!(!b.r.idle(&b.q), "a QP failed");
    }

    #[test]
    fn a_lost_marker_waits_for_the_patience_and_a_failed_rearm_sticks() {
        let mut b = Bed::new(DEFAULT_DEADLINE_MS);
        b.hw.fail_rearm = true;
        b.q[0].borrow_mut().fail();
        assert_eq!(b.at(100), 0);
        assert_eq!(b.at(100 + FLUSH_PATIENCE_MS), 0);
        assert_eq!(b.at(101 + FLUSH_PATIENCE_MS), 2);
        assert!(
            b.q[0].borrow().failed() && b.q[1].borrow().failed(),
            "re-arming failed: left failed"
        );
        assert_eq!(b.at(10_000), 0);
        assert_eq!(
            (b.hw.errored.len(), b.hw.rearmed.len()),
            (2, 1),
            "and never retried"
        );
    }

    #[test]
    fn a_stuck_qp_fails_with_deadline_and_the_receive_it_was_filling_too() {
        let mut b = Bed::new(100);
        let send = WrId {
            ring: 1,
            ring_gen: 1,
            slot: 3,
        }
        .encode();
        let recv = WrId {
            ring: 2,
            ring_gen: 1,
            slot: 4,
        }
        .encode();
        b.at(1000);
        b.q[0].borrow_mut().reserve(Posted {
            wr_id: send,
            delivery: Some(Delivery {
                recv,
                byte_len: 8,
                imm: None,
            }),
        });
        // The deadline counts from the first step that sees the QP busy.
        assert_eq!(b.at(1050), 0);
        assert_eq!(b.at(1150), 0);
        assert!(!b.q[0].borrow().failed(), "within the deadline");
        assert_eq!(b.at(1151), 0);
        assert!(
            b.q[0].borrow().failed() && b.q[1].borrow().failed(),
            "past it: the pair fails"
        );
        // Neither marker arrives; after the patience the pair is re-armed and what it
        // still owed, the receive its send was filling included, is retired.
        assert_eq!(b.at(1151 + FLUSH_PATIENCE_MS + 1), 2);
        b.owed.sort_by_key(|o| o.0);
        assert_eq!(
            b.owed,
            [
                (3, Completion::Failed(Reason::Deadline)),
                (4, Completion::Failed(Reason::Deadline)),
            ]
        );
        assert_eq!(b.q[0].borrow().outstanding(), 0);
    }
}
