//! The fake node's [`Fabric`]: the rig's NIC, QPs, exports and messages seen through the
//! engine's locks, each a `RefCell`, with the lock order of `fabric` checked on every
//! acquisition. A single-threaded rig cannot deadlock, but an engine that took its locks
//! in an order two threads could deadlock on panics here, in every property test and
//! fuzzing run.

use std::cell::{Cell, RefCell, RefMut};
use std::sync::atomic::AtomicU32;

use krcore_abi::engine::{
    BusyHint, Connection, Exports, Fabric, Members, Messages, MrKeys, PhysQp, Post, PostError, Qps,
    SendWr, VecStore,
};
use krcore_abi::errno::Errno;

use crate::fake::FakeNic;

/// The locks, in the order they may be taken (a bit each, in [`Node::held`]).
const MEMBERS: u8 = 1;
const QP: u8 = 2;
const EXPORTS: u8 = 4;

/// The rig's shared parts, borrowed for one engine call.
pub struct Node<'a> {
    nic: RefCell<&'a mut FakeNic>,
    qps: RefCell<&'a mut [PhysQp<VecStore>]>,
    exports: RefCell<&'a mut Exports<VecStore>>,
    messages: RefCell<&'a mut Messages<VecStore>>,
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
}

impl<'a> Node<'a> {
    /// A view of the rig's parts, with what the kernel keeps beside them.
    pub fn new(
        nic: &'a mut FakeNic,
        qps: &'a mut [PhysQp<VecStore>],
        exports: &'a mut Exports<VecStore>,
        messages: &'a mut Messages<VecStore>,
        kernel: &'a KernelState,
    ) -> Node<'a> {
        Node {
            nic: RefCell::new(nic),
            qps: RefCell::new(qps),
            exports: RefCell::new(exports),
            messages: RefCell::new(messages),
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
            "lock order: {name} taken while holding {held:#b} (members 1, QP 2, exports 4)"
        );
        self.held.set(held | l);
    }

    fn give(&self, l: u8) {
        self.held.set(self.held.get() & !l);
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
}

/// The membership lock, held.
pub struct NodeMembers<'n, 'a> {
    node: &'n Node<'a>,
    messages: RefMut<'n, &'a mut Messages<VecStore>>,
}

impl Members<VecStore> for NodeMembers<'_, '_> {
    fn messages(&mut self) -> &mut Messages<VecStore> {
        &mut self.messages
    }
    fn connect(
        &mut self,
        gid: [u8; 16],
        service: u32,
        opposite: Option<u32>,
    ) -> Result<Connection, Errno> {
        self.node.nic.borrow_mut().connect(gid, service, opposite)
    }
    fn disconnect(&mut self, qp: u32) {
        self.node.nic.borrow_mut().disconnect(qp)
    }
}

impl Drop for NodeMembers<'_, '_> {
    fn drop(&mut self) {
        self.node.give(MEMBERS);
    }
}

impl<'a> Fabric<VecStore> for Node<'a> {
    type Members<'n>
        = NodeMembers<'n, 'a>
    where
        Self: 'n;

    fn members(&self) -> NodeMembers<'_, 'a> {
        self.take(MEMBERS, "members");
        NodeMembers {
            node: self,
            messages: self.messages.borrow_mut(),
        }
    }

    fn exports<R>(&self, f: impl FnOnce(&mut Exports<VecStore>) -> R) -> R {
        self.take(EXPORTS, "exports");
        let n = &self.kernel.exports_sections;
        n.set(n.get() + 1);
        let r = f(&mut self.exports.borrow_mut());
        self.give(EXPORTS);
        r
    }

    fn exports_epoch(&self) -> u64 {
        self.exports.borrow().removals()
    }

    fn dereg_mr(&self, keys: MrKeys) {
        self.nic.borrow_mut().dereg_mr(keys)
    }

    fn descriptor(&self) -> u64 {
        self.nic.borrow_mut().descriptor()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krcore_abi::engine::{ExportSlot, Posted};

    /// The checker refuses the nesting that could deadlock two threads: membership
    /// taken inside a QP's section (the engine takes them the other way).
    #[test]
    #[should_panic(expected = "lock order")]
    fn members_inside_a_qp_section_is_refused() {
        let mut nic = FakeNic::new(&[2]);
        let mut qps = vec![PhysQp::new(vec![Posted::EMPTY; 2])];
        let mut exports = Exports::new(vec![ExportSlot::EMPTY; 4]);
        let mut messages = Messages::with_capacity(4, 4);
        let kernel = KernelState::default();
        let node = Node::new(&mut nic, &mut qps, &mut exports, &mut messages, &kernel);
        node.qp(0, |_, _| drop(node.members()));
    }
}
