// SPDX-License-Identifier: GPL-2.0
/*
 * The cluster key, and the tags kernels prove they hold it with (abi's cluster::auth
 * says the protocol; cm.c carries it in the connection requests, refusals and
 * accepts). The key never leaves this file: a tag is HMAC-SHA256 through the kernel's
 * crypto API over a transcript that names both nonces and the connection (abi's
 * cluster::hello lays it out), cut to KRCORE_CM_TAG_LEN bytes.
 *
 * The transform is keyed once at load and only read after (crypto_shash_tfm_digest
 * keeps its state on the caller's stack), so any number of handlers and dials use it
 * at once with no lock.
 */
#include <crypto/hash.h>
#include <crypto/utils.h>
#include <linux/hex.h>
#include <linux/moduleparam.h>
#include <linux/slab.h>
#include <linux/string.h>

#include "shim.h"

static char *cluster_key;
module_param(cluster_key, charp, 0400);
MODULE_PARM_DESC(cluster_key,
		 "The secret the cluster's kernels share, 32-128 hex digits (16-64 bytes; e.g. `openssl rand -hex 32`). Without it this node joins no cluster. Readable by root only.");

#define KRCORE_CM_KEY_MIN 16
#define KRCORE_CM_KEY_MAX 64

static struct crypto_shash *krcore_cm_mac;

int krcore_cm_auth_init(void)
{
	u8 key[KRCORE_CM_KEY_MAX];
	const char *hex = cluster_key;
	size_t digits;
	int ret;

	if (!hex || !*hex)
		return -ENOKEY;
	digits = strlen(hex);
	if (digits >= 2 && hex[0] == '0' && (hex[1] | 0x20) == 'x') {
		hex += 2;
		digits -= 2;
	}
	if (digits % 2 || digits < 2 * KRCORE_CM_KEY_MIN || digits > 2 * KRCORE_CM_KEY_MAX ||
	    hex2bin(key, hex, digits / 2)) {
		pr_err("krcore: cluster_key must be %d-%d hex digits (at least 128 bits): make one with `openssl rand -hex 32`\n",
		       2 * KRCORE_CM_KEY_MIN, 2 * KRCORE_CM_KEY_MAX);
		ret = -EINVAL;
		goto out;
	}
	krcore_cm_mac = crypto_alloc_shash("hmac(sha256)", 0, 0);
	if (IS_ERR(krcore_cm_mac)) {
		ret = PTR_ERR(krcore_cm_mac);
		krcore_cm_mac = NULL;
		pr_err("krcore: no hmac(sha256) in this kernel (CONFIG_CRYPTO_HMAC, CONFIG_CRYPTO_SHA256): error %d\n",
		       ret);
		goto out;
	}
	ret = crypto_shash_setkey(krcore_cm_mac, key, digits / 2);
	if (ret) {
		crypto_free_shash(krcore_cm_mac);
		krcore_cm_mac = NULL;
	}
out:
	memzero_explicit(key, sizeof(key));
	return ret;
}

void krcore_cm_auth_exit(void)
{
	if (krcore_cm_mac)
		crypto_free_shash(krcore_cm_mac);
	krcore_cm_mac = NULL;
}

bool krcore_cm_auth_ready(void)
{
	return krcore_cm_mac;
}

int krcore_cm_tag(enum krcore_cm_role role, const struct krcore_cm_bind *b, u8 *tag)
{
	u8 t[KRCORE_CM_TRANSCRIPT_LEN];
	u8 full[32];
	int ret;

	if (!krcore_cm_mac)
		return -ENOKEY;
	krcore_rs_cm_transcript(role, b, t);
	ret = crypto_shash_tfm_digest(krcore_cm_mac, t, sizeof(t), full);
	if (!ret)
		memcpy(tag, full, KRCORE_CM_TAG_LEN);
	memzero_explicit(full, sizeof(full));
	return ret;
}

/*
 * The MetaServer's name hash key (abi's meta::tables::Tables::key): a MAC with the
 * cluster key over a label no transcript starts with, so every member derives the same
 * key and nobody without the cluster key can predict where a name lands. Zero without
 * a cluster key (no cluster: nobody to share names with).
 */
void krcore_cm_name_key(u8 *out)
{
	static const char label[] = "krcore: MetaServer name hash key, v1";
	u8 full[32];

	memset(out, 0, KRCORE_CM_NAME_KEY_LEN);
	if (krcore_cm_mac &&
	    !crypto_shash_tfm_digest(krcore_cm_mac, label, sizeof(label) - 1, full))
		memcpy(out, full, KRCORE_CM_NAME_KEY_LEN);
	memzero_explicit(full, sizeof(full));
}

bool krcore_cm_tag_ok(enum krcore_cm_role role, const struct krcore_cm_bind *b, const u8 *tag)
{
	u8 want[KRCORE_CM_TAG_LEN];

	return !krcore_cm_tag(role, b, want) && !crypto_memneq(want, tag, sizeof(want));
}
