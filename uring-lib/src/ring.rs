//! A krcore ring: the SQ and CQ mapped from `/dev/krcore`, the application's side of
//! abi's ring protocol, and the enter ioctl.

use krcore_abi::cqe::Cqe;
use krcore_abi::errno::Errno;
use krcore_abi::ioctl::{IOC_ENTER, IOC_ENTER_VALUE, IOC_REGISTER_EVENTFD, IOC_SETUP};
use krcore_abi::layout::{
    EnterArgs, EnterFlags, EventfdArgs, SetupFlags, SetupParams, SqFlags, OFF_CQ_RING, OFF_SQ_RING,
};
use krcore_abi::ring::{CqConsumer, RawRing, SqProducer};
use krcore_abi::sqe::{MrAccess, Sqe};
use std::collections::VecDeque;
use std::os::fd::AsRawFd;

use crate::mmap::Mmap;

use crate::{Batch, Device, Error, MemoryRegion, MrDescriptor, RemoteRegion, Vqp};

/// An export name as an SQE carries it; one the kernel would refuse is refused here, with
/// the kernel's reason.
fn name_words(name: &str) -> Result<[u64; 3], Error> {
    krcore_abi::meta::record::name(name)
        .map(|n| krcore_abi::meta::record::name_words(&n))
        .ok_or_else(|| Error::refused("export name", krcore_abi::cqe::Reason::BadName))
}

/// Sizes and options of a ring.
#[derive(Clone, Copy, Debug)]
pub struct Builder {
    params: SetupParams,
}

impl Builder {
    /// A ring with `sq_entries` submission entries (rounded up to a power of two) and,
    /// unless [`cq_entries`](Self::cq_entries) says otherwise, twice as many completions.
    pub fn new(sq_entries: u32) -> Builder {
        Builder {
            params: SetupParams {
                sq_entries,
                ..SetupParams::default()
            },
        }
    }

    /// A kernel thread polls the SQ: submitting needs no syscall while it runs; it sleeps
    /// after `idle_ms` without work and [`Ring::submit`] wakes it when needed.
    pub fn sqpoll(mut self, idle_ms: u32) -> Builder {
        self.params.flags |= SetupFlags::SQPOLL.bits();
        self.params.sq_idle_ms = idle_ms;
        self
    }

    /// Completion queue entries (rounded up; at least the SQ's).
    pub fn cq_entries(mut self, n: u32) -> Builder {
        self.params.cq_entries = n;
        self
    }

    /// Binds to the RDMA device of index `dev_index` (the device query's `dev_index`) and
    /// its `port` (0: the port the module serves) instead of the first device. What was
    /// bound is in the ring's [`params`](Ring::params) (`dev_index`, `port`).
    pub fn device(mut self, dev_index: u32, port: u32) -> Builder {
        self.params.flags |= SetupFlags::DEVICE.bits();
        self.params.dev_index = dev_index;
        self.params.port = port;
        self
    }

    /// The setup request this builder makes.
    pub(crate) fn params(&self) -> SetupParams {
        self.params
    }

    /// Sets the rings up on `dev` (once per open file) and maps them.
    pub fn build(self, dev: Device) -> Result<Ring, Error> {
        let mut p = self.params;
        // SAFETY: `p` is a SetupParams the kernel reads and writes back.
        unsafe { dev.ioctl_raw(IOC_SETUP, &mut p as *mut SetupParams as usize) }
            .map_err(|e| e.context("ring setup"))?;
        let fd = dev.as_raw_fd();
        let sq_map = Mmap::new(fd, p.sq_off.map_len as usize, OFF_SQ_RING)?;
        let cq_map = Mmap::new(fd, p.cq_off.map_len as usize, OFF_CQ_RING)?;
        Ok(Ring::over(dev, p, sq_map, cq_map))
    }
}

impl Ring {
    /// The ring laid out as `p` says in `sq_map` and `cq_map`.
    pub(crate) fn over(dev: Device, p: SetupParams, sq_map: Mmap, cq_map: Mmap) -> Ring {
        // SAFETY: the rings are laid out as `p` says; the maps are page-aligned, at
        // least map_len long, and outlive the views (field order in Ring).
        let (sq, cq) = unsafe {
            (
                RawRing::new(sq_map.as_ptr(), p.sq_entries),
                RawRing::new(cq_map.as_ptr(), p.cq_entries),
            )
        };
        let sqpoll = SetupFlags::from_bits_truncate(p.flags).contains(SetupFlags::SQPOLL);
        Ring {
            sq: SqProducer::new(sq),
            cq: CqConsumer::new(cq),
            params: p,
            sqpoll,
            enter_by_value: true,
            enters: 0,
            next_tag: 0,
            stash: VecDeque::new(),
            _sq_map: sq_map,
            _cq_map: cq_map,
            dev,
        }
    }
}

/// The queue was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushError;

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("submission queue is full")
    }
}

impl std::error::Error for PushError {}

/// A ring. Entries are pushed, [`submit`](Ring::submit)ted through the enter ioctl, and
/// their completions read back from [`completions`](Ring::completions).
pub struct Ring {
    // The views go before the maps they point into, the maps before the file.
    sq: SqProducer<RawRing<Sqe>>,
    cq: CqConsumer<RawRing<Cqe>>,
    params: SetupParams,
    sqpoll: bool,
    /// The module serves `IOC_ENTER_VALUE` (cleared if it answers `ENOTTY`: one built
    /// before it existed).
    enter_by_value: bool,
    enters: u64,
    /// Tags of the library's own entries (control operations, batches).
    next_tag: u64,
    /// Completions of raw entries met while waiting for the library's own.
    stash: VecDeque<Cqe>,
    _sq_map: Mmap,
    _cq_map: Mmap,
    dev: Device,
}

/// The ring's descriptor is its device file's (for `poll`, `fcntl`, an `AsyncFd`).
impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.dev.as_raw_fd()
    }
}

impl std::os::fd::AsFd for Ring {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.dev.as_fd()
    }
}

impl Ring {
    /// What the kernel granted at setup.
    pub fn params(&self) -> &SetupParams {
        &self.params
    }

    /// The device file.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Queues an entry for the next submit.
    ///
    /// # Safety
    /// Memory the entry names (through its MR) must stay registered and valid until the
    /// entry's completion is read.
    pub unsafe fn push(&mut self, sqe: &Sqe) -> Result<(), PushError> {
        self.sq.push(*sqe).map_err(|_| PushError)
    }

    /// Free SQ slots.
    pub fn sq_space(&mut self) -> u32 {
        self.sq.space()
    }

    /// The kernel's SQ flags (need-wakeup, CQ overflow, tail overrun).
    pub fn sq_flags(&self) -> SqFlags {
        self.sq.flags()
    }

    /// Publishes queued entries and has the kernel take them; returns how many it took
    /// (fewer than queued when credits or CQ room ran out: the rest stay queued). With
    /// [`Builder::sqpoll`] the polling thread takes them: no syscall unless it sleeps,
    /// and the count returned is how many were published.
    pub fn submit(&mut self) -> Result<u32, Error> {
        if self.sqpoll {
            self.sq.publish();
            let n = self.sq.unread();
            if self.sq.needs_wakeup() {
                self.enter(0, EnterFlags::SQ_WAKEUP)?;
            }
            return Ok(n);
        }
        self.enter(0, EnterFlags::empty())
    }

    /// As [`submit`](Self::submit), then waits until `want` completions are ready.
    pub fn submit_and_wait(&mut self, want: u32) -> Result<u32, Error> {
        self.sq.publish();
        let wake = if self.sqpoll && self.sq.needs_wakeup() {
            EnterFlags::SQ_WAKEUP
        } else {
            EnterFlags::empty()
        };
        let taken = self.retrying(want, EnterFlags::GETEVENTS | wake)?;
        // The kernel returns early when a signal or task work (io_uring's, for one) is
        // pending, as io_uring_enter does: enter again until `want` are visible.
        while (self.cq.ready() as usize + self.stash.len()) < want as usize {
            self.retrying(
                want - self.stash.len().min(want as usize) as u32,
                EnterFlags::GETEVENTS,
            )?;
        }
        Ok(taken)
    }

    /// Enters, retrying when interrupted before anything was taken (EINTR): returning to
    /// user space between tries runs the signal handler or task work that interrupted.
    fn retrying(&mut self, min_complete: u32, flags: EnterFlags) -> Result<u32, Error> {
        loop {
            match self.enter(min_complete, flags) {
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                r => return r,
            }
        }
    }

    /// Has the kernel signal `fd`, an eventfd(2), whenever the ring gains completions;
    /// `None` unregisters.
    pub fn register_eventfd(&mut self, fd: Option<std::os::fd::RawFd>) -> Result<(), Error> {
        let args = EventfdArgs {
            fd: fd.unwrap_or(-1),
            resv: [0; 3],
        };
        // SAFETY: `args` is an EventfdArgs the kernel only reads.
        unsafe {
            self.dev
                .ioctl_raw(IOC_REGISTER_EVENTFD, &args as *const EventfdArgs as usize)
        }
        .map_err(|e| e.context("register eventfd"))?;
        Ok(())
    }

    /// Runs one control entry tagged by the library and waits for its completion.
    fn control(&mut self, op: &'static str, mut sqe: Sqe) -> Result<Cqe, Error> {
        self.next_tag += 1;
        sqe.user_data = LIB_TAG | self.next_tag;
        let mut got = self.wait_tagged(op, &[sqe])?;
        let c = got.pop().expect("one completion");
        if c.res < 0 {
            return Err(Error::failed(op, &c));
        }
        Ok(c)
    }

    /// Pushes `sqes` (tagged), submits, and waits until each has completed; returns
    /// their completions in order. Completions of other entries are kept for
    /// [`completions`](Self::completions).
    fn wait_tagged(&mut self, op: &'static str, sqes: &[Sqe]) -> Result<Vec<Cqe>, Error> {
        let first = sqes.first().map_or(0, |s| s.user_data);
        let mut got: Vec<Option<Cqe>> = vec![None; sqes.len()];
        let (mut pushed, mut done) = (0, 0);
        while done < sqes.len() {
            while pushed < sqes.len() && self.sq.push(sqes[pushed]).is_ok() {
                pushed += 1;
            }
            self.submit_and_wait(1).map_err(|e| e.context(op))?;
            while let Some(c) = self.cq.pop() {
                let k = c.user_data.wrapping_sub(first) as usize;
                if c.user_data & LIB_TAG != 0 && k < got.len() && got[k].is_none() {
                    got[k] = Some(c);
                    done += 1;
                } else {
                    self.stash.push_back(c);
                }
            }
            self.cq.release();
        }
        Ok(got.into_iter().map(|c| c.expect("counted")).collect())
    }

    /// Connects to the peer at `gid` (its service), binding a virtual QP to a pooled
    /// kernel QP. The device's own GID reaches the loopback pool; another node's address
    /// (its IPv4-mapped GID, both modules loaded with `cm_port`) reaches a QP of this
    /// node's connection set to that node, made by the first such CONNECT (milliseconds;
    /// later ones bind in microseconds). `Unreachable` when the node does not answer.
    pub fn connect(&mut self, gid: [u8; 16], service: u32) -> Result<Vqp, Error> {
        let c = self.control("connect", Sqe::connect(0, gid, service))?;
        Ok(Vqp {
            handle: c.res as u32,
            qpn: c.aux as u32,
        })
    }

    /// Releases a virtual QP. Receives still posted on it make this fail (`EBUSY`).
    pub fn disconnect(&mut self, vqp: Vqp) -> Result<(), Error> {
        self.control("disconnect", Sqe::disconnect(0, vqp.handle))
            .map(|_| ())
    }

    /// Allocates `len` bytes (rounded up to 8), zeroed, and registers them with
    /// `access`: the pages are pinned, no copy is ever made.
    pub fn register(&mut self, len: usize, access: MrAccess) -> Result<MemoryRegion, Error> {
        let buf = MemoryRegion::alloc(len);
        let sqe = Sqe::reg_mr(0, buf.as_ptr() as u64, (buf.len() * 8) as u32, access);
        let c = self.control("register memory", sqe)?;
        Ok(MemoryRegion {
            buf,
            handle: c.res as u32,
            descriptor: c.aux,
            registered: true,
        })
    }

    /// Deregisters a region (waiting for sends that use it) and frees its buffer.
    pub fn deregister(&mut self, mut mr: MemoryRegion) -> Result<(), Error> {
        self.control("deregister memory", Sqe::dereg_mr(0, mr.handle))?;
        mr.registered = false;
        Ok(())
    }

    /// Imports the peer's exported memory `d` for `vqp` only. A descriptor that is not
    /// live (forged, or revoked by its owner) fails with `BadDescriptor`.
    pub fn import(&mut self, vqp: &Vqp, d: &MrDescriptor) -> Result<RemoteRegion, Error> {
        let c = self.control(
            "import memory",
            Sqe::import_mr(0, vqp.handle, d.addr, d.len, d.descriptor),
        )?;
        Ok(RemoteRegion {
            handle: c.res as u32,
            vqp: vqp.handle,
            addr: d.addr,
            len: d.len,
        })
    }

    /// Publishes `mr` (registered with remote access) under `name` in the MetaServer,
    /// so a ring on any node can import it by name. Revoked when `mr` is deregistered.
    /// A name already published fails with `NameTaken`; no MetaServer, `Unreachable`.
    pub fn publish(&mut self, mr: &MemoryRegion, name: &str) -> Result<(), Error> {
        let words = name_words(name)?;
        self.control("publish memory", Sqe::publish(0, mr.handle, words))
            .map(|_| ())
    }

    /// Imports the first `len` bytes of the export published as `name` for `vqp`,
    /// which must be connected to the exporting node (else `NotOnPeer`). The kernel
    /// resolves the name in the MetaServer (two one-sided READs, then cached) and
    /// checks that its node has not restarted since; no rkey passes through here.
    pub fn import_name(&mut self, vqp: &Vqp, name: &str, len: u32) -> Result<RemoteRegion, Error> {
        let words = name_words(name)?;
        let c = self.control(
            "import memory by name",
            Sqe::import_name(0, vqp.handle, words, len),
        )?;
        Ok(RemoteRegion {
            handle: c.res as u32,
            vqp: vqp.handle,
            addr: c.aux,
            len,
        })
    }

    /// Runs a batch: submits every operation and waits for all of them, then releases
    /// the regions it borrowed. Returns each operation's completion, in batch order;
    /// a failed one carries its errno and [`Reason`](krcore_abi::cqe::Reason).
    pub fn run(&mut self, batch: Batch<'_>) -> Result<Vec<Result<Cqe, Error>>, Error> {
        let base = LIB_TAG | (self.next_tag + 1);
        self.next_tag += batch.sqes.len() as u64;
        let sqes: Vec<Sqe> = batch
            .sqes
            .iter()
            .enumerate()
            .map(|(i, s)| Sqe {
                user_data: base + i as u64,
                ..*s
            })
            .collect();
        let got = self.wait_tagged("batch", &sqes)?;
        Ok(got
            .into_iter()
            .map(|c| {
                if c.res < 0 {
                    Err(Error::failed("batch operation", &c))
                } else {
                    Ok(c)
                }
            })
            .collect())
    }

    /// Makes pushed entries visible to the kernel side.
    #[cfg(feature = "bench-support")]
    pub(crate) fn publish_sq(&mut self) {
        self.sq.publish();
    }

    /// Enter ioctls this ring has made: its syscalls on the data path.
    pub fn enters(&self) -> u64 {
        self.enters
    }

    fn enter(&mut self, min_complete: u32, flags: EnterFlags) -> Result<u32, Error> {
        self.enter_with(min_complete, flags, true)
    }

    /// [`submit_and_wait`](Self::submit_and_wait) with the arguments copied in from
    /// memory (`IOC_ENTER`) instead of passed by value: what that copy costs.
    #[cfg(feature = "bench-support")]
    pub fn submit_and_wait_copying_args(&mut self, want: u32) -> Result<u32, Error> {
        self.enter_with(want, EnterFlags::GETEVENTS, false)
    }

    fn enter_with(
        &mut self,
        min_complete: u32,
        flags: EnterFlags,
        by_value: bool,
    ) -> Result<u32, Error> {
        self.enters += 1;
        self.sq.publish();
        let args = EnterArgs {
            to_submit: self.sq.unread(),
            min_complete,
            flags: flags.bits(),
            resv: [0; 5],
        };
        // By value when the arguments pack (always, for a ring this library sets up):
        // nothing for the kernel to copy in.
        if let Some(v) = args.pack().filter(|_| by_value && self.enter_by_value) {
            // SAFETY: IOC_ENTER_VALUE's argument is a value, not an address.
            match unsafe { self.dev.ioctl_raw(IOC_ENTER_VALUE, v as usize) } {
                Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => self.enter_by_value = false,
                r => return Ok(r.map_err(|e| e.context("enter"))? as u32),
            }
        }
        // SAFETY: `args` is an EnterArgs the kernel only reads.
        let n = unsafe {
            self.dev
                .ioctl_raw(IOC_ENTER, &args as *const EnterArgs as usize)
        }
        .map_err(|e| e.context("enter"))?;
        Ok(n as u32)
    }

    /// The completions of raw entries ready now; the slots go back to the kernel when
    /// the iterator drops.
    pub fn completions(&mut self) -> Completions<'_> {
        Completions {
            cq: &mut self.cq,
            stash: &mut self.stash,
        }
    }
}

/// The bit marking `user_data` of the library's own entries; raw entries keep it clear.
pub const LIB_TAG: u64 = 1 << 63;

/// Ready completions, oldest first.
pub struct Completions<'a> {
    cq: &'a mut CqConsumer<RawRing<Cqe>>,
    stash: &'a mut VecDeque<Cqe>,
}

impl Iterator for Completions<'_> {
    type Item = Cqe;
    fn next(&mut self) -> Option<Cqe> {
        self.stash.pop_front().or_else(|| self.cq.pop())
    }
}

impl Drop for Completions<'_> {
    fn drop(&mut self) {
        self.cq.release();
    }
}

/// What a failed completion says, for messages: the errno and the reason.
pub fn describe_failure(cqe: &Cqe) -> Option<String> {
    let reason = cqe.failure()?;
    let errno = std::io::Error::from_raw_os_error(-cqe.res);
    Some(format!(
        "{} ({}; errno {})",
        reason.describe(),
        errno,
        Errno(-cqe.res).0
    ))
}
