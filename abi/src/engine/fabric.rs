//! What the engine reaches outside one ring, and the locks it reaches it under.
//!
//! A ring's own state is the caller's (`&mut Ring`, under the ring's lock). What rings
//! share comes through a [`Fabric`], each part behind its own lock so that rings on
//! different physical QPs never wait for each other:
//!
//! - each physical QP's accounting, and posting to it: [`Qps::qp`], one lock per QP;
//! - the device's membership: which virtual QPs are bound where, and the backend's
//!   connect/disconnect: [`Fabric::members`], one lock per device, taken only by control
//!   entries (CONNECT, DISCONNECT), ring close and the recovery;
//! - the links for two-sided messages, with the receives and sends waiting on them:
//!   [`Links::shard`], spread over shards by peer and service
//!   ([`shard_of`](super::message::shard_of)), a lock per shard, so messages on
//!   different services never wait for each other, nor for a CONNECT elsewhere;
//! - the exported MRs: [`Fabric::exports`], a leaf;
//! - the node's held ports: [`Fabric::ports`], a leaf;
//! - what rings asked of the MetaServer ([`Fabric::publish`], [`Fabric::unpublish`],
//!   [`Members::import_named`]): a leaf in the fabric; its network work runs outside
//!   every engine lock.
//!
//! # Lock order
//!
//! ring → members → one links shard → revocations → one QP → exports.
//!
//! The ports' lock is a leaf too, taken under the ring, members or a shard, never with
//! a QP's or the exports'.
//!
//! (The revocations' lock is the fabric's own, taken by [`Fabric::unpublish`] and
//! [`Fabric::revoke_far`], which may post notices under it.) The engine never holds two
//! shards or two QP locks, never takes members or a shard while in a QP's section, and
//! takes nothing while in the exports section; a fabric's implementation may check it
//! (verify's does, with `RefCell`s, and its loom models with real mutexes). Completion routing comes in below the ring: it takes a QP
//! lock to retire requests and hands their completions to their rings by other means
//! (the kernel's per-ring inbox), never taking a ring's lock inside a QP's.

use super::backend::{Connection, MrKeys, PostError, SendWr};
use super::cluster::notice::NOTICE_LEN;
use super::cqe::Reason;
use super::errno::Errno;
use super::export::{Export, Exports};
use super::meta::client::Answer;
use super::meta::record::{Grant, NAME_LEN};
use core::ops::DerefMut;

use super::message::Messages;
use super::ports::Ports;
use super::qp::PhysQp;
use super::shares::Share;
use super::Store;

/// Posts on one physical QP, within its lock ([`Qps::qp`]).
pub trait Post {
    /// Posts a chain of send requests, in order.
    fn post_send(&mut self, wrs: &[SendWr]) -> Result<(), PostError>;
    /// Posts a notice to the peer kernel (a set's QP only; see `far`), signaled, with
    /// [`NOTICE_WR_ID`](super::far::NOTICE_WR_ID).
    fn post_notice(&mut self, _notice: &[u8; NOTICE_LEN]) -> Result<(), PostError> {
        Err(PostError {
            posted: 0,
            errno: Errno::ENODEV,
        })
    }
    /// Makes a key for the `len` bytes at `addr` of MR `mr` (its token) alone, with
    /// remote write and nothing else, its registration completed when this returns (on
    /// the device's own QP, not this one: see `cluster::keys`), so the advert that
    /// carries it may go next. Fails while no key is free (the advert waits).
    fn map_recv(&mut self, _mr: u64, _addr: u64, _len: u32) -> Result<u32, PostError> {
        Err(PostError {
            posted: 0,
            errno: Errno::ENODEV,
        })
    }
}

/// The physical QPs, each behind its own lock.
pub trait Qps<S: Store> {
    /// How many there are.
    fn count(&self) -> usize;
    /// Runs `f` on physical QP `i` (less than [`count`](Self::count)) with its lock held;
    /// `f` posts on it through the [`Post`] it gets.
    fn qp<R>(&self, i: u32, f: impl FnOnce(&mut PhysQp<S>, &mut dyn Post) -> R) -> R;
    /// Whether slot `i` may hold a QP, read without its lock: a slot no QP was ever
    /// installed in (a peer set's not yet made) has nothing for the recovery's sweep.
    fn in_use(&self, _i: u32) -> bool {
        true
    }
    /// A key [`Post::map_recv`] made is done with: `closed` when the NIC already closed
    /// it (the peer's `Data` invalidated it); otherwise the backend closes it before the
    /// memory under it may go. Called with a QP's lock held, maybe.
    fn release_key(&self, _rkey: u32, _closed: bool) {}
}

/// The links for two-sided messages, in shards, each behind its own lock.
pub trait Links<S: Store>: Qps<S> {
    /// A shard's lock guard.
    type Shard<'a>: DerefMut<Target = Messages<S>>
    where
        Self: 'a;
    /// How many shards there are (a power of two).
    fn shards(&self) -> u32;
    /// Takes the lock of shard `k` (less than [`shards`](Self::shards)).
    fn shard(&self, k: u32) -> Self::Shard<'_>;
}

/// The device's membership, while its lock is held: the backend's bindings of virtual
/// QPs to pooled physical QPs.
pub trait Members<S: Store> {
    /// Binds to a pooled physical QP connected to `gid`/`service`; when `opposite` is
    /// given (the other end of a link on this node, see `message`), to the QP
    /// connected to that one. For user `user` (its account's slot, as shares count
    /// it; [`NO_USER`](super::cluster::peers::NO_USER) for the kernel's own), whose
    /// dials to other nodes in progress and sets held are bounded (`EDQUOT` past them;
    /// see `cluster::peers`).
    fn connect(
        &mut self,
        gid: [u8; 16],
        service: u32,
        opposite: Option<u32>,
        user: u32,
    ) -> Result<Connection, Errno>;
    /// Releases the binding made by [`connect`](Self::connect) for `user` (the one it
    /// was made for) or by [`accept`](Self::accept) (`user` [`NO_USER`]).
    ///
    /// [`NO_USER`]: super::cluster::peers::NO_USER
    fn disconnect(&mut self, qp: u32, user: u32);
    /// Binds to physical QP `qp` of the set to the node at `gid`, for a peer's end a
    /// listen takes (see `listen`): the QP its Hello came on. Fails when `qp` is not
    /// (or no longer) a live QP of that node's set. A fabric with no other nodes has
    /// none.
    fn accept(&mut self, _gid: [u8; 16], _qp: u32) -> Result<Connection, Errno> {
        Err(Errno::ENODEV)
    }
    /// IMPORT_NAME of `name` for a virtual QP bound to physical QP `qp`: the export, as
    /// the exporting node's kernel recorded it in the MetaServer, when `qp` connects to
    /// that node (see abi's `meta::client`). A fabric without a MetaServer has none.
    /// `user` is the asker's slot (see `shares`).
    fn import_named(
        &mut self,
        _name: &[u8; NAME_LEN],
        _qp: u32,
        _user: u32,
    ) -> Answer<(Export, Grant)> {
        Answer::Failed(Reason::Unreachable)
    }
    /// RESOLVE_NAME of `name`: the IPv4 address and id of the node that exports it,
    /// with the export and its grant (see abi's `meta::client`), wherever it lives. A
    /// fabric without a MetaServer has none.
    /// `user` as for [`import_named`](Self::import_named).
    fn resolve_named(
        &mut self,
        _name: &[u8; NAME_LEN],
        _user: u32,
    ) -> Answer<(Located, Export, Grant)> {
        Answer::Failed(Reason::Unreachable)
    }
}

/// Where a name lives (RESOLVE_NAME's answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located {
    /// The exporting node's IPv4 address.
    pub ipv4: [u8; 4],
    /// Its node id (the address's low 16 bits).
    pub node: u16,
}

impl Located {
    /// Node `node` of the cluster whose /16 is `prefix` (a node id is its address's low
    /// 16 bits, and a cluster lives in one /16).
    pub fn in_cluster(prefix: [u8; 2], node: u16) -> Located {
        let [n0, n1] = node.to_be_bytes();
        Located {
            ipv4: [prefix[0], prefix[1], n0, n1],
            node,
        }
    }
}

/// Everything rings share on one device.
pub trait Fabric<S: Store>: Links<S> {
    /// The membership lock's guard.
    type Members<'a>: Members<S>
    where
        Self: 'a;
    /// Takes the membership lock.
    fn members(&self) -> Self::Members<'_>;
    /// Runs `f` on the exported MRs with their lock held.
    fn exports<R>(&self, f: impl FnOnce(&mut Exports<S>) -> R) -> R;
    /// Runs `f` on the node's held ports (see `ports`) with their lock held (a leaf).
    fn ports<R>(&self, f: impl FnOnce(&mut Ports<S>) -> R) -> R;
    /// Takes one `s` of user `user`'s share of this device (see `shares`):
    /// `Err(Reason::Quota)` past it. Takes no lock. A fabric that counts nothing takes
    /// always.
    fn take_share(&self, _user: u32, _s: Share) -> Result<(), Reason> {
        Ok(())
    }
    /// Gives `n` of `s` back to user `user`'s share.
    fn give_share(&self, _user: u32, _s: Share, _n: u32) {}
    /// The exports' epoch ([`Exports::removals`]) as their lock last left it, read
    /// without the lock: a fabric publishes it when each [`exports`](Self::exports)
    /// section ends (release; this load acquires). A one-sided request whose import was
    /// resolved at this epoch uses it without the lock, so the one-sided data path takes
    /// no device-wide lock while nothing is revoked; a revocation moves the epoch before
    /// its section ends, so no request that starts after it uses the revoked export.
    fn exports_epoch(&self) -> u64;
    /// Test only (the module's `test_unchecked_wire`, which only root sets, at load):
    /// this kernel posts as a member kernel that broke its checks would, so a test can
    /// show the other node's NIC refuses what it must. `Some((0, 0))`: a one-sided
    /// request through an import goes with no check of its rights or range;
    /// `Some((addr, rkey))`: it goes to `addr` with `rkey` instead. `None` otherwise.
    fn unchecked_wire(&self) -> Option<(u64, u32)> {
        None
    }
    /// Deregisters an MR; nothing of it is in flight. (Registering is the caller's:
    /// see `register`.)
    fn dereg_mr(&self, keys: MrKeys);
    /// A fresh unpredictable 64-bit value for an export descriptor (the kernel's
    /// CSPRNG; see `export`).
    fn descriptor(&self) -> u64;
    /// PUBLISH of `export` (a live one of the calling ring's) under `name`, granting
    /// `grant`, in the MetaServer (see abi's `meta::client`). Takes only a leaf lock. A
    /// fabric without a MetaServer has none.
    fn publish(&self, _name: &[u8; NAME_LEN], _export: &Export, _grant: Grant) -> Answer<()> {
        Answer::Failed(Reason::Unreachable)
    }
    /// Export `descriptor` is being revoked: its published names go too (the network
    /// work is the caller's, after the submission), and other nodes that may have
    /// imported it are told (see `cluster::revoke`). `false` when the revocations'
    /// table has no room: nothing was done, and the caller waits and tries again
    /// (`Stall::Remote`). Takes the revocations' lock, then QP locks.
    fn unpublish(&self, _descriptor: u64) -> bool {
        true
    }
    /// Whether the MR whose remote key is `rkey` may be deregistered: `Pending` while
    /// other nodes told of its export's revocation have not all answered (the caller
    /// waits, as for the MetaServer: `Stall::Remote`). A fabric with no other nodes
    /// answers `Done`.
    fn revoke_far(&self, _rkey: u32) -> Answer<()> {
        Answer::Done(())
    }
}

/// A [`Post`] that posts nothing (for QPs no request is ever posted on).
pub struct NoPost;

impl Post for NoPost {
    fn post_send(&mut self, _: &[SendWr]) -> Result<(), PostError> {
        Err(PostError {
            posted: 0,
            errno: Errno::ENODEV,
        })
    }
}
