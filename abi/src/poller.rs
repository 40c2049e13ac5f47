//! The SQ polling thread's policy: run while there is work; after `idle_ms` without work,
//! sleep, but only once the need-wakeup handshake ([`SqConsumer::prepare_sleep`]) says
//! no submission can be missed. The kernel's thread calls it once per step and only
//! carries out what it says.
//!
//! [`SqConsumer::prepare_sleep`]: super::ring::SqConsumer::prepare_sleep

/// What the polling thread does after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Poll again.
    Run,
    /// Nothing to do this step: poll again, but give the CPU to anything else runnable
    /// first. On a software NIC (rxe) the work that completes our requests runs on
    /// these CPUs; a poller that only yields at the tick delays it by a tick.
    Yield,
    /// Sleep until woken (or stopped).
    Sleep,
}

/// The policy's state.
#[derive(Clone, Copy, Debug)]
pub struct PollPolicy {
    idle_ms: u32,
    last_work_ms: i64,
    slept: bool,
}

impl PollPolicy {
    /// A policy that sleeps after `idle_ms` without work, starting at `now_ms`.
    pub const fn new(idle_ms: u32, now_ms: i64) -> PollPolicy {
        PollPolicy {
            idle_ms,
            last_work_ms: now_ms,
            slept: false,
        }
    }

    /// At the start of a step: `true` when the thread returns from a sleep it announced,
    /// so the caller clears `NEED_WAKEUP`.
    pub fn resume(&mut self, now_ms: i64) -> bool {
        let woke = self.slept;
        if woke {
            self.slept = false;
            self.last_work_ms = now_ms;
        }
        woke
    }

    /// After a step that did work (`Some(true)`), found none (`Some(false)`), or found its
    /// ring gone (`None`). `handshake` announces the sleep and rechecks the SQ; it runs
    /// only when the idle time is up.
    pub fn after(
        &mut self,
        now_ms: i64,
        worked: Option<bool>,
        handshake: impl FnOnce() -> bool,
    ) -> Next {
        match worked {
            Some(true) => {
                self.last_work_ms = now_ms;
                Next::Run
            }
            Some(false) if now_ms - self.last_work_ms < self.idle_ms as i64 => Next::Yield,
            Some(false) if handshake() => {
                self.slept = true;
                Next::Sleep
            }
            Some(false) => Next::Run,
            None => {
                // The ring is gone, or its SQ unusable (parked, NEED_WAKEUP set): sleep
                // until woken, and clear the flag on resuming.
                self.slept = true;
                Next::Sleep
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_only_after_idle_and_a_clean_handshake() {
        let mut p = PollPolicy::new(100, 0);
        assert_eq!(
            p.after(50, Some(false), || panic!("handshake before the idle time")),
            Next::Yield
        );
        assert_eq!(p.after(60, Some(true), || unreachable!()), Next::Run);
        assert_eq!(
            p.after(150, Some(false), || panic!("idle time restarts with work")),
            Next::Yield
        );
        assert_eq!(
            p.after(170, Some(false), || false),
            Next::Run,
            "entries arrived during the handshake"
        );
        assert!(!p.resume(171), "no sleep was announced");
        assert_eq!(p.after(180, Some(false), || true), Next::Sleep);
        assert!(p.resume(5000), "back from sleep: clear NEED_WAKEUP");
        assert_eq!(
            p.after(5001, Some(false), || panic!("idle time restarts on waking")),
            Next::Yield
        );
        assert_eq!(
            p.after(5002, None, || unreachable!()),
            Next::Sleep,
            "ring gone"
        );
    }
}
