//! The MetaServer's kernel answering a node's [`Request`]: the checks that keep each
//! node's writes to its own entries, then the write, on the region's only writer.
//!
//! The asking node is the address its connection came from (cm.c proved that the
//! connection's kernel holds the cluster key, and rdma_cm that it answers at that
//! address). So a node may:
//! - register only a record of its own address and GID, in a node slot no other
//!   address's whole record holds (two addresses whose ids share a slot: the first
//!   keeps it, and the second is refused, not let in to take it over);
//! - publish only records naming the node it is registered as, at its current
//!   incarnation, under a valid name (an empty one would be a tombstone);
//! - revoke only a slot whose record is its own;
//! - hold at most its share of the exports table ([`Shares`]), so no node's users fill
//!   the table every node publishes in.
//!
//! Requests are served one at a time (the caller holds the region's lock), so a claim's
//! compare-and-swap never loses to another writer; it still steps over a frame left odd.

use super::claim::{self, PublishError};
use super::frame;
use super::lookup::EXPORT_FRAME;
use super::node::{read_node, register, RegisterError};
use super::record::{
    name_from_words, name_words, node_id, ExportRecord, NodeRecord, EXPORT_PAYLOAD, NAME_LEN,
    NODE_PAYLOAD,
};
use super::request::{Refusal, Reply, Request};
use super::tables::{Tables, Writable, NODE_FRAME};

/// The GID a node at IPv4 address `ipv4` has (RoCE v2, IPv4-mapped).
pub fn mapped_gid(ipv4: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ipv4);
    g
}

/// The record of the node registered at `from`'s id, if it is `from`'s.
fn registered(r: &mut impl Writable, t: &Tables, from: [u8; 4]) -> Option<NodeRecord> {
    read_node(r, t, node_id(from))
        .ok()
        .filter(|n| n.ipv4 == from)
}

/// How many names each node holds in the exports table, against its share: the
/// MetaServer's bound per peer node. The serving kernel keeps it beside the region (and
/// zeroes it with a new one). [`serve`] counts a publication in and a revocation out; a
/// node's count starts over when it registers, since a new incarnation's names are
/// published anew (its earlier records are revoked then).
///
/// It also keeps where each node's records are ([`owners`](Self::owners)): this kernel
/// is the region's only writer, so the books are exact, and a Register revokes the
/// node's records in their slots alone. A Register then costs what the node holds (its
/// share at most), never a read of the whole exports table under the serving lock.
pub struct Shares<'a> {
    /// Names held, per node slot ([`Tables::node_slot`]); a slot past its end holds
    /// none and may hold none.
    pub held: &'a mut [u16],
    /// Per export slot, 1 + the node slot of the node whose record it holds (0: none,
    /// a tombstone, or never written); as many as `export_slots` (a slot past its end
    /// is never revoked by a Register).
    pub owners: &'a mut [u16],
    /// Names one node may hold.
    pub share: u16,
}

impl Shares<'_> {
    fn held(&mut self, t: &Tables, node: u16) -> Option<&mut u16> {
        self.held.get_mut(t.node_slot(node) as usize)
    }

    /// What [`owners`](Self::owners) says of a slot holding `node`'s record.
    fn owner_mark(t: &Tables, node: u16) -> u16 {
        t.node_slot(node) as u16 + 1
    }

    /// Notes export slot `slot` as holding `node`'s record (`None`: nobody's).
    fn note(&mut self, t: &Tables, slot: u32, node: Option<u16>) {
        if let Some(o) = self.owners.get_mut(slot as usize) {
            *o = node.map_or(0, |n| Self::owner_mark(t, n));
        }
    }
}

/// Answers `req` from the node at `from`, writing the region `r` as it asks when the
/// checks pass, and counting each node's names in `shares`. `window` holds a probe
/// window (the publication's reads).
pub fn serve(
    r: &mut impl Writable,
    t: &Tables,
    shares: &mut Shares<'_>,
    from: [u8; 4],
    req: &Request,
    window: &mut [u8],
) -> Reply {
    match req {
        Request::Register(me) => {
            if me.ipv4 != from || me.gid != mapped_gid(from) {
                return Reply::Refused(Refusal::NotYours);
            }
            let mut f = [0u8; NODE_FRAME];
            if r.read(t.node(me.id()), &mut f).is_err() {
                return Reply::Refused(Refusal::Contended);
            }
            if let Ok((_, body)) = frame::decode(&f, NODE_PAYLOAD) {
                let held = NodeRecord::decode(body.try_into().expect("payload"));
                if held.ipv4 != from {
                    return Reply::Refused(Refusal::SlotHeld);
                }
            }
            // Its records are where the books say: nowhere else is read.
            let mark = Shares::owner_mark(t, me.id());
            let owners = &*shares.owners;
            let mine = (0..owners.len() as u32).filter(|&s| owners[s as usize] == mark);
            match register(r, t, me, mine) {
                Ok(incarnation) => {
                    if let Some(h) = shares.held(t, me.id()) {
                        *h = 0;
                    }
                    shares
                        .owners
                        .iter_mut()
                        .filter(|o| **o == mark)
                        .for_each(|o| *o = 0);
                    Reply::Registered(incarnation)
                }
                Err(RegisterError::Unreachable | RegisterError::Contended)
                | Err(RegisterError::Refused(_)) => Reply::Refused(Refusal::Contended),
            }
        }
        Request::Publish(rec) => {
            if name_from_words(name_words(&rec.name)).is_none() {
                return Reply::Refused(Refusal::Malformed);
            }
            match registered(r, t, from) {
                Some(n) if rec.node == n.id() && rec.incarnation == n.incarnation => {}
                _ => return Reply::Refused(Refusal::NotYours),
            }
            let share = shares.share;
            match shares.held(t, rec.node) {
                Some(h) if *h < share => {}
                _ => return Reply::Refused(Refusal::Share),
            }
            match claim::publish(r, t, rec, window) {
                Ok(slot) => {
                    if let Some(h) = shares.held(t, rec.node) {
                        *h += 1;
                    }
                    shares.note(t, slot, Some(rec.node));
                    Reply::Published(slot)
                }
                Err(PublishError::Taken) => Reply::Refused(Refusal::Taken),
                Err(PublishError::Full) => Reply::Refused(Refusal::Full),
                Err(PublishError::Contended | PublishError::Unreachable) => {
                    Reply::Refused(Refusal::Contended)
                }
            }
        }
        Request::Revoke { name, slot } => {
            if *slot >= t.export_slots || name_from_words(name_words(name)).is_none() {
                return Reply::Refused(Refusal::Malformed);
            }
            let held = match owner(r, t, from, *slot, name) {
                Owner::Other => return Reply::Refused(Refusal::NotYours),
                Owner::Nobody => false,
                Owner::Asker => true,
            };
            match claim::revoke(r, t, *slot, name) {
                Ok(()) => {
                    if let Some(h) = held.then(|| shares.held(t, node_id(from))).flatten() {
                        *h = h.saturating_sub(1);
                        shares.note(t, *slot, None);
                    }
                    Reply::Revoked
                }
                Err(_) => Reply::Refused(Refusal::Contended),
            }
        }
    }
}

/// Whose record of `name` revoking `slot` would tombstone.
enum Owner {
    /// No whole record of that name is there: nothing to revoke.
    Nobody,
    /// The node registered at the asking address's.
    Asker,
    /// Another node's, or a torn frame's: refused.
    Other,
}

/// Whose record of `name` is in `slot`, as the node at `from` asks to revoke it.
fn owner(
    r: &mut impl Writable,
    t: &Tables,
    from: [u8; 4],
    slot: u32,
    name: &[u8; NAME_LEN],
) -> Owner {
    let mut f = [0u8; EXPORT_FRAME];
    if r.read(t.export(slot), &mut f).is_err() {
        return Owner::Other;
    }
    let rec = match frame::decode(&f, EXPORT_PAYLOAD) {
        Ok((_, body)) => ExportRecord::decode(body.try_into().expect("payload")),
        // Torn: only the one writer could be rewriting it, and it is not (requests are
        // served one at a time); a crashed rewrite's odd frame is nobody's to revoke.
        Err(_) => return Owner::Other,
    };
    if rec.name != *name {
        Owner::Nobody
    } else if rec.node == node_id(from) && registered(r, t, from).is_some() {
        Owner::Asker
    } else {
        Owner::Other
    }
}

/// A MetaServer in local memory, served as its kernel serves it: what tests and the
/// fake node reach with [`Call`](super::request::Call).
#[cfg(any(test, feature = "alloc"))]
pub mod mem {
    use super::super::lookup::{EXPORT_FRAME, PROBE};
    use super::super::request::{Call, Reply, Request, REQUEST_LEN};
    use super::super::tables::{mem::MemRegion, Remote, Tables, Unreachable};
    use super::{serve, Shares};

    /// The node at `from` reaching the region `region`: READs one-sided, writes asked.
    pub struct Served<'a> {
        /// The region.
        pub region: &'a mut MemRegion,
        /// Its shape.
        pub tables: Tables,
        /// The asking node's address.
        pub from: [u8; 4],
    }

    impl Remote for Served<'_> {
        fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Unreachable> {
            self.region.read(off, buf)
        }
    }

    impl Call for Served<'_> {
        fn call(&mut self, req: &Request) -> Result<Reply, Unreachable> {
            if self.region.down {
                return Err(Unreachable);
            }
            // Through the bytes, as the wire carries them.
            let mut b = [0u8; REQUEST_LEN];
            let n = req.encode(&mut b);
            let req = Request::decode(&b[..n]).expect("a request decodes");
            let mut window = [0u8; PROBE * EXPORT_FRAME];
            let mut held = core::mem::take(&mut self.region.held);
            held.resize(self.tables.node_slots as usize, 0);
            let mut owners = core::mem::take(&mut self.region.owners);
            owners.resize(self.tables.export_slots as usize, 0);
            let mut shares = Shares {
                held: &mut held,
                owners: &mut owners,
                share: self.region.share,
            };
            let reply = serve(
                self.region,
                &self.tables,
                &mut shares,
                self.from,
                &req,
                &mut window,
            );
            self.region.held = held;
            self.region.owners = owners;
            Reply::decode(&reply.encode()).ok_or(Unreachable)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::lookup::PROBE;
    use crate::meta::record::name;
    use crate::meta::tables::mem::MemRegion;

    const T: Tables = Tables {
        node_slots: 8,
        export_slots: 16,
        key: [7, 11],
    };

    fn node(last: u8, incarnation: u64) -> NodeRecord {
        let ipv4 = [192, 0, 2, last];
        NodeRecord {
            gid: mapped_gid(ipv4),
            ipv4,
            cm_port: 7471,
            incarnation,
        }
    }

    /// An export record of the node at 192.0.2.`last`.
    fn export(n: &str, last: u8, incarnation: u64) -> ExportRecord {
        ExportRecord {
            name: name(n).unwrap(),
            node: node_id([192, 0, 2, last]),
            incarnation,
            addr: 0x1000,
            len: 64,
            access: 1,
            rkey: 0x77,
            grant: crate::meta::record::Grant {
                uid: 1000,
                gid: 1000,
                mode: crate::meta::record::MODE_DEFAULT,
            },
        }
    }

    fn ask(m: &mut MemRegion, from: u8, req: Request) -> Reply {
        ask_shared(m, from, req, 64)
    }

    fn ask_shared(m: &mut MemRegion, from: u8, req: Request, share: u16) -> Reply {
        let mut w = [0u8; PROBE * EXPORT_FRAME];
        let mut held = core::mem::take(&mut m.held);
        held.resize(T.node_slots as usize, 0);
        let mut owners = core::mem::take(&mut m.owners);
        owners.resize(T.export_slots as usize, 0);
        let mut shares = Shares {
            held: &mut held,
            owners: &mut owners,
            share,
        };
        let reply = serve(m, &T, &mut shares, [192, 0, 2, from], &req, &mut w);
        m.held = held;
        m.owners = owners;
        reply
    }

    /// A Register reads the node's own slots alone (the books say where its records
    /// are), not the exports table: with 4,096 slots, a node of 2 names re-registers in
    /// a few verbs, its names go, and another node's stay.
    #[test]
    fn a_register_reads_only_what_the_node_holds() {
        use super::super::request::Call;
        use super::mem::Served;
        let big = Tables {
            export_slots: 4096,
            ..T
        };
        let mut m = MemRegion::new(big.bytes());
        let call = |m: &mut MemRegion, from: u8, req: Request| {
            let mut s = Served {
                region: m,
                tables: big,
                from: [192, 0, 2, from],
            };
            s.call(&req).unwrap()
        };
        for n in [1, 2] {
            assert_eq!(
                call(&mut m, n, Request::Register(node(n, 0))),
                Reply::Registered(1)
            );
        }
        for (n, what) in [(1, "a"), (1, "b"), (2, "c")] {
            let r = call(&mut m, n, Request::Publish(export(what, n, 1)));
            assert!(matches!(r, Reply::Published(_)), "{what}: {r:?}");
        }
        let before = m.verbs;
        assert_eq!(
            call(&mut m, 1, Request::Register(node(1, 0))),
            Reply::Registered(2)
        );
        let verbs = m.verbs - before;
        assert!(
            verbs < 32,
            "a Register of a node of 2 names took {verbs} verbs"
        );
        // Gone: published anew; the other node's stays (its name is taken).
        let again = call(&mut m, 1, Request::Publish(export("a", 1, 2)));
        assert!(matches!(again, Reply::Published(_)), "{again:?}");
        let theirs = call(&mut m, 1, Request::Publish(export("c", 1, 2)));
        assert_eq!(theirs, Reply::Refused(Refusal::Taken));
        // A node holding nothing registers in as few.
        let before = m.verbs;
        assert_eq!(
            call(&mut m, 3, Request::Register(node(3, 0))),
            Reply::Registered(1)
        );
        assert!(m.verbs - before < 32, "{} verbs", m.verbs - before);
    }

    #[test]
    fn a_node_holds_its_share_of_the_table_and_no_more() {
        let mut m = MemRegion::new(T.bytes());
        for n in [1, 2] {
            assert_eq!(
                ask(&mut m, n, Request::Register(node(n, 0))),
                Reply::Registered(1)
            );
        }
        let publish = |m: &mut MemRegion, n: u8, what: &str| {
            ask_shared(m, n, Request::Publish(export(what, n, 1)), 3)
        };
        let mut slots = alloc::vec::Vec::new();
        for what in ["a", "b", "c"] {
            let Reply::Published(slot) = publish(&mut m, 1, what) else {
                panic!("{what} not published");
            };
            slots.push(slot);
        }
        assert_eq!(publish(&mut m, 1, "d"), Reply::Refused(Refusal::Share));
        // Another node's share is its own.
        assert!(matches!(publish(&mut m, 2, "e"), Reply::Published(_)));
        // A refused or repeated revocation frees nothing; a revocation frees one.
        let a = name("a").unwrap();
        assert_eq!(
            ask_shared(
                &mut m,
                2,
                Request::Revoke {
                    name: a,
                    slot: slots[0]
                },
                3
            ),
            Reply::Refused(Refusal::NotYours)
        );
        assert_eq!(publish(&mut m, 1, "d"), Reply::Refused(Refusal::Share));
        assert_eq!(
            ask_shared(
                &mut m,
                1,
                Request::Revoke {
                    name: a,
                    slot: slots[0]
                },
                3
            ),
            Reply::Revoked
        );
        assert_eq!(
            ask_shared(
                &mut m,
                1,
                Request::Revoke {
                    name: a,
                    slot: slots[0]
                },
                3
            ),
            Reply::Revoked
        );
        assert!(matches!(publish(&mut m, 1, "d"), Reply::Published(_)));
        assert_eq!(publish(&mut m, 1, "f"), Reply::Refused(Refusal::Share));
        // A new incarnation publishes anew: its count starts over.
        assert_eq!(
            ask(&mut m, 1, Request::Register(node(1, 0))),
            Reply::Registered(2)
        );
        let again = ask_shared(&mut m, 1, Request::Publish(export("f", 1, 2)), 3);
        assert!(matches!(again, Reply::Published(_)), "{again:?}");
    }

    #[test]
    fn a_node_registers_publishes_and_revokes_its_own() {
        let mut m = MemRegion::new(T.bytes());
        assert_eq!(
            ask(&mut m, 1, Request::Register(node(1, 0))),
            Reply::Registered(1)
        );
        let Reply::Published(slot) = ask(&mut m, 1, Request::Publish(export("kv", 1, 1))) else {
            panic!("not published");
        };
        let name = name("kv").unwrap();
        assert_eq!(
            ask(&mut m, 1, Request::Revoke { name, slot }),
            Reply::Revoked
        );
        assert_eq!(
            ask(&mut m, 1, Request::Publish(export("kv", 1, 1))),
            Reply::Published(slot),
            "the tombstone is claimed again"
        );
    }

    #[test]
    fn nothing_of_another_node_is_written() {
        let mut m = MemRegion::new(T.bytes());
        assert_eq!(
            ask(&mut m, 1, Request::Register(node(1, 0))),
            Reply::Registered(1)
        );
        assert_eq!(
            ask(&mut m, 2, Request::Register(node(2, 0))),
            Reply::Registered(1)
        );
        let Reply::Published(slot) = ask(&mut m, 1, Request::Publish(export("kv", 1, 1))) else {
            panic!("not published");
        };
        let before = m.bytes.clone();
        let refused = [
            // Node 2 registers node 1's record, or one with another GID.
            Request::Register(node(1, 0)),
            Request::Register(NodeRecord {
                gid: [9; 16],
                ..node(2, 0)
            }),
            // Node 2 publishes as node 1, or at an incarnation it does not have.
            Request::Publish(export("mine", 1, 1)),
            Request::Publish(export("mine", 2, 7)),
            // Node 2 revokes node 1's export.
            Request::Revoke {
                name: name("kv").unwrap(),
                slot,
            },
        ];
        for req in refused {
            assert_eq!(
                ask(&mut m, 2, req),
                Reply::Refused(Refusal::NotYours),
                "{req:?}"
            );
        }
        // Node 10 shares node 2's slot (10 % 8 == 2 % 8): refused, not let in.
        assert_eq!(
            ask(&mut m, 10, Request::Register(node(10, 0))),
            Reply::Refused(Refusal::SlotHeld)
        );
        // An unregistered node publishes nothing, an empty name is no name, and a slot
        // past the table is no slot.
        assert_eq!(
            ask(&mut m, 3, Request::Publish(export("x", 3, 1))),
            Reply::Refused(Refusal::NotYours)
        );
        let mut empty = export("x", 1, 1);
        empty.name = [0; NAME_LEN];
        assert_eq!(
            ask(&mut m, 1, Request::Publish(empty)),
            Reply::Refused(Refusal::Malformed)
        );
        assert_eq!(
            ask(
                &mut m,
                1,
                Request::Revoke {
                    name: name("kv").unwrap(),
                    slot: T.export_slots
                }
            ),
            Reply::Refused(Refusal::Malformed)
        );
        assert_eq!(
            ask(
                &mut m,
                1,
                Request::Revoke {
                    name: [0; NAME_LEN],
                    slot
                }
            ),
            Reply::Refused(Refusal::Malformed),
            "a tombstone's name is no name"
        );
        assert!(m.bytes == before, "a refused request wrote nothing");
    }

    #[test]
    fn a_node_that_reloads_takes_its_slot_and_its_old_names() {
        let mut m = MemRegion::new(T.bytes());
        assert_eq!(
            ask(&mut m, 1, Request::Register(node(1, 0))),
            Reply::Registered(1)
        );
        assert!(matches!(
            ask(&mut m, 1, Request::Publish(export("kv", 1, 1))),
            Reply::Published(_)
        ));
        // Reloaded: a new incarnation, and the earlier one's record of the name is
        // claimed over.
        assert_eq!(
            ask(&mut m, 1, Request::Register(node(1, 0))),
            Reply::Registered(2)
        );
        assert!(matches!(
            ask(&mut m, 1, Request::Publish(export("kv", 1, 2))),
            Reply::Published(_)
        ));
    }
}
