//! Resolving an export name to a usable record with one-sided READs: the name's probe
//! window ([`lookup`](super::lookup)), then the exporting node's record, to check that
//! the export belongs to the node's current incarnation (a node that crashed never
//! revoked its exports; their rkeys are dead) and that the node is the one the record's
//! id names. So an uncached lookup takes two READ round trips, each read again while
//! torn; the [`client`](super::client) caches the result.

use super::frame::Torn;
use super::lookup::{lookup, LookupError};
use super::node::read_node;
use super::record::{ExportRecord, NodeRecord, NAME_LEN};
use super::tables::{Remote, Tables};

/// Why a name did not resolve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The export lookup failed.
    Lookup(LookupError),
    /// The export belongs to an earlier incarnation of its node (it restarted).
    Stale,
    /// The exporting node has no record (never registered, or another node with the
    /// same slot registered since).
    NoNode,
    /// The node's record stayed torn for every READ.
    NodeTorn(Torn),
    /// A READ of the node table failed.
    Read,
}

/// Looks `name` up and checks it against its node's record: the export and the node's
/// record, in two READs (more while torn). `buf` holds a probe window.
pub fn fetch(
    name: &[u8; NAME_LEN],
    t: &Tables,
    buf: &mut [u8],
    r: &mut impl Remote,
) -> Result<(ExportRecord, NodeRecord), ResolveError> {
    let (record, _) = lookup(name, t, buf, r).map_err(ResolveError::Lookup)?;
    let node = read_node(r, t, record.node)?;
    if !record.live_in(&node) {
        return Err(ResolveError::Stale);
    }
    Ok((record, node))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::frame;
    use crate::meta::lookup::{EXPORT_FRAME, PROBE};
    use crate::meta::record::name;
    use crate::meta::tables::mem::MemRegion;
    use crate::meta::tables::NODE_FRAME;
    use alloc::vec;

    const T: Tables = Tables {
        node_slots: 8,
        export_slots: 64,
        key: [7, 11],
    };

    fn node(id: u16, incarnation: u64) -> NodeRecord {
        NodeRecord {
            gid: [0; 16],
            ipv4: [192, 0, (id >> 8) as u8, id as u8],
            cm_port: 18515,
            incarnation,
        }
    }

    fn put_node(m: &mut MemRegion, n: &NodeRecord, version: u64) {
        let at = T.node(n.id()) as usize;
        frame::encode(&mut m.bytes[at..at + NODE_FRAME], version, &n.encode()).unwrap();
    }

    fn put_export(m: &mut MemRegion, n: &str, node: u16, incarnation: u64) {
        let r = ExportRecord {
            name: name(n).unwrap(),
            node,
            incarnation,
            addr: 0x1000,
            len: 64,
            access: 2,
            rkey: 5,
            grant: crate::meta::record::Grant {
                uid: 1000,
                gid: 1000,
                mode: crate::meta::record::MODE_DEFAULT,
            },
        };
        let at = T.export(T.home(&r.name)) as usize;
        frame::encode(&mut m.bytes[at..at + EXPORT_FRAME], 2, &r.encode()).unwrap();
    }

    fn get(m: &mut MemRegion, n: &str) -> Result<(ExportRecord, NodeRecord), ResolveError> {
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        fetch(&name(n).unwrap(), &T, &mut buf, m)
    }

    #[test]
    fn two_reads_and_stale_after_a_restart() {
        let mut m = MemRegion::new(T.bytes());
        put_node(&mut m, &node(11, 100), 2);
        put_export(&mut m, "kv", 11, 100);
        assert_eq!(
            get(&mut m, "kv").map(|(r, n)| (r.rkey, n.incarnation)),
            Ok((5, 100))
        );
        assert_eq!(m.verbs, 2, "window + node record");
        // Node 11 restarts (new incarnation) without revoking: its old export is stale.
        put_node(&mut m, &node(11, 101), 4);
        assert_eq!(get(&mut m, "kv"), Err(ResolveError::Stale));
        put_export(&mut m, "kv", 11, 101);
        assert_eq!(get(&mut m, "kv").map(|(r, _)| r.incarnation), Ok(101));
    }

    #[test]
    fn missing_torn_and_other_nodes() {
        let mut m = MemRegion::new(T.bytes());
        put_export(&mut m, "orphan", 2, 1);
        assert_eq!(get(&mut m, "orphan"), Err(ResolveError::NoNode));
        // Node 10 shares node 2's slot (10 % 8): its record is not node 2's.
        put_node(&mut m, &node(10, 1), 2);
        assert_eq!(get(&mut m, "orphan"), Err(ResolveError::NoNode));
        put_node(&mut m, &node(2, 1), 4);
        let at = T.node(2) as usize;
        m.bytes[at..at + 8].copy_from_slice(&5u64.to_le_bytes());
        assert_eq!(
            get(&mut m, "orphan"),
            Err(ResolveError::NodeTorn(Torn::Rewriting))
        );
        assert_eq!(
            get(&mut m, "absent"),
            Err(ResolveError::Lookup(LookupError::NotFound))
        );
    }
}
