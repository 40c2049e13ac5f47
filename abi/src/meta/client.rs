//! A node's side of the MetaServer: what rings asked of it, and the jobs that do it.
//!
//! Rings ask from inside a submission, where nothing may wait for the network: a PUBLISH
//! or an IMPORT_NAME whose answer is not known yet gets [`Answer::Pending`], and its SQE
//! stays in the SQ (the engine stops with `Stall::Remote`). The module's own network
//! workers (never a caller's thread) then take [`jobs`](MetaClient::take_job) with no
//! engine lock held, run each with one-sided verbs or a request to the MetaServer's
//! kernel ([`run`]: a lookup is one READ), and hand the outcome back
//! ([`finish`](MetaClient::finish)), waking the rings; the SQE, submitted again, finds
//! its answer: a lookup's in the cache, a publication's in the table of this node's
//! published names, a failure kept for the asker until it comes back for it.
//!
//! A deregistered MR's names are revoked ([`unpublish`](MetaClient::unpublish)): the
//! tombstones are jobs too, run by the same workers.
//!
//! Bounded: the tables are caller storage; a full one answers `TableFull`.

use super::super::cqe::Reason;
use super::super::engine::Store;
use super::cache::MetaCache;
use super::lookup::{lookup, LookupError};
use super::record::{ExportRecord, NAME_LEN};
use super::request::{Call, Refusal, Reply, Request};
use super::tables::{Remote, Tables};

/// What a ring's request gets now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer<T> {
    /// Answered.
    Done(T),
    /// Failed, for this reason.
    Failed(Reason),
    /// Not known yet: a job will find out; ask again after it ran.
    Pending,
}

impl<T> Answer<T> {
    /// The answer with `f` applied to what it is done with.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Done(v) => Answer::Done(f(v)),
            Answer::Failed(why) => Answer::Failed(why),
            Answer::Pending => Answer::Pending,
        }
    }
}

/// Where one of this node's publications is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PubState {
    /// A PUBLISH asked for it; no job has taken it.
    Asked,
    /// A job is publishing it; `revoked` when its MR went meanwhile.
    Running { revoked: bool },
    /// In the MetaServer's slot `slot`.
    Live { slot: u32 },
    /// Failed; kept until the PUBLISH comes back for the reason.
    Failed(Reason),
    /// Its MR went: tombstone slot `slot` (tries left).
    Revoke { slot: u32, tries: u8 },
    /// A job is revoking it.
    Revoking { slot: u32, tries: u8 },
}

/// One of this node's publications.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Published {
    record: ExportRecord,
    /// The exporting MR's descriptor (the local export it publishes).
    descriptor: u64,
    state: PubState,
}

/// Where a lookup a ring asked for is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AskState {
    Asked,
    Running,
    Failed(Reason),
}

/// A lookup a ring asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    name: [u8; NAME_LEN],
    state: AskState,
    /// The user (slot) whose request made it: a user holds at most a quarter of the
    /// table's lookups under way.
    user: u32,
}

/// Work for the network, taken with [`MetaClient::take_job`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Job {
    /// Resolve a name.
    Lookup {
        /// The name.
        name: [u8; NAME_LEN],
    },
    /// Publish a record.
    Publish {
        /// The record.
        record: ExportRecord,
    },
    /// Tombstone a name's slot.
    Revoke {
        /// The name.
        name: [u8; NAME_LEN],
        /// Its slot.
        slot: u32,
    },
}

/// What a job found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A lookup's live record (of its node's current incarnation: see
    /// [`claim::revoke_node`](super::claim::revoke_node)).
    Found {
        /// The record.
        record: ExportRecord,
    },
    /// Published in slot `slot`.
    Published {
        /// The slot.
        slot: u32,
    },
    /// Revoked.
    Revoked,
    /// Failed, for this reason.
    Failed(Reason),
}

/// A node's requests to the MetaServer, over caller storage.
pub struct MetaClient<S: Store> {
    cache: MetaCache<S>,
    pubs: S::Buf<Option<Published>>,
    asks: S::Buf<Option<Ask>>,
    /// Exports other nodes revoked lately, `(node, rkey)` (see
    /// [`revoked_far`](Self::revoked_far)), the oldest overwritten first.
    revoked: [(u16, u32); RECENTLY_REVOKED],
    next_revoked: usize,
}

/// Revocations remembered against a lookup that read the record before the exporter
/// tombstoned it (one in flight across that many later revocations is not caught).
pub const RECENTLY_REVOKED: usize = 32;

/// Revocations tried this many times, then given up (the MetaServer is gone; the
/// export's node record moves on at its next registration, which makes it stale).
const REVOKE_TRIES: u8 = 8;

impl<S: Store> MetaClient<S> {
    /// Empty, over `cache`, `pubs` and `asks` (all `None`).
    pub fn new(
        cache: MetaCache<S>,
        pubs: S::Buf<Option<Published>>,
        asks: S::Buf<Option<Ask>>,
    ) -> Self {
        MetaClient {
            cache,
            pubs,
            asks,
            revoked: [(0, 0); RECENTLY_REVOKED],
            next_revoked: 0,
        }
    }

    /// IMPORT_NAME of `name` through a virtual QP connected to node `peer`; with no
    /// peer, RESOLVE_NAME (wherever it lives), asked by user `user` (its slot), who may
    /// have a quarter of the lookups under way at once (`Quota` past it): so no user's
    /// lookups of names nobody serves keep the others' from being asked.
    pub fn import(
        &mut self,
        name: &[u8; NAME_LEN],
        peer: Option<u16>,
        user: u32,
    ) -> Answer<ExportRecord> {
        if let Some(r) = self.cache.get(name) {
            return match peer.is_none_or(|p| r.node == p) {
                true => Answer::Done(r),
                false => Answer::Failed(Reason::NotOnPeer),
            };
        }
        let asks = self.asks.as_mut();
        if let Some(a) = asks.iter_mut().find(|a| a.is_some_and(|a| a.name == *name)) {
            return match a.expect("found").state {
                AskState::Failed(why) => {
                    *a = None;
                    Answer::Failed(why)
                }
                _ => Answer::Pending,
            };
        }
        let under_way = |a: &Option<Ask>| {
            a.is_some_and(|a| a.user == user && !matches!(a.state, AskState::Failed(_)))
        };
        if asks.iter().filter(|a| under_way(a)).count() >= asks.len().div_ceil(4) {
            return Answer::Failed(Reason::Quota);
        }
        // A free slot, else one holding a failure nobody came back for (its asker may
        // have closed its ring): it would hold the slot forever. Asking again costs
        // that asker a lookup, nothing more.
        let slot = match asks.iter().position(Option::is_none) {
            Some(i) => Some(i),
            None => asks
                .iter()
                .position(|a| a.is_some_and(|a| matches!(a.state, AskState::Failed(_)))),
        };
        match slot {
            Some(i) => {
                asks[i] = Some(Ask {
                    name: *name,
                    state: AskState::Asked,
                    user,
                });
                Answer::Pending
            }
            None => Answer::Failed(Reason::TableFull),
        }
    }

    /// PUBLISH of `record` (this node's, of the local export `descriptor`), by the
    /// user `record.grant.uid`, who may hold `share` of this node's publications (a
    /// name being revoked still holds its entry): past it, `Quota`.
    pub fn publish(&mut self, record: ExportRecord, descriptor: u64, share: usize) -> Answer<()> {
        let pubs = self.pubs.as_mut();
        let mine = pubs
            .iter_mut()
            .find(|p| p.is_some_and(|p| p.record.name == record.name));
        if let Some(e) = mine {
            let p = e.expect("found");
            // Another export's, or this one's with another owner or mode (a name's mode
            // is set when it is published: deregister to change it).
            if p.descriptor != descriptor || p.record.grant != record.grant {
                return Answer::Failed(Reason::NameTaken);
            }
            return match p.state {
                PubState::Live { .. } => Answer::Done(()),
                PubState::Failed(why) => {
                    *e = None;
                    Answer::Failed(why)
                }
                PubState::Asked | PubState::Running { .. } => Answer::Pending,
                PubState::Revoke { .. } | PubState::Revoking { .. } => {
                    Answer::Failed(Reason::NameTaken)
                }
            };
        }
        let uid = record.grant.uid;
        if pubs
            .iter()
            .flatten()
            .filter(|p| p.record.grant.uid == uid)
            .count()
            >= share
        {
            return Answer::Failed(Reason::Quota);
        }
        match pubs.iter_mut().find(|p| p.is_none()) {
            Some(free) => {
                *free = Some(Published {
                    record,
                    descriptor,
                    state: PubState::Asked,
                });
                Answer::Pending
            }
            None => Answer::Failed(Reason::TableFull),
        }
    }

    /// The rkey of the local export `descriptor`, if a name of it was published (or is
    /// being): other nodes may have imported it.
    pub fn published_rkey(&self, descriptor: u64) -> Option<u32> {
        self.pubs
            .as_ref()
            .iter()
            .flatten()
            .find(|p| p.descriptor == descriptor)
            .map(|p| p.record.rkey)
    }

    /// Node `node` revoked its export `rkey` (its Revoke notice): what was cached of it
    /// goes, and a lookup that still reads its record (the exporter tombstones it in
    /// the MetaServer in its own time) finds it `NoSuchName`.
    pub fn revoked_far(&mut self, node: u16, rkey: u32) {
        self.cache.forget_export(node, rkey);
        self.revoked[self.next_revoked] = (node, rkey);
        self.next_revoked = if self.next_revoked + 1 < RECENTLY_REVOKED {
            self.next_revoked + 1
        } else {
            0
        };
    }

    /// The local export `descriptor` was revoked: its published names go. Whether any
    /// job is due for it.
    pub fn unpublish(&mut self, descriptor: u64) -> bool {
        let mut due = false;
        for e in self.pubs.as_mut() {
            let Some(p) = e else { continue };
            if p.descriptor != descriptor {
                continue;
            }
            match p.state {
                PubState::Live { slot } => {
                    p.state = PubState::Revoke {
                        slot,
                        tries: REVOKE_TRIES,
                    };
                    due = true;
                }
                PubState::Running { .. } => p.state = PubState::Running { revoked: true },
                PubState::Asked | PubState::Failed(_) => *e = None,
                PubState::Revoke { .. } | PubState::Revoking { .. } => {}
            }
        }
        due
    }

    /// This node registered anew as `node` with `incarnation` (the MetaServer lost its
    /// record: it restarted, or another node took the slot): its live publications
    /// are published again under the new incarnation. How many.
    pub fn republish(&mut self, node: u16, incarnation: u64) -> usize {
        let mut n = 0;
        for p in self.pubs.as_mut().iter_mut().flatten() {
            if let PubState::Live { .. } = p.state {
                p.record.node = node;
                p.record.incarnation = incarnation;
                p.state = PubState::Asked;
                n += 1;
            }
        }
        n
    }

    /// Whether any name of this node is published (then its record is worth checking).
    pub fn publishes(&self) -> bool {
        self.pubs
            .as_ref()
            .iter()
            .flatten()
            .any(|p| matches!(p.state, PubState::Live { .. }))
    }

    /// Node `node`'s connection set broke: its cached records go (it may have
    /// restarted; the next lookup reads its record again).
    pub fn peer_lost(&mut self, node: u16) {
        self.cache.forget_node(node);
    }

    /// Whether a job waits to be taken.
    pub fn due(&self) -> bool {
        let asked = self.asks.as_ref().iter().flatten();
        let pubs = self.pubs.as_ref().iter().flatten();
        asked.into_iter().any(|a| a.state == AskState::Asked)
            || pubs
                .into_iter()
                .any(|p| matches!(p.state, PubState::Asked | PubState::Revoke { .. }))
    }

    /// The next job, marked taken.
    pub fn take_job(&mut self) -> Option<Job> {
        for a in self.asks.as_mut().iter_mut().flatten() {
            if a.state == AskState::Asked {
                a.state = AskState::Running;
                return Some(Job::Lookup { name: a.name });
            }
        }
        for p in self.pubs.as_mut().iter_mut().flatten() {
            match p.state {
                PubState::Asked => {
                    p.state = PubState::Running { revoked: false };
                    return Some(Job::Publish { record: p.record });
                }
                PubState::Revoke { slot, tries } => {
                    p.state = PubState::Revoking { slot, tries };
                    return Some(Job::Revoke {
                        name: p.record.name,
                        slot,
                    });
                }
                _ => {}
            }
        }
        None
    }

    /// `job` ended with `outcome`.
    pub fn finish(&mut self, job: Job, outcome: Outcome) {
        match job {
            Job::Lookup { name } => {
                let fail = match outcome {
                    Outcome::Found { record }
                        if self.revoked.contains(&(record.node, record.rkey)) =>
                    {
                        self.cache.saw_node(record.node, record.incarnation);
                        Some(Reason::NoSuchName)
                    }
                    Outcome::Found { record } => {
                        self.cache.saw_node(record.node, record.incarnation);
                        match self.cache.put(record) {
                            true => None,
                            // A newer incarnation was seen meanwhile.
                            false => Some(Reason::NoSuchName),
                        }
                    }
                    Outcome::Failed(why) => Some(why),
                    _ => Some(Reason::Verbs),
                };
                let a = self
                    .asks
                    .as_mut()
                    .iter_mut()
                    .find(|a| a.is_some_and(|a| a.name == name));
                if let Some(a) = a {
                    let user = a.map_or(0, |a| a.user);
                    *a = fail.map(|why| Ask {
                        name,
                        state: AskState::Failed(why),
                        user,
                    });
                }
            }
            Job::Publish { record } => {
                let Some(e) = self.entry(&record.name) else {
                    return;
                };
                let p = e.as_mut().expect("found");
                let revoked = matches!(p.state, PubState::Running { revoked: true });
                p.state = match (outcome, revoked) {
                    (Outcome::Published { slot }, false) => PubState::Live { slot },
                    (Outcome::Published { slot }, true) => PubState::Revoke {
                        slot,
                        tries: REVOKE_TRIES,
                    },
                    (_, true) => {
                        *e = None;
                        return;
                    }
                    (Outcome::Failed(why), false) => PubState::Failed(why),
                    (_, false) => PubState::Failed(Reason::Verbs),
                };
            }
            Job::Revoke { name, .. } => {
                self.cache.forget(&name);
                let Some(e) = self.entry(&name) else { return };
                let p = e.as_mut().expect("found");
                match (outcome, p.state) {
                    (Outcome::Failed(_), PubState::Revoking { slot, tries }) if tries > 1 => {
                        p.state = PubState::Revoke {
                            slot,
                            tries: tries - 1,
                        }
                    }
                    _ => *e = None,
                }
            }
        }
    }

    fn entry(&mut self, name: &[u8; NAME_LEN]) -> Option<&mut Option<Published>> {
        self.pubs
            .as_mut()
            .iter_mut()
            .find(|p| p.is_some_and(|p| p.record.name == *name))
    }
}

/// Runs `job` against the MetaServer's tables `t` through `r`: a lookup with READs, a
/// publication or revocation as a request its kernel answers. `buf` holds a probe
/// window.
pub fn run(job: &Job, r: &mut (impl Remote + Call), t: &Tables, buf: &mut [u8]) -> Outcome {
    match job {
        // One READ of the name's window: a whole record there is live.
        Job::Lookup { name } => match lookup(name, t, buf, r) {
            Ok((record, _)) => Outcome::Found { record },
            Err(e) => Outcome::Failed(match e {
                LookupError::NotFound => Reason::NoSuchName,
                LookupError::Torn(_) => Reason::Busy,
                LookupError::Read => Reason::Unreachable,
            }),
        },
        Job::Publish { record } => match r.call(&Request::Publish(*record)) {
            Ok(Reply::Published(slot)) if slot < t.export_slots => Outcome::Published { slot },
            Ok(Reply::Refused(why)) => Outcome::Failed(refusal_reason(why)),
            Ok(_) | Err(_) => Outcome::Failed(Reason::Unreachable),
        },
        Job::Revoke { name, slot } => match r.call(&Request::Revoke {
            name: *name,
            slot: *slot,
        }) {
            Ok(Reply::Revoked) => Outcome::Revoked,
            Ok(Reply::Refused(why)) => Outcome::Failed(refusal_reason(why)),
            Ok(_) | Err(_) => Outcome::Failed(Reason::Unreachable),
        },
    }
}

/// What a ring is told of a refusal. One that says this node is not who it claims
/// (its record went with a MetaServer restart) is `Unreachable`, as the check that
/// registers it again finds.
fn refusal_reason(why: Refusal) -> Reason {
    match why {
        Refusal::Taken => Reason::NameTaken,
        Refusal::Full => Reason::TableFull,
        // This node's names hold its share of the MetaServer's table.
        Refusal::Share => Reason::Quota,
        Refusal::Contended => Reason::Busy,
        Refusal::Malformed | Refusal::NotYours | Refusal::SlotHeld => Reason::Unreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::VecStore;
    use crate::meta::lookup::{EXPORT_FRAME, PROBE};
    use crate::meta::node::register;
    use crate::meta::record::{name, NodeRecord};
    use crate::meta::serve::mem::Served;
    use crate::meta::tables::mem::MemRegion;
    use alloc::vec;
    use alloc::vec::Vec;

    const T: Tables = Tables {
        node_slots: 16,
        export_slots: 64,
        key: [7, 11],
    };

    struct Node {
        client: MetaClient<VecStore>,
        me: NodeRecord,
    }

    impl Node {
        fn new(m: &mut MemRegion, last: u8) -> Node {
            let mut me = NodeRecord {
                gid: [0; 16],
                ipv4: [192, 0, 2, last],
                cm_port: 7471,
                incarnation: 0,
            };
            me.incarnation = register(m, &T, &me, 0..T.export_slots).unwrap();
            Node {
                client: MetaClient::new(
                    MetaCache::new(vec![None; 4], vec![(0, 0); 4]),
                    vec![None; 4],
                    vec![None; 2],
                ),
                me,
            }
        }
        fn record(&self, n: &str) -> ExportRecord {
            ExportRecord {
                name: name(n).unwrap(),
                node: self.me.id(),
                incarnation: self.me.incarnation,
                addr: 0x1000,
                len: 64,
                access: 2,
                rkey: 77,
                grant: crate::meta::record::Grant {
                    uid: 1000,
                    gid: 1000,
                    mode: crate::meta::record::MODE_DEFAULT,
                },
            }
        }
        /// Runs every due job.
        fn net(&mut self, m: &mut MemRegion) -> usize {
            let mut buf = vec![0u8; PROBE * EXPORT_FRAME];
            let mut n = 0;
            while let Some(j) = self.client.take_job() {
                let mut served = Served {
                    region: &mut *m,
                    tables: T,
                    from: self.me.ipv4,
                };
                let o = run(&j, &mut served, &T, &mut buf);
                self.client.finish(j, o);
                n += 1;
            }
            n
        }
    }

    #[test]
    fn publish_import_revoke_across_two_nodes() {
        let mut m = MemRegion::new(T.bytes());
        let (mut a, mut b) = (Node::new(&mut m, 11), Node::new(&mut m, 12));
        let kv = a.record("kv");
        assert_eq!(a.client.publish(kv, 9, 4), Answer::Pending);
        assert_eq!(a.client.publish(kv, 9, 4), Answer::Pending, "one job");
        assert_eq!(a.net(&mut m), 1);
        assert_eq!(a.client.publish(kv, 9, 4), Answer::Done(()));
        assert_eq!(
            a.client.publish(kv, 10, 4),
            Answer::Failed(Reason::NameTaken),
            "another MR of ours"
        );

        let n = &kv.name;
        assert_eq!(b.client.import(n, Some(a.me.id()), 0), Answer::Pending);
        assert!(b.client.due());
        let verbs = m.verbs;
        b.net(&mut m);
        assert_eq!(m.verbs - verbs, 1, "one READ");
        assert_eq!(b.client.import(n, Some(a.me.id()), 0).map_rkey(), Some(77));
        let verbs = m.verbs;
        assert_eq!(b.client.import(n, Some(a.me.id()), 0).map_rkey(), Some(77));
        assert_eq!(m.verbs, verbs, "cached");
        assert_eq!(
            b.client.import(n, Some(13), 0),
            Answer::Failed(Reason::NotOnPeer)
        );
        assert_eq!(
            b.client.import(n, None, 0).map_rkey(),
            Some(77),
            "resolved wherever it lives"
        );
        assert_eq!(
            a.me.id(),
            u16::from_be_bytes([2, 11]),
            "the address's low 16 bits"
        );

        // A revokes: a new lookup finds nothing.
        assert!(a.client.unpublish(9));
        a.net(&mut m);
        let c = &mut Node::new(&mut m, 14);
        assert_eq!(c.client.import(n, Some(a.me.id()), 0), Answer::Pending);
        c.net(&mut m);
        assert_eq!(
            c.client.import(n, Some(a.me.id()), 0),
            Answer::Failed(Reason::NoSuchName)
        );
        assert_eq!(
            c.client.import(n, Some(a.me.id()), 0),
            Answer::Pending,
            "asked again"
        );
    }

    /// A's Revoke notice reaches B before A tombstoned the name in the MetaServer: B's
    /// cached record goes, and a lookup that still reads the live record is refused.
    #[test]
    fn a_revoke_notice_beats_the_metaserver() {
        let mut m = MemRegion::new(T.bytes());
        let (mut a, mut b) = (Node::new(&mut m, 11), Node::new(&mut m, 12));
        let kv = a.record("kv");
        a.client.publish(kv, 9, 4);
        a.net(&mut m);
        assert_eq!(a.client.published_rkey(9), Some(77));
        assert_eq!(a.client.published_rkey(10), None);
        b.client.import(&kv.name, Some(a.me.id()), 0);
        b.net(&mut m);
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0).map_rkey(),
            Some(77)
        );
        b.client.revoked_far(a.me.id(), 77);
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Pending,
            "not cached any more"
        );
        b.net(&mut m);
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Failed(Reason::NoSuchName),
            "the MetaServer's record is live still, but revoked"
        );
    }

    #[test]
    fn a_reload_makes_cached_and_published_records_stale() {
        let mut m = MemRegion::new(T.bytes());
        let (mut a, mut b) = (Node::new(&mut m, 11), Node::new(&mut m, 12));
        let kv = a.record("kv");
        a.client.publish(kv, 9, 4);
        a.net(&mut m);
        b.client.import(&kv.name, Some(a.me.id()), 0);
        b.net(&mut m);
        assert!(matches!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Done(_)
        ));
        // A reloads without revoking; B's set to it broke.
        let mut a = Node::new(&mut m, 11);
        assert_eq!(a.me.incarnation, 2);
        b.client.peer_lost(a.me.id());
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Pending
        );
        b.net(&mut m);
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Failed(Reason::NoSuchName),
            "the old incarnation's export is stale"
        );
        // The reloaded A publishes the name again: its earlier record is claimed over.
        let kv = a.record("kv");
        assert_eq!(kv.incarnation, 2);
        a.client.publish(kv, 1, 4);
        a.net(&mut m);
        assert_eq!(a.client.publish(kv, 1, 4), Answer::Done(()));
        b.client.import(&kv.name, Some(a.me.id()), 0);
        b.net(&mut m);
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Done(kv),
            "the new incarnation's"
        );
    }

    /// The MetaServer restarts with empty tables: the exporter registers anew and
    /// republishes; an importer that never looked the name up finds it.
    #[test]
    fn a_metaserver_restart_is_followed_by_republishing() {
        let mut m = MemRegion::new(T.bytes());
        let mut a = Node::new(&mut m, 11);
        let kv = a.record("kv");
        a.client.publish(kv, 9, 4);
        a.net(&mut m);
        assert!(a.client.publishes());
        let mut m = MemRegion::new(T.bytes());
        let again = register(&mut m, &T, &a.me, 0..T.export_slots).unwrap();
        assert_eq!(again, a.me.incarnation + 1);
        assert_eq!(a.client.republish(a.me.id(), again), 1);
        assert_eq!(a.net(&mut m), 1);
        let mut b = Node::new(&mut m, 12);
        b.client.import(&kv.name, Some(a.me.id()), 0);
        b.net(&mut m);
        assert_eq!(
            b.client.import(&kv.name, Some(a.me.id()), 0),
            Answer::Done(ExportRecord {
                incarnation: again,
                ..kv
            })
        );
    }

    #[test]
    fn a_user_holds_its_share_of_the_publications_and_no_more() {
        let mut m = MemRegion::new(T.bytes());
        let mut a = Node::new(&mut m, 12);
        let of = |uid: u32, n: &str| {
            let mut r = a.record(n);
            r.grant.uid = uid;
            r
        };
        let (x, y, z, w) = (of(1000, "x"), of(1000, "y"), of(1000, "z"), of(1001, "w"));
        assert_eq!(a.client.publish(x, 1, 2), Answer::Pending);
        assert_eq!(a.client.publish(y, 1, 2), Answer::Pending);
        assert_eq!(a.client.publish(z, 1, 2), Answer::Failed(Reason::Quota));
        // Another user's share is its own, though the table has room for one more.
        assert_eq!(a.client.publish(w, 2, 2), Answer::Pending);
        a.net(&mut m);
        assert_eq!(a.client.publish(x, 1, 2), Answer::Done(()));
        assert_eq!(a.client.publish(z, 1, 2), Answer::Failed(Reason::Quota));
        // A revoked name's entry goes with its job, and the share with it.
        a.client.unpublish(1);
        assert_eq!(
            a.client.publish(z, 3, 2),
            Answer::Failed(Reason::Quota),
            "revoking"
        );
        a.net(&mut m);
        assert_eq!(a.client.publish(z, 3, 2), Answer::Pending);
    }

    #[test]
    fn a_node_past_its_share_of_the_metaserver_gets_quota() {
        let mut m = MemRegion::new(T.bytes());
        m.share = 1;
        let mut a = Node::new(&mut m, 13);
        let (x, y) = (a.record("x"), a.record("y"));
        a.client.publish(x, 1, 4);
        a.client.publish(y, 1, 4);
        a.net(&mut m);
        assert_eq!(a.client.publish(x, 1, 4), Answer::Done(()));
        assert_eq!(a.client.publish(y, 1, 4), Answer::Failed(Reason::Quota));
    }

    #[test]
    fn a_user_has_a_quarter_of_the_lookups_under_way() {
        let mut m = MemRegion::new(T.bytes());
        let mut a = Node::new(&mut m, 14);
        // Node::new's table asks 2 at once: a quarter is 1 (rounded up).
        let (p, q) = (name("p").unwrap(), name("q").unwrap());
        assert_eq!(a.client.import(&p, Some(1), 7), Answer::Pending);
        assert_eq!(
            a.client.import(&q, Some(1), 7),
            Answer::Failed(Reason::Quota)
        );
        assert_eq!(
            a.client.import(&q, Some(1), 8),
            Answer::Pending,
            "another user's own"
        );
        assert_eq!(
            a.client.import(&p, Some(1), 8),
            Answer::Pending,
            "a name asked already"
        );
    }

    #[test]
    fn an_unreachable_metaserver_and_full_tables_say_so() {
        let mut m = MemRegion::new(T.bytes());
        let mut a = Node::new(&mut m, 11);
        m.down = true;
        a.client.publish(a.record("x"), 1, 4);
        a.net(&mut m);
        assert_eq!(
            a.client.publish(a.record("x"), 1, 4),
            Answer::Failed(Reason::Unreachable)
        );
        let names: Vec<_> = (0..5).map(|i| alloc::format!("n{i}")).collect();
        let answers: Vec<_> = names
            .iter()
            .map(|n| a.client.publish(a.record(n), 2, 8))
            .collect();
        assert_eq!(answers[4], Answer::Failed(Reason::TableFull));
        // Users 0, 1 and 2 (a quarter of 2 lookups each).
        a.client.import(&name("p").unwrap(), Some(1), 0);
        a.client.import(&name("q").unwrap(), Some(1), 1);
        assert_eq!(
            a.client.import(&name("r").unwrap(), Some(1), 2),
            Answer::Failed(Reason::TableFull)
        );
        // Their lookups fail (the MetaServer is down) and nobody comes back for the
        // answers: new lookups take those slots.
        a.net(&mut m);
        assert_eq!(
            a.client.import(&name("r").unwrap(), Some(1), 2),
            Answer::Pending
        );
        assert_eq!(
            a.client.import(&name("s").unwrap(), Some(1), 3),
            Answer::Pending
        );
    }

    impl Answer<ExportRecord> {
        fn map_rkey(self) -> Option<u32> {
            match self {
                Answer::Done(r) => Some(r.rkey),
                _ => None,
            }
        }
    }
}
