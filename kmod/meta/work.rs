// SPDX-License-Identifier: GPL-2.0
//! The MetaServer's work on a device: serving the region when this node is named for
//! it, registering this node, and running the due jobs (on the device's network
//! workers, which devctx's `net_work` runs).

use super::{Device, Meta, MetaNet};

impl MetaNet {
    /// Serves the MetaServer's region if this node is named for it, then asks `meta` to
    /// register this node (a MetaServer not up yet is tried again at the next request).
    /// Whether that made work due: the caller kicks the network workers, which run it.
    pub(crate) fn up(&self, meta: &Meta, dev: &Device) -> bool {
        self.serve_if_named(dev);
        if meta.id().is_some() {
            return false;
        }
        meta.ask_register();
        true
    }

    /// Runs `meta`'s due jobs on the link to the MetaServer, `dev` naming the device's
    /// verbs objects if it has its pool. Whether there were any.
    pub(crate) fn run(&self, meta: &Meta, dev: impl FnOnce() -> Option<Device>) -> bool {
        if !meta.due() && !self.probing() {
            return false;
        }
        self.work(meta, dev())
    }
}
