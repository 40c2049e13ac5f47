//! A node's own record in the MetaServer: registering it when the module loads, and
//! reading a peer's.
//!
//! A node asks the MetaServer's kernel to register its record ([`reconcile`], a
//! [`Request::Register`]); that kernel writes it ([`register`]) after checking it is the
//! node's own ([`serve`](super::serve)). A writer that crashed mid-write leaves an odd
//! head behind: so the first step of a rewrite is a compare-and-swap of the head (from
//! what a READ found to odd), not a plain write. The new incarnation is one
//! more than the slot's previous record's, whole or torn (a node that reloads is never
//! mistaken for its earlier self by a cache that saw that), or 1.

use super::claim::revoke_node;
use super::frame::{self, Torn};
use super::lookup::TRIES;
use super::record::{NodeRecord, NODE_PAYLOAD};
use super::request::{Call, Refusal, Reply, Request};
use super::tables::{Remote, Tables, Unreachable, Writable, NODE_FRAME};

/// Why a node's record did not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeError {
    /// The node has no record (never registered, or another node with the same slot
    /// registered since).
    NoNode,
    /// The record stayed torn for every READ.
    NodeTorn(Torn),
    /// A READ failed.
    Read,
}

/// Why a registration failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// A verb failed.
    Unreachable,
    /// Another writer won the slot's head every time.
    Contended,
    /// The MetaServer refused it, for this reason.
    Refused(Refusal),
}

impl From<Unreachable> for RegisterError {
    fn from(_: Unreachable) -> Self {
        RegisterError::Unreachable
    }
}

/// Reads node `id`'s record: whole, and the node's (its address's low 16 bits are `id`).
pub fn read_node(r: &mut impl Remote, t: &Tables, id: u16) -> Result<NodeRecord, NodeError> {
    let mut node = [0u8; NODE_FRAME];
    let mut last = Torn::Rewriting;
    for _ in 0..TRIES {
        r.read(t.node(id), &mut node).map_err(|_| NodeError::Read)?;
        match frame::decode(&node, NODE_PAYLOAD) {
            Ok((_, body)) => {
                let n = NodeRecord::decode(body.try_into().expect("payload"));
                if n.id() != id {
                    return Err(NodeError::NoNode);
                }
                return Ok(n);
            }
            Err(Torn::Empty) => return Err(NodeError::NoNode),
            Err(t) => last = t,
        }
    }
    Err(NodeError::NodeTorn(last))
}

/// Registers `me`: the incarnation it now has, chosen here past both the slot's last
/// record and `me.incarnation` (what this node had before, 0 when it just loaded), so a
/// node registering again after the MetaServer lost its tables still moves on. The
/// node's earlier records are revoked first (their rkeys died with the incarnation),
/// before its record moves: so a whole export record is always of its node's current
/// incarnation, and a lookup reads its window alone ([`revoke_node`], in `slots`, where
/// the caller's books say the node's records are).
pub fn register(
    r: &mut impl Writable,
    t: &Tables,
    me: &NodeRecord,
    slots: impl Iterator<Item = u32>,
) -> Result<u64, RegisterError> {
    revoke_node(r, t, me.id(), slots)?;
    let off = t.node(me.id());
    let mut f = [0u8; NODE_FRAME];
    for _ in 0..TRIES {
        r.read(off, &mut f)?;
        let head = u64::from_le_bytes(f[..8].try_into().expect("8 bytes"));
        // The body as found, whole or not: a crashed writer's record still names the
        // incarnation it moved to, so the next one is past it either way.
        let body = f[8..8 + NODE_PAYLOAD].try_into().expect("payload");
        let before = NodeRecord::decode(body).incarnation;
        // Even, at or past what is there (a crashed writer's odd head included).
        let base = head + (head & 1);
        if r.cas(off, head, frame::writing(base))? != head {
            continue;
        }
        let incarnation = before.max(me.incarnation).wrapping_add(1).max(1);
        let rec = NodeRecord { incarnation, ..*me };
        frame::encode(&mut f, base + 2, &rec.encode()).expect("frame size");
        let [_, body, _] = frame::rewrite_steps(&f);
        r.write(off + body.0 as u64, &f[body.0..body.0 + body.1])?;
        r.write(off, &f[..8])?;
        return Ok(incarnation);
    }
    Err(RegisterError::Contended)
}

/// What [`reconcile`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// The record is there as this node left it.
    Kept,
    /// This node registered (again, when it had a record before: the MetaServer lost
    /// it, and its names must be published again) with this incarnation.
    Registered {
        /// The incarnation it now has.
        incarnation: u64,
        /// It had registered before.
        again: bool,
    },
}

/// Makes sure the MetaServer holds `me` (its `incarnation` what this node had, 0 when
/// it never registered): a node that registered before reads its record first and
/// registers anew only when it is not there as it was left (the MetaServer restarted
/// with empty tables).
pub fn reconcile(
    r: &mut (impl Remote + Call),
    t: &Tables,
    me: &NodeRecord,
) -> Result<Reconciled, RegisterError> {
    if me.incarnation != 0 {
        match read_node(r, t, me.id()) {
            Ok(n) if n == *me => return Ok(Reconciled::Kept),
            Err(NodeError::Read) => return Err(RegisterError::Unreachable),
            _ => {}
        }
    }
    let incarnation = match r.call(&Request::Register(*me))? {
        Reply::Registered(i) => i,
        Reply::Refused(why) => return Err(RegisterError::Refused(why)),
        // Another request's answer: not a MetaServer this node can trust to be sane.
        _ => return Err(RegisterError::Unreachable),
    };
    Ok(Reconciled::Registered {
        incarnation,
        again: me.incarnation != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::serve::{mapped_gid, mem::Served};
    use crate::meta::tables::mem::MemRegion;

    const T: Tables = Tables {
        node_slots: 8,
        export_slots: 8,
        key: [7, 11],
    };

    fn at<'a>(m: &'a mut MemRegion, me: &NodeRecord) -> Served<'a> {
        Served {
            region: m,
            tables: T,
            from: me.ipv4,
        }
    }

    fn me(last: u8) -> NodeRecord {
        NodeRecord {
            gid: mapped_gid([192, 0, 2, last]),
            ipv4: [192, 0, 2, last],
            cm_port: 7471,
            incarnation: 0,
        }
    }

    #[test]
    fn registering_again_moves_the_incarnation() {
        let mut m = MemRegion::new(T.bytes());
        let a = me(11);
        assert_eq!(register(&mut m, &T, &a, 0..T.export_slots), Ok(1));
        assert_eq!(read_node(&mut m, &T, a.id()).map(|n| n.incarnation), Ok(1));
        assert_eq!(
            register(&mut m, &T, &a, 0..T.export_slots),
            Ok(2),
            "a reload"
        );
        // The MetaServer lost its tables: the node moves past what it had.
        let mut fresh = MemRegion::new(T.bytes());
        let had = NodeRecord {
            incarnation: 2,
            ..a
        };
        assert_eq!(register(&mut fresh, &T, &had, 0..T.export_slots), Ok(3));
        assert_eq!(read_node(&mut m, &T, a.id()).map(|n| n.ipv4), Ok(a.ipv4));
        // Node 19 shares the slot (19 % 8 == 11 % 8): after it registers, node 11's
        // record is gone, not mistaken for 19's.
        let b = me(19);
        assert_eq!(register(&mut m, &T, &b, 0..T.export_slots), Ok(3));
        assert_eq!(read_node(&mut m, &T, a.id()), Err(NodeError::NoNode));
    }

    #[test]
    fn a_crashed_writers_odd_head_is_written_over() {
        let mut m = MemRegion::new(T.bytes());
        let a = me(3);
        register(&mut m, &T, &a, 0..T.export_slots).unwrap();
        let at = T.node(a.id()) as usize;
        m.bytes[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(
            read_node(&mut m, &T, a.id()),
            Err(NodeError::NodeTorn(Torn::Rewriting))
        );
        assert_eq!(
            register(&mut m, &T, &a, 0..T.export_slots),
            Ok(2),
            "past the torn record's"
        );
        assert_eq!(read_node(&mut m, &T, a.id()).map(|n| n.incarnation), Ok(2));
        m.down = true;
        assert_eq!(
            register(&mut m, &T, &a, 0..T.export_slots),
            Err(RegisterError::Unreachable)
        );
    }

    #[test]
    fn reconcile_registers_only_when_the_record_is_gone() {
        let mut m = MemRegion::new(T.bytes());
        let a = me(5);
        let first = reconcile(&mut at(&mut m, &a), &T, &a);
        assert_eq!(
            first,
            Ok(Reconciled::Registered {
                incarnation: 1,
                again: false
            })
        );
        let had = NodeRecord {
            incarnation: 1,
            ..a
        };
        assert_eq!(
            reconcile(&mut at(&mut m, &had), &T, &had),
            Ok(Reconciled::Kept),
            "still there"
        );
        let mut fresh = MemRegion::new(T.bytes());
        assert_eq!(
            reconcile(&mut at(&mut fresh, &had), &T, &had),
            Ok(Reconciled::Registered {
                incarnation: 2,
                again: true
            }),
            "the MetaServer lost it"
        );
        fresh.down = true;
        assert_eq!(
            reconcile(&mut at(&mut fresh, &had), &T, &had),
            Err(RegisterError::Unreachable)
        );
    }
}
