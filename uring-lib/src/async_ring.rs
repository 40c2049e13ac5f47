//! A ring for async code (feature `tokio`); see [`AsyncRing`].

use std::future::poll_fn;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use krcore_abi::cqe::Cqe;
use krcore_abi::sqe::{MrAccess, Sqe};
use krcore_abi::waiter::WAIT_SLICE_US;
use tokio::io::unix::AsyncFd;

use std::ops::Range;

use crate::core::Core;
use crate::lock::{lock, Shared};
use crate::ops::{self, Control};
use crate::ring::{batch_result, BatchResult};
use crate::{
    Accepted, Batch, Error, Listener, MemoryRegion, MrDescriptor, Node, Registered, RemoteRegion,
    Ring, Vqp,
};

/// A [`Ring`] driven from async code. Its methods take `&self`: any number of futures
/// may be in flight on it at once, from any task.
///
/// The kernel signals the eventfd whenever the ring gains completions, with nobody
/// waiting in the kernel (a ring with an eventfd keeps its device's CQ armed), so a
/// future that waits costs no thread and no syscall: it is polled again when the
/// eventfd becomes readable, or when another future reaped its completions for it.
/// Every [`WAIT_SLICE_US`](krcore_abi::waiter::WAIT_SLICE_US) a waiting future enters
/// the kernel once without waiting, as a blocking waiter steps, so deadlines advance
/// even where no completion comes.
///
/// # Cancellation
/// Dropping a future is safe at any point. Its batch owns its regions (they are moved
/// in and handed back with the result); a batch dropped before its last completion is
/// *parked* in the ring with its regions, registered and allocated, until the NIC is
/// done with them, and they are deregistered and freed then. The operations themselves
/// are not undone: a WRITE may still land, a RECV may still consume a message. To give
/// up on receives, DISCONNECT their virtual QP.
pub struct AsyncRing {
    ring: Ring,
    eventfd: AsyncFd<OwnedFd>,
}

impl AsyncRing {
    /// Drives `ring` from the current tokio runtime (which needs its I/O driver): makes
    /// an eventfd and registers it with the ring.
    pub fn new(mut ring: Ring) -> Result<AsyncRing, Error> {
        let flags = rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC;
        let fd = rustix::event::eventfd(0, flags).map_err(|e| {
            Error::io(
                "eventfd",
                std::io::Error::from_raw_os_error(e.raw_os_error()),
            )
        })?;
        ring.register_eventfd(Some(fd.as_raw_fd()))?;
        // SAFETY: the OwnedFd is a valid descriptor, owned by the AsyncFd from here and
        // neither replaced nor closed while registered.
        let eventfd =
            unsafe { AsyncFd::register(fd) }.map_err(|e| Error::io("watch eventfd", e.into()))?;
        Ok(AsyncRing { ring, eventfd })
    }

    /// The blocking ring underneath (for raw entries, or a call no future needs).
    pub fn ring(&mut self) -> &mut Ring {
        &mut self.ring
    }

    fn shared(&self) -> &Shared {
        self.ring.shared()
    }

    /// Enter ioctls the ring has made, futures' included.
    pub fn enters(&self) -> u64 {
        self.ring.enters()
    }

    /// Runs a control operation.
    async fn control<T, F: FnOnce(&Cqe, &crate::ops::RingRef) -> T>(
        &self,
        ctl: Control<T, F>,
    ) -> Result<T, Error> {
        ctl.check(self.shared())?;
        let (got, _) = self.complete(ctl.op, vec![ctl.sqe], Vec::new()).await;
        ctl.finish(&got?[0], &Arc::downgrade(self.shared()))
    }

    /// As [`Ring::connect`]; a host name is resolved through tokio. A first contact
    /// with a node (milliseconds) is made by the module's own worker while the entry
    /// waits in the SQ: the future holds no thread meanwhile and submits it again
    /// within a wait slice of the worker's end; warm connects take microseconds.
    pub async fn connect(&self, node: impl Into<Node>, service: u32) -> Result<Vqp, Error> {
        let gid = node.into().gid_async().await?;
        self.control(ops::connect(Sqe::connect(0, gid, service)))
            .await
    }

    /// As [`Ring::pair`]; a host name is resolved through tokio.
    pub async fn pair(
        &self,
        node: impl Into<Node>,
        port: u16,
        peer_port: u16,
    ) -> Result<Vqp, Error> {
        let gid = node.into().gid_async().await?;
        self.control(ops::connect(Sqe::pair(0, gid, port, peer_port)))
            .await
    }

    /// As [`Ring::disconnect`]: receives still posted on it come back `Cancelled`
    /// first, across nodes once the peer's kernel confirmed.
    pub async fn disconnect(&self, vqp: Vqp) -> Result<(), Error> {
        self.control(ops::disconnect(vqp)).await
    }

    /// As [`Ring::register`] (the pages are pinned while the entry is submitted).
    pub async fn register(&self, len: usize, access: MrAccess) -> Result<MemoryRegion, Error> {
        self.control(ops::register(len, access)?).await
    }

    /// As [`Ring::import`].
    pub async fn import(&self, vqp: &Vqp, d: &MrDescriptor) -> Result<RemoteRegion, Error> {
        self.control(ops::import(vqp, d)).await
    }

    /// As [`Ring::publish`].
    pub async fn publish(&self, mr: &Registered<'_>, name: &str) -> Result<(), Error> {
        self.publish_mode(mr, name, 0o600).await
    }

    /// As [`Ring::publish_mode`].
    pub async fn publish_mode(
        &self,
        mr: &Registered<'_>,
        name: &str,
        mode: u16,
    ) -> Result<(), Error> {
        self.control(ops::publish(mr, name, mode)?).await
    }

    /// As [`Ring::import_name`].
    pub async fn import_name(
        &self,
        vqp: &Vqp,
        name: &str,
        len: u32,
    ) -> Result<RemoteRegion, Error> {
        self.control(ops::import_name(vqp, name, len, None)?).await
    }

    /// As [`Ring::resolve_name`].
    pub async fn resolve_name(&self, name: &str) -> Result<std::net::Ipv4Addr, Error> {
        self.control(ops::resolve_name(name)?).await
    }

    /// As [`Ring::connect_name`].
    pub async fn connect_name(&self, name: &str, len: u32) -> Result<(Vqp, RemoteRegion), Error> {
        self.connect_named(name, len, None).await
    }

    /// As [`Ring::connect_name_owned`].
    pub async fn connect_name_owned(
        &self,
        name: &str,
        len: u32,
        uid: u32,
    ) -> Result<(Vqp, RemoteRegion), Error> {
        self.connect_named(name, len, Some(uid)).await
    }

    async fn connect_named(
        &self,
        name: &str,
        len: u32,
        owner: Option<u32>,
    ) -> Result<(Vqp, RemoteRegion), Error> {
        let node = self.resolve_name(name).await?;
        let vqp = self.connect(node, 0).await?;
        match self
            .control(ops::import_name(&vqp, name, len, owner)?)
            .await
        {
            Ok(r) => Ok((vqp, r)),
            Err(e) => {
                let _ = self.disconnect(vqp).await;
                Err(e)
            }
        }
    }

    /// As [`Ring::import_name_owned`].
    pub async fn import_name_owned(
        &self,
        vqp: &Vqp,
        name: &str,
        len: u32,
        uid: u32,
    ) -> Result<RemoteRegion, Error> {
        self.control(ops::import_name(vqp, name, len, Some(uid))?)
            .await
    }

    /// Runs a batch over `regions`, which it owns until it is done: `build` adds the
    /// operations, borrowing the regions as [`Batch`] does. Hands the regions back with
    /// the completions (or, when the submission itself failed after some entries were
    /// queued, keeps them until those are done). Cancel-safe: see [`AsyncRing`].
    ///
    /// ```no_run
    /// # async fn f(ring: &krcore_uring::AsyncRing, vqp: &krcore_uring::Vqp,
    /// #     remote: &krcore_uring::RemoteRegion, buf: krcore_uring::MemoryRegion)
    /// #     -> Result<(), krcore_uring::Error> {
    /// let (done, mut regions) = ring
    ///     .run(vec![buf], |b, r| b.read(vqp, &r[0], 0, remote, 0, 64).map(|_| ()))
    ///     .await;
    /// done?[0].as_ref().map_err(|e| e.to_string()).unwrap();
    /// println!("{:?}", &regions[0].bytes()[..8]);
    /// # Ok(()) }
    /// ```
    pub async fn run<F>(
        &self,
        regions: Vec<MemoryRegion>,
        build: F,
    ) -> (BatchResult, Vec<MemoryRegion>)
    where
        F: for<'r> FnOnce(&mut Batch<'r>, &'r [MemoryRegion]) -> Result<(), Error>,
    {
        let sqes = {
            match Batch::entries_over(self.shared(), &regions, build) {
                Ok(sqes) => sqes,
                Err(e) => return (Err(e), regions),
            }
        };
        let (got, regions) = self.complete("batch", sqes, regions).await;
        (got.map(|cs| cs.iter().map(batch_result).collect()), regions)
    }

    /// Tags, pushes and submits `sqes` and waits for every completion, owning
    /// `regions` until then (parking them in the ring if dropped first).
    async fn complete(
        &self,
        op: &'static str,
        mut sqes: Vec<Sqe>,
        regions: Vec<MemoryRegion>,
    ) -> (Result<Vec<Cqe>, Error>, Vec<MemoryRegion>) {
        let tags = lock(self.shared()).tag(&mut sqes);
        let mut w = Waiting {
            shared: self.shared(),
            first: tags.start,
            pushed: 0,
            regions: Some(regions),
        };
        // Enter on the first round, after pushing more, and once per slice.
        let mut enter = true;
        loop {
            {
                let mut core = lock(w.shared);
                while w.pushed < sqes.len() && core.push(sqes[w.pushed]) {
                    w.pushed += 1;
                    enter = true;
                }
                if enter {
                    if let Err(e) = core.submit() {
                        drop(core);
                        // Entries already pushed may still run: their regions stay
                        // parked in the ring (dropping `w` parks them) until they have.
                        let back = match w.pushed {
                            0 => w.regions.take().unwrap_or_default(),
                            _ => Vec::new(),
                        };
                        return (Err(e.context(op)), back);
                    }
                }
                core.reap();
                if w.pushed == sqes.len() {
                    if let Some(got) = core.take_finished(&tags) {
                        drop(core);
                        return (Ok(got), w.regions.take().unwrap_or_default());
                    }
                }
            }
            let pushed = w.pushed == sqes.len();
            enter = self
                .turn(&tags, |core| pushed && core.has_finished(&tags))
                .await;
        }
    }
}

impl AsyncRing {
    /// Waits until `ready` holds of the core (reaped first), the eventfd is readable,
    /// or a completion of `tags` is filed by another caller; at most one wait slice.
    /// Whether the slice passed (then the caller enters once, so deadlines advance).
    async fn turn(&self, tags: &Range<u64>, ready: impl Fn(&Core) -> bool) -> bool {
        let woken = poll_fn(|cx| {
            {
                let mut core = lock(self.shared());
                core.reap();
                if ready(&core) {
                    return Poll::Ready(());
                }
                core.wake_on(tags, cx.waker());
            }
            match self.eventfd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => {
                    // The counter, emptied (non-blocking: an empty one answers EAGAIN).
                    let _ = rustix::io::read(self.eventfd.get_ref(), &mut [0u8; 8]);
                    ready.clear_ready();
                    Poll::Ready(())
                }
                Poll::Ready(Err(_)) => Poll::Ready(()),
                Poll::Pending => Poll::Pending,
            }
        });
        let slice = Duration::from_micros(WAIT_SLICE_US as u64);
        tokio::time::timeout(slice, woken).await.is_err()
    }

    /// As [`Ring::listen`]. A future dropped before it completes may leave the ring
    /// listening with no [`Listener`] to accept on: the service stays held until the
    /// ring closes.
    pub async fn listen(&self, service: u32) -> Result<Listener, Error> {
        let mut sqe = Sqe::listen(0, service);
        let tag = lock(self.shared())
            .tag(std::slice::from_mut(&mut sqe))
            .start;
        let c = self.next_of("listen", tag, Some(sqe)).await?;
        Listener::started(service, &c, Arc::downgrade(self.shared()))
    }

    /// As [`Ring::unlisten`]: the listen ends, and the peers that joined and were not
    /// accepted come back (to use or disconnect).
    pub async fn unlisten(&self, mut listener: Listener) -> Result<Vec<Accepted>, Error> {
        listener.check(self.shared())?;
        if !listener.ended {
            self.control(ops::unlisten(listener.service)).await?;
        }
        Ok(listener.finish(&mut lock(self.shared())))
    }

    /// As [`Ring::accept`]. Cancel-safe: a peer that joins after the future is dropped
    /// is the next accept's.
    pub async fn accept(&self, listener: &mut Listener) -> Result<Accepted, Error> {
        listener.check(self.shared())?;
        if listener.ended {
            return Err(Listener::over());
        }
        let c = self.next_of("accept", listener.tag, None).await?;
        listener.take(&c)
    }

    /// Pushes `sqe` (when given: tagged `tag`), submits, and waits for the next
    /// completion of `tag`.
    async fn next_of(
        &self,
        op: &'static str,
        tag: u64,
        mut sqe: Option<Sqe>,
    ) -> Result<Cqe, Error> {
        let _forget = ForgetWaker {
            shared: self.shared(),
            first: tag,
        };
        let mut enter = true;
        loop {
            {
                let mut core = lock(self.shared());
                if sqe.is_some_and(|s| core.push(s)) {
                    sqe = None;
                    enter = true;
                }
                if enter {
                    core.submit().map_err(|e| e.context(op))?;
                }
                core.reap();
                if let Some(c) = core.take_next(tag) {
                    return Ok(c);
                }
            }
            let tags = tag..tag + 1;
            enter = self.turn(&tags, |core| core.has_next(tag)).await || sqe.is_some();
        }
    }
}

/// Forgets a future's waker when it ends or is dropped.
struct ForgetWaker<'a> {
    shared: &'a Shared,
    first: u64,
}

impl Drop for ForgetWaker<'_> {
    fn drop(&mut self) {
        lock(self.shared).forget_waker(self.first);
    }
}

/// A future's entries in the ring: parked with its regions if the future is dropped
/// before they all completed.
struct Waiting<'a> {
    shared: &'a Shared,
    first: u64,
    /// Entries pushed so far (those after never reach the kernel: nothing is owed).
    pushed: usize,
    /// Taken when the future hands them back.
    regions: Option<Vec<MemoryRegion>>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut core = lock(self.shared);
        core.forget_waker(self.first);
        if let Some(r) = self.regions.take() {
            core.park(self.first..self.first + self.pushed as u64, r);
        }
    }
}
