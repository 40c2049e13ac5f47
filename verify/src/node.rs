//! The fake node's [`Fabric`]: the rig's NIC, QPs, exports and messages seen through the
//! engine's locks, each a `RefCell`, with the lock order of `fabric` checked on every
//! acquisition. A single-threaded rig cannot deadlock, but an engine that took its locks
//! in an order two threads could deadlock on panics here, in every property test and
//! fuzzing run.

use std::cell::{Cell, RefCell, RefMut};
use std::sync::atomic::AtomicU32;

use krcore_abi::cluster::peers::node_of;
use krcore_abi::cqe::Reason;
use krcore_abi::engine::{
    BusyHint, Connection, Counts, Export, Exports, Fabric, HeldPort, Links, Located, Members,
    Messages, MrKeys, PhysQp, PortStorage, Ports, Post, PostError, Qps, SendWr, Share, VecStore,
    SHARES,
};
use krcore_abi::errno::Errno;
use krcore_abi::meta::client::Answer;
use krcore_abi::meta::record::{Grant, NAME_LEN};

use crate::fake::FakeNic;
use crate::meta::FakeMeta;

/// The locks, in the order they may be taken (a bit each, in [`Node::held`]).
const MEMBERS: u8 = 1;
const SHARD: u8 = 2;
const QP: u8 = 4;
const EXPORTS: u8 = 8;
/// A leaf taken under members or a shard, never with a QP's or the exports' lock.
const PORTS: u8 = 32;
/// What rings asked of the MetaServer: a leaf, as the exports.
const META: u8 = 16;

/// The rig's shared parts, borrowed for one engine call.
pub struct Node<'a> {
    nic: RefCell<&'a mut FakeNic>,
    qps: RefCell<&'a mut [PhysQp<VecStore>]>,
    exports: RefCell<&'a mut Exports<VecStore>>,
    links: Vec<RefCell<&'a mut Messages<VecStore>>>,
    kernel: &'a KernelState,
    /// Locks held now.
    held: Cell<u8>,
}

/// What the kernel keeps beside the parts a [`Node`] borrows, across engine calls.
#[derive(Default)]
pub struct KernelState {
    /// The busy hint, kept in each QP's section as kmod keeps it.
    pub hint: BusyHint<AtomicU32>,
    /// Exports sections entered: the device-wide lock the data path should not need.
    pub exports_sections: Cell<u64>,
    /// Membership sections entered: the device-wide lock left for control entries.
    pub members_sections: Cell<u64>,
    /// Sections entered per links shard.
    pub shard_sections: [Cell<u64>; 8],
    /// Shards whose lock was let go with work for the recovery, a bit each (kmod's).
    pub links_busy: Cell<u32>,
    /// The node's MetaServer client, when the test gives it one.
    pub meta: Option<RefCell<FakeMeta>>,
    /// The node's held ports (the kernel's, per device).
    pub ports: NodePorts,
    /// Each user's shares (the kernel's atomics, per device and user slot), and the
    /// limits (module parameters; unlimited unless a test sets them).
    pub shares: RefCell<Vec<Counts>>,
    /// The share limits, by [`Share`] index.
    pub share_limits: Cell<[u32; SHARES]>,
}

impl KernelState {
    /// User `user`'s counts now.
    pub fn counts(&self, user: u32) -> Counts {
        self.shares
            .borrow()
            .get(user as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// A node's held ports, as large as the module's.
pub struct NodePorts(pub RefCell<Ports<VecStore>>);

impl Default for NodePorts {
    fn default() -> Self {
        let slots = vec![HeldPort::EMPTY; 8192];
        NodePorts(RefCell::new(Ports::new(PortStorage { slots }, 7)))
    }
}

/// Counts a section entered.
fn count(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

impl<'a> Node<'a> {
    /// A view of the rig's parts, with what the kernel keeps beside them.
    pub fn new(
        nic: &'a mut FakeNic,
        qps: &'a mut [PhysQp<VecStore>],
        exports: &'a mut Exports<VecStore>,
        links: &'a mut [Messages<VecStore>],
        kernel: &'a KernelState,
    ) -> Node<'a> {
        assert!(links.len().is_power_of_two() && links.len() <= kernel.shard_sections.len());
        Node {
            nic: RefCell::new(nic),
            qps: RefCell::new(qps),
            exports: RefCell::new(exports),
            links: links.iter_mut().map(RefCell::new).collect(),
            kernel,
            held: Cell::new(0),
        }
    }

    /// The NIC (for what the kernel does outside the engine: registering memory).
    pub fn nic(&self) -> RefMut<'_, &'a mut FakeNic> {
        self.nic.borrow_mut()
    }

    /// Takes lock `l`: nothing after it in the order may be held.
    fn take(&self, l: u8, name: &str) {
        let held = self.held.get();
        assert!(
            held < l,
            "lock order: {name} taken while holding {held:#b} (members 1, shard 2, QP 4, exports 8, meta 16)"
        );
        self.held.set(held | l);
    }

    fn give(&self, l: u8) {
        self.held.set(self.held.get() & !l);
    }

    /// Runs `f` on the MetaServer client under its (leaf) lock; `none` without one.
    fn meta<R>(&self, none: R, f: impl FnOnce(&mut FakeMeta) -> R) -> R {
        let Some(m) = &self.kernel.meta else {
            return none;
        };
        self.take(META, "meta");
        let r = f(&mut m.borrow_mut());
        self.give(META);
        r
    }
}

/// Posts on one QP of the fake NIC.
struct NicPost<'n, 'a> {
    nic: &'n RefCell<&'a mut FakeNic>,
    qp: u32,
}

impl Post for NicPost<'_, '_> {
    fn post_send(&mut self, wrs: &[SendWr]) -> Result<(), PostError> {
        self.nic.borrow_mut().post_send(self.qp, wrs)
    }
    fn map_recv(&mut self, mr: u64, addr: u64, len: u32) -> Result<u32, PostError> {
        Ok(self.nic.borrow_mut().map_recv(mr, addr, len))
    }
}

impl Qps<VecStore> for Node<'_> {
    fn count(&self) -> usize {
        self.qps.borrow().len()
    }

    fn qp<R>(&self, i: u32, f: impl FnOnce(&mut PhysQp<VecStore>, &mut dyn Post) -> R) -> R {
        self.take(QP, "a QP");
        let mut qps = self.qps.borrow_mut();
        let r = self.kernel.hint.section(
            &mut qps[i as usize],
            &mut NicPost {
                nic: &self.nic,
                qp: i,
            },
            f,
        );
        self.give(QP);
        r
    }

    fn release_key(&self, rkey: u32, closed: bool) {
        self.nic.borrow_mut().release_key(rkey, closed)
    }
}

/// The membership lock, held.
pub struct NodeMembers<'n, 'a> {
    node: &'n Node<'a>,
}

impl Members<VecStore> for NodeMembers<'_, '_> {
    fn connect(
        &mut self,
        gid: [u8; 16],
        service: u32,
        opposite: Option<u32>,
        _user: u32,
    ) -> Result<Connection, Errno> {
        self.node.nic.borrow_mut().connect(gid, service, opposite)
    }
    fn disconnect(&mut self, qp: u32, _user: u32) {
        self.node.nic.borrow_mut().disconnect(qp)
    }
    fn accept(&mut self, gid: [u8; 16], qp: u32) -> Result<Connection, Errno> {
        self.node.nic.borrow_mut().accept(gid, qp)
    }

    fn resolve_named(
        &mut self,
        name: &[u8; NAME_LEN],
        user: u32,
    ) -> Answer<(Located, Export, Grant)> {
        self.node.meta(Answer::Failed(Reason::Unreachable), |m| {
            m.resolve(name, user)
        })
    }

    fn import_named(
        &mut self,
        name: &[u8; NAME_LEN],
        qp: u32,
        user: u32,
    ) -> Answer<(Export, Grant)> {
        // The fake's peer set is QP 0 once a CONNECT named its remote GID; every other
        // QP connects this node to itself.
        let remote = self.node.nic.borrow().remote_bound(qp);
        let none = Answer::Failed(Reason::Unreachable);
        self.node.meta(none, |m| {
            let node = remote.and_then(|g| node_of(&g)).unwrap_or(m.me.id());
            m.import(name, node, user)
        })
    }
}

impl Drop for NodeMembers<'_, '_> {
    fn drop(&mut self) {
        self.node.give(MEMBERS);
    }
}

/// A links shard's lock, held.
pub struct NodeShard<'n, 'a> {
    node: &'n Node<'a>,
    k: u32,
    links: RefMut<'n, &'a mut Messages<VecStore>>,
}

impl std::ops::Deref for NodeShard<'_, '_> {
    type Target = Messages<VecStore>;
    fn deref(&self) -> &Messages<VecStore> {
        &self.links
    }
}

impl std::ops::DerefMut for NodeShard<'_, '_> {
    fn deref_mut(&mut self) -> &mut Messages<VecStore> {
        &mut self.links
    }
}

impl Drop for NodeShard<'_, '_> {
    fn drop(&mut self) {
        let (busy, bit) = (&self.node.kernel.links_busy, 1 << self.k);
        busy.set(if self.links.quiet() {
            busy.get() & !bit
        } else {
            busy.get() | bit
        });
        self.node.give(SHARD);
    }
}

impl<'a> Links<VecStore> for Node<'a> {
    type Shard<'n>
        = NodeShard<'n, 'a>
    where
        Self: 'n;

    fn shards(&self) -> u32 {
        self.links.len() as u32
    }

    fn shard(&self, k: u32) -> NodeShard<'_, 'a> {
        self.take(SHARD, "a links shard");
        count(&self.kernel.shard_sections[k as usize]);
        NodeShard {
            node: self,
            k,
            links: self.links[k as usize].borrow_mut(),
        }
    }
}

impl<'a> Fabric<VecStore> for Node<'a> {
    type Members<'n>
        = NodeMembers<'n, 'a>
    where
        Self: 'n;

    fn members(&self) -> NodeMembers<'_, 'a> {
        self.take(MEMBERS, "members");
        count(&self.kernel.members_sections);
        NodeMembers { node: self }
    }

    fn exports<R>(&self, f: impl FnOnce(&mut Exports<VecStore>) -> R) -> R {
        self.take(EXPORTS, "exports");
        count(&self.kernel.exports_sections);
        let r = f(&mut self.exports.borrow_mut());
        self.give(EXPORTS);
        r
    }

    fn exports_epoch(&self) -> u64 {
        self.exports.borrow().removals()
    }

    fn take_share(&self, user: u32, s: Share) -> Result<(), Reason> {
        let limit = self.kernel.share_limits.get()[s as usize];
        let mut shares = self.kernel.shares.borrow_mut();
        if shares.len() <= user as usize {
            shares.resize(user as usize + 1, Counts::default());
        }
        match shares[user as usize].take(s, if limit == 0 { u32::MAX } else { limit }) {
            true => Ok(()),
            false => Err(Reason::Quota),
        }
    }

    fn give_share(&self, user: u32, s: Share, n: u32) {
        let mut shares = self.kernel.shares.borrow_mut();
        let c = shares.get_mut(user as usize).expect("a user that took");
        assert!(
            c.0[s as usize] >= n,
            "gave back more {} than taken",
            s.name()
        );
        c.give(s, n);
    }

    fn ports<R>(&self, f: impl FnOnce(&mut Ports<VecStore>) -> R) -> R {
        assert_eq!(
            self.held.get() & (QP | EXPORTS),
            0,
            "lock order: ports under a QP or exports"
        );
        self.take(PORTS, "ports");
        let r = f(&mut self.kernel.ports.0.borrow_mut());
        self.give(PORTS);
        r
    }

    fn dereg_mr(&self, keys: MrKeys) {
        self.nic.borrow_mut().dereg_mr(keys)
    }

    fn descriptor(&self) -> u64 {
        self.nic.borrow_mut().descriptor()
    }

    fn publish(&self, name: &[u8; NAME_LEN], export: &Export, grant: Grant) -> Answer<()> {
        self.meta(Answer::Failed(Reason::Unreachable), |m| {
            m.publish(name, export, grant)
        })
    }

    fn unpublish(&self, descriptor: u64) -> bool {
        self.meta((), |m| m.unpublish(descriptor));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krcore_abi::engine::{ExportSlot, Posted};

    /// Runs `f` on a node of one QP and two links shards.
    fn with_node(f: impl FnOnce(&Node)) {
        let mut nic = FakeNic::new(&[2]);
        let mut qps = vec![PhysQp::new(vec![Posted::EMPTY; 2])];
        let mut exports = Exports::new(vec![ExportSlot::EMPTY; 4]);
        let mut links = [Messages::with_capacity(4, 4), Messages::with_capacity(4, 4)];
        let kernel = KernelState::default();
        f(&Node::new(
            &mut nic,
            &mut qps,
            &mut exports,
            &mut links,
            &kernel,
        ));
    }

    /// The checker refuses the nesting that could deadlock two threads: membership
    /// taken inside a QP's section (the engine takes them the other way).
    #[test]
    #[should_panic(expected = "lock order")]
    fn members_inside_a_qp_section_is_refused() {
        with_node(|node| node.qp(0, |_, _| drop(node.members())));
    }

    /// Nor two shards at once.
    #[test]
    #[should_panic(expected = "lock order")]
    fn two_shards_at_once_are_refused() {
        with_node(|node| {
            let _a = node.shard(0);
            let _b = node.shard(1);
        });
    }

    /// Nor membership inside a shard's section.
    #[test]
    #[should_panic(expected = "lock order")]
    fn members_inside_a_shard_section_is_refused() {
        with_node(|node| {
            let _a = node.shard(0);
            drop(node.members());
        });
    }
}
