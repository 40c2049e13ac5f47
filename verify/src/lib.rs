//! krcore's verification tools: the QEMU test bed ([`vm`]) and user-space verbs helpers
//! ([`verbs`]) shared by the guest suite, the demo and the baselines.

pub mod verbs;
pub mod vm;
