//! The blocking ring from Python. Every call releases the GIL for its work, so other
//! Python threads run while one waits; the ring itself is used by one thread at a
//! time (a second waits for the first's call to end).

use std::sync::Mutex;
use std::time::Duration;

use krcore_uring::abi::errno::Errno;
use krcore_uring::{Builder, Device, MrAccess, MrDescriptor, Reason, Ring};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::batch::{results, Handed, InPlace, PyBatch};
use crate::errors::Failure;
use crate::Born;
use crate::handles::{accepted, listening, locked, node_of, PyListener, PyRemote, PyVqp, RingToken};
use crate::region::PyRegion;

/// A krcore ring: `/dev/krcore` set up with `entries` submission entries (a kernel
/// thread polls them with `sqpoll`), mapped. Closing it (or leaving its `with`)
/// releases everything the kernel holds for it; regions still alive then are kept,
/// never freed under the NIC, until the process ends.
///
/// A ring serves one call at a time: a call from another thread waits until the
/// current one ends (a RECV with no timeout ends when its message comes). Threads that
/// wait independently take a ring each, or share an `AsyncRing`. A wait does not end
/// on a signal: Ctrl-C is seen once it ends, so bound waits that may not end with a
/// `timeout`. Handles belong to the ring that made them; another ring refuses them.
#[pyclass(name = "Ring", module = "krcore", frozen)]
pub struct PyRing {
    /// Gone once closed, or handed to an `AsyncRing`.
    inner: Mutex<Option<Ring>>,
    fd: i32,
    /// Its identity, which its objects hold.
    pub token: RingToken,
    /// The process it was opened in.
    born: Born,
}

/// Opens the device and sets a ring up.
pub fn open(entries: u32, sqpoll: bool) -> Result<Ring, Failure> {
    let dev = Device::open().map_err(|e| match e.raw_os_error() {
        Some(n) if n == Errno::ENOENT.0 => Failure::Refused {
            op: "open /dev/krcore (is the krcore module loaded?)",
            errno: Errno::ENOENT,
            reason: None,
        },
        _ => Failure::from(e),
    })?;
    let b = Builder::new(entries);
    let b = if sqpoll { b.sqpoll(0) } else { b };
    Ok(b.build(dev)?)
}

/// A timeout in seconds as the library bounds a wait (at least a microsecond):
/// `ValueError` for one that is negative, not a number, or past what a Duration holds.
pub fn bound(seconds: f64) -> PyResult<Duration> {
    if seconds.is_nan() || seconds < 0.0 {
        return Err(PyValueError::new_err(format!("timeout {seconds}: seconds, 0 or more")));
    }
    Duration::try_from_secs_f64(seconds.max(1e-6))
        .map_err(|_| PyValueError::new_err(format!("timeout {seconds}: too long a wait")))
}

/// An exported region's descriptor from Python: an MrDescriptor or any 3-tuple in its
/// order.
pub fn descriptor(export: (u64, u64, u32)) -> MrDescriptor {
    let (descriptor, addr, len) = export;
    MrDescriptor { descriptor, addr, len }
}

impl PyRing {
    /// Runs `f` on the ring with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ring) -> Result<T, Failure> + Send,
    ) -> PyResult<T> {
        self.born.mine()?;
        py.detach(|| match locked(&self.inner).as_mut() {
            Some(r) => f(r),
            None => Err(Failure::refused("ring: closed", Reason::RingClosed)),
        })
        .map_err(|f| f.into_pyerr(py))
    }

    /// Takes the ring itself (for an `AsyncRing`), unless a call uses it now.
    pub fn take(&self) -> Result<Ring, Failure> {
        self.born.mine()?;
        let mut slot = self.inner.try_lock().map_err(|_| Failure::Refused {
            op: "a call on another thread uses the ring",
            errno: Errno::EBUSY,
            reason: None,
        })?;
        slot.take()
            .ok_or_else(|| Failure::refused("ring: closed", Reason::RingClosed))
    }
}

impl Drop for PyRing {
    /// In a forked child the ring is the parent's: left alone, never closed from here.
    fn drop(&mut self) {
        self.born.leave_to_parent(&self.inner);
    }
}

#[pymethods]
impl PyRing {
    #[new]
    #[pyo3(signature = (entries=64, sqpoll=false))]
    fn new(py: Python<'_>, entries: u32, sqpoll: bool) -> PyResult<PyRing> {
        let ring = py.detach(|| open(entries, sqpoll)).map_err(|f| f.into_pyerr(py))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(ring.device());
        Ok(PyRing {
            inner: Mutex::new(Some(ring)),
            fd,
            token: RingToken::default(),
            born: Born::here(),
        })
    }

    /// Closes the ring (waiting for a call another thread makes on it). In a child
    /// forked since it was opened, only forgets it: the ring is the parent's.
    fn close(&self, py: Python<'_>) {
        if self.born.inherited() {
            return self.born.leave_to_parent(&self.inner);
        }
        py.detach(|| drop(locked(&self.inner).take()));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(&self, py: Python<'_>, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.close(py)
    }

    /// The device file's descriptor (-1 once closed).
    fn fileno(&self) -> i32 {
        match self.inner.try_lock() {
            Ok(r) if r.is_none() => -1,
            _ => self.fd,
        }
    }

    /// This node's address as CONNECT names it (its first RoCE v2 IPv4 GID), 16 bytes.
    fn node_gid(&self, py: Python<'_>) -> PyResult<[u8; 16]> {
        self.with(py, |r| node_gid(r.device()))
    }

    /// A virtual QP to `node` (an address, host name or 16-byte GID), to the listen on
    /// port `service` there, from an ephemeral port of this node; service 0 (named,
    /// never assumed): no endpoint, one-sided requests only.
    fn connect(&self, py: Python<'_>, node: &Bound<'_, PyAny>, service: u32) -> PyResult<PyVqp> {
        let node = node_of(node)?;
        self.with(py, |r| Ok(PyVqp::new(r.connect(node, service)?, &self.token)))
    }

    /// A virtual QP on this node's `port` paired with `peer_port` at `node`, whose end
    /// names them back (`pair(.., peer_port, port)`): neither side listens.
    fn pair(&self, py: Python<'_>, node: &Bound<'_, PyAny>, port: u16, peer_port: u16) -> PyResult<PyVqp> {
        let node = node_of(node)?;
        self.with(py, |r| Ok(PyVqp::new(r.pair(node, port, peer_port)?, &self.token)))
    }

    /// Releases a virtual QP; its receives still posted come back CANCELLED.
    fn disconnect(&self, py: Python<'_>, vqp: &PyVqp) -> PyResult<()> {
        self.with(py, |r| Ok(r.disconnect(vqp.take(&self.token)?)?))
    }

    /// Allocates `size` bytes (zeroed) and registers them with `access` (Access).
    fn register(&self, py: Python<'_>, size: usize, access: u32) -> PyResult<PyRegion> {
        let access = MrAccess::from_bits_truncate(access);
        self.with(py, |r| Ok(PyRegion::new(r.register(size, access)?)))
    }

    /// Deregisters `mr` (revoking its export) and frees its memory; refused while a
    /// memoryview of it exists.
    fn deregister(&self, py: Python<'_>, mr: Py<PyRegion>) -> PyResult<()> {
        let mut handed = Handed::one(&mr, py)?;
        // On failure the library keeps the memory (leaked, never freed under the NIC)
        // and `handed`, dropped, marks the region given up.
        self.with(py, |r| {
            let (regions, _) = handed.start();
            Ok(regions.into_iter().try_for_each(|m| r.deregister(m))?)
        })?;
        handed.released();
        Ok(())
    }

    /// Imports a peer's export (an MrDescriptor) for `vqp` only.
    fn import_mr(&self, py: Python<'_>, vqp: &PyVqp, export: (u64, u64, u32)) -> PyResult<PyRemote> {
        let v = vqp.get().map_err(|f| f.into_pyerr(py))?;
        self.with(py, |r| Ok(PyRemote::new(r.import(&v, &descriptor(export))?)))
    }

    /// Publishes `mr` under `name` in the MetaServer, granting `mode` as a file's mode
    /// does (rw bits for this user, its group and others).
    #[pyo3(signature = (mr, name, mode=0o600))]
    fn publish(&self, py: Python<'_>, mr: &PyRegion, name: &str, mode: u16) -> PyResult<()> {
        self.with(py, |r| {
            let held = mr.read();
            Ok(r.publish_mode(held.here()?, name, mode)?)
        })
    }

    /// Imports the first `length` bytes of the export published as `name`, with the
    /// rights its mode grants this user; with `owner` (a uid), only if that user
    /// published it, without, only if this user or root did (WRONG_OWNER otherwise:
    /// nobody's name is taken for another's by being first).
    #[pyo3(signature = (vqp, name, length, owner=None))]
    fn import_name(
        &self,
        py: Python<'_>,
        vqp: &PyVqp,
        name: &str,
        length: u32,
        owner: Option<u32>,
    ) -> PyResult<PyRemote> {
        let v = vqp.get().map_err(|f| f.into_pyerr(py))?;
        self.with(py, |r| {
            Ok(PyRemote::new(match owner {
                Some(uid) => r.import_name_owned(&v, name, length, uid)?,
                None => r.import_name(&v, name, length)?,
            }))
        })
    }

    /// The IPv4 address (a string) of the node that exports `name`.
    fn resolve_name(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        self.with(py, |r| Ok(r.resolve_name(name)?.to_string()))
    }

    /// Imports the first `length` bytes of `name` with no CONNECT first: (vqp,
    /// region), the virtual QP connected to the node that exports it (service 0).
    /// With `owner` (a uid), only if that user published it, without, only if this
    /// user or root did (WRONG_OWNER otherwise).
    #[pyo3(signature = (name, length, owner=None))]
    fn connect_name(
        &self,
        py: Python<'_>,
        name: &str,
        length: u32,
        owner: Option<u32>,
    ) -> PyResult<(PyVqp, PyRemote)> {
        self.with(py, |r| {
            let (v, m) = match owner {
                Some(uid) => r.connect_name_owned(name, length, uid)?,
                None => r.connect_name(name, length)?,
            };
            Ok((PyVqp::new(v, &self.token), PyRemote::new(m)))
        })
    }

    /// Listens on `service`: each peer node whose virtual QP connects to this node for
    /// it becomes a virtual QP of this ring, taken with `accept`. SERVICE_TAKEN when
    /// another ring of this node listens on it.
    fn listen(&self, py: Python<'_>, service: u32) -> PyResult<PyListener> {
        self.with(py, |r| Ok(PyListener::new(r.listen(service)?)))
    }

    /// The next peer that joined `listener`'s service: (Vqp, its IPv4 address as a
    /// string); the Vqp's `port` is the peer's. `timeout` (seconds) bounds the wait
    /// (KrcoreTimeout). A peer this ring had no room for raises KrcoreError
    /// (TABLE_FULL); the listen goes on.
    #[pyo3(signature = (listener, timeout=None))]
    fn accept(&self, py: Python<'_>, listener: &PyListener, timeout: Option<f64>) -> PyResult<(PyVqp, String)> {
        listener.mine().map_err(|f| f.into_pyerr(py))?;
        let home = listener.inner.clone();
        let within = timeout.map(bound).transpose()?;
        self.with(py, |r| {
            let mut l = home.blocking_lock();
            let l = listening(&mut l)?;
            let a = match within {
                Some(t) => r.accept_timeout(l, t)?,
                None => r.accept(l)?,
            };
            Ok(accepted(a, &self.token))
        })
    }

    /// Ends a listen; the peers that joined and were not accepted yet, as `accept`
    /// gives them (theirs are this ring's virtual QPs).
    fn unlisten(&self, py: Python<'_>, listener: &PyListener) -> PyResult<Vec<(PyVqp, String)>> {
        listener.mine().map_err(|f| f.into_pyerr(py))?;
        let home = listener.inner.clone();
        self.with(py, |r| {
            let l = home.blocking_lock().take();
            match l {
                Some(l) => Ok(r.unlisten(l)?.into_iter().map(|a| accepted(a, &self.token)).collect()),
                None => Ok(Vec::new()),
            }
        })
    }

    /// Runs `batch`; each operation's result in order: a Completion (an int, the bytes
    /// moved, with the CQE's `aux`), or the KrcoreError it failed with. With `timeout`
    /// (seconds), a wait that runs out raises KrcoreTimeout, and the batch's regions
    /// go with the operations still in flight (freed once they complete; a RECV still
    /// posted takes the next message: DISCONNECT to cancel it). A timed run takes its
    /// regions away while it runs, so no memoryview of them may exist.
    #[pyo3(signature = (batch, timeout=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        batch: &PyBatch,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let Some(t) = timeout else {
            let b = InPlace::new(py, batch)?;
            let got = self.with(py, |r| b.run(|batch| Ok(r.run(batch)?)))?;
            return results(py, Ok(got));
        };
        let within = bound(t)?;
        let mut handed = Handed::take(py, batch)?;
        let (got, back) = self.with(py, |r| {
            let (regions, build) = handed.start();
            Ok(r.run_timeout(regions, within, build))
        })?;
        handed.settle(back);
        results(py, got)
    }
}

/// This node's GID from `dev`'s device query.
pub fn node_gid(dev: &Device) -> Result<[u8; 16], Failure> {
    dev.query_devices()?
        .node_gid()
        .ok_or_else(|| Failure::refused("query devices: no RoCE v2 IPv4 GID", Reason::NoDevice))
}
