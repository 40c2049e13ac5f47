//! Ports: which user holds which local port of this node's message endpoints.
//!
//! A message link is a four-tuple, as a TCP connection is: (this node, local port, peer
//! node, peer port); see `message` and `far`. A node's ports are one space, held here
//! for the device (a leaf lock, [`Fabric::ports`](super::fabric::Fabric::ports)):
//!
//! - a LISTEN holds its port for its user, alone: no other LISTEN, and no CONNECT that
//!   names the port as its own, may use it while it listens;
//! - a CONNECT that names its local port (to pair with a peer that names it back, see
//!   `far`) shares the port with its user's other CONNECTs from it, never another
//!   user's;
//! - a CONNECT that names none gets an ephemeral port of its own, from
//!   [`EPHEMERAL_FIRST`]..=[`EPHEMERAL_LAST`] (Linux's default range).
//!
//! Ports below [`PRIVILEGED`] need `CAP_NET_BIND_SERVICE`, as sockets' do. Port 0 is
//! no port: a virtual QP connected with service 0 has no endpoint (one-sided verbs
//! only).
//!
//! The table is open-addressed by port (linear probing, deletion by backward shift),
//! at most half full, so every lookup is a few probes; an ephemeral port is found by
//! stepping through the range in a fixed permutation from a random start, and since
//! the table holds fewer ports than the range, the search ends within as many steps as
//! ports are held.

use super::cqe::Reason;
use super::Store;

/// Ports below this need `CAP_NET_BIND_SERVICE`.
pub const PRIVILEGED: u16 = 1024;
/// The first ephemeral port.
pub const EPHEMERAL_FIRST: u16 = 32768;
/// The last ephemeral port.
pub const EPHEMERAL_LAST: u16 = 60999;

const RANGE: u32 = (EPHEMERAL_LAST - EPHEMERAL_FIRST) as u32 + 1;
/// Coprime with [`RANGE`] (28,232 = 8 × 3,529): stepping by it visits every port of
/// the range once.
const STRIDE: u32 = 7919;

/// Supplementary groups a ring's creator is counted in, at most (further ones are not
/// counted: a name's group class then does not apply through them).
pub const MAX_GROUPS: usize = 16;

/// A ring creator's supplementary groups (gids as the initial namespace sees them), the
/// first [`MAX_GROUPS`] of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Groups {
    n: u8,
    gid: [u32; MAX_GROUPS],
}

impl Groups {
    /// No supplementary group.
    pub const NONE: Groups = Groups {
        n: 0,
        gid: [0; MAX_GROUPS],
    };

    /// The first [`MAX_GROUPS`] of `gids`.
    pub fn new(gids: &[u32]) -> Groups {
        let mut g = Groups::NONE;
        let n = gids.len().min(MAX_GROUPS);
        g.gid[..n].copy_from_slice(&gids[..n]);
        g.n = n as u8;
        g
    }

    /// Whether `gid` is one of them.
    pub fn contains(&self, gid: u32) -> bool {
        self.gid[..self.n as usize].contains(&gid)
    }
}

/// Who asks for a port: its user, and whether it may take a privileged one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Creds {
    /// The user (a uid as the initial namespace sees it).
    pub uid: u32,
    /// Its group (its gid as the initial namespace sees it): with [`groups`](Self::groups),
    /// the class a name's mode gives it after the owner's (see `meta::record::Grant`).
    pub gid: u32,
    /// Its supplementary groups, as a file's group class counts them.
    pub groups: Groups,
    /// It holds `CAP_NET_BIND_SERVICE`.
    pub bind_low: bool,
    /// Its slot in the module's user table: what its shares are counted under (see
    /// `shares`).
    pub user: u32,
}

impl Creds {
    /// Whether it is in group `gid`: its own, or one of its supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        gid == self.gid || self.groups.contains(gid)
    }
}

/// How a port is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// By a LISTEN, alone.
    Listen,
    /// By CONNECTs of one user that named it.
    Named,
    /// By one CONNECT that named none.
    Ephemeral,
}

/// One held port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The port (0: the slot is empty).
    pub port: u16,
    /// How.
    pub hold: Hold,
    /// Its user.
    pub uid: u32,
    /// Holders (CONNECTs that named it; 1 otherwise).
    pub refs: u32,
}

const EMPTY: Held = Held::EMPTY;

impl Held {
    /// An empty slot, for filling the storage a table is made from.
    pub const EMPTY: Held = Held {
        port: 0,
        hold: Hold::Ephemeral,
        uid: 0,
        refs: 0,
    };
}

/// The storage [`Ports`] is built from: a power of two of slots, twice the ports it
/// may hold.
pub struct PortStorage<S: Store> {
    /// The slots.
    pub slots: S::Buf<Held>,
}

/// A node's held ports.
pub struct Ports<S: Store> {
    slots: S::Buf<Held>,
    len: u32,
    /// Where the next ephemeral search starts in the range (moved by each search, and
    /// seeded by the caller: `seed`).
    cursor: u32,
}

impl<S: Store> Ports<S> {
    /// A table over `storage` (a power of two of slots, at least 2), starting its
    /// ephemeral searches at `seed` (a random value: the first ports are not guessable).
    pub fn new(mut storage: PortStorage<S>, seed: u32) -> Self {
        let n = storage.slots.as_ref().len();
        assert!(
            n.is_power_of_two() && n >= 2,
            "ports: a power of two of slots"
        );
        storage.slots.as_mut().fill(EMPTY);
        Ports {
            slots: storage.slots,
            len: 0,
            cursor: seed % RANGE,
        }
    }

    /// Ports held now.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ports it may hold (half its slots).
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().len() / 2
    }

    fn mask(&self) -> usize {
        self.slots.as_ref().len() - 1
    }

    fn home(&self, port: u16) -> usize {
        (port as u32).wrapping_mul(0x9e37_79b1) as usize >> 8 & self.mask()
    }

    /// The slot holding `port`, or the empty one where it would go.
    fn probe(&self, port: u16) -> usize {
        let s = self.slots.as_ref();
        let mut i = self.home(port);
        while s[i].port != 0 && s[i].port != port {
            i = (i + 1) & self.mask();
        }
        i
    }

    /// How `port` is held, if it is.
    pub fn get(&self, port: u16) -> Option<Held> {
        let h = self.slots.as_ref()[self.probe(port)];
        (h.port != 0).then_some(h)
    }

    /// Holds `port` for `who`, as `hold` (not [`Hold::Ephemeral`]: see
    /// [`ephemeral`](Self::ephemeral)). Fails `NotPermitted` for a privileged port
    /// without the right, `ServiceTaken` when another user holds it, or a LISTEN does, or
    /// this LISTEN would share it, `TableFull` when the table is, `BadPort` for port 0.
    pub fn bind(&mut self, port: u16, hold: Hold, who: Creds) -> Result<(), Reason> {
        if port == 0 || hold == Hold::Ephemeral {
            return Err(Reason::BadPort);
        }
        if port < PRIVILEGED && !who.bind_low {
            return Err(Reason::NotPermitted);
        }
        let i = self.probe(port);
        let s = self.slots.as_mut();
        if s[i].port == port {
            // Shared only among one user's named CONNECTs.
            if hold != Hold::Named || s[i].hold != Hold::Named || s[i].uid != who.uid {
                return Err(Reason::ServiceTaken);
            }
            s[i].refs += 1;
            return Ok(());
        }
        self.put(i, port, hold, who.uid)
    }

    fn put(&mut self, i: usize, port: u16, hold: Hold, uid: u32) -> Result<(), Reason> {
        if self.len as usize >= self.capacity() {
            return Err(Reason::TableFull);
        }
        self.slots.as_mut()[i] = Held {
            port,
            hold,
            uid,
            refs: 1,
        };
        self.len += 1;
        Ok(())
    }

    /// An ephemeral port held for `uid` alone; `TableFull` when the table is full.
    pub fn ephemeral(&mut self, uid: u32) -> Result<u16, Reason> {
        if self.len as usize >= self.capacity() {
            return Err(Reason::TableFull);
        }
        // Fewer ports are held than the range has, so a free one comes within `len + 1`
        // steps of the permutation.
        for _ in 0..=self.len.min(RANGE) {
            let port = EPHEMERAL_FIRST + self.cursor as u16;
            self.cursor += STRIDE;
            if self.cursor >= RANGE {
                self.cursor -= RANGE;
            }
            let i = self.probe(port);
            if self.slots.as_ref()[i].port == 0 {
                self.put(i, port, Hold::Ephemeral, uid)?;
                return Ok(port);
            }
        }
        Err(Reason::TableFull)
    }

    /// Lets one hold of `port` go (the last frees it).
    pub fn release(&mut self, port: u16) {
        let i = self.probe(port);
        let mask = self.mask();
        let s = self.slots.as_mut();
        if s[i].port != port || port == 0 {
            return;
        }
        s[i].refs -= 1;
        if s[i].refs > 0 {
            return;
        }
        // Backward shift: every entry after the hole whose home is not between the hole
        // and itself moves into it, so no probe stops early.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while s[j].port != 0 {
            let home = (s[j].port as u32).wrapping_mul(0x9e37_79b1) as usize >> 8 & mask;
            let dist_j = j.wrapping_sub(home) & mask;
            let dist_hole = j.wrapping_sub(hole) & mask;
            if dist_j >= dist_hole {
                s[hole] = s[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        s[hole] = EMPTY;
        self.len -= 1;
    }

    /// Writes the module's `peers` file lines for ports CONNECTs hold:
    /// `port P uid U named refs N` for each named one, then `ephemeral ports N` (a
    /// listen's port is on its `listen` line).
    pub fn write(&self, w: &mut impl core::fmt::Write) -> core::fmt::Result {
        let mut ephemeral = 0;
        for h in self.iter() {
            match h.hold {
                Hold::Named => writeln!(w, "port {} uid {} named refs {}", h.port, h.uid, h.refs)?,
                Hold::Ephemeral => ephemeral += 1,
                Hold::Listen => {}
            }
        }
        writeln!(w, "ephemeral ports {ephemeral}")
    }

    /// Every held port, in no order.
    pub fn iter(&self) -> impl Iterator<Item = Held> + '_ {
        self.slots.as_ref().iter().copied().filter(|h| h.port != 0)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::VecStore;
    use super::*;
    use std::collections::HashMap;
    use std::vec;

    fn ports(slots: usize) -> Ports<VecStore> {
        Ports::new(
            PortStorage {
                slots: vec![EMPTY; slots],
            },
            12345,
        )
    }

    const ALICE: Creds = Creds {
        uid: 1000,
        gid: 1000,
        groups: Groups::NONE,
        bind_low: false,
        user: 1,
    };
    const BOB: Creds = Creds {
        uid: 1001,
        gid: 1001,
        groups: Groups::NONE,
        bind_low: false,
        user: 2,
    };
    const ROOT: Creds = Creds {
        uid: 0,
        gid: 0,
        groups: Groups::NONE,
        bind_low: true,
        user: 0,
    };

    #[test]
    fn a_listened_port_is_its_users_alone() {
        let mut p = ports(16);
        assert_eq!(p.bind(5000, Hold::Listen, ALICE), Ok(()));
        assert_eq!(p.bind(5000, Hold::Listen, BOB), Err(Reason::ServiceTaken));
        assert_eq!(p.bind(5000, Hold::Named, BOB), Err(Reason::ServiceTaken));
        assert_eq!(
            p.bind(5000, Hold::Named, ALICE),
            Err(Reason::ServiceTaken),
            "a listen's own"
        );
        assert_eq!(p.bind(5000, Hold::Listen, ALICE), Err(Reason::ServiceTaken));
        p.release(5000);
        assert_eq!(p.bind(5000, Hold::Listen, BOB), Ok(()));
    }

    #[test]
    fn named_ports_are_shared_by_one_user_only() {
        let mut p = ports(16);
        p.bind(7, Hold::Named, ROOT).unwrap();
        p.bind(7, Hold::Named, ROOT).unwrap();
        assert_eq!(
            p.bind(
                7,
                Hold::Named,
                Creds {
                    uid: 0,
                    gid: 0,
                    groups: Groups::NONE,
                    bind_low: false,
                    user: 0
                }
            ),
            Err(Reason::NotPermitted)
        );
        assert_eq!(p.bind(7000, Hold::Named, ALICE), Ok(()));
        assert_eq!(p.bind(7000, Hold::Named, BOB), Err(Reason::ServiceTaken));
        assert_eq!(p.bind(7000, Hold::Listen, ALICE), Err(Reason::ServiceTaken));
        p.release(7);
        assert_eq!(p.get(7).map(|h| h.refs), Some(1));
        p.release(7);
        assert_eq!(p.get(7), None);
        assert_eq!(p.bind(0, Hold::Named, ROOT), Err(Reason::BadPort));
    }

    #[test]
    fn privileged_ports_need_the_right() {
        let mut p = ports(16);
        assert_eq!(p.bind(80, Hold::Listen, ALICE), Err(Reason::NotPermitted));
        assert_eq!(p.bind(1023, Hold::Listen, ALICE), Err(Reason::NotPermitted));
        assert_eq!(p.bind(1024, Hold::Listen, ALICE), Ok(()));
        assert_eq!(p.bind(80, Hold::Listen, ROOT), Ok(()));
    }

    #[test]
    fn ephemeral_ports_are_distinct_in_range_and_fill_the_table_then_stop() {
        let mut p = ports(64);
        let mut got = std::collections::HashSet::new();
        for _ in 0..32 {
            let port = p.ephemeral(ALICE.uid).unwrap();
            assert!((EPHEMERAL_FIRST..=EPHEMERAL_LAST).contains(&port));
            assert!(got.insert(port), "{port} twice");
        }
        assert_eq!(p.ephemeral(ALICE.uid), Err(Reason::TableFull));
        assert_eq!(p.bind(9000, Hold::Named, ALICE), Err(Reason::TableFull));
        let one = *got.iter().next().unwrap();
        p.release(one);
        assert!(p.ephemeral(BOB.uid).is_ok());
    }

    #[test]
    fn stride_visits_the_whole_range() {
        let mut seen = vec![false; RANGE as usize];
        let mut c = 0u32;
        for _ in 0..RANGE {
            assert!(!seen[c as usize]);
            seen[c as usize] = true;
            c = (c + STRIDE) % RANGE;
        }
    }

    proptest::proptest! {
        /// Against a map: whatever is bound and released, lookups agree and the table
        /// keeps every probe chain whole (backward-shift deletion).
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((0u8..3, 1u16..40, 0u32..2), 0..400)) {
            let mut p = ports(32);
            let mut m: HashMap<u16, (Hold, u32, u32)> = HashMap::new();
            for (op, port, uid) in ops {
                let who = Creds { uid, gid: uid, groups: Groups::NONE, bind_low: true, user: uid };
                match op {
                    0 | 1 => {
                        let hold = if op == 0 { Hold::Listen } else { Hold::Named };
                        let want = match m.get(&port) {
                            Some(&(h, u, _)) if hold == Hold::Named && h == Hold::Named && u == uid => Ok(()),
                            Some(_) => Err(Reason::ServiceTaken),
                            None if m.len() >= 16 => Err(Reason::TableFull),
                            None => Ok(()),
                        };
                        proptest::prop_assert_eq!(p.bind(port, hold, who), want);
                        if want.is_ok() {
                            m.entry(port).or_insert((hold, uid, 0)).2 += 1;
                        }
                    }
                    _ => {
                        p.release(port);
                        if let Some(e) = m.get_mut(&port) {
                            e.2 -= 1;
                            if e.2 == 0 {
                                m.remove(&port);
                            }
                        }
                    }
                }
                for q in 1u16..40 {
                    let got = p.get(q).map(|h| (h.hold, h.uid, h.refs));
                    proptest::prop_assert_eq!(got, m.get(&q).copied());
                }
                proptest::prop_assert_eq!(p.len(), m.len());
            }
        }
    }
}
