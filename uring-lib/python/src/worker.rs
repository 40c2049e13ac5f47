//! The async worker: pyo3-async-runtimes' tokio runtime, with every task it runs for
//! Python counted until it has let go of the interpreter, so that the interpreter's
//! exit waits for them (`_quiesce`, an `atexit` hook).
//!
//! A coroutine's result is handed to asyncio by a blocking task that takes the GIL
//! after the Rust future ends. For a coroutine cancelled (`asyncio.wait_for`), that
//! happens after asyncio is done with it, possibly after `asyncio.run` returned: a
//! thread that takes the GIL while the interpreter finalizes is made to exit in the
//! middle of Rust code, which crashed the process at exit (about 1 run in 6 of the
//! async example).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3_async_runtimes::generic::{ContextExt, Runtime};
use pyo3_async_runtimes::TaskLocals;

/// Tasks spawned for Python and not yet done with it.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Set once the interpreter's exit waited: a blocking task that starts after is
/// forgotten rather than run (one still in flight past the wait would take the GIL
/// while the interpreter finalizes).
static EXITING: AtomicBool = AtomicBool::new(false);

/// How long the interpreter's exit waits for them: a future that never ends (a RECV
/// nobody answers, on a loop that was not closed) must not hold the exit forever.
const QUIESCE: Duration = Duration::from_secs(5);

/// One task in flight, from its spawn to the end of its last step.
struct InFlight;

impl InFlight {
    fn new() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
}

tokio::task_local! {
    static LOCALS: std::cell::OnceCell<TaskLocals>;
}

/// The runtime pyo3-async-runtimes drives our futures on: its own tokio runtime, with
/// each task counted ([`InFlight`]). A task that spawns its successor (the future's
/// task, then the blocking task that sets the result) does so before it ends, so the
/// count never falls to zero between them.
pub struct Worker;

impl Runtime for Worker {
    type JoinError = tokio::task::JoinError;
    type JoinHandle = tokio::task::JoinHandle<()>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let held = InFlight::new();
        pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
            let _held = held;
            fut.await
        })
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let held = InFlight::new();
        pyo3_async_runtimes::tokio::get_runtime().spawn_blocking(move || {
            let _held = held;
            if EXITING.load(Ordering::Acquire) {
                // What it holds (Python objects among them) is never dropped: the
                // process is ending.
                std::mem::forget(f);
                return;
            }
            f()
        })
    }
}

impl ContextExt for Worker {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = std::cell::OnceCell::new();
        // A fresh cell takes its one value.
        let _ = cell.set(locals);
        Box::pin(LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        LOCALS.try_with(|c| c.get().cloned()).ok().flatten()
    }
}

/// `fut` as an asyncio awaitable, run on the worker.
pub fn future_into_py<F, T>(py: Python<'_>, fut: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<Worker, F, T>(py, fut)
}

/// Called at the interpreter's exit (`atexit`, in `krcore/__init__.py`): waits, with
/// the GIL released, until the worker's tasks are done with the interpreter (at most
/// [`QUIESCE`]). Nothing to wait for where the worker never ran (a child forked after
/// it started has its count and not its threads).
#[pyfunction]
pub fn _quiesce(py: Python<'_>) {
    if !crate::async_worker_ran_here() {
        return;
    }
    py.detach(|| {
        let start = Instant::now();
        while IN_FLIGHT.load(Ordering::Acquire) > 0 && start.elapsed() < QUIESCE {
            std::thread::sleep(Duration::from_millis(1));
        }
        EXITING.store(true, Ordering::Release);
    });
}
