// SPDX-License-Identifier: GPL-2.0
/*
 * The MetaServer's verbs: the region a designated node serves, registered with a
 * fast-registration request that grants remote READ alone; a node's connection to it,
 * on which its kernel READs entries and sends requests (register, publish, revoke) one
 * at a time; and, on the MetaServer's node, the serving of those requests: its kernel
 * is the region's only writer. Mechanism only: which entries, in what order, what they
 * mean and who may write them is abi's meta module (run by meta/mod.rs).
 *
 * A connection (struct krcore_meta_conn) is a cm.c connection of kind META with its own
 * CQ, polled here, and a kernel bounce buffer the verbs read into and write from. It is
 * used by one caller at a time (meta/mod.rs holds its mutex around every call). A verb
 * that fails or is not answered within KRCORE_META_WAIT_MS marks the connection broken:
 * its QP goes to the error state (or is torn down by cm.c) before the buffer is freed,
 * so a late completion never lands in freed memory.
 */
#include <linux/moduleparam.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/sizes.h>
#include <linux/delay.h>
#include <linux/vmalloc.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

#include "shim.h"

static char *meta_server;
module_param(meta_server, charp, 0444);
MODULE_PARM_DESC(meta_server, "IPv4 address of the MetaServer node; the node with that address serves it (default: none)");

static uint test_meta_inv;
KRCORE_TEST_PARAM(test_meta_inv, uint, 0600,
		  "the next request to the MetaServer is a SEND that invalidates this rkey, as a member kernel closing the region's key would (0: none)");

static uint meta_check_ms = 1000;
module_param(meta_check_ms, uint, 0444);
MODULE_PARM_DESC(meta_check_ms, "How often a node with published names checks that the MetaServer still holds its record, ms (0: never; default 1000)");

uint krcore_shim_meta_check_ms(void)
{
	return meta_check_ms;
}

/* How long one verb may take before the connection is given up. */
#define KRCORE_META_WAIT_MS 2000

/* The region is made of physically contiguous 64 KiB chunks, registered with a 64 KiB
 * MR page size: an MR takes a bounded number of pages (512 on rxe), and 4 KiB pages
 * would cap the region at 2 MiB. */
#define KRCORE_META_CHUNK SZ_64K

struct krcore_meta_region {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct page **chunks;
	u32 n;
	struct sg_table sgt;
	int nents;
	struct ib_mr *mr;
	/* The chunks mapped contiguously for the CPU (the kernel writes entries here). */
	u8 *va;
};

struct krcore_meta_conn {
	struct krcore_cm_conn *conn;
	struct ib_device *dev;
	struct ib_cq *cq;
	u32 lkey;
	u8 *buf;
	u64 dma;
	struct krcore_meta_offer offer;
	bool broken;
};

int krcore_shim_meta_server_gid(u8 *gid)
{
	return krcore_cm_param_gid(meta_server, gid);
}

static void krcore_meta_chunks_free(struct krcore_meta_region *r)
{
	u32 i;

	for (i = 0; i < r->n; i++)
		if (r->chunks[i])
			__free_pages(r->chunks[i], get_order(KRCORE_META_CHUNK));
	kfree(r->chunks);
}

/* Maps the region's chunks contiguously for the CPU (its only writer is this kernel). */
static int krcore_meta_region_map(struct krcore_meta_region *r)
{
	u32 per = KRCORE_META_CHUNK >> PAGE_SHIFT;
	struct page **pages = kvcalloc(r->n * per, sizeof(*pages), GFP_KERNEL);
	u32 i, j;

	if (!pages)
		return -ENOMEM;
	/* Each chunk is one higher-order allocation: its pages follow its first. */
	for (i = 0; i < r->n; i++)
		for (j = 0; j < per; j++)
			pages[i * per + j] = r->chunks[i] + j;
	r->va = vmap(pages, r->n * per, VM_MAP, PAGE_KERNEL);
	kvfree(pages);
	return r->va ? 0 : -ENOMEM;
}

struct krcore_meta_region *krcore_shim_meta_region_alloc(struct ib_pd *pd, u32 bytes)
{
	struct krcore_meta_region *r = kzalloc(sizeof(*r), GFP_KERNEL);
	struct scatterlist *sg;
	int i, n;

	if (!r)
		return NULL;
	r->dev = pd->device;
	r->pd = pd;
	r->n = DIV_ROUND_UP(bytes, KRCORE_META_CHUNK);
	r->chunks = kcalloc(r->n, sizeof(*r->chunks), GFP_KERNEL);
	if (!r->chunks)
		goto free;
	for (i = 0; i < r->n; i++) {
		r->chunks[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO, get_order(KRCORE_META_CHUNK));
		if (!r->chunks[i])
			goto chunks;
	}
	if (krcore_meta_region_map(r))
		goto chunks;
	if (sg_alloc_table(&r->sgt, r->n, GFP_KERNEL))
		goto vunmap;
	for_each_sg(r->sgt.sgl, sg, r->n, i)
		sg_set_page(sg, r->chunks[i], KRCORE_META_CHUNK, 0);
	r->nents = ib_dma_map_sg(r->dev, r->sgt.sgl, r->n, DMA_BIDIRECTIONAL);
	if (r->nents <= 0)
		goto sgfree;
	r->mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, r->nents);
	if (IS_ERR(r->mr))
		goto unmap;
	n = ib_map_mr_sg(r->mr, r->sgt.sgl, r->nents, NULL, KRCORE_META_CHUNK);
	if (n != r->nents)
		goto dereg;
	return r;
dereg:
	ib_dereg_mr(r->mr);
unmap:
	ib_dma_unmap_sg(r->dev, r->sgt.sgl, r->n, DMA_BIDIRECTIONAL);
sgfree:
	sg_free_table(&r->sgt);
vunmap:
	vunmap(r->va);
chunks:
	krcore_meta_chunks_free(r);
free:
	kfree(r);
	return NULL;
}

void krcore_shim_meta_region_offer(struct krcore_meta_region *r, struct krcore_meta_offer *o)
{
	o->base = r->mr->iova;
	o->rkey = r->mr->rkey;
}

u8 *krcore_shim_meta_region_va(struct krcore_meta_region *r)
{
	return r->va;
}

void krcore_shim_meta_region_wrote(struct krcore_meta_region *r, u64 off, u32 len)
{
	u64 end = off + len;
	struct scatterlist *sg;
	int i;

	/* Chunk by chunk, by the CPU's addresses (the list as mapped, not as the device
	 * may have merged it): a no-op where the device is coherent. */
	for_each_sg(r->sgt.sgl, sg, r->n, i) {
		u64 start = (u64)i * KRCORE_META_CHUNK;

		if (start < end && off < start + KRCORE_META_CHUNK &&
		    !ib_uses_virt_dma(r->dev))
			dma_sync_sg_for_device(r->dev->dma_device, sg, 1, DMA_BIDIRECTIONAL);
	}
	/* This step reaches a member's READ before the next one does. */
	dma_wmb();
}

int krcore_shim_meta_region_rekey(struct krcore_meta_region *r, struct krcore_meta_conn *m)
{
	struct ib_mr *mr = ib_alloc_mr(r->pd, IB_MR_TYPE_MEM_REG, r->nents);
	int ret;

	/*
	 * A new MR, not the old one keyed anew: whatever state the old one is in (closed
	 * by a peer, or a registration of it that timed out and may or may not have run),
	 * destroying it closes it, and the new one is free to register.
	 */
	if (IS_ERR(mr))
		return PTR_ERR(mr);
	if (ib_map_mr_sg(mr, r->sgt.sgl, r->nents, NULL, KRCORE_META_CHUNK) != r->nents) {
		ib_dereg_mr(mr);
		return -EINVAL;
	}
	ib_dereg_mr(r->mr);
	r->mr = mr;
	ret = krcore_shim_meta_region_register(r, m);
	if (!ret) {
		m->offer.base = r->mr->iova;
		m->offer.rkey = r->mr->rkey;
	}
	return ret;
}

void krcore_shim_meta_region_free(struct krcore_meta_region *r)
{
	ib_dereg_mr(r->mr);
	ib_dma_unmap_sg(r->dev, r->sgt.sgl, r->n, DMA_BIDIRECTIONAL);
	sg_free_table(&r->sgt);
	vunmap(r->va);
	krcore_meta_chunks_free(r);
	kfree(r);
}

/* How long a wait polls before it sleeps: a lookup is one READ round trip, a few
 * microseconds on hardware and hundreds under emulation, and a sleep's timer slack
 * would add to each; a worker thread polls (yielding between polls) rather than a
 * caller, so no user's call waits on it. */
#define KRCORE_META_POLL_US 1000

/* Waits for one completion on `m`'s CQ (`wc`): polling for KRCORE_META_POLL_US, then
 * sleeping in short steps, up to KRCORE_META_WAIT_MS in all. */
static int krcore_meta_wait(struct krcore_meta_conn *m, struct ib_wc *wc)
{
	unsigned long until = jiffies + msecs_to_jiffies(KRCORE_META_WAIT_MS);
	u64 poll_until = ktime_get_ns() + KRCORE_META_POLL_US * NSEC_PER_USEC;
	int n;

	for (;;) {
		n = ib_poll_cq(m->cq, 1, wc);
		if (n > 0)
			return wc->status == IB_WC_SUCCESS ? 0 : -EIO;
		if (n < 0)
			return n;
		if (time_after(jiffies, until))
			return -ETIMEDOUT;
		if (ktime_get_ns() < poll_until) {
			cond_resched();
			cpu_relax();
		} else {
			usleep_range(10, 50);
		}
	}
}

#define KRCORE_META_SEND_ID 1
#define KRCORE_META_RECV_ID 2

/* Posts `wr` on `m` and waits for it, and for the reply receive when `reply` (posted
 * before it): completions in either order. A failure breaks the connection for good. */
static int krcore_meta_run(struct krcore_meta_conn *m, struct ib_send_wr *wr, bool reply)
{
	struct ib_wc wc;
	int left = reply ? 2 : 1;
	int ret;

	if (m->broken || krcore_shim_cm_broken(m->conn))
		return -ENOTCONN;
	wr->wr_id = KRCORE_META_SEND_ID;
	wr->send_flags = IB_SEND_SIGNALED;
	ret = krcore_cm_post(m->conn, wr);
	while (!ret && left--) {
		ret = krcore_meta_wait(m, &wc);
		/* A reply is exactly one: anything else is no MetaServer's answer. */
		if (!ret && wc.wr_id == KRCORE_META_RECV_ID && wc.byte_len != KRCORE_META_REPLY_LEN)
			ret = -EPROTO;
	}
	if (ret)
		m->broken = true;
	return ret;
}

/* A kernel buffer mapped for `dev` both ways: a connection's bounce buffer, or a
 * serving connection's request and reply. NULL when out of memory. */
static u8 *krcore_meta_buf_alloc(struct ib_device *dev, size_t len, u64 *dma)
{
	u8 *buf = kzalloc(len, GFP_KERNEL);

	if (!buf)
		return NULL;
	*dma = ib_dma_map_single(dev, buf, len, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, *dma)) {
		kfree(buf);
		return NULL;
	}
	return buf;
}

static void krcore_meta_buf_free(struct ib_device *dev, u8 *buf, size_t len, u64 dma)
{
	ib_dma_unmap_single(dev, dma, len, DMA_BIDIRECTIONAL);
	kfree(buf);
}

int krcore_shim_meta_open(struct ib_device *dev, struct ib_pd *pd, const u8 *src_gid,
			  const u8 *dst_gid, u32 timeout_ms, struct krcore_meta_conn **out,
			  struct krcore_meta_offer *offer)
{
	struct krcore_meta_conn *m = kzalloc(sizeof(*m), GFP_KERNEL);
	struct ib_qp *qp;
	u32 qpn;
	int ret = -ENOMEM;

	if (!m)
		return -ENOMEM;
	m->dev = dev;
	m->lkey = pd->local_dma_lkey;
	m->buf = krcore_meta_buf_alloc(dev, KRCORE_META_BUF, &m->dma);
	if (!m->buf)
		goto free;
	m->cq = ib_alloc_cq(dev, NULL, 16, 0, IB_POLL_DIRECT);
	if (IS_ERR(m->cq)) {
		ret = PTR_ERR(m->cq);
		goto buf;
	}
	ret = krcore_shim_cm_connect(dev, pd, m->cq, src_gid, dst_gid, timeout_ms, KRCORE_CM_META, 0,
				     &m->conn, &qp, &qpn);
	if (ret)
		goto cq;
	ret = krcore_cm_reply(m->conn, &m->offer);
	if (ret) {
		krcore_shim_cm_close(m->conn);
		goto cq;
	}
	*offer = m->offer;
	*out = m;
	{
		u64 addr;
		u32 rkey;

		/* For a test that plays a member kernel aiming at the region (fastreg.c). */
		if (krcore_shim_test_unchecked_wire(&addr, &rkey))
			pr_info("krcore: test: MetaServer region %#llx rkey %#x\n", m->offer.base,
				m->offer.rkey);
	}
	return 0;
cq:
	ib_free_cq(m->cq);
buf:
	krcore_meta_buf_free(dev, m->buf, KRCORE_META_BUF, m->dma);
free:
	kfree(m);
	return ret;
}

int krcore_shim_meta_region_register(struct krcore_meta_region *r, struct krcore_meta_conn *m)
{
	struct ib_reg_wr reg = {
		.wr.opcode = IB_WR_REG_MR,
		.mr = r->mr,
		.key = r->mr->rkey,
		/* Read by every member; written by this kernel alone (krcore_rs_meta_serve). */
		.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ,
	};

	return krcore_meta_run(m, &reg.wr, false);
}

int krcore_shim_meta_read(struct krcore_meta_conn *m, u64 off, u32 len)
{
	struct ib_sge sge = { .addr = m->dma, .length = len, .lkey = m->lkey };
	struct ib_rdma_wr rdma = {
		.wr = { .opcode = IB_WR_RDMA_READ, .sg_list = &sge, .num_sge = 1 },
		.remote_addr = m->offer.base + off,
		.rkey = m->offer.rkey,
	};
	int ret;

	/* The region's bounds are the responder's to enforce (its MR); these are ours. */
	if (!len || len > KRCORE_META_BUF)
		return -EINVAL;
	ib_dma_sync_single_for_device(m->dev, m->dma, len, DMA_BIDIRECTIONAL);
	ret = krcore_meta_run(m, &rdma.wr, false);
	ib_dma_sync_single_for_cpu(m->dev, m->dma, len, DMA_BIDIRECTIONAL);
	return ret;
}

int krcore_shim_meta_call(struct krcore_meta_conn *m, u32 len)
{
	struct ib_sge sge = { .addr = m->dma, .length = len, .lkey = m->lkey };
	struct ib_sge reply = {
		.addr = m->dma + KRCORE_META_REPLY_OFF,
		.length = KRCORE_META_REPLY_LEN,
		.lkey = m->lkey,
	};
	struct ib_recv_wr recv = { .wr_id = KRCORE_META_RECV_ID, .sg_list = &reply, .num_sge = 1 };
	struct ib_send_wr send = { .opcode = IB_WR_SEND, .sg_list = &sge, .num_sge = 1 };
	int ret;

	if (!len || len > KRCORE_META_REPLY_OFF)
		return -EINVAL;
	if (m->broken || krcore_shim_cm_broken(m->conn))
		return -ENOTCONN;
	send.ex.invalidate_rkey = xchg(&test_meta_inv, 0);
	if (send.ex.invalidate_rkey)
		send.opcode = IB_WR_SEND_WITH_INV;
	ib_dma_sync_single_for_device(m->dev, m->dma, KRCORE_META_BUF, DMA_BIDIRECTIONAL);
	/* The reply's receive first: the MetaServer answers as soon as it has the request. */
	ret = krcore_cm_post_recv(m->conn, &recv);
	if (ret) {
		m->broken = true;
		return ret;
	}
	ret = krcore_meta_run(m, &send, true);
	ib_dma_sync_single_for_cpu(m->dev, m->dma, KRCORE_META_BUF, DMA_BIDIRECTIONAL);
	return ret;
}

u8 *krcore_shim_meta_buf(struct krcore_meta_conn *m)
{
	return m->buf;
}

bool krcore_shim_meta_broken(struct krcore_meta_conn *m)
{
	return m->broken || krcore_shim_cm_broken(m->conn);
}

void krcore_shim_meta_close(struct krcore_meta_conn *m)
{
	/* The QP goes first (cm.c destroys it, flushing what was posted), then what a late
	 * completion could have reached. */
	krcore_shim_cm_close(m->conn);
	ib_free_cq(m->cq);
	krcore_meta_buf_free(m->dev, m->buf, KRCORE_META_BUF, m->dma);
	kfree(m);
}

/* ---- Serving, on the MetaServer's node ---- */

/* A request's room: the longest request is 72 bytes (abi meta::request). A longer SEND
 * fails at this node's NIC, and its QP with it: the member's own loss. */
#define KRCORE_META_REQUEST_ROOM 128

/*
 * Requests are served on the module's own queue, not on the completion's: ib_comp_wq
 * is the whole system's (every ULP's completions run there), and a member's request
 * must cost the MetaServer's node nothing but krcore's own work. Unbound: serving
 * sleeps on the serving mutex and belongs to no CPU. Made by krcore_meta_serving_init
 * before the listener listens, destroyed after every connection went.
 */
static struct workqueue_struct *krcore_meta_wq;

static uint test_hold_serve_ms;
KRCORE_TEST_PARAM(test_hold_serve_ms, uint, 0600,
		  "hold each MetaServer request this long before serving it, ms (shows where serving runs; default 0)");

static uint test_hold_meta_ms;
KRCORE_TEST_PARAM(test_hold_meta_ms, uint, 0600,
		  "hold this node's MetaServer connection this long in each pass of its work, ms (a slow MetaServer; default 0)");

u32 krcore_shim_test_hold_meta_ms(void)
{
	return READ_ONCE(test_hold_meta_ms);
}

struct krcore_meta_serving {
	struct krcore_cm_conn *conn;
	struct ib_device *dev;
	struct ib_cq *cq;
	u32 lkey;
	__be32 from;
	/* The request's receive buffer, then the reply's. */
	u8 *buf;
	u64 dma;
	struct ib_cqe recv_cqe;
	struct ib_cqe send_cqe;
	/* The request taken from the receive buffer (`req_len` bytes), served by `serve`
	 * on krcore_meta_wq. One at a time: the receive is posted again only once it was
	 * served, so the next request cannot come before. */
	u8 req[KRCORE_META_REQUEST_ROOM];
	u32 req_len;
	struct work_struct serve;
	/* Replies posted whose completion did not come yet: a member asks again only
	 * after its reply came, so past a few it is not waiting for them. */
	atomic_t replies;
};

/* Replies a member may leave outstanding before it is dropped. */
#define KRCORE_META_MAX_REPLIES 4

#define KRCORE_META_SERVING_BYTES (KRCORE_META_REQUEST_ROOM + KRCORE_META_REPLY_LEN)

static int krcore_meta_serving_recv(struct krcore_meta_serving *s)
{
	struct ib_sge sge = { .addr = s->dma, .length = KRCORE_META_REQUEST_ROOM, .lkey = s->lkey };
	struct ib_recv_wr wr = { .wr_cqe = &s->recv_cqe, .sg_list = &sge, .num_sge = 1 };

	return krcore_cm_post_recv(s->conn, &wr);
}

static void krcore_meta_served(struct ib_cq *cq, struct ib_wc *wc)
{
	struct krcore_meta_serving *s = container_of(wc->wr_cqe, struct krcore_meta_serving, send_cqe);

	/* The reply went (or its QP is going): its buffer is reused for the next
	 * request's reply, which the member asks after this one's came. */
	atomic_dec(&s->replies);
}

/* A member's request came (ib_comp_wq): checked, copied out and queued for serving on
 * krcore_meta_wq. A flushed receive means the QP is going. */
static void krcore_meta_serve_one(struct ib_cq *cq, struct ib_wc *wc)
{
	struct krcore_meta_serving *s = container_of(wc->wr_cqe, struct krcore_meta_serving, recv_cqe);

	/* Flushed: the QP is going. Any other error is the member's doing (a SEND that
	 * closed no key of ours, or too long): its connection is of no more use. */
	if (wc->status == IB_WC_WR_FLUSH_ERR)
		return;
	if (wc->status != IB_WC_SUCCESS) {
		krcore_cm_drop_peer(s->conn);
		return;
	}
	/*
	 * A SEND that closed a key of this node (maybe the region's: every member knows
	 * its rkey) is no request, and a member with more replies outstanding than it
	 * could be waiting for is not asking as a member does: either is dropped. The
	 * region is checked, and keyed again if it was closed.
	 */
	if ((wc->wc_flags & IB_WC_WITH_INVALIDATE) ||
	    atomic_read(&s->replies) >= KRCORE_META_MAX_REPLIES) {
		pr_warn_ratelimited("krcore: %s: dropped a MetaServer connection from %pI4: %s\n",
				    dev_name(&s->dev->dev), &s->from,
				    (wc->wc_flags & IB_WC_WITH_INVALIDATE) ?
					    "its SEND invalidated a key" :
					    "it asked without waiting for its replies");
		if (wc->wc_flags & IB_WC_WITH_INVALIDATE)
			krcore_rs_meta_invalidated(s->dev);
		krcore_cm_drop_peer(s->conn);
		return;
	}
	ib_dma_sync_single_for_cpu(s->dev, s->dma, KRCORE_META_SERVING_BYTES, DMA_BIDIRECTIONAL);
	s->req_len = min_t(u32, wc->byte_len, KRCORE_META_REQUEST_ROOM);
	memcpy(s->req, s->buf, s->req_len);
	queue_work(krcore_meta_wq, &s->serve);
}

/* Serves the request taken (krcore_meta_wq: may sleep), with nothing of the connection
 * locked; the receive is posted again before the reply goes, so the member's next
 * request finds it. A connection torn down meanwhile takes no post (cm.c marks it
 * abandoned before its QP goes), and its teardown waits for this to end before the
 * buffers go (krcore_meta_serving_free). */
static void krcore_meta_serve_work(struct work_struct *w)
{
	struct krcore_meta_serving *s = container_of(w, struct krcore_meta_serving, serve);
	struct ib_sge sge = {
		.addr = s->dma + KRCORE_META_REQUEST_ROOM,
		.length = KRCORE_META_REPLY_LEN,
		.lkey = s->lkey,
	};
	struct ib_send_wr send = {
		.wr_cqe = &s->send_cqe,
		.opcode = IB_WR_SEND,
		.send_flags = IB_SEND_SIGNALED,
		.sg_list = &sge,
		.num_sge = 1,
	};
	uint hold = READ_ONCE(test_hold_serve_ms);
	int ret;

	if (hold)
		msleep(hold);
	ret = krcore_rs_meta_serve(s->dev, s->from, s->req, s->req_len,
				   s->buf + KRCORE_META_REQUEST_ROOM);
	ib_dma_sync_single_for_device(s->dev, s->dma, KRCORE_META_SERVING_BYTES, DMA_BIDIRECTIONAL);
	if (krcore_meta_serving_recv(s) || ret)
		return;
	atomic_inc(&s->replies);
	if (krcore_cm_post(s->conn, &send))
		atomic_dec(&s->replies);
}

int krcore_meta_serving_init(void)
{
	krcore_meta_wq = alloc_workqueue("krcore_meta", WQ_UNBOUND, 0);
	return krcore_meta_wq ? 0 : -ENOMEM;
}

void krcore_meta_serving_exit(void)
{
	if (krcore_meta_wq)
		destroy_workqueue(krcore_meta_wq);
	krcore_meta_wq = NULL;
}

struct krcore_meta_serving *krcore_meta_serving_alloc(struct ib_device *dev, struct ib_pd *pd,
						      __be32 from)
{
	struct krcore_meta_serving *s = kzalloc(sizeof(*s), GFP_KERNEL);

	if (!s)
		return NULL;
	s->dev = dev;
	s->lkey = pd->local_dma_lkey;
	s->from = from;
	s->recv_cqe.done = krcore_meta_serve_one;
	s->send_cqe.done = krcore_meta_served;
	INIT_WORK(&s->serve, krcore_meta_serve_work);
	s->buf = krcore_meta_buf_alloc(dev, KRCORE_META_SERVING_BYTES, &s->dma);
	if (!s->buf)
		goto free;
	/* Room for the QP's whole send queue (cm.c's 64) and its one receive. */
	s->cq = ib_alloc_cq(dev, s, 64 + 2, 0, IB_POLL_WORKQUEUE);
	if (!IS_ERR(s->cq))
		return s;
	krcore_meta_buf_free(dev, s->buf, KRCORE_META_SERVING_BYTES, s->dma);
free:
	kfree(s);
	return NULL;
}

struct ib_cq *krcore_meta_serving_cq(struct krcore_meta_serving *s)
{
	return s->cq;
}

int krcore_meta_serving_start(struct krcore_meta_serving *s, struct krcore_cm_conn *c)
{
	s->conn = c;
	return krcore_meta_serving_recv(s);
}

void krcore_meta_serving_free(struct krcore_meta_serving *s)
{
	if (!s)
		return;
	/* Its QP is destroyed: freeing the CQ waits for a completion being handled, so
	 * nothing queues the serving after it, and the cancel waits for one being served
	 * (whose posts the abandoned connection refused). */
	ib_free_cq(s->cq);
	cancel_work_sync(&s->serve);
	krcore_meta_buf_free(s->dev, s->buf, KRCORE_META_SERVING_BYTES, s->dma);
	kfree(s);
}
