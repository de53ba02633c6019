/*-------------------------------------------------------------------------
 *
 * read.c
 *	  The relay's reading: the stream's pages and their routing to the
 *	  endpoints that follow it, what each endpoint reading on its own is
 *	  owed (a page of new events, due retries), the endpoints' loads, and
 *	  when a read round is worth its transaction (DESIGN.md, "The read
 *	  path").
 *
 * A read round is one short transaction (step.c).  What it reads waits on
 * the relay's unconfirmed list and goes to the active list only once the
 * transaction committed; a failed read gives up what it read, and a full
 * round follows READ_RETRY_MS later.  Per endpoint at most one page of new
 * events and one set of due retries are in flight; one failing without
 * pause only gets probes (CIRCUIT_FAILURES).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "guc.h"
#include "relay/endpoints.h"
#include "relay/limit.h"
#include "relay/policy.h"
#include "relay/priority.h"
#include "relay/pump.h"
#include "relay/read.h"
#include "relay/route.h"
#include "relay/step.h"
#include "relay/store.h"
#include "relay/stream.h"

/*
 * After a read round failed (a lock timed out, say), a full round comes
 * after this, whatever outbox.poll_interval says: what it did not read
 * (new events, retries due, the time of the next) would otherwise wait for
 * the poll or the next commit.
 */
#define READ_RETRY_MS		1000
/* After this many failures in a row an endpoint only gets probes. */
#define CIRCUIT_FAILURES	20
/*
 * A read step reads endpoints' own pages for about this long at most; the
 * next step goes on with the next of them.  An endpoint far behind must
 * not hold up the stream's read (DESIGN.md, "The stream").
 */
#define OWN_READ_BUDGET_MS	20
/* Endpoints are loaded at least this often, changed or not. */
#define ENDPOINTS_RELOAD_MS	10000

/*
 * When an endpoint may read: a page of new events if none is in flight
 * (one failing without pause only to probe it, in a full round at least
 * outbox.poll_interval after its last probe: full rounds also run whenever
 * a retry or a deliver_at comes due), its due retries if none are in
 * flight and a full round or a recorded batch asks.
 */
static bool
may_read_page(RelayState *rs, const RelayEndpoint *ep, bool full)
{
	return ep->active && !ep->follows && ep->page == NULL &&
		(ep->consecutive_failures < CIRCUIT_FAILURES ||
		 (full && TimestampDifferenceExceeds(ep->probed_at, rs->last_read, outbox_poll_interval)));
}

static bool
may_read_due(const RelayEndpoint *ep, bool full)
{
	return ep->active && ep->due == NULL && (full || ep->more_due);
}

/*
 * A new event's delivery goes as a first attempt, or waits: until its
 * deliver_at, or, on an ordered endpoint, behind an earlier event of its
 * key (blocked: due now, sent as a retry once that one is settled).
 */
static void
first_attempt(Delivery *d, bool blocked, TimestampTz now)
{
	if (blocked)
		d->deliver_at = now;
	d->behind_key = blocked;
	d->deferred = blocked || (d->deliver_at != 0 && d->deliver_at > now);
	d->attempt = d->deferred ? 0 : 1;
}

/* link_same_key's order: by key, then by place in the batch. */
static int
same_key_cmp(const void *a, const void *b)
{
	const Delivery *x = *(Delivery *const *) a;
	const Delivery *y = *(Delivery *const *) b;
	int			c = strcmp(x->key, y->key);

	if (c != 0)
		return c;
	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * On an ordered endpoint, chain each delivery to the previous one of its
 * key in the batch, so that it is sent only after that one is done.  By a
 * sort of the keyed deliveries: a broker's page holds 4 x
 * outbox.batch_size of them, too many to compare each with those before
 * it.
 */
static void
link_same_key(Batch *b)
{
	Delivery  **keyed;
	int			n = 0;

	for (int i = 0; i < b->n; i++)
		b->d[i].prev_same_key = -1;
	if (!b->ep->ordered || b->n < 2)
		return;
	keyed = palloc(sizeof(Delivery *) * b->n);
	for (int i = 0; i < b->n; i++)
		if (b->d[i].key != NULL)
			keyed[n++] = &b->d[i];
	qsort(keyed, n, sizeof(Delivery *), same_key_cmp);
	for (int i = 1; i < n; i++)
		if (strcmp(keyed[i - 1]->key, keyed[i]->key) == 0)
			keyed[i]->prev_same_key = (int) (keyed[i - 1] - b->d);
	pfree(keyed);
}

/*
 * After a load of the endpoints: rebuild the routes, and who reads on its
 * own.  An endpoint that follows the stream but may not receive now (paused,
 * disabled, gone) stops following it.
 */
static void
endpoints_loaded(RelayState *rs)
{
	HASH_SEQ_STATUS seq;
	RelayEndpoint *ep;

	MemoryContext old = MemoryContextSwitchTo(rs->cxt);

	route_build(rs->endpoints, rs->cxt);
	list_free(rs->own_readers);
	rs->own_readers = NIL;
	stream_forget_followers();
	hash_seq_init(&seq, rs->endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
	{
		if (ep->follows && !ep->active && ep->seen)
			relay_detach(rs, ep);
		if (ep->follows && ep->active)
			stream_count_follower(ep, 1);
		else if (ep->active)
			rs->own_readers = lappend(rs->own_readers, ep);
	}
	MemoryContextSwitchTo(old);
}

/*
 * The body of a stream page's event in an endpoint's format: made once
 * per event and format, in the page's memory, and shared by the parts of
 * every endpoint of that format it is routed to.
 */
static char *
stream_body(StreamPage *p, StreamEvent *e, OutboxFormat format)
{
	if (e->body[format] == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(p->cxt);

		e->body[format] = delivery_event_body(e, format);
		MemoryContextSwitchTo(old);
	}
	return e->body[format];
}

/*
 * route_page's scratch: each event's receivers, one delivery an entry, and
 * the deliveries whose state before a restart or behind their key is asked
 * (store_route_checks).
 */
typedef struct Routing
{
	List	   *parts;			/* endpoints routed a part, in page order */
	RelayEndpoint **routed;		/* each event's receivers, one after another */
	int		   *first_routed;	/* where event i's are in routed */
	int			nrouted;
	int			nchecks;
	int		   *check_eids;
	const pg_uuid_t **check_events;
	char	  **check_keys;
	bool	   *check_ordered;
	Delivery  **check_d;
	bool		verify_some;	/* an endpoint verifies its page */
	TimestampTz now;
} Routing;

/*
 * Route's first pass: count each endpoint's deliveries (a part is one
 * allocation) and keep each event's receivers.  A page ends before an
 * event that would give an endpoint more than its stream_page_share() of
 * them: no endpoint gets a larger page of the stream than it would read on
 * its own (an endpoint failing without pause, say, gets that many before
 * it only gets probes); the rest is read again with the next page, and the
 * pages after it are read no longer than this one (stream_cut).  Each event
 * is looked up once.  Returns whether the page was cut.
 */
static bool
route_receivers(RelayState *rs, StreamPage *p, Routing *r)
{
	RelayEndpoint **eps;
	int			room = Max(p->n, 1);

	r->routed = palloc(sizeof(RelayEndpoint *) * room);
	r->first_routed = palloc(sizeof(int) * (p->n + 1));
	for (int i = 0; i < p->n; i++)
	{
		int			n = route_match(p->ev[i].type, &eps);
		bool		full = false;

		for (int j = 0; j < n && !full; j++)
			full = eps[j]->follows && eps[j]->routed >= stream_page_share(eps[j]);
		if (full)
		{
			relay_shorten_page(p, i);
			r->first_routed[p->n] = r->nrouted;
			return true;
		}
		r->first_routed[i] = r->nrouted;
		for (int j = 0; j < n; j++)
		{
			RelayEndpoint *ep = eps[j];

			if (!ep->follows)
				continue;
			/*
			 * One that may not receive now, fails without pause, still has
			 * a page of its own in flight (its row was made to follow by a
			 * rebase), or is paused by a Retry-After (limit_may_follow) reads
			 * on its own from where the stream is.
			 */
			if (!ep->active || ep->consecutive_failures >= CIRCUIT_FAILURES || ep->page != NULL ||
				!limit_may_follow(ep, r->now))
			{
				relay_detach(rs, ep);
				continue;
			}
			if (ep->routed++ == 0)
				r->parts = lappend(r->parts, ep);
			if (r->nrouted == room)
			{
				room *= 2;
				r->routed = repalloc(r->routed, sizeof(RelayEndpoint *) * room);
			}
			r->routed[r->nrouted++] = ep;
		}
	}
	r->first_routed[p->n] = r->nrouted;
	return false;
}

/* Make each routed endpoint's part, empty, and room for the checks. */
static void
route_make_parts(RelayState *rs, StreamPage *p, Routing *r)
{
	ListCell   *lc;
	int			most = 0;

	foreach(lc, r->parts)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);
		Batch	   *b = delivery_new_batch(ep, true, ep->routed, relay_batch_context(rs->cxt));

		b->n = 0;
		b->stream = p;
		b->events = p;
		b->snap = p->snap;
		b->last_id = p->last_id;
		b->batch_done = p->batch_done;
		p->parts++;
		p->routed++;
		p->refs++;
		ep->part = b;
		most += ep->routed;
	}
	most = Max(most, 1);
	r->check_eids = palloc(sizeof(int) * most);
	r->check_events = palloc(sizeof(pg_uuid_t *) * most);
	r->check_keys = palloc(sizeof(char *) * most);
	r->check_ordered = palloc(sizeof(bool) * most);
	r->check_d = palloc(sizeof(Delivery *) * most);
}

/*
 * Route's second pass: each event's deliveries into its receivers' parts,
 * as first attempts, its body in each one's format; those whose state
 * before a restart, or behind their key, is to be asked go in the checks.
 */
static void
route_fill_parts(RelayState *rs, StreamPage *p, Routing *r)
{
	for (int i = 0; i < p->n; i++)
	{
		StreamEvent *e = &p->ev[i];

		for (int j = r->first_routed[i]; j < r->first_routed[i + 1]; j++)
		{
			Batch	   *b = r->routed[j]->part;
			Delivery   *d;

			/* (an endpoint routed an event is never detached later in the page) */
			Assert(b != NULL);
			d = &b->d[b->n++];
			delivery_of_event(d, b, e);
			d->body = stream_body(p, e, b->ep->dest.format);
			r->verify_some |= b->ep->verify_page;
			first_attempt(d, false, r->now);
			if (rs->stream_verify || b->ep->verify_page || (b->ep->ordered && e->key != NULL))
			{
				r->check_eids[r->nchecks] = b->ep->id;
				r->check_events[r->nchecks] = &d->event_id;
				r->check_keys[r->nchecks] = d->key;
				r->check_ordered[r->nchecks] = b->ep->ordered;
				r->check_d[r->nchecks] = d;
				r->nchecks++;
			}
		}
	}
}

/*
 * Ask, in one statement for the whole page, which deliveries were answered
 * before a restart and which wait behind an earlier event of their key.
 */
static void
route_check(RelayState *rs, Routing *r)
{
	bool	   *delivered;
	bool	   *blocked;

	if (r->nchecks == 0)
		return;
	delivered = palloc(sizeof(bool) * r->nchecks);
	blocked = palloc(sizeof(bool) * r->nchecks);
	store_route_checks(r->nchecks, r->check_eids, r->check_events, r->check_keys,
					   r->check_ordered, rs->stream_verify || r->verify_some,
					   delivered, blocked);
	for (int i = 0; i < r->nchecks; i++)
	{
		Delivery   *d = r->check_d[i];

		d->already = delivered[i];
		if (blocked[i])
			first_attempt(d, true, r->now);
	}
}

/*
 * Route a page of the stream to the endpoints that follow it: each gets its
 * events as one batch, a part of the page, pushed on the unconfirmed list.
 * An endpoint failing without pause stops following instead: it gets probes
 * on its own.  Whether a delivery was answered before a restart (the first
 * page after a start) and whether it waits behind its key (ordered
 * endpoints) is asked in one statement for the whole page.
 */
static void
route_page(RelayState *rs, StreamPage *p)
{
	Routing		r;
	ListCell   *lc;
	bool		cut;

	memset(&r, 0, sizeof(r));
	r.now = GetCurrentTimestamp();
	cut = route_receivers(rs, p, &r);
	stream_page_routed(p, cut);
	route_make_parts(rs, p, &r);
	route_fill_parts(rs, p, &r);
	route_check(rs, &r);
	foreach(lc, r.parts)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);
		Batch	   *b = ep->part;

		priority_order(b);
		link_same_key(b);
		ep->page = b;
		ep->part = NULL;
		ep->routed = 0;
		dlist_push_tail(&rs->unconfirmed, &b->node);
	}
	list_free(r.parts);
}

/*
 * Has ep failed lately?  A failure that asks to try again (no answer in
 * time, a 5xx, a 429) since its last definite answer, within longer than
 * one of its requests may take.  An endpoint that fails does not follow the
 * stream again: a receiver that never answers would hold each page it
 * gets a part of until it is detached again.  It gets its events on its
 * own, and follows once it delivers, or once it has been quiet for that
 * long (an endpoint that gets nothing has nothing to deliver).
 */
static bool
failing(const RelayEndpoint *ep)
{
	return ep->retry_failures > 0 &&
		!TimestampDifferenceExceeds(ep->failed_at, GetCurrentTimestamp(),
									ep->dest.timeout_ms + 1000);
}

/*
 * Read a stream page of stream_page_size() events (store_read_stream: the
 * next, or with ahead_of the one after ahead_after, read ahead), or NULL
 * when there is none.  Its memory is under the step's transaction until it
 * is read, so that an error frees it, then the relay's.
 */
static StreamPage *
read_stream_page(RelayState *rs, const char *ahead_of, int64 ahead_after)
{
	MemoryContext cxt = AllocSetContextCreate(TopTransactionContext, "outbox stream page",
											  ALLOCSET_DEFAULT_SIZES);
	EventRows	rows;
	StreamPage *p;

	if (!store_read_stream(stream_page_size(), ahead_of, ahead_after, &rows, cxt))
	{
		MemoryContextDelete(cxt);
		return NULL;
	}
	p = MemoryContextAllocZero(rs->cxt, sizeof(StreamPage));
	p->cxt = cxt;
	p->n = rows.n;
	p->ev = rows.ev;
	p->snap = rows.snap;
	p->last_id = p->ev[p->n - 1].id;
	p->batch_done = rows.batch_done;
	MemoryContextSetParent(cxt, rs->cxt);
	return p;
}

/* Forget the page read ahead, if any (it is in no stream, no batch's). */
static void
drop_ahead(RelayState *rs)
{
	if (rs->stream_ahead == NULL)
		return;
	relay_release_page(rs->stream_ahead);
	rs->stream_ahead = NULL;
}

/*
 * The stream's step of a read round, when its page is not in flight:
 * endpoints back where the stream is follow it again (not those failing),
 * then the next page is read, or the one read ahead taken, and routed.
 */
static void
read_stream(RelayState *rs)
{
	List	   *candidates = NIL;
	ListCell   *lc;
	StreamPage *p;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, rs->own_readers)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (ep->active && !ep->follows && !ep->detach && ep->page == NULL &&
			ep->consecutive_failures < CIRCUIT_FAILURES && !failing(ep) &&
			limit_may_follow(ep, now))
			candidates = lappend(candidates, ep);
	}
	if (candidates != NIL)
	{
		int		   *ids = palloc(sizeof(int) * list_length(candidates));
		int		   *attached;
		int			n = 0;

		foreach(lc, candidates)
			ids[n++] = ((RelayEndpoint *) lfirst(lc))->id;
		n = store_attach(ids, n, &attached);
		for (int i = 0; i < n; i++)
		{
			RelayEndpoint *ep = hash_search(rs->endpoints, &attached[i], HASH_FIND, NULL);

			MemoryContext old = MemoryContextSwitchTo(rs->cxt);

			ep->follows = true;
			stream_count_follower(ep, 1);
			rs->own_readers = list_delete_ptr(rs->own_readers, ep);
			rs->attached_now = lappend(rs->attached_now, ep);
			MemoryContextSwitchTo(old);
		}
		list_free(candidates);
	}

	/*
	 * With nobody following it, the stream is not read: it would read every
	 * event for no one.  (The next endpoint to be attached moves it first.)
	 */
	rs->stream_more = false;
	if (stream_followers() == 0)
	{
		drop_ahead(rs);
		return;
	}
	if (rs->stream_ahead != NULL && store_stream_at(rs->stream_ahead->snap, rs->ahead_after))
	{
		int			size = stream_page_size();

		p = rs->stream_ahead;
		rs->stream_ahead = NULL;
		/* (no larger than a page read now: sizes follow the answers) */
		if (p->n > size)
			relay_shorten_page(p, size);
	}
	else
	{
		drop_ahead(rs);
		p = read_stream_page(rs, NULL, 0);
		if (p == NULL)
		{
			rs->stream_unconfirmed = NULL;
			return;
		}
	}
	p->in_stream = true;
	rs->stream_unconfirmed = p;
	route_page(rs, p);
}

/*
 * Read the stream's page after the one in flight while nothing waits to
 * be sent and answers are awaited: the relay would only wait meanwhile,
 * and the next page goes as soon as this one is recorded instead of after
 * a read (against a NATS server answering at once, reading was a fifth of
 * each page's time, with nothing in flight).  The page is only read, in a
 * transaction of its own; read_stream() takes it if the stream is then
 * where the page starts, routing it as it routes any page.  Within the
 * page's batch only (after a page that ended its batch a new snapshot is
 * taken), and once per page.
 */
static StepResult
read_ahead_step(RelayState *rs, void *arg)
{
	*(StreamPage **) arg = read_stream_page(rs, rs->stream_page->snap, rs->stream_page->last_id);
	return STEP_DONE;
}

void
relay_read_ahead(RelayState *rs)
{
	StreamPage *p = rs->stream_page;
	StreamPage *ahead = NULL;
	TimestampTz start;

	if (p == NULL || p->batch_done || p->ahead_tried || rs->stream_ahead != NULL ||
		stream_followers() == 0 || pump_in_flight() == 0 || pump_any_ready())
		return;
	p->ahead_tried = true;
	start = GetCurrentTimestamp();
	if (relay_run_step(rs, "outbox: reading ahead", read_ahead_step, &ahead) == STEP_DONE)
	{
		rs->stream_ahead = ahead;
		rs->ahead_after = p->last_id;
	}
	else if (ahead != NULL)
		relay_release_page(ahead);
	relay_count_since(RELAY_SQL_US, start);
}

/*
 * How many new events an endpoint reading on its own reads at once.  One
 * failing without pause gets one per outbox.poll_interval to probe it,
 * besides its due retries: its backlog waits at its position instead of
 * costing the other endpoints the relay's time.  One whose cap is cut
 * (pump_endpoint_cap: it failed, or lagged behind the stream) reads twice
 * its cap: a read
 * walks the ids until it has its events, and an endpoint whose types are
 * rare walks far for a full page it could not send for minutes (bench
 * case 12: 100 endpoints that never answer, a 20 ms walk each when their
 * first timeouts came, the others' deliveries stalled meanwhile).  One
 * with a rate limit reads what it may send in a few seconds.
 */
static int
own_page_size(const RelayEndpoint *ep)
{
	if (ep->consecutive_failures >= CIRCUIT_FAILURES)
		return 1;
	if (ep->lagged || ep->retry_failures > 0)
		return limit_page_size(ep, Min(outbox_batch_size, 2 * pump_endpoint_cap(ep)));
	return limit_page_size(ep, stream_page_share(ep));
}

/*
 * ep's next page of new events, or NULL when there is none.  Of its
 * deliveries, those whose deliver_at is later wait, and on an ordered
 * endpoint those behind an earlier event of their key (blocked) wait for
 * now; the rest go as first attempts.
 */
static Batch *
read_own_page(RelayState *rs, RelayEndpoint *ep)
{
	MemoryContext cxt = relay_batch_context(TopTransactionContext);
	EventRows	rows;
	Batch	   *b;
	TimestampTz now;

	if (!store_read_page(ep->id, own_page_size(ep), ep->verify_page, &rows, cxt))
	{
		MemoryContextDelete(cxt);
		return NULL;
	}
	b = delivery_batch_of_events(ep, true, &rows, cxt);
	b->snap = rows.snap;
	/* (the position passes its own rows, not those sent ahead) */
	b->last_id = b->d[rows.n_own - 1].id;
	b->batch_done = rows.batch_done;
	now = GetCurrentTimestamp();
	for (int i = 0; i < b->n; i++)
		first_attempt(&b->d[i], rows.blocked[i], now);
	delivery_free_events(&rows);
	MemoryContextSetParent(cxt, rs->cxt);
	return b;
}

/* ep's due retries, or NULL when none is due. */
static Batch *
read_due(RelayState *rs, RelayEndpoint *ep)
{
	MemoryContext cxt = relay_batch_context(TopTransactionContext);
	EventRows	rows;
	Batch	   *b;

	if (!store_read_due(ep->id, outbox_batch_size, ep->verify_due, &rows, cxt))
	{
		MemoryContextDelete(cxt);
		return NULL;
	}
	b = delivery_batch_of_events(ep, false, &rows, cxt);
	for (int i = 0; i < b->n; i++)
		b->d[i].attempt = rows.attempts[i] + 1;
	delivery_free_events(&rows);
	MemoryContextSetParent(cxt, rs->cxt);
	return b;
}

/*
 * A full round's loads: the endpoints again if they changed (a transaction
 * that changed them committed: outbox._wake_at_commit), and every
 * ENDPOINTS_RELOAD_MS for what changes with time alone (a previous secret
 * expiring, an endpoint disabled by outbox.disable_after); not every poll:
 * with 10,000 endpoints a load took about a tenth of the relay's time.
 * Then when the next retry comes due, and the endpoints with retries due
 * now, which it returns.
 */
static List *
load_for_full_round(RelayState *rs)
{
	List	   *due = NIL;
	int		   *ids;
	int			n;
	uint64		version = rs->version_before_read;
	TimestampTz now = GetCurrentTimestamp();

	if (rs->endpoints_stale || version != rs->endpoints_version ||
		TimestampDifferenceExceeds(rs->endpoints_loaded_at, now, ENDPOINTS_RELOAD_MS))
	{
		rs->endpoints_version = version;
		rs->endpoints_loaded_at = now;
		rs->endpoints_stale = false;
		endpoints_load(rs->endpoints, rs->cxt);
		endpoints_loaded(rs);
	}
	/* Retries come due with time, not with commits. */
	rs->next_due = store_next_due();
	n = store_due_endpoints(&ids);
	for (int i = 0; i < n; i++)
	{
		RelayEndpoint *ep = hash_search(rs->endpoints, &ids[i], HASH_FIND, NULL);

		if (ep != NULL)
			due = lappend(due, ep);
	}
	return due;
}

/*
 * The pages of new events of the endpoints reading on their own, in turn,
 * for OWN_READ_BUDGET_MS at most: the rest go first next time.
 */
static void
read_own_pages(RelayState *rs, bool full)
{
	int			n_own = list_length(rs->own_readers);
	TimestampTz started = GetCurrentTimestamp();

	rs->own_cut = false;
	for (int k = 0; k < n_own; k++)
	{
		int			i = (rs->own_next + k) % n_own;
		RelayEndpoint *ep = (RelayEndpoint *) list_nth(rs->own_readers, i);

		if (TimestampDifferenceExceeds(started, GetCurrentTimestamp(), OWN_READ_BUDGET_MS))
		{
			/* the rest go first next time, and may read at once */
			rs->own_next = i;
			rs->own_cut = true;
			break;
		}
		if (!may_read_page(rs, ep, full))
			continue;
		ep->more_page = false;
		if (ep->consecutive_failures >= CIRCUIT_FAILURES)
			ep->probed_at = rs->last_read;
		ep->page = read_own_page(rs, ep);
		if (ep->page)
		{
			priority_order(ep->page);
			link_same_key(ep->page);
			dlist_push_tail(&rs->unconfirmed, &ep->page->node);
		}
	}
}

/*
 * The due retries of the endpoints in due (a full round's) and of those a
 * recorded batch asked to read again (due_again).
 */
static void
read_due_retries(RelayState *rs, List *due)
{
	ListCell   *lc;

	foreach(lc, rs->due_again)
	{
		int			id = lfirst_int(lc);
		RelayEndpoint *ep = hash_search(rs->endpoints, &id, HASH_FIND, NULL);

		if (ep != NULL)
			due = lappend(due, ep);
	}
	list_free(rs->due_again);
	rs->due_again = NIL;
	foreach(lc, due)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (may_read_due(ep, true))
		{
			ep->more_due = false;
			ep->due = read_due(rs, ep);
			if (ep->due)
				dlist_push_tail(&rs->unconfirmed, &ep->due->node);
		}
	}
	list_free(due);
}

/*
 * The reading step of relay_read_round: the stream's next page, routed,
 * and what each endpoint that reads on its own is owed, into the
 * unconfirmed list.
 * A full round first loads the endpoints again if they changed.  An
 * endpoint's requests to read again at once are taken as it reads.
 */
static StepResult
read_step(RelayState *rs, void *arg)
{
	bool		full = *(bool *) arg;
	List	   *due = NIL;

	if (full && !store_extension_ready())
		return STEP_ABSENT;
	if (full)
		due = load_for_full_round(rs);
	if (rs->stream_page == NULL)
		read_stream(rs);
	read_own_pages(rs, full);
	read_due_retries(rs, due);
	return STEP_DONE;
}

/*
 * A read round failed: nothing it read took effect.  Its batches and the
 * stream's page are given up, the attaching undone, the endpoints loaded
 * again at the next full round, which comes READ_RETRY_MS from now: a
 * failed read is not repeated at once.
 */
static void
read_failed(RelayState *rs)
{
	dlist_mutable_iter iter;
	ListCell   *lc;

	dlist_foreach_modify(iter, &rs->unconfirmed)
	{
		dlist_delete(iter.cur);
		relay_free_batch(dlist_container(Batch, node, iter.cur));
	}
	if (rs->stream_unconfirmed != NULL)
	{
		HASH_SEQ_STATUS seq;
		RelayEndpoint *ep;

		rs->stream_unconfirmed->in_stream = false;
		relay_release_page(rs->stream_unconfirmed);
		rs->stream_unconfirmed = NULL;
		/* route_page may have stopped half way: its scratch goes */
		hash_seq_init(&seq, rs->endpoints);
		while ((ep = hash_seq_search(&seq)) != NULL)
		{
			ep->part = NULL;
			ep->routed = 0;
		}
	}
	/* The attaching did not commit either. */
	foreach(lc, rs->attached_now)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (ep->follows)
		{
			MemoryContext old = MemoryContextSwitchTo(rs->cxt);

			ep->follows = false;
			stream_count_follower(ep, -1);
			rs->own_readers = lappend(rs->own_readers, ep);
			MemoryContextSwitchTo(old);
		}
	}
	list_free(rs->attached_now);
	rs->attached_now = NIL;
	/* What was loaded may be half done. */
	rs->endpoints_stale = true;
	foreach(lc, rs->own_readers)
		((RelayEndpoint *) lfirst(lc))->more_page = false;
	rs->stream_more = false;
	relay_wake_by(rs, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), READ_RETRY_MS));
}

/*
 * A read round committed: the stream's page is in flight, and every batch
 * read goes to the active list, its deliveries already answered, expired
 * or deferred settled so.
 */
static void
read_committed(RelayState *rs)
{
	list_free(rs->attached_now);
	rs->attached_now = NIL;
	if (rs->stream_unconfirmed != NULL)
	{
		rs->stream_page = rs->stream_unconfirmed;
		rs->stream_unconfirmed = NULL;
		rs->stream_page->read_at = GetCurrentTimestamp();
		rs->stream_page->cpu_at_read = stream_cpu_us();
		rs->stream_page->progress_at = rs->stream_page->read_at;
	}

	while (!dlist_is_empty(&rs->unconfirmed))
	{
		Batch	   *b = dlist_container(Batch, node, dlist_pop_head_node(&rs->unconfirmed));

		b->pending = b->n;
		b->last_flush = GetCurrentTimestamp();
		b->answered_at = b->last_flush;
		for (int i = 0; i < b->n; i++)
		{
			Delivery   *d = &b->d[i];

			d->state = DELIVERY_WAITING;
			if (d->already)
				delivery_settle(d, OUTCOME_KIND_ALREADY);
			else if (policy_expired(d->deadline, b->last_flush))
				delivery_expire(d);
			else if (d->deferred)
				delivery_defer(d, d->deliver_at);
		}
		dlist_push_tail(&rs->active, &b->node);
	}
}

/*
 * Read the stream's next page and what each endpoint reading on its own is
 * owed: a page of new events and, in a full round (the poll timer, or
 * endpoints changed), due retries and, if they changed, the endpoints.  One
 * short transaction.  Batches go to the active list only once it
 * committed.  Without the extension there is nothing to read, and the
 * relay leaves (main loop).
 */
void
relay_read_round(RelayState *rs, bool full)
{
	/*
	 * Read before the step's snapshot: a change committed after this read
	 * bumps the version again (at commit, once visible), so the load never
	 * misses a change it counts as loaded.
	 */
	rs->version_before_read = outbox_endpoints_version();
	if (relay_run_step(rs, "outbox: reading events", read_step, &full) != STEP_DONE)
		read_failed(rs);
	else
		read_committed(rs);
}

/*
 * Is a read round worth a transaction now?  Only if the stream or some
 * endpoint may read (a commit may have left it something).
 */
bool
relay_worth_reading(RelayState *rs)
{
	ListCell   *lc;

	/* (the stream is read only while someone follows it: read_stream) */
	if ((rs->stream_page == NULL && stream_followers() > 0) || rs->due_again != NIL)
		return true;
	foreach(lc, rs->own_readers)
		if (may_read_page(rs, (RelayEndpoint *) lfirst(lc), false))
			return true;
	return false;
}

/*
 * A wake-up (a commit, or the poll timer) finds the stream's page or an
 * endpoint's own page in flight: they cannot read now, so they read once it
 * is recorded.  Without this, an event committed while the page was out
 * waited for the next commit or the poll timer (seen as a 1 s tail in bench
 * case 3).
 */
void
relay_note_wake(RelayState *rs)
{
	ListCell   *lc;

	if (rs->stream_page != NULL)
		rs->stream_woken_busy = true;
	foreach(lc, rs->own_readers)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (ep->page != NULL)
			ep->woken_busy = true;
	}
}

/*
 * Did a recorded batch ask for the stream or an endpoint to read again at
 * once, and may it?  (read_step takes the requests as it reads.)
 */
bool
relay_want_more(RelayState *rs)
{
	ListCell   *lc;

	/* (with nobody following it, the stream is not read: read_stream) */
	if (rs->stream_more && rs->stream_page == NULL && stream_followers() > 0)
		return true;
	if (rs->due_again != NIL || rs->own_cut)
		return true;
	foreach(lc, rs->own_readers)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (ep->more_page && may_read_page(rs, ep, false))
			return true;
	}
	return false;
}
