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
mod worker;

use std::sync::atomic::{AtomicU64, Ordering};

use krcore_uring::abi::opcode::Opcode;
use krcore_uring::{MrAccess, Reason};
use pyo3::prelude::*;

/// How many forks this process is from the one that loaded the module: one more in
/// each child (`os.register_at_fork`), as each is a copy of its parent's memory.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The process an object was made in. A ring, region or listen made before a fork is
/// the parent's in the child (the same file and mappings, which the parent goes on
/// using): the child neither uses it nor ends it when its copy of the object goes.
/// What the child makes itself is its own, and works (pre-fork servers fork their
/// workers from a process that imported krcore, and each opens its own rings).
#[derive(Clone, Copy, Debug)]
pub struct Born(u64);

impl Born {
    /// Made now, in this process.
    pub fn here() -> Born {
        Born(GENERATION.load(Ordering::Relaxed))
    }

    /// Whether it was made in a process this one was forked from.
    pub fn inherited(self) -> bool {
        self.0 != GENERATION.load(Ordering::Relaxed)
    }

    /// Fails `EBADF` for what a process this one was forked from made.
    pub fn mine(self) -> Result<(), errors::Failure> {
        match self.inherited() {
            true => Err(errors::Failure::Refused {
                op: "a ring of the process this one was forked from",
                errno: krcore_uring::abi::errno::Errno(9), // EBADF
                reason: None,
            }),
            false => Ok(()),
        }
    }

    /// When inherited, what `slot` holds is the parent's: forgotten, never ended from
    /// here.
    pub fn leave_to_parent<T>(self, slot: &std::sync::Mutex<Option<T>>) {
        if self.inherited() {
            std::mem::forget(handles::locked(slot).take());
        }
    }
}

/// The process the async worker (a tokio thread, started with the first `AsyncRing`)
/// runs in, `u64::MAX` before it starts.
static ASYNC_BORN: AtomicU64 = AtomicU64::new(u64::MAX);

/// Starts the async worker here, or finds it here: fails `EOPNOTSUPP` in a child
/// forked after it started, which has the worker's state and not its thread (a fork
/// copies only the thread that forks): an `AsyncRing` there would never be served.
pub fn async_worker_here() -> Result<(), errors::Failure> {
    let here = GENERATION.load(Ordering::Relaxed);
    match ASYNC_BORN.compare_exchange(u64::MAX, here, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Ok(()),
        Err(g) if g == here => Ok(()),
        Err(_) => Err(errors::Failure::Refused {
            op: "AsyncRing: the async worker thread stayed in the process this one was forked from (make AsyncRings only after forking, or use Ring)",
            errno: krcore_uring::abi::errno::Errno(95), // EOPNOTSUPP
            reason: None,
        }),
    }
}

/// Whether the async worker started in this process (not in one it was forked from).
pub fn async_worker_ran_here() -> bool {
    ASYNC_BORN.load(Ordering::Acquire) == GENERATION.load(Ordering::Relaxed)
}

/// Called in a child after `fork` (`os.register_at_fork`, in `krcore/__init__.py`).
#[pyfunction]
fn _forked() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
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
    m.add_function(wrap_pyfunction!(worker::_quiesce, m)?)?;
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
