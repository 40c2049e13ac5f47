//! Submission: take SQEs, validate them, do control operations, and post data
//! operations to the shared physical QPs in chains.
//!
//! An SQE that cannot proceed now (no credit, no in-flight slot, no room for its CQE, or
//! its object busy with sends in flight) is not taken: it waits in the SQ, and so do all
//! after it, keeping the ring's order. Everything else is taken and owes one CQE.

use super::backend::{Backend, PostError, SendKind, SendWr, Sge};
use super::cqe::{Cqe, Reason};
use super::errno::Errno;
use super::export::Exports;
use super::layout::SqFlags;
use super::message::{Messages, PostedRecv, RecvStep, SendStep, Target, WaitingSend};
use super::qp::{Delivery, PhysQp, Posted};
use super::register::{Caller, Context, Pending, Registration};
use super::ring::{RingError, RingMem};
use super::ring_state::{revoke, Completion, Inflight, Ring, Vqp};
use super::sqe::{Sqe, SqeFlags};
use super::validate::{validate, Op};
use super::wrid::WrId;
use super::Store;

/// Requests gathered into one `post_send` call at most.
pub const CHAIN: usize = 16;

/// Why submission stopped before the SQ was empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// The ring owes as many CQEs as its overflow list holds: reap the CQ.
    CqFull,
    /// A physical QP has no credit for the virtual QP: completions will return some.
    NoCredit,
    /// Every in-flight slot is used.
    InflightFull,
    /// DISCONNECT or DEREG_MR waits for its object's sends to complete.
    Busy,
    /// A REG_MR was taken (or is still being registered): the caller registers it
    /// outside its locks (see [`register`](super::register)), then submits again.
    Register,
}

/// What one submission call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    /// SQEs taken.
    pub taken: u32,
    /// Why it stopped early, if it did.
    pub stall: Option<Stall>,
}

/// Requests for one physical QP, posted together. Kept in the ring and used in place, so
/// a submission neither re-initializes nor copies it (it is about 1 KiB; moving it in
/// and out of the ring per call cost more than the rest of an empty submission).
pub struct Chain {
    qp: u32,
    n: usize,
    wrs: [SendWr; CHAIN],
    /// For a SEND, the receive it took (link, the receive's end, the receive): put back
    /// if the post fails.
    took: [Option<(u32, u8, PostedRecv)>; CHAIN],
}

impl Chain {
    /// An empty chain.
    pub const fn new() -> Chain {
        Chain {
            qp: 0,
            n: 0,
            wrs: [NO_WR; CHAIN],
            took: [None; CHAIN],
        }
    }
}

impl Default for Chain {
    fn default() -> Self {
        Chain::new()
    }
}

const NO_WR: SendWr = SendWr {
    wr_id: 0,
    kind: SendKind::Send { imm: None },
    local: Sge {
        addr: 0,
        len: 0,
        lkey: 0,
    },
    signaled: false,
    flags: SqeFlags::empty(),
};

enum Step {
    Taken,
    /// Taken, and submission stops after it.
    TakenThen(Stall),
    Wait(Stall),
}

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// Takes up to `max` SQEs in context `cx`, validating against this ring's tables and
    /// the node's `exports`, matching two-sided messages through the node's `messages`.
    /// Fails, taking none, when the SQ tail is hostile.
    pub fn submit<B: Backend>(
        &mut self,
        qps: &mut [PhysQp<S>],
        exports: &mut Exports<S>,
        messages: &mut Messages<S>,
        backend: &mut B,
        max: u32,
        cx: Context,
    ) -> Result<Submitted, RingError> {
        self.flush_overflow();
        if self.registration != Pending::None {
            self.publish();
            return Ok(Submitted {
                taken: 0,
                stall: Some(Stall::Register),
            });
        }
        let ready = match self.sq.ready() {
            Ok(n) => n,
            Err(e) => {
                self.sq.set_flag(SqFlags::TAIL_OVERRUN, true);
                return Err(e);
            }
        };
        let (mut taken, mut stall) = (0, None);
        let throttled = self.blame.throttled(cx.now_ms);
        while taken < ready.min(max) {
            if !self.has_room() {
                stall = Some(Stall::CqFull);
                break;
            }
            let Some(sqe) = self.sq.peek(taken) else {
                break;
            };
            match self.step(&sqe, qps, exports, messages, backend, cx, throttled) {
                Step::Taken => taken += 1,
                Step::TakenThen(s) => {
                    taken += 1;
                    stall = Some(s);
                    break;
                }
                Step::Wait(s) => {
                    stall = Some(s);
                    break;
                }
            }
        }
        self.flush_chain(qps, messages, backend);
        self.sq.consume(taken);
        self.stats.taken += taken as u64;
        self.publish();
        Ok(Submitted { taken, stall })
    }

    #[allow(clippy::too_many_arguments)]
    fn step<B: Backend>(
        &mut self,
        sqe: &Sqe,
        qps: &mut [PhysQp<S>],
        exports: &mut Exports<S>,
        messages: &mut Messages<S>,
        backend: &mut B,
        cx: Context,
        throttled: bool,
    ) -> Step {
        let ud = sqe.user_data;
        let op = match validate(sqe, &self.tables, exports) {
            Ok(op) => op,
            Err(r) => {
                self.emit(Cqe::err(ud, r));
                return Step::Taken;
            }
        };
        let t = &mut self.tables;
        let cqe = match op {
            Op::Nop => Cqe::ok(ud, 0, 0),
            Op::RegMr { .. } if cx.caller != Caller::Owner => Cqe::err(ud, Reason::NotOwner),
            Op::Send { .. } | Op::Recv { .. } if throttled => Cqe::err(ud, Reason::Throttled),
            Op::RegMr { addr, len, access } => {
                self.registration = Pending::Taken(Registration {
                    user_data: ud,
                    addr,
                    len,
                    access,
                });
                // Our unposted requests go out before the caller drops its locks.
                self.flush_chain(qps, messages, backend);
                return Step::TakenThen(Stall::Register);
            }
            Op::DeregMr { mr } => {
                let m = *t.mrs.get(mr).expect("validated");
                if m.recvs > 0 {
                    Cqe::err(ud, Reason::Busy)
                } else if m.sends > 0 {
                    return self.wait_for_sends(qps, messages, backend);
                } else {
                    t.mrs.remove(mr);
                    revoke(exports, m.descriptor, (self.id, self.gen));
                    backend.dereg_mr(m.keys);
                    Cqe::ok(ud, 0, 0)
                }
            }
            // Room first: a link end, once joined, is given up only by a disconnect.
            Op::Connect { .. } if t.vqps.len() == t.vqps.capacity() => {
                Cqe::err(ud, Reason::TableFull)
            }
            Op::Connect { gid, service } => {
                let open = messages.half_open(&gid, service);
                match backend.connect(gid, service, open.map(|o| o.qp)) {
                    Err(e) => Cqe::err_errno(
                        ud,
                        if e == Errno::ENODEV {
                            Reason::NoDevice
                        } else {
                            Reason::Verbs
                        },
                        e,
                    ),
                    Ok(conn) if conn.qp as usize >= qps.len() => {
                        backend.disconnect(conn.qp);
                        Cqe::err(ud, Reason::Verbs)
                    }
                    Ok(conn) => match messages.join(gid, service, conn.qp, open) {
                        None => {
                            backend.disconnect(conn.qp);
                            Cqe::err(ud, Reason::TableFull)
                        }
                        Some((link, end)) => {
                            let h = t.vqps.insert(Vqp {
                                qp: conn.qp,
                                qpn: conn.qpn,
                                sends: 0,
                                recvs: 0,
                                link,
                                end,
                            });
                            let h = h.expect("room checked");
                            qps[conn.qp as usize].bind();
                            Cqe::ok(ud, h as i32, conn.qpn as u64)
                        }
                    },
                }
            }
            Op::Disconnect { vqp } => {
                self.cancel_recvs(vqp, messages);
                let t = &mut self.tables;
                let v = *t.vqps.get(vqp).expect("validated");
                if v.sends > 0 || v.recvs > 0 {
                    // Sends in flight or waiting for a receive, or a message being
                    // delivered: all end within the request deadline.
                    return self.wait_for_sends(qps, messages, backend);
                }
                t.vqps.remove(vqp);
                t.rmrs.drain_where(|_, r| r.vqp == vqp);
                messages.leave(v.link, v.end, qps);
                qps[v.qp as usize].unbind();
                backend.disconnect(v.qp);
                Cqe::ok(ud, 0, 0)
            }
            Op::ImportMr {
                vqp,
                addr,
                len,
                descriptor,
            } => match t.rmrs.insert(super::ring_state::RemoteMr {
                vqp,
                addr,
                len,
                descriptor,
            }) {
                Ok(h) => Cqe::ok(ud, h as i32, 0),
                Err(_) => Cqe::err(ud, Reason::TableFull),
            },
            Op::Send {
                vqp,
                mr,
                kind,
                local,
                flags,
            } => {
                let v = *t.vqps.get(vqp).expect("validated");
                let q = &qps[v.qp as usize];
                if q.failed() {
                    Cqe::err(ud, Reason::QpError)
                } else if !q.may_post(v.sends) {
                    return Step::Wait(Stall::NoCredit);
                } else {
                    if self.chain.n == CHAIN || (self.chain.n > 0 && self.chain.qp != v.qp) {
                        self.flush_chain(qps, messages, backend);
                    }
                    let inf = Inflight {
                        user_data: ud,
                        vqp,
                        mr,
                        len: local.len,
                        recv: false,
                    };
                    let Some(wr_id) = self.track(inf) else {
                        return Step::Wait(Stall::InflightFull);
                    };
                    // SEND and WRITE_IMM take a receive of the peer's (see `message`).
                    let target = match kind {
                        SendKind::Send { .. } => Some(Target::Receive),
                        SendKind::Write {
                            remote_addr,
                            rkey,
                            imm: Some(_),
                        } => Some(Target::Remote { remote_addr, rkey }),
                        _ => None,
                    };
                    let (kind, took) = match (target, kind) {
                        (Some(target), SendKind::Send { imm } | SendKind::Write { imm, .. }) => {
                            let s = WaitingSend {
                                wr_id,
                                local,
                                target,
                                imm,
                                flags,
                                since_ms: cx.now_ms,
                            };
                            match messages.send(v.link, v.end, s) {
                                SendStep::Deliver(r) => {
                                    (s.kind(&r), Some((v.link, 1 - v.end, r, imm)))
                                }
                                SendStep::Waits => {
                                    qps[v.qp as usize].hold();
                                    return Step::Taken;
                                }
                                SendStep::Fail(why) => {
                                    self.fail_unposted(wr_id, why, why.errno());
                                    return Step::Taken;
                                }
                            }
                        }
                        (_, k) => (k, None),
                    };
                    qps[v.qp as usize].reserve(Posted {
                        wr_id,
                        delivery: took.map(|(_, _, r, imm)| Delivery {
                            recv: r.wr_id,
                            byte_len: local.len,
                            imm,
                        }),
                    });
                    let chain = &mut self.chain;
                    chain.qp = v.qp;
                    chain.wrs[chain.n] = SendWr {
                        wr_id,
                        kind,
                        local,
                        signaled: false,
                        flags,
                    };
                    chain.took[chain.n] = took.map(|(link, end, r, _)| (link, end, r));
                    chain.n += 1;
                    return Step::Taken;
                }
            }
            Op::Recv { vqp, mr, local } => {
                let v = *t.vqps.get(vqp).expect("validated");
                let rkey = t.mrs.get(mr).expect("validated").keys.rkey;
                let inf = Inflight {
                    user_data: ud,
                    vqp,
                    mr,
                    len: local.len,
                    recv: true,
                };
                let Some(wr_id) = self.track(inf) else {
                    return Step::Wait(Stall::InflightFull);
                };
                let r = PostedRecv {
                    wr_id,
                    addr: local.addr,
                    len: local.len,
                    rkey,
                };
                match messages.recv(v.link, v.end, r, qps) {
                    RecvStep::Queued => {}
                    RecvStep::Fail(why) => self.fail_unposted(wr_id, why, why.errno()),
                    RecvStep::Deliver { send, qp } => self.deliver_waiting(
                        send,
                        qp,
                        r,
                        (v.link, 1 - v.end),
                        qps,
                        messages,
                        backend,
                    ),
                }
                return Step::Taken;
            }
        };
        self.emit(cqe);
        Step::Taken
    }

    /// Takes an in-flight slot for `inf` and counts it on its virtual QP and MR (undone by
    /// `release_counts` when it completes); returns its `wr_id`, or `None` when every
    /// slot is in use.
    fn track(&mut self, inf: Inflight) -> Option<u64> {
        let t = &mut self.tables;
        let slot = t.inflight.insert(inf).ok()?;
        let (v, m) = (
            t.vqps.get_mut(inf.vqp).expect("validated"),
            t.mrs.get_mut(inf.mr).expect("validated"),
        );
        if inf.recv {
            v.recvs += 1;
            m.recvs += 1;
        } else {
            v.sends += 1;
            m.sends += 1;
        }
        Some(
            WrId {
                ring: self.id,
                ring_gen: self.gen,
                slot,
            }
            .encode(),
        )
    }

    /// The object's sends may be in our own unposted chain: post it, then wait.
    fn wait_for_sends<B: Backend>(
        &mut self,
        qps: &mut [PhysQp<S>],
        messages: &mut Messages<S>,
        backend: &mut B,
    ) -> Step {
        self.flush_chain(qps, messages, backend);
        Step::Wait(Stall::Busy)
    }

    /// Cancels virtual QP `vqp`'s receives no message has taken yet.
    pub(crate) fn cancel_recvs(&mut self, vqp: u32, messages: &mut Messages<S>) {
        let Some(&v) = self.tables.vqps.get(vqp) else {
            return;
        };
        while let Some(w) = messages.cancel_recv(v.link, v.end) {
            self.complete(WrId::decode(w), Completion::Failed(Reason::Cancelled));
        }
    }

    /// Posts `send`, a SEND another ring left waiting on physical QP `qp` (holding its
    /// credit there), into our receive `r`. Our chain goes first, so the QP's posts keep
    /// the order of its reservations. If the post fails, the receive fails and the send
    /// waits again, first in its end (`from`: its link and end).
    #[allow(clippy::too_many_arguments)]
    fn deliver_waiting<B: Backend>(
        &mut self,
        send: WaitingSend,
        qp: u32,
        r: PostedRecv,
        from: (u32, u8),
        qps: &mut [PhysQp<S>],
        messages: &mut Messages<S>,
        backend: &mut B,
    ) {
        self.flush_chain(qps, messages, backend);
        let q = &mut qps[qp as usize];
        q.release_held();
        q.reserve(Posted {
            wr_id: send.wr_id,
            delivery: Some(Delivery {
                recv: r.wr_id,
                byte_len: send.local.len,
                imm: send.imm,
            }),
        });
        let wr = SendWr {
            wr_id: send.wr_id,
            kind: send.kind(&r),
            local: send.local,
            signaled: q.next_signaled(true),
            flags: send.flags,
        };
        if let Err(e) = backend.post_send(qp, &[wr]) {
            q.unreserve_last(1);
            q.hold();
            messages.unmatch_send(from.0, from.1, send);
            self.fail_unposted(r.wr_id, Reason::Verbs, e.errno);
        }
    }

    /// Posts the chain; requests that did not go out fail with the backend's errno, and
    /// the receives they took are put back.
    fn flush_chain<B: Backend>(
        &mut self,
        qps: &mut [PhysQp<S>],
        messages: &mut Messages<S>,
        backend: &mut B,
    ) {
        let chain = &mut self.chain;
        let n = chain.n;
        if n == 0 {
            return;
        }
        chain.n = 0;
        let q = &mut qps[chain.qp as usize];
        for (i, wr) in chain.wrs[..n].iter_mut().enumerate() {
            wr.signaled = q.next_signaled(i == n - 1);
        }
        if let Err(PostError { posted, errno }) = backend.post_send(chain.qp, &chain.wrs[..n]) {
            let posted = posted.min(n);
            q.unreserve_last(n - posted);
            // An unsignaled request ends what went out: no completion may ever retire
            // it, so the QP's accounting can only be settled by recycling it.
            if posted > 0 && !chain.wrs[posted - 1].signaled {
                q.fail();
            }
            // Newest first, so each receive put back at the front keeps its place.
            for i in (posted..n).rev() {
                let wr_id = self.chain.wrs[i].wr_id;
                if let Some((link, end, r)) = self.chain.took[i].take() {
                    messages.unmatch_recv(link, end, r);
                }
                self.fail_unposted(wr_id, Reason::Verbs, errno);
            }
        }
    }
}
