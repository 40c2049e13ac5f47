//! Figures across nodes (`krcore-figures across FAR NAMES`, on the measuring
//! node while the far node runs [`crate::far`]), krcore beside user-space verbs that
//! connect through rdma_cm, in one run:
//! - data plane (the paper's Figures 10 and 11): 8 B READ and SEND, one at a time and
//!   12 in flight, over krcore's enter ioctl, its one-ioctl-per-op path, rdma_cm verbs,
//!   then the polling thread alone;
//! - the MetaServer (Figure 9a): lookups by name, uncached (one one-sided READ) and
//!   cached, beside a lookup by request and reply to a process on the far node;
//! - control plane (Figure 8a): connects to the far node from 1, 2, 4 and 8 processes,
//!   krcore on a warm connection set, rdma_cm verbs with the device already open and as
//!   a fresh process's first connect;
//! - first contact: krcore's first CONNECT to the far node after this node's module was
//!   loaded (so its connection set is made), several times;
//! - RPC echo ([`crate::echo`]): 1, 8 and 64 client processes against one listener on
//!   the far node, beside one rdma_cm connection per client process.
//!
//! Last it sets the far export's done word, and the far node ends.

use std::net::Ipv4Addr;
use std::thread::sleep;
use std::time::{Duration, Instant};

use krcore_benches::record::Record;
use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Batch, Builder, Device, RemoteRegion, Ring, Vqp};
use verify::cm_verbs::Client;

use crate::control::{fresh_module, record, round, PROCS};
use crate::dataplane::{measure, Measured};
use crate::far::{
    entry_name, retry, CM_PORT, DONE_AT, READY_AT, RPC_LEN, RPC_SERVICE, SEND_SERVICES,
};
use crate::paths::{gid_of, run, CmVerbs, KrPerOp, KrRing, Op, Target, FAR_EXPORT};

/// Group names start with this.
pub const PREFIX: &str = "across-";
/// Names looked up per MetaServer figure.
const LOOKUPS: usize = 200;
/// Imports per virtual QP before it is released (each takes a slot of the ring's
/// imports table; DISCONNECT frees them).
const PER_VQP: usize = 64;
/// First contacts measured (each reloads this node's module): the goal holds for each.
const FIRST_CONTACTS: usize = 10;
/// What this side's own bookkeeping CONNECTs name: no endpoint (one-sided alone).
const CONTROL_SERVICE: u32 = 0;
/// What the MetaServer lookups' CONNECTs name: no endpoint.
const LOOKUP_SERVICE: u32 = 0;

fn gone(e: impl std::fmt::Display) -> ! {
    panic!("across nodes: {e}")
}

/// A ring connected to the far node with its export imported.
fn far_ring(far: Ipv4Addr) -> (Ring, Vqp, RemoteRegion) {
    let mut ring = Builder::new(64)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let passing = [Reason::Unreachable, Reason::NoSuchName];
    let v = retry(300, &passing, || ring.connect(gid_of(far), CONTROL_SERVICE))
        .unwrap_or_else(|e| gone(e));
    let r =
        retry(300, &passing, || ring.import_name(&v, FAR_EXPORT, 4096)).unwrap_or_else(|e| gone(e));
    (ring, v, r)
}

/// Reads the far export's word at `at`.
fn far_word(ring: &mut Ring, v: &Vqp, r: &RemoteRegion, at: usize) -> u64 {
    let mut mine = ring.register(8, MrAccess::LOCAL_WRITE).expect("REG_MR");
    let mut b = Batch::new();
    b.read(v, &mine, 0, r, at as u64, 8).expect("READ");
    for c in ring.run(b).expect("READ") {
        c.unwrap_or_else(|e| gone(e));
    }
    let w = u64::from_le_bytes(mine.bytes()[..8].try_into().expect("8 bytes"));
    ring.deregister(mine).expect("DEREG_MR");
    w
}

/// Waits (10 min at most: the far node publishes every name first) until the far node
/// serves everything.
fn wait_ready(far: Ipv4Addr) {
    let t = Instant::now();
    let (mut ring, v, r) = far_ring(far);
    while far_word(&mut ring, &v, &r, READY_AT) != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "the far node never got ready"
        );
        sleep(Duration::from_millis(500));
    }
    eprintln!(
        "[figures] the far node {far} is ready after {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// 8 B READ and SEND, every path, interleaved; the polling thread alone after.
fn dataplane(far: Ipv4Addr, out: &mut Vec<Record>) {
    let node = |service| Target::Node { addr: far, service };
    let (verbs, _) = Client::connect(far, CM_PORT, 4096).unwrap_or_else(|e| gone(e));
    let mut paths = vec![
        Measured::new(
            "krcore-enter",
            Box::new(KrRing::new(false, node(SEND_SERVICES[0]))),
        ),
        Measured::new(
            "krcore-per-op",
            Box::new(KrPerOp::new(node(SEND_SERVICES[1]))),
        ),
        Measured::new("verbs-cm", Box::new(CmVerbs(verbs))),
    ];
    for op in [Op::Read, Op::Send] {
        measure(&mut paths, op, PREFIX, out);
    }
    drop(paths);
    let mut sqpoll = [Measured::new(
        "krcore-sqpoll",
        Box::new(KrRing::new(true, node(SEND_SERVICES[2]))),
    )];
    for op in [Op::Read, Op::Send] {
        measure(&mut sqpoll, op, PREFIX, out);
    }
}

/// `k` distinct entries of `0..n`, picked by a fixed walk.
fn pick(n: usize, k: usize) -> Vec<usize> {
    let mut picked = Vec::with_capacity(k);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while picked.len() < k.min(n) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let i = (x >> 33) as usize % n;
        if !picked.contains(&i) {
            picked.push(i);
        }
    }
    picked
}

/// Imports each of `names` once, a virtual QP per [`PER_VQP`]: each import's time and
/// the wall time of all.
fn imports(ring: &mut Ring, far: Ipv4Addr, names: &[usize]) -> (Vec<Duration>, Duration) {
    let mut times = Vec::with_capacity(names.len());
    let wall = Instant::now();
    for chunk in names.chunks(PER_VQP) {
        let v = ring
            .connect(gid_of(far), LOOKUP_SERVICE)
            .unwrap_or_else(|e| gone(e));
        for &i in chunk {
            let t = Instant::now();
            ring.import_name(&v, &entry_name(i), 8)
                .unwrap_or_else(|e| gone(e));
            times.push(t.elapsed());
        }
        ring.disconnect(v).unwrap_or_else(|e| gone(e));
    }
    (times, wall.elapsed())
}

/// Each of `names` looked up by a request to the far node's process and its reply, one
/// at a time over krcore's two-sided messages: each lookup's time and the wall time.
fn requests(far: Ipv4Addr, names: &[usize]) -> (Vec<Duration>, Duration) {
    let mut ring = Builder::new(64)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let v = retry(60, &[Reason::Unreachable], || {
        ring.pair(gid_of(far), RPC_SERVICE as u16, RPC_SERVICE as u16)
    })
    .unwrap_or_else(|e| gone(e));
    let mut mr = ring.register(4096, MrAccess::LOCAL_WRITE).expect("REG_MR");
    let mut times = Vec::with_capacity(names.len());
    let wall = Instant::now();
    for &i in names {
        let name = entry_name(i);
        let n = name.len();
        mr.bytes_mut()[..n].copy_from_slice(name.as_bytes());
        let t = Instant::now();
        let mut b = Batch::new();
        b.recv(&v, &mr, 2048, RPC_LEN).expect("RECV");
        b.send(&v, &mr, 0, n as u32, None).expect("SEND");
        for c in ring.run(b).expect("request") {
            c.unwrap_or_else(|e| gone(e));
        }
        times.push(t.elapsed());
        let reply = &mr.bytes()[2048..2048 + RPC_LEN as usize];
        let got = u32::from_le_bytes(reply[12..16].try_into().expect("4 bytes"));
        assert_eq!(
            got as usize, i,
            "the far node answered {name} with entry {got}"
        );
    }
    (times, wall.elapsed())
}

/// Lookups by name: uncached, cached, and by request and reply.
fn lookups(far: Ipv4Addr, names: usize, out: &mut Vec<Record>) {
    let picked = pick(names, LOOKUPS);
    let mut ring = Builder::new(64)
        .build(Device::open().expect("open /dev/krcore"))
        .expect("ring");
    let group = format!("{PREFIX}lookup");
    let x = names as u32;
    for series in ["metaserver-uncached", "metaserver-cached"] {
        let (t, wall) = imports(&mut ring, far, &picked);
        let rate = t.len() as f64 / wall.as_secs_f64();
        out.push(Record::times(&group, series, x, t, 1).with_rate(rate));
    }
    let (t, wall) = requests(far, &picked);
    let rate = t.len() as f64 / wall.as_secs_f64();
    out.push(Record::times(&group, "request-reply", x, t, 1).with_rate(rate));
}

/// Connects to the far node from 1-8 processes.
fn connects(far: Ipv4Addr, out: &mut Vec<Record>) {
    let group = format!("{PREFIX}connect");
    for procs in PROCS {
        for (series, mode, n, rounds) in [
            ("krcore-warm", "krcore", 1000, 1),
            ("verbs-cm-device-already-open", "cm", 10, 1),
            ("verbs-cm-fresh-process", "cm-fresh", 1, 5),
        ] {
            let mode = format!("{mode}@{far}");
            let r = (0..rounds).map(|_| round(&mode, procs, n)).collect();
            out.push(record(&group, series, procs, r));
        }
    }
}

/// krcore's first CONNECT to the far node, this node's module loaded afresh before each
/// ([`fresh_module`]): the connection set is made then, and only then (the pool is up
/// before the clock starts).
fn first_contacts(far: Ipv4Addr, out: &mut Vec<Record>) {
    let mut samples = Vec::new();
    for _ in 0..FIRST_CONTACTS {
        fresh_module().unwrap_or_else(|e| gone(e));
        let mut ring = Builder::new(8)
            .build(Device::open().expect("open /dev/krcore"))
            .expect("ring");
        let t = Instant::now();
        let c = run(&mut ring, Sqe::connect(1, gid_of(far), CONTROL_SERVICE));
        samples.push(t.elapsed());
        assert!(
            c.res >= 0,
            "first contact: {:?}",
            krcore_uring::describe_failure(&c)
        );
    }
    let group = format!("{PREFIX}first-contact");
    // Each on its own (x: which, from 1), then all (x 0: their median and slowest).
    for (i, t) in samples.iter().enumerate() {
        out.push(Record::times(&group, "krcore", i as u32 + 1, vec![*t], 1));
    }
    out.push(Record::times(&group, "krcore", 0, samples, 1));
}

/// Every figure across nodes; the far node is told it may end.
pub fn figures(far: Ipv4Addr, names: usize, out: &mut Vec<Record>) {
    verify::guest::wait_for_tsc(Duration::from_secs(30)).unwrap_or_else(|e| gone(e));
    wait_ready(far);
    crate::run_sections(
        &[
            ("data plane across nodes", &|o| dataplane(far, o)),
            ("MetaServer lookups", &|o| lookups(far, names, o)),
            ("control plane across nodes", &|o| connects(far, o)),
            ("first contact", &|o| first_contacts(far, o)),
            ("RPC echo", &|o| {
                crate::echo::figures(far, &format!("{PREFIX}echo"), o)
            }),
        ],
        out,
    );
    let (mut ring, v, r) = far_ring(far);
    let mut one = ring.register(8, MrAccess::LOCAL_WRITE).expect("REG_MR");
    one.bytes_mut().copy_from_slice(&1u64.to_le_bytes());
    let mut b = Batch::new();
    b.write(&v, &one, 0, &r, DONE_AT as u64, 8).expect("WRITE");
    for c in ring.run(b).expect("WRITE") {
        c.unwrap_or_else(|e| gone(e));
    }
}
