//! krcore's user-space library: a safe API over `/dev/krcore`.
//!
//! ```no_run
//! let dev = krcore_uring::Device::open()?;
//! for row in dev.query_devices()?.rows {
//!     println!("{} port {} gid {}", row.name(), row.port, row.gid_string());
//! }
//! # Ok::<(), krcore_uring::Error>(())
//! ```
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
mod mmap;
mod ops;
mod per_op;
mod region;
mod ring;

pub use batch::Batch;
pub use per_op::PerOp;
pub use region::{MemoryRegion, MrDescriptor, Registered, RemoteRegion, Vqp};

pub use addr::gid_of;
#[cfg(feature = "tokio")]
pub use async_ring::AsyncRing;
pub use core::LIB_TAG;

pub use device::{Device, DeviceList, GidRow, DEVICE_PATH};
pub use error::Error;
pub use krcore_abi as abi;
pub use ring::{describe_failure, Builder, Completions, PushError, Ring};
