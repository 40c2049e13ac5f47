//! The ways an application reaches the NIC, behind one interface so every data-plane
//! figure runs the same loop over each: krcore's ring with the enter ioctl, krcore's
//! ring with a polling thread, krcore's one-ioctl-per-op path, and verbs posted directly
//! on rxe from user space. Each krcore path reaches this node's loopback pool or, across
//! nodes, another node ([`Target`]); verbs across nodes connect through rdma_cm
//! ([`CmVerbs`]).

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use krcore_abi::meta::record::{name as export_name, name_words};
use krcore_uring::abi::compat::OneOp;
use krcore_uring::abi::cqe::Cqe;
use krcore_uring::abi::ioctl::IOC_DIRECT;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::in_io_uring::{command, CMD_OP};
use krcore_uring::{Builder, Device, PerOp, Ring};
use verify::cm_verbs::Client;
use verify::verbs::{Context, Mr, RcQp, ROCE_V2_GID_INDEX};

/// The port the local paths' two ends pair on.
const PAIR_PORT: u16 = 4002;

/// The local RoCE v2 GID of rxe0 in the test VM (::ffff:192.0.2.1).
pub const GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1];

/// Keeps `v` for the life of the process: verbs objects borrow their context, and a
/// figures process exits right after measuring (the kernel reclaims everything).
pub fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// An 8-byte operation the figures repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA READ of 8 bytes.
    Read,
    /// An 8-byte SEND into a posted RECV on the other end of the connection.
    SendRecv,
    /// An 8-byte SEND into a receive the far node keeps posted (across nodes): the
    /// sender's completion only.
    Send,
}

impl Op {
    /// Completions one operation produces.
    pub fn cqes(self) -> usize {
        match self {
            Op::Read | Op::Send => 1,
            Op::SendRecv => 2,
        }
    }
}

/// A connected path with registered memory.
pub trait Path {
    /// Queues operation number `i` (not yet submitted on the batching paths).
    fn post(&mut self, op: Op, i: u64);
    /// Submits what is queued and reaps completions, at least `min`; returns how many.
    fn reap(&mut self, min: usize) -> usize;
}

/// Fails loudly on a failed completion: a figure over errors would be meaningless.
#[track_caller]
fn checked(c: Cqe) {
    assert!(
        c.res >= 0,
        "{c:?}: {:?}",
        krcore_uring::describe_failure(&c)
    );
}

/// Where a krcore path's operations go.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// This node's loopback pool: both ends of one pooled connection are ours.
    Local,
    /// Another node, through this node's connection set to it: READs go to the export
    /// it publishes as [`FAR_EXPORT`], SENDs to the receives it keeps posted for
    /// `service`.
    Node {
        /// The node's address.
        addr: Ipv4Addr,
        /// The service the path CONNECTs on (one link per pair of nodes and service).
        service: u32,
    },
}

/// The name the far node publishes its READ target under (4 KiB).
pub const FAR_EXPORT: &str = "figures";

/// The IPv4-mapped GID of a node's address.
pub fn gid_of(addr: Ipv4Addr) -> [u8; 16] {
    addr.to_ipv6_mapped().octets()
}

/// The krcore objects an operation names: a virtual QP (locally, two on the two ends of
/// one pooled connection), a registered buffer and the memory READs go to (locally the
/// buffer's own import on the first, across nodes the far node's export).
struct Names {
    v1: u32,
    v2: u32,
    mr: u32,
    rmr: u32,
    addr: u64,
    /// Where READs read: the buffer itself, or the far export's address.
    raddr: u64,
    _buf: Vec<u64>,
}

impl Names {
    /// Registers a 4 KiB buffer and connects to `target` (locally twice, both ends of
    /// one pooled pair; across nodes once, importing the far export by name), through
    /// `run`, which submits one entry and returns its completion.
    fn new(target: Target, mut run: impl FnMut(Sqe) -> Cqe) -> Names {
        let mut ok = |s: Sqe| {
            let c = run(s);
            checked(c);
            (c.res as u32, c.aux)
        };
        let buf = vec![0u64; 512];
        let addr = buf.as_ptr() as u64;
        let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
        let (mr, descriptor) = ok(Sqe::reg_mr(3, addr, 4096, access));
        let (v1, v2, rmr, raddr) = match target {
            Target::Local => {
                // Two ends that pair on one port of this node.
                let (v1, _) = ok(Sqe::pair(1, GID, PAIR_PORT, PAIR_PORT));
                let (v2, _) = ok(Sqe::pair(2, GID, PAIR_PORT, PAIR_PORT));
                let (rmr, _) = ok(Sqe::import_mr(4, v1, addr, 4096, descriptor));
                (v1, v2, rmr, addr)
            }
            Target::Node {
                addr: node,
                service,
            } => {
                // Paired with the measuring node's end on the same port.
                let (v1, _) = ok(Sqe::pair(1, gid_of(node), service as u16, service as u16));
                let name = export_name(FAR_EXPORT).expect("a valid name");
                let (rmr, raddr) = ok(Sqe::import_name(4, v1, name_words(&name), 4096, None));
                (v1, u32::MAX, rmr, raddr)
            }
        };
        Names {
            v1,
            v2,
            mr,
            rmr,
            addr,
            raddr,
            _buf: buf,
        }
    }

    /// The entries of operation `i` (8-byte slots in distinct places, modulo 64).
    fn sqes(&self, op: Op, i: u64) -> ([Sqe; 2], usize) {
        let off = (i % 64) * 8;
        let a = self.addr;
        match op {
            Op::Read => (
                [
                    Sqe::one_sided(
                        Opcode::Read,
                        i,
                        self.v1,
                        self.mr,
                        a + 2048 + off,
                        8,
                        self.rmr,
                        self.raddr + off,
                    ),
                    Sqe::nop(0),
                ],
                1,
            ),
            Op::SendRecv => (
                [
                    Sqe::two_sided(Opcode::Recv, i, self.v2, self.mr, a + 2048 + off, 8),
                    Sqe::two_sided(Opcode::Send, i, self.v1, self.mr, a + off, 8),
                ],
                2,
            ),
            Op::Send => (
                [
                    Sqe::two_sided(Opcode::Send, i, self.v1, self.mr, a + off, 8),
                    Sqe::nop(0),
                ],
                1,
            ),
        }
    }
}

/// krcore's mapped rings, entered with the enter ioctl or fed to a polling thread.
pub struct KrRing {
    ring: Ring,
    names: Names,
    sqpoll: bool,
}

impl KrRing {
    /// A ring of 256 entries on a fresh open of the device, connected to `target` and
    /// registered.
    pub fn new(sqpoll: bool, target: Target) -> KrRing {
        let b = Builder::new(256).cq_entries(512);
        let b = if sqpoll { b.sqpoll(5000) } else { b };
        let mut ring = b
            .build(Device::open().expect("open /dev/krcore"))
            .expect("ring");
        let names = Names::new(target, |s| run(&mut ring, s));
        KrRing {
            ring,
            names,
            sqpoll,
        }
    }
}

/// Runs one entry through `r` and returns its completion.
pub fn run(r: &mut Ring, sqe: Sqe) -> Cqe {
    // SAFETY: the memory entries name is registered and outlives the wait.
    unsafe { r.submission().push(&sqe) }.expect("sq");
    r.submit_and_wait(1).expect("enter");
    r.completions().next().expect("a CQE after waiting for one")
}

impl Path for KrRing {
    fn post(&mut self, op: Op, i: u64) {
        let (sqes, n) = self.names.sqes(op, i);
        for s in &sqes[..n] {
            // SAFETY: the buffer is registered and outlives every operation.
            unsafe { self.ring.submission().push(s) }
                .expect("SQ full: the figures keep it shallow");
        }
    }

    fn reap(&mut self, min: usize) -> usize {
        let mut got = 0;
        if self.sqpoll {
            self.ring.submit().expect("submit");
            while got < min {
                let before = got;
                for c in self.ring.completions() {
                    checked(c);
                    got += 1;
                }
                if got == before {
                    // Two vCPUs: give the CPU to rxe's work and the poller.
                    std::thread::yield_now();
                }
            }
        } else {
            while got < min {
                self.ring
                    .submit_and_wait((min - got) as u32)
                    .expect("enter");
                for c in self.ring.completions() {
                    checked(c);
                    got += 1;
                }
            }
        }
        got
    }
}

/// krcore's entries carried by io_uring's own ring (`IORING_OP_URING_CMD` on a krcore
/// ring's file, SQE128 and CQE32): no krcore enter at all. Objects are set up through
/// the ring's own entries (REG_MR is not carried); RECV is not carried, so it serves
/// READs only.
pub struct KrInIoUring {
    ring: Ring,
    uring: IoUring<squeue::Entry128, cqueue::Entry32>,
    names: Names,
}

impl KrInIoUring {
    /// A ring connected to `target` and registered, and an io_uring to carry its
    /// entries.
    pub fn new(target: Target) -> KrInIoUring {
        let mut ring = Builder::new(256)
            .build(Device::open().expect("open /dev/krcore"))
            .expect("ring");
        let names = Names::new(target, |s| run(&mut ring, s));
        let uring = IoUring::builder()
            .build(256)
            .expect("io_uring with SQE128 and CQE32 in the guest");
        KrInIoUring { ring, uring, names }
    }
}

impl Path for KrInIoUring {
    fn post(&mut self, op: Op, i: u64) {
        let (sqes, n) = self.names.sqes(op, i);
        let fd = types::Fd(self.ring.as_raw_fd());
        for s in &sqes[..n] {
            let e = opcode::UringCmd80::new(fd, CMD_OP)
                .cmd(command(s))
                .build()
                .user_data(s.user_data);
            // SAFETY: the buffer is registered and outlives every operation.
            unsafe { self.uring.submission().push(&e) }
                .expect("SQ full: the figures keep it shallow");
        }
    }

    fn reap(&mut self, min: usize) -> usize {
        self.uring.submit_and_wait(min).expect("io_uring_enter");
        let mut got = 0;
        for c in self.uring.completion() {
            let (res, extra) = (c.result(), c.big_cqe()[0]);
            assert!(res >= 0, "carried entry failed: {res}, reason {extra}");
            got += 1;
        }
        got
    }
}

/// krcore's one-ioctl-per-op path: every entry pushed by its own ioctl, which also pops
/// a completion when one is ready.
pub struct KrPerOp {
    p: PerOp,
    names: Names,
    /// Completions popped by pushes, not yet reported by `reap`.
    popped: usize,
}

impl KrPerOp {
    /// A per-op file, connected to `target` and registered.
    pub fn new(target: Target) -> KrPerOp {
        let mut p = Builder::new(256)
            .cq_entries(512)
            .build_per_op(Device::open().expect("open /dev/krcore"))
            .expect("per-op setup");
        // SAFETY: the memory entries name is registered and outlives the wait.
        let names = Names::new(target, |s| {
            unsafe { p.push_pop(&s, true) }
                .expect("ioctl")
                .expect("a CQE")
        });
        KrPerOp {
            p,
            names,
            popped: 0,
        }
    }
}

impl Path for KrPerOp {
    fn post(&mut self, op: Op, i: u64) {
        let (sqes, n) = self.names.sqes(op, i);
        for s in &sqes[..n] {
            // SAFETY: the buffer is registered and outlives every operation.
            if let Some(c) = unsafe { self.p.push_pop(s, false) }.expect("one-op ioctl") {
                checked(c);
                self.popped += 1;
            }
        }
    }

    fn reap(&mut self, min: usize) -> usize {
        while self.popped < min {
            checked(
                self.p
                    .pop(true)
                    .expect("pop")
                    .expect("WAIT returned nothing"),
            );
            self.popped += 1;
        }
        std::mem::take(&mut self.popped)
    }
}

/// The kernel-direct baseline (`IOC_DIRECT`, module loaded with `bench_direct=1`): the
/// same validation, then a bare post and poll in the kernel; one operation per ioctl,
/// READ only (it has no receives and nothing in flight beside itself).
pub struct KrDirect(KrPerOp);

impl KrDirect {
    /// A per-op file for setup, or `None` when the module does not serve IOC_DIRECT.
    pub fn new() -> Option<KrDirect> {
        let mut d = KrDirect(KrPerOp::new(Target::Local));
        let c = d.run(&d.0.names.sqes(Op::Read, 0).0[0]).ok()?;
        checked(c);
        Some(d)
    }

    fn run(&mut self, sqe: &Sqe) -> Result<Cqe, krcore_uring::Error> {
        let mut op = OneOp {
            sqe: *sqe,
            ..OneOp::default()
        };
        // SAFETY: `op` is a OneOp the kernel reads and writes back; the memory the
        // entry names is registered and outlives the call, which waits for it.
        unsafe {
            self.0
                .p
                .device()
                .ioctl_raw(IOC_DIRECT, &mut op as *mut OneOp as usize)
        }?;
        Ok(op.cqe)
    }
}

impl Path for KrDirect {
    fn post(&mut self, op: Op, i: u64) {
        assert_eq!(op, Op::Read, "the kernel-direct path serves READ only");
        let sqe = self.0.names.sqes(op, i).0[0];
        checked(self.run(&sqe).expect("IOC_DIRECT"));
        self.0.popped += 1;
    }

    fn reap(&mut self, min: usize) -> usize {
        self.0.reap(min)
    }
}

/// User-space verbs on rxe: two connected RC QPs on one context, posted directly.
pub struct Verbs {
    // QPs and MRs borrow the context, leaked for the process's life (see `leak`).
    qa: RcQp<'static>,
    qb: RcQp<'static>,
    src: Mr<'static>,
    dst: Mr<'static>,
    ctx: &'static Context,
}

impl Verbs {
    /// Opens rxe0 and connects two QPs to each other.
    pub fn new() -> Verbs {
        let ctx = leak(Context::open("rxe0", 256).expect("verbs"));
        let (qa, qb) = (
            RcQp::create(ctx, 64).unwrap(),
            RcQp::create(ctx, 64).unwrap(),
        );
        let (ea, eb) = (
            qa.endpoint(ROCE_V2_GID_INDEX).unwrap(),
            qb.endpoint(ROCE_V2_GID_INDEX).unwrap(),
        );
        qa.connect(eb, ROCE_V2_GID_INDEX).unwrap();
        qb.connect(ea, ROCE_V2_GID_INDEX).unwrap();
        let (src, dst) = (Mr::new(ctx, 4096).unwrap(), Mr::new(ctx, 4096).unwrap());
        Verbs {
            qa,
            qb,
            src,
            dst,
            ctx,
        }
    }
}

impl Path for Verbs {
    fn post(&mut self, op: Op, i: u64) {
        let off = (i % 64) as usize * 8;
        match op {
            Op::Read => self
                .qa
                .post_read(
                    i,
                    &self.dst,
                    off,
                    8,
                    self.src.addr() + off as u64,
                    self.src.rkey(),
                )
                .unwrap(),
            Op::SendRecv => {
                self.qb.post_recv(i, &self.dst, off, 8).unwrap();
                self.qa.post_send_msg(i, &self.src, off, 8).unwrap();
            }
            Op::Send => panic!("on one node a SEND is measured with its RECV"),
        }
    }

    fn reap(&mut self, min: usize) -> usize {
        self.ctx.poll(min, std::time::Duration::MAX).unwrap().len()
    }
}

/// User-space verbs across nodes: a connection made through rdma_cm to the far node's
/// server (`verify::cm_verbs`), which keeps receives posted; READs go to its memory.
pub struct CmVerbs(pub Client);

impl Path for CmVerbs {
    fn post(&mut self, op: Op, i: u64) {
        let off = (i % 64) * 8;
        match op {
            Op::Read => self.0.post_read(i, 2048 + off, off, 8),
            Op::Send => self.0.post_send(i, off, 8),
            Op::SendRecv => panic!("across nodes the far node posts the receives"),
        }
        .expect("post")
    }

    fn reap(&mut self, min: usize) -> usize {
        self.0.poll(min).expect("poll")
    }
}
