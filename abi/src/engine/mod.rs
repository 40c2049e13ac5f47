//! The multiplexing engine: many rings' virtual QPs on few shared physical QPs.
//!
//! ```text
//! SQE (private copy) ─► validate ─► credit ─► tag wr_id ─► chain ─► Post::post_send
//!                                                                     │
//! CQE ◄─ Ring::complete ◄─ route by wr_id ◄─ complete_wc ◄─ polled Wc ◄──┘
//! ```
//!
//! Everything is allocation-free over storage the caller provides through [`Store`], so
//! the kernel decides allocation and this logic runs unchanged in tests, fuzzing, loom
//! models and benchmarks. Concurrency is the caller's: a ring's calls come under its own
//! lock, and what rings share is reached through a [`Fabric`], a lock per physical QP,
//! one per shard of message links (with their listeners), one for the device's membership, one for its
//! exports and one for its ports, in the order
//! `fabric` writes down; verify/'s loom models check the engine under it.

mod backend;
mod blame;
mod complete;
mod direct;
mod export;
mod fabric;
mod far;
mod listen;
mod message;
mod ports;
mod qp;
mod qp_bits;
pub mod qp_budget;
mod recovery;
mod register;
mod ring_state;
mod route;
mod shares;
mod submit;
mod table;
mod uring;
mod validate;
mod wrid;

// Siblings of the engine that its modules reach as `super::x`.
use super::{cluster, cqe, errno, layout, meta, opcode, ring, sqe, stats};

pub use backend::{Connection, MrKeys, PostError, SendKind, SendWr, Sge, Wc, WcStatus};
pub use blame::{Blame, BACKOFF_BASE_MS, BACKOFF_MAX_MS};
pub use complete::complete_wc;
pub use direct::{direct_complete, DIRECT_WR_ID};
pub use export::{Export, ExportError, ExportSlot, Exports};
pub use fabric::{Fabric, Links, Located, Members, NoPost, Post, Qps};
pub use far::{
    notice_recv_index, notice_recv_wr_id, ADVERT_KEYS, FAR_RECV, FAR_WRITE_WR_ID, NOTICE_RECVS,
    NOTICE_WR_ID,
};
pub use listen::{accept_aux, write_listen_line, Offer, CLIENT_SHARE, MAX_LISTENERS, RING_LISTENS};
pub use message::{
    port_key, shard_of, HalfOpen, Link, MessageStorage, Messages, Node, PostedRecv, RecvStep,
    SendStep, Target, Tuple, WaitingSend,
};
pub use ports::{
    Creds, Groups, Held as HeldPort, Hold, PortStorage, Ports, EPHEMERAL_FIRST, EPHEMERAL_LAST,
    MAX_GROUPS, PRIVILEGED,
};
pub use qp::{Delivery, PhysQp, Posted, NOTICE_ROOM};
pub use qp_bits::{QpBits, MAX_QPS};
pub use recovery::{settle_links, sweep, Rearm, Recovery, DEFAULT_DEADLINE_MS, FLUSH_PATIENCE_MS};
pub use register::{Caller, Context, Registration};
pub use ring_state::{
    Client, Completion, Inflight, LocalMr, RemoteMr, Ring, RingStats, RingStorage, Tables, Trace,
    Vqp, REVOKED_ACROSS,
};
pub use route::{BusyHint, Delivered, Inbox};
pub use shares::{one_more, Counts, Share, SHARES};
pub use submit::{Stall, Submitted, CHAIN};
pub use table::{Fifo, Slot, Table, MAX_TABLE};
pub use uring::{command, not_carried, uring_result, Diverted, Handed, One, URING_CMD_ENTRY};
pub use validate::{validate, Op, MAX_LEN};
pub use wrid::{backend_index, backend_wr_id, is_backend_wr_id, WrId};

/// Where the engine's fixed-capacity storage comes from: `KVec` in the kernel, `Vec` in
/// user space. The engine never grows a buffer; its length is the capacity.
pub trait Store {
    /// A buffer of `T`.
    type Buf<T>: AsRef<[T]> + AsMut<[T]>;
}

/// [`Store`] over `Vec`, for user space (tests, fuzzing, benchmarks).
#[cfg(any(test, feature = "alloc"))]
pub struct VecStore;

#[cfg(any(test, feature = "alloc"))]
impl Store for VecStore {
    type Buf<T> = alloc::vec::Vec<T>;
}
