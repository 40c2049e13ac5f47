//! Routing completions to rings that each have their own lock.
//!
//! Completions are matched to requests in a physical QP's section ([`Qps::qp`]), and a
//! ring's requests are posted from under that ring's lock, which is taken *before* any
//! QP's (the order [`fabric`](super::fabric) writes down). So the router, inside a QP's
//! section, must never take a ring's lock: it hands each completion to the ring's
//! [`Inbox`] (a leaf lock) and the ring takes it in under its own lock later, at its next
//! enter or when the router, with no QP section held, flushes the rings it marked. The
//! mark lives in the inbox, under its lock, so a router that takes it sees everything
//! delivered before it (no ordering to get right between a flag and the queue).
//!
//! Routing costs a lock (the CQ's) even when nothing can be on the CQ; a NOP or a control
//! entry should not pay it. [`BusyHint`] says when the CQ may hold something: it counts
//! physical QPs that may have requests posted or have failed, raised in a QP's section
//! before anything is posted and lowered at the end of one that leaves the QP quiet, so
//! it is never zero while a completion may still come for any QP. Both changes happen
//! in the section, so they follow the state they describe: a section that lowered it
//! and one that raises it again are ordered by the QP's lock.

use core::sync::atomic::Ordering;

use super::cqe::Cqe;
use super::fabric::Post;
use super::listen::RING_LISTENS;
use super::qp::PhysQp;
use super::ring::{IndexCell, RingMem};
use super::ring_state::{Completion, Ring};
use super::sqe::Sqe;
use super::table::Fifo;
use super::wrid::WrId;
use super::Store;

/// How many physical QPs may have completions coming (see the module doc).
#[derive(Default)]
pub struct BusyHint<C: IndexCell> {
    count: C,
}

impl<C: IndexCell> BusyHint<C> {
    /// A hint over `cell`, which must hold 0 (no QP busy).
    pub const fn new(cell: C) -> Self {
        BusyHint { count: cell }
    }

    /// Whether any QP may have completions coming or has failed: when not, the CQ is
    /// empty of everything but what a section now running will post (and that
    /// section's caller routes after it).
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) != 0
    }

    /// Runs `f` as QP `qp`'s section (its lock held by the caller), keeping the hint:
    /// raised before `f` can post, lowered after it if the QP is left quiet.
    pub fn section<S: Store, R>(
        &self,
        qp: &mut PhysQp<S>,
        post: &mut dyn Post,
        f: impl FnOnce(&mut PhysQp<S>, &mut dyn Post) -> R,
    ) -> R {
        if !qp.hinted {
            qp.hinted = true;
            self.count.fetch_add(1, Ordering::AcqRel);
        }
        let r = f(qp, post);
        if qp.quiet() {
            qp.hinted = false;
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        r
    }
}

/// What [`Inbox::deliver`] did with a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// Queued for the ring.
    Queued,
    /// For an earlier ring in the same slot: dropped.
    Stale,
    /// No room: a broken bound (each in-flight request is routed once, and the inbox
    /// holds as many as the ring's in-flight table). The completion is lost.
    Full,
}

/// Completions routed to one ring and not yet taken in (see the module doc), and the
/// nudges for its listens (see `listen`). Its owner keeps it under a leaf lock.
pub struct Inbox<S: Store> {
    ring: u16,
    gen: u16,
    queue: Fifo<(u64, Completion), S>,
    /// Nudges for the ring's listens, by listen: the shards that sent them, a bit
    /// each. Gathered, not queued, so they take no room from completions.
    nudges: [u64; RING_LISTENS],
    /// The ring wants the router's attention: completions were delivered, or it closed.
    marked: bool,
}

impl<S: Store> Inbox<S> {
    /// An inbox for ring `ring` of generation `gen`, holding `storage.len()` completions:
    /// at least the ring's in-flight slots, so it cannot fill.
    pub fn new(ring: u16, gen: u16, storage: S::Buf<(u64, Completion)>) -> Self {
        Inbox {
            ring,
            gen,
            queue: Fifo::new(storage),
            nudges: [0; RING_LISTENS],
            marked: false,
        }
    }

    /// Queues completion `c` of request `id` for the ring, if `id` is this ring's.
    pub fn deliver(&mut self, id: WrId, c: Completion) -> Delivered {
        if (id.ring, id.ring_gen) != (self.ring, self.gen) {
            return Delivered::Stale;
        }
        if let Completion::Offered { shard } = c {
            if let Some(n) = self.nudges.get_mut(id.slot as usize) {
                *n |= 1u64.checked_shl(shard).unwrap_or(0);
            }
            self.marked = true;
            return Delivered::Queued;
        }
        match self.queue.push((id.encode(), c)) {
            Ok(()) => {
                self.marked = true;
                Delivered::Queued
            }
            Err(_) => Delivered::Full,
        }
    }

    /// Marks the ring for the router (its file closed: it must be released once idle).
    pub fn mark(&mut self) {
        self.marked = true;
    }

    /// Whether the ring was marked since the last call (by a delivery or [`mark`]).
    ///
    /// [`mark`]: Self::mark
    pub fn take_mark(&mut self) -> bool {
        core::mem::take(&mut self.marked)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.nudges.iter().all(|&n| n == 0)
    }

    /// Completes, in routing order, everything queued into `ring` (whose lock the
    /// caller holds: it is above the inbox's). Returns how many.
    pub fn drain_into<Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>>(
        &mut self,
        ring: &mut Ring<S, Q, C>,
    ) -> usize {
        let mut n = 0;
        while let Some((w, c)) = self.queue.pop() {
            ring.complete(WrId::decode(w), c);
            n += 1;
        }
        for (slot, shards) in self.nudges.iter_mut().enumerate() {
            if *shards != 0 {
                ring.nudged(slot as u32, core::mem::take(shards));
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{NoPost, Posted, VecStore};
    use core::sync::atomic::AtomicU32;

    fn qp() -> PhysQp<VecStore> {
        PhysQp::new(alloc::vec![Posted::EMPTY; 2])
    }

    #[test]
    fn hint_counts_each_qp_once_and_drops_when_quiet() {
        let hint = BusyHint::new(AtomicU32::new(0));
        let (mut a, mut b) = (qp(), qp());
        // A section that leaves the QP quiet leaves the hint as it found it.
        hint.section(&mut a, &mut NoPost, |_, _| {});
        assert!(!hint.any());
        // Failed QPs are not quiet: the hint stays up until they recover.
        hint.section(&mut a, &mut NoPost, |q, _| q.fail());
        hint.section(&mut b, &mut NoPost, |q, _| q.fail());
        hint.section(&mut a, &mut NoPost, |_, _| {});
        assert_eq!(
            hint.count.load(Ordering::Relaxed),
            2,
            "each QP counted once"
        );
        hint.section(&mut a, &mut NoPost, |q, _| q.recycle(|_, _| {}));
        assert!(hint.any(), "b still failed");
        hint.section(&mut b, &mut NoPost, |q, _| q.recycle(|_, _| {}));
        assert!(!hint.any());
    }

    #[test]
    fn inbox_drops_stale_and_reports_full() {
        let mut inbox = Inbox::<VecStore>::new(3, 7, alloc::vec![(0, Completion::Done); 1]);
        let id = |gen| WrId {
            ring: 3,
            ring_gen: gen,
            slot: 1,
        };
        assert_eq!(inbox.deliver(id(6), Completion::Done), Delivered::Stale);
        assert!(!inbox.take_mark(), "a stale completion marks nothing");
        assert_eq!(inbox.deliver(id(7), Completion::Done), Delivered::Queued);
        assert!(inbox.take_mark() && !inbox.take_mark(), "marked once");
        assert_eq!(inbox.deliver(id(7), Completion::Done), Delivered::Full);
        assert!(!inbox.is_empty());
    }

    #[test]
    fn nudges_are_gathered_beside_the_queue() {
        let mut inbox = Inbox::<VecStore>::new(3, 7, alloc::vec![(0, Completion::Done); 1]);
        let listen = WrId {
            ring: 3,
            ring_gen: 7,
            slot: 1,
        };
        for shard in (0..8).cycle().take(100) {
            let nudge = Completion::Offered { shard };
            assert_eq!(inbox.deliver(listen, nudge), Delivered::Queued);
        }
        assert!(inbox.take_mark(), "a nudge marks the ring for the router");
        let done = WrId { slot: 9, ..listen };
        assert_eq!(
            inbox.deliver(done, Completion::Done),
            Delivered::Queued,
            "100 nudges left the completion its room"
        );
        assert_eq!(inbox.nudges[1], 0xff);
    }
}
