// SPDX-License-Identifier: GPL-2.0
//! Entries io_uring carries (abi's engine/uring.rs): one per `IORING_OP_URING_CMD`,
//! taken under the ring's lock as the ring's own entries are, its CQE handed back to
//! io_uring (at once, or from its task when the request completes; ring/ctx.rs's
//! `hand_back`).

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use crate::abi::engine::{uring_result, Caller, Context, One, Stall};
use crate::abi::errno::Errno;
use crate::abi::sqe::Sqe;
use crate::ring::ctx::RingCell;
use crate::shim;

use super::enter::{Ended, Next};
use super::{deadline_ms, now_us, DevCtx};

/// What became of a command's entry.
pub(crate) enum Carried {
    /// Complete the command now with this `res` and extra word.
    Now(i32, u64),
    /// Taken: it completes when its request does.
    Later,
}

impl DevCtx {
    /// Takes `sqe`, carried by io_uring command `cmd`, for `ring` as `caller`. An entry
    /// the ring would make wait (no credit, no room, a connection set being made) fails
    /// `EAGAIN` under `nonblock` (io_uring then retries it from its worker, which may
    /// block); a blocking caller waits as enter does, at most a request deadline, then
    /// fails `EAGAIN` too.
    pub(crate) fn uring_one(
        &self,
        ring: &RingCell,
        sqe: &Sqe,
        cmd: u64,
        nonblock: bool,
        caller: Caller,
    ) -> Result<Carried> {
        let deadline = now_us() + deadline_ms() as u64 * 1000;
        let done = self.until(ring, Some(deadline), |ctx| {
            if self.dead.load(Ordering::Acquire) {
                return Err(ENODEV);
            }
            let cx = Context {
                caller,
                // SAFETY: plain call.
                now_ms: unsafe { shim::krcore_shim_coarse_ms() },
            };
            let one = ctx.engine().submit_one(&self.shared, sqe, cmd, cx);
            let mine = ctx.hand_back(cmd);
            match one {
                One::Taken => Ok(Next::Done(mine)),
                One::Wait(s) => {
                    if s == Stall::Remote {
                        // The workers do the network work; the entry is taken after.
                        self.kick_net();
                    }
                    if nonblock {
                        Err(EAGAIN)
                    } else {
                        Ok(Next::Again)
                    }
                }
            }
        })?;
        match done {
            Ended::Done(Some(c)) => {
                let (res, extra) = uring_result(&c);
                Ok(Carried::Now(res, extra))
            }
            Ended::Done(None) => Ok(Carried::Later),
            Ended::Interrupted => Err(Errno::EINTR.into()),
            Ended::TimedOut => Err(EAGAIN),
        }
    }
}
