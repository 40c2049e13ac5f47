// SPDX-License-Identifier: GPL-2.0
//! Entries io_uring carries (abi's engine/uring.rs): one per `IORING_OP_URING_CMD`,
//! taken under the ring's lock as the ring's own entries are, its CQE handed back to
//! io_uring (at once, or from its task when the request completes; ring/ctx.rs's
//! `hand_back`).
//!
//! The common case is one lock of the ring and nothing else: no clock read, no routing
//! (the ring keeps the CQ armed from its first carried entry, so CQ events route what
//! completes later, and the device's expiry, every second, sweeps what waits on a
//! deadline: a SEND for a receive, a CONNECT for a listen). Only an entry the ring makes
//! wait, from a caller that may block (io_uring's worker), goes through enter's bounded
//! wait. A command that completes later is cancelable (`cancel` in ring/file.rs).

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use crate::abi::engine::{uring_result, Caller, Context, One, Stall};
use crate::abi::errno::Errno;
use crate::abi::sqe::Sqe;
use crate::ring::ctx::{RingCell, RingCtx};

use super::enter::{Ended, Next};
use super::DevCtx;
use crate::clock::{deadline_ms, now_us};

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
        let first = {
            let mut ctx = ring.ctx.lock();
            ring.absorb_mail(&mut ctx);
            self.carry(&mut ctx, sqe, cmd, caller)?
        };
        let carried = match first {
            Some((c, armed)) => {
                if armed {
                    self.listen_polled();
                }
                return Ok(c);
            }
            None if nonblock => return Err(EAGAIN),
            None => {
                let deadline = now_us() + deadline_ms() as u64 * 1000;
                self.until(ring, Some(deadline), |ctx| {
                    Ok(match self.carry(ctx, sqe, cmd, caller)? {
                        Some(done) => Next::Done(done),
                        None => Next::Again,
                    })
                })?
            }
        };
        match carried {
            Ended::Done((c, armed)) => {
                if armed {
                    self.listen_polled();
                }
                Ok(c)
            }
            Ended::Interrupted => Err(Errno::EINTR.into()),
            Ended::TimedOut => Err(EAGAIN),
        }
    }

    /// One try under the ring's lock: the entry's fate (and whether the ring keeps the
    /// CQ armed from now on: its first carried entry), or `None` when the ring makes it
    /// wait.
    fn carry(
        &self,
        ctx: &mut RingCtx,
        sqe: &Sqe,
        cmd: u64,
        caller: Caller,
    ) -> Result<Option<(Carried, bool)>> {
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        let cx = Context {
            caller,
            now_ms: crate::clock::coarse_ms(),
        };
        let one = ctx.engine().submit_one(&self.shared, sqe, cmd, cx);
        let mine = ctx.hand_back(cmd);
        // What the entry ended of the ring's own (a DISCONNECT's receives) wakes them.
        ctx.notify(self.sleepers.load(Ordering::Acquire) > 0);
        match one {
            One::Taken => {
                // Its completion comes with nobody waiting in krcore: routed by CQ
                // events from now on.
                let armed = ctx.keep_armed();
                let c = match mine {
                    Some(c) => {
                        let (res, extra) = uring_result(&c);
                        Carried::Now(res, extra)
                    }
                    None => Carried::Later,
                };
                Ok(Some((c, armed)))
            }
            One::Wait(s) => {
                if s == Stall::Remote {
                    // The workers do the network work; the entry is taken after.
                    self.kick_net();
                }
                Ok(None)
            }
        }
    }
}
