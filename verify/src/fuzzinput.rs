//! Fuzz input: arbitrary bytes read as a stream of small numbers, for the fuzzing
//! programs (`fuzzprog`, `wirefuzz`).

/// Bytes as a stream of small numbers, zero once exhausted.
pub struct Input<'a>(pub &'a [u8]);

impl Input<'_> {
    /// The next byte.
    pub fn byte(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    /// The next `n` bytes, fewer at the end.
    pub fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
    /// Whether every byte was read.
    pub fn done(&self) -> bool {
        self.0.is_empty()
    }
}

/// Random programs a fuzzing program's seeded test runs: `KRCORE_FUZZ_SMOKE`, 3000 by
/// default (libFuzzer explores further).
pub fn smoke_cases() -> u32 {
    std::env::var("KRCORE_FUZZ_SMOKE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}
