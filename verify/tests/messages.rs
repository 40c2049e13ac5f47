//! Two-sided messages on a fake NIC (the engine's `message` module): virtual QPs that
//! share physical QPs each get exactly the messages sent to them, in order; a SEND waits
//! for its peer's receive, and fails by name (never breaking the shared QP) when none
//! comes, when the peer left, or when it does not fit.

use krcore_abi::cluster::notice::{Notice, NO_LINK};
use krcore_abi::cqe::{Cqe, CqeFlags, Reason};
use krcore_abi::engine::{accept_aux, port_key, shard_of, DEFAULT_DEADLINE_MS};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::rig::{Limits, Rig, SHARDS};

const MR: u64 = 0x10_0000;
const LEN: u32 = 4096;

/// One endpoint: a ring with a virtual QP paired on port `service` with the end on
/// that node that names it back, and a writable MR.
struct End {
    ring: usize,
    vqp: u32,
    mr: u32,
}

fn end(rig: &mut Rig, service: u32) -> End {
    end_at(rig, [0; 16], service)
}

/// One endpoint paired on port `service` with the node of `gid`.
fn end_at(rig: &mut Rig, gid: [u8; 16], service: u32) -> End {
    let ring = rig.open(Limits::default());
    let c = rig.run(
        ring,
        &[
            Sqe::pair(1, gid, service as u16, service as u16),
            Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE),
        ],
    );
    assert!(c.iter().all(|c| c.res > 0), "{c:?}");
    End {
        ring,
        vqp: c[0].res as u32,
        mr: c[1].res as u32,
    }
}

fn recv(e: &End, ud: u64, len: u32) -> Sqe {
    Sqe::two_sided(Opcode::Recv, ud, e.vqp, e.mr, MR + 64 * ud, len)
}

fn send(e: &End, ud: u64, len: u32, imm: u32) -> Sqe {
    Sqe::two_sided(Opcode::SendImm, ud, e.vqp, e.mr, MR, len).with_imm(imm)
}

#[test]
fn messages_reach_only_their_addressee() {
    // Two pairs on one physical pair: services 1 and 3, their links' ends on QPs 0 and
    // 1 in both orders, so every receive of either pair sits behind the same QPs.
    let mut rig = Rig::new(&[16, 16]);
    let (a1, a2) = (end(&mut rig, 1), end(&mut rig, 3));
    let (b1, b2) = (end(&mut rig, 1), end(&mut rig, 3));
    let qp = |rig: &Rig, e: &End| {
        rig.rings[e.ring]
            .as_ref()
            .unwrap()
            .ring
            .tables
            .vqps
            .get(e.vqp)
            .unwrap()
            .qp
    };
    assert_ne!(qp(&rig, &a1), qp(&rig, &a2), "the pairs cross the same QPs");
    assert_eq!(
        (qp(&rig, &a1), qp(&rig, &a2)),
        (qp(&rig, &b2), qp(&rig, &b1))
    );
    let n = 8u64;
    for (b, _) in [(&b1, 1), (&b2, 2)] {
        let rs: Vec<Sqe> = (1..=n).map(|i| recv(b, i, 64)).collect();
        assert!(rig.run(b.ring, &rs).is_empty(), "receives wait");
    }
    // Interleaved: A2 sends first, then A1, alternating, each its own numbers.
    for i in 1..=n {
        for (a, who) in [(&a2, 2u32), (&a1, 1)] {
            let c = rig.run(a.ring, &[send(a, i, 8 + i as u32, who * 100 + i as u32)]);
            assert_eq!((c.len(), c[0].res), (1, 8 + i as i32), "{c:?}");
        }
    }
    for (b, who) in [(&b1, 1u32), (&b2, 2)] {
        let c = rig.reap(b.ring, usize::MAX);
        let got: Vec<(u64, i32, u64)> = c.iter().map(|c| (c.user_data, c.res, c.aux)).collect();
        let want: Vec<(u64, i32, u64)> = (1..=n)
            .map(|i| (i, 8 + i as i32, (who * 100 + i as u32) as u64))
            .collect();
        assert_eq!(got, want, "pair {who}: its own messages, in order");
        assert!(c.iter().all(|c| c.flags & CqeFlags::IMM.bits() != 0));
    }
    assert!(
        rig.nic
            .delivery_mrs
            .iter()
            .all(|k| rig.nic.writable_mrs.contains(k)),
        "deliveries land only in receive buffers"
    );
    assert!(rig.nic.wire_rkeys.is_empty(), "no one-sided rkey was used");
}

#[test]
fn a_send_waits_for_the_receive_then_both_complete() {
    let mut rig = Rig::new(&[4, 4]);
    let (a, b) = (end(&mut rig, 5), end(&mut rig, 5));
    assert!(rig.run(a.ring, &[send(&a, 1, 16, 7)]).is_empty());
    assert_eq!(
        rig.qps[0].outstanding() + rig.qps[1].outstanding(),
        1,
        "it holds a credit"
    );
    rig.now_ms += DEFAULT_DEADLINE_MS / 2;
    let c = rig.run(b.ring, &[recv(&b, 2, 64)]);
    assert_eq!((c[0].user_data, c[0].res, c[0].aux), (2, 16, 7));
    let c = rig.reap(a.ring, 8);
    assert_eq!((c[0].user_data, c[0].res), (1, 16));
    assert_eq!(rig.qps[0].outstanding() + rig.qps[1].outstanding(), 0);
}

#[test]
fn no_receive_fails_the_send_at_the_deadline_and_breaks_nothing() {
    let mut rig = Rig::new(&[4, 4]);
    let (a, _b) = (end(&mut rig, 5), end(&mut rig, 5));
    assert!(rig.run(a.ring, &[send(&a, 1, 16, 7)]).is_empty());
    rig.now_ms += DEFAULT_DEADLINE_MS;
    assert!(rig.run(a.ring, &[]).is_empty(), "not before the deadline");
    rig.now_ms += 1;
    rig.drain();
    let c = rig.reap(a.ring, 8);
    assert_eq!(c[0].failure(), Some(Reason::NoReceiver), "{c:?}");
    assert!(rig.qps.iter().all(|q| !q.failed() && q.outstanding() == 0));
    assert_eq!(rig.nic.posted, 0, "nothing reached the NIC");
}

#[test]
fn a_peer_that_leaves_fails_what_waits_for_it_and_is_never_replaced() {
    let mut rig = Rig::new(&[4, 4]);
    let (a, b) = (end(&mut rig, 5), end(&mut rig, 5));
    assert!(rig.run(a.ring, &[send(&a, 1, 16, 7)]).is_empty());
    let c = rig.run(b.ring, &[Sqe::disconnect(3, b.vqp)]);
    assert_eq!(c[0].failure(), None);
    let c = rig.reap(a.ring, 8);
    assert_eq!(
        c[0].failure(),
        Some(Reason::NoReceiver),
        "waiting: failed now"
    );
    // A newcomer on the same service opens a new link: it never gets A's messages.
    let newcomer = end(&mut rig, 5);
    assert!(rig.run(newcomer.ring, &[recv(&newcomer, 1, 64)]).is_empty());
    let c = rig.run(a.ring, &[send(&a, 2, 8, 8)]);
    assert_eq!(c[0].failure(), Some(Reason::NoReceiver), "at once");
    assert!(rig.reap(newcomer.ring, 8).is_empty());
}

#[test]
fn a_message_longer_than_the_receive_fails_both() {
    let mut rig = Rig::new(&[4, 4]);
    let (a, b) = (end(&mut rig, 5), end(&mut rig, 5));
    // Receive first, then send; and send first, then receive.
    assert!(rig.run(b.ring, &[recv(&b, 1, 8)]).is_empty());
    let c = rig.run(a.ring, &[send(&a, 1, 16, 0)]);
    assert_eq!(c[0].failure(), Some(Reason::TooLong));
    assert_eq!(rig.reap(b.ring, 8)[0].failure(), Some(Reason::TooLong));
    assert!(rig.run(a.ring, &[send(&a, 2, 16, 0)]).is_empty());
    let c = rig.run(b.ring, &[recv(&b, 2, 8)]);
    assert_eq!(c[0].failure(), Some(Reason::TooLong));
    assert_eq!(rig.reap(a.ring, 8)[0].failure(), Some(Reason::TooLong));
    assert!(rig.qps.iter().all(|q| !q.failed() && q.outstanding() == 0));
}

#[test]
fn closing_a_ring_reclaims_its_receives_without_breaking_the_qp() {
    let mut rig = Rig::new(&[4, 4]);
    let (a, b) = (end(&mut rig, 5), end(&mut rig, 5));
    assert!(rig
        .run(b.ring, &[recv(&b, 1, 64), recv(&b, 2, 64)])
        .is_empty());
    rig.close(b.ring);
    rig.drain();
    assert!(rig.rings[b.ring].is_none(), "released at once");
    assert_eq!(rig.messages.recvs(), 0);
    assert!(rig.qps.iter().all(|q| !q.failed()));
    let c = rig.run(a.ring, &[send(&a, 1, 8, 0)]);
    assert_eq!(c[0].failure(), Some(Reason::NoReceiver), "its peer left");
}

#[test]
fn a_write_imm_takes_the_next_receive_and_writes_elsewhere() {
    let mut rig = Rig::new(&[4, 4]);
    let (a, b) = (end(&mut rig, 5), end(&mut rig, 5));
    // B exports its MR; A imports it.
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE;
    let x = rig.run(b.ring, &[Sqe::reg_mr(9, MR + 8192, LEN, access)])[0];
    let rmr = rig.run(a.ring, &[Sqe::import_mr(3, a.vqp, MR + 8192, LEN, x.aux)])[0].res as u32;
    let write_imm =
        Sqe::one_sided(Opcode::WriteImm, 4, a.vqp, a.mr, MR, 32, rmr, MR + 8192).with_imm(77);
    assert!(
        rig.run(a.ring, &[write_imm]).is_empty(),
        "waits for a receive"
    );
    let c = rig.run(b.ring, &[recv(&b, 1, 8)]);
    assert_eq!(
        (c[0].res, c[0].aux),
        (32, 77),
        "length and immediate, even past the receive's size"
    );
    assert_eq!(rig.reap(a.ring, 8)[0].res, 32);
    assert_eq!(
        rig.nic.delivery_mrs.len(),
        0,
        "nothing written into the receive"
    );
    assert_eq!(rig.nic.wire_rkeys.len(), 1, "the export's rkey, once");
}

#[test]
fn both_ends_closing_in_either_order_release_everything() {
    for sender_first in [true, false] {
        let mut rig = Rig::new(&[4, 4]);
        let (a, b) = (end(&mut rig, 5), end(&mut rig, 5));
        assert!(rig.run(b.ring, &[recv(&b, 1, 64)]).is_empty());
        let order = if sender_first {
            [a.ring, b.ring]
        } else {
            [b.ring, a.ring]
        };
        for r in order {
            rig.close(r);
        }
        rig.drain();
        assert!(
            rig.rings.iter().all(|r| r.is_none()),
            "sender first: {sender_first}: a ring was never released"
        );
        assert_eq!((rig.messages.links(), rig.messages.recvs()), (0, 0));
    }
}

/// Messages take no device-wide lock: only their link's shard. Two pairs on services in
/// different shards exchange messages (each receive posted before its send, and each
/// send before its receive) with no membership section at all, and each pair's traffic
/// enters only its own shard.
#[test]
fn messages_take_only_their_links_shard() {
    let mut rig = Rig::new(&[16, 16]);
    let shard = |s: u32| shard_of(&[0; 16], port_key(s as u16, s as u16), SHARDS as u32) as usize;
    let (s1, s2) = (1, (2..).find(|&s| shard(s) != shard(1)).unwrap());
    let (a1, b1) = (end(&mut rig, s1), end(&mut rig, s1));
    let (a2, b2) = (end(&mut rig, s2), end(&mut rig, s2));
    let k = &rig.kernel;
    let members = k.members_sections.get();
    let shards =
        |rig: &Rig| -> Vec<u64> { rig.kernel.shard_sections.iter().map(|c| c.get()).collect() };
    let before = shards(&rig);
    for (a, b, traffic) in [(&a1, &b1, shard(s1)), (&a2, &b2, shard(s2))] {
        let at = shards(&rig);
        for i in 1..=4u64 {
            assert!(rig.run(b.ring, &[recv(b, i, 64)]).is_empty());
            let c = rig.run(a.ring, &[send(a, i, 8, i as u32)]);
            assert_eq!(c[0].res, 8, "{c:?}");
            assert_eq!(rig.reap(b.ring, 1)[0].res, 8);
            // The send first: it waits in the shard, the receive posts it.
            let c = rig.run(a.ring, &[send(a, 10 + i, 8, i as u32)]);
            assert!(c.is_empty(), "{c:?}");
            assert_eq!(rig.run(b.ring, &[recv(b, 10 + i, 64)])[0].res, 8);
            assert_eq!(rig.reap(a.ring, 1)[0].res, 8);
        }
        let after = shards(&rig);
        for j in 0..SHARDS {
            assert_eq!(
                after[j] > at[j],
                j == traffic,
                "shard {j} entered by service {}'s messages: {at:?} -> {after:?}",
                if traffic == shard(s1) { s1 } else { s2 }
            );
        }
    }
    assert_eq!(
        rig.kernel.members_sections.get(),
        members,
        "messages took the membership lock"
    );
    assert!(shards(&rig) != before);
}

/// A virtual QP bound to a QP to another node gets a link across nodes (engine's
/// `far`): a four-tuple, so a second CONNECT that pairs the same ports is refused; with no peer end yet, a RECV waits (not advertised) and a SEND waits for an
/// advert, putting no request on the wire.
#[test]
fn virtual_qps_on_a_peer_set_get_one_link_per_service() {
    let mut rig = Rig::new(&[16, 16]);
    let remote = [0xfe; 16];
    rig.nic.remote = Some(remote);
    let first = end_at(&mut rig, remote, 5);
    let ring = rig.open(Limits::default());
    let c = rig.run(ring, &[Sqe::pair(1, remote, 5, 5)]);
    assert_eq!(c[0].failure(), Some(Reason::ServiceTaken), "{c:?}");
    assert_eq!(rig.messages.links(), 1, "one link for the service");
    let posted = rig.nic.posted;
    assert!(
        rig.run(first.ring, &[recv(&first, 1, 64)]).is_empty(),
        "the RECV waits"
    );
    assert!(
        rig.run(first.ring, &[send(&first, 2, 8, 7)]).is_empty(),
        "so does the SEND"
    );
    assert_eq!(rig.nic.posted, posted, "no request reached the wire");
    assert_eq!(rig.nic.qps[0].bound, 1);
}

/// The peer node of the listening tests, and a Hello from its end `from` for `service`.
const PEER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 12];

fn hello(service: u16, from: u64) -> Notice {
    Notice::Hello {
        to_port: service,
        from_port: PEER_PORT,
        from,
        to: NO_LINK,
        pair: false,
    }
}

/// The peer's port its CONNECTs come from.
const PEER_PORT: u16 = 40000;

fn more(c: &Cqe) -> bool {
    c.flags & CqeFlags::MORE.bits() != 0
}

fn accepted(c: &Cqe) -> bool {
    c.flags & CqeFlags::ACCEPT.bits() != 0
}

/// A ring that LISTENs gets a virtual QP for each peer whose virtual QP CONNECTs to
/// this node for the service (engine's `listen`), without ever CONNECTing to it: each in
/// a CQE of the LISTEN flagged MORE and ACCEPT, with the peer's address. One ring per
/// service listens; UNLISTEN ends it with a last CQE, after which another may.
#[test]
fn a_listen_gets_a_virtual_qp_per_peer_that_joins() {
    let mut rig = Rig::new(&[16, 16]);
    rig.nic.remote = Some(PEER);
    let server = rig.open(Limits::default());
    let c = rig.run(server, &[Sqe::listen(9, 70)]);
    assert!(
        c.len() == 1 && c[0].res == 0 && more(&c[0]) && !accepted(&c[0]),
        "{c:?}"
    );
    let other = rig.open(Limits::default());
    let c = rig.run(other, &[Sqe::listen(1, 70)]);
    assert_eq!(c[0].failure(), Some(Reason::ServiceTaken), "{c:?}");
    assert!(!more(&c[0]), "a refused LISTEN ends at once");

    // The peer's Hello: offered to the listen, which binds a virtual QP to it.
    rig.notice(PEER, 0, hello(70, 0x55));
    rig.drain();
    let c = rig.reap(server, 8);
    assert!(c.len() == 1 && more(&c[0]) && accepted(&c[0]), "{c:?}");
    assert_eq!(c[0].user_data, 9);
    assert_eq!(
        c[0].aux,
        accept_aux(&PEER, 100),
        "the peer's address and the QP"
    );
    assert_eq!((c[0].aux >> 32) as u32, u32::from_be_bytes([192, 0, 2, 12]));
    let vqp = c[0].res as u32;
    let v = *rig.rings[server]
        .as_ref()
        .unwrap()
        .ring
        .tables
        .vqps
        .get(vqp)
        .expect("bound");
    assert_eq!(
        (v.qp, v.shard),
        (0, shard_of(&PEER, port_key(70, PEER_PORT), SHARDS as u32))
    );
    assert_eq!(c[0].port, PEER_PORT, "the peer's port");
    assert_eq!(rig.nic.qps[0].bound, 1, "bound to the peer set's QP");
    // It is a virtual QP like a CONNECT's: its receives wait for the peer's messages.
    let mr = rig.run(server, &[Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE)])[0].res as u32;
    let e = End {
        ring: server,
        vqp,
        mr,
    };
    assert!(
        rig.run(server, &[recv(&e, 3, 64)]).is_empty(),
        "the RECV waits"
    );
    // No CONNECT of this node's can name the listen's port as its own.
    let c = rig.run(other, &[Sqe::pair(4, PEER, 70, PEER_PORT)]);
    assert_eq!(c[0].failure(), Some(Reason::ServiceTaken), "{c:?}");

    // UNLISTEN: the LISTEN's last CQE, then its own; the service is free again.
    let c = rig.run(server, &[Sqe::unlisten(5, 70), Sqe::unlisten(6, 70)]);
    assert_eq!(c.len(), 3, "{c:?}");
    assert!(c[0].user_data == 9 && c[0].failure() == Some(Reason::Cancelled) && !more(&c[0]));
    assert_eq!((c[1].user_data, c[1].res), (5, 0));
    assert_eq!(c[2].failure(), Some(Reason::NotListening));
    let c = rig.run(other, &[Sqe::listen(7, 70)]);
    assert!(c[0].res == 0 && more(&c[0]), "{c:?}");
    // The accepted virtual QP outlives the listen, and goes as any does.
    let c = rig.run(server, &[Sqe::disconnect(8, vqp)]);
    assert!(c
        .iter()
        .any(|c| c.user_data == 3 && c.failure() == Some(Reason::Cancelled)));
    assert!(c.iter().any(|c| c.user_data == 8 && c.res == 0), "{c:?}");
}

/// An end announced before anyone listened is offered when the LISTEN comes; a ring
/// that closes stops listening (no CQE), and another ring may listen at once; a peer
/// that finds no room in the listening ring's virtual QP table is refused by name, and
/// the listen goes on.
#[test]
fn announcements_wait_for_a_listen_and_refusals_are_named() {
    let mut rig = Rig::new(&[16, 16, 16, 16]);
    rig.nic.remote = Some(PEER);
    rig.notice(PEER, 0, hello(71, 0x66));
    let first = rig.open(Limits::default());
    let c = rig.run(first, &[Sqe::listen(1, 71)]);
    assert_eq!(c.len(), 2, "listening, then the waiting peer: {c:?}");
    assert!(more(&c[0]) && !accepted(&c[0]) && c[1].res >= 0 && accepted(&c[1]));
    rig.close(first);
    assert_eq!(rig.nic.qps[0].bound, 0, "its virtual QP went with it");

    // A ring whose virtual QP table is full refuses the next peer, by name.
    let small = Limits {
        vqps: 1,
        ..Limits::default()
    };
    let second = rig.open(small);
    let c = rig.run(second, &[Sqe::listen(2, 71), Sqe::pair(3, [0; 16], 5, 5)]);
    assert!(c[0].res == 0 && c[1].res >= 0, "{c:?}");
    let links = rig.messages.links();
    rig.notice(PEER, 0, hello(71, 0x77));
    rig.drain();
    let c = rig.reap(second, 8);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].failure() == Some(Reason::TableFull) && accepted(&c[0]) && more(&c[0]));
    assert_eq!(c[0].aux, accept_aux(&PEER, 0), "the peer's address, no QP");
    assert_eq!(rig.nic.qps[0].bound, 0, "nothing bound for it");
    assert!(
        rig.messages.links() <= links + 1,
        "the refused end is told to leave"
    );
}

/// A CONNECT for a listen completes when the listen takes it, as a socket's connect
/// does: its CQE carries the virtual QP and the ephemeral port the listen's ACCEPT names;
/// with nobody listening it fails `Refused` after the deadline, and its virtual QP and
/// port are gone (before, it completed at once and only its SENDs failed, with
/// `NoReceiver`, leaving the virtual QP to its caller).
#[test]
fn a_connect_completes_when_its_listen_takes_it() {
    let mut rig = Rig::new(&[16, 16]);
    let (client, server) = (rig.open(Limits::default()), rig.open(Limits::default()));
    // Nobody listens yet: no CQE.
    assert!(
        rig.run(client, &[Sqe::connect(1, [0; 16], 7000)])
            .is_empty(),
        "it waits"
    );
    assert_eq!(
        rig.kernel.ports.0.borrow().len(),
        1,
        "its ephemeral port held"
    );
    // The listen comes within the deadline: both complete, each naming the other's port.
    let c = rig.run(server, &[Sqe::listen(9, 7000)]);
    assert!(c[0].res == 0 && more(&c[0]), "{c:?}");
    let acc: Vec<Cqe> = c.iter().filter(|c| accepted(c)).copied().collect();
    assert!(acc.len() == 1 && acc[0].res > 0, "{c:?}");
    let done = rig.reap(client, 8);
    assert!(done.len() == 1 && done[0].res > 0, "{done:?}");
    let port = done[0].port;
    assert!((32768..=60999).contains(&port), "an ephemeral port: {port}");
    assert_eq!(acc[0].port, port, "the ACCEPT names the client's port");
    // Messages flow between the two.
    let mr = |rig: &mut Rig, r| {
        rig.run(r, &[Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE)])[0].res as u32
    };
    let (cm, sm) = (mr(&mut rig, client), mr(&mut rig, server));
    let (c_end, s_end) = (
        End {
            ring: client,
            vqp: done[0].res as u32,
            mr: cm,
        },
        End {
            ring: server,
            vqp: acc[0].res as u32,
            mr: sm,
        },
    );
    assert!(rig.run(server, &[recv(&s_end, 3, 64)]).is_empty());
    assert_eq!(rig.run(client, &[send(&c_end, 4, 8, 44)])[0].res, 8);
    let got = rig.reap(server, 8);
    assert_eq!((got[0].user_data, got[0].res, got[0].aux), (3, 8, 44));

    // With nobody listening on 7001: refused after the deadline, and its virtual QP
    // and port go.
    let vqps = |rig: &Rig| rig.rings[client].as_ref().unwrap().ring.tables.vqps.len();
    let before = (vqps(&rig), rig.kernel.ports.0.borrow().len());
    assert!(rig
        .run(client, &[Sqe::connect(5, [0; 16], 7001)])
        .is_empty());
    assert_eq!(vqps(&rig), before.0 + 1);
    rig.now_ms += 1;
    rig.drain();
    rig.now_ms += DEFAULT_DEADLINE_MS + 1;
    rig.drain();
    let c = rig.reap(client, 8);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].user_data, c[0].failure()),
        (5, Some(Reason::Refused)),
        "{c:?}"
    );
    rig.run(client, &[Sqe::nop(6)]);
    assert_eq!(
        (vqps(&rig), rig.kernel.ports.0.borrow().len()),
        before,
        "its virtual QP and port went"
    );
}
