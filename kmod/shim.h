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

struct ib_device;
struct vm_area_struct;

/* ---- Implemented in Rust (file.rs, device.rs) ---- */

/* open(2) of /dev/krcore: allocate the per-file context into *priv. */
int krcore_rs_open(void **priv);
/* Last close of the file: tear the context down. */
void krcore_rs_release(void *priv);
/* ioctl(2): the command is decoded and validated in Rust. */
long krcore_rs_ioctl(void *priv, unsigned int cmd, unsigned long arg);
/* mmap(2) at page offset pgoff, len bytes. */
int krcore_rs_mmap(void *priv, struct vm_area_struct *vma, unsigned long pgoff,
		   unsigned long len);
/* ib_client add/remove: a device appeared or is going away. */
int krcore_rs_dev_add(struct ib_device *dev);
void krcore_rs_dev_remove(struct ib_device *dev);

/* ---- Implemented in C (shim.c) ---- */

/* Port attributes Rust needs, copied out of struct ib_port_attr. */
struct krcore_port_attr {
	u32 state;
	u32 active_mtu;
	u32 gid_tbl_len;
	u32 link_layer;
};

/* Ring memory: zeroed, page-aligned, mappable to user space (vmalloc_user), or NULL. */
void *krcore_shim_ring_alloc(size_t size);
void krcore_shim_ring_free(void *mem);
/* Map ring memory into a VMA (remap_vmalloc_range); the VMA may not exceed it. */
int krcore_shim_ring_mmap(struct vm_area_struct *vma, void *mem);

/* Register the misc device /dev/krcore and the ib_client; undo both. */
int krcore_shim_register(void);
void krcore_shim_unregister(void);

const char *krcore_shim_dev_name(struct ib_device *dev);
u32 krcore_shim_dev_index(struct ib_device *dev);
u32 krcore_shim_first_port(struct ib_device *dev);
u32 krcore_shim_last_port(struct ib_device *dev);
int krcore_shim_query_port(struct ib_device *dev, u32 port, struct krcore_port_attr *out);
/* One GID table entry: 0 and the GID (16 bytes) and its type, or a negative errno. */
int krcore_shim_query_gid(struct ib_device *dev, u32 port, u32 index, u8 *gid,
			  u32 *gid_type);

#endif /* KRCORE_SHIM_H */
