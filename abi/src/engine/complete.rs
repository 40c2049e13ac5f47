//! Completion routing: a work completion from a physical QP's CQ retires requests on
//! that QP and names, through each `wr_id`, the ring that issued them; a request that
//! delivered a message completes the receive it filled, too.

use super::backend::{Wc, WcStatus};
use super::cqe::Reason;
use super::fabric::Qps;
use super::qp::Delivery;
use super::ring_state::Completion;
use super::wrid::WrId;
use super::Store;

/// What a send-queue work completion's status means for its request; a flush carries
/// the reason its QP failed for (`flushed`).
pub(super) fn outcome(wc: &Wc, flushed: Reason) -> Completion {
    match wc.status {
        WcStatus::Success => Completion::Done,
        WcStatus::Flushed => Completion::Failed(flushed),
        WcStatus::Failed(_) => Completion::Failed(Reason::RemoteError),
    }
}

/// What the receive a message was delivered into gets when its request ends with `c`.
fn received(d: Delivery, c: Completion) -> Completion {
    match c {
        Completion::Failed(r) => Completion::Failed(r),
        _ => Completion::Received {
            byte_len: d.byte_len,
            imm: d.imm,
        },
    }
}

/// Applies one work completion polled for physical QP `qp`: returns the credits it frees
/// and calls `route` for every request it completes, oldest first, each followed by the
/// receive it delivered into, if any. A signaled send completion also completes the
/// unsignaled requests posted before it on the QP (RC completes in order), whichever
/// rings posted them. A failed status marks the QP failed. Returns `false` if the
/// completion matched no posted request (the engine posts no receives to the hardware,
/// so a receive completion never does).
pub fn complete_wc<S: Store>(
    qps: &(impl Qps<S> + ?Sized),
    qp: u32,
    wc: &Wc,
    mut route: impl FnMut(WrId, Completion),
) -> bool {
    if wc.recv || qp as usize >= qps.count() {
        return false;
    }
    // `route` runs in the QP's section: it must take no ring's lock (see `fabric`).
    qps.qp(qp, |q, _| {
        if wc.status != WcStatus::Success {
            q.fail();
        }
        let result = outcome(wc, q.fail_reason());
        q.retire_through(wc.wr_id, |p, this_one| {
            let c = if this_one { result } else { Completion::Done };
            route(WrId::decode(p.wr_id), c);
            if let Some(d) = p.delivery {
                route(WrId::decode(d.recv), received(d, c));
            }
        })
    })
}
