// SPDX-License-Identifier: GPL-2.0
//! krcore: a microsecond-scale RDMA control plane. The module keeps RDMA device contexts
//! and hands applications rings mmapped from `/dev/krcore`.
//!
//! Rust owns every decision (through abi's sources) and every object; the C shim
//! (shim.c) registers the misc device and the ib_client and forwards to Rust; what
//! differs between the kernel crates is kcompat.rs's.

// The device context's pin-initializer expands one macro level per field.
#![recursion_limit = "256"]

use kernel::prelude::*;

mod abi;
mod clock;
mod cluster;
mod device;
mod engine;
mod inspect;
mod kcompat;
mod meta;
mod ring;
mod shim;

module! {
    type: KrCore,
    name: "krcore",
    description: "krcore: kernel-space RDMA control plane with mmapped rings",
    license: "GPL",
}

/// The loaded module: owns the device registry that the C callbacks reach.
struct KrCore {
    registry: Pin<KBox<device::Registry>>,
    /// The inspection files; gone first at exit (their readers reach the registry).
    debug: Option<inspect::DebugFiles>,
}

impl kernel::Module for KrCore {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let registry = KBox::pin_init(device::Registry::new(), GFP_KERNEL)?;
        // The registry is published before the shim registers anything, because
        // ib_register_client calls back into it synchronously for existing devices.
        device::Registry::publish(&registry);
        // SAFETY: called once, before any file or client callback can run.
        let ret = unsafe { shim::krcore_shim_register() };
        if ret != 0 {
            device::Registry::unpublish();
            return Err(Error::from_errno(ret));
        }
        // Last: nothing can fail after the listener took peers in.
        let debug = Some(inspect::DebugFiles::add());
        pr_info!("loaded, ABI version {}\n", abi::device::ABI_VERSION);
        Ok(KrCore { registry, debug })
    }
}

impl Drop for KrCore {
    fn drop(&mut self) {
        // Waits for the inspection files' readers: none reaches the registry after this.
        drop(self.debug.take());
        // SAFETY: registered in init. After this returns no file is open (the module is
        // pinned while one is) and the client's remove has run for every device.
        unsafe { shim::krcore_shim_unregister() };
        device::Registry::unpublish();
        // The client's remove has emptied the registry; anything left is a bug.
        let left = self.registry.len();
        if left != 0 {
            pr_warn!("{} devices still tracked at exit\n", left);
        }
        pr_info!("unloaded\n");
    }
}
