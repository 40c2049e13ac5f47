//! Registered memory as a Python object: its bytes as a memoryview, and the rule that
//! keeps every view valid.
//!
//! The library's [`MemoryRegion`] owns the buffer. Python reaches it through the
//! buffer protocol, and each view holds the object, so the buffer lives as long as any
//! view does, as long as the region stays in the object. Operations that take the
//! region away (an async run, which parks it in the ring if cancelled; a run with a
//! timeout, which parks it when the wait runs out; deregistration, which frees it) are
//! refused while a view exists, as a `bytearray` refuses to resize under one.
//!
//! Python's views alias the buffer, so this crate never calls the library's `bytes`
//! or `bytes_mut` (a Rust reference to bytes a view may write): it hands out the
//! address alone.
//!
//! Lock order: a ring's lock, then regions' locks in address order. Nothing holds a
//! region's lock across a wait for the GIL: the blocking run reads them with the GIL
//! released, and whoever takes a region (with the GIL) only tries.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use krcore_uring::abi::errno::Errno;
use krcore_uring::{MemoryRegion, MrDescriptor, Reason};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::{ffi, PyTypeInfo};

use crate::errors::{py_type, Failure};

/// Where a region object's memory is.
pub enum Held {
    /// Here, registered.
    Here(MemoryRegion),
    /// With an operation in flight that owns it (an async one, or a bounded run).
    Lent,
    /// Given to the ring by an operation given up on (cancelled, or past its
    /// timeout): deregistered and freed once the kernel is done with it.
    GivenUp,
    /// Deregistered and freed.
    Released,
}

impl Held {
    /// The region, for an operation that uses it where it is.
    pub fn here(&self) -> Result<&MemoryRegion, Failure> {
        match self {
            Held::Here(r) => Ok(r),
            other => Err(other.gone()),
        }
    }

    /// Why the region is not here.
    fn gone(&self) -> Failure {
        let (why, errno) = match self {
            Held::Here(_) => unreachable!("the region is here"),
            Held::Lent => ("an operation in flight holds the region", Errno::EBUSY),
            Held::GivenUp => ("the region went with an operation given up on", Errno::EINVAL),
            Held::Released => ("the region is deregistered", Errno::EINVAL),
        };
        Failure::Refused {
            op: why,
            errno,
            reason: (errno == Errno::EINVAL).then_some(Reason::BadMr),
        }
    }
}

/// Memory the ring allocated and registered. `view` is a writable memoryview of it.
#[pyclass(name = "MemoryRegion", module = "krcore", frozen)]
pub struct PyRegion {
    held: RwLock<Held>,
    /// Buffers the object exported (memoryviews alive): counted under `held`'s read
    /// lock, checked under its write lock.
    views: AtomicUsize,
    /// Its length in bytes.
    #[pyo3(get)]
    size: usize,
    /// Its start address, as remote peers address it.
    #[pyo3(get)]
    addr: u64,
    /// The handle raw entries name it by.
    #[pyo3(get)]
    handle: u32,
    export: Option<MrDescriptor>,
    /// The process it was registered in.
    born: crate::Born,
}

impl PyRegion {
    /// Wraps the library's region.
    pub fn new(mr: MemoryRegion) -> PyRegion {
        PyRegion {
            size: mr.len(),
            addr: mr.addr(),
            handle: mr.handle(),
            export: mr.export(),
            held: RwLock::new(Held::Here(mr)),
            views: AtomicUsize::new(0),
            born: crate::Born::here(),
        }
    }

    /// Reads where the region is (waiting only for a take or a return, which never
    /// wait themselves).
    pub fn read(&self) -> RwLockReadGuard<'_, Held> {
        self.held.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Held> {
        self.held.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the region away: refused while a view exists, or while a
    /// blocking run uses it (`EBUSY`: it is never waited for with the GIL held), and
    /// in a child forked since it was registered (`EBADF`: the parent's).
    pub fn take(&self) -> Result<MemoryRegion, Failure> {
        self.born.mine()?;
        let mut held = self.held.try_write().map_err(|_| Failure::Refused {
            op: "a blocking run on another thread uses the region",
            errno: Errno::EBUSY,
            reason: None,
        })?;
        let views = self.views.load(Ordering::Acquire);
        if views > 0 {
            return Err(Failure::Viewed(views));
        }
        match std::mem::replace(&mut *held, Held::Lent) {
            Held::Here(r) => Ok(r),
            other => {
                let f = other.gone();
                *held = other;
                Err(f)
            }
        }
    }

    /// Settles a region taken away: back here, or where it went.
    pub fn settle(&self, to: Held) {
        *self.write() = to;
    }
}

impl Drop for PyRegion {
    /// In a forked child the region is the parent's: never deregistered from here.
    fn drop(&mut self) {
        if self.born.inherited() {
            let held = std::mem::replace(self.held.get_mut().unwrap_or_else(|e| e.into_inner()), Held::Released);
            std::mem::forget(held);
        }
    }
}

#[pymethods]
impl PyRegion {
    /// A writable memoryview of the region's bytes. It keeps the object (and its
    /// memory) alive; while it exists, nothing takes the region away.
    #[getter]
    fn view<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        pyo3::types::PyMemoryView::type_object(slf.py()).call1((slf,))
    }

    /// What a peer needs to import it (remote rights only): an MrDescriptor.
    fn export<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let d = self
            .export
            .ok_or_else(|| Failure::refused("export: the region has no remote right", Reason::MrAccess))?;
        py_type(py, "MrDescriptor")?.call1((d.descriptor, d.addr, d.len))
    }

    fn __repr__(&self) -> String {
        format!("MemoryRegion(addr={:#x}, size={}, handle={})", self.addr, self.size, self.handle)
    }

    /// The buffer protocol: the region's bytes, writable, while the region is here.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let this = slf.get();
        let held = this.read();
        if let Err(f) = held.here() {
            let e = f.into_pyerr(slf.py());
            return Err(PyBufferError::new_err(e.value(slf.py()).to_string()));
        }
        // SAFETY: `view` is the caller's Py_buffer to fill; the range is the region's
        // buffer, allocated and ours while the region is here, and it stays here
        // while the view counted below lives (takes refuse); the view holds `slf`.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                this.addr as *mut c_void,
                this.size as ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        this.views.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.views.fetch_sub(1, Ordering::AcqRel);
    }
}
