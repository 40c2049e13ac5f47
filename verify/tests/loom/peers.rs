//! A connection set made behind its first connection (kmod's net.rs `dial` over abi's
//! peer table, under the membership mutex): the worker installs the first connection
//! and lets the lock go while it makes the second, so CONNECTs bind meanwhile, and the
//! set may be found broken and another attempt begun before the worker reports. No
//! CONNECT may bind to a slot with nothing installed, and no set may be made of two
//! attempts' connections (a worker's reports name its attempt's number).

use loom::sync::{Arc, Mutex};
use loom::thread;

use krcore_abi::cluster::conn_set::{Attempt, State};
use krcore_abi::cluster::peers::{Connect, Ended, Peers, NO_USER};
use krcore_abi::engine::VecStore;

use crate::model;

/// The peer's address (IPv4-mapped 192.0.2.12).
const PEER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 12];
/// The set's first physical QP slot.
const FIRST: u32 = 4;

/// The table and what is installed in its two slots: the number of the attempt whose
/// connection it is.
struct Node {
    table: Peers<VecStore>,
    installed: [Option<u32>; 2],
}

impl Node {
    fn close(&mut self) {
        self.installed = [None; 2];
    }
}

/// kmod's `dial` for the job waiting, if any: `stale` reports as a worker that forgot
/// its attempt's number would (the entry's current one, read at each report).
fn work(node: &Mutex<Node>, stale: bool) {
    let Some((peer, _, mine)) = node.lock().unwrap().table.take_job() else {
        return;
    };
    let attempt = |n: &Node| match n.table.get(peer) {
        Some(p) if stale => p.attempt,
        _ => mine,
    };
    // The first connection is made with no lock held, then installed and used.
    {
        let mut n = node.lock().unwrap();
        let e = attempt(&n);
        if !n.table.first_up(peer, e) {
            return;
        }
        n.installed[0] = Some(e);
    }
    thread::yield_now();
    // The second, likewise; then the report.
    let mut n = node.lock().unwrap();
    let e = attempt(&n);
    match n.table.attempt_done(peer, e, Attempt::Established, 0) {
        Ended::Set => {
            assert_eq!(
                n.installed[0],
                Some(e),
                "a set made of two attempts' connections"
            );
            n.installed[1] = Some(e);
        }
        Ended::Dropped => {}
        Ended::Lost => n.close(),
    }
}

/// A CONNECT: when it binds, the slot holds a connection of the set's attempt.
fn connect(node: &Mutex<Node>, service: u32, broken: bool) {
    let mut n = node.lock().unwrap();
    let step = n.table.connect(&PEER, service, 0, NO_USER, |_| broken);
    if step.close.is_some() {
        n.close();
    }
    if let Connect::Bind { peer, slot } = step.outcome {
        let attempt = n.table.get(peer).unwrap().attempt;
        assert_eq!(
            n.installed[(slot - FIRST) as usize],
            Some(attempt),
            "a CONNECT bound to a slot with nothing of its set installed"
        );
        n.table.bind(peer, NO_USER);
    }
}

fn partial_model(stale: bool) {
    model(move || {
        let node = Arc::new(Mutex::new(Node {
            table: Peers::with_capacity(1, 1, FIRST, 2),
            installed: [None; 2],
        }));
        connect(&node, 1, false);
        let worker = {
            let node = node.clone();
            thread::spawn(move || work(&node, stale))
        };
        let user = {
            let node = node.clone();
            thread::spawn(move || connect(&node, 1, false))
        };
        // The set found broken (the peer went) while it is being made; the next
        // attempt is made by this thread.
        connect(&node, 0, true);
        work(&node, stale);
        worker.join().unwrap();
        user.join().unwrap();
        let n = node.lock().unwrap();
        if let Some(p) = n.table.get(0) {
            if let State::Ready { .. } = p.set.state() {
                let e = p.attempt;
                assert_eq!(
                    n.installed,
                    [Some(e); 2],
                    "a ready set with a slot not its own"
                );
            }
        }
    });
}

#[test]
fn a_set_is_used_from_its_first_connection_and_never_mixed() {
    partial_model(false);
}

#[test]
#[should_panic(expected = "two attempts' connections")]
fn weakened_a_worker_that_forgets_its_attempt() {
    partial_model(true);
}
