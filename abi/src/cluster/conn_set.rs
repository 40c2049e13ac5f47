//! A node's connection set to one peer node: its state and the rules that make two
//! nodes connecting to each other at once end with exactly one set (the
//! module keeps a set's state through [`peers`](super::peers)).
//!
//! One set joins a pair of nodes, and both use it: the node that dialed it, and the one
//! that accepted it, which *adopts* the accepted connections as its own set to the
//! dialer (as RDS keeps one connection per address pair, whoever initiated it). The
//! first CONNECT on either node starts the set; later ones, on both nodes, wait for it
//! or use it. When both nodes start one at once, the attempt of the node with the lower
//! id wins: the higher one, seeing the lower one's request while its own attempt is
//! under way, accepts it and drops its own; the lower one refuses the higher one's
//! request and keeps its own. The higher one's refused attempt then *yields*: its
//! CONNECTs wait a bounded time for the lower one's set to arrive rather than failing.
//! A set that fails backs off (doubling, bounded) before the next attempt; a peer that
//! restarted (a new incarnation in its node record, or a new request) ends the set,
//! failing what was on it, and the next CONNECT builds a new one.
//!
//! A set is usable before it is whole: once the first connection of our attempt is up
//! ([`State::Partial`]), or the first of the peer's is adopted, CONNECTs bind to what
//! is up ([`ConnSet::up`]) while the rest is made behind them, so a first contact costs
//! one connection, not a set's. Which attempt a worker's report is for is the peer
//! table's to check (it numbers attempts across all its entries): here, a report finds
//! the set where the attempt left it, or changes nothing.

/// Shortest wait before retrying a failed set, ms.
pub const CONNECT_BACKOFF_MIN_MS: i64 = 100;
/// Longest, ms.
pub const CONNECT_BACKOFF_MAX_MS: i64 = 5_000;
/// How long a dialer gives one connection of a set, from resolving the peer's address
/// to the connection being up, ms (the module's rdma_cm timeout).
pub const SET_CONNECT_MS: i64 = 10_000;
/// Tries more a dialer gives one connection of a set that a refusal no key proved
/// ended (any host may write one, and a member refuses so when it has no room yet):
/// such a refusal costs a retry, no more. What changes the set's state (a yield) comes
/// proved.
pub const UNPROVED_RETRIES: u32 = 1;

/// How long an adoption may go without progress (a connection of the peer's set asked
/// for or accepted that was not before), ms: past it, a CONNECT dials anew. Both come
/// when the peer's request does, and between one connection's request and the next's
/// the dialer may take up to [`SET_CONNECT_MS`] to finish the first and as long again
/// to ask for the next: a dialer still within its own bounds is never given up on (a
/// slow peer, or a starved one, as a guest under emulation is, would otherwise see its
/// next connection refused and lose the whole set).
pub const ADOPT_MS: i64 = 2 * SET_CONNECT_MS + 2_000;

/// How long a yielded attempt waits for the peer's set to begin (its first
/// connection's request, which makes this an adoption), ms: past it, a CONNECT dials
/// anew. The peer asks within [`SET_CONNECT_MS`] of its dial.
pub const YIELD_MS: i64 = SET_CONNECT_MS + 2_000;

/// Where a set is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No set and no attempt.
    Idle,
    /// Our attempt (to the peer's incarnation `incarnation`) is under way.
    Connecting {
        /// The peer's incarnation we connect to.
        incarnation: u64,
    },
    /// Our attempt's first connection is up, and the rest of the set is being made:
    /// CONNECTs bind to the first.
    Partial {
        /// The peer's incarnation we connect to.
        incarnation: u64,
    },
    /// A set to the peer's incarnation `incarnation` is up.
    Ready {
        /// The peer's incarnation it connects.
        incarnation: u64,
    },
    /// The peer dialed a set to us, which we adopt; connections `have` (a bit each) of
    /// it are here.
    Adopting {
        /// The peer's incarnation.
        incarnation: u64,
        /// The set's connections accepted so far, a bit each.
        have: u32,
        /// It must be complete by then, ms.
        until_ms: i64,
    },
    /// The peer refused our attempt for its own (it has the lower id): its set is
    /// awaited until `until_ms`.
    Yielded {
        /// Dial anew after this, ms.
        until_ms: i64,
    },
    /// The last attempt failed; no new one before `until_ms`.
    Backoff {
        /// No attempt before this, ms.
        until_ms: i64,
    },
}

impl State {
    /// A one-word name, as the module's `peers` file and the `krcore` tool show it.
    pub const fn name(&self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Connecting { .. } => "connecting",
            State::Partial { .. } => "partial",
            State::Ready { .. } => "ready",
            State::Adopting { .. } => "adopting",
            State::Yielded { .. } => "yielded",
            State::Backoff { .. } => "backoff",
        }
    }
}

/// What the caller does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start connecting (rdma_cm to the peer's address from its node record).
    Connect,
    /// Wait: an attempt is under way (ours or the peer's), or the set backs off.
    Wait,
    /// The set is up: bind to it.
    Use,
}

/// What to answer a peer's connection request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Accept it: it becomes the set (drop any attempt of ours).
    Accept,
    /// Refuse it: our own attempt wins (we have the lower id).
    Refuse,
}

/// How our attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// Every connection of the set is up.
    Established,
    /// It failed (the peer unreachable, or refusing for want of room).
    Failed,
    /// The peer refused it for its own attempt (it has the lower id).
    Yielded,
}

/// Our set to one peer.
#[derive(Clone, Copy, Debug)]
pub struct ConnSet {
    me: u16,
    peer: u16,
    state: State,
    /// The set up is the peer's, adopted (not our attempt).
    adopted: bool,
    /// Consecutive failures (for the backoff).
    failures: u32,
}

impl ConnSet {
    /// No set yet from node `me` to node `peer`.
    pub const fn new(me: u16, peer: u16) -> ConnSet {
        ConnSet {
            me,
            peer,
            state: State::Idle,
            adopted: false,
            failures: 0,
        }
    }

    /// This node is `me` (learned after the set was made).
    pub fn set_me(&mut self, me: u16) {
        self.me = me;
    }

    /// Where it is.
    pub fn state(&self) -> State {
        self.state
    }

    /// The connections of a set of `count` that are up, a bit each: all of a ready
    /// set, the first of a partial one, those adopted so far.
    pub fn up(&self, count: u32) -> u32 {
        let all = 1u32.checked_shl(count).map_or(u32::MAX, |b| b - 1);
        match self.state {
            State::Ready { .. } => all,
            State::Partial { .. } => all & 1,
            State::Adopting { have, .. } => all & have,
            _ => 0,
        }
    }

    /// Whether [`want`](Self::want) would answer `Connect` (a new attempt), changing
    /// nothing.
    pub fn would_dial(&self, incarnation: u64, now_ms: i64) -> bool {
        let mut probe = *self;
        probe.want(incarnation, now_ms) == Action::Connect
    }

    /// A CONNECT to the peer, whose node record says `incarnation`, at `now_ms`.
    pub fn want(&mut self, incarnation: u64, now_ms: i64) -> Action {
        match self.state {
            State::Ready { incarnation: i } if i == incarnation => Action::Use,
            State::Partial { incarnation: i } if i == incarnation => Action::Use,
            // The peer restarted since: that set is gone.
            State::Ready { .. } => self.begin(incarnation),
            State::Connecting { .. } | State::Partial { .. } => Action::Wait,
            // What of the peer's set is here is used while the rest comes.
            State::Adopting { until_ms, have, .. } if now_ms < until_ms && have != 0 => Action::Use,
            State::Backoff { until_ms }
            | State::Adopting { until_ms, .. }
            | State::Yielded { until_ms }
                if now_ms < until_ms =>
            {
                Action::Wait
            }
            // An adoption that did not complete in time: its connections go (the
            // caller closes them, see `Peers::connect`), and we dial.
            State::Idle
            | State::Backoff { .. }
            | State::Adopting { .. }
            | State::Yielded { .. } => self.begin(incarnation),
        }
    }

    /// A new attempt of ours, to the peer's incarnation `incarnation`.
    fn begin(&mut self, incarnation: u64) -> Action {
        self.state = State::Connecting { incarnation };
        Action::Connect
    }

    /// The first connection of our attempt is up: whether the attempt is still under
    /// way, so that it is now used ([`State::Partial`]); when not, the connection is the
    /// caller's to close.
    pub fn first_up(&mut self) -> bool {
        match self.state {
            State::Connecting { incarnation } => {
                self.state = State::Partial { incarnation };
                true
            }
            _ => false,
        }
    }

    /// What to answer the peer's request for a new set: refused only while our own
    /// attempt, or the set it made, stands and we have the lower id. (A peer asks for a
    /// new set when it has none: whatever we had with it is gone on its side.)
    pub fn answer(&self) -> Answer {
        let ours = match self.state {
            State::Connecting { .. } | State::Partial { .. } => true,
            State::Ready { .. } => !self.adopted,
            _ => false,
        };
        if ours && self.me < self.peer {
            Answer::Refuse
        } else {
            Answer::Accept
        }
    }

    /// The peer's request for a new set was accepted at `now_ms` (see
    /// [`answer`](Self::answer)); whatever set or attempt we had is dropped.
    pub fn adopt(&mut self, incarnation: u64, now_ms: i64) {
        self.state = State::Adopting {
            incarnation,
            have: 0,
            until_ms: now_ms + ADOPT_MS,
        };
    }

    /// Connection `index` of `count` of the adopted set is here at `now_ms`: whether
    /// the set is now complete (and up). Nothing when no adoption is under way.
    pub fn adopted(&mut self, index: u32, count: u32, now_ms: i64) -> bool {
        let State::Adopting {
            incarnation,
            have,
            until_ms,
        } = &mut self.state
        else {
            return false;
        };
        let bit = 1u32.checked_shl(index).unwrap_or(0);
        if *have & bit == 0 {
            *until_ms = now_ms + ADOPT_MS;
        }
        *have |= bit;
        let all = 1u32.checked_shl(count).map_or(u32::MAX, |b| b - 1);
        if *have & all != all {
            return false;
        }
        self.state = State::Ready {
            incarnation: *incarnation,
        };
        self.adopted = true;
        self.failures = 0;
        true
    }

    /// The peer asked at `now_ms` for connection `index` of the set we adopt: when it
    /// is not here yet, the adoption is making progress, and has [`ADOPT_MS`] again (a
    /// request repeated for one it has renews nothing). Whether one is under way (when
    /// not, the connection is refused).
    pub fn adopt_more(&mut self, index: u32, now_ms: i64) -> bool {
        let State::Adopting { until_ms, have, .. } = &mut self.state else {
            return false;
        };
        if *have & 1u32.checked_shl(index).unwrap_or(0) == 0 {
            *until_ms = now_ms + ADOPT_MS;
        }
        true
    }

    /// Our attempt ended, at `now_ms`: whether it became the set. An attempt we gave up
    /// (for the peer's, see [`adopt`](Self::adopt), or because its set was lost)
    /// changes nothing: its connections are the caller's to close. A partial set's
    /// attempt that fails takes the set with it (the caller closes its first
    /// connection, and what was bound to it fails).
    pub fn attempt_done(&mut self, how: Attempt, now_ms: i64) -> bool {
        let (State::Connecting { incarnation } | State::Partial { incarnation }) = self.state
        else {
            return false;
        };
        match how {
            Attempt::Established => {
                self.state = State::Ready { incarnation };
                self.adopted = false;
                self.failures = 0;
                return true;
            }
            Attempt::Yielded => {
                self.state = State::Yielded {
                    until_ms: now_ms + YIELD_MS,
                }
            }
            Attempt::Failed => {
                self.failures = self.failures.saturating_add(1);
                let shift = (self.failures - 1).min(16);
                let wait = (CONNECT_BACKOFF_MIN_MS << shift).min(CONNECT_BACKOFF_MAX_MS);
                self.state = State::Backoff {
                    until_ms: now_ms + wait,
                };
            }
        }
        false
    }

    /// The set broke, or the peer's node record shows `incarnation` (a restart when it
    /// differs from the set's): the set is gone, and whether it was (its virtual QPs
    /// then fail, naming the peer's restart or the broken set). A set being adopted
    /// goes too (its connections are closed).
    pub fn lost(&mut self, incarnation: Option<u64>) -> bool {
        match (self.state, incarnation) {
            (State::Ready { incarnation: i } | State::Partial { incarnation: i }, Some(now))
                if i == now =>
            {
                false
            }
            (State::Ready { .. } | State::Partial { .. } | State::Adopting { .. }, _) => {
                self.state = State::Idle;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer's request, answered and (when accepted) adopted in full, at `now`.
    fn ask(s: &mut ConnSet, incarnation: u64, now: i64) -> Answer {
        let a = s.answer();
        if a == Answer::Accept {
            s.adopt(incarnation, now);
            assert!(!s.adopted(0, 2, now), "one of two connections");
            assert!(s.adopted(1, 2, now));
        }
        a
    }

    /// Both nodes start at once; the two requests and the two attempts' endings arrive in
    /// every order a network allows. Each ends Ready on the other's incarnation, and
    /// exactly one of the two attempts became the set: the lower id's, which the other
    /// adopted.
    #[test]
    fn both_at_once_end_with_one_set() {
        // Events: 0 = node 1 receives 2's request, 1 = node 2 receives 1's request;
        // each attempt ends after the other side answered it.
        let orders = [[0, 1], [1, 0]];
        for order in orders {
            let mut a = ConnSet::new(1, 2);
            let mut b = ConnSet::new(2, 1);
            assert_eq!(a.want(20, 0), Action::Connect);
            assert_eq!(b.want(10, 0), Action::Connect);
            let mut answers = [None, None];
            for e in order {
                if e == 0 {
                    answers[0] = Some(ask(&mut a, 20, 1));
                } else {
                    answers[1] = Some(ask(&mut b, 10, 1));
                }
            }
            assert_eq!(answers, [Some(Answer::Refuse), Some(Answer::Accept)]);
            // 1's attempt is established (2 accepted); 2's was refused, but 2 has
            // already taken 1's as its set: that ending changes nothing.
            assert!(a.attempt_done(Attempt::Established, 5));
            assert!(!b.attempt_done(Attempt::Yielded, 5), "not the set");
            assert_eq!(a.state(), State::Ready { incarnation: 20 });
            assert_eq!(b.state(), State::Ready { incarnation: 10 });
            assert_eq!(a.want(20, 6), Action::Use);
            assert_eq!(b.want(10, 6), Action::Use);
            // A set 1 made stands against a late request of 2's; one 2 adopted does
            // not stand against 1's (1 asks only when it has lost it).
            assert_eq!(a.answer(), Answer::Refuse);
            assert_eq!(b.answer(), Answer::Accept);
        }
    }

    /// The higher id's attempt, refused, waits for the lower id's set (bounded), and
    /// CONNECTs meanwhile wait rather than fail.
    #[test]
    fn a_yielded_attempt_waits_for_the_peers_set_then_dials_again() {
        let mut b = ConnSet::new(2, 1);
        assert_eq!(b.want(10, 0), Action::Connect);
        assert!(!b.attempt_done(Attempt::Yielded, 5));
        assert_eq!(b.want(10, 5 + YIELD_MS - 1), Action::Wait);
        // Its set arrives: used.
        assert_eq!(ask(&mut b, 10, 6), Answer::Accept);
        assert_eq!(b.want(10, 7), Action::Use);
        // Never arrives: dialed again once the wait is over.
        let mut c = ConnSet::new(2, 1);
        c.want(10, 0);
        c.attempt_done(Attempt::Yielded, 0);
        assert_eq!(c.want(10, YIELD_MS), Action::Connect);
        // An adoption left half done is given up the same way.
        let mut d = ConnSet::new(1, 2);
        assert_eq!(d.answer(), Answer::Accept, "nothing of ours");
        d.adopt(20, 0);
        assert_eq!(d.want(20, 1), Action::Wait, "nothing is here yet");
        assert!(!d.adopted(0, 2, 1));
        assert_eq!(
            d.want(20, 1),
            Action::Use,
            "the first is used while the rest comes"
        );
        assert_eq!(d.up(2), 0b01);
        assert_eq!(d.want(20, 1 + ADOPT_MS), Action::Connect);
        assert!(
            !d.adopted(1, 2, 1 + ADOPT_MS),
            "too late: no adoption under way"
        );
    }

    #[test]
    fn failures_back_off_and_restarts_end_the_set() {
        let mut s = ConnSet::new(1, 2);
        assert_eq!(s.want(7, 0), Action::Connect);
        assert_eq!(s.want(7, 1), Action::Wait, "one attempt at a time");
        s.attempt_done(Attempt::Failed, 10);
        assert_eq!(s.want(7, 10 + CONNECT_BACKOFF_MIN_MS - 1), Action::Wait);
        assert_eq!(s.want(7, 10 + CONNECT_BACKOFF_MIN_MS), Action::Connect);
        s.attempt_done(Attempt::Failed, 200);
        assert_eq!(
            s.state(),
            State::Backoff {
                until_ms: 200 + 2 * CONNECT_BACKOFF_MIN_MS
            }
        );
        let now = 200 + 2 * CONNECT_BACKOFF_MIN_MS;
        assert_eq!(s.want(7, now), Action::Connect);
        s.attempt_done(Attempt::Established, now);
        assert_eq!(s.want(7, now), Action::Use);
        assert!(!s.lost(Some(7)), "same incarnation: the set stands");
        assert!(s.lost(Some(8)), "the peer restarted");
        assert_eq!(
            s.want(8, now),
            Action::Connect,
            "the next CONNECT builds a new set"
        );
        s.attempt_done(Attempt::Established, now);
        assert_eq!(
            s.want(9, now),
            Action::Connect,
            "a restart seen at CONNECT too"
        );
    }

    /// Our attempt is used from its first connection on, and completes behind it; a
    /// failure of the rest takes the partial set with it (backing off).
    #[test]
    fn a_partial_set_is_used_then_completed_or_lost() {
        let mut s = ConnSet::new(1, 2);
        assert_eq!(s.up(2), 0);
        assert_eq!(s.want(7, 0), Action::Connect);
        assert!(s.first_up());
        assert_eq!(s.state(), State::Partial { incarnation: 7 });
        assert_eq!((s.want(7, 1), s.up(2)), (Action::Use, 0b01));
        assert_eq!(
            s.want(8, 1),
            Action::Wait,
            "another incarnation: one attempt at a time"
        );
        assert_eq!(
            s.answer(),
            Answer::Refuse,
            "our attempt stands against the higher id's"
        );
        assert!(!s.first_up(), "only a connecting attempt's");
        assert!(s.attempt_done(Attempt::Established, 2));
        assert_eq!((s.want(7, 3), s.up(2)), (Action::Use, 0b11));
        // The rest failed: the partial set goes, and the next attempt waits its turn.
        assert!(s.lost(None));
        assert_eq!(s.want(7, 10), Action::Connect);
        assert!(s.first_up());
        assert!(!s.attempt_done(Attempt::Failed, 11));
        assert_eq!(s.up(2), 0);
        assert_eq!(s.want(7, 11 + CONNECT_BACKOFF_MIN_MS - 1), Action::Wait);
    }
}
