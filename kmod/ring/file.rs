// SPDX-License-Identifier: GPL-2.0
//! The per-file context of `/dev/krcore` and the file operations the shim forwards.

use core::ffi::{c_int, c_long, c_uint, c_ulong, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use crate::kcompat;

use crate::abi::compat::OneOp;
use crate::abi::engine::Caller;
use crate::abi::device::{DeviceGid, QueryDevices, ABI_VERSION};
use crate::abi::errno::Errno;
use crate::abi::ioctl::{self, Command};
use crate::abi::layout::{EnterArgs, EnterFlags, EventfdArgs, SetupFlags, SetupParams};
use crate::abi::limits::Resource;
use crate::abi::sqe::Sqe;
use crate::engine::devctx::{Carried, DevCtx};
use crate::ring::ctx::RingCell;
use crate::device::{Registry, UserCharge};
use crate::ring::ctx::RingAreas;
use crate::shim::{self, MmStruct, Vma};
use crate::ring::sqpoll::Poller;

/// The address space of the process that set up a file's rings: the only one REG_MR
/// may pin from (the engine's `Caller::Owner`).
///
/// # Invariants
/// `0` is null or holds one `mmgrab` reference (so the identity is never reused while
/// held), dropped once.
struct OwnerMm(*mut MmStruct);

// SAFETY: only compared with `current->mm` and dropped; mm_struct references may be
// dropped from any context that may sleep.
unsafe impl Send for OwnerMm {}
// SAFETY: as above.
unsafe impl Sync for OwnerMm {}

impl OwnerMm {
    fn current() -> OwnerMm {
        // SAFETY: plain call; returns a grabbed reference or null.
        OwnerMm(unsafe { shim::krcore_shim_mm_grab_current() })
    }

    /// Who the calling thread is to the ring.
    fn caller(&self) -> Caller {
        // SAFETY: compares pointers only; the reference keeps the identity unique.
        if unsafe { shim::krcore_shim_mm_is_current(self.0) } {
            Caller::Owner
        } else {
            Caller::Other
        }
    }
}

impl Drop for OwnerMm {
    fn drop(&mut self) {
        // SAFETY: one reference held (invariant), dropped once.
        unsafe { shim::krcore_shim_mm_drop(self.0) };
    }
}

/// Which device and ring a file's rings are, their areas, their owner, and their
/// polling thread.
struct Binding {
    dev: Arc<DevCtx>,
    ring: Arc<RingCell>,
    areas: RingAreas,
    owner: OwnerMm,
    poller: Option<Poller>,
    /// The polling thread charged to the user who set it up; returned when the binding
    /// goes (the ring's own charge is the ring's, returned when it is freed: its shares
    /// are counted under the user's slot until then).
    _poller_charge: Option<UserCharge>,
}

/// State of one open file: where its rings are, once set up.
///
/// The binding is written once, by setup, and read by every ioctl on the data path, so
/// it is published through an atomic pointer (release on setup, acquire on use) instead
/// of behind a lock: an enter costs no lock and no reference count beyond the device's.
/// Only setups serialize, on `setup_lock`, which is never held while the device's lock
/// is taken.
#[pin_data]
pub(crate) struct FileCtx {
    #[pin]
    setup_lock: Mutex<()>,
    /// Null until setup; then a `KBox<Binding>` owned by this context, freed in release.
    binding: AtomicPtr<Binding>,
}

impl FileCtx {
    fn ioctl(&self, cmd: u32, arg: usize) -> Result<c_long> {
        match ioctl::decode(cmd)? {
            Command::QueryDevices => query_devices(arg),
            Command::Setup => self.setup(arg),
            Command::RegisterEventfd => {
                let args: EventfdArgs = kcompat::user_slice(arg, size_of::<EventfdArgs>())
                    .reader()
                    .read()?;
                args.validate()?;
                let b = self.bound()?;
                b.dev.set_eventfd(&b.ring, args.fd).map(|()| 0)
            }
            Command::One | Command::Direct => {
                // SAFETY: reads a module parameter.
                if cmd == ioctl::IOC_DIRECT && !unsafe { shim::krcore_shim_bench_direct_enabled() } {
                    return Err(EPERM);
                }
                let (mut reader, mut writer) =
                    kcompat::user_slice(arg, size_of::<OneOp>()).reader_writer();
                let mut op: OneOp = reader.read()?;
                let b = self.bound()?;
                if cmd == ioctl::IOC_DIRECT {
                    b.dev.direct(&b.ring, &mut op)?;
                } else {
                    b.dev.one(&b.ring, &mut op, b.owner.caller())?;
                }
                writer.write(&op)?;
                Ok(0)
            }
            Command::Enter => {
                let args: EnterArgs = kcompat::user_slice(arg, size_of::<EnterArgs>())
                    .reader()
                    .read()?;
                self.enter(&args)
            }
            Command::EnterValue => self.enter(&EnterArgs::unpack(arg as u64)),
        }
    }

    /// IOC_ENTER and IOC_ENTER_VALUE.
    fn enter(&self, args: &EnterArgs) -> Result<c_long> {
        let b = self.bound()?;
        if EnterFlags::from_bits_truncate(args.flags).contains(EnterFlags::SQ_WAKEUP) {
            if let Some(p) = &b.poller {
                p.wake();
            }
        }
        b.dev.enter(&b.ring, args, b.owner.caller())
    }

    /// The binding; `ENXIO` before setup.
    /// This file's ring as its fdinfo shows it: `krcore-` lines, its counters in abi's
    /// text form (`stats::Counters::write`).
    pub(crate) fn fdinfo(&self, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        let Ok(b) = self.bound() else {
            return writeln!(w, "krcore-ring none");
        };
        writeln!(w, "krcore-ring {}", b.ring.index)?;
        writeln!(w, "krcore-sqpoll {}", b.poller.is_some() as u8)?;
        let mut ctx = b.ring.ctx.lock();
        writeln!(w, "krcore-eventfd {}", ctx.has_eventfd() as u8)?;
        let e = ctx.engine();
        writeln!(w, "krcore-vqps {}", e.tables.vqps.len())?;
        writeln!(w, "krcore-mrs {}", e.tables.mrs.len())?;
        e.stats().write("krcore-", w)
    }

    fn bound(&self) -> Result<&Binding> {
        let b = self.binding.load(Ordering::Acquire);
        // SAFETY: non-null only once setup stored a fully built binding (release, paired
        // with the acquire above); it lives until release, which runs after every other
        // file operation has returned, so it outlives `&self`'s use here.
        unsafe { b.as_ref() }.ok_or(Errno::ENXIO.into())
    }

    /// `IOC_SETUP`: once per file; binds the rings to the RDMA device the parameters name
    /// (`SetupFlags::DEVICE`), or the first.
    fn setup(&self, arg: usize) -> Result<c_long> {
        let (mut reader, mut writer) =
            kcompat::user_slice(arg, size_of::<SetupParams>()).reader_writer();
        let mut p: SetupParams = reader.read()?;
        let _setup = self.setup_lock.lock();
        if !self.binding.load(Ordering::Relaxed).is_null() {
            return Err(EBUSY);
        }
        let registry = Registry::get();
        let sqpoll = SetupFlags::from_bits(p.flags).is_some_and(|f| f.contains(SetupFlags::SQPOLL));
        let ring_charge = registry.charge(Resource::Ring)?;
        let poller_charge = sqpoll.then(|| registry.charge(Resource::Poller)).transpose()?;
        let named = SetupFlags::from_bits(p.flags).is_some_and(|f| f.contains(SetupFlags::DEVICE));
        let (dev, dev_index, port) = registry.choose(named.then_some(p.dev_index), p.port)?;
        let (ring, areas) = dev.attach(&mut p, ring_charge)?;
        (p.dev_index, p.port) = (dev_index, port);
        let poller = if sqpoll {
            match Poller::start(dev.clone(), ring.clone(), p.sq_idle_ms) {
                Ok(p) => Some(p),
                Err(e) => {
                    dev.detach(&ring);
                    return Err(e);
                }
            }
        } else {
            None
        };
        let written = writer.write(&p);
        let binding = written.and_then(|()| {
            Ok(KBox::new(
                Binding {
                    dev: dev.clone(),
                    ring: ring.clone(),
                    areas,
                    owner: OwnerMm::current(),
                    poller,
                    _poller_charge: poller_charge,
                },
                GFP_KERNEL_ACCOUNT,
            )?)
        });
        match binding {
            Ok(b) => {
                self.binding.store(KBox::into_raw(b), Ordering::Release);
                Ok(0)
            }
            Err(e) => {
                // The poller (if any) was moved into the failed closure and is stopped.
                dev.detach(&ring);
                Err(e)
            }
        }
    }
}

/// `IOC_QUERY_DEVICES`: read the argument, collect up to `capacity` rows under the
/// registry lock, write them and the argument back after releasing it.
fn query_devices(arg: usize) -> Result<c_long> {
    let (mut reader, mut writer) = kcompat::user_slice(arg, size_of::<QueryDevices>()).reader_writer();
    let mut q: QueryDevices = reader.read()?;
    q.validate()?;
    let cap = q.capacity as usize;
    let mut collected = KVec::new();
    let mut total = 0u32;
    Registry::get().for_each_row(|row| {
        if collected.len() < cap {
            collected.push(*row, GFP_KERNEL)?;
        }
        total += 1;
        Ok(())
    })?;
    let mut rows = kcompat::user_slice(q.rows as usize, cap * size_of::<DeviceGid>()).writer();
    for row in collected.iter() {
        rows.write(row)?;
    }
    let written = collected.len() as u32;
    q.abi_version = ABI_VERSION;
    q.n_total = total;
    q.n_written = written;
    writer.write(&q)?;
    Ok(0)
}

/// open(2): allocate the file's context.
#[no_mangle]
extern "C" fn krcore_rs_open(out: *mut *mut c_void) -> c_int {
    let init = pin_init!(FileCtx {
        setup_lock <- new_mutex!((), "krcore_file"),
        binding: AtomicPtr::new(core::ptr::null_mut()),
    });
    match KBox::pin_init(init, GFP_KERNEL_ACCOUNT) {
        Ok(ctx) => {
            // SAFETY: the context stays pinned: it is only ever used through this pointer
            // and freed in place by `krcore_rs_release`. `out` points at a local of the
            // shim's open handler.
            unsafe { *out = KBox::into_raw(Pin::into_inner_unchecked(ctx)).cast() };
            0
        }
        Err(_) => ENOMEM.to_errno(),
    }
}

/// Last close: detach the rings (they are freed once nothing of theirs is in flight)
/// and free the file's context.
#[no_mangle]
extern "C" fn krcore_rs_release(ctx: *mut c_void) {
    // SAFETY: `ctx` came from `KBox::into_raw` in `krcore_rs_open`, and release runs
    // once, after every other file operation on this file has returned (mappings hold
    // the file, so none is left either).
    let ctx = unsafe { KBox::from_raw(ctx.cast::<FileCtx>()) };
    let b = ctx.binding.swap(core::ptr::null_mut(), Ordering::Acquire);
    if !b.is_null() {
        // SAFETY: stored by setup from `KBox::into_raw`, taken back once here.
        let Binding {
            dev,
            ring,
            poller,
            _poller_charge,
            ..
        } = KBox::into_inner(unsafe { KBox::from_raw(b) });
        // The polling thread stops first (it takes the ring's lock itself).
        drop(poller);
        dev.detach(&ring);
        drop(_poller_charge);
    }
}

/// The `cmd_op` shim.c's `krcore_fop_uring_cmd` takes: abi's, so C cannot drift from it.
#[no_mangle]
static krcore_rs_uring_cmd_entry: u32 = crate::abi::engine::URING_CMD_ENTRY;

/// An `IORING_OP_URING_CMD` carrying a krcore entry (shim.c's `krcore_fop_uring_cmd`,
/// abi's engine/uring.rs): 1 with the result in `res` and `extra`, 0 when the command
/// completes later, or a negative errno (`ENXIO` before setup).
#[no_mangle]
extern "C" fn krcore_rs_uring_cmd(
    ctx: *mut c_void,
    cmd: *mut c_void,
    entry: *const u8,
    nonblock: bool,
    res: *mut i32,
    extra: *mut u64,
) -> c_int {
    // SAFETY: `ctx` is the live context of an open file (see `krcore_rs_release`).
    let ctx = unsafe { &*ctx.cast::<FileCtx>() };
    // SAFETY: `entry` is the shim's 64-byte copy of the command area, and an `Sqe` is
    // plain integers (any bits are a value; validation judges them).
    let sqe = unsafe { core::ptr::read_unaligned(entry.cast::<Sqe>()) };
    let carried = ctx.bound().and_then(|b| {
        b.dev
            .uring_one(&b.ring, &sqe, cmd as u64, nonblock, b.owner.caller())
    });
    match carried {
        Ok(Carried::Now(r, e)) => {
            // SAFETY: the shim's locals, valid for writes.
            unsafe {
                *res = r;
                *extra = e;
            }
            1
        }
        Ok(Carried::Later) => 0,
        Err(e) => e.to_errno(),
    }
}

/// io_uring takes command `cmd` back (its task exits or execs; shim.c's
/// `krcore_fop_uring_cmd` under `IO_URING_F_CANCEL`): 1 with the result to complete it
/// with now in `res` and `extra`, 0 when its completion is on its way already.
#[no_mangle]
extern "C" fn krcore_rs_uring_cancel(
    ctx: *mut c_void,
    cmd: *mut c_void,
    res: *mut i32,
    extra: *mut u64,
) -> c_int {
    // SAFETY: `ctx` is the live context of an open file (io_uring holds the file).
    let ctx = unsafe { &*ctx.cast::<FileCtx>() };
    let Ok(b) = ctx.bound() else {
        // Never bound, so it never took a command.
        return 0;
    };
    let cqe = {
        let mut rc = b.ring.ctx.lock();
        // What completed already gives its own result, not `Cancelled` (taken in, and
        // kept from the hand-back below).
        b.ring.take_in(&mut rc);
        let cqe = rc.engine().cancel(cmd as u64);
        // Others' completions the mail brought go to their commands, or wake the ring.
        let _ = rc.hand_back(0);
        rc.notify(b.dev.sleepers.load(Ordering::Acquire) > 0);
        cqe
    };
    let Some(cqe) = cqe else {
        return 0;
    };
    let (r, e) = crate::abi::engine::uring_result(&cqe);
    // SAFETY: the shim's locals, valid for writes.
    unsafe {
        *res = r;
        *extra = e;
    }
    1
}

/// ioctl(2).
#[no_mangle]
extern "C" fn krcore_rs_ioctl(ctx: *mut c_void, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `ctx` is the live context of an open file (see `krcore_rs_release`).
    let ctx = unsafe { &*ctx.cast::<FileCtx>() };
    match ctx.ioctl(cmd, arg as usize) {
        Ok(v) => v,
        Err(e) => e.to_errno() as c_long,
    }
}

/// poll(2) of a ring's file: 1 while completions are ready, 0 while none; `ENXIO`
/// before setup, `ENODEV` once its device went.
#[no_mangle]
extern "C" fn krcore_rs_poll(ctx: *mut c_void, file: *mut shim::FileC, pt: *mut shim::PollTable) -> c_int {
    // SAFETY: `ctx` is the live context of an open file (see `krcore_rs_release`).
    let ctx = unsafe { &*ctx.cast::<FileCtx>() };
    let Ok(b) = ctx.bound() else {
        return -(Errno::ENXIO.0 as c_int);
    };
    let (ready, first) = {
        let mut ring = b.ring.ctx.lock();
        // What was routed to the ring and not taken in yet counts as ready.
        b.ring.absorb_mail(&mut ring);
        ring.poll(file, pt)
    };
    if first {
        // From now on the CQ stays armed for it, as for an eventfd: completions are
        // routed (and the queue woken) with nobody waiting in the kernel.
        b.dev.listen_polled();
    }
    // The device went: a hang-up, so an event loop stops waiting on the ring (the
    // removal wakes its queue).
    if b.dev.dead.load(Ordering::Acquire) {
        return -(Errno::ENODEV.0 as c_int);
    }
    ready as c_int
}

/// mmap(2) of a ring at its documented offset; `ENXIO` before setup.
#[no_mangle]
extern "C" fn krcore_rs_mmap(
    ctx: *mut c_void,
    vma: *mut Vma,
    pgoff: c_ulong,
    len: c_ulong,
) -> c_int {
    // SAFETY: `ctx` is the live context of an open file (see `krcore_rs_release`).
    let ctx = unsafe { &*ctx.cast::<FileCtx>() };
    match ctx
        .bound()
        .and_then(|b| b.areas.mmap(vma, pgoff as usize, len as usize))
    {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
