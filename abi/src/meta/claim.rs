//! How an exporting node's kernel publishes and revokes an export in the MetaServer's
//! table with one-sided verbs, next to readers that never lock ([`lookup`]).
//!
//! Publishing: READ the name's window; [`plan`] says whether the name is already there,
//! which slot to claim (the first free one or *tombstone*) and at what version; claim it
//! with an 8-byte compare-and-swap of its head from that version to the next (odd: being
//! written), write the record and tail at version + 2, then the head. A lost CAS (another
//! exporter took the slot) starts over. Two exporters of one name whose READs both came
//! before both claims end with two slots: each, after writing, reads the window again
//! and [`recheck`] keeps the lower slot and has the other revoke its own.
//!
//! Revoking: CAS the head from its version to the next, write a tombstone (a record
//! whose name is empty, which no name is) and the tail, then the head. A tombstone is
//! whole, so lookups probe past it (an empty slot would end their probe early and hide
//! names placed after it), and it is free for the next claim.
//!
//! [`lookup`]: super::lookup

use super::frame::{self, Torn};
use super::lookup::EXPORT_FRAME;
use super::record::{ExportRecord, EXPORT_PAYLOAD, NAME_LEN};

/// What an exporter does with its name's window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The name is there already (whole) in window slot `slot`: refuse the export.
    Exists {
        /// Window-relative slot.
        slot: usize,
    },
    /// Claim window slot `slot`, whose head holds `version` now (0 when never used).
    Claim {
        /// Window-relative slot.
        slot: usize,
        /// The head's current value, the CAS's expected one.
        version: u64,
    },
    /// No free or tombstone slot in the window: refuse the export (the table is too
    /// full around this name).
    Full,
    /// A slot in the window is being rewritten: read it again.
    Retry(Torn),
}

/// Whether a whole record is a tombstone.
fn is_tombstone(r: &ExportRecord) -> bool {
    r.name == [0; NAME_LEN]
}

/// The payload of a tombstone.
pub fn tombstone() -> [u8; EXPORT_PAYLOAD] {
    [0; EXPORT_PAYLOAD]
}

/// The window's slots as whole records (with their versions), or why not.
fn slots(window: &[u8]) -> impl Iterator<Item = Result<(u64, ExportRecord), Torn>> + '_ {
    window.chunks_exact(EXPORT_FRAME).map(|f| {
        frame::decode(f, EXPORT_PAYLOAD)
            .map(|(v, body)| (v, ExportRecord::decode(body.try_into().expect("payload"))))
    })
}

/// What to do to publish `name`, given its window as one READ brought it.
pub fn plan(name: &[u8; NAME_LEN], window: &[u8]) -> Plan {
    let mut free = None;
    for (i, s) in slots(window).enumerate() {
        match s {
            Ok((_, r)) if r.name == *name => return Plan::Exists { slot: i },
            Ok((v, r)) if is_tombstone(&r) => {
                free.get_or_insert(Plan::Claim {
                    slot: i,
                    version: v,
                });
            }
            Ok(_) => {}
            Err(Torn::Empty) => {
                free.get_or_insert(Plan::Claim {
                    slot: i,
                    version: 0,
                });
            }
            Err(t) => return Plan::Retry(t),
        }
    }
    free.unwrap_or(Plan::Full)
}

/// After an exporter wrote `name` into window slot `mine`, what a fresh READ of the
/// window says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recheck {
    /// Its slot is the name's only one, or the lowest: the export stands.
    Keep,
    /// Another exporter holds the name in a lower slot: revoke ours.
    Yield,
    /// A slot is being rewritten: read again.
    Retry(Torn),
}

/// The recheck of slot `mine` (see [`Recheck`]).
pub fn recheck(name: &[u8; NAME_LEN], window: &[u8], mine: usize) -> Recheck {
    for (i, s) in slots(window).enumerate() {
        match s {
            Ok((_, r)) if r.name == *name && i < mine => return Recheck::Yield,
            Ok(_) | Err(Torn::Empty) => {}
            Err(t) => return Recheck::Retry(t),
        }
    }
    Recheck::Keep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::lookup::PROBE;
    use crate::meta::record::name;
    use alloc::vec;
    use alloc::vec::Vec;

    fn rec(n: &str) -> ExportRecord {
        ExportRecord {
            name: name(n).unwrap(),
            node: 1,
            incarnation: 1,
            addr: 0,
            len: 8,
            access: 2,
            rkey: 9,
        }
    }

    fn window() -> Vec<u8> {
        vec![0u8; PROBE * EXPORT_FRAME]
    }

    fn put(w: &mut [u8], slot: usize, version: u64, payload: &[u8; EXPORT_PAYLOAD]) {
        frame::encode(
            &mut w[slot * EXPORT_FRAME..(slot + 1) * EXPORT_FRAME],
            version,
            payload,
        )
        .unwrap();
    }

    #[test]
    fn plans() {
        let n = name("kv").unwrap();
        let mut w = window();
        assert_eq!(
            plan(&n, &w),
            Plan::Claim {
                slot: 0,
                version: 0
            }
        );
        put(&mut w, 0, 2, &rec("other").encode());
        put(&mut w, 1, 6, &tombstone());
        assert_eq!(
            plan(&n, &w),
            Plan::Claim {
                slot: 1,
                version: 6
            },
            "a tombstone is reused"
        );
        put(&mut w, 3, 2, &rec("kv").encode());
        assert_eq!(plan(&n, &w), Plan::Exists { slot: 3 });
        // Being written by another exporter: its name may be ours.
        w[2 * EXPORT_FRAME..2 * EXPORT_FRAME + 8].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(
            plan(&name("new").unwrap(), &w),
            Plan::Retry(Torn::Rewriting)
        );
        let mut full = window();
        for s in 0..PROBE {
            put(&mut full, s, 2, &rec(&alloc::format!("n{s}")).encode());
        }
        assert_eq!(plan(&n, &full), Plan::Full);
    }

    /// Two exporters of one name that both planned before either claimed: both write,
    /// both recheck; exactly one keeps it.
    #[test]
    fn racing_exporters_of_one_name_keep_one() {
        let n = name("kv").unwrap();
        let mut w = window();
        put(&mut w, 0, 2, &rec("other").encode());
        let (a, b) = (plan(&n, &w), plan(&n, &w));
        assert_eq!(a, b);
        // A wins slot 1's CAS; B's CAS fails, it reads again and claims slot 2.
        put(&mut w, 1, 2, &rec("kv").encode());
        let Plan::Exists { slot: 1 } = plan(&n, &w) else {
            panic!("B's second plan sees A's export");
        };
        // Had B's read come before A's write landed, B would have claimed slot 2:
        put(&mut w, 2, 2, &rec("kv").encode());
        assert_eq!(recheck(&n, &w, 1), Recheck::Keep);
        assert_eq!(recheck(&n, &w, 2), Recheck::Yield);
        // B revokes: a tombstone, which lookups probe past.
        put(&mut w, 2, 4, &tombstone());
        assert_eq!(recheck(&n, &w, 1), Recheck::Keep);
        assert_eq!(
            plan(&name("next").unwrap(), &w),
            Plan::Claim {
                slot: 2,
                version: 4
            }
        );
    }
}
