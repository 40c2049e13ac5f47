//! Batches from Python: operations collected as Python objects, run either where the
//! regions are (the blocking run borrows them, as Rust's `Batch` does) or with the
//! regions handed to the run (async and bounded runs, which park them in the ring if
//! they are given up on). Both build the library's `Batch` through [`Planned::add`].

use std::sync::Arc;

use krcore_uring::{Batch, BatchResult, Error, MemoryRegion, Registered, RemoteRegion, Vqp};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::errors::{error_object, py_type, Failure};
use crate::handles::{PyRemote, PyVqp};
use crate::region::{Held, PyRegion};

/// What an operation does.
#[derive(Clone, Copy)]
enum Kind {
    Read,
    Write,
    WriteImm(u32),
    Cas(u64, u64),
    Faa(u64),
    Send,
    SendImm(u32),
    Recv,
}

/// One operation as Python named it.
struct Op {
    kind: Kind,
    vqp: Py<PyVqp>,
    local: Py<PyRegion>,
    off: u64,
    /// One-sided operations' remote memory.
    remote: Option<Py<PyRemote>>,
    roff: u64,
    len: u32,
}

impl Op {
    /// A one-sided operation: `len` bytes between `local` at `off` and `remote` at
    /// `roff`.
    #[allow(clippy::too_many_arguments)]
    fn one_sided(
        kind: Kind,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        remote: Py<PyRemote>,
        roff: u64,
        len: u32,
    ) -> Op {
        Op { kind, vqp, local, off, remote: Some(remote), roff, len }
    }

    /// A two-sided operation on `len` bytes of `local` at `off`.
    fn two_sided(kind: Kind, vqp: Py<PyVqp>, local: Py<PyRegion>, off: u64, len: u32) -> Op {
        Op { kind, vqp, local, off, remote: None, roff: 0, len }
    }
}

/// An operation ready to add to the library's batch: its handles held, its region
/// named by index into the run's regions.
struct Planned {
    kind: Kind,
    vqp: Arc<Vqp>,
    region: usize,
    off: u64,
    remote: Option<Arc<RemoteRegion>>,
    roff: u64,
    len: u32,
}

impl Planned {
    /// Adds it to `b` over `local` (the library checks every range).
    fn add<'a>(&self, b: &mut Batch<'a>, local: &'a Registered<'_>) -> Result<(), Error> {
        let (v, off, n) = (&*self.vqp, self.off, self.len);
        let remote = self.remote.as_deref();
        let r = || remote.expect("one-sided operations name remote memory");
        match self.kind {
            Kind::Read => b.read(v, local, off, r(), self.roff, n),
            Kind::Write => b.write(v, local, off, r(), self.roff, n),
            Kind::WriteImm(imm) => b.write_imm(v, local, off, r(), self.roff, n, imm),
            Kind::Cas(cmp, swap) => b.cas(v, local, off, r(), self.roff, cmp, swap),
            Kind::Faa(add) => b.faa(v, local, off, r(), self.roff, add),
            Kind::Send => b.send(v, local, off, n, None),
            Kind::SendImm(imm) => b.send(v, local, off, n, Some(imm)),
            Kind::Recv => b.recv(v, local, off, n),
        }
        .map(|_| ())
    }
}

/// Operations to run together with `Ring.run` or `AsyncRing.run`, checked for range as
/// they are added. Each method returns the batch, so calls chain.
#[pyclass(name = "Batch", module = "krcore")]
#[derive(Default)]
pub struct PyBatch {
    ops: Vec<Op>,
}

impl PyBatch {
    /// Adds `op`, checked as the run will check it when its region is here now.
    fn push(mut slf: PyRefMut<'_, Self>, op: Op) -> PyResult<PyRefMut<'_, Self>> {
        let region = op.local.get();
        let held = region.read();
        if let Held::Here(mr) = &*held {
            let plan = plan_one(&op, 0)?;
            plan.add(&mut Batch::new(), mr).map_err(Failure::from)?;
        }
        drop(held);
        slf.ops.push(op);
        Ok(slf)
    }

    /// The regions the batch uses, each once, in the order locks are taken (by
    /// address), and each operation's plan naming its region by index there.
    fn plan(&self, py: Python<'_>) -> PyResult<(Vec<Py<PyRegion>>, Vec<Planned>)> {
        let mut regions: Vec<Py<PyRegion>> = self.ops.iter().map(|o| o.local.clone_ref(py)).collect();
        regions.sort_by_key(|r| r.as_ptr() as usize);
        regions.dedup_by_key(|r| r.as_ptr() as usize);
        let plan = self
            .ops
            .iter()
            .map(|o| {
                let at = regions.partition_point(|r| (r.as_ptr() as usize) < o.local.as_ptr() as usize);
                plan_one(o, at)
            })
            .collect::<PyResult<_>>()?;
        Ok((regions, plan))
    }
}

fn plan_one(o: &Op, region: usize) -> PyResult<Planned> {
    Ok(Planned {
        kind: o.kind,
        vqp: o.vqp.get().get()?,
        region,
        off: o.off,
        remote: o.remote.as_ref().map(|r| r.get().get()),
        roff: o.roff,
        len: o.len,
    })
}

#[pymethods]
impl PyBatch {
    #[new]
    fn new() -> PyBatch {
        PyBatch::default()
    }

    fn __len__(&self) -> usize {
        self.ops.len()
    }

    /// RDMA READ of `n` bytes at `roff` into `local` at `off`.
    fn read<'py>(
        slf: PyRefMut<'py, Self>,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        remote: Py<PyRemote>,
        roff: u64,
        n: u32,
    ) -> PyResult<PyRefMut<'py, Self>> {
        PyBatch::push(slf, Op::one_sided(Kind::Read, vqp, local, off, remote, roff, n))
    }

    /// RDMA WRITE of `n` bytes of `local` at `off` to `roff`; with `imm`, WRITE_IMM (it
    /// consumes the peer's oldest receive on its end).
    #[pyo3(signature = (vqp, local, off, remote, roff, n, imm=None))]
    #[allow(clippy::too_many_arguments)]
    fn write<'py>(
        slf: PyRefMut<'py, Self>,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        remote: Py<PyRemote>,
        roff: u64,
        n: u32,
        imm: Option<u32>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        let kind = imm.map_or(Kind::Write, Kind::WriteImm);
        PyBatch::push(slf, Op::one_sided(kind, vqp, local, off, remote, roff, n))
    }

    /// 8-byte compare-and-swap at `roff`; the old value lands at `off`.
    #[allow(clippy::too_many_arguments)]
    fn cas<'py>(
        slf: PyRefMut<'py, Self>,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        remote: Py<PyRemote>,
        roff: u64,
        compare: u64,
        swap: u64,
    ) -> PyResult<PyRefMut<'py, Self>> {
        let kind = Kind::Cas(compare, swap);
        PyBatch::push(slf, Op::one_sided(kind, vqp, local, off, remote, roff, 8))
    }

    /// 8-byte fetch-and-add at `roff`; the old value lands at `off`.
    fn faa<'py>(
        slf: PyRefMut<'py, Self>,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        remote: Py<PyRemote>,
        roff: u64,
        add: u64,
    ) -> PyResult<PyRefMut<'py, Self>> {
        PyBatch::push(slf, Op::one_sided(Kind::Faa(add), vqp, local, off, remote, roff, 8))
    }

    /// SEND of `n` bytes of `local` at `off`, with immediate data if given.
    #[pyo3(signature = (vqp, local, off, n, imm=None))]
    fn send<'py>(
        slf: PyRefMut<'py, Self>,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        n: u32,
        imm: Option<u32>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        let kind = imm.map_or(Kind::Send, Kind::SendImm);
        PyBatch::push(slf, Op::two_sided(kind, vqp, local, off, n))
    }

    /// RECV of up to `n` bytes into `local` at `off`: waits for the peer's SEND.
    fn recv<'py>(
        slf: PyRefMut<'py, Self>,
        vqp: Py<PyVqp>,
        local: Py<PyRegion>,
        off: u64,
        n: u32,
    ) -> PyResult<PyRefMut<'py, Self>> {
        PyBatch::push(slf, Op::two_sided(Kind::Recv, vqp, local, off, n))
    }
}

/// A batch to run where its regions are: blocking, with the GIL released.
pub struct InPlace {
    regions: Vec<Py<PyRegion>>,
    plan: Vec<Planned>,
}

impl InPlace {
    /// Plans `batch`.
    pub fn new(py: Python<'_>, batch: &PyBatch) -> PyResult<InPlace> {
        let (regions, plan) = batch.plan(py)?;
        Ok(InPlace { regions, plan })
    }

    /// Reads the regions (in address order), builds the library's batch over them and
    /// hands it to `run`; the regions stay read until `run` returns.
    pub fn run(
        &self,
        run: impl FnOnce(Batch<'_>) -> Result<Vec<Result<krcore_uring::Cqe, Error>>, Failure>,
    ) -> Result<Vec<Result<krcore_uring::Cqe, Error>>, Failure> {
        let guards: Vec<_> = self.regions.iter().map(|r| r.get().read()).collect();
        let here = guards.iter().map(|g| g.here()).collect::<Result<Vec<_>, _>>()?;
        let mut b = Batch::new();
        for p in &self.plan {
            p.add(&mut b, here[p.region])?;
        }
        run(b)
    }
}

/// A batch whose regions are handed to its run: taken from their objects at once (so
/// no view or other run can reach them meanwhile), given to the library when the run
/// starts, and settled when it ends: back here, or as given up when the library kept
/// them (a run given up on, or dropped unfinished). Dropped before the run started (a
/// closed ring, an awaitable never run), it puts them back.
pub struct Handed {
    homes: Vec<Py<PyRegion>>,
    /// The regions and how to build over them, until the run starts.
    waiting: Option<(Vec<MemoryRegion>, Build)>,
    settled: bool,
}

/// What a handed batch's run takes: its regions and how to build over them.
pub type Build = Box<dyn for<'r> FnOnce(&mut Batch<'r>, &'r [MemoryRegion]) -> Result<(), Error> + Send>;

impl Handed {
    /// Takes `batch`'s regions from their objects (every one, or none).
    pub fn take(py: Python<'_>, batch: &PyBatch) -> PyResult<Handed> {
        let (homes, plan) = batch.plan(py)?;
        let mut regions = Vec::with_capacity(homes.len());
        for h in &homes {
            match h.get().take() {
                Ok(r) => regions.push(r),
                Err(f) => {
                    for (h, r) in homes.iter().zip(regions) {
                        h.get().settle(Held::Here(r));
                    }
                    return Err(f.into_pyerr(py));
                }
            }
        }
        let build: Build = Box::new(move |b, r| plan.iter().try_for_each(|p| p.add(b, &r[p.region])));
        Ok(Handed { homes, waiting: Some((regions, build)), settled: false })
    }

    /// Takes one region (an operation that uses it across awaits, or ends it).
    pub fn one(region: &Py<PyRegion>, py: Python<'_>) -> PyResult<Handed> {
        let r = region.get().take().map_err(|f| f.into_pyerr(py))?;
        let build: Build = Box::new(|_, _| Ok(()));
        Ok(Handed { homes: vec![region.clone_ref(py)], waiting: Some((vec![r], build)), settled: false })
    }

    /// The run starts: the regions and the build, for the library.
    pub fn start(&mut self) -> (Vec<MemoryRegion>, Build) {
        self.waiting.take().expect("a handed batch starts once")
    }

    /// The run's end: the regions it gave back go home; none back means it kept them.
    pub fn settle(mut self, back: Vec<MemoryRegion>) {
        self.settled = true;
        if back.len() == self.homes.len() {
            for (h, r) in self.homes.iter().zip(back) {
                h.get().settle(Held::Here(r));
            }
        } else {
            for h in &self.homes {
                h.get().settle(Held::GivenUp);
            }
        }
    }

    /// The regions are gone for good (deregistered).
    pub fn released(mut self) {
        self.settled = true;
        for h in &self.homes {
            h.get().settle(Held::Released);
        }
    }
}

impl Drop for Handed {
    /// Never started: the regions go back. Started and unfinished (a cancelled
    /// coroutine's run, dropped on the worker): the library kept them.
    fn drop(&mut self) {
        if let Some((regions, _)) = self.waiting.take() {
            for (h, r) in self.homes.iter().zip(regions) {
                h.get().settle(Held::Here(r));
            }
        } else if !self.settled {
            for h in &self.homes {
                h.get().settle(Held::GivenUp);
            }
        }
    }
}

/// A run's results as Python gets them: each operation's `Completion` or the
/// `KrcoreError` it failed with (returned, not raised); a failure of the whole run
/// raises.
pub fn results(py: Python<'_>, got: BatchResult) -> PyResult<Bound<'_, PyList>> {
    let got = got.map_err(|e| Failure::from(e).into_pyerr(py))?;
    let completion = py_type(py, "Completion")?;
    let items = got
        .into_iter()
        .map(|r| match r {
            Ok(c) => completion.call1((c.res, c.aux)),
            Err(e) => error_object(py, e.op(), e.raw_os_error().unwrap_or(5), e.reason()),
        })
        .collect::<PyResult<Vec<_>>>()?;
    PyList::new(py, items)
}
