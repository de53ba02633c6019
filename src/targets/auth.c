/*-------------------------------------------------------------------------
 *
 * auth.c
 *	  Client authentication of an endpoint (docs/authentication.md):
 *	  reading the auth object (auth_read), as create_endpoint and
 *	  alter_endpoint check it (src/functions/checks.c) and as the relay
 *	  reads the stored object, and the OAuth2 client-credentials grant's
 *	  request and response (RFC 6749, 4.4).
 *
 * The forms: {"bearer": token}; {"client_cert": path, "client_key": path};
 * {"oauth2": {"token_url", "client_id", "client_secret", "scope"}}.  A
 * client certificate may stand beside bearer or oauth2; bearer and oauth2
 * exclude each other, since each sets the Authorization header.  The
 * broker targets' forms: {"username", "password"} (RabbitMQ, NATS, Redis),
 * {"token"} (NATS), {"sasl": {"mechanism", "username", "password"}}
 * (Kafka).  Which keys an endpoint's URL takes is checked by
 * outbox._check_auth_target, once the URL is known.
 *
 * Nothing here keeps state or does I/O (the certificate files are checked
 * in src/functions/checks.c); src/relay/credentials.c applies the forms to
 * requests and keeps the OAuth2 tokens.  No message names a secret's
 * value.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/base64.h"
#include "common/jsonapi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "compat.h"
#include "targets/auth.h"
#include "targets/http.h"

/* May a value be sent in a header or a form: no control characters. */
static bool
printable(const char *s, int len, bool spaces)
{
	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c < 0x20 || c == 0x7f || (!spaces && c == ' '))
			return false;
	}
	return true;
}

/*
 * A scope (RFC 6749, 3.3): scope tokens of %x21 / %x23-5B / %x5D-7E,
 * separated by single spaces.
 */
static bool
scope_valid(const char *s, int len)
{
	for (int i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if (c == ' ' && i > 0 && i < len - 1 && s[i - 1] != ' ')
			continue;
		if (c < 0x21 || c > 0x7e || c == '"' || c == '\\')
			return false;
	}
	return true;
}

/* The string value v of key "what", copied into cxt; or the problem. */
static const char *
take_string(JsonbValue *v, const char *what, int max_len, bool spaces,
			char **out, MemoryContext cxt)
{
	if (v->type != jbvString)
		return psprintf("auth's %s must be a string", what);
	if (v->val.string.len == 0)
		return psprintf("auth's %s must not be empty", what);
	if (v->val.string.len > max_len)
		return psprintf("auth's %s is longer than %d bytes", what, max_len);
	if (!printable(v->val.string.val, v->val.string.len, spaces))
		return psprintf("auth's %s must not contain control characters%s", what,
						spaces ? "" : " or spaces");
	*out = MemoryContextAlloc(cxt, v->val.string.len + 1);
	memcpy(*out, v->val.string.val, v->val.string.len);
	(*out)[v->val.string.len] = '\0';
	return NULL;
}

static bool
key_is(const JsonbValue *k, const char *name)
{
	return k->val.string.len == (int) strlen(name) &&
		memcmp(k->val.string.val, name, k->val.string.len) == 0;
}

/* The oauth2 object's members into out. */
static const char *
read_oauth2(JsonbValue *obj, AuthConfig *out, MemoryContext cxt)
{
	JsonbIterator *it;
	JsonbValue	k;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const char *problem = NULL;

	if (obj->type != jbvBinary || !JsonContainerIsObject(obj->val.binary.data))
		return "auth's oauth2 must be a JSON object";
	it = JsonbIteratorInit(obj->val.binary.data);
	while (problem == NULL && (tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		tok = JsonbIteratorNext(&it, &v, true);
		if (key_is(&k, "token_url"))
			problem = take_string(&v, "oauth2.token_url", OUTBOX_MAX_URL, false,
								  &out->token_url, cxt);
		else if (key_is(&k, "client_id"))
			problem = take_string(&v, "oauth2.client_id", OUTBOX_AUTH_MAX_VALUE, true,
								  &out->client_id, cxt);
		else if (key_is(&k, "client_secret"))
			problem = take_string(&v, "oauth2.client_secret", OUTBOX_AUTH_MAX_VALUE, true,
								  &out->client_secret, cxt);
		else if (key_is(&k, "scope"))
		{
			problem = take_string(&v, "oauth2.scope", OUTBOX_AUTH_MAX_VALUE, true,
								  &out->scope, cxt);
			if (problem == NULL && !scope_valid(out->scope, strlen(out->scope)))
				problem = "auth's oauth2.scope must be scope tokens separated by single spaces";
		}
		else
			problem = psprintf("unknown key \"%s\" in auth's oauth2",
							   pnstrdup(k.val.string.val, Min(k.val.string.len, 64)));
	}
	if (problem == NULL && out->token_url == NULL)
		problem = "auth's oauth2 needs token_url";
	if (problem == NULL && out->client_id == NULL)
		problem = "auth's oauth2 needs client_id";
	if (problem == NULL && out->client_secret == NULL)
		problem = "auth's oauth2 needs client_secret";
	return problem;
}

/* The sasl object's members into out (Kafka). */
static const char *
read_sasl(JsonbValue *obj, AuthConfig *out, MemoryContext cxt)
{
	JsonbIterator *it;
	JsonbValue	k;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const char *problem = NULL;

	if (obj->type != jbvBinary || !JsonContainerIsObject(obj->val.binary.data))
		return "auth's sasl must be a JSON object";
	it = JsonbIteratorInit(obj->val.binary.data);
	while (problem == NULL && (tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		tok = JsonbIteratorNext(&it, &v, true);
		if (key_is(&k, "mechanism"))
		{
			problem = take_string(&v, "sasl.mechanism", 32, false, &out->sasl_mechanism, cxt);
			if (problem == NULL && strcmp(out->sasl_mechanism, "PLAIN") != 0 &&
				strcmp(out->sasl_mechanism, "SCRAM-SHA-256") != 0 &&
				strcmp(out->sasl_mechanism, "SCRAM-SHA-512") != 0)
				problem = "auth's sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512";
		}
		else if (key_is(&k, "username"))
			problem = take_string(&v, "sasl.username", OUTBOX_AUTH_MAX_VALUE, true,
								  &out->username, cxt);
		else if (key_is(&k, "password"))
			problem = take_string(&v, "sasl.password", OUTBOX_AUTH_MAX_VALUE, true,
								  &out->password, cxt);
		else
			problem = psprintf("unknown key \"%s\" in auth's sasl",
							   pnstrdup(k.val.string.val, Min(k.val.string.len, 64)));
	}
	if (problem == NULL && out->sasl_mechanism == NULL)
		problem = "auth's sasl needs mechanism";
	if (problem == NULL && (out->username == NULL || out->password == NULL))
		problem = "auth's sasl needs username and password";
	return problem;
}

/*
 * Read an auth object into out, its strings in cxt: NULL, or what is wrong
 * with it (a message naming the key, never a value).  An empty object
 * leaves every form NULL.  Files and privileges are not looked at here.
 */
const char *
auth_read(Jsonb *auth, AuthConfig *out, MemoryContext cxt)
{
	JsonbIterator *it;
	JsonbValue	k;
	JsonbValue	v;
	JsonbIteratorToken tok;
	const char *problem = NULL;

	memset(out, 0, sizeof(AuthConfig));
	if (!JB_ROOT_IS_OBJECT(auth) || JB_ROOT_IS_SCALAR(auth))
		return "auth must be a JSON object";
	it = JsonbIteratorInit(&auth->root);
	while (problem == NULL && (tok = JsonbIteratorNext(&it, &k, true)) != WJB_DONE)
	{
		if (tok != WJB_KEY)
			continue;
		tok = JsonbIteratorNext(&it, &v, true);
		if (key_is(&k, "bearer"))
			problem = take_string(&v, "bearer", OUTBOX_AUTH_MAX_TOKEN, false, &out->bearer, cxt);
		else if (key_is(&k, "client_cert"))
			problem = take_string(&v, "client_cert", MAXPGPATH - 1, true, &out->client_cert, cxt);
		else if (key_is(&k, "client_key"))
			problem = take_string(&v, "client_key", MAXPGPATH - 1, true, &out->client_key, cxt);
		else if (key_is(&k, "oauth2"))
			problem = read_oauth2(&v, out, cxt);
		else if (key_is(&k, "username") && out->sasl_mechanism == NULL)
			problem = take_string(&v, "username", OUTBOX_AUTH_MAX_VALUE, true, &out->username, cxt);
		else if (key_is(&k, "password") && out->sasl_mechanism == NULL)
			problem = take_string(&v, "password", OUTBOX_AUTH_MAX_VALUE, true, &out->password, cxt);
		else if (key_is(&k, "token"))
			problem = take_string(&v, "token", OUTBOX_AUTH_MAX_TOKEN, false, &out->token, cxt);
		else if (key_is(&k, "sasl") && out->username == NULL && out->password == NULL)
			problem = read_sasl(&v, out, cxt);
		else if (key_is(&k, "sasl") || key_is(&k, "username") || key_is(&k, "password"))
			problem = "auth takes sasl or username and password, not both";
		else
			problem = psprintf("unknown key \"%s\" in auth",
							   pnstrdup(k.val.string.val, Min(k.val.string.len, 64)));
	}
	if (problem == NULL && out->bearer != NULL && out->token_url != NULL)
		problem = "auth takes bearer or oauth2, not both";
	if (problem == NULL && (out->client_cert == NULL) != (out->client_key == NULL))
		problem = "auth's client_cert and client_key go together";
	if (problem == NULL && (out->username == NULL) != (out->password == NULL))
		problem = "auth's username and password go together";
	if (problem == NULL && out->token != NULL && out->username != NULL)
		problem = "auth takes token or username and password, not both";
	return problem;
}

/* Are two auth strings, either of them NULL, the same? */
bool
auth_same(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/* A target's copy of an auth string, in TopMemoryContext; NULL for NULL. */
char *
auth_keep(const char *s)
{
	return s != NULL ? MemoryContextStrdup(TopMemoryContext, s) : NULL;
}

/* Free a target's copy of an auth string, wiped first (it may be a secret). */
void
auth_forget(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	pfree(s);
}

bool
auth_equal(const AuthConfig *a, const AuthConfig *b)
{
	return auth_same(a->bearer, b->bearer) &&
		auth_same(a->client_cert, b->client_cert) &&
		auth_same(a->client_key, b->client_key) &&
		auth_same(a->token_url, b->token_url) &&
		auth_same(a->client_id, b->client_id) &&
		auth_same(a->client_secret, b->client_secret) &&
		auth_same(a->scope, b->scope) &&
		auth_same(a->username, b->username) &&
		auth_same(a->password, b->password) &&
		auth_same(a->token, b->token) &&
		auth_same(a->sasl_mechanism, b->sasl_mechanism);
}

/*
 * application/x-www-form-urlencoded (RFC 6749, Appendix B): unreserved
 * bytes as they are, space as "+", the rest percent-encoded.
 */
static void
form_encode(StringInfo out, const char *s)
{
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			c == '-' || c == '.' || c == '_' || c == '*')
			appendStringInfoChar(out, (char) c);
		else if (c == ' ')
			appendStringInfoChar(out, '+');
		else
			appendStringInfo(out, "%%%02X", c);
	}
}

/* The token request's body: the grant type, and the scope if any. */
char *
auth_token_request_body(const AuthConfig *a)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfoString(&s, "grant_type=client_credentials");
	if (a->scope != NULL)
	{
		appendStringInfoString(&s, "&scope=");
		form_encode(&s, a->scope);
	}
	return s.data;
}

/*
 * The client's credentials as HTTP Basic authentication, which RFC 6749
 * (2.3.1) has every authorization server support and prefers to the
 * request body: client_id and client_secret each form-encoded, joined by
 * ":", in base64.  In current memory; the caller frees it.
 */
char *
auth_basic_header(const AuthConfig *a)
{
	StringInfoData pair;
	char	   *line;
	int			prefix = strlen("Authorization: Basic ");
	int			len;

	initStringInfo(&pair);
	form_encode(&pair, a->client_id);
	appendStringInfoChar(&pair, ':');
	form_encode(&pair, a->client_secret);
	len = pg_b64_enc_len(pair.len);
	line = palloc(prefix + len + 1);
	memcpy(line, "Authorization: Basic ", prefix);
	len = outbox_b64_encode(pair.data, pair.len, line + prefix, len);
	line[prefix + Max(len, 0)] = '\0';
	/* the pair holds the secret: not left behind in memory */
	explicit_bzero(pair.data, pair.len);
	pfree(pair.data);
	return line;
}

/*
 * Reading a token response: the top-level members that matter, each a
 * scalar's text.
 */
typedef struct TokenParse
{
	int			depth;
	const char *field;			/* the member being read at depth 1 */
	char	   *access_token;
	char	   *token_type;
	char	   *expires_in;
	char	   *error;
	JsonTokenType expires_type;
	bool		token_is_string;
	bool		top_is_object;
} TokenParse;

static OutboxJsonResult
tp_nest(void *state)
{
	TokenParse *p = (TokenParse *) state;

	if (p->depth == 0)
		p->top_is_object = true;
	p->depth++;
	return OUTBOX_JSON_OK;
}

static OutboxJsonResult
tp_array(void *state)
{
	((TokenParse *) state)->depth++;
	return OUTBOX_JSON_OK;
}

static OutboxJsonResult
tp_unnest(void *state)
{
	((TokenParse *) state)->depth--;
	return OUTBOX_JSON_OK;
}

static OutboxJsonResult
tp_field(void *state, char *fname, bool isnull)
{
	TokenParse *p = (TokenParse *) state;

	if (p->depth == 1)
		p->field = fname;
	return OUTBOX_JSON_OK;
}

static OutboxJsonResult
tp_scalar(void *state, char *token, JsonTokenType type)
{
	TokenParse *p = (TokenParse *) state;

	if (p->depth != 1 || p->field == NULL)
		return OUTBOX_JSON_OK;
	if (strcmp(p->field, "access_token") == 0)
	{
		p->access_token = token;
		p->token_is_string = type == JSON_TOKEN_STRING;
	}
	else if (strcmp(p->field, "token_type") == 0 && type == JSON_TOKEN_STRING)
		p->token_type = token;
	else if (strcmp(p->field, "expires_in") == 0)
	{
		p->expires_in = token;
		p->expires_type = type;
	}
	else if (strcmp(p->field, "error") == 0 && type == JSON_TOKEN_STRING)
		p->error = token;
	return OUTBOX_JSON_OK;
}

/*
 * How deeply arrays and objects nest in JSON text (strings skipped), up to
 * limit + 1.  The parser recurses per level and raises an error past the
 * stack's depth: a token server must not be able to stop the relay.
 */
static int
json_depth(const char *s, size_t len, int limit)
{
	int			depth = 0;
	int			deepest = 0;
	bool		in_string = false;

	for (size_t i = 0; i < len && deepest <= limit; i++)
	{
		if (in_string)
		{
			if (s[i] == '\\')
				i++;
			else if (s[i] == '"')
				in_string = false;
		}
		else if (s[i] == '"')
			in_string = true;
		else if (s[i] == '[' || s[i] == '{')
			deepest = Max(deepest, ++depth);
		else if (s[i] == ']' || s[i] == '}')
			depth--;
	}
	return deepest;
}

static bool
parse_token_json(char *body, size_t len, TokenParse *p)
{
	JsonLexContext *lex;
	JsonSemAction sem;

	memset(p, 0, sizeof(TokenParse));
	memset(&sem, 0, sizeof(sem));
	sem.semstate = p;
	sem.object_start = tp_nest;
	sem.object_end = tp_unnest;
	sem.array_start = tp_array;
	sem.array_end = tp_unnest;
	sem.object_field_start = tp_field;
	sem.scalar = tp_scalar;
	if (len > OUTBOX_TOKEN_RESPONSE_MAX || json_depth(body, len, 16) > 16)
		return false;
	lex = outbox_make_json_lex(body, len, PG_UTF8, true);
	return pg_parse_json(lex, &sem) == JSON_SUCCESS && p->top_is_object;
}

/*
 * A successful token response (RFC 6749, 5.1): the access token, in
 * current memory, and its lifetime in seconds (0: not said).  False, with
 * why, for a response the relay cannot use: not a JSON object, no
 * access_token, one that cannot go into a header, or a token type other
 * than Bearer.
 */
bool
auth_token_response(char *body, size_t len, char **token, double *expires_in,
					char *why, size_t why_len)
{
	TokenParse	p;
	size_t		tlen;

	*token = NULL;
	*expires_in = 0;
	if (!parse_token_json(body, len, &p))
	{
		strlcpy(why, "the token response is not a JSON object", why_len);
		return false;
	}
	if (p.access_token == NULL || !p.token_is_string || p.access_token[0] == '\0')
	{
		strlcpy(why, "the token response has no access_token", why_len);
		return false;
	}
	tlen = strlen(p.access_token);
	if (tlen > OUTBOX_AUTH_MAX_TOKEN || !printable(p.access_token, tlen, false))
	{
		strlcpy(why, "the token response's access_token cannot be sent in a header", why_len);
		return false;
	}
	if (p.token_type != NULL && pg_strcasecmp(p.token_type, "bearer") != 0)
	{
		snprintf(why, why_len, "the token response's token_type is \"%.32s\", not Bearer",
				 p.token_type);
		return false;
	}
	if (p.expires_in != NULL &&
		(p.expires_type == JSON_TOKEN_NUMBER || p.expires_type == JSON_TOKEN_STRING))
	{
		char	   *end;
		double		v = strtod(p.expires_in, &end);

		if (end != p.expires_in && *end == '\0' && v > 0 && v < 1e9)
			*expires_in = v;
	}
	*token = p.access_token;
	return true;
}

/*
 * The "error" code of an error response (RFC 6749, 5.2), for the attempt
 * log: printable, at most out_len - 1 bytes; "" when there is none.
 */
void
auth_oauth_error(char *body, size_t len, char *out, size_t out_len)
{
	TokenParse	p;
	size_t		n = 0;

	out[0] = '\0';
	if (!parse_token_json(body, len, &p) || p.error == NULL)
		return;
	for (const char *c = p.error; *c && n < out_len - 1 && n < 64; c++)
		out[n++] = ((unsigned char) *c >= 0x20 && (unsigned char) *c < 0x7f) ? *c : '?';
	out[n] = '\0';
}

/* Does the auth set Authorization (bearer, oauth2)?  False for NULL. */
bool
auth_sets_authorization(const EndpointAuth *a)
{
	return a != NULL && (a->cfg.bearer != NULL || a->cfg.token_url != NULL);
}

/*
 * The secrets a receiver's answer must not bring into the attempt log:
 * the bearer token, the OAuth2 tokens (now and before) and the client
 * secret.  Returns how many it put into values (at most 4); 0 for NULL.
 */
int
auth_secrets(const EndpointAuth *a, const char **values)
{
	int			n = 0;

	if (a == NULL)
		return 0;
	if (a->cfg.bearer != NULL)
		values[n++] = a->cfg.bearer;
	if (a->cfg.client_secret != NULL)
		values[n++] = a->cfg.client_secret;
	if (a->token != NULL)
		values[n++] = a->token;
	if (a->old_token != NULL)
		values[n++] = a->old_token;
	return n;
}
