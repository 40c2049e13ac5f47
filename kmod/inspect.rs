// SPDX-License-Identifier: GPL-2.0
//! What the module shows of itself: per device, its counters and its peer table
//! (debugfs `krcore/counters` and `krcore/peers`, read by the `krcore` tool); per ring,
//! its counters (the file's fdinfo); and the dynamic debug points at CONNECT, failure
//! and recovery (`echo 'module krcore +p' > <debugfs>/dynamic_debug/control`). The text
//! formats are abi's (`stats::Counters::write`, `cluster::peers::Peers::write`).

use core::ffi::{c_int, c_void, CStr};
use core::fmt::Write;

use crate::abi::cqe::Cqe;
use crate::abi::engine::Trace;
use crate::abi::stats::Buf;
use crate::device::Registry;
use crate::shim;

/// An inspection file: a section per device.
#[derive(Clone, Copy)]
pub(crate) enum Show {
    /// `krcore/counters`: abi's `stats::Counters::write`.
    Counters,
    /// `krcore/peers`: the pool, listens, ports and peer table (`DevCtx::write_peers`).
    Peers,
}

impl Show {
    /// Writes this file's text, a section per device, into `w`; stops at `w`'s first
    /// refusal.
    pub(crate) fn write_text(self, w: &mut impl Write) -> core::fmt::Result {
        Registry::get().for_each_dev(|name: &CStr, dev| {
            writeln!(w, "device {}", name.to_str().unwrap_or("?"))?;
            match self {
                Show::Counters => dev.counters().write("", w),
                Show::Peers => dev.write_peers(w),
            }
        })
    }
}

/// Writes the fdinfo of the file whose context is `ctx` into the shim's buffer.
#[no_mangle]
extern "C" fn krcore_rs_fdinfo(ctx: *mut c_void, buf: *mut u8, cap: usize) -> usize {
    // SAFETY: the shim passes a buffer of `cap` bytes that it owns for this call.
    let mut w = Buf::new(unsafe { core::slice::from_raw_parts_mut(buf, cap) });
    // SAFETY: `ctx` is the live context of an open file (fdinfo holds the file).
    let ctx = unsafe { &*ctx.cast::<crate::ring::file::FileCtx>() };
    let _ = ctx.fdinfo(&mut w);
    w.len()
}

fn trace_connect(ring: u16, gid: &[u8; 16], service: u32, cqe: &Cqe) {
    let why = cqe.failure().map_or("ok", |r| r.name());
    // SAFETY: the GID is 16 bytes; the name is `len` bytes of a static string.
    unsafe {
        shim::krcore_shim_dbg_connect(ring, gid.as_ptr(), service, cqe.res, why.as_ptr(), why.len() as c_int)
    }
}

fn trace_failure(ring: u16, cqe: &Cqe) {
    let why = cqe.failure().map_or("?", |r| r.name());
    // SAFETY: as above.
    unsafe {
        shim::krcore_shim_dbg_failure(ring, cqe.user_data, cqe.res, why.as_ptr(), why.len() as c_int)
    }
}

/// The engine's trace points, into dynamic debug.
pub(crate) const TRACE: Trace = Trace {
    connect: trace_connect,
    failure: trace_failure,
};

/// A group of pooled QPs was recovered; `total` so far on the device.
pub(crate) fn trace_recovery(qp: u32, total: u64) {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_dbg_recovery(qp, total) }
}
