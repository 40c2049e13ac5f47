//! krcore's Python package, `krcore._krcore`: the Rust library (krcore-uring) as Python
//! classes. Its blocking [`Ring`](ring::PyRing) releases the GIL while it waits; its
//! [`AsyncRing`](async_ring::PyAsyncRing) runs the library's own futures on a tokio
//! worker and hands their results to asyncio. Every check, wait and recovery is the
//! library's: this crate converts arguments and results, and keeps Python's objects
//! (which any thread may hold) from outliving or sharing what Rust owns.
//!
//! The enums, the errors and the completion type are Python (`krcore/_types.py`),
//! built from the tables exported here.

mod async_ring;
mod batch;
mod errors;
mod handles;
mod region;
mod ring;

use std::sync::atomic::{AtomicBool, Ordering};

use krcore_uring::abi::opcode::Opcode;
use krcore_uring::{MrAccess, Reason};
use pyo3::prelude::*;

/// Set in a child forked from the process that loaded the module: its rings, regions
/// and listens are the parent's (the same file and mappings), so the child neither
/// uses them nor ends them when its objects go.
pub static FORKED: AtomicBool = AtomicBool::new(false);

/// Whether this process is a child forked from the one that made its rings.
pub fn in_forked_child() -> bool {
    FORKED.load(Ordering::Relaxed)
}

/// In a forked child, what `slot` holds is the parent's: forgotten, never ended from
/// here.
pub fn leave_to_parent<T>(slot: &std::sync::Mutex<Option<T>>) {
    if in_forked_child() {
        std::mem::forget(handles::locked(slot).take());
    }
}

/// Called in a child after `fork` (`os.register_at_fork`, in `krcore/__init__.py`).
#[pyfunction]
fn _forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// `NAME` for an opcode's `Debug` name (`ImportName` is `IMPORT_NAME`).
fn screaming(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[pymodule]
fn _krcore(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The async ring's futures run on one worker thread (they only submit, reap and
    // wake: one is plenty, and the module's own threads do the network work).
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.worker_threads(1).thread_name("krcore-async").enable_all();
    pyo3_async_runtimes::tokio::init(rt);
    m.add_function(wrap_pyfunction!(_forked, m)?)?;
    let reasons: Vec<(String, u16)> = Reason::ALL
        .iter()
        .map(|r| (r.name().to_uppercase(), *r as u16))
        .collect();
    m.add("REASONS", reasons)?;
    let opcodes: Vec<(String, u8)> = Opcode::ALL
        .iter()
        .map(|o| (screaming(&format!("{o:?}")), *o as u8))
        .collect();
    m.add("OPCODES", opcodes)?;
    let access = [
        ("LOCAL_WRITE", MrAccess::LOCAL_WRITE),
        ("REMOTE_WRITE", MrAccess::REMOTE_WRITE),
        ("REMOTE_READ", MrAccess::REMOTE_READ),
        ("REMOTE_ATOMIC", MrAccess::REMOTE_ATOMIC),
    ];
    m.add("ACCESS", access.map(|(n, a)| (n, a.bits())).to_vec())?;
    m.add_class::<ring::PyRing>()?;
    m.add_class::<async_ring::PyAsyncRing>()?;
    m.add_class::<batch::PyBatch>()?;
    m.add_class::<region::PyRegion>()?;
    m.add_class::<handles::PyVqp>()?;
    m.add_class::<handles::PyRemote>()?;
    m.add_class::<handles::PyListener>()?;
    Ok(())
}
