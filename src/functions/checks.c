/*-------------------------------------------------------------------------
 *
 * checks.c
 *	  The checks of an endpoint's settings that create_endpoint() and
 *	  alter_endpoint() call: its URL, client authentication, format and
 *	  signing secret (outbox._check_url, _check_auth, _check_auth_headers,
 *	  _check_format, _check_secret, _new_secret).
 *
 * What a setting means belongs to the target that uses it (src/targets/):
 * each target reads its own URLs, auth.c reads auth objects, format.c
 * knows its formats, sign.c its secrets.  This file is the SQL surface:
 * it turns their answers into errors with SQLSTATEs, and decides who may
 * name a file the server reads.  Runs in any backend; nothing is written.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "catalog/pg_authid.h"
#include "common/base64.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "compat.h"
#include "targets/auth.h"
#include "targets/format.h"
#include "targets/http.h"
#include "targets/sign.h"
#include "targets/target.h"

PG_FUNCTION_INFO_V1(outbox_check_url);
PG_FUNCTION_INFO_V1(outbox_check_auth);
PG_FUNCTION_INFO_V1(outbox_check_auth_headers);
PG_FUNCTION_INFO_V1(outbox_check_format);
PG_FUNCTION_INFO_V1(outbox_check_secret);
PG_FUNCTION_INFO_V1(outbox_new_secret);

/*
 * outbox._check_url(text) returns text: the endpoint URL as the endpoint
 * keeps it, checked by the target its scheme names (targets/target.c):
 * kafka://, kafkas://, nats://, tls:// (NATS over TLS), amqp:// and amqps://
 * by the broker targets, any other as a webhook's, normalized by libcurl.
 */
Datum
outbox_check_url(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(target_check_url(text_to_cstring(PG_GETARG_TEXT_PP(0)))));
}

/*
 * Whether a PEM key file is encrypted: PKCS#8's "ENCRYPTED PRIVATE KEY"
 * or the traditional "Proc-Type: 4,ENCRYPTED" header, in its first 4 kB.
 */
static bool
key_encrypted(const char *path)
{
	char		head[4097];
	size_t		len;
	FILE	   *f = AllocateFile(path, "r");

	if (f == NULL)
		return false;
	len = fread(head, 1, sizeof(head) - 1, f);
	FreeFile(f);
	head[len] = '\0';
	return strstr(head, "ENCRYPTED") != NULL;
}

/*
 * A client certificate or key file: an absolute path to a regular file
 * this server (the relay runs as the same user) can read, and a key that
 * needs no passphrase.
 */
static void
check_file(const char *path, const char *what)
{
	struct stat st;

	if (!is_absolute_path(path))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("auth's %s must be an absolute path", what)));
	if (stat(path, &st) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("auth's %s \"%s\" cannot be read: %m", what, path)));
	if (!S_ISREG(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("auth's %s \"%s\" is not a regular file", what, path)));
	if (access(path, R_OK) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("auth's %s \"%s\" cannot be read: %m", what, path),
				 errdetail("The file must be readable by the operating system user the server runs as.")));
	if (strcmp(what, "client_key") == 0 && key_encrypted(path))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("auth's client_key \"%s\" is encrypted", path),
				 errdetail("The relay has no passphrase for it (OpenSSL would ask for one on the server's terminal)."),
				 errhint("Give a key without a passphrase, readable only by the operating system user the server runs as.")));
}

/*
 * outbox._check_auth(jsonb) returns jsonb: the auth object, checked; NULL
 * for NULL or '{}' (no client authentication).  A client certificate and
 * key are files the server reads and presents to a receiver: naming them
 * takes the privileges of pg_read_server_files, as COPY FROM a file does.
 */
Datum
outbox_check_auth(PG_FUNCTION_ARGS)
{
	Jsonb	   *auth;
	AuthConfig	a;
	const char *problem;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	auth = PG_GETARG_JSONB_P(0);
	problem = auth_read(auth, &a, CurrentMemoryContext);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s", problem),
				 errdetail(OUTBOX_AUTH_FORMS)));
	if (a.bearer == NULL && a.client_cert == NULL && a.token_url == NULL &&
		a.username == NULL && a.token == NULL)
		PG_RETURN_NULL();
	if (a.token_url != NULL)
		(void) http_check_url(a.token_url, "oauth2 token_url");
	if (a.client_cert != NULL)
	{
		if (!has_privs_of_role(GetUserId(), ROLE_PG_READ_SERVER_FILES))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to name a client certificate"),
					 errdetail("Only roles with privileges of the \"pg_read_server_files\" role may make the server read a file.")));
		check_file(a.client_cert, "client_cert");
		check_file(a.client_key, "client_key");
	}
	PG_RETURN_JSONB_P(auth);
}

/*
 * outbox._check_auth_headers(auth jsonb, headers jsonb): an endpoint whose
 * auth sets the Authorization header (bearer, oauth2) may not have one of
 * its own as well.  The auth object is one _check_auth passed.
 */
Datum
outbox_check_auth_headers(PG_FUNCTION_ARGS)
{
	Jsonb	   *auth;
	Jsonb	   *headers;
	JsonbIterator *it;
	JsonbValue	k;
	JsonbIteratorToken tok;
	JsonbValue	key;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		PG_RETURN_VOID();
	auth = PG_GETARG_JSONB_P(0);
	headers = PG_GETARG_JSONB_P(1);
	if (!JB_ROOT_IS_OBJECT(auth) || !JB_ROOT_IS_OBJECT(headers))
		PG_RETURN_VOID();
	key.type = jbvString;
	key.val.string.val = "bearer";
	key.val.string.len = 6;
	if (findJsonbValueFromContainer(&auth->root, JB_FOBJECT, &key) == NULL)
	{
		key.val.string.val = "oauth2";
		if (findJsonbValueFromContainer(&auth->root, JB_FOBJECT, &key) == NULL)
			PG_RETURN_VOID();
	}
	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
		if (tok == WJB_KEY && k.val.string.len == 13 &&
			pg_strncasecmp(k.val.string.val, "authorization", 13) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("an endpoint with auth's %s cannot have an Authorization header of its own",
							key.val.string.val),
					 errdetail("The relay sets Authorization from auth."),
					 errhint("Remove Authorization from the endpoint's headers, or remove auth (auth => '{}').")));
	PG_RETURN_VOID();
}

/*
 * outbox._check_format(format text, headers jsonb) returns text: the
 * format, checked, and the endpoint's headers (already checked as
 * headers) against it: in cloudevents-binary they may not name an
 * attribute's ce-* header.
 */
Datum
outbox_check_format(PG_FUNCTION_ARGS)
{
	char	   *name;
	OutboxFormat format;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("format must not be NULL")));
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	if (!outbox_format_from_name(name, &format))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid format \"%s\"", name),
				 errdetail("A format is \"standard-webhooks\", \"cloudevents\" or \"cloudevents-binary\".")));
	if (format == OUTBOX_FORMAT_CLOUDEVENTS_BINARY && !PG_ARGISNULL(1))
	{
		Jsonb	   *headers = PG_GETARG_JSONB_P(1);
		JsonbIterator *it = JsonbIteratorInit(&headers->root);
		JsonbValue	v;
		JsonbIteratorToken tok;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
			if (tok == WJB_KEY && outbox_format_ce_header(v.val.string.val, v.val.string.len))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header \"%s\" is set by outbox itself in format \"%s\"",
								pnstrdup(v.val.string.val, v.val.string.len), name),
						 errdetail("In CloudEvents binary mode outbox sends the attributes specversion, id, source, type, subject and time as ce-* headers, and datacontenttype as Content-Type.")));
	}
	PG_RETURN_TEXT_P(cstring_to_text(name));
}

/* outbox._check_secret(text) returns text: the secret, checked. */
Datum
outbox_check_secret(PG_FUNCTION_ARGS)
{
	text	   *secret = PG_GETARG_TEXT_PP(0);
	uint8		key[OUTBOX_KEY_MAX];
	int			keylen;

	outbox_secret_key_checked(secret, key, &keylen);
	explicit_bzero(key, sizeof(key));
	PG_RETURN_TEXT_P(secret);
}

/* outbox._new_secret() returns text: "whsec_" + base64 of 32 random bytes. */
Datum
outbox_new_secret(PG_FUNCTION_ARGS)
{
	uint8		key[OUTBOX_NEW_KEY_LEN];
	char		out[OUTBOX_SECRET_PREFIX_LEN + 64];
	int			n;

	if (!pg_strong_random(key, sizeof(key)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random signing secret")));
	memcpy(out, OUTBOX_SECRET_PREFIX, OUTBOX_SECRET_PREFIX_LEN);
	n = outbox_b64_encode(key, sizeof(key), out + OUTBOX_SECRET_PREFIX_LEN, sizeof(out) - OUTBOX_SECRET_PREFIX_LEN - 1);
	explicit_bzero(key, sizeof(key));
	if (n < 0)
		elog(ERROR, "could not encode signing secret");
	PG_RETURN_TEXT_P(cstring_to_text_with_len(out, OUTBOX_SECRET_PREFIX_LEN + n));
}
