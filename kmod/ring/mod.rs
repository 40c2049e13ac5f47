// SPDX-License-Identifier: GPL-2.0
//! What a process holds: its `/dev/krcore` file, the rings it set up there (the areas it
//! maps and the engine's ring over them), the wait queue it sleeps on, and the SQ
//! polling thread it may ask for. abi's `ring`, `layout` and `waiter` decide; this is
//! their glue to the kernel.

pub(crate) mod ctx;
pub(crate) mod file;
pub(crate) mod mem;
pub(crate) mod sqpoll;
pub(crate) mod wait;
