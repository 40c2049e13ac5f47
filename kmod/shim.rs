// SPDX-License-Identifier: GPL-2.0
//! The C shim's functions as Rust sees them (declared in shim.h).

use core::ffi::{c_char, c_int, c_void};

/// Asserts a struct shim.h also declares has the size and field offsets given: the
/// same numbers as shim.h's `KRCORE_LAYOUT_SIZE` and `KRCORE_LAYOUT_AT` there, so a
/// field moved on one side fails that side's build.
macro_rules! layout {
    ($t:ty, $size:expr; $($field:ident $off:expr),* $(,)?) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $size);
        $(const _: () = assert!(core::mem::offset_of!($t, $field) == $off);)*
    };
}
pub(crate) use layout;

/// `enum krcore_wr_kind`.
pub(crate) const WR_READ: u8 = 1;
pub(crate) const WR_WRITE: u8 = 2;
pub(crate) const WR_SEND: u8 = 3;
pub(crate) const WR_CAS: u8 = 4;
pub(crate) const WR_FAA: u8 = 5;
pub(crate) const WR_NOTICE: u8 = 6;
pub(crate) const WR_DELIVER: u8 = 7;

/// `struct krcore_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct SendWrC {
    pub(crate) wr_id: u64,
    pub(crate) local_addr: u64,
    pub(crate) remote_addr: u64,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) imm: u32,
    pub(crate) kind: u8,
    pub(crate) has_imm: u8,
    pub(crate) signaled: u8,
    pub(crate) fence: u8,
    pub(crate) solicited: u8,
    pub(crate) pad: [u8; 3],
    pub(crate) notice: [u8; 32],
    pub(crate) mr: u64,
    pub(crate) inv: u32,
    pub(crate) pad2: u32,
}
layout!(
    SendWrC, 112;
    wr_id 0, local_addr 8, remote_addr 16, compare_add 24, swap 32, length 40, lkey 44, rkey 48,
    imm 52, kind 56, has_imm 57, signaled 58, fence 59, solicited 60, pad 61, notice 64, mr 96,
    inv 104, pad2 108,
);

/// `struct krcore_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct WcC {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(crate) byte_len: u32,
    pub(crate) imm: u32,
    pub(crate) has_imm: u32,
    pub(crate) qp_num: u32,
    pub(crate) recv: u32,
    pub(crate) has_inv: u32,
    pub(crate) inv_rkey: u32,
}
layout!(
    WcC, 40;
    wr_id 0, status 8, byte_len 12, imm 16, has_imm 20, qp_num 24, recv 28, has_inv 32,
    inv_rkey 36,
);

/// C types Rust only ever holds pointers to.
macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            pub(crate) struct $name {
                _opaque: [u8; 0],
            }
        )*
    };
}

opaque! {
    /// An RDMA device (`struct ib_device`), opaque to Rust.
    IbDevice;
    /// A VMA (`struct vm_area_struct`), opaque to Rust.
    Vma;
    /// `struct ib_pd`, opaque.
    IbPd;
    /// `struct ib_cq`, opaque.
    IbCq;
    /// `struct ib_qp`, opaque.
    IbQp;
    /// `struct krcore_cm_conn` (cm.c), opaque.
    CmConn;
    /// `struct krcore_meta_region` (meta.c), opaque.
    MetaRegion;
    /// `struct krcore_meta_conn` (meta.c), opaque.
    MetaConn;
    /// `struct krcore_mr` (engine/fastreg.c), opaque.
    KrMr;
    /// `struct krcore_keys` (engine/fastreg.c), opaque.
    Keys;
    /// `struct krcore_scratch`, opaque.
    Scratch;
    /// `struct krcore_poller`, opaque.
    PollerC;
    /// `struct eventfd_ctx`, opaque.
    EventfdCtx;
    /// `struct krcore_devwatch`, opaque.
    DevWatch;
    /// `struct krcore_cqnotify`, opaque.
    CqNotify;
    /// `struct krcore_waitq`, opaque.
    WaitQ;
    /// `struct mm_struct`, opaque: only compared and reference-counted.
    MmStruct;
    /// `struct file`, opaque: passed back to the poll helper.
    FileC;
    /// `struct poll_table_struct`, opaque.
    PollTable;
}

/// `struct krcore_id_facts` (shim.h): what the current task's credentials say.
#[repr(C)]
#[derive(Default)]
pub(crate) struct IdFacts {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) ns_owner: u32,
    pub(crate) ns_group: u32,
    pub(crate) ns_id: u32,
    pub(crate) has_ns: bool,
}
layout!(IdFacts, 24; uid 0, gid 4, ns_owner 8, ns_group 12, ns_id 16, has_ns 20);

/// `struct krcore_port_attr`.
#[repr(C)]
#[derive(Default)]
pub(crate) struct PortAttr {
    pub(crate) state: u32,
    pub(crate) active_mtu: u32,
    pub(crate) gid_tbl_len: u32,
    pub(crate) link_layer: u32,
}
layout!(PortAttr, 16; state 0, active_mtu 4, gid_tbl_len 8, link_layer 12);

/// `struct krcore_meta_offer` (shim.h): where a MetaServer's region is.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MetaOffer {
    pub(crate) base: u64,
    pub(crate) rkey: u32,
    pub(crate) node_slots: u32,
    pub(crate) export_slots: u32,
    pub(crate) ready: u8,
    pub(crate) resv: [u8; 3],
}
layout!(MetaOffer, 24; base 0, rkey 8, node_slots 12, export_slots 16, ready 20, resv 21);

/// `KRCORE_CM_PEER` (shim.h): a connection set's QP (meta.c makes the META ones).
pub(crate) const CM_PEER: u8 = 1;
/// `KRCORE_META_BUF` (shim.h): the bounce buffer's bytes.
pub(crate) const META_BUF: usize = 1024;
/// `KRCORE_META_REPLY_OFF` (shim.h): where in the bounce buffer a request's reply lands
/// (the request goes from its start).
pub(crate) const META_REPLY_OFF: usize = 512;
/// `KRCORE_META_REPLY_LEN` (shim.h): a reply's bytes.
pub(crate) const META_REPLY_LEN: usize = 16;

extern "C" {
    pub(crate) fn krcore_shim_ptr_err(p: *const c_void) -> core::ffi::c_long;
    pub(crate) fn krcore_shim_alloc_pd(dev: *mut IbDevice) -> *mut IbPd;
    pub(crate) fn krcore_shim_dealloc_pd(pd: *mut IbPd);
    pub(crate) fn krcore_shim_cqnotify_alloc() -> *mut CqNotify;
    pub(crate) fn krcore_shim_cqnotify_set(n: *mut CqNotify, ctx: *mut c_void);
    pub(crate) fn krcore_shim_cqnotify_free(n: *mut CqNotify);
    pub(crate) fn krcore_shim_net_kick(n: *mut CqNotify);
    pub(crate) fn krcore_shim_cq_kick(n: *mut CqNotify);
    pub(crate) fn krcore_shim_max_cqe(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_alloc_cq(
        dev: *mut IbDevice,
        nr_cqe: c_int,
        n: *mut CqNotify,
    ) -> *mut IbCq;
    pub(crate) fn krcore_shim_free_cq(cq: *mut IbCq);
    pub(crate) fn krcore_shim_cq_arm(cq: *mut IbCq) -> c_int;
    pub(crate) fn krcore_shim_waitq_alloc() -> *mut WaitQ;
    pub(crate) fn krcore_shim_waitq_free(w: *mut WaitQ);
    pub(crate) fn krcore_shim_waitq_gen(w: *mut WaitQ) -> u32;
    pub(crate) fn krcore_shim_waitq_wake(w: *mut WaitQ);
    pub(crate) fn krcore_shim_waitq_sleep(w: *mut WaitQ, seen: u32, timeout_us: u32) -> c_int;
    pub(crate) fn krcore_shim_waitq_poll_wait(w: *mut WaitQ, f: *mut FileC, pt: *mut PollTable);
    pub(crate) fn krcore_shim_wait_spin_us() -> u32;
    pub(crate) fn krcore_shim_create_rc_qp(
        pd: *mut IbPd,
        cq: *mut IbCq,
        send_depth: u32,
        recv_depth: u32,
    ) -> *mut IbQp;
    pub(crate) fn krcore_shim_qp_num(qp: *mut IbQp) -> u32;
    pub(crate) fn krcore_shim_gid_mac(
        dev: *mut IbDevice,
        port: u32,
        index: u32,
        mac: *mut u8,
    ) -> c_int;
    pub(crate) fn krcore_shim_connect_rc_qp(
        qp: *mut IbQp,
        port: u32,
        sgid_index: u32,
        dgid: *const u8,
        dmac: *const u8,
        dqpn: u32,
    ) -> c_int;
    pub(crate) fn krcore_shim_qp_to_error(qp: *mut IbQp) -> c_int;
    pub(crate) fn krcore_shim_qp_reset(qp: *mut IbQp) -> c_int;
    pub(crate) fn krcore_shim_post_marker(qp: *mut IbQp, wr_id: u64) -> c_int;
    pub(crate) fn krcore_shim_destroy_qp(qp: *mut IbQp);
    pub(crate) fn krcore_shim_scratch_alloc() -> *mut Scratch;
    pub(crate) fn krcore_shim_scratch_free(s: *mut Scratch);
    pub(crate) fn krcore_shim_post_send(
        s: *mut Scratch,
        qp: *mut IbQp,
        wrs: *const SendWrC,
        n: u32,
        posted: *mut u32,
    ) -> c_int;
    pub(crate) fn krcore_shim_poll_cq(
        s: *mut Scratch,
        cq: *mut IbCq,
        out: *mut WcC,
        n: c_int,
    ) -> c_int;
    pub(crate) fn krcore_shim_reg_user_mr(
        pd: *mut IbPd,
        addr: u64,
        len: u64,
        access: u32,
    ) -> *mut KrMr;
    pub(crate) fn krcore_shim_mr_lkey(mr: *mut KrMr) -> u32;
    pub(crate) fn krcore_shim_mr_rkey(mr: *mut KrMr) -> u32;
    pub(crate) fn krcore_shim_dereg_mr(mr: *mut KrMr) -> c_int;
    pub(crate) fn krcore_keys_alloc(pd: *mut IbPd, n: u32) -> *mut Keys;
    pub(crate) fn krcore_keys_drain(p: *mut Keys);
    pub(crate) fn krcore_keys_free(p: *mut Keys);
    pub(crate) fn krcore_keys_local(
        p: *mut Keys,
        port: u32,
        sgid_index: u32,
        gid: *const u8,
        mac: *const u8,
    ) -> c_int;
    pub(crate) fn krcore_key_post(
        p: *mut Keys,
        i: u32,
        mr: *mut KrMr,
        addr: u64,
        len: u32,
        rkey: *mut u32,
        lost: *mut bool,
    ) -> c_int;
    pub(crate) fn krcore_key_let(p: *mut Keys, i: u32, remake: bool) -> bool;
    pub(crate) fn krcore_shim_test_unchecked_wire(addr: *mut u64, rkey: *mut u32) -> bool;
    pub(crate) fn krcore_shim_cond_resched();
    pub(crate) fn krcore_shim_devwatch_start(dev: *mut IbDevice, ctx: *mut c_void)
        -> *mut DevWatch;
    pub(crate) fn krcore_shim_devwatch_stop(w: *mut DevWatch);
    pub(crate) fn krcore_shim_prewarm_enabled() -> bool;
    pub(crate) fn krcore_shim_cm_peer_gid(gid: *mut u8) -> c_int;
    pub(crate) fn krcore_shim_cm_port() -> u16;
    pub(crate) fn krcore_shim_cm_dial_delay_ms() -> u32;
    pub(crate) fn krcore_shim_test_hold_meta_ms() -> u32;
    pub(crate) fn krcore_shim_test_notice_echo() -> bool;
    pub(crate) fn krcore_shim_cm_connect(
        dev: *mut IbDevice,
        pd: *mut IbPd,
        cq: *mut IbCq,
        src_gid: *const u8,
        dst_gid: *const u8,
        timeout_ms: u32,
        kind: u8,
        index: u8,
        out: *mut *mut CmConn,
        qp: *mut *mut IbQp,
        qpn: *mut u32,
    ) -> c_int;
    pub(crate) fn krcore_shim_cm_broken(c: *mut CmConn) -> bool;
    pub(crate) fn krcore_shim_cm_farewell_tag(c: *mut CmConn, tag: *mut u8) -> c_int;
    pub(crate) fn krcore_shim_cm_farewell(c: *mut CmConn, tag: *const u8) -> bool;
    pub(crate) fn krcore_shim_cm_close_later(c: *mut CmConn);
    pub(crate) fn krcore_shim_cm_put(c: *mut CmConn);
    pub(crate) fn krcore_cm_own(c: *mut CmConn) -> bool;
    pub(crate) fn krcore_cm_notices_start(c: *mut CmConn);
    pub(crate) fn krcore_cm_drain(c: *mut CmConn, send_id: u64, recv_id: u64) -> c_int;
    pub(crate) fn krcore_cm_take_notice(c: *mut CmConn, i: u32, out: *mut u8) -> c_int;
    pub(crate) fn krcore_cm_name_key(out: *mut u8);
    pub(crate) fn krcore_shim_meta_server_gid(gid: *mut u8) -> c_int;
    pub(crate) fn krcore_shim_meta_region_alloc(pd: *mut IbPd, bytes: u32) -> *mut MetaRegion;
    pub(crate) fn krcore_shim_meta_region_offer(r: *mut MetaRegion, o: *mut MetaOffer);
    pub(crate) fn krcore_shim_meta_region_free(r: *mut MetaRegion);
    pub(crate) fn krcore_shim_meta_open(
        dev: *mut IbDevice,
        pd: *mut IbPd,
        src_gid: *const u8,
        dst_gid: *const u8,
        timeout_ms: u32,
        out: *mut *mut MetaConn,
        offer: *mut MetaOffer,
    ) -> c_int;
    pub(crate) fn krcore_shim_meta_region_register(r: *mut MetaRegion, m: *mut MetaConn) -> c_int;
    pub(crate) fn krcore_shim_meta_read(m: *mut MetaConn, off: u64, len: u32) -> c_int;
    pub(crate) fn krcore_shim_meta_call(m: *mut MetaConn, len: u32) -> c_int;
    pub(crate) fn krcore_shim_meta_region_va(r: *mut MetaRegion) -> *mut u8;
    pub(crate) fn krcore_shim_meta_region_wrote(r: *mut MetaRegion, off: u64, len: u32);
    pub(crate) fn krcore_shim_meta_region_rekey(r: *mut MetaRegion, m: *mut MetaConn) -> c_int;
    pub(crate) fn krcore_shim_meta_buf(m: *mut MetaConn) -> *mut u8;
    pub(crate) fn krcore_shim_meta_broken(m: *mut MetaConn) -> bool;
    pub(crate) fn krcore_shim_meta_close(m: *mut MetaConn);
    pub(crate) fn krcore_shim_bench_direct_enabled() -> bool;
    pub(crate) fn krcore_shim_eventfd_get(fd: c_int) -> *mut EventfdCtx;
    pub(crate) fn krcore_shim_eventfd_signal(ctx: *mut EventfdCtx);
    pub(crate) fn krcore_shim_uring_complete(cmd: *mut c_void, res: i32, extra: u64);
    pub(crate) fn krcore_shim_eventfd_put(ctx: *mut EventfdCtx);
    pub(crate) fn krcore_shim_poller_start(ctx: *mut c_void) -> *mut PollerC;
    pub(crate) fn krcore_shim_poller_wake(p: *mut PollerC);
    pub(crate) fn krcore_shim_poller_stop(p: *mut PollerC);
    pub(crate) fn krcore_shim_mm_grab_current() -> *mut MmStruct;
    pub(crate) fn krcore_shim_mm_is_current(mm: *mut MmStruct) -> bool;
    pub(crate) fn krcore_shim_mm_drop(mm: *mut MmStruct);
    pub(crate) fn krcore_shim_random_u64() -> u64;
    pub(crate) fn krcore_shim_coarse_ms() -> i64;
    pub(crate) fn krcore_shim_usleep(us: u32);
    pub(crate) fn krcore_shim_wall_ms() -> i64;
    pub(crate) fn krcore_shim_max_rings_per_user() -> u32;
    /// The module parameter bounding one user's share `share` (abi's `Share` index).
    pub(crate) fn krcore_shim_max_share(share: u32) -> u32;
    pub(crate) fn krcore_shim_max_sqpoll_per_user() -> u32;
    pub(crate) fn krcore_shim_max_sq_idle_ms() -> u32;
    pub(crate) fn krcore_shim_request_timeout_ms() -> u32;
    pub(crate) fn krcore_shim_current_facts(f: *mut IdFacts);
    pub(crate) fn krcore_shim_max_peers() -> u32;
    pub(crate) fn krcore_shim_max_names(per_node: bool) -> u32;
    pub(crate) fn krcore_shim_current_groups(out: *mut u32, max: u32) -> u32;
    /// Whether the current task holds `CAP_NET_BIND_SERVICE`.
    pub(crate) fn krcore_shim_may_bind_low() -> bool;
    pub(crate) fn krcore_shim_fatal_signal_pending() -> bool;
    pub(crate) fn krcore_shim_msleep(ms: u32);
    pub(crate) fn krcore_shim_ring_alloc(size: usize) -> *mut c_void;
    pub(crate) fn krcore_shim_ring_free(mem: *mut c_void);
    pub(crate) fn krcore_shim_ring_mmap(vma: *mut Vma, mem: *mut c_void, size: usize) -> c_int;
    pub(crate) fn krcore_shim_register() -> c_int;
    pub(crate) fn krcore_shim_dbg_connect(
        ring: u16,
        gid: *const u8,
        service: u32,
        res: i32,
        why: *const u8,
        why_len: c_int,
    );
    pub(crate) fn krcore_shim_dbg_failure(
        ring: u16,
        user_data: u64,
        res: i32,
        why: *const u8,
        why_len: c_int,
    );
    pub(crate) fn krcore_shim_dbg_recovery(qp: u32, total: u64);
    pub(crate) fn krcore_shim_unregister();
    pub(crate) fn krcore_shim_debugfs_add(names: *const *const c_char, n: core::ffi::c_uint);
    pub(crate) fn krcore_shim_debugfs_remove();
    pub(crate) fn krcore_shim_dev_name(dev: *mut IbDevice) -> *const c_char;
    pub(crate) fn krcore_shim_dev_index(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_first_port(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_last_port(dev: *mut IbDevice) -> u32;
    pub(crate) fn krcore_shim_query_port(
        dev: *mut IbDevice,
        port: u32,
        out: *mut PortAttr,
    ) -> c_int;
    pub(crate) fn krcore_shim_query_gid(
        dev: *mut IbDevice,
        port: u32,
        index: u32,
        gid: *mut u8,
        gid_type: *mut u32,
    ) -> c_int;
}
