//! PUBLISH and IMPORT_NAME through the engine, natively: the fake node's MetaServer
//! client (verify's meta.rs, abi's meta client over a region in local memory), its jobs
//! run where the kernel runs its network work, the lock order checked throughout.

use std::cell::RefCell;

use krcore_abi::cqe::Reason;
use krcore_abi::engine::Creds;
use krcore_abi::meta::lookup::{lookup, LookupError, EXPORT_FRAME, PROBE};
use krcore_abi::meta::record::{name, name_words, Grant};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};
use verify::meta::{FakeMeta, ROOT_ONLY, TABLES};
use verify::rig::{Limits, Rig};

const MR: u64 = 0x10_0000;
const LEN: u32 = 1 << 16;

/// A node at 192.0.2.11 with a MetaServer, and a peer at 192.0.2.12 that published "kv"
/// (4 KiB at 0x7000_0000, rkey 0x4242).
fn rig() -> (Rig, [u8; 16]) {
    let mut rig = Rig::new(&[16, 16, 16, 16]);
    let mut meta = FakeMeta::new([192, 0, 2, 11]);
    meta.other_node_publishes([192, 0, 2, 12], "kv", 0x7000_0000, 4096, 0x4242, ROOT_ONLY);
    rig.kernel.meta = Some(RefCell::new(meta));
    let peer = std::net::Ipv4Addr::new(192, 0, 2, 12)
        .to_ipv6_mapped()
        .octets();
    rig.nic.remote = Some(peer);
    (rig, peer)
}

fn import(ud: u64, vqp: u32, n: &str, len: u32) -> Sqe {
    Sqe::import_name(ud, vqp, name_words(&name(n).unwrap()), len, None)
}

#[test]
fn an_import_by_name_puts_the_exporters_rkey_on_the_wire_and_nothing_else() {
    let (mut rig, peer) = rig();
    let r = rig.open(Limits::default());
    let c = rig.run(
        r,
        &[
            Sqe::connect(1, peer, 0),
            Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE),
        ],
    );
    let (vqp, mr) = (c[0].res as u32, c[1].res as u32);
    // Uncached: the engine stops at the entry, the jobs run, the entry completes.
    let c = rig.run(r, &[import(3, vqp, "kv", 0)]);
    assert!(c[0].res >= 0, "{c:?}");
    assert_eq!(c[0].aux, 0x7000_0000, "the export's address");
    let rmr = c[0].res as u32;
    let mut c = rig.run(
        r,
        &[
            Sqe::one_sided(Opcode::Read, 4, vqp, mr, MR, 64, rmr, 0x7000_0000 + 128),
            Sqe::one_sided(Opcode::Read, 5, vqp, mr, MR, 64, rmr, 0x7000_0000 + 4090),
        ],
    );
    c.sort_by_key(|c| c.user_data);
    assert_eq!(c[0].res, 64, "{c:?}");
    assert_eq!(
        c[1].failure(),
        Some(Reason::RemoteRange),
        "past the export's end"
    );
    assert_eq!(
        rig.nic.wire_rkeys,
        vec![0x4242],
        "the exporter's rkey, once"
    );
    let before = rig.kernel.meta.as_ref().unwrap().borrow().region.verbs;
    let c = rig.run(r, &[import(6, vqp, "kv", 4096)]);
    assert!(c[0].res >= 0, "{c:?}");
    assert_eq!(
        rig.kernel.meta.as_ref().unwrap().borrow().region.verbs,
        before,
        "cached: no READ"
    );
    let c = rig.run(r, &[import(7, vqp, "kv", 4097)]);
    assert_eq!(
        c[0].failure(),
        Some(Reason::RemoteRange),
        "longer than the export"
    );
}

#[test]
fn imports_are_refused_by_name() {
    let (mut rig, peer) = rig();
    let r = rig.open(Limits::default());
    let c = rig.run(
        r,
        &[Sqe::connect(1, peer, 0), Sqe::connect(2, [0xfe; 16], 0)],
    );
    let (remote, local) = (c[0].res as u32, c[1].res as u32);
    let mut gap = name_words(&name("kv").unwrap());
    gap[2] = 7;
    let mut c = rig.run(
        r,
        &[
            import(3, remote, "nope", 0),
            Sqe::import_name(4, remote, gap, 0, None),
            import(5, local, "kv", 0),
            import(6, remote + 100, "kv", 0),
        ],
    );
    c.sort_by_key(|c| c.user_data);
    let reasons: Vec<_> = c.iter().map(|c| c.failure()).collect();
    assert_eq!(
        reasons,
        vec![
            Some(Reason::NoSuchName),
            Some(Reason::BadName),
            Some(Reason::NotOnPeer),
            Some(Reason::BadVqp)
        ]
    );
    assert!(rig.nic.wire_rkeys.is_empty());
}

#[test]
fn publish_then_deregister_revokes_the_name() {
    let (mut rig, _) = rig();
    let r = rig.open(Limits::default());
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let c = rig.run(
        r,
        &[
            Sqe::reg_mr(1, MR, LEN, all),
            Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE),
        ],
    );
    let (mr, private) = (c[0].res as u32, c[1].res as u32);
    let words = name_words(&name("mine").unwrap());
    let mut c = rig.run(
        r,
        &[
            Sqe::publish(3, mr, words, 0),
            Sqe::publish(4, private, words, 0),
            Sqe::publish(5, mr, name_words(&name("kv").unwrap()), 0),
        ],
    );
    c.sort_by_key(|c| c.user_data);
    let got: Vec<_> = c.iter().map(|c| (c.res, c.failure())).collect();
    assert_eq!(
        got,
        vec![
            (0, None),
            (-13, Some(Reason::MrAccess)),
            (-17, Some(Reason::NameTaken))
        ],
        "published; no export to publish; another node's name"
    );
    let found = |rig: &mut Rig| {
        let mut m = rig.kernel.meta.as_ref().unwrap().borrow_mut();
        let mut w = vec![0u8; PROBE * EXPORT_FRAME];
        lookup(&name("mine").unwrap(), &TABLES, &mut w, &mut m.region).map(|(r, _)| r.rkey)
    };
    assert!(found(&mut rig).is_ok(), "in the MetaServer");
    let c = rig.run(r, &[Sqe::dereg_mr(6, mr)]);
    assert_eq!(c[0].res, 0);
    assert_eq!(
        found(&mut rig),
        Err(LookupError::NotFound),
        "revoked with its MR"
    );
}

#[test]
fn without_a_metaserver_names_are_unreachable() {
    let mut rig = Rig::new(&[16, 16]);
    let r = rig.open(Limits::default());
    let c = rig.run(
        r,
        &[
            Sqe::connect(1, [0xfe; 16], 0),
            Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ),
        ],
    );
    let (vqp, mr) = (c[0].res as u32, c[1].res as u32);
    let c = rig.run(
        r,
        &[
            import(3, vqp, "kv", 0),
            Sqe::publish(4, mr, name_words(&name("kv").unwrap()), 0),
        ],
    );
    assert!(
        c.iter().all(|c| c.failure() == Some(Reason::Unreachable)),
        "{c:?}"
    );
}

/// A ring of user `uid` in group `gid`.
fn user(uid: u32, gid: u32) -> Creds {
    Creds {
        uid,
        gid,
        groups: krcore_abi::engine::Groups::NONE,
        bind_low: false,
        user: uid - 1000,
    }
}

#[test]
fn a_names_mode_grants_each_importer_its_rights_and_no_more() {
    let (mut rig, peer) = rig();
    let rw = Grant {
        uid: 1001,
        gid: 100,
        mode: 0o640,
    };
    let m = rig.kernel.meta.as_ref().unwrap();
    m.borrow_mut()
        .other_node_publishes([192, 0, 2, 12], "rw", 0x8000_0000, 4096, 0x77, rw);
    // Each importer: its import's result, then a READ's and a WRITE's through it.
    let mut try_as = |creds: Creds, owner: Option<u32>| {
        let r = rig.open_as(Limits::default(), creds);
        let c = rig.run(
            r,
            &[
                Sqe::connect(1, peer, 0),
                Sqe::reg_mr(2, MR, LEN, MrAccess::LOCAL_WRITE),
            ],
        );
        let (vqp, mr) = (c[0].res as u32, c[1].res as u32);
        let words = name_words(&name("rw").unwrap());
        let c = rig.run(r, &[Sqe::import_name(3, vqp, words, 0, owner)]);
        if c[0].res < 0 {
            return vec![c[0].failure()];
        }
        let rmr = c[0].res as u32;
        let mut c = rig.run(
            r,
            &[
                Sqe::one_sided(Opcode::Read, 4, vqp, mr, MR, 64, rmr, 0x8000_0000),
                Sqe::one_sided(Opcode::Write, 5, vqp, mr, MR, 64, rmr, 0x8000_0000),
            ],
        );
        c.sort_by_key(|c| c.user_data);
        [None]
            .into_iter()
            .chain(c.iter().map(|c| c.failure()))
            .collect()
    };
    let ok = vec![None, None, None];
    assert_eq!(
        try_as(user(1001, 5), None),
        ok,
        "the owner reads and writes"
    );
    assert_eq!(
        try_as(user(1002, 100), Some(1001)),
        vec![None, None, Some(Reason::MrAccess)],
        "the group reads only, naming the owner"
    );
    assert_eq!(
        try_as(user(1002, 100), None),
        vec![Some(Reason::WrongOwner)],
        "naming none, another user's name is not taken for it"
    );
    assert_eq!(
        try_as(user(1003, 5), None),
        vec![Some(Reason::NotPermitted)],
        "others get nothing"
    );
    assert_eq!(
        try_as(user(1002, 100), Some(1000)),
        vec![Some(Reason::WrongOwner)],
        "published by someone else than the importer expects"
    );
    assert_eq!(
        try_as(user(1001, 5), Some(1001)),
        ok,
        "the owner it expects"
    );
}

/// Names are first-come, but no lookup takes a squatter's: a name another user
/// published first (mode 0666, every right to everyone) is refused to a lookup that
/// names no owner, and served only to one naming the squatter; root's name is taken
/// by every user's plain lookup.
#[test]
fn a_plain_lookup_takes_only_its_own_or_roots_name() {
    let (mut rig, peer) = rig();
    let open = |uid| Grant {
        uid,
        gid: uid,
        mode: 0o666,
    };
    let publish = |rig: &mut Rig, n: &str, uid: u32| {
        let m = rig.kernel.meta.as_ref().unwrap();
        // (The node registers anew: its earlier names go.)
        m.borrow_mut()
            .other_node_publishes([192, 0, 2, 12], n, 0x8000_0000, 4096, 0x77, open(uid));
    };
    publish(&mut rig, "squat", 1003);
    let import_as = |rig: &mut Rig, creds: Creds, n: &str, owner: Option<u32>| {
        let r = rig.open_as(Limits::default(), creds);
        let vqp = rig.run(r, &[Sqe::connect(1, peer, 0)])[0].res as u32;
        let words = name_words(&name(n).unwrap());
        rig.run(r, &[Sqe::import_name(2, vqp, words, 0, owner)])[0].failure()
    };
    let (other, squatter) = (user(1002, 100), user(1003, 5));
    assert_eq!(
        import_as(&mut rig, other, "squat", None),
        Some(Reason::WrongOwner),
        "another's, unnamed"
    );
    assert_eq!(
        import_as(&mut rig, other, "squat", Some(1003)),
        None,
        "the squatter, named"
    );
    assert_eq!(
        import_as(&mut rig, squatter, "squat", None),
        None,
        "its own"
    );
    publish(&mut rig, "roots", 0);
    assert_eq!(import_as(&mut rig, other, "roots", None), None, "root's");
}

#[test]
fn a_publish_records_its_callers_uid_and_gid_and_the_mode_it_names() {
    let (mut rig, _) = rig();
    let r = rig.open_as(Limits::default(), user(1001, 100));
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let mr = rig.run(r, &[Sqe::reg_mr(1, MR, LEN, all)])[0].res as u32;
    let words = |n: &str| name_words(&name(n).unwrap());
    let mut c = rig.run(
        r,
        &[
            Sqe::publish(2, mr, words("shared"), 0o644),
            Sqe::publish(3, mr, words("private"), 0),
            Sqe::publish(4, mr, words("runnable"), 0o755),
        ],
    );
    c.sort_by_key(|c| c.user_data);
    let got: Vec<_> = c.iter().map(|c| c.failure()).collect();
    assert_eq!(got, vec![None, None, Some(Reason::UnknownFlags)]);
    let grant = |rig: &mut Rig, n: &str| {
        let mut m = rig.kernel.meta.as_ref().unwrap().borrow_mut();
        let mut w = vec![0u8; PROBE * EXPORT_FRAME];
        lookup(&name(n).unwrap(), &TABLES, &mut w, &mut m.region).map(|(r, _)| r.grant)
    };
    let mine = |mode| Grant {
        uid: 1001,
        gid: 100,
        mode,
    };
    assert_eq!(grant(&mut rig, "shared"), Ok(mine(0o644)));
    let again = rig.run(r, &[Sqe::publish(5, mr, words("shared"), 0o600)]);
    assert_eq!(
        again[0].failure(),
        Some(Reason::NameTaken),
        "published already with another mode: not changed in place"
    );
    assert_eq!(grant(&mut rig, "shared"), Ok(mine(0o644)));
    assert_eq!(
        grant(&mut rig, "private"),
        Ok(mine(0o600)),
        "no mode: the owner's alone"
    );
}

#[test]
fn a_name_resolves_to_its_node_for_those_its_mode_lets_in() {
    let (mut rig, _) = rig();
    let words = |n: &str| name_words(&name(n).unwrap());
    let root = rig.open(Limits::default());
    let c = rig.run(root, &[Sqe::resolve_name(1, words("kv"))]);
    assert_eq!(c[0].failure(), None, "{c:?}");
    let node = u16::from_be_bytes([2, 12]);
    assert_eq!(c[0].res, node as i32, "the node's id");
    assert_eq!(
        (c[0].aux >> 32) as u32,
        u32::from_be_bytes([192, 0, 2, 12]),
        "its address"
    );
    let other = rig.open_as(Limits::default(), user(1003, 1003));
    let c = rig.run(other, &[Sqe::resolve_name(2, words("kv"))]);
    assert_eq!(
        c[0].failure(),
        Some(Reason::NotPermitted),
        "not even where it lives"
    );
    let c = rig.run(root, &[Sqe::resolve_name(3, words("nothing"))]);
    assert_eq!(c[0].failure(), Some(Reason::NoSuchName));
}
