//! Waiting for completions without holding the ring's lock: the contract is in
//! [`lock`](crate::lock). Every blocking call of the library comes down to
//! [`CoreGuard::turn`].

use std::time::{Duration, Instant};

use krcore_abi::cqe::Cqe;
use krcore_abi::errno::Errno;
use krcore_abi::layout::EnterFlags;
use krcore_abi::sqe::Sqe;
use krcore_abi::waiter::WAIT_SLICE_US;

use crate::lock::CoreGuard;
use crate::Error;

/// How long a caller waits for the thread in the kernel before it submits again (what
/// it pushed may sit behind an entry the module's workers are still serving).
const TURN: Duration = Duration::from_micros(WAIT_SLICE_US as u64);

/// The microseconds left until `bound` (at least 1), 0 for none; `ETIME` once passed.
fn left_us(op: &'static str, bound: Option<Instant>) -> Result<u32, Error> {
    let Some(b) = bound else { return Ok(0) };
    match b.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d.as_micros().clamp(1, u32::MAX as u128) as u32),
        _ => Err(Error::errno(op, Errno::ETIME)),
    }
}

/// `timeout_us` from now (0: no bound).
fn bound_of(timeout_us: u32) -> Option<Instant> {
    (timeout_us != 0).then(|| Instant::now() + Duration::from_micros(timeout_us as u64))
}

impl CoreGuard<'_> {
    /// Has the kernel take what is queued; returns how many it took. On an SQPOLL ring
    /// the polling thread takes them (woken if it sleeps): the count is what was
    /// published.
    pub(crate) fn submit(&mut self) -> Result<u32, Error> {
        let bell = self.bell();
        if self.sqpoll {
            let n = self.sq_unread();
            if self.sq_needs_wakeup() {
                let args = self.enter_args(0, EnterFlags::SQ_WAKEUP, 0);
                self.unlocked(|| bell.enter(&args, true))?;
            }
            return Ok(n);
        }
        let args = self.enter_args(0, EnterFlags::empty(), 0);
        self.unlocked(|| bell.enter(&args, true))
    }

    /// One turn of waiting, then a reap: submits what is queued and, if no other thread
    /// waits in the kernel, waits there (lock let go) until `min` more completions are
    /// ready or `bound` passes (a wait for more than one, a slice at most); else waits
    /// for that thread to come back, or a slice. Returns how many SQEs this turn's
    /// enter took (`None` if it was interrupted first). `ETIME` only when `bound` has
    /// passed before the turn.
    pub(crate) fn turn(
        &mut self,
        op: &'static str,
        min: u32,
        bound: Option<Instant>,
    ) -> Result<Option<u32>, Error> {
        self.turn_by(op, min, bound, true)
    }

    /// [`turn`](Self::turn), its enter's arguments passed by value when `by_value`
    /// allows.
    fn turn_by(
        &mut self,
        op: &'static str,
        min: u32,
        bound: Option<Instant>,
        by_value: bool,
    ) -> Result<Option<u32>, Error> {
        let mut left = left_us(op, bound)?;
        if self.in_kernel {
            let n = self.submit()?;
            let slice = match left {
                0 => TURN,
                l => TURN.min(Duration::from_micros(l as u64)),
            };
            self.wait_turn(slice);
            self.reap();
            return Ok(Some(n));
        }
        if min > 1 {
            // Followers' completions count toward `min` but cannot end the wait alone:
            // come back within a slice to let them have theirs.
            left = match left {
                0 => WAIT_SLICE_US,
                l => l.min(WAIT_SLICE_US),
            };
        }
        let wake = match self.sqpoll && self.sq_needs_wakeup() {
            true => EnterFlags::SQ_WAKEUP,
            false => EnterFlags::empty(),
        };
        let timed = match left {
            0 => EnterFlags::empty(),
            _ => EnterFlags::TIMEOUT,
        };
        let args = self.enter_args(min, EnterFlags::GETEVENTS | wake | timed, left);
        self.in_kernel = true;
        let bell = self.bell();
        let r = self.unlocked(|| bell.enter(&args, by_value));
        self.in_kernel = false;
        self.reap();
        self.end_turn();
        match r {
            Ok(n) => Ok(Some(n)),
            // The kernel returns early when a signal or task work (io_uring's, for one)
            // is pending, as io_uring_enter does: nothing was taken, enter again.
            Err(e) if e.raw_os_error() == Some(krcore_abi::errno::Errno::EINTR.0) => Ok(None),
            // At the slice or the bound, with nothing taken.
            Err(e) if e.raw_os_error() == Some(krcore_abi::errno::Errno::ETIME.0) => Ok(Some(0)),
            Err(e) => Err(e),
        }
    }

    /// Submits, then waits until the stash holds `want` raw completions beyond
    /// `already` (those the caller holds); with `timeout_us` (non-zero) at most that
    /// long: `ETIME` if fewer are ready then. Returns how many SQEs the first enter took.
    pub(crate) fn submit_and_wait(
        &mut self,
        want: u32,
        already: usize,
        timeout_us: u32,
    ) -> Result<u32, Error> {
        self.submit_and_wait_by(want, already, timeout_us, true)
    }

    /// [`submit_and_wait`](Self::submit_and_wait), its enters' arguments passed by
    /// value when `by_value` allows (the benchmarks compare the two).
    pub(crate) fn submit_and_wait_by(
        &mut self,
        want: u32,
        already: usize,
        timeout_us: u32,
        by_value: bool,
    ) -> Result<u32, Error> {
        let bound = bound_of(timeout_us);
        let mut taken = None;
        loop {
            self.reap();
            let ready = self.stash.len() + already;
            if let Some(n) = taken.filter(|_| ready >= want as usize) {
                // The raw reader itself waited: it reads what is stashed next.
                self.raw_looked();
                return Ok(n);
            }
            let more = want.saturating_sub(ready as u32);
            match self.turn_by("wait", more, bound, by_value) {
                Ok(n) => {
                    taken = taken.or(n);
                }
                Err(e)
                    if e.raw_os_error() == Some(krcore_abi::errno::Errno::ETIME.0)
                        && taken.is_none() =>
                {
                    taken = Some(0);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Pushes `sqes` (tagged), submits, and waits until each has completed; returns
    /// their completions in order.
    pub(crate) fn wait_tagged(
        &mut self,
        op: &'static str,
        sqes: &[Sqe],
    ) -> Result<Vec<Cqe>, Error> {
        let tags = match (sqes.first(), sqes.last()) {
            (Some(f), Some(l)) => f.user_data..l.user_data + 1,
            _ => return Ok(Vec::new()),
        };
        let mut pushed = 0;
        loop {
            while pushed < sqes.len() && self.push(sqes[pushed]) {
                pushed += 1;
            }
            match self.turn(op, 1, None) {
                Ok(_) => {}
                // Nothing of the batch is in the SQ, or the device is gone and its QPs
                // with it: nothing can still use the memory the batch borrows.
                Err(e)
                    if pushed == 0
                        || e.raw_os_error() == Some(krcore_abi::errno::Errno::ENODEV.0) =>
                {
                    return Err(e.context(op))
                }
                // Entries are queued or in flight: the batch's borrows last until each
                // completed (returning now would let the caller free memory the NIC
                // still writes), so the wait goes on.
                Err(_) => self.unlocked(|| std::thread::sleep(Duration::from_millis(1))),
            }
            if let Some(got) = self.take_finished(&tags) {
                return Ok(got);
            }
        }
    }

    /// Submits, then waits until a completion of `tag` is filed and takes it: at most
    /// `timeout_us` (0: no bound; then `ETIME`).
    pub(crate) fn wait_next(
        &mut self,
        op: &'static str,
        tag: u64,
        timeout_us: u32,
    ) -> Result<Cqe, Error> {
        let bound = bound_of(timeout_us);
        loop {
            self.reap();
            if let Some(c) = self.take_next(tag) {
                return Ok(c);
            }
            self.turn(op, 1, bound).map_err(|e| e.context(op))?;
        }
    }

    /// Runs one control entry tagged by the library and waits for its completion,
    /// which fails the call if it failed.
    pub(crate) fn control(&mut self, op: &'static str, mut sqe: Sqe) -> Result<Cqe, Error> {
        self.tag(std::slice::from_mut(&mut sqe));
        let c = self.wait_tagged(op, &[sqe])?.pop().expect("one completion");
        if c.res < 0 {
            return Err(Error::failed(op, &c));
        }
        Ok(c)
    }
}
