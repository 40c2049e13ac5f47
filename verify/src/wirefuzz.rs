//! The wire fuzzing program: what other nodes send, mutated, into the engine and the
//! decoders. Every byte from the wire is hostile:
//! - a peer kernel's notices (hello, advert, data, leave, left), from valid templates
//!   with bytes scribbled or cut short, reach two rings' links to that peer on the fake
//!   NIC while the rings post receives and send;
//! - a MetaServer region of records with bytes scribbled is looked up by name;
//! - requests to the MetaServer's kernel (register, publish, revoke), from valid
//!   templates with bytes scribbled or cut short, come from members, registered or
//!   not, and are served;
//! - connection requests' private data (hellos: ASKs and PROVEs), refusals and accepts,
//!   from valid wire forms with bytes scribbled or cut short, are read; the hellos that
//!   read go from made-up addresses, at made-up times, through the cluster gate.
//!
//! It must never see a panic, a completion on a ring that did not ask for it, a receive
//! completed past its length, a message written outside a receive the peer advertised,
//! a lookup answering another name, a request served that left a record of an earlier
//! incarnation in the table (a lookup trusts one READ), a message read that its writer
//! would not write the same, or a gate admitting a proof for a challenge it did not
//! issue to that address (or issued, and spent, before), or a request served that
//! changed another node's entry.
//!
//! `fuzz/fuzz_targets/wire.rs` runs it under libFuzzer; a test runs it over seeded
//! random inputs so `cargo test` covers it too. Not covered here: revocation notices
//! (the device's, not a link's) and the tags' MAC (the kernel's crypto API).

use std::collections::HashMap;

use krcore_abi::cluster::auth::{Gate, CHALLENGE_MS, FRESH_MS, NONCE_LEN};
use krcore_abi::cluster::hello::{
    fresh_nonce, fresh_time, Accept, Hello, Kind, Offer, Proof, Refusal, Step, ACCEPT_LEN,
    HELLO_LEN,
};
use krcore_abi::cluster::notice::{link_id, Notice, NOTICE_LEN, NO_LINK};
use krcore_abi::cqe::{Cqe, CqeFlags};
use krcore_abi::meta::frame;
use krcore_abi::meta::lookup::{lookup, EXPORT_FRAME, PROBE, TRIES};
use krcore_abi::meta::record::{ExportRecord, Grant, NodeRecord, NAME_LEN};
use krcore_abi::meta::request::{Reply, Request, REQUEST_LEN};
use krcore_abi::meta::serve::{mapped_gid, serve, Shares};
use krcore_abi::meta::tables::mem::MemRegion;
use krcore_abi::meta::tables::{Tables, NODE_FRAME};
use krcore_abi::opcode::Opcode;
use krcore_abi::sqe::{MrAccess, Sqe};

use crate::fuzzinput::Input;
use crate::rig::{Limits, Rig, SHARDS};

/// Runs one program: its first byte picks the part.
pub fn run(data: &[u8]) {
    let mut inp = Input(data);
    match inp.byte() % 4 {
        0 => notices(&mut inp),
        1 => records(&mut inp),
        2 => requests(&mut inp),
        _ => gate(&mut inp),
    }
}

/// The peer kernel (an IPv4-mapped GID).
const PEER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 12];
const MR: u64 = 0x10_0000;
const LEN: u32 = 4096;

/// A ring with a virtual QP linked to the peer for a service.
struct End {
    ring: usize,
    vqp: u32,
    mr: u32,
    /// The top byte of every `user_data` this ring uses.
    tag: u64,
    /// The length of each of its receives.
    recv_len: u32,
    /// Its link's id, as this node's hello tells the peer.
    id: u64,
    open: bool,
}

fn end(rig: &mut Rig, tag: u64, service: u32, recv_len: u32) -> End {
    let ring = rig.open(Limits::default());
    let c = rig.run(
        ring,
        &[
            Sqe::pair(tag << 56 | 1, PEER, service as u16, service as u16),
            Sqe::reg_mr(tag << 56 | 2, MR, LEN, MrAccess::LOCAL_WRITE),
        ],
    );
    assert!(c.len() == 2 && c.iter().all(|c| c.res > 0), "{c:?}");
    let v = rig.rings[ring]
        .as_ref()
        .expect("open")
        .ring
        .tables
        .vqps
        .get(c[0].res as u32)
        .copied();
    let v = v.expect("the CONNECT's virtual QP");
    End {
        ring,
        id: link_id(v.shard, v.link),
        vqp: c[0].res as u32,
        mr: c[1].res as u32,
        tag,
        recv_len,
        open: true,
    }
}

/// An id of one of this node's links, as a peer knows them (`ids`, from this node's
/// hellos) or guesses them.
fn some_link(inp: &mut Input, ids: &[u64; 2]) -> u64 {
    match inp.byte() % 8 {
        0 => NO_LINK,
        1 => inp.u32() as u64 | (inp.u32() as u64) << 32,
        2 => link_id(
            inp.byte() as u32 % (SHARDS as u32 + 1),
            inp.byte() as u32 % 4,
        ),
        k => ids[k as usize % 2],
    }
}

/// A notice from the peer: a valid one of some kind with fields from `inp`.
fn template(inp: &mut Input, ids: &[u64; 2]) -> Notice {
    let service = [70, 71, inp.u32() as u16][inp.byte() as usize % 3];
    let from_port = [70, 40000, inp.u32() as u16][inp.byte() as usize % 3];
    match inp.byte() % 5 {
        0 => Notice::Hello {
            to_port: service,
            from_port,
            from: inp.byte() as u64,
            to: some_link(inp, ids),
            pair: inp.byte() % 2 == 0,
        },
        1 => Notice::Advert {
            to: some_link(inp, ids),
            // Mostly in turn (the first few), sometimes any.
            seq: [inp.byte() as u32 % 4, inp.u32()][inp.byte() as usize % 2],
            addr: 0x20_0000 + inp.u32() as u64 % 0x1000,
            len: [inp.u32(), inp.byte() as u32][inp.byte() as usize % 2],
            rkey: inp.byte() as u32,
        },
        2 => Notice::Data {
            to: some_link(inp, ids),
            seq: [inp.byte() as u32 % 4, inp.u32()][inp.byte() as usize % 2],
            len: [inp.u32(), inp.byte() as u32][inp.byte() as usize % 2],
            imm: (inp.byte() % 2 == 0).then(|| inp.u32()),
        },
        3 => Notice::Leave {
            to_port: service,
            from_port,
            to: some_link(inp, ids),
            from: inp.byte() as u64,
        },
        _ => Notice::Left {
            to: some_link(inp, ids),
        },
    }
}

/// Checks completions reaped from `e`'s ring: each its own, each receive within its
/// length; a receive's last completion retires it from `posted`.
fn check(e: &End, cqes: &[Cqe], posted: &mut HashMap<u64, u32>) {
    for c in cqes {
        assert_eq!(
            c.user_data >> 56,
            e.tag,
            "a completion on a ring that did not ask for it: {c:?}"
        );
        if let Some(&len) = posted.get(&c.user_data) {
            assert!(
                c.res < 0 || c.res as u32 <= len,
                "a receive completed past its {len} bytes: {c:?}"
            );
            if c.flags & CqeFlags::MORE.bits() == 0 {
                posted.remove(&c.user_data);
            }
        }
    }
}

/// A peer's notices into two rings' links to it.
fn notices(inp: &mut Input) {
    let mut rig = Rig::new(&[16, 16]);
    rig.nic.remote = Some(PEER);
    let mut ends = [end(&mut rig, 0xa, 70, 64), end(&mut rig, 0xb, 71, 32)];
    let ids = [ends[0].id, ends[1].id];
    // Receives the peer advertised to this node: (address, length, rkey).
    let mut adverts = Vec::new();
    let mut posted = HashMap::new();
    let mut next = 3u64;
    for _ in 0..64 {
        if inp.done() {
            break;
        }
        let op = inp.byte();
        let e = &mut ends[(op as usize >> 4) % 2];
        match op % 6 {
            0 | 1 => {
                let mut buf = template(inp, &ids).encode();
                for _ in 0..inp.byte() % 4 {
                    let at = inp.byte() as usize % NOTICE_LEN;
                    buf[at] = inp.byte();
                }
                let byte_len = match inp.byte() % 8 {
                    0 => inp.byte() as u32 % (NOTICE_LEN as u32 + 8),
                    _ => NOTICE_LEN as u32,
                };
                if let Ok(Notice::Advert {
                    addr, len, rkey, ..
                }) = Notice::received(&buf, byte_len)
                {
                    adverts.push((addr, len, rkey));
                }
                // What the completion says the SEND closed: nothing, a key made for one
                // of our receives, or any other.
                let keys = &rig.nic.recv_keys;
                let inv = match inp.byte() % 4 {
                    0 => None,
                    1 => Some(u32::from_le_bytes([inp.byte(), inp.byte(), 0, 0x40])),
                    _ if keys.is_empty() => None,
                    b => Some(keys[b as usize % keys.len()].0),
                };
                rig.wire_notice(PEER, 0, &buf, byte_len, inv);
            }
            2 if e.open => {
                let ud = e.tag << 56 | next;
                let slot = next % (LEN as u64 / 64);
                next += 1;
                posted.insert(ud, e.recv_len);
                let sqe = Sqe::two_sided(Opcode::Recv, ud, e.vqp, e.mr, MR + 64 * slot, e.recv_len);
                let c = rig.run(e.ring, &[sqe]);
                check(e, &c, &mut posted);
            }
            3 if e.open => {
                let ud = e.tag << 56 | next;
                next += 1;
                let len = inp.byte() as u32 % 96;
                let c = rig.run(
                    e.ring,
                    &[Sqe::two_sided(Opcode::Send, ud, e.vqp, e.mr, MR, len)],
                );
                check(e, &c, &mut posted);
            }
            4 => {
                rig.drain();
                for e in ends.iter().filter(|e| e.open) {
                    let c = rig.reap(e.ring, 64);
                    check(e, &c, &mut posted);
                }
            }
            5 if e.open && inp.byte() % 4 == 0 => {
                rig.close(e.ring);
                e.open = false;
            }
            _ => {}
        }
    }
    for e in ends.iter().filter(|e| e.open) {
        rig.drain();
        let c = rig.reap(e.ring, 64);
        check(e, &c, &mut posted);
        rig.close(e.ring);
    }
    rig.drain();
    for &(addr, len, rkey) in &rig.nic.far_writes {
        let inside = adverts.iter().any(|&(a, l, k)| {
            k == rkey
                && a <= addr
                && addr
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= a + l as u64)
        });
        assert!(inside, "a message written outside every receive the peer advertised: {addr:#x}+{len} rkey {rkey}");
    }
    assert!(
        rig.rings.iter().all(|r| r.is_none()),
        "a closed ring was never released"
    );
    assert!(rig.nic.live_mrs.is_empty(), "MRs left registered");
    assert!(
        rig.nic.qps.iter().all(|q| q.bound == 0),
        "connections left bound"
    );
    assert_eq!(rig.messages.recvs(), 0, "receives left");
}

/// Names the records use, and the one looked up among them.
const NAMES: [&str; 3] = ["kv", "kv2", "index"];

fn name_of(i: u8) -> [u8; NAME_LEN] {
    krcore_abi::meta::record::name(NAMES[i as usize % NAMES.len()]).expect("a valid name")
}

/// A MetaServer region of records, scribbled, looked up by name.
fn records(inp: &mut Input) {
    let t = Tables {
        node_slots: 1 + inp.byte() as u32 % 4,
        export_slots: PROBE as u32 + inp.byte() as u32 % 16,
        key: [inp.byte() as u64, 0x6b72],
    };
    let mut region = MemRegion::new(t.bytes());
    // Node ids are their addresses' low 16 bits: 192.0.2.x is 0x200 + x.
    for x in 0..t.node_slots as u8 {
        if inp.byte() % 4 == 0 {
            continue;
        }
        let node = NodeRecord {
            gid: PEER,
            ipv4: [192, 0, 2, x],
            cm_port: 7471,
            incarnation: inp.byte() as u64 % 3,
        };
        let at = t.node(node.id()) as usize;
        let _ = frame::encode(
            &mut region.bytes[at..at + NODE_FRAME],
            inp.byte() as u64,
            &node.encode(),
        );
    }
    let want = name_of(inp.byte());
    // Most records near the name's home, where its lookup reads.
    let first = t.home(&want);
    for i in 0..PROBE as u32 + 2 {
        if inp.byte() % 4 == 0 {
            continue;
        }
        let rec = ExportRecord {
            name: name_of(inp.byte()),
            node: 0x200 + inp.byte() as u16 % 6,
            incarnation: inp.byte() as u64 % 3,
            addr: MR,
            len: LEN,
            access: MrAccess::REMOTE_READ.bits(),
            rkey: inp.byte() as u32,
            grant: Grant {
                uid: inp.byte() as u32,
                gid: 0,
                mode: u16::from(inp.byte()) << 1,
            },
        };
        let at = t.export((first + i) % t.export_slots) as usize;
        let _ = frame::encode(
            &mut region.bytes[at..at + EXPORT_FRAME],
            inp.byte() as u64,
            &rec.encode(),
        );
    }
    for _ in 0..inp.byte() % 16 {
        let at = inp.u32() as usize % region.bytes.len();
        region.bytes[at] = inp.byte();
    }
    let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
    if let Ok((rec, _)) = lookup(&want, &t, &mut buf, &mut region) {
        assert_eq!(rec.name, want, "a lookup answered another name");
    }
    // One window (two READs where it wraps past the table's end), read again while
    // torn, a bounded number of times.
    assert!(
        region.verbs <= 2 * TRIES,
        "{} READs for one lookup",
        region.verbs
    );
}

/// A MetaServer where nodes 192.0.2.1 to 4 registered and published, asked by a member
/// (one of them, or 192.0.2.5, never registered) with requests made as a member's
/// kernel makes them, then scribbled: whatever is served, no entry of another node
/// changes, and what reads is what its writer would write.
fn requests(inp: &mut Input) {
    let t = Tables {
        node_slots: 8,
        export_slots: PROBE as u32 + inp.byte() as u32 % 16,
        key: [inp.byte() as u64, 0x6b72],
    };
    let mut region = MemRegion::new(t.bytes());
    let mut window = vec![0u8; PROBE * EXPORT_FRAME];
    let addr = |x: u8| [192, 0, 2, x];
    let node = |x: u8| NodeRecord {
        gid: mapped_gid(addr(x)),
        ipv4: addr(x),
        cm_port: 7471,
        incarnation: 0,
    };
    let export = |name: u8, x: u8, incarnation: u64| ExportRecord {
        name: name_of(name),
        node: node(x).id(),
        incarnation,
        addr: MR,
        len: LEN,
        access: MrAccess::REMOTE_READ.bits(),
        rkey: 7,
        grant: Grant {
            uid: 0,
            gid: 0,
            mode: 0o600,
        },
    };
    // A share of 2 names a node, so the fuzz reaches the refusal too.
    let mut held = vec![0u16; t.node_slots as usize];
    let mut owners = vec![0u16; t.export_slots as usize];
    let mut shares = Shares {
        held: &mut held,
        owners: &mut owners,
        share: 2,
    };
    for x in 1..=4 {
        let Reply::Registered(inc) = serve(
            &mut region,
            &t,
            &mut shares,
            addr(x),
            &Request::Register(node(x)),
            &mut window,
        ) else {
            panic!("node {x} not registered");
        };
        for _ in 0..inp.byte() % 3 {
            let _ = serve(
                &mut region,
                &t,
                &mut shares,
                addr(x),
                &Request::Publish(export(inp.byte(), x, inc)),
                &mut window,
            );
        }
    }
    for _ in 0..1 + inp.byte() % 4 {
        let x = 1 + inp.byte() % 5;
        let other = 1 + inp.byte() % 5;
        let req = match inp.byte() % 3 {
            0 => Request::Register(node(other)),
            1 => Request::Publish(export(inp.byte(), other, inp.byte() as u64 % 3)),
            _ => Request::Revoke {
                name: name_of(inp.byte()),
                slot: inp.byte() as u32 % (t.export_slots + 1),
            },
        };
        let mut b = [0u8; REQUEST_LEN];
        let n = req.encode(&mut b);
        let bytes = scribbled(inp, &b[..n]);
        let Some(req) = Request::decode(&bytes) else {
            continue;
        };
        let mut again = [0u8; REQUEST_LEN];
        let n = req.encode(&mut again);
        assert_eq!(&again[..n], &bytes[..], "a request read loosely");
        let before = region.bytes.clone();
        let counted = shares.held.to_vec();
        let reply = serve(&mut region, &t, &mut shares, addr(x), &req, &mut window);
        assert_eq!(
            Reply::decode(&reply.encode()),
            Some(reply),
            "a reply that does not read"
        );
        others_unchanged(&t, &before, &region.bytes, node(x).id());
        records_are_current(&t, &mut region);
        let mine = t.node_slot(node(x).id()) as usize;
        for (slot, (was, is)) in counted.iter().zip(shares.held.iter()).enumerate() {
            assert!(
                slot == mine || was == is,
                "node slot {slot}'s count moved for node {x}'s request"
            );
            assert!(
                *is <= shares.share,
                "node slot {slot} holds {is}, past its share"
            );
        }
    }
}

/// Every whole export record is of its node's current incarnation: what lets a lookup
/// trust its one READ (a node's registration revokes its earlier records first).
fn records_are_current(t: &Tables, region: &mut MemRegion) {
    use krcore_abi::meta::node::read_node;
    use krcore_abi::meta::record::EXPORT_PAYLOAD;
    for slot in 0..t.export_slots {
        let at = t.export(slot) as usize;
        let Ok((_, body)) = frame::decode(&region.bytes[at..at + EXPORT_FRAME], EXPORT_PAYLOAD)
        else {
            continue;
        };
        let rec = ExportRecord::decode(body.try_into().expect("payload"));
        if rec.name == [0; NAME_LEN] {
            continue;
        }
        let node = read_node(region, t, rec.node).expect("a record's node is registered");
        assert_eq!(
            rec.incarnation, node.incarnation,
            "export slot {slot} is of an earlier incarnation"
        );
    }
}

/// Every node entry but `me`'s, and every export entry that held another node's whole
/// record, is as it was.
fn others_unchanged(t: &Tables, before: &[u8], after: &[u8], me: u16) {
    use krcore_abi::meta::record::{EXPORT_PAYLOAD, NODE_PAYLOAD};
    for slot in 0..t.node_slots {
        let at = (slot as usize) * NODE_FRAME;
        let was = &before[at..at + NODE_FRAME];
        if let Ok((_, body)) = frame::decode(was, NODE_PAYLOAD) {
            if NodeRecord::decode(body.try_into().expect("payload")).id() != me {
                assert_eq!(
                    was,
                    &after[at..at + NODE_FRAME],
                    "node {me} changed node slot {slot}"
                );
            }
        }
    }
    for slot in 0..t.export_slots {
        let at = t.export(slot) as usize;
        let was = &before[at..at + EXPORT_FRAME];
        if let Ok((_, body)) = frame::decode(was, EXPORT_PAYLOAD) {
            let rec = ExportRecord::decode(body.try_into().expect("payload"));
            if rec.name != [0; NAME_LEN] && rec.node != me {
                assert_eq!(
                    was,
                    &after[at..at + EXPORT_FRAME],
                    "node {me} changed export slot {slot}"
                );
            }
        }
    }
}

/// `w` with up to two bytes scribbled and maybe cut short, as the input says.
fn scribbled(inp: &mut Input, w: &[u8]) -> Vec<u8> {
    let mut b = w.to_vec();
    for _ in 0..inp.byte() % 3 {
        let at = inp.byte() as usize % b.len();
        b[at] = inp.byte();
    }
    if inp.byte() % 8 == 0 {
        b.truncate(inp.byte() as usize % (b.len() + 1));
    }
    b
}

/// A message read back is the message its writer makes: nothing read loosely.
fn reads_strictly(bytes: &[u8]) {
    if let Some(h) = Hello::read(bytes) {
        assert_eq!(&h.write()[..], &bytes[..HELLO_LEN], "a hello read loosely");
    }
    if let Some(a) = Accept::read(bytes) {
        assert_eq!(
            &a.write()[..],
            &bytes[..ACCEPT_LEN],
            "an accept read loosely"
        );
    }
    if let Refusal::Challenge(n) = Refusal::read(bytes) {
        assert_eq!(
            Refusal::challenge(&n)[..],
            bytes[..Refusal::challenge(&n).len()]
        );
    }
}

/// Connection requests from made-up addresses (hellos written as a member would, then
/// scribbled) read and, when they read, put through the gate, against a model of what
/// it issued; refusals and accepts read.
fn gate(inp: &mut Input) {
    let mut g = Gate::new([0x5eed, 0xcafe], 0);
    // Every challenge issued: (address, nonce, when), and whether it was spent.
    let mut issued: Vec<([u8; NONCE_LEN], u32, i64, bool)> = Vec::new();
    // Every FRESH proof admitted: (address, nonce, time), what a replay repeats.
    let mut admitted: Vec<(u32, [u8; NONCE_LEN], i64)> = Vec::new();
    let mut now = 0i64;
    // The wall clock, ms: the gate starts at it.
    let wall = 1_800_000_000_000i64;
    g.start_fresh(wall);
    for _ in 0..128 {
        if inp.done() {
            break;
        }
        let from = 0xc000_0200 | (inp.byte() as u32 % 6);
        match inp.byte() % 5 {
            0 | 1 => {
                // An ASK, or a PROVE naming a challenge issued (to this address or
                // another) or never issued.
                let pick = inp.byte() as usize;
                let nonce_r = issued
                    .get(pick % (issued.len() + 1))
                    .map_or([0xee; NONCE_LEN], |c| c.0);
                let kind = if inp.byte() % 2 == 0 {
                    Kind::Peer
                } else {
                    Kind::Meta
                };
                // A FRESH one's time: around the gate's clock, before it or long after.
                let at = wall + now + (inp.byte() as i64 - 128) * 100;
                let step = match inp.byte() % 4 {
                    0 => Step::Ask,
                    1 => Step::Fresh(Proof {
                        nonce_r: fresh_nonce(at as u64),
                        tag: [0; 16],
                    }),
                    _ => Step::Prove(Proof {
                        nonce_r,
                        tag: [0; 16],
                    }),
                };
                let written = Hello {
                    kind,
                    index: 0,
                    nonce_i: [inp.byte() % 4; NONCE_LEN],
                    step,
                }
                .write();
                let bytes = scribbled(inp, &written);
                reads_strictly(&bytes);
                let Some(h) = Hello::read(&bytes) else {
                    continue;
                };
                if let Step::Fresh(p) = h.step {
                    // Its tag taken as good: admitted once per nonce, in time, after
                    // the gate started.
                    let at = fresh_time(&p.nonce_r).expect("read strictly");
                    if g.fresh(from, &h.nonce_i, at, wall + now) {
                        assert!(
                            !admitted.contains(&(from, h.nonce_i, at)),
                            "a FRESH proof from {from:#x} admitted twice"
                        );
                        assert!(
                            at > wall + FRESH_MS && (at - (wall + now)).abs() <= FRESH_MS,
                            "out of time"
                        );
                        admitted.push((from, h.nonce_i, at));
                    }
                    continue;
                }
                let Some(p) = h.step.proof().copied() else {
                    let n = g.challenge(from, now);
                    issued.push((n, from, now, false));
                    continue;
                };
                // Its tag taken as good.
                if g.redeem(from, &p.nonce_r, now).is_ok() {
                    let n = p.nonce_r;
                    let live = issued.iter_mut().find(|(m, f, at, spent)| {
                        *m == n && *f == from && !*spent && (0..CHALLENGE_MS).contains(&(now - *at))
                    });
                    let Some(c) = live else {
                        panic!("a proof from {from:#x} admitted for a challenge never issued to it, spent, or expired");
                    };
                    c.3 = true;
                }
            }
            2 => g.bad_tag(),
            3 => {
                // What a dialer reads back: a challenge, a yield, an accept.
                let written = match inp.byte() % 3 {
                    0 => Refusal::challenge(&[inp.byte(); NONCE_LEN]).to_vec(),
                    1 => Refusal::yielding(&[inp.byte(); 16]).to_vec(),
                    _ => Accept {
                        offer: Offer {
                            base: inp.u32() as u64,
                            rkey: inp.u32(),
                            node_slots: 64,
                            export_slots: 256,
                        },
                        tag: [inp.byte(); 16],
                    }
                    .write()
                    .to_vec(),
                };
                reads_strictly(&scribbled(inp, &written));
            }
            _ => now += inp.u32() as i64 % 3_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::fuzzinput::smoke_cases()))]

        /// Random bytes as a wire program: nothing a peer or a MetaServer sends breaks
        /// a promise (shrunk to the shortest failing program when it does).
        #[test]
        fn random_wire_programs(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            super::run(&data);
        }
    }
}
