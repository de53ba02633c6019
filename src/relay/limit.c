/*-------------------------------------------------------------------------
 *
 * limit.c
 *	  Per-endpoint rate limits (outbox.endpoints.rate_limit) and the pauses
 *	  a receiver asks for with a 429 or 503 and Retry-After: each
 *	  endpoint's token bucket, and the endpoints the relay holds back until
 *	  they may send again.  Only the relay calls these, with its clock; no
 *	  I/O, no transaction needed.
 *
 * A rate limit is a token bucket: it fills at rate_limit tokens a second
 * up to its burst, a tenth of a second's worth and at least one
 * (limit_burst), and each request takes a token.  Over any T seconds an
 * endpoint gets at most burst + rate_limit * T requests, counted as they
 * are sent.  A pause (limit_pause) lets nothing go until it ends, limit or
 * not, or until the endpoint's row changes (limit_unpause: alter_endpoint,
 * pause_endpoint, resume_endpoint); the bucket fills meanwhile.
 *
 * pump_run() (pump.c) takes a token for each request it submits
 * (limit_take).  An endpoint that has deliveries waiting but no token, or
 * is paused, leaves the ready list and is held here (limit_hold), in a
 * pairing heap by the time it may send again; the relay's wait ends by the
 * first of those times (limit_ms_to_release), and pump_run() puts the
 * endpoints whose time came back in the ready list (limit_next_released).
 * A held endpoint so has no slot and no part in the fair share, and its
 * deliveries stay as they are: not sent, not failed, no attempt used.  So
 * that a high limit does not wake the relay for every request, a held
 * endpoint is released once its bucket has HOLD_MIN_MS worth of tokens (at
 * least one, at most its burst).
 *
 * Everything here is in the relay's memory: a relay that starts again
 * starts with full buckets and no pauses.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "lib/pairingheap.h"
#include "utils/timestamp.h"

#include "relay/limit.h"

/* A held endpoint is released with at least this much of its rate. */
#define HOLD_MIN_MS			10
/* An endpoint with a limit reads pages of this many seconds' worth. */
#define LIMIT_PAGE_SECS		2

static int	held_cmp(const pairingheap_node *a, const pairingheap_node *b, void *arg);

/* Endpoints held, the earliest release on top. */
static pairingheap held = {held_cmp, NULL, NULL};

static int
held_cmp(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const RelayEndpoint *ea = pairingheap_const_container(RelayEndpoint, held_node, a);
	const RelayEndpoint *eb = pairingheap_const_container(RelayEndpoint, held_node, b);

	/* (pairingheap keeps the greatest on top: the earliest is greatest) */
	if (ea->held_until < eb->held_until)
		return 1;
	if (ea->held_until > eb->held_until)
		return -1;
	return 0;
}

/* The bucket's size for a rate: a tenth of a second's worth, at least one. */
double
limit_burst(double rate)
{
	return Max(1.0, rate / 10.0);
}

/* Bring ep's bucket up to now. */
static void
refill(RelayEndpoint *ep, TimestampTz now)
{
	if (now > ep->tokens_at)
	{
		ep->tokens = Min(limit_burst(ep->rate_limit),
						 ep->tokens + (double) (now - ep->tokens_at) / USECS_PER_SEC * ep->rate_limit);
		ep->tokens_at = now;
	}
}

static void
hold_until(RelayEndpoint *ep, TimestampTz until)
{
	if (ep->held)
		pairingheap_remove(&held, &ep->held_node);
	ep->held = true;
	ep->held_until = until;
	pairingheap_add(&held, &ep->held_node);
}

/*
 * ep's rate limit as loaded (requests a second, 0: none).  A new limit
 * starts with a full bucket; a changed one keeps what its bucket had, up
 * to the new burst.  A held endpoint is looked at again at once.
 */
void
limit_set_rate(RelayEndpoint *ep, double rate, TimestampTz now)
{
	if (rate == ep->rate_limit)
		return;
	if (ep->rate_limit > 0 && rate > 0)
	{
		refill(ep, now);
		ep->tokens = Min(ep->tokens, limit_burst(rate));
	}
	else
		ep->tokens = limit_burst(rate);
	ep->tokens_at = now;
	ep->rate_limit = rate;
	if (ep->held)
		hold_until(ep, now);
}

/*
 * May one request of ep go now?  If so, it takes its token.  False while
 * ep is paused or its bucket has no whole token.
 */
bool
limit_take(RelayEndpoint *ep, TimestampTz now)
{
	if (now < ep->paused_until)
		return false;
	if (ep->rate_limit <= 0)
		return true;
	refill(ep, now);
	if (ep->tokens < 1.0)
		return false;
	ep->tokens -= 1.0;
	return true;
}

/* Send nothing to ep for seconds from now (a Retry-After), or longer. */
void
limit_pause(RelayEndpoint *ep, double seconds, TimestampTz now)
{
	TimestampTz until;

	seconds = Min(seconds, LIMIT_MAX_PAUSE_SECS);
	until = now + (int64) (seconds * USECS_PER_SEC);
	ep->paused_until = Max(ep->paused_until, until);
}

/*
 * End ep's pause now (an operator changed or resumed the endpoint).  A
 * held endpoint is looked at again at once.
 */
void
limit_unpause(RelayEndpoint *ep, TimestampTz now)
{
	if (ep->paused_until == 0)
		return;
	ep->paused_until = 0;
	if (ep->held)
		hold_until(ep, now);
}

/*
 * May ep follow the stream?  Not while paused: its part of a stream page
 * would hold the page, and so every endpoint that follows the stream,
 * while it waits.  It reads on its own instead.  (One that its limit
 * holds stops following as it is held: pump.c, hold().)
 */
bool
limit_may_follow(const RelayEndpoint *ep, TimestampTz now)
{
	return ep->paused_until <= now;
}

/*
 * How many new events ep reads at once, of size: with a limit, what it may
 * send in LIMIT_PAGE_SECS (at least its burst), so that a page does not
 * wait in memory for minutes.
 */
int
limit_page_size(const RelayEndpoint *ep, int size)
{
	double		n;

	if (ep->rate_limit <= 0)
		return size;
	n = Max(limit_burst(ep->rate_limit), ceil(ep->rate_limit * LIMIT_PAGE_SECS));
	return (int) Min((double) size, n);
}

/*
 * Hold ep, which has deliveries waiting that limit_take() refused, until
 * it may send again: its pause is over and its bucket has HOLD_MIN_MS worth
 * of tokens (at least one, at most its burst).  The caller has taken it
 * out of the ready list; limit_next_released() gives it back.
 */
void
limit_hold(RelayEndpoint *ep, TimestampTz now)
{
	TimestampTz until = now;

	if (ep->rate_limit > 0)
	{
		double		need = Max(1.0, Min(limit_burst(ep->rate_limit),
										ep->rate_limit * HOLD_MIN_MS / 1000.0));

		refill(ep, now);
		if (ep->tokens < need)
			until = now + (int64) ceil((need - ep->tokens) / ep->rate_limit * USECS_PER_SEC);
	}
	hold_until(ep, Max(until, ep->paused_until));
}

/* A held endpoint whose time has come, no longer held; or NULL. */
RelayEndpoint *
limit_next_released(TimestampTz now)
{
	RelayEndpoint *ep;

	if (pairingheap_is_empty(&held))
		return NULL;
	ep = pairingheap_container(RelayEndpoint, held_node, pairingheap_first(&held));
	if (ep->held_until > now)
		return NULL;
	(void) pairingheap_remove_first(&held);
	ep->held = false;
	return ep;
}

/* Milliseconds until the first held endpoint is released; -1: none held. */
long
limit_ms_to_release(TimestampTz now)
{
	RelayEndpoint *ep;

	if (pairingheap_is_empty(&held))
		return -1;
	ep = pairingheap_container(RelayEndpoint, held_node, pairingheap_first(&held));
	if (ep->held_until <= now)
		return 0;
	return (long) ((ep->held_until - now + 999) / 1000);
}
