//! Who a caller is: from what the kernel says of its credentials ([`Facts`]), the uid,
//! gid and groups its permissions are judged by (ports, names' owners and modes), and
//! the account its quotas and shares are counted in ([`Account`]).
//!
//! - In the initial user namespace a task is its uid: its own account.
//! - In a namespace an unprivileged user made (`unshare --map-users`, a rootless
//!   container), every uid is that user: its permissions and its account. A uid range
//!   mapped in there from a subordinate range is no user of its own, or one person
//!   could be many.
//! - In a namespace root made (a container's), each uid keeps its own permissions
//!   (merging them would make every container user the same user, for ports and names
//!   alike), but the namespace is one account: its uids together get one user's share
//!   of each table, so four uids of one container cannot fill a device for everyone.
//!
//! The namespace that counts is the outermost below the initial one: a namespace nested
//! in a container is still the container's.

/// What the kernel says of the current task's credentials, every id as the initial
/// user namespace sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// The outermost user namespace below the initial one that it is in, if any.
    pub ns: Option<Namespace>,
}

/// A user namespace, as [`Facts`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Namespace {
    /// The uid that made it.
    pub owner: u32,
    /// The gid it was made with.
    pub group: u32,
    /// Its inode number (unique among the namespaces alive).
    pub id: u32,
}

/// What quotas and shares are counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Account {
    /// A user of the initial namespace (or of a namespace it made).
    User(u32),
    /// A namespace root made: all its uids together.
    Namespace(u32),
}

/// Who the caller is, as krcore judges and counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The uid its permissions are judged by (a port's holder, a name's owner).
    pub uid: u32,
    /// The gid a name's group rights are judged by.
    pub gid: u32,
    /// Whether its supplementary groups count (none do in a namespace an unprivileged
    /// user made: groups mapped in there are no real groups).
    pub groups: bool,
    /// What it is counted in.
    pub account: Account,
}

/// The caller that `f` describes.
pub const fn identify(f: &Facts) -> Identity {
    match f.ns {
        Some(ns) if ns.owner != 0 => Identity {
            uid: ns.owner,
            gid: ns.group,
            groups: false,
            account: Account::User(ns.owner),
        },
        Some(ns) => Identity {
            uid: f.uid,
            gid: f.gid,
            groups: true,
            account: Account::Namespace(ns.id),
        },
        None => Identity {
            uid: f.uid,
            gid: f.gid,
            groups: true,
            account: Account::User(f.uid),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_its_uid_and_a_rootless_namespace_its_owner() {
        let plain = identify(&Facts {
            uid: 1000,
            gid: 1000,
            ns: None,
        });
        assert_eq!((plain.uid, plain.account), (1000, Account::User(1000)));
        let ns = Some(Namespace {
            owner: 1000,
            group: 1000,
            id: 7,
        });
        let rootless = identify(&Facts {
            uid: 100_007,
            gid: 100_007,
            ns,
        });
        assert_eq!(
            rootless,
            Identity {
                uid: 1000,
                gid: 1000,
                groups: false,
                account: Account::User(1000)
            }
        );
    }

    #[test]
    fn a_containers_uids_keep_their_rights_and_share_one_account() {
        let made = Namespace {
            owner: 0,
            group: 0,
            id: 9,
        };
        let ns = Some(made);
        let a = identify(&Facts {
            uid: 200_001,
            gid: 200_001,
            ns,
        });
        let b = identify(&Facts {
            uid: 200_002,
            gid: 200_002,
            ns,
        });
        assert_eq!((a.uid, b.uid), (200_001, 200_002), "each its own rights");
        assert_eq!(
            (a.account, b.account),
            (Account::Namespace(9), Account::Namespace(9))
        );
        assert!(a.groups);
        let other = identify(&Facts {
            uid: 200_001,
            gid: 200_001,
            ns: Some(Namespace { id: 10, ..made }),
        });
        assert_eq!(
            other.account,
            Account::Namespace(10),
            "another container, another account"
        );
    }
}
