//! krcore's shared ABI: what user space and the kernel module agree on, and the logic
//! that decides, kept here so it is tested, fuzzed and model-checked without a kernel.
//!
//! The module compiles these same sources with `#[path]` (an out-of-tree module cannot
//! link crates), so every file here is `no_std`, allocation-free, refers to its siblings
//! through `super::`, and names zerocopy and bitflags only behind their features.
#![no_std]

pub mod device;
pub mod errno;
pub mod ioctl;
