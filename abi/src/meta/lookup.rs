//! Finding an export by name in the MetaServer's table with one-sided READs.
//!
//! The exports table is an open-addressed array of [`EXPORT_FRAME`]-byte entries; a
//! name's home slot is its hash modulo the table size and a name lives within
//! [`PROBE`] slots of home (its exporter claims the first free one there). A lookup reads
//! the [`PROBE`] slots from home in **one** READ (wrapping tables read a second part
//! from the start), so it costs one round trip unless a slot was being rewritten, in
//! which case it reads again, at most [`TRIES`] times in all, and then fails saying so.
//! The found record is checked against the exporting node's current incarnation by the
//! caller (see [`cache`](super::cache)).

use super::frame::{self, Torn};
use super::record::{ExportRecord, EXPORT_PAYLOAD, NAME_LEN};

/// Bytes of one framed export entry.
pub const EXPORT_FRAME: usize = frame::size(EXPORT_PAYLOAD);

/// Slots a name may live in, from its home slot on: read together (768 bytes), so a
/// lookup stays one round trip; an export whose window is full is refused, so the table
/// is sized at several times the exports it holds (see the README's cluster section).
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

/// The home slot of `name` in a table of `slots` entries (FNV-1a 64).
pub fn home(name: &[u8; NAME_LEN], slots: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % slots as u64) as usize
}

/// Looks `name` up in a table of `slots` entries. `read(first_slot, buf)` fills `buf`
/// (a whole number of entries) with the entries from `first_slot` on, in one READ, or
/// fails. `buf` must hold [`PROBE`] entries. Returns the record and how many READs it
/// took.
pub fn lookup(
    name: &[u8; NAME_LEN],
    slots: usize,
    buf: &mut [u8],
    mut read: impl FnMut(usize, &mut [u8]) -> Result<(), ()>,
) -> Result<(ExportRecord, u32), LookupError> {
    let window = PROBE.min(slots);
    let buf = &mut buf[..window * EXPORT_FRAME];
    let first = home(name, slots);
    let mut last_torn = Torn::Rewriting;
    for attempt in 1..=TRIES {
        // The window, wrapping at the table's end: one READ, or two for a wrapped window.
        let head = window.min(slots - first);
        read(first, &mut buf[..head * EXPORT_FRAME]).map_err(|()| LookupError::Read)?;
        if head < window {
            read(0, &mut buf[head * EXPORT_FRAME..]).map_err(|()| LookupError::Read)?;
        }
        let mut torn = None;
        for entry in buf.chunks_exact(EXPORT_FRAME) {
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
        }
    }

    /// A table as the MetaServer's memory holds it.
    struct Table {
        mem: Vec<u8>,
        slots: usize,
    }

    impl Table {
        fn new(slots: usize) -> Table {
            Table {
                mem: vec![0; slots * EXPORT_FRAME],
                slots,
            }
        }
        fn put(&mut self, r: &ExportRecord) -> usize {
            let h = home(&r.name, self.slots);
            for k in 0..PROBE {
                let s = (h + k) % self.slots;
                let e = &mut self.mem[s * EXPORT_FRAME..(s + 1) * EXPORT_FRAME];
                if frame::decode(e, EXPORT_PAYLOAD) == Err(Torn::Empty) {
                    frame::encode(e, 2, &r.encode()).unwrap();
                    return s;
                }
            }
            panic!("no room in the probe window");
        }
        fn read(&self, first: usize, buf: &mut [u8]) -> Result<(), ()> {
            let at = first * EXPORT_FRAME;
            buf.copy_from_slice(&self.mem[at..at + buf.len()]);
            Ok(())
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
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        let mut reads = 0;
        for (i, n) in names.iter().enumerate() {
            let (r, tries) = lookup(&name(n).unwrap(), t.slots, &mut buf, |f, b| {
                reads += 1;
                t.read(f, b)
            })
            .unwrap();
            assert_eq!((r.node, tries), (i as u16, 1));
        }
        assert!(
            reads <= names.len() + names.len() / 50,
            "{reads} READs: wraps only"
        );
        let miss = lookup(&name("absent").unwrap(), t.slots, &mut buf, |f, b| {
            t.read(f, b)
        });
        assert_eq!(miss.unwrap_err(), LookupError::NotFound);
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
            .find(|r| home(&r.name, t.slots) == s)
            .unwrap();
        let s2 = t.put(&other);
        assert_eq!(s2, (s + 1) % t.slots);
        let e = &mut t.mem[s * EXPORT_FRAME..(s + 1) * EXPORT_FRAME];
        frame::encode(e, 4, &crate::meta::claim::tombstone()).unwrap();
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        let got = lookup(&other.name, t.slots, &mut buf, |f, b| t.read(f, b));
        assert_eq!(got.map(|(r, _)| r.node), Ok(2));
        let gone = lookup(&first.name, t.slots, &mut buf, |f, b| t.read(f, b));
        assert_eq!(gone.unwrap_err(), LookupError::NotFound);
    }

    #[test]
    fn a_slot_being_rewritten_is_read_again_then_given_up() {
        let mut t = Table::new(64);
        let r = record("kv", 3);
        let s = t.put(&r);
        // Its owner is rewriting it: odd head.
        let at = s * EXPORT_FRAME;
        t.mem[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        let mut reads = 0;
        let got = lookup(&r.name, t.slots, &mut buf, |f, b| {
            reads += 1;
            // The rewrite finishes after the second READ.
            if reads == 3 {
                let e = &mut t.mem[at..at + EXPORT_FRAME];
                frame::encode(e, 4, &r.encode()).unwrap();
            }
            t.read(f, b)
        });
        assert_eq!(got.map(|(x, tries)| (x.node, tries)), Ok((3, 3)));
        // Never finished: given up after TRIES reads, saying why.
        t.mem[at..at + 8].copy_from_slice(&5u64.to_le_bytes());
        let got = lookup(&r.name, t.slots, &mut buf, |f, b| t.read(f, b));
        assert_eq!(got.unwrap_err(), LookupError::Torn(Torn::Rewriting));
        let got = lookup(&r.name, t.slots, &mut buf, |_, _| Err(()));
        assert_eq!(got.unwrap_err(), LookupError::Read);
    }
}
