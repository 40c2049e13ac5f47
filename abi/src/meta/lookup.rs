//! Finding an export by name in the MetaServer's table with one-sided READs.
//!
//! The exports table is an open-addressed array of [`EXPORT_FRAME`]-byte entries; a
//! name's home slot is its keyed hash modulo the table size ([`Tables::home`]) and a name lives within
//! [`PROBE`] slots of home (its exporter claims the first free one there). A lookup reads
//! the [`PROBE`] slots from home in **one** READ (a window that wraps at the table's end
//! reads its second part from the start), so it costs one round trip unless a slot was being rewritten, in
//! which case it reads again, at most [`TRIES`] times in all, and then fails saying so.
//! The found record is checked against the exporting node's current incarnation by the
//! caller (see [`cache`](super::cache)).

use super::frame::{self, Torn};
use super::record::{ExportRecord, EXPORT_PAYLOAD, NAME_LEN};
use super::tables::{read_window, Remote, Tables};

/// Bytes of one framed export entry.
pub const EXPORT_FRAME: usize = frame::size(EXPORT_PAYLOAD);

/// Slots a name may live in, from its home slot on: read together (704 bytes), so a
/// lookup stays one round trip; an export whose window is full is refused, so the table
/// is sized at several times the exports it holds (see docs/cluster.md, "Not built").
pub const PROBE: usize = 8;

/// READs a lookup makes at most before giving up on entries being rewritten.
pub const TRIES: u32 = 4;

/// Why a lookup found nothing usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupError {
    /// No entry of that name within its probe window.
    NotFound,
    /// An entry in the window stayed torn for [`TRIES`] READs (being rewritten, or
    /// corrupt).
    Torn(Torn),
    /// The READ itself failed (the MetaServer is unreachable).
    Read,
}

/// Looks `name` up in the exports table of `t` through `r`; `buf` must hold [`PROBE`]
/// entries. Returns the record and how many window reads it took.
pub fn lookup(
    name: &[u8; NAME_LEN],
    t: &Tables,
    buf: &mut [u8],
    r: &mut impl Remote,
) -> Result<(ExportRecord, u32), LookupError> {
    let first = t.home(name);
    let mut last_torn = Torn::Rewriting;
    for attempt in 1..=TRIES {
        let window = read_window(r, t, first, buf).map_err(|_| LookupError::Read)?;
        let mut torn = None;
        for entry in buf[..window * EXPORT_FRAME].chunks_exact(EXPORT_FRAME) {
            match frame::decode(entry, EXPORT_PAYLOAD) {
                Ok((_, body)) => {
                    let r = ExportRecord::decode(body.try_into().expect("payload size"));
                    if r.name == *name {
                        return Ok((r, attempt));
                    }
                }
                // A free slot ends the probe: the exporter would have claimed it.
                Err(Torn::Empty) if torn.is_none() => return Err(LookupError::NotFound),
                Err(Torn::Empty) => break,
                Err(t) => torn = Some(t),
            }
        }
        match torn {
            // Every slot whole and none of them this name.
            None => return Err(LookupError::NotFound),
            // A slot being rewritten may be this name's: read again.
            Some(t) => last_torn = t,
        }
    }
    Err(LookupError::Torn(last_torn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::record::name;
    use crate::meta::tables::mem::MemRegion;
    use alloc::vec;
    use alloc::vec::Vec;

    fn record(n: &str, node: u16) -> ExportRecord {
        ExportRecord {
            name: name(n).unwrap(),
            node,
            incarnation: 7,
            addr: 0x1000 * node as u64,
            len: 4096,
            access: 2,
            rkey: 0x100 + node as u32,
            grant: crate::meta::record::Grant {
                uid: 1000,
                gid: 1000,
                mode: crate::meta::record::MODE_DEFAULT,
            },
        }
    }

    /// A MetaServer's region with an exports table of `slots` entries.
    struct Table {
        t: Tables,
        m: MemRegion,
    }

    impl Table {
        fn new(slots: u32) -> Table {
            let t = Tables {
                node_slots: 4,
                export_slots: slots,
                key: [7, 11],
            };
            Table {
                t,
                m: MemRegion::new(t.bytes()),
            }
        }
        fn entry(&mut self, slot: u32) -> &mut [u8] {
            let at = self.t.export(slot) as usize;
            &mut self.m.bytes[at..at + EXPORT_FRAME]
        }
        fn put(&mut self, r: &ExportRecord) -> u32 {
            let h = self.t.home(&r.name);
            for k in 0..PROBE as u32 {
                let s = (h + k) % self.t.export_slots;
                let e = self.entry(s);
                if frame::decode(e, EXPORT_PAYLOAD) == Err(Torn::Empty) {
                    frame::encode(e, 2, &r.encode()).unwrap();
                    return s;
                }
            }
            panic!("no room in the probe window");
        }
        fn find(&mut self, n: &str) -> Result<(ExportRecord, u32), LookupError> {
            let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
            lookup(&name(n).unwrap(), &self.t, &mut buf, &mut self.m)
        }
    }

    #[test]
    fn finds_by_name_in_one_read_and_misses_cleanly() {
        // A quarter full, as the MetaServer sizes its table.
        let mut t = Table::new(1024);
        let names: Vec<_> = (0..256).map(|i| alloc::format!("export-{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            t.put(&record(n, i as u16));
        }
        for (i, n) in names.iter().enumerate() {
            let (r, tries) = t.find(n).unwrap();
            assert_eq!((r.node, tries), (i as u16, 1));
        }
        assert!(
            t.m.verbs as usize <= names.len() + names.len() / 50,
            "{} READs: wraps only",
            t.m.verbs
        );
        assert_eq!(t.find("absent").unwrap_err(), LookupError::NotFound);
    }

    /// A revoked export leaves a tombstone, past which lookups still find a name that
    /// was placed after it in the same window.
    #[test]
    fn a_tombstone_does_not_end_the_probe() {
        let mut t = Table::new(64);
        let first = record("a", 1);
        let s = t.put(&first);
        // Find a name whose home is the same slot, so it lands after "a".
        let other = (0..)
            .map(|i| record(&alloc::format!("b{i}"), 2))
            .find(|r| t.t.home(&r.name) == s)
            .unwrap();
        let s2 = t.put(&other);
        assert_eq!(s2, (s + 1) % 64);
        frame::encode(t.entry(s), 4, &crate::meta::claim::tombstone()).unwrap();
        let b = core::str::from_utf8(&other.name[..])
            .unwrap()
            .trim_end_matches('\0');
        assert_eq!(t.find(b).map(|(r, _)| r.node), Ok(2));
        assert_eq!(t.find("a").unwrap_err(), LookupError::NotFound);
    }

    #[test]
    fn a_slot_being_rewritten_is_read_again_then_given_up() {
        let mut t = Table::new(64);
        let r = record("kv", 3);
        let s = t.put(&r);
        // Its owner is rewriting it: odd head.
        t.entry(s)[..8].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(
            t.find("kv").unwrap_err(),
            LookupError::Torn(Torn::Rewriting)
        );
        assert_eq!(t.m.verbs, TRIES, "read again, then given up");
        frame::encode(t.entry(s), 4, &r.encode()).unwrap();
        assert_eq!(t.find("kv").map(|(x, tries)| (x.node, tries)), Ok((3, 1)));
        t.m.down = true;
        assert_eq!(t.find("kv").unwrap_err(), LookupError::Read);
    }

    #[test]
    fn a_window_wrapping_at_the_end_is_read_in_two() {
        let mut t = Table::new(16);
        let r = (0..)
            .map(|i| record(&alloc::format!("w{i}"), 5))
            .find(|r| t.t.home(&r.name) == 15)
            .unwrap();
        let n = core::str::from_utf8(&r.name[..])
            .unwrap()
            .trim_end_matches('\0');
        // Slot 15 is taken, so the name lands in slot 0, read by the second READ.
        frame::encode(t.entry(15), 2, &record("filler", 9).encode()).unwrap();
        assert_eq!(t.put(&r), 0);
        let before = t.m.verbs;
        assert_eq!(t.find(n).map(|(x, _)| x.node), Ok(5));
        assert_eq!(t.m.verbs - before, 2);
    }
}
