//! A node's connection set to one peer node: its state and the rules that make two
//! nodes connecting to each other at once end with exactly one set (issue 11; the
//! module keeps a set's state through [`peers`](super::peers); the both-at-once rule
//! is not wired in yet: each node makes its own set today).
//!
//! Every ring on a node shares the node's set to each peer (as RDS shares a connection
//! per address pair). The first CONNECT to a peer starts the set; later ones wait for it
//! or use it. When both nodes start one at once, the attempt of the node with the lower
//! id wins: the higher one, seeing the lower one's request while its own attempt is
//! under way, accepts it and drops its own; the lower one refuses the higher one's
//! request and keeps its own, which the higher one accepts. A set that fails backs off
//! (doubling, bounded) before the next attempt; a peer that restarted (a new
//! incarnation in its node record, or on its request) ends the set, failing what was on
//! it, and the next CONNECT builds a new one.

/// Shortest wait before retrying a failed set, ms.
pub const CONNECT_BACKOFF_MIN_MS: i64 = 100;
/// Longest, ms.
pub const CONNECT_BACKOFF_MAX_MS: i64 = 5_000;

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
    /// A set to the peer's incarnation `incarnation` is up.
    Ready {
        /// The peer's incarnation it connects.
        incarnation: u64,
    },
    /// The last attempt failed; no new one before `until_ms`.
    Backoff {
        /// No attempt before this, ms.
        until_ms: i64,
    },
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

/// Our set to one peer.
#[derive(Clone, Copy, Debug)]
pub struct ConnSet {
    me: u16,
    peer: u16,
    state: State,
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
            failures: 0,
        }
    }

    /// Where it is.
    pub fn state(&self) -> State {
        self.state
    }

    /// A CONNECT to the peer, whose node record says `incarnation`, at `now_ms`.
    pub fn want(&mut self, incarnation: u64, now_ms: i64) -> Action {
        match self.state {
            State::Ready { incarnation: i } if i == incarnation => Action::Use,
            // The peer restarted since: that set is gone.
            State::Ready { .. } => {
                self.state = State::Connecting { incarnation };
                Action::Connect
            }
            State::Connecting { .. } => Action::Wait,
            State::Backoff { until_ms } if now_ms < until_ms => Action::Wait,
            State::Idle | State::Backoff { .. } => {
                self.state = State::Connecting { incarnation };
                Action::Connect
            }
        }
    }

    /// The peer asks to connect, from its incarnation `incarnation`.
    pub fn request(&mut self, incarnation: u64) -> Answer {
        match self.state {
            // Both at once: the lower id's attempt wins.
            State::Connecting { .. } if self.me < self.peer => Answer::Refuse,
            _ => {
                self.state = State::Ready { incarnation };
                self.failures = 0;
                Answer::Accept
            }
        }
    }

    /// Our attempt ended: established (`true`) or failed, at `now_ms`. An attempt we
    /// gave up for the peer's (see [`request`](Self::request)) changes nothing.
    pub fn attempt_done(&mut self, established: bool, now_ms: i64) {
        let State::Connecting { incarnation } = self.state else {
            return;
        };
        if established {
            self.state = State::Ready { incarnation };
            self.failures = 0;
        } else {
            self.failures = self.failures.saturating_add(1);
            let shift = (self.failures - 1).min(16);
            let wait = (CONNECT_BACKOFF_MIN_MS << shift).min(CONNECT_BACKOFF_MAX_MS);
            self.state = State::Backoff {
                until_ms: now_ms + wait,
            };
        }
    }

    /// The set broke, or the peer's node record shows `incarnation` (a restart when it
    /// differs from the set's): the set is gone, and whether it was (its virtual QPs
    /// then fail, naming the peer's restart or the broken set).
    pub fn lost(&mut self, incarnation: Option<u64>) -> bool {
        match (self.state, incarnation) {
            (State::Ready { incarnation: i }, Some(now)) if i == now => false,
            (State::Ready { .. }, _) => {
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

    /// Both nodes start at once; the two requests and the two attempts' endings arrive in
    /// every order a network allows. Each ends Ready on the other's incarnation, and
    /// exactly one of the two attempts became the set.
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
                    answers[0] = Some(a.request(20));
                } else {
                    answers[1] = Some(b.request(10));
                }
            }
            // Node 1 refused 2's request; node 2 accepted 1's.
            assert_eq!(answers, [Some(Answer::Refuse), Some(Answer::Accept)]);
            // 1's attempt is established (2 accepted); 2's failed (1 refused) but 2 has
            // already taken 1's as its set, so that ending changes nothing.
            a.attempt_done(true, 5);
            b.attempt_done(false, 5);
            assert_eq!(a.state(), State::Ready { incarnation: 20 });
            assert_eq!(b.state(), State::Ready { incarnation: 10 });
            assert_eq!(a.want(20, 6), Action::Use);
            assert_eq!(b.want(10, 6), Action::Use);
        }
    }

    #[test]
    fn failures_back_off_and_restarts_end_the_set() {
        let mut s = ConnSet::new(1, 2);
        assert_eq!(s.want(7, 0), Action::Connect);
        assert_eq!(s.want(7, 1), Action::Wait, "one attempt at a time");
        s.attempt_done(false, 10);
        assert_eq!(s.want(7, 10 + CONNECT_BACKOFF_MIN_MS - 1), Action::Wait);
        assert_eq!(s.want(7, 10 + CONNECT_BACKOFF_MIN_MS), Action::Connect);
        s.attempt_done(false, 200);
        assert_eq!(
            s.state(),
            State::Backoff {
                until_ms: 200 + 2 * CONNECT_BACKOFF_MIN_MS
            }
        );
        let now = 200 + 2 * CONNECT_BACKOFF_MIN_MS;
        assert_eq!(s.want(7, now), Action::Connect);
        s.attempt_done(true, now);
        assert_eq!(s.want(7, now), Action::Use);
        assert!(!s.lost(Some(7)), "same incarnation: the set stands");
        assert!(s.lost(Some(8)), "the peer restarted");
        assert_eq!(
            s.want(8, now),
            Action::Connect,
            "the next CONNECT builds a new set"
        );
        s.attempt_done(true, now);
        assert_eq!(
            s.want(9, now),
            Action::Connect,
            "a restart seen at CONNECT too"
        );
    }
}
