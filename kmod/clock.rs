// SPDX-License-Identifier: GPL-2.0
//! The clocks krcore's times come from, and the requests' deadline.

use crate::shim;

/// The tick-updated clock the engine's times come from, ms.
pub(crate) fn coarse_ms() -> i64 {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_coarse_ms() }
}

/// The wall clock, ms since the epoch (FRESH proofs' time).
pub(crate) fn wall_ms() -> i64 {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_wall_ms() }
}

/// The requests' deadline (`request_timeout_ms`), ms.
pub(crate) fn deadline_ms() -> i64 {
    // SAFETY: reads a module parameter.
    unsafe { shim::krcore_shim_request_timeout_ms() as i64 }
}

/// The monotonic clock in nanoseconds (`ktime_get`, which both kernel crates' clocks
/// read; 7.x's `Instant` keeps the value private, so it is read here).
fn now_ns() -> i64 {
    // SAFETY: `ktime_get` may be called from any context once timekeeping is up.
    unsafe { kernel::bindings::ktime_get() }
}

/// The monotonic clock, ms.
pub(crate) fn now_ms() -> i64 {
    now_ns() / 1_000_000
}

/// The monotonic clock, us.
pub(crate) fn now_us() -> u64 {
    (now_ns() / 1_000) as u64
}
