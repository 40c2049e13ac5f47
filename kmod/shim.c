// SPDX-License-Identifier: GPL-2.0
/*
 * krcore's C shim: the misc device, file operations, mmap entry, ib_client, and
 * wrappers of static inline verbs. No logic lives here; see shim.h.
 */
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/vmalloc.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_verbs.h>

#include "shim.h"

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

/* .owner pins the module while a file is open, so rmmod then fails with EBUSY. */
static const struct file_operations krcore_fops = {
	.owner = THIS_MODULE,
	.open = krcore_fop_open,
	.release = krcore_fop_release,
	.unlocked_ioctl = krcore_fop_ioctl,
	.mmap = krcore_fop_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice krcore_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "krcore",
	.fops = &krcore_fops,
	.mode = 0666,
};

static int krcore_client_add(struct ib_device *dev)
{
	return krcore_rs_dev_add(dev);
}

static void krcore_client_remove(struct ib_device *dev, void *client_data)
{
	krcore_rs_dev_remove(dev);
}

static struct ib_client krcore_client = {
	.name = "krcore",
	.add = krcore_client_add,
	.remove = krcore_client_remove,
};

void *krcore_shim_ring_alloc(size_t size)
{
	return vmalloc_user(size);
}

void krcore_shim_ring_free(void *mem)
{
	vfree(mem);
}

int krcore_shim_ring_mmap(struct vm_area_struct *vma, void *mem)
{
	return remap_vmalloc_range(vma, mem, 0);
}

int krcore_shim_register(void)
{
	int ret = ib_register_client(&krcore_client);

	if (ret)
		return ret;
	ret = misc_register(&krcore_misc);
	if (ret)
		ib_unregister_client(&krcore_client);
	return ret;
}

void krcore_shim_unregister(void)
{
	misc_deregister(&krcore_misc);
	ib_unregister_client(&krcore_client);
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
