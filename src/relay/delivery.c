/*-------------------------------------------------------------------------
 *
 * delivery.c
 *	  Making the batches of the delivery data model (delivery.h): empty
 *	  ones, which read.c fills with the parts of a stream page, and those
 *	  of the events read for one endpoint, their bodies made in its
 *	  format; and settling a delivery, sent or not (delivery_settle,
 *	  delivery_defer, delivery_expire), which keeps its batch's and its
 *	  stream page's counts; and the request a delivery's attempt is to its
 *	  target (delivery_request).  Which deliveries wait is read.c's to decide.
 *	  Needs no transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "counters.h"
#include "relay/delivery.h"
#include "relay/policy.h"

/*
 * A new batch of n deliveries for ep, zeroed, in cxt: a memory context of
 * its own, which it takes over (deleting the context frees it).  The caller
 * fills the deliveries.
 */
Batch *
delivery_new_batch(RelayEndpoint *ep, bool is_page, int n, MemoryContext cxt)
{
	Batch	   *b = MemoryContextAllocZero(cxt, sizeof(Batch));

	b->ep = ep;
	b->cxt = cxt;
	b->is_page = is_page;
	b->n = n;
	b->room = n;
	b->d = MemoryContextAllocZero(cxt, sizeof(Delivery) * n);
	return b;
}

/* The body of event e in format, in current memory. */
char *
delivery_event_body(const StreamEvent *e, OutboxFormat format)
{
	EventParts	parts;

	parts.event_id = &e->event_id;
	parts.type = e->type;
	parts.emitted_at = e->emitted_at;
	parts.key = e->key;
	parts.data = e->data;
	parts.data_len = e->data_len;
	return outbox_format_body(format, &parts);
}

/*
 * Fill d, of batch b, with what it takes from event e: everything but the
 * body and what the relay decides.  Its deadline is e's expires_at or b's
 * endpoint's max_age, whichever comes first.  Strings are shared with e.
 */
void
delivery_of_event(Delivery *d, Batch *b, const StreamEvent *e)
{
	d->batch = b;
	d->prev_same_key = -1;
	d->id = e->id;
	d->event_id = e->event_id;
	d->type = e->type;
	d->emitted_at = e->emitted_at;
	d->key = e->key;
	d->event_headers = e->headers;
	d->n_event_headers = e->n_headers;
	d->deliver_at = e->deliver_at;
	d->deadline = policy_deadline(e->expires_at, e->emitted_at, b->ep->max_age_ms);
	d->priority = e->priority;
}

/*
 * A batch for ep of the events read into cxt, a context of its own that it
 * takes over: a delivery per event, its body in ep's format, its deliver_at
 * as read.  Each payload is freed once its body is made.  Which deliveries
 * wait, and which attempt each is, the caller decides.
 */
Batch *
delivery_batch_of_events(RelayEndpoint *ep, bool is_page, EventRows *rows, MemoryContext cxt)
{
	Batch	   *b = delivery_new_batch(ep, is_page, rows->n, cxt);
	MemoryContext old = MemoryContextSwitchTo(cxt);

	for (int i = 0; i < b->n; i++)
	{
		StreamEvent *e = &rows->ev[i];
		Delivery   *d = &b->d[i];

		delivery_of_event(d, b, e);
		d->body = delivery_event_body(e, ep->dest.format);
		pfree(e->data);
		d->already = rows->delivered[i];
	}
	MemoryContextSwitchTo(old);
	return b;
}

/* Free what is left of events read once their batch is made. */
void
delivery_free_events(EventRows *rows)
{
	pfree(rows->ev);
	if (rows->delivered)
		pfree(rows->delivered);
	if (rows->blocked)
		pfree(rows->blocked);
	if (rows->attempts)
		pfree(rows->attempts);
}

/*
 * The endpoint's counters (counters.c): an attempt by what it came to, and
 * its duration if a request went.  Deferrals and events answered before a
 * restart are not attempts.
 */
static void
count_outcome(const Delivery *d, OutcomeKind outcome)
{
	int			endpoint_id = d->batch->ep->id;

	switch (outcome)
	{
		case OUTCOME_KIND_DELIVERED:
			outbox_count_outcome(endpoint_id, COUNTED_DELIVERED, true, d->result.duration_ms);
			break;
		case OUTCOME_KIND_RETRY:
			outbox_count_outcome(endpoint_id, COUNTED_RETRY, true, d->result.duration_ms);
			break;
		case OUTCOME_KIND_DEAD:
			outbox_count_outcome(endpoint_id, COUNTED_DEAD, true, d->result.duration_ms);
			break;
		case OUTCOME_KIND_EXPIRED:
			outbox_count_outcome(endpoint_id, COUNTED_EXPIRED, false, 0);
			break;
		case OUTCOME_KIND_DEFERRED:
		case OUTCOME_KIND_ALREADY:
			break;
	}
}

/*
 * A delivery has its outcome: one fewer pending in its batch, one more to
 * record.  A part of the stream's page that has no delivery left pending is
 * progress of the page (stream_detach_laggards).
 */
void
delivery_settle(Delivery *d, OutcomeKind outcome)
{
	Batch	   *b = d->batch;

	d->outcome = outcome;
	d->state = DELIVERY_DONE;
	count_outcome(d, outcome);
	b->pending--;
	b->unrecorded++;
	if (b->stream != NULL && b->pending == 0)
	{
		b->stream->finished++;
		b->stream->progress_at = GetCurrentTimestamp();
	}
}

/*
 * Settle a delivery without sending it: it goes to the retry table, due at
 * next_at (its deliver_at, or now for one waiting behind its key).
 */
void
delivery_defer(Delivery *d, TimestampTz next_at)
{
	d->deferred = true;
	d->attempt = 0;
	d->next_at = next_at;
	delivery_settle(d, OUTCOME_KIND_DEFERRED);
}

/*
 * Settle a delivery without sending it because its deadline passed (its
 * expires_at, or its endpoint's max_age): recorded as expired, as the
 * attempt it would have been (DESIGN.md, "Expiry and priority").  Settled,
 * not owed: its retry row goes, and its page moves its position on.
 */
void
delivery_expire(Delivery *d)
{
	d->expired = true;
	d->deferred = false;
	d->next_at = 0;
	d->attempt = Max(d->attempt, 1);
	delivery_settle(d, OUTCOME_KIND_EXPIRED);
}

/*
 * The request of a delivery's attempt, as its target is handed it, its
 * result zeroed: what the target needs of the delivery, and its endpoint's
 * TargetEndpoint.  Its strings are the delivery's.
 */
TargetRequest *
delivery_request(Delivery *d)
{
	TargetRequest *req = &d->req;

	memset(req, 0, sizeof(*req));
	req->endpoint = &d->batch->ep->dest;
	req->event_id = d->event_id;
	outbox_uuid_text(&d->event_id, req->event_id_str);
	req->type = d->type;
	req->key = d->key;
	req->body = d->body;
	req->event_headers = d->event_headers;
	req->n_event_headers = d->n_event_headers;
	req->emitted_at = d->emitted_at;
	req->priority = d->priority;
	memset(&d->result, 0, sizeof(d->result));
	req->result = &d->result;
	return req;
}
