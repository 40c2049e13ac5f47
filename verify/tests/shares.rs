//! Shares per user on a fake NIC (the engine's `shares`): a user that fills its share
//! of virtual QPs, receives, exports or listens gets `Quota`, by name, and another
//! user's CONNECT, RECV, REG_MR with remote rights and LISTEN still succeed; what a
//! user releases comes back to it.

use krcore_abi::cqe::{Cqe, Reason};
use krcore_abi::engine::{Creds, Share};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::rig::{Limits, Rig};

const MR: u64 = 0x10_0000;
const LEN: u32 = 4096;

/// A user: uid 1000 + `user`, in the user table's slot `user`.
fn user(user: u32) -> Creds {
    Creds {
        uid: 1000 + user,
        gid: 1000 + user,
        groups: krcore_abi::engine::Groups::NONE,
        bind_low: false,
        user,
    }
}

fn one(rig: &mut Rig, r: usize, sqe: Sqe) -> Cqe {
    let c = rig.run(r, &[sqe]);
    assert_eq!(c.len(), 1, "{c:?}");
    c[0]
}

fn limit(rig: &Rig, s: Share, n: u32) {
    let mut l = rig.kernel.share_limits.get();
    l[s as usize] = n;
    rig.kernel.share_limits.set(l);
}

#[test]
fn a_user_at_its_share_of_virtual_qps_leaves_others_theirs() {
    let mut rig = Rig::new(&[16, 16]);
    limit(&rig, Share::Vqps, 2);
    let (hog, other) = (
        rig.open_as(Limits::default(), user(1)),
        rig.open_as(Limits::default(), user(2)),
    );
    let a = one(&mut rig, hog, Sqe::connect(1, [0; 16], 0));
    let b = one(&mut rig, hog, Sqe::pair(2, [0; 16], 7000, 7000));
    assert!(a.res > 0 && b.res > 0, "{a:?} {b:?}");
    let c = one(&mut rig, hog, Sqe::pair(3, [0; 16], 7000, 7000));
    assert_eq!(c.failure(), Some(Reason::Quota), "{c:?}");
    assert_eq!(rig.kernel.counts(1).0[Share::Vqps as usize], 2);
    // The other user connects, and listens.
    assert!(one(&mut rig, other, Sqe::pair(4, [0; 16], 7002, 7002)).res > 0);
    assert_eq!(one(&mut rig, other, Sqe::listen(5, 7001)).res, 0);
    // Released, it comes back.
    assert_eq!(one(&mut rig, hog, Sqe::disconnect(6, a.res as u32)).res, 0);
    assert!(one(&mut rig, hog, Sqe::connect(7, [0; 16], 0)).res > 0);
}

#[test]
fn a_users_receives_are_its_share_and_come_back_when_they_complete() {
    let mut rig = Rig::new(&[16, 16]);
    limit(&rig, Share::Recvs, 2);
    let (hog, other) = (
        rig.open_as(Limits::default(), user(1)),
        rig.open_as(Limits::default(), user(2)),
    );
    // The hog's two ends pair on one port; the other user's on another.
    let mut end = |r: usize, port: u16| {
        let v = one(&mut rig, r, Sqe::pair(1, [0; 16], port, port)).res as u32;
        let mr = one(&mut rig, r, Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE)).res as u32;
        (v, mr)
    };
    let (h1, hm) = end(hog, 5000);
    let (h2, _) = end(hog, 5000);
    let (o1, om) = end(other, 6000);
    let recv = |ud, v, mr| Sqe::two_sided(Opcode::Recv, ud, v, mr, MR, 64);
    assert!(
        rig.run(hog, &[recv(10, h1, hm), recv(11, h1, hm)])
            .is_empty(),
        "they wait"
    );
    let c = one(&mut rig, hog, recv(12, h1, hm));
    assert_eq!(c.failure(), Some(Reason::Quota), "{c:?}");
    assert!(
        rig.run(other, &[recv(20, o1, om)]).is_empty(),
        "another user's RECV waits"
    );
    // A message completes one of the hog's receives: its share comes back at its next
    // submission.
    let send = Sqe::two_sided(Opcode::Send, 13, h2, hm, MR, 8);
    let c = rig.run(hog, &[send]);
    assert!(c.iter().any(|c| c.user_data == 10 && c.res == 8), "{c:?}");
    assert!(rig.run(hog, &[recv(14, h1, hm)]).is_empty(), "room again");
    assert_eq!(rig.kernel.counts(1).0[Share::Recvs as usize], 2);
}

#[test]
fn exports_and_listens_are_shares_too() {
    let mut rig = Rig::new(&[16, 16]);
    limit(&rig, Share::Exports, 1);
    limit(&rig, Share::Listens, 1);
    let (hog, other) = (
        rig.open_as(Limits::default(), user(1)),
        rig.open_as(Limits::default(), user(2)),
    );
    let remote = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let first = one(&mut rig, hog, Sqe::reg_mr(1, MR, LEN, remote));
    assert!(first.res > 0, "{first:?}");
    let c = one(&mut rig, hog, Sqe::reg_mr(2, MR, LEN, remote));
    assert_eq!(c.failure(), Some(Reason::Quota), "{c:?}");
    assert!(
        one(
            &mut rig,
            hog,
            Sqe::reg_mr(3, MR, LEN, MrAccess::LOCAL_WRITE)
        )
        .res > 0,
        "no export, no share"
    );
    assert!(one(&mut rig, other, Sqe::reg_mr(4, MR, LEN, remote)).res > 0);
    assert_eq!(one(&mut rig, hog, Sqe::listen(5, 7000)).res, 0);
    let c = one(&mut rig, hog, Sqe::listen(6, 7001));
    assert_eq!(c.failure(), Some(Reason::Quota), "{c:?}");
    assert_eq!(one(&mut rig, other, Sqe::listen(7, 7001)).res, 0);
    // Deregistered and unlistened, they come back.
    assert_eq!(
        one(&mut rig, hog, Sqe::dereg_mr(8, first.res as u32)).res,
        0
    );
    let c = rig.run(hog, &[Sqe::unlisten(9, 7000)]);
    assert!(c.iter().any(|c| c.user_data == 9 && c.res == 0), "{c:?}");
    assert_eq!(rig.kernel.counts(1).0, [0, 0, 0, 0]);
    assert!(one(&mut rig, hog, Sqe::reg_mr(10, MR, LEN, remote)).res > 0);
    // A closed ring gives back everything it held.
    rig.close(hog);
    assert_eq!(rig.kernel.counts(1).0, [0, 0, 0, 0]);
}

/// One user makes at most half of a links shard's links, whatever ports it names
/// (`Quota` past that: before, one user filled a shard); and a shard that two users
/// filled so never refuses a third user's ephemeral CONNECT: a port whose shard is full
/// is traded for one in another shard (before, 6 of these 24 failed `TableFull`).
#[test]
fn a_full_links_shard_refuses_no_ephemeral_connect() {
    use krcore_abi::engine::{port_key, shard_of};
    use verify::rig::SHARDS;
    let mut rig = Rig::new(&[16, 16]);
    let big = Limits {
        vqps: 512,
        ..Limits::default()
    };
    // Half-open pairings from named ports that all land in shard 0, until refused.
    let mut in_shard_0 =
        (2000u16..).filter(|&p| shard_of(&[0; 16], port_key(p, 9), SHARDS as u32) == 0);
    let mut fill = |rig: &mut Rig, who: u32| {
        let hog = rig.open_as(big, user(who));
        for (i, port) in in_shard_0.by_ref().take(400).enumerate() {
            let c = one(rig, hog, Sqe::pair(i as u64, [0; 16], port, 9));
            if c.res < 0 {
                return (i, c.failure());
            }
        }
        (400, None)
    };
    assert_eq!(
        fill(&mut rig, 1),
        (128, Some(Reason::Quota)),
        "half of shard 0's 256 links"
    );
    assert_eq!(
        fill(&mut rig, 3),
        (128, Some(Reason::Quota)),
        "the other half"
    );
    assert_eq!(rig.messages.0[0].links(), 256, "shard 0 full");
    let server = rig.open_as(big, user(2));
    let client = rig.open_as(big, user(2));
    assert_eq!(one(&mut rig, server, Sqe::listen(1, 7000)).res, 0);
    let mut refused = 0;
    for i in 0..24 {
        rig.push(client, &[Sqe::connect(100 + i, [0; 16], 7000)]);
        rig.drain();
        let c = rig.reap(client, 1);
        assert_eq!(c.len(), 1, "the listen took it: {c:?}");
        refused += (c[0].res < 0) as u32;
    }
    assert_eq!(
        refused, 0,
        "ephemeral CONNECTs refused for a shard another user filled"
    );
}

#[test]
fn a_client_holds_only_its_part_of_a_listening_ring_and_none_of_the_servers_share() {
    let mut rig = Rig::new(&[16, 16]);
    limit(&rig, Share::Vqps, 6);
    let big = Limits {
        vqps: 16,
        ..Limits::default()
    };
    let (server, hog, other) = (
        rig.open_as(big, user(1)),
        rig.open_as(big, user(2)),
        rig.open_as(big, user(3)),
    );
    assert_eq!(one(&mut rig, server, Sqe::listen(1, 7000)).res, 0);
    let connect = |rig: &mut Rig, r: usize, ud: u64| {
        rig.push(r, &[Sqe::connect(ud, [0; 16], 7000)]);
        rig.drain();
        let c = rig.reap(r, 1);
        assert_eq!(c.len(), 1, "the listen answered: {c:?}");
        c[0]
    };
    // The hog's CONNECTs: a quarter of the server's 16 virtual QPs are taken, the rest
    // refused; its own share (6) would have let it make all six.
    let got: Vec<bool> = (0..6)
        .map(|i| connect(&mut rig, hog, 10 + i).res > 0)
        .collect();
    assert_eq!(
        got,
        [true, true, true, true, false, false],
        "the hog's CONNECTs"
    );
    let refused: Vec<_> = rig
        .reap(server, usize::MAX)
        .iter()
        .filter_map(|c| c.failure())
        .collect();
    assert_eq!(
        refused,
        [Reason::Quota, Reason::Quota],
        "the listen's CQEs name why"
    );
    // Another client is served, and the server's own CONNECT is its own share's.
    assert!(
        connect(&mut rig, other, 20).res > 0,
        "another user's CONNECT"
    );
    let taken = rig.reap(server, usize::MAX);
    assert!(
        taken.len() == 1 && taken[0].res > 0,
        "the listen took it: {taken:?}"
    );
    assert!(one(&mut rig, server, Sqe::pair(21, [0; 16], 7100, 7100)).res > 0);
    assert_eq!(
        rig.kernel.counts(1).0[Share::Vqps as usize],
        1,
        "accepts cost the server none"
    );
}
