//! The MetaServer's entries: what a few designated nodes hold in registered
//! kernel memory so that every other node's kernel finds a peer's connection metadata
//! and exported memory with one-sided RDMA READs, no server thread on the lookup path.
//!
//! - [`frame`]: every entry is a fixed-size *frame*, a payload between two copies of a
//!   version word with a checksum, written by exactly one owner in a fixed order, so a
//!   READ racing a rewrite is detected as torn and retried, never used.
//! - [`record`]: the payloads: a node's record (its address and GID for rdma_cm, and its
//!   *incarnation*, which moves when its module reloads) and an export's record (the
//!   exporting node and incarnation, the range, rights and rkey; the name is the key).
//! - [`tables`]: where entries lie in the MetaServer's region, and the one-sided verbs
//!   ([`Remote`](tables::Remote)) a node's kernel reaches them with.
//! - [`request`]: what a node asks of the MetaServer's kernel (register, publish,
//!   revoke) and its answers: the only way an entry is written; members only READ.
//! - [`serve`]: that kernel's checks that a node writes only its own entries.
//! - [`node`]: registering a node's record (its incarnation chosen there), reading one.
//! - [`claim`]: how an export is published (a slot claimed by compare-and-swap) and
//!   revoked (a tombstone) next to readers that never lock.
//! - [`lookup`]: an export by name in one READ of its probe window, read again while an
//!   entry in it is being rewritten, given up after a bound. A whole record found is
//!   live: the MetaServer revokes a node's records when it registers again
//!   ([`claim::revoke_node`]), before its incarnation moves, so no READ of the node's
//!   record is needed.
//! - [`cache`]: a node's cache of lookups, dropping records of an earlier incarnation
//!   of their node and revoked ones.
//! - [`client`]: what rings asked of the MetaServer, as jobs run outside the engine's
//!   locks, and their answers.
//!
//! A cached result is stale once its node's incarnation moved (the node restarted: its
//! QPs and MRs are gone); callers cache results keyed by it and drop them when a lookup
//! shows a newer incarnation of the node, or when their connection set to the node
//! breaks.

pub mod cache;
pub mod claim;
pub mod client;
pub mod frame;
pub mod lookup;
pub mod node;
pub mod record;
pub mod request;
pub mod serve;
pub mod siphash;
pub mod tables;
