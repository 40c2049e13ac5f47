// SPDX-License-Identifier: GPL-2.0
//! The engine's [`Backend`] over kernel verbs: one device's PD, CQ and pool of
//! connected RC QPs.
//!
//! The pool is [`POOL_QPS`] QPs in pairs connected to each other over the device's own
//! RoCE GID (loopback: the peer a CONNECT names must be this device's GID; reaching
//! other nodes needs the MetaServer, not built yet). It is built as soon as the device
//! has a RoCE v2 IPv4 GID (devctx's watch; the `prewarm` module parameter), so no
//! application pays for it, and otherwise by the first CONNECT (the cold path). The link's port key
//! (abi's `port_key`) picks a pair, modulo the pairs; a CONNECT that opens a link (abi's engine/message.rs) takes
//! the pair's ends in turn, and the CONNECT that completes the link takes the QP
//! connected to the opener's. Many virtual QPs share each pooled QP.
//!
//! A pooled QP that fails (a request completed in error: a bad rkey, say) is recovered
//! with its partner, as abi's engine/recovery.rs decides; this backend only moves QPs to
//! the error state behind a flush marker and resets and reconnects a pair ([`Rearm`]).

use core::ffi::c_void;

use kernel::prelude::*;

use crate::abi::cluster::notice::{Notice, NOTICE_LEN};
use crate::abi::engine::{
    Connection, MrKeys, Post, PostError, Rearm, SendKind, SendWr,
    CHAIN, FAR_WRITE_WR_ID, NOTICE_RECVS, NOTICE_ROOM, NOTICE_WR_ID,
};
use crate::abi::errno::Errno;
use crate::abi::sqe::{MrAccess, SqeFlags};
use crate::engine::keys::AdvertKeys;
use crate::shim::{self, CqNotify, IbCq, IbDevice, IbPd, IbQp, KrMr, Scratch, SendWrC};

pub(crate) use crate::abi::engine::qp_budget::{POOL_QPS, QPS};
/// Send queue depth of a pooled QP.
pub(crate) const SEND_DEPTH: u32 = 64;
// shim.h's KRCORE_FR_WR_ID: the key's own requests, and the WRITE inside a message's
// chain, dropped when flushed as a message's WRITE is.
const _: () = assert!(FAR_WRITE_WR_ID == u64::MAX - 0x4000_0001);
/// Receive queue depth of a pooled QP: the engine posts no receives (a message is
/// written into its receiver's buffer, abi's engine/message.rs), but a QP has a queue.
const RECV_DEPTH: u32 = 1;
/// CQ entries: room for every request the pool and the peer sets can have outstanding
/// (a peer QP has the pool's depths: cm.c creates it so).
/// A set's QP may flush every work request it holds (a message to another node is two)
/// and every notice receive (cm.c's sizes).
const SET_CQES: u32 = 2 * SEND_DEPTH + NOTICE_ROOM + NOTICE_RECVS;
/// A pool QP flushes a message as its three work requests (fastreg.c), and a marker.
const POOL_CQES: u32 = POOL_QPS as u32 * (3 * SEND_DEPTH + 1 + RECV_DEPTH);
/// CQ entries for the pool and `peers` sets.
fn cq_depth(peers: usize) -> i32 {
    let sets = (peers * crate::cluster::peer::QPS_PER_SET) as u32;
    (POOL_CQES + sets * SET_CQES) as i32
}

/// Peer sets device `ib` keeps: the `max_peers` parameter, or as many as its CQ can
/// hold if fewer (soft-RoCE's CQs hold 32,768 entries: 76 sets), said in the log.
pub(crate) fn peer_sets(ib: *mut IbDevice) -> usize {
    let want = crate::cluster::peer::max_peers();
    // SAFETY: `ib` is a live device (ib_client add).
    let max_cqe = unsafe { shim::krcore_shim_max_cqe(ib) };
    let per_set = crate::cluster::peer::QPS_PER_SET as u32 * SET_CQES;
    let fit = (max_cqe.saturating_sub(POOL_CQES) / per_set).max(1) as usize;
    if fit < want {
        pr_info!("max_peers={want} needs more CQ entries than the device has ({max_cqe}): it keeps {fit} peer sets\n");
    }
    want.min(fit)
}
/// GID table entries searched for the local RoCE v2 GID.
const GID_SEARCH: u32 = 16;
/// The port krcore serves on every device (its pool's GIDs are this port's).
pub(crate) const PORT: u32 = 1;


/// Errno of an ERR_PTR-encoded pointer, or `None` for a real one.
fn ptr_err<T>(p: *mut T) -> Option<Errno> {
    // SAFETY: the shim only inspects the pointer value.
    let e = unsafe { shim::krcore_shim_ptr_err(p.cast::<c_void>()) };
    (e != 0).then_some(Errno(-e as i32))
}

/// A pooled QP.
struct PoolQp {
    qp: *mut IbQp,
    qpn: u32,
}

/// One device's verbs objects.
///
/// # Invariants
/// `ib` is valid until [`Hw::destroy`] (the ib_client's remove calls it first); `pd`
/// and `cq` were allocated for it and are released only by `destroy`.
pub(crate) struct Hw {
    ib: *mut IbDevice,
    pd: *mut IbPd,
    cq: *mut IbCq,
    /// The keys of receives advertised to peer kernels (engine/keys.rs): drained at
    /// [`destroy`](Self::destroy), freed with the Hw.
    advert_keys: Pin<KBox<AdvertKeys>>,
    pool: KVec<PoolQp>,
    /// The GID the pool is connected over, its index and its netdev's MAC.
    pool_gid: [u8; 16],
    sgid_index: u32,
    mac: [u8; 6],
    /// Which end of each pair the next CONNECT gets, one bit per pair.
    next_end: u64,
    dead: bool,
}

// SAFETY: the verbs objects are used only under the device's membership mutex (the CQ
// also by its poller, under the CQ mutex, until the removal, which stops it first).
unsafe impl Send for Hw {}

impl Hw {
    /// Allocates the device's PD and CQ, whose events queue `notify`'s work. Must not be
    /// called from an atomic context.
    /// The device's verbs objects, its CQ sized for the pool and `peers` sets.
    pub(crate) fn new(ib: *mut IbDevice, notify: *mut CqNotify, peers: usize) -> Result<Hw> {
        // SAFETY: `ib` is a live device (ib_client add).
        let pd = unsafe { shim::krcore_shim_alloc_pd(ib) };
        if let Some(e) = ptr_err(pd) {
            return Err(e.into());
        }
        // SAFETY: as above.
        let cq = unsafe { shim::krcore_shim_alloc_cq(ib, cq_depth(peers), notify) };
        if let Some(e) = ptr_err(cq) {
            // SAFETY: allocated just above, released once.
            unsafe { shim::krcore_shim_dealloc_pd(pd) };
            return Err(e.into());
        }
        let advert_keys = match AdvertKeys::new(pd) {
            Ok(k) => k,
            Err(e) => {
                // SAFETY: allocated just above, released once.
                unsafe {
                    shim::krcore_shim_free_cq(cq);
                    shim::krcore_shim_dealloc_pd(pd);
                }
                return Err(e);
            }
        };
        // INVARIANT: all allocated for `ib`.
        Ok(Hw {
            ib,
            pd,
            cq,
            advert_keys,
            pool: KVec::new(),
            pool_gid: [0; 16],
            sgid_index: 0,
            mac: [0; 6],
            next_end: 0,
            dead: false,
        })
    }

    /// The keys of advertised receives: usable until the Hw is dropped (after
    /// [`destroy`](Self::destroy) each call is refused).
    pub(crate) fn advert_keys(&self) -> *const AdvertKeys {
        &*self.advert_keys
    }

    /// The CQ (live until [`destroy`](Self::destroy)), for the device's poller and
    /// arming.
    pub(crate) fn cq(&self) -> *mut IbCq {
        self.cq
    }

    /// What a connection to a peer kernel is made with (cm.c): the device, its PD and
    /// CQ, and the pool's GID (the local address), once the pool is built.
    pub(crate) fn peer_resources(&self) -> Option<(*mut IbDevice, *mut IbPd, *mut IbCq, [u8; 16])> {
        (!self.dead && !self.pool.is_empty()).then_some((self.ib, self.pd, self.cq, self.pool_gid))
    }

    /// The PD and CQ (live until [`destroy`](Self::destroy)).
    pub(crate) fn pd_cq(&self) -> (*mut IbPd, *mut IbCq) {
        (self.pd, self.cq)
    }

    /// The GID the pool is connected over, once it is built: this device's address.
    pub(crate) fn pool_gid(&self) -> Option<[u8; 16]> {
        (!self.pool.is_empty()).then_some(self.pool_gid)
    }

    /// Pooled QP `i` and its number, once the pool is built.
    pub(crate) fn pool_qp(&self, i: usize) -> Option<(*mut IbQp, u32)> {
        self.pool.get(i).map(|q| (q.qp, q.qpn))
    }

    /// Builds the pool on the port's RoCE v2 IPv4 GID, if there is one and no pool yet
    /// (so no application pays for it). Returns whether a pool exists afterwards.
    pub(crate) fn prewarm(&mut self) -> bool {
        if self.dead {
            return false;
        }
        if !self.pool.is_empty() {
            return true;
        }
        const ROCE_V2: u32 = 2;
        let v4_mapped =
            |g: &[u8; 16]| g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
        for i in 0..GID_SEARCH {
            let (mut g, mut ty) = ([0u8; 16], 0u32);
            // SAFETY: live device; `g` has 16 bytes.
            let r =
                unsafe { shim::krcore_shim_query_gid(self.ib, PORT, i, g.as_mut_ptr(), &mut ty) };
            if r == 0 && ty == ROCE_V2 && v4_mapped(&g) {
                return self.build_pool(&g, i).is_ok();
            }
        }
        false
    }

    /// Whether `gid` is one of this port's GIDs.
    pub(crate) fn is_local_gid(&self, gid: &[u8; 16]) -> bool {
        !self.dead && self.local_gid_index(gid).is_some()
    }

    /// The index of the local RoCE v2 GID equal to `gid`.
    fn local_gid_index(&self, gid: &[u8; 16]) -> Option<u32> {
        (0..GID_SEARCH).find(|&i| {
            let (mut g, mut ty) = ([0u8; 16], 0u32);
            // SAFETY: live device; `g` has 16 bytes.
            let r =
                unsafe { shim::krcore_shim_query_gid(self.ib, PORT, i, g.as_mut_ptr(), &mut ty) };
            r == 0 && &g == gid
        })
    }

    /// Builds the pool: create every QP, then connect each to its partner.
    fn build_pool(&mut self, gid: &[u8; 16], sgid_index: u32) -> Result<(), Errno> {
        let mut pool = KVec::with_capacity(POOL_QPS, GFP_KERNEL).map_err(|_| Errno::ENOMEM)?;
        let mut result = Ok(());
        for _ in 0..POOL_QPS {
            // SAFETY: live PD and CQ (invariant).
            let qp =
                unsafe { shim::krcore_shim_create_rc_qp(self.pd, self.cq, SEND_DEPTH, RECV_DEPTH) };
            if let Some(e) = ptr_err(qp) {
                result = Err(e);
                break;
            }
            // SAFETY: just created.
            let qpn = unsafe { shim::krcore_shim_qp_num(qp) };
            pool.push(PoolQp { qp, qpn }, GFP_KERNEL)
                .map_err(|_| Errno::ENOMEM)?;
        }
        // Loopback: the destination is this GID's own netdev, so its MAC is the DMAC (the
        // core resolves DMACs for user QPs only).
        let mut mac = [0u8; 6];
        if result.is_ok() {
            // SAFETY: live device; `mac` has the 6 bytes of an Ethernet address.
            let r =
                unsafe { shim::krcore_shim_gid_mac(self.ib, PORT, sgid_index, mac.as_mut_ptr()) };
            if r != 0 {
                result = Err(Errno(-r));
            }
        }
        if result.is_ok() {
            for i in 0..pool.len() {
                let partner = pool[i ^ 1].qpn;
                // SAFETY: live QP; `gid` is 16 bytes, `mac` 6.
                let r = unsafe {
                    shim::krcore_shim_connect_rc_qp(
                        pool[i].qp,
                        PORT,
                        sgid_index,
                        gid.as_ptr(),
                        mac.as_ptr(),
                        partner,
                    )
                };
                if r != 0 {
                    result = Err(Errno(-r));
                    break;
                }
            }
        }
        if result.is_ok() {
            // The advert keys' registrations run on a QP of their own (fastreg.c).
            result = self.advert_keys.attach(PORT, sgid_index, gid, &mac);
        }
        if result.is_err() {
            for q in pool.iter() {
                // SAFETY: created above, destroyed once.
                unsafe { shim::krcore_shim_destroy_qp(q.qp) };
            }
            return result;
        }
        self.pool = pool;
        self.pool_gid = *gid;
        self.sgid_index = sgid_index;
        self.mac = mac;
        Ok(())
    }

    /// Releases every verbs object; the device is going away. Rings' MRs must have been
    /// deregistered first (their QPs are destroyed here, so nothing touches them).
    pub(crate) fn destroy_qps(&mut self) {
        for q in self.pool.iter() {
            // SAFETY: pooled QPs are live until here, destroyed once.
            unsafe { shim::krcore_shim_destroy_qp(q.qp) };
        }
        self.pool = KVec::new();
    }

    /// Frees the CQ and PD; marks the device gone.
    pub(crate) fn destroy(&mut self) {
        if self.dead {
            return;
        }
        self.destroy_qps();
        // The keys before the PD they are in.
        self.advert_keys.drain();
        // SAFETY: allocated in `new`, released once (dead is set below).
        unsafe {
            shim::krcore_shim_free_cq(self.cq);
            shim::krcore_shim_dealloc_pd(self.pd);
        }
        self.dead = true;
    }
}

impl Rearm for Hw {
    fn to_error(&mut self, qp: u32, marker: u64) -> bool {
        let Some(q) = self.pool.get(qp as usize) else {
            return false;
        };
        if self.dead {
            return false;
        }
        // SAFETY: live pooled QP.
        let posted = unsafe {
            shim::krcore_shim_qp_to_error(q.qp);
            shim::krcore_shim_post_marker(q.qp, marker)
        };
        if posted != 0 {
            pr_warn!("pool QP {}: flush marker not posted ({posted})\n", q.qpn);
        }
        posted == 0
    }

    /// Resets the pairs' QPs (emptying their queues) and connects each to its partner
    /// again, both restarting at PSN 0.
    fn rearm(&mut self, first: u32, n: u32) -> Result<(), Errno> {
        let ends = first as usize..(first + n) as usize;
        if self.dead || ends.end > self.pool.len() {
            return Err(Errno::ENODEV);
        }
        for e in ends.clone() {
            // SAFETY: live pooled QP.
            let r = unsafe { shim::krcore_shim_qp_reset(self.pool[e].qp) };
            if r != 0 {
                return Err(Errno(-r));
            }
        }
        for e in ends {
            // SAFETY: live QP; `pool_gid` is 16 bytes, `mac` 6.
            let r = unsafe {
                shim::krcore_shim_connect_rc_qp(
                    self.pool[e].qp,
                    PORT,
                    self.sgid_index,
                    self.pool_gid.as_ptr(),
                    self.mac.as_ptr(),
                    self.pool[e ^ 1].qpn,
                )
            };
            if r != 0 {
                return Err(Errno(-r));
            }
        }
        Ok(())
    }
}

impl Drop for Hw {
    fn drop(&mut self) {
        // The advert keys go after (a field): nothing uses them once the Hw goes (their
        // holders, the device's QP cells and Shared, go with it).
        self.destroy();
    }
}

/// The C work requests carrying `wr` into `out` (one, or two for a message to another
/// node: the WRITE of its bytes, then the notice saying so); how many.
fn to_c(wr: &SendWr, out: &mut [SendWrC]) -> usize {
    let mut c = SendWrC {
        wr_id: wr.wr_id,
        local_addr: wr.local.addr,
        length: wr.local.len,
        lkey: wr.local.lkey,
        signaled: wr.signaled as u8,
        fence: wr.flags.contains(SqeFlags::FENCE) as u8,
        solicited: wr.flags.contains(SqeFlags::SOLICITED) as u8,
        ..SendWrC::default()
    };
    let imm = match wr.kind {
        SendKind::Read { remote_addr, rkey } => {
            (c.kind, c.remote_addr, c.rkey) = (shim::WR_READ, remote_addr, rkey);
            None
        }
        SendKind::Write {
            remote_addr,
            rkey,
            imm,
        } => {
            (c.kind, c.remote_addr, c.rkey) = (shim::WR_WRITE, remote_addr, rkey);
            imm
        }
        SendKind::Send { imm } => {
            c.kind = shim::WR_SEND;
            imm
        }
        SendKind::Deliver { remote_addr, mr } => {
            // The QP's key made over the receive's bytes, the WRITE, the key closed
            // (fastreg.c expands it).
            (c.kind, c.remote_addr, c.mr) = (shim::WR_DELIVER, remote_addr, mr);
            None
        }
        SendKind::DeliverFar {
            remote_addr,
            rkey,
            to,
            seq,
            inv,
            imm,
        } => {
            // The bytes, unsignaled (RC completes them with the notice after them),
            // then the notice, carrying the request's wr_id and signaling.
            let write = SendWrC {
                wr_id: FAR_WRITE_WR_ID,
                kind: shim::WR_WRITE,
                remote_addr,
                rkey,
                signaled: 0,
                solicited: 0,
                ..c
            };
            let n = Notice::Data {
                to,
                seq,
                len: wr.local.len,
                imm,
            };
            out[0] = write;
            out[1] = notice_wr(wr.wr_id, &n.encode(), wr.signaled);
            out[1].solicited = c.solicited;
            // A SEND with invalidate: the receive's key is closed at the peer's NIC
            // before its Data is taken.
            out[1].inv = inv;
            return 2;
        }
        SendKind::Cas {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            (c.kind, c.remote_addr, c.rkey, c.compare_add, c.swap) =
                (shim::WR_CAS, remote_addr, rkey, compare, swap);
            None
        }
        SendKind::Faa {
            remote_addr,
            rkey,
            add,
        } => {
            (c.kind, c.remote_addr, c.rkey, c.compare_add) = (shim::WR_FAA, remote_addr, rkey, add);
            None
        }
    };
    if let Some(v) = imm {
        (c.has_imm, c.imm) = (1, v);
    }
    out[0] = c;
    1
}

/// A set's QP's connection and peer, as its QP cell knows them.
#[derive(Clone, Copy)]
pub(crate) struct SetEnd {
    /// cm.c's connection (a handle peer.rs holds while this is set).
    pub(crate) conn: *mut crate::shim::CmConn,
    /// The peer node's address.
    pub(crate) gid: [u8; 16],
}

/// A notice to a peer kernel, sent inline.
fn notice_wr(wr_id: u64, notice: &[u8; NOTICE_LEN], signaled: bool) -> SendWrC {
    SendWrC {
        wr_id,
        kind: shim::WR_NOTICE,
        signaled: signaled as u8,
        notice: *notice,
        ..SendWrC::default()
    }
}

/// Scratch memory a chain of work requests, or a batch of work completions, is
/// converted in (shim.c's `struct krcore_scratch`), used under one lock.
pub(crate) struct ScratchBuf(*mut Scratch);

// SAFETY: used only under the lock of what owns it.
unsafe impl Send for ScratchBuf {}

impl ScratchBuf {
    /// Allocates one.
    pub(crate) fn new() -> Result<ScratchBuf> {
        // SAFETY: plain allocation.
        let s = unsafe { shim::krcore_shim_scratch_alloc() };
        if s.is_null() {
            return Err(ENOMEM);
        }
        Ok(ScratchBuf(s))
    }
}

impl Drop for ScratchBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once.
        unsafe { shim::krcore_shim_scratch_free(self.0) };
    }
}

/// Posting on one pooled QP, used only within the QP's lock (fabric.rs).
pub(crate) struct QpPost {
    /// The QP, null until the pool is built and again once it is destroyed.
    pub(crate) qp: *mut IbQp,
    /// A set's QP: its connection (whose notice receives it holds) and the peer's
    /// address; set and cleared with `qp` (peer.rs).
    pub(crate) peer: Option<SetEnd>,
    /// The device's keys for advertised receives (the Hw's; set once it exists).
    pub(crate) advert_keys: *const AdvertKeys,
    scratch: ScratchBuf,
    /// A chain in C's terms (off the stack: 3 KiB).
    c: KBox<[SendWrC; 2 * CHAIN]>,
}

// SAFETY: used only under its QP's mutex.
unsafe impl Send for QpPost {}

impl QpPost {
    /// For a QP yet to be built.
    pub(crate) fn new() -> Result<QpPost> {
        Ok(QpPost {
            qp: core::ptr::null_mut(),
            peer: None,
            advert_keys: core::ptr::null(),
            scratch: ScratchBuf::new()?,
            c: KBox::new([SendWrC::default(); 2 * CHAIN], GFP_KERNEL)?,
        })
    }
}

/// Polling the device's CQ, used only under the CQ's lock (devctx.rs).
pub(crate) struct CqPoll {
    /// The CQ, null once destroyed.
    pub(crate) cq: *mut IbCq,
    scratch: ScratchBuf,
}

// SAFETY: used only under the CQ mutex.
unsafe impl Send for CqPoll {}

impl CqPoll {
    /// For `cq` (live until `cq` is set to null under the same lock).
    pub(crate) fn new(cq: *mut IbCq) -> Result<CqPoll> {
        Ok(CqPoll {
            cq,
            scratch: ScratchBuf::new()?,
        })
    }

    /// Polls up to `out.len()` (at most 16) completions; none once the CQ is gone.
    pub(crate) fn poll(&mut self, out: &mut [shim::WcC]) -> usize {
        if self.cq.is_null() {
            return 0;
        }
        // SAFETY: live CQ (non-null); `out` has room for the count.
        let n = unsafe {
            shim::krcore_shim_poll_cq(self.scratch.0, self.cq, out.as_mut_ptr(), out.len().min(16) as i32)
        };
        n.max(0) as usize
    }
}

/// Arming the device's CQ for one event, from any context that may sleep (a leaf lock).
pub(crate) struct CqArm(pub(crate) *mut IbCq);

// SAFETY: used only under its leaf mutex.
unsafe impl Send for CqArm {}

impl CqArm {
    /// Arms the CQ; `true` when completions may have arrived unannounced since the last
    /// poll (poll again rather than wait for the event). `false` once the CQ is gone.
    pub(crate) fn arm(&self) -> bool {
        // SAFETY: live CQ (non-null).
        !self.0.is_null() && unsafe { shim::krcore_shim_cq_arm(self.0) } > 0
    }
}

impl QpPost {
    /// Posts the first `n` C requests of `self.c`, those of requests ending at `ends`
    /// (`ends[i]`: one past request `i`'s last).
    fn post_c(&mut self, n: usize, ends: &[usize]) -> Result<(), PostError> {
        let c = &self.c[..n];
        let mut posted = 0u32;
        // SAFETY: live QP (non-null: checked by the callers, under this QP's lock);
        // `c` holds at most KRCORE_POST_MAX (2 * CHAIN) requests.
        let r = unsafe {
            shim::krcore_shim_post_send(
                self.scratch.0,
                self.qp,
                c.as_ptr(),
                c.len() as u32,
                &mut posted,
            )
        };
        if r != 0 {
            // Requests whose every C request went out.
            return Err(PostError {
                posted: ends.iter().take_while(|&&e| e <= posted as usize).count(),
                errno: Errno(-r),
            });
        }
        Ok(())
    }

    fn gone() -> PostError {
        PostError {
            posted: 0,
            errno: Errno::ENODEV,
        }
    }
}

impl Post for QpPost {
    fn post_send(&mut self, wrs: &[SendWr]) -> Result<(), PostError> {
        if self.qp.is_null() {
            return Err(Self::gone());
        }
        let mut ends = [0usize; CHAIN];
        let mut n = 0;
        for (i, w) in wrs.iter().enumerate().take(CHAIN) {
            n += to_c(w, &mut self.c[n..]);
            ends[i] = n;
        }
        self.post_c(n, &ends[..wrs.len().min(CHAIN)])
    }

    fn post_notice(&mut self, notice: &[u8; NOTICE_LEN]) -> Result<(), PostError> {
        if self.qp.is_null() {
            return Err(Self::gone());
        }
        self.c[0] = notice_wr(NOTICE_WR_ID, notice, true);
        self.post_c(1, &[1])
    }

    fn map_recv(&mut self, mr: u64, addr: u64, len: u32) -> Result<u32, PostError> {
        if self.qp.is_null() || self.advert_keys.is_null() {
            return Err(Self::gone());
        }
        // SAFETY: the Hw's keys, live as long as the QP cells holding this.
        let keys = unsafe { &*self.advert_keys };
        // `mr` is the receive's registration, which its posted receive keeps.
        keys.advert(mr as *mut KrMr, addr, len)
            .map_err(|errno| PostError { posted: 0, errno })
    }
}

impl Hw {
    /// Binds to a pooled physical QP connected to `gid`/`service` (building the pool at
    /// the first CONNECT); with `opposite`, to the QP connected to that one.
    pub(crate) fn connect(
        &mut self,
        gid: [u8; 16],
        service: u32,
        opposite: Option<u32>,
    ) -> Result<Connection, Errno> {
        if self.dead {
            return Err(Errno::ENODEV);
        }
        if self.pool.is_empty() {
            let index = self.local_gid_index(&gid).ok_or(Errno::ENETUNREACH)?;
            self.build_pool(&gid, index)?;
        } else if gid != self.pool_gid {
            return Err(Errno::ENETUNREACH);
        }
        let qp = match opposite {
            // The other end of a link: the QP connected to its QP, its pair's other one.
            Some(o) if (o as usize) < self.pool.len() => o as usize ^ 1,
            _ => {
                let pair = service as usize % (self.pool.len() / 2);
                let end = (self.next_end >> pair) as usize & 1;
                self.next_end ^= 1 << pair;
                2 * pair + end
            }
        };
        Ok(Connection {
            qp: qp as u32,
            qpn: self.pool[qp].qpn,
            peer: false,
        })
    }
}

/// Deregisters an MR; nothing of it is in flight.
pub(crate) fn dereg_mr(keys: MrKeys) {
    // SAFETY: `token` is the ib_mr registered by `reg_mr`; the engine deregisters each
    // once, with nothing in flight (or with the device's QPs destroyed).
    unsafe { shim::krcore_shim_dereg_mr(keys.token as *mut KrMr) };
}

/// A fresh unpredictable 64-bit value (the kernel's CSPRNG), for export descriptors.
pub(crate) fn descriptor() -> u64 {
    // SAFETY: plain call.
    unsafe { shim::krcore_shim_random_u64() }
}

/// A device's PD, lent to a registration that runs without the device lock.
///
/// # Invariants
/// Valid while the device context counts the registration in progress: its removal
/// waits for that count to drop to zero before it frees the PD.
#[derive(Clone, Copy)]
pub(crate) struct PdRef(*mut IbPd);

impl Hw {
    /// The PD, for a registration the caller counts (see [`PdRef`]); `None` once the
    /// device is gone.
    pub(crate) fn pd(&self) -> Option<PdRef> {
        // INVARIANT: the caller counts the registration before releasing the lock.
        (!self.dead).then_some(PdRef(self.pd))
    }
}

/// Pins and registers `[addr, addr + len)` of the calling process with `access`. Called
/// with no lock held: pinning can fault pages in and sleep. Must run in the process
/// whose memory it is (the engine's `Caller::Owner`): the pages are charged to
/// `current`'s address space and its RLIMIT_MEMLOCK, and stay pinned until dereg.
pub(crate) fn register(pd: PdRef, addr: u64, len: u32, access: MrAccess) -> Result<MrKeys, Errno> {
    // SAFETY: the PD is live (invariant of PdRef); `current` owns the memory range.
    let mr = unsafe { shim::krcore_shim_reg_user_mr(pd.0, addr, len as u64, access.bits()) };
    if let Some(e) = ptr_err(mr) {
        return Err(e);
    }
    // SAFETY: just registered.
    let (lkey, rkey) = unsafe { (shim::krcore_shim_mr_lkey(mr), shim::krcore_shim_mr_rkey(mr)) };
    Ok(MrKeys {
        lkey,
        rkey,
        token: mr as u64,
    })
}
