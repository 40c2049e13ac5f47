//! The kernel-direct baseline: one request validated exactly as the ring path validates
//! it, then posted straight to its physical QP, with no ring, no in-flight slot and no
//! credit accounting. It exists to measure what the rings and the engine add on top of a
//! bare post (the module serves it only when loaded with `bench_direct=1`), so it
//! refuses to run while anything is outstanding on the device: it must not share a QP's
//! depth with accounted requests.

use super::backend::{SendKind, SendWr, Wc, WcStatus};
use super::complete::outcome;
use super::cqe::{Cqe, Reason};
use super::fabric::{Fabric, Qps};
use super::ring::RingMem;
use super::ring_state::{Completion, Ring};
use super::sqe::Sqe;
use super::validate::{validate, Op};
use super::wrid::backend_wr_id;
use super::Store;

/// The wr_id of a direct request: the backend's own request 0 (no ring's).
pub const DIRECT_WR_ID: u64 = backend_wr_id(0);

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// Validates `sqe` against this ring's tables and posts it, signaled, with
    /// [`DIRECT_WR_ID`]; returns the physical QP, on which the caller polls for that
    /// completion. A rejected request is
    /// answered with the error CQE the ring path would produce (`Busy` while anything
    /// is outstanding; `BadOpcode` for anything but a one-sided request).
    pub fn direct<F: Fabric<S>>(&mut self, sqe: &Sqe, f: &F) -> Result<u32, Cqe> {
        let ud = sqe.user_data;
        let op = validate(sqe, &mut self.tables, f).map_err(|r| Cqe::err(ud, r))?;
        // One-sided only: SEND and WRITE_IMM take their peer's receive (see `message`).
        let Op::Send {
            vqp,
            kind,
            local,
            flags,
            ..
        } = op
        else {
            return Err(Cqe::err(ud, Reason::BadOpcode));
        };
        if matches!(
            kind,
            SendKind::Send { .. } | SendKind::Write { imm: Some(_), .. }
        ) {
            return Err(Cqe::err(ud, Reason::BadOpcode));
        }
        let count = f.count() as u32;
        if (0..count).any(|i| f.qp(i, |q, _| q.outstanding() > 0)) {
            return Err(Cqe::err(ud, Reason::Busy));
        }
        let qp = self.tables.vqps.get(vqp).expect("validated").qp;
        let wr = SendWr {
            wr_id: DIRECT_WR_ID,
            kind,
            local,
            signaled: true,
            flags,
        };
        f.qp(qp, |q, post| {
            if q.failed() {
                return Err(Cqe::err(ud, Reason::QpError));
            }
            post.post_send(&[wr])
                .map(|()| qp)
                .map_err(|e| Cqe::err_errno(ud, Reason::Verbs, e.errno))
        })
    }
}

/// The CQE of a direct request of `len` bytes whose work completion on physical QP `qp`
/// is `wc`, as the ring path would write it; a failed status marks the QP failed, as
/// routing does.
pub fn direct_complete<S: Store>(
    qps: &(impl Qps<S> + ?Sized),
    qp: u32,
    user_data: u64,
    len: u32,
    wc: &Wc,
) -> Cqe {
    if wc.status != WcStatus::Success && (qp as usize) < qps.count() {
        qps.qp(qp, |q, _| q.fail());
    }
    match outcome(wc, Reason::QpError) {
        Completion::Failed(r) => Cqe::err(user_data, r),
        _ => Cqe::ok(user_data, len as i32, 0),
    }
}
