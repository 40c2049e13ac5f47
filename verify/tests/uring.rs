//! Entries io_uring carries (the engine's `uring`), on a fake NIC: each taken entry's CQE
//! is diverted to its command, never to the ring's CQ, at once or when its request
//! completes; what io_uring cannot carry fails by name; a ring that goes still answers
//! every command it took; a cancelled command is answered once, at once.

use krcore_abi::cqe::Reason;
use krcore_abi::engine::{Diverted, One};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::rig::{Limits, Rig};

const MR: u64 = 0x10_0000;
const LEN: u32 = 4096;
/// A command, as the kernel names it (its pointer).
const CMD: u64 = 0xffff_8880_0000_1000;

/// A rig with one ring, a virtual QP on its own node, and an MR exported to it and
/// imported: (rig, vqp, mr, rmr).
fn scene() -> (Rig, u32, u32, u32) {
    let mut rig = Rig::new(&[8, 8]);
    let r = rig.open(Limits::default());
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
    let mr = rig.run(r, &[Sqe::reg_mr(1, MR, LEN, access)])[0];
    let v = rig.run(r, &[Sqe::connect(2, [0; 16], 0)])[0].res as u32;
    let rmr = rig.run(r, &[Sqe::import_mr(3, v, MR, LEN, mr.aux)])[0];
    assert!(rmr.res >= 0, "{rmr:?}");
    (rig, v, mr.res as u32, rmr.res as u32)
}

#[test]
fn a_nop_is_answered_to_its_command_not_the_cq() {
    let (mut rig, ..) = scene();
    assert_eq!(rig.submit_one(0, &Sqe::nop(9), CMD), One::Taken);
    let d = rig.diverted(0);
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].sink, d[0].cqe.user_data, d[0].cqe.res), (CMD, 9, 0));
    assert!(
        rig.reap(0, usize::MAX).is_empty(),
        "nothing in the ring's CQ"
    );
}

#[test]
fn hand_back_keeps_its_callers_one_cqe_and_passes_the_rest_on() {
    let (mut rig, ..) = scene();
    let other = CMD + 0x100;
    for (ud, sink) in [(20, other), (21, CMD), (22, CMD), (23, other)] {
        assert_eq!(rig.submit_one(0, &Sqe::nop(ud), sink), One::Taken);
    }
    let bad = Sqe {
        vqp: 77,
        ..Sqe::one_sided(Opcode::Read, 24, 77, 0, MR, 8, 0, MR)
    };
    assert_eq!(rig.submit_one(0, &bad, other), One::Taken);
    let (h, passed) = rig.hand_back(0, CMD);
    // The kept command's first CQE; a second for it would complete a freed request.
    assert_eq!(h.kept.map(|c| c.user_data), Some(21));
    assert_eq!(h.dropped, 1);
    let sinks: Vec<u64> = passed.iter().map(|p| p.0).collect();
    assert_eq!(sinks, [other, other, other]);
    // As uring_result makes them: a failure's extra word is its reason.
    assert_eq!(passed[0].1, 0);
    assert!(passed[2].1 < 0, "{passed:?}");
    assert_eq!(passed[2].2, Reason::BadVqp as u64);
    assert!(rig.diverted(0).is_empty(), "all handed back");
    // With nothing to keep (the ring's close), every CQE is passed on.
    assert_eq!(rig.submit_one(0, &Sqe::nop(25), CMD), One::Taken);
    let (h, passed) = rig.hand_back(0, 0);
    assert_eq!((h.kept, h.dropped, passed.len()), (None, 0, 1));
}

#[test]
fn a_read_is_answered_when_it_completes() {
    let (mut rig, v, mr, rmr) = scene();
    let read = Sqe::one_sided(Opcode::Read, 10, v, mr, MR, 8, rmr, MR + 64);
    assert_eq!(rig.submit_one(0, &read, CMD), One::Taken);
    assert!(rig.diverted(0).is_empty(), "in flight");
    rig.drain();
    let d = rig.diverted(0);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].sink, d[0].cqe.user_data, d[0].cqe.res), (CMD, 10, 8));
    assert!(
        rig.reap(0, usize::MAX).is_empty(),
        "nothing in the ring's CQ"
    );
    // The ring's own entries still complete to its CQ, beside the command's.
    let c = rig.run(0, &[Sqe::nop(11)]);
    assert_eq!(c.len(), 1);
}

#[test]
fn what_io_uring_cannot_carry_fails_by_name() {
    let (mut rig, v, mr, _) = scene();
    let recv = Sqe::two_sided(Opcode::Recv, 20, v, mr, MR, 64);
    let entries = [
        recv,
        Sqe::listen(21, 77),
        Sqe::reg_mr(22, MR, LEN, MrAccess::LOCAL_WRITE),
    ];
    for e in entries {
        assert_eq!(rig.submit_one(0, &e, CMD), One::Taken);
    }
    let d: Vec<_> = rig
        .diverted(0)
        .iter()
        .map(|d| (d.cqe.user_data, d.cqe.failure()))
        .collect();
    let not = Some(Reason::NotThroughUring);
    assert_eq!(d, vec![(20, not), (21, not), (22, not)]);
}

#[test]
fn a_bad_entry_fails_to_its_command() {
    let (mut rig, v, mr, rmr) = scene();
    let past = Sqe::one_sided(Opcode::Read, 30, v, mr, MR, 8, rmr, MR + LEN as u64);
    assert_eq!(rig.submit_one(0, &past, CMD), One::Taken);
    let d = rig.diverted(0);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].cqe.failure(), Some(Reason::RemoteRange));
}

#[test]
fn a_ring_closed_with_commands_in_flight_answers_each() {
    let (mut rig, v, mr, rmr) = scene();
    for i in 0..3 {
        let read = Sqe::one_sided(Opcode::Read, 40 + i, v, mr, MR, 8, rmr, MR);
        assert_eq!(rig.submit_one(0, &read, CMD + i), One::Taken);
    }
    rig.abandon(0);
    let mut d: Vec<Diverted> = rig.diverted(0);
    d.sort_by_key(|d| d.sink);
    let got: Vec<_> = d.iter().map(|d| (d.sink, d.cqe.failure())).collect();
    let closed = Some(Reason::RingClosed);
    assert_eq!(
        got,
        vec![(CMD, closed), (CMD + 1, closed), (CMD + 2, closed)]
    );
}

#[test]
fn a_carried_unlisten_answers_its_command_once_and_the_listen_in_the_cq() {
    let (mut rig, ..) = scene();
    let l = rig.run(0, &[Sqe::listen(50, 77)]);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(rig.submit_one(0, &Sqe::unlisten(51, 77), CMD), One::Taken);
    let d = rig.diverted(0);
    assert_eq!(d.len(), 1, "one CQE for the command: {d:?}");
    assert_eq!((d[0].cqe.user_data, d[0].cqe.res), (51, 0));
    let c = rig.reap(0, usize::MAX);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].user_data, c[0].failure()),
        (50, Some(Reason::Cancelled))
    );
}

#[test]
fn a_command_cancelled_in_flight_is_answered_at_once_and_its_request_later_dropped() {
    let (mut rig, v, mr, rmr) = scene();
    let read = Sqe::one_sided(Opcode::Read, 60, v, mr, MR, 8, rmr, MR + 64);
    assert_eq!(rig.submit_one(0, &read, CMD), One::Taken);
    let c = rig.cancel(0, CMD).expect("in flight: owed a CQE");
    assert_eq!((c.user_data, c.failure()), (60, Some(Reason::Cancelled)));
    assert_eq!(rig.cancel(0, CMD), None, "answered once");
    // The READ still ends on the wire; its CQE has no command left to go to.
    rig.drain();
    assert!(
        rig.diverted(0).is_empty(),
        "a second CQE for the cancelled command"
    );
    assert!(
        rig.reap(0, usize::MAX).is_empty(),
        "nothing in the ring's CQ"
    );
    // Its slot was released with it: the same command number is a new command.
    assert_eq!(rig.submit_one(0, &read, CMD), One::Taken);
    rig.drain();
    let d = rig.diverted(0);
    assert_eq!((d.len(), d[0].cqe.res), (1, 8), "{d:?}");
}

#[test]
fn a_command_cancelled_before_its_hand_back_takes_its_own_cqe() {
    let (mut rig, ..) = scene();
    let other = CMD + 0x100;
    assert_eq!(rig.submit_one(0, &Sqe::nop(70), other), One::Taken);
    assert_eq!(rig.submit_one(0, &Sqe::nop(71), CMD), One::Taken);
    let c = rig.cancel(0, CMD).expect("its CQE is still here");
    assert_eq!((c.user_data, c.res), (71, 0));
    let (_, passed) = rig.hand_back(0, 0);
    assert_eq!(
        passed.iter().map(|p| p.0).collect::<Vec<_>>(),
        [other],
        "the other's only"
    );
    // Handed back: its completion is on its way, and a cancel owes nothing.
    assert_eq!(rig.cancel(0, other), None);
    assert_eq!(rig.cancel(0, 0), None, "the ring's CQ is no command");
}

#[test]
fn a_cancelled_connect_that_is_accepted_later_lets_its_virtual_qp_go() {
    let mut rig = Rig::new(&[8, 8]);
    let (client, server) = (rig.open(Limits::default()), rig.open(Limits::default()));
    assert_eq!(
        rig.submit_one(client, &Sqe::connect(80, [0; 16], 7000), CMD),
        One::Taken
    );
    assert!(rig.diverted(client).is_empty(), "waiting for a listen");
    let held = rig.ring(client).ring.tables.vqps.len();
    assert_eq!(held, 1, "bound while it waits");
    let c = rig.cancel(client, CMD).expect("in flight");
    assert_eq!(c.failure(), Some(Reason::Cancelled));
    // The listen comes and takes it: the CONNECT succeeds with nobody to tell.
    let l = rig.run(server, &[Sqe::listen(81, 7000)]);
    rig.drain();
    let accepted = rig.reap(server, usize::MAX);
    assert!(
        l.iter().chain(&accepted).any(|c| c.res > 0),
        "the listen took it: {l:?} {accepted:?}"
    );
    assert!(
        rig.diverted(client).is_empty(),
        "a second CQE for the cancelled command"
    );
    // The client's next call releases the virtual QP no handle of which was ever given.
    assert_eq!(rig.run(client, &[Sqe::nop(82)]).len(), 1);
    assert_eq!(
        rig.ring(client).ring.tables.vqps.len(),
        0,
        "the virtual QP was kept"
    );
}
