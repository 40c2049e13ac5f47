//! A krcore ring: the SQ and CQ mapped from `/dev/krcore`, the application's side of
//! abi's ring protocol, and the enter ioctl.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

use krcore_abi::cqe::Cqe;
use krcore_abi::errno::Errno;
use krcore_abi::ioctl::{IOC_REGISTER_EVENTFD, IOC_SETUP};
use krcore_abi::layout::{EventfdArgs, SetupFlags, SetupParams, SqFlags, OFF_CQ_RING, OFF_SQ_RING};
use krcore_abi::ring::RawRing;
use krcore_abi::sqe::{MrAccess, Sqe};

use crate::core::Core;
use crate::lock::{lock, CoreGuard, CoreLock, Shared};
use crate::mmap::Mmap;
use crate::ops::{self, Control};
use crate::{
    Accepted, Batch, Device, Error, Listener, MemoryRegion, MrDescriptor, Node, Registered,
    RemoteRegion, Vqp,
};

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
        let fd = dev.as_fd();
        let sq_map = Mmap::new(fd, p.sq_off.map_len as usize, OFF_SQ_RING)?;
        let cq_map = Mmap::new(fd, p.cq_off.map_len as usize, OFF_CQ_RING)?;
        Ok(Ring::over(dev, p, sq_map, cq_map))
    }
}

impl Ring {
    /// The ring laid out as `p` says in `sq_map` and `cq_map`.
    pub(crate) fn over(dev: Device, p: SetupParams, sq_map: Mmap, cq_map: Mmap) -> Ring {
        // SAFETY: the rings are laid out as `p` says; the maps are page-aligned, at
        // least map_len long, and outlive the views (field order in Core).
        let (sq, cq) = unsafe {
            (
                RawRing::new(sq_map.as_ptr(), p.sq_entries),
                RawRing::new(cq_map.as_ptr(), p.cq_entries),
            )
        };
        let sqpoll = SetupFlags::from_bits_truncate(p.flags).contains(SetupFlags::SQPOLL);
        let core = Core::new(sqpoll, (sq, sq_map), (cq, cq_map));
        Ring {
            core: Arc::new(CoreLock::new(core, dev)),
            params: p,
            pending: Vec::new(),
            ready: VecDeque::new(),
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
/// their completions read back from [`completions`](Ring::completions); or, through the
/// typed calls ([`connect`](Ring::connect), [`register`](Ring::register),
/// [`run`](Ring::run), ...), the library does that for you.
///
/// Blocking calls wait in the kernel, asleep. What may wait without a bound is a RECV
/// (until its message comes) and whatever waits for it; everything else ends by the
/// module's request deadline. Bound a raw wait with
/// [`submit_and_wait_timeout`](Ring::submit_and_wait_timeout); to give up on receives,
/// DISCONNECT their virtual QP (they complete `Cancelled`), or wait with a timeout in
/// the `AsyncRing` (feature `tokio`), which keeps the buffers of what it gave up on.
pub struct Ring {
    core: Shared,
    params: SetupParams,
    /// Raw entries pushed through a live [`Submission`], queued when it drops.
    pending: Vec<Sqe>,
    /// Raw completions taken from the ring, not yet read from [`Completions`].
    ready: VecDeque<Cqe>,
}

/// The ring's descriptor is its device file's (for `poll`, `fcntl`, an `AsyncFd`). It is
/// readable while the CQ holds completions. Raw completions that another call of the
/// library took from the CQ first (a region dropped on another thread, say) wait in
/// the ring for [`Ring::completions`]; that call then sends a NOP, whose completion
/// makes the descriptor readable again, so a reader asleep on it wakes.
impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.core.bell.dev.as_raw_fd()
    }
}

impl std::os::fd::AsFd for Ring {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.core.bell.dev.as_fd()
    }
}

impl Ring {
    /// The core, locked.
    fn core(&mut self) -> CoreGuard<'_> {
        lock(&self.core)
    }

    /// The shared core (the async ring's).
    #[cfg(any(test, feature = "tokio", feature = "bench-support"))]
    pub(crate) fn shared(&self) -> &Shared {
        &self.core
    }

    /// Runs a control operation and waits for it.
    fn control<T, F: FnOnce(&krcore_abi::cqe::Cqe, &crate::ops::RingRef) -> T>(
        &mut self,
        ctl: Control<T, F>,
    ) -> Result<T, Error> {
        ctl.check(&self.core)?;
        let c = self.core().control(ctl.op, ctl.sqe);
        match c {
            Ok(c) => ctl.finish(&c, &Arc::downgrade(&self.core)),
            Err(e) => Err(e),
        }
    }

    /// What the kernel granted at setup.
    pub fn params(&self) -> &SetupParams {
        &self.params
    }

    /// The device file.
    pub fn device(&self) -> &Device {
        &self.core.bell.dev
    }

    /// The SQ for several pushes (io-uring's `SubmissionQueue`): entries gather in
    /// the ring and go into the SQ together when it drops, so a batch costs one lock
    /// of the ring, not one per entry, and the lock is never held while the caller's
    /// code runs.
    pub fn submission(&mut self) -> Submission<'_> {
        let space = self.sq_space();
        Submission { ring: self, space }
    }

    /// Free SQ slots.
    pub fn sq_space(&mut self) -> u32 {
        self.core().sq_space()
    }

    /// The kernel's SQ flags (need-wakeup, CQ overflow, tail overrun).
    pub fn sq_flags(&self) -> SqFlags {
        lock(&self.core).sq_flags()
    }

    /// Publishes queued entries and has the kernel take them; returns how many it took
    /// (fewer than queued when credits or CQ room ran out, or an entry waits for
    /// another node while the module's workers make the connection or ask the
    /// MetaServer: the rest stay queued, for the next submission). With
    /// [`Builder::sqpoll`] the polling thread takes them: no syscall unless it sleeps,
    /// and the count returned is how many were published.
    pub fn submit(&mut self) -> Result<u32, Error> {
        self.core().submit()
    }

    /// As [`submit`](Self::submit), then waits until `want` completions are ready.
    /// Signals do not end the wait (it is entered again).
    pub fn submit_and_wait(&mut self, want: u32) -> Result<u32, Error> {
        let already = self.ready.len();
        self.core().submit_and_wait(want, already, 0)
    }

    /// As [`submit_and_wait`](Self::submit_and_wait), waiting at most `timeout` (to the
    /// microsecond): fails `ETIME` if fewer than `want` completions are ready by then
    /// (what was submitted stays submitted).
    pub fn submit_and_wait_timeout(&mut self, want: u32, timeout: Duration) -> Result<u32, Error> {
        let us = timeout.as_micros().clamp(1, u32::MAX as u128) as u32;
        let already = self.ready.len();
        self.core().submit_and_wait(want, already, us)
    }

    /// Has the kernel signal `fd`, an eventfd(2), whenever the ring gains completions
    /// (with or without anyone waiting in the kernel); `None` unregisters.
    pub fn register_eventfd(&mut self, fd: Option<std::os::fd::RawFd>) -> Result<(), Error> {
        let args = EventfdArgs {
            fd: fd.unwrap_or(-1),
            resv: [0; 3],
        };
        // SAFETY: `args` is an EventfdArgs the kernel only reads.
        unsafe {
            self.device()
                .ioctl_raw(IOC_REGISTER_EVENTFD, &args as *const EventfdArgs as usize)
        }
        .map_err(|e| e.context("register eventfd"))?;
        Ok(())
    }

    /// Connects to `node`'s `service`, binding a virtual QP to a pooled kernel QP.
    /// `node` is anything address-like ([`Node`](crate::Node)): an IP or socket
    /// address, a GID, or a host name (resolved here, blocking). This node's own
    /// address reaches the loopback pool; another node's (both modules loaded with
    /// `cm_port`) reaches a QP of this node's connection set to that node, made by the
    /// module's workers at the first such CONNECT (milliseconds; later ones bind in
    /// microseconds). `Unreachable` when the node does not answer.
    ///
    /// Two-sided messages go as on a TCP connection: the CONNECT takes an ephemeral
    /// port of this node ([`Vqp::port`]) and its other end is the one the ring that
    /// [`listen`](Self::listen)s on port `service` there accepts for it, whose SENDs
    /// reach this virtual QP's RECVs only; it returns once the listen took it. Any
    /// number of virtual QPs, of any processes, may connect to one service at once.
    /// With nobody listening within the request deadline, it fails `Refused`. Service 0
    /// is no endpoint: a virtual QP for one-sided requests and imports alone, at once.
    pub fn connect(&mut self, node: impl Into<Node>, service: u32) -> Result<Vqp, Error> {
        let gid = node.into().gid()?;
        self.control(ops::connect(Sqe::connect(0, gid, service)))
    }

    /// Connects to `node` (as [`connect`](Self::connect) names it) for two-sided
    /// messages that pair: this node's port `port` (held
    /// for this user: another user's CONNECT or LISTEN cannot take it) with the peer's
    /// port `peer_port`, whose end is the peer's `pair(.., peer_port, port)`. Neither
    /// side listens; `ServiceTaken` when the port is another user's or a listen's, or,
    /// across nodes, the four-tuple is in use; `NotPermitted` below 1024 without
    /// `CAP_NET_BIND_SERVICE`. On one node, one user's pairs on one four-tuple pair in
    /// order, as one user's `SO_REUSEPORT` sockets share a port: each takes the oldest
    /// end waiting for it (`pair(.., p, p)` twice makes the two ends of one link, a
    /// third and a fourth another).
    pub fn pair(&mut self, node: impl Into<Node>, port: u16, peer_port: u16) -> Result<Vqp, Error> {
        let gid = node.into().gid()?;
        self.control(ops::connect(Sqe::pair(0, gid, port, peer_port)))
    }

    /// Listens on `service`: every peer node whose virtual QP connects to this node for
    /// it becomes a virtual QP of this ring, taken with [`accept`](Self::accept). Fails
    /// `ServiceTaken` when another ring of this node listens on it, `TableFull` when
    /// this ring has as many listens as it may (4) or the node (32). Peers that
    /// connected before anyone listened are accepted too.
    pub fn listen(&mut self, service: u32) -> Result<Listener, Error> {
        let weak = Arc::downgrade(&self.core);
        let mut core = self.core();
        let mut sqe = Sqe::listen(0, service);
        let tag = core.tag(std::slice::from_mut(&mut sqe)).start;
        while !core.push(sqe) {
            core.turn("listen", 1, None)?;
        }
        let c = core.wait_next("listen", tag, 0)?;
        Listener::started(service, &c, weak)
    }

    /// The next peer that joined `listener`'s service, waiting for one without a
    /// bound. A peer this ring had no room for (1,024 virtual QPs) is an error,
    /// `TableFull`, and one past its client's quarter of them (`CLIENT_SHARE`: one
    /// user of this node, or one other node) `Quota`; the listen goes on. Once the
    /// listen has ended (its
    /// [`ended`](Listener::ended)), `ECANCELED`.
    pub fn accept(&mut self, listener: &mut Listener) -> Result<Accepted, Error> {
        self.accept_within(listener, 0)
    }

    /// As [`accept`](Self::accept), waiting at most `timeout`: `ETIME` if no peer
    /// joined by then.
    pub fn accept_timeout(
        &mut self,
        listener: &mut Listener,
        timeout: Duration,
    ) -> Result<Accepted, Error> {
        let us = timeout.as_micros().clamp(1, u32::MAX as u128) as u32;
        self.accept_within(listener, us)
    }

    fn accept_within(
        &mut self,
        listener: &mut Listener,
        timeout_us: u32,
    ) -> Result<Accepted, Error> {
        listener.check(&self.core)?;
        if listener.ended {
            return Err(Listener::over());
        }
        let c = self.core().wait_next("accept", listener.tag, timeout_us)?;
        listener.take(&c)
    }

    /// Ends a listen. Peers that joined and were not accepted yet are handed back
    /// (their virtual QPs are this ring's: use or disconnect them).
    pub fn unlisten(&mut self, mut listener: Listener) -> Result<Vec<Accepted>, Error> {
        listener.check(&self.core)?;
        if !listener.ended {
            self.control(ops::unlisten(listener.service))?;
        }
        Ok(listener.finish(&mut self.core()))
    }

    /// Releases a virtual QP. Receives still posted on it make this fail (`EBUSY`).
    pub fn disconnect(&mut self, vqp: Vqp) -> Result<(), Error> {
        self.control(ops::disconnect(vqp))
    }

    /// Allocates `len` bytes (rounded up to 8), zeroed, and registers them with
    /// `access`: the pages are pinned, no copy is ever made.
    pub fn register(&mut self, len: usize, access: MrAccess) -> Result<MemoryRegion, Error> {
        self.control(ops::register(len, access)?)
    }

    /// Registers memory the caller owns, lent for as long as the region lives: a
    /// slice of a `Vec`, a buffer inside a larger structure, a mapping (huge pages
    /// included). The pages are pinned, no copy is ever made; dropping the region
    /// deregisters it and ends the loan.
    ///
    /// Local rights only (`MrAccess::LOCAL_WRITE` or none): a remote right would let a
    /// peer reach the memory between this process's requests, and safe code can end
    /// the loan without deregistering (`std::mem::forget` of the region), after which a
    /// peer would write freed memory. Remote rights on lent memory take
    /// [`register_slice_remote`](Self::register_slice_remote) (unsafe) or
    /// [`register`](Self::register) (memory the region owns). Others fail `MrAccess`.
    ///
    /// The lender cannot touch the memory while the region lives:
    ///
    /// ```compile_fail,E0502
    /// # use krcore_uring::{MrAccess, Ring};
    /// # fn f(ring: &mut Ring) -> Result<(), krcore_uring::Error> {
    /// let mut mine = vec![0u8; 64];
    /// let region = ring.register_slice(&mut mine, MrAccess::LOCAL_WRITE)?;
    /// println!("{}", mine[0]); // the NIC may be writing it
    /// drop(region);
    /// # Ok(()) }
    /// ```
    pub fn register_slice<'b>(
        &mut self,
        buf: &'b mut [u8],
        access: MrAccess,
    ) -> Result<Registered<'b>, Error> {
        self.control(ops::register_slice(buf, access)?)
    }

    /// [`register_slice`](Self::register_slice) with any rights, remote ones included;
    /// also the way to register memory no Rust borrow describes (a device mapping,
    /// memory shared with another process, an arena), through
    /// [`std::slice::from_raw_parts_mut`].
    ///
    /// ```compile_fail,E0133
    /// # use krcore_uring::abi::sqe::MrAccess;
    /// # use krcore_uring::Ring;
    /// # fn f(ring: &mut Ring, buf: &mut [u8]) {
    /// // A remote right on lent memory is the caller's promise: no safe call.
    /// let r = ring.register_slice_remote(buf, MrAccess::REMOTE_WRITE);
    /// # }
    /// ```
    ///
    /// # Safety
    /// The region must be dropped (or [deregistered](Self::deregister)) before the loan
    /// of `buf` ends, never forgotten: until then peers given its descriptor may read
    /// or write the memory, whatever Rust's borrows say.
    pub unsafe fn register_slice_remote<'b>(
        &mut self,
        buf: &'b mut [u8],
        access: MrAccess,
    ) -> Result<Registered<'b>, Error> {
        // SAFETY: the caller's promise, passed on.
        self.control(unsafe { ops::register_slice_remote(buf, access)? })
    }

    /// Deregisters a region (waiting for sends that use it, and for nodes that
    /// imported it to let go) and ends it: a [`MemoryRegion`]'s buffer is freed, a
    /// [`Registered`] loan ends. Dropping a region does the same, with no error to see.
    pub fn deregister<'b>(&mut self, mut mr: impl AsMut<Registered<'b>>) -> Result<(), Error> {
        let r = mr.as_mut();
        if !r.live {
            return Ok(());
        }
        if !std::ptr::eq(r.ring.as_ptr(), Arc::as_ptr(&self.core)) {
            return Err(Error::errno(
                "deregister memory: another ring's region",
                Errno::EINVAL,
            ));
        }
        r.release()
    }

    /// Imports the peer's exported memory `d` for `vqp` only. A descriptor that is not
    /// live (forged, or revoked by its owner) fails with `BadDescriptor`.
    pub fn import(&mut self, vqp: &Vqp, d: &MrDescriptor) -> Result<RemoteRegion, Error> {
        self.control(ops::import(vqp, d))
    }

    /// Publishes `mr` (registered with remote access) under `name` in the MetaServer,
    /// so a ring on any node can import it by name, for this user alone (mode
    /// `0o600`; see [`publish_mode`](Self::publish_mode)). Revoked when `mr` is
    /// deregistered. A name already published fails with `NameTaken`; no MetaServer,
    /// `Unreachable`.
    pub fn publish(&mut self, mr: &Registered<'_>, name: &str) -> Result<(), Error> {
        self.publish_mode(mr, name, 0o600)
    }

    /// As [`publish`](Self::publish), granting `mode` as a file's mode does: read and
    /// write bits for this user (the name's owner), its group and others (`0o640`:
    /// the owner reads and writes, the group reads). An importer gets the MR's remote
    /// rights its class may have (atomics need read and write); one granted none fails
    /// `NotPermitted`. Bits beyond `0o666` fail `UnknownFlags`.
    pub fn publish_mode(
        &mut self,
        mr: &Registered<'_>,
        name: &str,
        mode: u16,
    ) -> Result<(), Error> {
        self.control(ops::publish(mr, name, mode)?)
    }

    /// Imports the first `len` bytes of the export published as `name` for `vqp`,
    /// which must be connected to the exporting node (else `NotOnPeer`). The kernel
    /// resolves the name in the MetaServer (one one-sided READ, then cached), whose
    /// records are always of their node's current incarnation (a node's registration
    /// revokes its earlier ones); no rkey passes through here. The
    /// region has the export's rights that the name's mode grants this user (none:
    /// `NotPermitted`). Only a name this user or root published is taken
    /// (`WrongOwner` otherwise, so that whoever publishes a name first serves nobody
    /// else's lookups); another user's, by naming that user
    /// ([`import_name_owned`](Self::import_name_owned)).
    pub fn import_name(&mut self, vqp: &Vqp, name: &str, len: u32) -> Result<RemoteRegion, Error> {
        self.control(ops::import_name(vqp, name, len, None)?)
    }

    /// The address of the node that exports `name`, when its mode grants this user a
    /// right (`NotPermitted` otherwise; `NoSuchName` when nobody published it): the
    /// kernel's MetaServer lookup, cached as IMPORT_NAME's is.
    pub fn resolve_name(&mut self, name: &str) -> Result<std::net::Ipv4Addr, Error> {
        self.control(ops::resolve_name(name)?)
    }

    /// Imports the first `len` bytes of `name` with no CONNECT first: the
    /// kernel finds its node ([`resolve_name`](Self::resolve_name)), a virtual QP is
    /// connected to it (service 0: one-sided requests only), and the name imported
    /// through it. First contact with the node makes its connection set
    /// (milliseconds), later ones bind to it (microseconds).
    pub fn connect_name(&mut self, name: &str, len: u32) -> Result<(Vqp, RemoteRegion), Error> {
        self.connect_named(name, len, None)
    }

    /// As [`connect_name`](Self::connect_name), only if user `uid` published the name
    /// (`WrongOwner` otherwise, as [`import_name_owned`](Self::import_name_owned)).
    pub fn connect_name_owned(
        &mut self,
        name: &str,
        len: u32,
        uid: u32,
    ) -> Result<(Vqp, RemoteRegion), Error> {
        self.connect_named(name, len, Some(uid))
    }

    fn connect_named(
        &mut self,
        name: &str,
        len: u32,
        owner: Option<u32>,
    ) -> Result<(Vqp, RemoteRegion), Error> {
        let node = self.resolve_name(name)?;
        let vqp = self.connect(node, 0)?;
        match self.control(ops::import_name(&vqp, name, len, owner)?) {
            Ok(r) => Ok((vqp, r)),
            Err(e) => {
                // Its own failure says why; the virtual QP is not the caller's to keep.
                let _ = self.disconnect(vqp);
                Err(e)
            }
        }
    }

    /// As [`import_name`](Self::import_name), only if user `uid` published the name
    /// (any user's, this one's included): a name someone else published first fails
    /// `WrongOwner` rather than hand over their memory.
    pub fn import_name_owned(
        &mut self,
        vqp: &Vqp,
        name: &str,
        len: u32,
        uid: u32,
    ) -> Result<RemoteRegion, Error> {
        self.control(ops::import_name(vqp, name, len, Some(uid))?)
    }

    /// Runs a batch: submits every operation and waits for all of them, then releases
    /// the regions it borrowed. Returns each operation's completion, in batch order;
    /// a failed one carries its errno and [`Reason`](krcore_abi::cqe::Reason).
    pub fn run(&mut self, batch: Batch<'_>) -> Result<Vec<Result<Cqe, Error>>, Error> {
        batch.check(&self.core)?;
        let mut sqes = batch.sqes;
        let mut core = self.core();
        core.tag(&mut sqes);
        let got = core.wait_tagged("batch", &sqes)?;
        Ok(got.into_iter().map(|c| batch_result(&c)).collect())
    }

    /// Runs a batch over `regions`, which it owns until it is done, waiting at most
    /// `timeout`: the async ring's `run` (feature `tokio`), blocking. `build` adds the
    /// operations, borrowing the regions as [`Batch`] does. With every completion in
    /// time: the completions, and the regions back. Else `ETIME` (or the submission's
    /// failure), and the regions stay *parked* in the ring, registered and allocated,
    /// until the batch's last completion, then are freed: an operation still in flight
    /// may write them, so none comes back. A RECV still posted takes the next message;
    /// DISCONNECT its virtual QP to cancel it.
    pub fn run_timeout<F>(
        &mut self,
        regions: Vec<MemoryRegion>,
        timeout: Duration,
        build: F,
    ) -> (BatchResult, Vec<MemoryRegion>)
    where
        F: for<'r> FnOnce(&mut Batch<'r>, &'r [MemoryRegion]) -> Result<(), Error>,
    {
        let mut sqes = {
            match Batch::entries_over(&self.core, &regions, build) {
                Ok(sqes) => sqes,
                Err(e) => return (Err(e), regions),
            }
        };
        let bound = std::time::Instant::now() + timeout;
        let mut core = self.core();
        let tags = core.tag(&mut sqes);
        let mut pushed = 0;
        loop {
            while pushed < sqes.len() && core.push(sqes[pushed]) {
                pushed += 1;
            }
            let turn = core.turn("batch", 1, Some(bound));
            if pushed == sqes.len() {
                if let Some(got) = core.take_finished(&tags) {
                    return (Ok(got.iter().map(batch_result).collect()), regions);
                }
            }
            if let Err(e) = turn {
                if pushed == 0 {
                    return (Err(e), regions);
                }
                // What was pushed may still run: its regions wait in the ring.
                core.park(tags.start..tags.start + pushed as u64, regions);
                return (Err(e), Vec::new());
            }
        }
    }

    /// Makes pushed entries visible to the kernel side.
    #[cfg(any(test, feature = "bench-support"))]
    pub(crate) fn publish_sq(&mut self) {
        self.core().publish();
    }

    /// Enter ioctls this ring has made: its syscalls on the data path.
    pub fn enters(&self) -> u64 {
        self.core
            .bell
            .enters
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`submit_and_wait`](Self::submit_and_wait) with the arguments copied in from
    /// memory (`IOC_ENTER`) instead of passed by value: what that copy costs.
    #[cfg(any(test, feature = "bench-support"))]
    pub fn submit_and_wait_copying_args(&mut self, want: u32) -> Result<u32, Error> {
        let already = self.ready.len();
        self.core().submit_and_wait_by(want, already, 0, false)
    }

    /// The completions of raw entries ready now, oldest first. Their CQ slots are
    /// already back with the kernel, and the ring is not locked while the iterator
    /// lives (a region may be dropped inside the loop); what it does not read is the
    /// next call's.
    pub fn completions(&mut self) -> Completions<'_> {
        {
            let mut core = lock(&self.core);
            core.reap();
            self.ready.extend(core.stash.drain(..));
            core.raw_looked();
        }
        Completions {
            ready: &mut self.ready,
        }
    }
}

/// A batch's completions, each `Ok` or its failure, in batch order.
pub type BatchResult = Result<Vec<Result<Cqe, Error>>, Error>;

/// A batch operation's completion as the caller sees it.
pub(crate) fn batch_result(c: &Cqe) -> Result<Cqe, Error> {
    if c.res < 0 {
        Err(Error::failed("batch operation", c))
    } else {
        Ok(*c)
    }
}

/// The SQ for pushing, from [`Ring::submission`]: what is pushed goes into the SQ when
/// it drops (then [`Ring::submit`] has the kernel take it).
pub struct Submission<'a> {
    ring: &'a mut Ring,
    /// Free SQ slots when it was made, less those pushed since.
    space: u32,
}

impl Submission<'_> {
    /// Queues an entry for the next submission; `PushError` when the SQ had no room
    /// left. Its `user_data` must leave [`LIB_TAG`](crate::LIB_TAG) clear (the
    /// library's own entries carry it).
    ///
    /// # Safety
    /// Memory the entry names (through its MR) must stay registered and valid until the
    /// entry's completion is read.
    pub unsafe fn push(&mut self, sqe: &Sqe) -> Result<(), PushError> {
        if self.space == 0 {
            return Err(PushError);
        }
        self.space -= 1;
        self.ring.pending.push(*sqe);
        Ok(())
    }

    /// Free SQ slots.
    pub fn space(&mut self) -> u32 {
        self.space
    }
}

impl Drop for Submission<'_> {
    fn drop(&mut self) {
        // Slots another thread took meanwhile (a region's deregistration) leave the
        // rest in the ring's backlog, which every enter empties into the SQ first.
        let mut core = lock(&self.ring.core);
        for s in self.ring.pending.drain(..) {
            core.queue(s);
        }
    }
}

/// Ready completions of raw entries, oldest first.
pub struct Completions<'a> {
    ready: &'a mut VecDeque<Cqe>,
}

impl Iterator for Completions<'_> {
    type Item = Cqe;
    fn next(&mut self) -> Option<Cqe> {
        self.ready.pop_front()
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
