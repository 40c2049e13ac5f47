//! krcore's shared ABI: what user space and the kernel module agree on, and the logic
//! that decides, kept here so it is tested, fuzzed and model-checked without a kernel.
//!
//! The module compiles these same sources with `#[path]` (an out-of-tree module cannot
//! link crates; see kmod/abi.rs), so every file here is `no_std`, allocation-free,
//! refers to its siblings through `super::`, derives zerocopy's traits only behind the
//! `zerocopy` feature, and names bitflags as `super::bitflags` (the crate here, a
//! compatible macro in the module).
#![no_std]

// `super::bitflags::bitflags!` in the modules below resolves to the crate through this.
#[cfg(any(test, feature = "alloc"))]
extern crate alloc;
extern crate bitflags;

pub mod cluster;
pub mod compat;
pub mod cqe;
pub mod device;
pub mod engine;
pub mod errno;
pub mod identity;
pub mod ioctl;
pub mod layout;
pub mod limits;
pub mod meta;
pub mod opcode;
pub mod poller;
pub mod ring;
pub mod sqe;
pub mod stats;
pub mod waiter;
