//! The engine fuzzing program: arbitrary bytes drive rings on the fake NIC. Entries are
//! raw bytes or valid templates with bytes overwritten (PUBLISH and IMPORT_NAME among
//! them, half the programs with a MetaServer); indices are scribbled as a hostile
//! application would. The engine must never panic, never post past a queue's
//! depth (the fake NIC asserts it), return every credit at quiescence, and release
//! every MR and connection once its rings are closed.
//!
//! `fuzz/fuzz_targets/engine.rs` runs it under libFuzzer; a test runs it over seeded
//! random inputs so `cargo test` covers it too.

use std::cell::RefCell;
use std::sync::atomic::Ordering;

use krcore_abi::engine::DEFAULT_DEADLINE_MS;
use krcore_abi::meta::record::{name, name_words};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use zerocopy::{FromBytes, IntoBytes};

use crate::fuzzinput::Input;
use crate::meta::{FakeMeta, ROOT_ONLY};
use crate::rig::{Limits, Rig};

const MR: u64 = 0x10_0000;

/// Handles a ring's setup produced, for valid templates.
struct Handles {
    vqp: u32,
    mr: u32,
    rmr: u32,
}

fn setup(rig: &mut Rig, r: usize) -> Handles {
    let access = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    rig.push(
        r,
        &[
            Sqe::pair(1, [1; 16], 1, 1),
            Sqe::reg_mr(2, MR, 4096, access),
        ],
    );
    rig.drain();
    let c = rig.reap(r, 2);
    let (vqp, mr) = (c[0].res as u32, c[1].res as u32);
    rig.push(r, &[Sqe::import_mr(3, vqp, MR, 4096, c[1].aux)]);
    rig.drain();
    let rmr = rig.reap(r, 1)[0].res as u32;
    Handles { vqp, mr, rmr }
}

fn template(h: &Handles, k: u8) -> Sqe {
    let (v, m, r) = (h.vqp, h.mr, h.rmr);
    let words = |n: &str| name_words(&name(n).expect("a name"));
    match k % 11 {
        8 => Sqe::publish(8, m, words("f"), 0o640),
        9 => Sqe::import_name(9, v, words("f"), 0, None),
        10 => Sqe::import_name(10, v, words("kv"), 64, Some(0)),
        0 => Sqe::nop(0),
        1 => Sqe::one_sided(Opcode::Read, 1, v, m, MR, 64, r, MR),
        2 => Sqe::one_sided(Opcode::Write, 2, v, m, MR + 8, 8, r, MR + 64),
        3 => Sqe::one_sided(Opcode::WriteImm, 3, v, m, MR, 16, r, MR).with_imm(9),
        4 => Sqe::two_sided(Opcode::Send, 4, v, m, MR, 32),
        5 => Sqe::cas(5, v, m, MR, r, MR + 8, 0, 1),
        6 => Sqe::faa(6, v, m, MR + 16, r, MR + 24, 3),
        _ => Sqe::two_sided(Opcode::Recv, 7, v, m, MR, 128),
    }
}

/// Runs one program. Panics when the engine breaks a promise.
pub fn run(data: &[u8]) {
    let mut inp = Input(data);
    let nqps = 1 + inp.byte() as usize % 3;
    let depths: Vec<u32> = (0..nqps).map(|_| 1 + inp.byte() as u32 % 16).collect();
    let mut rig = Rig::new(&depths);
    // Half the programs run with a MetaServer (another node published "kv").
    if inp.byte() % 2 == 0 {
        let mut meta = FakeMeta::new([192, 0, 2, 11]);
        meta.other_node_publishes([192, 0, 2, 12], "kv", MR, 4096, 0x4242, ROOT_ONLY);
        rig.kernel.meta = Some(RefCell::new(meta));
    }
    let nrings = 1 + inp.byte() as usize % 3;
    let mut handles = Vec::new();
    for r in 0..nrings {
        let l = Limits {
            sq: 1 << (1 + inp.byte() % 4),
            cq: 1 << (1 + inp.byte() % 4),
            vqps: 2,
            mrs: 2,
            inflight: 1 + inp.byte() as usize % 8,
        };
        rig.open(l);
        handles.push(setup(&mut rig, r));
    }
    let mut closed = vec![false; nrings];
    while !inp.done() {
        let op = inp.byte() % 10;
        let r = inp.byte() as usize % nrings;
        if closed[r] && !matches!(op, 3 | 4 | 9) {
            continue;
        }
        match op {
            0 => {
                let raw = inp.bytes(64);
                let mut b = [0u8; 64];
                b[..raw.len()].copy_from_slice(raw);
                let sqe = Sqe::read_from_bytes(&b).expect("64 bytes");
                rig.push(r, &[sqe]);
            }
            1 => {
                let mut sqe = template(&handles[r], inp.byte());
                for _ in 0..inp.byte() % 4 {
                    let off = inp.byte() as usize % 64;
                    sqe.as_mut_bytes()[off] = inp.byte();
                }
                rig.push(r, &[sqe]);
            }
            2 => {
                let _ = rig.submit(r, inp.byte() as u32);
            }
            3 => {
                let qp = inp.byte() as u32 % nqps as u32;
                let n = inp.byte() as usize % 8;
                let fail = inp.byte() % 16 == 0;
                rig.nic.execute(qp, n, fail);
            }
            4 => {
                rig.route();
                rig.recycle_failed();
            }
            5 => {
                rig.reap(r, inp.byte() as usize);
            }
            6 => {
                let v = inp.u32();
                rig.ring(r).sq_mem.raw().1.store(v, Ordering::Release);
            }
            7 => {
                let v = inp.u32();
                rig.ring(r).cq_mem.raw().0.store(v, Ordering::Release);
            }
            8 => {
                closed[r] = true;
                rig.close(r);
            }
            _ => {
                // Time passes (waiting sends expire), and a post may fail.
                rig.now_ms += inp.byte() as i64 * 50;
                rig.nic.fail_next_post = Some(inp.byte() as usize % 3);
            }
        }
    }
    rig.nic.fail_next_post = None;
    // Past every deadline, until no send waits (a drain may take more sends, as
    // completions free in-flight slots): sends no receive took fail.
    rig.drain();
    for _ in 0..100 {
        if rig.messages.waiting() == 0 {
            break;
        }
        rig.now_ms += DEFAULT_DEADLINE_MS + 1;
        rig.drain();
    }
    for (i, q) in rig.qps.iter().enumerate() {
        if q.outstanding() != 0 {
            eprintln!(
                "QP {i}: engine {} posted {} failed {} nic {:?}",
                q.outstanding(),
                q.posted(),
                q.failed(),
                rig.nic.qps[i]
            );
        }
        assert_eq!(q.outstanding(), 0, "QP {i} credits leaked");
    }
    assert_eq!(rig.messages.waiting(), 0, "sends left waiting");
    // Receives no message took are cancelled by the close.
    #[allow(clippy::needless_range_loop)] // r also names the ring to the rig
    for r in 0..nrings {
        if !closed[r] {
            rig.close(r);
        }
    }
    rig.drain();
    assert!(
        rig.rings.iter().all(|r| r.is_none()),
        "a closed ring was never released"
    );
    assert!(rig.nic.live_mrs.is_empty(), "MRs left registered");
    assert!(
        rig.nic.qps.iter().all(|q| q.bound == 0),
        "connections left bound"
    );
    assert_eq!(
        (rig.messages.links(), rig.messages.recvs()),
        (0, 0),
        "links or receives left"
    );
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::fuzzinput::smoke_cases()))]

        /// Random bytes as a fuzz program: the engine keeps every promise (shrunk to
        /// the shortest failing program when it does not).
        #[test]
        fn random_programs(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::run(&data);
        }
    }

    /// Inputs libFuzzer found (verify/fuzz-regressions/), kept as regressions.
    #[test]
    fn found_by_the_fuzzer() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz-regressions");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("the regressions directory") {
            let path = e.expect("a directory entry").path();
            let data = std::fs::read(&path).expect("a regression input");
            if let Err(e) = std::panic::catch_unwind(|| super::run(&data)) {
                eprintln!("failing regression {}", path.display());
                std::panic::resume_unwind(e);
            }
            n += 1;
        }
        assert!(n > 0, "no regression inputs in {dir}");
    }
}
