// SPDX-License-Identifier: GPL-2.0
//! The registry of RDMA devices, fed by the ib_client's add and remove callbacks.
//!
//! The registry also keeps the per-user accounting of rings and polling threads.
//!
//! Locking: one mutex guards the list. A device pointer in the list is valid while the
//! mutex is held, because `remove` takes the mutex before the device can go away; so
//! every use of a device (the query today, device contexts later) happens under it.
//! The `users` mutex is a leaf: nothing else is taken while it is held (the order of
//! all locks is written in devctx.rs). Must not be called from an atomic context.

use core::ffi::{c_int, CStr};
use core::ptr;
use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

use crate::abi::cluster::auth::{Verdict, NONCE_LEN};
use crate::abi::device::{DeviceGid, DEVICE_NAME_LEN, GID_NONE};
use crate::abi::errno::Errno;
use crate::abi::cluster::accepted::Accepted;
use crate::abi::identity::{identify, Facts, Identity, Namespace};
use crate::abi::limits::{Limits, Resource, UserTable};
use crate::engine::devctx::DevCtx;
use crate::cluster::peer::PeerQp;
use crate::shim::{CmConn, IbQp};
use crate::engine::backend::PORT;
use crate::shim::{self, DevWatch, IbCq, IbDevice, IbPd, MetaOffer, PortAttr};

/// One tracked device.
///
/// # Invariants
/// `watch` was started on `ctx` and is stopped (on removal) before `ctx` is dropped.
struct Device {
    ib: *mut IbDevice,
    ctx: Arc<DevCtx>,
    watch: *mut DevWatch,
}

// SAFETY: the pointer is only dereferenced (by the shim) under the registry mutex, while
// the ib core guarantees the device outlives our client's `remove` for it.
unsafe impl Send for Device {}

/// The devices the module sees.
#[pin_data]
pub(crate) struct Registry {
    #[pin]
    devices: Mutex<KVec<Device>>,
    #[pin]
    users: Mutex<UserTable<USERS>>,
    /// Peer kernels' connections the listener holds, per source node (abi's
    /// `cluster::accepted`): a leaf, taken under cm.c's connection lock only.
    #[pin]
    pub(crate) accepted: Mutex<Accepted>,
}

/// Users that may hold rings at once (further ones get `EUSERS`).
pub(crate) const USERS: usize = 256;

/// One ring or polling thread charged to a caller's account, returned on drop.
pub(crate) struct UserCharge {
    /// Who the caller is (abi's `identity`): its permissions' uid and gid, and the
    /// account charged.
    who: Identity,
    what: Resource,
    /// The account's slot in the table (below [`USERS`]): its shares of each device
    /// are counted there while it holds this.
    slot: u32,
}

impl UserCharge {
    /// Who the caller was (abi's `identify`), when charged.
    pub(crate) fn identity(&self) -> Identity {
        self.who
    }

    /// The user's slot (see [`UserCharge::slot`]'s field).
    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }
}

impl Drop for UserCharge {
    fn drop(&mut self) {
        Registry::get().users.lock().uncharge(self.who.account, self.what);
    }
}

/// Who the current task is (abi's `identity` decides from the shim's facts).
pub(crate) fn current_identity() -> Identity {
    let mut f = shim::IdFacts::default();
    // SAFETY: a plain read of the current task's credentials into a local.
    unsafe { shim::krcore_shim_current_facts(&mut f) };
    identify(&Facts {
        uid: f.uid,
        gid: f.gid,
        ns: f.has_ns.then_some(Namespace {
            owner: f.ns_owner,
            group: f.ns_group,
            id: f.ns_id,
        }),
    })
}

/// The registry the C callbacks reach. Set in module init before the shim registers
/// anything, cleared in module exit after it has unregistered everything.
static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(ptr::null_mut());

impl Registry {
    /// An empty registry.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Registry {
            devices <- new_mutex!(KVec::new(), "krcore_devices"),
            users <- new_mutex!(UserTable::default(), "krcore_users"),
            accepted <- new_mutex!(Accepted::default(), "krcore_accepted"),
        })
    }

    /// Makes `reg` the registry that callbacks see.
    pub(crate) fn publish(reg: &Pin<KBox<Registry>>) {
        let p: *const Registry = &**reg;
        REGISTRY.store(p.cast_mut(), Ordering::Release);
    }

    /// Forgets the published registry (the module is going away).
    pub(crate) fn unpublish() {
        REGISTRY.store(ptr::null_mut(), Ordering::Release);
    }

    /// The published registry.
    pub(crate) fn get() -> &'static Registry {
        let p = REGISTRY.load(Ordering::Acquire);
        // SAFETY: callbacks and file operations run only between publish and unpublish
        // (the shim is registered inside that window and the module cannot unload while
        // a file is open), and the registry lives in the module struct for that window.
        unsafe { &*p }
    }

    /// Charges one `what` to the calling user, within the module parameters' limits:
    /// `EDQUOT` past them.
    pub(crate) fn charge(&self, what: Resource) -> Result<UserCharge> {
        let who = current_identity();
        // SAFETY: plain reads of module parameters.
        let limits = unsafe {
            Limits {
                rings: shim::krcore_shim_max_rings_per_user(),
                pollers: shim::krcore_shim_max_sqpoll_per_user(),
            }
        };
        let slot = self.users.lock().charge(who.account, what, limits)? as u32;
        Ok(UserCharge { who, what, slot })
    }

    /// The context a ring binds to, with the device's index and the port served: the
    /// device of index `dev_index`, or the first device when `None`. `ENODEV` when there
    /// is no such device; `EINVAL` when `port` is neither 0 nor the port the module
    /// serves on every device (`backend::PORT`).
    pub(crate) fn choose(
        &self,
        dev_index: Option<u32>,
        port: u32,
    ) -> Result<(Arc<DevCtx>, u32, u32)> {
        if port != 0 && port != PORT {
            return Err(EINVAL);
        }
        let devices = self.devices.lock();
        // SAFETY: `d.ib` is valid under the registry mutex (see the module doc).
        let index_of = |d: &Device| unsafe { shim::krcore_shim_dev_index(d.ib) };
        let d = match dev_index {
            Some(i) => devices.iter().find(|d| index_of(d) == i),
            None => devices.first(),
        }
        .ok_or(ENODEV)?;
        Ok((d.ctx.clone(), index_of(d), PORT))
    }

    /// Calls `f` with each device's name and context, under the registry's lock (its
    /// place in the lock order is before everything a device's own locks guard).
    /// Stops at the first error.
    pub(crate) fn for_each_dev(
        &self,
        mut f: impl FnMut(&CStr, &Arc<DevCtx>) -> core::fmt::Result,
    ) -> core::fmt::Result {
        let devices = self.devices.lock();
        for d in devices.iter() {
            // SAFETY: `d.ib` is valid under the registry mutex (see the module doc); the
            // name is a NUL-terminated string owned by the device.
            let name = unsafe { CStr::from_ptr(shim::krcore_shim_dev_name(d.ib)) };
            f(name, &d.ctx)?;
        }
        Ok(())
    }

    /// Number of devices tracked.
    pub(crate) fn len(&self) -> usize {
        self.devices.lock().len()
    }

    /// Calls `emit` with one row per (device, port, valid GID), and a `GID_NONE` row for
    /// a port without any valid GID. Stops at the first error `emit` returns.
    pub(crate) fn for_each_row(&self, mut emit: impl FnMut(&DeviceGid) -> Result) -> Result {
        let devices = self.devices.lock();
        for dev in devices.iter() {
            let mut row = DeviceGid::ZERO;
            // SAFETY: `dev.ib` is valid under the registry mutex (see the module doc);
            // the name is a NUL-terminated string owned by the device.
            let name = unsafe { CStr::from_ptr(shim::krcore_shim_dev_name(dev.ib)) }.to_bytes();
            let n = name.len().min(DEVICE_NAME_LEN - 1);
            row.name[..n].copy_from_slice(&name[..n]);
            // SAFETY: as above, for each shim call on `dev.ib`.
            let (first, last) = unsafe {
                row.dev_index = shim::krcore_shim_dev_index(dev.ib);
                (
                    shim::krcore_shim_first_port(dev.ib),
                    shim::krcore_shim_last_port(dev.ib),
                )
            };
            for port in first..=last {
                let mut attr = PortAttr::default();
                // SAFETY: as above; `attr` is a valid out pointer.
                if unsafe { shim::krcore_shim_query_port(dev.ib, port, &mut attr) } != 0 {
                    continue;
                }
                row.port = port;
                row.port_state = attr.state as u8;
                row.link_layer = attr.link_layer as u8;
                row.active_mtu = attr.active_mtu;
                let mut any = false;
                for index in 0..attr.gid_tbl_len {
                    let mut ty = 0u32;
                    // SAFETY: as above; `row.gid` is 16 writable bytes.
                    let ret = unsafe {
                        shim::krcore_shim_query_gid(
                            dev.ib,
                            port,
                            index,
                            row.gid.as_mut_ptr(),
                            &mut ty,
                        )
                    };
                    if ret == 0 {
                        row.gid_index = index;
                        row.gid_type = ty as u8;
                        emit(&row)?;
                        any = true;
                    }
                }
                if !any {
                    row.gid_index = GID_NONE;
                    row.gid_type = 0;
                    row.gid = [0; 16];
                    emit(&row)?;
                }
            }
        }
        Ok(())
    }
}

/// ib_client `add`: start tracking `dev`.
#[no_mangle]
extern "C" fn krcore_rs_dev_add(dev: *mut IbDevice) -> c_int {
    let ctx = match DevCtx::new(dev) {
        Ok(c) => c,
        Err(e) => return e.to_errno(),
    };
    let ctx_ptr: *const DevCtx = &*ctx;
    // SAFETY: `dev` is live; the context outlives the watch (Device invariant).
    let watch = unsafe { shim::krcore_shim_devwatch_start(dev, ctx_ptr.cast_mut().cast()) };
    // SAFETY: pointer inspection only.
    let err = unsafe { shim::krcore_shim_ptr_err(watch.cast()) };
    if err != 0 {
        ctx.remove();
        return err as c_int;
    }
    let mut devices = Registry::get().devices.lock();
    match devices.push(
        Device {
            ib: dev,
            ctx: ctx.clone(),
            watch,
        },
        GFP_KERNEL,
    ) {
        Ok(()) => 0,
        Err(_) => {
            drop(devices);
            // SAFETY: started above, stopped once.
            unsafe { shim::krcore_shim_devwatch_stop(watch) };
            ctx.remove();
            ENOMEM.to_errno()
        }
    }
}

/// ib_client `remove`: stop tracking `dev`; it is freed after this returns.
#[no_mangle]
extern "C" fn krcore_rs_dev_remove(dev: *mut IbDevice) {
    // Out of the list under the registry's lock, torn down after it: the teardown takes
    // the MetaServer connection's mutex, which nothing of krcore's may be held around
    // (devctx.rs's lock order). Under the registry's lock it closed a cycle lockdep
    // reported: cm.c's listener takes the registry's lock inside rdma_cm's handler
    // mutex, and the MetaServer connection's mutex is held across destroying an id.
    let gone = {
        let mut devices = Registry::get().devices.lock();
        let Some(i) = devices.iter().position(|d| d.ib == dev) else {
            return;
        };
        let last = devices.len() - 1;
        devices.as_mut_slice().swap(i, last);
        // The last element moves into its place.
        crate::kcompat::pop(&mut devices).expect("a device was found")
    };
    // SAFETY: started in add (invariant), stopped once, before the context goes.
    unsafe { shim::krcore_shim_devwatch_stop(gone.watch) };
    gone.ctx.remove();
}

/// The context of device `dev`, if it has one (the registry's lock taken and let go).
fn context_of(dev: *mut IbDevice) -> Option<Arc<DevCtx>> {
    let devices = Registry::get().devices.lock();
    devices.iter().find(|d| d.ib == dev).map(|d| d.ctx.clone())
}

/// rdma_cm's listener got a peer kernel's connection request on `dev` (cm.c): the PD
/// and CQ of its device context, pinned until [`krcore_rs_cm_unpin`] of the returned
/// pin; null when there is no context or it is going.
#[no_mangle]
extern "C" fn krcore_rs_cm_resources(
    dev: *mut IbDevice,
    pd: *mut *mut IbPd,
    cq: *mut *mut IbCq,
    offer: *mut MetaOffer,
) -> *const DevCtx {
    let Some(ctx) = context_of(dev) else {
        return ptr::null();
    };
    match ctx.door.pin() {
        Some((p, c)) => {
            // SAFETY: the caller passes three writable pointers.
            unsafe {
                *pd = p;
                *cq = c;
                *offer = ctx.meta.offer();
            }
            Arc::into_raw(ctx)
        }
        None => ptr::null(),
    }
}

/// A member's SEND to the MetaServer `dev` serves closed a key of this node (meta.c,
/// on the serving connection's CQ workqueue, nothing held): the region is checked.
#[no_mangle]
extern "C" fn krcore_rs_meta_invalidated(dev: *mut IbDevice) {
    let Some(ctx) = context_of(dev) else {
        return;
    };
    // The device's removal tears down every serving connection, and waits for reaps
    // in flight (cm.c), before it stops the network work: this kick comes before.
    ctx.meta.invalidated(&ctx.events);
}

/// A member's request to the MetaServer `dev` serves (meta.c, on its serving
/// connection's CQ workqueue, nothing held): `len` bytes at `req` from the member at
/// `from` (network order), answered in `reply` (`META_REPLY_LEN` bytes). 0, or
/// `-ENODEV` when `dev` serves no region (nothing goes back).
#[no_mangle]
extern "C" fn krcore_rs_meta_serve(
    dev: *mut IbDevice,
    from: u32,
    req: *const u8,
    len: u32,
    reply: *mut u8,
) -> c_int {
    let Some(ctx) = context_of(dev) else {
        return ENODEV.to_errno();
    };
    // SAFETY: meta.c passes `len` readable bytes (at most its request room) and a
    // reply buffer of META_REPLY_LEN bytes, both its own.
    let (req, reply) = unsafe {
        (
            core::slice::from_raw_parts(req, len as usize),
            &mut *reply.cast::<[u8; crate::shim::META_REPLY_LEN]>(),
        )
    };
    match ctx.meta.serve(from.to_ne_bytes(), req, reply) {
        true => 0,
        false => ENODEV.to_errno(),
    }
}

/// A peer kernel at `gid` asks for connection `index` of a set (cm.c's listener, with
/// a pin from [`krcore_rs_cm_resources`]): 0 to accept it, a negative errno to refuse
/// it (`-EALREADY`: our own attempt wins).
#[no_mangle]
extern "C" fn krcore_rs_cm_peer_request(pin: *const DevCtx, gid: *const u8, index: u8) -> c_int {
    // SAFETY: a live pin (the caller holds it); `gid` points at 16 bytes.
    let (ctx, gid) = unsafe { (&*pin, &*gid.cast::<[u8; 16]>()) };
    match ctx.net().cm_request(gid, index as u32) {
        Ok(()) => 0,
        Err(e) => e.to_neg(),
    }
}

/// The connection accepted for that request: adopted into the set when it still wants
/// it (cm.c's listener, with the pin); whether it was (cm.c closes it otherwise).
#[no_mangle]
extern "C" fn krcore_rs_cm_adopt(
    pin: *const DevCtx,
    conn: *mut CmConn,
    qp: *mut IbQp,
    qpn: u32,
    gid: *const u8,
    index: u8,
) -> bool {
    // SAFETY: a live pin (the caller holds it); `gid` points at 16 bytes.
    let (ctx, gid) = unsafe { (&*pin, &*gid.cast::<[u8; 16]>()) };
    ctx.net().cm_adopt(gid, index as u32, PeerQp { conn, qp, qpn })
}

/// A peer kernel's hello from IPv4 address `from` (network order), on the listener
/// with a pin: the challenge to answer it with, written to `nonce` (NONCE_LEN bytes).
#[no_mangle]
extern "C" fn krcore_rs_cm_challenge(pin: *const DevCtx, from: u32, nonce: *mut u8) {
    // SAFETY: a live pin (the caller holds it); `nonce` points at NONCE_LEN writable
    // bytes.
    let (ctx, nonce) = unsafe { (&*pin, &mut *nonce.cast::<[u8; NONCE_LEN]>()) };
    *nonce = ctx.door.challenge(from);
}

/// A proof from `from` to `to` (IPv4, network order), FRESH (`fresh`) or answering the
/// challenge `nonce_r`, its tag found good (`tag_good`) or not by cm.c, with a pin: 0
/// when it is admitted, `-ESTALE` when it is answered with a challenge instead, `-EPERM`
/// when it is refused (abi's `Gate::judge`). `nonce_i` and `nonce_r` point at NONCE_LEN
/// bytes each.
#[no_mangle]
extern "C" fn krcore_rs_cm_judge(
    pin: *const DevCtx,
    fresh: bool,
    tag_good: bool,
    from: u32,
    to: u32,
    nonce_i: *const u8,
    nonce_r: *const u8,
) -> c_int {
    // SAFETY: a live pin (the caller holds it); both nonces point at NONCE_LEN bytes.
    let (ctx, nonce_i, nonce_r) = unsafe {
        (
            &*pin,
            &*nonce_i.cast::<[u8; NONCE_LEN]>(),
            &*nonce_r.cast::<[u8; NONCE_LEN]>(),
        )
    };
    match ctx.door.judge(fresh, tag_good, from, to, ctx.pool_gid(), nonce_i, nonce_r) {
        Verdict::Admit => 0,
        Verdict::Challenge => Errno::ESTALE.to_neg(),
        Verdict::Refuse => Errno::EPERM.to_neg(),
    }
}

/// cm.c is about to tear `dev`'s connections down (its removal): its CQ is polled no
/// more.
#[no_mangle]
extern "C" fn krcore_rs_dev_quiesce(dev: *mut IbDevice) {
    if let Some(ctx) = context_of(dev) {
        ctx.quiesce();
    }
}

/// Ends a pin [`krcore_rs_cm_resources`] returned.
#[no_mangle]
extern "C" fn krcore_rs_cm_unpin(pin: *const DevCtx) {
    // SAFETY: `pin` came from `Arc::into_raw` in krcore_rs_cm_resources, once.
    let ctx = unsafe { Arc::from_raw(pin) };
    ctx.door.unpin();
}
