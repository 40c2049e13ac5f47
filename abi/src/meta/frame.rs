//! Torn-read detection for entries read with one-sided RDMA while their owner rewrites
//! them.
//!
//! ```text
//! offset 0          8                8+P          12+P     16+P
//!        | head u64 | payload P bytes | sum u32   | 0 u32  | tail u64 |
//! ```
//!
//! The owner (the only writer of an entry) rewrites it in three steps, each complete
//! before the next starts (local stores with release ordering, or RDMA WRITEs on one RC
//! QP, which the responder places in order): `head = v + 1` (odd: being written), then
//! payload, checksum and `tail = v + 2`, then `head = v + 2`. A reader takes the whole
//! frame in one READ and accepts it only if `head == tail`, `head` is even and nonzero,
//! and the checksum of version and payload matches. A READ that overlapped a rewrite
//! sees an odd head, or head and tail from different rewrites, or (bytes of one READ
//! are not ordered among themselves) a payload mixing two versions, which the checksum
//! catches. A torn frame is retried; after a few tries the lookup fails, saying why.

/// Bytes a frame adds around its payload.
pub const OVERHEAD: usize = 24;

/// Why a frame was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Torn {
    /// Never written (version 0): no such entry.
    Empty,
    /// Its owner was rewriting it (odd head, or head and tail differ): read it again.
    Rewriting,
    /// Versions agree but the checksum does not: bytes of two versions mixed; read it
    /// again.
    Checksum,
    /// The buffer is not a frame of this payload size.
    Size,
}

/// FNV-1a, 32 bits, over the version and the payload: cheap, no tables, and any
/// change of a byte changes it.
fn checksum(version: u64, payload: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in version.to_le_bytes().iter().chain(payload) {
        h ^= *b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The frame size for a `payload`-byte payload.
pub const fn size(payload: usize) -> usize {
    payload + OVERHEAD
}

/// Writes `payload` at `version` (even, nonzero) into `frame` as a finished rewrite
/// leaves it: what an owner builds before its WRITEs, and what tests compare against.
pub fn encode(frame: &mut [u8], version: u64, payload: &[u8]) -> Result<(), Torn> {
    if frame.len() != size(payload.len()) || version == 0 || version % 2 == 1 {
        return Err(Torn::Size);
    }
    let p = payload.len();
    frame[..8].copy_from_slice(&version.to_le_bytes());
    frame[8..8 + p].copy_from_slice(payload);
    frame[8 + p..12 + p].copy_from_slice(&checksum(version, payload).to_le_bytes());
    frame[12 + p..16 + p].fill(0);
    frame[16 + p..].copy_from_slice(&version.to_le_bytes());
    Ok(())
}

/// The three writes of a rewrite from `old` to `new` (the payload's), as
/// `(offset, bytes)` ranges of the frame, in the order they must land: head odd; body
/// and tail; head even. `new` must be the frame [`encode`] made at `version + 2` where
/// `version` is the entry's current one.
pub fn rewrite_steps(new: &[u8]) -> [(usize, usize); 3] {
    [(0, 8), (8, new.len() - 8), (0, 8)]
}

/// The version a rewrite's first step writes (odd): the current one plus one.
pub const fn writing(version: u64) -> u64 {
    version + 1
}

/// Accepts `frame` (a `payload`-byte payload) if it is whole: its version and payload.
pub fn decode(frame: &[u8], payload: usize) -> Result<(u64, &[u8]), Torn> {
    if frame.len() != size(payload) {
        return Err(Torn::Size);
    }
    let word = |at: usize| u64::from_le_bytes(frame[at..at + 8].try_into().expect("8 bytes"));
    let (head, tail) = (word(0), word(16 + payload));
    if head == 0 && tail == 0 {
        return Err(Torn::Empty);
    }
    if head % 2 == 1 || head != tail {
        return Err(Torn::Rewriting);
    }
    let body = &frame[8..8 + payload];
    let sum = u32::from_le_bytes(
        frame[8 + payload..12 + payload]
            .try_into()
            .expect("4 bytes"),
    );
    if sum != checksum(head, body) {
        return Err(Torn::Checksum);
    }
    Ok((head, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const P: usize = 40;

    fn frame(version: u64, fill: u8) -> Vec<u8> {
        let mut f = vec![0u8; size(P)];
        let payload: Vec<u8> = (0..P as u8).map(|i| i.wrapping_mul(fill)).collect();
        encode(&mut f, version, &payload).unwrap();
        f
    }

    #[test]
    fn round_trip_and_empty() {
        let f = frame(4, 3);
        let (v, body) = decode(&f, P).unwrap();
        assert_eq!(v, 4);
        assert_eq!(body[5], 15);
        assert_eq!(decode(&vec![0u8; size(P)], P), Err(Torn::Empty));
        assert_eq!(decode(&f[1..], P), Err(Torn::Size));
        assert_eq!(encode(&mut vec![0u8; size(P)], 3, &[0; P]), Err(Torn::Size));
    }

    /// Every state a READ can see while version 2 is rewritten to version 4, including
    /// any mix of old and new bytes within one step (a READ's bytes are unordered), is
    /// either rejected or exactly the old or the new entry.
    #[test]
    fn a_read_racing_a_rewrite_is_whole_or_torn() {
        let (old, new) = (frame(2, 3), frame(4, 7));
        let mut odd_head = old.clone();
        odd_head[..8].copy_from_slice(&writing(2).to_le_bytes());
        let steps = rewrite_steps(&new);
        // Memory after each completed step.
        let mut after_body = odd_head.clone();
        let (o, n) = steps[1];
        after_body[o..o + n].copy_from_slice(&new[o..o + n]);
        let states = [old.clone(), odd_head, after_body, new.clone()];
        let whole = |f: &[u8]| f == old.as_slice() || f == new.as_slice();
        let mut accepted = 0;
        // A READ may see any byte from any state the memory passed through during it
        // (two, for the cases here, any pair of them).
        for (i, j) in (0..states.len()).flat_map(|i| (i + 1..states.len()).map(move |j| (i, j))) {
            let w = [&states[i], &states[j]];
            for cut in 0..=size(P) {
                for (a, b) in [(w[0], w[1]), (w[1], w[0])] {
                    let mut seen = a[..cut].to_vec();
                    seen.extend_from_slice(&b[cut..]);
                    if decode(&seen, P).is_ok() {
                        assert!(whole(&seen), "accepted a mix at cut {cut}");
                        accepted += 1;
                    }
                }
                // Every other byte from the later state.
                let mixed: Vec<u8> = (0..size(P))
                    .map(|i| if i % 2 == cut % 2 { w[0][i] } else { w[1][i] })
                    .collect();
                if decode(&mixed, P).is_ok() {
                    assert!(whole(&mixed), "accepted an interleaving");
                }
            }
        }
        assert!(accepted > 0, "the whole frames at the ends are accepted");
    }

    #[test]
    fn torn_reasons() {
        let mut f = frame(2, 3);
        f[..8].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(decode(&f, P), Err(Torn::Rewriting));
        let mut f = frame(2, 3);
        f[16 + P..].copy_from_slice(&4u64.to_le_bytes());
        assert_eq!(decode(&f, P), Err(Torn::Rewriting));
        let mut f = frame(2, 3);
        f[9] ^= 1;
        assert_eq!(decode(&f, P), Err(Torn::Checksum));
    }
}
