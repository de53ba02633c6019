/*-------------------------------------------------------------------------
 *
 * credentials.c
 *	  An endpoint's client authentication as the relay applies it
 *	  (docs/authentication.md; DESIGN.md, "Client authentication").
 *
 * A bearer token is a header line made once per load of the endpoint; a
 * client certificate is handed to libcurl with each request (the relay's
 * or a sender's).  An OAuth2 endpoint needs a token first: its first
 * delivery that finds none starts a token request on the relay's own
 * libcurl multi handle (http_submit, under the address policy like any
 * request), and its deliveries wait, without a slot, until the answer
 * (CREDENTIALS_WAIT).  A token is kept until shortly before it expires
 * (expires_in less a tenth of it, at most a minute; an hour when the
 * server does not say) or until the endpoint answers 401 to it.  A fetch
 * that fails makes the deliveries that wait, and those that come within
 * FETCH_AGAIN_MS, fail as "authentication failed" (CREDENTIALS_FAILED):
 * they are recorded and retried on the schedule like any failure.
 *
 * Runs in the relay only, with no transaction open.  An endpoint's
 * EndpointAuth lives in a memory context of its own, replaced when its
 * auth changes; a fetch in flight lives in fetch_cxt and names its
 * endpoint by id and itself by number, so that its answer is dropped when
 * the endpoint or its auth went meanwhile.  No message carries a secret.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "relay/credentials.h"
#include "targets/http.h"

/* After a failed fetch, deliveries fail without one for this long. */
#define FETCH_AGAIN_MS			1000
/* A token whose response gave no expires_in is kept this long at most. */
#define DEFAULT_LIFETIME_MS		(3600 * 1000)
/* A token is fetched again this much before it expires, at most. */
#define MAX_MARGIN_MS			(60 * 1000)

/* A token request in flight. */
typedef struct TokenFetch
{
	HttpRequest req;
	int			endpoint_id;
	uint64		number;
	TimestampTz sent_at;
	char	   *url;
	char	   *body;
	char		answer[OUTBOX_TOKEN_RESPONSE_MAX + 1];
} TokenFetch;

static MemoryContext fetch_cxt = NULL;
static uint64 next_fetch = 1;
/* Token generations, unique in the relay: a 401 names the token it refused. */
static uint32 last_generation = 0;

static void fetch_done(HttpRequest *req);

/* A copy of s in cxt, and s dropped. */
static char *
copy_in(MemoryContext cxt, char *s)
{
	char	   *copy;

	if (s == NULL)
		return NULL;
	copy = MemoryContextStrdup(cxt, s);
	auth_forget(s);
	return copy;
}

/* "Authorization: Bearer <token>" in cxt. */
static char *
bearer_line(MemoryContext cxt, const char *token)
{
	size_t		len = strlen("Authorization: Bearer ") + strlen(token) + 1;
	char	   *line = MemoryContextAlloc(cxt, len);

	snprintf(line, len, "Authorization: Bearer %s", token);
	return line;
}

/*
 * After a load: the endpoint's auth as stored now (cfg, or NULL for
 * none).  cfg's strings are taken over (copied, and freed).  An auth
 * unchanged since the last load keeps its token.
 */
void
credentials_load(RelayEndpoint *ep, AuthConfig *cfg, MemoryContext parent)
{
	EndpointAuth *a;
	MemoryContext cxt;

	if (cfg != NULL && ep->dest.auth != NULL && auth_equal(&ep->dest.auth->cfg, cfg))
	{
		/* the same: keep what we have (its token), drop the row's copy */
		auth_forget(cfg->bearer);
		auth_forget(cfg->client_cert);
		auth_forget(cfg->client_key);
		auth_forget(cfg->token_url);
		auth_forget(cfg->client_id);
		auth_forget(cfg->client_secret);
		auth_forget(cfg->scope);
		auth_forget(cfg->username);
		auth_forget(cfg->password);
		auth_forget(cfg->token);
		auth_forget(cfg->sasl_mechanism);
		return;
	}
	credentials_free(ep);
	if (cfg == NULL)
		return;
	cxt = AllocSetContextCreate(parent, "outbox endpoint auth", ALLOCSET_SMALL_SIZES);
	a = MemoryContextAllocZero(cxt, sizeof(EndpointAuth));
	a->cxt = cxt;
	a->cfg.bearer = copy_in(cxt, cfg->bearer);
	a->cfg.client_cert = copy_in(cxt, cfg->client_cert);
	a->cfg.client_key = copy_in(cxt, cfg->client_key);
	a->cfg.token_url = copy_in(cxt, cfg->token_url);
	a->cfg.client_id = copy_in(cxt, cfg->client_id);
	a->cfg.client_secret = copy_in(cxt, cfg->client_secret);
	a->cfg.scope = copy_in(cxt, cfg->scope);
	a->cfg.username = copy_in(cxt, cfg->username);
	a->cfg.password = copy_in(cxt, cfg->password);
	a->cfg.token = copy_in(cxt, cfg->token);
	a->cfg.sasl_mechanism = copy_in(cxt, cfg->sasl_mechanism);
	if (a->cfg.bearer != NULL)
		a->header = bearer_line(cxt, a->cfg.bearer);
	ep->dest.auth = a;
}

/*
 * Forget an endpoint's auth, its secrets wiped; a fetch in flight for it
 * is dropped at its end.
 */
void
credentials_free(RelayEndpoint *ep)
{
	EndpointAuth *a = ep->dest.auth;

	if (a == NULL)
		return;
	auth_forget(a->cfg.bearer);
	auth_forget(a->cfg.client_secret);
	auth_forget(a->cfg.password);
	auth_forget(a->cfg.token);
	auth_forget(a->token);
	auth_forget(a->old_token);
	auth_forget(a->header);
	MemoryContextDelete(a->cxt);
	ep->dest.auth = NULL;
}

/*
 * Is the endpoint's OAuth2 token being fetched?  Its deliveries wait: for
 * the stream's laggard rule (stream.c, stream_detach_laggards) they count
 * as in flight.
 */
bool
credentials_fetching(const RelayEndpoint *ep)
{
	return ep->dest.auth != NULL && ep->dest.auth->fetch != 0;
}

/* A header list with line appended; on failure it is freed, and an error. */
static struct curl_slist *
append_line(struct curl_slist *h, const char *line)
{
	struct curl_slist *next = curl_slist_append(h, line);

	if (next == NULL)
	{
		curl_slist_free_all(h);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while building a token request.")));
	}
	return next;
}

/* Ask the token URL for a token (RFC 6749, 4.4.2), without waiting. */
static void
start_fetch(RelayEndpoint *ep, TimestampTz now)
{
	EndpointAuth *a = ep->dest.auth;
	TokenFetch *f;
	struct curl_slist *h = NULL;
	char	   *basic;
	const char *lines[] = {
		"Content-Type: application/x-www-form-urlencoded",
		"Accept: application/json",
		"Expect:"
	};

	if (fetch_cxt == NULL)
		fetch_cxt = AllocSetContextCreate(TopMemoryContext, "outbox token fetches",
										  ALLOCSET_DEFAULT_SIZES);
	f = MemoryContextAllocZero(fetch_cxt, sizeof(TokenFetch));
	f->endpoint_id = ep->id;
	f->number = next_fetch++;
	f->sent_at = now;
	f->url = MemoryContextStrdup(fetch_cxt, a->cfg.token_url);
	f->body = MemoryContextStrdup(fetch_cxt, auth_token_request_body(&a->cfg));

	for (int i = 0; i < (int) lengthof(lines); i++)
		h = append_line(h, lines[i]);
	basic = auth_basic_header(&a->cfg);
	h = append_line(h, basic);
	auth_forget(basic);

	f->req.url = f->url;
	f->req.body = f->body;
	f->req.body_len = strlen(f->body);
	f->req.headers = h;
	f->req.timeout_ms = ep->dest.timeout_ms;
	f->req.owner = f;
	f->req.done = fetch_done;
	f->req.whole_body = f->answer;
	f->req.whole_size = OUTBOX_TOKEN_RESPONSE_MAX;
	a->fetch = f->number;
	http_submit(&f->req);
	ereport(DEBUG1,
			(errmsg("outbox fetches an OAuth2 token for endpoint \"%s\"", ep->name)));
}

/*
 * May the endpoint's deliveries be sent now?  An OAuth2 endpoint without
 * a token that is still good starts fetching one (and its deliveries
 * wait), unless a fetch failed within FETCH_AGAIN_MS (they fail).
 */
CredentialState
credentials_state(RelayEndpoint *ep)
{
	EndpointAuth *a = ep->dest.auth;
	TimestampTz now;

	if (a == NULL || a->cfg.token_url == NULL)
		return CREDENTIALS_READY;
	now = GetCurrentTimestamp();
	if (a->token != NULL && now < a->expires_at)
		return CREDENTIALS_READY;
	if (a->fetch != 0)
		return CREDENTIALS_WAIT;
	if (a->failed_at != 0 && !TimestampDifferenceExceeds(a->failed_at, now, FETCH_AGAIN_MS))
		return CREDENTIALS_FAILED;
	start_fetch(ep, now);
	return CREDENTIALS_WAIT;
}

static void
fetch_failed(EndpointAuth *a, const char *why)
{
	snprintf(a->failure, sizeof(a->failure), "authentication failed: %s", why);
	a->failed_at = GetCurrentTimestamp();
}

/* A token from a response: kept, and used from now on. */
static void
take_token(EndpointAuth *a, const char *token, double expires_in, TimestampTz sent_at)
{
	int64		lifetime = expires_in > 0 ? (int64) (expires_in * 1000.0) : DEFAULT_LIFETIME_MS;
	int64		margin = Min(MAX_MARGIN_MS, lifetime / 10);

	auth_forget(a->old_token);
	a->old_token = a->token;
	auth_forget(a->header);
	a->token = MemoryContextStrdup(a->cxt, token);
	a->header = bearer_line(a->cxt, token);
	/* from when it was asked for: the server's clock started before ours */
	a->expires_at = TimestampTzPlusMilliseconds(sent_at, lifetime - margin);
	a->generation = ++last_generation;
	a->failed_at = 0;
}

/*
 * The relay's table of endpoints (credentials_start), and the endpoints
 * whose token request finished since the relay last asked
 * (credentials_next_answered), by id: the webhook target takes a token
 * request's end from libcurl with the deliveries' (webhook_next_done).
 */
static HTAB *endpoint_table = NULL;
static List *answered = NIL;

void
credentials_start(HTAB *endpoints)
{
	endpoint_table = endpoints;
}

/*
 * The next endpoint whose token request finished, whose deliveries may go
 * (or fail) now; NULL when none.
 */
RelayEndpoint *
credentials_next_answered(void)
{
	while (answered != NIL)
	{
		int			id = linitial_int(answered);
		RelayEndpoint *ep;

		answered = list_delete_first(answered);
		ep = hash_search(endpoint_table, &id, HASH_FIND, NULL);
		if (ep != NULL)
			return ep;
	}
	return NULL;
}

/*
 * A token request finished: keep its token, or note why it failed (unless
 * the endpoint's auth changed meanwhile), and note the endpoint, if it is
 * still there, as one whose deliveries may go again
 * (credentials_next_answered).  The request is freed.  Called by the
 * webhook target as it takes the request from http.c (HttpRequest.done).
 */
static void
fetch_done(HttpRequest *req)
{
	TokenFetch *f = (TokenFetch *) req->owner;
	RelayEndpoint *ep = hash_search(endpoint_table, &f->endpoint_id, HASH_FIND, NULL);
	RelayEndpoint *found = ep;
	EndpointAuth *a = ep != NULL ? ep->dest.auth : NULL;
	char		why[CURL_ERROR_SIZE];
	char	   *token;
	double		expires_in;

	f->answer[req->whole_len] = '\0';
	if (a == NULL || a->fetch != f->number)
		ep = NULL;
	else if (req->transport_error)
	{
		snprintf(why, sizeof(why), "the OAuth2 token request failed: %s", req->error);
		fetch_failed(a, why);
	}
	else if (req->status < 200 || req->status >= 300)
	{
		char		code[65];

		auth_oauth_error(f->answer, req->whole_over ? 0 : req->whole_len, code, sizeof(code));
		snprintf(why, sizeof(why), "the OAuth2 token URL answered HTTP %ld%s%s%s", req->status,
				 code[0] ? " (" : "", code, code[0] ? ")" : "");
		fetch_failed(a, why);
	}
	else if (req->whole_over)
		fetch_failed(a, "the OAuth2 token response is longer than 16 kB");
	else if (!auth_token_response(f->answer, req->whole_len, &token, &expires_in, why, sizeof(why)))
		fetch_failed(a, why);
	else
	{
		take_token(a, token, expires_in, f->sent_at);
		auth_forget(token);
	}
	if (a != NULL && a->fetch == f->number)
		a->fetch = 0;
	if (ep != NULL && a->failed_at != 0)
		ereport(DEBUG1,
				(errmsg("outbox could not fetch an OAuth2 token for endpoint \"%s\"", ep->name),
				 errdetail("%s", a->failure)));
	explicit_bzero(f->answer, sizeof(f->answer));
	pfree(f->url);
	pfree(f->body);
	pfree(f);

	/*
	 * The endpoint may go again even when this answer was for an auth it
	 * no longer has (changed or removed while the request ran): it left
	 * the ready list to wait for a token, and only an answer puts it back.
	 */
	if (found != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		answered = lappend_int(answered, found->id);
		MemoryContextSwitchTo(old);
	}
}

/*
 * The endpoint answered 401 to a request that carried token `generation`:
 * if that is the token now, it is dropped, and the next delivery fetches
 * another.
 */
void
credentials_refused(RelayEndpoint *ep, uint32 generation)
{
	EndpointAuth *a = ep->dest.auth;

	if (a == NULL || a->cfg.token_url == NULL || a->token == NULL || a->generation != generation)
		return;
	a->expires_at = 0;
	ereport(DEBUG1,
			(errmsg("outbox endpoint \"%s\" refused its OAuth2 token; a new one is fetched", ep->name)));
}
