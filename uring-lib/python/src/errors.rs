//! Failures as Python sees them: the library's [`Error`] and the package's own
//! refusals become `krcore.KrcoreError` (`KrcoreTimeout`, a `TimeoutError`, for a
//! bounded wait that ran out), and memory a view pins refuses as `BufferError` does.
//!
//! Work done with the GIL released (a blocking wait, a future on the worker) returns a
//! [`Failure`], which needs no GIL; it becomes the Python exception when it reaches
//! Python.

use krcore_uring::abi::errno::Errno;
use krcore_uring::{Error, Reason};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

/// `krcore._types`, which defines the exception classes (imported once).
static TYPES: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Why an operation of the package could not go on.
#[derive(Debug)]
pub enum Failure {
    /// The library's error: the operation, its errno and the kernel's reason.
    Lib(Error),
    /// A refusal of the package's own, as the kernel would word it.
    Refused {
        op: &'static str,
        errno: Errno,
        reason: Option<Reason>,
    },
    /// Memory that memoryviews still reach cannot leave its region's object.
    Viewed(usize),
}

impl Failure {
    /// A refusal of `op` for `reason`, with the errno the kernel gives it.
    pub fn refused(op: &'static str, reason: Reason) -> Failure {
        Failure::Refused {
            op,
            errno: reason.errno(),
            reason: Some(reason),
        }
    }

    /// The Python exception.
    pub fn into_pyerr(self, py: Python<'_>) -> PyErr {
        let (op, errno, reason) = match self {
            Failure::Lib(e) => (e.op(), e.raw_os_error().unwrap_or(Errno::EIO.0), e.reason()),
            Failure::Refused { op, errno, reason } => (op, errno.0, reason),
            Failure::Viewed(n) => {
                return PyBufferError::new_err(format!(
                    "the region's memory is reached by {n} memoryview(s): release them \
                     (`with mr.view as v:`, or `del`) before an operation that takes \
                     the region away (an AsyncRing's, a run with a timeout, deregister)"
                ))
            }
        };
        match error_object(py, op, errno, reason) {
            Ok(obj) => PyErr::from_value(obj),
            Err(e) => e,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Lib(e)
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        Python::attach(|py| f.into_pyerr(py))
    }
}

/// The exception object (not raised) for a failure of `op`: a `KrcoreTimeout` for a
/// wait that ran out, else a `KrcoreError`.
pub fn error_object<'py>(
    py: Python<'py>,
    op: &str,
    errno: i32,
    reason: Option<Reason>,
) -> PyResult<Bound<'py, PyAny>> {
    let types = TYPES.get_or_try_init(py, || py.import("krcore._types").map(Bound::unbind))?;
    let class = if errno == Errno::ETIME.0 && reason.is_none() {
        "KrcoreTimeout"
    } else {
        "KrcoreError"
    };
    types.bind(py).getattr(class)?.call1((op, errno, reason.map(|r| r as u16)))
}

/// The `krcore._types` attribute `name` (a class the results are made of).
pub fn py_type<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let types = TYPES.get_or_try_init(py, || py.import("krcore._types").map(Bound::unbind))?;
    types.bind(py).getattr(name)
}
