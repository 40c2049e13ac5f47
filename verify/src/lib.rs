//! krcore's verification tools: the QEMU test bed ([`vm`]), user-space verbs helpers
//! ([`verbs`]) shared by the guest suite, the demo and the baselines, and the engine's
//! test kit ([`heapring`], [`fake`], [`node`], [`rig`]) shared by property tests, fuzzing, loom
//! models and benchmarks, guest-side helpers ([`guest`]) for the suite and figures, and
//! RoCE frames as a host on the segment reads and writes them ([`roce`]).

pub mod cm_verbs;
pub mod demo;
pub mod fake;
pub mod fuzzinput;
pub mod fuzzprog;
pub mod guest;
pub mod heapring;
pub mod kv;
pub mod meta;
pub mod node;
pub mod rig;
pub mod rng;
pub mod roce;
pub mod verbs;
pub mod vm;
pub mod wirefuzz;
