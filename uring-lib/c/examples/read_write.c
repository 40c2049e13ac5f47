/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * A krcore client in C over krcore.h: CONNECT to this node (its loopback pool),
 * REG_MR, IMPORT_MR of its own export, then WRITE, READ and FAA in one batch with the
 * bytes checked; a refused entry read back with its reason; a RECV nobody answers,
 * waited for with a 100 ms bound (ETIME), then cancelled by DISCONNECT.
 *
 *   cc -I abi/include -I uring-lib/c uring-lib/c/examples/read_write.c
 */
#include <stdio.h>
#include <stdlib.h>

#include <sys/eventfd.h>

#include "krcore.h"

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (!(cond)) {                                                             \
			fprintf(stderr, "c client: " __VA_ARGS__);                         \
			fputc('\n', stderr);                                               \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

/* Runs the one prepared entry and returns its completion (consumed). */
static struct krcore_Cqe run_one(struct krcore_ring *r)
{
	struct krcore_Cqe *cqe, c;
	int e = krcore_submit_and_wait(r, 1);
	CHECK(e >= 0, "enter: %s", strerror(-e));
	CHECK(krcore_peek_cqe(r, &cqe) == 0, "no completion");
	c = *cqe;
	krcore_cqe_seen(r, cqe);
	return c;
}

int main(void)
{
	struct krcore_ring ring;
	struct krcore_Sqe *sqe;
	struct krcore_Cqe c, *cqe;
	uint8_t gid[16];
	/* On the module's first RDMA device (index 0 of krcore_IOC_QUERY_DEVICES), port 1. */
	int e = krcore_queue_init_on(16, &ring, 0, 0, 0);
	CHECK(e == 0, "setup: %s%s", strerror(-e), e == -ENOENT ? " (is the module loaded?)" : "");
	/* An eventfd an event loop would watch: signalled as completions come. */
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	CHECK(efd >= 0 && krcore_register_eventfd(&ring, efd) == 0, "eventfd: %s", strerror(errno));
	e = krcore_node_gid(&ring, gid);
	CHECK(e == 0, "no node GID: %s", strerror(-e));

	sqe = krcore_get_sqe(&ring);
	/* An endpoint that pairs with itself on one port: one-sided requests, and a RECV
	 * nobody answers below. */
	krcore_prep_pair(sqe, gid, 4005, 4005);
	sqe->user_data = 1;
	c = run_one(&ring);
	CHECK(c.res >= 0, "CONNECT: %s (reason %u)", strerror(-c.res), c.reason);
	uint32_t vqp = (uint32_t)c.res;
	printf("connected: virtual QP %u on pooled QP %llu\n", vqp, (unsigned long long)c.aux);
	uint64_t signals = 0;
	CHECK(read(efd, &signals, sizeof(signals)) == sizeof(signals) && signals > 0,
	      "the eventfd was not signalled");

	uint8_t *buf = aligned_alloc(4096, 8192);
	CHECK(buf != NULL, "out of memory");
	memset(buf, 0, 8192);
	memcpy(buf, "hello from C", 12);
	sqe = krcore_get_sqe(&ring);
	krcore_prep_reg_mr(sqe, buf, 8192,
			   krcore_MrAccess_LOCAL_WRITE | krcore_MrAccess_REMOTE_READ |
				   krcore_MrAccess_REMOTE_WRITE | krcore_MrAccess_REMOTE_ATOMIC);
	c = run_one(&ring);
	CHECK(c.res >= 0, "REG_MR: %s", strerror(-c.res));
	uint32_t mr = (uint32_t)c.res;
	uint64_t descriptor = c.aux;

	sqe = krcore_get_sqe(&ring);
	krcore_prep_import_mr(sqe, vqp, (uint64_t)(uintptr_t)buf, 8192, descriptor);
	c = run_one(&ring);
	CHECK(c.res >= 0, "IMPORT_MR: %s", strerror(-c.res));
	uint32_t rmr = (uint32_t)c.res;
	uint64_t base = (uint64_t)(uintptr_t)buf;

	/* One batch: WRITE [0,12) to 4096, READ it back to 2048, FAA +10 at 6000. */
	sqe = krcore_get_sqe(&ring);
	krcore_prep_write(sqe, vqp, mr, buf, 12, rmr, base + 4096);
	sqe->user_data = 10;
	sqe = krcore_get_sqe(&ring);
	krcore_prep_read(sqe, vqp, mr, buf + 2048, 12, rmr, base + 4096);
	sqe->user_data = 11;
	sqe = krcore_get_sqe(&ring);
	krcore_prep_faa(sqe, vqp, mr, buf + 3000, rmr, base + 6000, 10);
	sqe->user_data = 12;
	e = krcore_submit_and_wait(&ring, 3);
	CHECK(e >= 0, "batch: %s", strerror(-e));
	uint32_t head, seen = 0;
	krcore_for_each_cqe(&ring, head, cqe)
	{
		CHECK(cqe->res >= 0, "operation %llu: %s (reason %u)",
		      (unsigned long long)cqe->user_data, strerror(-cqe->res), cqe->reason);
		seen++;
	}
	krcore_cq_advance(&ring, seen);
	CHECK(seen == 3, "%u completions, not 3", seen);
	CHECK(!memcmp(buf + 4096, "hello from C", 12) && !memcmp(buf + 2048, "hello from C", 12),
	      "bytes differ");
	uint64_t word;
	memcpy(&word, buf + 6000, 8);
	CHECK(word == 10, "FAA: %llu", (unsigned long long)word);
	printf("RDMA WRITE, READ and FAA in one batch: bytes checked\n");

	/* Past the imported range: refused by the kernel, with its reason. */
	sqe = krcore_get_sqe(&ring);
	krcore_prep_read(sqe, vqp, mr, buf, 8, rmr, base + 8192);
	c = run_one(&ring);
	CHECK(c.res == -ERANGE && c.reason == KRCORE_REASON_REMOTE_RANGE &&
		      strcmp(krcore_reason_name(c.reason), "remote_range") == 0,
	      "out-of-range READ: res %d reason %u", c.res, c.reason);
	printf("refused: READ past the imported range (ERANGE, %s: %s)\n",
	       krcore_reason_name(c.reason), krcore_reason_describe(c.reason));

	/* A RECV nobody answers: a bounded wait ends with ETIME; DISCONNECT cancels it. */
	sqe = krcore_get_sqe(&ring);
	krcore_prep_recv(sqe, vqp, mr, buf, 64);
	sqe->user_data = 20;
	e = krcore_wait_cqe_timeout(&ring, &cqe, 100 * 1000);
	CHECK(e == -ETIME, "bounded wait: %d", e);
	sqe = krcore_get_sqe(&ring);
	krcore_prep_disconnect(sqe, vqp);
	sqe->user_data = 21;
	e = krcore_submit_and_wait(&ring, 2);
	CHECK(e >= 0, "DISCONNECT: %s", strerror(-e));
	int cancelled = 0, disconnected = 0;
	seen = 0;
	krcore_for_each_cqe(&ring, head, cqe)
	{
		cancelled |= cqe->user_data == 20 && cqe->reason == KRCORE_REASON_CANCELLED;
		disconnected |= cqe->user_data == 21 && cqe->res == 0;
		seen++;
	}
	krcore_cq_advance(&ring, seen);
	CHECK(cancelled && disconnected, "RECV not cancelled by DISCONNECT");
	printf("a RECV waited for 100 ms (ETIME), then cancelled by DISCONNECT\n");

	sqe = krcore_get_sqe(&ring);
	krcore_prep_dereg_mr(sqe, mr);
	c = run_one(&ring);
	CHECK(c.res == 0, "DEREG_MR: %s", strerror(-c.res));
	krcore_queue_exit(&ring);
	close(efd);
	free(buf);
	printf("c client: ok\n");
	return 0;
}
