// SPDX-License-Identifier: GPL-2.0
//! The MetaServer on a device: abi's `meta` client over meta.c's verbs.
//!
//! [`Meta`] (in the fabric, a leaf lock) holds what rings asked of the MetaServer and
//! this node's identity in it; the engine reaches it from a submission (PUBLISH,
//! IMPORT_NAME, and the revocation of a deregistered MR's names) and never waits there:
//! what needs the network is a job. [`MetaNet`] (in the device context) holds the
//! connection to the MetaServer under its own mutex, taken with no other krcore lock
//! held, by whoever runs the jobs (devctx's `net_work`, on the device's own workers;
//! never a submitting process). Its first use connects (rdma_cm,
//! milliseconds) and registers this node's record, which chooses its incarnation.
//!
//! The node named by the `meta_server` parameter also serves: at its device's prewarm it
//! allocates the region ([`TABLES`]), connects to itself, registers the region with a
//! fast-registration request on that connection (remote READ alone), and from then on
//! cm.c accepts other nodes' MetaServer connections, telling each where the region is.
//! Their requests (register, publish, revoke) it answers in [`serve`], the region's only
//! writer.

mod serve;
mod work;

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

use crate::abi::cqe::Reason;
use crate::abi::engine::{Export, Located};
use crate::abi::meta::cache::MetaCache;
use crate::abi::meta::client::{run, Answer, MetaClient};
use crate::abi::meta::lookup::{EXPORT_FRAME, PROBE};
use crate::abi::meta::node::{reconcile, Reconciled, RegisterError};
use crate::abi::meta::record::{ExportRecord, Grant, NodeRecord, NAME_LEN};
use crate::abi::meta::request::{Call, Refusal, Reply, Request, REPLY_LEN, REQUEST_LEN};
use crate::abi::meta::siphash::{key_from_bytes, SipKey};
use crate::abi::meta::tables::{Remote, Tables, Unreachable};
use crate::shim::{self, IbDevice, IbPd, MetaConn, MetaOffer, MetaRegion};
use crate::engine::store::{KBuf, KStore};

/// The region a MetaServer serves: 1,024 node entries (64 KiB) and 40,960 export
/// entries (3.4 MiB), 3.5 MiB in all: 10,000 exports fill a quarter of it, where every
/// name finds room in its probe window of 8 (abi's meta::lookup; at 61% load, 1.5% of
/// names found their window full).
pub(crate) const TABLES: Tables = Tables {
    node_slots: 1024,
    export_slots: 40960,
    // The shape only: the key is derived at load (`MetaNet::key`).
    key: [0, 0],
};
/// Export records a node caches.
const CACHE: usize = 1024;
/// Nodes whose newest incarnation the cache tracks (by id modulo this).
const CACHE_NODES: usize = 64;
/// Names this node can have published at once.
const PUBLISHED: usize = 16384;
/// Lookups asked for at once.
const ASKS: usize = 64;
/// After the MetaServer could not be reached, requests fail at once for this long.
const DOWN_MS: i64 = 1000;
/// A connection to the MetaServer is given this long.
const CONNECT_MS: u32 = 10_000;

/// What rings ask of the MetaServer, and this node's identity in it (in the fabric).
pub(crate) struct Meta {
    client: Pin<KBox<Mutex<MetaClient<KStore>>>>,
    /// This node's id (its address's low 16 bits) and incarnation, once registered
    /// (incarnation 0: not yet).
    id: AtomicU32,
    incarnation: AtomicU64,
    /// Requests fail `Unreachable` until then, ms (the MetaServer did not answer).
    down_until_ms: AtomicI64,
    /// Network work is due: a job waits, or this node must register first. SeqCst,
    /// as `MetaNet::working` (a worker that leaves the work to another relies on it).
    due: AtomicBool,
    /// The next network work checks that the MetaServer still holds this node's record.
    verify: AtomicBool,
    /// Whether a MetaServer is named (the `meta_server` parameter).
    configured: bool,
    /// The cluster's /16: the MetaServer's address's first two bytes (a node's address
    /// is them and its id).
    prefix: [u8; 2],
}

impl Meta {
    /// Nothing asked yet.
    pub(crate) fn new() -> Result<Meta> {
        let cache = MetaCache::new(
            KBuf::filled(CACHE, None, GFP_KERNEL)?,
            KBuf::filled(CACHE_NODES, (0, 0), GFP_KERNEL)?,
        );
        let client = MetaClient::new(
            cache,
            KBuf::filled(PUBLISHED, None, GFP_KERNEL)?,
            KBuf::filled(ASKS, None, GFP_KERNEL)?,
        );
        let mut gid = [0u8; 16];
        // SAFETY: `gid` has 16 bytes.
        let configured = unsafe { shim::krcore_shim_meta_server_gid(gid.as_mut_ptr()) } == 0;
        Ok(Meta {
            client: KBox::pin_init(new_mutex!(client, "krcore_meta"), GFP_KERNEL)?,
            id: AtomicU32::new(0),
            incarnation: AtomicU64::new(0),
            down_until_ms: AtomicI64::new(0),
            due: AtomicBool::new(false),
            verify: AtomicBool::new(false),
            configured,
            prefix: [gid[12], gid[13]],
        })
    }

    /// Why nothing can be asked now (`Failed`), or that this node must register first
    /// (`Pending`); `None` when requests can be served.
    fn gate<T>(&self) -> Option<Answer<T>> {
        if !self.configured || crate::clock::coarse_ms() < self.down_until_ms.load(Ordering::Relaxed) {
            return Some(Answer::Failed(Reason::Unreachable));
        }
        if self.incarnation.load(Ordering::Acquire) == 0 {
            self.due.store(true, Ordering::SeqCst);
            return Some(Answer::Pending);
        }
        None
    }

    fn mark<T>(&self, a: Answer<T>) -> Answer<T> {
        if matches!(a, Answer::Pending) {
            self.due.store(true, Ordering::SeqCst);
        }
        a
    }

    /// This node's id, once registered.
    pub(crate) fn id(&self) -> Option<u16> {
        (self.incarnation.load(Ordering::Acquire) != 0)
            .then(|| self.id.load(Ordering::Relaxed) as u16)
    }

    /// PUBLISH (abi's `Fabric::publish`).
    pub(crate) fn publish(&self, name: &[u8; NAME_LEN], e: &Export, grant: Grant) -> Answer<()> {
        if let Some(a) = self.gate() {
            return a;
        }
        let record = ExportRecord::published(
            *name,
            self.id.load(Ordering::Relaxed) as u16,
            self.incarnation.load(Ordering::Acquire),
            e,
            grant,
        );
        // SAFETY: reads a module parameter.
        let share = unsafe { shim::krcore_shim_max_names(false) } as usize;
        self.mark(self.client.lock().publish(record, e.descriptor, share))
    }

    /// IMPORT_NAME through a virtual QP connected to node `node`, asked by `user` (its
    /// slot).
    pub(crate) fn import(&self, name: &[u8; NAME_LEN], node: u16, user: u32) -> Answer<(Export, Grant)> {
        if let Some(a) = self.gate() {
            return a;
        }
        let a = self.client.lock().import(name, Some(node), user);
        self.mark(a).map(|r| (r.export(), r.grant))
    }

    /// RESOLVE_NAME: where `name` lives (its node's address is the cluster's /16 and
    /// the node's id), with its export and grant.
    pub(crate) fn resolve(&self, name: &[u8; NAME_LEN], user: u32) -> Answer<(Located, Export, Grant)> {
        if let Some(a) = self.gate() {
            return a;
        }
        let a = self.client.lock().import(name, None, user);
        let prefix = self.prefix;
        self.mark(a)
            .map(|r| (Located::in_cluster(prefix, r.node), r.export(), r.grant))
    }

    /// The rkey of local export `descriptor` when a name of it was published.
    pub(crate) fn published_rkey(&self, descriptor: u64) -> Option<u32> {
        if !self.configured {
            return None;
        }
        self.client.lock().published_rkey(descriptor)
    }

    /// Node `node` revoked its export `rkey`: what was cached of it goes.
    pub(crate) fn revoked_far(&self, node: u16, rkey: u32) {
        if self.configured {
            self.client.lock().revoked_far(node, rkey);
        }
    }

    /// A local export was revoked: its names go (a job).
    pub(crate) fn unpublish(&self, descriptor: u64) {
        if self.configured && self.client.lock().unpublish(descriptor) {
            self.due.store(true, Ordering::SeqCst);
        }
    }

    /// The connection set to node `node` broke: its cached records go.
    pub(crate) fn peer_lost(&self, node: u16) {
        if self.configured {
            self.client.lock().peer_lost(node);
        }
    }

    /// Has the next network work register this node (when a MetaServer is named).
    pub(crate) fn ask_register(&self) {
        if self.configured {
            self.due.store(true, Ordering::SeqCst);
        }
    }

    /// The periodic check (every `meta_check_ms`): when this node has names published,
    /// has the next network work make sure the MetaServer still holds its record (and
    /// publish them again if it lost them). Whether work is due.
    pub(crate) fn check(&self) -> bool {
        if !self.configured
            || self.incarnation.load(Ordering::Acquire) == 0
            || !self.client.lock().publishes()
        {
            return false;
        }
        self.verify.store(true, Ordering::Release);
        self.due.store(true, Ordering::SeqCst);
        true
    }

    /// Whether network work is due.
    pub(crate) fn due(&self) -> bool {
        self.due.load(Ordering::SeqCst)
    }
}

/// The connection to the MetaServer, as the mutex in [`MetaNet`] guards it.
struct Link {
    conn: *mut MetaConn,
    /// The device is going: no new connection.
    closed: bool,
    tables: Tables,
    /// A probe window's bytes, for the jobs.
    window: KBox<[u8; PROBE * EXPORT_FRAME]>,
}

// SAFETY: the connection is used only under the mutex.
unsafe impl Send for Link {}

/// What serving a member's request uses, under the serving lock.
struct Serving {
    /// A probe window's bytes (a publication's reads).
    window: KBox<[u8; PROBE * EXPORT_FRAME]>,
    /// Names each node slot holds in the region (abi's `meta::serve::Shares`); the
    /// region is allocated once, with these all 0.
    held: KBuf<u16>,
    /// Whose record each export slot holds (abi's `Shares::owners`), likewise.
    owners: KBuf<u16>,
}

/// The MetaServer connection and, on its node, the region (in the device context).
///
/// Lock order: `link` is taken with no other krcore lock held (it is held across
/// connecting); `serving` is a leaf, taken by cm.c's serving of a member's request (a
/// workqueue, nothing held) and by [`remove`](MetaNet::remove) to let the region go.
pub(crate) struct MetaNet {
    link: Pin<KBox<Mutex<Link>>>,
    /// A worker runs the MetaServer's work (and holds `link`, seconds at a time when
    /// the MetaServer is slow or gone). Other workers leave the work to it rather than
    /// queue on the mutex: they stay free for the device's dials, which no user's
    /// lookup may hold up. It looks again for what came due meanwhile: SeqCst, as
    /// `Meta::due` and `probe`, so a store of either before another worker found this
    /// set is seen by this one's load after it clears it. Only the network workers run
    /// the work (the tick and the prewarm kick them), so the rings are woken after it.
    working: AtomicBool,
    /// Serializes the region's writes (one request at a time), with what they use.
    serving: Pin<KBox<Mutex<Serving>>>,
    /// The region this node serves (null: none).
    region: AtomicPtr<MetaRegion>,
    /// The region's rkey and base (fixed once it is allocated), and whether it is
    /// registered (then every node is accepted).
    rkey: AtomicU32,
    base: AtomicU64,
    ready: AtomicBool,
    /// The next network work READs the region over this node's own link, to find it
    /// closed (a member's SEND may invalidate its key: every member knows it).
    probe: AtomicBool,
    /// Such a READ failed (and broke the link): opening the link again registers the
    /// region under a new MR and key.
    rekey: AtomicBool,
    /// The name hash's key (derived from the cluster key; never on the wire).
    key: SipKey,
}

/// A node's MetaServer connection: one-sided READs (abi's `Remote`) and requests to
/// the MetaServer's kernel (abi's `Call`).
struct Wire(*mut MetaConn);

const _: () = assert!(REQUEST_LEN <= shim::META_REPLY_OFF && REPLY_LEN == shim::META_REPLY_LEN);

impl Wire {
    fn buf(&mut self) -> &mut [u8] {
        // SAFETY: the connection's bounce buffer, META_BUF bytes, used only under the
        // link's mutex and between verbs (each waited for).
        unsafe { core::slice::from_raw_parts_mut(shim::krcore_shim_meta_buf(self.0), shim::META_BUF) }
    }
}

impl Remote for Wire {
    fn read(&mut self, off: u64, out: &mut [u8]) -> Result<(), Unreachable> {
        for (i, chunk) in out.chunks_mut(shim::META_BUF).enumerate() {
            let at = off + (i * shim::META_BUF) as u64;
            // SAFETY: a live connection, used under the link's mutex; len <= META_BUF.
            if unsafe { shim::krcore_shim_meta_read(self.0, at, chunk.len() as u32) } != 0 {
                return Err(Unreachable);
            }
            let n = chunk.len();
            chunk.copy_from_slice(&self.buf()[..n]);
        }
        Ok(())
    }
}

impl Call for Wire {
    fn call(&mut self, req: &Request) -> Result<Reply, Unreachable> {
        let mut b = [0u8; REQUEST_LEN];
        let n = req.encode(&mut b);
        self.buf()[..n].copy_from_slice(&b[..n]);
        // SAFETY: as in `read`; n <= META_REPLY_OFF (asserted above).
        if unsafe { shim::krcore_shim_meta_call(self.0, n as u32) } != 0 {
            return Err(Unreachable);
        }
        let at = shim::META_REPLY_OFF;
        Reply::decode(&self.buf()[at..at + REPLY_LEN]).ok_or(Unreachable)
    }
}

/// What opening the link needs from the device.
pub(crate) struct Device {
    pub(crate) ib: *mut IbDevice,
    pub(crate) pd: *mut IbPd,
    /// This node's address (IPv4-mapped GID).
    pub(crate) gid: [u8; 16],
}

impl MetaNet {
    /// No connection, no region.
    pub(crate) fn new() -> Result<MetaNet> {
        let mut k = [0u8; 16];
        // SAFETY: `k` has the 16 bytes the key takes.
        unsafe { shim::krcore_cm_name_key(k.as_mut_ptr()) };
        let key = key_from_bytes(&k);
        let link = Link {
            conn: core::ptr::null_mut(),
            closed: false,
            tables: Tables { key, ..TABLES },
            window: KBox::new([0u8; PROBE * EXPORT_FRAME], GFP_KERNEL)?,
        };
        Ok(MetaNet {
            link: KBox::pin_init(new_mutex!(link, "krcore_meta_link"), GFP_KERNEL)?,
            working: AtomicBool::new(false),
            serving: KBox::pin_init(
                new_mutex!(
                    Serving {
                        window: KBox::new([0u8; PROBE * EXPORT_FRAME], GFP_KERNEL)?,
                        held: KBuf::filled(TABLES.node_slots as usize, 0, GFP_KERNEL)?,
                        owners: KBuf::filled(TABLES.export_slots as usize, 0, GFP_KERNEL)?,
                    },
                    "krcore_meta_serving"
                ),
                GFP_KERNEL,
            )?,
            region: AtomicPtr::new(core::ptr::null_mut()),
            rkey: AtomicU32::new(0),
            base: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            probe: AtomicBool::new(false),
            rekey: AtomicBool::new(false),
            key,
        })
    }

    /// The region this node serves, as its names are placed (the cluster's key).
    fn served(&self) -> Tables {
        Tables {
            key: self.key,
            ..TABLES
        }
    }

    /// What cm.c tells a node connecting to this one's MetaServer (rkey 0: none).
    pub(crate) fn offer(&self) -> MetaOffer {
        MetaOffer {
            base: self.base.load(Ordering::Relaxed),
            rkey: self.rkey.load(Ordering::Acquire),
            node_slots: TABLES.node_slots,
            export_slots: TABLES.export_slots,
            ready: self.ready.load(Ordering::Acquire) as u8,
            resv: [0; 3],
        }
    }

    /// Allocates the region if `dev` is the MetaServer's node and has none yet (its
    /// registration comes with the link to itself).
    pub(crate) fn serve_if_named(&self, dev: &Device) {
        let mut gid = [0u8; 16];
        // SAFETY: `gid` has 16 bytes.
        if unsafe { shim::krcore_shim_meta_server_gid(gid.as_mut_ptr()) } != 0
            || gid != dev.gid
            || !self.region.load(Ordering::Acquire).is_null()
        {
            return;
        }
        // SAFETY: the PD is live (the caller holds the device's verbs, before removal).
        let r = unsafe { shim::krcore_shim_meta_region_alloc(dev.pd, TABLES.bytes() as u32) };
        if r.is_null() {
            pr_warn!("cannot allocate the MetaServer's region ({} bytes)\n", TABLES.bytes());
            return;
        }
        let mut o = MetaOffer::default();
        // SAFETY: a region just allocated.
        unsafe { shim::krcore_shim_meta_region_offer(r, &mut o) };
        self.base.store(o.base, Ordering::Relaxed);
        self.rkey.store(o.rkey, Ordering::Release);
        self.region.store(r, Ordering::Release);
    }

    /// Whether this node serves a registered region.
    fn serving(&self) -> bool {
        !self.region.load(Ordering::Acquire).is_null() && self.ready.load(Ordering::Acquire)
    }

    /// Has the next network work check the region this node serves (the device's tick,
    /// and a SEND that closed a key of this node): whether there is one.
    pub(crate) fn ask_probe(&self) -> bool {
        let serving = self.serving();
        if serving {
            self.probe.store(true, Ordering::SeqCst);
        }
        serving
    }

    /// Whether a probe is asked for.
    pub(crate) fn probing(&self) -> bool {
        self.probe.load(Ordering::SeqCst)
    }

    /// Runs what is due for `meta` (connecting and registering first if needed), with
    /// no other krcore lock held, unless another worker is running it (see
    /// `working`). Whether there was anything to do, or is again.
    pub(crate) fn work(&self, meta: &Meta, dev: Option<Device>) -> bool {
        if self.working.swap(true, Ordering::SeqCst) {
            return false;
        }
        let did = self.work_alone(meta, dev);
        self.working.store(false, Ordering::SeqCst);
        did || meta.due() || self.probing()
    }

    /// [`work`](Self::work), by the one worker running it.
    fn work_alone(&self, meta: &Meta, dev: Option<Device>) -> bool {
        let due = meta.due.swap(false, Ordering::SeqCst);
        let probe = self.probe.swap(false, Ordering::SeqCst);
        if !due && !probe {
            return false;
        }
        let mut link = self.link.lock();
        // SAFETY: plain calls; no lock but the link's held (a test's slow MetaServer).
        unsafe { shim::krcore_shim_msleep(shim::krcore_shim_test_hold_meta_ms()) };
        let mut linked = match &dev {
            Some(dev) => self.ensure(&mut link, meta, dev),
            None => false,
        };
        if let (true, true, Some(dev)) = (linked, probe && self.serving(), &dev) {
            // A READ of the region through this node's own link: refused when a
            // member closed its key, which breaks the link; opening it again keys the
            // region anew (members' READs fail meanwhile, and they connect again for
            // the new key).
            let mut word = [0u8; 8];
            if Wire(link.conn).read(0, &mut word).is_err() {
                self.rekey.store(true, Ordering::Release);
                linked = self.ensure(&mut link, meta, dev);
            }
        }
        // A periodic check (devctx's tick): is this node's record still there?
        let linked = match (linked, meta.verify.swap(false, Ordering::AcqRel), &dev) {
            (true, true, Some(dev)) => Self::reconcile(&mut link, meta, dev),
            (l, ..) => l,
        };
        if !linked {
            meta.down_until_ms.store(crate::clock::coarse_ms() + DOWN_MS, Ordering::Relaxed);
        }
        let Link {
            conn,
            tables,
            window,
            ..
        } = &mut *link;
        loop {
            let Some(job) = meta.client.lock().take_job() else {
                break;
            };
            let outcome = match linked && !conn.is_null() {
                true => run(&job, &mut Wire(*conn), tables, &mut window[..]),
                false => crate::abi::meta::client::Outcome::Failed(Reason::Unreachable),
            };
            meta.client.lock().finish(job, outcome);
        }
        true
    }

    /// Opens the link if it is not open (or broke) and registers this node. Whether
    /// it is usable.
    fn ensure(&self, link: &mut Link, meta: &Meta, dev: &Device) -> bool {
        // SAFETY: a live connection (closed only here and at removal, under the mutex).
        if !link.conn.is_null() && !unsafe { shim::krcore_shim_meta_broken(link.conn) } {
            return true;
        }
        if !link.conn.is_null() {
            // SAFETY: as above; released once.
            unsafe { shim::krcore_shim_meta_close(link.conn) };
            link.conn = core::ptr::null_mut();
        }
        let mut server = [0u8; 16];
        // SAFETY: `server` has 16 bytes.
        if link.closed || unsafe { shim::krcore_shim_meta_server_gid(server.as_mut_ptr()) } != 0 {
            return false;
        }
        let mut conn = core::ptr::null_mut();
        let mut offer = MetaOffer::default();
        // SAFETY: the device and PD live until the context's removal, which closes the
        // link under this mutex first; the GIDs are 16 bytes.
        let r = unsafe {
            shim::krcore_shim_meta_open(
                dev.ib,
                dev.pd,
                dev.gid.as_ptr(),
                server.as_ptr(),
                CONNECT_MS,
                &mut conn,
                &mut offer,
            )
        };
        if r != 0 {
            pr_warn!("no connection to the MetaServer: error {r}\n");
            return false;
        }
        link.conn = conn;
        // The shape is the MetaServer's word; the key is ours (every member derives
        // the same one), never the wire's.
        let tables = Tables {
            node_slots: offer.node_slots,
            export_slots: offer.export_slots,
            key: self.key,
        };
        if !tables.valid() {
            pr_warn!("the MetaServer offered an unusable region\n");
            return false;
        }
        link.tables = tables;
        // Our own region, reached over our own connection: register it now; or, when a
        // READ of it failed (a member's SEND may have closed its key), under a new MR
        // and key. A link that broke otherwise finds it as it was.
        let region = self.region.load(Ordering::Acquire);
        let ready = self.ready.load(Ordering::Acquire);
        if !region.is_null() && (!ready || self.rekey.load(Ordering::Acquire)) {
            // SAFETY: the region and the connection are live (same device).
            let r = unsafe {
                match ready {
                    false => shim::krcore_shim_meta_region_register(region, conn),
                    true => shim::krcore_shim_meta_region_rekey(region, conn),
                }
            };
            if r != 0 {
                pr_warn!("cannot register the MetaServer's region: error {r}\n");
                return false;
            }
            let mut o = MetaOffer::default();
            // SAFETY: a live region.
            unsafe { shim::krcore_shim_meta_region_offer(region, &mut o) };
            self.base.store(o.base, Ordering::Relaxed);
            self.rkey.store(o.rkey, Ordering::Release);
            self.rekey.store(false, Ordering::Release);
            match ready {
                false => pr_info!("serving the MetaServer: {} node and {} export entries\n",
                    TABLES.node_slots, TABLES.export_slots),
                true => pr_warn!("the MetaServer's region was keyed anew (a READ of it with its key failed: a member may have closed the key); members connect again for key {:#x}\n",
                    o.rkey),
            }
            self.ready.store(true, Ordering::Release);
        }
        Self::reconcile(link, meta, dev)
    }

    /// Makes sure the MetaServer holds this node's record (abi's `reconcile`), and
    /// publishes this node's live names again when it had to register anew. Whether
    /// the record is there.
    fn reconcile(link: &mut Link, meta: &Meta, dev: &Device) -> bool {
        let had = meta.incarnation.load(Ordering::Acquire);
        let me = NodeRecord {
            gid: dev.gid,
            ipv4: [dev.gid[12], dev.gid[13], dev.gid[14], dev.gid[15]],
            // SAFETY: reads a module parameter.
            cm_port: unsafe { shim::krcore_shim_cm_port() },
            incarnation: had,
        };
        match reconcile(&mut Wire(link.conn), &link.tables, &me) {
            Ok(Reconciled::Kept) => true,
            Ok(Reconciled::Registered { incarnation, again }) => {
                meta.id.store(me.id() as u32, Ordering::Relaxed);
                meta.incarnation.store(incarnation, Ordering::Release);
                pr_info!("registered with the MetaServer as node {}, incarnation {}\n", me.id(),
                    incarnation);
                if again {
                    let n = meta.client.lock().republish(me.id(), incarnation);
                    pr_info!("the MetaServer had lost this node's record: publishing {n} name(s) again\n");
                }
                true
            }
            Err(RegisterError::Refused(Refusal::SlotHeld)) => {
                pr_warn!("the MetaServer refused this node: another address holds node slot {} (node ids are an address's low 16 bits)\n",
                    me.id());
                false
            }
            Err(RegisterError::Refused(why)) => {
                pr_warn!("the MetaServer refused this node's record: {why:?}\n");
                false
            }
            Err(_) => {
                pr_warn!("cannot register with the MetaServer\n");
                false
            }
        }
    }

    /// The device goes (cm.c tore its connections down): let go of the link and the
    /// region. Waits for a job running on the link (each verb is bounded).
    pub(crate) fn remove(&self) {
        let mut link = self.link.lock();
        link.closed = true;
        if !link.conn.is_null() {
            // SAFETY: a live handle, released once.
            unsafe { shim::krcore_shim_meta_close(link.conn) };
            link.conn = core::ptr::null_mut();
        }
        self.ready.store(false, Ordering::Release);
        self.rkey.store(0, Ordering::Release);
        // Not while a request is being served (cm.c freed every serving connection
        // first; this holds whatever order removal comes in).
        let serving = self.serving.lock();
        let r = self.region.swap(core::ptr::null_mut(), Ordering::AcqRel);
        drop(serving);
        if !r.is_null() {
            // SAFETY: allocated by serve_if_named, freed once; no QP reaches it (cm.c
            // destroyed the device's connections before the removal began).
            unsafe { shim::krcore_shim_meta_region_free(r) };
        }
    }
}
