// SPDX-License-Identifier: GPL-2.0
/*
 * krcore's C shim: the misc device, file operations, mmap entry, ib_client, and
 * wrappers of static inline verbs. No logic lives here; see shim.h.
 */
#include <linux/cred.h>
#include <linux/user_namespace.h>
#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/delay.h>
#include <linux/eventfd.h>
#include <linux/random.h>
#include <linux/sched/mm.h>
#include <linux/fs.h>
#include <linux/io_uring/cmd.h>
#include <linux/kthread.h>
#include <linux/moduleparam.h>
#include <linux/workqueue.h>
#include <linux/wait.h>
#include <linux/poll.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/module.h>
#include <linux/vmalloc.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

#include "shim.h"
#include "kcompat.h"

static int krcore_fop_open(struct inode *inode, struct file *f)
{
	void *priv = NULL;
	int ret = krcore_rs_open(&priv);

	if (ret)
		return ret;
	f->private_data = priv;
	return 0;
}

static int krcore_fop_release(struct inode *inode, struct file *f)
{
	krcore_rs_release(f->private_data);
	return 0;
}

static long krcore_fop_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	return krcore_rs_ioctl(f->private_data, cmd, arg);
}

static int krcore_fop_mmap(struct file *f, struct vm_area_struct *vma)
{
	return krcore_rs_mmap(f->private_data, vma, vma->vm_pgoff,
			      vma->vm_end - vma->vm_start);
}

/* poll(2), select(2) and epoll on a ring's file: readable while its CQ holds completions
 * (so epoll and an event loop's AsyncFd take the ring as any fd). */
static __poll_t krcore_fop_poll(struct file *f, poll_table *pt)
{
	int r = krcore_rs_poll(f->private_data, f, pt);

	if (r == -ENODEV)
		return EPOLLHUP | EPOLLERR;
	if (r < 0)
		return EPOLLERR;
	return r ? (EPOLLIN | EPOLLRDNORM) : 0;
}

void krcore_shim_uring_complete(void *c, s32 res, u64 extra)
{
	struct io_uring_cmd *cmd = c;
	struct krcore_uring_pdu *p = io_uring_cmd_to_pdu(cmd, struct krcore_uring_pdu);

	p->res = res;
	p->extra = extra;
	/* Before its issuer marked it cancelable, the issuer completes it (a command done
	 * before it is marked would be marked after it was freed). A successful cmpxchg is
	 * fully ordered: the result's stores come before EARLY. */
	if (atomic_cmpxchg(&p->state, KRCORE_PDU_ISSUING, KRCORE_PDU_EARLY) == KRCORE_PDU_ISSUING)
		return;
	/* io_uring_cmd_done wants the ring's lock, or its task: the task's work runs it. */
	io_uring_cmd_complete_in_task(cmd, krcore_uring_task_done);
}

/*
 * krcore entries through io_uring's own ring: the 64-byte entry in a 128-byte SQE's
 * command area, its completion in a 32-byte CQE (res, and aux or the reason).
 *
 * A command that completes later is marked cancelable, so a task that exits or execs
 * gets it back at once (IO_URING_F_CANCEL: abi's engine/uring.rs `Ring::cancel`)
 * rather than waiting on a peer. Marking takes io_uring's lock, which is taken before
 * the ring's (io_uring holds it while it issues), so it happens here, after Rust let
 * go of the ring; a result that comes meanwhile waits in the pdu (EARLY) for this
 * function to complete it. Until marked, the command is in no cancel list, and
 * io_uring holds the request (its lock inline or under SQPOLL, its reference from
 * io-wq) until this returns.
 */
static int krcore_fop_uring_cmd(struct io_uring_cmd *cmd, unsigned int issue_flags)
{
	struct krcore_uring_pdu *p = io_uring_cmd_to_pdu(cmd, struct krcore_uring_pdu);
	struct krcore_uring_entry entry;
	s32 res = 0;
	u64 extra = 0;
	int r;

	if (issue_flags & IO_URING_F_CANCEL) {
		/* Called with io_uring's lock held, for a listed command (its issuer may
		 * still be between marking and its state's exchange, from io-wq). */
		if (krcore_rs_uring_cancel(cmd->file->private_data, cmd, &res, &extra))
			krcore_uring_done(cmd, res, extra, issue_flags);
		else
			krcore_uring_unlist(cmd);
		return 0;
	}
	if (cmd->cmd_op != krcore_rs_uring_cmd_entry)
		return -EOPNOTSUPP;
	if (!(issue_flags & IO_URING_F_SQE128) || !(issue_flags & IO_URING_F_CQE32))
		return -EINVAL;
	/* Read once: the SQE is the user's memory until io_uring copied it. */
	memcpy(&entry, krcore_uring_entry(cmd), sizeof(entry));
	atomic_set(&p->state, KRCORE_PDU_ISSUING);
	r = krcore_rs_uring_cmd(cmd->file->private_data, cmd, entry.bytes,
				issue_flags & IO_URING_F_NONBLOCK, &res, &extra);
	if (r < 0)
		return r;
	if (r == 1) {
		krcore_uring_done(cmd, res, extra, issue_flags);
		return -EIOCBQUEUED;
	}
	io_uring_cmd_mark_cancelable(cmd, issue_flags);
	/* An exchange, fully ordered whatever it finds (a failed cmpxchg orders nothing):
	 * seeing EARLY, the result's stores are seen too. */
	if (atomic_xchg(&p->state, KRCORE_PDU_MARKED) == KRCORE_PDU_EARLY)
		krcore_uring_done(cmd, p->res, p->extra, issue_flags);
	return -EIOCBQUEUED;
}

/* Each ring's counters in /proc/PID/fdinfo/FD, for `krcore rings`. */
static void krcore_fop_show_fdinfo(struct seq_file *m, struct file *f)
{
	char *buf = kmalloc(PAGE_SIZE, GFP_KERNEL);

	if (!buf)
		return;
	seq_write(m, buf, krcore_rs_fdinfo(f->private_data, buf, PAGE_SIZE));
	kfree(buf);
}

/* .owner pins the module while a file is open, so rmmod then fails with EBUSY. */
static const struct file_operations krcore_fops = {
	.owner = THIS_MODULE,
	.open = krcore_fop_open,
	.release = krcore_fop_release,
	.unlocked_ioctl = krcore_fop_ioctl,
	.mmap = krcore_fop_mmap,
	.poll = krcore_fop_poll,
	.uring_cmd = krcore_fop_uring_cmd,
	.show_fdinfo = krcore_fop_show_fdinfo,
	.llseek = noop_llseek,
};

/* What Rust writes for one read of an inspection file, at most; the rest is cut. */
#define KRCORE_SHOW_MAX (64 * 1024)

static struct dentry *krcore_debugfs;

static int krcore_show(struct seq_file *m, void *unused)
{
	char *buf = kvmalloc(KRCORE_SHOW_MAX, GFP_KERNEL);

	if (!buf)
		return -ENOMEM;
	seq_write(m, buf, krcore_rs_show((unsigned long)m->private, buf, KRCORE_SHOW_MAX));
	kvfree(buf);
	return 0;
}

static int krcore_show_open(struct inode *inode, struct file *f)
{
	return single_open(f, krcore_show, inode->i_private);
}

static const struct file_operations krcore_show_fops = {
	.owner = THIS_MODULE,
	.open = krcore_show_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
};

/*
 * The inspection files, debugfs krcore/NAME (root only, as debugfs is): file i is
 * names[i], its text Rust's file i (inspect.rs). Inspection only: the module works
 * without them (debugfs may be absent). In C on both kernels: 7.x's kernel::debugfs
 * leaves its file operations' owner unset, so a file held open across rmmod would be
 * released through the freed module's operations; .owner here pins the module while
 * one is open, as /dev/krcore's does.
 */
void krcore_shim_debugfs_add(const char *const *names, unsigned int n)
{
	unsigned long i;

	krcore_debugfs = debugfs_create_dir("krcore", NULL);
	for (i = 0; i < n; i++)
		debugfs_create_file(names[i], 0444, krcore_debugfs, (void *)i, &krcore_show_fops);
}

/* Waits for readers: none reaches the registry after this. */
void krcore_shim_debugfs_remove(void)
{
	debugfs_remove_recursive(krcore_debugfs);
}

void krcore_shim_dbg_connect(u16 ring, const u8 *gid, u32 service, int res, const char *why,
			     int why_len)
{
	pr_debug("krcore: ring %u: CONNECT %pI6c service %u: %d (%.*s)\n", ring, gid, service, res,
		 why_len, why);
}

void krcore_shim_dbg_failure(u16 ring, u64 user_data, int res, const char *why, int why_len)
{
	pr_debug("krcore: ring %u: request %llx failed: %d (%.*s)\n", ring, user_data, res, why_len,
		 why);
}

void krcore_shim_dbg_recovery(u32 qp, u64 total)
{
	pr_debug("krcore: pooled QPs from %u recovered (%llu recoveries so far)\n", qp, total);
}

/*
 * Who may open /dev/krcore. The default lets every local user in, as rdma-core's udev
 * rules do for /dev/infiniband/uverbs*: krcore is built to be shared by mutually
 * hostile users (docs/security.md). A site that wants only a group in loads
 * the module with dev_mode=0660 and gives the node that group with a udev rule.
 */
static ushort dev_mode = 0666;
module_param(dev_mode, ushort, 0444);
MODULE_PARM_DESC(dev_mode, "Mode of /dev/krcore (default 0666: every local user)");

static uint max_rings_per_user = 128;
module_param(max_rings_per_user, uint, 0644);
MODULE_PARM_DESC(max_rings_per_user, "Rings one user may hold at once (default 128)");

/* Each user's share of a device's tables (abi's engine/shares.rs), a quarter of each by
 * default; indexed as abi's Share. */
static uint max_vqps_per_user = 1024;
module_param(max_vqps_per_user, uint, 0644);
MODULE_PARM_DESC(max_vqps_per_user,
		 "Virtual QPs one user may hold on a device (default 1024 of its 4096 links)");
static uint max_recvs_per_user = 1024;
module_param(max_recvs_per_user, uint, 0644);
MODULE_PARM_DESC(max_recvs_per_user,
		 "Receives one user may have waiting on a device (default 1024 of 16384; at most 1024, half of one links shard's)");
static uint max_exports_per_user = 256;
module_param(max_exports_per_user, uint, 0644);
MODULE_PARM_DESC(max_exports_per_user,
		 "MRs with remote rights one user may hold on a device (default 256 of 1024)");
static uint max_listens_per_user = 8;
module_param(max_listens_per_user, uint, 0644);
MODULE_PARM_DESC(max_listens_per_user,
		 "Listens one user may hold on a device (default 8 of 32)");

u32 krcore_shim_max_share(u32 share)
{
	switch (share) {
	case 0: return READ_ONCE(max_vqps_per_user);
	case 1: return READ_ONCE(max_recvs_per_user);
	case 2: return READ_ONCE(max_exports_per_user);
	case 3: return READ_ONCE(max_listens_per_user);
	}
	return 0;
}

/* Shares of the MetaServer's names (abi's meta::client and meta::serve): a user's of
 * its node's publications, and, on the MetaServer, a node's of the exports table. */
static uint max_names_per_user = 1024;
module_param(max_names_per_user, uint, 0644);
MODULE_PARM_DESC(max_names_per_user,
		 "Names one user may have published from a device at once (default 1024 of 16384)");
static uint max_names_per_node = 4096;
module_param(max_names_per_node, uint, 0644);
MODULE_PARM_DESC(max_names_per_node,
		 "On the MetaServer: names one node may hold in its table at once (default 4096 of 40960; at most 65535)");

u32 krcore_shim_max_names(bool per_node)
{
	return per_node ? min(READ_ONCE(max_names_per_node), 65535u) : READ_ONCE(max_names_per_user);
}

/* Read once per device, at its context's creation (so 0444). */
static uint max_peers = 16;
module_param(max_peers, uint, 0444);
MODULE_PARM_DESC(max_peers,
		 "Peer nodes a device keeps connection sets to at once (default 16, 1-126, fewer if the device's CQ cannot hold them: 76 on soft-RoCE; a set takes 2 QPs; a new node takes the least recently used idle set's place)");

u32 krcore_shim_max_peers(void)
{
	return READ_ONCE(max_peers);
}

static uint max_sqpoll_per_user = 4;
module_param(max_sqpoll_per_user, uint, 0644);
MODULE_PARM_DESC(max_sqpoll_per_user, "SQ polling threads one user may hold at once (default 4)");

static uint max_sq_idle_ms = 10000;
module_param(max_sq_idle_ms, uint, 0644);
MODULE_PARM_DESC(max_sq_idle_ms, "Cap on a polling thread's sq_idle_ms (default 10000)");

static uint request_timeout_ms = 5000;
module_param(request_timeout_ms, uint, 0444);
MODULE_PARM_DESC(request_timeout_ms, "A pooled QP whose send queue makes no progress this long is failed; its requests complete with Deadline; a SEND no receive takes this long fails with NoReceiver (default 5000)");

static uint wait_spin_us = 50;
module_param(wait_spin_us, uint, 0644);
MODULE_PARM_DESC(wait_spin_us, "How long a wait for completions polls before it sleeps, in us (default 50)");

u32 krcore_shim_wait_spin_us(void)
{
	return READ_ONCE(wait_spin_us);
}

u32 krcore_shim_request_timeout_ms(void)
{
	return max(READ_ONCE(request_timeout_ms), 100U);
}

static struct miscdevice krcore_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "krcore",
	.fops = &krcore_fops,
};

u32 krcore_shim_max_rings_per_user(void)
{
	return READ_ONCE(max_rings_per_user);
}

u32 krcore_shim_max_sqpoll_per_user(void)
{
	return READ_ONCE(max_sqpoll_per_user);
}

u32 krcore_shim_max_sq_idle_ms(void)
{
	return READ_ONCE(max_sq_idle_ms);
}

/*
 * What the current task's credentials say, every id as the initial namespace sees it:
 * its uid and gid, and the outermost user namespace below the initial one it is in
 * (its owner, group and inode number; has_ns false in the initial one). Facts only:
 * abi's identity.rs decides who that makes the caller.
 */
void krcore_shim_current_facts(struct krcore_id_facts *f)
{
	const struct user_namespace *ns = current_user_ns();

	f->uid = from_kuid_munged(&init_user_ns, current_uid());
	f->gid = from_kgid_munged(&init_user_ns, current_gid());
	while (ns != &init_user_ns && ns->parent != &init_user_ns)
		ns = ns->parent;
	f->has_ns = ns != &init_user_ns;
	f->ns_owner = f->has_ns ? from_kuid_munged(&init_user_ns, ns->owner) : 0;
	f->ns_group = f->has_ns ? from_kgid_munged(&init_user_ns, ns->group) : 0;
	f->ns_id = f->has_ns ? ns->ns.inum : 0;
}

/* The current task's supplementary groups as the initial namespace sees them, the first
 * `max` into `out` (abi's Groups): how many. */
u32 krcore_shim_current_groups(u32 *out, u32 max)
{
	struct group_info *gi = get_current_groups();
	u32 i, n = 0;

	for (i = 0; i < gi->ngroups && n < max; i++)
		out[n++] = from_kgid_munged(&init_user_ns, gi->gid[i]);
	put_group_info(gi);
	return n;
}

/* Whether the current task may hold ports below 1024 (abi's engine/ports.rs). Asked at
 * ring setup of every ring, so without an audit record for the many that never bind
 * one. (7.x no longer exports has_capability_noaudit; ns_capable_noaudit, exported by
 * both, also marks a task that holds the capability PF_SUPERPRIV.) */
bool krcore_shim_may_bind_low(void)
{
	return ns_capable_noaudit(&init_user_ns, CAP_NET_BIND_SERVICE);
}

static int krcore_client_add(struct ib_device *dev)
{
	return krcore_rs_dev_add(dev);
}

static void krcore_client_remove(struct ib_device *dev, void *client_data)
{
	/* Peer connections on the device go first: they use its context's PD and CQ. */
	krcore_shim_cm_remove_device(dev, krcore_rs_dev_remove);
}

static struct ib_client krcore_client = {
	.name = "krcore",
	.add = krcore_client_add,
	.remove = krcore_client_remove,
};

/* Charged to the caller's memory cgroup, like every other allocation a ring owns. */
void *krcore_shim_ring_alloc(size_t size)
{
	return __vmalloc(PAGE_ALIGN(size), GFP_KERNEL_ACCOUNT | __GFP_ZERO);
}

void krcore_shim_ring_free(void *mem)
{
	vfree(mem);
}

int krcore_shim_ring_mmap(struct vm_area_struct *vma, void *mem, size_t size)
{
	/*
	 * A forked child gets no copy of the rings: it shares the parent's file but not
	 * its address space, and two processes producing into one SQ would break the ring
	 * protocol's single producer. The child maps the rings itself if it wants them.
	 */
	unsigned long off, len = vma->vm_end - vma->vm_start;
	int ret;

	if (len > PAGE_ALIGN(size))
		return -EINVAL;
	vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP);
	for (off = 0; off < len; off += PAGE_SIZE) {
		ret = vm_insert_page(vma, vma->vm_start + off, vmalloc_to_page(mem + off));
		if (ret)
			return ret;
	}
	return 0;
}

struct mm_struct *krcore_shim_mm_grab_current(void)
{
	struct mm_struct *mm = current->mm;

	if (mm)
		mmgrab(mm);
	return mm;
}

bool krcore_shim_mm_is_current(struct mm_struct *mm)
{
	return mm && current->mm == mm;
}

void krcore_shim_mm_drop(struct mm_struct *mm)
{
	if (mm)
		mmdrop(mm);
}

bool krcore_shim_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

s64 krcore_shim_coarse_ms(void)
{
	return ktime_get_coarse_ns() / NSEC_PER_MSEC;
}

s64 krcore_shim_wall_ms(void)
{
	return ktime_get_real_ns() / NSEC_PER_MSEC;
}

u64 krcore_shim_random_u64(void)
{
	return get_random_u64();
}

void krcore_shim_usleep(u32 us)
{
	usleep_range(us, 2 * us);
}

void krcore_shim_msleep(unsigned int ms)
{
	/* msleep(0) still sleeps a jiffy (4 ms at HZ=250): a delay of 0 is none. */
	if (ms)
		msleep(ms);
}

long krcore_shim_ptr_err(const void *p)
{
	return IS_ERR(p) ? PTR_ERR(p) : 0;
}

struct ib_pd *krcore_shim_alloc_pd(struct ib_device *dev)
{
	return ib_alloc_pd(dev, 0);
}

void krcore_shim_dealloc_pd(struct ib_pd *pd)
{
	ib_dealloc_pd(pd);
}

/*
 * The CQ's completion events. The NIC calls the handler in atomic context once the CQ
 * is armed (krcore_shim_cq_arm); it only queues the work item, which calls Rust to
 * poll, route and wake the rings that gained completions. ctx is set once the device
 * context exists, before the CQ is first armed.
 */
/* Workers a device's network work runs on at once: a dial that waits seconds for a node
 * that never answers holds up one of them, not other users' first contacts. */
#define KRCORE_NET_WORKERS 4

struct krcore_cqnotify;

struct krcore_net_item {
	struct work_struct work;
	struct krcore_cqnotify *n;
};

struct krcore_cqnotify {
	struct work_struct work;
	/* The device's network work (dials, MetaServer jobs): on the module's own workers,
	 * never on a caller's thread. */
	struct krcore_net_item net[KRCORE_NET_WORKERS];
	void *ctx;
};

static void krcore_cqnotify_work(struct work_struct *work)
{
	struct krcore_cqnotify *n = container_of(work, struct krcore_cqnotify, work);

	krcore_rs_dev_cq_event(READ_ONCE(n->ctx));
}

static void krcore_cqnotify_net(struct work_struct *work)
{
	struct krcore_net_item *it = container_of(work, struct krcore_net_item, work);

	krcore_rs_dev_net(READ_ONCE(it->n->ctx));
}

void krcore_shim_net_kick(struct krcore_cqnotify *n)
{
	int i;

	/* A dial may wait seconds: not the CQ's queue; every item, each taking the next
	 * job, so long jobs run side by side. Unbound: on whichever CPU is idle now, not
	 * behind the submitter that kicked it on its own (a first contact's dial starts at
	 * once, and its waiter runs beside it). */
	for (i = 0; i < KRCORE_NET_WORKERS; i++)
		queue_work(system_unbound_wq, &n->net[i].work);
}

/* Queues the CQ's event work as an event would (a set just came up: see cq_events.rs). */
void krcore_shim_cq_kick(struct krcore_cqnotify *n)
{
	schedule_work(&n->work);
}

static void krcore_cq_comp(struct ib_cq *cq, void *cq_context)
{
	struct krcore_cqnotify *n = cq_context;

	schedule_work(&n->work);
}

struct krcore_cqnotify *krcore_shim_cqnotify_alloc(void)
{
	struct krcore_cqnotify *n = kzalloc(sizeof(*n), GFP_KERNEL);
	int i;

	if (n) {
		INIT_WORK(&n->work, krcore_cqnotify_work);
		for (i = 0; i < KRCORE_NET_WORKERS; i++) {
			INIT_WORK(&n->net[i].work, krcore_cqnotify_net);
			n->net[i].n = n;
		}
	}
	return n;
}

void krcore_shim_cqnotify_set(struct krcore_cqnotify *n, void *ctx)
{
	WRITE_ONCE(n->ctx, ctx);
}

/* After the CQ is destroyed (no handler can queue it again). */
void krcore_shim_cqnotify_free(struct krcore_cqnotify *n)
{
	int i;

	cancel_work_sync(&n->work);
	for (i = 0; i < KRCORE_NET_WORKERS; i++)
		cancel_work_sync(&n->net[i].work);
	kfree(n);
}

/* The most entries a CQ of `dev` may have (the peer sets the device keeps must fit). */
u32 krcore_shim_max_cqe(struct ib_device *dev)
{
	return max(dev->attrs.max_cqe, 0);
}

struct ib_cq *krcore_shim_alloc_cq(struct ib_device *dev, int nr_cqe, struct krcore_cqnotify *n)
{
	struct ib_cq_init_attr attr = { .cqe = nr_cqe };

	return ib_create_cq(dev, krcore_cq_comp, NULL, n, &attr);
}

void krcore_shim_free_cq(struct ib_cq *cq)
{
	ib_destroy_cq(cq);
}

/* Asks for an event at the next completion; > 0 when some may have been missed. */
int krcore_shim_cq_arm(struct ib_cq *cq)
{
	return ib_req_notify_cq(cq, IB_CQ_NEXT_COMP | IB_CQ_REPORT_MISSED_EVENTS);
}

/*
 * A ring's wait queue: a waiter reads the generation under the device lock, after
 * finding nothing to take, and sleeps until it changes; whoever gives the ring new
 * completions bumps it and wakes the queue.
 */
struct krcore_waitq {
	wait_queue_head_t wq;
	atomic_t gen;
};

struct krcore_waitq *krcore_shim_waitq_alloc(void)
{
	struct krcore_waitq *w = kzalloc(sizeof(*w), GFP_KERNEL_ACCOUNT);

	if (w)
		init_waitqueue_head(&w->wq);
	return w;
}

void krcore_shim_waitq_free(struct krcore_waitq *w)
{
	kfree(w);
}

u32 krcore_shim_waitq_gen(struct krcore_waitq *w)
{
	return atomic_read(&w->gen);
}

void krcore_shim_waitq_wake(struct krcore_waitq *w)
{
	atomic_inc(&w->gen);
	/* Its full barrier pairs with the sleeper's in prepare_to_wait. */
	if (wq_has_sleeper(&w->wq))
		wake_up_interruptible(&w->wq);
}

/* A poll(2) or epoll of file f waits on w too: woken as the ring gains completions. */
void krcore_shim_waitq_poll_wait(struct krcore_waitq *w, struct file *f,
				 struct poll_table_struct *pt)
{
	poll_wait(f, &w->wq, pt);
}

/* Sleeps until the generation moves past seen, a signal (-ERESTARTSYS) or timeout_us. */
int krcore_shim_waitq_sleep(struct krcore_waitq *w, u32 seen, u32 timeout_us)
{
	long r = wait_event_interruptible_timeout(w->wq, (u32)atomic_read(&w->gen) != seen,
						  usecs_to_jiffies(timeout_us));

	return r < 0 ? (int)r : 0;
}

struct ib_qp *krcore_shim_create_rc_qp(struct ib_pd *pd, struct ib_cq *cq, u32 send_depth,
				       u32 recv_depth)
{
	struct krcore_keys *fr = krcore_keys_alloc(pd, send_depth);
	struct ib_qp *qp;
	struct ib_qp_init_attr attr = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_context = fr,
		.cap = {
			/* A message is three requests (engine/fastreg.c) on one credit. */
			.max_send_wr = 3 * send_depth,
			.max_recv_wr = recv_depth,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
	};

	if (IS_ERR(fr))
		return ERR_CAST(fr);
	qp = ib_create_qp(pd, &attr);
	if (IS_ERR(qp))
		krcore_keys_free(fr);
	return qp;
}

u32 krcore_shim_qp_num(struct ib_qp *qp)
{
	return qp->qp_num;
}

int krcore_shim_gid_mac(struct ib_device *dev, u32 port, u32 index, u8 *mac)
{
	const struct ib_gid_attr *attr = rdma_get_gid_attr(dev, port, index);
	int ret;

	if (IS_ERR(attr))
		return PTR_ERR(attr);
	ret = rdma_read_gid_l2_fields(attr, NULL, mac);
	rdma_put_gid_attr(attr);
	return ret;
}

/*
 * Nothing waits forever on the wire: a pooled QP retries a lost packet and a receiver
 * without a posted receive (RNR) a bounded number of times, then fails with an error
 * completion, and recovery re-arms the pair (abi/src/engine/recovery.rs). An rnr_retry
 * of 7 would mean "retry forever": one user's SEND to a peer that never posts a receive
 * would then hold the shared QP's send queue for good. min_rnr_timer 14 asks the sender
 * to wait 1.28 ms between RNR retries, so a receiver has about 8 ms to post one.
 */
#define KRCORE_MIN_RNR_TIMER 14
#define KRCORE_RNR_RETRY 6
#define KRCORE_RETRY_CNT 7
#define KRCORE_ACK_TIMEOUT 14 /* 4.096 us * 2^14 = 67 ms per transport retry */

int krcore_shim_connect_rc_qp(struct ib_qp *qp, u32 port, u32 sgid_index, const u8 *dgid,
			      const u8 *dmac, u32 dqpn)
{
	struct ib_qp_attr attr = {};
	union ib_gid gid;
	int ret;

	attr.qp_state = IB_QPS_INIT;
	attr.port_num = port;
	attr.pkey_index = 0;
	attr.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ |
			       IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
				      IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;

	memset(&attr, 0, sizeof(attr));
	memcpy(gid.raw, dgid, sizeof(gid.raw));
	attr.qp_state = IB_QPS_RTR;
	attr.path_mtu = IB_MTU_1024;
	attr.dest_qp_num = dqpn;
	attr.rq_psn = 0;
	attr.max_dest_rd_atomic = 16;
	attr.min_rnr_timer = KRCORE_MIN_RNR_TIMER;
	attr.ah_attr.type = rdma_ah_find_type(qp->device, port);
	rdma_ah_set_port_num(&attr.ah_attr, port);
	rdma_ah_set_grh(&attr.ah_attr, &gid, 0, sgid_index, 1, 0);
	memcpy(attr.ah_attr.roce.dmac, dmac, ETH_ALEN);
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
				      IB_QP_DEST_QPN | IB_QP_RQ_PSN |
				      IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IB_QPS_RTS;
	attr.timeout = KRCORE_ACK_TIMEOUT;
	attr.retry_cnt = KRCORE_RETRY_CNT;
	attr.rnr_retry = KRCORE_RNR_RETRY;
	attr.sq_psn = 0;
	attr.max_rd_atomic = 16;
	ret = ib_modify_qp(qp, &attr, IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |
				      IB_QP_RNR_RETRY | IB_QP_SQ_PSN |
				      IB_QP_MAX_QP_RD_ATOMIC);
	/* A message's chain flushed between its registration and its invalidation may
	 * have left a key open: made again before anything else runs. */
	if (!ret && qp->qp_context)
		krcore_keys_renew(qp->qp_context);
	return ret;
}

int krcore_shim_qp_to_error(struct ib_qp *qp)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };

	return ib_modify_qp(qp, &attr, IB_QP_STATE);
}

int krcore_shim_qp_reset(struct ib_qp *qp)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_RESET };

	return ib_modify_qp(qp, &attr, IB_QP_STATE);
}

int krcore_shim_post_marker(struct ib_qp *qp, u64 wr_id)
{
	struct ib_send_wr wr = {
		.wr_id = wr_id,
		.opcode = IB_WR_SEND,
		.send_flags = IB_SEND_SIGNALED,
	};
	const struct ib_send_wr *bad = NULL;

	return ib_post_send(qp, &wr, &bad);
}

void krcore_shim_destroy_qp(struct ib_qp *qp)
{
	struct krcore_keys *fr = qp->qp_context;

	ib_destroy_qp(qp);
	krcore_keys_free(fr);
}

/* A message on this node takes three work requests (engine/fastreg.c). */
#define KRCORE_POST_WRS (3 * KRCORE_POST_MAX)

struct krcore_scratch {
	union {
		struct ib_atomic_wr atomic;
		struct ib_rdma_wr rdma;
		struct ib_reg_wr reg;
		struct ib_send_wr plain;
	} wr[KRCORE_POST_WRS];
	struct ib_sge sge[KRCORE_POST_WRS];
	/* Which of the caller's requests each work request is part of, and whether it
	 * starts a message's chain (which takes one of the QP's keys). */
	u8 of[KRCORE_POST_WRS];
	bool chain[KRCORE_POST_WRS];
	struct ib_wc wc[16];
};

struct krcore_scratch *krcore_shim_scratch_alloc(void)
{
	return kzalloc(sizeof(struct krcore_scratch), GFP_KERNEL);
}

void krcore_shim_scratch_free(struct krcore_scratch *s)
{
	kfree(s);
}

/* Adds a message's chain on this node for w (KRCORE_WR_DELIVER) at s->wr[*j]: the QP's
 * key made over the receive's bytes, the WRITE through it, then the key invalidated
 * (fenced: after the WRITE completed), which completes the request. */
static int krcore_chain_deliver(struct krcore_scratch *s, struct ib_qp *qp,
				const struct krcore_send_wr *w, u32 nth, u32 *j)
{
	u32 k = *j, rkey;
	int ret;

	ret = krcore_keys_deliver(qp->qp_context, nth, (struct krcore_mr *)(uintptr_t)w->mr,
				  w->remote_addr, w->length, &s->wr[k].reg, &rkey);
	if (ret)
		return ret;
	s->sge[k + 1] = (struct ib_sge){ .addr = w->local_addr, .length = w->length,
					 .lkey = w->lkey };
	s->wr[k + 1].rdma = (struct ib_rdma_wr){ .remote_addr = w->remote_addr, .rkey = rkey };
	s->wr[k + 1].rdma.wr = (struct ib_send_wr){
		.opcode = IB_WR_RDMA_WRITE, .wr_id = KRCORE_FR_WR_ID,
		.sg_list = &s->sge[k + 1], .num_sge = 1,
		.send_flags = w->fence ? IB_SEND_FENCE : 0,
	};
	s->wr[k + 2].plain = (struct ib_send_wr){
		.opcode = IB_WR_LOCAL_INV, .wr_id = w->wr_id,
		.send_flags = IB_SEND_FENCE | (w->signaled ? IB_SEND_SIGNALED : 0),
		.ex.invalidate_rkey = rkey,
	};
	s->wr[k].reg.wr.next = &s->wr[k + 1].rdma.wr;
	s->wr[k + 1].rdma.wr.next = &s->wr[k + 2].plain;
	*j = k + 3;
	return 0;
}

int krcore_shim_post_send(struct krcore_scratch *s, struct ib_qp *qp,
			  const struct krcore_send_wr *wrs, u32 n, u32 *posted)
{
	struct ib_sge *sge = s->sge;
	struct ib_send_wr *head = NULL, **link = &head;
	const struct ib_send_wr *bad = NULL;
	u32 i, j = 0, chains = 0;
	int ret;

	if (n > KRCORE_POST_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		const struct krcore_send_wr *w = &wrs[i];
		struct ib_send_wr *wr;
		u32 first = j;

		if (w->kind == KRCORE_WR_DELIVER) {
			ret = krcore_chain_deliver(s, qp, w, chains++, &j);
			if (ret) {
				*posted = 0;
				return ret;
			}
			s->chain[first] = true;
			s->chain[first + 1] = s->chain[first + 2] = false;
			for (; first < j; first++)
				s->of[first] = i;
			*link = &s->wr[j - 3].reg.wr;
			link = &s->wr[j - 1].plain.next;
			*link = NULL;
			continue;
		}
		sge[j] = (struct ib_sge){ .addr = w->local_addr, .length = w->length,
					  .lkey = w->lkey };
		switch (w->kind) {
		case KRCORE_WR_CAS:
		case KRCORE_WR_FAA:
			s->wr[j].atomic = (struct ib_atomic_wr){
				.remote_addr = w->remote_addr, .rkey = w->rkey,
				.compare_add = w->compare_add, .swap = w->swap };
			s->wr[j].atomic.wr.opcode = w->kind == KRCORE_WR_CAS ?
				IB_WR_ATOMIC_CMP_AND_SWP : IB_WR_ATOMIC_FETCH_AND_ADD;
			wr = &s->wr[j].atomic.wr;
			break;
		case KRCORE_WR_READ:
		case KRCORE_WR_WRITE:
			s->wr[j].rdma = (struct ib_rdma_wr){ .remote_addr = w->remote_addr,
							     .rkey = w->rkey };
			if (w->kind == KRCORE_WR_READ)
				s->wr[j].rdma.wr.opcode = IB_WR_RDMA_READ;
			else
				s->wr[j].rdma.wr.opcode = w->has_imm ?
					IB_WR_RDMA_WRITE_WITH_IMM : IB_WR_RDMA_WRITE;
			wr = &s->wr[j].rdma.wr;
			break;
		case KRCORE_WR_SEND:
			s->wr[j].rdma = (struct ib_rdma_wr){};
			s->wr[j].rdma.wr.opcode = w->has_imm ? IB_WR_SEND_WITH_IMM : IB_WR_SEND;
			wr = &s->wr[j].rdma.wr;
			break;
		case KRCORE_WR_NOTICE:
			/* Inline: the driver copies the bytes at post time. */
			sge[j] = (struct ib_sge){ .addr = (uintptr_t)w->notice,
						  .length = sizeof(w->notice) };
			s->wr[j].rdma = (struct ib_rdma_wr){};
			/* A Data notice closes its receive's key at the peer's NIC. */
			s->wr[j].rdma.wr.opcode = w->inv ? IB_WR_SEND_WITH_INV : IB_WR_SEND;
			wr = &s->wr[j].rdma.wr;
			break;
		default:
			return -EINVAL;
		}
		wr->wr_id = w->wr_id;
		wr->sg_list = &sge[j];
		wr->num_sge = 1;
		wr->send_flags = (w->signaled ? IB_SEND_SIGNALED : 0) |
				 (w->fence ? IB_SEND_FENCE : 0) |
				 (w->solicited ? IB_SEND_SOLICITED : 0) |
				 (w->kind == KRCORE_WR_NOTICE ? IB_SEND_INLINE : 0);
		if (w->has_imm)
			wr->ex.imm_data = cpu_to_be32(w->imm);
		else if (w->kind == KRCORE_WR_NOTICE && w->inv)
			wr->ex.invalidate_rkey = w->inv;
		wr->next = NULL;
		s->chain[j] = false;
		s->of[j++] = i;
		*link = wr;
		link = &wr->next;
	}
	ret = ib_post_send(qp, head, &bad);
	*posted = n;
	if (ret) {
		/* The requests wholly before `bad` went out; a chain begun took its key. */
		const struct ib_send_wr *w;
		u32 k = 0;

		chains = 0;
		for (w = head; w && w != bad; w = w->next)
			chains += s->chain[k++];
		*posted = k < j ? s->of[k] : n;
	}
	if (chains)
		krcore_keys_posted(qp->qp_context, chains);
	return ret;
}

int krcore_shim_poll_cq(struct krcore_scratch *s, struct ib_cq *cq, struct krcore_wc *out,
			int n)
{
	struct ib_wc *wc = s->wc;
	int i, got;

	got = ib_poll_cq(cq, min(n, 16), wc);
	for (i = 0; i < got; i++) {
		out[i] = (struct krcore_wc){
			.wr_id = wc[i].wr_id,
			.status = wc[i].status,
			.byte_len = wc[i].byte_len,
			.has_imm = !!(wc[i].wc_flags & IB_WC_WITH_IMM),
			.imm = (wc[i].wc_flags & IB_WC_WITH_IMM) ?
				       be32_to_cpu(wc[i].ex.imm_data) : 0,
			.qp_num = wc[i].qp->qp_num,
			.recv = !!(wc[i].opcode & IB_WC_RECV),
			.has_inv = !!(wc[i].wc_flags & IB_WC_WITH_INVALIDATE),
			.inv_rkey = (wc[i].wc_flags & IB_WC_WITH_INVALIDATE) ?
					    wc[i].ex.invalidate_rkey : 0,
		};
	}
	return got;
}

struct krcore_poller {
	struct task_struct *task;
	wait_queue_head_t wq;
	atomic_t wake;
	void *ctx;
};

static int krcore_poller_fn(void *data)
{
	struct krcore_poller *p = data;

	while (!kthread_should_stop()) {
		switch (krcore_rs_sqpoll_step(p->ctx)) {
		case 1:
			wait_event_interruptible(p->wq, atomic_xchg(&p->wake, 0) ||
							kthread_should_stop());
			break;
		case 2:
			yield();
			break;
		default:
			cond_resched();
		}
	}
	return 0;
}

struct krcore_poller *krcore_shim_poller_start(void *ctx)
{
	struct krcore_poller *p = kzalloc(sizeof(*p), GFP_KERNEL);

	if (!p)
		return ERR_PTR(-ENOMEM);
	init_waitqueue_head(&p->wq);
	p->ctx = ctx;
	p->task = kthread_run(krcore_poller_fn, p, "krcore-sqpoll");
	if (IS_ERR(p->task)) {
		long err = PTR_ERR(p->task);

		kfree(p);
		return ERR_PTR(err);
	}
	return p;
}

void krcore_shim_poller_wake(struct krcore_poller *p)
{
	atomic_set(&p->wake, 1);
	wake_up_interruptible(&p->wq);
}

void krcore_shim_poller_stop(struct krcore_poller *p)
{
	kthread_stop(p->task);
	kfree(p);
}

struct eventfd_ctx *krcore_shim_eventfd_get(int fd)
{
	return eventfd_ctx_fdget(fd);
}

void krcore_shim_eventfd_signal(struct eventfd_ctx *ctx)
{
	eventfd_signal(ctx);
}

void krcore_shim_eventfd_put(struct eventfd_ctx *ctx)
{
	eventfd_ctx_put(ctx);
}

static bool prewarm = true;
module_param(prewarm, bool, 0444);
MODULE_PARM_DESC(prewarm, "Build each device's QP pool as soon as it has a RoCE v2 GID (default: yes)");

bool krcore_shim_prewarm_enabled(void)
{
	return prewarm;
}

static bool bench_direct;
module_param(bench_direct, bool, 0444);
MODULE_PARM_DESC(bench_direct, "Serve IOC_DIRECT, the kernel-direct benchmark baseline (default: no)");

bool krcore_shim_bench_direct_enabled(void)
{
	return bench_direct;
}

/* How often a device's expiry runs: what waits on a deadline (a SEND for a receive, a
 * CONNECT for a listen, a closed ring's revocations) with nobody waiting in krcore ends
 * at most this late. Its own work, whatever meta_check_ms is: nothing waits forever.
 * Once a second, as the MetaServer tick ran by default: an idle device costs no more
 * wakeups than it did. */
#define KRCORE_EXPIRE_MS 1000

struct krcore_devwatch {
	struct ib_event_handler eh;
	struct work_struct work;
	/* The MetaServer check, every meta_check_ms (not armed with 0). */
	struct delayed_work tick;
	/* Deadlines, every KRCORE_EXPIRE_MS. */
	struct delayed_work expire;
	void *ctx;
};

static void krcore_devwatch_tick(struct work_struct *work)
{
	struct krcore_devwatch *w = container_of(to_delayed_work(work), struct krcore_devwatch, tick);

	krcore_rs_dev_tick(w->ctx);
	schedule_delayed_work(&w->tick, msecs_to_jiffies(krcore_shim_meta_check_ms()));
}

static void krcore_devwatch_expire(struct work_struct *work)
{
	struct krcore_devwatch *w = container_of(to_delayed_work(work), struct krcore_devwatch, expire);

	krcore_rs_dev_expire(w->ctx);
	schedule_delayed_work(&w->expire, msecs_to_jiffies(KRCORE_EXPIRE_MS));
}

static void krcore_devwatch_work(struct work_struct *work)
{
	struct krcore_devwatch *w = container_of(work, struct krcore_devwatch, work);

	krcore_rs_dev_prewarm(w->ctx);
}

/* Runs in atomic context: defer to the work item. */
static void krcore_devwatch_event(struct ib_event_handler *eh, struct ib_event *ev)
{
	struct krcore_devwatch *w = container_of(eh, struct krcore_devwatch, eh);

	if (ev->event == IB_EVENT_GID_CHANGE || ev->event == IB_EVENT_PORT_ACTIVE)
		schedule_work(&w->work);
}

struct krcore_devwatch *krcore_shim_devwatch_start(struct ib_device *dev, void *ctx)
{
	struct krcore_devwatch *w = kzalloc(sizeof(*w), GFP_KERNEL);

	if (!w)
		return ERR_PTR(-ENOMEM);
	w->ctx = ctx;
	INIT_WORK(&w->work, krcore_devwatch_work);
	INIT_DELAYED_WORK(&w->tick, krcore_devwatch_tick);
	INIT_DELAYED_WORK(&w->expire, krcore_devwatch_expire);
	INIT_IB_EVENT_HANDLER(&w->eh, dev, krcore_devwatch_event);
	ib_register_event_handler(&w->eh);
	schedule_work(&w->work);
	if (krcore_shim_meta_check_ms())
		schedule_delayed_work(&w->tick, msecs_to_jiffies(krcore_shim_meta_check_ms()));
	schedule_delayed_work(&w->expire, msecs_to_jiffies(KRCORE_EXPIRE_MS));
	return w;
}

void krcore_shim_devwatch_stop(struct krcore_devwatch *w)
{
	ib_unregister_event_handler(&w->eh);
	/* Stops each work's re-arming too. */
	cancel_delayed_work_sync(&w->tick);
	cancel_delayed_work_sync(&w->expire);
	cancel_work_sync(&w->work);
	kfree(w);
}

void krcore_shim_cond_resched(void)
{
	cond_resched();
}

int krcore_shim_register(void)
{
	/* The cluster key first: a device's prewarm may dial as soon as it is served. */
	int ret = krcore_shim_cm_init();

	if (ret)
		return ret;
	ret = ib_register_client(&krcore_client);
	if (ret)
		goto cm;
	krcore_misc.mode = dev_mode & 0777;
	ret = misc_register(&krcore_misc);
	if (ret)
		goto client;
	ret = krcore_shim_cm_listen();
	if (ret)
		goto misc;
	return 0;
misc:
	misc_deregister(&krcore_misc);
client:
	ib_unregister_client(&krcore_client);
cm:
	krcore_shim_cm_exit();
	return ret;
}

void krcore_shim_unregister(void)
{
	krcore_shim_cm_stop();
	misc_deregister(&krcore_misc);
	ib_unregister_client(&krcore_client);
	/* Every device's dials and connections are gone: the key and the workqueue go. */
	krcore_shim_cm_exit();
}

const char *krcore_shim_dev_name(struct ib_device *dev)
{
	return dev_name(&dev->dev);
}

u32 krcore_shim_dev_index(struct ib_device *dev)
{
	return dev->index;
}

u32 krcore_shim_first_port(struct ib_device *dev)
{
	return rdma_start_port(dev);
}

u32 krcore_shim_last_port(struct ib_device *dev)
{
	return rdma_end_port(dev);
}

int krcore_shim_query_port(struct ib_device *dev, u32 port, struct krcore_port_attr *out)
{
	struct ib_port_attr attr;
	int ret = ib_query_port(dev, port, &attr);

	if (ret)
		return ret;
	out->state = attr.state;
	out->active_mtu = attr.active_mtu;
	out->gid_tbl_len = attr.gid_tbl_len;
	out->link_layer = rdma_port_get_link_layer(dev, port);
	return 0;
}

int krcore_shim_query_gid(struct ib_device *dev, u32 port, u32 index, u8 *gid,
			  u32 *gid_type)
{
	const struct ib_gid_attr *attr = rdma_get_gid_attr(dev, port, index);

	if (IS_ERR(attr))
		return PTR_ERR(attr);
	memcpy(gid, attr->gid.raw, sizeof(attr->gid.raw));
	*gid_type = attr->gid_type;
	rdma_put_gid_attr(attr);
	return 0;
}
