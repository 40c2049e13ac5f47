//! The demo's key-value store: a hash table laid out in one region of a memory
//! node's memory and read by compute nodes with one-sided READs only, in the manner of
//! RACE hashing (Zuo et al., ATC'21): 8-slot buckets, two candidate buckets per key
//! (both READ in one batch), each slot an 8 B word naming its key-value block by offset,
//! size and an 8-bit fingerprint, so a GET is two round trips: the two buckets, then the
//! block its fingerprint picks. The memory node's CPU takes no part in a GET.
//!
//! ```text
//! offset 0                       header (64 B): magic, buckets, keys, heap offset
//! offset 64                      buckets: `buckets` x 8 slots x 8 B
//! offset heap                    key-value blocks, 64 B units: klen u8, vlen u8, key, value
//! ```
//!
//! The key set is YCSB's: `user` followed by a scrambled 64-bit number, values of 16 to
//! 100 bytes derived from the key (so any reader can check what it got), GET keys drawn
//! from a scrambled Zipfian distribution (θ = 0.99, YCSB's default).

use crate::rng::Rng;

/// The header's first word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"KRKV0001");
/// Slots per bucket: one bucket is one 64 B READ.
pub const SLOTS: usize = 8;
/// A bucket's size.
pub const BUCKET: usize = SLOTS * 8;
/// The unit of the heap's blocks.
pub const UNIT: usize = 64;
/// The header's size.
pub const HEADER: usize = 64;
/// The most bytes one block takes (klen and vlen are bytes, so 2 + 255 + 255 rounded up).
pub const MAX_BLOCK: usize = 9 * UNIT;

/// Where things are in a table of `keys` keys: a pure function of the key count, so a
/// reader checks the header against it instead of trusting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Keys stored.
    pub keys: u64,
    /// Buckets (a load factor of at most 50% of the slots).
    pub buckets: u64,
    /// Where the heap starts.
    pub heap: u64,
    /// The table's whole length.
    pub len: u64,
}

impl Geometry {
    /// The geometry for `keys` keys.
    pub fn new(keys: u64) -> Geometry {
        let buckets = (keys * 2).div_ceil(SLOTS as u64).max(2);
        let heap = (HEADER as u64 + buckets * BUCKET as u64).next_multiple_of(4096);
        // Keys are 23 bytes at most and values 100, so every block is 2 units at most.
        let len = (heap + keys * 2 * UNIT as u64).next_multiple_of(4096);
        Geometry {
            keys,
            buckets,
            heap,
            len,
        }
    }

    /// The header a table of this geometry starts with.
    pub fn header(&self) -> [u64; 4] {
        [MAGIC, self.buckets, self.keys, self.heap]
    }

    /// Offset of bucket `b`.
    pub fn bucket(&self, b: u64) -> u64 {
        HEADER as u64 + b * BUCKET as u64
    }

    /// The two candidate buckets of `key` (distinct) and its fingerprint (never 0: a
    /// zero slot is empty).
    pub fn place(&self, key: &[u8]) -> (u64, u64, u8) {
        let h = hash(key);
        let b1 = h % self.buckets;
        let mut b2 = mix(h) % self.buckets;
        if b2 == b1 {
            b2 = (b1 + 1) % self.buckets;
        }
        (b1, b2, ((h >> 56) as u8).max(1))
    }
}

/// FNV-1a, 64-bit: the key's hash.
pub fn hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A second, independent hash from the first (SplitMix64's finalizer).
fn mix(h: u64) -> u64 {
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A slot: fingerprint (8 bits), block size in units (8 bits), block offset (48 bits).
fn slot(fp: u8, units: u8, offset: u64) -> u64 {
    (fp as u64) << 56 | (units as u64) << 48 | offset
}

fn unslot(s: u64) -> (u8, u8, u64) {
    ((s >> 56) as u8, (s >> 48) as u8, s & ((1 << 48) - 1))
}

/// Key number `i` of the key set (YCSB's `user` and a scrambled number).
pub fn key(i: u64) -> String {
    format!("user{}", mix(i ^ 0x5eed))
}

/// The value stored under `key`: 16 to 100 bytes derived from the key.
pub fn value(key: &[u8]) -> Vec<u8> {
    let h = hash(key);
    let len = 16 + (h % 85) as usize;
    let mut r = Rng::new(h);
    (0..len).map(|_| b'a' + r.below(26) as u8).collect()
}

/// Builds the table for `keys` keys into `mem` (at least the geometry's length, zeroed).
/// Fails when both of a key's buckets are full (not at a 50% load factor in practice).
pub fn build(mem: &mut [u8], keys: u64) -> Result<Geometry, String> {
    let g = Geometry::new(keys);
    if (mem.len() as u64) < g.len {
        return Err(format!(
            "the table needs {} bytes, {} given",
            g.len,
            mem.len()
        ));
    }
    for (i, w) in g.header().iter().enumerate() {
        mem[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let mut next = g.heap;
    for i in 0..keys {
        let k = key(i);
        let v = value(k.as_bytes());
        let units = (2 + k.len() + v.len()).div_ceil(UNIT);
        let at = next as usize;
        mem[at] = k.len() as u8;
        mem[at + 1] = v.len() as u8;
        mem[at + 2..at + 2 + k.len()].copy_from_slice(k.as_bytes());
        mem[at + 2 + k.len()..at + 2 + k.len() + v.len()].copy_from_slice(&v);
        next += (units * UNIT) as u64;
        let (b1, b2, fp) = g.place(k.as_bytes());
        let free = |b: u64| (0..SLOTS).find(|&s| free_at(mem, &g, b, s));
        // The emptier bucket first, as RACE does, so buckets fill evenly.
        let load = |b: u64| SLOTS - (0..SLOTS).filter(|&s| free_at(mem, &g, b, s)).count();
        let (first, second) = if load(b2) < load(b1) {
            (b2, b1)
        } else {
            (b1, b2)
        };
        let (b, s) = match (free(first), free(second)) {
            (Some(s), _) => (first, s),
            (None, Some(s)) => (second, s),
            (None, None) => return Err(format!("both buckets of {k} are full")),
        };
        let base = g.bucket(b) as usize + s * 8;
        mem[base..base + 8].copy_from_slice(&slot(fp, units as u8, at as u64).to_le_bytes());
    }
    Ok(g)
}

fn free_at(mem: &[u8], g: &Geometry, b: u64, s: usize) -> bool {
    let at = g.bucket(b) as usize + s * 8;
    mem[at..at + 8] == [0; 8]
}

/// One-sided access to a table: READs of `(offset, len)` ranges, all in flight at once,
/// their bytes returned one after another.
pub trait Reader {
    /// READs each range; the bytes of all of them, in order.
    fn read(&mut self, ranges: &[(u64, u32)]) -> Result<Vec<u8>, String>;
}

/// Reads and checks a table's header against the geometry of `keys` keys.
pub fn check_header(r: &mut impl Reader, keys: u64) -> Result<Geometry, String> {
    let g = Geometry::new(keys);
    let h = r.read(&[(0, HEADER as u32)])?;
    let got: Vec<u64> = (0..4).map(|i| word(&h, i * 8)).collect();
    if got != g.header() {
        return Err(format!(
            "the table's header is {got:x?}, want {:x?}",
            g.header()
        ));
    }
    Ok(g)
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A GET: the two buckets in one batch, then each block whose fingerprint matches until
/// the key's (one in all but about 1 in 128 GETs). The value, or None when absent.
pub fn get(r: &mut impl Reader, g: &Geometry, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let (b1, b2, fp) = g.place(key);
    let buckets = r.read(&[(g.bucket(b1), BUCKET as u32), (g.bucket(b2), BUCKET as u32)])?;
    for s in 0..2 * SLOTS {
        let (f, units, offset) = unslot(word(&buckets, s * 8));
        if f != fp || units == 0 {
            continue;
        }
        let len = units as usize * UNIT;
        if len > MAX_BLOCK || offset < g.heap || offset + len as u64 > g.len {
            return Err(format!(
                "slot {s} names a block out of the table: {offset:#x}+{len}"
            ));
        }
        let b = r.read(&[(offset, len as u32)])?;
        let (kl, vl) = (b[0] as usize, b[1] as usize);
        if 2 + kl + vl > len {
            return Err(format!("block at {offset:#x} is torn: {kl}+{vl} > {len}"));
        }
        if &b[2..2 + kl] == key {
            return Ok(Some(b[2 + kl..2 + kl + vl].to_vec()));
        }
    }
    Ok(None)
}

/// GET keys from a scrambled Zipfian distribution over `n` keys (θ = 0.99), by the
/// continuous approximation of its inverse CDF: O(1) to set up, so a fresh worker
/// starts drawing at once.
pub struct Zipf {
    rng: Rng,
    n: f64,
    a: f64,
    span: f64,
}

impl Zipf {
    /// θ, YCSB's default skew.
    pub const THETA: f64 = 0.99;

    /// A generator over `0..n` seeded by `seed`.
    pub fn new(n: u64, seed: u64) -> Zipf {
        let a = 1.0 - Self::THETA;
        Zipf {
            rng: Rng::new(seed),
            n: n as f64,
            a,
            span: (n as f64 + 1.0).powf(a) - 1.0,
        }
    }

    /// The next key number: its rank drawn by skew, then scrambled, so the hot keys
    /// spread over the table.
    pub fn next_key(&mut self) -> u64 {
        let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let rank = ((1.0 + u * self.span).powf(1.0 / self.a) - 1.0).min(self.n - 1.0) as u64;
        mix(rank) % self.n as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads from a local copy, counting READs and batches.
    struct Local<'a>(&'a [u8], usize, usize);

    impl Reader for Local<'_> {
        fn read(&mut self, ranges: &[(u64, u32)]) -> Result<Vec<u8>, String> {
            self.1 += 1;
            self.2 += ranges.len();
            Ok(ranges
                .iter()
                .flat_map(|&(o, l)| self.0[o as usize..o as usize + l as usize].to_vec())
                .collect())
        }
    }

    #[test]
    fn every_key_is_found_in_two_round_trips_and_absent_keys_are_not() {
        let keys = 20_000;
        let g = Geometry::new(keys);
        let mut mem = vec![0u8; g.len as usize];
        assert_eq!(build(&mut mem, keys).unwrap(), g);
        let mut r = Local(&mem, 0, 0);
        assert_eq!(check_header(&mut r, keys).unwrap(), g);
        assert!(
            check_header(&mut r, keys + 1).is_err(),
            "another key count is another table"
        );
        let (batches, reads) = (r.1, r.2);
        for i in 0..keys {
            let k = key(i);
            assert_eq!(
                get(&mut r, &g, k.as_bytes()).unwrap(),
                Some(value(k.as_bytes())),
                "{k}"
            );
        }
        let per_get = (r.1 - batches) as f64 / keys as f64;
        assert!(per_get < 2.02, "round trips per GET {per_get}");
        assert!((r.2 - reads) as f64 / keys as f64 <= 3.02);
        for i in 0..1000 {
            assert_eq!(
                get(&mut r, &g, format!("nobody{i}").as_bytes()).unwrap(),
                None
            );
        }
    }

    #[test]
    fn a_slot_naming_memory_outside_the_heap_is_an_error_not_a_read() {
        let g = Geometry::new(100);
        let mut mem = vec![0u8; g.len as usize];
        build(&mut mem, 100).unwrap();
        let k = key(7);
        let (b1, b2, fp) = g.place(k.as_bytes());
        for b in [b1, b2] {
            for s in 0..SLOTS {
                let at = g.bucket(b) as usize + s * 8;
                if unslot(word(&mem, at)).0 == fp {
                    mem[at..at + 8].copy_from_slice(&slot(fp, 2, g.len - 64).to_le_bytes());
                }
            }
        }
        let err = get(&mut Local(&mem, 0, 0), &g, k.as_bytes()).unwrap_err();
        assert!(err.contains("out of the table"), "{err}");
    }

    #[test]
    fn zipf_is_skewed_and_covers_the_range() {
        let n = 10_000;
        let mut z = Zipf::new(n, 1);
        let mut counts = vec![0u32; n as usize];
        for _ in 0..200_000 {
            counts[z.next_key() as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top: u32 = counts[..100].iter().sum();
        // θ = 0.99 over 10k keys: the top 1% of keys take about half of the draws.
        assert!((70_000..130_000).contains(&top), "top 100 keys drew {top}");
        assert!(counts.iter().filter(|&&c| c > 0).count() > 3000);
    }
}
