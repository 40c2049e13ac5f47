//! Completion routing: a work completion from a physical QP's CQ retires requests on
//! that QP and names, through each `wr_id`, the ring that issued them.

use super::backend::{Wc, WcStatus};
use super::cqe::Reason;
use super::qp::PhysQp;
use super::ring_state::Completion;
use super::wrid::WrId;
use super::Store;

/// What a work completion's status means for its request; a flush carries the reason
/// its QP failed for (`flushed`).
pub(super) fn outcome(wc: &Wc, flushed: Reason) -> Completion {
    match (wc.status, wc.recv) {
        (WcStatus::Success, false) => Completion::Done,
        (WcStatus::Success, true) => Completion::Received {
            byte_len: wc.byte_len,
            imm: wc.imm,
        },
        (WcStatus::Flushed, _) => Completion::Failed(flushed),
        (WcStatus::Failed(_), _) => Completion::Failed(Reason::RemoteError),
    }
}

/// Applies one work completion polled for physical QP `qp`: returns the credits it frees
/// and calls `route` for every request it completes, oldest first. A signaled send
/// completion also completes the unsignaled requests posted before it on the QP (RC
/// completes in order), whichever rings posted them. A failed status marks the QP failed.
/// Returns `false` if the completion matched no posted request.
pub fn complete_wc<S: Store>(
    qps: &mut [PhysQp<S>],
    qp: u32,
    wc: &Wc,
    mut route: impl FnMut(WrId, Completion),
) -> bool {
    let Some(q) = qps.get_mut(qp as usize) else {
        return false;
    };
    if wc.status != WcStatus::Success {
        q.fail();
    }
    let result = outcome(wc, q.fail_reason());
    if wc.recv {
        if !q.recv_done(wc.wr_id) {
            return false;
        }
        route(WrId::decode(wc.wr_id), result);
        return true;
    }
    q.retire_through(wc.wr_id, |w, this_one| {
        route(
            WrId::decode(w),
            if this_one { result } else { Completion::Done },
        )
    })
}
