//! Per-user limits: how many rings and SQ polling threads one user may hold at once.
//!
//! `/dev/krcore` is opened by ordinary users, and each ring costs kernel memory (its
//! areas are charged to the caller's memory cgroup as well) and each SQ polling thread a
//! kernel thread that may spin. So the module counts both per account (a user, or a
//! container's namespace: see `identity`) and refuses past its limits with `EDQUOT`, as
//! the kernel's key quotas do. The table is fixed-size and allocation-free; an account
//! is forgotten once it holds nothing.

use super::errno::Errno;
use super::identity::Account;

/// What a user may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Rings (set-up files).
    pub rings: u32,
    /// SQ polling threads.
    pub pollers: u32,
}

/// A resource charged to a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    /// A ring.
    Ring,
    /// An SQ polling thread.
    Poller,
}

#[derive(Clone, Copy, Debug)]
struct Usage {
    account: Account,
    rings: u32,
    pollers: u32,
}

impl Default for Usage {
    fn default() -> Self {
        Usage {
            account: Account::User(0),
            rings: 0,
            pollers: 0,
        }
    }
}

impl Usage {
    fn idle(&self) -> bool {
        self.rings == 0 && self.pollers == 0
    }

    fn count(&mut self, r: Resource) -> &mut u32 {
        match r {
            Resource::Ring => &mut self.rings,
            Resource::Poller => &mut self.pollers,
        }
    }
}

/// Usage of up to `N` accounts holding something at once.
pub struct UserTable<const N: usize> {
    users: [Usage; N],
}

impl<const N: usize> Default for UserTable<N> {
    fn default() -> Self {
        UserTable {
            users: [Usage::default(); N],
        }
    }
}

impl<const N: usize> UserTable<N> {
    /// Charges one `r` to `account` under `limits`: `EDQUOT` past its limit, `EUSERS`
    /// when `N` other accounts already hold something. Returns the account's slot, the
    /// same while it holds anything (what its shares of a device are counted under).
    pub fn charge(
        &mut self,
        account: Account,
        r: Resource,
        limits: Limits,
    ) -> Result<usize, Errno> {
        let limit = match r {
            Resource::Ring => limits.rings,
            Resource::Poller => limits.pollers,
        };
        let i = match self
            .users
            .iter()
            .position(|u| !u.idle() && u.account == account)
        {
            Some(i) => i,
            None => {
                let i = self
                    .users
                    .iter()
                    .position(Usage::idle)
                    .ok_or(Errno::EUSERS)?;
                self.users[i] = Usage {
                    account,
                    ..Usage::default()
                };
                i
            }
        };
        let n = self.users[i].count(r);
        if *n >= limit {
            return Err(Errno::EDQUOT);
        }
        *n += 1;
        Ok(i)
    }

    /// Returns one `r` charged to `account`.
    pub fn uncharge(&mut self, account: Account, r: Resource) {
        if let Some(u) = self
            .users
            .iter_mut()
            .find(|u| !u.idle() && u.account == account)
        {
            let n = u.count(r);
            debug_assert!(*n > 0, "uncharged more than charged");
            *n = n.saturating_sub(1);
        }
    }

    /// What `account` holds: (rings, pollers).
    pub fn usage(&self, account: Account) -> (u32, u32) {
        self.users
            .iter()
            .find(|u| !u.idle() && u.account == account)
            .map_or((0, 0), |u| (u.rings, u.pollers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Account::User as U;

    const L: Limits = Limits {
        rings: 2,
        pollers: 1,
    };

    #[test]
    fn limits_are_per_user_and_released() {
        let mut t = UserTable::<2>::default();
        assert_eq!(t.charge(U(1000), Resource::Ring, L), Ok(0));
        t.charge(U(1000), Resource::Ring, L).unwrap();
        assert_eq!(t.charge(U(1000), Resource::Ring, L), Err(Errno::EDQUOT));
        t.charge(U(1000), Resource::Poller, L).unwrap();
        assert_eq!(t.charge(U(1000), Resource::Poller, L), Err(Errno::EDQUOT));
        t.charge(U(0), Resource::Ring, L).unwrap();
        assert_eq!(
            t.charge(U(7), Resource::Ring, L),
            Err(Errno::EUSERS),
            "table full"
        );
        t.uncharge(U(1000), Resource::Ring);
        t.charge(U(1000), Resource::Ring, L).unwrap();
        for r in [Resource::Ring, Resource::Ring, Resource::Poller] {
            t.uncharge(U(1000), r);
        }
        assert_eq!(t.usage(U(1000)), (0, 0));
        t.charge(U(7), Resource::Ring, L).unwrap();
        assert_eq!(t.usage(U(7)), (1, 0), "an idle user's slot is reused");
        assert_eq!(t.usage(U(0)), (1, 0));
    }

    #[test]
    fn a_namespace_is_one_account_beside_the_uid_of_the_same_number() {
        let mut t = UserTable::<4>::default();
        let ns = Account::Namespace(1000);
        assert_eq!(t.charge(ns, Resource::Ring, L), Ok(0));
        assert_eq!(
            t.charge(U(1000), Resource::Ring, L),
            Ok(1),
            "uid 1000 is not it"
        );
        t.charge(ns, Resource::Ring, L).unwrap();
        assert_eq!(t.charge(ns, Resource::Ring, L), Err(Errno::EDQUOT));
        assert_eq!(t.usage(ns), (2, 0));
    }
}
