//! Revoking an export that other nodes may have imported.
//!
//! A name imported across nodes is used by the importer's kernel with the rkey it read
//! in the MetaServer, cached there and in the importing rings. When the exporter
//! deregisters the memory, a stale request would reach a dead rkey (the importer's set
//! QP fails, for all its users) or, once the rkey is reused, another MR. So an export
//! published by name is revoked on every node the exporter has a set with before its
//! memory goes: the exporter's kernel sends [`Notice::Revoke`] on each live set QP; the
//! importer's kernel drops what it cached of the export, marks the rings' imports of it
//! dead (their next request fails `BadDescriptor`), and answers [`Notice::RevokeAck`]
//! on the same QP, after every request of its own on that QP (RC keeps the order). The
//! exporter's DEREG_MR completes, and the MR is deregistered, once every QP answered,
//! or once the deadline passed: then the silent QPs are failed, so nothing of theirs
//! lands after.
//!
//! [`Revocations`] is the exporter's table of revocations under way and the importer's
//! queue of answers owed, both bounded. A revocation is never skipped: a full table
//! makes a DEREG_MR (or a ring's close) wait before it takes the export away, until a
//! revocation under way ends (each ends by its deadline), and a QP that cannot take its
//! notice now never holds up the notices due on other QPs.
//!
//! [`Notice::Revoke`]: super::notice::Notice::Revoke
//! [`Notice::RevokeAck`]: super::notice::Notice::RevokeAck

use super::super::engine::QpBits;
use super::notice::Notice;

/// Revocations under way at once (a DEREG_MR past them waits).
pub const MAX_REVOKING: usize = 16;
/// Answers owed at once (past them, a Revoke waits in the peer's receive queue: its
/// ack comes when room frees).
pub const MAX_ACKS: usize = 64;

/// One revocation under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Revoking {
    rkey: u32,
    /// Set QPs whose Revoke is still to be posted.
    due: QpBits,
    /// Set QPs whose answer is awaited.
    awaiting: QpBits,
    /// Begun at, ms.
    since_ms: i64,
}

/// Where a revocation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every QP answered (or none was live): the memory may go.
    Done,
    /// Answers are awaited.
    Pending,
    /// The deadline passed: fail these QPs, then the memory may go.
    TimedOut(QpBits),
}

/// A notice for the device to post, on set QP `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    /// The set QP.
    pub slot: u32,
    /// The notice.
    pub notice: Notice,
}

/// The device's revocations (exporter side) and answers owed (importer side).
#[derive(Clone, Copy, Debug)]
pub struct Revocations {
    revoking: [Option<Revoking>; MAX_REVOKING],
    acks: [Option<(u32, u32)>; MAX_ACKS],
}

impl Default for Revocations {
    fn default() -> Self {
        Self::new()
    }
}

impl Revocations {
    /// Nothing under way.
    pub const fn new() -> Revocations {
        Revocations {
            revoking: [None; MAX_REVOKING],
            acks: [None; MAX_ACKS],
        }
    }

    /// Begins revoking the export `rkey` at `now_ms` on the live set QPs `slots`;
    /// `false` when the table is full (try again). Nothing is recorded when no QP is
    /// live.
    pub fn begin(&mut self, rkey: u32, slots: QpBits, now_ms: i64) -> bool {
        if slots.is_empty() || self.find(rkey).is_some() {
            return true;
        }
        let Some(e) = self.revoking.iter_mut().find(|e| e.is_none()) else {
            return false;
        };
        *e = Some(Revoking {
            rkey,
            due: slots,
            awaiting: slots,
            since_ms: now_ms,
        });
        true
    }

    /// Where the revocation of `rkey` is at `now_ms` with the deadline `deadline_ms`; a
    /// finished one (done or timed out) is forgotten here.
    pub fn progress(&mut self, rkey: u32, now_ms: i64, deadline_ms: i64) -> Progress {
        let Some(i) = self.find(rkey) else {
            return Progress::Done;
        };
        let r = self.revoking[i].expect("found");
        if r.awaiting.is_empty() {
            self.revoking[i] = None;
            return Progress::Done;
        }
        if now_ms - r.since_ms > deadline_ms {
            self.revoking[i] = None;
            return Progress::TimedOut(r.awaiting);
        }
        Progress::Pending
    }

    /// Ends every revocation past the deadline at `now_ms` (room for new ones, whoever
    /// began them): the QPs still silent, which the caller fails, so that nothing of
    /// theirs lands after, as [`Progress::TimedOut`] says.
    pub fn expire(&mut self, now_ms: i64, deadline_ms: i64) -> QpBits {
        let mut silent = QpBits::EMPTY;
        for e in self.revoking.iter_mut() {
            if let Some(r) = *e {
                if now_ms - r.since_ms > deadline_ms {
                    silent |= r.awaiting;
                    *e = None;
                }
            }
        }
        silent
    }

    /// Set QP `slot` answered the revocation of `rkey`: whether that finished it.
    pub fn acked(&mut self, rkey: u32, slot: u32) -> bool {
        let Some(i) = self.find(rkey) else {
            return false;
        };
        let r = self.revoking[i].as_mut().expect("found");
        r.awaiting.remove(slot);
        r.due.remove(slot);
        r.awaiting.is_empty()
    }

    /// Set QPs `slots` went (their set closed or failed): nothing of them lands any
    /// more, so no answer is awaited from them; whether that finished a revocation.
    pub fn lost(&mut self, slots: QpBits) -> bool {
        let mut finished = false;
        for r in self.revoking.iter_mut().flatten() {
            let was = r.awaiting;
            r.awaiting -= slots;
            r.due -= slots;
            finished |= !was.is_empty() && r.awaiting.is_empty();
        }
        self.acks
            .iter_mut()
            .filter(|a| a.is_some_and(|(s, _)| slots.contains(s)))
            .for_each(|a| *a = None);
        finished
    }

    /// The peer's Revoke of `rkey` arrived on set QP `slot` (its imports are marked
    /// dead already): the answer is owed; `false` when the queue is full (the caller
    /// fails the QP: an answer never sent would hold the peer's revocation to its
    /// deadline, which fails it anyway).
    pub fn owe_ack(&mut self, slot: u32, rkey: u32) -> bool {
        match self.acks.iter_mut().find(|a| a.is_none()) {
            Some(a) => {
                *a = Some((slot, rkey));
                true
            }
            None => false,
        }
    }

    /// The next notice to post on a QP not in `skip` (QPs that had no room this time),
    /// if any: answers first (a peer waits on them), then Revokes.
    pub fn next_due(&self, skip: QpBits) -> Option<Due> {
        let skipped = |slot: u32| skip.contains(slot);
        if let Some((slot, rkey)) = self.acks.iter().flatten().find(|(s, _)| !skipped(*s)) {
            return Some(Due {
                slot: *slot,
                notice: Notice::RevokeAck { rkey: *rkey },
            });
        }
        self.revoking.iter().flatten().find_map(|r| {
            (r.due - skip).first().map(|slot| Due {
                slot,
                notice: Notice::Revoke { rkey: r.rkey },
            })
        })
    }

    /// `due` (from [`next_due`](Self::next_due)) was posted.
    pub fn sent(&mut self, due: Due) {
        match due.notice {
            Notice::RevokeAck { rkey } => {
                if let Some(a) = self.acks.iter_mut().find(|a| **a == Some((due.slot, rkey))) {
                    *a = None;
                }
            }
            Notice::Revoke { rkey } => {
                if let Some(i) = self.find(rkey) {
                    let r = self.revoking[i].as_mut().expect("found");
                    r.due.remove(due.slot);
                }
            }
            _ => {}
        }
    }

    fn find(&self, rkey: u32) -> Option<usize> {
        self.revoking
            .iter()
            .position(|e| e.is_some_and(|r| r.rkey == rkey))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The QPs of `mask`, a bit each.
    fn b(mask: u64) -> QpBits {
        QpBits::from_words([mask, 0, 0, 0])
    }

    #[test]
    fn a_revocation_waits_for_every_qp_then_is_done() {
        let mut r = Revocations::new();
        assert!(r.begin(7, b(0b1100), 0));
        assert_eq!(r.progress(7, 1, 5_000), Progress::Pending);
        // Revokes go out on each live QP, one at a time.
        let d = r.next_due(b(0)).unwrap();
        assert_eq!(
            d,
            Due {
                slot: 2,
                notice: Notice::Revoke { rkey: 7 }
            }
        );
        r.sent(d);
        assert_eq!(r.next_due(b(0)).unwrap().slot, 3);
        assert!(!r.acked(7, 2), "one QP of two answered");
        assert!(r.acked(7, 3));
        assert_eq!(r.progress(7, 2, 5_000), Progress::Done);
        assert_eq!(r.progress(7, 3, 5_000), Progress::Done, "forgotten: done");
        assert_eq!(r.next_due(b(0)), None);
    }

    #[test]
    fn silence_times_out_and_names_the_qps_to_fail() {
        let mut r = Revocations::new();
        r.begin(7, b(0b11), 0);
        r.acked(7, 0);
        assert_eq!(r.progress(7, 5_001, 5_000), Progress::TimedOut(b(0b10)));
        // A QP that went needs no answer.
        r.begin(8, b(0b11), 0);
        r.acked(8, 0);
        assert!(r.lost(b(0b10)));
        assert_eq!(r.progress(8, 1, 5_000), Progress::Done);
        // Nothing live: nothing to wait for.
        assert!(r.begin(9, b(0), 0));
        assert_eq!(r.progress(9, 0, 5_000), Progress::Done);
    }

    #[test]
    fn answers_go_first_and_the_tables_are_bounded() {
        let mut r = Revocations::new();
        r.begin(1, b(1), 0);
        assert!(r.owe_ack(4, 99));
        assert_eq!(
            r.next_due(b(0)),
            Some(Due {
                slot: 4,
                notice: Notice::RevokeAck { rkey: 99 }
            })
        );
        r.sent(r.next_due(b(0)).unwrap());
        assert_eq!(r.next_due(b(0)).unwrap().notice, Notice::Revoke { rkey: 1 });
        for k in 0..MAX_REVOKING as u32 - 1 {
            assert!(r.begin(100 + k, b(1), 0));
        }
        assert!(!r.begin(500, b(1), 0), "full: the DEREG_MR waits");
        for k in 0..MAX_ACKS as u32 {
            assert!(r.owe_ack(0, k));
        }
        assert!(!r.owe_ack(0, 1000));
        assert!(r.lost(b(1)), "the revocations awaiting it are over");
        assert!(
            r.acks.iter().all(Option::is_none),
            "its answers owed went with it"
        );
    }

    #[test]
    fn a_full_table_makes_room_from_revocations_past_their_deadline() {
        let mut r = Revocations::new();
        for k in 0..MAX_REVOKING as u32 {
            assert!(r.begin(k, b(0b100), k as i64));
        }
        assert!(!r.begin(99, b(0b1), 100));
        assert_eq!(r.expire(5_000, 5_000), b(0), "none past it yet");
        // The first two are past it: their silent QP is named, their places free.
        assert_eq!(r.expire(5_002, 5_000), b(0b100));
        assert!(r.begin(99, b(0b1), 5_002));
        assert!(r.begin(98, b(0b1), 5_002));
        assert!(!r.begin(97, b(0b1), 5_002));
        // Their own DEREG_MRs find them gone: the QPs that never answered are failed.
        assert_eq!(r.progress(0, 5_003, 5_000), Progress::Done);
    }

    #[test]
    fn a_qp_with_no_room_holds_up_no_other() {
        let mut r = Revocations::new();
        // QP 3's notices wait (its set failed, still installed); QP 5's go.
        assert!(r.owe_ack(3, 40));
        assert!(r.begin(7, b(0b1000), 0));
        assert!(r.begin(8, b(0b10_1000), 0));
        let skip = QpBits::one(3);
        let d = r.next_due(skip).unwrap();
        assert_eq!(
            d,
            Due {
                slot: 5,
                notice: Notice::Revoke { rkey: 8 }
            }
        );
        r.sent(d);
        assert_eq!(r.next_due(skip), None, "only QP 3's are left");
        assert_eq!(r.next_due(b(0)).unwrap().slot, 3);
    }
}
