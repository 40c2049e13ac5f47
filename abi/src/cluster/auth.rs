//! How a node's kernel admits another kernel: by proof that it holds the cluster key,
//! never by the key itself, which no request carries.
//!
//! A dial is two connection requests to the peer's listener:
//!
//! 1. A hello with the dialer's nonce. The listener answers with a challenge and
//!    refuses the request: a nonce it keeps nothing of, its [`Gate`]'s stateless
//!    cookie (when it was issued, and a SipHash under the gate's own random secret over
//!    that time and the address it was issued to).
//! 2. A hello with both nonces and the dialer's tag: a MAC with the cluster key over
//!    both nonces and the connection (both addresses and ports, the dialer's QP number,
//!    the kind and index asked for). The listener checks the tag first; a good one's
//!    challenge is then redeemed: a cookie this gate issued to that address, less than
//!    [`CHALLENGE_MS`] ago, not redeemed before (a good proof's cookie is remembered
//!    until it expires, [`SPENT`] at most). Then the listener accepts with its own tag
//!    over the same and its QP number, which the dialer checks before it uses the
//!    connection.
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
//! crypto API, cut to [`TAG_LEN`]) is the module's (kmod/cluster/cm_auth.c); what is
//! admitted is decided here.
//!
//! What a stranger's requests cost a member: nothing. The address a request comes from
//! is only what its sender wrote (RoCE carries it in a UDP packet anyone on the segment
//! can forge), so nothing is charged to it and nothing of a member's is kept where a
//! stranger's requests could take its place. Challenges are stateless: no table a flood
//! of hellos could fill or evict a member's challenge from. Only good proofs are
//! remembered, and only a member can make one. Every proof's tag is checked; a bad one
//! is counted and refused, and is all it costs (one HMAC beside the connection request
//! the kernel's CM already handled).

/// Bytes of a nonce (each side's).
pub const NONCE_LEN: usize = 16;
/// Bytes of a tag: HMAC-SHA256 cut to 128 bits (as RFC 4868's HMAC-SHA-256-128).
pub const TAG_LEN: usize = 16;
/// How long an issued challenge can be redeemed, ms.
pub const CHALLENGE_MS: i64 = 5_000;
/// Challenges redeemed by good proofs that a gate remembers while they could still be
/// in time: when more come within [`CHALLENGE_MS`] (only members make them), the oldest
/// is forgotten and every challenge issued as early is refused from then on (its
/// dialer asks again).
pub const SPENT: usize = 64;
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
        Self::from_floor(i64::MAX)
    }

    /// Admits what was made after `floor_ms` (and is in time).
    pub const fn from_floor(floor_ms: i64) -> Self {
        Seen {
            slots: [None; N],
            floor_ms,
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

/// Why a gate refused a proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a challenge this gate issued to that address, or one issued
    /// [`CHALLENGE_MS`] ago or more.
    Refused,
    /// A challenge a good proof redeemed before (a replay), or issued no later than
    /// one the gate forgot.
    Replayed,
}

/// What a listener does with a connection request's proof ([`Gate::judge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted: the connection is accepted.
    Admit,
    /// A member's FRESH proof out of time, older than the gate, or replayed: answered
    /// with a challenge.
    Challenge,
    /// Refused: a wrong tag, a challenge not this gate's for that address, expired or
    /// spent, or a proof made out to another node.
    Refuse,
}

/// Bytes of a challenge: when it was issued (the listener's coarse clock, ms,
/// little-endian), then the SipHash of the address it was issued to and that time.
const COOKIE_AT: usize = 8;

/// A device's gate for peer kernels' requests: the secret of its challenges, the
/// challenges and FRESH proofs good proofs used, and what it refused.
pub struct Gate {
    /// The challenges' SipHash key: random, the gate's own.
    secret: [u64; 2],
    spent: Seen<SPENT>,
    seen: Seen<SEEN>,
    /// Proofs refused: a wrong tag, or a challenge not issued to that address or
    /// expired.
    pub refused: u64,
    /// Good proofs refused as replays: their challenge redeemed before.
    pub replayed: u64,
    /// FRESH proofs admitted (a dial in one request).
    pub fresh: u64,
    /// FRESH proofs with a good tag answered by a challenge instead: out of time (the
    /// clocks apart), older than the gate, or replayed.
    pub stale: u64,
}

impl Gate {
    /// A gate whose challenges are keyed by `secret` (random: from the kernel's
    /// CSPRNG), issued from `now_ms` on.
    pub const fn new(secret: [u64; 2], now_ms: i64) -> Self {
        Gate {
            secret,
            spent: Seen::from_floor(now_ms.saturating_sub(1)),
            seen: Seen::new(),
            refused: 0,
            replayed: 0,
            fresh: 0,
            stale: 0,
        }
    }

    /// Admits FRESH proofs from here on, `wall_ms` being the wall clock now (see
    /// [`Seen::start`]).
    pub fn start_fresh(&mut self, wall_ms: i64) {
        self.seen.start(wall_ms);
    }

    /// A FRESH proof from `from`, its tag good, with nonce `nonce_i` and made at
    /// `at_ms`, arrives at `wall_ms`: whether it is admitted (see [`Seen::admit`]);
    /// when not, the caller answers it with a challenge.
    pub fn fresh(
        &mut self,
        from: u32,
        nonce_i: &[u8; NONCE_LEN],
        at_ms: i64,
        wall_ms: i64,
    ) -> bool {
        let ok = self.seen.admit(from, nonce_i, at_ms, wall_ms);
        if ok {
            self.fresh += 1;
        } else {
            self.stale += 1;
        }
        ok
    }

    fn cookie(&self, from: u32, at_ms: i64) -> [u8; NONCE_LEN] {
        let mut msg = [0u8; 12];
        msg[..4].copy_from_slice(&from.to_le_bytes());
        msg[4..].copy_from_slice(&at_ms.to_le_bytes());
        let mut c = [0u8; NONCE_LEN];
        c[..COOKIE_AT].copy_from_slice(&at_ms.to_le_bytes());
        c[COOKIE_AT..].copy_from_slice(
            &super::super::meta::siphash::siphash24(self.secret, &msg).to_le_bytes(),
        );
        c
    }

    /// A hello from `from` at `now_ms`: the challenge to answer it with. Nothing is
    /// kept.
    pub fn challenge(&self, from: u32, now_ms: i64) -> [u8; NONCE_LEN] {
        self.cookie(from, now_ms)
    }

    /// A proof from `from`, its tag good, answering challenge `nonce`, arrives at
    /// `now_ms`: admitted (the challenge spent), or why not.
    pub fn redeem(
        &mut self,
        from: u32,
        nonce: &[u8; NONCE_LEN],
        now_ms: i64,
    ) -> Result<(), Refusal> {
        let at = i64::from_le_bytes(nonce[..COOKIE_AT].try_into().expect("8 bytes"));
        // Saturating: `at` is the peer's bytes (a wrap would panic under overflow checks).
        let in_time = at <= now_ms && now_ms.saturating_sub(at) < CHALLENGE_MS;
        if !in_time || !same_bytes(&self.cookie(from, at), nonce) {
            self.refused += 1;
            return Err(Refusal::Refused);
        }
        if !self.spent.admit(from, nonce, at, now_ms) {
            self.replayed += 1;
            return Err(Refusal::Replayed);
        }
        Ok(())
    }

    /// A proof had a wrong tag.
    pub fn bad_tag(&mut self) {
        self.refused += 1;
    }

    /// A proof from `from` to `to` (IPv4 addresses, network order): a FRESH one
    /// (`fresh`) or one answering challenge `nonce_r`, `tag_good` when its tag is the
    /// cluster key's (the module's HMAC), at a device whose own IPv4 address is `own`
    /// (none before its pool is built), at `now_ms` (coarse clock) and `wall_ms`. The
    /// tag decides first: a wrong one costs nothing but its count, whatever address it
    /// claims. A good PROVE's challenge is then redeemed; a good FRESH proof must be
    /// made out to `own`, and is admitted by its time (its dialer's nonce `nonce_i`).
    #[allow(clippy::too_many_arguments)]
    pub fn judge(
        &mut self,
        fresh: bool,
        tag_good: bool,
        from: u32,
        to: u32,
        own: Option<u32>,
        nonce_i: &[u8; NONCE_LEN],
        nonce_r: &[u8; NONCE_LEN],
        now_ms: i64,
        wall_ms: i64,
    ) -> Verdict {
        if !tag_good {
            self.bad_tag();
            return Verdict::Refuse;
        }
        if !fresh {
            return match self.redeem(from, nonce_r, now_ms) {
                Ok(()) => Verdict::Admit,
                Err(_) => Verdict::Refuse,
            };
        }
        // A proof sniffed on its way to another node, replayed here (its tag names that
        // node), never reaches the gate's memory.
        let Some(at) = own
            .filter(|&o| o == to)
            .and(super::hello::fresh_time(nonce_r))
        else {
            return Verdict::Refuse;
        };
        match self.fresh(from, nonce_i, at, wall_ms) {
            true => Verdict::Admit,
            false => Verdict::Challenge,
        }
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

    const SECRET: [u64; 2] = [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210];

    #[test]
    fn a_challenge_is_redeemed_once_by_its_address_in_time() {
        let mut g = Gate::new(SECRET, 100);
        let c = g.challenge(A, 100);
        assert_eq!(
            g.redeem(B, &c, 200),
            Err(Refusal::Refused),
            "another address"
        );
        let mut other = c;
        other[15] ^= 1;
        assert_eq!(
            g.redeem(A, &other, 200),
            Err(Refusal::Refused),
            "another nonce"
        );
        assert_eq!(g.redeem(A, &c, 200), Ok(()));
        assert_eq!(g.redeem(A, &c, 300), Err(Refusal::Replayed), "spent");
        let c = g.challenge(A, 1000);
        assert_eq!(
            g.redeem(A, &c, 1000 + CHALLENGE_MS),
            Err(Refusal::Refused),
            "expired"
        );
        assert_eq!(
            g.redeem(A, &c, 999),
            Err(Refusal::Refused),
            "from the future"
        );
        assert_eq!((g.refused, g.replayed), (4, 1));
    }

    /// A proof's challenge time is the peer's bytes: the earliest time there is is
    /// refused like any other stale one (its age once overflowed, a kernel panic under
    /// overflow checks).
    #[test]
    fn a_challenge_from_the_dawn_of_time_is_refused_without_overflow() {
        let mut g = Gate::new(SECRET, 100);
        for at in [i64::MIN, i64::MIN + 1, -CHALLENGE_MS] {
            let mut c = g.challenge(A, 100);
            c[..COOKIE_AT].copy_from_slice(&at.to_le_bytes());
            assert_eq!(g.redeem(A, &c, i64::MAX), Err(Refusal::Refused), "{at}");
        }
    }

    #[test]
    fn challenges_are_the_gates_own() {
        let (g, h) = (Gate::new(SECRET, 0), Gate::new([1, 2], 0));
        assert_ne!(g.challenge(A, 5), h.challenge(A, 5), "another secret");
        assert_ne!(g.challenge(A, 5), g.challenge(B, 5), "another address");
        assert_ne!(g.challenge(A, 5), g.challenge(A, 6), "another time");
        // A challenge of another gate, or one moved to another time, is refused.
        let mut g = Gate::new(SECRET, 0);
        assert_eq!(g.redeem(A, &h.challenge(A, 5), 10), Err(Refusal::Refused));
        let mut moved = g.challenge(A, 5);
        moved[0] = 6;
        assert_eq!(g.redeem(A, &moved, 10), Err(Refusal::Refused));
        // A gate made again (the module reloaded) with a new secret: the old one's
        // challenges are refused; its clock's earlier challenges too.
        let c = g.challenge(A, 5);
        let mut again = Gate::new([3, 4], 5);
        assert_eq!(again.redeem(A, &c, 10), Err(Refusal::Refused));
        let mut same = Gate::new(SECRET, 6);
        assert_eq!(
            same.redeem(A, &c, 10),
            Err(Refusal::Replayed),
            "issued before the gate"
        );
    }

    /// A stranger writing a member's address into its requests: bad proofs, challenges
    /// that are not this gate's, as many as it likes, cost the member nothing.
    #[test]
    fn a_stranger_claiming_a_members_address_costs_it_nothing() {
        let mut g = Gate::new(SECRET, 0);
        let c = g.challenge(A, 10);
        for i in 0..100_000u32 {
            g.bad_tag();
            let mut bogus = [0u8; NONCE_LEN];
            bogus[..4].copy_from_slice(&i.to_le_bytes());
            assert!(g.redeem(A, &bogus, 20).is_err());
        }
        assert_eq!(
            g.redeem(A, &c, 20),
            Ok(()),
            "the member's proof, read and admitted"
        );
        assert_eq!(g.refused, 200_000);
    }

    /// A flood of hellos from made-up addresses evicts no member's challenge: nothing is
    /// kept of a hello.
    #[test]
    fn a_flood_of_hellos_evicts_no_challenge() {
        let mut g = Gate::new(SECRET, 0);
        let c = g.challenge(A, 10);
        for i in 0..100_000u32 {
            let _ = g.challenge(0x0a00_0000 + i, 11);
        }
        assert_eq!(g.redeem(A, &c, 12), Ok(()));
    }

    /// Good proofs fill the spent table: the oldest is forgotten, and every challenge
    /// issued as early is refused from then on, never admitted twice.
    #[test]
    fn good_proofs_forget_the_oldest_spent_never_admit_twice() {
        let mut g = Gate::new(SECRET, 0);
        let cs: [_; SPENT + 2] = core::array::from_fn(|i| g.challenge(A, 10 + i as i64));
        for c in &cs {
            assert_eq!(g.redeem(A, c, 100), Ok(()));
        }
        for c in &cs {
            assert!(g.redeem(A, c, 101).is_err(), "admitted twice");
        }
        // Issued as early as the oldest forgotten: refused; later ones are admitted.
        assert_eq!(
            g.redeem(B, &g.challenge(B, 11), 102),
            Err(Refusal::Replayed)
        );
        assert_eq!(g.redeem(B, &g.challenge(B, 100), 102), Ok(()));
    }

    /// A proof is judged by its tag first: a wrong one is refused and spends nothing,
    /// a good PROVE redeems its challenge once, a good FRESH one must name this node.
    #[test]
    fn a_proof_is_judged_by_its_tag_first() {
        let mut g = Gate::new(SECRET, 0);
        g.start_fresh(1_000);
        let own = Some(B);
        let c = g.challenge(A, 10);
        let judge = |g: &mut Gate, fresh, good, to, n: &[u8; NONCE_LEN], wall| {
            g.judge(fresh, good, A, to, own, &nonce(7), n, 20, wall)
        };
        assert_eq!(
            judge(&mut g, false, false, B, &c, 0),
            Verdict::Refuse,
            "wrong tag"
        );
        assert_eq!(
            judge(&mut g, false, true, B, &c, 0),
            Verdict::Admit,
            "a wrong tag spent nothing"
        );
        assert_eq!(
            judge(&mut g, false, true, B, &c, 0),
            Verdict::Refuse,
            "spent"
        );
        let t = 1_000 + FRESH_MS + 10;
        let at = super::super::hello::fresh_nonce(t as u64);
        assert_eq!(
            judge(&mut g, true, true, A, &at, t),
            Verdict::Refuse,
            "made out to another node"
        );
        assert_eq!(
            g.judge(true, true, A, B, None, &nonce(7), &at, 20, t),
            Verdict::Refuse,
            "no pool yet"
        );
        assert_eq!(
            judge(&mut g, true, false, B, &at, t),
            Verdict::Refuse,
            "wrong tag"
        );
        assert_eq!(judge(&mut g, true, true, B, &at, t), Verdict::Admit);
        assert_eq!(
            judge(&mut g, true, true, B, &at, t),
            Verdict::Challenge,
            "replayed"
        );
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
        let mut g = Gate::new(SECRET, 0);
        assert!(
            !g.fresh(A, &nonce(1), 1_000, 1_000),
            "not started: none admitted"
        );
        g.start_fresh(1_000);
        // An earlier gate may have admitted proofs up to FRESH_MS ahead of its clock.
        let t = 1_000 + FRESH_MS;
        assert!(
            !g.fresh(A, &nonce(1), t, t),
            "no later than an earlier gate's could be"
        );
        assert!(g.fresh(A, &nonce(1), t + 1, t + 2));
        assert!(!g.fresh(A, &nonce(1), t + 1, t + 3), "replayed");
        assert!(
            g.fresh(B, &nonce(1), t + 1, t + 3),
            "another dialer's nonce"
        );
        assert!(
            !g.fresh(A, &nonce(2), t + 2 + FRESH_MS + 1, t + 2),
            "ahead of our clock"
        );
        assert!(!g.fresh(A, &nonce(2), t + 2, t + 3 + FRESH_MS), "late");
        assert!(
            g.fresh(A, &nonce(2), t + 2 + FRESH_MS, t + 2),
            "ahead, within the window"
        );
        assert_eq!((g.fresh, g.stale), (3, 5));
        // Out of time, it is forgotten; the clock going back cannot bring it back.
        let later = t + 1 + 3 * FRESH_MS;
        assert!(g.fresh(A, &nonce(3), later, later));
        assert!(
            !g.fresh(A, &nonce(1), t + 1, t + 1),
            "the clock went back: refused by its time"
        );
        // A flood of good proofs: the oldest are forgotten, and refused if replayed.
        let mut s = Seen::<SEEN>::new();
        s.start(0);
        let t = FRESH_MS + 10;
        for i in 0..(SEEN as i64 + 4) {
            assert!(s.admit(A, &[i as u8; NONCE_LEN], t + i, t + 100));
        }
        for i in 0..4 {
            assert!(
                !s.admit(A, &[i as u8; NONCE_LEN], t + i, t + 100),
                "forgotten, refused"
            );
        }
        assert!(
            !s.admit(A, &[40; NONCE_LEN], t + 3, t + 100),
            "as old as one forgotten"
        );
        assert!(s.admit(A, &[41; NONCE_LEN], t + 200, t + 200));
    }
}
