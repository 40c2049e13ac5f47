//! krcore's user-space library: a safe API over `/dev/krcore`, the krcore kernel
//! module's device.
//!
//! krcore keeps RDMA queue pairs connected in the kernel, pooled per peer node, and
//! hands processes *virtual QPs* bound to them in microseconds. A process talks to it
//! through a [`Ring`]: a submission and a completion queue mapped into its memory, as
//! io_uring's are, so a batch of operations crosses into the kernel once.
//!
//! # A complete program
//! A worker on one node reads memory another node published under a name:
//!
//! ```no_run
//! use krcore_uring::MrAccess;
//! use krcore_uring::{Batch, Builder, Device, Error};
//!
//! fn main() -> Result<(), Error> {
//!     // One ring per thread that submits; 64 entries in flight at most.
//!     let mut ring = Builder::new(64).build(Device::open()?)?;
//!     // A virtual QP to the memory node (its address or host name), for one-sided
//!     // requests (service 0: no endpoint): microseconds once this node's kernel has a
//!     // connection set to that node.
//!     let vqp = ring.connect("10.0.0.1", 0)?;
//!     // The kernel finds the name in the MetaServer (one-sided READs, then cached);
//!     // no rkey ever passes through this process.
//!     let table = ring.import_name(&vqp, "kv-table", 4096)?;
//!     // Memory of our own for the READ to land in: lent to the NIC while `buf` lives.
//!     let mut mine = vec![0u8; 4096];
//!     let mut buf = ring.register_slice(&mut mine, MrAccess::LOCAL_WRITE)?;
//!     let mut batch = Batch::new();
//!     batch.read(&vqp, &buf, 0, &table, 0, 4096)?;
//!     for done in ring.run(batch)? {
//!         // Each operation's own outcome: the errno and krcore's reason on failure.
//!         println!("read {} bytes", done?.res);
//!     }
//!     println!("first word: {:?}", &buf.bytes()[..8]);
//!     drop(buf); // deregisters; `mine` is ours again
//!     ring.disconnect(vqp)
//! }
//! ```
//!
//! # What to read next
//! - [`Ring`]: connecting ([`connect`](Ring::connect), to anything address-like: a [`Node`]),
//!   or listening for peers from any node ([`listen`](Ring::listen),
//!   [`accept`](Ring::accept)),
//!   memory ([`register`](Ring::register) allocates, [`register_slice`](Ring::register_slice)
//!   borrows, [`register_slice_remote`](Ring::register_slice_remote) trusts you), exporting and importing
//!   ([`MemoryRegion::export`](Registered::export) and [`import`](Ring::import) between
//!   processes that share a channel, or [`publish`](Ring::publish) and
//!   [`import_name`](Ring::import_name) through the MetaServer), and raw entries
//!   ([`submission`](Ring::submission), [`submit`](Ring::submit),
//!   [`completions`](Ring::completions)).
//! - [`Batch`]: one-sided (READ, WRITE, WRITE with immediate, CAS, FAA) and two-sided
//!   (SEND, RECV) operations, checked for range as they are added.
//! - `AsyncRing` (feature `tokio`): the same operations as futures.
//!
//! # Safety model
//! The kernel trusts nothing from this process: it validates every entry against its
//! own tables and answers a bad one with a failed completion and a
//! [`Reason`]. The library's job is Rust's memory safety: memory the
//! NIC may write is reachable only through `&mut` of its region, a [`Batch`] borrows the
//! regions it uses until [`Ring::run`] has every completion, a region deregisters itself
//! when dropped (a buffer whose deregistration is not confirmed is leaked, never
//! freed under the NIC), and raw entries are `unsafe` to push. Memory lent with remote
//! rights takes `unsafe` ([`Ring::register_slice_remote`]): safe code could end the
//! loan with `mem::forget` while a peer still writes.
//!
//! # Waiting
//! Waits sleep in the kernel and survive signals. A RECV waits for its message without
//! a bound; everything else ends within the module's request deadline. Bound a wait with
//! [`Ring::submit_and_wait_timeout`], a batch with [`Ring::run_timeout`] (which keeps
//! the regions of what it gave up on until their completions) or, in async code,
//! `tokio::time::timeout` on the future (dropping it is safe: see `AsyncRing`); give
//! up on receives by disconnecting their virtual QP (they complete `Cancelled`).
//!
//! The ring's lock is never held across a wait: a region dropped on any thread (or
//! inside a loop over [`Ring::completions`]) deregisters while another thread waits,
//! without spinning; an owned region's or a listener's drop waits for nothing.
//!
//! # Features
//! - `tokio`: `AsyncRing`, the ring's operations as futures.
//! - `serde`: `Serialize` and `Deserialize` for [`MrDescriptor`].
#![warn(missing_docs)]

mod addr;
#[cfg(feature = "tokio")]
mod async_ring;
mod batch;
#[cfg(any(test, feature = "bench-support"))]
#[doc(hidden)]
pub mod bench_support;
mod core;
mod device;
mod error;
pub mod in_io_uring;
mod listen;
mod lock;
mod mmap;
mod ops;
mod per_op;
mod region;
mod ring;
mod wait;

pub use batch::Batch;
/// The original KRCore's one-ioctl-per-operation interface, kept for the benchmarks'
/// comparison and the ABI's tests: not part of the API.
#[doc(hidden)]
pub use per_op::PerOp;
pub use region::{MemoryRegion, MrDescriptor, Registered, RemoteRegion, Vqp};

pub use addr::Node;
#[cfg(feature = "tokio")]
pub use async_ring::AsyncRing;
pub use core::LIB_TAG;

/// The README's Rust program, compiled as a doc test so the README cannot drift from
/// the API.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub use device::{Device, DeviceList, GidRow, DEVICE_PATH};
pub use error::Error;
/// The kernel's ABI as user space meets it: entries and their opcodes, completions and
/// reasons, the ring layout, the ioctls, the device query and the counters (for raw
/// entries, and for bindings in other languages). The module's engine, which the
/// `krcore-abi` crate also holds, is not part of it.
pub mod abi {
    pub use krcore_abi::{compat, cqe, device, errno, ioctl, layout, opcode, sqe, stats};
}
/// The types every program names, at the crate root: an MR's rights, why an operation
/// failed, and a completion (the raw ABI stays under [`abi`]).
pub use krcore_abi::{cqe::Cqe, cqe::Reason, sqe::MrAccess};
pub use listen::{Accepted, Listener};
pub use ring::{describe_failure, BatchResult, Builder, Completions, PushError, Ring, Submission};
