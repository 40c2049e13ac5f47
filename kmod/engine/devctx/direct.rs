// SPDX-License-Identifier: GPL-2.0
//! `IOC_DIRECT`: one work request posted straight to a pooled QP and waited for, the
//! kernel-direct baseline the benchmarks compare the rings with.

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use crate::abi::compat::OneOp;
use crate::abi::cqe::{Cqe, Reason};
use crate::abi::engine::{direct_complete, DIRECT_WR_ID, Qps};
use crate::ring::ctx::RingCell;
use crate::shim::{self, WcC};

use super::{DevCtx, POLL_BATCH};

/// How long `IOC_DIRECT` waits for its completion before failing the QP.
const DIRECT_PATIENCE_MS: i64 = 1000;

impl DevCtx {
    /// `IOC_DIRECT` (engine/direct.rs): posts `op.sqe` straight to its physical QP and
    /// polls for its completion, holding the CQ's lock so no one else routes meanwhile;
    /// `op.cqe` gets the CQE the ring path would have produced.
    pub(crate) fn direct(&self, ring: &RingCell, op: &mut OneOp) -> Result {
        op.validate()?;
        let mut cq = self.cq.lock();
        if self.dead.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        op.popped = 1;
        let posted_on = match ring.ctx.lock().engine().direct(&op.sqe, &self.shared) {
            Ok(qp) => qp,
            Err(c) => {
                op.cqe = c;
                return Ok(());
            }
        };
        let started = crate::clock::now_ms();
        let mut gave_up = false;
        let mut wcs = [WcC::default(); POLL_BATCH];
        let result = loop {
            let n = cq.poll(&mut wcs);
            let mut mine = None;
            for c in &wcs[..n] {
                let Some((qp, wc)) = self.wc(c) else {
                    continue;
                };
                if wc.wr_id == DIRECT_WR_ID {
                    mine = Some(direct_complete(&self.shared, qp, op.sqe.user_data, op.sqe.len, &wc));
                } else {
                    // Flushes of a recycled QP, say: route them as usual.
                    self.route_wc(qp, &wc);
                }
            }
            if let Some(c) = mine {
                break c;
            }
            if n == 0 {
                // Not interruptible: a pending "signal" is often only task work (an
                // io_uring of the same process tearing down), and giving up means
                // failing the QP. A request that has not completed within a second is
                // given up on: the QP fails and recovery moves it to the error state, so
                // the request flushes and completes (before its flush marker, so before
                // the pair can be re-armed).
                // SIGKILL is never task work: a dying caller gives up at once.
                // SAFETY: plain query of current.
                let dying = unsafe { shim::krcore_shim_fatal_signal_pending() };
                let patience_over = crate::clock::now_ms() - started > DIRECT_PATIENCE_MS;
                if !gave_up && (dying || patience_over) {
                    gave_up = true;
                    self.shared.qp(posted_on, |q, _| q.fail());
                }
                if gave_up {
                    self.recover();
                    if !self.shared.qp(posted_on, |q, _| q.failed()) {
                        // Re-armed without its flush (the marker was lost too): the
                        // queues were emptied, nothing more will come.
                        break Cqe::err(op.sqe.user_data, Reason::QpError);
                    }
                }
                // CQ lock held on purpose (see above); rxe's work runs on these CPUs.
                // SAFETY: plain scheduling point; sleeping under a mutex is allowed.
                unsafe { shim::krcore_shim_cond_resched() };
            }
        };
        op.cqe = result;
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.flush_rings();
        }
        Ok(())
    }
}
