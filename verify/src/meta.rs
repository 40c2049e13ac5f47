//! The fake node's MetaServer: abi's meta client over a region in local memory, as
//! kmod/meta/mod.rs runs it over one-sided READs and requests its kernel serves. The rig runs its jobs where the kernel
//! runs its network work: after a submission that stopped with `Stall::Remote`, or
//! left work due (a revocation), with no engine lock held.

use krcore_abi::engine::{Export, Located, VecStore};
use krcore_abi::meta::cache::MetaCache;
use krcore_abi::meta::client::{run, Answer, MetaClient};
use krcore_abi::meta::lookup::{EXPORT_FRAME, PROBE};
use krcore_abi::meta::node::register;
use krcore_abi::meta::record::{ExportRecord, Grant, NodeRecord, NAME_LEN};
use krcore_abi::meta::serve::mem::Served;
use krcore_abi::meta::tables::{mem::MemRegion, Tables};
use krcore_abi::sqe::MrAccess;

/// The region's shape (small: the tests place entries themselves).
pub const TABLES: Tables = Tables {
    node_slots: 64,
    export_slots: 256,
    key: [0x6b72_636f_7265, 0x6e61_6d65],
};

/// A name root alone may import, as the rig's rings are root's (abi's default
/// credentials).
pub const ROOT_ONLY: Grant = Grant {
    uid: 0,
    gid: 0,
    mode: 0o600,
};

/// A node's MetaServer client and the MetaServer's region it reaches.
pub struct FakeMeta {
    /// What rings asked.
    pub client: MetaClient<VecStore>,
    /// The MetaServer's region (other nodes' records are placed in it directly).
    pub region: MemRegion,
    /// This node, registered.
    pub me: NodeRecord,
    /// Network work is due.
    pub due: bool,
}

impl FakeMeta {
    /// This node (at `ipv4`) registered with a fresh MetaServer.
    pub fn new(ipv4: [u8; 4]) -> FakeMeta {
        let mut region = MemRegion::new(TABLES.bytes());
        let mut me = NodeRecord {
            gid: [0; 16],
            ipv4,
            cm_port: 7471,
            incarnation: 0,
        };
        me.incarnation =
            register(&mut region, &TABLES, &me, 0..TABLES.export_slots).expect("registered");
        let cache = MetaCache::new(vec![None; 16], vec![(0, 0); 8]);
        FakeMeta {
            client: MetaClient::new(cache, vec![None; 16], vec![None; 4]),
            region,
            me,
            due: false,
        }
    }

    /// PUBLISH (the fabric's).
    pub fn publish(&mut self, name: &[u8; NAME_LEN], e: &Export, grant: Grant) -> Answer<()> {
        let record = ExportRecord::published(*name, self.me.id(), self.me.incarnation, e, grant);
        // The kernel's default share per user (`max_names_per_user`).
        let a = self.client.publish(record, e.descriptor, 1024);
        self.due |= a == Answer::Pending;
        a
    }

    /// IMPORT_NAME through a virtual QP connected to node `node`, asked by `user`.
    pub fn import(
        &mut self,
        name: &[u8; NAME_LEN],
        node: u16,
        user: u32,
    ) -> Answer<(Export, Grant)> {
        let a = self.client.import(name, Some(node), user);
        self.due |= a == Answer::Pending;
        a.map(|r| (r.export(), r.grant))
    }

    /// RESOLVE_NAME (as kmod/meta/mod.rs: the node's address is this node's /16 and
    /// the node's id).
    pub fn resolve(
        &mut self,
        name: &[u8; NAME_LEN],
        user: u32,
    ) -> Answer<(Located, Export, Grant)> {
        let a = self.client.import(name, None, user);
        self.due |= a == Answer::Pending;
        let [p0, p1, ..] = self.me.ipv4;
        a.map(|r| (Located::in_cluster([p0, p1], r.node), r.export(), r.grant))
    }

    /// A local export was revoked.
    pub fn unpublish(&mut self, descriptor: u64) {
        self.due |= self.client.unpublish(descriptor);
    }

    /// Runs every job due (the kernel's network work); how many.
    pub fn net(&mut self) -> usize {
        self.due = false;
        let mut window = vec![0u8; PROBE * EXPORT_FRAME];
        let mut n = 0;
        while let Some(job) = self.client.take_job() {
            let mut served = Served {
                region: &mut self.region,
                tables: TABLES,
                from: self.me.ipv4,
            };
            let outcome = run(&job, &mut served, &TABLES, &mut window);
            self.client.finish(job, outcome);
            n += 1;
        }
        n
    }

    /// Another node (at `ipv4`) registers and publishes `name` over `[addr, addr +
    /// len)` with `rkey`, granting `grant` (the rig's rings are root's: [`ROOT_ONLY`]),
    /// as its own kernel would.
    pub fn other_node_publishes(
        &mut self,
        ipv4: [u8; 4],
        name: &str,
        addr: u64,
        len: u32,
        rkey: u32,
        grant: Grant,
    ) -> NodeRecord {
        let mut other = NodeRecord {
            gid: [0; 16],
            ipv4,
            cm_port: 7471,
            incarnation: 0,
        };
        other.incarnation = register(&mut self.region, &TABLES, &other, 0..TABLES.export_slots)
            .expect("registered");
        let r = ExportRecord {
            name: krcore_abi::meta::record::name(name).expect("a name"),
            node: other.id(),
            incarnation: other.incarnation,
            addr,
            len,
            access: MrAccess::REMOTE_READ.bits() | MrAccess::REMOTE_WRITE.bits(),
            rkey,
            grant,
        };
        let mut window = vec![0u8; PROBE * EXPORT_FRAME];
        krcore_abi::meta::claim::publish(&mut self.region, &TABLES, &r, &mut window)
            .expect("published");
        other
    }
}
