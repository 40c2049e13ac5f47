// SPDX-License-Identifier: GPL-2.0
/*
 * The MetaServer's verbs (issue 11): the region a designated node serves, registered
 * with a fast-registration request, and a node's connection to it, on which its kernel
 * READs, WRITEs and compare-and-swaps entries one verb at a time. Mechanism only: which
 * entries, in what order, and what they mean is abi's meta module (run by meta/mod.rs).
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
#include <rdma/ib_verbs.h>

#include "shim.h"

static char *meta_server;
module_param(meta_server, charp, 0444);
MODULE_PARM_DESC(meta_server, "IPv4 address of the MetaServer node; the node with that address serves it (default: none)");

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
	struct page **chunks;
	u32 n;
	struct sg_table sgt;
	int nents;
	struct ib_mr *mr;
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

struct krcore_meta_region *krcore_shim_meta_region_alloc(struct ib_pd *pd, u32 bytes)
{
	struct krcore_meta_region *r = kzalloc(sizeof(*r), GFP_KERNEL);
	struct scatterlist *sg;
	int i, n;

	if (!r)
		return NULL;
	r->dev = pd->device;
	r->n = DIV_ROUND_UP(bytes, KRCORE_META_CHUNK);
	r->chunks = kcalloc(r->n, sizeof(*r->chunks), GFP_KERNEL);
	if (!r->chunks)
		goto free;
	for (i = 0; i < r->n; i++) {
		r->chunks[i] = alloc_pages(GFP_KERNEL | __GFP_ZERO, get_order(KRCORE_META_CHUNK));
		if (!r->chunks[i])
			goto chunks;
	}
	if (sg_alloc_table(&r->sgt, r->n, GFP_KERNEL))
		goto chunks;
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

void krcore_shim_meta_region_free(struct krcore_meta_region *r)
{
	ib_dereg_mr(r->mr);
	ib_dma_unmap_sg(r->dev, r->sgt.sgl, r->n, DMA_BIDIRECTIONAL);
	sg_free_table(&r->sgt);
	krcore_meta_chunks_free(r);
	kfree(r);
}

/* Waits for the one completion of the verb just posted on `m`: spinning briefly (a
 * lookup is a few microseconds on hardware), then sleeping in short steps. */
static int krcore_meta_wait(struct krcore_meta_conn *m)
{
	unsigned long until = jiffies + msecs_to_jiffies(KRCORE_META_WAIT_MS);
	struct ib_wc wc;
	int spins = 0;
	int n;

	for (;;) {
		n = ib_poll_cq(m->cq, 1, &wc);
		if (n > 0)
			return wc.status == IB_WC_SUCCESS ? 0 : -EIO;
		if (n < 0)
			return n;
		if (time_after(jiffies, until))
			return -ETIMEDOUT;
		if (++spins < 64)
			cpu_relax();
		else
			usleep_range(10, 50);
	}
}

/* Posts `wr` on `m` and waits for it; a failure breaks the connection for good. */
static int krcore_meta_run(struct krcore_meta_conn *m, struct ib_send_wr *wr)
{
	int ret;

	if (m->broken || krcore_shim_cm_broken(m->conn))
		return -ENOTCONN;
	wr->wr_id = 1;
	wr->send_flags = IB_SEND_SIGNALED;
	ret = krcore_cm_post(m->conn, wr);
	if (!ret)
		ret = krcore_meta_wait(m);
	if (ret)
		m->broken = true;
	return ret;
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
	m->buf = kzalloc(KRCORE_META_BUF, GFP_KERNEL);
	if (!m->buf)
		goto free;
	m->dma = ib_dma_map_single(dev, m->buf, KRCORE_META_BUF, DMA_BIDIRECTIONAL);
	if (ib_dma_mapping_error(dev, m->dma))
		goto buf;
	m->cq = ib_alloc_cq(dev, NULL, 16, 0, IB_POLL_DIRECT);
	if (IS_ERR(m->cq)) {
		ret = PTR_ERR(m->cq);
		goto unmap;
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
	return 0;
cq:
	ib_free_cq(m->cq);
unmap:
	ib_dma_unmap_single(dev, m->dma, KRCORE_META_BUF, DMA_BIDIRECTIONAL);
buf:
	kfree(m->buf);
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
		.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE |
			  IB_ACCESS_REMOTE_ATOMIC,
	};

	return krcore_meta_run(m, &reg.wr);
}

int krcore_shim_meta_op(struct krcore_meta_conn *m, u32 op, u64 off, u32 len, u64 compare,
			u64 swap)
{
	struct ib_sge sge = { .addr = m->dma, .length = len, .lkey = m->lkey };
	struct ib_atomic_wr atomic = {};
	struct ib_rdma_wr rdma = {};
	struct ib_send_wr *wr;
	int ret;

	/* The region's bounds are the responder's to enforce (its MR); these are ours. */
	if (!len || len > KRCORE_META_BUF)
		return -EINVAL;
	switch (op) {
	case KRCORE_META_READ:
	case KRCORE_META_WRITE:
		rdma.wr.opcode = op == KRCORE_META_READ ? IB_WR_RDMA_READ : IB_WR_RDMA_WRITE;
		rdma.remote_addr = m->offer.base + off;
		rdma.rkey = m->offer.rkey;
		wr = &rdma.wr;
		break;
	case KRCORE_META_CAS:
		if (len != 8)
			return -EINVAL;
		atomic.wr.opcode = IB_WR_ATOMIC_CMP_AND_SWP;
		atomic.remote_addr = m->offer.base + off;
		atomic.compare_add = compare;
		atomic.swap = swap;
		atomic.rkey = m->offer.rkey;
		wr = &atomic.wr;
		break;
	default:
		return -EINVAL;
	}
	wr->sg_list = &sge;
	wr->num_sge = 1;
	ib_dma_sync_single_for_device(m->dev, m->dma, len, DMA_BIDIRECTIONAL);
	ret = krcore_meta_run(m, wr);
	ib_dma_sync_single_for_cpu(m->dev, m->dma, len, DMA_BIDIRECTIONAL);
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
	ib_dma_unmap_single(m->dev, m->dma, KRCORE_META_BUF, DMA_BIDIRECTIONAL);
	kfree(m->buf);
	kfree(m);
}
