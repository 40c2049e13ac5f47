//! Buffers the NIC may still reach until the ring's file closes.
//!
//! A region's buffer is freed only once nothing can write it: after its DEREG_MR
//! completed, or after the file closed (the kernel releases every registration of a
//! file when it closes). A buffer whose deregistration could not be confirmed (a
//! failed DEREG_MR, a ring dropped while one was in flight) is *buried* here and freed
//! by the device right after its close.

use std::cell::UnsafeCell;
use std::sync::{Condvar, Mutex, PoisonError};

/// A region's buffer as the library allocates it (8-byte aligned).
pub(crate) type Buffer = Box<[UnsafeCell<u64>]>;

/// The device's buried buffers; `None` once its file has closed.
#[derive(Debug, Default)]
pub(crate) struct Grave {
    buried: Mutex<Option<Vec<Buffer>>>,
    closed: Condvar,
}

impl Grave {
    /// An open file's grave.
    pub(crate) fn new() -> Grave {
        Grave {
            buried: Mutex::new(Some(Vec::new())),
            closed: Condvar::new(),
        }
    }

    /// Keeps `buf` until the file has closed (frees it now if it has).
    pub(crate) fn bury(&self, buf: Buffer) {
        let mut b = self.buried.lock().unwrap_or_else(PoisonError::into_inner);
        match b.as_mut() {
            Some(v) => v.push(buf),
            None => drop(buf),
        }
    }

    /// Waits until the file has closed: for a lent region whose ring is going, whose
    /// loan may end only after. Only a ring being dropped gets here (nothing but the
    /// ring holds the device), and its drop closes the file.
    pub(crate) fn wait_closed(&self) {
        let b = self.buried.lock().unwrap_or_else(PoisonError::into_inner);
        let _closed = self
            .closed
            .wait_while(b, |b| b.is_some())
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// Runs `close` (the file's), then frees what was buried, under the grave's lock:
    /// a buffer buried meanwhile waits for the close to end.
    pub(crate) fn close(&self, close: impl FnOnce()) {
        let mut b = self.buried.lock().unwrap_or_else(PoisonError::into_inner);
        close();
        drop(b.take());
        self.closed.notify_all();
    }
}
