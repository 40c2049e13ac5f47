//! Entries io_uring carries: a krcore entry in an `IORING_OP_URING_CMD` on the ring's
//! file, completed into io_uring's CQ rather than the ring's.
//!
//! A program that already runs an io_uring loop submits krcore entries beside its file
//! and socket I/O, with io_uring's links and timeouts, and no second ring to reap. The
//! entry is the same 64 bytes, in the command area of a 128-byte SQE; its completion is
//! a 32-byte CQE (see [`uring_result`]). Both sizes are the io_uring's setup
//! (`IORING_SETUP_SQE128 | IORING_SETUP_CQE32`); the module refuses a command from any
//! other.
//!
//! One entry at a time ([`Ring::submit_one`]), through the same validation and steps as
//! the ring's own SQ, into the same tables and credits: the entry is the ring's, and
//! what the ring owns (its virtual QPs, MRs, imports) it names. Its CQE is *diverted*:
//! the in-flight slot remembers the command (`Inflight::sink`, the kernel's own word,
//! never an entry's), and the CQE goes to the diverted list, which the caller drains
//! after each call that may complete something ([`Ring::take_diverted`]) and hands to
//! io_uring. Every entry taken owes one diverted CQE, whatever becomes of the ring:
//! io_uring waits for each command it issued. What a carried entry ends of the ring's
//! own entries (a DISCONNECT's receives, an UNLISTEN's listen) completes to the ring's
//! CQ, as each of those was taken from it.
//!
//! A command is cancelable: when its task exits or execs, io_uring asks for it back
//! ([`Ring::cancel`]), and one still in flight completes at once with `Cancelled`; its
//! request goes on holding its slot until the hardware or its deadline ends it, and
//! that CQE is dropped ([`CANCELLED`]). So no process waits on a peer to leave.
//!
//! Not carried ([`Reason::NotThroughUring`]): LISTEN (a command completes once; 6.12
//! has no multishot for commands), REG_MR (registered outside the ring's lock by the
//! ring's own caller), and RECV (it may wait forever for a peer: its command would stay
//! in io_uring until the task went, with nothing to bound it).

use super::cqe::{Cqe, Reason};
use super::fabric::Fabric;
use super::opcode::Opcode;
use super::register::{Context, Pending};
use super::ring::RingMem;
use super::ring_state::Ring;
use super::sqe::Sqe;
use super::submit::{Held, Stall, Step};
use super::Store;

/// The `cmd_op` of a krcore entry in an `IORING_OP_URING_CMD` ("KRUE"; any other is
/// refused with `EOPNOTSUPP`).
pub const URING_CMD_ENTRY: u32 = 0x4b52_5545;

/// The sink of an entry whose command io_uring cancelled: its CQE is dropped. Never a
/// command's address (those are aligned kernel pointers).
pub(crate) const CANCELLED: u64 = u64::MAX;

/// A CQE owed to the io_uring command `sink`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Diverted {
    /// The command (the kernel's pointer to it).
    pub sink: u64,
    /// The entry's CQE.
    pub cqe: Cqe,
}

/// What [`Ring::submit_one`] did with the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum One {
    /// Taken: its CQE is diverted now or later.
    Taken,
    /// Not taken, for the reason the ring's own SQ would wait: submit it again once
    /// that passes (or fail it, for a caller that may not wait).
    Wait(Stall),
}

/// The command area of a 128-byte SQE carrying `sqe` (`IORING_OP_URING_CMD` with
/// `cmd_op` [`URING_CMD_ENTRY`]): the entry's 64 bytes as the ring's SQ holds them,
/// then 16 zero bytes.
pub fn command(sqe: &Sqe) -> [u8; 80] {
    let mut b = [0u8; 80];
    let mut at = 0;
    let mut put = |bytes: &[u8]| {
        b[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&[sqe.opcode, sqe.flags]);
    put(&sqe.resv.to_le_bytes());
    put(&sqe.vqp.to_le_bytes());
    put(&sqe.user_data.to_le_bytes());
    put(&sqe.addr.to_le_bytes());
    put(&sqe.len.to_le_bytes());
    put(&sqe.mr.to_le_bytes());
    put(&sqe.remote_addr.to_le_bytes());
    put(&sqe.rmr.to_le_bytes());
    put(&sqe.imm.to_le_bytes());
    put(&sqe.arg0.to_le_bytes());
    put(&sqe.arg1.to_le_bytes());
    b
}

/// Why io_uring cannot carry `sqe`, if it cannot.
pub fn not_carried(sqe: &Sqe) -> Option<Reason> {
    match Opcode::from_u8(sqe.opcode) {
        Some(Opcode::Listen | Opcode::RegMr | Opcode::Recv) => Some(Reason::NotThroughUring),
        _ => None,
    }
}

/// The io_uring CQE's `res` and first extra word for `cqe`: `res` as the ring's CQE
/// has it (bytes, a handle, or a negative errno); the extra word is `aux` on success,
/// with a CONNECT's port in bits 32..48 (its `aux`, the physical QP number, uses the
/// low 32), and the [`Reason`] code on failure (the errno alone cannot tell an unknown
/// MR from a range error).
pub const fn uring_result(cqe: &Cqe) -> (i32, u64) {
    if cqe.res < 0 {
        (cqe.res, cqe.reason as u64)
    } else {
        (cqe.res, cqe.aux | (cqe.port as u64) << 32)
    }
}

impl<S: Store, Q: RingMem<Entry = Sqe>, C: RingMem<Entry = Cqe>> Ring<S, Q, C> {
    /// Takes `sqe`, carried by io_uring command `sink` (nonzero), in context `cx`: its
    /// CQE is diverted ([`take_diverted`](Self::take_diverted)) at once or when it
    /// completes. The caller holds the ring's lock, as for [`submit`](Self::submit).
    pub fn submit_one<F: Fabric<S>>(&mut self, f: &F, sqe: &Sqe, sink: u64, cx: Context) -> One {
        debug_assert!(sink != 0, "sink 0 is the ring's CQ");
        self.settle(f);
        // Each taken entry holds an in-flight slot or a diverted CQE until drained.
        let room = self.tables.inflight.len() + self.diverted.len() < self.diverted.capacity();
        if !room || !self.has_room() {
            return One::Wait(Stall::CqFull);
        }
        if let Some(why) = not_carried(sqe) {
            self.stats.taken += 1;
            self.emit_to(sink, Cqe::err(sqe.user_data, why));
            return One::Taken;
        }
        // A REG_MR of the ring's own SQ being registered: it comes first.
        if self.registration != Pending::None {
            return One::Wait(Stall::Register);
        }
        let throttled = self.blame.throttled(cx.now_ms);
        let mut held: Held<'_, S, F> = Held::NONE;
        self.sink = sink;
        let step = self.step(sqe, f, &mut held, cx, throttled);
        self.flush_chain(f, &mut held);
        self.sink = 0;
        drop(held);
        // What the entry ended for the ring's own entries (a DISCONNECT's cancelled
        // RECVs, an UNLISTEN's listen) is in its CQ.
        self.publish();
        match step {
            Step::Taken | Step::TakenThen(_) => {
                self.stats.taken += 1;
                One::Taken
            }
            Step::Wait(s) => One::Wait(s),
        }
    }

    /// io_uring takes command `sink` back (its task exits or execs): the CQE to
    /// complete it with now, or `None` when it was handed back already (its completion
    /// is on its way through the task's work, and owes nothing more). A CQE still in the
    /// diverted list is taken from it; an entry still in flight completes `Cancelled`,
    /// and the CQE its request ends with later is dropped. The caller holds the ring's
    /// lock, which every hand-back holds too.
    pub fn cancel(&mut self, sink: u64) -> Option<Cqe> {
        if sink == 0 || sink == CANCELLED {
            return None;
        }
        if let Some(d) = self.diverted.remove_where(|d| d.sink == sink) {
            return Some(d.cqe);
        }
        let inf = self.tables.inflight.values_mut().find(|i| i.sink == sink)?;
        inf.sink = CANCELLED;
        // Counted once, as its request ends (the ring's counters count requests).
        Some(Cqe::err(inf.user_data, Reason::Cancelled))
    }

    /// The oldest CQE owed to an io_uring command, if any.
    pub fn take_diverted(&mut self) -> Option<Diverted> {
        self.diverted.pop()
    }

    /// Drains the diverted list: each CQE goes to `complete(sink, res, extra)` (as
    /// [`uring_result`] makes them), but command `keep`'s (nonzero), which is returned
    /// for its caller to complete itself. One CQE per command: a second for `keep`
    /// would complete a request io_uring may have freed, so it is dropped and counted
    /// ([`Handed::dropped`]; never expected).
    pub fn hand_back(&mut self, keep: u64, mut complete: impl FnMut(u64, i32, u64)) -> Handed {
        let mut h = Handed::default();
        while let Some(d) = self.diverted.pop() {
            if keep != 0 && d.sink == keep {
                match h.kept {
                    Some(_) => h.dropped += 1,
                    None => h.kept = Some(d.cqe),
                }
                continue;
            }
            let (res, extra) = uring_result(&d.cqe);
            complete(d.sink, res, extra);
        }
        h
    }
}

/// What [`Ring::hand_back`] kept for its caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handed {
    /// The kept command's CQE, if it has one yet.
    pub kept: Option<Cqe>,
    /// Further CQEs for the kept command, dropped.
    pub dropped: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_carries_its_reason_and_a_connect_its_port() {
        let c = Cqe::err(7, Reason::RemoteRange);
        assert_eq!(uring_result(&c), (c.res, Reason::RemoteRange as u64));
        let c = Cqe {
            port: 40001,
            ..Cqe::ok(7, 3, 0x11)
        };
        assert_eq!(uring_result(&c), (3, 40001 << 32 | 0x11));
    }

    #[test]
    fn the_command_holds_the_entry_as_the_sq_does() {
        let sqe = Sqe {
            flags: 3,
            vqp: 5,
            addr: 0x1122_3344_5566_7788,
            len: 9,
            mr: 10,
            remote_addr: 11,
            rmr: 12,
            imm: 13,
            arg0: 14,
            arg1: 15,
            ..Sqe::one_sided(Opcode::Read, 0xfeed, 0, 0, 0, 0, 0, 0)
        };
        let c = command(&sqe);
        // SAFETY: test only; `Sqe` is 64 bytes of plain integers (repr(C)).
        let raw: [u8; 64] = unsafe { core::mem::transmute(sqe) };
        assert_eq!(c[..64], raw[..]);
        assert_eq!(c[64..], [0; 16]);
    }

    #[test]
    fn listen_reg_mr_and_recv_are_not_carried() {
        for op in [Opcode::Listen, Opcode::RegMr, Opcode::Recv] {
            let sqe = Sqe {
                opcode: op as u8,
                ..Sqe::default()
            };
            assert_eq!(not_carried(&sqe), Some(Reason::NotThroughUring), "{op:?}");
        }
        assert_eq!(not_carried(&Sqe::default()), None, "NOP");
    }
}
