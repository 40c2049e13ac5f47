//! A test rig: several rings on a fake NIC's shared QPs, with the application side of
//! each ring, so tests, fuzzing and benchmarks drive the engine as the kernel would.

use krcore_abi::cluster::notice::Notice;
use krcore_abi::cqe::Cqe;
use krcore_abi::engine::{
    complete_wc, settle_links, Completion, Context, Creds, Diverted, ExportSlot, Exports, Handed,
    Links, Messages, One, PhysQp, Posted, Ring, RingStorage, Slot, Stall, Submitted, VecStore,
    WrId, DEFAULT_DEADLINE_MS,
};
use krcore_abi::ring::{CqConsumer, RingError, SqProducer};
use krcore_abi::sqe::Sqe;

use crate::fake::FakeNic;
use crate::heapring::{new_ring, SharedRing};
use crate::node::{KernelState, Node};

/// Shards of the rig's links: more than one, so tests cross shards as the kernel's do.
pub const SHARDS: usize = 4;

/// The rig's links shards.
pub struct Shards(pub Vec<Messages<VecStore>>);

impl Shards {
    /// Links in use, over every shard.
    pub fn links(&self) -> usize {
        self.0.iter().map(Messages::links).sum()
    }
    /// Receives posted and not yet matched, over every shard.
    pub fn recvs(&self) -> usize {
        self.0.iter().map(Messages::recvs).sum()
    }
    /// Sends waiting for a receive, over every shard.
    pub fn waiting(&self) -> usize {
        self.0.iter().map(Messages::waiting).sum()
    }
}

/// The engine's ring type in the rig.
pub type EngineRing = Ring<VecStore, SharedRing<Sqe>, SharedRing<Cqe>>;

/// Sizes of one ring.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// SQ entries (power of two).
    pub sq: u32,
    /// CQ entries (power of two).
    pub cq: u32,
    /// Virtual QP slots.
    pub vqps: usize,
    /// MR slots (local and remote each).
    pub mrs: usize,
    /// In-flight slots.
    pub inflight: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            sq: 64,
            cq: 128,
            vqps: 8,
            mrs: 8,
            inflight: 64,
        }
    }
}

/// One ring with both of its sides.
pub struct TestRing {
    /// Kernel side: the engine's ring.
    pub ring: EngineRing,
    /// Application side of the SQ.
    pub sq: SqProducer<SharedRing<Sqe>>,
    /// Application side of the CQ.
    pub cq: CqConsumer<SharedRing<Cqe>>,
    /// The SQ memory, for hostile scribbling.
    pub sq_mem: SharedRing<Sqe>,
    /// The CQ memory.
    pub cq_mem: SharedRing<Cqe>,
}

/// Routes one completion to its ring by id, as the kernel's router does; counts it as
/// dropped when no live ring of that id and generation takes it.
fn deliver(rings: &mut [Option<TestRing>], dropped: &mut u64, id: WrId, c: Completion) {
    let delivered = rings
        .get_mut(id.ring as usize)
        .and_then(|r| r.as_mut())
        .is_some_and(|t| t.ring.complete(id, c));
    if !delivered {
        *dropped += 1;
    }
}

/// Rings on a fake NIC.
pub struct Rig {
    /// The NIC.
    pub nic: FakeNic,
    /// The engine's physical QP accounting, one per NIC QP.
    pub qps: Vec<PhysQp<VecStore>>,
    /// The node's exported MRs.
    pub exports: Exports<VecStore>,
    /// The node's links, receives and waiting sends, in [`SHARDS`] shards.
    pub messages: Shards,
    /// Rings by id; `None` once closed and released.
    pub rings: Vec<Option<TestRing>>,
    /// Completions that reached no live ring.
    pub dropped: u64,
    /// The clock the rig's submissions see, in ms (tests move it).
    pub now_ms: i64,
    /// The busy hint (checked sound at every routing: never clear while a completion
    /// may come) and the count of exports sections.
    pub kernel: KernelState,
}

impl Rig {
    /// A rig with physical QPs of the given send depths (connected in pairs: 0-1, 2-3).
    pub fn new(depths: &[u32]) -> Rig {
        let credits = depths.iter().sum::<u32>() as usize;
        Rig {
            nic: FakeNic::new(depths),
            qps: depths
                .iter()
                .map(|&d| PhysQp::new(vec![Posted::EMPTY; d as usize]))
                .collect(),
            exports: Exports::new(vec![ExportSlot::EMPTY; 64]),
            messages: Shards(
                (0..SHARDS)
                    .map(|k| {
                        let mut m = Messages::with_capacity(256, 256.max(credits));
                        // As the kernel names its shards: a link's id carries it.
                        m.set_index(k as u32);
                        m
                    })
                    .collect(),
            ),
            rings: Vec::new(),
            dropped: 0,
            now_ms: 0,
            kernel: KernelState::default(),
        }
    }

    /// Opens a ring as `creds`' user; returns its id.
    pub fn open_as(&mut self, l: Limits, creds: Creds) -> usize {
        let id = self.open(l);
        if let Some(r) = self.rings[id].as_mut() {
            r.ring.set_creds(creds);
        }
        id
    }

    /// Opens a ring; returns its id.
    pub fn open(&mut self, l: Limits) -> usize {
        let id = self.rings.len();
        let (sq_mem, cq_mem) = (new_ring::<Sqe>(l.sq), new_ring::<Cqe>(l.cq));
        let storage = RingStorage::<VecStore> {
            vqps: vec![Slot::EMPTY; l.vqps],
            mrs: vec![Slot::EMPTY; l.mrs],
            rmrs: vec![Slot::EMPTY; l.mrs],
            inflight: vec![Slot::EMPTY; l.inflight],
            overflow: vec![Cqe::default(); l.inflight + l.sq as usize],
            diverted: vec![Diverted::default(); l.inflight + l.sq as usize],
        };
        let ring = Ring::new(id as u16, 1, sq_mem.clone(), cq_mem.clone(), storage);
        self.rings.push(Some(TestRing {
            ring,
            sq: SqProducer::new(sq_mem.clone()),
            cq: CqConsumer::new(cq_mem.clone()),
            sq_mem,
            cq_mem,
        }));
        id
    }

    /// The live ring `r`.
    pub fn ring(&mut self, r: usize) -> &mut TestRing {
        self.rings[r].as_mut().expect("ring closed")
    }

    /// Pushes and publishes SQEs on ring `r`; returns how many fit.
    pub fn push(&mut self, r: usize, sqes: &[Sqe]) -> usize {
        let t = self.ring(r);
        let n = sqes.iter().take_while(|&&s| t.sq.push(s).is_ok()).count();
        t.sq.publish();
        n
    }

    /// The kernel takes up to `max` SQEs of ring `r`, from its owner.
    pub fn submit(&mut self, r: usize, max: u32) -> Result<Submitted, RingError> {
        let cx = Context {
            now_ms: self.now_ms,
            ..Context::OWNER
        };
        self.submit_as(r, max, cx)
    }

    /// The kernel takes up to `max` SQEs of ring `r` in context `cx`, registering memory
    /// (outside the engine's calls, as the kernel does outside its locks) whenever
    /// submission stops at a REG_MR.
    pub fn submit_as(&mut self, r: usize, max: u32, cx: Context) -> Result<Submitted, RingError> {
        let Rig {
            nic,
            qps,
            exports,
            messages,
            kernel,
            rings,
            ..
        } = self;
        let ring = &mut rings[r].as_mut().expect("ring closed").ring;
        let node = Node::new(nic, qps, exports, &mut messages.0, kernel);
        let mut total = 0;
        loop {
            let s = ring.submit(&node, max - total, cx)?;
            total += s.taken;
            // Network work, outside the engine's locks: the MetaServer's jobs.
            let due = kernel.meta.as_ref().is_some_and(|m| m.borrow().due);
            if due {
                kernel.meta.as_ref().expect("due").borrow_mut().net();
                if s.stall == Some(Stall::Remote) {
                    continue;
                }
            }
            if s.stall != Some(Stall::Register) {
                return Ok(Submitted {
                    taken: total,
                    stall: s.stall,
                });
            }
            let Some(reg) = ring.claim_registration() else {
                return Ok(Submitted {
                    taken: total,
                    stall: s.stall,
                });
            };
            let result = node.nic().reg_mr(reg.addr, reg.len, reg.access);
            ring.finish_registration(reg, result, &node);
            ring.publish();
        }
    }

    /// The kernel takes `sqe` for ring `r`, carried by io_uring command `sink` (see the
    /// engine's `uring`), from its owner.
    pub fn submit_one(&mut self, r: usize, sqe: &Sqe, sink: u64) -> One {
        let cx = Context {
            now_ms: self.now_ms,
            ..Context::OWNER
        };
        self.with_node(|node, rings| {
            let ring = &mut rings[r].as_mut().expect("ring closed").ring;
            ring.submit_one(node, sqe, sink, cx)
        })
    }

    /// Ring `r`'s device is gone: everything released at once (the engine's `abandon`).
    pub fn abandon(&mut self, r: usize) {
        self.with_node(|node, rings| rings[r].as_mut().expect("ring closed").ring.abandon(node))
    }

    /// The CQEs ring `r` owes io_uring commands, oldest first.
    pub fn diverted(&mut self, r: usize) -> Vec<Diverted> {
        let ring = &mut self.ring(r).ring;
        std::iter::from_fn(|| ring.take_diverted()).collect()
    }

    /// io_uring takes command `sink` of ring `r` back (the engine's `cancel`): the CQE
    /// to complete it with now, if it is owed one.
    pub fn cancel(&mut self, r: usize, sink: u64) -> Option<Cqe> {
        self.ring(r).ring.cancel(sink)
    }

    /// Ring `r`'s diverted CQEs handed back (the engine's `hand_back`), but command
    /// `keep`'s: what was kept, and each other command's (sink, res, extra) in order.
    pub fn hand_back(&mut self, r: usize, keep: u64) -> (Handed, Vec<(u64, i32, u64)>) {
        let mut out = Vec::new();
        let h = self
            .ring(r)
            .ring
            .hand_back(keep, |s, res, extra| out.push((s, res, extra)));
        (h, out)
    }

    /// Polls every work completion the NIC has and routes it, then what the node's
    /// messages owe (sends past the default deadline at the rig's clock expire); returns
    /// how many.
    pub fn route(&mut self) -> usize {
        let Rig {
            nic,
            qps,
            exports,
            messages,
            kernel,
            rings,
            dropped,
            now_ms,
        } = self;
        // The kernel skips the CQ when the hint is clear: it must be up whenever a
        // completion may come, or a QP has failed.
        if !kernel.hint.any() {
            assert!(
                nic.queued() == 0 && nic.completions_queued() == 0 && qps.iter().all(|q| q.quiet()),
                "busy hint clear with work on the NIC or a QP not quiet"
            );
        }
        let mut n = 0;
        let wcs: Vec<_> = std::iter::from_fn(|| nic.poll()).collect();
        let node = Node::new(nic, qps, exports, &mut messages.0, kernel);
        for (qp, wc) in wcs {
            n += 1;
            complete_wc(&node, qp, &wc, |id, c| deliver(rings, dropped, id, c));
        }
        // Only the shards let go with work, as the kernel's recovery sweeps them.
        let busy = kernel.links_busy.get();
        n += settle_links(&node, busy, DEFAULT_DEADLINE_MS, *now_ms, |id, c| {
            deliver(rings, dropped, id, c)
        });
        for t in rings.iter_mut().flatten() {
            // Offers its listens were nudged for, as the kernel's router takes them.
            n += t.ring.accept_offers(&node);
            t.ring.publish();
        }
        n
    }

    /// Pushes `sqes` on ring `r` (they must fit), runs everything to quiescence, and
    /// reaps ring `r`'s CQEs.
    pub fn run(&mut self, r: usize, sqes: &[Sqe]) -> Vec<Cqe> {
        assert_eq!(self.push(r, sqes), sqes.len(), "the SQ is full");
        self.drain();
        self.reap(r, usize::MAX)
    }

    /// Reaps up to `max` CQEs of ring `r`.
    pub fn reap(&mut self, r: usize, max: usize) -> Vec<Cqe> {
        let t = self.ring(r);
        let mut out = Vec::new();
        while out.len() < max {
            match t.cq.pop() {
                Some(c) => out.push(c),
                None => break,
            }
        }
        t.cq.release();
        out
    }

    /// Closes ring `r` (the file was closed); it is freed once nothing of it is left.
    pub fn close(&mut self, r: usize) {
        self.with_node(|node, rings| rings[r].as_mut().expect("ring closed").ring.close(node));
        self.release_closed();
    }

    /// Runs `f` with the node's shared parts seen through the engine's locks, and the
    /// rings.
    fn with_node<R>(&mut self, f: impl FnOnce(&Node<'_>, &mut Vec<Option<TestRing>>) -> R) -> R {
        let Rig {
            nic,
            qps,
            exports,
            messages,
            kernel,
            rings,
            ..
        } = self;
        f(
            &Node::new(nic, qps, exports, &mut messages.0, kernel),
            rings,
        )
    }

    /// A notice from the kernel at `gid`, arrived on physical QP `qp` (the peer set's),
    /// handed to its links shard as the kernel's router does.
    pub fn notice(&mut self, gid: [u8; 16], qp: u32, n: Notice) {
        let k = n.shard(&gid, SHARDS as u32).expect("a link's notice");
        self.with_node(|node, _| node.shard(k).on_notice(&gid, qp, n, None, node));
    }

    /// What a peer kernel at `gid` sent on physical QP `qp`, as the kernel's router takes
    /// it: `byte_len` bytes of `buf` read as a notice and handed to its links shard.
    /// `invalidated` is the key the SEND closed at the NIC, as its completion would say.
    /// Whether it was one of a link's (a buffer that is no notice, or names no shard of
    /// this node, is dropped; an export's notice is the device's, not the rig's).
    pub fn wire_notice(
        &mut self,
        gid: [u8; 16],
        qp: u32,
        buf: &[u8],
        byte_len: u32,
        invalidated: Option<u32>,
    ) -> bool {
        let Ok(n) = Notice::received(buf, byte_len) else {
            return false;
        };
        let Some(k) = n.shard(&gid, SHARDS as u32) else {
            return false;
        };
        self.with_node(|node, _| node.shard(k).on_notice(&gid, qp, n, invalidated, node));
        true
    }

    /// Frees closed rings that have nothing left in flight.
    pub fn release_closed(&mut self) {
        let Rig {
            nic,
            qps,
            exports,
            messages,
            kernel,
            rings,
            ..
        } = self;
        let node = Node::new(nic, qps, exports, &mut messages.0, kernel);
        for slot in rings.iter_mut() {
            if let Some(t) = slot {
                if t.ring.is_closed() && t.ring.release_idle(&node) {
                    *slot = None;
                }
            }
        }
    }

    /// Recycles every QP the engine reports failed, as the kernel does: move it to the
    /// error state, run the NIC so it flushes, route the flush completions, then reset
    /// it and let the engine retire what is still owed.
    pub fn recycle_failed(&mut self) -> usize {
        let failed: Vec<u32> = (0..self.qps.len() as u32)
            .filter(|&i| self.qps[i as usize].failed())
            .collect();
        for &i in &failed {
            self.nic.set_error(i);
            self.nic.execute(i, usize::MAX, false);
        }
        self.route();
        let Rig {
            nic,
            qps,
            rings,
            dropped,
            ..
        } = self;
        let mut n = 0;
        for &i in &failed {
            if nic.recycle(i) {
                n += 1;
                qps[i as usize].recycle(|id, c| deliver(rings, dropped, id, c));
            }
        }
        n
    }

    /// Runs everything to quiescence: execute all queued requests, route, recycle failed
    /// QPs, resubmit stalled SQEs, until nothing moves. Returns the last stall per ring.
    pub fn drain(&mut self) -> Vec<Option<Stall>> {
        let mut last = vec![None; self.rings.len()];
        for _ in 0..10_000 {
            let mut moved = 0;
            for qp in 0..self.nic.qps.len() as u32 {
                moved += self.nic.execute(qp, usize::MAX, false);
            }
            moved += self.route();
            moved += self.recycle_failed();
            moved += self.route();
            #[allow(clippy::needless_range_loop)] // r also names the ring to the rig
            for r in 0..self.rings.len() {
                if self.rings[r].as_ref().is_some_and(|t| !t.ring.is_closed()) {
                    if let Ok(s) = self.submit(r, u32::MAX) {
                        moved += s.taken as usize;
                        last[r] = s.stall;
                    }
                }
            }
            self.release_closed();
            if moved == 0 {
                break;
            }
        }
        last
    }
}
