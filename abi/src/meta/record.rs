//! The MetaServer's records, little-endian and fixed-size, each the payload of a
//! `frame`.
//!
//! A node's record lives in the slot of its node id and is written only by that node's
//! kernel; an export's record lives in a slot of the exports table found by hashing its
//! name, claimed by its exporting node. Sizes: a node entry is 64 bytes framed, an
//! export entry 88, so 10,000 exports take under 1 MiB of the MetaServer's memory and a
//! lookup is one READ of its name's probe window (see [`lookup`](super::lookup)).

use super::super::engine::Export;
use super::super::sqe::MrAccess;
use super::frame;

/// A node's record: what a peer needs to connect to it, and its incarnation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRecord {
    /// RoCE v2 GID of its device.
    pub gid: [u8; 16],
    /// IPv4 address rdma_cm reaches it at.
    pub ipv4: [u8; 4],
    /// rdma_cm port its kernel listens on.
    pub cm_port: u16,
    /// One more than the record it replaced each time its module loads and registers
    /// (its QPs, MRs and exports are then new); never 0.
    pub incarnation: u64,
}

/// Payload bytes of a [`NodeRecord`] (its frame: 64 bytes).
pub const NODE_PAYLOAD: usize = 40;

/// Longest export name: 24 bytes, so a name fits in an SQE's three 64-bit words
/// (see [`name_from_words`]).
pub const NAME_LEN: usize = 24;

/// An export's record: a range of an exporting node's registered memory, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportRecord {
    /// Its name, NUL-padded (the key).
    pub name: [u8; NAME_LEN],
    /// The exporting node's id (its slot in the node table).
    pub node: u16,
    /// The exporting node's incarnation when it exported: stale once that changes.
    pub incarnation: u64,
    /// Start address (the MR's iova).
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Remote rights granted (abi's `MrAccess` bits).
    pub access: u32,
    /// The rkey, read only by kernels: never handed to applications.
    pub rkey: u32,
    /// Who published it and whom it grants what (enforced by the importing kernel).
    pub grant: Grant,
}

/// A published name's owner and the rights it grants, in the manner of a file's owner,
/// group and mode: the publishing kernel writes its caller's uid and gid (as the
/// initial user namespace sees them; a uid in a user namespace is the namespace's
/// owner), never a user's word, and the importing kernel grants an importer the
/// export's rights that the importer's class (owner, group, others) allows.
///
/// Uids and gids are the cluster's: its kernels trust each other (the cluster key) to
/// say who their users are, as NFS servers trust their clients' uids. There is no
/// superuser override: root on one node is not root on another (as NFS's root
/// squashing has it), so root imports a name as its mode grants others, unless root
/// owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The publisher's uid.
    pub uid: u32,
    /// The publisher's gid.
    pub gid: u32,
    /// `rw-` bits per class, as a file mode's (`0o640`: owner reads and writes, group
    /// reads, others nothing); execute bits are not rights here and must be 0.
    pub mode: u16,
}

/// The mode bits a PUBLISH may give: read and write for owner, group and others.
pub const MODE_BITS: u16 = 0o666;

/// The mode of a PUBLISH that names none (0): its owner's alone, as `umask 077`
/// leaves a file.
pub const MODE_DEFAULT: u16 = 0o600;

impl Grant {
    /// The remote rights an importer with `uid` may have of an export that grants
    /// `access`, `in_group` saying whether the importer is in a group (its own or a
    /// supplementary one, as a file's group class has it): READ if its class may read,
    /// WRITE if it may write, atomics only if both (an atomic reads and writes).
    pub fn rights(&self, uid: u32, in_group: impl Fn(u32) -> bool, access: MrAccess) -> MrAccess {
        let shift = if uid == self.uid {
            6
        } else if in_group(self.gid) {
            3
        } else {
            0
        };
        let bits = (self.mode >> shift) & 0o6;
        let read = if bits & 0o4 != 0 {
            MrAccess::REMOTE_READ.bits()
        } else {
            0
        };
        let write = if bits & 0o2 != 0 {
            MrAccess::REMOTE_WRITE.bits()
        } else {
            0
        };
        let atomic = if bits == 0o6 {
            MrAccess::REMOTE_ATOMIC.bits()
        } else {
            0
        };
        MrAccess::from_bits_truncate(access.bits() & (read | write | atomic))
    }
}

/// Payload bytes of an [`ExportRecord`] (its frame: 88 bytes).
pub const EXPORT_PAYLOAD: usize = 64;

const _: () = assert!(frame::size(NODE_PAYLOAD) == 64);
const _: () = assert!(frame::size(EXPORT_PAYLOAD) == 88);

/// A little-endian cursor over a fixed buffer (writes past the end are bugs here: the
/// layouts are constants checked by the tests).
struct Put<'a>(&'a mut [u8], usize);

impl Put<'_> {
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0[self.1..self.1 + b.len()].copy_from_slice(b);
        self.1 += b.len();
        self
    }
}

struct Get<'a>(&'a [u8], usize);

impl Get<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let v = self.0[self.1..self.1 + N].try_into().expect("N bytes");
        self.1 += N;
        v
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

impl NodeRecord {
    /// Its node id: the low 16 bits of its IPv4 address.
    pub fn id(&self) -> u16 {
        node_id(self.ipv4)
    }

    /// Its payload.
    pub fn encode(&self) -> [u8; NODE_PAYLOAD] {
        let mut b = [0u8; NODE_PAYLOAD];
        Put(&mut b, 0)
            .bytes(&self.gid)
            .bytes(&self.ipv4)
            .bytes(&self.cm_port.to_le_bytes())
            .bytes(&[0; 2])
            .bytes(&self.incarnation.to_le_bytes());
        b
    }

    /// The record a payload holds.
    pub fn decode(b: &[u8; NODE_PAYLOAD]) -> NodeRecord {
        let mut g = Get(b, 0);
        let (gid, ipv4, cm_port) = (g.take(), g.take(), g.u16());
        g.take::<2>();
        NodeRecord {
            gid,
            ipv4,
            cm_port,
            incarnation: g.u64(),
        }
    }
}

impl ExportRecord {
    /// Its payload.
    pub fn encode(&self) -> [u8; EXPORT_PAYLOAD] {
        let mut b = [0u8; EXPORT_PAYLOAD];
        Put(&mut b, 0)
            .bytes(&self.name)
            .bytes(&self.node.to_le_bytes())
            .bytes(&self.grant.mode.to_le_bytes())
            .bytes(&self.grant.uid.to_le_bytes())
            .bytes(&self.incarnation.to_le_bytes())
            .bytes(&self.addr.to_le_bytes())
            .bytes(&self.len.to_le_bytes())
            .bytes(&self.access.to_le_bytes())
            .bytes(&self.rkey.to_le_bytes())
            .bytes(&self.grant.gid.to_le_bytes());
        b
    }

    /// The record a payload holds.
    pub fn decode(b: &[u8; EXPORT_PAYLOAD]) -> ExportRecord {
        let mut g = Get(b, 0);
        let (name, node, mode, uid) = (g.take(), g.u16(), g.u16(), g.u32());
        let (incarnation, addr, len, access, rkey) = (g.u64(), g.u64(), g.u32(), g.u32(), g.u32());
        ExportRecord {
            name,
            node,
            incarnation,
            addr,
            len,
            access,
            rkey,
            grant: Grant {
                uid,
                gid: g.u32(),
                mode,
            },
        }
    }

    /// The record of `e` (a local export) published as `name`, granting `grant`, by
    /// node `node` of incarnation `incarnation`.
    pub fn published(
        name: [u8; NAME_LEN],
        node: u16,
        incarnation: u64,
        e: &Export,
        grant: Grant,
    ) -> Self {
        ExportRecord {
            name,
            node,
            incarnation,
            addr: e.addr,
            len: e.len,
            access: e.access.bits(),
            rkey: e.rkey,
            grant,
        }
    }

    /// The export it describes, as the engine imports it (no descriptor: it was
    /// resolved in the exporting node's record, not this node's table).
    pub fn export(&self) -> Export {
        Export {
            descriptor: 0,
            owner: (0, 0),
            addr: self.addr,
            len: self.len,
            access: MrAccess::from_bits_truncate(self.access),
            rkey: self.rkey,
        }
    }

    /// Whether it was made by the incarnation of its node that `current` names: an
    /// export of an earlier incarnation names memory and an rkey that no longer exist.
    pub fn live_in(&self, current: &NodeRecord) -> bool {
        self.incarnation == current.incarnation
    }
}

/// The node id of IPv4 address `ipv4`: its low 16 bits.
pub fn node_id(ipv4: [u8; 4]) -> u16 {
    u16::from_be_bytes([ipv4[2], ipv4[3]])
}

/// A name as a record's key: `None` when empty or longer than [`NAME_LEN`].
pub fn name(s: &str) -> Option<[u8; NAME_LEN]> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > NAME_LEN || b.contains(&0) {
        return None;
    }
    let mut n = [0u8; NAME_LEN];
    n[..b.len()].copy_from_slice(b);
    Some(n)
}

/// A name as an SQE carries it: three little-endian words (`remote_addr`, `arg0`,
/// `arg1`), NUL-padded. `None` unless it is a valid name in its one canonical form
/// (nonempty, nothing but NULs after the first NUL).
pub fn name_from_words(words: [u64; 3]) -> Option<[u8; NAME_LEN]> {
    let mut n = [0u8; NAME_LEN];
    for (chunk, w) in n.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    let used = n.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
    (used > 0 && n[used..].iter().all(|&b| b == 0)).then_some(n)
}

/// The three words an SQE carries `name` in (see [`name_from_words`]).
pub fn name_words(name: &[u8; NAME_LEN]) -> [u64; 3] {
    let w = |i: usize| u64::from_le_bytes(name[i..i + 8].try_into().expect("8 bytes"));
    [w(0), w(8), w(16)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeRecord {
        NodeRecord {
            gid: [0xfe; 16],
            ipv4: [192, 0, 2, 11],
            cm_port: 18515,
            incarnation: 0x1122_3344_5566_7788,
        }
    }

    #[test]
    fn records_round_trip_through_frames() {
        let n = node();
        let mut f = [0u8; frame::size(NODE_PAYLOAD)];
        frame::encode(&mut f, 2, &n.encode()).unwrap();
        let (_, body) = frame::decode(&f, NODE_PAYLOAD).unwrap();
        assert_eq!(NodeRecord::decode(body.try_into().unwrap()), n);

        let e = ExportRecord {
            name: name("kv-table").unwrap(),
            node: 3,
            incarnation: n.incarnation,
            addr: 0x7f00_0000_1000,
            len: 1 << 20,
            access: 0b110,
            rkey: 0x8000_0001,
            grant: Grant {
                uid: 1000,
                gid: 0xfffe_0001,
                mode: 0o640,
            },
        };
        assert_eq!(ExportRecord::decode(&e.encode()), e);
        assert!(e.live_in(&n));
        let reloaded = NodeRecord {
            incarnation: n.incarnation + 1,
            ..n
        };
        assert!(
            !e.live_in(&reloaded),
            "an export of an earlier incarnation is stale"
        );
    }

    /// A supplementary group is the group class too, as for a file; the first
    /// `MAX_GROUPS` count.
    #[test]
    fn a_supplementary_group_gets_the_group_class() {
        use crate::engine::{Creds, Groups, MAX_GROUPS};
        let all = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE;
        let g = Grant {
            uid: 1000,
            gid: 100,
            mode: 0o640,
        };
        let who = |groups: &[u32]| Creds {
            uid: 1004,
            gid: 1004,
            groups: Groups::new(groups),
            bind_low: false,
            user: 4,
        };
        let member = who(&[27, 100]);
        assert_eq!(
            g.rights(member.uid, |x| member.in_group(x), all),
            MrAccess::REMOTE_READ
        );
        let not = who(&[27]);
        assert_eq!(
            g.rights(not.uid, |x| not.in_group(x), all),
            MrAccess::empty()
        );
        let many: [u32; MAX_GROUPS + 1] = core::array::from_fn(|i| 200 + i as u32);
        let past = who(&many);
        assert!(past.in_group(200 + MAX_GROUPS as u32 - 1));
        assert!(
            !past.in_group(200 + MAX_GROUPS as u32),
            "past the first MAX_GROUPS"
        );
    }

    #[test]
    fn a_grant_gives_each_class_its_bits_of_the_exports_rights() {
        let all = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_ATOMIC;
        let g = Grant {
            uid: 1000,
            gid: 100,
            mode: 0o640,
        };
        let only = |gid: u32| move |g: u32| g == gid;
        assert_eq!(
            g.rights(1000, only(5), all),
            all,
            "owner: read and write, so atomics"
        );
        assert_eq!(
            g.rights(1001, only(100), all),
            MrAccess::REMOTE_READ,
            "group reads"
        );
        assert_eq!(
            g.rights(1002, only(5), all),
            MrAccess::empty(),
            "others nothing"
        );
        assert_eq!(
            g.rights(0, only(0), all),
            MrAccess::empty(),
            "root is no one special"
        );
        // Never more than the export grants.
        assert_eq!(
            g.rights(1000, only(5), MrAccess::REMOTE_READ),
            MrAccess::REMOTE_READ
        );
        let w = Grant { mode: 0o222, ..g };
        assert_eq!(
            w.rights(7, only(7), all),
            MrAccess::REMOTE_WRITE,
            "write without read: no atomics"
        );
        // The owner's class wins even where group or others would grant more.
        let odd = Grant { mode: 0o066, ..g };
        assert_eq!(odd.rights(1000, only(100), all), MrAccess::empty());
    }

    #[test]
    fn names_are_bounded() {
        assert!(name("").is_none());
        assert!(name("a\0b").is_none());
        assert!(name(&"x".repeat(NAME_LEN)).is_some());
        assert!(name(&"x".repeat(NAME_LEN + 1)).is_none());
    }

    #[test]
    fn names_travel_in_three_words_in_one_form() {
        let n = name("kv-table").unwrap();
        assert_eq!(name_from_words(name_words(&n)), Some(n));
        let full = name(&"y".repeat(NAME_LEN)).unwrap();
        assert_eq!(name_from_words(name_words(&full)), Some(full));
        assert_eq!(name_from_words([0; 3]), None, "empty");
        let mut gap = name_words(&n);
        gap[2] = 1;
        assert_eq!(name_from_words(gap), None, "bytes after the NUL");
    }
}
