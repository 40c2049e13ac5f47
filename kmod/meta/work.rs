// SPDX-License-Identifier: GPL-2.0
//! A device context's MetaServer work: serving the region when this node is named for
//! it, registering this node, and running the due jobs (on the device's workers and its
//! tick).

use crate::engine::devctx::DevCtx;
use crate::abi::engine::Fabric;

impl DevCtx {
    /// Serves the MetaServer's region if this node is named for it, then registers this
    /// node (a MetaServer not up yet is tried again at the next request).
    pub(crate) fn meta_up(&self) {
        let dev = self.shared.members().g.hw.peer_resources();
        let Some((ib, pd, _, gid)) = dev else { return };
        self.meta.serve_if_named(&crate::meta::Device { ib, pd, gid });
        if self.shared.meta.id().is_none() {
            self.shared.meta.ask_register();
            // On the network workers, as the tick's work (devctx's `krcore_rs_dev_tick`).
            self.events.kick_net();
        }
    }

    /// Runs the MetaServer's due jobs (meta/mod.rs). Whether there were any.
    pub(crate) fn meta_work(&self) -> bool {
        if !self.shared.meta.due() && !self.meta.probing() {
            return false;
        }
        let dev = self.shared.members().g.hw.peer_resources();
        let dev = dev.map(|(ib, pd, _, gid)| crate::meta::Device { ib, pd, gid });
        self.meta.work(&self.shared.meta, dev)
    }
}
