/*-------------------------------------------------------------------------
 *
 * sign.c
 *	  Standard Webhooks signing: secrets ("whsec_" + base64 of the key),
 *	  "v1" signatures (base64 of HMAC-SHA256 over "id.timestamp.body") and
 *	  their verification.
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

#include "sign.h"

PG_FUNCTION_INFO_V1(outbox_check_secret);
PG_FUNCTION_INFO_V1(outbox_new_secret);
PG_FUNCTION_INFO_V1(verify_signature);

#define PREFIX_LEN	(sizeof(OUTBOX_SECRET_PREFIX) - 1)

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

	if (len <= (int) PREFIX_LEN ||
		strncmp(secret, OUTBOX_SECRET_PREFIX, PREFIX_LEN) != 0)
		return false;
	secret += PREFIX_LEN;
	len -= PREFIX_LEN;
	if (len % 4 != 0 || pg_b64_dec_len(len) > (int) sizeof(buf))
		return false;
	for (int i = 0; i < len; i++)
		if (isspace((unsigned char) secret[i]))
			return false;
	n = pg_b64_decode(secret, len, buf, sizeof(buf));
	if (n < OUTBOX_KEY_MIN || n > OUTBOX_KEY_MAX)
		return false;
	memcpy(key, buf, n);
	*keylen = n;
	return true;
}

static void
check_secret(text *secret, uint8 *key, int *keylen)
{
	if (!outbox_secret_key(VARDATA_ANY(secret), VARSIZE_ANY_EXHDR(secret), key, keylen))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid signing secret"),
				 errdetail("A secret is \"whsec_\" followed by the base64 encoding of %d to %d bytes.",
						   OUTBOX_KEY_MIN, OUTBOX_KEY_MAX)));
}

/* outbox._check_secret(text) returns text: the secret, checked. */
Datum
outbox_check_secret(PG_FUNCTION_ARGS)
{
	text	   *secret = PG_GETARG_TEXT_PP(0);
	uint8		key[OUTBOX_KEY_MAX];
	int			keylen;

	check_secret(secret, key, &keylen);
	explicit_bzero(key, sizeof(key));
	PG_RETURN_TEXT_P(secret);
}

/* outbox._new_secret() returns text: "whsec_" + base64 of 32 random bytes. */
Datum
outbox_new_secret(PG_FUNCTION_ARGS)
{
	uint8		key[OUTBOX_NEW_KEY_LEN];
	char		out[PREFIX_LEN + 64];
	int			n;

	if (!pg_strong_random(key, sizeof(key)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random signing secret")));
	memcpy(out, OUTBOX_SECRET_PREFIX, PREFIX_LEN);
	n = pg_b64_encode((char *) key, sizeof(key), out + PREFIX_LEN, sizeof(out) - PREFIX_LEN - 1);
	explicit_bzero(key, sizeof(key));
	if (n < 0)
		elog(ERROR, "could not encode signing secret");
	PG_RETURN_TEXT_P(cstring_to_text_with_len(out, PREFIX_LEN + n));
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
	n = pg_b64_encode((char *) mac, sizeof(mac), signature, OUTBOX_SIGNATURE_LEN - 1);
	if (n < 0)
		elog(ERROR, "could not encode signature");
	signature[n] = '\0';
}

/* Compare two strings of equal length without an early exit. */
static bool
equal_constant_time(const char *a, const char *b, size_t len)
{
	unsigned char diff = 0;

	for (size_t i = 0; i < len; i++)
		diff |= (unsigned char) a[i] ^ (unsigned char) b[i];
	return diff == 0;
}

/*
 * outbox.verify_signature(secret, message_id, timestamp, body, signature,
 * tolerance) returns boolean: true when one of the space-separated "v1,..."
 * entries of signature matches and timestamp is within tolerance of now.
 */
Datum
verify_signature(PG_FUNCTION_ARGS)
{
	text	   *secret = PG_GETARG_TEXT_PP(0);
	text	   *msgid = PG_GETARG_TEXT_PP(1);
	int64		timestamp = PG_GETARG_INT64(2);
	text	   *body = PG_GETARG_TEXT_PP(3);
	char	   *sigs = text_to_cstring(PG_GETARG_TEXT_PP(4));
	Interval   *tolerance = PG_GETARG_INTERVAL_P(5);
	uint8		key[OUTBOX_KEY_MAX];
	int			keylen;
	char		expected[OUTBOX_SIGNATURE_LEN];
	int64		tol_secs;
	int64		now_secs;
	bool		match = false;
	char	   *saveptr = NULL;

	check_secret(secret, key, &keylen);
	/* A month counts as 30 days, as interval comparison does. */
	tol_secs = tolerance->time / USECS_PER_SEC +
		((int64) tolerance->day + (int64) tolerance->month * DAYS_PER_MONTH) * SECS_PER_DAY;
	if (tol_secs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tolerance must not be negative")));

	now_secs = (GetCurrentTimestamp() / USECS_PER_SEC) +
		((POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY);
	if (timestamp < now_secs - tol_secs || timestamp > now_secs + tol_secs)
		PG_RETURN_BOOL(false);

	outbox_sign(key, keylen, VARDATA_ANY(msgid), VARSIZE_ANY_EXHDR(msgid), timestamp,
				VARDATA_ANY(body), VARSIZE_ANY_EXHDR(body), expected);
	explicit_bzero(key, sizeof(key));

	for (char *tok = strtok_r(sigs, " ", &saveptr); tok != NULL;
		 tok = strtok_r(NULL, " ", &saveptr))
	{
		if (strncmp(tok, "v1,", 3) != 0)
			continue;
		tok += 3;
		if (strlen(tok) == strlen(expected) &&
			equal_constant_time(tok, expected, strlen(expected)))
			match = true;
	}
	PG_RETURN_BOOL(match);
}
