//! How a node's kernel admits another kernel: by proof that it holds the cluster key,
//! never by the key itself, which no request carries.
//!
//! A dial is two connection requests to the peer's listener:
//!
//! 1. A hello with the dialer's nonce. The listener issues a nonce of its own, kept in
//!    its [`Challenges`] (one use, [`CHALLENGE_MS`], at most [`PER_SOURCE`] per
//!    address), and refuses the request with that challenge.
//! 2. A hello with both nonces and the dialer's tag: a MAC with the cluster key over
//!    both nonces and the connection (both addresses and ports, the dialer's QP number,
//!    the kind and index asked for). The listener redeems its nonce for that address (a nonce it
//!    did not issue to that address, an expired or a used one is refused) and checks the
//!    tag; then it accepts with its own tag over the same and its QP number, which the
//!    dialer checks before it uses the connection.
//!
//! A request sniffed on the segment and replayed gets nothing: its challenge is spent,
//! and its tag names the dialer's address, port and QP.
//!
//! A dial first tries to skip the challenge's round trip: its first request is a FRESH
//! hello, the proof made at once over the dialer's nonce and its wall-clock time in
//! place of the listener's nonce. The listener admits it only when the time is within
//! [`FRESH_MS`] of its own, later than anything it has forgotten, and the dialer's
//! nonce is not among the fresh proofs it admitted ([`Seen`]): so a replay is refused
//! however the clocks move. When it is not admitted (clocks apart, a listener loaded
//! since, a replay) the refusal carries a challenge, and the dial goes on as above: a
//! first contact costs one request when the nodes' clocks agree, two when not. The wire forms and the
//! transcript are [`hello`](super::hello)'s; the MAC (HMAC-SHA256 through the kernel's
//! crypto API, cut to [`TAG_LEN`]) is the module's (kmod/cluster/cm_auth.c); what is admitted, and how often an address may fail, is decided
//! here: a [`Gate`] per device. A hello never fails: it always gets a challenge, which
//! takes the place of the oldest when the table is full, so a flood of hellos (from any
//! address a sender writes into its request) delays a member by its own round trip at
//! most, never locks it out. Failed proofs spend their address's [`Limiter`]; while it
//! is empty, that address's proofs are refused before any MAC is computed.

/// Bytes of a nonce (each side's).
pub const NONCE_LEN: usize = 16;
/// Bytes of a tag: HMAC-SHA256 cut to 128 bits (as RFC 4868's HMAC-SHA-256-128).
pub const TAG_LEN: usize = 16;
/// How long an issued challenge can be redeemed, ms.
pub const CHALLENGE_MS: i64 = 5_000;
/// Challenges outstanding for one address at most.
pub const PER_SOURCE: usize = 4;
/// Failed proofs one address may make in a burst before its proofs are refused unread.
pub const BURST: u32 = 16;
/// Failed proofs it may make per second after a burst.
pub const PER_SECOND: u32 = 8;
/// How far a FRESH proof's time may be from the listener's clock, ms, either way.
pub const FRESH_MS: i64 = CHALLENGE_MS;
/// Fresh proofs a listener remembers: when more come within [`FRESH_MS`], the oldest
/// is forgotten and every proof as old as it is refused from then on (its dialer
/// answers a challenge instead).
pub const SEEN: usize = 32;

/// Compares two byte strings in time that does not depend on where they differ.
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Clone, Copy)]
struct Issued {
    from: u32,
    nonce: [u8; NONCE_LEN],
    at_ms: i64,
    live: bool,
}

impl Issued {
    const EMPTY: Issued = Issued {
        from: 0,
        nonce: [0; NONCE_LEN],
        at_ms: 0,
        live: false,
    };

    fn expired(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.at_ms) >= CHALLENGE_MS || now_ms < self.at_ms
    }
}

/// The challenges a listener issued and not yet saw redeemed: `N` at most, so a flood
/// of hellos holds a bounded table (entries expire after [`CHALLENGE_MS`]).
pub struct Challenges<const N: usize> {
    slots: [Issued; N],
}

impl<const N: usize> Default for Challenges<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Challenges<N> {
    /// None issued.
    pub const fn new() -> Self {
        Challenges {
            slots: [Issued::EMPTY; N],
        }
    }

    /// Keeps `nonce` as issued to `from` (an IPv4 address) now, in place of `from`'s
    /// oldest when it has [`PER_SOURCE`] outstanding, else of an expired one, else of
    /// the oldest of all.
    pub fn issue(&mut self, from: u32, nonce: [u8; NONCE_LEN], now_ms: i64) {
        for s in self.slots.iter_mut() {
            if s.live && s.expired(now_ms) {
                s.live = false;
            }
        }
        let live = |i: &usize| self.slots[*i].live;
        let mine = |i: &usize| live(i) && self.slots[*i].from == from;
        let age = |i: &usize| self.slots[*i].at_ms;
        let at = if (0..N).filter(mine).count() >= PER_SOURCE {
            (0..N).filter(mine).min_by_key(age)
        } else {
            (0..N).find(|i| !live(i)).or_else(|| (0..N).min_by_key(age))
        };
        if let Some(at) = at {
            self.slots[at] = Issued {
                from,
                nonce,
                at_ms: now_ms,
                live: true,
            };
        }
    }

    /// Spends the challenge `nonce` issued to `from`: whether it was live (issued to
    /// that address, not expired, not spent before).
    pub fn redeem(&mut self, from: u32, nonce: &[u8; NONCE_LEN], now_ms: i64) -> bool {
        for s in self.slots.iter_mut() {
            if s.live && s.from == from && same_bytes(&s.nonce, nonce) {
                s.live = false;
                return !s.expired(now_ms);
            }
        }
        false
    }

    /// Challenges outstanding now.
    pub fn outstanding(&self, now_ms: i64) -> usize {
        self.slots.iter().filter(|s| s.live && !s.expired(now_ms)).count()
    }
}

/// The FRESH proofs a listener admitted while a replay of them could still be in time
/// (`N` at most), and the time at or before which it admits none: when it started, or
/// the latest proof it forgot.
pub struct Seen<const N: usize> {
    slots: [Option<(u32, [u8; NONCE_LEN], i64)>; N],
    floor_ms: i64,
}

impl<const N: usize> Default for Seen<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Seen<N> {
    /// Admits none until [`start`](Self::start).
    pub const fn new() -> Self {
        Seen {
            slots: [None; N],
            floor_ms: i64::MAX,
        }
    }

    /// Starts at `now_ms` (wall clock): admits only proofs made after `now_ms` plus
    /// [`FRESH_MS`], since a listener before this one (the module loaded earlier, the
    /// device added before) may have admitted any up to that far ahead of its clock.
    /// This holds while the wall clock does not step back across the restart by more
    /// than it has run since; a clock that might should not be trusted with FRESH.
    pub fn start(&mut self, now_ms: i64) {
        self.floor_ms = now_ms.saturating_add(FRESH_MS);
    }

    /// A FRESH proof from `from` with nonce `nonce_i`, made at `at_ms`, its tag good,
    /// arrives at `now_ms` (wall clock): whether it is admitted (in time, after the
    /// floor, never admitted before), and if so remembered.
    pub fn admit(&mut self, from: u32, nonce_i: &[u8; NONCE_LEN], at_ms: i64, now_ms: i64) -> bool {
        let earliest = now_ms.saturating_sub(FRESH_MS);
        if at_ms <= self.floor_ms || at_ms < earliest || at_ms > now_ms.saturating_add(FRESH_MS) {
            return false;
        }
        // What is out of time goes: a replay of it is refused by its time, and by the
        // floor should the clock go back.
        for s in self.slots.iter_mut() {
            if let Some((_, _, t)) = *s {
                if t < earliest {
                    self.floor_ms = self.floor_ms.max(t);
                    *s = None;
                }
            }
        }
        let mine = |s: &(u32, [u8; NONCE_LEN], i64)| s.0 == from && same_bytes(&s.1, nonce_i);
        if self.slots.iter().flatten().any(mine) {
            return false;
        }
        let at = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                // Full of proofs still in time: the oldest is forgotten, and the floor
                // rises to it, so a replay of it is refused by its time.
                let oldest = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(i, s)| s.map(|(_, _, t)| (i, t)))
                    .min_by_key(|&(_, t)| t);
                let Some((i, t)) = oldest else {
                    return false;
                };
                self.floor_ms = self.floor_ms.max(t);
                if at_ms <= self.floor_ms {
                    return false;
                }
                i
            }
        };
        self.slots[at] = Some((from, *nonce_i, at_ms));
        true
    }
}

/// A token bucket of failed attempts: [`BURST`] deep, refilled at [`PER_SECOND`].
#[derive(Clone, Copy)]
pub struct Limiter {
    tokens: u32,
    at_ms: i64,
}

impl Default for Limiter {
    fn default() -> Self {
        Self::new()
    }
}

impl Limiter {
    /// Full.
    pub const fn new() -> Self {
        Limiter {
            tokens: BURST,
            at_ms: 0,
        }
    }

    fn refill(&mut self, now_ms: i64) {
        if now_ms < self.at_ms {
            // A clock that went back: start the interval again.
            self.at_ms = now_ms;
            return;
        }
        let per_token = 1000 / PER_SECOND as i64;
        let add = (now_ms - self.at_ms) / per_token;
        if add > 0 {
            self.tokens = (self.tokens as i64 + add).min(BURST as i64) as u32;
            self.at_ms += add * per_token;
        }
        if self.tokens == BURST {
            self.at_ms = now_ms;
        }
    }

    /// Whether a request may be looked at now.
    pub fn open(&mut self, now_ms: i64) -> bool {
        self.refill(now_ms);
        self.tokens > 0
    }

    /// A request failed: one token spent.
    pub fn failed(&mut self, now_ms: i64) {
        self.refill(now_ms);
        self.tokens = self.tokens.saturating_sub(1);
    }
}

/// A [`Limiter`] per address, for the `M` addresses that failed last (an address not
/// among them starts with a full one).
pub struct Limiters<const M: usize> {
    slots: [(u32, i64, Limiter); M],
}

impl<const M: usize> Default for Limiters<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const M: usize> Limiters<M> {
    /// Every address full.
    pub const fn new() -> Self {
        Limiters {
            slots: [(0, i64::MIN, Limiter::new()); M],
        }
    }

    /// Whether `from` may try now.
    pub fn open(&mut self, from: u32, now_ms: i64) -> bool {
        match self.slots.iter_mut().find(|s| s.1 != i64::MIN && s.0 == from) {
            Some(s) => s.2.open(now_ms),
            None => true,
        }
    }

    /// `from` failed: its limiter spends a token (taking the place of the address that
    /// failed longest ago when it had none).
    pub fn failed(&mut self, from: u32, now_ms: i64) {
        let at = match self.slots.iter().position(|s| s.1 != i64::MIN && s.0 == from) {
            Some(i) => i,
            None => {
                let i = (0..M).min_by_key(|&i| self.slots[i].1).unwrap_or(0);
                self.slots[i] = (from, now_ms, Limiter::new());
                i
            }
        };
        let s = &mut self.slots[at];
        s.1 = now_ms;
        s.2.failed(now_ms);
    }
}

/// Why a gate refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Too many failed attempts lately, or too many challenges outstanding.
    Limited,
    /// No such challenge issued to that address, or a wrong tag.
    Refused,
}

/// Addresses a gate keeps a limiter for.
pub const LIMITED_SOURCES: usize = 16;

/// A device's gate for peer kernels' requests: its challenges, its limiters, and what
/// it refused.
pub struct Gate<const N: usize> {
    challenges: Challenges<N>,
    limiters: Limiters<LIMITED_SOURCES>,
    seen: Seen<SEEN>,
    /// Proofs refused: an unknown, spent or expired challenge, or a wrong tag.
    pub refused: u64,
    /// Proofs refused unread: their address failed too often lately.
    pub limited: u64,
    /// FRESH proofs admitted (a dial in one request).
    pub fresh: u64,
    /// FRESH proofs with a good tag answered by a challenge instead: out of time (the
    /// clocks apart), older than the gate, or replayed.
    pub stale: u64,
}

impl<const N: usize> Default for Gate<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Gate<N> {
    /// Open, nothing issued.
    pub const fn new() -> Self {
        Gate {
            challenges: Challenges::new(),
            limiters: Limiters::new(),
            seen: Seen::new(),
            refused: 0,
            limited: 0,
            fresh: 0,
            stale: 0,
        }
    }

    /// Admits FRESH proofs from here on, `wall_ms` being the wall clock now (see
    /// [`Seen::start`]).
    pub fn start_fresh(&mut self, wall_ms: i64) {
        self.seen.start(wall_ms);
    }

    /// Whether `from`'s proofs are read at all (it has not failed too often lately):
    /// asked before a FRESH proof's tag is checked.
    pub fn open(&mut self, from: u32, now_ms: i64) -> Result<(), Refusal> {
        if self.limiters.open(from, now_ms) {
            return Ok(());
        }
        self.limited += 1;
        Err(Refusal::Limited)
    }

    /// A FRESH proof from `from`, its tag good, with nonce `nonce_i` and made at
    /// `at_ms`, arrives at `wall_ms`: whether it is admitted (see [`Seen::admit`]);
    /// when not, the caller answers it with a challenge.
    pub fn fresh(&mut self, from: u32, nonce_i: &[u8; NONCE_LEN], at_ms: i64, wall_ms: i64) -> bool {
        let ok = self.seen.admit(from, nonce_i, at_ms, wall_ms);
        if ok {
            self.fresh += 1;
        } else {
            self.stale += 1;
        }
        ok
    }

    /// A hello from `from`: `nonce` is issued to it as its challenge.
    pub fn challenge(&mut self, from: u32, nonce: [u8; NONCE_LEN], now_ms: i64) {
        self.challenges.issue(from, nonce, now_ms);
    }

    /// A proof from `from` answering challenge `nonce`: spends it. The caller checks
    /// the tag next (and reports a wrong one with [`bad_tag`](Self::bad_tag)).
    pub fn redeem(&mut self, from: u32, nonce: &[u8; NONCE_LEN], now_ms: i64) -> Result<(), Refusal> {
        self.open(from, now_ms)?;
        if !self.challenges.redeem(from, nonce, now_ms) {
            self.bad_tag(from, now_ms);
            return Err(Refusal::Refused);
        }
        Ok(())
    }

    /// A redeemed proof from `from` had a wrong tag.
    pub fn bad_tag(&mut self, from: u32, now_ms: i64) {
        self.refused += 1;
        self.limiters.failed(from, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u32 = 0xc000_020a;
    const B: u32 = 0xc000_020b;

    fn nonce(n: u8) -> [u8; NONCE_LEN] {
        [n; NONCE_LEN]
    }

    #[test]
    fn a_challenge_is_redeemed_once_by_its_address_in_time() {
        let mut c = Challenges::<8>::new();
        c.issue(A, nonce(1), 100);
        assert!(!c.redeem(B, &nonce(1), 200), "another address");
        assert!(!c.redeem(A, &nonce(2), 200), "another nonce");
        assert!(c.redeem(A, &nonce(1), 200));
        assert!(!c.redeem(A, &nonce(1), 300), "spent");
        c.issue(A, nonce(3), 1000);
        assert!(!c.redeem(A, &nonce(3), 1000 + CHALLENGE_MS), "expired");
        assert_eq!(c.outstanding(1000), 0);
    }

    #[test]
    fn hellos_never_lock_a_member_out() {
        let mut c = Challenges::<6>::new();
        for i in 0..PER_SOURCE as u8 {
            c.issue(A, nonce(i), i as i64);
        }
        // A fifth for A takes the place of A's oldest.
        c.issue(A, nonce(9), 10);
        assert!(!c.redeem(A, &nonce(0), 11));
        assert!(c.redeem(A, &nonce(1), 11));
        // A flood from other addresses takes the oldest places, never refuses: a
        // member's challenge lives as long as fewer than N others come after it.
        c.issue(B, nonce(20), 20);
        for i in 0..5u8 {
            c.issue(0x0a00_0000 + i as u32, nonce(30 + i), 30 + i as i64);
        }
        assert!(c.redeem(B, &nonce(20), 40), "5 others after it, 6 places");
        for i in 0..6u8 {
            c.issue(0x0a00_0000 + i as u32, nonce(40 + i), 40 + i as i64);
        }
        assert_eq!(c.outstanding(50), 6, "bounded");
        // Expired entries make room before live ones go.
        c.issue(B, nonce(21), 60 + CHALLENGE_MS);
        assert_eq!(c.outstanding(60 + CHALLENGE_MS), 1);
    }

    #[test]
    fn the_limiter_takes_a_burst_then_a_rate() {
        let mut l = Limiter::new();
        for _ in 0..BURST {
            assert!(l.open(0));
            l.failed(0);
        }
        assert!(!l.open(0));
        assert!(!l.open(100), "one token takes 125 ms");
        assert!(l.open(125));
        l.failed(125);
        assert!(!l.open(200));
        // A second refills PER_SECOND tokens, never more than BURST.
        assert!(l.open(1125));
        let mut n = 0;
        while l.open(1125) {
            l.failed(1125);
            n += 1;
        }
        assert_eq!(n, PER_SECOND);
        let mut full = Limiter::new();
        assert!(full.open(i64::MAX / 2));
        full.failed(10);
        assert!(full.open(0), "a clock that went back");
    }

    #[test]
    fn the_gate_limits_the_address_that_fails() {
        let mut g = Gate::<64>::new();
        for i in 0..BURST {
            assert_eq!(g.redeem(A, &nonce(i as u8), 0), Err(Refusal::Refused));
        }
        assert_eq!(g.refused, BURST as u64);
        // A is refused unread now, even with a good challenge; B is not held up.
        g.challenge(A, nonce(7), 0);
        assert_eq!(g.redeem(A, &nonce(7), 0), Err(Refusal::Limited));
        assert_eq!(g.limited, 1);
        g.challenge(B, nonce(8), 0);
        assert_eq!(g.redeem(B, &nonce(8), 0), Ok(()));
        // A second later A may try again.
        g.challenge(A, nonce(9), 1000);
        assert_eq!(g.redeem(A, &nonce(9), 1000), Ok(()));
        g.bad_tag(A, 1000);
        assert_eq!(g.refused, BURST as u64 + 1);
    }

    #[test]
    fn limiters_forget_the_address_that_failed_longest_ago() {
        let mut l = Limiters::<2>::new();
        for _ in 0..BURST {
            l.failed(A, 0);
        }
        assert!(!l.open(A, 0));
        l.failed(B, 1);
        l.failed(0x0a00_0001, 2);
        // A's place went to the third address: A starts full again.
        assert!(l.open(A, 3));
        assert!(l.open(B, 3));
    }

    #[test]
    fn bytes_compare_whole() {
        assert!(same_bytes(b"abcd", b"abcd"));
        assert!(!same_bytes(b"abcd", b"abce"));
        assert!(!same_bytes(b"abc", b"abcd"));
    }

    /// A FRESH proof is admitted once, in time, and never when older than the gate or
    /// than a proof it forgot; a flood of good proofs forgets the oldest, never admits
    /// a replay.
    #[test]
    fn fresh_proofs_are_admitted_once_and_in_time() {
        let mut g = Gate::<4>::new();
        assert!(!g.fresh(A, &nonce(1), 1_000, 1_000), "not started: none admitted");
        g.start_fresh(1_000);
        // An earlier gate may have admitted proofs up to FRESH_MS ahead of its clock.
        let t = 1_000 + FRESH_MS;
        assert!(!g.fresh(A, &nonce(1), t, t), "no later than an earlier gate's could be");
        assert!(g.fresh(A, &nonce(1), t + 1, t + 2));
        assert!(!g.fresh(A, &nonce(1), t + 1, t + 3), "replayed");
        assert!(g.fresh(B, &nonce(1), t + 1, t + 3), "another dialer's nonce");
        assert!(!g.fresh(A, &nonce(2), t + 2 + FRESH_MS + 1, t + 2), "ahead of our clock");
        assert!(!g.fresh(A, &nonce(2), t + 2, t + 3 + FRESH_MS), "late");
        assert!(g.fresh(A, &nonce(2), t + 2 + FRESH_MS, t + 2), "ahead, within the window");
        assert_eq!((g.fresh, g.stale), (3, 5));
        // Out of time, it is forgotten; the clock going back cannot bring it back.
        let later = t + 1 + 3 * FRESH_MS;
        assert!(g.fresh(A, &nonce(3), later, later));
        assert!(!g.fresh(A, &nonce(1), t + 1, t + 1), "the clock went back: refused by its time");
        // A flood of good proofs: the oldest are forgotten, and refused if replayed.
        let mut s = Seen::<SEEN>::new();
        s.start(0);
        let t = FRESH_MS + 10;
        for i in 0..(SEEN as i64 + 4) {
            assert!(s.admit(A, &[i as u8; NONCE_LEN], t + i, t + 100));
        }
        for i in 0..4 {
            assert!(!s.admit(A, &[i as u8; NONCE_LEN], t + i, t + 100), "forgotten, refused");
        }
        assert!(!s.admit(A, &[40; NONCE_LEN], t + 3, t + 100), "as old as one forgotten");
        assert!(s.admit(A, &[41; NONCE_LEN], t + 200, t + 200));
    }
}
