//! The least of a PyO3 face over krcore-uring that a one-sided READ needs, so a Python
//! operation's cost through it is measured against the cffi package's (the Python
//! faces' figure, `benches/py/faces.py`). Not a package.

use krcore_uring::{Batch, Builder, Device, MemoryRegion, MrAccess, RemoteRegion, Ring, Vqp};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

fn err(e: krcore_uring::Error) -> PyErr {
    PyOSError::new_err(e.to_string())
}

/// A ring.
#[pyclass(name = "Ring", unsendable)]
struct PyRing(Ring);

/// A virtual QP.
#[pyclass(name = "Vqp", unsendable)]
struct PyVqp(Vqp);

/// Registered memory the library owns.
#[pyclass(name = "MemoryRegion", unsendable)]
struct PyRegion(MemoryRegion);

/// Imported remote memory.
#[pyclass(name = "RemoteRegion", unsendable)]
struct PyRemote(RemoteRegion);

#[pymethods]
impl PyRing {
    #[new]
    fn new(entries: u32) -> PyResult<PyRing> {
        let dev = Device::open().map_err(err)?;
        Ok(PyRing(Builder::new(entries).build(dev).map_err(err)?))
    }

    /// This node's address, as a GID.
    fn node_gid(&self) -> PyResult<[u8; 16]> {
        let rows = self.0.device().query_devices().map_err(err)?;
        rows.node_gid().ok_or_else(|| PyOSError::new_err("no RoCE v2 IPv4 GID"))
    }

    fn connect(&mut self, gid: [u8; 16], service: u32) -> PyResult<PyVqp> {
        Ok(PyVqp(self.0.connect(gid, service).map_err(err)?))
    }

    fn register(&mut self, size: usize, access: u32) -> PyResult<PyRegion> {
        let access = MrAccess::from_bits_truncate(access);
        Ok(PyRegion(self.0.register(size, access).map_err(err)?))
    }

    fn import_mr(&mut self, vqp: &PyVqp, region: &PyRegion) -> PyResult<PyRemote> {
        let d = region.0.export().ok_or_else(|| PyOSError::new_err("no remote rights"))?;
        Ok(PyRemote(self.0.import(&vqp.0, &d).map_err(err)?))
    }

    /// One READ of `n` bytes, run as a batch: the bytes read.
    fn read(&mut self, vqp: &PyVqp, local: &PyRegion, off: u64, remote: &PyRemote, roff: u64, n: u32) -> PyResult<i32> {
        let mut b = Batch::new();
        b.read(&vqp.0, &local.0, off, &remote.0, roff, n).map_err(err)?;
        let done = self.0.run(b).map_err(err)?;
        Ok(done[0].as_ref().map_err(|e| PyOSError::new_err(e.to_string()))?.res)
    }
}

#[pymodule]
fn krcore_pyo3(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRing>()?;
    m.add_class::<PyVqp>()?;
    m.add_class::<PyRegion>()?;
    m.add_class::<PyRemote>()?;
    Ok(())
}
