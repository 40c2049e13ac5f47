/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What differs between the kernels krcore's C builds against, Linux 6.12 and 7.x, and
 * nothing else: the rest of the C names these helpers, never a version. Rust's side of
 * the same line is kcompat.rs.
 */
#ifndef KRCORE_KCOMPAT_H
#define KRCORE_KCOMPAT_H

#include <linux/version.h>
#include <linux/io_uring/cmd.h>
#include <rdma/ib_umem.h>

/* Pins and maps `len` bytes of the caller's memory at `addr` for `dev`. */
static inline struct ib_umem *krcore_umem_get(struct ib_device *dev, unsigned long addr,
					      size_t len, int access)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
	return ib_umem_get_va(dev, addr, len, access);
#else
	return ib_umem_get(dev, addr, len, access);
#endif
}

/* A krcore entry: the first 64 bytes of a 128-byte SQE's command area. */
struct krcore_uring_entry {
	u8 bytes[64];
};

/* A command's result while it waits for its task (io_uring_cmd's free pdu). */
struct krcore_uring_pdu {
	s32 res;
	u64 extra;
	/* KRCORE_PDU_ISSUING until the issuer marked the command cancelable (then
	 * KRCORE_PDU_MARKED), or KRCORE_PDU_EARLY once its result came before that: the
	 * issuer completes it then (see shim.c's krcore_fop_uring_cmd). */
	atomic_t state;
};

/*
 * Takes `cmd` off io_uring's cancel list, as the kernel's own io_uring_cmd_del_cancelable
 * (static in io_uring/uring_cmd.c, the same in 6.12 and 7.3) does once a command is
 * done. For the cancel callback (io_uring's lock held) of a command whose completion is
 * already queued to its task: left listed, io_uring's teardown would call it again and
 * again until that task ran (a stopped task never does), a kworker spinning meanwhile.
 * Its done, later, finds it unlisted and leaves the list alone.
 */
static inline void krcore_uring_unlist(struct io_uring_cmd *cmd)
{
	struct io_kiocb *req = cmd_to_io_kiocb(cmd);

	lockdep_assert_held(&req->ctx->uring_lock);
	if (!(cmd->flags & IORING_URING_CMD_CANCELABLE))
		return;
	cmd->flags &= ~IORING_URING_CMD_CANCELABLE;
	hlist_del_init(&req->hash_node);
}

#define KRCORE_PDU_ISSUING 0
#define KRCORE_PDU_MARKED 1
#define KRCORE_PDU_EARLY 2

/* The entry a command carries. 7.x checks the size against the 128-byte SQE. */
static inline const void *krcore_uring_entry(const struct io_uring_cmd *cmd)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
	return io_uring_sqe128_cmd(cmd->sqe, struct krcore_uring_entry);
#else
	return io_uring_sqe_cmd(cmd->sqe);
#endif
}

/* Completes `cmd` into a 32-byte CQE: `res`, and `extra` in its second half. */
static inline void krcore_uring_done(struct io_uring_cmd *cmd, s32 res, u64 extra,
				     unsigned int issue_flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
	io_uring_cmd_done32(cmd, res, extra, issue_flags);
#else
	io_uring_cmd_done(cmd, res, extra, issue_flags);
#endif
}

/* The task work that completes a command whose result waits in its pdu. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
static inline void krcore_uring_task_done(struct io_tw_req tw_req, io_tw_token_t tw)
{
	struct io_uring_cmd *cmd = io_uring_cmd_from_tw(tw_req);
	struct krcore_uring_pdu *p = io_uring_cmd_to_pdu(cmd, struct krcore_uring_pdu);

	krcore_uring_done(cmd, p->res, p->extra, IO_URING_CMD_TASK_WORK_ISSUE_FLAGS);
}
#else
static inline void krcore_uring_task_done(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct krcore_uring_pdu *p = io_uring_cmd_to_pdu(cmd, struct krcore_uring_pdu);

	krcore_uring_done(cmd, p->res, p->extra, issue_flags);
}
#endif

#endif
