// SPDX-License-Identifier: GPL-2.0
//! krcore across nodes: a device's connection sets to peer kernels ([`peer`], over
//! abi's `cluster` decisions), the door that admits peer kernels ([`door`]) and cm.c's connections under them, whose requests and
//! answers [`cm_wire`] reads and writes. The C half: cm.c (kernel-to-kernel RC
//! connections over rdma_cm) and cm_auth.c (the cluster key and its tags).

pub(crate) mod cm_wire;
pub(crate) mod door;
pub(crate) mod net;
pub(crate) mod peer;
