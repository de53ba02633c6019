/*-------------------------------------------------------------------------
 *
 * webhook.c
 *	  The webhook target: a delivery as a signed HTTP POST (Standard
 *	  Webhooks), sent through libcurl (http.c) by the relay or one of its
 *	  sender processes (sender.c), and its response as a TargetResult.
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

#include "relay/credentials.h"
#include "relay/delivery.h"
#include "targets/format.h"
#include "targets/http.h"
#include "relay/sender.h"
#include "targets/sign.h"
#include "targets/target.h"

/* pg_hmac's resource owner: the relay signs with no transaction open. */
static ResourceOwner signing_owner = NULL;

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
endpoint_sets_header(const RelayEndpoint *ep, const char *line)
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
redact_response(const RelayEndpoint *ep, HttpRequest *req)
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
	nsecrets = credentials_secrets(ep, secrets);
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
 * Build the signed request of one delivery and hand it to libcurl: the
 * headers of its endpoint's format, the signature over the body as sent
 * (in every format), the endpoint's headers and its Authorization from
 * auth, then the event's, except those the endpoint or the format sets
 * itself; and its client certificate.  An OAuth2 endpoint has its token
 * (credentials_state).  The request is allocated in current memory, the
 * delivery's batch's.
 */
static void
webhook_submit(Delivery *d, int relay_in_flight)
{
	RelayEndpoint *ep = d->batch->ep;
	struct curl_slist *h = NULL;
	int64		ts = (int64) time(NULL);
	size_t		body_len = strlen(d->body);
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
	outbox_sign(ep->key, ep->keylen, d->event_id_str, strlen(d->event_id_str), ts,
				d->body, body_len, sig);
	if (ep->old_keylen > 0)
		outbox_sign(ep->old_key, ep->old_keylen, d->event_id_str, strlen(d->event_id_str), ts,
					d->body, body_len, old_sig);
	CurrentResourceOwner = save;

	parts.event_id = &d->event_id;
	parts.type = d->type;
	parts.emitted_at = d->emitted_at;
	parts.key = d->key;
	n_format_lines = outbox_format_headers(ep->format, &parts, format_lines);
	for (int i = 0; i < n_format_lines; i++)
		h = add_header(h, format_lines[i]);
	for (int i = 1; i < n_format_lines; i++)
		pfree(format_lines[i]);	/* (the first, Content-Type, is static) */
	h = add_header(h, "Expect:");
	snprintf(line, sizeof(line), "webhook-id: %s", d->event_id_str);
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
		d->auth_generation = ep->auth->generation;
		req->client_cert = ep->auth->cfg.client_cert;
		req->client_key = ep->auth->cfg.client_key;
	}
	/*
	 * The endpoint's own headers win over an event's of the same name (its
	 * auth's Authorization too), and the format's (binary mode's ce-*
	 * attributes) over both.
	 */
	for (int i = 0; i < d->n_event_headers; i++)
		if (!endpoint_sets_header(ep, d->event_headers[i]) &&
			!outbox_format_sets_header(ep->format, d->event_headers[i]) &&
			!(credentials_set_authorization(ep) &&
			  pg_strncasecmp(d->event_headers[i], "authorization:", 14) == 0))
			h = add_header(h, d->event_headers[i]);

	req->url = ep->url;
	req->body = d->body;
	req->body_len = body_len;
	req->headers = h;
	req->timeout_ms = ep->timeout_ms;
	req->owner = d;
	if (!senders_submit(req, relay_in_flight))
		http_submit(req);
}

/*
 * The next finished request, the relay's own or a sender's, as its
 * delivery's result: the response kept has the endpoint's header values
 * and client authentication's secrets taken out.  NULL when none
 * finished.  A finished OAuth2 token request on the way is handed to
 * credentials.c, which keeps its token (credentials_next_answered).
 */
static Delivery *
webhook_next_done(void)
{
	HttpRequest *req;
	Delivery   *d;
	TargetResult *r;

	/* (an OAuth2 token request is the relay's, not a delivery's) */
	while ((req = http_next_done()) != NULL && req->token_request)
		credentials_fetch_done(req);
	if (req == NULL)
		req = senders_next_done();
	if (req == NULL)
		return NULL;
	d = (Delivery *) req->owner;
	redact_response(d->batch->ep, req);
	r = &d->result;
	r->status = req->status;
	r->transport_error = req->transport_error;
	r->rejected = false;
	strlcpy(r->error, req->error, sizeof(r->error));
	r->duration_ms = req->duration_ms;
	memcpy(r->response, req->response, req->response_len);
	r->response[req->response_len] = '\0';
	r->response_len = req->response_len;
	r->response_cut = req->response_cut;
	strlcpy(r->delivery, req->delivery, sizeof(r->delivery));
	strlcpy(r->retry_after, req->retry_after, sizeof(r->retry_after));
	r->bytes = req->body_len;
	return d;
}

/* libcurl's sockets are in the relay's wait (http_wait): nothing to poll. */
static void
webhook_poll(void)
{
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
	.submit = webhook_submit,
	.next_done = webhook_next_done,
	.poll = webhook_poll,
	.abandon_all = http_abandon_all,
	.takes_slot = true,
};
