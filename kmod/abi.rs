// SPDX-License-Identifier: GPL-2.0
//! abi's sources, compiled into the module. An out-of-tree module cannot link crates,
//! so the shared crate's files are included by path; they refer to each other through
//! `super::`, which resolves to this module here and to the crate root in user space.
// abi's items are `pub` for user space; inside the module they are crate-internal.
#![allow(dead_code, unreachable_pub, unused_imports)]

#[path = "bitflags.rs"]
pub(crate) mod bitflags;

#[path = "../abi/src/cluster/mod.rs"]
pub(crate) mod cluster;
#[path = "../abi/src/compat.rs"]
pub(crate) mod compat;
#[path = "../abi/src/cqe.rs"]
pub(crate) mod cqe;
#[path = "../abi/src/device.rs"]
pub(crate) mod device;
#[path = "../abi/src/engine/mod.rs"]
pub(crate) mod engine;
#[path = "../abi/src/errno.rs"]
pub(crate) mod errno;
#[path = "../abi/src/ioctl.rs"]
pub(crate) mod ioctl;
#[path = "../abi/src/layout.rs"]
pub(crate) mod layout;
#[path = "../abi/src/identity.rs"]
pub(crate) mod identity;
#[path = "../abi/src/limits.rs"]
pub(crate) mod limits;
#[path = "../abi/src/meta/mod.rs"]
pub(crate) mod meta;
#[path = "../abi/src/opcode.rs"]
pub(crate) mod opcode;
#[path = "../abi/src/poller.rs"]
pub(crate) mod poller;
#[path = "../abi/src/ring.rs"]
pub(crate) mod ring;
#[path = "../abi/src/sqe.rs"]
pub(crate) mod sqe;
#[path = "../abi/src/stats.rs"]
pub(crate) mod stats;
#[path = "../abi/src/waiter.rs"]
pub(crate) mod waiter;

use kernel::error::Error;
use crate::kcompat::{AsBytes, FromBytes};

// SAFETY: `#[repr(C)]` structs of integers and integer arrays with no padding: abi's
// size/offset asserts pin the layout, and its user build derives zerocopy's FromBytes
// and IntoBytes for the same types, which fails to compile if any padding existed.
unsafe impl FromBytes for device::QueryDevices {}
// SAFETY: as above.
unsafe impl AsBytes for device::QueryDevices {}
// SAFETY: as above.
unsafe impl AsBytes for device::DeviceGid {}
// SAFETY: as above.
unsafe impl FromBytes for layout::SetupParams {}
// SAFETY: as above.
unsafe impl AsBytes for layout::SetupParams {}
// SAFETY: as above.
unsafe impl FromBytes for layout::EnterArgs {}
// SAFETY: as above.
unsafe impl FromBytes for layout::EventfdArgs {}
// SAFETY: as above.
unsafe impl FromBytes for compat::OneOp {}
// SAFETY: as above.
unsafe impl AsBytes for compat::OneOp {}

impl From<errno::Errno> for Error {
    fn from(e: errno::Errno) -> Error {
        Error::from_errno(e.to_neg())
    }
}
