//! A shared physical QP's send-queue accounting: credits, fair shares, signaling, and
//! the order of posted requests that completions are matched against.
//!
//! Credits: a request may be posted only while fewer than `depth` are outstanding on the
//! QP, and while its virtual QP holds fewer than its fair share, `depth / bound` (at
//! least 1) with `bound` virtual QPs on the QP. So rings sharing a QP can never post past
//! its depth, and none can starve the others.
//!
//! Signaling: the last request of every posted chain is signaled, and at least every
//! `depth / 2`-th one; an RC completion implies every earlier request on the QP has
//! completed, so one signaled completion retires the unsignaled ones before it, whichever
//! ring posted them. The FIFO of posted `wr_id`s is what makes that routing possible.
//!
//! Failure: a QP that reports an error (or whose posted chain stopped after an unsignaled
//! request, so no completion may ever retire it) is marked failed. Its virtual QPs get
//! `QpError` for new requests. The caller then moves the hardware QP to the error state
//! (the engine may have failed it on its own, while the hardware thinks it healthy), so
//! the NIC flushes every request; routes those flush completions; and then
//! [`recycle`](PhysQp::recycle)s it: what is still owed (executed unsignaled requests,
//! which get no completion of their own, with the receives they were delivering) is
//! retired with the failure's reason (`QpError`, or `Deadline` when the QP stopped
//! making progress), as RDMA leaves the outcome of requests in flight at an error
//! undefined.
//!
//! Held and claimed credits: a SEND waiting for its peer's receive (see
//! [`message`](super::message)) holds a credit without a place in the order yet; a request
//! gathered into a ring's chain has *claimed* one. Each takes its place in the order only
//! when it is posted, in the same section of the QP's lock as the post, so the order is
//! the order the NIC executes in, however many rings post on the QP.
//!
//! Progress: a QP with send requests outstanding whose oldest has waited longer than the
//! deadline without any completion is stuck (a peer or NIC that never answers); the
//! recovery fails it with `Deadline` (see [`recovery`](super::recovery)).

use super::cqe::Reason;
use super::ring_state::Completion;
use super::table::Fifo;
use super::wrid::WrId;
use super::Store;

/// A message a posted request delivers: the receive it fills, completed with the
/// request (see `message`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The receive's `wr_id`.
    pub recv: u64,
    /// Bytes delivered.
    pub byte_len: u32,
    /// Immediate data.
    pub imm: Option<u32>,
}

/// A request posted on a send queue, in the order posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    /// Its `wr_id`.
    pub wr_id: u64,
    /// The message it delivers, for a SEND.
    pub delivery: Option<Delivery>,
}

impl Posted {
    /// An empty entry, for filling the storage a QP is made from.
    pub const EMPTY: Posted = Posted {
        wr_id: 0,
        delivery: None,
    };
}

/// One physical QP's accounting.
pub struct PhysQp<S: Store> {
    depth: u32,
    /// Requests posted on the send queue and not yet completed, oldest first.
    posted: Fifo<Posted, S>,
    /// Credits held by sends waiting for a receive.
    held: u32,
    /// Credits claimed by requests gathered into a chain and not yet posted.
    claimed: u32,
    bound: u32,
    unsignaled_run: u32,
    /// Why it failed, when it did.
    failed: Option<Reason>,
    /// When the send queue last made progress (became busy, or retired a request), ms.
    progress_ms: i64,
    /// A completion retired requests since the recovery last looked (completions carry
    /// no time; the recovery's step does).
    progressed: bool,
    /// Counted in a [`BusyHint`](super::route::BusyHint) (kept by its `section`).
    pub(super) hinted: bool,
    /// Notices to the peer kernel posted and not yet completed (a set's QP; see
    /// [`NOTICE_ROOM`]).
    notices: u32,
    /// Kernel receives for the peer's notices are posted on it (a set's QP): their
    /// completions may come at any time.
    listening: bool,
    /// When the recovery moved it to the error state, ms (see `recovery`).
    pub(super) errored_ms: i64,
}

/// Notices a set's QP carries at once beyond its requests' depth: its hardware send
/// queue has room for them (see the module's set QPs), so they never take a ring's
/// credit. A notice waits in its link (see `message`) while there is no room.
pub const NOTICE_ROOM: u32 = 16;

impl<S: Store> PhysQp<S> {
    /// A QP with a send queue of `send.len()` entries.
    pub fn new(send: S::Buf<Posted>) -> Self {
        let posted = Fifo::new(send);
        let depth = posted.capacity() as u32;
        assert!(depth > 0, "a QP needs a send queue");
        PhysQp {
            depth,
            posted,
            held: 0,
            claimed: 0,
            bound: 0,
            unsignaled_run: 0,
            failed: None,
            progress_ms: 0,
            progressed: false,
            hinted: false,
            notices: 0,
            listening: false,
            errored_ms: 0,
        }
    }

    /// Send queue depth.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Credits in use: requests posted and not completed, held and claimed ones.
    pub fn outstanding(&self) -> u32 {
        self.posted.len() as u32 + self.held + self.claimed
    }

    /// Requests posted and not completed (what the NIC may still complete).
    pub fn posted(&self) -> u32 {
        self.posted.len() as u32
    }

    /// Virtual QPs bound to this QP.
    pub fn bound(&self) -> u32 {
        self.bound
    }

    /// A virtual QP's fair share of the send queue.
    pub fn share(&self) -> u32 {
        (self.depth / self.bound.max(1)).max(1)
    }

    /// Whether a virtual QP with `vqp_outstanding` requests in flight may post one more.
    pub fn may_post(&self, vqp_outstanding: u32) -> bool {
        self.failed.is_none() && self.outstanding() < self.depth && vqp_outstanding < self.share()
    }

    /// Whether nothing is posted and the QP has not failed: no completion can come for
    /// it, and recovery has nothing to do with it.
    pub fn quiet(&self) -> bool {
        self.failed.is_none() && self.posted.is_empty() && self.notices == 0 && !self.listening
    }

    /// Whether a notice may be posted now (and [`notice_posted`](Self::notice_posted)
    /// then counted).
    pub fn notice_room(&self) -> bool {
        self.failed.is_none() && self.notices < NOTICE_ROOM
    }

    /// Notices posted that have not completed yet.
    pub fn notices_out(&self) -> u32 {
        self.notices
    }

    /// A notice was posted.
    pub fn notice_posted(&mut self) {
        self.notices += 1;
    }

    /// A notice completed (or was flushed).
    pub fn notice_done(&mut self) {
        self.notices = self.notices.saturating_sub(1);
    }

    /// Kernel receives for notices are posted on it (`true`, a set's QP installed) or
    /// no longer (`false`, its set closed).
    pub fn set_listening(&mut self, on: bool) {
        self.listening = on;
    }

    /// Writes its line of the module's `peers` file, as pooled QP `i`:
    /// `pool qp I ready|failed bound B outstanding O`.
    pub fn write_pool_line(&self, i: u32, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        let state = if self.failed() { "failed" } else { "ready" };
        writeln!(
            w,
            "pool qp {i} {state} bound {} outstanding {}",
            self.bound(),
            self.outstanding()
        )
    }

    /// Whether the QP failed (its requests are flushed; it must be recycled).
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// The reason its flushed and owed requests complete with (`QpError` unless the QP
    /// failed for a more specific one).
    pub fn fail_reason(&self) -> Reason {
        self.failed.unwrap_or(Reason::QpError)
    }

    /// Marks the QP failed.
    pub fn fail(&mut self) {
        self.fail_with(Reason::QpError);
    }

    /// Marks the QP failed for `why`, unless it already failed.
    pub fn fail_with(&mut self, why: Reason) {
        self.failed.get_or_insert(why);
    }

    /// A set's QP whose completion failed: it is in the error state and nothing posted
    /// on it will run. It fails `PeerGone` when the peer closed the connection (the CM
    /// said so), `QpError` otherwise (its retries ran out), unless it already failed.
    pub fn lost(&mut self, peer_closed: bool) {
        self.fail_with(if peer_closed {
            Reason::PeerGone
        } else {
            Reason::QpError
        });
    }

    /// Whether the oldest send request has waited more than `deadline_ms` at `now_ms`
    /// with no completion meanwhile.
    pub fn stuck(&mut self, now_ms: i64, deadline_ms: i64) -> bool {
        if self.progressed || self.posted.is_empty() {
            self.progressed = false;
            self.progress_ms = now_ms;
            return false;
        }
        now_ms - self.progress_ms > deadline_ms
    }

    /// A virtual QP was bound to this QP.
    pub fn bind(&mut self) {
        self.bound += 1;
    }

    /// A virtual QP was released from this QP.
    pub fn unbind(&mut self) {
        debug_assert!(self.bound > 0);
        self.bound = self.bound.saturating_sub(1);
    }

    /// Takes a credit for a request to be posted later, in a chain (the caller checked
    /// [`may_post`](Self::may_post)).
    pub(crate) fn claim(&mut self) {
        self.claimed += 1;
    }

    /// Gives back `n` claimed credits (their requests are being posted: then
    /// [`reserve`](Self::reserve) takes them again; or they will not be).
    pub(crate) fn unclaim(&mut self, n: u32) {
        debug_assert!(self.claimed >= n);
        self.claimed = self.claimed.saturating_sub(n);
    }

    /// Takes a credit for `p`, posted next in this section of the QP's lock (the caller
    /// checked [`may_post`](Self::may_post), or gave back the credit it held or claimed).
    pub(crate) fn reserve(&mut self, p: Posted) {
        // Busy from now: the deadline counts from here, not from the last idle check.
        self.progressed |= self.posted.is_empty();
        let r = self.posted.push(p);
        debug_assert!(r.is_ok(), "reserve past depth");
    }

    /// Takes a credit for a send that waits (the caller checked
    /// [`may_post`](Self::may_post), or gave back the credit it claimed).
    pub(crate) fn hold(&mut self) {
        self.held += 1;
    }

    /// Gives back a held credit (its send failed, or is being posted: then
    /// [`reserve`](Self::reserve) takes it again).
    pub(crate) fn release_held(&mut self) {
        debug_assert!(self.held > 0);
        self.held = self.held.saturating_sub(1);
    }

    /// Gives back the credits of the last `n` reservations (their post failed).
    pub(crate) fn unreserve_last(&mut self, n: usize) {
        self.posted.truncate_back(n);
    }

    /// Decides whether the next request is signaled; `last` says it ends its chain.
    pub(crate) fn next_signaled(&mut self, last: bool) -> bool {
        self.unsignaled_run += 1;
        let signal = last || self.unsignaled_run >= (self.depth / 2).max(1);
        if signal {
            self.unsignaled_run = 0;
        }
        signal
    }

    /// Recycles a failed QP after the NIC flushed it (no completion for it can arrive any
    /// more): retires every request still owed, and the receives they were delivering,
    /// with the failure's reason through `route`, and makes the QP usable again.
    pub fn recycle(&mut self, mut route: impl FnMut(WrId, Completion)) {
        let why = Completion::Failed(self.fail_reason());
        while let Some(p) = self.posted.pop() {
            route(WrId::decode(p.wr_id), why);
            if let Some(d) = p.delivery {
                route(WrId::decode(d.recv), why);
            }
        }
        self.unsignaled_run = 0;
        self.failed = None;
        self.progressed = true;
        // Flushed with the rest: none can complete any more.
        self.notices = 0;
    }

    /// A failed QP with nothing owed gets a new connection (a peer set's slot, made
    /// again): usable from here.
    pub fn revive(&mut self) {
        debug_assert!(self.posted.is_empty(), "revived with requests owed");
        self.unsignaled_run = 0;
        self.failed = None;
        self.progressed = true;
        self.notices = 0;
    }

    /// Retires posted requests up to and including `wr_id`, oldest first, calling
    /// `retire(request, is_the_completed_one)` for each. Returns `false`, retiring none,
    /// if `wr_id` was never posted here.
    pub fn retire_through(&mut self, wr_id: u64, mut retire: impl FnMut(Posted, bool)) -> bool {
        if !self.posted.any(|p| p.wr_id == wr_id) {
            return false;
        }
        self.progressed = true;
        while let Some(p) = self.posted.pop() {
            retire(p, p.wr_id == wr_id);
            if p.wr_id == wr_id {
                break;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::VecStore;

    #[test]
    fn a_pooled_qp_writes_its_line() {
        let mut q = PhysQp::<VecStore>::new(alloc::vec![Posted::EMPTY; 4]);
        q.bind();
        let mut page = [0u8; 128];
        let mut w = crate::stats::Buf::new(&mut page);
        q.write_pool_line(2, &mut w).unwrap();
        q.fail();
        q.write_pool_line(2, &mut w).unwrap();
        let n = w.len();
        assert_eq!(
            core::str::from_utf8(&page[..n]).unwrap(),
            "pool qp 2 ready bound 1 outstanding 0\npool qp 2 failed bound 1 outstanding 0\n"
        );
    }

    #[test]
    fn a_lost_qp_says_whether_its_peer_closed() {
        let new = || PhysQp::<VecStore>::new(alloc::vec![Posted::EMPTY; 4]);
        let (mut closed, mut dead) = (new(), new());
        closed.lost(true);
        dead.lost(false);
        assert_eq!(
            (closed.fail_reason(), dead.fail_reason()),
            (Reason::PeerGone, Reason::QpError)
        );
        // A QP that failed already keeps its first reason.
        let mut late = new();
        late.fail_with(Reason::Deadline);
        late.lost(true);
        assert_eq!(late.fail_reason(), Reason::Deadline);
    }
}
