//! krcore across machines: the decisions a node's kernel makes about its
//! peers, kept here to be tested without a cluster. The module's remote CONNECT
//! (kmod/cluster/peer.rs) runs on them.
//!
//! - [`auth`]: how a kernel proves it holds the cluster key, and what a stranger's
//!   requests can cost a member (nothing but their own refusal).
//! - [`drain`]: closing a set's connections only once their completions are all polled.
//! - [`hello`]: the connection requests' private data and the listener's answers, read
//!   strictly, and the transcript a tag covers.
//! - [`conn_set`]: a node's connection set to one peer, and how two nodes connecting to
//!   each other at once end with one.
//! - [`peers`]: the table of a node's sets, each owning a block of the device's
//!   physical QP slots, reused least recently used first when nothing is bound.
//! - [`notice`]: what two kernels tell each other about the message links between
//!   their nodes, and about revoked exports, on the set's QPs.
//! - [`keys`]: the keys of receives advertised to peer kernels, and when one let go
//!   may be made again.
//! - [`revoke`]: revoking an export other nodes may have imported, on every node the
//!   exporter has a set with, before its memory goes.
//!
//! What the MetaServer holds and how it is read is in [`meta`](super::meta).

pub mod accepted;
pub mod auth;
pub mod conn_set;
pub mod drain;
pub mod hello;
pub mod keys;
pub mod notice;
pub mod peers;
pub mod revoke;
