//! Work-request IDs: the owner of every posted request, recoverable from its completion.
//!
//! `ring (16 bits) | ring generation (16 bits) | slot handle (32 bits)`. The ring id picks
//! the ring a completion belongs to; the generation tells a completion for a closed ring
//! (whose id was reused) from one for the live ring, so it is dropped, never written into
//! the new ring; the slot handle (itself generation-tagged, see [`table`](super::table))
//! picks the in-flight request.

/// The `wr_id` of the backend's own request number `n` (`n < 2^31`): a flush marker, the
/// kernel-direct baseline. Its slot field has bit 31 set, which no table handle has
/// (handles stay below 2^31, see `table`), so a completion for one is
/// never taken for a ring's request.
pub const fn backend_wr_id(n: u32) -> u64 {
    u64::MAX - n as u64
}

/// Which of the `n` backend requests numbered from `base` `wr_id` is, if it is one of
/// them (a range of [`backend_wr_id`]s: notice receives, drain markers).
pub const fn backend_index(wr_id: u64, base: u32, n: u32) -> Option<u32> {
    let k = u64::MAX - wr_id;
    if k >= base as u64 && k < base as u64 + n as u64 {
        Some((k - base as u64) as u32)
    } else {
        None
    }
}

/// Whether `wr_id` is one of [`backend_wr_id`]'s.
pub const fn is_backend_wr_id(wr_id: u64) -> bool {
    wr_id as u32 & 0x8000_0000 != 0
}

/// A decoded work-request ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrId {
    /// The issuing ring's id.
    pub ring: u16,
    /// The issuing ring's generation.
    pub ring_gen: u16,
    /// The in-flight slot handle within that ring.
    pub slot: u32,
}

impl WrId {
    /// Packs the ID into the 64-bit `wr_id` of a verbs work request.
    pub const fn encode(self) -> u64 {
        ((self.ring as u64) << 48) | ((self.ring_gen as u64) << 32) | self.slot as u64
    }

    /// Unpacks a `wr_id`.
    pub const fn decode(v: u64) -> WrId {
        WrId {
            ring: (v >> 48) as u16,
            ring_gen: (v >> 32) as u16,
            slot: v as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_backend_range_names_its_members_only() {
        use super::{backend_index, backend_wr_id};
        assert_eq!(backend_index(backend_wr_id(100), 100, 4), Some(0));
        assert_eq!(backend_index(backend_wr_id(103), 100, 4), Some(3));
        assert_eq!(backend_index(backend_wr_id(104), 100, 4), None);
        assert_eq!(backend_index(backend_wr_id(99), 100, 4), None);
    }

    #[test]
    fn backend_ids_are_not_ring_ids() {
        assert!(super::is_backend_wr_id(super::backend_wr_id(0)));
        assert!(super::is_backend_wr_id(super::backend_wr_id((1 << 31) - 1)));
        let ring = super::WrId {
            ring: 0xffff,
            ring_gen: 0xffff,
            slot: (127 << 24) | 0xff_ffff,
        };
        assert!(
            !super::is_backend_wr_id(ring.encode()),
            "the largest table handle"
        );
    }

    use super::*;

    #[test]
    fn round_trip() {
        for id in [
            WrId {
                ring: 0,
                ring_gen: 0,
                slot: 0,
            },
            WrId {
                ring: u16::MAX,
                ring_gen: 7,
                slot: 0x01ff_ffff,
            },
            WrId {
                ring: 3,
                ring_gen: u16::MAX,
                slot: u32::MAX,
            },
        ] {
            assert_eq!(WrId::decode(id.encode()), id);
        }
    }
}
