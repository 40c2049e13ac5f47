// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel-to-kernel RC connections with rdma_cm: every module listens on
 * cm_port, and a node connects to a peer's address in the kernel. Mechanism only, as
 * the rest of the shim: which peers, when, and what a connection carries are Rust's.
 *
 * A connection (struct krcore_cm_conn) owns its cm_id and the RC QP created on it with
 * the device context's PD and CQ. Every live connection, a dial in progress included,
 * is on one list, so a device
 * going away (its context's PD and CQ are freed right after) and the module's exit
 * tear theirs down first; whoever takes a connection off the list (under
 * krcore_cm_lock) tears it down, once. A connection made for Rust (an active one) is
 * also referenced by Rust's handle, so the struct outlives a teardown by the device's
 * removal until Rust lets go (krcore_shim_cm_close / _put).
 *
 * Locks: krcore_cm_lock (the list, and the per-node counts of accepted connections)
 * is taken briefly, and only Rust's table of those counts (krcore_rs_cm_admit and
 * _release, a leaf mutex of the registry's) is taken under it. A
 * request handler pins its device context (krcore_rs_cm_resources, which takes the
 * registry's mutex, with no cm.c lock held) until its connection is on the list or
 * torn down; a device's removal marks the device closing, tears its connections down,
 * then removes the context, which waits for the pins. A connection's own mutex is held
 * by its handler and by its teardown's mark; rdma_destroy_id waits for a running
 * handler, so it is never called under that mutex.
 */
#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/in.h>
#include <linux/inet.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <linux/moduleparam.h>
#include <linux/ktime.h>
#include <linux/random.h>
#include <rdma/ib_cm.h>
#include <rdma/rdma_cm.h>

#include "shim.h"

static ushort cm_port;
module_param(cm_port, ushort, 0444);
MODULE_PARM_DESC(cm_port, "TCP-space port krcore listens on for peer kernels (default 0: none)");

static char *cm_peer;
module_param(cm_peer, charp, 0444);
MODULE_PARM_DESC(cm_peer, "IPv4 address of a peer kernel each device connects to once its pool is ready (default: none)");

/* Fault injection for tests: a dial waits this long before connecting, so that two nodes
 * starting a set to each other about together surely overlap (both at once). */
static uint cm_dial_delay_ms;
KRCORE_TEST_PARAM(cm_dial_delay_ms, uint, 0444, "hold each connection set's dial this long, ms (default 0)");

static bool test_notice_echo;
KRCORE_TEST_PARAM(test_notice_echo, bool, 0444,
		  "take every peer notice three times: whole, whole again, cut short (a peer's duplicates and short SENDs; default off)");

static uint test_hold_accept_ms;
KRCORE_TEST_PARAM(test_hold_accept_ms, uint, 0444,
		  "hold a dial's check of the listener's accept this long, ms (an impostor's window; default 0)");

static uint test_hold_teardown_ms;
KRCORE_TEST_PARAM(test_hold_teardown_ms, uint, 0444,
		  "at a device's removal, hold its connections broken but whole this long before their teardown, ms (default 0)");

bool krcore_shim_test_notice_echo(void)
{
	return test_notice_echo;
}

u32 krcore_shim_cm_dial_delay_ms(void)
{
	return cm_dial_delay_ms;
}

/*
 * A connection request's private data says who asks, for what, and proves that it holds
 * the cluster key (abi's cluster::auth): first a hello with the dialer's nonce (ASK),
 * which the listener refuses with a challenge, then the same with the challenge and
 * the dialer's tag (PROVE); the accept carries the listener's tag. The wire forms are
 * abi's cluster::hello, read and written by cm_wire.rs: this file sees only fields.
 */

/* Each step of an active connect (address, route) is bounded by this. */
#define KRCORE_CM_STEP_MS 2000
#define KRCORE_CM_SEND_DEPTH 64
/*
 * A set's QP carries its requests (up to SEND_DEPTH, each up to two work requests: a
 * message to another node is a WRITE and a notice) and up to NOTICE_ROOM notices of
 * its own (abi's qp.rs; an advert's key is registered on the device's local QP,
 * engine/fastreg.c), and keeps NOTICE_RECVS kernel receives posted for the peer
 * kernel's notices (abi's far.rs, whose constants these are).
 */
#define KRCORE_NOTICE_LEN 32
#define KRCORE_NOTICE_ROOM 16
#define KRCORE_NOTICE_RECVS 64
#define KRCORE_SET_SEND_DEPTH (2 * KRCORE_CM_SEND_DEPTH + KRCORE_NOTICE_ROOM)
/* abi's notice_recv_wr_id(i): the backend's wr_id class (u64::MAX - n). */
#define KRCORE_NOTICE_RECV_WR_ID(i) (U64_MAX - (0x50000000ULL + (i)))

struct krcore_cm_conn {
	struct list_head node;
	/* On the list (krcore_cm_lock): whoever clears it tears the connection down. */
	bool on_list;
	/* The list's reference and Rust's handle's (active connections). */
	refcount_t refs;
	/* Held by its handler throughout, and by teardown to mark it abandoned. */
	struct mutex lock;
	struct rdma_cm_id *id;
	/* Its QP (once qp_created): rdma_cm's for an accepted connection, its own for a
	 * dial (own_qp), moved to RTR by hand only once the listener proved the key. */
	struct ib_qp *qp;
	bool own_qp;
	/* A dial's accept proved the key: its own QP may be granted its rights. */
	bool established_ok;
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct completion done;
	/* Its teardown finished: its QP is gone from the CQ it was created on. */
	struct completion torn;
	int status;
	/* The waiter gave up: the handler must not touch the id any more. */
	bool abandoned;
	bool qp_created;
	/* Its drain began (the QP in the error state, the markers posted behind all). */
	bool drain_begun;
	/* Connected (ESTABLISHED seen, or accepted): a teardown says goodbye first. */
	bool established;
	bool broken;
	/* Accepted from a peer (counted in krcore_cm_accepted while on the list, and
	 * charged to its source node, `from`, in Rust's krcore_rs_cm_admit). */
	bool accepted;
	__be32 from;
	/* An accepted connection Rust adopted into a connection set: Rust closes it, the
	 * reap leaves it (krcore_cm_lock). */
	bool owned;
	/* Tears an accepted connection down once its peer left (krcore_cm_wq). */
	struct work_struct reap;
	/* Its peer's proved farewell came: the QP goes to the error state (krcore_cm_wq). */
	struct work_struct depart;
	/* Closes a handle Rust let go of under its locks (krcore_shim_cm_close_later). */
	struct work_struct close;
	/* Remote access its QP grants (set at RTR, again at ESTABLISHED). */
	int access;
	/* KRCORE_CM_PEER or KRCORE_CM_META. */
	u8 kind;
	/* A set's QP: its notice receive buffers (NOTICE_RECVS of NOTICE_LEN), mapped. */
	u8 *notices;
	u64 notices_dma;
	/* An active connection: its request's private data, what its tags bind, and the
	 * accept's private data. */
	struct krcore_cm_hello hello;
	struct krcore_cm_bind bind;
	/* What the accept offered (a MetaServer's region; `ready` once it came). */
	struct krcore_meta_offer offer;
	/* An accepted MetaServer connection: its requests served (meta.c), on its own CQ,
	 * freed after its QP. */
	struct krcore_meta_serving *serving;
};

/* A device being removed: requests arriving on it meanwhile are refused. */
struct krcore_cm_closing {
	struct list_head node;
	struct ib_device *dev;
};

static LIST_HEAD(krcore_cm_conns);
static LIST_HEAD(krcore_cm_closing_devs);
static DEFINE_MUTEX(krcore_cm_lock);
static struct rdma_cm_id *krcore_cm_listener;

/* Whether `dev` is being removed (krcore_cm_lock held). */
static bool krcore_cm_closing(struct ib_device *dev)
{
	struct krcore_cm_closing *cl;

	list_for_each_entry(cl, &krcore_cm_closing_devs, node)
		if (cl->dev == dev)
			return true;
	return false;
}

static int krcore_cm_post_notice_recv(struct krcore_cm_conn *c, u32 i)
{
	struct ib_sge sge = {
		.addr = c->notices_dma + i * KRCORE_NOTICE_LEN,
		.length = KRCORE_NOTICE_LEN,
		.lkey = c->pd->local_dma_lkey,
	};
	struct ib_recv_wr wr = {
		.wr_id = KRCORE_NOTICE_RECV_WR_ID(i),
		.sg_list = &sge,
		.num_sge = 1,
	};

	return ib_post_recv(c->qp, &wr, NULL);
}

/*
 * A set's QP, connected and about to be Rust's: its notice receives posted (from here
 * on its QP holds work requests whose completions land in the device's CQ, so it is
 * destroyed only after krcore_cm_drain's markers came back). Fails (-ENOMEM) only
 * before the first receive is posted; a post that fails after (the QP broke meanwhile)
 * marks the connection broken instead, so that its owner drains it like any other.
 */
static int krcore_cm_notices_up(struct krcore_cm_conn *c)
{
	size_t bytes = KRCORE_NOTICE_RECVS * KRCORE_NOTICE_LEN;
	u32 i;
	int ret;

	c->notices = kzalloc(bytes, GFP_KERNEL);
	if (!c->notices)
		return -ENOMEM;
	c->notices_dma = ib_dma_map_single(c->dev, c->notices, bytes, DMA_FROM_DEVICE);
	if (ib_dma_mapping_error(c->dev, c->notices_dma)) {
		kfree(c->notices);
		c->notices = NULL;
		return -ENOMEM;
	}
	for (i = 0; i < KRCORE_NOTICE_RECVS; i++) {
		ret = krcore_cm_post_notice_recv(c, i);
		if (ret) {
			WRITE_ONCE(c->broken, true);
			break;
		}
	}
	return 0;
}

/* After its QP is destroyed (nothing can land any more). */
static void krcore_cm_notices_down(struct krcore_cm_conn *c)
{
	if (!c->notices)
		return;
	ib_dma_unmap_single(c->dev, c->notices_dma, KRCORE_NOTICE_RECVS * KRCORE_NOTICE_LEN,
			    DMA_FROM_DEVICE);
	kfree(c->notices);
	c->notices = NULL;
}

int krcore_cm_take_notice(struct krcore_cm_conn *c, u32 i, u8 *out)
{
	int ret = -ENOTCONN;

	if (i >= KRCORE_NOTICE_RECVS)
		return -EINVAL;
	/* Under the connection's mutex, as a post: a teardown marks it abandoned first. */
	mutex_lock(&c->lock);
	if (!c->abandoned && c->notices) {
		u64 at = c->notices_dma + i * KRCORE_NOTICE_LEN;

		ib_dma_sync_single_for_cpu(c->dev, at, KRCORE_NOTICE_LEN, DMA_FROM_DEVICE);
		memcpy(out, c->notices + i * KRCORE_NOTICE_LEN, KRCORE_NOTICE_LEN);
		/* Cleared: a short notice next in this slot finds no earlier one's bytes. */
		memset(c->notices + i * KRCORE_NOTICE_LEN, 0, KRCORE_NOTICE_LEN);
		ib_dma_sync_single_for_device(c->dev, at, KRCORE_NOTICE_LEN, DMA_FROM_DEVICE);
		/* Posted again at once: the peer's notices find room (a failure here means
		 * the QP is going; its set breaks). */
		if (!READ_ONCE(c->broken))
			krcore_cm_post_notice_recv(c, i);
		ret = 0;
	}
	mutex_unlock(&c->lock);
	return ret;
}

/* Moves a dial's own QP to `state` with the attributes rdma_cm gives its id's QPs, but
 * answering only what the connection grants (c->access), not the CM's rights. */
static int krcore_cm_move(struct krcore_cm_conn *c, enum ib_qp_state state)
{
	struct ib_qp_attr attr = { .qp_state = state };
	int mask, ret;

	ret = rdma_init_qp_attr(c->id, &attr, &mask);
	if (ret)
		return ret;
	/* Before the proof (the first INIT) it may answer nothing whatever moves it. */
	if (mask & IB_QP_ACCESS_FLAGS)
		attr.qp_access_flags = c->established_ok ? c->access : 0;
	return ib_modify_qp(c->qp, &attr, mask);
}

/*
 * Creates `c`'s QP: for an accepted connection (`own` false) on its id, which rdma_cm
 * moves to RTR and RTS at the accept (the dialer proved the key before); for a dial its
 * own, not the id's, left in INIT (answering nothing) until the listener's accept proved
 * the key too (krcore_cm_ready). With the id's QP, rdma_cm would make it ready to receive,
 * answering remote READs and WRITEs with the CM's rights, before the accept was checked.
 */
static int krcore_cm_create_qp(struct krcore_cm_conn *c, bool own)
{
	bool set = c->kind == KRCORE_CM_PEER;
	struct ib_qp_init_attr attr = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.cap = {
			/* +1 each: the drain's markers (krcore_cm_drain). */
			.max_send_wr = set ? KRCORE_SET_SEND_DEPTH + 1 : KRCORE_CM_SEND_DEPTH,
			.max_recv_wr = set ? KRCORE_NOTICE_RECVS + 1 : 1,
			.max_send_sge = 1,
			.max_recv_sge = 1,
			.max_inline_data = set ? KRCORE_NOTICE_LEN : 0,
		},
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
	};
	struct ib_qp *qp;
	int ret;

	if (!own) {
		ret = rdma_create_qp(c->id, c->pd, &attr);
		c->qp_created = !ret;
		c->qp = ret ? NULL : c->id->qp;
		return ret;
	}
	qp = ib_create_qp(c->pd, &attr);
	if (IS_ERR(qp))
		return PTR_ERR(qp);
	c->qp = qp;
	c->own_qp = true;
	c->qp_created = true;
	return krcore_cm_move(c, IB_QPS_INIT);
}

/* A dial's connection, its accept's proof checked: its QP to RTR and RTS as rdma_cm
 * would (INIT again with the connection's attributes first), answering exactly what the
 * connection grants, then the RTU, rdma_cm's part. */
static int krcore_cm_ready(struct krcore_cm_conn *c)
{
	int ret;

	c->established_ok = true;
	ret = krcore_cm_move(c, IB_QPS_INIT);

	if (!ret)
		ret = krcore_cm_move(c, IB_QPS_RTR);
	if (!ret)
		ret = krcore_cm_move(c, IB_QPS_RTS);
	if (!ret)
		ret = rdma_accept(c->id, NULL);
	return ret;
}

/*
 * The CM grants an RC responder remote write (and read) whatever was asked: an accepted
 * connection's QP (rdma_cm's) is set to what it answers as soon as it reaches RTR (after
 * the accept) and again at ESTABLISHED; a dial's own QP is moved with exactly that
 * (krcore_cm_move). A connection of a set (both ends:
 * both nodes use the one set, see peer.rs) answers READs, WRITEs and atomics, which is
 * how one node's requests reach another's exports. An accepted MetaServer connection
 * answers READs alone (the region is read one-sided; its entries are written by the
 * MetaServer's kernel, for members that ask with a SEND: meta.c); an active one answers
 * none (nothing is asked of a node by the MetaServer). Both ends are cluster kernels:
 * they carried the key.
 */
#define KRCORE_CM_REMOTE (IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC)
#define KRCORE_CM_META_REMOTE IB_ACCESS_REMOTE_READ

static int krcore_cm_set_access(struct ib_qp *qp, int access)
{
	struct ib_qp_attr attr = { .qp_access_flags = access };

	return ib_modify_qp(qp, &attr, IB_QP_ACCESS_FLAGS);
}

/* Peer kernels' connections accepted at once, at most: a host flooding requests gets
 * refused past it, not a QP each. */
#define KRCORE_CM_MAX_ACCEPTED 64
static unsigned int krcore_cm_accepted;
/* Runs the reaping of accepted connections whose peer left: a handler cannot destroy its
 * own id; the module's exit drains it. */
static struct workqueue_struct *krcore_cm_wq;

static void krcore_cm_param(struct rdma_conn_param *p, u8 kind)
{
	memset(p, 0, sizeof(*p));
	p->responder_resources = 16;
	p->initiator_depth = 16;
	/* As the pooled QPs: finite retries, so nothing waits forever on the wire. */
	p->retry_count = 7;
	/* A set's notices wait for the peer kernel to post its receive again (it does at
	 * once, but may lag): retried without end on the wire, bounded by the requests'
	 * deadline, which fails a QP that makes no progress. */
	p->rnr_retry_count = kind == KRCORE_CM_PEER ? 7 : 6;
}

static void krcore_cm_put(struct krcore_cm_conn *c)
{
	if (refcount_dec_and_test(&c->refs))
		kfree(c);
}

/* Marks `c` abandoned under its mutex: from here nothing posts on its QP (a request
 * being served on a MetaServer connection included), so the QP may be destroyed. */
static void krcore_cm_abandon(struct krcore_cm_conn *c)
{
	mutex_lock(&c->lock);
	c->abandoned = true;
	mutex_unlock(&c->lock);
}

/* An accepted connection the listener gives up before listing it: its QP goes, nothing
 * posting on it meanwhile. */
static void krcore_cm_unaccept(struct krcore_cm_conn *c)
{
	krcore_cm_abandon(c);
	if (c->qp_created)
		rdma_destroy_qp(c->id);
}

/* Destroys `c`'s QP and id, once, by whoever took it off the list (or never put it
 * there). A handler that runs after the mark sees it and touches nothing; one running
 * before has finished when the mark is taken; rdma_destroy_id waits for one that is
 * about to look. */
static void krcore_cm_teardown(struct krcore_cm_conn *c)
{
	bool qp;

	mutex_lock(&c->lock);
	c->abandoned = true;
	qp = c->qp_created;
	mutex_unlock(&c->lock);
	WRITE_ONCE(c->broken, true);
	/* A dial waiting on it (its device going) gives up now, not at its timeout. */
	complete(&c->done);
	if (qp && c->own_qp)
		ib_destroy_qp(c->qp);
	else if (qp)
		rdma_destroy_qp(c->id);
	krcore_cm_notices_down(c);
	krcore_meta_serving_free(c->serving);
	c->serving = NULL;
	rdma_destroy_id(c->id);
	c->id = NULL;
	complete_all(&c->torn);
}

/* Puts `c` on the list unless its device is closing: then tears it down. */
static int krcore_cm_publish(struct krcore_cm_conn *c)
{
	mutex_lock(&krcore_cm_lock);
	if (krcore_cm_closing(c->dev)) {
		mutex_unlock(&krcore_cm_lock);
		krcore_cm_teardown(c);
		return -ENODEV;
	}
	c->on_list = true;
	list_add(&c->node, &krcore_cm_conns);
	mutex_unlock(&krcore_cm_lock);
	return 0;
}

/* An accepted connection leaves the list (krcore_cm_lock held): its counts go. */
static void krcore_cm_uncount(struct krcore_cm_conn *c)
{
	lockdep_assert_held(&krcore_cm_lock);
	if (!c->accepted)
		return;
	krcore_cm_accepted--;
	krcore_rs_cm_release(c->from);
}

/* Takes `c` off the list if it is still there: whether the caller now tears it down. */
static bool krcore_cm_unlist(struct krcore_cm_conn *c)
{
	bool mine;

	mutex_lock(&krcore_cm_lock);
	mine = c->on_list;
	if (mine) {
		c->on_list = false;
		krcore_cm_uncount(c);
		list_del(&c->node);
	}
	mutex_unlock(&krcore_cm_lock);
	return mine;
}

static void krcore_cm_reap(struct work_struct *w)
{
	struct krcore_cm_conn *c = container_of(w, struct krcore_cm_conn, reap);
	bool owned;

	mutex_lock(&krcore_cm_lock);
	owned = c->owned;
	mutex_unlock(&krcore_cm_lock);
	/* An adopted connection is Rust's to close (it sees it broken). */
	if (!owned && krcore_cm_unlist(c)) {
		pr_info("krcore: a peer kernel left: its connection closed\n");
		krcore_cm_teardown(c);
		krcore_cm_put(c);
	}
	krcore_cm_put(c);
}

/*
 * The peer left: `c` is broken before its QP goes to the error state, so the router,
 * finding it broken when the flushed notice receives complete, fails the set's QP for
 * that reason (fabric.rs's fail_set_qp); a set with nothing in flight learns of it
 * now, not at its next request's deadline. An accepted connection has no other owner to
 * close it: it is reaped (queued once; the work holds a reference).
 */
static void krcore_cm_depart(struct krcore_cm_conn *c, bool error_qp)
{
	WRITE_ONCE(c->broken, true);
	if (error_qp && c->kind == KRCORE_CM_PEER && c->qp_created) {
		struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };

		ib_modify_qp(c->qp, &attr, IB_QP_STATE);
	}
	if (c->accepted) {
		refcount_inc(&c->refs);
		if (!queue_work(krcore_cm_wq, &c->reap))
			refcount_dec(&c->refs);
	}
}

/* A proved farewell's departure, with the connection's lock: a teardown under way
 * (abandoned) destroys the QP itself. */
static void krcore_cm_depart_work(struct work_struct *w)
{
	struct krcore_cm_conn *c = container_of(w, struct krcore_cm_conn, depart);

	mutex_lock(&c->lock);
	if (!c->abandoned) {
		pr_info("krcore: a peer kernel said farewell (proved): its connection closes\n");
		krcore_cm_depart(c, true);
	}
	mutex_unlock(&c->lock);
	krcore_cm_put(c);
}

/* Whether `c` carries a connection set: a dial, or an accepted connection Rust
 * adopted into one. */
static bool krcore_cm_carries_set(struct krcore_cm_conn *c)
{
	bool owned;

	mutex_lock(&krcore_cm_lock);
	owned = c->owned;
	mutex_unlock(&krcore_cm_lock);
	return c->kind == KRCORE_CM_PEER && (!c->accepted || owned);
}

/* The role of a farewell from this end of `c`, or from the other (abi's Role). */
static enum krcore_cm_role krcore_cm_bye_role(const struct krcore_cm_conn *c, bool ours)
{
	return c->accepted == ours ? KRCORE_CM_BYE_RESPONDER : KRCORE_CM_BYE_INITIATOR;
}

int krcore_shim_cm_farewell_tag(struct krcore_cm_conn *c, u8 *tag)
{
	if (c->kind != KRCORE_CM_PEER || !READ_ONCE(c->established))
		return -ENOTCONN;
	return krcore_cm_tag(krcore_cm_bye_role(c, true), &c->bind, tag);
}

bool krcore_shim_cm_farewell(struct krcore_cm_conn *c, const u8 *tag)
{
	if (c->kind != KRCORE_CM_PEER || !READ_ONCE(c->established) ||
	    !krcore_cm_tag_ok(krcore_cm_bye_role(c, false), &c->bind, tag))
		return false;
	/* Broken now (the flushes that follow find it so); the QP on the workqueue. */
	WRITE_ONCE(c->broken, true);
	refcount_inc(&c->refs);
	if (!queue_work(krcore_cm_wq, &c->depart))
		refcount_dec(&c->refs);
	return true;
}

static void krcore_cm_close_work(struct work_struct *w)
{
	krcore_shim_cm_close(container_of(w, struct krcore_cm_conn, close));
}

/*
 * Rust closes a set's connections under the membership lock, which cm.c's listener
 * takes inside rdma_cm's handler mutex (to answer a request): destroying an id there
 * would take a handler mutex of the same class under the membership lock, an inverted
 * order lockdep rightly reports. So the close runs on krcore_cm_wq, with no krcore
 * lock held; the caller has already stopped posting on the QP.
 */
void krcore_cm_drop_peer(struct krcore_cm_conn *c)
{
	WRITE_ONCE(c->broken, true);
	/* As a peer that left: reaped on krcore_cm_wq (the work holds a reference). */
	refcount_inc(&c->refs);
	if (!krcore_cm_wq || !queue_work(krcore_cm_wq, &c->reap))
		refcount_dec(&c->refs);
}

void krcore_shim_cm_close_later(struct krcore_cm_conn *c)
{
	/* The handle's reference passes to the work; one close per handle. */
	if (!krcore_cm_wq || !queue_work(krcore_cm_wq, &c->close))
		krcore_shim_cm_close(c);
}

/* The connection is up if its last step (`ret`) went well: its waiter is told. */
static int krcore_cm_up(struct krcore_cm_conn *c, int ret)
{
	if (ret)
		return ret;
	WRITE_ONCE(c->established, true);
	c->status = 0;
	complete(&c->done);
	return 0;
}

static int krcore_cm_step(struct krcore_cm_conn *c, struct rdma_cm_id *id,
			  struct rdma_cm_event *ev)
{
	struct rdma_conn_param p;
	u8 wire[KRCORE_CM_HELLO_LEN];
	u8 tag[KRCORE_CM_TAG_LEN];
	u8 nonce[KRCORE_CM_NONCE_LEN];
	int ret;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		return rdma_resolve_route(id, KRCORE_CM_STEP_MS);
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		/* The route must leave through the device whose PD and CQ we were given. */
		if (id->device != c->dev)
			return -EXDEV;
		/* The accept's proof is checked at CONNECT_RESPONSE, which only the IB CM
		 * (InfiniBand, RoCE) gives: an iWARP provider readies the QP itself. */
		if (!rdma_cap_ib_cm(id->device, id->port_num))
			return -EPROTONOSUPPORT;
		ret = krcore_cm_create_qp(c, true);
		if (ret)
			return ret;
		/* Bound now (rdma_resolve_addr): this attempt's port, which the tag names. */
		c->bind.initiator_port =
			((struct sockaddr_in *)&id->route.addr.src_addr)->sin_port;
		/* Every request of a dial carries its proof (FRESH, then PROVE). */
		c->bind.initiator_qpn = c->qp->qp_num;
		ret = krcore_cm_tag(KRCORE_CM_INITIATOR, &c->bind, c->hello.tag);
		if (ret)
			return ret;
		krcore_cm_param(&p, c->kind);
		p.qp_num = c->qp->qp_num;
		/* Copied into the request by rdma_cm. */
		krcore_rs_cm_hello_write(&c->hello, wire);
		p.private_data = wire;
		p.private_data_len = sizeof(wire);
		return rdma_connect_locked(id, &p);
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		/* A dial's accept (its QP its own, in INIT, answering nothing): the listener
		 * proves it holds the key too, for this connection, before the QP is made
		 * ready. */
		/* (It holds ib_cm's one work queue: every CM event of the node waits.) */
		if (test_hold_accept_ms)
			msleep(test_hold_accept_ms);
		c->bind.responder_qpn = ev->param.conn.qp_num;
		if (krcore_rs_cm_accept_read(ev->param.conn.private_data,
					     ev->param.conn.private_data_len, &c->offer, tag) ||
		    !krcore_cm_tag_ok(KRCORE_CM_RESPONDER, &c->bind, tag)) {
			c->offer.ready = 0;
			return -EPERM;
		}
		return krcore_cm_up(c, krcore_cm_ready(c));
	case RDMA_CM_EVENT_ESTABLISHED:
		/* An accepted connection's (the RTU came); a dial's is never up this way. */
		if (!c->accepted)
			return -EPROTO;
		return krcore_cm_up(c, krcore_cm_set_access(c->qp, c->access));
	case RDMA_CM_EVENT_DISCONNECTED:
		/*
		 * A disconnect request proves nothing: any host on the path can send one
		 * (its comm IDs and QP number crossed the wire in the clear). A set's
		 * connection ends on its peer's proved farewell (krcore_shim_cm_farewell,
		 * which comes first when the peer's kernel leaves), or when its QP fails;
		 * this leaves it as it was. One no set carries (an accepted connection not
		 * adopted, a MetaServer link) closes as before: losing it costs a retry.
		 */
		if (krcore_cm_carries_set(c)) {
			/* Broken already: its farewell came first, as a leaving peer's does. */
			if (!READ_ONCE(c->broken))
				pr_info_ratelimited("krcore: an unproved disconnect request for a set's connection: the connection is kept\n");
			return 0;
		}
		krcore_cm_depart(c, true);
		return 0;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		/* Our own device, or our own disconnect's end. */
		krcore_cm_depart(c, false);
		return 0;
	case RDMA_CM_EVENT_REJECTED:
		switch (krcore_rs_cm_refusal_read(ev->param.conn.private_data,
						  ev->param.conn.private_data_len, nonce)) {
		case 1:
			/* A challenge answers an ASK, or a FRESH proof not admitted. */
			if (c->hello.step == KRCORE_CM_PROVE)
				return -ECONNREFUSED;
			memcpy(c->bind.nonce_r, nonce, sizeof(nonce));
			return -EINPROGRESS;
		case 2:
			/* A yield changes what the dialer does (it waits for the peer's set):
			 * only a proved one. Unproved, it is any refusal. */
			if (c->hello.step == KRCORE_CM_ASK ||
			    !krcore_cm_tag_ok(KRCORE_CM_YIELDER, &c->bind, nonce))
				return -ECONNREFUSED;
			return -EALREADY;
		default:
			return -ECONNREFUSED;
		}
	default:
		/* ADDR_ERROR, ROUTE_ERROR, CONNECT_ERROR, UNREACHABLE, ... */
		return ev->status < 0 ? ev->status : -ECONNREFUSED;
	}
}

/* Events of a connection's id (both sides). Returns 0 always: the id is ours to
 * destroy; a failed step ends the waiting connect with its errno. */
static int krcore_cm_conn_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	struct krcore_cm_conn *c = id->context;
	int ret;

	mutex_lock(&c->lock);
	if (!c->abandoned) {
		ret = krcore_cm_step(c, id, ev);
		if (ret) {
			c->status = ret;
			complete(&c->done);
		}
	}
	mutex_unlock(&c->lock);
	return 0;
}

static struct krcore_cm_conn *krcore_cm_conn_alloc(struct ib_device *dev, struct ib_pd *pd,
						   struct ib_cq *cq)
{
	struct krcore_cm_conn *c = kzalloc(sizeof(*c), GFP_KERNEL);

	if (!c)
		return NULL;
	c->dev = dev;
	c->pd = pd;
	c->cq = cq;
	c->status = -ETIMEDOUT;
	refcount_set(&c->refs, 1);
	mutex_init(&c->lock);
	INIT_WORK(&c->reap, krcore_cm_reap);
	INIT_WORK(&c->depart, krcore_cm_depart_work);
	INIT_WORK(&c->close, krcore_cm_close_work);
	init_completion(&c->done);
	init_completion(&c->torn);
	return c;
}

u16 krcore_shim_cm_port(void)
{
	return cm_port;
}

int krcore_cm_param_gid(const char *param, u8 *gid)
{
	if (!param || !*param)
		return -ENOENT;
	memset(gid, 0, 16);
	gid[10] = 0xff;
	gid[11] = 0xff;
	return in4_pton(param, -1, gid + 12, -1, NULL) ? 0 : -EINVAL;
}

int krcore_shim_cm_peer_gid(u8 *gid)
{
	return krcore_cm_param_gid(cm_peer, gid);
}

/*
 * One connection request of a dial, `hello` (FRESH or PROVE: a proof over what `bind`
 * holds), waiting until `deadline` (jiffies): 0 with the connection, listed, its QP's
 * notice receives posted (a set's), and the dialer's reference; -EINPROGRESS when the
 * listener answered with a challenge (now in bind->nonce_r); another negative errno.
 */
static int krcore_cm_attempt(struct ib_device *dev, struct ib_pd *pd, struct ib_cq *cq,
			     struct sockaddr_in *src, struct sockaddr_in *dst,
			     unsigned long deadline, const struct krcore_cm_hello *hello,
			     struct krcore_cm_bind *bind, struct krcore_cm_conn **out,
			     struct ib_qp **qp, u32 *qpn)
{
	struct krcore_cm_conn *c;
	long left;
	int ret;

	c = krcore_cm_conn_alloc(dev, pd, cq);
	if (!c)
		return -ENOMEM;
	c->hello = *hello;
	c->bind = *bind;
	c->kind = hello->kind;
	c->access = hello->kind == KRCORE_CM_PEER ? KRCORE_CM_REMOTE : 0;
	c->id = rdma_create_id(&init_net, krcore_cm_conn_handler, c, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(c->id)) {
		ret = PTR_ERR(c->id);
		kfree(c);
		return ret;
	}
	/*
	 * Listed from the start, before its QP is created on the device's PD and CQ: a
	 * device's removal tears a dial down as any other connection (waking its waiter),
	 * so nothing of the device outlives it. The list holds the first reference, the
	 * dialer (then Rust's handle) the second.
	 */
	refcount_inc(&c->refs);
	ret = krcore_cm_publish(c);
	if (ret) {
		/* Torn down: the list's reference was never taken. */
		krcore_cm_put(c);
		goto put;
	}
	/* Under the mutex: a removal may have torn it down since it was listed (the id is
	 * gone then). rdma_resolve_addr never runs the handler in this context. */
	mutex_lock(&c->lock);
	ret = c->abandoned ? -ENODEV :
			     rdma_resolve_addr(c->id, (struct sockaddr *)src,
					       (struct sockaddr *)dst, KRCORE_CM_STEP_MS);
	mutex_unlock(&c->lock);
	left = (long)(deadline - jiffies);
	if (!ret && (left <= 0 || !wait_for_completion_timeout(&c->done, left)))
		ret = -ETIMEDOUT;
	mutex_lock(&c->lock);
	if (c->abandoned) {
		/* Torn down by the device's removal, which let the list's reference go. Its
		 * QP may still be going: the caller frees the CQ it was made on once we
		 * return (meta.c's own), so wait for the end of the teardown. */
		mutex_unlock(&c->lock);
		wait_for_completion(&c->torn);
		ret = -ENODEV;
		goto put;
	}
	if (!ret)
		ret = c->status;
	if (ret == -EINPROGRESS)
		memcpy(bind->nonce_r, c->bind.nonce_r, sizeof(bind->nonce_r));
	if (!ret) {
		*qp = c->qp;
		*qpn = c->qp->qp_num;
		/* A set's notice receives are posted once the set installed it
		 * (krcore_cm_notices_start): a notice the listener sends meanwhile waits on
		 * the wire (RNR), never landing in a CQ before its QP is known there. */
	}
	mutex_unlock(&c->lock);
	if (!ret) {
		*out = c;
		return 0;
	}
	if (krcore_cm_unlist(c)) {
		krcore_cm_teardown(c);
		krcore_cm_put(c);
	} else {
		/* A removal took it off the list meanwhile: as above, its teardown first. */
		wait_for_completion(&c->torn);
	}
put:
	krcore_cm_put(c);
	return ret;
}

int krcore_shim_cm_connect(struct ib_device *dev, struct ib_pd *pd, struct ib_cq *cq,
			   const u8 *src_gid, const u8 *dst_gid, u32 timeout_ms, u8 kind, u8 index,
			   struct krcore_cm_conn **out, struct ib_qp **qp, u32 *qpn)
{
	struct sockaddr_in src = { .sin_family = AF_INET }, dst = { .sin_family = AF_INET };
	unsigned long deadline = jiffies + msecs_to_jiffies(timeout_ms);
	struct krcore_cm_hello hello = {
		.kind = kind,
		.index = index,
		.step = KRCORE_CM_FRESH,
	};
	struct krcore_cm_bind bind = { .kind = kind, .index = index, .step = KRCORE_CM_FRESH };
	int ret;

	if (!cm_port)
		return -ENOTCONN;
	if (!krcore_cm_auth_ready())
		return -ENOKEY;
	/* IPv4-mapped GIDs: the address is the last four bytes. */
	memcpy(&src.sin_addr.s_addr, src_gid + 12, 4);
	memcpy(&dst.sin_addr.s_addr, dst_gid + 12, 4);
	dst.sin_port = htons(cm_port);
	bind.initiator = src.sin_addr.s_addr;
	bind.responder = dst.sin_addr.s_addr;
	bind.responder_port = dst.sin_port;
	get_random_bytes(hello.nonce_i, sizeof(hello.nonce_i));
	memcpy(bind.nonce_i, hello.nonce_i, sizeof(bind.nonce_i));
	/* The proof at once, over our time (abi's cluster::auth): one request when the
	 * listener admits it. */
	krcore_rs_cm_fresh_nonce(krcore_shim_wall_ms(), hello.nonce_r);
	memcpy(bind.nonce_r, hello.nonce_r, sizeof(bind.nonce_r));
	ret = krcore_cm_attempt(dev, pd, cq, &src, &dst, deadline, &hello, &bind, out, qp, qpn);
	if (ret != -EINPROGRESS)
		return ret;
	/* Not admitted (our clocks apart, the listener newer than our time): its refusal
	 * carried a challenge, which a PROVE answers. */
	hello.step = KRCORE_CM_PROVE;
	bind.step = KRCORE_CM_PROVE;
	memcpy(hello.nonce_r, bind.nonce_r, sizeof(hello.nonce_r));
	return krcore_cm_attempt(dev, pd, cq, &src, &dst, deadline, &hello, &bind, out, qp, qpn);
}

bool krcore_shim_cm_broken(struct krcore_cm_conn *c)
{
	return READ_ONCE(c->broken);
}

/* Returns once `c`'s QP is destroyed, whoever tears it down: the caller frees the CQ it
 * was made on next (meta.c's own). A removal or a reap that took it off the list first
 * may still be destroying it (the MetaServer's link, closed by the device's tick while
 * the removal's teardown ran, freed its CQ under the live QP: ib_free_cq warned). */
void krcore_shim_cm_close(struct krcore_cm_conn *c)
{
	if (krcore_cm_unlist(c)) {
		rdma_disconnect(c->id);
		krcore_cm_teardown(c);
		krcore_cm_put(c);
	} else {
		wait_for_completion(&c->torn);
	}
	krcore_cm_put(c);
}

void krcore_shim_cm_put(struct krcore_cm_conn *c)
{
	krcore_cm_put(c);
}

bool krcore_cm_own(struct krcore_cm_conn *c)
{
	bool ok;

	mutex_lock(&krcore_cm_lock);
	ok = c->on_list && !READ_ONCE(c->broken);
	if (ok) {
		c->owned = true;
		refcount_inc(&c->refs);
	}
	mutex_unlock(&krcore_cm_lock);
	/* Its notice receives, now that Rust will drain it before it goes (an accepted
	 * connection no set took never has any: its reap destroys an idle QP). */
	if (ok && krcore_cm_notices_up(c))
		WRITE_ONCE(c->broken, true);
	return ok;
}

void krcore_cm_notices_start(struct krcore_cm_conn *c)
{
	/* Under the mutex, as every post: a teardown marks it abandoned first. */
	mutex_lock(&c->lock);
	if (!c->abandoned && !c->notices && krcore_cm_notices_up(c))
		WRITE_ONCE(c->broken, true);
	mutex_unlock(&c->lock);
}

int krcore_cm_drain(struct krcore_cm_conn *c, u64 send_id, u64 recv_id)
{
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };
	struct ib_rdma_wr swr = {
		.wr = { .wr_id = send_id, .opcode = IB_WR_RDMA_WRITE,
			.send_flags = IB_SEND_SIGNALED },
	};
	struct ib_recv_wr rwr = { .wr_id = recv_id };
	int ret = -ENOTCONN;

	mutex_lock(&c->lock);
	if (!c->abandoned && c->qp_created) {
		/* In the error state every work request is flushed, the markers last. */
		ret = ib_modify_qp(c->qp, &attr, IB_QP_STATE);
		if (!ret)
			ret = ib_post_send(c->qp, &swr.wr, NULL);
		c->drain_begun = !ret;
		if (!ret && c->notices)
			ret = ib_post_recv(c->qp, &rwr, NULL);
		else if (!ret)
			ret = 1;
	}
	mutex_unlock(&c->lock);
	return ret;
}

int krcore_cm_reply(struct krcore_cm_conn *c, struct krcore_meta_offer *o)
{
	if (!c->offer.ready)
		return -EPROTO;
	*o = c->offer;
	return 0;
}

/* Posts `send` or `recv` on c's QP. Under the connection's mutex: a teardown marks it
 * abandoned under the same mutex before destroying the QP, so nothing posts on a
 * destroyed QP. */
static int krcore_cm_post_one(struct krcore_cm_conn *c, const struct ib_send_wr *send,
			      const struct ib_recv_wr *recv)
{
	int ret = -ENOTCONN;

	mutex_lock(&c->lock);
	if (!c->abandoned && c->qp_created && !READ_ONCE(c->broken))
		ret = send ? ib_post_send(c->qp, send, NULL) : ib_post_recv(c->qp, recv, NULL);
	mutex_unlock(&c->lock);
	return ret;
}

int krcore_cm_post(struct krcore_cm_conn *c, const struct ib_send_wr *wr)
{
	return krcore_cm_post_one(c, wr, NULL);
}

int krcore_cm_post_recv(struct krcore_cm_conn *c, const struct ib_recv_wr *wr)
{
	return krcore_cm_post_one(c, NULL, wr);
}

/* Whether a request on the listener comes from this node's own address. */
static bool krcore_cm_from_self(struct rdma_cm_id *id)
{
	const struct sockaddr_in *src = (const void *)&id->route.addr.src_addr;
	const struct sockaddr_in *dst = (const void *)&id->route.addr.dst_addr;

	return src->sin_family == AF_INET && dst->sin_family == AF_INET &&
	       src->sin_addr.s_addr == dst->sin_addr.s_addr;
}

/* A peer kernel's connection request, on the listener: the new connection's QP is
 * created with its device context's PD and CQ, pinned meanwhile, and accepted.
 * Returning nonzero has the CM destroy the new id. */
static int krcore_cm_listen_handler(struct rdma_cm_id *id, struct rdma_cm_event *ev)
{
	const struct sockaddr_in *from = (const void *)&id->route.addr.dst_addr;
	const struct sockaddr_in *to = (const void *)&id->route.addr.src_addr;
	struct krcore_cm_hello hello;
	struct krcore_meta_offer offer = {};
	u8 yield[KRCORE_CM_YIELD_LEN];
	u8 peer_gid[16] = { [10] = 0xff, [11] = 0xff };
	u8 nonce_r[KRCORE_CM_NONCE_LEN];
	u8 challenge[KRCORE_CM_CHALLENGE_LEN];
	u8 tag[KRCORE_CM_TAG_LEN];
	u8 wire[KRCORE_CM_ACCEPT_LEN];
	struct krcore_meta_serving *serving = NULL;
	struct krcore_cm_bind bind;
	struct krcore_cm_conn *c;
	struct rdma_conn_param p;
	struct ib_pd *pd;
	struct ib_cq *cq;
	bool admitted;
	void *pin;
	int ret;

	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		return 0;
	/* Bytes from anyone who reaches the port: read in Rust (cm_wire.rs). */
	if (krcore_rs_cm_hello_read(ev->param.conn.private_data, ev->param.conn.private_data_len,
				    &hello) ||
	    from->sin_family != AF_INET || to->sin_family != AF_INET)
		return -EPERM;
	if (READ_ONCE(krcore_cm_accepted) >= KRCORE_CM_MAX_ACCEPTED)
		return -EBUSY;
	pin = krcore_rs_cm_resources(id->device, &pd, &cq, &offer);
	if (!pin)
		return -ENODEV;
	if (hello.step == KRCORE_CM_ASK)
		goto challenge;
	/* A proof: its tag checked here, then judged by the gate (a wrong tag first, so
	 * nothing is charged to the address a request names). */
	bind = (struct krcore_cm_bind){
		.kind = hello.kind,
		.index = hello.index,
		.step = hello.step,
		.initiator_port = from->sin_port,
		.responder_port = to->sin_port,
		.initiator = from->sin_addr.s_addr,
		.responder = to->sin_addr.s_addr,
		.initiator_qpn = ev->param.conn.qp_num,
	};
	memcpy(bind.nonce_i, hello.nonce_i, sizeof(bind.nonce_i));
	memcpy(bind.nonce_r, hello.nonce_r, sizeof(bind.nonce_r));
	ret = krcore_rs_cm_judge(pin, hello.step == KRCORE_CM_FRESH,
				 krcore_cm_tag_ok(KRCORE_CM_INITIATOR, &bind, hello.tag), from->sin_addr.s_addr,
				 to->sin_addr.s_addr, hello.nonce_i, hello.nonce_r);
	/* A member's FRESH proof, but out of time or seen before: a challenge instead. */
	if (ret == -ESTALE)
		goto challenge;
	if (ret) {
		pr_info_ratelimited("krcore: %s: refused a connection request from %pI4 that proved no cluster key\n",
				    dev_name(&id->device->dev), &from->sin_addr.s_addr);
		goto unpin;
	}
	/* The MetaServer answers only once its region is registered, but for its own
	 * node's connection, over which it registers it. */
	ret = -EAGAIN;
	if (hello.kind == KRCORE_CM_META && !offer.ready && !krcore_cm_from_self(id))
		goto unpin;
	if (hello.kind == KRCORE_CM_META && !offer.rkey)
		goto unpin;
	if (hello.kind == KRCORE_CM_PEER) {
		/* One set per pair of nodes: Rust answers by the both-at-once rule. */
		memcpy(peer_gid + 12, &from->sin_addr.s_addr, 4);
		ret = krcore_rs_cm_peer_request(pin, peer_gid, hello.index);
		if (ret == -EALREADY) {
			/* Proved: only a member makes its dialer yield. */
			if (!krcore_cm_tag(KRCORE_CM_YIELDER, &bind, tag)) {
				krcore_rs_cm_yield_write(tag, yield);
				rdma_reject(id, yield, sizeof(yield), IB_CM_REJ_CONSUMER_DEFINED);
			}
		}
		if (ret)
			goto unpin;
	}
	/* Its source node's part of the listener (abi's cluster::accepted), now that its
	 * proof says a member sent it: given back on every way out below, or when it
	 * leaves the list. */
	mutex_lock(&krcore_cm_lock);
	admitted = krcore_rs_cm_admit(from->sin_addr.s_addr);
	mutex_unlock(&krcore_cm_lock);
	if (!admitted) {
		pr_info_ratelimited("krcore: %s: refused a connection from %pI4: that node holds its part of the listener's connections\n",
				    dev_name(&id->device->dev), &from->sin_addr.s_addr);
		ret = -EBUSY;
		goto unpin;
	}
	ret = -ENOMEM;
	if (hello.kind == KRCORE_CM_META) {
		/* Its own CQ: its requests are served as they come (meta.c). */
		serving = krcore_meta_serving_alloc(id->device, pd, from->sin_addr.s_addr);
		if (!serving)
			goto unadmit;
		cq = krcore_meta_serving_cq(serving);
	}
	c = krcore_cm_conn_alloc(id->device, pd, cq);
	if (!c) {
		krcore_meta_serving_free(serving);
		goto unadmit;
	}
	c->id = id;
	c->serving = serving;
	c->access = hello.kind == KRCORE_CM_META ? KRCORE_CM_META_REMOTE : KRCORE_CM_REMOTE;
	c->kind = hello.kind;
	ret = krcore_cm_create_qp(c, false);
	if (!ret && serving)
		ret = krcore_meta_serving_start(serving, c);
	if (ret) {
		krcore_cm_unaccept(c);
		goto free;
	}
	krcore_cm_param(&p, c->kind);
	/* This listener's proof, for this connection, and a MetaServer's region. */
	bind.responder_qpn = id->qp->qp_num;
	/* What its farewells, either way, are tags over. */
	c->bind = bind;
	ret = krcore_cm_tag(KRCORE_CM_RESPONDER, &bind, tag);
	if (ret) {
		krcore_cm_unaccept(c);
		goto free;
	}
	krcore_rs_cm_accept_write(hello.kind == KRCORE_CM_META ? &offer : NULL, tag, wire);
	p.private_data = wire;
	p.private_data_len = sizeof(wire);
	ret = rdma_accept(id, &p);
	if (!ret)
		ret = krcore_cm_set_access(id->qp, c->access);
	if (ret) {
		krcore_cm_unaccept(c);
		goto free;
	}
	id->context = c;
	id->event_handler = krcore_cm_conn_handler;
	pr_info("krcore: %s: accepted a peer kernel's %s connection, QP %u\n",
		dev_name(&id->device->dev), hello.kind == KRCORE_CM_META ? "MetaServer" : "peer",
		id->qp->qp_num);
	mutex_lock(&krcore_cm_lock);
	if (krcore_cm_closing(c->dev)) {
		/* Its device is going: the CM destroys the id; its QP goes now. */
		mutex_unlock(&krcore_cm_lock);
		krcore_cm_unaccept(c);
		ret = -ENODEV;
		goto free;
	}
	c->on_list = true;
	c->accepted = true;
	c->from = from->sin_addr.s_addr;
	c->established = true;
	krcore_cm_accepted++;
	list_add(&c->node, &krcore_cm_conns);
	mutex_unlock(&krcore_cm_lock);
	/* Into the set: Rust takes its own reference (krcore_cm_own); a connection no set
	 * wants any more (its adoption given up meanwhile) is reaped, as one whose peer
	 * left, so no QP with notice receives on the device's CQ is left unaccounted. */
	if (hello.kind == KRCORE_CM_PEER &&
	    !krcore_rs_cm_adopt(pin, c, id->qp, id->qp->qp_num, peer_gid, hello.index)) {
		WRITE_ONCE(c->broken, true);
		refcount_inc(&c->refs);
		if (!queue_work(krcore_cm_wq, &c->reap))
			refcount_dec(&c->refs);
	}
	krcore_rs_cm_unpin(pin);
	return 0;
challenge:
	/* Refused with a challenge: the gate's stateless cookie for `from`. */
	krcore_rs_cm_challenge(pin, from->sin_addr.s_addr, nonce_r);
	krcore_rs_cm_challenge_write(nonce_r, challenge);
	rdma_reject(id, challenge, sizeof(challenge), IB_CM_REJ_CONSUMER_DEFINED);
	krcore_rs_cm_unpin(pin);
	return -ECONNREFUSED;
free:
	/* Its QP is destroyed (or never was). A reap a request being served queued holds
	 * a reference (krcore_cm_drop_peer): it finds the connection off the list. */
	krcore_cm_notices_down(c);
	krcore_meta_serving_free(c->serving);
	c->serving = NULL;
	krcore_cm_put(c);
unadmit:
	mutex_lock(&krcore_cm_lock);
	krcore_rs_cm_release(from->sin_addr.s_addr);
	mutex_unlock(&krcore_cm_lock);
unpin:
	krcore_rs_cm_unpin(pin);
	return ret;
}

int krcore_shim_cm_init(void)
{
	int ret;

	if (!cm_port)
		return 0;
	/* No key, no cluster: nothing listens, and nothing dials. */
	ret = krcore_cm_auth_init();
	if (ret == -ENOKEY) {
		pr_warn("krcore: cm_port=%u but no cluster_key: this node joins no cluster (make a key with `openssl rand -hex 32`)\n",
			cm_port);
		return 0;
	}
	if (ret)
		return ret;
	/* Unbound: its work sleeps on rdma_cm and belongs to no CPU (7.x wants the choice
	 * named). */
	krcore_cm_wq = alloc_workqueue("krcore_cm", WQ_UNBOUND, 0);
	if (!krcore_cm_wq)
		goto auth;
	if (!krcore_meta_serving_init())
		return 0;
	destroy_workqueue(krcore_cm_wq);
	krcore_cm_wq = NULL;
auth:
	krcore_cm_auth_exit();
	return -ENOMEM;
}

int krcore_shim_cm_listen(void)
{
	struct sockaddr_in any = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	struct rdma_cm_id *id;
	int ret;

	if (!cm_port || !krcore_cm_auth_ready())
		return 0;
	any.sin_port = htons(cm_port);
	id = rdma_create_id(&init_net, krcore_cm_listen_handler, NULL, RDMA_PS_TCP, IB_QPT_RC);
	if (IS_ERR(id))
		return PTR_ERR(id);
	ret = rdma_bind_addr(id, (struct sockaddr *)&any);
	if (!ret)
		ret = rdma_listen(id, 64);
	if (ret) {
		rdma_destroy_id(id);
		return ret;
	}
	krcore_cm_listener = id;
	return 0;
}

/* Takes the connections on `dev` off the list and tears them down. Only after the
 * device's CQ is quiesced (krcore_rs_dev_quiesce): their QPs' flushed completions stay
 * in it, naming freed QPs. */
static void krcore_cm_drop(struct ib_device *dev)
{
	struct krcore_cm_conn *c, *n;
	LIST_HEAD(gone);

	mutex_lock(&krcore_cm_lock);
	list_for_each_entry_safe(c, n, &krcore_cm_conns, node) {
		if (c->dev == dev) {
			c->on_list = false;
			krcore_cm_uncount(c);
			list_move(&c->node, &gone);
		}
	}
	mutex_unlock(&krcore_cm_lock);
	if (test_hold_teardown_ms && !list_empty(&gone)) {
		/* Each seen broken by its users now, and still whole, a while. */
		list_for_each_entry(c, &gone, node)
			WRITE_ONCE(c->broken, true);
		msleep(test_hold_teardown_ms);
	}
	list_for_each_entry_safe(c, n, &gone, node) {
		list_del(&c->node);
		/* Not a dial still connecting: rdma_cm may be replacing its CM id. */
		if (READ_ONCE(c->established))
			rdma_disconnect(c->id);
		krcore_cm_teardown(c);
		krcore_cm_put(c);
	}
}

void krcore_shim_cm_remove_device(struct ib_device *dev, void (*remove)(struct ib_device *))
{
	struct krcore_cm_closing cl = { .dev = dev };

	mutex_lock(&krcore_cm_lock);
	list_add(&cl.node, &krcore_cm_closing_devs);
	mutex_unlock(&krcore_cm_lock);
	/* Nothing polls the device's CQ from here: destroying the connections' QPs leaves
	 * their flushed completions there, naming freed QPs. */
	krcore_rs_dev_quiesce(dev);
	krcore_cm_drop(dev);
	/* Reaps already taken off the list (a peer that left, or a member dropped) finish
	 * their teardowns before the device's PD and work go. */
	if (krcore_cm_wq)
		flush_workqueue(krcore_cm_wq);
	remove(dev);
	mutex_lock(&krcore_cm_lock);
	list_del(&cl.node);
	mutex_unlock(&krcore_cm_lock);
}

void krcore_shim_cm_stop(void)
{
	if (krcore_cm_listener) {
		/* Waits for a running request handler; none comes after. */
		rdma_destroy_id(krcore_cm_listener);
		krcore_cm_listener = NULL;
	}
	/* The connections go with their devices, as at a removal (quiesced first), when
	 * the client is unregistered. */
}

void krcore_shim_cm_exit(void)
{
	/* Reaps and closes still queued find their connections torn down and let go. */
	if (krcore_cm_wq) {
		destroy_workqueue(krcore_cm_wq);
		krcore_cm_wq = NULL;
	}
	/* After the reaps: a teardown waits for its request being served. */
	krcore_meta_serving_exit();
	krcore_cm_auth_exit();
	/* Every connection went with its device. */
	WARN_ON(!list_empty(&krcore_cm_conns));
}
