//! How an export is published and revoked in the MetaServer's table, next to readers
//! that never lock ([`lookup`]). The MetaServer's kernel runs these on its own region,
//! for the exporting node that asked ([`serve`](super::serve)); the compare-and-swap
//! keeps a rewrite safe against a crashed writer's odd head.
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
use super::lookup::{EXPORT_FRAME, TRIES};
use super::record::{ExportRecord, EXPORT_PAYLOAD, NAME_LEN};
use super::tables::{read_window, Tables, Unreachable, Writable};

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

/// What to do to publish `rec`, given its name's window as one READ brought it. A
/// record of the name left by an earlier incarnation of `rec`'s own node (it restarted
/// without revoking) is stale: it is claimed over, not a reason to refuse.
pub fn plan(rec: &ExportRecord, window: &[u8]) -> Plan {
    let mut free = None;
    for (i, s) in slots(window).enumerate() {
        match s {
            Ok((v, r))
                if r.name == rec.name && r.node == rec.node && r.incarnation != rec.incarnation =>
            {
                return Plan::Claim {
                    slot: i,
                    version: v,
                };
            }
            Ok((_, r)) if r.name == rec.name => return Plan::Exists { slot: i },
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

/// Why a publication failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// The name is published already (by this node or another).
    Taken,
    /// No free slot in the name's window.
    Full,
    /// Slots stayed torn, or claims were lost, for every try.
    Contended,
    /// A verb failed.
    Unreachable,
}

impl From<Unreachable> for PublishError {
    fn from(_: Unreachable) -> Self {
        PublishError::Unreachable
    }
}

/// Rewrites the entry at `off`, whose head holds `version` (even), to `payload`:
/// claim the head by compare-and-swap, then body and tail, then head. Whether the claim
/// held (a lost one wrote nothing).
fn rewrite(
    r: &mut impl Writable,
    off: u64,
    version: u64,
    payload: &[u8; EXPORT_PAYLOAD],
) -> Result<bool, Unreachable> {
    if r.cas(off, version, frame::writing(version))? != version {
        return Ok(false);
    }
    let mut f = [0u8; EXPORT_FRAME];
    frame::encode(&mut f, version + 2, payload).expect("frame size");
    let [_, (at, n), _] = frame::rewrite_steps(&f);
    r.write(off + at as u64, &f[at..at + n])?;
    r.write(off, &f[..8])?;
    Ok(true)
}

/// Publishes `rec` under its name through `r` (see the module doc): the slot it took.
/// `buf` holds a probe window.
pub fn publish(
    r: &mut impl Writable,
    t: &Tables,
    rec: &ExportRecord,
    buf: &mut [u8],
) -> Result<u32, PublishError> {
    let first = t.home(&rec.name);
    // The window's `w`th slot, wrapping (a subtraction, not a remainder: the kernel
    // build's objtool rejects a division's panic path).
    let at = |w: usize| {
        let s = first + w as u32;
        if s >= t.export_slots {
            s - t.export_slots
        } else {
            s
        }
    };
    for _ in 0..2 * TRIES {
        let window = read_window(r, t, first, buf)?;
        let (w, version) = match plan(rec, &buf[..window * EXPORT_FRAME]) {
            Plan::Exists { .. } => return Err(PublishError::Taken),
            Plan::Full => return Err(PublishError::Full),
            Plan::Retry(_) => continue,
            Plan::Claim { slot, version } => (slot, version),
        };
        if !rewrite(r, t.export(at(w)), version, &rec.encode())? {
            continue;
        }
        // Another exporter of the name may have claimed a slot at once: the lower keeps it.
        // Once written, the slot is returned whatever comes (a window that cannot be
        // read again keeps ours, as a torn one does), so its writer's books (`serve`'s
        // `Shares::owners`) always learn where the record is.
        for _ in 0..TRIES {
            let Ok(window) = read_window(r, t, first, buf) else {
                return Ok(at(w));
            };
            match recheck(&rec.name, &buf[..window * EXPORT_FRAME], w) {
                Recheck::Keep => return Ok(at(w)),
                Recheck::Yield => {
                    rewrite(r, t.export(at(w)), version + 2, &tombstone())?;
                    return Err(PublishError::Taken);
                }
                Recheck::Retry(_) => {}
            }
        }
        // Torn each time: keep ours; a racer with a lower slot yields when it rechecks.
        return Ok(at(w));
    }
    Err(PublishError::Contended)
}

/// Revokes `name` from slot `slot` (where [`publish`] put it): a tombstone. Nothing is
/// written when the slot holds another name (or was revoked already).
pub fn revoke(
    r: &mut impl Writable,
    t: &Tables,
    slot: u32,
    name: &[u8; NAME_LEN],
) -> Result<(), PublishError> {
    let off = t.export(slot);
    let mut f = [0u8; EXPORT_FRAME];
    for _ in 0..TRIES {
        r.read(off, &mut f)?;
        let (version, body) = match frame::decode(&f, EXPORT_PAYLOAD) {
            Ok(v) => v,
            Err(Torn::Empty) => return Ok(()),
            Err(_) => continue,
        };
        if ExportRecord::decode(body.try_into().expect("payload")).name != *name {
            return Ok(());
        }
        if rewrite(r, off, version, &tombstone())? {
            return Ok(());
        }
    }
    Err(PublishError::Contended)
}

/// Revokes every record node `node` holds in `slots` (tombstones): what the
/// MetaServer's kernel does first when the node registers, before its node record moves
/// to the new incarnation, in the slots its books say hold the node's records (see
/// `serve`'s `Shares::owners`; every slot, `0..export_slots`, for a region nobody kept
/// books of). So a whole record in the table is always of its node's current
/// incarnation, and a lookup needs no READ of the node's record to know it is live:
/// one that reads after the registration finds the tombstones. A slot left torn by a
/// crashed writer is nobody's whole record, and is claimed over later. The number
/// revoked.
pub fn revoke_node(
    r: &mut impl Writable,
    t: &Tables,
    node: u16,
    slots: impl Iterator<Item = u32>,
) -> Result<u32, Unreachable> {
    let mut f = [0u8; EXPORT_FRAME];
    let mut revoked = 0;
    for slot in slots.filter(|&s| s < t.export_slots) {
        let off = t.export(slot);
        // This kernel is the table's only writer, so a lost CAS means a crashed
        // writer's odd head: nobody's whole record.
        r.read(off, &mut f)?;
        let Ok((version, body)) = frame::decode(&f, EXPORT_PAYLOAD) else {
            continue;
        };
        let rec = ExportRecord::decode(body.try_into().expect("payload"));
        if rec.node == node && !is_tombstone(&rec) && rewrite(r, off, version, &tombstone())? {
            revoked += 1;
        }
    }
    Ok(revoked)
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
            grant: crate::meta::record::Grant {
                uid: 1000,
                gid: 1000,
                mode: crate::meta::record::MODE_DEFAULT,
            },
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
        let n = rec("kv");
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
        assert_eq!(plan(&rec("new"), &w), Plan::Retry(Torn::Rewriting));
        let mut full = window();
        for s in 0..PROBE {
            put(&mut full, s, 2, &rec(&alloc::format!("n{s}")).encode());
        }
        assert_eq!(plan(&n, &full), Plan::Full);
        // Our own node's record of the name from before a restart is claimed over.
        let mut w = window();
        put(&mut w, 3, 2, &rec("kv").encode());
        let reloaded = ExportRecord {
            incarnation: 2,
            ..rec("kv")
        };
        assert_eq!(
            plan(&reloaded, &w),
            Plan::Claim {
                slot: 3,
                version: 2
            }
        );
        let other_node = ExportRecord {
            node: 5,
            ..reloaded
        };
        assert_eq!(plan(&other_node, &w), Plan::Exists { slot: 3 });
    }

    /// Two exporters of one name that both planned before either claimed: both write,
    /// both recheck; exactly one keeps it.
    #[test]
    fn racing_exporters_of_one_name_keep_one() {
        let k = rec("kv");
        let n = k.name;
        let mut w = window();
        put(&mut w, 0, 2, &rec("other").encode());
        let (a, b) = (plan(&k, &w), plan(&k, &w));
        assert_eq!(a, b);
        // A wins slot 1's CAS; B's CAS fails, it reads again and claims slot 2.
        put(&mut w, 1, 2, &rec("kv").encode());
        let Plan::Exists { slot: 1 } = plan(&k, &w) else {
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
            plan(&rec("next"), &w),
            Plan::Claim {
                slot: 2,
                version: 4
            }
        );
    }

    const T: Tables = Tables {
        node_slots: 1,
        export_slots: 32,
        key: [7, 11],
    };

    fn found(m: &mut crate::meta::tables::mem::MemRegion, n: &str) -> Option<u16> {
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        crate::meta::lookup::lookup(&name(n).unwrap(), &T, &mut buf, m)
            .ok()
            .map(|(r, _)| r.node)
    }

    #[test]
    fn publish_then_revoke_over_verbs() {
        let mut m = crate::meta::tables::mem::MemRegion::new(T.bytes());
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        let a = rec("kv");
        let s = publish(&mut m, &T, &a, &mut buf).unwrap();
        assert_eq!(found(&mut m, "kv"), Some(1));
        assert_eq!(publish(&mut m, &T, &a, &mut buf), Err(PublishError::Taken));
        revoke(&mut m, &T, s, &a.name).unwrap();
        assert_eq!(found(&mut m, "kv"), None, "revoked at once");
        // The tombstone is claimed again by the next publication of any name there.
        let again = publish(&mut m, &T, &a, &mut buf).unwrap();
        assert_eq!(again, s);
        revoke(&mut m, &T, s, &name("other").unwrap()).unwrap();
        assert_eq!(
            found(&mut m, "kv"),
            Some(1),
            "revoking another name writes nothing"
        );
        m.down = true;
        assert_eq!(
            publish(&mut m, &T, &rec("x"), &mut buf),
            Err(PublishError::Unreachable)
        );
    }

    /// A node's records go when it registers again, and only its own; the probe
    /// chains past them stay whole (tombstones), and the name is free again.
    #[test]
    fn a_nodes_records_all_go_and_only_its_own() {
        let mut m = crate::meta::tables::mem::MemRegion::new(T.bytes());
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        for n in ["a", "b", "c"] {
            publish(&mut m, &T, &rec(n), &mut buf).unwrap();
        }
        let theirs = ExportRecord {
            node: 2,
            ..rec("d")
        };
        publish(&mut m, &T, &theirs, &mut buf).unwrap();
        assert_eq!(revoke_node(&mut m, &T, 1, 0..T.export_slots), Ok(3));
        for n in ["a", "b", "c"] {
            assert_eq!(found(&mut m, n), None, "{n} still found");
        }
        assert_eq!(found(&mut m, "d"), Some(2), "another node's record stays");
        assert_eq!(
            revoke_node(&mut m, &T, 1, 0..T.export_slots),
            Ok(0),
            "tombstones are nobody's"
        );
        publish(&mut m, &T, &rec("a"), &mut buf).unwrap();
        assert_eq!(found(&mut m, "a"), Some(1));
        m.down = true;
        assert!(revoke_node(&mut m, &T, 1, 0..T.export_slots).is_err());
    }

    /// Names someone aimed at one home under a key they knew land apart under the
    /// cluster's, which they do not know: the window of the name they aimed at stays
    /// open.
    #[test]
    fn names_aimed_at_one_home_without_the_key_land_apart() {
        let known = Tables { key: [0, 0], ..T };
        let target = known.home(&name("kv").unwrap());
        let aimed: Vec<_> = (0..)
            .map(|i| alloc::format!("f{i}"))
            .filter(|n| known.home(&name(n).unwrap()) == target)
            .take(PROBE)
            .collect();
        let home = T.home(&name("kv").unwrap());
        let hits = aimed
            .iter()
            .filter(|n| T.home(&name(n).unwrap()).wrapping_sub(home) % 32 < PROBE as u32)
            .count();
        assert!(
            hits < PROBE,
            "{hits} of {PROBE} aimed names still in the window"
        );
    }

    #[test]
    fn a_full_window_refuses() {
        let mut m = crate::meta::tables::mem::MemRegion::new(T.bytes());
        let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
        let target = T.home(&name("kv").unwrap());
        let mut placed = 0;
        for i in 0.. {
            let n = alloc::format!("f{i}");
            if T.home(&name(&n).unwrap()) == target {
                publish(&mut m, &T, &rec(&n), &mut buf).unwrap();
                placed += 1;
                if placed == PROBE {
                    break;
                }
            }
        }
        assert_eq!(
            publish(&mut m, &T, &rec("kv"), &mut buf),
            Err(PublishError::Full)
        );
    }
}
