//! Shares: how much of a device's tables one user's rings may hold at once.
//!
//! A device's tables (links, waiting receives, exports, listens) serve every user of
//! the node; without a bound one user fills them and every other user's CONNECT,
//! RECV, REG_MR with remote rights or LISTEN fails. So each is also counted per user,
//! as the kernel counts epoll watches or inotify instances per user, and a request
//! past the user's share fails `Quota` (its own limit, named as such: never another
//! user's failure). The shares are module parameters; the counts live in the kernel
//! per device and user (atomics: the data path takes no lock for them), reached
//! through [`Fabric::take_share`](super::fabric::Fabric::take_share).
//!
//! A user is its slot in the module's user table ([`Creds::user`]), held while it
//! holds a ring; a uid range of one user namespace is one user, its owner (the kernel
//! maps it so).
//!
//! What completions give back (a receive that completed) is given back by the ring at
//! its next call that reaches the device ([`Ring::settle_shares`]), so the routing of
//! completions, which reaches no device state, stays as it is.
//!
//! [`Creds::user`]: super::ports::Creds::user
//! [`Ring::settle_shares`]: super::ring_state::Ring::settle_shares

/// A table counted per user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Virtual QPs (each holds a link, and a port, at most).
    Vqps = 0,
    /// Receives posted and not completed.
    Recvs = 1,
    /// Exports (MRs registered with remote rights).
    Exports = 2,
    /// Listens.
    Listens = 3,
}

/// How many kinds of share there are.
pub const SHARES: usize = 4;

impl Share {
    /// Every kind, in index order.
    pub const ALL: [Share; SHARES] = [Share::Vqps, Share::Recvs, Share::Exports, Share::Listens];

    /// Its name, as the `users` file and module parameters say it (`max_NAME_per_user`).
    pub const fn name(self) -> &'static str {
        match self {
            Share::Vqps => "vqps",
            Share::Recvs => "recvs",
            Share::Exports => "exports",
            Share::Listens => "listens",
        }
    }
}

impl Share {
    /// The limit one user gets of this share when the module asks `param` and a links
    /// shard holds `recvs_per_shard` receives: of receives, at most half a shard, since
    /// a receive waits in its link's shard and one user must never fill a shard other
    /// users' links are in (a device's shards hold many times that).
    pub const fn limit(self, param: u32, recvs_per_shard: u32) -> u32 {
        match self {
            Share::Recvs if param > recvs_per_shard / 2 => recvs_per_shard / 2,
            _ => param,
        }
    }
}

/// The rule for taking one more of a share held `n` times under `limit`: the new
/// count, or `None` at the limit (the kernel applies it to its atomics).
pub const fn one_more(n: u32, limit: u32) -> Option<u32> {
    if n >= limit {
        None
    } else {
        Some(n + 1)
    }
}

/// One user's counts on a device, and the rule for taking one more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts(pub [u32; SHARES]);

impl Counts {
    /// Takes one `s` under `limit`: `false` (nothing taken) at the limit.
    pub fn take(&mut self, s: Share, limit: u32) -> bool {
        let n = &mut self.0[s as usize];
        match one_more(*n, limit) {
            Some(m) => *n = m,
            None => return false,
        }
        true
    }

    /// Gives `n` of `s` back.
    pub fn give(&mut self, s: Share, n: u32) {
        let c = &mut self.0[s as usize];
        debug_assert!(*c >= n, "gave back more {} than taken", s.name());
        *c = c.saturating_sub(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_are_at_most_half_a_shard() {
        assert_eq!(Share::Recvs.limit(5000, 2048), 1024);
        assert_eq!(Share::Recvs.limit(100, 2048), 100);
        assert_eq!(Share::Vqps.limit(5000, 2048), 5000);
    }

    #[test]
    fn a_share_stops_at_its_limit_and_comes_back() {
        let mut c = Counts::default();
        assert!(c.take(Share::Recvs, 2) && c.take(Share::Recvs, 2));
        assert!(!c.take(Share::Recvs, 2), "at the limit");
        assert!(c.take(Share::Vqps, 1), "each kind on its own");
        c.give(Share::Recvs, 2);
        assert!(c.take(Share::Recvs, 2));
        assert_eq!(c.0, [1, 1, 0, 0]);
    }
}
