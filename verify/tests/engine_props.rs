//! Property tests of the multiplexing engine on a fake NIC, under random interleavings of
//! submission, execution, failure, completion routing, reaping and ring closing.
//!
//! Properties: every SQE taken gets exactly one CQE; no CQE reaches another ring; the
//! NIC never sees a queue posted past its depth (the fake asserts it); credits never
//! leak (all zero at quiescence); every MR and connection is released after close; only
//! the rkeys of MRs exported with a remote right reach the wire.

use std::collections::{HashMap, HashSet};

use krcore_abi::cqe::{Cqe, Reason};
use krcore_abi::engine::{Stall, DEFAULT_DEADLINE_MS};
use krcore_abi::layout::SqFlags;
use krcore_abi::opcode::{Opcode, OPCODE_LAST};
use krcore_abi::ring::RingError;
use krcore_abi::sqe::{MrAccess, Sqe};
use proptest::collection::vec;
use proptest::prelude::*;
use verify::node::Node;
use verify::rig::{Limits, Rig};
use verify::rng::Rng;

const MR_BASE: u64 = 0x10_0000;
const MR_LEN: u32 = 4096;
const REMOTE_BASE: u64 = 0x7000_0000;

/// What the application knows of its ring after setup.
struct App {
    vqps: Vec<u32>,
    mr: u32,
    rmr: HashMap<u32, u32>,
    next: u64,
    submitted: HashSet<u64>,
    completed: HashSet<u64>,
    /// user_data of entries built to be rejected, and the reason they must carry.
    rejected: HashMap<u64, Reason>,
    closed: bool,
}

/// Submits `sqes` on ring `r`, runs the NIC and returns the CQEs in order, reaping and
/// entering again while completions wait in the overflow list, as an application would.
fn run_sync(rig: &mut Rig, r: usize, sqes: &[Sqe]) -> Vec<Cqe> {
    assert_eq!(rig.push(r, sqes), sqes.len());
    let mut out = Vec::new();
    for _ in 0..1000 {
        rig.drain();
        let got = rig.reap(r, usize::MAX);
        if got.is_empty() && rig.ring(r).ring.overflowed() == 0 {
            break;
        }
        out.extend(got);
    }
    out
}

fn setup(rig: &mut Rig, r: usize, vqps: usize) -> App {
    // A four-tuple of its own for each virtual QP of each ring (one link each: a third
    // end on one would be refused).
    let mut sqes: Vec<Sqe> = (0..vqps as u64)
        .map(|i| {
            let port = 7 + 16 * r as u16 + i as u16;
            Sqe::pair(i, [i as u8; 16], port, port)
        })
        .collect();
    let access = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    sqes.push(Sqe::reg_mr(99, MR_BASE, MR_LEN, access));
    let cqes = run_sync(rig, r, &sqes);
    assert_eq!(cqes.len(), vqps + 1);
    assert!(cqes.iter().all(|c| c.res > 0), "setup failed: {cqes:?}");
    let vqp_handles: Vec<u32> = cqes[..vqps].iter().map(|c| c.res as u32).collect();
    let mr = cqes[vqps].res as u32;
    // The peer's memory: exported by the same node, imported through its descriptor.
    let exported = run_sync(rig, r, &[Sqe::reg_mr(98, REMOTE_BASE, MR_LEN, access)]);
    assert!(exported.len() == 1 && exported[0].res > 0, "{exported:?}");
    let descriptor = exported[0].aux;
    let imports: Vec<Sqe> = vqp_handles
        .iter()
        .map(|&v| Sqe::import_mr(v as u64, v, REMOTE_BASE, MR_LEN, descriptor))
        .collect();
    let cqes = run_sync(rig, r, &imports);
    let rmr = cqes
        .iter()
        .map(|c| (c.user_data as u32, c.res as u32))
        .collect();
    App {
        vqps: vqp_handles,
        mr,
        rmr,
        next: 0,
        submitted: HashSet::new(),
        completed: HashSet::new(),
        rejected: HashMap::new(),
        closed: false,
    }
}

/// A random entry for ring `r`: mostly valid data operations, some built to be rejected.
fn random_sqe(rng: &mut Rng, r: usize, app: &mut App) -> Sqe {
    app.next += 1;
    let ud = ((r as u64) << 32) | app.next;
    let vqp = rng.pick(&app.vqps);
    let rmr = app.rmr[&vqp];
    let off = rng.below(MR_LEN as u64 / 8 - 2) * 8;
    let len = 8 * (1 + rng.below(2) as u32);
    let op = rng.pick(&[
        Opcode::Nop,
        Opcode::Read,
        Opcode::Write,
        Opcode::WriteImm,
        Opcode::Send,
        Opcode::Recv,
        Opcode::Cas,
        Opcode::Faa,
    ]);
    let mut s = match op {
        Opcode::Nop => Sqe::nop(ud),
        Opcode::Send | Opcode::Recv => Sqe::two_sided(op, ud, vqp, app.mr, MR_BASE + off, len),
        Opcode::Cas => Sqe::cas(ud, vqp, app.mr, MR_BASE + off, rmr, REMOTE_BASE + off, 1, 2),
        Opcode::Faa => Sqe::faa(ud, vqp, app.mr, MR_BASE + off, rmr, REMOTE_BASE + off, 1),
        Opcode::WriteImm => Sqe::one_sided(
            op,
            ud,
            vqp,
            app.mr,
            MR_BASE + off,
            len,
            rmr,
            REMOTE_BASE + off,
        )
        .with_imm(5),
        _ => Sqe::one_sided(
            op,
            ud,
            vqp,
            app.mr,
            MR_BASE + off,
            len,
            rmr,
            REMOTE_BASE + off,
        ),
    };
    if rng.chance(15) {
        let (bad, reason) = match rng.below(8) {
            0 => (
                Sqe {
                    opcode: OPCODE_LAST + rng.below(200) as u8,
                    ..s
                },
                Reason::BadOpcode,
            ),
            1 => (Sqe { flags: 0x80, ..s }, Reason::UnknownFlags),
            2 => (Sqe { resv: 1, ..s }, Reason::ReservedNonzero),
            3 if op != Opcode::Nop => (
                Sqe {
                    vqp: vqp ^ 0x0100_0000,
                    ..s
                },
                Reason::BadVqp,
            ),
            4 if op != Opcode::Nop => (
                Sqe {
                    mr: 0x7f00_0000,
                    ..s
                },
                Reason::BadMr,
            ),
            5 if op.is_one_sided() && !op.is_atomic() => (
                Sqe {
                    addr: MR_BASE + MR_LEN as u64 - 4,
                    ..s
                },
                Reason::LocalRange,
            ),
            6 if op.is_one_sided() && !op.is_atomic() => (
                Sqe {
                    remote_addr: REMOTE_BASE - 8,
                    ..s
                },
                Reason::RemoteRange,
            ),
            7 if op.is_atomic() => (
                Sqe {
                    remote_addr: s.remote_addr + 4,
                    ..s
                },
                Reason::Misaligned,
            ),
            _ => (
                Sqe {
                    arg1: 9,
                    ..Sqe::nop(ud)
                },
                Reason::ReservedNonzero,
            ),
        };
        s = bad;
        app.rejected.insert(ud, reason);
    }
    s
}

fn check_cqe(r: usize, app: &mut App, c: &Cqe) {
    assert_eq!(
        (c.user_data >> 32) as usize,
        r,
        "CQE of another ring reached ring {r}: {c:?}"
    );
    assert!(
        app.submitted.contains(&c.user_data),
        "CQE for an entry never taken: {c:?}"
    );
    assert!(
        app.completed.insert(c.user_data),
        "second CQE for one entry: {c:?}"
    );
    if let Some(&reason) = app.rejected.get(&c.user_data) {
        assert_eq!(
            c.failure(),
            Some(reason),
            "rejected entry carries the wrong reason: {c:?}"
        );
    }
}

/// Runs the rig until no CQE comes any more and no send waits for a receive, the clock
/// passing a request deadline each round (sends no receive takes fail), reaping and
/// checking every open ring's CQEs. Returns the last stall per ring.
///
/// A round that reaps nothing is not enough: the drain may have just taken a send that
/// waits, holding its QP's only credit until the next deadline, so the stall it reports
/// (NoCredit) is not the ring's last word.
fn quiesce(rig: &mut Rig, apps: &mut [App]) -> Vec<Option<Stall>> {
    let mut stalls = Vec::new();
    for _ in 0..100 {
        rig.now_ms += DEFAULT_DEADLINE_MS + 1;
        stalls = rig.drain();
        let mut reaped = 0;
        for (r, app) in apps.iter_mut().enumerate() {
            if !app.closed {
                for c in rig.reap(r, usize::MAX) {
                    check_cqe(r, app, &c);
                    reaped += 1;
                }
            }
        }
        if reaped == 0 && rig.messages.waiting() == 0 {
            break;
        }
    }
    stalls
}

/// One random scenario, its choices from `rng`; `seed` names it in failures.
fn scenario(mut rng: Rng, seed: &str) {
    let depths: Vec<u32> = (0..1 + rng.below(3))
        .map(|_| rng.pick(&[1, 2, 3, 4, 8, 16]))
        .collect();
    let mut rig = Rig::new(&depths);
    let nrings = 1 + rng.below(4) as usize;
    let mut apps = Vec::new();
    for r in 0..nrings {
        let l = Limits {
            sq: rng.pick(&[4, 8, 16]),
            cq: rng.pick(&[2, 4, 8, 16]),
            vqps: 4,
            mrs: 4,
            inflight: rng.pick(&[2, 4, 16]) as usize,
        };
        assert_eq!(rig.open(l), r);
        let nv = 1 + rng.below(3) as usize;
        apps.push(setup(&mut rig, r, nv));
    }
    for _ in 0..300 {
        let r = rng.below(nrings as u64) as usize;
        match rng.below(100) {
            0..=29 if !apps[r].closed => {
                let batch: Vec<Sqe> = (0..1 + rng.below(8))
                    .map(|_| random_sqe(&mut rng, r, &mut apps[r]))
                    .collect();
                let n = rig.push(r, &batch);
                // What did not fit is simply not submitted.
                apps[r]
                    .submitted
                    .extend(batch[..n].iter().map(|s| s.user_data));
            }
            30..=49 if !apps[r].closed => {
                let max = 1 + rng.below(16) as u32;
                rig.submit(r, max).expect("honest tail");
            }
            50..=69 => {
                let qp = rng.below(depths.len() as u64) as u32;
                let n = rng.below(6) as usize;
                rig.nic.execute(qp, n, rng.chance(4));
            }
            70..=84 => {
                rig.route();
            }
            85..=97 if !apps[r].closed => {
                for c in rig.reap(r, rng.below(8) as usize) {
                    check_cqe(r, &mut apps[r], &c);
                }
            }
            98 if !apps[r].closed && rng.chance(30) => {
                apps[r].closed = true;
                rig.close(r);
            }
            99 => rig.nic.fail_next_post = Some(rng.below(3) as usize),
            _ => {}
        }
    }
    // Quiesce: everything runs, every stalled entry gets in, sends no receive takes
    // pass their deadline, DISCONNECT cancels receives no message takes, every CQE is
    // reaped.
    rig.nic.fail_next_post = None;
    let stalls = quiesce(&mut rig, &mut apps);
    for (r, app) in apps.iter_mut().enumerate() {
        // Receives can hold every in-flight slot, with the SQ waiting behind them: only
        // closing the ring cancels them then (its CQEs are no longer checked).
        if !app.closed && stalls[r] == Some(Stall::InflightFull) {
            app.closed = true;
            rig.close(r);
        }
        if !app.closed {
            let bye: Vec<Sqe> = app
                .vqps
                .iter()
                .map(|&v| {
                    app.next += 1;
                    Sqe::disconnect(((r as u64) << 32) | app.next, v)
                })
                .collect();
            app.submitted.extend(bye.iter().map(|s| s.user_data));
            // Room: entries are taken as the drain goes, so push one at a time.
            for s in bye {
                while rig.push(r, &[s]) == 0 {
                    rig.now_ms += DEFAULT_DEADLINE_MS + 1;
                    rig.drain();
                    for c in rig.reap(r, usize::MAX) {
                        check_cqe(r, app, &c);
                    }
                }
            }
        }
    }
    quiesce(&mut rig, &mut apps);
    for (r, app) in apps.iter().enumerate() {
        if !app.closed {
            let missing: Vec<_> = app.submitted.difference(&app.completed).collect();
            assert!(
                missing.is_empty(),
                "{seed}: ring {r}: {} entries never completed: {missing:?}",
                missing.len()
            );
        }
    }
    let stray: Vec<_> = rig
        .nic
        .wire_rkeys
        .iter()
        .filter(|k| !rig.nic.remote_rkeys.contains(k))
        .collect();
    assert!(
        stray.is_empty(),
        "{seed}: rkeys of no exported MR reached the wire: {stray:?}"
    );
    assert!(
        rig.nic
            .delivery_mrs
            .iter()
            .all(|k| rig.nic.writable_mrs.contains(k)),
        "{seed}: a message was delivered into memory the NIC may not write"
    );
    for (i, q) in rig.qps.iter().enumerate() {
        assert_eq!(q.outstanding(), 0, "{seed}: QP {i} credits leaked");
        assert_eq!(
            rig.nic.qps[i].outstanding, 0,
            "{seed}: NIC QP {i} still busy"
        );
    }
    #[allow(clippy::needless_range_loop)] // r also names the ring to the rig
    for r in 0..nrings {
        if !apps[r].closed {
            rig.close(r);
        }
    }
    rig.release_closed();
    assert!(
        rig.rings.iter().all(|r| r.is_none()),
        "{seed}: a closed ring was never released"
    );
    assert!(rig.nic.live_mrs.is_empty(), "{seed}: MRs left registered");
    assert!(
        rig.nic.qps.iter().all(|q| q.bound == 0),
        "{seed}: connections left bound"
    );
    assert!(
        rig.qps.iter().all(|q| q.bound() == 0),
        "{seed}: engine still counts bound virtual QPs"
    );
}

proptest! {
    // Cases: KRCORE_PROP_CASES, or 400 (PROPTEST_CASES overrides both). A failure is
    // shrunk to its simplest choices and kept in proptest-regressions/ to rerun first.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("KRCORE_PROP_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(400),
        ..ProptestConfig::default()
    })]

    /// Random rings, QPs, operations, failures and closes, interleaved: every promise
    /// the engine makes holds (every entry completes once, no rkey of no export reaches
    /// the wire, credits and bindings return, closed rings are released).
    #[test]
    fn random_interleavings_keep_every_promise(tape in vec(any::<u64>(), 0..3000)) {
        scenario(Rng::from_tape(tape), "the shrunk tape above");
    }
}

/// The same scenarios from seeds, for a long soak outside the suite
/// (`KRCORE_SOAK_SEEDS=100000 cargo test -p verify --test engine_props soak -- --ignored`;
/// `KRCORE_SOAK_FIRST=N` starts at seed N, to rerun one that failed).
#[test]
#[ignore]
fn soak() {
    let seeds: u64 = std::env::var("KRCORE_SOAK_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let first: u64 = std::env::var("KRCORE_SOAK_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds {
        scenario(Rng::new(seed), &format!("seed {seed}"));
    }
}

#[test]
fn hostile_tail_takes_nothing() {
    let mut rig = Rig::new(&[4]);
    rig.open(Limits::default());
    rig.push(0, &[Sqe::nop(1)]);
    rig.ring(0)
        .sq_mem
        .raw()
        .1
        .store(1000, std::sync::atomic::Ordering::Release);
    assert!(matches!(
        rig.submit(0, 64),
        Err(RingError::TailOverrun { .. })
    ));
    assert!(rig.ring(0).sq.flags().contains(SqFlags::TAIL_OVERRUN));
    assert!(
        rig.reap(0, 8).is_empty(),
        "nothing taken, nothing completed"
    );
}

#[test]
fn fair_share_splits_the_send_queue() {
    let mut rig = Rig::new(&[8]);
    let a = (rig.open(Limits::default()), rig.open(Limits::default()));
    let apps = [setup(&mut rig, a.0, 1), setup(&mut rig, a.1, 1)];
    for (r, app) in apps.iter().enumerate() {
        let v = app.vqps[0];
        let writes: Vec<Sqe> = (0..20)
            .map(|i| {
                Sqe::one_sided(
                    Opcode::Write,
                    i,
                    v,
                    app.mr,
                    MR_BASE,
                    8,
                    app.rmr[&v],
                    REMOTE_BASE,
                )
            })
            .collect();
        rig.push(r, &writes);
    }
    let s0 = rig.submit(0, 64).unwrap();
    let s1 = rig.submit(1, 64).unwrap();
    assert_eq!(
        (s0.taken, s0.stall),
        (4, Some(Stall::NoCredit)),
        "share is depth / bound = 4"
    );
    assert_eq!((s1.taken, s1.stall), (4, Some(Stall::NoCredit)));
    assert_eq!(rig.qps[0].outstanding(), 8);
    rig.drain();
    assert_eq!(rig.reap(0, 64).len() + rig.reap(1, 64).len(), 40);
}

#[test]
fn full_cq_overflows_and_loses_nothing() {
    let mut rig = Rig::new(&[4]);
    rig.open(Limits {
        sq: 16,
        cq: 4,
        inflight: 4,
        ..Limits::default()
    });
    let nops: Vec<Sqe> = (0..16).map(Sqe::nop).collect();
    rig.push(0, &nops);
    let s = rig.submit(0, 64).unwrap();
    assert_eq!(s.taken, 16);
    assert!(rig.ring(0).sq.flags().contains(SqFlags::CQ_OVERFLOW));
    let mut got = Vec::new();
    while got.len() < 16 {
        let c = rig.reap(0, 3);
        assert!(!c.is_empty(), "completions stuck in overflow");
        got.extend(c.iter().map(|c| c.user_data));
        rig.submit(0, 0).unwrap();
    }
    assert_eq!(
        got,
        (0..16).collect::<Vec<_>>(),
        "overflowed CQEs keep their order"
    );
    assert!(!rig.ring(0).sq.flags().contains(SqFlags::CQ_OVERFLOW));
    assert_eq!(rig.ring(0).ring.stats().cq_overflows, 12);
}

#[test]
fn closed_ring_requests_retire_without_cqes() {
    let mut rig = Rig::new(&[8]);
    rig.open(Limits::default());
    rig.open(Limits::default());
    let apps = [setup(&mut rig, 0, 1), setup(&mut rig, 1, 1)];
    for (r, app) in apps.iter().enumerate() {
        let v = app.vqps[0];
        let reads: Vec<Sqe> = (0..4)
            .map(|i| {
                Sqe::one_sided(
                    Opcode::Read,
                    i,
                    v,
                    app.mr,
                    MR_BASE,
                    8,
                    app.rmr[&v],
                    REMOTE_BASE,
                )
            })
            .collect();
        rig.push(r, &reads);
        rig.submit(r, 64).unwrap();
    }
    rig.close(0);
    assert!(
        rig.rings[0].is_some(),
        "a ring with requests in flight is kept until they retire"
    );
    rig.drain();
    assert!(rig.rings[0].is_none(), "released once drained");
    assert_eq!(
        rig.reap(1, 64).len(),
        4,
        "the other ring gets exactly its own"
    );
    assert_eq!(rig.qps[0].outstanding(), 0);
    assert_eq!(rig.nic.live_mrs.len(), 2, "only ring 1's MRs are left");
}

#[test]
fn busy_objects_wait_and_disconnect_cancels_receives() {
    let mut rig = Rig::new(&[4]);
    rig.open(Limits::default());
    let app = setup(&mut rig, 0, 1);
    let v = app.vqps[0];
    rig.push(
        0,
        &[
            Sqe::one_sided(
                Opcode::Write,
                1,
                v,
                app.mr,
                MR_BASE,
                8,
                app.rmr[&v],
                REMOTE_BASE,
            ),
            Sqe::dereg_mr(2, app.mr),
        ],
    );
    let s = rig.submit(0, 64).unwrap();
    assert_eq!(
        (s.taken, s.stall),
        (1, Some(Stall::Busy)),
        "DEREG_MR waits for the WRITE"
    );
    rig.drain();
    let c = rig.reap(0, 8);
    assert_eq!(
        c.iter().map(|c| (c.user_data, c.res)).collect::<Vec<_>>(),
        vec![(1, 8), (2, 0)]
    );
    // A receive no message took is cancelled by DISCONNECT, which then completes.
    let run = run_sync(
        &mut rig,
        0,
        &[Sqe::reg_mr(3, MR_BASE, 64, MrAccess::LOCAL_WRITE)],
    );
    let mr = run[0].res as u32;
    let c = run_sync(
        &mut rig,
        0,
        &[
            Sqe::two_sided(Opcode::Recv, 4, v, mr, MR_BASE, 64),
            Sqe::disconnect(5, v),
        ],
    );
    assert_eq!(
        c.iter()
            .map(|c| (c.user_data, c.failure()))
            .collect::<Vec<_>>(),
        [(4, Some(Reason::Cancelled)), (5, None)]
    );
    assert_eq!(rig.messages.recvs(), 0);
}

#[test]
fn direct_posts_only_validated_requests_on_an_idle_device() {
    let mut rig = Rig::new(&[4]);
    rig.open(Limits::default());
    let app = setup(&mut rig, 0, 1);
    let v = app.vqps[0];
    let read = |ud, v, len| {
        Sqe::one_sided(
            Opcode::Read,
            ud,
            v,
            app.mr,
            MR_BASE,
            len,
            app.rmr[&app.vqps[0]],
            REMOTE_BASE,
        )
    };
    let direct = |rig: &mut Rig, s: &Sqe| {
        let Rig {
            nic,
            qps,
            exports,
            messages,
            rings,
            kernel,
            ..
        } = rig;
        let node = Node::new(nic, qps, exports, &mut messages.0, kernel);
        rings[0].as_mut().unwrap().ring.direct(s, &node)
    };
    // Rejected exactly as the ring path would, and nothing reaches the NIC.
    let posted = rig.nic.posted;
    assert_eq!(
        direct(&mut rig, &read(1, v + 1, 8)).unwrap_err().failure(),
        Some(Reason::BadVqp)
    );
    assert_eq!(
        direct(&mut rig, &read(2, v, 8192)).unwrap_err().failure(),
        Some(Reason::LocalRange)
    );
    assert_eq!(
        direct(&mut rig, &Sqe::nop(3)).unwrap_err().failure(),
        Some(Reason::BadOpcode)
    );
    assert_eq!(rig.nic.posted, posted);
    // A valid request goes out signaled, tagged so no ring claims its completion.
    assert_eq!(
        direct(&mut rig, &read(4, v, 8)),
        Ok(0),
        "posted on physical QP 0"
    );
    assert_eq!(rig.nic.execute(0, 1, false), 1);
    let (_, wc) = rig.nic.poll().expect("signaled: it completes on its own");
    assert_eq!(
        (wc.wr_id, wc.byte_len),
        (krcore_abi::engine::DIRECT_WR_ID, 8)
    );
    assert_eq!(rig.nic.qps[0].outstanding, 0);
    // While the ring path has a request outstanding the device is not idle.
    rig.push(0, &[read(5, v, 8)]);
    rig.submit(0, 1).unwrap();
    assert_eq!(
        direct(&mut rig, &read(6, v, 8)).unwrap_err().failure(),
        Some(Reason::Busy)
    );
}

static TRACED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn trace_connect(ring: u16, gid: &[u8; 16], service: u32, cqe: &Cqe) {
    TRACED
        .lock()
        .unwrap()
        .push(format!("connect r{ring} {} s{service} {}", gid[0], cqe.res));
}

fn trace_failure(ring: u16, cqe: &Cqe) {
    let why = cqe.failure().map(|r| r.name()).unwrap_or("?");
    TRACED
        .lock()
        .unwrap()
        .push(format!("failure r{ring} u{} {why}", cqe.user_data));
}

/// The counters the module shows (connects, failures by reason, overflows) and the
/// connect and failure points it logs come from the engine, per ring.
#[test]
fn counters_and_trace_points_see_every_outcome() {
    let mut rig = Rig::new(&[8, 8]);
    let r = rig.open(Limits::default());
    rig.ring(r).ring.set_trace(krcore_abi::engine::Trace {
        connect: trace_connect,
        failure: trace_failure,
    });
    let mut bad = Sqe::nop(3);
    bad.opcode = 200;
    let got = run_sync(
        &mut rig,
        r,
        &[
            Sqe::pair(1, [5; 16], 7, 7),
            Sqe::disconnect(2, 99),
            bad,
            Sqe::nop(4),
        ],
    );
    assert_eq!(got.len(), 4);
    let s = rig.ring(r).ring.stats();
    assert_eq!(s.connects, 1);
    assert_eq!(s.failed[Reason::BadVqp as usize], 1);
    assert_eq!(s.failed[Reason::BadOpcode as usize], 1);
    assert_eq!(
        (s.rings, s.taken, s.completed, s.failed_total()),
        (1, 4, 4, 2)
    );
    let traced = TRACED.lock().unwrap().clone();
    assert_eq!(
        traced,
        [
            format!("connect r{r} 5 s7 {}", got[0].res),
            "failure r0 u2 bad_vqp".to_string(),
            "failure r0 u3 bad_opcode".to_string(),
        ]
    );
}
