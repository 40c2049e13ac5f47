/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Why an entry failed, as text: generated from abi's Reason by
 * `KRCORE_BLESS=1 cargo test -p krcore-abi --test c_header`; do not edit. */
#ifndef KRCORE_REASONS_H
#define KRCORE_REASONS_H

#include <stdint.h>

/* A reason's name (a CQE's `reason`); NULL for one this header does not know. */
static inline const char *krcore_reason_name(uint16_t reason)
{
	switch (reason) {
	case 0: return "none";
	case 1: return "bad_opcode";
	case 2: return "unknown_flags";
	case 3: return "reserved_nonzero";
	case 4: return "bad_vqp";
	case 5: return "bad_mr";
	case 6: return "local_range";
	case 7: return "bad_remote_mr";
	case 8: return "remote_range";
	case 9: return "misaligned";
	case 10: return "bad_length";
	case 11: return "mr_access";
	case 12: return "busy";
	case 13: return "table_full";
	case 14: return "no_device";
	case 15: return "qp_error";
	case 16: return "ring_closed";
	case 17: return "verbs";
	case 18: return "remote_error";
	case 19: return "not_owner";
	case 20: return "bad_descriptor";
	case 21: return "throttled";
	case 22: return "deadline";
	case 23: return "no_receiver";
	case 24: return "too_long";
	case 25: return "cancelled";
	case 26: return "unreachable";
	case 27: return "no_link";
	case 28: return "bad_name";
	case 29: return "name_taken";
	case 30: return "no_such_name";
	case 31: return "not_on_peer";
	case 32: return "service_taken";
	case 33: return "not_listening";
	case 34: return "peer_gone";
	case 35: return "bad_port";
	case 36: return "not_permitted";
	case 37: return "refused";
	case 38: return "quota";
	case 39: return "wrong_owner";
	case 40: return "not_through_uring";
	}
	return 0;
}

/* A reason's describe (a CQE's `reason`); NULL for one this header does not know. */
static inline const char *krcore_reason_describe(uint16_t reason)
{
	switch (reason) {
	case 0: return "no error";
	case 1: return "unknown opcode";
	case 2: return "unknown flag bits";
	case 3: return "reserved or unused field is nonzero";
	case 4: return "no such virtual QP on this ring";
	case 5: return "no such local MR on this ring";
	case 6: return "local range outside the MR";
	case 7: return "no such imported remote MR for this virtual QP";
	case 8: return "remote range outside the imported MR";
	case 9: return "atomic not 8-byte aligned or not 8 bytes long";
	case 10: return "length zero or over the maximum";
	case 11: return "MR access rights forbid the operation";
	case 12: return "requests in flight hold it";
	case 13: return "table full";
	case 14: return "no RDMA device for the peer";
	case 15: return "physical QP failed; operation flushed";
	case 16: return "ring closed with the operation in flight";
	case 17: return "verbs refused the request";
	case 18: return "transport or remote error";
	case 19: return "only the ring owner's threads may register memory: use enter";
	case 20: return "no live export with this descriptor";
	case 21: return "this ring broke shared QPs: throttled for a while";
	case 22: return "no progress within the request deadline";
	case 23: return "no receive took the message: none posted in time, or the peer left";
	case 24: return "message longer than the receive buffer";
	case 25: return "cancelled: a receive by DISCONNECT, a listen by UNLISTEN";
	case 26: return "no connection to the peer node or the MetaServer: it did not answer or refused";
	case 27: return "no message link: the virtual QP's link is gone";
	case 28: return "export name empty, over 24 bytes, or not NUL-padded";
	case 29: return "export name already published";
	case 30: return "no live export of that name (never published, revoked, or its node restarted)";
	case 31: return "the export lives on another node than the virtual QP connects to";
	case 32: return "that port is held: by a listen, by another user, or by a link with the same peer and ports";
	case 33: return "this ring does not listen on that service";
	case 34: return "the peer node closed the connection (its module unloaded or its device went); CONNECT again once it is back";
	case 35: return "no port: 0 where one must be named, or over 65535";
	case 36: return "not permitted: a port below 1024 needs CAP_NET_BIND_SERVICE, and a name's mode may grant this user none of its rights";
	case 37: return "the peer refused: nobody listened on its port within the deadline, or its listener had no room";
	case 38: return "this user's share of the device's table is used up (max_*_per_user), or its dials to new nodes in progress are as many as it may have";
	case 39: return "the name was published by another user than the one named (or, naming none, than this user or root)";
	case 40: return "io_uring cannot carry this entry (LISTEN, REG_MR, RECV): use krcore's own ring";
	}
	return 0;
}

#endif
