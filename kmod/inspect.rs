// SPDX-License-Identifier: GPL-2.0
//! What the module shows of itself: per device, its counters and its peer table
//! (debugfs `krcore/counters` and `krcore/peers`, read by the `krcore` tool); per ring,
//! its counters (the file's fdinfo); and the dynamic debug points at CONNECT, failure
//! and recovery (`echo 'module krcore +p' > <debugfs>/dynamic_debug/control`). The text
//! formats are abi's (`stats::Counters::write`, `cluster::peers::Peers::write`).

use core::ffi::{c_int, c_uint, c_void, CStr};
use core::fmt::Write;

use crate::abi::cqe::Cqe;
use crate::abi::engine::Trace;
use crate::abi::stats::Buf;
use crate::device::Registry;
use crate::engine::devctx::DevCtx;
use crate::shim;

/// A read-only debugfs file under `krcore/`: its name and what writes its text.
pub(crate) struct DebugFile {
    /// The file's name.
    name: &'static CStr,
    /// Writes the whole text; called for each read.
    text: fn(&mut dyn Write) -> core::fmt::Result,
}

/// The inspection files, debugfs `krcore/counters` and `krcore/peers` (made by the
/// shim, file `i` shown by `krcore_rs_show(i)`).
static FILES: [DebugFile; 2] = [
    DebugFile {
        name: c"counters",
        text: |w| each_dev(w, |dev, w| dev.counters().write("", w)),
    },
    DebugFile {
        name: c"peers",
        text: |w| each_dev(w, |dev, w| dev.write_peers(w)),
    },
];

/// The inspection files, there while this is held; dropping it waits for their
/// readers.
pub(crate) struct DebugFiles(());

impl DebugFiles {
    /// Adds the files (once, from the module's init).
    pub(crate) fn add() -> DebugFiles {
        let names = FILES.each_ref().map(|f| f.name.as_ptr());
        // SAFETY: called once, before any reader; the names are static NUL-terminated
        // strings, `FILES.len()` of them.
        unsafe { shim::krcore_shim_debugfs_add(names.as_ptr(), names.len() as c_uint) };
        DebugFiles(())
    }
}

impl Drop for DebugFiles {
    fn drop(&mut self) {
        // SAFETY: added in `add`; waits for the files' readers.
        unsafe { shim::krcore_shim_debugfs_remove() };
    }
}

/// Writes the text of inspection file `which` into the shim's buffer of `cap` bytes;
/// returns the bytes written (what does not fit is cut).
#[no_mangle]
extern "C" fn krcore_rs_show(which: c_uint, buf: *mut u8, cap: usize) -> usize {
    let Some(file) = FILES.get(which as usize) else {
        return 0;
    };
    // SAFETY: the shim passes a buffer of `cap` bytes that it owns for this call.
    let mut w = Buf::new(unsafe { core::slice::from_raw_parts_mut(buf, cap) });
    let _ = (file.text)(&mut w);
    w.len()
}

/// Writes a section per device: its name's line, then what `f` writes of it. Stops at
/// `w`'s first refusal.
fn each_dev(
    mut w: &mut dyn Write,
    f: impl Fn(&DevCtx, &mut &mut dyn Write) -> core::fmt::Result,
) -> core::fmt::Result {
    Registry::get().for_each_dev(|name: &CStr, dev| {
        writeln!(w, "device {}", name.to_str().unwrap_or("?"))?;
        f(dev, &mut w)
    })
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
