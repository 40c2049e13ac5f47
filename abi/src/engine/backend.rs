//! The work requests and completions that cross between the engine and an RDMA stack
//! (which the engine reaches through a [`Fabric`](super::fabric::Fabric)). kmod posts
//! them with kernel verbs; tests and benchmarks with a fake NIC.

use super::errno::Errno;
use super::sqe::SqeFlags;

/// A local buffer: address, length, local key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Address (user virtual address in the MR's space).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// What a send-queue work request does. Remote targets carry the rkey the engine took
/// from an imported MR, never one straight from user space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendKind {
    /// RDMA READ into the local buffer.
    Read {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE from the local buffer.
    Write {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data, for WRITE_IMM.
        imm: Option<u32>,
    },
    /// SEND from the local buffer (as validated; the engine delivers it as
    /// [`Deliver`](Self::Deliver), never posting a SEND).
    Send {
        /// Immediate data, for SEND_IMM.
        imm: Option<u32>,
    },
    /// A message written into the receive buffer the engine matched it with (see
    /// `message`): an RDMA WRITE with a key the backend makes for exactly these bytes
    /// and invalidates after the write, before the request completes (the MR itself
    /// grants no remote right).
    Deliver {
        /// The receive buffer's address.
        remote_addr: u64,
        /// The receiving MR's token ([`MrKeys::token`]).
        mr: u64,
    },
    /// A message to another node, matched with a receive its kernel advertised (see
    /// `far`): an RDMA WRITE of the bytes (into the receive, or for WRITE_IMM into the
    /// remote range it names), then on the same QP a notice to the peer kernel saying
    /// which receive they completed ([`Notice::Data`]): two work requests, the
    /// notice carrying this request's `wr_id` and signaling.
    ///
    /// [`Notice::Data`]: super::cluster::notice::Notice::Data
    DeliverFar {
        /// Where the bytes go.
        remote_addr: u64,
        /// Its rkey (the receiving kernel's, or the import's for WRITE_IMM).
        rkey: u32,
        /// The receiving end, in the peer kernel's terms.
        to: u64,
        /// The `seq` of the advert it fills (its `Data` notice carries it).
        seq: u32,
        /// The advert's key, which the `Data` notice invalidates at the receiving NIC
        /// (a SEND with invalidate), so the receive is closed before it completes.
        inv: u32,
        /// Immediate data.
        imm: Option<u32>,
    },
    /// 8-byte compare-and-swap; the old value lands in the local buffer.
    Cas {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch-and-add; the old value lands in the local buffer.
    Faa {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
}

/// A send-queue work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// The encoded [`WrId`](super::wrid::WrId).
    pub wr_id: u64,
    /// The operation.
    pub kind: SendKind,
    /// The local buffer.
    pub local: Sge,
    /// Whether it produces a work completion.
    pub signaled: bool,
    /// FENCE / SOLICITED.
    pub flags: SqeFlags,
}

/// How a work request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// Flushed: the QP entered the error state before the request ran.
    Flushed,
    /// Failed with the verbs status code (`enum ib_wc_status`).
    Failed(u32),
}

impl WcStatus {
    /// From `enum ib_wc_status` (0 `IB_WC_SUCCESS`, 5 `IB_WC_WR_FLUSH_ERR`, anything
    /// else a failure).
    pub const fn from_ib(status: u32) -> WcStatus {
        match status {
            0 => WcStatus::Success,
            5 => WcStatus::Flushed,
            s => WcStatus::Failed(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WcStatus;

    #[test]
    fn ib_status_codes() {
        assert_eq!(WcStatus::from_ib(0), WcStatus::Success);
        assert_eq!(WcStatus::from_ib(5), WcStatus::Flushed);
        assert_eq!(WcStatus::from_ib(10), WcStatus::Failed(10));
    }
}

/// A work completion, as polled from a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The request's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// Immediate data (receives).
    pub imm: Option<u32>,
    /// Whether it completes a receive (rather than a send-queue request); the engine
    /// posts none, so it routes none.
    pub recv: bool,
    /// The key a received SEND with invalidate closed at this NIC.
    pub invalidated: Option<u32>,
}

/// Keys and identity of a registered MR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// The backend's own handle for deregistration.
    pub token: u64,
}

/// A connection the backend made: which pooled physical QP, and its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Index of the physical QP in the [`Fabric`](super::Fabric).
    pub qp: u32,
    /// The physical QP's number on the wire.
    pub qpn: u32,
    /// The QP reaches another node's kernel: its virtual QPs get no message link (a
    /// message's delivery writes into a receiver on this node, through a local QP).
    pub peer: bool,
}

/// A post that failed after `posted` requests of the chain went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostError {
    /// How many requests, from the front of the chain, were posted.
    pub posted: usize,
    /// Why the rest were not.
    pub errno: Errno,
}
