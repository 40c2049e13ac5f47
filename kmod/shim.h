/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The seam between krcore's Rust code and its C shim, in both directions.
 *
 * The shim exists only for what Rust on Linux 6.12 cannot reach: the misc device and its
 * file operations, mmap, the ib_client, and static inline verbs. It makes no decision:
 * every call is forwarded to Rust, or is a one-line wrapper Rust calls. C sees Rust's
 * objects only as void pointers; Rust sees C's as opaque structs.
 */
#ifndef KRCORE_SHIM_H
#define KRCORE_SHIM_H

#include <linux/types.h>
#include <linux/moduleparam.h>
#include <linux/stddef.h>

/*
 * The layout of a struct Rust also declares (shim.rs, cluster/cm_wire.rs): its size
 * and each field's offset, asserted here and, with the same numbers, there, so a field
 * moved on one side fails that side's build instead of reading the wrong bytes.
 */
#define KRCORE_LAYOUT_SIZE(type, size) static_assert(sizeof(type) == (size), #type)
#define KRCORE_LAYOUT_AT(type, field, off) \
	static_assert(offsetof(type, field) == (off), #type "." #field)

/*
 * Test knobs: module parameters that make this kernel act as a broken, slow or
 * duplicating member would, for the tests' fault injection. Only a test build has them
 * (Kbuild's KRCORE_TEST_KNOBS=1, which make test's modules set): in the module a site
 * loads each stays the zero it starts as, and no file of it is in
 * /sys/module/krcore/parameters.
 */
#ifdef KRCORE_TEST_KNOBS
#define KRCORE_TEST_PARAM(name, type, perm, desc) \
	module_param(name, type, perm);            \
	MODULE_PARM_DESC(name, "Test: " desc)
#else
#define KRCORE_TEST_PARAM(name, type, perm, desc)
#endif

struct ib_device;
struct vm_area_struct;

/* ---- Implemented in Rust (file.rs, device.rs) ---- */

/* open(2) of /dev/krcore: allocate the per-file context into *priv. */
int krcore_rs_open(void **priv);
/* Last close of the file: tear the context down. */
void krcore_rs_release(void *priv);
/* ioctl(2): the command is decoded and validated in Rust. */
long krcore_rs_ioctl(void *priv, unsigned int cmd, unsigned long arg);
/* poll(2) of the file, waiting through pt: 1 readable (completions ready), 0 not, a
 * negative errno when it has no ring (-ENXIO) or its device went (-ENODEV). */
struct poll_table_struct;
int krcore_rs_poll(void *priv, struct file *f, struct poll_table_struct *pt);
/* An IORING_OP_URING_CMD's krcore entry (64 bytes, read once): 1 with its result in
 * `res` and `extra` (complete it now), 0 when it completes later (through
 * krcore_shim_uring_complete), or a negative errno (-EAGAIN: not taken, under
 * `nonblock`). See abi's engine/uring.rs. */
int krcore_rs_uring_cmd(void *priv, void *cmd, const u8 *entry, bool nonblock, s32 *res,
			u64 *extra);
/* io_uring takes command `cmd` back (IO_URING_F_CANCEL): 1 with the result to
 * complete it with now in `res` and `extra`, 0 when its completion is on its way. */
int krcore_rs_uring_cancel(void *priv, void *cmd, s32 *res, u64 *extra);
/* A peer kernel's connection from `node` (IPv4, wire order), its proof good: whether
 * the listener takes it (abi's cluster::accepted); and one it took going. Both under
 * krcore_cm_lock. */
bool krcore_rs_cm_admit(u32 node);
void krcore_rs_cm_release(u32 node);
/* The `cmd_op` of a krcore entry in an IORING_OP_URING_CMD (abi's URING_CMD_ENTRY). */
extern const u32 krcore_rs_uring_cmd_entry;
/* mmap(2) at page offset pgoff, len bytes. */
int krcore_rs_mmap(void *priv, struct vm_area_struct *vma, unsigned long pgoff,
		   unsigned long len);
/* ib_client add/remove: a device appeared or is going away. */
int krcore_rs_dev_add(struct ib_device *dev);
void krcore_rs_dev_remove(struct ib_device *dev);

/* The fdinfo of the file whose context is priv into buf, at most cap bytes; returns
 * the bytes written. */
size_t krcore_rs_fdinfo(void *priv, char *buf, size_t cap);

/* The inspection files in debugfs, added (file i named names[i]) and removed, and
 * their text: file `which` into buf, at most cap bytes, returning the bytes written. */
size_t krcore_rs_show(unsigned int which, char *buf, size_t cap);
void krcore_shim_debugfs_add(const char *const *names, unsigned int n);
void krcore_shim_debugfs_remove(void);

/* One step of an SQ polling thread: 0 keep polling, 1 sleep until woken (Rust has set
 * NEED_WAKEUP and rechecked the SQ), 2 nothing to do: yield, then keep polling. */
int krcore_rs_sqpoll_step(void *ctx);

/* Where a MetaServer's region is, as its accept tells a connecting node. */
struct krcore_meta_offer {
	u64 base;
	u32 rkey;
	u32 node_slots;
	u32 export_slots;
	/* Registered, and served to every node (before: to this node's own only). */
	u8 ready;
	u8 resv[3];
};
KRCORE_LAYOUT_SIZE(struct krcore_meta_offer, 24);
KRCORE_LAYOUT_AT(struct krcore_meta_offer, base, 0);
KRCORE_LAYOUT_AT(struct krcore_meta_offer, rkey, 8);
KRCORE_LAYOUT_AT(struct krcore_meta_offer, node_slots, 12);
KRCORE_LAYOUT_AT(struct krcore_meta_offer, export_slots, 16);
KRCORE_LAYOUT_AT(struct krcore_meta_offer, ready, 20);
KRCORE_LAYOUT_AT(struct krcore_meta_offer, resv, 21);

/* rdma_cm's listener got a peer kernel's request on `dev` (cm.c, no cm.c lock held):
 * the PD and CQ of its device context, and its MetaServer region if it serves one
 * (rkey 0: none), pinned (its removal waits) until krcore_rs_cm_unpin(the returned
 * pin); NULL when there is none or it is going. */
struct ib_pd;
struct ib_cq;
void *krcore_rs_cm_resources(struct ib_device *dev, struct ib_pd **pd, struct ib_cq **cq,
			     struct krcore_meta_offer *offer);
void krcore_rs_cm_unpin(void *pin);
/* A peer kernel at `gid` (IPv4-mapped) asks for connection `index` of a set (cm.c, with
 * the pin, no cm.c lock held): 0 to accept it, -EALREADY to refuse it because our own
 * attempt wins (the dialer yields), another errno to refuse it. */
int krcore_rs_cm_peer_request(void *pin, const u8 *gid, u8 index);
/* The connection accepted for it: the set adopts it (krcore_cm_own) when it still
 * wants it; false when it does not (cm.c then closes it). */
struct krcore_cm_conn;
struct ib_qp;
bool krcore_rs_cm_adopt(void *pin, struct krcore_cm_conn *c, struct ib_qp *qp, u32 qpn,
			const u8 *gid, u8 index);

/* Build the device's QP pool now if it can (work context; ctx is the device context). */
void krcore_rs_dev_prewarm(void *ctx);
/* The device's MetaServer tick, every meta_check_ms (work context). */
void krcore_rs_dev_tick(void *ctx);
/* The device's expiry of deadlines, every second (work context). */
void krcore_rs_dev_expire(void *ctx);

/* The device's CQ had an event: poll, route, wake (work context; ctx is the device
 * context, or NULL before it is set). */
void krcore_rs_dev_cq_event(void *ctx);
/* The device's network work, on the module's worker (ctx is the device context). */
void krcore_rs_dev_net(void *ctx);

/* ---- Implemented in C (shim.c) ---- */

/* Watches a device's GID and port events, running krcore_rs_dev_prewarm(ctx) from a
 * work item after each (and once at start), krcore_rs_dev_tick(ctx) every
 * meta_check_ms and krcore_rs_dev_expire(ctx) every second. Stopping waits for a
 * running one. */
struct krcore_devwatch;
struct krcore_devwatch *krcore_shim_devwatch_start(struct ib_device *dev, void *ctx);
void krcore_shim_devwatch_stop(struct krcore_devwatch *w);
/* The `prewarm` module parameter. */
bool krcore_shim_prewarm_enabled(void);
/* Whether IOC_DIRECT is served (module parameter bench_direct). */
bool krcore_shim_bench_direct_enabled(void);

/* An SQ polling thread running krcore_rs_sqpoll_step(ctx). */
struct krcore_poller;
struct krcore_poller *krcore_shim_poller_start(void *ctx);
/* Wakes the thread if it sleeps (the enter ioctl's SQ_WAKEUP). */
void krcore_shim_poller_wake(struct krcore_poller *p);
/* Stops the thread and waits for it; ctx is no longer used afterwards. */
void krcore_shim_poller_stop(struct krcore_poller *p);

/* Port attributes Rust needs, copied out of struct ib_port_attr. */
struct krcore_port_attr {
	u32 state;
	u32 active_mtu;
	u32 gid_tbl_len;
	u32 link_layer;
};
KRCORE_LAYOUT_SIZE(struct krcore_port_attr, 16);
KRCORE_LAYOUT_AT(struct krcore_port_attr, state, 0);
KRCORE_LAYOUT_AT(struct krcore_port_attr, active_mtu, 4);
KRCORE_LAYOUT_AT(struct krcore_port_attr, gid_tbl_len, 8);
KRCORE_LAYOUT_AT(struct krcore_port_attr, link_layer, 12);

/* The calling task's address space, pinned as an identity (mmgrab), or NULL for a
 * kernel thread; krcore_shim_mm_is_current tells whether current runs in it. */
struct mm_struct;
struct mm_struct *krcore_shim_mm_grab_current(void);
bool krcore_shim_mm_is_current(struct mm_struct *mm);
void krcore_shim_mm_drop(struct mm_struct *mm);
/* Whether current has SIGKILL pending (fatal_signal_pending). */
bool krcore_shim_fatal_signal_pending(void);
/* Module parameters: per-user limits and the polling idle cap. */
u32 krcore_shim_max_rings_per_user(void);
u32 krcore_shim_max_share(u32 share);
u32 krcore_shim_max_sqpoll_per_user(void);
u32 krcore_shim_max_sq_idle_ms(void);
u32 krcore_shim_request_timeout_ms(void);
/* What the current task's credentials say (abi's identity::Facts; ids as the initial
 * user namespace sees them). */
struct krcore_id_facts {
	u32 uid;
	u32 gid;
	u32 ns_owner;
	u32 ns_group;
	u32 ns_id;
	bool has_ns;
};
KRCORE_LAYOUT_SIZE(struct krcore_id_facts, 24);
KRCORE_LAYOUT_AT(struct krcore_id_facts, uid, 0);
KRCORE_LAYOUT_AT(struct krcore_id_facts, gid, 4);
KRCORE_LAYOUT_AT(struct krcore_id_facts, ns_owner, 8);
KRCORE_LAYOUT_AT(struct krcore_id_facts, ns_group, 12);
KRCORE_LAYOUT_AT(struct krcore_id_facts, ns_id, 16);
KRCORE_LAYOUT_AT(struct krcore_id_facts, has_ns, 20);
void krcore_shim_current_facts(struct krcore_id_facts *f);
u32 krcore_shim_max_peers(void);
u32 krcore_shim_max_names(bool per_node);
u32 krcore_shim_current_groups(u32 *out, u32 max);
bool krcore_shim_may_bind_low(void);
/* Monotonic time in ms at tick resolution (ktime_get_coarse): cheap enough per call. */
s64 krcore_shim_coarse_ms(void);
/* The wall clock, ms since the epoch (ktime_get_real): what FRESH proofs carry. */
s64 krcore_shim_wall_ms(void);
/* 64 bits from the kernel's CSPRNG (get_random_u64). */
u64 krcore_shim_random_u64(void);
/* Sleeps about ms milliseconds (msleep); 0 returns at once. */
void krcore_shim_msleep(unsigned int ms);
/* Sleeps us to 2 * us microseconds (usleep_range: a high-resolution timer, no tick). */
void krcore_shim_usleep(u32 us);

/* Ring memory: zeroed, page-aligned, charged to the caller's memory cgroup, mappable
 * to user space page by page, or NULL. */
void *krcore_shim_ring_alloc(size_t size);
void krcore_shim_ring_free(void *mem);
/* Map ring memory into a VMA (remap_vmalloc_range); the VMA may not exceed it. The
 * mapping is not inherited across fork (VM_DONTCOPY) nor grown (VM_DONTEXPAND). */
int krcore_shim_ring_mmap(struct vm_area_struct *vma, void *mem, size_t size);

/* ---- Verbs: one-line wrappers and struct translation, no decisions ---- */

struct ib_pd;
struct ib_cq;
struct ib_qp;
struct ib_mr;

/* Send work request kinds (Rust's SendKind). */
enum krcore_wr_kind {
	KRCORE_WR_READ = 1,
	KRCORE_WR_WRITE = 2,
	KRCORE_WR_SEND = 3,
	KRCORE_WR_CAS = 4,
	KRCORE_WR_FAA = 5,
	/* A notice to a peer kernel: `notice` sent inline (a set's QP, see abi's far.rs). */
	KRCORE_WR_NOTICE = 6,
	/* A message into a receive on this node (a pool QP): the QP's key made over the
	 * receive's bytes, the WRITE, the key invalidated (engine/fastreg.c). */
	KRCORE_WR_DELIVER = 7,
};

/* A send work request, flat. */
struct krcore_send_wr {
	u64 wr_id;
	u64 local_addr;
	u64 remote_addr;
	u64 compare_add;
	u64 swap;
	u32 length;
	u32 lkey;
	u32 rkey;
	u32 imm;		/* network order is the caller's business */
	u8 kind;		/* enum krcore_wr_kind */
	u8 has_imm;
	u8 signaled;
	u8 fence;
	u8 solicited;
	u8 pad[3];
	u8 notice[32];		/* KRCORE_WR_NOTICE's bytes */
	u64 mr;			/* KRCORE_WR_DELIVER: the receive's struct krcore_mr */
	u32 inv;		/* KRCORE_WR_NOTICE: a key the SEND invalidates (0: none) */
	u32 pad2;
};
KRCORE_LAYOUT_SIZE(struct krcore_send_wr, 112);
KRCORE_LAYOUT_AT(struct krcore_send_wr, wr_id, 0);
KRCORE_LAYOUT_AT(struct krcore_send_wr, local_addr, 8);
KRCORE_LAYOUT_AT(struct krcore_send_wr, remote_addr, 16);
KRCORE_LAYOUT_AT(struct krcore_send_wr, compare_add, 24);
KRCORE_LAYOUT_AT(struct krcore_send_wr, swap, 32);
KRCORE_LAYOUT_AT(struct krcore_send_wr, length, 40);
KRCORE_LAYOUT_AT(struct krcore_send_wr, lkey, 44);
KRCORE_LAYOUT_AT(struct krcore_send_wr, rkey, 48);
KRCORE_LAYOUT_AT(struct krcore_send_wr, imm, 52);
KRCORE_LAYOUT_AT(struct krcore_send_wr, kind, 56);
KRCORE_LAYOUT_AT(struct krcore_send_wr, has_imm, 57);
KRCORE_LAYOUT_AT(struct krcore_send_wr, signaled, 58);
KRCORE_LAYOUT_AT(struct krcore_send_wr, fence, 59);
KRCORE_LAYOUT_AT(struct krcore_send_wr, solicited, 60);
KRCORE_LAYOUT_AT(struct krcore_send_wr, pad, 61);
KRCORE_LAYOUT_AT(struct krcore_send_wr, notice, 64);
KRCORE_LAYOUT_AT(struct krcore_send_wr, mr, 96);
KRCORE_LAYOUT_AT(struct krcore_send_wr, inv, 104);
KRCORE_LAYOUT_AT(struct krcore_send_wr, pad2, 108);

/* A work completion, flat. */
struct krcore_wc {
	u64 wr_id;
	u32 status;		/* enum ib_wc_status */
	u32 byte_len;
	u32 imm;
	u32 has_imm;
	u32 qp_num;
	u32 recv;		/* completes a receive */
	u32 has_inv;		/* a SEND with invalidate closed inv_rkey here */
	u32 inv_rkey;
};
KRCORE_LAYOUT_SIZE(struct krcore_wc, 40);
KRCORE_LAYOUT_AT(struct krcore_wc, wr_id, 0);
KRCORE_LAYOUT_AT(struct krcore_wc, status, 8);
KRCORE_LAYOUT_AT(struct krcore_wc, byte_len, 12);
KRCORE_LAYOUT_AT(struct krcore_wc, imm, 16);
KRCORE_LAYOUT_AT(struct krcore_wc, has_imm, 20);
KRCORE_LAYOUT_AT(struct krcore_wc, qp_num, 24);
KRCORE_LAYOUT_AT(struct krcore_wc, recv, 28);
KRCORE_LAYOUT_AT(struct krcore_wc, has_inv, 32);
KRCORE_LAYOUT_AT(struct krcore_wc, inv_rkey, 36);

/* Pointer results are ERR_PTR-encoded: this gives the errno, or 0 for a pointer. */
long krcore_shim_ptr_err(const void *p);

struct ib_pd *krcore_shim_alloc_pd(struct ib_device *dev);
void krcore_shim_dealloc_pd(struct ib_pd *pd);
/* A CQ polled directly (IB_POLL_DIRECT). */
/* The CQ's event work item: allocated first, its context set once the device context
 * exists, freed (waiting for a running one) after the CQ is destroyed. */
struct krcore_cqnotify;
struct krcore_cqnotify *krcore_shim_cqnotify_alloc(void);
void krcore_shim_cqnotify_set(struct krcore_cqnotify *n, void *ctx);
void krcore_shim_cqnotify_free(struct krcore_cqnotify *n);
/* Queues the device's network work (krcore_rs_dev_net) on the module's workers (a few
 * items, each taking the next job), each once however often it is asked before it runs;
 * freed with the item. */
void krcore_shim_net_kick(struct krcore_cqnotify *n);
void krcore_shim_cq_kick(struct krcore_cqnotify *n);
u32 krcore_shim_max_cqe(struct ib_device *dev);
struct ib_cq *krcore_shim_alloc_cq(struct ib_device *dev, int nr_cqe, struct krcore_cqnotify *n);
void krcore_shim_free_cq(struct ib_cq *cq);
/* Arms the CQ for one event; > 0 when completions may have been missed: poll again. */
int krcore_shim_cq_arm(struct ib_cq *cq);
/* A ring's wait queue and its generation (see shim.c). */
struct krcore_waitq;
struct krcore_waitq *krcore_shim_waitq_alloc(void);
void krcore_shim_waitq_free(struct krcore_waitq *w);
u32 krcore_shim_waitq_gen(struct krcore_waitq *w);
void krcore_shim_waitq_wake(struct krcore_waitq *w);
int krcore_shim_waitq_sleep(struct krcore_waitq *w, u32 seen, u32 timeout_us);
void krcore_shim_waitq_poll_wait(struct krcore_waitq *w, struct file *f,
				 struct poll_table_struct *pt);
/* The wait_spin_us module parameter; the monotonic clock in us. */
u32 krcore_shim_wait_spin_us(void);
struct ib_qp *krcore_shim_create_rc_qp(struct ib_pd *pd, struct ib_cq *cq, u32 send_depth,
				       u32 recv_depth);
u32 krcore_shim_qp_num(struct ib_qp *qp);
/* The MAC address of the netdev behind GID table entry `index` (6 bytes). */
int krcore_shim_gid_mac(struct ib_device *dev, u32 port, u32 index, u8 *mac);
/* RESET -> INIT -> RTR -> RTS, connected over RoCE to dgid/dqpn at dmac. Kernel QPs get
 * no DMAC resolution from the core (only user QPs do), so the caller supplies it. */
int krcore_shim_connect_rc_qp(struct ib_qp *qp, u32 port, u32 sgid_index, const u8 *dgid,
			      const u8 *dmac, u32 dqpn);
int krcore_shim_qp_to_error(struct ib_qp *qp);
/* Any state -> RESET: the queues are emptied, ready for krcore_shim_connect_rc_qp. */
int krcore_shim_qp_reset(struct ib_qp *qp);
/* Posts a signaled zero-length SEND tagged wr_id: on a QP in the error state it is
 * flushed after every request posted before it, so its completion marks the end. */
int krcore_shim_post_marker(struct ib_qp *qp, u64 wr_id);
void krcore_shim_destroy_qp(struct ib_qp *qp);
/* Per-device scratch for building and polling work requests (too large for the
 * stack); used under the device's mutex. */
struct krcore_scratch;
struct krcore_scratch *krcore_shim_scratch_alloc(void);
void krcore_shim_scratch_free(struct krcore_scratch *s);

/* Posts n (<= 16) requests in order; *posted says how many went out. */
int krcore_shim_post_send(struct krcore_scratch *s, struct ib_qp *qp,
			  const struct krcore_send_wr *wrs, u32 n, u32 *posted);
/* At most this many work requests per krcore_shim_post_send call. */
#define KRCORE_POST_MAX 32
/* Polls up to n (<= 16) completions. */
int krcore_shim_poll_cq(struct krcore_scratch *s, struct ib_cq *cq, struct krcore_wc *out,
			int n);
/* Registrations and the keys messages are written with: engine/fastreg.c. */
struct krcore_mr;
/* Registers user memory of the current process with exactly `access` (krcore's
 * MrAccess bits); memory it may write locally is kept pinned for receive keys too. */
struct krcore_mr *krcore_shim_reg_user_mr(struct ib_pd *pd, u64 addr, u64 len, u32 access);
u32 krcore_shim_mr_lkey(struct krcore_mr *m);
u32 krcore_shim_mr_rkey(struct krcore_mr *m);
int krcore_shim_dereg_mr(struct krcore_mr *m);
/* The wr_id of a key's own work requests, and of the WRITE inside a message's chain
 * (abi's FAR_WRITE_WR_ID: dropped when flushed). */
#define KRCORE_FR_WR_ID (U64_MAX - 0x40000001ULL)
/* Keys made for one receive's bytes each (engine/fastreg.c): a pool QP's, taken in
 * turn (its qp_context), or the device's, for receives advertised to peer kernels. */
struct krcore_keys;
struct krcore_keys *krcore_keys_alloc(struct ib_pd *pd, u32 n);
/* Destroys every key (before the PD goes); what is left is freed by _free. */
void krcore_keys_drain(struct krcore_keys *p);
void krcore_keys_free(struct krcore_keys *p);
struct ib_reg_wr;
/* A pool QP's key for the nth chain of a post, made over len bytes at addr of m, reg
 * filled to register it; _posted turns the ring past the chains that went out. */
int krcore_keys_deliver(struct krcore_keys *p, u32 nth, struct krcore_mr *m, u64 addr,
			u32 len, struct ib_reg_wr *reg, u32 *rkey);
void krcore_keys_posted(struct krcore_keys *p, u32 chains);
/* Makes a pool QP's used keys again (a reset QP, nothing in flight). */
void krcore_keys_renew(struct krcore_keys *p);
/* Gives the device's set its local QP, connected to itself over GID sgid_index (mac its
 * netdev's) of port, which its registrations run on. */
int krcore_keys_local(struct krcore_keys *p, u32 port, u32 sgid_index, const u8 *gid,
		      const u8 *mac);
/* The device's key i (abi cluster::keys chose it, and holds the lock around these),
 * made over len bytes at addr of m and registered on the local QP: 0 once that
 * completed. On failure *lost says the key must never be taken again (its
 * registration may still run, or it could not be made again). */
int krcore_key_post(struct krcore_keys *p, u32 i, struct krcore_mr *m, u64 addr, u32 len,
		    u32 *rkey, bool *lost);
/* Lets key i's pages go, destroying it and making it again first when `remake` (it may
 * be open at the NIC): false when it could not be made again (one key fewer). */
bool krcore_key_let(struct krcore_keys *p, u32 i, bool remake);
/* Test only (test_unchecked_wire): whether one-sided requests through imports go
 * unchecked, and where (*rkey 0: where they name, with the import's rkey). */
bool krcore_shim_test_unchecked_wire(u64 *addr, u32 *rkey);

/* An eventfd of the calling process by fd (eventfd_ctx_fdget), ERR_PTR-encoded. */
struct eventfd_ctx;
struct eventfd_ctx *krcore_shim_eventfd_get(int fd);
void krcore_shim_eventfd_signal(struct eventfd_ctx *ctx);
/* Completes io_uring command `cmd` with `res` and, in its 32-byte CQE, `extra`, from
 * its task's context (any context may call this). */
void krcore_shim_uring_complete(void *cmd, s32 res, u64 extra);
void krcore_shim_eventfd_put(struct eventfd_ctx *ctx);

/* Yield the CPU if needed (cond_resched is a macro on some configs). */
void krcore_shim_cond_resched(void);

/* Register the misc device /dev/krcore and the ib_client; undo both. */
int krcore_shim_register(void);
/* Dynamic debug points (pr_debug): a CONNECT's outcome, a failed request, a recovery. */
void krcore_shim_dbg_connect(u16 ring, const u8 *gid, u32 service, int res, const char *why,
			     int why_len);
void krcore_shim_dbg_failure(u16 ring, u64 user_data, int res, const char *why, int why_len);
void krcore_shim_dbg_recovery(u32 qp, u64 total);
void krcore_shim_unregister(void);

const char *krcore_shim_dev_name(struct ib_device *dev);
u32 krcore_shim_dev_index(struct ib_device *dev);
u32 krcore_shim_first_port(struct ib_device *dev);
u32 krcore_shim_last_port(struct ib_device *dev);
int krcore_shim_query_port(struct ib_device *dev, u32 port, struct krcore_port_attr *out);
/* One GID table entry: 0 and the GID (16 bytes) and its type, or a negative errno. */
int krcore_shim_query_gid(struct ib_device *dev, u32 port, u32 index, u8 *gid,
			  u32 *gid_type);

/* ---- Kernel-to-kernel connections (cm.c) ---- */
struct ib_pd;
struct ib_cq;
/* In the module's load and unload, in this order: read the cluster key (before any
 * device is served; -EINVAL for a malformed one, 0 with none: no cluster); listen on
 * the cm_port parameter (nothing when it is 0 or there is no key); stop listening (the
 * peer connections go with their devices when the ib_client is unregistered, each
 * device's CQ quiesced first); once the ib_client is gone, let the key go. */
int krcore_shim_cm_init(void);
int krcore_shim_cm_listen(void);
void krcore_shim_cm_stop(void);
void krcore_shim_cm_exit(void);
/* The cm_peer parameter as an IPv4-mapped GID (16 bytes): 0, -ENOENT when unset. */
int krcore_shim_cm_peer_gid(u8 *gid);
/* The cluster key and the tags kernels prove they hold it with (cm_auth.c; abi's
 * cluster::auth has the protocol, cluster::hello the wire forms, read and written in
 * Rust by cm_wire.rs). */
#define KRCORE_CM_NONCE_LEN 16
#define KRCORE_CM_TAG_LEN 16
#define KRCORE_CM_HELLO_LEN 56
#define KRCORE_CM_CHALLENGE_LEN 20
#define KRCORE_CM_YIELD_LEN 20
#define KRCORE_CM_ACCEPT_LEN 40
#define KRCORE_CM_TRANSCRIPT_LEN 64
#define KRCORE_CM_ASK 1
#define KRCORE_CM_PROVE 2
#define KRCORE_CM_FRESH 3
/* A connection request's fields: who asks, for what, and (PROVE) its proof. */
struct krcore_cm_hello {
	u8 kind; /* KRCORE_CM_PEER or KRCORE_CM_META */
	u8 index; /* which connection of a set (PEER) */
	u8 step; /* KRCORE_CM_ASK, KRCORE_CM_PROVE or KRCORE_CM_FRESH */
	u8 resv;
	u8 nonce_i[KRCORE_CM_NONCE_LEN];
	/* PROVE: the challenge; FRESH: the dialer's time (krcore_rs_cm_fresh_nonce) */
	u8 nonce_r[KRCORE_CM_NONCE_LEN];
	u8 tag[KRCORE_CM_TAG_LEN]; /* PROVE, FRESH: the dialer's tag */
};
KRCORE_LAYOUT_SIZE(struct krcore_cm_hello, 52);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, kind, 0);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, index, 1);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, step, 2);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, resv, 3);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, nonce_i, 4);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, nonce_r, 20);
KRCORE_LAYOUT_AT(struct krcore_cm_hello, tag, 36);
/* What a tag binds: the kind and index asked for, both ends (IPv4 address and port,
 * network order), both QP numbers (the responder's left out of the dialer's tag), both
 * nonces. */
struct krcore_cm_bind {
	u8 kind;
	u8 index;
	__be16 initiator_port;
	__be16 responder_port;
	u8 step; /* the hello's: KRCORE_CM_PROVE or KRCORE_CM_FRESH */
	u8 resv;
	__be32 initiator;
	__be32 responder;
	u32 initiator_qpn;
	u32 responder_qpn;
	u8 nonce_i[KRCORE_CM_NONCE_LEN];
	u8 nonce_r[KRCORE_CM_NONCE_LEN];
};
KRCORE_LAYOUT_SIZE(struct krcore_cm_bind, 56);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, kind, 0);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, index, 1);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, initiator_port, 2);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, responder_port, 4);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, step, 6);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, resv, 7);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, initiator, 8);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, responder, 12);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, initiator_qpn, 16);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, responder_qpn, 20);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, nonce_i, 24);
KRCORE_LAYOUT_AT(struct krcore_cm_bind, nonce_r, 40);
/* Wire forms (cm_wire.rs). A reader takes private data of any length: 0, or -EPROTO
 * for bytes that are not the message. krcore_rs_cm_refusal_read: 1 for a challenge
 * (its nonce at `out`), 2 for a yield (its tag at `out`, to check: KRCORE_CM_YIELDER),
 * 0 otherwise. A writer fills its _LEN bytes. */
int krcore_rs_cm_hello_read(const void *data, u32 len, struct krcore_cm_hello *out);
void krcore_rs_cm_hello_write(const struct krcore_cm_hello *h, u8 *out);
int krcore_rs_cm_refusal_read(const void *data, u32 len, u8 *out);
void krcore_rs_cm_challenge_write(const u8 *nonce_r, u8 *out);
void krcore_rs_cm_yield_write(const u8 *tag, u8 *out);
int krcore_rs_cm_accept_read(const void *data, u32 len, struct krcore_meta_offer *offer,
			     u8 *tag);
/* `offer` NULL: a set's accept (no region). */
void krcore_rs_cm_accept_write(const struct krcore_meta_offer *offer, const u8 *tag, u8 *out);
/* Whose tag a transcript is for (abi's cluster::hello::Role): the dialer's, in its
 * PROVE; the listener's, in its accept; the listener's, in a yield. */
enum krcore_cm_role {
	KRCORE_CM_INITIATOR = 0,
	KRCORE_CM_RESPONDER = 1,
	KRCORE_CM_YIELDER = 2,
	KRCORE_CM_BYE_INITIATOR = 3,
	KRCORE_CM_BYE_RESPONDER = 4,
};
/* The bytes `role`'s tag is a MAC over. */
void krcore_rs_cm_transcript(int role, const struct krcore_cm_bind *b, u8 *out);
/* What a FRESH hello carries in place of the listener's nonce: the time `at_ms` (the
 * wall clock, krcore_shim_wall_ms). */
void krcore_rs_cm_fresh_nonce(s64 at_ms, u8 *out);
/* Reads the cluster_key parameter and keys the MAC: 0, -ENOKEY when there is none
 * (this node joins no cluster), -EINVAL when it is malformed or under 128 bits. */
int krcore_cm_auth_init(void);
void krcore_cm_auth_exit(void);
/* Whether a key was given (there is a cluster). */
bool krcore_cm_auth_ready(void);
/* `role`'s tag over `b`, KRCORE_CM_TAG_LEN bytes. */
int krcore_cm_tag(enum krcore_cm_role role, const struct krcore_cm_bind *b, u8 *tag);
/* Whether `tag` is that tag (compared in constant time). */
bool krcore_cm_tag_ok(enum krcore_cm_role role, const struct krcore_cm_bind *b, const u8 *tag);
#define KRCORE_CM_NAME_KEY_LEN 16
/* The MetaServer's name hash key, derived from the cluster key (zeros without one). */
void krcore_cm_name_key(u8 *out);
/* The listener's gate (Rust, abi's cluster::auth), with a pin from
 * krcore_rs_cm_resources. A hello from `from` (IPv4, network order) is answered with
 * the challenge written to `nonce` (KRCORE_CM_NONCE_LEN bytes; nothing is kept). A
 * proof from `from` to `to`, FRESH or answering `nonce_r`, its tag checked here first
 * (`tag_good`), is judged there: admitted (0), answered with a challenge (-ESTALE: a
 * member's FRESH proof out of time, older than the gate, or replayed) or refused
 * (-EPERM). */
void krcore_rs_cm_challenge(void *pin, u32 from, u8 *nonce);
int krcore_rs_cm_judge(void *pin, bool fresh, bool tag_good, u32 from, u32 to,
		       const u8 *nonce_i, const u8 *nonce_r);

/* The cm_port parameter. */
u16 krcore_shim_cm_port(void);
/* The test_notice_echo parameter (fault injection for tests). */
bool krcore_shim_test_notice_echo(void);
/* The cm_dial_delay_ms parameter (fault injection for tests). */
u32 krcore_shim_cm_dial_delay_ms(void);
/* The test_hold_meta_ms parameter (fault injection for tests: a slow MetaServer). */
u32 krcore_shim_test_hold_meta_ms(void);
/* Connects an RC QP on `dev` with `pd` and `cq` from local address src_gid to dst_gid
 * (IPv4-mapped) at cm_port, as connection `index` of a set (PEER), waiting up to
 * timeout_ms; 0 with the connection (a handle for the caller, released by _close or
 * _put), its QP and the QP's number, or a negative errno (-EALREADY: the peer refused
 * it for its own attempt; -EPERM: the peer proved no cluster key; -ENOKEY: this node
 * has no key). Sleeps; call with no krcore lock held. */
struct krcore_cm_conn;
struct ib_qp;
#define KRCORE_CM_PEER 1 /* a connection set's QP */
#define KRCORE_CM_META 2 /* a node's connection to the MetaServer */
int krcore_shim_cm_connect(struct ib_device *dev, struct ib_pd *pd, struct ib_cq *cq,
			   const u8 *src_gid, const u8 *dst_gid, u32 timeout_ms, u8 kind, u8 index,
			   struct krcore_cm_conn **out, struct ib_qp **qp, u32 *qpn);
/* Whether the connection broke (the peer disconnected, its device went). */
bool krcore_shim_cm_broken(struct krcore_cm_conn *c);
/* This end's farewell on set connection `c` (its kernel leaving): its tag
 * (KRCORE_CM_TAG_LEN bytes at `tag`) over the connection's transcript; 0, or
 * -ENOTCONN for one not up. */
int krcore_shim_cm_farewell_tag(struct krcore_cm_conn *c, u8 *tag);
/* The peer's farewell on `c` came with `tag`: whether it proves the peer's kernel is
 * leaving. If it does, `c` is broken at once and its QP goes to the error state (on
 * cm.c's workqueue), so its set fails (peer_gone). Any context; no lock taken. */
bool krcore_shim_cm_farewell(struct krcore_cm_conn *c, const u8 *tag);
/* Tears the connection down (unless its device's removal did) and releases the handle. */
void krcore_shim_cm_close(struct krcore_cm_conn *c);
/* The same, on cm.c's workqueue: for callers holding a krcore lock (see cm.c). */
void krcore_shim_cm_close_later(struct krcore_cm_conn *c);
/* Releases the handle of a connection its device's removal tore down. */
void krcore_shim_cm_put(struct krcore_cm_conn *c);
/* Takes a handle on an accepted connection for a set (released as an active one's) and
 * posts its notice receives: false when it is already gone or broken. */
bool krcore_cm_own(struct krcore_cm_conn *c);
/* A set connection this node dialed, installed in its QP slot: its notice receives
 * posted now (the peer's notices waited on the wire until then); a failure marks it
 * broken. No-op for one that has them (an accepted one's come with krcore_cm_own). */
void krcore_cm_notices_start(struct krcore_cm_conn *c);
/* Moves a set's QP to the error state and posts a signaled send marker (`send_id`) and,
 * when it has notice receives, a receive marker (`recv_id`) behind everything: once both
 * completed (polled from the device's CQ), nothing of the QP is left there and it may
 * be destroyed. 0: both posted; 1: only the send marker (no receives); <0: neither
 * (the connection is torn down already). */
int krcore_cm_drain(struct krcore_cm_conn *c, u64 send_id, u64 recv_id);
/* A device is about to lose its connections (cm.c): its CQ is polled no more. */
void krcore_rs_dev_quiesce(struct ib_device *dev);
/* A device goes away: refuse its requests, tear its peer connections down, then call
 * `remove` (the device context's removal). */
void krcore_shim_cm_remove_device(struct ib_device *dev, void (*remove)(struct ib_device *));
/* For meta.c: the MetaServer's offer an active META connection's accept carried
 * (-EPROTO when it carried none), and a post (send or receive) on a connection's QP
 * unless it was torn down (-ENOTCONN). */
struct ib_send_wr;
struct ib_recv_wr;
int krcore_cm_reply(struct krcore_cm_conn *c, struct krcore_meta_offer *o);
/* A module parameter naming an IPv4 address, as an IPv4-mapped GID (16 bytes): 0,
 * -ENOENT when unset, -EINVAL when it is no address. */
int krcore_cm_param_gid(const char *param, u8 *gid);
int krcore_cm_post(struct krcore_cm_conn *c, const struct ib_send_wr *wr);
int krcore_cm_post_recv(struct krcore_cm_conn *c, const struct ib_recv_wr *wr);
/* An accepted connection whose peer kernel misbehaved: nothing is posted on it any
 * more, and it is torn down on cm.c's workqueue as one whose peer left. */
void krcore_cm_drop_peer(struct krcore_cm_conn *c);
/* A set's QP's notice receive `i` completed: its 32 bytes copied to `out` and the
 * receive posted again; -ENOTCONN once the connection is torn down. */
int krcore_cm_take_notice(struct krcore_cm_conn *c, u32 i, u8 *out);

/* ---- The MetaServer (meta.c) ---- */
/* The meta_check_ms parameter: the device watch's tick period (0: no tick). */
uint krcore_shim_meta_check_ms(void);
/* The meta_server parameter as an IPv4-mapped GID (16 bytes): 0, -ENOENT when unset. */
int krcore_shim_meta_server_gid(u8 *gid);
/* A MetaServer's region: `bytes` of zeroed kernel memory and the fast-registration MR
 * that will cover it on `pd` (registered by _region_register); NULL on failure. */
struct krcore_meta_region;
struct krcore_meta_region *krcore_shim_meta_region_alloc(struct ib_pd *pd, u32 bytes);
void krcore_shim_meta_region_offer(struct krcore_meta_region *r, struct krcore_meta_offer *o);
/* Its bytes, mapped for the CPU: the MetaServer's kernel, their only writer. After
 * writing `len` bytes at `off`, _wrote hands them to the device, ordered before any
 * later write. */
u8 *krcore_shim_meta_region_va(struct krcore_meta_region *r);
void krcore_shim_meta_region_wrote(struct krcore_meta_region *r, u64 off, u32 len);

/* Frees it: no connection may reach it any more (their QPs are destroyed). */
void krcore_shim_meta_region_free(struct krcore_meta_region *r);
/* A member's connection to this node's MetaServer, accepted by cm.c: a CQ of its own,
 * polled on ib_comp_wq, which hands each request (a SEND into its one receive) to the
 * module's own queue to be answered (krcore_rs_meta_serve) with one SEND; _init makes
 * that queue (with the cluster's, -ENOMEM when not), _exit destroys it once every
 * connection went. _alloc before the QP is created on its
 * CQ (NULL: no memory), _start once it is (its receive posted: -errno when not), _free
 * after the QP is destroyed (waits for a request being served). `from`: the member's
 * IPv4 address, network order. */
struct krcore_meta_serving;
int krcore_meta_serving_init(void);
void krcore_meta_serving_exit(void);
struct krcore_meta_serving *krcore_meta_serving_alloc(struct ib_device *dev, struct ib_pd *pd,
						      __be32 from);
struct ib_cq *krcore_meta_serving_cq(struct krcore_meta_serving *s);
int krcore_meta_serving_start(struct krcore_meta_serving *s, struct krcore_cm_conn *c);
void krcore_meta_serving_free(struct krcore_meta_serving *s);
/* A member's SEND to the MetaServer of `dev` invalidated a key (the region's, maybe):
 * the region is checked, and registered again if it was. */
void krcore_rs_meta_invalidated(struct ib_device *dev);
/* The MetaServer of `dev` answers request `req` (`len` bytes from the member at `from`,
 * network order) with KRCORE_META_REPLY_LEN bytes in `reply`: 0, or -ENODEV when it
 * serves no region (no reply goes). */
int krcore_rs_meta_serve(struct ib_device *dev, __be32 from, const u8 *req, u32 len, u8 *reply);
/* A node's connection to the MetaServer at dst_gid: an RC QP with its own CQ and a
 * kernel bounce buffer of KRCORE_META_BUF bytes, and the offer its accept carried.
 * Sleeps (up to timeout_ms); no krcore lock held. */
#define KRCORE_META_BUF 1024
struct krcore_meta_conn;
int krcore_shim_meta_open(struct ib_device *dev, struct ib_pd *pd, const u8 *src_gid,
			  const u8 *dst_gid, u32 timeout_ms, struct krcore_meta_conn **out,
			  struct krcore_meta_offer *offer);
/* Registers `r` with a fast-registration request on `m`'s QP (the region's device's). */
int krcore_shim_meta_region_register(struct krcore_meta_region *r, struct krcore_meta_conn *m);
/* The region under a new MR and key, registered on `m` (this node's own connection,
 * whose offer takes the new key); the old MR is destroyed, whatever state a peer's
 * invalidation or a registration that timed out left it in. */
int krcore_shim_meta_region_rekey(struct krcore_meta_region *r, struct krcore_meta_conn *m);
/* A READ of `len` bytes at `off` in the region into the bounce buffer, waited for up
 * to KRCORE_META_WAIT_MS; 0, or a negative errno (the connection is then broken). */
int krcore_shim_meta_read(struct krcore_meta_conn *m, u64 off, u32 len);
/* A request to the MetaServer's kernel: the buffer's first `len` bytes (at most
 * KRCORE_META_REPLY_OFF) SENT, and its reply received at KRCORE_META_REPLY_OFF
 * (KRCORE_META_REPLY_LEN bytes: -EPROTO for any other length), both waited for as a
 * READ; 0, or a negative errno (the connection is then broken). */
#define KRCORE_META_REPLY_OFF 512
#define KRCORE_META_REPLY_LEN 16
int krcore_shim_meta_call(struct krcore_meta_conn *m, u32 len);
u8 *krcore_shim_meta_buf(struct krcore_meta_conn *m);
bool krcore_shim_meta_broken(struct krcore_meta_conn *m);
void krcore_shim_meta_close(struct krcore_meta_conn *m);

#endif /* KRCORE_SHIM_H */
