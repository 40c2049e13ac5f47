//! Where the MetaServer's entries lie in its registered memory, and the one-sided verbs
//! a node reaches them with.
//!
//! ```text
//! offset 0                      node_slots * 64
//!        | node table: 64 B each | exports table: 88 B each, export_slots of them |
//! ```
//!
//! The MetaServer's kernel allocates and registers the region and tells each node that
//! connects to it the region's base, rkey and both slot counts (cm.c's reply). A node's
//! kernel READs it one-sided ([`Remote`]), at the offsets here; only the MetaServer's
//! kernel writes it ([`Writable`]), for a node that asked ([`request`](super::request)),
//! after checking that what it writes is that node's own. Node `id`'s entry is slot `id % node_slots`: node ids are the low 16
//! bits of a node's IPv4 address, and a record names its whole address, so two nodes
//! sharing a slot are told apart (a later node whose id shares a held slot is refused,
//! `SlotHeld`; see docs/cluster.md).

use super::frame;
use super::lookup::{EXPORT_FRAME, PROBE};
use super::record::{NAME_LEN, NODE_PAYLOAD};
use super::siphash::{siphash24, SipKey};

/// Bytes of one framed node entry.
pub const NODE_FRAME: usize = frame::size(NODE_PAYLOAD);

/// The region's shape, and the key its names are placed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tables {
    /// Entries in the node table.
    pub node_slots: u32,
    /// Entries in the exports table.
    pub export_slots: u32,
    /// The name hash's key: every member derives it from the cluster key (kmod's
    /// cm_auth.c), so all place a name alike and nobody outside can aim names at one
    /// home (see [`siphash`](super::siphash)). Never on the wire.
    pub key: SipKey,
}

impl Tables {
    /// The home slot of `name`: its keyed hash modulo the exports table's size (0 for
    /// a table of none). A name lives within [`PROBE`] slots of it.
    pub fn home(&self, name: &[u8; NAME_LEN]) -> u32 {
        // checked_rem: no panic path (the kernel build's objtool rejects one).
        siphash24(self.key, name)
            .checked_rem(self.export_slots as u64)
            .unwrap_or(0) as u32
    }

    /// Bytes the region takes.
    pub const fn bytes(&self) -> usize {
        self.node_slots as usize * NODE_FRAME + self.export_slots as usize * EXPORT_FRAME
    }

    /// Whether a region of this shape can be used (the counts a peer's reply carried).
    pub const fn valid(&self) -> bool {
        self.node_slots > 0 && self.export_slots as usize >= PROBE
    }

    /// Node `id`'s slot in the node table.
    pub fn node_slot(&self, id: u16) -> u32 {
        // checked_rem: no panic path (the kernel build's objtool rejects one).
        (id as u32).checked_rem(self.node_slots).unwrap_or(0)
    }

    /// Offset of node `id`'s entry.
    pub fn node(&self, id: u16) -> u64 {
        self.node_slot(id) as u64 * NODE_FRAME as u64
    }

    /// Offset of export slot `slot` (less than `export_slots`).
    pub fn export(&self, slot: u32) -> u64 {
        self.node_slots as u64 * NODE_FRAME as u64 + slot as u64 * EXPORT_FRAME as u64
    }
}

/// A verb failed: the connection to the MetaServer broke or did not answer in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unreachable;

/// Reading the MetaServer's region, at offsets from its base: a one-sided READ from a
/// node's kernel, which returns when its completion did.
pub trait Remote {
    /// Reads `buf.len()` bytes at `off`.
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Unreachable>;
}

/// Writing the region: the MetaServer's kernel, the one writer, on its own memory (each
/// write visible before the next begins, as a frame's rewrite needs). No member node's
/// QP or rkey may write it: the region grants them READ alone.
pub trait Writable: Remote {
    /// Writes `data` at `off`.
    fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Unreachable>;
    /// 8-byte compare-and-swap at `off` (8-aligned): the value found. The one writer
    /// has no race to lose: a read, and a write when it matched.
    fn cas(&mut self, off: u64, expect: u64, swap: u64) -> Result<u64, Unreachable> {
        let mut old = [0u8; 8];
        self.read(off, &mut old)?;
        let old = u64::from_le_bytes(old);
        if old == expect {
            self.write(off, &swap.to_le_bytes())?;
        }
        Ok(old)
    }
}

/// Reads the probe window of a name whose home slot is `home` into `buf` (which holds
/// [`PROBE`] entries): one READ, or two when the window wraps at the table's end.
/// Returns the window's length in slots.
pub fn read_window(
    r: &mut impl Remote,
    t: &Tables,
    home: u32,
    buf: &mut [u8],
) -> Result<usize, Unreachable> {
    let window = PROBE.min(t.export_slots as usize);
    let head = window.min((t.export_slots - home) as usize);
    r.read(t.export(home), &mut buf[..head * EXPORT_FRAME])?;
    if head < window {
        r.read(
            t.export(0),
            &mut buf[head * EXPORT_FRAME..window * EXPORT_FRAME],
        )?;
    }
    Ok(window)
}

/// A region in local memory, as tests and the fake node reach it.
#[cfg(any(test, feature = "alloc"))]
pub mod mem {
    use super::{Remote, Unreachable, Writable};
    use alloc::vec::Vec;

    /// The region as bytes, with a count of verbs and a switch that fails them all.
    pub struct MemRegion {
        /// The bytes.
        pub bytes: Vec<u8>,
        /// Verbs issued.
        pub verbs: u32,
        /// Fail every verb (an unreachable MetaServer).
        pub down: bool,
        /// The serving kernel's count of names per node slot
        /// ([`Shares`](crate::meta::serve::Shares)), sized at the first request.
        pub held: Vec<u16>,
        /// The serving kernel's books of whose record each export slot holds
        /// ([`Shares::owners`](crate::meta::serve::Shares::owners)), sized likewise.
        pub owners: Vec<u16>,
        /// Names one node may hold (the serving kernel's `max_names_per_node`).
        pub share: u16,
    }

    impl MemRegion {
        /// A zeroed region of `len` bytes.
        pub fn new(len: usize) -> MemRegion {
            MemRegion {
                bytes: alloc::vec![0; len],
                verbs: 0,
                down: false,
                held: Vec::new(),
                owners: Vec::new(),
                share: 64,
            }
        }

        fn range(&mut self, off: u64, len: usize) -> Result<&mut [u8], Unreachable> {
            self.verbs += 1;
            let at = off as usize;
            match self.bytes.get_mut(at..at + len) {
                Some(b) if !self.down => Ok(b),
                _ => Err(Unreachable),
            }
        }
    }

    impl Remote for MemRegion {
        fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Unreachable> {
            let n = buf.len();
            buf.copy_from_slice(self.range(off, n)?);
            Ok(())
        }
    }

    impl Writable for MemRegion {
        fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Unreachable> {
            self.range(off, data.len())?.copy_from_slice(data);
            Ok(())
        }
    }
}
