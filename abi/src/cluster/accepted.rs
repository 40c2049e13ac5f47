//! Peer kernels' connections this node's listener holds, per source node: no member
//! fills the listener for the others.
//!
//! Each accepted connection (a connection set's, or a MetaServer client's) holds a QP
//! and, for a MetaServer one, a serving buffer and CQ. The listener holds at most
//! [`MAX_ACCEPTED`] at once; without a bound per source, one member's 64 MetaServer
//! connections (its users' program, with the key its root read) refused every other
//! node's sets and lookups. So one node holds at most [`ACCEPTED_PER_NODE`], and the last
//! [`ACCEPTED_KEPT_FOR_NEW`] places go only to a node holding none yet: whatever the members
//! already connected hold, a node coming up is served.
//!
//! Charged only once a request's proof is judged good (cm.c, under its connection
//! lock), so a request's claimed address, unproved, costs that address nothing; given
//! back where the connection leaves the listener's list, or where its acceptance fails.

/// Connections the listener holds at once.
pub const MAX_ACCEPTED: usize = 64;

/// Connections one source node may hold: a set's (two QPs, and a set being made anew
/// beside one draining) and a MetaServer client's per device, with room to spare.
pub const ACCEPTED_PER_NODE: u16 = 8;

/// Places a node already holding connections may not take: kept for nodes holding none.
pub const ACCEPTED_KEPT_FOR_NEW: usize = 8;

/// The listener's connections, by source node (an IPv4 address, as the wire has it).
pub struct Accepted {
    /// Nodes holding connections, with how many (0: a free entry).
    nodes: [(u32, u16); MAX_ACCEPTED],
    /// Connections held, in all.
    total: usize,
}

impl Default for Accepted {
    fn default() -> Self {
        Accepted {
            nodes: [(0, 0); MAX_ACCEPTED],
            total: 0,
        }
    }
}

impl Accepted {
    /// A connection from `node`, its proof good: taken (charged to it) or refused.
    pub fn admit(&mut self, node: u32) -> bool {
        let at = self.nodes.iter().position(|&(a, n)| n > 0 && a == node);
        let held = at.map_or(0, |i| self.nodes[i].1);
        let room = match held {
            0 => MAX_ACCEPTED,
            _ => MAX_ACCEPTED - ACCEPTED_KEPT_FOR_NEW,
        };
        if held >= ACCEPTED_PER_NODE || self.total >= room {
            return false;
        }
        let i = match at.or_else(|| self.nodes.iter().position(|&(_, n)| n == 0)) {
            Some(i) => i,
            None => return false,
        };
        self.nodes[i] = (node, held + 1);
        self.total += 1;
        true
    }

    /// A connection [`admit`](Self::admit) took from `node` went.
    pub fn release(&mut self, node: u32) {
        if let Some(e) = self.nodes.iter_mut().find(|e| e.1 > 0 && e.0 == node) {
            e.1 -= 1;
            self.total -= 1;
        }
    }

    /// Connections `node` holds.
    pub fn held(&self, node: u32) -> u16 {
        self.nodes
            .iter()
            .find(|e| e.1 > 0 && e.0 == node)
            .map_or(0, |e| e.1)
    }

    /// Connections held in all.
    pub fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_node_holds_its_part_and_new_nodes_find_room() {
        let mut a = Accepted::default();
        let hog = 0x0a00_0002;
        let taken = (0..20).filter(|_| a.admit(hog)).count();
        assert_eq!(taken, ACCEPTED_PER_NODE as usize, "one node's connections");
        // Six more members take their 8 each: all but the kept places.
        for n in 0..6u32 {
            for _ in 0..ACCEPTED_PER_NODE {
                assert!(a.admit(0x0a00_0100 + n));
            }
        }
        assert_eq!(a.total(), MAX_ACCEPTED - ACCEPTED_KEPT_FOR_NEW);
        // A node holding none takes a kept place; then it is like the others.
        let late = 0x0a00_0200;
        assert!(a.admit(late));
        assert!(!a.admit(late), "a node holding some takes no kept place");
        // One going frees a place, but only for a node holding none while the kept
        // places are in use.
        a.release(hog);
        assert_eq!(a.held(hog), ACCEPTED_PER_NODE - 1);
        assert!(!a.admit(late));
        let fresh = (0..20u32).filter(|n| a.admit(0x0b00_0000 + n)).count();
        assert_eq!(
            fresh, ACCEPTED_KEPT_FOR_NEW,
            "new nodes, one each, to the last place"
        );
        assert_eq!(a.total(), MAX_ACCEPTED);
        a.release(0x0c00_0000);
        assert_eq!(
            a.total(),
            MAX_ACCEPTED,
            "a release of nothing changes nothing"
        );
    }
}
