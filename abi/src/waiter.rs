//! The policy of a wait for completions (GETEVENTS, the one-op ioctl's WAIT): poll for
//! `spin_us` after the first step that found nothing, then sleep, a slice at a time, so
//! that a sleeper still steps (deadlines, recovery) while nothing wakes it. The kernel
//! asks after every empty step and only carries out the answer; how it sleeps without
//! losing a wake-up is its wait queue's protocol (verify/'s loom model of it). A wait
//! the caller bounded (the enter ioctl's `TIMEOUT`) ends at its deadline, and its last
//! sleep is cut to end there.

/// The longest a waiter sleeps before it steps again, us.
pub const WAIT_SLICE_US: u32 = 10_000;

/// What a waiter does after a step that found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll again (after a scheduling point).
    Poll,
    /// Sleep until woken, at most `timeout_us`.
    Sleep {
        /// The slice, or what is left of the caller's bound if less.
        timeout_us: u32,
    },
    /// The caller's bound has passed: stop waiting.
    TimedOut,
}

/// One wait's state.
#[derive(Clone, Copy, Debug)]
pub struct WaitPolicy {
    spin_us: u64,
    /// When the first empty step was, us.
    since_us: Option<u64>,
    /// When the wait must end, us (the same clock), if the caller bounded it.
    deadline_us: Option<u64>,
}

impl WaitPolicy {
    /// A wait that polls for `spin_us` before it sleeps.
    pub const fn new(spin_us: u32) -> WaitPolicy {
        WaitPolicy {
            spin_us: spin_us as u64,
            since_us: None,
            deadline_us: None,
        }
    }

    /// The same wait, ended at `deadline_us` (`None`: unbounded).
    pub const fn until(mut self, deadline_us: Option<u64>) -> WaitPolicy {
        self.deadline_us = deadline_us;
        self
    }

    /// After a step that found nothing, at `now_us`.
    pub fn next(&mut self, now_us: u64) -> Wait {
        let since = *self.since_us.get_or_insert(now_us);
        let left = self.deadline_us.map(|d| d.saturating_sub(now_us));
        if left == Some(0) {
            Wait::TimedOut
        } else if now_us.saturating_sub(since) < self.spin_us {
            Wait::Poll
        } else {
            Wait::Sleep {
                timeout_us: left.map_or(WAIT_SLICE_US, |l| l.min(WAIT_SLICE_US as u64) as u32),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_for_the_spin_then_sleeps_in_slices() {
        let mut w = WaitPolicy::new(50);
        assert_eq!(
            w.next(1_000),
            Wait::Poll,
            "the spin counts from the first empty step"
        );
        assert_eq!(w.next(1_049), Wait::Poll);
        let sleep = Wait::Sleep {
            timeout_us: WAIT_SLICE_US,
        };
        assert_eq!(w.next(1_050), sleep);
        assert_eq!(w.next(90_000), sleep, "and keeps sleeping");
        assert_eq!(WaitPolicy::new(0).next(7), sleep, "no spin: sleep at once");
    }

    #[test]
    fn a_bounded_wait_ends_at_its_deadline() {
        let mut w = WaitPolicy::new(50).until(Some(1_030));
        assert_eq!(w.next(1_000), Wait::Poll, "spins while time is left");
        assert_eq!(w.next(1_029), Wait::Poll);
        assert_eq!(w.next(1_030), Wait::TimedOut, "the deadline ends a spin");
        let mut w = WaitPolicy::new(0).until(Some(5_000));
        assert_eq!(
            w.next(1_000),
            Wait::Sleep { timeout_us: 4_000 },
            "the last sleep is cut"
        );
        assert_eq!(w.next(5_001), Wait::TimedOut, "a late step ends it too");
        let mut w = WaitPolicy::new(0).until(Some(100_000));
        assert_eq!(
            w.next(0),
            Wait::Sleep {
                timeout_us: WAIT_SLICE_US
            },
            "far deadlines still sleep in slices"
        );
    }
}
