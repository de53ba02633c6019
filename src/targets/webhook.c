/*-------------------------------------------------------------------------
 *
 * webhook.c
 *	  The webhook target: a request as a signed HTTP POST (Standard
 *	  Webhooks), sent through libcurl (http.c) by the relay or one of the
 *	  sender processes that registered (webhook.h), and its answer as a
 *	  TargetResult: an outcome by the Standard Webhooks rules, the HTTP
 *	  status and response as detail.
 *
 * The request carries the headers of the endpoint's format, the signature
 * over the body as sent (with the old key too while a secret rotates), the
 * endpoint's own headers, then the event's, except those the endpoint or
 * the format sets itself.  The response kept for the attempt log has the
 * endpoint's header values taken out (redact_response).  Runs in the
 * relay, with no transaction open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <time.h>

#include "utils/resowner.h"

#include "guc.h"
#include "targets/auth.h"
#include "targets/format.h"
#include "targets/http.h"
#include "targets/sign.h"
#include "targets/target.h"
#include "targets/webhook.h"

/* pg_hmac's resource owner: the relay signs with no transaction open. */
static ResourceOwner signing_owner = NULL;

/* The relay's senders, once they registered; NULL: none. */
static const WebhookSenders *senders = NULL;

/*
 * Send requests through these from now on, when they take them
 * (relay/sender.c, at the relay's start).
 */
void
webhook_use_senders(const WebhookSenders *s)
{
	senders = s;
}

static struct curl_slist *
add_header(struct curl_slist *list, const char *line)
{
	struct curl_slist *next = curl_slist_append(list, line);

	if (next == NULL)
	{
		curl_slist_free_all(list);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while building request headers.")));
	}
	return next;
}

/*
 * Step through an endpoint's "name: value\n" header lines: the next line's
 * name and value (without the ": " between them), false after the last.
 */
static bool
next_header_line(const char **lines, const char **name, size_t *name_len,
				 const char **value, size_t *value_len)
{
	const char *l = *lines;
	size_t		len = strcspn(l, "\n");

	if (*l == '\0')
		return false;
	*lines = l[len] == '\n' ? l + len + 1 : l + len;
	*name = l;
	*name_len = strcspn(l, ":\n");
	*value = l + Min(*name_len + 1, len);
	while (*value < l + len && **value == ' ')
		(*value)++;
	*value_len = l + len - *value;
	return true;
}

/*
 * Does the endpoint set the header of this "name: value" line itself?
 * Names compare case-insensitively, as HTTP's do.  An event's header of
 * such a name is not sent: an application that may only emit must not
 * override (or add a second) Authorization, say, of the endpoint's.
 */
static bool
endpoint_sets_header(const TargetEndpoint *ep, const char *line)
{
	size_t		len = strcspn(line, ":");
	const char *lines = ep->headers;
	const char *name;
	const char *value;
	size_t		name_len;
	size_t		value_len;

	while (next_header_line(&lines, &name, &name_len, &value, &value_len))
		if (name_len == len && pg_strncasecmp(name, line, len) == 0)
			return true;
	return false;
}

/*
 * Shorter endpoint header values are not taken for secrets; within a value
 * of several words ("Bearer <token>"), words of REDACT_WORD_LEN or more are
 * taken for secrets of their own.
 */
#define REDACT_MIN_LEN		4
#define REDACT_WORD_LEN		8
#define REDACTED			"[redacted]"

/*
 * Replace every occurrence of value[0..len) in the kept response by
 * "[redacted]", and the start of one (REDACT_MIN_LEN bytes or more) where
 * the kept text was cut off (truncated).  The response's bytes were made
 * printable as they were kept (http_kept_char), so the value is compared
 * the same way.
 */
static void
redact(HttpRequest *req, const char *value, size_t len, bool truncated)
{
	char		out[OUTBOX_RESPONSE_KEEP + 1];
	size_t		n = 0;
	size_t		i = 0;
	bool		changed = false;

	while (i < req->response_len)
	{
		size_t		m = 0;

		while (m < len && i + m < req->response_len &&
			   req->response[i + m] == http_kept_char(value[m]))
			m++;
		if (m == len ||
			(truncated && i + m == req->response_len && m >= REDACT_MIN_LEN))
		{
			size_t		r = Min(strlen(REDACTED), OUTBOX_RESPONSE_KEEP - n);

			memcpy(out + n, REDACTED, r);
			n += r;
			i += m;
			changed = true;
		}
		else if (n < OUTBOX_RESPONSE_KEEP)
			out[n++] = req->response[i++];
		else
			i++;
	}
	if (changed)
	{
		memcpy(req->response, out, n);
		req->response[n] = '\0';
		req->response_len = n;
	}
}

/*
 * Take the endpoint's header values (its Authorization, say) out of the
 * response kept for outbox.attempts: a receiver that echoes its request,
 * or only the token in it, would put them there.
 */
static void
redact_response(const TargetEndpoint *ep, HttpRequest *req)
{
	bool		truncated = req->response_cut;
	const char *lines = ep->headers;
	const char *name;
	const char *value;
	size_t		name_len;
	size_t		value_len;

	const char *secrets[4];
	int			nsecrets;

	if (req->response_len == 0)
		return;
	/* its client authentication's: a bearer token, OAuth2 tokens */
	nsecrets = auth_secrets(ep->auth, secrets);
	for (int i = 0; i < nsecrets; i++)
		if (strlen(secrets[i]) >= REDACT_MIN_LEN)
			redact(req, secrets[i], strlen(secrets[i]), truncated);
	while (next_header_line(&lines, &name, &name_len, &value, &value_len))
	{
		const char *word = value;

		if (value_len < REDACT_MIN_LEN)
			continue;
		redact(req, value, value_len, truncated);
		if (memchr(value, ' ', value_len) == NULL)
			continue;
		/* the words of a value of several, each on its own */
		while (word < value + value_len)
		{
			size_t		word_len = strcspn(word, " \n");

			if (word + word_len > value + value_len)
				word_len = value + value_len - word;
			if (word_len >= REDACT_WORD_LEN)
				redact(req, word, word_len, truncated);
			word += word_len;
			while (word < value + value_len && *word == ' ')
				word++;
		}
	}
}

/*
 * Build the signed HTTP request of one attempt and hand it to libcurl: the
 * headers of its endpoint's format, the signature over the body as sent
 * (in every format), the endpoint's headers and its Authorization from
 * auth, then the event's, except those the endpoint or the format sets
 * itself; and its client certificate.  An OAuth2 endpoint has its token:
 * the relay waits for one before it submits.  The HTTP request, with its
 * own copies of the endpoint's URL and certificate paths, is allocated in
 * current memory, which the caller keeps until next_done.
 */
static void
webhook_submit(TargetRequest *tr, int relay_in_flight)
{
	const TargetEndpoint *ep = tr->endpoint;
	struct curl_slist *h = NULL;
	int64		ts = (int64) time(NULL);
	size_t		body_len = strlen(tr->body);
	char		sig[OUTBOX_SIGNATURE_LEN];
	char		old_sig[OUTBOX_SIGNATURE_LEN];
	char		line[256];
	char	   *format_lines[OUTBOX_FORMAT_MAX_HEADERS];
	int			n_format_lines;
	EventParts	parts = {0};
	ResourceOwner save = CurrentResourceOwner;
	HttpRequest *req;

	if (signing_owner == NULL)
		signing_owner = ResourceOwnerCreate(NULL, "outbox webhook signing");
	/* pg_hmac may register with a resource owner; we have no transaction. */
	CurrentResourceOwner = signing_owner;
	outbox_sign(ep->key, ep->keylen, tr->event_id_str, strlen(tr->event_id_str), ts,
				tr->body, body_len, sig);
	if (ep->old_keylen > 0)
		outbox_sign(ep->old_key, ep->old_keylen, tr->event_id_str, strlen(tr->event_id_str), ts,
					tr->body, body_len, old_sig);
	CurrentResourceOwner = save;

	parts.event_id = &tr->event_id;
	parts.type = tr->type;
	parts.emitted_at = tr->emitted_at;
	parts.key = tr->key;
	n_format_lines = outbox_format_headers(ep->format, &parts, format_lines);
	for (int i = 0; i < n_format_lines; i++)
		h = add_header(h, format_lines[i]);
	for (int i = 1; i < n_format_lines; i++)
		pfree(format_lines[i]);	/* (the first, Content-Type, is static) */
	h = add_header(h, "Expect:");
	snprintf(line, sizeof(line), "webhook-id: %s", tr->event_id_str);
	h = add_header(h, line);
	snprintf(line, sizeof(line), "webhook-timestamp: " INT64_FORMAT, ts);
	h = add_header(h, line);
	if (ep->old_keylen > 0)
		snprintf(line, sizeof(line), "webhook-signature: v1,%s v1,%s", sig, old_sig);
	else
		snprintf(line, sizeof(line), "webhook-signature: v1,%s", sig);
	h = add_header(h, line);
	if (ep->headers[0] != '\0')
	{
		char	   *copy = pstrdup(ep->headers);
		char	   *save_ptr = NULL;

		for (char *l = strtok_r(copy, "\n", &save_ptr); l; l = strtok_r(NULL, "\n", &save_ptr))
			if (!outbox_format_sets_header(ep->format, l))
				h = add_header(h, l);
		pfree(copy);
	}
	/* Its memory is the batch's (current), as the delivery's is. */
	req = palloc0(sizeof(HttpRequest));
	if (ep->auth != NULL)
	{
		if (ep->auth->header != NULL)
			h = add_header(h, ep->auth->header);
		tr->auth_generation = ep->auth->generation;
		/* (the request's own: see the URL below) */
		if (ep->auth->cfg.client_cert != NULL)
		{
			req->client_cert = pstrdup(ep->auth->cfg.client_cert);
			req->client_key = pstrdup(ep->auth->cfg.client_key);
		}
	}
	/*
	 * The endpoint's own headers win over an event's of the same name (its
	 * auth's Authorization too), and the format's (binary mode's ce-*
	 * attributes) over both.
	 */
	for (int i = 0; i < tr->n_event_headers; i++)
		if (!endpoint_sets_header(ep, tr->event_headers[i]) &&
			!outbox_format_sets_header(ep->format, tr->event_headers[i]) &&
			!(auth_sets_authorization(ep->auth) &&
			  pg_strncasecmp(tr->event_headers[i], "authorization:", 14) == 0))
			h = add_header(h, tr->event_headers[i]);

	/*
	 * The URL (and the client certificate's paths above) are the request's
	 * own, copied into its memory: the endpoint's strings are the relay's
	 * endpoint table's, which frees and replaces them at every load of the
	 * endpoints (and its auth's when that changes), and a load may come
	 * while the request is still in flight.  http.c and http1.c read them
	 * until http_next_done hands the request back: when libcurl has
	 * connected (origin_of), when the TLS handshake is done (the request
	 * line), when http1.c hands the request to libcurl.
	 */
	req->url = pstrdup(ep->url);
	req->body = tr->body;
	req->body_len = body_len;
	req->headers = h;
	req->timeout_ms = ep->timeout_ms;
	req->owner = tr;
	if (senders == NULL || !senders->submit(req, relay_in_flight))
		http_submit(req);
}

/*
 * What a receiver's answer (or its absence) means for the event, by the
 * Standard Webhooks rules: 2xx is delivered; "webhook-delivery:
 * abort-message" makes a dead letter of anything else; no answer, 408,
 * 425, 429, 410 (the relay disables the endpoint), 3xx (redirects are not
 * followed), 5xx and "webhook-delivery: disable" ask to try again; other
 * 4xx are permanent.
 */
static TargetOutcome
answer_outcome(const HttpRequest *req)
{
	long		status = req->status;

	if (!req->transport_error && status >= 200 && status < 300)
		return TARGET_DELIVERED;
	if (pg_strcasecmp(req->delivery, "abort-message") == 0)
		return TARGET_DEAD_LETTER;
	if (req->transport_error || pg_strcasecmp(req->delivery, "disable") == 0)
		return TARGET_RETRY;
	if (status == 408 || status == 425 || status == 429 || status == 410)
		return TARGET_RETRY;
	if (status >= 400 && status < 500)
		return TARGET_DEAD_LETTER;
	return TARGET_RETRY;
}

/*
 * The next finished request, the relay's own or a sender's, as its
 * attempt's result: the response kept has the endpoint's header values
 * and client authentication's secrets taken out.  NULL when none
 * finished.  A finished request that is no delivery's (an OAuth2 token
 * request) is handed to its done callback on the way.
 */
static TargetRequest *
webhook_next_done(void)
{
	HttpRequest *req;
	TargetRequest *tr;
	TargetResult *r;

	while ((req = http_next_done()) != NULL && req->done != NULL)
		req->done(req);
	if (req == NULL && senders != NULL)
		req = senders->next_done();
	if (req == NULL)
		return NULL;
	tr = (TargetRequest *) req->owner;
	redact_response(tr->endpoint, req);
	r = tr->result;
	r->outcome = answer_outcome(req);
	strlcpy(r->error, req->error, sizeof(r->error));
	r->duration_ms = req->duration_ms;
	r->bytes = req->body_len;
	memcpy(r->response, req->response, req->response_len);
	r->response[req->response_len] = '\0';
	r->response_len = req->response_len;
	r->response_cut = req->response_cut;
	r->status = req->status;
	strlcpy(r->delivery, req->delivery, sizeof(r->delivery));
	strlcpy(r->retry_after, req->retry_after, sizeof(r->retry_after));
	return tr;
}

/* libcurl's sockets are in the relay's wait (http.c): nothing to poll. */
static void
webhook_poll(void)
{
}

/* At the relay's start: the HTTP client, sized by outbox.max_concurrency. */
static void
webhook_start(void)
{
	http_start(outbox_max_concurrency);
}

/* After a reload: outbox.max_concurrency, the address policy, the CA file. */
static void
webhook_configure(void)
{
	http_configure(outbox_max_concurrency);
}

/* TargetOps.check_url: http and https URLs, as libcurl normalizes them. */
static char *
webhook_check_url(const char *url, const char **problem)
{
	return http_check_url(url, "endpoint URL");
}

const TargetOps outbox_webhook_target = {
	.name = "webhook",
	.check_url = webhook_check_url,
	.start = webhook_start,
	.configure = webhook_configure,
	.submit = webhook_submit,
	.next_done = webhook_next_done,
	.poll = webhook_poll,
	.abandon_all = http_abandon_all,
	.takes_slot = true,
};
