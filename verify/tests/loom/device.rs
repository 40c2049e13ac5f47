//! A device as the kernel shares it (kmod's devctx.rs, fabric.rs, ring_ctx.rs), on loom's
//! mutexes and atomics: a mutex per ring (with its completion inbox, a leaf), per
//! physical QP, per links shard, for the membership, the exports and the CQ's router, abi's busy hint
//! and inbox, and the same enter, route and close paths. The engine's decisions are
//! abi's own; only the glue is restated here, as kmod has it.
//!
//! [`Faults`] break the locking the way a plausible change would, for the weakened
//! twins.

use std::iter;

use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use loom::sync::{Arc, Mutex, MutexGuard};

use core::sync::atomic::Ordering;
use krcore_abi::cqe::Cqe;
use krcore_abi::engine::{
    complete_wc, settle_links, BusyHint, Completion, Connection, Context, Diverted, ExportSlot,
    Exports, Fabric, HeldPort, Inbox, Links, Members, Messages, MrKeys, PhysQp, PortStorage, Ports,
    Post, PostError, Posted, Qps, Ring, RingStorage, SendWr, Slot, Stall, VecStore, WrId,
};
use krcore_abi::errno::Errno;
use krcore_abi::opcode::Opcode;
use krcore_abi::ring::{CqConsumer, SqProducer};
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::fake::FakeNic;

use crate::{ring, Cell, LoomRing};

/// How the model's locking is broken (all `false`: as kmod does it).
#[derive(Clone, Copy, Default)]
pub struct Faults {
    /// Every QP's section also takes one device-wide lock (the design before per-QP
    /// locks).
    pub device_wide: bool,
    /// The router completes into the ring under the ring's lock, from inside the QP's
    /// section, instead of through its inbox.
    pub deliver_under_qp: bool,
    /// The rings' CQ index words use relaxed orderings.
    pub weak_cq: bool,
    /// Every links shard's section also takes the one device-wide lock (messages under
    /// the membership lock, as before shards).
    pub links_device_wide: bool,
    /// The router takes a listen's nudges into the ring but leaves its offers for the
    /// ring's next submission (kmod's `flush_rings` without `accept_offers`).
    pub offers_at_enter_only: bool,
}

/// What rings share: abi's [`Fabric`] under a lock per part.
pub struct Shared {
    /// The hardware (its own internal locking; a leaf).
    nic: Mutex<FakeNic>,
    qps: Vec<Mutex<PhysQp<VecStore>>>,
    /// The lock [`Faults::device_wide`] adds.
    device: Mutex<()>,
    hint: BusyHint<Cell>,
    members: Mutex<()>,
    links: Vec<Mutex<Messages<VecStore>>>,
    exports: Mutex<Exports<VecStore>>,
    /// The held ports (a leaf).
    ports: Mutex<Ports<VecStore>>,
    /// The exports' epoch, published as each exports section ends (kmod's).
    epoch: AtomicU64,
    faults: Faults,
}

/// Posts on one QP of the fake NIC.
struct NicPost<'a> {
    nic: &'a Mutex<FakeNic>,
    qp: u32,
}

impl Post for NicPost<'_> {
    fn post_send(&mut self, wrs: &[SendWr]) -> Result<(), PostError> {
        self.nic.lock().unwrap().post_send(self.qp, wrs)
    }
}

impl Qps<VecStore> for Shared {
    fn count(&self) -> usize {
        self.qps.len()
    }

    fn qp<R>(&self, i: u32, f: impl FnOnce(&mut PhysQp<VecStore>, &mut dyn Post) -> R) -> R {
        let _device = self.faults.device_wide.then(|| self.device.lock().unwrap());
        let mut qp = self.qps[i as usize].lock().unwrap();
        let mut post = NicPost {
            nic: &self.nic,
            qp: i,
        };
        self.hint.section(&mut qp, &mut post, f)
    }
}

/// The membership lock, held.
pub struct SharedMembers<'a> {
    nic: &'a Mutex<FakeNic>,
    _held: MutexGuard<'a, ()>,
}

impl Members<VecStore> for SharedMembers<'_> {
    fn connect(
        &mut self,
        gid: [u8; 16],
        service: u32,
        opposite: Option<u32>,
        _user: u32,
    ) -> Result<Connection, Errno> {
        self.nic.lock().unwrap().connect(gid, service, opposite)
    }
    fn disconnect(&mut self, qp: u32, _user: u32) {
        self.nic.lock().unwrap().disconnect(qp)
    }
    fn accept(&mut self, gid: [u8; 16], qp: u32) -> Result<Connection, Errno> {
        self.nic.lock().unwrap().accept(gid, qp)
    }
}

/// A links shard's lock, held (with the device lock under [`Faults::links_device_wide`]).
pub struct SharedShard<'a> {
    g: MutexGuard<'a, Messages<VecStore>>,
    _device: Option<MutexGuard<'a, ()>>,
}

impl std::ops::Deref for SharedShard<'_> {
    type Target = Messages<VecStore>;
    fn deref(&self) -> &Messages<VecStore> {
        &self.g
    }
}

impl std::ops::DerefMut for SharedShard<'_> {
    fn deref_mut(&mut self) -> &mut Messages<VecStore> {
        &mut self.g
    }
}

impl Links<VecStore> for Shared {
    type Shard<'a> = SharedShard<'a>;

    fn shards(&self) -> u32 {
        self.links.len() as u32
    }
    fn shard(&self, k: u32) -> SharedShard<'_> {
        let device = self
            .faults
            .links_device_wide
            .then(|| self.device.lock().unwrap());
        SharedShard {
            g: self.links[k as usize].lock().unwrap(),
            _device: device,
        }
    }
}

impl Fabric<VecStore> for Shared {
    type Members<'a> = SharedMembers<'a>;

    fn members(&self) -> SharedMembers<'_> {
        SharedMembers {
            nic: &self.nic,
            _held: self.members.lock().unwrap(),
        }
    }
    fn exports<R>(&self, f: impl FnOnce(&mut Exports<VecStore>) -> R) -> R {
        let mut e = self.exports.lock().unwrap();
        let r = f(&mut e);
        self.epoch.store(e.removals(), Ordering::Release);
        r
    }
    fn exports_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
    fn ports<R>(&self, f: impl FnOnce(&mut Ports<VecStore>) -> R) -> R {
        f(&mut self.ports.lock().unwrap())
    }
    fn dereg_mr(&self, keys: MrKeys) {
        self.nic.lock().unwrap().dereg_mr(keys)
    }
    fn descriptor(&self) -> u64 {
        self.nic.lock().unwrap().descriptor()
    }
}

pub type LRing = Ring<VecStore, LoomRing<Sqe>, LoomRing<Cqe>>;

/// A ring as the device shares it (kmod's `RingCell`).
pub struct RingCell {
    ctx: Mutex<LRing>,
    inbox: Mutex<Inbox<VecStore>>,
    /// The inbox may hold completions (kmod's hint that lets an enter skip its lock).
    mail: AtomicBool,
    /// Closed and released: nothing of it is left.
    released: AtomicBool,
}

impl RingCell {
    /// Takes in what was delivered (the caller holds the ring's lock, as `ctx`).
    fn absorb(&self, ctx: &mut LRing) {
        self.mail.swap(false, Ordering::AcqRel);
        self.inbox.lock().unwrap().drain_into(ctx);
    }
}

/// The application's side of a ring.
pub struct App {
    pub sq: SqProducer<LoomRing<Sqe>>,
    pub cq: CqConsumer<LoomRing<Cqe>>,
    /// Its virtual QP, local MR and imported remote MR.
    pub handles: (u32, u32, u32),
}

impl App {
    /// Queues a READ from the imported MR (not yet submitted).
    pub fn read(&mut self, user_data: u64) {
        let (v, mr, rmr) = self.handles;
        self.sq
            .push(Sqe::one_sided(
                Opcode::Read,
                user_data,
                v,
                mr,
                MR,
                8,
                rmr,
                MR,
            ))
            .unwrap();
        self.sq.publish();
    }

    /// Queues a RECV of up to 8 bytes into the local MR (not yet submitted).
    pub fn recv(&mut self, user_data: u64) {
        self.two_sided(Opcode::Recv, user_data);
    }

    /// Queues a SEND of 8 bytes from the local MR (not yet submitted).
    pub fn send(&mut self, user_data: u64) {
        self.two_sided(Opcode::Send, user_data);
    }

    fn two_sided(&mut self, op: Opcode, user_data: u64) {
        let (v, mr, _) = self.handles;
        self.sq
            .push(Sqe::two_sided(op, user_data, v, mr, MR, 8))
            .unwrap();
        self.sq.publish();
    }

    /// Queues a LISTEN or UNLISTEN of `service` (not yet submitted).
    pub fn listen(&mut self, user_data: u64, service: u32, on: bool) {
        let sqe = match on {
            true => Sqe::listen(user_data, service),
            false => Sqe::unlisten(user_data, service),
        };
        self.sq.push(sqe).unwrap();
        self.sq.publish();
    }

    /// Every CQE ready.
    pub fn reap_cqes(&mut self) -> Vec<Cqe> {
        let got = iter::from_fn(|| self.cq.pop()).collect();
        self.cq.release();
        got
    }

    /// Every CQE ready, by user data.
    pub fn reap(&mut self) -> Vec<u64> {
        let got = iter::from_fn(|| self.cq.pop().map(|c| c.user_data)).collect();
        self.cq.release();
        got
    }
}

/// Address of every ring's MR (the fake NIC does not touch memory).
pub const MR: u64 = 0x1000;

/// A device: the shared parts, its rings, the router's lock and mark.
pub struct Device {
    pub fab: Shared,
    pub rings: Vec<RingCell>,
    /// The CQ's lock, held while routing.
    cq: Mutex<()>,
    /// Some ring may have completions in its inbox, or closed. Set by a swap, not a
    /// store, here and in kmod: loom 0.7 can let the router's swap miss its own
    /// thread's preceding plain store (cf. tokio-rs/loom#282), an execution C11 rules
    /// out; read-modify-writes it orders correctly.
    dirty: AtomicBool,
}

impl Device {
    /// A device with physical QPs of send depth `depths` and `rings` rings, each
    /// connected (round robin over the QPs), with an MR registered and imported;
    /// returns it and the applications' sides. Runs single-threaded, before the model's
    /// threads start.
    pub fn new(depths: &[u32], rings: usize, faults: Faults) -> (Arc<Device>, Vec<App>) {
        Device::with_services(depths, &vec![1; rings], faults)
    }

    /// As [`new`](Self::new), ring `r` connecting to `services[r]` (rings on one
    /// service pair up into links, in order).
    pub fn with_services(
        depths: &[u32],
        services: &[u32],
        faults: Faults,
    ) -> (Arc<Device>, Vec<App>) {
        let rings = services.len();
        let fab = Shared {
            nic: Mutex::new(FakeNic::new(depths)),
            qps: depths
                .iter()
                .map(|&d| Mutex::new(PhysQp::new(vec![Posted::EMPTY; d as usize])))
                .collect(),
            device: Mutex::new(()),
            hint: BusyHint::new(Cell {
                a: AtomicU32::new(0),
                weak: false,
            }),
            members: Mutex::new(()),
            links: (0..2)
                .map(|k| {
                    let mut m = Messages::with_capacity(4, 4);
                    m.set_index(k);
                    Mutex::new(m)
                })
                .collect(),
            exports: Mutex::new(Exports::new(vec![ExportSlot::EMPTY; 8])),
            ports: Mutex::new(Ports::new(
                PortStorage {
                    slots: vec![HeldPort::EMPTY; 16],
                },
                1,
            )),
            epoch: AtomicU64::new(0),
            faults,
        };
        let mut cells = Vec::new();
        let mut mems = Vec::new();
        for r in 0..rings {
            let (sq, cq) = (ring::<Sqe>(4, false), ring::<Cqe>(4, faults.weak_cq));
            let storage = RingStorage::<VecStore> {
                vqps: vec![Slot::EMPTY; 2],
                mrs: vec![Slot::EMPTY; 2],
                rmrs: vec![Slot::EMPTY; 2],
                inflight: vec![Slot::EMPTY; 4],
                overflow: vec![Cqe::default(); 8],
                diverted: vec![Diverted::default(); 8],
            };
            cells.push(RingCell {
                ctx: Mutex::new(Ring::new(r as u16, 1, sq.clone(), cq.clone(), storage)),
                inbox: Mutex::new(Inbox::new(r as u16, 1, vec![(0, Completion::Done); 4])),
                mail: AtomicBool::new(false),
                released: AtomicBool::new(false),
            });
            mems.push((sq, cq));
        }
        let dev = Arc::new(Device {
            fab,
            rings: cells,
            cq: Mutex::new(()),
            dirty: AtomicBool::new(false),
        });
        let apps = mems
            .into_iter()
            .enumerate()
            .map(|(r, (sq, cq))| {
                dev.setup(r, services[r], SqProducer::new(sq), CqConsumer::new(cq))
            })
            .collect();
        (dev, apps)
    }

    /// Connects ring `r` to `service`, registers an MR and imports it, each entry
    /// through `enter`.
    fn setup(
        &self,
        r: usize,
        service: u32,
        mut sq: SqProducer<LoomRing<Sqe>>,
        mut cq: CqConsumer<LoomRing<Cqe>>,
    ) -> App {
        let mut run = |sqe: Sqe| -> Cqe {
            sq.push(sqe).unwrap();
            sq.publish();
            self.enter(r);
            let c = cq.pop().unwrap();
            cq.release();
            assert!(c.res > 0, "{c:?}");
            c
        };
        let v = run(Sqe::pair(1, [0; 16], service as u16, service as u16)).res as u32;
        let mr = run(Sqe::reg_mr(
            2,
            MR,
            64,
            MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ,
        ));
        let rmr = run(Sqe::import_mr(3, v, MR, 64, mr.aux)).res as u32;
        App {
            sq,
            cq,
            handles: (v, mr.res as u32, rmr),
        }
    }

    /// The owner's enter (kmod's `until` step, without waiting): takes in what was
    /// routed to the ring, submits under the ring's lock, registers memory as asked
    /// (with no lock, then records it under the ring's), then routes.
    pub fn enter(&self, r: usize) {
        self.submit(r);
        self.route();
    }

    /// The submitting half of [`enter`](Self::enter): what it posts stays in flight.
    pub fn submit(&self, r: usize) {
        let cell = &self.rings[r];
        {
            let mut ctx = cell.ctx.lock().unwrap();
            if cell.mail.load(Ordering::Acquire) {
                cell.absorb(&mut ctx);
            }
            let s = ctx.submit(&self.fab, 8, Context::OWNER).unwrap();
            if let Some(reg) = (s.stall == Some(Stall::Register))
                .then(|| ctx.claim_registration())
                .flatten()
            {
                drop(ctx);
                let keys = self
                    .fab
                    .nic
                    .lock()
                    .unwrap()
                    .reg_mr(reg.addr, reg.len, reg.access);
                let mut ctx = cell.ctx.lock().unwrap();
                ctx.finish_registration(reg, keys, &self.fab);
                ctx.publish();
            }
        }
    }

    /// The ring's file closes (kmod's `detach`).
    pub fn close(&self, r: usize) {
        let cell = &self.rings[r];
        cell.ctx.lock().unwrap().close(&self.fab);
        cell.inbox.lock().unwrap().mark();
        self.dirty.swap(true, Ordering::AcqRel);
        self.route();
    }

    /// Polls and routes the CQ (the NIC executes what was posted first), then has the
    /// marked rings take their completions in, publish, or be released when closed and
    /// idle (kmod's `route`). Skips the CQ's lock when nothing can be there.
    pub fn route(&self) {
        if !self.fab.hint.any() && !self.dirty.load(Ordering::Acquire) {
            return;
        }
        let _cq = self.cq.lock().unwrap();
        if self.fab.hint.any() {
            let wcs: Vec<_> = {
                let mut nic = self.fab.nic.lock().unwrap();
                for q in 0..self.fab.qps.len() {
                    nic.execute(q as u32, usize::MAX, false);
                }
                iter::from_fn(|| nic.poll()).collect()
            };
            for (qp, wc) in wcs {
                complete_wc(&self.fab, qp, &wc, |id, c| self.deliver(id, c));
            }
        }
        if self.dirty.swap(false, Ordering::AcqRel) {
            self.flush();
        }
    }

    /// A notice from the kernel at `gid` arrives on QP `qp` (kmod's `notice_in`, under
    /// the CQ's lock): handed to its shard; then what the shards owe is routed (the
    /// recovery's sweep) and the marked rings flushed.
    pub fn notice(&self, gid: [u8; 16], qp: u32, n: krcore_abi::cluster::notice::Notice) {
        {
            let _cq = self.cq.lock().unwrap();
            let k = n.shard(&gid, self.fab.shards()).unwrap();
            self.fab.shard(k).on_notice(&gid, qp, n, None, &self.fab);
            settle_links(&self.fab, u32::MAX, 5_000, 0, |id, c| self.deliver(id, c));
        }
        self.route();
    }

    /// NIC QP `qp`'s bindings (virtual QPs bound to it).
    pub fn bound(&self, qp: usize) -> u32 {
        self.fab.nic.lock().unwrap().qps[qp].bound
    }

    /// The NIC's peer set is QP 0, to `gid` (the fake's one remote node).
    pub fn set_peer(&self, gid: [u8; 16]) {
        self.fab.nic.lock().unwrap().remote = Some(gid);
    }

    /// Hands completion `c` of request `id` to its ring. Called in a QP's section.
    fn deliver(&self, id: WrId, c: Completion) {
        let cell = &self.rings[id.ring as usize];
        if self.fab.faults.deliver_under_qp {
            let mut ctx = cell.ctx.lock().unwrap();
            ctx.complete(id, c);
            ctx.publish();
            return;
        }
        cell.inbox.lock().unwrap().deliver(id, c);
        cell.mail.swap(true, Ordering::AcqRel);
        self.dirty.swap(true, Ordering::AcqRel);
    }

    /// Each marked ring takes its inbox in under its own lock (kmod's `flush_rings`).
    fn flush(&self) {
        for cell in &self.rings {
            if !cell.inbox.lock().unwrap().take_mark() {
                continue;
            }
            let mut ctx = cell.ctx.lock().unwrap();
            cell.absorb(&mut ctx);
            if ctx.is_closed() {
                if ctx.release_idle(&self.fab) {
                    cell.released.store(true, Ordering::Release);
                }
            } else {
                if !self.fab.faults.offers_at_enter_only {
                    ctx.accept_offers(&self.fab);
                }
                ctx.publish();
            }
        }
    }

    /// Whether ring `r` was closed and released.
    pub fn released(&self, r: usize) -> bool {
        self.rings[r].released.load(Ordering::Acquire)
    }

    /// Credits in use on QP `i`.
    pub fn outstanding(&self, i: usize) -> u32 {
        self.fab.qps[i].lock().unwrap().outstanding()
    }

    /// Whether the busy hint says the CQ may hold something.
    pub fn hinted(&self) -> bool {
        self.fab.hint.any()
    }

    /// MRs registered with the NIC and not deregistered.
    pub fn live_mrs(&self) -> usize {
        self.fab.nic.lock().unwrap().live_mrs.len()
    }

    /// Runs `f` in QP `i`'s section (as a ring posting on it would be).
    pub fn in_qp_section<R>(&self, i: u32, f: impl FnOnce() -> R) -> R {
        self.fab.qp(i, |_, _| f())
    }

    /// Runs `f` while this thread holds links shard `k`'s lock.
    pub fn in_shard_section<R>(&self, k: u32, f: impl FnOnce() -> R) -> R {
        let _g = self.fab.shard(k);
        f()
    }
}
