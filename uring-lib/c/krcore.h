/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * krcore.h: inline helpers over krcore's ring ABI, in the manner of liburing.
 *
 * The layout (entries, ring headers, ioctl numbers, opcodes, reasons) is the generated
 * krcore_abi.h; this header adds what every C program would otherwise write itself:
 * setting a ring up and mapping it, getting an SQE, preparing each opcode, submitting
 * and waiting, and walking the completions, with the barriers done right.
 *
 *   struct krcore_ring ring;
 *   if (krcore_queue_init(64, &ring, 0) < 0) ...               // -errno on failure
 *   struct krcore_Sqe *sqe = krcore_get_sqe(&ring);            // NULL when the SQ is full
 *   krcore_prep_connect(sqe, gid, 7);
 *   sqe->user_data = 1;
 *   krcore_submit_and_wait(&ring, 1);
 *   struct krcore_Cqe *cqe;
 *   krcore_peek_cqe(&ring, &cqe);                              // 0, or -EAGAIN if none
 *   ... cqe->res (a handle, bytes, or -errno), cqe->reason (krcore_Reason) ...
 *   krcore_cqe_seen(&ring, cqe);
 *   krcore_queue_exit(&ring);
 *
 * Barrier contract (abi/src/ring.rs states it in full; the kernel keeps its side):
 *   - SQ: write the SQEs, then store-release the SQ tail (krcore_flush_sq); load-acquire
 *     the SQ head before reusing a slot (krcore_get_sqe).
 *   - CQ: load-acquire the CQ tail, then read the CQEs (krcore_peek_cqe); read them,
 *     then store-release the CQ head (krcore_cq_advance).
 *   - SQPOLL need-wakeup: store the tail, full fence, then load the SQ flags
 *     (krcore_submit), so a sleeping poller is never left with work.
 * The kernel reads the indices this process writes once per batch and trusts nothing
 * in them: a wrong tail costs this ring its entries (TAIL_OVERRUN), nobody else.
 *
 * One thread at a time per ring, as with liburing.
 */
#ifndef KRCORE_H
#define KRCORE_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "krcore_abi.h"
#include "krcore_reasons.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the module's device appears. */
#define KRCORE_DEVICE_PATH "/dev/krcore"
/* Bytes of an export name (NUL-padded; at least one byte, no NUL inside). */
#define KRCORE_NAME_LEN 24

/* A ring as this process sees it: the device file and the two mappings. */
struct krcore_ring {
	int fd;
	struct krcore_SetupParams params;
	void *sq_map, *cq_map;
	/* The kernel's SQ head, our SQ tail, their flags; the CQ's head and tail. */
	uint32_t *sq_head, *sq_tail, *sq_flags, *cq_head, *cq_tail;
	uint32_t sq_mask, cq_mask;
	struct krcore_Sqe *sqes;
	struct krcore_Cqe *cqes;
	/* Entries handed out by krcore_get_sqe, not yet published. */
	uint32_t sqe_tail;
};

#define krcore_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define krcore_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* The setup both krcore_queue_init and krcore_queue_init_on make. */
static inline int krcore_queue_setup_(unsigned entries, struct krcore_ring *r, unsigned flags,
				      uint32_t dev_index, uint32_t port)
{
	memset(r, 0, sizeof(*r));
	r->fd = open(KRCORE_DEVICE_PATH, O_RDWR | O_CLOEXEC);
	if (r->fd < 0)
		return -errno;
	r->params.sq_entries = entries;
	r->params.flags = flags;
	r->params.dev_index = dev_index;
	r->params.port = port;
	if (ioctl(r->fd, krcore_IOC_SETUP, &r->params) < 0)
		goto fail;
	r->sq_map = mmap(NULL, r->params.sq_off.map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
			 r->fd, krcore_OFF_SQ_RING);
	if (r->sq_map == MAP_FAILED)
		goto fail;
	r->cq_map = mmap(NULL, r->params.cq_off.map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
			 r->fd, krcore_OFF_CQ_RING);
	if (r->cq_map == MAP_FAILED) {
		int e = errno;
		munmap(r->sq_map, r->params.sq_off.map_len);
		errno = e;
		goto fail;
	}
	char *sq = (char *)r->sq_map, *cq = (char *)r->cq_map;
	r->sq_head = (uint32_t *)(sq + r->params.sq_off.head);
	r->sq_tail = (uint32_t *)(sq + r->params.sq_off.tail);
	r->sq_flags = (uint32_t *)(sq + r->params.sq_off.flags);
	r->sqes = (struct krcore_Sqe *)(sq + r->params.sq_off.entries);
	r->cq_head = (uint32_t *)(cq + r->params.cq_off.head);
	r->cq_tail = (uint32_t *)(cq + r->params.cq_off.tail);
	r->cqes = (struct krcore_Cqe *)(cq + r->params.cq_off.entries);
	/* Our own copies of what the kernel set: never read back from shared memory. */
	r->sq_mask = r->params.sq_entries - 1;
	r->cq_mask = r->params.cq_entries - 1;
	r->sqe_tail = *r->sq_tail;
	return 0;
fail:;
	int e = errno;
	close(r->fd);
	r->fd = -1;
	return -e;
}

/* Sets up a ring of `entries` SQEs (a power of two at most krcore_MAX_SQ_ENTRIES;
 * the CQ twice that) with krcore_SetupFlags `flags` on a fresh open of the device, on
 * its first RDMA device, and maps it. 0, or -errno (ENOENT: the module is not loaded). */
static inline int krcore_queue_init(unsigned entries, struct krcore_ring *r, unsigned flags)
{
	return krcore_queue_setup_(entries, r, flags & ~krcore_SetupFlags_DEVICE, 0, 0);
}

/* As krcore_queue_init, on the RDMA device `dev_index` of those the module serves
 * (krcore_IOC_QUERY_DEVICES lists them) and its port `port` (0: the first). */
static inline int krcore_queue_init_on(unsigned entries, struct krcore_ring *r, unsigned flags,
				       uint32_t dev_index, uint32_t port)
{
	return krcore_queue_setup_(entries, r, flags | krcore_SetupFlags_DEVICE, dev_index, port);
}

/* Has the kernel signal `efd`, an eventfd(2), whenever the ring gains completions (for
 * an event loop; the ring's fd polls too); -1 unregisters. 0, or -errno. */
static inline int krcore_register_eventfd(struct krcore_ring *r, int efd)
{
	struct krcore_EventfdArgs a;

	memset(&a, 0, sizeof(a));
	a.fd = efd;
	return ioctl(r->fd, krcore_IOC_REGISTER_EVENTFD, &a) < 0 ? -errno : 0;
}

/* Unmaps and closes: the kernel releases everything of the ring (QPs, memory). */
static inline void krcore_queue_exit(struct krcore_ring *r)
{
	munmap(r->cq_map, r->params.cq_off.map_len);
	munmap(r->sq_map, r->params.sq_off.map_len);
	close(r->fd);
	r->fd = -1;
}

/* The next free SQE, zeroed, or NULL when the SQ is full (submit and reap first). */
static inline struct krcore_Sqe *krcore_get_sqe(struct krcore_ring *r)
{
	uint32_t head = krcore_load_acquire(r->sq_head);
	if (r->sqe_tail - head >= r->params.sq_entries)
		return NULL;
	struct krcore_Sqe *sqe = &r->sqes[r->sqe_tail & r->sq_mask];
	r->sqe_tail++;
	memset(sqe, 0, sizeof(*sqe));
	return sqe;
}

/* Publishes the SQEs handed out so far; returns how many the kernel has yet to take. */
static inline uint32_t krcore_flush_sq(struct krcore_ring *r)
{
	krcore_store_release(r->sq_tail, r->sqe_tail);
	return r->sqe_tail - krcore_load_acquire(r->sq_head);
}

/* The enter ioctl: take published SQEs, and with `min_complete` > 0 wait until that
 * many CQEs are unread (at most `timeout_us` when it is > 0). SQEs taken, or -errno (ETIME: the
 * bound passed first; EINTR: a signal, with nothing taken). */
static inline int krcore_enter(struct krcore_ring *r, uint32_t min_complete, uint32_t timeout_us)
{
	struct krcore_EnterArgs a;
	memset(&a, 0, sizeof(a));
	a.to_submit = krcore_flush_sq(r);
	a.min_complete = min_complete;
	if (min_complete)
		a.flags |= krcore_EnterFlags_GETEVENTS;
	if (min_complete && timeout_us) {
		a.flags |= krcore_EnterFlags_TIMEOUT;
		a.timeout_us = timeout_us;
	}
	/* Need-wakeup: the tail store above, a full fence, then the flags. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (krcore_load_acquire(r->sq_flags) & krcore_SqFlags_NEED_WAKEUP)
		a.flags |= krcore_EnterFlags_SQ_WAKEUP;
	int n = ioctl(r->fd, krcore_IOC_ENTER, &a);
	return n < 0 ? -errno : n;
}

/* Publishes and has the kernel take the SQEs. With SQPOLL the polling thread takes
 * them: no syscall unless it sleeps. SQEs taken (published, with SQPOLL), or -errno. */
static inline int krcore_submit(struct krcore_ring *r)
{
	if (r->params.flags & krcore_SetupFlags_SQPOLL) {
		uint32_t pending = krcore_flush_sq(r);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!(krcore_load_acquire(r->sq_flags) & krcore_SqFlags_NEED_WAKEUP))
			return (int)pending;
	}
	return krcore_enter(r, 0, 0);
}

/* CQEs ready to read. */
static inline uint32_t krcore_cq_ready(const struct krcore_ring *r)
{
	return krcore_load_acquire(r->cq_tail) - *r->cq_head;
}

/* As krcore_submit, then waits until `want` CQEs are ready; signals do not end the
 * wait. SQEs taken, or -errno. */
static inline int krcore_submit_and_wait(struct krcore_ring *r, uint32_t want)
{
	int taken = -1;
	while (taken < 0 || krcore_cq_ready(r) < want) {
		/* The kernel counts every unread CQE toward min_complete. */
		int n = krcore_enter(r, want, 0);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return n;
		if (taken < 0)
			taken = n;
	}
	return taken;
}

/* The oldest unread CQE in *cqe: 0, or -EAGAIN when there is none. */
static inline int krcore_peek_cqe(struct krcore_ring *r, struct krcore_Cqe **cqe)
{
	uint32_t head = *r->cq_head;
	if (krcore_load_acquire(r->cq_tail) == head) {
		*cqe = NULL;
		return -EAGAIN;
	}
	*cqe = &r->cqes[head & r->cq_mask];
	return 0;
}

/* Waits for a CQE, at most `timeout_us` (0: no bound), and peeks it: 0, or -errno
 * (ETIME when the bound passed). Submits what was prepared on the way. */
static inline int krcore_wait_cqe_timeout(struct krcore_ring *r, struct krcore_Cqe **cqe,
					  uint32_t timeout_us)
{
	while (krcore_peek_cqe(r, cqe) == -EAGAIN) {
		int n = krcore_enter(r, 1, timeout_us);
		if (n < 0 && n != -EINTR)
			return n;
	}
	return 0;
}

/* Hands `n` read CQEs back to the kernel. */
static inline void krcore_cq_advance(struct krcore_ring *r, uint32_t n)
{
	krcore_store_release(r->cq_head, *r->cq_head + n);
}

/* Hands one read CQE back. */
static inline void krcore_cqe_seen(struct krcore_ring *r, struct krcore_Cqe *cqe)
{
	(void)cqe;
	krcore_cq_advance(r, 1);
}

/* Walks the ready CQEs without consuming them; krcore_cq_advance(r, count) after. */
#define krcore_for_each_cqe(r, head, cqe)                                                  \
	for ((head) = *(r)->cq_head;                                                       \
	     (head) != krcore_load_acquire((r)->cq_tail) &&                                \
	     ((cqe) = &(r)->cqes[(head) & (r)->cq_mask], 1);                               \
	     (head)++)

/* This node's address as CONNECT names it: the first RoCE v2 IPv4 GID
 * (::ffff:a.b.c.d) the module serves; CONNECT to it reaches the loopback pool.
 * 0, or -errno (EPROTO: a module of another ABI version; ENODEV: no such GID). */
static inline int krcore_node_gid(struct krcore_ring *r, uint8_t gid[16])
{
	static const uint8_t v4_mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct krcore_DeviceGid rows[16];
	struct krcore_QueryDevices q;
	memset(&q, 0, sizeof(q));
	q.rows = (uint64_t)(uintptr_t)rows;
	q.capacity = 16;
	if (ioctl(r->fd, krcore_IOC_QUERY_DEVICES, &q) < 0)
		return -errno;
	if (q.abi_version != krcore_ABI_VERSION)
		return -EPROTO;
	for (uint32_t i = 0; i < q.n_written; i++) {
		if (rows[i].gid_index != krcore_GID_NONE && !memcmp(rows[i].gid, v4_mapped, 12)) {
			memcpy(gid, rows[i].gid, 16);
			return 0;
		}
	}
	return -ENODEV;
}

/* --- Preparing entries. user_data is the caller's: set it after prep. --- */

static inline void krcore_prep_nop(struct krcore_Sqe *sqe)
{
	sqe->opcode = KRCORE_OPCODE_NOP;
}

/* CONNECT to `gid` (a node's RoCE GID; this node's own reaches the loopback pool), to
 * the listen on port `service` there, from an ephemeral port of this node: res is the
 * virtual QP's handle, aux the pooled QP's number, port the ephemeral port. Service 0:
 * no endpoint (one-sided requests only). */
static inline void krcore_prep_connect(struct krcore_Sqe *sqe, const uint8_t gid[16],
				       uint32_t service)
{
	sqe->opcode = KRCORE_OPCODE_CONNECT;
	memcpy(&sqe->remote_addr, gid, 8);
	memcpy(&sqe->arg0, gid + 8, 8);
	sqe->rmr = service;
}

/* CONNECT that pairs this node's `port` with `peer_port` at `gid`, whose end names them
 * back (krcore_prep_pair(.., peer_port, port)): neither side listens. */
static inline void krcore_prep_pair(struct krcore_Sqe *sqe, const uint8_t gid[16],
				    uint16_t port, uint16_t peer_port)
{
	krcore_prep_connect(sqe, gid, peer_port);
	sqe->len = port;
	sqe->imm = krcore_ConnectFlags_PAIR;
}

static inline void krcore_prep_disconnect(struct krcore_Sqe *sqe, uint32_t vqp)
{
	sqe->opcode = KRCORE_OPCODE_DISCONNECT;
	sqe->vqp = vqp;
}

/* LISTEN on `service`: a first CQE (res 0) when listening, then one per peer node whose
 * virtual QP CONNECTs to this node for the service (res: its virtual QP here; aux: the
 * QP number in the low 32 bits, the peer's IPv4 address in the high 32), each flagged
 * krcore_CqeFlags_MORE and krcore_CqeFlags_ACCEPT; the last CQE has no MORE. */
static inline void krcore_prep_listen(struct krcore_Sqe *sqe, uint32_t service)
{
	sqe->opcode = KRCORE_OPCODE_LISTEN;
	sqe->rmr = service;
}

/* UNLISTEN: ends this ring's LISTEN on `service` (its last CQE: -ECANCELED). */
static inline void krcore_prep_unlisten(struct krcore_Sqe *sqe, uint32_t service)
{
	sqe->opcode = KRCORE_OPCODE_UNLISTEN;
	sqe->rmr = service;
}

/* REG_MR of [addr, addr+len) with krcore_MrAccess bits: res is the MR handle, aux the
 * export descriptor (non-zero with a remote right). The memory stays pinned until
 * DEREG_MR or the ring's end: keep it allocated until then. */
static inline void krcore_prep_reg_mr(struct krcore_Sqe *sqe, void *addr, uint32_t len,
				      uint32_t access)
{
	sqe->opcode = KRCORE_OPCODE_REG_MR;
	sqe->addr = (uint64_t)(uintptr_t)addr;
	sqe->len = len;
	sqe->imm = access;
}

static inline void krcore_prep_dereg_mr(struct krcore_Sqe *sqe, uint32_t mr)
{
	sqe->opcode = KRCORE_OPCODE_DEREG_MR;
	sqe->mr = mr;
}

/* IMPORT_MR of a peer's export (its descriptor, address and length, or a sub-range)
 * for `vqp`: res is the remote MR's handle. */
static inline void krcore_prep_import_mr(struct krcore_Sqe *sqe, uint32_t vqp, uint64_t addr,
					 uint32_t len, uint64_t descriptor)
{
	sqe->opcode = KRCORE_OPCODE_IMPORT_MR;
	sqe->vqp = vqp;
	sqe->remote_addr = addr;
	sqe->len = len;
	sqe->arg0 = descriptor;
}

/* Copies `name` into the three NUL-padded words an SQE carries it in: 0, or -EINVAL
 * for a name the kernel would refuse (empty or longer than KRCORE_NAME_LEN). */
static inline int krcore_name_words(struct krcore_Sqe *sqe, const char *name)
{
	size_t n = strlen(name);
	uint8_t w[KRCORE_NAME_LEN] = { 0 };
	if (n == 0 || n > KRCORE_NAME_LEN)
		return -EINVAL;
	memcpy(w, name, n);
	memcpy(&sqe->remote_addr, w, 8);
	memcpy(&sqe->arg0, w + 8, 8);
	memcpy(&sqe->arg1, w + 16, 8);
	return 0;
}

/* PUBLISH of MR `mr` (with a remote right) under `name` in the MetaServer, granting
 * `mode` as a file's mode does: rw bits for the owner (this user), its group and others
 * (0: 0600, the owner's alone). */
static inline int krcore_prep_publish(struct krcore_Sqe *sqe, uint32_t mr, const char *name,
				      uint16_t mode)
{
	sqe->opcode = KRCORE_OPCODE_PUBLISH;
	sqe->mr = mr;
	sqe->imm = mode;
	return krcore_name_words(sqe, name);
}

/* IMPORT_NAME of the first `len` bytes (0: all) of export `name` for `vqp`: res is the
 * remote MR's handle, aux its remote address. The region has the export's rights the
 * name's mode grants this user (none: NOT_PERMITTED). Only a name this user or root
 * published is taken (WRONG_OWNER otherwise); another user's, by naming that user
 * (krcore_sqe_owned_by). */
static inline int krcore_prep_import_name(struct krcore_Sqe *sqe, uint32_t vqp, const char *name,
					  uint32_t len)
{
	sqe->opcode = KRCORE_OPCODE_IMPORT_NAME;
	sqe->vqp = vqp;
	sqe->len = len;
	return krcore_name_words(sqe, name);
}

/* RESOLVE_NAME of `name`: res is its node's id, aux its node's IPv4 address in the high
 * 32 bits (as LISTEN's), when its mode grants this user a right. CONNECT to that node,
 * then IMPORT_NAME: no address needed beforehand. */
static inline int krcore_prep_resolve_name(struct krcore_Sqe *sqe, const char *name)
{
	sqe->opcode = KRCORE_OPCODE_RESOLVE_NAME;
	return krcore_name_words(sqe, name);
}

/* After krcore_prep_import_name: only if user `uid` published the name (WRONG_OWNER
 * otherwise), so a name someone else published first never hands over their memory. */
static inline void krcore_sqe_owned_by(struct krcore_Sqe *sqe, uint32_t uid)
{
	sqe->imm = krcore_NameFlags_OWNED_BY;
	sqe->rmr = uid;
}

/* A one-sided READ, WRITE or WRITE_IMM of `len` bytes between local (mr, addr) and
 * remote (rmr, raddr). */
static inline void krcore_prep_rw(struct krcore_Sqe *sqe, uint8_t op, uint32_t vqp, uint32_t mr,
				  void *addr, uint32_t len, uint32_t rmr, uint64_t raddr)
{
	sqe->opcode = op;
	sqe->vqp = vqp;
	sqe->mr = mr;
	sqe->addr = (uint64_t)(uintptr_t)addr;
	sqe->len = len;
	sqe->rmr = rmr;
	sqe->remote_addr = raddr;
}

static inline void krcore_prep_read(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
				    uint32_t len, uint32_t rmr, uint64_t raddr)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_READ, vqp, mr, addr, len, rmr, raddr);
}

static inline void krcore_prep_write(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr,
				     void *addr, uint32_t len, uint32_t rmr, uint64_t raddr)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_WRITE, vqp, mr, addr, len, rmr, raddr);
}

/* WRITE with immediate data: consumes the peer's oldest receive on its end. */
static inline void krcore_prep_write_imm(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr,
					 void *addr, uint32_t len, uint32_t rmr, uint64_t raddr,
					 uint32_t imm)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_WRITE_IMM, vqp, mr, addr, len, rmr, raddr);
	sqe->imm = imm;
}

/* 8-byte compare-and-swap at raddr; the old value lands at addr. */
static inline void krcore_prep_cas(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
				   uint32_t rmr, uint64_t raddr, uint64_t compare, uint64_t swap)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_CAS, vqp, mr, addr, 8, rmr, raddr);
	sqe->arg0 = compare;
	sqe->arg1 = swap;
}

/* 8-byte fetch-and-add at raddr; the old value lands at addr. */
static inline void krcore_prep_faa(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
				   uint32_t rmr, uint64_t raddr, uint64_t add)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_FAA, vqp, mr, addr, 8, rmr, raddr);
	sqe->arg0 = add;
}

/* SEND of `len` bytes at (mr, addr). */
static inline void krcore_prep_send(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
				    uint32_t len)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_SEND, vqp, mr, addr, len, 0, 0);
}

/* SEND with immediate data. */
static inline void krcore_prep_send_imm(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr,
					void *addr, uint32_t len, uint32_t imm)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_SEND_IMM, vqp, mr, addr, len, 0, 0);
	sqe->imm = imm;
}

/* RECV of up to `len` bytes into (mr, addr): waits for the peer's message. */
static inline void krcore_prep_recv(struct krcore_Sqe *sqe, uint32_t vqp, uint32_t mr, void *addr,
				    uint32_t len)
{
	krcore_prep_rw(sqe, KRCORE_OPCODE_RECV, vqp, mr, addr, len, 0, 0);
}

#ifdef __cplusplus
}
#endif

#endif /* KRCORE_H */
