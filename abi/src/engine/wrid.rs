//! Work-request IDs: the owner of every posted request, recoverable from its completion.
//!
//! `ring (16 bits) | ring generation (16 bits) | slot handle (32 bits)`. The ring id picks
//! the ring a completion belongs to; the generation tells a completion for a closed ring
//! (whose id was reused) from one for the live ring, so it is dropped, never written into
//! the new ring; the slot handle (itself generation-tagged, see [`table`](super::table))
//! picks the in-flight request.

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
