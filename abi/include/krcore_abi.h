/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* krcore's user/kernel ABI: rings, entries, ioctls. Generated from abi/ by
 * `KRCORE_BLESS=1 cargo test -p krcore-abi --test c_header`; do not edit. */

#ifndef KRCORE_ABI_H
#define KRCORE_ABI_H



#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// Connections the listener holds at once.
#define krcore_MAX_ACCEPTED 64

// Connections one source node may hold: a set's (two QPs, and a set being made anew
// beside one draining) and a MetaServer client's per device, with room to spare.
#define krcore_ACCEPTED_PER_NODE 8

// Places a node already holding connections may not take: kept for nodes holding none.
#define krcore_ACCEPTED_KEPT_FOR_NEW 8

// Challenges redeemed by good proofs that a gate remembers while they could still be
// in time: when more come within [`CHALLENGE_MS`] (only members make them), the oldest
// is forgotten and every challenge issued as early is refused from then on (its
// dialer asks again).
#define krcore_SPENT 64

// How far a FRESH proof's time may be from the listener's clock, ms, either way.
#define krcore_FRESH_MS krcore_CHALLENGE_MS

// Fresh proofs a listener remembers: when more come within [`FRESH_MS`], the oldest
// is forgotten and every proof as old as it is refused from then on (its dialer
// answers a challenge instead).
#define krcore_SEEN 32

// How long a dialer gives one connection of a set, from resolving the peer's address
// to the connection being up, ms (the module's rdma_cm timeout).
#define krcore_SET_CONNECT_MS 10000

// Tries more a dialer gives one connection of a set that a refusal no key proved
// ended (any host may write one, and a member refuses so when it has no room yet):
// such a refusal costs a retry, no more. What changes the set's state (a yield) comes
// proved.
#define krcore_UNPROVED_RETRIES 1

// How long a yielded attempt waits for the peer's set to begin (its first
// connection's request, which makes this an adoption), ms: past it, a CONNECT dials
// anew. The peer asks within [`SET_CONNECT_MS`] of its dial.
#define krcore_YIELD_MS (krcore_SET_CONNECT_MS + 2000)

// A hello's step byte: a dial's first request, with a proof made over the dialer's
// time in place of a challenge ([`auth`](super::auth) says when it is admitted).
#define krcore_FRESH 3

// Dials to other nodes one user may have in progress at once; a CONNECT that would
// start another fails `Quota`. A dial to an address that never answers holds its
// entry until the CM gives up (seconds), so without this one user's CONNECTs to such
// addresses would hold the whole table and fail every other user's first contact.
#define krcore_DIALS_PER_USER 2

// How long a dial may wait for one of the device's workers to take it, ms: past it the
// attempt is failed (the set backs off) and its CONNECTs end `Unreachable`. Workers
// take dials oldest first, so a wait this long means every worker stayed on dials
// that never answer; nobody's CONNECT waits on them longer than this.
#define krcore_DIAL_WAIT_MS 10000

// Users an entry names as holding virtual QPs on it ([`Peer::pins`]).
#define krcore_PIN_USERS 4

// How many reasons there are (one past the last code).
#define krcore_Reason_COUNT 41

// The ABI version this crate describes; the kernel reports its own in
// [`QueryDevices::abi_version`] and user space refuses a mismatch.
#define krcore_ABI_VERSION 3

// `gid_index` of a row that lists a port without any valid GID.
#define krcore_GID_NONE UINT32_MAX

// Length of [`DeviceGid::name`], the kernel's `IB_DEVICE_NAME_MAX`.
#define krcore_DEVICE_NAME_LEN 64

// Services a node's rings may listen on at once (each shard's listener table).
#define krcore_MAX_LISTENERS 32

// Listens one ring may hold at once.
#define krcore_RING_LISTENS 4

// One client may hold at most 1/`CLIENT_SHARE` of a listening ring's virtual QPs
// (at least one) through the listen's accepts.
#define krcore_CLIENT_SHARE 4

// The longest RECV (bytes): the backend writes a message with a key made for its
// receive alone, a fast registration of at most 257 pages (1 MiB, not page-aligned).
#define krcore_MAX_RECV (1 << 20)

// Ports below this need `CAP_NET_BIND_SERVICE`.
#define krcore_PRIVILEGED 1024

// The first ephemeral port.
#define krcore_EPHEMERAL_FIRST 32768

// The last ephemeral port.
#define krcore_EPHEMERAL_LAST 60999

// The default deadline of a send request: past it with no completion on its QP, the
// QP is failed and its requests complete with `Deadline` (the module's
// `request_timeout_ms` sets it). The wire's own retries end far sooner on a live
// fabric.
#define krcore_DEFAULT_DEADLINE_MS 5000

// The `cmd_op` of a krcore entry in an `IORING_OP_URING_CMD` ("KRUE"; any other is
// refused with `EOPNOTSUPP`).
#define krcore_URING_CMD_ENTRY 1263686981

// The ioctl type byte of every krcore command.
#define krcore_IOC_MAGIC 75

// Number of [`IOC_QUERY_DEVICES`].
#define krcore_NR_QUERY_DEVICES 1

// Query the ABI version and the RDMA devices the module sees, with their ports and GIDs.
// Argument: [`QueryDevices`]. `_IOWR('K', 0x01, struct QueryDevices)`, written out so the
// C header carries the number; the assert below pins it to the encoding.
#define krcore_IOC_QUERY_DEVICES 3223866113

// Number of [`IOC_SETUP`].
#define krcore_NR_SETUP 2

// Set up this file's rings. Argument: [`SetupParams`] (sizes in, offsets out). Once per
// file: a second setup is `EBUSY`. `_IOWR('K', 0x02, struct SetupParams)`.
#define krcore_IOC_SETUP 3227536130

// Number of [`IOC_ENTER`].
#define krcore_NR_ENTER 3

// Submit and wait. Argument: [`EnterArgs`]. Returns the number of SQEs taken, or
// `EINVAL` (with `TAIL_OVERRUN` set) when the SQ tail is hostile.
// `_IOW('K', 0x03, struct EnterArgs)`.
#define krcore_IOC_ENTER 1075858179

// Number of [`IOC_ENTER_VALUE`].
#define krcore_NR_ENTER_VALUE 7

// [`IOC_ENTER`] with its arguments in the ioctl's argument itself
// ([`EnterArgs::pack`]), as `io_uring_enter` takes them in registers: nothing is copied
// from user memory. Arguments that do not pack go through [`IOC_ENTER`].
// `_IO('K', 0x07)`.
#define krcore_IOC_ENTER_VALUE 19207

// Number of [`IOC_REGISTER_EVENTFD`].
#define krcore_NR_REGISTER_EVENTFD 4

// Register an eventfd signalled when the ring gains completions. Argument:
// [`EventfdArgs`]. `_IOW('K', 0x04, struct EventfdArgs)`.
#define krcore_IOC_REGISTER_EVENTFD 1074809604

// Number of [`IOC_ONE`].
#define krcore_NR_ONE 5

// The one-ioctl-per-op path (see [`compat`](super::compat)): push one SQE and/or pop
// one CQE through the file's rings. Argument: [`OneOp`].
// `_IOWR('K', 0x05, struct OneOp)`.
#define krcore_IOC_ONE 3229633285

// Number of [`IOC_DIRECT`].
#define krcore_NR_DIRECT 6

// Benchmark baseline, served only when the module is loaded with `bench_direct=1`
// (`EPERM` otherwise): validate one send-queue SQE against the file's tables and post
// it straight to its physical QP, bypassing rings, in-flight tracking and credits, then
// wait for it and return its CQE (engine/direct.rs); a `Busy` CQE while
// anything else is outstanding on the device. Argument: [`OneOp`] (`sqe` in, `cqe`
// out). `_IOWR('K', 0x06, struct OneOp)`.
#define krcore_IOC_DIRECT 3229633286

// mmap offset of the SQ ring.
#define krcore_OFF_SQ_RING 0

// mmap offset of the CQ ring.
#define krcore_OFF_CQ_RING 134217728

// Largest SQ a ring may ask for.
#define krcore_MAX_SQ_ENTRIES 4096

// Largest CQ a ring may ask for.
#define krcore_MAX_CQ_ENTRIES 8192

// The mode bits a PUBLISH may give: read and write for owner, group and others.
#define krcore_MODE_BITS 438

// The mode of a PUBLISH that names none (0): its owner's alone, as `umask 077`
// leaves a file.
#define krcore_MODE_DEFAULT 384

// One past the last opcode (`IORING_OP_LAST`'s role): sizes per-opcode tables.
#define krcore_OPCODE_LAST 19

// An operation code. The closed set: any other byte is rejected with
// [`Reason::BadOpcode`](super::cqe::Reason::BadOpcode).
enum krcore_Opcode
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint8_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Does nothing; completes with 0. Measures the ring crossing itself.
  KRCORE_OPCODE_NOP = 0,
  // Registers user memory for local and remote access.
  KRCORE_OPCODE_REG_MR = 1,
  // Deregisters a memory region.
  KRCORE_OPCODE_DEREG_MR = 2,
  // Binds a virtual QP to a pooled physical QP connected to a peer.
  KRCORE_OPCODE_CONNECT = 3,
  // Releases a virtual QP.
  KRCORE_OPCODE_DISCONNECT = 4,
  // Imports a peer's memory region so remote ranges can be validated.
  KRCORE_OPCODE_IMPORT_MR = 5,
  // One-sided RDMA READ.
  KRCORE_OPCODE_READ = 6,
  // One-sided RDMA WRITE.
  KRCORE_OPCODE_WRITE = 7,
  // Two-sided SEND.
  KRCORE_OPCODE_SEND = 8,
  // SEND with immediate data.
  KRCORE_OPCODE_SEND_IMM = 9,
  // RDMA WRITE with immediate data.
  KRCORE_OPCODE_WRITE_IMM = 10,
  // Posts a receive buffer.
  KRCORE_OPCODE_RECV = 11,
  // 8-byte remote compare-and-swap.
  KRCORE_OPCODE_CAS = 12,
  // 8-byte remote fetch-and-add.
  KRCORE_OPCODE_FAA = 13,
  // Publishes an MR's export in the MetaServer under a name.
  KRCORE_OPCODE_PUBLISH = 14,
  // Imports another node's export by name, through the MetaServer.
  KRCORE_OPCODE_IMPORT_NAME = 15,
  // Listens for a service: each peer node's virtual QP that CONNECTs to this node for
  // it gets a virtual QP here, in a CQE of this entry (multishot).
  KRCORE_OPCODE_LISTEN = 16,
  // Ends this ring's LISTEN for a service.
  KRCORE_OPCODE_UNLISTEN = 17,
  // Finds the node that holds a published name (so a CONNECT can reach it), through
  // the MetaServer.
  KRCORE_OPCODE_RESOLVE_NAME = 18,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum krcore_Opcode krcore_Opcode;
#else
typedef uint8_t krcore_Opcode;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// Why an entry was rejected or failed. Stored in [`Cqe::reason`] beside the errno, so a
// user can tell an out-of-range length from an unknown MR though both are `EINVAL`.
enum krcore_Reason
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint16_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Not a failure.
  KRCORE_REASON_NONE = 0,
  // The opcode byte names no operation.
  KRCORE_REASON_BAD_OPCODE = 1,
  // A flag bit this ABI does not define is set.
  KRCORE_REASON_UNKNOWN_FLAGS = 2,
  // A reserved field, or a field the opcode does not read, is nonzero.
  KRCORE_REASON_RESERVED_NONZERO = 3,
  // The virtual QP handle names no connected virtual QP of this ring.
  KRCORE_REASON_BAD_VQP = 4,
  // The local MR handle names no registered MR of this ring.
  KRCORE_REASON_BAD_MR = 5,
  // The local range is not inside the named MR.
  KRCORE_REASON_LOCAL_RANGE = 6,
  // The remote MR handle names no MR imported for this virtual QP.
  KRCORE_REASON_BAD_REMOTE_MR = 7,
  // The remote range is not inside the imported MR.
  KRCORE_REASON_REMOTE_RANGE = 8,
  // An atomic's local or remote address is not 8-byte aligned, or its length is not 8.
  KRCORE_REASON_MISALIGNED = 9,
  // The length is zero where data must move, or over the maximum message size.
  KRCORE_REASON_BAD_LENGTH = 10,
  // The MR's access rights do not allow the operation.
  KRCORE_REASON_MR_ACCESS = 11,
  // Operations in flight that only a peer can complete (receives) hold the object.
  KRCORE_REASON_BUSY = 12,
  // A fixed-capacity table (virtual QPs, MRs, in-flight slots) is full.
  KRCORE_REASON_TABLE_FULL = 13,
  // No RDMA device can reach the peer, or the device went away.
  KRCORE_REASON_NO_DEVICE = 14,
  // The physical QP failed; the operation was flushed.
  KRCORE_REASON_QP_ERROR = 15,
  // The ring was closed with the operation in flight.
  KRCORE_REASON_RING_CLOSED = 16,
  // The verbs layer refused the request.
  KRCORE_REASON_VERBS = 17,
  // The work completion reported a transport or remote error.
  KRCORE_REASON_REMOTE_ERROR = 18,
  // Only a thread of the process that set up the ring may pin memory (REG_MR): submit
  // it through enter from that process, not through the SQ polling thread or from
  // another process holding the file.
  KRCORE_REASON_NOT_OWNER = 19,
  // The export descriptor names no live exported MR: forged, guessed, or revoked (its
  // MR deregistered or its ring closed).
  KRCORE_REASON_BAD_DESCRIPTOR = 20,
  // This ring's requests broke shared QPs: its data requests are refused for a
  // backoff that grows with each (see the engine's `blame`).
  KRCORE_REASON_THROTTLED = 21,
  // The request's QP made no progress for the request deadline (a peer or NIC that
  // never answered); it was failed and recovered.
  KRCORE_REASON_DEADLINE = 22,
  // A SEND no receive took: the peer virtual QP posted none within the request
  // deadline, or disconnected.
  KRCORE_REASON_NO_RECEIVER = 23,
  // A SEND longer than the receive it met (both complete with this).
  KRCORE_REASON_TOO_LONG = 24,
  // A RECV cancelled by DISCONNECT before a message filled it; a LISTEN ended by
  // UNLISTEN.
  KRCORE_REASON_CANCELLED = 25,
  // Another node did not answer, had no route, or refused: a CONNECT's peer (retried
  // after a backoff), or the MetaServer (none configured, or not reachable).
  KRCORE_REASON_UNREACHABLE = 26,
  // A two-sided message on a virtual QP whose message link is gone.
  KRCORE_REASON_NO_LINK = 27,
  // An export name that is empty, longer than 24 bytes, or not NUL-padded.
  KRCORE_REASON_BAD_NAME = 28,
  // PUBLISH of a name already published (by any node).
  KRCORE_REASON_NAME_TAKEN = 29,
  // IMPORT_NAME of a name no live export has: never published, revoked, or its
  // node restarted since.
  KRCORE_REASON_NO_SUCH_NAME = 30,
  // IMPORT_NAME through a virtual QP that is not connected to the node the export
  // lives on.
  KRCORE_REASON_NOT_ON_PEER = 31,
  // A port that is held: LISTEN on a port another listen or another user holds, a
  // CONNECT naming such a port as its own, or a second link with the same peer and
  // ports (see the engine's `ports`).
  KRCORE_REASON_SERVICE_TAKEN = 32,
  // UNLISTEN of a service this ring does not listen on.
  KRCORE_REASON_NOT_LISTENING = 33,
  // The peer node closed its end of the connection set this request used (its
  // module was unloaded, or its device went): what was in flight on it, and every
  // message link on it, ends with this; the next CONNECT to that node makes a new
  // set.
  KRCORE_REASON_PEER_GONE = 34,
  // A port that is no port: 0 where a port must be named (LISTEN, a CONNECT that
  // pairs), or one over 65535.
  KRCORE_REASON_BAD_PORT = 35,
  // A port below 1024 without `CAP_NET_BIND_SERVICE`; an IMPORT_NAME of a name
  // whose mode grants this user none of the export's rights.
  KRCORE_REASON_NOT_PERMITTED = 36,
  // The peer refused the connection: nobody listened on its port within the
  // deadline, or its listener could not take it.
  KRCORE_REASON_REFUSED = 37,
  // This user's share of the device's table is used up (virtual QPs, receives,
  // exports or listens: module parameters `max_*_per_user`), or it has as many
  // dials to new nodes in progress as it may (`cluster::peers::DIALS_PER_USER`);
  // other users' shares are theirs.
  KRCORE_REASON_QUOTA = 38,
  // IMPORT_NAME named an owner, and another user published the name.
  KRCORE_REASON_WRONG_OWNER = 39,
  // An entry io_uring cannot carry (see the engine's `uring`): a LISTEN (6.12's
  // commands have no multishot), a REG_MR (registered only on krcore's own ring), a
  // RECV (it may wait forever, and io_uring cannot cancel a command).
  KRCORE_REASON_NOT_THROUGH_URING = 40,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum krcore_Reason krcore_Reason;
#else
typedef uint16_t krcore_Reason;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// A submission queue entry.
struct krcore_Sqe {
  // [`Opcode`] as a byte.
  uint8_t opcode;
  // [`SqeFlags`] bits.
  uint8_t flags;
  // Reserved, must be zero.
  uint16_t resv;
  // Virtual QP handle (data operations, DISCONNECT, IMPORT_MR).
  uint32_t vqp;
  // Copied into the completion untouched.
  uint64_t user_data;
  // Local address (data operations, REG_MR).
  uint64_t addr;
  // Length in bytes; CONNECT: this node's port (0: an ephemeral one).
  uint32_t len;
  // Local MR handle (data operations, DEREG_MR).
  uint32_t mr;
  // Remote address; CONNECT: GID bytes 0..8.
  uint64_t remote_addr;
  // Imported remote MR handle; CONNECT: the service; IMPORT_NAME: the owner's uid.
  uint32_t rmr;
  // Immediate data (SEND_IMM, WRITE_IMM); REG_MR: [`MrAccess`] bits; CONNECT:
  // [`ConnectFlags`] bits; PUBLISH: the name's mode; IMPORT_NAME: [`NameFlags`].
  uint32_t imm;
  // CAS compare value; FAA addend; CONNECT: GID bytes 8..16; IMPORT_MR: the export
  // descriptor.
  uint64_t arg0;
  // CAS swap value.
  uint64_t arg1;
};

// A completion queue entry.
struct krcore_Cqe {
  // The submission's `user_data`.
  uint64_t user_data;
  // Bytes transferred, a handle, or a negative errno (see [`opcode`](super::opcode)).
  int32_t res;
  // [`CqeFlags`] bits.
  uint32_t flags;
  // Opcode-specific result (see [`opcode`](super::opcode)).
  uint64_t aux;
  // When `res < 0`: a [`Reason`] code naming the cause; 0 otherwise.
  uint16_t reason;
  // A port (see [`opcode`](super::opcode)): CONNECT's own (the ephemeral one the
  // kernel picked, when it named none); a LISTEN's accepted peer's; 0 otherwise.
  uint16_t port;
  // Reserved, zero.
  uint8_t resv[4];
};

// The header at the start of each ring mapping. Producer and consumer indices sit on
// separate cache lines so the two sides do not false-share.
struct krcore_RingHeader {
  // Consumer index. SQ: written by the kernel. CQ: written by the application.
  uint32_t head;
  // Padding to the next cache line.
  uint32_t pad0[15];
  // Producer index. SQ: written by the application. CQ: written by the kernel.
  uint32_t tail;
  // Padding to the next cache line.
  uint32_t pad1[15];
  // `ring_entries - 1`. Written by the kernel at setup; the kernel never reads it back.
  uint32_t ring_mask;
  // Number of entries, a power of two. Written by the kernel at setup.
  uint32_t ring_entries;
  // SQ: [`SqFlags`], written by the kernel. CQ: unused.
  uint32_t flags;
  // SQ: entries the kernel could not take (bad tail); CQ: completions dropped because
  // their ring was gone. Written by the kernel.
  uint32_t dropped;
  // CQ: completions that waited in the kernel's overflow list. Written by the kernel.
  uint32_t overflow;
  // Reserved.
  uint32_t resv[11];
};

// Where each field of a ring lives in its mapping (the setup ioctl's answer).
struct krcore_RingOffsets {
  // Offset of the head index.
  uint32_t head;
  // Offset of the tail index.
  uint32_t tail;
  // Offset of the ring mask.
  uint32_t ring_mask;
  // Offset of the entry count.
  uint32_t ring_entries;
  // Offset of the flags word.
  uint32_t flags;
  // Offset of the dropped counter.
  uint32_t dropped;
  // Offset of the entry array.
  uint32_t entries;
  // Length to mmap.
  uint32_t map_len;
};

// Argument of the setup ioctl.
struct krcore_SetupParams {
  // In: SQ entries wanted (rounded up to a power of two). Out: granted.
  uint32_t sq_entries;
  // In: CQ entries wanted, 0 for twice the SQ. Out: granted.
  uint32_t cq_entries;
  // In: [`SetupFlags`].
  uint32_t flags;
  // In: with SQPOLL, idle milliseconds before the poller sleeps (0: 1000).
  uint32_t sq_idle_ms;
  // Out: feature bits (none defined yet).
  uint32_t features;
  // In, with [`SetupFlags::DEVICE`]: the kernel's index of the RDMA device to bind to
  // (`dev_index` of the device query). Out: the device bound.
  uint32_t dev_index;
  // In, with [`SetupFlags::DEVICE`]: its port, 0 for the first (the one the module
  // serves; ports past it are refused with `EINVAL`). Out: the port bound.
  uint32_t port;
  // Reserved, must be zero.
  uint32_t resv;
  // Out: the SQ ring's offsets.
  struct krcore_RingOffsets sq_off;
  // Out: the CQ ring's offsets.
  struct krcore_RingOffsets cq_off;
};

// Argument of the device query.
struct krcore_QueryDevices {
  // Out: the kernel's [`ABI_VERSION`].
  uint32_t abi_version;
  // Out: how many rows the kernel has, whether or not they all fit.
  uint32_t n_total;
  // In: user address of an array of `capacity` [`DeviceGid`] rows.
  uint64_t rows;
  // In: capacity of `rows`, in rows.
  uint32_t capacity;
  // Out: how many rows were written (`min(n_total, capacity)`).
  uint32_t n_written;
  // Reserved, must be zero.
  uint32_t resv[4];
};

// One (device, port, GID) row of the device query.
struct krcore_DeviceGid {
  // Device name (e.g. `rxe0`), NUL-padded.
  uint8_t name[krcore_DEVICE_NAME_LEN];
  // The kernel's index of the device (`ib_device.index`).
  uint32_t dev_index;
  // Port number (1-based).
  uint32_t port;
  // `enum ib_port_state` (4 is ACTIVE).
  uint8_t port_state;
  // Link layer: 1 InfiniBand, 2 Ethernet (RoCE).
  uint8_t link_layer;
  // `enum ib_gid_type` (2 is RoCE v2).
  uint8_t gid_type;
  // Reserved, zero.
  uint8_t resv0;
  // `enum ib_mtu` of the port's active MTU.
  uint32_t active_mtu;
  // Index in the port's GID table, or [`GID_NONE`].
  uint32_t gid_index;
  // Reserved, zero.
  uint32_t resv1;
  // The GID, network byte order.
  uint8_t gid[16];
};

// Per-entry flags.
typedef uint8_t krcore_SqeFlags;
// Wait for earlier READs and atomics on the QP before this one (`IBV_SEND_FENCE`).
#define krcore_SqeFlags_FENCE (uint8_t)(1 << 0)
// Ask the peer's receive completion to raise an event (`IBV_SEND_SOLICITED`).
#define krcore_SqeFlags_SOLICITED (uint8_t)(1 << 1)

// Access rights of a registered MR (REG_MR's `imm`).
typedef uint32_t krcore_MrAccess;
// The local HCA may write it (needed for READ, RECV, atomics).
#define krcore_MrAccess_LOCAL_WRITE (uint32_t)(1 << 0)
// Peers may write it.
#define krcore_MrAccess_REMOTE_WRITE (uint32_t)(1 << 1)
// Peers may read it.
#define krcore_MrAccess_REMOTE_READ (uint32_t)(1 << 2)
// Peers may run atomics on it.
#define krcore_MrAccess_REMOTE_ATOMIC (uint32_t)(1 << 3)

// How a CONNECT joins (its `imm`).
typedef uint32_t krcore_ConnectFlags;
// Pair with the CONNECT on the peer port that names this one back, rather than
// ask for the listen on the peer port (see [`Sqe::pair`]).
#define krcore_ConnectFlags_PAIR (uint32_t)(1 << 0)

// How IMPORT_NAME takes a name (its `imm`). Without a flag, only a name the
// caller's uid or root published is taken: one another user published is refused
// (`WrongOwner`), as a careful program trusts only its own files and root's in a
// shared directory, so whoever publishes a name first cannot serve its bytes to
// other users' lookups. (Uids are compared across nodes as NFS compares them: a
// cluster maps one person to one uid.)
typedef uint32_t krcore_NameFlags;
// Only if the uid in `rmr` published it (another user's name, taken by naming
// that user): any other publisher is refused (`WrongOwner`), never imported.
#define krcore_NameFlags_OWNED_BY (uint32_t)(1 << 0)

// Per-completion flags.
typedef uint32_t krcore_CqeFlags;
// `aux` holds immediate data (a RECV that matched SEND_IMM or WRITE_IMM).
#define krcore_CqeFlags_IMM (uint32_t)(1 << 0)
// More CQEs will come for this entry's `user_data` (a LISTEN that goes on).
#define krcore_CqeFlags_MORE (uint32_t)(1 << 1)
// A LISTEN's CQE for a peer that joined: `res` is its virtual QP here (or why
// none could be given), `aux` the physical QP number (low 32 bits) and the
// peer's IPv4 address (high 32), `port` the peer's port.
#define krcore_CqeFlags_ACCEPT (uint32_t)(1 << 2)

// Flags in the SQ ring header, set by the kernel.
typedef uint32_t krcore_SqFlags;
// The polling thread sleeps: the enter ioctl with [`EnterFlags::SQ_WAKEUP`] wakes it.
#define krcore_SqFlags_NEED_WAKEUP (uint32_t)(1 << 0)
// Completions are waiting in the kernel's overflow list: reap the CQ and enter.
#define krcore_SqFlags_CQ_OVERFLOW (uint32_t)(1 << 1)
// The SQ tail claimed more entries than the ring holds; nothing was taken.
#define krcore_SqFlags_TAIL_OVERRUN (uint32_t)(1 << 2)

// Setup flags.
typedef uint32_t krcore_SetupFlags;
// A kernel thread polls the SQ, so submission needs no syscall.
#define krcore_SetupFlags_SQPOLL (uint32_t)(1 << 0)
// Bind to the device [`SetupParams::dev_index`] names (as the device query lists
// it) rather than the first one.
#define krcore_SetupFlags_DEVICE (uint32_t)(1 << 1)

// Enter flags.
typedef uint32_t krcore_EnterFlags;
// Wait for `min_complete` completions.
#define krcore_EnterFlags_GETEVENTS (uint32_t)(1 << 0)
// Wake the polling thread.
#define krcore_EnterFlags_SQ_WAKEUP (uint32_t)(1 << 1)
// With [`GETEVENTS`](Self::GETEVENTS): wait at most
// [`EnterArgs::timeout_us`]; the call fails with `ETIME` if it took no SQE and
// fewer than `min_complete` completions are ready by then.
#define krcore_EnterFlags_TIMEOUT (uint32_t)(1 << 2)

// Argument of the enter ioctl.
struct krcore_EnterArgs {
  // SQEs to take at most.
  uint32_t to_submit;
  // With [`EnterFlags::GETEVENTS`]: completions to wait for.
  uint32_t min_complete;
  // [`EnterFlags`].
  uint32_t flags;
  // With [`EnterFlags::TIMEOUT`]: the longest the call waits, in microseconds;
  // otherwise zero.
  uint32_t timeout_us;
  // Reserved, must be zero.
  uint32_t resv[4];
};

// Argument of the eventfd registration ioctl.
struct krcore_EventfdArgs {
  // An eventfd(2) to signal whenever the ring gains completions; -1 unregisters.
  int32_t fd;
  // Reserved, must be zero.
  uint32_t resv[3];
};

// Argument of the one-op ioctl.
struct krcore_OneOp {
  // In, with [`OneFlags::PUSH`]: the request.
  struct krcore_Sqe sqe;
  // Out, when `popped` is 1: the completion.
  struct krcore_Cqe cqe;
  // [`OneFlags`].
  uint32_t flags;
  // Out: 1 when `cqe` holds a completion, else 0.
  uint32_t popped;
  // Reserved, must be zero.
  uint32_t resv[6];
};

// What one [`OneOp`] call does, in this order.
typedef uint32_t krcore_OneFlags;
// Submit [`OneOp::sqe`]. `EAGAIN` when the SQ is full (reap first). An entry
// that waits for another node (a first contact, the MetaServer) stays in the
// SQ until a later call takes it (with `WAIT`, this one).
#define krcore_OneFlags_PUSH (uint32_t)(1 << 0)
// Return one completion in [`OneOp::cqe`] if there is one.
#define krcore_OneFlags_POP (uint32_t)(1 << 1)
// With `POP`: wait until there is one (interruptible: `EINTR`).
#define krcore_OneFlags_WAIT (uint32_t)(1 << 2)

















// Every opcode, in numeric order.
#define krcore_Opcode_ALL { krcore_Opcode_Nop, krcore_Opcode_RegMr, krcore_Opcode_DeregMr, krcore_Opcode_Connect, krcore_Opcode_Disconnect, krcore_Opcode_ImportMr, krcore_Opcode_Read, krcore_Opcode_Write, krcore_Opcode_Send, krcore_Opcode_SendImm, krcore_Opcode_WriteImm, krcore_Opcode_Recv, krcore_Opcode_Cas, krcore_Opcode_Faa, krcore_Opcode_Publish, krcore_Opcode_ImportName, krcore_Opcode_Listen, krcore_Opcode_Unlisten, krcore_Opcode_ResolveName, }

#endif  /* KRCORE_ABI_H */
