//! A node's cache of MetaServer lookups: export records by name, dropped when they go
//! stale.
//!
//! A record goes stale when its exporting node restarts (the incarnation in its node
//! record moves: its MRs and rkeys are gone) or when the export is revoked (a use fails
//! with a remote access error, or the exporter says so). The cache learns the first from
//! [`saw_node`](MetaCache::saw_node), called whenever a node record is read (at connect,
//! and again when a connection to that node breaks), and the second from
//! [`forget`](MetaCache::forget). It never holds a record of an incarnation older than
//! the newest it has seen for that node. Fixed capacity over caller storage; when full,
//! the oldest entry goes.

use super::super::engine::Store;
use super::record::{ExportRecord, NAME_LEN};

/// Export records by name, with each node's newest incarnation seen.
pub struct MetaCache<S: Store> {
    entries: S::Buf<Option<ExportRecord>>,
    /// Where the next insertion goes when no slot is free (oldest first).
    next: usize,
    /// Newest incarnation seen per node, by node id modulo its length: `(id,
    /// incarnation)`, a node whose id shares the slot replacing it.
    nodes: S::Buf<(u16, u64)>,
}

impl<S: Store> MetaCache<S> {
    /// A cache over `entries` (all `None`) and `nodes` (all `(0, 0)`, at least one).
    pub fn new(entries: S::Buf<Option<ExportRecord>>, nodes: S::Buf<(u16, u64)>) -> Self {
        MetaCache {
            entries,
            next: 0,
            nodes,
        }
    }

    /// The cached record of `name`, if any.
    pub fn get(&self, name: &[u8; NAME_LEN]) -> Option<ExportRecord> {
        self.entries
            .as_ref()
            .iter()
            .flatten()
            .find(|r| r.name == *name)
            .copied()
    }

    /// Node `id`'s slot in `nodes`.
    fn node_slot(&mut self, id: u16) -> Option<&mut (u16, u64)> {
        let nodes = self.nodes.as_mut();
        // checked_rem: no panic path (the kernel build's objtool rejects one).
        let i = (id as usize).checked_rem(nodes.len())?;
        nodes.get_mut(i)
    }

    /// Caches `r` (a lookup's result), replacing a record of the same name; refused
    /// (`false`) when `r` is older than its node's newest incarnation seen.
    pub fn put(&mut self, r: ExportRecord) -> bool {
        if self
            .node_slot(r.node)
            .is_some_and(|&mut (id, newest)| id == r.node && r.incarnation < newest)
        {
            return false;
        }
        let entries = self.entries.as_mut();
        if entries.is_empty() {
            return false;
        }
        let slot = entries
            .iter()
            .position(|e| e.is_some_and(|e| e.name == r.name))
            .or_else(|| entries.iter().position(Option::is_none))
            .unwrap_or_else(|| {
                let s = self.next;
                self.next = if s + 1 < entries.len() { s + 1 } else { 0 };
                s
            });
        entries[slot] = Some(r);
        true
    }

    /// A node record of `node` was read showing `incarnation`: drops every cached
    /// record of that node from another incarnation. Returns how many went.
    pub fn saw_node(&mut self, node: u16, incarnation: u64) -> usize {
        if let Some(n) = self.node_slot(node) {
            *n = match *n {
                (id, newest) if id == node => (id, newest.max(incarnation)),
                _ => (node, incarnation),
            };
        }
        self.drop_where(|r| r.node == node && r.incarnation != incarnation)
    }

    /// Drops every record of `node` (its connection set broke: it may have restarted).
    pub fn forget_node(&mut self, node: u16) -> usize {
        self.drop_where(|r| r.node == node)
    }

    /// Drops the records of `node`'s export `rkey` (revoked there).
    pub fn forget_export(&mut self, node: u16, rkey: u32) -> usize {
        self.drop_where(|r| r.node == node && r.rkey == rkey)
    }

    /// Drops the record of `name` (its use failed: revoked).
    pub fn forget(&mut self, name: &[u8; NAME_LEN]) -> bool {
        self.drop_where(|r| r.name == *name) > 0
    }

    fn drop_where(&mut self, stale: impl Fn(&ExportRecord) -> bool) -> usize {
        let mut n = 0;
        for e in self.entries.as_mut() {
            if e.is_some_and(|r| stale(&r)) {
                *e = None;
                n += 1;
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::VecStore;
    use crate::meta::record::name;
    use alloc::vec;

    fn rec(n: &str, node: u16, incarnation: u64) -> ExportRecord {
        ExportRecord {
            name: name(n).unwrap(),
            node,
            incarnation,
            addr: 0,
            len: 8,
            access: 2,
            rkey: 1,
            grant: crate::meta::record::Grant {
                uid: 1000,
                gid: 1000,
                mode: crate::meta::record::MODE_DEFAULT,
            },
        }
    }

    fn cache(entries: usize) -> MetaCache<VecStore> {
        MetaCache::new(vec![None; entries], vec![(0, 0); 8])
    }

    #[test]
    fn a_restart_drops_that_nodes_records_only() {
        let mut c = cache(8);
        assert!(c.put(rec("a", 1, 10)) && c.put(rec("b", 1, 10)) && c.put(rec("c", 2, 5)));
        assert_eq!(c.saw_node(1, 10), 0, "same incarnation: nothing stale");
        assert_eq!(c.saw_node(1, 11), 2, "node 1 restarted");
        assert!(c.get(&name("a").unwrap()).is_none());
        assert_eq!(c.get(&name("c").unwrap()).map(|r| r.node), Some(2));
        assert!(
            !c.put(rec("a", 1, 10)),
            "a lookup of the old incarnation is refused"
        );
        assert!(c.put(rec("a", 1, 11)));
        // Node 9 shares node 1's slot (of 8): tracked in its place.
        assert_eq!(c.saw_node(9, 4), 0);
        assert!(c.put(rec("z", 9, 4)));
        assert_eq!(c.forget_node(1), 1);
        assert!(c.get(&name("z").unwrap()).is_some());
    }

    #[test]
    fn bounded_replacing_and_forgetting() {
        let mut c = cache(2);
        c.put(rec("a", 1, 1));
        c.put(rec("b", 1, 1));
        c.put(rec("a", 1, 2));
        assert_eq!(c.get(&name("a").unwrap()).map(|r| r.incarnation), Some(2));
        assert!(
            c.get(&name("b").unwrap()).is_some(),
            "same name replaced in place"
        );
        c.put(rec("c", 1, 2));
        let held = ["a", "b", "c"]
            .iter()
            .filter(|n| c.get(&name(n).unwrap()).is_some())
            .count();
        assert_eq!(held, 2, "capacity bounds it");
        assert!(c.forget(&name("c").unwrap()));
        assert!(!c.forget(&name("c").unwrap()));
    }
}
