/*-------------------------------------------------------------------------
 *
 * pump.c
 *	  The sending side of the relay: the slots, the ready list of endpoints
 *	  with deliveries waiting, handing deliveries to their targets
 *	  (pump_run), and turning the targets' results into outcomes
 *	  (pump_collect).
 *
 * read.c reads batches and puts them on its active list; pump_run() finds
 * the new ones there, readies their endpoints and submits what the slots,
 * each endpoint's cap and its rate limit (limit.c) allow.  pump_collect()
 * settles the finished deliveries; record.c records them later.  This file
 * owns the counts of requests in flight and of slots taken, and when a
 * request last finished (pump_in_flight, pump_last_answer_at); an
 * endpoint's own counts are in its RelayEndpoint (delivery.h).  An endpoint
 * held by its rate limit or paused by a Retry-After stops following the
 * stream: pump_run() and pump_collect() return such endpoints, and the
 * relay detaches them (relay_detach, state.c) once the call returns; until
 * then a paused endpoint's part still counts toward its stream page's
 * answers.  Runs in the relay's loop with no transaction open: nothing
 * here touches SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/pg_prng.h"
#include "lib/ilist.h"
#include "utils/timestamp.h"

#include "relay/credentials.h"
#include "relay/delivery.h"
#include "guc.h"
#include "targets/http.h"
#include "relay/limit.h"
#include "relay/policy.h"
#include "relay/pump.h"
#include "shmem.h"
#include "targets/target.h"
#include "targets/wait.h"

/* Failing deliveries are reported at most this often per endpoint. */
#define WARNING_INTERVAL_MS	60000

static int	in_flight = 0;
static int	slots_taken = 0;	/* of those, deliveries holding a slot */

/* When a request last finished, of any endpoint (stream_detach_laggards). */
static TimestampTz last_answer_at = 0;

/*
 * Endpoints to stop following the stream, gathered while pump_run() or
 * pump_collect() runs and returned by it (in the caller's memory).
 */
static List *to_detach = NIL;

/* ep is to stop following the stream, if it follows it. */
static void
detach_later(RelayEndpoint *ep)
{
	if (ep->follows)
		to_detach = list_append_unique_ptr(to_detach, ep);
}

/* The endpoints gathered by detach_later, and none gathered any more. */
static List *
take_detached(void)
{
	List	   *l = to_detach;

	to_detach = NIL;
	return l;
}

/*
 * Slots (DESIGN.md, The relay loop).  The relay keeps at most
 * outbox.max_concurrency requests in flight, fewer if its open files limit
 * cannot hold that many sockets (http_socket_room).  An endpoint has at
 * most its cap in flight (max_in_flight, or outbox.endpoint_concurrency),
 * and at most a fair share of the slots: slots / (endpoints with work + 1),
 * rounded up.
 * "With work" is deliveries waiting or requests in flight; the one share
 * more is kept free for an endpoint that has work next, so that endpoints
 * whose requests hang can never take every slot from one that comes later.
 * The share binds only when the caps of the endpoints with work do not all
 * fit in the slots.  But the one share kept free is small beside many
 * endpoints whose receivers hang: so an endpoint that fails has its cap
 * halved for each failure in a row, down to one request, and one that
 * was detached for lagging behind the stream has one, until its next 2xx
 * gives back the whole cap (pump_endpoint_cap; bench case 12).
 *
 * A target whose deliveries hold no socket of their own (a broker's
 * messages share the producer's connections: target_takes_slot) takes no
 * slot and no share: its endpoints are served first, each up to its cap,
 * which is max_in_flight or twice its page (BROKER_PAGE_FACTOR), cut on
 * failures the same way.
 *
 * pump_run() only looks at endpoints in the ready list, never at all of
 * them: an endpoint goes in when it gets a batch, or when one of its
 * requests finishes while deliveries of it still wait (pump_collect); it
 * leaves once it sent what it may.  While in the list it has a batch with
 * deliveries without an outcome, so the batch, and the endpoint, are not
 * freed.
 */
static dlist_head ready = DLIST_STATIC_INIT(ready);
static int	busy_endpoints = 0;

/*
 * Fresh requests (DESIGN.md, The relay loop).  Of the requests that take
 * slots, at most FRESH_MAX per sending process are fresh at once: sent
 * since the relay last spent FRESH_WAIT_US blocked, waiting for answers
 * (wait_blocked_us), and less than FRESH_WALL_MS ago.  A
 * relay at a full core with answers coming at once hardly waits, so its
 * requests stay fresh until answered, and it keeps about FRESH_MAX in
 * flight: more would cost each request more and gain nothing (bench case
 * 9).  A relay that waits for its receivers sees its requests age within a
 * few ms, and then only the slots, the caps and the shares bound them
 * (bench case 11); a request that hangs stops counting as soon.  An
 * endpoint whose last answer took SLOW_ANSWER_MS or more is not counted:
 * its requests would age before their answers came, and holding them back
 * only lengthens the life of the page they are part of.  The list is in
 * the order sent, which is the order they age in.
 */
#define FRESH_MAX		64
#define FRESH_WAIT_US	1000
#define FRESH_WALL_MS	SLOW_ANSWER_MS
static dlist_head fresh = DLIST_STATIC_INIT(fresh);
static int	n_fresh = 0;

static void
unfresh(Delivery *d)
{
	if (!d->fresh)
		return;
	d->fresh = false;
	dlist_delete(&d->fresh_node);
	n_fresh--;
}

/*
 * How many requests may be fresh at once: FRESH_MAX for each process that
 * sends them, the relay and its senders (sender.c).
 */
static int
fresh_max(void)
{
	return FRESH_MAX * (1 + outbox_senders);
}

/*
 * Requests sent before the relay's last FRESH_WAIT_US of waiting age, and
 * so do those sent FRESH_WALL_MS ago or more: a relay whose latch is set
 * again before each wait, or that spends its time in SQL, may hardly
 * wait at all, and requests that hang must not hold the others back until
 * their timeout.
 */
static void
age_fresh(void)
{
	int64		blocked = wait_blocked_us();
	TimestampTz now = GetCurrentTimestamp();

	while (!dlist_is_empty(&fresh))
	{
		Delivery   *d = dlist_head_element(Delivery, fresh_node, &fresh);

		if (d->fresh_until > blocked && d->fresh_by > now)
			break;
		unfresh(d);
	}
}

/* Do ep's requests count as fresh?  (Those of one known to be slow not.) */
static bool
counts_fresh(const RelayEndpoint *ep)
{
	return target_takes_slot(ep->target) && ep->answer_ms < SLOW_ANSWER_MS;
}

/*
 * May no more requests that take slots be sent now, to ep (to any
 * endpoint: NULL)?
 */
static bool
out_of_slots(int slots, const RelayEndpoint *ep)
{
	return slots_taken >= slots ||
		(n_fresh >= fresh_max() && (ep == NULL || counts_fresh(ep)));
}

/* An endpoint's part in the fair share: deliveries waiting, or in flight. */
static void
update_busy(RelayEndpoint *ep)
{
	bool		busy = target_takes_slot(ep->target) && (ep->ready || ep->in_flight > 0);

	if (busy != ep->busy)
	{
		busy_endpoints += busy ? 1 : -1;
		ep->busy = busy;
	}
}

/* May deliveries of this batch still wait to be sent? */
static bool
may_wait(const Batch *b)
{
	return b != NULL && b->pending > 0 && b->next_submit < b->n;
}

/* How many requests of ep may be in flight, slots permitting. */
int
pump_endpoint_cap(const RelayEndpoint *ep)
{
	int			cap = ep->max_in_flight > 0 ? ep->max_in_flight :
		target_takes_slot(ep->target) ? outbox_endpoint_concurrency :
		2 * BROKER_PAGE_FACTOR * outbox_batch_size;

	if (ep->lagged)
		return 1;
	return Max(1, cap >> Min(ep->retry_failures, 16));
}

/*
 * Put an endpoint at the end of the ready list if deliveries may wait,
 * unless its rate limit holds it (limit.c: it comes back by itself).
 */
static void
make_ready(RelayEndpoint *ep)
{
	if (ep->ready || ep->held || !(may_wait(ep->page) || may_wait(ep->due)))
		return;
	ep->ready = true;
	dlist_push_tail(&ready, &ep->ready_node);
	update_busy(ep);
}

static void
unready(RelayEndpoint *ep)
{
	if (!ep->ready)
		return;
	ep->ready = false;
	dlist_delete(&ep->ready_node);
	update_busy(ep);
}

/*
 * Tell backends how many requests of an endpoint are in flight now, and
 * whether its rate limit holds it.
 */
static void
show_in_flight(RelayEndpoint *ep)
{
	ep->shown_at = outbox_show_in_flight(ep->shown_at, ep->id, ep->in_flight, ep->held);
}

/*
 * The slots: outbox.max_concurrency, as far as the open files limit lets
 * the relay have sockets (asked again when the setting changes).
 */
int
pump_slots(void)
{
	static int	wanted = -1;
	static int	slots = 0;

	if (wanted != outbox_max_concurrency)
	{
		wanted = outbox_max_concurrency;
		slots = http_socket_room(wanted);
	}
	return slots;
}

/*
 * Hand one delivery to its endpoint's target (target.h), which sends it and
 * gives back its result through pump_collect().
 */
static void
submit(Delivery *d)
{
	RelayEndpoint *ep = d->batch->ep;
	TimestampTz now;

	target_submit(delivery_request(d), ep->target, slots_taken);
	now = GetCurrentTimestamp();	/* sent: its clocks start */
	ep->in_flight++;
	in_flight++;
	d->took_slot = target_takes_slot(ep->target);
	if (d->took_slot)
		slots_taken++;
	if (counts_fresh(ep))
	{
		d->fresh = true;
		d->fresh_until = wait_blocked_us() + FRESH_WAIT_US;
		d->fresh_by = now + FRESH_WALL_MS * INT64CONST(1000);
		dlist_push_tail(&fresh, &d->fresh_node);
		n_fresh++;
	}
	d->batch->answered_at = now;
	update_busy(ep);
	show_in_flight(ep);
}

/*
 * Hold an endpoint that its rate limit or a pause stops (limit.c), out of
 * the ready list.  One that follows the stream stops following it: its
 * part would hold the stream's page, and every endpoint after it, while it
 * waits; the part becomes its own page, and it reads on its own until it
 * is back where the stream is.
 */
static void
hold(RelayEndpoint *ep, TimestampTz now)
{
	limit_hold(ep, now);
	show_in_flight(ep);
	detach_later(ep);
}

/* Why pump_batch stopped. */
typedef enum PumpStop
{
	PUMP_SENT_ALL,				/* nothing of the batch waits any more */
	PUMP_BEHIND_KEY,			/* what waits, waits behind its key */
	PUMP_AT_LIMIT,				/* the endpoint's limit or the relay's slots */
	PUMP_NO_TOKEN,				/* its OAuth2 token is being fetched */
	PUMP_HELD					/* its rate limit, or a pause (limit.c) */
} PumpStop;

static void fail_unsent(Delivery *d, const char *why);

/*
 * Submit a batch's waiting deliveries, in order, while its endpoint is
 * under limit, its rate limit has a token for each and the relay has
 * slots.  On an ordered endpoint a delivery waits for the previous one of
 * its key in the batch: sent once that one was delivered or dead-lettered,
 * deferred behind it when that one is to be retried.
 */
static PumpStop
pump_batch(Batch *b, int limit, int slots, TimestampTz now)
{
	bool		all_settled = true;
	bool		behind_key = false;

	if (b == NULL)
		return PUMP_SENT_ALL;
	for (int i = b->next_submit; i < b->n; i++)
	{
		Delivery   *d = &b->d[i];
		MemoryContext old;

		if (d->state != DELIVERY_WAITING)
			continue;
		if (d->prev_same_key >= 0)
		{
			Delivery   *prev = &b->d[d->prev_same_key];

			if (prev->state != DELIVERY_DONE)
			{
				all_settled = false;
				behind_key = true;
				continue;
			}
			if (prev->outcome != OUTCOME_KIND_DELIVERED && prev->outcome != OUTCOME_KIND_DEAD &&
				prev->outcome != OUTCOME_KIND_ALREADY && prev->outcome != OUTCOME_KIND_EXPIRED)
			{
				d->behind_key = true;
				delivery_defer(d, GetCurrentTimestamp());
				continue;
			}
		}
		/* An OAuth2 endpoint's deliveries wait for its token, off the slots. */
		switch (credentials_state(b->ep))
		{
			case CREDENTIALS_READY:
				break;
			case CREDENTIALS_WAIT:
				if (all_settled)
					b->next_submit = i;
				return PUMP_NO_TOKEN;
			case CREDENTIALS_FAILED:
				fail_unsent(d, b->ep->dest.auth->failure);
				continue;
		}
		if ((target_takes_slot(b->ep->target) && out_of_slots(slots, b->ep)) ||
			b->ep->in_flight >= limit)
		{
			if (all_settled)
				b->next_submit = i;
			return PUMP_AT_LIMIT;
		}
		/* Checked again as it would go: it may have waited for slots. */
		if (d->deadline != 0 && policy_expired(d->deadline, GetCurrentTimestamp()))
		{
			delivery_expire(d);
			continue;
		}
		/* (an expired one takes no token: it is not sent) */
		if (!limit_take(b->ep, now))
		{
			if (all_settled)
				b->next_submit = i;
			return PUMP_HELD;
		}
		old = MemoryContextSwitchTo(b->cxt);
		submit(d);
		MemoryContextSwitchTo(old);
		d->state = DELIVERY_SENT;
		if (all_settled)
			b->next_submit = i + 1;
	}
	if (all_settled)
		b->next_submit = b->n;
	return behind_key ? PUMP_BEHIND_KEY : PUMP_SENT_ALL;
}

/*
 * Submit an endpoint's waiting deliveries up to limit, due retries before
 * new events.  It leaves the ready list (pump_collect puts it back when
 * one of its requests finishes), unless the slots ran out first: then it
 * goes to the end of the list.
 */
static void
pump_endpoint(RelayEndpoint *ep, int limit, int slots, TimestampTz now)
{
	PumpStop	due = pump_batch(ep->due, limit, slots, now);
	PumpStop	page = due == PUMP_AT_LIMIT || due == PUMP_NO_TOKEN || due == PUMP_HELD ? due :
		pump_batch(ep->page, limit, slots, now);

	/* (one waiting for its token is made ready by the token's answer) */
	unready(ep);
	if (page == PUMP_HELD)
		hold(ep, now);
	else if (page == PUMP_AT_LIMIT && ep->in_flight < limit)
		make_ready(ep);			/* the slots ran out: it is served again */
}

/*
 * What an endpoint whose deliveries take slots may have in flight: its cap,
 * and at most its fair share of the slots (above: Slots).
 */
static int
share_limit(const RelayEndpoint *ep, int slots)
{
	return Min(pump_endpoint_cap(ep), (slots + busy_endpoints) / (busy_endpoints + 1));
}

/*
 * Submit what the slots allow, endpoint by endpoint in the order of the
 * ready list, each up to its limit; due retries before new events.  An
 * endpoint that got what it may leaves the list (pump_collect puts it back
 * when one of its requests finishes); one cut short because the slots ran
 * out goes to the end of the list, and the others keep their place.  One
 * that its rate limit or a pause stops is held (limit.c) until it may send
 * again, then comes back first thing here.  Batches read since the last
 * call are at the end of the relay's active list (read.c).  Returns the
 * endpoints held that followed the stream: the caller detaches them.
 */
List *
pump_run(dlist_head *active)
{
	int			slots = pump_slots();
	dlist_iter	iter;
	dlist_mutable_iter miter;
	TimestampTz now = GetCurrentTimestamp();
	RelayEndpoint *released;

	age_fresh();
	while ((released = limit_next_released(now)) != NULL)
	{
		make_ready(released);
		show_in_flight(released);
	}

	/* Batches read since the last pump are at the end of the active list. */
	dlist_reverse_foreach(iter, active)
	{
		Batch	   *b = dlist_container(Batch, node, iter.cur);

		if (b->pumped)
			break;
		b->pumped = true;
		make_ready(b->ep);
	}

	/* Endpoints whose deliveries take no slot: each up to its cap. */
	dlist_foreach_modify(miter, &ready)
	{
		RelayEndpoint *ep = dlist_container(RelayEndpoint, ready_node, miter.cur);

		if (!target_takes_slot(ep->target))
			pump_endpoint(ep, pump_endpoint_cap(ep), slots, now);
	}

	while (!dlist_is_empty(&ready) && !out_of_slots(slots, NULL))
	{
		RelayEndpoint *ep = dlist_head_element(RelayEndpoint, ready_node, &ready);

		pump_endpoint(ep, share_limit(ep, slots), slots, now);
	}

	/* With the fresh requests full, slow endpoints may still use slots. */
	dlist_foreach_modify(miter, &ready)
	{
		RelayEndpoint *ep = dlist_container(RelayEndpoint, ready_node, miter.cur);

		if (slots_taken >= slots)
			break;
		if (target_takes_slot(ep->target) && !counts_fresh(ep))
			pump_endpoint(ep, share_limit(ep, slots), slots, now);
	}
	return take_detached();
}

/*
 * Say that deliveries to an endpoint fail, at most once a minute per
 * endpoint; the attempt log has every failure.
 */
static void
warn_failure(RelayEndpoint *ep, const TargetResult *res)
{
	TimestampTz now = GetCurrentTimestamp();

	ep->failures_unreported++;
	if (ep->last_warning != 0 &&
		!TimestampDifferenceExceeds(ep->last_warning, now, WARNING_INTERVAL_MS))
		return;
	if (res->status == 0)
		ereport(WARNING,
				(errmsg("outbox deliveries to endpoint \"%s\" are failing", ep->name),
				 errdetail("%d failed since the last report; the latest: %s.",
						   ep->failures_unreported, res->error)));
	else
		ereport(WARNING,
				(errmsg("outbox deliveries to endpoint \"%s\" are failing", ep->name),
				 errdetail("%d failed since the last report; the latest got HTTP status %ld.",
						   ep->failures_unreported, res->status)));
	ep->last_warning = now;
	ep->failures_unreported = 0;
}

/*
 * A delivery's attempt finished (or, for an authentication failure, was
 * never made): its outcome, from the result, and what it tells of its
 * endpoint.  Its slot is the caller's to give back.
 */
static void
conclude(Delivery *d, const TargetResult *res)
{
	Batch	   *b = d->batch;
	Outcome		o;
	bool		retry_class;
	double		retry_after;

	o = policy_classify(res->outcome, res->status, res->delivery[0] ? res->delivery : NULL);
	d->next_at = 0;
	if (policy_wants_disable(o, res->delivery[0] ? res->delivery : NULL))
		b->disable_reason = res->status == 410 ? "410 Gone" :
			"the receiver answered webhook-delivery: disable";
	retry_class = o == OUTCOME_RETRY;
	/*
	 * A 401 to an OAuth2 token: the token is dropped (the next delivery
	 * fetches another), and the event retried, not dead-lettered, unless
	 * the receiver said abort-message.
	 */
	if (res->status == 401 && b->ep->dest.auth != NULL &&
		b->ep->dest.auth->cfg.token_url != NULL)
	{
		credentials_refused(b->ep, d->req.auth_generation);
		if (o == OUTCOME_DEAD &&
			!(res->delivery[0] && pg_strcasecmp(res->delivery, "abort-message") == 0))
			o = OUTCOME_RETRY;
	}
	if (o == OUTCOME_RETRY && d->attempt >= b->ep->max_attempts)
		o = OUTCOME_DEAD;
	retry_after = res->status == 0 ? 0 :
		policy_retry_after(res->retry_after, (double) time(NULL));
	if (o == OUTCOME_RETRY || o == OUTCOME_DISABLE)
	{
		double		wait = policy_backoff(&outbox_schedule, d->attempt, res->status,
										  retry_after,
										  pg_prng_double(&pg_global_prng_state) * 2.0 - 1.0);

		d->next_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), (int64) (wait * 1000.0));
		/* Due when it expires at the latest: recorded expired then. */
		if (d->deadline != 0 && d->next_at > d->deadline)
			d->next_at = d->deadline;
	}
	/*
	 * A 429 or 503 with Retry-After pauses the whole endpoint until then,
	 * not only this event (limit.c); one that follows the stream reads on
	 * its own meanwhile.
	 */
	if ((res->status == 429 || res->status == 503) && retry_after > 0)
	{
		ereport(DEBUG1,
				(errmsg("outbox endpoint \"%s\" is paused for %.0f s: it answered %ld with Retry-After",
						b->ep->name, Min(retry_after, LIMIT_MAX_PAUSE_SECS), res->status)));
		limit_pause(b->ep, retry_after, GetCurrentTimestamp());
		detach_later(b->ep);
	}
	delivery_settle(d, policy_outcome_kind(o));
	if (o == OUTCOME_DELIVERED)
		b->ep->consecutive_failures = 0;
	else
		b->ep->consecutive_failures++;
	/*
	 * What cuts the endpoint's cap: no answer in time, or one that asks to
	 * try again (retry_failures).  A definite answer, a 4xx that
	 * dead-letters an event included, shows a receiver that answers.
	 */
	if (retry_class)
	{
		b->ep->retry_failures++;
		b->ep->failed_at = GetCurrentTimestamp();
	}
	else
	{
		b->ep->retry_failures = 0;
		b->ep->lagged = false;
		b->ep->answer_ms = res->duration_ms;
	}
	outbox_count(o == OUTCOME_DELIVERED ? RELAY_DELIVERIES : RELAY_FAILURES, 1);
	outbox_count(RELAY_RETRIES, d->attempt > 1 ? 1 : 0);
	outbox_count(RELAY_BYTES, res->bytes);
	if (o != OUTCOME_DELIVERED)
		warn_failure(b->ep, res);
}

/*
 * A delivery that cannot be sent because its endpoint's authentication
 * failed (an OAuth2 token could not be had): a failed attempt without a
 * request, the reason in its error, retried on the schedule.
 */
static void
fail_unsent(Delivery *d, const char *why)
{
	TargetResult *res = &d->result;

	memset(res, 0, sizeof(*res));
	res->outcome = TARGET_RETRY;
	strlcpy(res->error, why, sizeof(res->error));
	conclude(d, res);
}

/*
 * Turn the results of finished deliveries, of every target, into outcomes;
 * an endpoint whose OAuth2 token request finished may send (or fail) its
 * deliveries.  Returns the endpoints paused by a Retry-After that followed
 * the stream: the caller detaches them.
 */
List *
pump_collect(void)
{
	TargetRequest *req;
	RelayEndpoint *ep;

	while ((req = target_next_done()) != NULL)
	{
		Delivery   *d = delivery_of_request(req);
		Batch	   *b = d->batch;

		ep = b->ep;
		last_answer_at = b->answered_at = GetCurrentTimestamp();
		/* (a broker's acknowledgements do not size pages: its share is fixed) */
		if (b->stream != NULL && d->took_slot)
		{
			b->stream->answered++;
			if (d->result.duration_ms >= SLOW_ANSWER_MS)
				b->stream->slow_answers++;
		}
		conclude(d, &d->result);
		/* The attempt log keeps an acknowledgement without HTTP as 200. */
		if (d->result.outcome == TARGET_DELIVERED && d->result.status == 0)
			d->result.status = 200;
		ep->in_flight--;
		in_flight--;
		if (d->took_slot)
			slots_taken--;
		unfresh(d);
		show_in_flight(ep);

		/*
		 * A slot of the endpoint's is free, and a delivery that waited
		 * behind this one's key may go: back in the ready list if something
		 * of it waits.  One with nothing left that may wait leaves it (and
		 * the batch may be freed once recorded).
		 */
		if (may_wait(ep->page) || may_wait(ep->due))
			make_ready(ep);
		else
			unready(ep);
		update_busy(ep);
	}
	while ((ep = credentials_next_answered()) != NULL)
		make_ready(ep);
	return take_detached();
}

/* Requests in flight now, of every endpoint. */
int
pump_in_flight(void)
{
	return in_flight;
}

/*
 * How long the relay may wait before its oldest fresh request ages, in ms,
 * when deliveries wait for that (the fresh ones are fresh_max()); -1 when
 * none do.
 */
long
pump_ms_to_age(void)
{
	Delivery   *d;

	if (n_fresh < fresh_max() || dlist_is_empty(&ready))
		return -1;
	d = dlist_head_element(Delivery, fresh_node, &fresh);
	return Max(0, Min((d->fresh_until - wait_blocked_us() + 999) / 1000,
					  TimestampDifferenceMilliseconds(GetCurrentTimestamp(), d->fresh_by) + 1));
}

/* Does any endpoint have deliveries that wait to be submitted now? */
bool
pump_any_ready(void)
{
	return !dlist_is_empty(&ready);
}

/* When a request last finished, of any endpoint (0: none yet). */
TimestampTz
pump_last_answer_at(void)
{
	return last_answer_at;
}
