//! One user cannot keep the shared QPs broken for the others.
//!
//! A request whose work completion reports an error (not a flush) broke its physical
//! QP: the pair is failed, flushed and re-armed, and every ring sharing it loses what it
//! had in flight. The ring that posted the request is blamed with a strike, and a ring
//! with strikes is throttled: its data requests (everything posted to a shared QP) fail
//! with [`Reason::Throttled`] for a backoff that doubles with each strike, from
//! [`BACKOFF_BASE_MS`] up to [`BACKOFF_MAX_MS`]. Control entries and NOPs still run, so
//! the ring can still disconnect and deregister. Strikes never expire: a ring that
//! broke pairs stays suspect for its life.
//!
//! [`Reason::Throttled`]: super::cqe::Reason::Throttled

/// Backoff after the first strike.
pub const BACKOFF_BASE_MS: i64 = 1_000;
/// Longest backoff.
pub const BACKOFF_MAX_MS: i64 = 60_000;

/// A ring's record of the pairs it broke.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Blame {
    /// Strikes counted so far.
    strikes: u32,
    /// Strikes routed to the ring since it last submitted (completions carry no time).
    pending: u32,
    /// Throttled until this time, in ms.
    until_ms: i64,
}

impl Blame {
    /// A request of this ring broke its QP.
    pub fn strike(&mut self) {
        self.pending = self.pending.saturating_add(1);
    }

    /// Strikes so far, counted or pending.
    pub fn strikes(&self) -> u32 {
        self.strikes + self.pending
    }

    /// Whether data requests are refused at `now_ms`; counts pending strikes first.
    pub fn throttled(&mut self, now_ms: i64) -> bool {
        if self.pending > 0 {
            self.strikes = self.strikes.saturating_add(self.pending);
            self.pending = 0;
            let shift = (self.strikes - 1).min(20);
            let backoff = (BACKOFF_BASE_MS << shift).min(BACKOFF_MAX_MS);
            self.until_ms = now_ms + backoff;
        }
        now_ms < self.until_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_strike_up_to_the_cap() {
        let mut b = Blame::default();
        assert!(!b.throttled(0), "no strike, no throttle");
        b.strike();
        assert!(b.throttled(1000));
        assert!(b.throttled(1000 + BACKOFF_BASE_MS - 1));
        assert!(!b.throttled(1000 + BACKOFF_BASE_MS));
        b.strike();
        assert!(b.throttled(5000));
        assert!(b.throttled(5000 + 2 * BACKOFF_BASE_MS - 1));
        assert!(!b.throttled(5000 + 2 * BACKOFF_BASE_MS));
        for _ in 0..30 {
            b.strike();
        }
        assert!(b.throttled(10_000));
        assert!(!b.throttled(10_000 + BACKOFF_MAX_MS), "capped");
        assert_eq!(b.strikes(), 32);
    }
}
