// SPDX-License-Identifier: GPL-2.0
//! A device context's network work, on the device's own workers (cq_events.rs), never
//! a caller's thread: the cluster's dials (cluster/net.rs, on the parts [`Net`] lends
//! it) and the MetaServer's jobs (meta/work.rs, on its link), each driving its own
//! objects; here only which runs when, and the rings woken after.

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use crate::abi::cluster::auth::TAG_LEN;
use crate::abi::cluster::notice::Notice;
use crate::abi::engine::{Fabric, QpBits};
use crate::cluster::net::Net;
use crate::engine::backend::POOL_QPS;
use crate::shim;

use super::DevCtx;

/// How long a leaving kernel waits for its farewells to be taken, ms: a peer that is
/// gone never acknowledges one (its set fails at that peer's next request instead).
const FAREWELL_MS: i64 = 200;

impl DevCtx {
    /// The parts the cluster's network work drives.
    pub(crate) fn net(&self) -> Net<'_> {
        Net {
            shared: &self.shared,
            door: &self.door,
            events: &self.events,
            rings: &self.rings,
            dead: &self.dead,
        }
    }

    /// What the MetaServer's link needs of the device, once its pool is built.
    fn meta_device(&self) -> Option<crate::meta::Device> {
        let dev = self.shared.members().g.hw.peer_resources();
        dev.map(|(ib, pd, _, gid)| crate::meta::Device { ib, pd, gid })
    }

    /// Builds the QP pool if the device can have one now (the prewarm work item), then
    /// serves the MetaServer if this is its node, registers with it, and connects to
    /// the `cm_peer` kernel, if one is named.
    pub(crate) fn prewarm(&self) {
        // SAFETY: reads a module parameter.
        if unsafe { shim::krcore_shim_prewarm_enabled() } && self.shared.members().prewarm() {
            pr_debug!("QP pool ready\n");
            if let Some(dev) = self.meta_device() {
                if self.meta.up(&self.shared.meta, &dev) {
                    // On the network workers, as all MetaServer work.
                    self.events.kick_net();
                }
            }
            self.net().dial_peer();
        }
    }

    /// The device's network work, on one of the module's workers (cq_events.rs), never
    /// on a caller's thread: the connection sets CONNECTs asked for, and the
    /// MetaServer's jobs, whoever's they are (several workers at once, each taking the
    /// next job). When it did any, every ring is woken, so entries that waited for it
    /// are taken again (a waiter steps, an eventfd is told).
    pub(crate) fn net_work(&self) {
        let mut did = false;
        // Bounded: what comes due meanwhile is another kick's.
        for _ in 0..64 {
            if self.dead.load(Ordering::Acquire) {
                return;
            }
            let dialed = self.net().dial();
            if !dialed && !self.meta.run(&self.shared.meta, || self.meta_device()) {
                break;
            }
            did = true;
        }
        // Answers from other nodes (a revocation's) come through the CQ.
        if self.route() > 0 || did {
            self.rings.wake_all();
        }
    }

    /// Queues the device's network work (see [`net_work`](Self::net_work)) if a worker
    /// has any to do: a dial asked for, or MetaServer work due (a wait for another
    /// node's answer, a revocation's, needs none: its completion wakes the ring). Under
    /// the submitting ring's lock.
    pub(crate) fn kick_net(&self) {
        if self.shared.meta.due() || self.shared.members().g.peers.job_waiting() {
            self.events.kick_net();
        }
    }

    /// This kernel is leaving (its module unloads, or the device goes): tells each peer
    /// kernel so on every QP of its set, with a farewell cm.c proves (a tag over that
    /// connection's transcript), and waits for those notices to be taken, routing
    /// meanwhile, [`FAREWELL_MS`] at most. The peer's set then fails at once
    /// (peer_gone); the CM's disconnect request that follows proves nothing, so is not
    /// taken as a departure. No lock held.
    pub(crate) fn farewell(&self) {
        let mut sent = QpBits::EMPTY;
        // The device's QP cells: its pool's, then its sets' (as many as it keeps).
        for slot in POOL_QPS..self.shared.qps.len() {
            let mut tag = [0u8; TAG_LEN];
            let made = {
                // Under the QP's lock: a set's close clears `peer` there before it lets
                // the connection go.
                let c = self.shared.qps[slot].lock();
                // SAFETY: a live connection (see above); `tag` has room for its bytes.
                c.post.peer.is_some_and(|end| unsafe {
                    shim::krcore_shim_cm_farewell_tag(end.conn, tag.as_mut_ptr()) == 0
                })
            };
            if made && self.shared.post_notice(slot as u32, &Notice::Farewell { tag }) {
                sent.insert(slot as u32);
            }
        }
        let until = crate::clock::now_ms() + FAREWELL_MS;
        while !sent.is_empty() && crate::clock::now_ms() < until {
            self.route();
            for slot in sent.iter() {
                let q = self.shared.qps[slot as usize].lock();
                if q.acct.notices_out() == 0 || q.acct.failed() {
                    drop(q);
                    sent.remove(slot);
                }
            }
            // SAFETY: plain sleep, no lock held.
            unsafe { shim::krcore_shim_msleep(1) };
        }
        if !sent.is_empty() {
            pr_info!("{} farewells not taken in {} ms: their peers find the sets gone later\n", sent.len(), FAREWELL_MS);
        }
    }
}
