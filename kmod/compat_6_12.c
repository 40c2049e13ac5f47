// SPDX-License-Identifier: GPL-2.0
/*
 * What Linux 6.12's kernel crate lacks and 7.x's has, in C for 6.12 builds only (Kbuild
 * compiles this file for a 6.x tree alone; kcompat.rs calls it). On 7.x the same comes
 * from the kernel crate.
 *
 * The inspection files: debugfs krcore/counters and krcore/peers (root only, as
 * debugfs is), their names and texts Rust's (kcompat.rs's DebugFiles).
 */
#include <linux/debugfs.h>
#include <linux/module.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

#include "shim.h"

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

/* Inspection only: the module works without it (debugfs may be absent). File i is
 * names[i], its text Rust's file i. */
void krcore_compat_debugfs_add(const char *const *names, unsigned int n)
{
	unsigned long i;

	krcore_debugfs = debugfs_create_dir("krcore", NULL);
	for (i = 0; i < n; i++)
		debugfs_create_file(names[i], 0444, krcore_debugfs, (void *)i, &krcore_show_fops);
}

/* Waits for readers: none reaches the registry after this. */
void krcore_compat_debugfs_remove(void)
{
	debugfs_remove_recursive(krcore_debugfs);
}
