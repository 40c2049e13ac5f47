// SPDX-License-Identifier: GPL-2.0
//! One device's engine: abi's multiplexing engine over the device's verbs objects. The
//! device context ([`devctx`]) holds each part under its own lock (its lock order is
//! written there); [`fabric`] is the engine's view of the pooled QPs, the links shards,
//! the membership and the exports; [`backend`] posts and polls through the shim;
//! [`keys`] holds the keys of receives advertised to peers; the
//! CQ's events run [`cq_events`]; [`store`] is the engine's storage in the kernel.

pub(crate) mod backend;
pub(crate) mod cq_events;
pub(crate) mod devctx;
pub(crate) mod fabric;
pub(crate) mod keys;
pub(crate) mod qp_bits;
pub(crate) mod rings;
pub(crate) mod store;
