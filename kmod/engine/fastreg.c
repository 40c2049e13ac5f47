// SPDX-License-Identifier: GPL-2.0
/*
 * Registrations and the keys a message is written with.
 *
 * A user's MR is registered with exactly the rights the user asked for: no MR is
 * remotely writable because it may receive. A message is written into its receive
 * through a key made for that receive's bytes alone, with remote write and nothing
 * else, by fast registration (IB_WR_REG_MR) over the MR's pages, which an MR that may
 * receive keeps pinned a second time for this (`struct krcore_mr`'s umem):
 *
 * - On one node, the sender's pool QP makes the key, writes, and invalidates it, as one
 *   chain (REG_MR, WRITE, LOCAL_INV fenced, so it runs after the WRITE completed), with
 *   keys of its own taken in turn (`struct krcore_keys`, the QP's qp_context). A
 *   reconnect makes the used ones again (a chain may have been flushed between its
 *   REG_MR and its LOCAL_INV).
 * - Across nodes, a receive advertised to a peer kernel gets a key from the device's
 *   set (`struct krcore_keys` too), registered on the device's local QP, and the advert
 *   goes only once that registration completed; the peer's Data notice is a SEND with
 *   invalidate naming it, so the NIC closes it before the receive completes. A key let
 *   go any other way (a receive cancelled, the peer leaving it open) is destroyed and
 *   made again before its pages may go.
 *
 * Why a QP of its own: soft-RoCE's requester, when it retransmits, starts again at the
 * oldest request not yet completed and runs every request after it once more, local
 * ones included (rxe_req.c, req_retry). A set QP's registration sits behind notices the
 * peer has not acknowledged; run again, it fails on a key that is open (the set QP goes
 * to error) or opens again a key the peer's Data closed, over pages krcore may have let
 * go. The local QP carries registrations only, one at a time, so nothing of it is ever
 * unacknowledged and none runs twice.
 *
 * A key holds a reference on the registration whose pages it maps, so the pages stay
 * pinned while any key may reach them, whatever the user deregistered meanwhile.
 *
 * Locks: `krcore_keys.lock` is innermost (taken under a QP's and a links shard's mutexes,
 * never the other way round). Everything here may sleep.
 */
#include <rdma/ib_umem.h>
#include <rdma/iter.h>
#include <rdma/ib_verbs.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/kref.h>
#include <linux/mutex.h>
#include <linux/moduleparam.h>
#include <linux/random.h>
#include <linux/delay.h>
#include <linux/jiffies.h>

#include "shim.h"
#include "kcompat.h"

/* Test only: how a test shows that the other node's NIC refuses what it must. */
static bool test_unchecked_wire;
KRCORE_TEST_PARAM(test_unchecked_wire, bool, 0444,
		  "act as a member kernel that broke its checks would: one-sided requests through imports go unchecked (to test_wire_addr with test_wire_rkey while that is set), and each registration's rkey is logged (default off)");
static ulong test_wire_addr;
KRCORE_TEST_PARAM(test_wire_addr, ulong, 0600, "with test_unchecked_wire, where one-sided requests go");
static uint test_wire_rkey;
KRCORE_TEST_PARAM(test_wire_rkey, uint, 0600, "with test_unchecked_wire, the rkey they go with (0: the import's)");

bool krcore_shim_test_unchecked_wire(u64 *addr, u32 *rkey)
{
	if (!test_unchecked_wire)
		return false;
	*rkey = READ_ONCE(test_wire_rkey);
	*addr = *rkey ? READ_ONCE(test_wire_addr) : 0;
	return true;
}

/* Pages a key spans at most: abi's MAX_RECV (1 MiB) not page-aligned. */
#define KRCORE_FR_PAGES 257

struct krcore_mr {
	struct ib_mr *mr;
	/* The pages again, for keys over them; NULL for an MR that cannot receive. */
	struct ib_umem *umem;
	/* The registration's, and one per key mapping its pages. */
	struct kref ref;
};

static void krcore_mr_free(struct kref *ref)
{
	struct krcore_mr *m = container_of(ref, struct krcore_mr, ref);

	if (m->umem)
		ib_umem_release(m->umem);
	kfree(m);
}

static void krcore_mr_put(struct krcore_mr *m)
{
	if (m)
		kref_put(&m->ref, krcore_mr_free);
}

struct krcore_mr *krcore_shim_reg_user_mr(struct ib_pd *pd, u64 addr, u64 len, u32 access)
{
	struct krcore_mr *m;
	int flags = 0;

	/* krcore's MrAccess bits (abi/src/sqe.rs). */
	if (access & (1 << 0))
		flags |= IB_ACCESS_LOCAL_WRITE;
	if (access & (1 << 1))
		flags |= IB_ACCESS_REMOTE_WRITE;
	if (access & (1 << 2))
		flags |= IB_ACCESS_REMOTE_READ;
	if (access & (1 << 3))
		flags |= IB_ACCESS_REMOTE_ATOMIC;
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return ERR_PTR(-ENOMEM);
	kref_init(&m->ref);
	/* Only memory the NIC may write locally can receive. */
	if (flags & IB_ACCESS_LOCAL_WRITE) {
		m->umem = krcore_umem_get(pd->device, addr, len, IB_ACCESS_LOCAL_WRITE);
		if (IS_ERR(m->umem)) {
			long err = PTR_ERR(m->umem);

			kfree(m);
			return ERR_PTR(err);
		}
	}
	m->mr = ib_reg_user_mr(pd, addr, len, addr, flags);
	if (IS_ERR(m->mr)) {
		long err = PTR_ERR(m->mr);

		m->mr = NULL;
		krcore_mr_put(m);
		return ERR_PTR(err);
	}
	if (test_unchecked_wire)
		pr_info("krcore: test: MR %#llx len %llu rkey %#x\n", addr, len, m->mr->rkey);
	return m;
}

u32 krcore_shim_mr_lkey(struct krcore_mr *m)
{
	return m->mr->lkey;
}

u32 krcore_shim_mr_rkey(struct krcore_mr *m)
{
	return m->mr->rkey;
}

int krcore_shim_dereg_mr(struct krcore_mr *m)
{
	int ret = ib_dereg_mr(m->mr);

	/* The pages stay while a key maps them. */
	krcore_mr_put(m);
	return ret;
}

/*
 * Maps `fr` over `len` bytes at `addr` of `m` with a fresh key, and fills `reg` to
 * register it with `access`; `sg` has room for KRCORE_FR_PAGES.
 */
static int krcore_fr_map(struct ib_mr *fr, struct scatterlist *sg, struct krcore_mr *m,
			 u64 addr, u32 len, int access, struct ib_reg_wr *reg)
{
	struct ib_umem *u = m ? m->umem : NULL;
	struct ib_block_iter biter;
	u64 base, first, last, idx = 0;
	unsigned int off, i = 0, n;
	int mapped;
	u8 key;

	if (!u || !len || addr < u->address || addr + len > u->address + u->length)
		return -EINVAL;
	base = u->address & PAGE_MASK;
	first = (addr - base) >> PAGE_SHIFT;
	last = (addr + len - 1 - base) >> PAGE_SHIFT;
	n = last - first + 1;
	if (n > KRCORE_FR_PAGES)
		return -EMSGSIZE;
	sg_init_table(sg, n);
	rdma_umem_for_each_dma_block(u, &biter, PAGE_SIZE) {
		if (idx >= first) {
			sg_dma_address(&sg[i]) = rdma_block_iter_dma_address(&biter);
			sg_dma_len(&sg[i]) = PAGE_SIZE;
			i++;
		}
		if (++idx > last)
			break;
	}
	if (i != n)
		return -EFAULT;
	if ((addr + len) & ~PAGE_MASK)
		sg_dma_len(&sg[n - 1]) = (addr + len) & ~PAGE_MASK;
	off = addr & ~PAGE_MASK;
	mapped = ib_map_mr_sg(fr, sg, n, &off, PAGE_SIZE);
	if (mapped != n)
		return mapped < 0 ? mapped : -EINVAL;
	/* Addressed as the user's own addresses (same offset in the page). */
	fr->iova = addr;
	/* A key byte no one can predict from the last key it saw. */
	key = get_random_u8();
	if (key == (fr->rkey & 0xff))
		key ^= 1;
	ib_update_fast_reg_key(fr, key);
	*reg = (struct ib_reg_wr){
		.wr = { .opcode = IB_WR_REG_MR, .wr_id = KRCORE_FR_WR_ID },
		.mr = fr,
		.key = fr->rkey,
		.access = access,
	};
	return 0;
}

/*
 * A set of keys: a pool QP's, for the messages it writes on this node, or the device's,
 * for receives advertised to peer kernels.
 *
 * A pool QP has one key per request its send queue may hold, taken in turn (no lock:
 * its QP's mutex is held). A key is taken again only after the request that last used
 * it was retired (credits keep fewer than `n` outstanding, retired in order), so its
 * registration and invalidation ran before it is mapped anew.
 *
 * The device's are chosen, held and let go by abi's cluster::keys (engine/keys.rs,
 * under its lock); here only what the hardware needs. `lock` orders those against the
 * drain at the device's removal.
 */
struct krcore_key {
	struct ib_mr *mr;
	struct krcore_mr *held;	/* whose pages it maps; NULL while unused */
	u32 rkey;
};

/*
 * The device's local QP, for its keys' registrations (see the top): connected to itself
 * so that it may post, it never sends a packet. One registration at a time (the keys'
 * lock), waited for on its own CQ.
 */
struct krcore_local {
	struct ib_cq *cq;
	struct ib_qp *qp;
	/* What it is connected with again after an error. */
	u32 port, sgid_index;
	u8 gid[16], mac[ETH_ALEN];
	/* The wr_id of the registration posted last (older completions are stale). */
	u64 seq;
	/* In error (a registration failed): reset and connected again before the next. */
	bool broken;
};

/* How long a registration on the local QP may take (soft-RoCE runs it on its
 * workqueue: microseconds, unless the machine stalls). */
#define KRCORE_LOCAL_REG_MS 1000

struct krcore_keys {
	struct mutex lock;
	struct ib_pd *pd;
	/* The device's set's (krcore_keys_local); a pool QP's set has none. */
	struct krcore_local local;
	/* Drained: the device is going, no key is made any more. */
	bool dead;
	u32 n, next;
	struct scatterlist sg[KRCORE_FR_PAGES];
	struct krcore_key key[];
};

struct krcore_keys *krcore_keys_alloc(struct ib_pd *pd, u32 n)
{
	struct krcore_keys *p = kvzalloc(struct_size(p, key, n), GFP_KERNEL);
	u32 i;

	if (!p)
		return ERR_PTR(-ENOMEM);
	mutex_init(&p->lock);
	p->pd = pd;
	p->n = n;
	for (i = 0; i < n; i++) {
		struct ib_mr *mr = ib_alloc_mr(pd, IB_MR_TYPE_MEM_REG, KRCORE_FR_PAGES);

		if (IS_ERR(mr)) {
			krcore_keys_free(p);
			return ERR_CAST(mr);
		}
		p->key[i] = (struct krcore_key){ .mr = mr };
	}
	return p;
}

void krcore_keys_drain(struct krcore_keys *p)
{
	u32 i;

	if (!p)
		return;
	mutex_lock(&p->lock);
	/* The local QP first: once it is destroyed no registration runs any more. */
	if (p->local.qp)
		ib_destroy_qp(p->local.qp);
	if (p->local.cq)
		ib_free_cq(p->local.cq);
	p->local.qp = NULL;
	p->local.cq = NULL;
	for (i = 0; i < p->n && !p->dead; i++) {
		if (p->key[i].mr)
			ib_dereg_mr(p->key[i].mr);
		krcore_mr_put(p->key[i].held);
		p->key[i] = (struct krcore_key){};
	}
	p->dead = true;
	mutex_unlock(&p->lock);
}

void krcore_keys_free(struct krcore_keys *p)
{
	krcore_keys_drain(p);
	kvfree(p);
}

/* Key k maps m's pages: m stays while it does. */
static void krcore_key_hold(struct krcore_key *k, struct krcore_mr *m)
{
	kref_get(&m->ref);
	krcore_mr_put(k->held);
	k->held = m;
	k->rkey = k->mr->rkey;
}

/* Key k, maybe still open at the NIC, is destroyed (which closes it) and made again;
 * then the pages it mapped may go. False when it could not be made again. */
static bool krcore_key_remake(struct krcore_keys *p, struct krcore_key *k)
{
	if (k->mr)
		ib_dereg_mr(k->mr);
	k->mr = ib_alloc_mr(p->pd, IB_MR_TYPE_MEM_REG, KRCORE_FR_PAGES);
	if (IS_ERR(k->mr))
		k->mr = NULL;
	krcore_mr_put(k->held);
	k->held = NULL;
	return k->mr;
}

int krcore_keys_deliver(struct krcore_keys *p, u32 nth, struct krcore_mr *m, u64 addr,
			u32 len, struct ib_reg_wr *reg, u32 *rkey)
{
	struct krcore_key *k;
	int ret;

	if (!p)
		return -EINVAL;
	/* The nth chain of this post: the slot turns only for chains posted. */
	k = &p->key[(p->next + nth) % p->n];
	if (!k->mr)
		return -ENOMEM;
	ret = krcore_fr_map(k->mr, p->sg, m, addr, len, IB_ACCESS_REMOTE_WRITE, reg);
	if (ret)
		return ret;
	/* Its last message's chain has run, and that receive completed or failed. */
	krcore_key_hold(k, m);
	*rkey = k->rkey;
	return 0;
}

void krcore_keys_posted(struct krcore_keys *p, u32 chains)
{
	if (p)
		p->next = (p->next + chains) % p->n;
}

void krcore_keys_renew(struct krcore_keys *p)
{
	u32 i;

	/* Any may have been left open by a chain flushed before its invalidation. */
	for (i = 0; i < p->n; i++)
		if (p->key[i].held)
			krcore_key_remake(p, &p->key[i]);
}

/* Brings the local QP (created, or reset) to RTS, connected to itself. */
static int krcore_local_connect(struct krcore_local *l)
{
	return krcore_shim_connect_rc_qp(l->qp, l->port, l->sgid_index, l->gid, l->mac,
					 l->qp->qp_num);
}

int krcore_keys_local(struct krcore_keys *p, u32 port, u32 sgid_index, const u8 *gid,
		      const u8 *mac)
{
	struct krcore_local *l = &p->local;
	struct ib_qp_init_attr attr = {
		.cap = { .max_send_wr = 2, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.qp_type = IB_QPT_RC,
	};
	int ret = 0;

	mutex_lock(&p->lock);
	if (p->dead || l->qp)
		goto out;
	l->cq = ib_alloc_cq(p->pd->device, NULL, 4, 0, IB_POLL_DIRECT);
	if (IS_ERR(l->cq)) {
		ret = PTR_ERR(l->cq);
		l->cq = NULL;
		goto out;
	}
	attr.send_cq = l->cq;
	attr.recv_cq = l->cq;
	l->qp = ib_create_qp(p->pd, &attr);
	if (IS_ERR(l->qp)) {
		ret = PTR_ERR(l->qp);
		l->qp = NULL;
		goto free_cq;
	}
	l->port = port;
	l->sgid_index = sgid_index;
	memcpy(l->gid, gid, sizeof(l->gid));
	memcpy(l->mac, mac, sizeof(l->mac));
	ret = krcore_local_connect(l);
	if (!ret)
		goto out;
	ib_destroy_qp(l->qp);
	l->qp = NULL;
free_cq:
	ib_free_cq(l->cq);
	l->cq = NULL;
out:
	mutex_unlock(&p->lock);
	return ret;
}

/*
 * Waits, bounded, for the completion of registration `seq` on the local QP: 0 when it
 * ran, -EIO when it failed (the QP is in error: marked broken), -ETIMEDOUT when it did
 * not complete in time (it may still run).
 */
static int krcore_local_wait(struct krcore_local *l, u64 seq)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(KRCORE_LOCAL_REG_MS);
	unsigned int spins = 0;
	struct ib_wc wc;

	for (;;) {
		if (ib_poll_cq(l->cq, 1, &wc) == 1) {
			if (wc.status != IB_WC_SUCCESS)
				l->broken = true;
			if (wc.wr_id != seq)
				continue;
			return wc.status == IB_WC_SUCCESS ? 0 : -EIO;
		}
		if (time_after(jiffies, deadline))
			return -ETIMEDOUT;
		/* It runs on soft-RoCE's workqueue: give it the CPU, then sleep a little. */
		if (++spins < 32)
			cond_resched();
		else
			usleep_range(5, 20);
	}
}

/* The local QP, connected again first if a registration failed on it. */
static int krcore_local_ready(struct krcore_local *l)
{
	struct ib_wc wc;
	int ret;

	if (!l->qp)
		return -ENODEV;
	if (!l->broken)
		return 0;
	ret = krcore_shim_qp_reset(l->qp);
	if (ret)
		return ret;
	/* A reset QP's CQ may still hold its flushes. */
	while (ib_poll_cq(l->cq, 1, &wc) == 1)
		;
	ret = krcore_local_connect(l);
	if (!ret)
		l->broken = false;
	return ret;
}

int krcore_key_post(struct krcore_keys *p, u32 i, struct krcore_mr *m, u64 addr, u32 len,
		    u32 *rkey, bool *lost)
{
	const struct ib_send_wr *bad;
	struct krcore_local *l;
	struct ib_reg_wr reg;
	struct krcore_key *k;
	int ret;

	*lost = false;
	if (!p || i >= p->n)
		return -ENODEV;
	mutex_lock(&p->lock);
	l = &p->local;
	k = &p->key[i];
	ret = -ENODEV;
	if (p->dead || !k->mr)
		goto out;
	ret = krcore_local_ready(l);
	if (ret)
		goto out;
	ret = krcore_fr_map(k->mr, p->sg, m, addr, len, IB_ACCESS_REMOTE_WRITE, &reg);
	if (ret)
		goto out;
	reg.wr.wr_id = ++l->seq;
	reg.wr.send_flags = IB_SEND_SIGNALED;
	ret = ib_post_send(l->qp, &reg.wr, &bad);
	if (ret)
		goto out;
	ret = krcore_local_wait(l, l->seq);
	if (ret == -ETIMEDOUT) {
		pr_warn_ratelimited("krcore: an advert key's registration did not complete in %d ms; the local QP is reset\n",
				    KRCORE_LOCAL_REG_MS);
		/* Reset, the QP runs nothing more: the registration ran or never will, and the
		 * key made again is closed either way (the QP is connected again before the
		 * next). A QP that cannot be reset may still run it over m's pages: they stay
		 * while the key is kept, retired. */
		l->broken = true;
		if (krcore_shim_qp_reset(l->qp) == 0) {
			*lost = !krcore_key_remake(p, k);
		} else {
			krcore_key_hold(k, m);
			*lost = true;
		}
		goto out;
	}
	if (ret) {
		/* It failed: whatever it left, the key is made again before its next use. */
		*lost = !krcore_key_remake(p, k);
		goto out;
	}
	krcore_key_hold(k, m);
	*rkey = k->rkey;
out:
	mutex_unlock(&p->lock);
	return ret;
}

bool krcore_key_let(struct krcore_keys *p, u32 i, bool remake)
{
	struct krcore_key *k;
	bool ok = true;

	if (!p || i >= p->n)
		return false;
	mutex_lock(&p->lock);
	k = &p->key[i];
	if (p->dead) {
		ok = false;
	} else if (remake) {
		ok = krcore_key_remake(p, k);
	} else {
		krcore_mr_put(k->held);
		k->held = NULL;
	}
	mutex_unlock(&p->lock);
	return ok;
}
