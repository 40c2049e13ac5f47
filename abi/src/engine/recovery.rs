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
//! The step also routes the completions [`Messages`] owes to rings.

use super::cqe::Reason;
use super::errno::Errno;
use super::fabric::Qps;
use super::message::Messages;
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

/// Physical QPs a [`Recovery`] can track.
pub const MAX_RECOVERED_QPS: usize = 64;

/// The hardware half of recovery: what only the backend can do to its QPs.
pub trait Rearm {
    /// Moves QP `qp` to the error state and posts `marker` (a signaled request) behind
    /// its requests; `false` when the marker could not be posted.
    fn to_error(&mut self, qp: u32, marker: u64) -> bool;
    /// Resets the `n` QPs from `first` on and connects them again.
    fn rearm(&mut self, first: u32, n: u32) -> Result<(), Errno>;
}

/// Recovery state of up to [`MAX_RECOVERED_QPS`] physical QPs, one bit each.
pub struct Recovery {
    group: u32,
    deadline_ms: i64,
    /// In the error state, waiting to be re-armed.
    errored: u64,
    /// Of those, the ones whose marker completed.
    flushed: u64,
    /// Groups whose re-arming failed: left failed.
    broken: u64,
    /// When each QP went to the error state, in ms.
    errored_at: [i64; MAX_RECOVERED_QPS],
}

impl Recovery {
    /// Recovery of QPs connected in groups of `group` (at least 1) consecutive QPs,
    /// failing a QP whose send queue made no progress for `deadline_ms`.
    pub const fn new(group: u32, deadline_ms: i64) -> Recovery {
        assert!(group > 0);
        Recovery {
            group,
            deadline_ms,
            errored: 0,
            flushed: 0,
            broken: 0,
            errored_at: [0; MAX_RECOVERED_QPS],
        }
    }

    /// The wr_id of QP `qp`'s flush marker (the backend's request 0 is the kernel-direct
    /// baseline's).
    pub const fn marker(qp: u32) -> u64 {
        backend_wr_id(1 + qp)
    }

    /// Whether some QP waits to be re-armed: its flush must be polled for.
    pub fn busy(&self) -> bool {
        self.errored != 0
    }

    /// Whether a [`step`](Self::step) would do nothing: no QP being recovered, failed or
    /// with requests posted, no send waiting for a receive, nothing owed. The caller
    /// may then skip the step (and reading the clock for it). A caller that cannot
    /// afford every QP's lock for this keeps each part's answer as it changes
    /// ([`PhysQp::quiet`], [`Recovery::quiet`]) and combines them itself.
    pub fn idle<S: Store>(&self, qps: &(impl Qps<S> + ?Sized), messages: &Messages<S>) -> bool {
        self.quiet(messages) && (0..qps.count() as u32).all(|i| qps.qp(i, |q, _| q.quiet()))
    }

    /// The part of [`idle`](Self::idle) under the membership lock: no QP being
    /// recovered, no send waiting for a receive, nothing owed.
    pub fn quiet<S: Store>(&self, messages: &Messages<S>) -> bool {
        self.errored == 0 && messages.waiting() == 0 && !messages.owes()
    }

    /// Takes a completion of the backend's own request `wr_id` on QP `qp`; `false` if it
    /// is a ring's, to be routed.
    pub fn on_completion(&mut self, qp: u32, wr_id: u64) -> bool {
        if !is_backend_wr_id(wr_id) {
            return false;
        }
        if wr_id == Self::marker(qp) && (qp as usize) < MAX_RECOVERED_QPS {
            self.flushed |= 1 << qp;
        }
        true
    }

    /// One step at time `now_ms`: expires sends that waited too long for a receive,
    /// routes what `messages` owes, fails every group with a failed QP, then recycles
    /// and re-arms every group that settled, retiring what is owed through `route`.
    /// Returns the completions routed and QPs recycled, together (nonzero: rings may
    /// have new CQEs).
    pub fn step<S: Store, B: Rearm>(
        &mut self,
        qps: &(impl Qps<S> + ?Sized),
        messages: &mut Messages<S>,
        hw: &mut B,
        now_ms: i64,
        mut route: impl FnMut(WrId, Completion),
    ) -> usize {
        let owed = messages.settle(now_ms, self.deadline_ms, qps, &mut route);
        let n = qps.count().min(MAX_RECOVERED_QPS);
        let mut failed = 0u64;
        for i in 0..n {
            let f = qps.qp(i as u32, |q, _| {
                if !q.failed() && q.stuck(now_ms, self.deadline_ms) {
                    q.fail_with(Reason::Deadline);
                }
                q.failed()
            });
            failed |= (f as u64) << i;
        }
        if self.errored == 0 && failed == 0 {
            return owed;
        }
        let g = self.group as usize;
        let mut recycled = owed;
        // A plain loop, no `%` or `step_by` by a runtime value: the kernel build's
        // objtool rejects the division's panic path.
        let mut first = 0;
        while first + g <= n {
            let group = first..first + g;
            first += g;
            if group.clone().any(|e| failed & (1 << e) != 0) {
                for e in group.clone() {
                    qps.qp(e as u32, |q, _| q.fail());
                    self.to_error(hw, e, now_ms);
                }
            }
            if !group.clone().all(|e| self.settled(e, now_ms)) {
                continue;
            }
            let bits = group.clone().fold(0u64, |b, e| b | 1 << e);
            self.errored &= !bits;
            self.flushed &= !bits;
            // Re-armed while still failed, so no ring posts on a QP being reset (posts
            // check in the QP's section); usable from its recycling on.
            let rearmed = hw.rearm(group.start as u32, g as u32).is_ok();
            if !rearmed {
                // Its virtual QPs get QpError from now on.
                self.broken |= bits;
            }
            for e in group {
                qps.qp(e as u32, |q, _| {
                    q.recycle(&mut route);
                    if !rearmed {
                        q.fail();
                    }
                });
            }
            recycled += g;
        }
        recycled
    }

    fn to_error<B: Rearm>(&mut self, hw: &mut B, qp: usize, now_ms: i64) {
        if (self.errored | self.broken) & (1 << qp) != 0 {
            return;
        }
        self.errored |= 1 << qp;
        self.errored_at[qp] = now_ms;
        // Without a marker, only the patience tells when the flush is over.
        let _ = hw.to_error(qp as u32, Self::marker(qp as u32));
    }

    /// Whether failed QP `qp` is done flushing.
    fn settled(&self, qp: usize, now_ms: i64) -> bool {
        self.errored & (1 << qp) != 0
            && (self.flushed & (1 << qp) != 0 || now_ms - self.errored_at[qp] > FLUSH_PATIENCE_MS)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::engine::{Delivery, PhysQp, Posted, VecStore};
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

    fn qps() -> Vec<RefCell<PhysQp<VecStore>>> {
        (0..4)
            .map(|_| RefCell::new(PhysQp::new(vec![Posted::EMPTY; 8])))
            .collect()
    }

    fn posted(wr_id: u64) -> Posted {
        Posted {
            wr_id,
            delivery: None,
        }
    }

    #[test]
    fn a_failed_qp_takes_its_pair_through_flush_and_rearm() {
        let (mut r, mut hw, q) = (Recovery::new(2, DEFAULT_DEADLINE_MS), Hw::default(), qps());
        q[3].borrow_mut().reserve(posted(
            WrId {
                ring: 1,
                ring_gen: 1,
                slot: 9,
            }
            .encode(),
        ));
        q[3].borrow_mut().fail();
        let mut owed = Vec::new();
        let mut m = Messages::with_capacity(4, 4);
        let mut step = |r: &mut Recovery, hw: &mut Hw, q: &[RefCell<PhysQp<VecStore>>], now| {
            r.step(q, &mut m, hw, now, |id, c| owed.push((id.slot, c)))
        };
        assert_eq!(step(&mut r, &mut hw, &q, 0), 0, "nothing settled yet");
        assert_eq!(
            hw.errored,
            [(2, Recovery::marker(2)), (3, Recovery::marker(3))]
        );
        assert!(
            q[2].borrow().failed() && q[3].borrow().failed() && !q[0].borrow().failed(),
            "the pair, only"
        );
        assert!(r.busy());
        assert!(!r.on_completion(3, 9), "a ring's completion is routed");
        assert!(r.on_completion(3, Recovery::marker(3)));
        assert_eq!(step(&mut r, &mut hw, &q, 10), 0, "QP 2's marker is missing");
        assert!(r.on_completion(2, Recovery::marker(2)));
        assert_eq!(step(&mut r, &mut hw, &q, 20), 2);
        assert_eq!(hw.rearmed, [(2, 2)]);
        assert_eq!(owed, [(9, Completion::Failed(Reason::QpError))]);
        assert!(!q[2].borrow().failed() && !q[3].borrow().failed() && !r.busy());
    }

    #[test]
    fn idle_only_with_nothing_to_do() {
        let (r, q) = (Recovery::new(2, DEFAULT_DEADLINE_MS), qps());
        let m = Messages::with_capacity(4, 4);
        assert!(r.idle(&q[..], &m));
        q[1].borrow_mut().reserve(posted(7));
        assert!(!r.idle(&q[..], &m), "a request posted");
        let q = qps();
        q[2].borrow_mut().fail();
        assert!(!r.idle(&q[..], &m), "a QP failed");
    }

    #[test]
    fn a_lost_marker_waits_for_the_patience_and_a_failed_rearm_sticks() {
        let (mut r, mut hw, q) = (Recovery::new(2, DEFAULT_DEADLINE_MS), Hw::default(), qps());
        hw.fail_rearm = true;
        q[0].borrow_mut().fail();
        let m = &mut Messages::with_capacity(4, 4);
        assert_eq!(r.step(&q[..], m, &mut hw, 100, |_, _| ()), 0);
        assert_eq!(
            r.step(&q[..], m, &mut hw, 100 + FLUSH_PATIENCE_MS, |_, _| ()),
            0
        );
        assert_eq!(
            r.step(&q[..], m, &mut hw, 101 + FLUSH_PATIENCE_MS, |_, _| ()),
            2
        );
        assert!(
            q[0].borrow().failed() && q[1].borrow().failed(),
            "re-arming failed: left failed"
        );
        assert_eq!(r.step(&q[..], m, &mut hw, 10_000, |_, _| ()), 0);
        assert_eq!(
            (hw.errored.len(), hw.rearmed.len()),
            (2, 1),
            "and never retried"
        );
    }

    #[test]
    fn a_stuck_qp_fails_with_deadline_and_the_receive_it_was_filling_too() {
        let (mut r, mut hw, q) = (Recovery::new(2, 100), Hw::default(), qps());
        let m = &mut Messages::with_capacity(4, 4);
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
        r.step(&q[..], m, &mut hw, 1000, |_, _| ());
        q[0].borrow_mut().reserve(Posted {
            wr_id: send,
            delivery: Some(Delivery {
                recv,
                byte_len: 8,
                imm: None,
            }),
        });
        let mut owed = Vec::new();
        // The deadline counts from the first step that sees the QP busy.
        assert_eq!(
            r.step(&q[..], m, &mut hw, 1050, |id, c| owed.push((id.slot, c))),
            0
        );
        assert_eq!(
            r.step(&q[..], m, &mut hw, 1150, |id, c| owed.push((id.slot, c))),
            0
        );
        assert!(!q[0].borrow().failed(), "within the deadline");
        assert_eq!(
            r.step(&q[..], m, &mut hw, 1151, |id, c| owed.push((id.slot, c))),
            0
        );
        assert!(
            q[0].borrow().failed() && q[1].borrow().failed(),
            "past it: the pair fails"
        );
        // Neither marker arrives; after the patience the pair is re-armed and what it
        // still owed, the receive its send was filling included, is retired.
        let later = 1151 + FLUSH_PATIENCE_MS + 1;
        assert_eq!(
            r.step(&q[..], m, &mut hw, later, |id, c| owed.push((id.slot, c))),
            2
        );
        owed.sort_by_key(|o| o.0);
        assert_eq!(
            owed,
            [
                (3, Completion::Failed(Reason::Deadline)),
                (4, Completion::Failed(Reason::Deadline)),
            ]
        );
        assert_eq!(q[0].borrow().outstanding(), 0);
    }
}
