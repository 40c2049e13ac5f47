//! The policy of a wait for completions (GETEVENTS, the one-op ioctl's WAIT): poll for
//! `spin_us` after the first step that found nothing, then sleep, a slice at a time, so
//! that a sleeper still steps (deadlines, recovery) while nothing wakes it. The kernel
//! asks after every empty step and only carries out the answer; how it sleeps without
//! losing a wake-up is its wait queue's protocol (verify/'s loom model of it).

/// The longest a waiter sleeps before it steps again, us.
pub const WAIT_SLICE_US: u32 = 10_000;

/// What a waiter does after a step that found nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll again (after a scheduling point).
    Poll,
    /// Sleep until woken, at most `timeout_us`.
    Sleep {
        /// The slice.
        timeout_us: u32,
    },
}

/// One wait's state.
#[derive(Clone, Copy, Debug)]
pub struct WaitPolicy {
    spin_us: u64,
    /// When the first empty step was, us.
    since_us: Option<u64>,
}

impl WaitPolicy {
    /// A wait that polls for `spin_us` before it sleeps.
    pub const fn new(spin_us: u32) -> WaitPolicy {
        WaitPolicy {
            spin_us: spin_us as u64,
            since_us: None,
        }
    }

    /// After a step that found nothing, at `now_us`.
    pub fn next(&mut self, now_us: u64) -> Wait {
        let since = *self.since_us.get_or_insert(now_us);
        if now_us.saturating_sub(since) < self.spin_us {
            Wait::Poll
        } else {
            Wait::Sleep {
                timeout_us: WAIT_SLICE_US,
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
}
