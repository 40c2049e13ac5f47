// SPDX-License-Identifier: GPL-2.0
//! The cluster's network work on a device, on the device's own workers (never a
//! caller's thread): the connection sets CONNECTs ask for dialed, the `cm_peer` set
//! prewarmed, and cm.c's listener's question whether a peer's request for a set is
//! taken (the both-at-once rule). Its door (door.rs) admits the peer first.

use core::sync::atomic::{AtomicBool, Ordering};

use kernel::prelude::*;

use crate::abi::cluster::conn_set::{Attempt, SET_CONNECT_MS, UNPROVED_RETRIES};
use crate::abi::errno::Errno;
use crate::engine::fabric::MemberState;
use crate::cluster::peer::{PeerQp, QPS_PER_SET};
use crate::shim;

use crate::clock::now_us;
use crate::abi::engine::Fabric;
use crate::cluster::door::Door;
use crate::engine::cq_events::CqEvents;
use crate::engine::fabric::Shared;
use crate::engine::rings::Rings;

/// How long the dial of a set waits after its first connection is up before it makes
/// the rest, us: the waiters it woke run first.
const REST_AFTER_US: u32 = 1_000;

/// What the cluster's network work drives of a device, borrowed from its context for
/// a call: the peer sets (in the fabric's membership), the door peer kernels come in
/// by, the CQ's event work (a set's notices need the CQ armed), the rings (woken as a
/// set comes up) and whether the device is going away.
pub(crate) struct Net<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) door: &'a Door,
    pub(crate) events: &'a CqEvents,
    pub(crate) rings: &'a Rings,
    pub(crate) dead: &'a AtomicBool,
}

impl Net<'_> {
    /// Prewarms the set to the kernel named by the `cm_peer` parameter (peer.rs), with
    /// no lock held while it connects, and says how long it took.
    pub(crate) fn dial_peer(&self) {
        let mut peer = [0u8; 16];
        // SAFETY: `peer` has the 16 bytes of a GID.
        if unsafe { shim::krcore_shim_cm_peer_gid(peer.as_mut_ptr()) } != 0 {
            return;
        }
        let now = crate::clock::coarse_ms();
        if !self.shared.members().g.peers.prewarm(&self.shared, &peer, now) {
            return;
        }
        let started = now_us();
        self.dial();
        let us = now_us() - started;
        let [a, b, c, d] = [peer[12], peer[13], peer[14], peer[15]];
        match self.shared.members().g.peers.ready(&peer) {
            Some(qpn) => {
                pr_info!("connected to the peer kernel at {a}.{b}.{c}.{d} in {us} us, QP {qpn}\n")
            }
            None => pr_warn!("no connection to the peer kernel at {a}.{b}.{c}.{d} after {us} us\n"),
        }
    }

    /// Makes the connection set a CONNECT asked for (peer.rs), with no lock held.
    /// Whether there was one to make.
    pub(crate) fn dial(&self) -> bool {
        let job = {
            let mut m = self.shared.members();
            m.g.peers.take_job().map(|j| (j, m.g.hw.peer_resources()))
        };
        let Some((job, verbs)) = job else {
            return false;
        };
        // Pinned while it dials, as cm.c's request handlers: the removal waits for the
        // pin before it destroys the PD and CQ the dial's QPs are created on (cm.c tears
        // the dial itself down first, so the wait is short).
        let pinned = self.door.pin().is_some();
        let verbs = verbs.filter(|_| pinned);
        // SAFETY: plain calls; no lock held (tests use the delay to make two nodes'
        // dials overlap).
        unsafe { shim::krcore_shim_msleep(shim::krcore_shim_cm_dial_delay_ms()) };
        // The connections after the first: the first is installed as soon as it is up.
        let mut rest: [Option<PeerQp>; QPS_PER_SET - 1] = [None; QPS_PER_SET - 1];
        let mut how = Attempt::Failed;
        if let Some((ib, pd, cq, gid)) = verbs {
            how = Attempt::Established;
            for index in 0..QPS_PER_SET {
                let (mut conn, mut qp, mut qpn) = (core::ptr::null_mut(), core::ptr::null_mut(), 0);
                let mut connect = || {
                    // SAFETY: the device, PD and CQ live while the pin is held (the
                    // removal waits for it), and cm.c tears this connection down (or
                    // refuses it) before the removal; the GIDs are 16 bytes each.
                    unsafe {
                        shim::krcore_shim_cm_connect(
                            ib, pd, cq, gid.as_ptr(), job.addr.as_ptr(), SET_CONNECT_MS as u32,
                            shim::CM_PEER, index as u8, &mut conn, &mut qp, &mut qpn,
                        )
                    }
                };
                // An unproved refusal (ECONNREFUSED) costs UNPROVED_RETRIES tries more.
                let mut r = connect();
                for _ in 0..UNPROVED_RETRIES {
                    if r != Errno::ECONNREFUSED.to_neg() {
                        break;
                    }
                    r = connect();
                }
                if r == Errno::EALREADY.to_neg() {
                    // Both at once: the peer's attempt wins; its set is adopted here.
                    crate::cluster::peer::log_set(&job.addr, format_args!("our attempt yielded to the peer's"));
                    how = Attempt::Yielded;
                    break;
                }
                if r != 0 {
                    let [a, b, c, d] = [job.addr[12], job.addr[13], job.addr[14], job.addr[15]];
                    pr_warn!("no connection to the peer kernel at {a}.{b}.{c}.{d}: error {r}\n");
                    how = Attempt::Failed;
                    break;
                }
                let q = PeerQp { conn, qp, qpn };
                match index.checked_sub(1).and_then(|k| rest.get_mut(k)) {
                    Some(slot) => *slot = Some(q),
                    None => {
                        // The first: bound to at once, the rest made behind it. A
                        // removal that began meanwhile tore it down: let go, never
                        // installed.
                        let live = !self.dead.load(Ordering::SeqCst);
                        if !live || !self.shared.members().first_up(&job, q) {
                            if !live {
                                self.shared.let_go(q.conn);
                            }
                            how = Attempt::Failed;
                            break;
                        }
                        // Its peer's notices need the CQ armed (see `cq_event`); the
                        // CONNECTs waiting for it are taken again.
                        self.events.kick();
                        self.rings.wake_all();
                        // The rest is made behind them: the CPU goes to the woken
                        // waiters first (they bind and return), not to the next dial.
                        // SAFETY: plain call; no lock held.
                        unsafe { shim::krcore_shim_usleep(REST_AFTER_US) };
                    }
                }
            }
        }
        // A removal that began meanwhile tore the connections down: they are let go,
        // never installed.
        if self.dead.load(Ordering::SeqCst) {
            how = Attempt::Failed;
        }
        let now = crate::clock::coarse_ms();
        let set = self.shared.members().dialed(job, &rest, how, now);
        if pinned {
            if set {
                // Its peer's notices need the CQ armed (see `cq_event`).
                self.events.kick();
            }
            self.door.unpin();
        }
        true
    }

    /// A peer kernel at `addr` asks for connection `index` of a set (cm.c's listener):
    /// whether to accept it (see peer.rs).
    pub(crate) fn cm_request(&self, addr: &[u8; 16], index: u32) -> Result<(), Errno> {
        let now = crate::clock::coarse_ms();
        let mut m = self.shared.members();
        let MemberState { peers, hw, .. } = &mut *m.g;
        // A request before this node's pool was built: no id for the rule yet, and no
        // CONNECT of ours to compete with; refused until the pool is up (the peer
        // retries).
        let own = hw.pool_gid().ok_or(Errno::EAGAIN)?;
        peers.set_me(&own);
        peers.request(&self.shared, addr, index, now)
    }

    /// The connection accepted for it: adopted into the set (see peer.rs); whether it
    /// was.
    pub(crate) fn cm_adopt(&self, addr: &[u8; 16], index: u32, q: PeerQp) -> bool {
        let adopted = self.shared.members().adopt(addr, index, q);
        if adopted {
            // Its peer's notices need the CQ armed (see `cq_event`); cm.c holds the pin.
            self.events.kick();
        }
        adopted
    }
}
