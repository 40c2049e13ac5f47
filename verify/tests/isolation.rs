//! Isolation between rings on a fake NIC. Remote memory is reachable only where its
//! owner allowed it (the engine's `export` module): a second ring armed with the
//! victim's address, its real rkey, every rkey variant a NIC could have issued, and
//! random guesses gets nothing onto the wire; a revoked export stops its importers at
//! once; rights are enforced per operation. Only the ring's owner pins memory
//! (`register`). A ring whose requests break a shared QP is throttled (`blame`), the
//! other rings on it are not.

use krcore_abi::cqe::{Cqe, Reason};
use krcore_abi::engine::{Caller, Context};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use proptest::collection::vec;
use proptest::prelude::*;
use verify::rig::{Limits, Rig};

const VICTIM_MR: u64 = 0x10_0000;
const ATTACKER_MR: u64 = 0x20_0000;
const LEN: u32 = 4096;

fn one(rig: &mut Rig, r: usize, sqe: Sqe) -> Cqe {
    let c = rig.run(r, &[sqe]);
    assert_eq!(c.len(), 1, "{c:?}");
    c[0]
}

/// A victim ring exporting `access`, an attacker ring with a virtual QP and a local MR.
/// Returns (victim MR handle, descriptor, rkey the NIC issued, attacker vqp, attacker MR).
fn scene(rig: &mut Rig, access: MrAccess) -> (u32, u64, u32, u32, u32) {
    let (victim, attacker) = (rig.open(Limits::default()), rig.open(Limits::default()));
    assert_eq!((victim, attacker), (0, 1));
    let c = one(rig, victim, Sqe::reg_mr(1, VICTIM_MR, LEN, access));
    assert!(
        c.res > 0 && c.aux != 0,
        "an export needs a descriptor: {c:?}"
    );
    // The fake NIC issues rkey = lkey | 2^31, lkeys counting from 1.
    let issued_rkey = 1 | 0x8000_0000;
    let v = one(rig, attacker, Sqe::connect(2, [0; 16], 0)).res as u32;
    let mr = one(
        rig,
        attacker,
        Sqe::reg_mr(3, ATTACKER_MR, LEN, MrAccess::LOCAL_WRITE),
    );
    assert_eq!(mr.aux, 0, "no remote right, no export");
    (c.res as u32, c.aux, issued_rkey, v, mr.res as u32)
}

/// Imports the victim's range through `v` with every descriptor in `guesses` but the
/// real one: each must fail `BadDescriptor`.
fn guess(rig: &mut Rig, v: u32, descriptor: u64, guesses: &[u64]) {
    for (i, &g) in guesses.iter().enumerate() {
        if g == descriptor {
            continue;
        }
        let c = one(rig, 1, Sqe::import_mr(i as u64, v, VICTIM_MR, LEN, g));
        assert_eq!(
            c.failure(),
            Some(Reason::BadDescriptor),
            "guess {g:#x}: {c:?}"
        );
    }
    assert!(rig.nic.wire_rkeys.is_empty(), "an rkey reached the wire");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random descriptors import nothing.
    #[test]
    fn random_descriptors_reach_nothing(guesses in vec(any::<u64>(), 1..64)) {
        let mut rig = Rig::new(&[16, 16]);
        let (_, descriptor, _, v, _) = scene(&mut rig, MrAccess::REMOTE_READ | MrAccess::LOCAL_WRITE);
        guess(&mut rig, v, descriptor, &guesses);
    }
}

#[test]
fn guessed_and_forged_descriptors_reach_nothing() {
    let mut rig = Rig::new(&[16, 16]);
    let all = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_ATOMIC;
    let (_, descriptor, rkey, v, _) = scene(&mut rig, all);
    // The victim's rkey and its 256 key-byte variants, as an rxe rkey could have been;
    // neighbours of the real descriptor (random guesses: the proptest below).
    let guesses: Vec<u64> = (0..256u64)
        .map(|k| ((rkey as u64) & !0xff) | k)
        .chain([
            rkey as u64,
            0,
            descriptor ^ 1,
            descriptor + 1,
            descriptor - 1,
        ])
        .collect();
    guess(&mut rig, v, descriptor, &guesses);
    // The old ABI's rkey field is not read by IMPORT_MR: nonzero, it is rejected.
    let mut forged = Sqe::import_mr(9, v, VICTIM_MR, LEN, 0);
    forged.rmr = rkey;
    assert_eq!(
        one(&mut rig, 1, forged).failure(),
        Some(Reason::ReservedNonzero)
    );
    // READ/WRITE/atomics with remote handles that were never imported.
    for h in [0u32, 1, 0x0100_0000, 0x0100_0001, rkey] {
        let c = one(
            &mut rig,
            1,
            Sqe::one_sided(
                Opcode::Write,
                1,
                v,
                0x0100_0000,
                ATTACKER_MR,
                8,
                h,
                VICTIM_MR,
            ),
        );
        assert!(c.res < 0, "{c:?}");
    }
    assert!(
        rig.nic.wire_rkeys.is_empty(),
        "an rkey reached the wire: {:?}",
        rig.nic.wire_rkeys
    );
}

#[test]
fn an_export_is_usable_until_revoked_and_only_with_its_rights() {
    let mut rig = Rig::new(&[16, 16]);
    let read_only = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (victim_mr, descriptor, rkey, v, mr) = scene(&mut rig, read_only);
    // Beyond the exported range.
    let c = one(
        &mut rig,
        1,
        Sqe::import_mr(1, v, VICTIM_MR, LEN + 8, descriptor),
    );
    assert_eq!(c.failure(), Some(Reason::RemoteRange));
    let rmr = one(
        &mut rig,
        1,
        Sqe::import_mr(2, v, VICTIM_MR + 64, 64, descriptor),
    );
    assert!(rmr.res > 0, "{rmr:?}");
    let rmr = rmr.res as u32;
    let op = |o, ud| Sqe::one_sided(o, ud, v, mr, ATTACKER_MR, 8, rmr, VICTIM_MR + 64);
    assert_eq!(one(&mut rig, 1, op(Opcode::Read, 3)).res, 8);
    assert_eq!(rig.nic.wire_rkeys, [rkey], "the export's rkey, and only it");
    for (o, ud) in [(Opcode::Write, 4), (Opcode::WriteImm, 5)] {
        assert_eq!(
            one(&mut rig, 1, op(o, ud)).failure(),
            Some(Reason::MrAccess)
        );
    }
    let faa = Sqe::faa(6, v, mr, ATTACKER_MR, rmr, VICTIM_MR + 64, 1);
    assert_eq!(one(&mut rig, 1, faa).failure(), Some(Reason::MrAccess));
    // The owner deregisters: the import stops at once, before the wire.
    assert_eq!(one(&mut rig, 0, Sqe::dereg_mr(7, victim_mr)).res, 0);
    assert_eq!(
        one(&mut rig, 1, op(Opcode::Read, 8)).failure(),
        Some(Reason::BadDescriptor)
    );
    let again = Sqe::import_mr(9, v, VICTIM_MR, LEN, descriptor);
    assert_eq!(
        one(&mut rig, 1, again).failure(),
        Some(Reason::BadDescriptor)
    );
    assert_eq!(rig.nic.wire_rkeys.len(), 1, "nothing more reached the wire");
}

/// One-sided requests through an import take no device-wide lock: none of the exports'
/// while nothing is revoked; after a revocation anywhere on the device, one each to
/// resolve their export again, then none. A request on a revoked export still fails at
/// once.
#[test]
fn imports_resolve_again_only_after_a_revocation() {
    let mut rig = Rig::new(&[16, 16]);
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (victim_mr, descriptor, _, v, mr) = scene(&mut rig, access);
    let rmr = one(
        &mut rig,
        1,
        Sqe::import_mr(1, v, VICTIM_MR, LEN, descriptor),
    )
    .res as u32;
    let read = |ud| Sqe::one_sided(Opcode::Read, ud, v, mr, ATTACKER_MR, 8, rmr, VICTIM_MR);
    let sections = |rig: &Rig| rig.kernel.exports_sections.get();
    let before = sections(&rig);
    for ud in 10..20 {
        assert_eq!(one(&mut rig, 1, read(ud)).res, 8);
    }
    assert_eq!(sections(&rig), before, "READs took the exports' lock");
    // Another export, revoked: the epoch moves, imports resolve once more.
    let other = one(
        &mut rig,
        0,
        Sqe::reg_mr(2, VICTIM_MR + 0x10_000, LEN, access),
    );
    assert_eq!(one(&mut rig, 0, Sqe::dereg_mr(3, other.res as u32)).res, 0);
    let revoked = sections(&rig);
    for ud in 20..30 {
        assert_eq!(one(&mut rig, 1, read(ud)).res, 8);
    }
    assert_eq!(
        sections(&rig),
        revoked + 1,
        "resolved again once, then cached"
    );
    // Its own export revoked: the next READ fails, before the wire.
    assert_eq!(one(&mut rig, 0, Sqe::dereg_mr(4, victim_mr)).res, 0);
    let wire = rig.nic.wire_rkeys.len();
    assert_eq!(
        one(&mut rig, 1, read(30)).failure(),
        Some(Reason::BadDescriptor)
    );
    assert_eq!(rig.nic.wire_rkeys.len(), wire);
}

#[test]
fn closing_the_owner_revokes_its_exports() {
    let mut rig = Rig::new(&[16, 16]);
    let (_, descriptor, _, v, mr) = scene(&mut rig, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ);
    let rmr = one(
        &mut rig,
        1,
        Sqe::import_mr(1, v, VICTIM_MR, LEN, descriptor),
    )
    .res as u32;
    rig.close(0);
    let read = Sqe::one_sided(Opcode::Read, 2, v, mr, ATTACKER_MR, 8, rmr, VICTIM_MR);
    assert_eq!(
        one(&mut rig, 1, read).failure(),
        Some(Reason::BadDescriptor)
    );
    assert!(rig.nic.wire_rkeys.is_empty());
    assert!(rig.exports.is_empty(), "the closed ring's exports are gone");
}

#[test]
fn only_the_owner_pins_memory() {
    let mut rig = Rig::new(&[16]);
    let r = rig.open(Limits::default());
    rig.push(
        r,
        &[
            Sqe::reg_mr(1, VICTIM_MR, LEN, MrAccess::LOCAL_WRITE),
            Sqe::nop(2),
        ],
    );
    rig.submit_as(
        r,
        64,
        Context {
            caller: Caller::Other,
            now_ms: 0,
        },
    )
    .unwrap();
    let c = rig.reap(r, 8);
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(c[0].failure(), Some(Reason::NotOwner));
    assert_eq!(c[1].res, 0, "the entries after it proceed");
    assert!(rig.nic.live_mrs.is_empty(), "nothing was pinned");
    let c = one(
        &mut rig,
        r,
        Sqe::reg_mr(3, VICTIM_MR, LEN, MrAccess::LOCAL_WRITE),
    );
    assert!(c.res > 0, "the owner may: {c:?}");
}

#[test]
fn the_ring_that_breaks_a_pair_is_throttled_not_its_neighbours() {
    let mut rig = Rig::new(&[16]);
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let (_, descriptor, _, v_bad, mr_bad) = scene(&mut rig, access);
    let rmr_bad = one(
        &mut rig,
        1,
        Sqe::import_mr(1, v_bad, VICTIM_MR, LEN, descriptor),
    )
    .res as u32;
    let v_good = one(&mut rig, 0, Sqe::connect(2, [0; 16], 0)).res as u32;
    let mr_good = one(
        &mut rig,
        0,
        Sqe::reg_mr(3, ATTACKER_MR, LEN, MrAccess::LOCAL_WRITE),
    )
    .res as u32;
    let rmr_good = one(
        &mut rig,
        0,
        Sqe::import_mr(4, v_good, VICTIM_MR, LEN, descriptor),
    )
    .res as u32;
    let read =
        |ud, v, mr, rmr| Sqe::one_sided(Opcode::Read, ud, v, mr, ATTACKER_MR, 8, rmr, VICTIM_MR);
    // Ring 1's READ fails on the wire (the NIC injects a remote access error).
    rig.now_ms = 1000;
    rig.push(1, &[read(5, v_bad, mr_bad, rmr_bad)]);
    rig.submit(1, 64).unwrap();
    rig.nic.execute(0, 1, true);
    rig.drain();
    let c = rig.reap(1, 8);
    assert_eq!(c[0].failure(), Some(Reason::RemoteError), "{c:?}");
    assert_eq!(rig.rings[1].as_ref().unwrap().ring.strikes(), 1);
    assert_eq!(rig.rings[0].as_ref().unwrap().ring.strikes(), 0);
    // Within its backoff ring 1 is refused; ring 0, on the same QP, is not.
    rig.now_ms = 1100;
    for (r, v, mr, rmr) in [(1, v_bad, mr_bad, rmr_bad), (0, v_good, mr_good, rmr_good)] {
        rig.push(r, &[read(6, v, mr, rmr), Sqe::nop(7)]);
    }
    rig.drain();
    let by_ud = |cqes: Vec<Cqe>, ud| cqes.into_iter().find(|c| c.user_data == ud).unwrap();
    let (bad, good) = (rig.reap(1, 8), rig.reap(0, 8));
    assert_eq!(
        by_ud(bad.clone(), 6).failure(),
        Some(Reason::Throttled),
        "{bad:?}"
    );
    assert_eq!(by_ud(bad, 7).res, 0, "control entries still run");
    assert_eq!(by_ud(good, 6).res, 8, "the neighbour is not throttled");
    // After the backoff it may try again.
    rig.now_ms = 1000 + krcore_abi::engine::BACKOFF_BASE_MS + 1;
    rig.push(1, &[read(8, v_bad, mr_bad, rmr_bad)]);
    rig.drain();
    assert_eq!(rig.reap(1, 8)[0].res, 8);
}
