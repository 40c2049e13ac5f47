//! The async ring from Python: the library's `AsyncRing` futures, run on one tokio
//! worker thread of the module's own and handed to asyncio as awaitables
//! (pyo3-async-runtimes). A coroutine that waits holds no thread and no GIL.
//!
//! Cancelling a coroutine drops its future on the worker, which is what the library
//! makes safe: a batch's regions park in the ring until its entries complete, and the
//! region objects say so (`Held::GivenUp`).

use std::sync::{Arc, Mutex};

use krcore_uring::{AsyncRing, MrAccess, Reason};
use pyo3::prelude::*;

use crate::batch::{results, Handed, PyBatch};
use crate::errors::Failure;
use crate::handles::{accepted, listening, locked, node_of, PyListener, PyRemote, PyVqp, RingToken};
use crate::region::PyRegion;
use crate::ring::{descriptor, node_gid, open, PyRing};
use crate::worker::future_into_py;
use crate::Born;

/// A `Ring` driven from asyncio, as the Rust library's `AsyncRing` is from tokio: any
/// number of its coroutines may be in flight at once, from any task. Made from a
/// `Ring` (which it takes over: that object is closed for other use) or a number of
/// entries.
///
/// Cancelling a coroutine (`asyncio.wait_for`, a task's `cancel`) is safe at any
/// point. A batch's regions go with it: they stay registered and allocated in the ring
/// until its entries complete, then are freed, and their objects refuse further use.
/// The operations themselves are not undone (a RECV still posted takes the next
/// message: DISCONNECT its virtual QP to cancel it). The worker drops the operation a
/// moment after the coroutine sees CancelledError: until then its regions answer
/// EBUSY, and one whose entries all completed meanwhile comes back whole. An operation
/// takes its regions away while it runs, so no memoryview of them may exist then.
#[pyclass(name = "AsyncRing", module = "krcore", frozen)]
pub struct PyAsyncRing {
    /// Gone once closed; futures in flight hold their own reference.
    inner: Mutex<Option<Arc<AsyncRing>>>,
    gid: Option<[u8; 16]>,
    /// Its identity: the `Ring`'s it was made from.
    token: RingToken,
    /// The process it was made in.
    born: Born,
}

impl PyAsyncRing {
    fn ring(&self) -> Result<Arc<AsyncRing>, Failure> {
        self.born.mine()?;
        locked(&self.inner)
            .clone()
            .ok_or_else(|| Failure::refused("async ring: closed", Reason::RingClosed))
    }
}

impl Drop for PyAsyncRing {
    /// In a forked child the ring is the parent's: left alone, never closed from here.
    fn drop(&mut self) {
        self.born.leave_to_parent(&self.inner);
    }
}

#[pymethods]
impl PyAsyncRing {
    #[new]
    fn new(py: Python<'_>, ring: &Bound<'_, PyAny>) -> PyResult<PyAsyncRing> {
        crate::async_worker_here().map_err(|f| f.into_pyerr(py))?;
        let (ring, token) = match ring.cast::<PyRing>() {
            Ok(r) => (r.get().take(), r.get().token.clone()),
            Err(_) => {
                let entries: u32 = ring.extract()?;
                (py.detach(|| open(entries, false)), RingToken::default())
            }
        };
        let ring = ring.map_err(|f| f.into_pyerr(py))?;
        let gid = node_gid(ring.device()).ok();
        // The eventfd registers with the worker's reactor.
        let _rt = pyo3_async_runtimes::tokio::get_runtime().enter();
        let ring = AsyncRing::new(ring).map_err(|e| Failure::from(e).into_pyerr(py))?;
        Ok(PyAsyncRing {
            inner: Mutex::new(Some(Arc::new(ring))),
            gid,
            token,
            born: Born::here(),
        })
    }

    /// Lets the ring go: it closes once the coroutines in flight on it are done. In a
    /// child forked since it was made, only forgets it (its eventfd is in the parent's
    /// epoll set too).
    fn close(&self, py: Python<'_>) {
        if self.born.inherited() {
            return self.born.leave_to_parent(&self.inner);
        }
        py.detach(|| drop(locked(&self.inner).take()));
    }

    /// This node's GID, as `Ring.node_gid`.
    fn node_gid(&self) -> PyResult<[u8; 16]> {
        Ok(self
            .gid
            .ok_or_else(|| Failure::refused("query devices: no RoCE v2 IPv4 GID", Reason::NoDevice))?)
    }

    /// As `Ring.connect`; a host name is resolved by the worker, blocking nothing.
    fn connect<'py>(&self, py: Python<'py>, node: &Bound<'py, PyAny>, service: u32) -> PyResult<Bound<'py, PyAny>> {
        let (ring, node, token) = (self.ring()?, node_of(node)?, self.token.clone());
        future_into_py(py, async move {
            Ok(PyVqp::new(ring.connect(node, service).await.map_err(Failure::from)?, &token))
        })
    }

    /// As `Ring.pair`.
    fn pair<'py>(
        &self,
        py: Python<'py>,
        node: &Bound<'py, PyAny>,
        port: u16,
        peer_port: u16,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (ring, node, token) = (self.ring()?, node_of(node)?, self.token.clone());
        future_into_py(py, async move {
            Ok(PyVqp::new(ring.pair(node, port, peer_port).await.map_err(Failure::from)?, &token))
        })
    }

    /// As `Ring.disconnect`. The virtual QP is taken when the coroutine first runs.
    fn disconnect<'py>(&self, py: Python<'py>, vqp: Py<PyVqp>) -> PyResult<Bound<'py, PyAny>> {
        let (ring, token) = (self.ring()?, self.token.clone());
        future_into_py(py, async move {
            let v = vqp.get().take(&token)?;
            Ok(ring.disconnect(v).await.map_err(Failure::from)?)
        })
    }

    /// As `Ring.register`.
    fn register<'py>(&self, py: Python<'py>, size: usize, access: u32) -> PyResult<Bound<'py, PyAny>> {
        let ring = self.ring()?;
        let access = MrAccess::from_bits_truncate(access);
        future_into_py(py, async move {
            Ok(PyRegion::new(ring.register(size, access).await.map_err(Failure::from)?))
        })
    }

    /// Deregisters `mr` without waiting: its DEREG_MR goes with the ring's next
    /// submission, and its memory is freed when that completes. Refused while a
    /// memoryview of it exists.
    fn deregister<'py>(&self, py: Python<'py>, mr: Py<PyRegion>) -> PyResult<Bound<'py, PyAny>> {
        self.ring()?;
        let mut handed = Handed::one(&mr, py)?;
        // Dropping the library's region is its async deregistration.
        drop(handed.start());
        handed.released();
        future_into_py(py, async move { Ok(()) })
    }

    /// As `Ring.import_mr`.
    fn import_mr<'py>(&self, py: Python<'py>, vqp: &PyVqp, export: (u64, u64, u32)) -> PyResult<Bound<'py, PyAny>> {
        let (ring, v) = (self.ring()?, vqp.get()?);
        future_into_py(py, async move {
            Ok(PyRemote::new(ring.import(&v, &descriptor(export)).await.map_err(Failure::from)?))
        })
    }

    /// As `Ring.publish`; the region is the operation's while it runs.
    #[pyo3(signature = (mr, name, mode=0o600))]
    fn publish<'py>(&self, py: Python<'py>, mr: Py<PyRegion>, name: String, mode: u16) -> PyResult<Bound<'py, PyAny>> {
        let ring = self.ring()?;
        let mut handed = Handed::one(&mr, py)?;
        future_into_py(py, async move {
            let (region, _) = handed.start();
            let r = ring.publish_mode(&region[0], &name, mode).await;
            handed.settle(region);
            Ok(r.map_err(Failure::from)?)
        })
    }

    /// As `Ring.import_name`.
    #[pyo3(signature = (vqp, name, length, owner=None))]
    fn import_name<'py>(
        &self,
        py: Python<'py>,
        vqp: &PyVqp,
        name: String,
        length: u32,
        owner: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (ring, v) = (self.ring()?, vqp.get()?);
        future_into_py(py, async move {
            let r = match owner {
                Some(uid) => ring.import_name_owned(&v, &name, length, uid).await,
                None => ring.import_name(&v, &name, length).await,
            };
            Ok(PyRemote::new(r.map_err(Failure::from)?))
        })
    }

    /// As `Ring.resolve_name`.
    fn resolve_name<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let ring = self.ring()?;
        future_into_py(py, async move {
            Ok(ring.resolve_name(&name).await.map_err(Failure::from)?.to_string())
        })
    }

    /// As `Ring.connect_name`.
    #[pyo3(signature = (name, length, owner=None))]
    fn connect_name<'py>(
        &self,
        py: Python<'py>,
        name: String,
        length: u32,
        owner: Option<u32>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (ring, token) = (self.ring()?, self.token.clone());
        future_into_py(py, async move {
            let (v, m) = match owner {
                Some(uid) => ring.connect_name_owned(&name, length, uid).await,
                None => ring.connect_name(&name, length).await,
            }
            .map_err(Failure::from)?;
            Ok((PyVqp::new(v, &token), PyRemote::new(m)))
        })
    }

    /// As `Ring.run`; bound it with `asyncio.wait_for` (see the class on
    /// cancellation).
    fn run<'py>(&self, py: Python<'py>, batch: &PyBatch) -> PyResult<Bound<'py, PyAny>> {
        let ring = self.ring()?;
        let mut handed = Handed::take(py, batch)?;
        future_into_py(py, async move {
            let (regions, build) = handed.start();
            let (got, back) = ring.run(regions, build).await;
            handed.settle(back);
            Python::attach(|py| results(py, got).map(Bound::unbind))
        })
    }

    /// As `Ring.listen`.
    fn listen<'py>(&self, py: Python<'py>, service: u32) -> PyResult<Bound<'py, PyAny>> {
        let ring = self.ring()?;
        future_into_py(py, async move {
            Ok(PyListener::new(ring.listen(service).await.map_err(Failure::from)?))
        })
    }

    /// As `Ring.accept`; bound it with `asyncio.wait_for` (a peer that joins after is
    /// the next accept's). Accepts on one listener wait their turn; an `unlisten` ends
    /// them (ECANCELED).
    fn accept<'py>(&self, py: Python<'py>, listener: &PyListener) -> PyResult<Bound<'py, PyAny>> {
        listener.mine().map_err(|f| f.into_pyerr(py))?;
        let (ring, home, token) = (self.ring()?, listener.inner.clone(), self.token.clone());
        let mut stop = listener.stop.subscribe();
        future_into_py(py, async move {
            let ended = || Failure::Refused {
                op: "accept: the listen was ended",
                errno: krcore_uring::abi::errno::Errno::ECANCELED,
                reason: None,
            };
            // Both waits are cancel-safe: a peer that joins after is the next accept's.
            let accept = async {
                let mut l = home.lock().await;
                ring.accept(listening(&mut l)?).await.map_err(Failure::from)
            };
            tokio::select! {
                a = accept => Ok(accepted(a?, &token)),
                _ = stop.wait_for(|s| *s) => Err(ended().into()),
            }
        })
    }

    /// As `Ring.unlisten`: accepts waiting on the listen end first.
    fn unlisten<'py>(&self, py: Python<'py>, listener: &PyListener) -> PyResult<Bound<'py, PyAny>> {
        listener.mine().map_err(|f| f.into_pyerr(py))?;
        let (ring, home, token) = (self.ring()?, listener.inner.clone(), self.token.clone());
        listener.stop.send_replace(true);
        future_into_py(py, async move {
            let l = home.lock().await.take();
            let left = match l {
                Some(l) => ring.unlisten(l).await.map_err(Failure::from)?,
                None => Vec::new(),
            };
            Ok(left.into_iter().map(|a| accepted(a, &token)).collect::<Vec<_>>())
        })
    }
}
