//! SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed hash whose outputs nobody can
//! predict without the key, so nobody can choose names that meet in one slot.
//!
//! The MetaServer's export table is open-addressed: a name lives within a few slots of
//! its home (see [`lookup`](super::lookup)). With a public hash anyone could compute
//! names whose homes are a target name's and fill its window first, denying it
//! cluster-wide. Keyed with a secret every member derives from the cluster key
//! ([`Tables::key`](super::tables::Tables::key)), homes are unpredictable to anyone
//! without that key. The kernel's own `siphash()` is C; this one is here so the
//! MetaServer, its members and the tests hash alike.

/// A SipHash key: 128 bits, as two little-endian words.
pub type SipKey = [u64; 2];

#[inline]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[inline]
fn absorb(v: &mut [u64; 4], m: u64) {
    v[3] ^= m;
    round(v);
    round(v);
    v[0] ^= m;
}

/// SipHash-2-4 of `data` under `key`.
pub fn siphash24(key: SipKey, data: &[u8]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        absorb(&mut v, u64::from_le_bytes(b));
    }
    // The last word: the leftover bytes, and the length's low byte at the top.
    let rest = words.remainder();
    let mut b = [0u8; 8];
    b[..rest.len()].copy_from_slice(rest);
    b[7] = data.len() as u8;
    absorb(&mut v, u64::from_le_bytes(b));
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// The key in `b`'s 16 bytes (little-endian words, as the reference implementation
/// reads its key).
pub fn key_from_bytes(b: &[u8; 16]) -> SipKey {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&b[..8]);
    hi.copy_from_slice(&b[8..]);
    [u64::from_le_bytes(lo), u64::from_le_bytes(hi)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference vectors' key: bytes 0, 1, ..., 15.
    fn reference_key() -> SipKey {
        let mut k = [0u8; 16];
        for (i, b) in k.iter_mut().enumerate() {
            *b = i as u8;
        }
        key_from_bytes(&k)
    }

    #[test]
    fn matches_the_reference_vectors() {
        // From the reference implementation's vectors.h (vectors_sip64): messages of
        // bytes 0, 1, ..., n-1.
        let expected: [(usize, u64); 5] = [
            (0, 0x726f_db47_dd0e_0e31),
            (1, 0x74f8_39c5_93dc_67fd),
            (7, 0xab02_00f5_8b01_d137),
            (8, 0x93f5_f579_9a93_2462),
            (15, 0xa129_ca61_49be_45e5),
        ];
        let msg: [u8; 64] = core::array::from_fn(|i| i as u8);
        for (n, want) in expected {
            assert_eq!(
                siphash24(reference_key(), &msg[..n]),
                want,
                "message of {n} bytes"
            );
        }
    }

    #[test]
    fn another_key_gives_another_hash() {
        let k = reference_key();
        let other = [k[0] ^ 1, k[1]];
        assert_ne!(siphash24(k, b"kv-table"), siphash24(other, b"kv-table"));
    }
}
