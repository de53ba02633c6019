/*-------------------------------------------------------------------------
 *
 * sign.c
 *	  Standard Webhooks signing: secrets ("whsec_" + base64 of the key),
 *	  "v1" signatures (base64 of HMAC-SHA256 over "id.timestamp.body"), for
 *	  the relay and for verify_signature() (src/functions/signature.c).
 *
 * Uses PostgreSQL's own HMAC and base64 (common/hmac.h, common/base64.h);
 * no second crypto library.  pg_hmac_create() may register with the
 * current resource owner, so callers need one (any transaction has it).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/base64.h"
#include "common/hmac.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "targets/sign.h"

/*
 * Decode a "whsec_" secret into key (at least OUTBOX_KEY_MAX bytes of room).
 * Returns false unless it is well formed with a key of OUTBOX_KEY_MIN to
 * OUTBOX_KEY_MAX bytes.
 */
bool
outbox_secret_key(const char *secret, int len, uint8 *key, int *keylen)
{
	char		buf[OUTBOX_KEY_MAX * 2];
	int			n;

	if (len <= (int) OUTBOX_SECRET_PREFIX_LEN ||
		strncmp(secret, OUTBOX_SECRET_PREFIX, OUTBOX_SECRET_PREFIX_LEN) != 0)
		return false;
	secret += OUTBOX_SECRET_PREFIX_LEN;
	len -= OUTBOX_SECRET_PREFIX_LEN;
	if (len % 4 != 0 || pg_b64_dec_len(len) > (int) sizeof(buf))
		return false;
	for (int i = 0; i < len; i++)
		if (isspace((unsigned char) secret[i]))
			return false;
	n = outbox_b64_decode(secret, len, buf, sizeof(buf));
	if (n >= OUTBOX_KEY_MIN && n <= OUTBOX_KEY_MAX)
	{
		memcpy(key, buf, n);
		*keylen = n;
	}
	explicit_bzero(buf, sizeof(buf));
	return n >= OUTBOX_KEY_MIN && n <= OUTBOX_KEY_MAX;
}

/* The key of a secret into key, as outbox_secret_key; an error if invalid. */
void
outbox_secret_key_checked(text *secret, uint8 *key, int *keylen)
{
	if (!outbox_secret_key(VARDATA_ANY(secret), VARSIZE_ANY_EXHDR(secret), key, keylen))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid signing secret"),
				 errdetail("A secret is \"whsec_\" followed by the base64 encoding of %d to %d bytes.",
						   OUTBOX_KEY_MIN, OUTBOX_KEY_MAX)));
}

/*
 * Compute the "v1" signature of one request into signature
 * (OUTBOX_SIGNATURE_LEN bytes, NUL-terminated base64, without "v1,").
 */
void
outbox_sign(const uint8 *key, int keylen,
			const char *msgid, int msgidlen, int64 timestamp,
			const char *body, size_t bodylen,
			char *signature)
{
	pg_hmac_ctx *ctx;
	uint8		mac[32];
	char		ts[32];
	int			tslen;
	int			n;

	tslen = snprintf(ts, sizeof(ts), "." INT64_FORMAT ".", timestamp);
	ctx = pg_hmac_create(PG_SHA256);
	if (ctx == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while creating HMAC context.")));
	if (pg_hmac_init(ctx, key, keylen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) msgid, msgidlen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) ts, tslen) < 0 ||
		pg_hmac_update(ctx, (const uint8 *) body, bodylen) < 0 ||
		pg_hmac_final(ctx, mac, sizeof(mac)) < 0)
	{
		const char *err = pg_hmac_error(ctx);

		pg_hmac_free(ctx);
		elog(ERROR, "could not compute HMAC-SHA256: %s", err);
	}
	pg_hmac_free(ctx);
	n = outbox_b64_encode(mac, sizeof(mac), signature, OUTBOX_SIGNATURE_LEN - 1);
	if (n < 0)
		elog(ERROR, "could not encode signature");
	signature[n] = '\0';
}
