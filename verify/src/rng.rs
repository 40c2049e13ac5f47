//! Random choices for the programs that make them as they go (the stress program, the
//! fuzz program, the demo's key draws, the engine's random scenarios): a seeded
//! generator (SplitMix64), or a tape of choices that proptest generates and shrinks.
//!
//! A test over a tape is a proptest with shrinking for free: proptest shrinks the tape
//! (fewer choices, each toward 0), and every choice drawn from a smaller value is a
//! simpler one (`below(n)` of 0 is the first option), so a failing scenario comes back
//! minimal.

/// Where the choices come from.
#[derive(Clone, Debug)]
enum Source {
    /// SplitMix64's state.
    Seeded(u64),
    /// Choices given in advance, then zeros.
    Tape(Vec<u64>, usize),
}

/// A source of random choices.
#[derive(Clone, Debug)]
pub struct Rng(Source);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(Source::Seeded(seed))
    }

    /// Choices taken from `tape` in order (zeros once it runs out).
    pub fn from_tape(tape: Vec<u64>) -> Rng {
        Rng(Source::Tape(tape, 0))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        match &mut self.0 {
            Source::Seeded(state) => {
                *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
            Source::Tape(tape, at) => {
                let v = tape.get(*at).copied().unwrap_or(0);
                *at += 1;
                v
            }
        }
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    /// One element of `xs`.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}
