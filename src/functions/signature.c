/*-------------------------------------------------------------------------
 *
 * signature.c
 *	  outbox.verify_signature(): a receiver that is a PostgreSQL database
 *	  checks a Standard Webhooks signature in SQL, with the same HMAC the
 *	  relay signs with (targets/sign.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "targets/sign.h"

PG_FUNCTION_INFO_V1(verify_signature);

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

	outbox_secret_key_checked(secret, key, &keylen);
	/* A month counts as 30 days, as interval comparison does. */
	tol_secs = tolerance->time / USECS_PER_SEC +
		((int64) tolerance->day + (int64) tolerance->month * DAYS_PER_MONTH) * SECS_PER_DAY;
	if (tol_secs < 0)
	{
		explicit_bzero(key, sizeof(key));
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tolerance must not be negative")));
	}

	now_secs = (GetCurrentTimestamp() / USECS_PER_SEC) +
		((POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY);
	if (timestamp < now_secs - tol_secs || timestamp > now_secs + tol_secs)
	{
		explicit_bzero(key, sizeof(key));
		PG_RETURN_BOOL(false);
	}

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
