//! The handles a ring hands out, as Python objects any thread may hold: a virtual QP,
//! imported remote memory, a listen, and the node names CONNECT takes.
//!
//! Each keeps the library's handle where one call that ends it (DISCONNECT, UNLISTEN)
//! ends it for every holder, and where an operation in flight on the async ring holds
//! it (an `Arc`) until that operation is done.

use std::sync::{Arc, Mutex, MutexGuard};

use krcore_uring::abi::errno::Errno;
use krcore_uring::{Accepted, Listener, Node, Reason, RemoteRegion, Vqp};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes};

use crate::errors::Failure;

/// A ring's identity as the objects it made hold it: shared by a `Ring` and the
/// `AsyncRing` made from it, as the library's ring is.
pub type RingToken = Arc<()>;

/// Locks `m`, whose holders never leave its value half made (a panic elsewhere does
/// not poison it for Python).
pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A virtual QP: a ring's connection through a pooled kernel QP.
#[pyclass(name = "Vqp", module = "krcore", frozen)]
pub struct PyVqp {
    /// Gone once disconnected.
    inner: Mutex<Option<Arc<Vqp>>>,
    /// The ring that made it: a DISCONNECT through another is refused before the
    /// virtual QP is taken (the library's own refusal would consume it).
    ring: RingToken,
    /// The handle raw entries name it by.
    #[pyo3(get)]
    handle: u32,
    /// The pooled physical QP it is bound to (shared with other rings).
    #[pyo3(get)]
    qpn: u32,
    /// Its port on this node (a CONNECT's own; for an accepted one, the peer end's); 0
    /// with no endpoint (service 0).
    #[pyo3(get)]
    port: u16,
}

impl PyVqp {
    /// Wraps the library's virtual QP, made by the ring `ring` stands for.
    pub fn new(v: Vqp, ring: &RingToken) -> PyVqp {
        PyVqp {
            ring: ring.clone(),
            handle: v.handle(),
            qpn: v.qpn(),
            port: v.port(),
            inner: Mutex::new(Some(Arc::new(v))),
        }
    }

    /// The virtual QP, for an operation (`BadVqp` once disconnected).
    pub fn get(&self) -> Result<Arc<Vqp>, Failure> {
        locked(&self.inner)
            .clone()
            .ok_or_else(|| Failure::refused("virtual QP: disconnected", Reason::BadVqp))
    }

    /// The virtual QP itself, for ring `ring` to disconnect: `EINVAL` for another
    /// ring's, `EBUSY` while an operation in flight holds it (it stays either way),
    /// `BadVqp` when already disconnected.
    pub fn take(&self, ring: &RingToken) -> Result<Vqp, Failure> {
        if !Arc::ptr_eq(&self.ring, ring) {
            return Err(Failure::Refused {
                op: "disconnect: a handle of another ring",
                errno: Errno::EINVAL,
                reason: None,
            });
        }
        let mut slot = locked(&self.inner);
        let arc = slot
            .take()
            .ok_or_else(|| Failure::refused("disconnect: already disconnected", Reason::BadVqp))?;
        Arc::try_unwrap(arc).map_err(|arc| {
            *slot = Some(arc);
            Failure::Refused {
                op: "disconnect: an operation in flight uses the virtual QP",
                errno: Errno::EBUSY,
                reason: None,
            }
        })
    }
}

#[pymethods]
impl PyVqp {
    fn __repr__(&self) -> String {
        format!("Vqp(handle={}, qpn={}, port={})", self.handle, self.qpn, self.port)
    }
}

/// A peer's memory imported for one virtual QP: the only remote range its operations
/// may touch.
#[pyclass(name = "RemoteRegion", module = "krcore", frozen)]
pub struct PyRemote {
    inner: Arc<RemoteRegion>,
}

impl PyRemote {
    /// Wraps the library's remote region.
    pub fn new(r: RemoteRegion) -> PyRemote {
        PyRemote { inner: Arc::new(r) }
    }

    /// The remote region, for an operation.
    pub fn get(&self) -> Arc<RemoteRegion> {
        self.inner.clone()
    }
}

#[pymethods]
impl PyRemote {
    /// Remote start address.
    #[getter]
    fn addr(&self) -> u64 {
        self.inner.addr()
    }

    /// Length in bytes.
    #[getter]
    fn len(&self) -> u32 {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("RemoteRegion(addr={:#x}, len={})", self.inner.addr(), self.inner.len())
    }
}

/// A service a ring listens on: `accept` takes the peers that join it, `unlisten`
/// ends it (as does its last reference going, or the ring's close).
#[pyclass(name = "Listener", module = "krcore", frozen)]
pub struct PyListener {
    /// Held by an accept while it waits (an async one across awaits); gone once
    /// unlistened.
    pub inner: Arc<tokio::sync::Mutex<Option<Listener>>>,
    /// Set by an async unlisten: async accepts waiting on the listen give up, so the
    /// unlisten is never stuck behind them.
    pub stop: tokio::sync::watch::Sender<bool>,
    /// The service.
    #[pyo3(get)]
    service: u32,
    /// The process it was made in.
    born: crate::Born,
}

impl PyListener {
    /// Fails `EBADF` in a child forked since the listen was made: it is the parent's,
    /// and neither accepted on nor ended from here.
    pub fn mine(&self) -> Result<(), Failure> {
        self.born.mine()
    }

    /// Wraps the library's listener.
    pub fn new(l: Listener) -> PyListener {
        PyListener {
            service: l.service(),
            inner: Arc::new(tokio::sync::Mutex::new(Some(l))),
            stop: tokio::sync::watch::Sender::new(false),
            born: crate::Born::here(),
        }
    }
}

impl Drop for PyListener {
    /// In a forked child the listen is the parent's: never ended from here.
    fn drop(&mut self) {
        if self.born.inherited() {
            if let Ok(mut l) = self.inner.try_lock() {
                std::mem::forget(l.take());
            }
        }
    }
}

#[pymethods]
impl PyListener {
    /// Whether the listen has ended (unlistened, or its last completion taken). False
    /// while an accept waits on it.
    #[getter]
    fn ended(&self) -> bool {
        match self.inner.try_lock() {
            Ok(l) => l.as_ref().is_none_or(|l| l.ended()),
            Err(_) => false,
        }
    }

    fn __repr__(&self) -> String {
        format!("Listener(service={}, ended={})", self.service, self.ended())
    }
}

/// A listener's listen, for an accept or the unlisten (`ECANCELED` once unlistened).
pub fn listening(l: &mut Option<Listener>) -> Result<&mut Listener, Failure> {
    l.as_mut().ok_or(Failure::Refused {
        op: "accept: the listen has ended",
        errno: Errno::ECANCELED,
        reason: None,
    })
}

/// An accepted peer as Python gets it: its virtual QP (whose `port` is the peer
/// end's) and the peer's IPv4 address.
pub fn accepted(a: Accepted, ring: &RingToken) -> (PyVqp, String) {
    (PyVqp::new(a.vqp, ring), a.peer.to_string())
}

/// A node as CONNECT takes it: 16 bytes are a GID; a string (or anything whose `str`
/// is one, an `ipaddress` address included) is an address or a host name.
pub fn node_of(obj: &Bound<'_, PyAny>) -> PyResult<Node> {
    let gid = if let Ok(b) = obj.cast::<PyBytes>() {
        Some(b.as_bytes().to_vec())
    } else {
        obj.cast::<PyByteArray>().ok().map(|b| b.to_vec())
    };
    if let Some(g) = gid {
        let g: [u8; 16] = g.try_into().map_err(|_| {
            pyo3::exceptions::PyValueError::new_err("a GID is 16 bytes")
        })?;
        return Ok(Node::from(g));
    }
    Ok(Node::from(obj.str()?.to_string()))
}
