/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay worker: its registration, signals, the latch loop and error
 *	  recovery.  It reads committed events per endpoint in short
 *	  transactions, delivers them with no transaction open, and records the
 *	  outcomes in a second short transaction (DESIGN.md, data flow).
 *
 * One relay serves one database: the launcher starts it with the database
 * in bgw_main_arg and its shared-memory slot in bgw_extra.  It leaves on
 * its own when outbox is not installed there (or is an older version), and
 * once a second it rotates the events, the attempt log and the inbox.  Per
 * endpoint at most one page of new events and one set of due retries are
 * in flight; a slow endpoint only holds back itself, and one failing
 * without pause only gets probes (CIRCUIT_FAILURES).  The relay never waits
 * on a lock held by a user's transaction for long: it skips what is locked
 * and tries again, and gives way in a deadlock.  Commits of emitting
 * transactions set our latch (emit.c); retries and deliver_at end the
 * loop's wait when they come due (next_due); outbox.poll_interval covers
 * prepared transactions.  The loop sleeps in one wait on the
 * latch and on what its targets watch (target_wait), so a commit wakes it
 * even while requests are in flight.  With outbox.senders, some requests
 * are sent by sender processes (sender.c); their results set the latch.
 * Handing deliveries to their targets and settling their results is
 * pump.c's: the loop calls pump_collect() and pump_run() once an iteration.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "relay/credentials.h"
#include "relay/delivery.h"
#include "relay/endpoints.h"
#include "guc.h"
#include "relay/limit.h"
#include "relay/policy.h"
#include "relay/priority.h"
#include "relay/pump.h"
#include "relay/route.h"
#include "relay/sender.h"
#include "shmem.h"
#include "relay/store.h"
#include "relay/stream.h"
#include "targets/target.h"
#include "relay/relay.h"

/*
 * How often what finished of batches still partly in flight is recorded,
 * all together (record_round).
 */
#define RECORD_INTERVAL_MS	10
/* After a record failed or found its endpoint busy, try again after this. */
#define RECORD_RETRY_MS		200
/*
 * After a read round failed (a lock timed out, say), a full round comes
 * after this, whatever outbox.poll_interval says: what it did not read
 * (new events, retries due, the time of the next) would otherwise wait for
 * the poll or the next commit.
 */
#define READ_RETRY_MS		1000
/*
 * An endpoint whose sent outcomes a record had counted in its health row
 * less than this ago, and none a failure for this long, is left out of the
 * health statement for successes alone (outbox._record's quiet): the row
 * would not be written for them anyway (a success is written at most once
 * a second), and its probe was a third of a record of a thousand
 * endpoints, one delivery each (bench case 9).  After a failure every
 * record counts its successes for this long, so that one the statement
 * skipped (the row held elsewhere) is counted again by the next.
 */
#define HEALTH_QUIET_MS		1000
/* While idle, latch wake-ups are taken at most this often. */
#define WAKE_COALESCE_MS	1
/* How often the relay looks for a partition to rotate. */
#define ROTATE_INTERVAL_MS	1000
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

static MemoryContext relay_cxt = NULL;
static HTAB *endpoints = NULL;

/* Batches whose requests are being sent, and those read but not committed. */
static dlist_head active = DLIST_STATIC_INIT(active);
static dlist_head unconfirmed = DLIST_STATIC_INIT(unconfirmed);

/*
 * The stream (DESIGN.md, "The read path"): its page in flight, or the one
 * read in a transaction not yet committed; whether to read it again at once
 * (the last page did not end its batch, or a commit came while it was out);
 * whether its next page skips what was answered before a restart.
 */
static StreamPage *stream_page = NULL;
static StreamPage *stream_unconfirmed = NULL;
static bool stream_more = false;
static bool stream_woken_busy = false;
static bool stream_verify = true;

/*
 * The stream's page after the one in flight, read ahead (read_ahead), and
 * the id it starts after: the next read takes it if the stream is there.
 */
static StreamPage *stream_ahead = NULL;
static int64 ahead_after = 0;

/*
 * In how many ms the next batch whose finished deliveries wait for their
 * record is due, or detaches not yet written are tried again (record_round;
 * -1: none waits).  The relay's wait ends then: with slow receivers no
 * other answer may come to wake it, and what a crash can repeat is bounded
 * by this interval.
 */
static long record_wait_ms = -1;
/* When record_round last ran its step. */
static TimestampTz last_record_at = 0;

/*
 * When the earliest retry or deferred event not yet due comes due (0: none
 * known): a full round runs then, whatever outbox.poll_interval says.  Read
 * at each full round, lowered by each retry or deferred outcome recorded
 * with an earlier next_at, one already past included (wake_when_due).
 */
static TimestampTz next_due = 0;
/* When the last full round started (0: none yet). */
static TimestampTz last_read = 0;

/* A full round at "at" at the latest: next_due lowered to it. */
static void
wake_by(TimestampTz at)
{
	if (next_due == 0 || at < next_due)
		next_due = at;
}

/*
 * Endpoints that do not follow the stream and may read on their own
 * (active; rebuilt at each load), the ids of those whose due retries are
 * to be read again at once and of those detached in memory whose rows
 * still say they follow, and those attached by the read not yet committed
 * (how many follow the stream is stream.c's).
 */
static List *own_readers = NIL;
static int	own_next = 0;		/* where the next read step starts in it */
static bool own_cut = false;	/* the last read step ran out of time */
static List *due_again = NIL;
static List *detaching = NIL;
static List *attached_now = NIL;

/*
 * When the relay last took what its targets' sockets had (target_wait).
 * A part's wait for an answer counts up to then (stream_detach_laggards): what
 * arrived while the relay ran its SQL it has not seen yet.
 */
static TimestampTz polled_at = 0;

/* The endpoints as loaded: the changes they include, when; or stale. */
static uint64 endpoints_version = 0;
static TimestampTz endpoints_loaded_at = 0;
static bool endpoints_stale = true;
static uint64 version_before_read = 0;

/*
 * Set when a read round finds no outbox (of this library's version) here;
 * with the launch requests counted before that look (shmem.h).
 */
static bool extension_absent = false;
static uint64 requests_before_check = 0;

/*
 * The extension the relay serves, by oid: one dropped and created again
 * (in one transaction, so never seen absent) is another, whose types and
 * functions the relay's kept plans do not know.  The relay leaves as if
 * stopped, and the launcher starts it again (RELAY_EXIT_UNKNOWN).
 */
static Oid	extension_oid = InvalidOid;
static bool extension_replaced = false;

/*
 * Set by any relation's cache invalidation: the extension is looked up
 * again only then, and after a failed step.  pg_extension has no
 * syscache, so each lookup is an index scan (5% of the relay's thread at
 * 50,000 NATS messages a second, one per step).  A drop of outbox drops
 * its tables, whose invalidations come at the latest with their locks; a
 * step begun between the drop's commit and its invalidations fails on the
 * dropped objects, and the next one looks (DESIGN.md, "Launcher and relays").
 */
static bool relations_changed = true;

static void
relation_changed(Datum arg, Oid relid)
{
	relations_changed = true;
}

static void
relay_shmem_exit(int code, Datum arg)
{
	outbox_relay_detach(extension_absent && !extension_replaced ?
						RELAY_EXIT_ABSENT : RELAY_EXIT_UNKNOWN,
						requests_before_check);
	target_abandon_all();
	if (!extension_absent)
		ereport(LOG, (errmsg("outbox relay stopping")));
}

/* Add the microseconds since start to a relay counter. */
static void
count_since(RelayCounter counter, TimestampTz start)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now > start)
		outbox_count(counter, (uint64) (now - start));
}

/* Free a stream page once the stream is past it and no batch points in. */
static void
release_stream_page(StreamPage *p)
{
	if (p->in_stream || p->refs > 0)
		return;
	MemoryContextDelete(p->cxt);
	pfree(p);
}

/* End a stream page after its first n events: not the end of its batch. */
static void
shorten_stream_page(StreamPage *p, int n)
{
	p->n = n;
	p->last_id = p->ev[n - 1].id;
	p->batch_done = false;
}

static void
free_batch(Batch *b)
{
	StreamPage *events = b->events;

	if (b->is_page)
	{
		if (b->ep->page == b)
			b->ep->page = NULL;
	}
	else
		b->ep->due = NULL;
	if (b->stream != NULL)
		b->stream->parts--;
	MemoryContextDelete(b->cxt);
	if (events != NULL)
	{
		events->refs--;
		release_stream_page(events);
	}
}

/*
 * A memory context for a new batch, which the batch takes over.  One for a
 * batch to be read goes under the step's transaction until it is made
 * (MemoryContextSetParent), so that an error reading it frees it.
 */
static MemoryContext
new_batch_context(MemoryContext parent)
{
	return AllocSetContextCreate(parent, "outbox batch", ALLOCSET_SMALL_SIZES);
}

/*
 * Start a step's transaction.  False when outbox is no longer installed
 * (DROP EXTENSION committed): the step does nothing, the transaction is
 * still to be ended, and the main loop leaves.
 */
static bool
begin_tx(const char *activity)
{
	requests_before_check = outbox_launch_requests();
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	if (relations_changed || !OidIsValid(extension_oid))
	{
		Oid			oid;

		relations_changed = false;
		oid = store_extension_oid();

		if (!OidIsValid(oid))
			extension_absent = true;
		else if (!OidIsValid(extension_oid))
			extension_oid = oid;
		else if (oid != extension_oid)
			extension_absent = extension_replaced = true;
	}
	return !extension_absent;
}

/* Commit a step's transaction. */
static void
commit_tx(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/* After the commit: statistics, and idle in pg_stat_activity. */
static void
report_idle(void)
{
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* Report the error being handled and leave no transaction behind. */
static void
recover(MemoryContext cxt)
{
	EmitErrorReport();
	AbortCurrentTransaction();
	FlushErrorState();
	relations_changed = true;	/* (the error may have been in the lookup) */
	MemoryContextSwitchTo(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* How a step's transaction ended. */
typedef enum StepResult
{
	STEP_DONE,					/* committed */
	STEP_DECLINED,				/* committed, but the step found it could not
								 * do its work yet (an endpoint's row locked
								 * by another transaction) */
	STEP_ABSENT,				/* outbox is not installed (of this version) */
	STEP_FAILED					/* an error, reported; nothing took effect */
} StepResult;

typedef StepResult (*StepFunc) (void *arg);

/*
 * Run one step of the loop in a short transaction of its own (the bracket
 * of begin_tx and commit_tx).  An error anywhere, in the commit too, is
 * reported and rolled back, and the step has failed: a result counts only
 * once its commit returned.  Without the extension the step is not run and
 * the main loop leaves.
 */
static StepResult
run_step(const char *activity, StepFunc step, void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;

	/* Set inside PG_TRY and read after it: volatile (setjmp). */
	volatile StepResult result = STEP_FAILED;

	PG_TRY();
	{
		StepResult	r = STEP_ABSENT;

		if (begin_tx(activity))
			r = step(arg);
		commit_tx();
		result = r;
		report_idle();
	}
	PG_CATCH();
	{
		recover(cxt);
	}
	PG_END_TRY();
	if (result == STEP_ABSENT)
		extension_absent = true;
	return result;
}

/*
 * When an endpoint may read: a page of new events if none is in flight
 * (one failing without pause only to probe it, in a full round at least
 * outbox.poll_interval after its last probe: full rounds also run whenever
 * a retry or a deliver_at comes due), its due retries if none are in
 * flight and a full round or a recorded batch asks.
 */
static bool
may_read_page(const RelayEndpoint *ep, bool full)
{
	return ep->active && !ep->follows && ep->page == NULL &&
		(ep->consecutive_failures < CIRCUIT_FAILURES ||
		 (full && TimestampDifferenceExceeds(ep->probed_at, last_read, outbox_poll_interval)));
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
 * outbox.batch_size of them, and comparing each with those before it
 * (before 1.5) was quadratic.
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
endpoints_loaded(void)
{
	HASH_SEQ_STATUS seq;
	RelayEndpoint *ep;

	MemoryContext old = MemoryContextSwitchTo(relay_cxt);

	route_build(endpoints, relay_cxt);
	list_free(own_readers);
	own_readers = NIL;
	stream_forget_followers();
	hash_seq_init(&seq, endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
	{
		if (ep->follows && !ep->active && ep->seen)
			relay_detach(ep);
		if (ep->follows && ep->active)
			stream_count_follower(ep, 1);
		else if (ep->active)
			own_readers = lappend(own_readers, ep);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Stop ep following the stream.  In memory at once; its row says so at the
 * next record, in the statement that moves the stream next, so that its own
 * position takes the stream's before the stream moves on.  Its part of the
 * stream page in flight, if any is left unrecorded, becomes its own page:
 * its own position moves past it when it is recorded.  Otherwise it has
 * nothing of that page left to do, and its position moves past the page
 * with the detach.
 */
void
relay_detach(RelayEndpoint *ep)
{
	MemoryContext old;

	if (!ep->follows)
		return;
	ep->follows = false;
	if (ep->active)
		stream_count_follower(ep, -1);
	old = MemoryContextSwitchTo(relay_cxt);
	if (!ep->detach)
		detaching = lappend_int(detaching, ep->id);
	if (ep->active)
		own_readers = list_append_unique_ptr(own_readers, ep);
	MemoryContextSwitchTo(old);
	ep->detach = true;
	ep->detach_past = false;
	if (stream_page == NULL)
		return;
	/* Fewer parts left may shorten the others' waits: look again at once. */
	stream_look_now();
	if (ep->page != NULL && ep->page->stream == stream_page)
	{
		if (ep->page->pending > 0)
			stream_page->finished++;
		ep->page->stream = NULL;
		stream_page->parts--;
		return;
	}
	/* (its row still follows the stream: the detach moves it past) */
	ep->detach_past = true;
	if (ep->past.snap != NULL)
		pfree(ep->past.snap);
	ep->past.snap = MemoryContextStrdup(relay_cxt, stream_page->snap);
	ep->past.last_id = stream_page->last_id;
	ep->past.batch_done = stream_page->batch_done;
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
 * Route a page of the stream to the endpoints that follow it: each gets its
 * events as one batch, a part of the page, pushed on the unconfirmed list.
 * An endpoint failing without pause stops following instead: it gets probes
 * on its own.  Whether a delivery was answered before a restart (the first
 * page after a start) and whether it waits behind its key (ordered
 * endpoints) is asked in one statement for the whole page.
 */
static void
route_page(StreamPage *p)
{
	List	   *parts = NIL;
	ListCell   *lc;
	RelayEndpoint **eps;
	RelayEndpoint **routed;		/* each event's receivers, one after another */
	int		   *first_routed;	/* where event i's are in routed */
	int			nrouted = 0;
	int			room = Max(p->n, 1);
	int			nchecks = 0;
	int		   *check_eids;
	const pg_uuid_t **check_events;
	char	  **check_keys;
	bool	   *check_ordered;
	Delivery  **check_d;
	bool		verify_some = false;
	bool		cut = false;
	TimestampTz now = GetCurrentTimestamp();

	/*
	 * Count each endpoint's deliveries first: a part is one allocation.  A
	 * page ends before an event that would give an endpoint more than its
	 * stream_page_share() of them: no endpoint gets a larger page of the
	 * stream than it would read on its own (an endpoint failing without
	 * pause, say, gets that many before it only gets probes); the rest is
	 * read again with the next page, and the pages after it are read no
	 * longer than this one (stream_cut).  Each event is looked up once:
	 * the endpoints it goes to are kept for the second pass (one entry a
	 * delivery).
	 */
	routed = palloc(sizeof(RelayEndpoint *) * room);
	first_routed = palloc(sizeof(int) * (p->n + 1));
	for (int i = 0; i < p->n; i++)
	{
		int			n = route_match(p->ev[i].type, &eps);
		bool		full = false;

		for (int j = 0; j < n && !full; j++)
			full = eps[j]->follows && eps[j]->routed >= stream_page_share(eps[j]);
		if (full)
		{
			shorten_stream_page(p, i);
			cut = true;
			break;
		}
		first_routed[i] = nrouted;
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
				!limit_may_follow(ep, now))
			{
				relay_detach(ep);
				continue;
			}
			if (ep->routed++ == 0)
				parts = lappend(parts, ep);
			if (nrouted == room)
			{
				room *= 2;
				routed = repalloc(routed, sizeof(RelayEndpoint *) * room);
			}
			routed[nrouted++] = ep;
		}
	}
	first_routed[p->n] = nrouted;
	stream_page_routed(p, cut);
	foreach(lc, parts)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);
		Batch	   *b = delivery_new_batch(ep, true, ep->routed, new_batch_context(relay_cxt));

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
		nchecks += ep->routed;
	}
	check_eids = palloc(sizeof(int) * Max(nchecks, 1));
	check_events = palloc(sizeof(pg_uuid_t *) * Max(nchecks, 1));
	check_keys = palloc(sizeof(char *) * Max(nchecks, 1));
	check_ordered = palloc(sizeof(bool) * Max(nchecks, 1));
	check_d = palloc(sizeof(Delivery *) * Max(nchecks, 1));
	nchecks = 0;

	for (int i = 0; i < p->n; i++)
	{
		StreamEvent *e = &p->ev[i];

		for (int j = first_routed[i]; j < first_routed[i + 1]; j++)
		{
			Batch	   *b = routed[j]->part;
			Delivery   *d;

			/* (an endpoint routed an event is never detached later in the page) */
			Assert(b != NULL);
			d = &b->d[b->n++];
			delivery_of_event(d, b, e);
			d->body = stream_body(p, e, b->ep->format);
			verify_some |= b->ep->verify_page;
			first_attempt(d, false, now);
			if (stream_verify || b->ep->verify_page || (b->ep->ordered && e->key != NULL))
			{
				check_eids[nchecks] = b->ep->id;
				check_events[nchecks] = &d->event_id;
				check_keys[nchecks] = d->key;
				check_ordered[nchecks] = b->ep->ordered;
				check_d[nchecks] = d;
				nchecks++;
			}
		}
	}

	if (nchecks > 0)
	{
		bool	   *delivered = palloc(sizeof(bool) * nchecks);
		bool	   *blocked = palloc(sizeof(bool) * nchecks);

		store_route_checks(nchecks, check_eids, check_events, check_keys, check_ordered,
						   stream_verify || verify_some, delivered, blocked);
		for (int i = 0; i < nchecks; i++)
		{
			Delivery   *d = check_d[i];

			d->already = delivered[i];
			if (blocked[i])
				first_attempt(d, true, now);
		}
	}

	foreach(lc, parts)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);
		Batch	   *b = ep->part;

		priority_order(b);
		link_same_key(b);
		ep->page = b;
		ep->part = NULL;
		ep->routed = 0;
		dlist_push_tail(&unconfirmed, &b->node);
	}
	list_free(parts);
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
									ep->timeout_ms + 1000);
}

/*
 * Read a stream page of stream_page_size() events (store_read_stream: the
 * next, or with ahead_of the one after ahead_after, read ahead), or NULL
 * when there is none.  Its memory is under the step's transaction until it
 * is read, so that an error frees it, then the relay's.
 */
static StreamPage *
read_stream_page(const char *ahead_of, int64 ahead_after)
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
	p = MemoryContextAllocZero(relay_cxt, sizeof(StreamPage));
	p->cxt = cxt;
	p->n = rows.n;
	p->ev = rows.ev;
	p->snap = rows.snap;
	p->last_id = p->ev[p->n - 1].id;
	p->batch_done = rows.batch_done;
	MemoryContextSetParent(cxt, relay_cxt);
	return p;
}

/* Forget the page read ahead, if any (it is in no stream, no batch's). */
static void
drop_ahead(void)
{
	if (stream_ahead == NULL)
		return;
	release_stream_page(stream_ahead);
	stream_ahead = NULL;
}

/*
 * The stream's step of a read round, when its page is not in flight:
 * endpoints back where the stream is follow it again (not those failing),
 * then the next page is read, or the one read ahead taken, and routed.
 */
static void
read_stream(void)
{
	List	   *candidates = NIL;
	ListCell   *lc;
	StreamPage *p;
	TimestampTz now = GetCurrentTimestamp();

	foreach(lc, own_readers)
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
			RelayEndpoint *ep = hash_search(endpoints, &attached[i], HASH_FIND, NULL);

			MemoryContext old = MemoryContextSwitchTo(relay_cxt);

			ep->follows = true;
			stream_count_follower(ep, 1);
			own_readers = list_delete_ptr(own_readers, ep);
			attached_now = lappend(attached_now, ep);
			MemoryContextSwitchTo(old);
		}
		list_free(candidates);
	}

	/*
	 * With nobody following it, the stream is not read: it would read every
	 * event for no one.  (The next endpoint to be attached moves it first.)
	 */
	stream_more = false;
	if (stream_followers() == 0)
	{
		drop_ahead();
		return;
	}
	if (stream_ahead != NULL && store_stream_at(stream_ahead->snap, ahead_after))
	{
		int			size = stream_page_size();

		p = stream_ahead;
		stream_ahead = NULL;
		/* (no larger than a page read now: sizes follow the answers) */
		if (p->n > size)
			shorten_stream_page(p, size);
	}
	else
	{
		drop_ahead();
		p = read_stream_page(NULL, 0);
		if (p == NULL)
		{
			stream_unconfirmed = NULL;
			return;
		}
	}
	p->in_stream = true;
	stream_unconfirmed = p;
	route_page(p);
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
read_ahead_step(void *arg)
{
	*(StreamPage **) arg = read_stream_page(stream_page->snap, stream_page->last_id);
	return STEP_DONE;
}

static void
read_ahead(void)
{
	StreamPage *p = stream_page;
	StreamPage *ahead = NULL;
	TimestampTz start;

	if (p == NULL || p->batch_done || p->ahead_tried || stream_ahead != NULL ||
		stream_followers() == 0 || pump_in_flight() == 0 || pump_any_ready())
		return;
	p->ahead_tried = true;
	start = GetCurrentTimestamp();
	if (run_step("outbox: reading ahead", read_ahead_step, &ahead) == STEP_DONE)
	{
		stream_ahead = ahead;
		ahead_after = p->last_id;
	}
	else if (ahead != NULL)
		release_stream_page(ahead);
	count_since(RELAY_SQL_US, start);
}

/*
 * How many new events an endpoint reading on its own reads at once.  One
 * failing without pause gets one per outbox.poll_interval to probe it, besides its
 * due retries: its backlog waits at its position instead of costing the
 * other endpoints the relay's time.  One whose cap is cut (pump_endpoint_cap:
 * it failed, or lagged behind the stream) reads twice its cap: a read
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
read_own_page(RelayEndpoint *ep)
{
	MemoryContext cxt = new_batch_context(TopTransactionContext);
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
	MemoryContextSetParent(cxt, relay_cxt);
	return b;
}

/* ep's due retries, or NULL when none is due. */
static Batch *
read_due(RelayEndpoint *ep)
{
	MemoryContext cxt = new_batch_context(TopTransactionContext);
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
	MemoryContextSetParent(cxt, relay_cxt);
	return b;
}

/*
 * The reading step of read_round: the stream's next page, routed, and what
 * each endpoint that reads on its own is owed, into the unconfirmed list.
 * A full round first loads the endpoints again if they changed.  An
 * endpoint's requests to read again at once are taken as it reads.
 */
static StepResult
read_step(void *arg)
{
	bool		full = *(bool *) arg;
	ListCell   *lc;
	List	   *due = NIL;
	int			n_own;
	TimestampTz started;

	if (full && !store_extension_ready())
		return STEP_ABSENT;
	if (full)
	{
		int		   *ids;
		int			n;

		uint64		version = version_before_read;
		TimestampTz now = GetCurrentTimestamp();

		/*
		 * Endpoints are loaded again when a transaction that changed them
		 * committed (outbox._wake_at_commit), and every ENDPOINTS_RELOAD_MS
		 * for what changes with time alone (a previous secret expiring, an
		 * endpoint disabled by outbox.disable_after); not every poll: with
		 * 10,000 endpoints a load took about a tenth of the relay's time.
		 */
		if (endpoints_stale || version != endpoints_version ||
			TimestampDifferenceExceeds(endpoints_loaded_at, now, ENDPOINTS_RELOAD_MS))
		{
			endpoints_version = version;
			endpoints_loaded_at = now;
			endpoints_stale = false;
			endpoints_load(endpoints, relay_cxt);
			endpoints_loaded();
		}
		/* Retries come due with time, not with commits. */
		next_due = store_next_due();
		n = store_due_endpoints(&ids);
		for (int i = 0; i < n; i++)
		{
			RelayEndpoint *ep = hash_search(endpoints, &ids[i], HASH_FIND, NULL);

			if (ep != NULL)
				due = lappend(due, ep);
		}
	}
	if (stream_page == NULL)
		read_stream();
	own_cut = false;

	n_own = list_length(own_readers);
	started = GetCurrentTimestamp();
	for (int k = 0; k < n_own; k++)
	{
		int			i = (own_next + k) % n_own;
		RelayEndpoint *ep = (RelayEndpoint *) list_nth(own_readers, i);

		if (TimestampDifferenceExceeds(started, GetCurrentTimestamp(), OWN_READ_BUDGET_MS))
		{
			/* the rest go first next time, and may read at once */
			own_next = i;
			own_cut = true;
			break;
		}

		if (may_read_page(ep, full))
		{
			ep->more_page = false;
			if (ep->consecutive_failures >= CIRCUIT_FAILURES)
				ep->probed_at = last_read;
			ep->page = read_own_page(ep);
			if (ep->page)
			{
				priority_order(ep->page);
				link_same_key(ep->page);
				dlist_push_tail(&unconfirmed, &ep->page->node);
			}
		}
	}

	foreach(lc, due_again)
	{
		int			id = lfirst_int(lc);
		RelayEndpoint *ep = hash_search(endpoints, &id, HASH_FIND, NULL);

		if (ep != NULL)
			due = lappend(due, ep);
	}
	list_free(due_again);
	due_again = NIL;
	foreach(lc, due)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (may_read_due(ep, true))
		{
			ep->more_due = false;
			ep->due = read_due(ep);
			if (ep->due)
				dlist_push_tail(&unconfirmed, &ep->due->node);
		}
	}
	list_free(due);
	return STEP_DONE;
}

/*
 * Read the stream's next page and what each endpoint reading on its own is
 * owed: a page of new events and, in a full round (the poll timer, or
 * endpoints changed), due retries and, if they changed, the endpoints.  One
 * short transaction.  Batches go to the active list only once it
 * committed.  Without the extension there is nothing to read, and the
 * relay leaves (main loop).
 */
static void
read_round(bool full)
{
	ListCell   *lc;

	/*
	 * Read before the step's snapshot: a change committed after this read
	 * bumps the version again (at commit, once visible), so the load never
	 * misses a change it counts as loaded.
	 */
	version_before_read = outbox_endpoints_version();
	if (run_step("outbox: reading events", read_step, &full) != STEP_DONE)
	{
		dlist_mutable_iter iter;

		dlist_foreach_modify(iter, &unconfirmed)
		{
			dlist_delete(iter.cur);
			free_batch(dlist_container(Batch, node, iter.cur));
		}
		if (stream_unconfirmed != NULL)
		{
			HASH_SEQ_STATUS seq;
			RelayEndpoint *ep;

			stream_unconfirmed->in_stream = false;
			release_stream_page(stream_unconfirmed);
			stream_unconfirmed = NULL;
			/* route_page may have stopped half way: its scratch goes */
			hash_seq_init(&seq, endpoints);
			while ((ep = hash_seq_search(&seq)) != NULL)
			{
				ep->part = NULL;
				ep->routed = 0;
			}
		}
		/* The attaching did not commit either. */
		foreach(lc, attached_now)
		{
			RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

			if (ep->follows)
			{
				MemoryContext old = MemoryContextSwitchTo(relay_cxt);

				ep->follows = false;
				stream_count_follower(ep, -1);
				own_readers = lappend(own_readers, ep);
				MemoryContextSwitchTo(old);
			}
		}
		list_free(attached_now);
		attached_now = NIL;
		/* What was loaded may be half done. */
		endpoints_stale = true;
		/* A failed read is not repeated at once: the next full round is. */
		foreach(lc, own_readers)
			((RelayEndpoint *) lfirst(lc))->more_page = false;
		stream_more = false;
		wake_by(TimestampTzPlusMilliseconds(GetCurrentTimestamp(), READ_RETRY_MS));
		return;
	}
	list_free(attached_now);
	attached_now = NIL;
	if (stream_unconfirmed != NULL)
	{
		stream_page = stream_unconfirmed;
		stream_unconfirmed = NULL;
		stream_page->read_at = GetCurrentTimestamp();
		stream_page->cpu_at_read = stream_cpu_us();
		stream_page->progress_at = stream_page->read_at;
	}

	while (!dlist_is_empty(&unconfirmed))
	{
		Batch	   *b = dlist_container(Batch, node, dlist_pop_head_node(&unconfirmed));

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
		dlist_push_tail(&active, &b->node);
	}
}

/*
 * A recorded retry, or an event deferred to its deliver_at, ends the
 * loop's wait when it comes due (next_due): at once when that passed while
 * it waited for its record.  Only once the record committed: a record
 * declined or failed is tried again, and wakes nothing meanwhile.  One
 * deferred behind its key waits for that key's retry (or due_again).
 */
static void
wake_when_due(const Delivery *d)
{
	if ((d->outcome == OUTCOME_KIND_RETRY || d->outcome == OUTCOME_KIND_DEFERRED) &&
		!d->behind_key && d->next_at != 0)
		wake_by(d->next_at);
}

/* What record_step records, and what each batch in it is. */
typedef struct RecordRound
{
	Batch	  **batches;		/* their finished deliveries not yet recorded */
	int			nbatches;
	RecordSet	set;			/* their outcomes (record_step), pages and
								 * detaches */
	bool	   *complete;		/* per batch: nothing in flight */
	bool		moves_stream;	/* the set moves the stream past its page */
	int		   *locked;			/* after the step: endpoints held elsewhere */
	int			nlocked;
} RecordRound;

/*
 * The outcomes of the round's batches not recorded yet, in current memory:
 * those of finished deliveries, a batch's reason to disable its endpoint
 * with the first of its.  Returns how many.
 */
static int
outcome_rows(const RecordRound *r, OutcomeRow **rows)
{
	int			total = 0;
	int			n = 0;

	for (int i = 0; i < r->nbatches; i++)
		total += r->batches[i]->n;
	*rows = palloc(sizeof(OutcomeRow) * Max(total, 1));
	for (int i = 0; i < r->nbatches; i++)
	{
		Batch	   *b = r->batches[i];
		const char *reason = b->disable_reason;

		for (int j = 0; j < b->n; j++)
		{
			Delivery   *d = &b->d[j];
			OutcomeRow *o;

			if (d->state != DELIVERY_DONE || d->recorded)
				continue;
			o = &(*rows)[n++];
			o->endpoint_id = d->batch->ep->id;
			o->id = d->id;
			o->event_id = &d->event_id;
			o->attempt = d->attempt;
			o->outcome = d->outcome;
			o->next_at = d->next_at;
			o->sent = delivery_was_sent(d);
			o->status = d->result.status;
			o->error = d->result.error;
			o->duration_ms = d->result.duration_ms;
			o->response = d->result.response;
			o->response_len = d->result.response_len;
			o->disable_reason = reason;
			reason = NULL;
		}
	}
	return n;
}

/*
 * The recording step of record_round: one statement.  Endpoints another
 * transaction holds (a drop_endpoint() not yet committed) come back in
 * locked; an endpoint that is gone is done, with nothing to record.
 */
static StepResult
record_step(void *arg)
{
	RecordRound *r = (RecordRound *) arg;

	r->set.noutcomes = outcome_rows(r, &r->set.outcomes);
	r->nlocked = store_record(&r->set, &r->locked, relay_cxt);
	return r->nlocked == 0 ? STEP_DONE : STEP_DECLINED;
}

static bool
is_locked(const RecordRound *r, int id)
{
	for (int i = 0; i < r->nlocked; i++)
		if (r->locked[i] == id)
			return true;
	return false;
}

/*
 * A batch recorded: if it had outcomes that were sent, note when they went
 * to its endpoint's health row (those of an endpoint left quiet did not,
 * unless one was a failure: outbox._record counts failures always).
 */
static void
note_health(const Batch *b, TimestampTz now)
{
	RelayEndpoint *ep = b->ep;
	bool		sent = false;
	bool		failed = false;

	for (int i = 0; i < b->n; i++)
	{
		const Delivery *d = &b->d[i];

		if (d->state != DELIVERY_DONE || d->recorded || !delivery_was_sent(d))
			continue;
		sent = true;
		failed |= d->outcome != OUTCOME_KIND_DELIVERED;
	}
	if (failed)
		ep->health_failed_at = now;
	if (sent && (failed || !ep->health_quiet))
		ep->health_at = now;
}

/* A batch recorded whole: what it asks next, and free it. */
static void
batch_recorded(Batch *b)
{
	RelayEndpoint *ep = b->ep;

	outbox_count(RELAY_BATCHES, 1);
	if (b->is_page)
		ep->verify_page = false;
	else
		ep->verify_due = false;

	/*
	 * Read this endpoint again at once after a full page of its own, or
	 * when a commit woke the relay while the page was in flight (its read
	 * was skipped then), and after due retries, whose outcomes may have
	 * unblocked a key.
	 */
	if (b->is_page && b->stream == NULL && (!b->batch_done || ep->woken_busy))
		ep->more_page = true;
	if (b->is_page)
		ep->woken_busy = false;
	if (!b->is_page)
	{
		MemoryContext old = MemoryContextSwitchTo(relay_cxt);

		ep->more_due = true;
		due_again = lappend_int(due_again, ep->id);
		MemoryContextSwitchTo(old);
	}
	dlist_delete(&b->node);
	free_batch(b);
}

/* The stream's page is recorded whole and the stream moved past it. */
static void
stream_page_done(bool recorded)
{
	StreamPage *p = stream_page;

	stream_page = NULL;
	stream_size_pages(p);
	if (recorded)
	{
		stream_verify = false;
		stream_more = !p->batch_done || stream_woken_busy;
	}
	else
	{
		/* read again from where the stream is, skipping what was answered */
		stream_verify = true;
		stream_more = false;
	}
	stream_woken_busy = false;
	p->in_stream = false;
	release_stream_page(p);
}

/* Have the relay's wait end within ms for a record round. */
static void
record_again_in(long ms)
{
	record_wait_ms = record_wait_ms < 0 ? ms : Min(record_wait_ms, ms);
}

/*
 * Record what finished, of every batch, in one short transaction: one
 * statement, however many endpoints (outbox._record).  A round is due when
 * a batch is complete (a part of the stream's page only when the page
 * completes with it), when the stream moves or an endpoint was detached,
 * when a refused record's RECORD_RETRY_MS is up, or RECORD_INTERVAL_MS
 * after the last round when any batch has finished deliveries; a round
 * that runs takes what finished of every batch.  That bounds what a crash
 * can repeat to the requests in flight and those answered in the last
 * interval (plus what an asynchronous commit had not flushed).  One clock
 * for all batches, not one each: with a thousand endpoints on a stream
 * page, each waiting out its own interval from its own start made a record
 * every 3 ms of about 60 deliveries (bench case 9), where one clock makes
 * fewer and larger ones (DESIGN.md, "Recording outcomes").  A finished
 * page of an endpoint's own moves its position; once every part of the
 * stream's page is recorded, the stream moves; endpoints detached since
 * the last record say so first.
 *
 * What happens next follows from the step's result:
 * - done: the deliveries recorded are marked so; a complete batch is freed.
 * - declined: endpoints whose row another transaction holds had nothing
 *   recorded and the stream did not move; their batches are recorded again
 *   after RECORD_RETRY_MS, the rest as for done.
 * - failed (an error, the commit's included): nothing was recorded, and
 *   every batch in it is recorded again after RECORD_RETRY_MS if still in
 *   flight; a complete batch of an endpoint's own is given up, its events
 *   read again (skipping those answered with a 2xx), and so is the stream's
 *   page once all of it is complete.
 */
static void
record_round(void)
{
	TimestampTz now = GetCurrentTimestamp();
	dlist_mutable_iter iter;
	RecordRound r;
	int			room = 16;
	int			stream_parts_done = 0;
	bool		page_completes = false;
	/* (a clock set back counts as the interval up) */
	bool		due = last_record_at > now ||
		TimestampDifferenceExceeds(last_record_at, now, RECORD_INTERVAL_MS);
	ListCell   *lc;
	StepResult	result;

	record_wait_ms = -1;
	memset(&r, 0, sizeof(r));
	r.batches = palloc(sizeof(Batch *) * room);
	r.complete = palloc(sizeof(bool) * room);
	r.set.pages = palloc(sizeof(PageDone) * (room + list_length(detaching) + 1));

	/*
	 * Does this round complete the stream's page?  Then its parts go now;
	 * otherwise a finished part waits like a partial batch, so that a
	 * thousand endpoints' parts finishing one after another make a record
	 * every RECORD_INTERVAL_MS, not one each.
	 */
	if (stream_page != NULL)
	{
		dlist_foreach_modify(iter, &active)
		{
			Batch	   *b = dlist_container(Batch, node, iter.cur);

			if (b->stream == stream_page && b->pending == 0)
				stream_parts_done++;
		}
		page_completes = stream_parts_done == stream_page->parts;
		stream_parts_done = 0;
	}

	dlist_foreach_modify(iter, &active)
	{
		Batch	   *b = dlist_container(Batch, node, iter.cur);
		bool		complete = b->pending == 0;

		if (!complete && b->unrecorded == 0)
			continue;
		/* A retry after a refusal waits RECORD_RETRY_MS, on its own clock. */
		if (b->record_failed)
		{
			long		left = RECORD_RETRY_MS - TimestampDifferenceMilliseconds(b->last_flush, now);

			if (left > 0)
			{
				/* (the relay's wait ends in time for it) */
				record_again_in(left);
				continue;
			}
			due = true;
		}
		/*
		 * A complete batch makes the round due; partial progress, and a
		 * part of a page that does not complete yet, go with a round that
		 * runs anyway.
		 */
		else if (complete && (b->stream == NULL || page_completes))
			due = true;
		if (r.nbatches == room)
		{
			room *= 2;
			r.batches = repalloc(r.batches, sizeof(Batch *) * room);
			r.complete = repalloc(r.complete, sizeof(bool) * room);
			r.set.pages = repalloc(r.set.pages, sizeof(PageDone) * (room + list_length(detaching) + 1));
		}
		r.complete[r.nbatches] = complete;
		r.batches[r.nbatches++] = b;
		if (complete && b->stream != NULL)
			stream_parts_done++;
		if (complete && b->is_page && b->stream == NULL)
		{
			PageDone   *pd = &r.set.pages[r.set.npages++];

			pd->endpoint_id = b->ep->id;
			pd->batch = b->snap;
			pd->last_id = b->last_id;
			pd->batch_done = b->batch_done;
		}
	}

	/* Endpoints detached since the last record. */
	r.set.detach = palloc(sizeof(int) * Max(list_length(detaching), 1));
	foreach(lc, detaching)
	{
		int			id = lfirst_int(lc);
		RelayEndpoint *ep = hash_search(endpoints, &id, HASH_FIND, NULL);

		r.set.detach[r.set.ndetach++] = id;
		if (ep != NULL && ep->detach_past)
		{
			PageDone   *pd = &r.set.pages[r.set.npages++];

			pd->endpoint_id = id;
			pd->batch = ep->past.snap;
			pd->last_id = ep->past.last_id;
			pd->batch_done = ep->past.batch_done;
		}
	}

	/* The stream moves once every part of its page is recorded. */
	if (stream_page != NULL && stream_page->parts == stream_parts_done)
	{
		PageDone   *pd = &r.set.pages[r.set.npages++];

		pd->endpoint_id = 0;
		pd->batch = stream_page->snap;
		pd->last_id = stream_page->last_id;
		pd->batch_done = stream_page->batch_done;
		r.moves_stream = true;
	}

	/* (a detach alone is written too: a paused endpoint may wait on it) */
	if (r.nbatches == 0 && !r.moves_stream && r.set.ndetach == 0)
		return;
	if (!due && !r.moves_stream && r.set.ndetach == 0)
	{
		/* only partial progress, before the interval is up */
		long		left = RECORD_INTERVAL_MS - TimestampDifferenceMilliseconds(last_record_at, now);

		record_again_in(Max(left, 1));
		return;
	}

	/* Endpoints whose successes alone leave their health row alone. */
	r.set.quiet = palloc(sizeof(int) * Max(r.nbatches, 1));
	for (int i = 0; i < r.nbatches; i++)
	{
		RelayEndpoint *ep = r.batches[i]->ep;

		ep->health_quiet = ep->health_at != 0 && ep->health_at <= now &&
			!TimestampDifferenceExceeds(ep->health_at, now, HEALTH_QUIET_MS) &&
			(ep->health_failed_at == 0 ||
			 TimestampDifferenceExceeds(ep->health_failed_at, now, HEALTH_QUIET_MS));
		if (ep->health_quiet)
			r.set.quiet[r.set.nquiet++] = ep->id;
	}

	last_record_at = now;
	result = run_step("outbox: recording outcomes", record_step, &r);
	if (result == STEP_ABSENT)
		return;

	if (result == STEP_FAILED)
	{
		for (int i = 0; i < r.nbatches; i++)
		{
			Batch	   *b = r.batches[i];

			b->last_flush = now;
			b->record_failed = true;
			if (b->is_page && b->stream == NULL)
				b->ep->verify_page = true;
			else if (!b->is_page)
				b->ep->verify_due = true;
			/* Given up once complete: its events are read again. */
			if (r.complete[i] && b->stream == NULL)
			{
				dlist_delete(&b->node);
				free_batch(b);
			}
		}
		if (r.moves_stream)
		{
			/* Every part is complete: give the whole page up. */
			dlist_foreach_modify(iter, &active)
			{
				Batch	   *b = dlist_container(Batch, node, iter.cur);

				if (b->stream == stream_page)
				{
					dlist_delete(&b->node);
					free_batch(b);
				}
			}
			stream_page_done(false);
		}
		/* Detaches not written are tried again, batches or not. */
		if (detaching != NIL)
			record_again_in(RECORD_RETRY_MS);
		return;
	}

	/* Done, or declined for the endpoints in locked. */
	foreach(lc, detaching)
	{
		int			id = lfirst_int(lc);
		RelayEndpoint *ep = hash_search(endpoints, &id, HASH_FIND, NULL);

		if (ep != NULL && !is_locked(&r, id))
		{
			ep->detach = false;
			ep->detach_past = false;
		}
	}
	{
		List	   *still = NIL;
		MemoryContext old = MemoryContextSwitchTo(relay_cxt);

		foreach(lc, detaching)
			if (is_locked(&r, lfirst_int(lc)))
				still = lappend_int(still, lfirst_int(lc));
		list_free(detaching);
		detaching = still;
		MemoryContextSwitchTo(old);
		if (detaching != NIL)
			record_again_in(RECORD_RETRY_MS);
	}

	for (int i = 0; i < r.nbatches; i++)
	{
		Batch	   *b = r.batches[i];

		b->last_flush = now;
		b->record_failed = is_locked(&r, b->ep->id);
		if (b->record_failed)
			continue;
		note_health(b, now);
		for (int j = 0; j < b->n; j++)
			if (b->d[j].state == DELIVERY_DONE)
			{
				if (!b->d[j].recorded)
					wake_when_due(&b->d[j]);
				b->d[j].recorded = true;
			}
		b->unrecorded = 0;
		/*
		 * Disabled now: read nothing more for it until resumed, and stop
		 * following the stream, which would carry it past its events.
		 */
		if (b->disable_reason != NULL)
		{
			relay_detach(b->ep);
			b->ep->active = false;
		}
		if (r.complete[i])
			batch_recorded(b);
	}
	if (r.moves_stream && r.nlocked == 0)
		stream_page_done(true);
	if (r.locked != NULL)
		pfree(r.locked);
	ereport(DEBUG1,
			(errmsg("outbox recorded %d batches", r.nbatches)));
}

/*
 * Is a read round worth a transaction now?  Only if the stream or some
 * endpoint may read (a commit may have left it something).
 */
static bool
worth_reading(void)
{
	ListCell   *lc;

	/* (the stream is read only while someone follows it: read_stream) */
	if ((stream_page == NULL && stream_followers() > 0) || due_again != NIL)
		return true;
	foreach(lc, own_readers)
		if (may_read_page((RelayEndpoint *) lfirst(lc), false))
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
static void
note_wake(void)
{
	ListCell   *lc;

	if (stream_page != NULL)
		stream_woken_busy = true;
	foreach(lc, own_readers)
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
static bool
want_more(void)
{
	ListCell   *lc;

	/* (with nobody following it, the stream is not read: read_stream) */
	if (stream_more && stream_page == NULL && stream_followers() > 0)
		return true;
	if (due_again != NIL || own_cut)
		return true;
	foreach(lc, own_readers)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		if (ep->more_page && may_read_page(ep, false))
			return true;
	}
	return false;
}

/* The step of rotate_round; as the relay starts, the version check too. */
static StepResult
rotate_step(void *arg)
{
	bool		starting = *(bool *) arg;

	if (starting && !store_extension_ready())
		return STEP_ABSENT;
	store_rotate();
	return STEP_DONE;
}

/*
 * Translate positions from another cluster and rotate what has outlived its
 * retention (outbox._rotate()), in a transaction of its own; a failure (a
 * lock not granted at once, say) waits for the next time.  The first round,
 * as the relay starts, also checks the installed version, and runs before
 * anything is read.
 */
static void
rotate_round(bool starting)
{
	(void) run_step("outbox: rotating", rotate_step, &starting);
}

void
outbox_relay_main(Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);
	int			slot;
	char	   *dbname;
	MemoryContext loop_cxt;
	bool		read_now = true;
	uint64		seen_version = 0;
	uint64		version;
	TimestampTz last_wake = 0;
	bool		woken;
	TimestampTz last_rotate = 0;
	TimestampTz step_start;
	bool		waiting_on_http;

	memcpy(&slot, MyBgworkerEntry->bgw_extra, sizeof(slot));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	CacheRegisterRelcacheCallback(relation_changed, (Datum) 0);
	/* In the slot first, so that DROP DATABASE can stop us from now on. */
	outbox_relay_attach(slot, dboid);
	before_shmem_exit(relay_shmem_exit, (Datum) 0);
	/* Started just as a database command asked for the database alone. */
	if (outbox_held_until(dboid) != 0)
		proc_exit(1);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("outbox relay");
	/* Losing the relay's own last commit can only repeat a delivery. */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * No JIT: the relay's statements are short, and enable_seqscan = off
	 * (set on its functions) lifts plan costs past jit_above_cost, so each
	 * once-a-second rotation check was compiled anew, about 30 ms of LLVM
	 * every time (bench case 3's p99).
	 */
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/* A lock held by another transaction fails a step, never stalls all. */
	SetConfigOption("lock_timeout", "1s", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * In a deadlock (DROP EXTENSION against a read round, say) the relay
	 * notices first and gives way: the other side is a user's command.
	 */
	SetConfigOption("deadlock_timeout", "50ms", PGC_SUSET, PGC_S_OVERRIDE);

	relay_cxt = AllocSetContextCreate(TopMemoryContext, "outbox relay", ALLOCSET_DEFAULT_SIZES);
	endpoints = endpoints_create(relay_cxt);
	credentials_start(endpoints);

	/* The name, for messages (a catalog lookup needs a transaction). */
	StartTransactionCommand();
	dbname = MemoryContextStrdup(relay_cxt, get_database_name(MyDatabaseId));
	CommitTransactionCommand();
	/* (and for the CloudEvents source it stands for by default) */
	outbox_format_set_database(dbname);

	target_start();
	rotate_round(true);
	if (!extension_absent)
		senders_start(dbname);
	last_rotate = GetCurrentTimestamp();
	if (!extension_absent)
		read_round(true);
	if (extension_absent)
		proc_exit(0);
	last_read = GetCurrentTimestamp();
	/* (the first page's laggards are looked at from here) */
	polled_at = last_read;
	seen_version = outbox_endpoints_version();
	ereport(LOG, (errmsg("outbox relay started for database \"%s\"", dbname)));

	loop_cxt = AllocSetContextCreate(relay_cxt, "outbox relay loop", ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		TimestampTz now;
		long		until_poll;
		long		until_release;
		long		until_look;

		/* Scratch memory of one iteration; batches have their own. */
		MemoryContextReset(loop_cxt);
		MemoryContextSwitchTo(loop_cxt);
		CHECK_FOR_INTERRUPTS();
		if (extension_absent)
		{
			if (extension_replaced)
				ereport(LOG, (errmsg("outbox relay leaves database \"%s\": outbox was dropped and created again",
									 dbname),
							  errdetail("A new relay serves the new extension.")));
			else
				ereport(LOG, (errmsg("outbox relay leaves database \"%s\": outbox is not installed there",
									 dbname)));
			proc_exit(0);
		}
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			target_configure();
			ereport(LOG, (errmsg("outbox relay reloaded its configuration")));
		}

		now = GetCurrentTimestamp();
		version = outbox_endpoints_version();
		if (version != seen_version ||
			TimestampDifferenceExceeds(last_read, now, outbox_poll_interval) ||
			(next_due != 0 && now >= next_due))
		{
			/* A full round: endpoints, pages and due retries. */
			ResetLatch(MyLatch);
			read_now = false;
			next_due = 0;
			seen_version = version;
			last_read = now;
			note_wake();
			read_round(true);
			count_since(RELAY_SQL_US, now);
		}
		else if (read_now)
		{
			/* Woken by a commit, or a page ended with more to read. */
			ResetLatch(MyLatch);
			read_now = false;
			note_wake();
			if (worth_reading())
			{
				read_round(false);
				count_since(RELAY_SQL_US, now);
			}
		}

		if (TimestampDifferenceExceeds(last_rotate, now, ROTATE_INTERVAL_MS))
		{
			last_rotate = now;
			rotate_round(false);
			count_since(RELAY_SQL_US, now);
		}

		/* Collect first: finished requests make room for pump_run(). */
		pump_collect();
		stream_detach_laggards(stream_page, &active, polled_at);
		pump_run(&active);
		step_start = GetCurrentTimestamp();
		record_round();
		count_since(RELAY_SQL_US, step_start);
		if (want_more())
		{
			read_now = true;
			continue;
		}

		read_ahead();

		/*
		 * Under a stream of commits, take wake-ups at most once per
		 * WAKE_COALESCE_MS while idle: every emitting commit sets the latch,
		 * and waking for each would take a core from the emitters.
		 */
		if (pump_in_flight() == 0 && last_wake != 0 &&
			!TimestampDifferenceExceeds(last_wake, GetCurrentTimestamp(), WAKE_COALESCE_MS))
			(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 WAKE_COALESCE_MS, PG_WAIT_EXTENSION);

		/* Sleep on the latch, the targets' sockets and the poll timer at once. */
		until_poll = outbox_poll_interval -
			TimestampDifferenceMilliseconds(last_read, GetCurrentTimestamp());
		/* Retries and deferred events are read when they come due. */
		if (next_due != 0)
			until_poll = Min(until_poll,
							 TimestampDifferenceMilliseconds(GetCurrentTimestamp(), next_due));
		/* A page with parts in flight is looked at for laggards in time. */
		until_look = stream_ms_to_look(GetCurrentTimestamp());
		if (until_look >= 0)
			until_poll = Min(until_poll, until_look);
		/* Finished deliveries that wait for their record are recorded in time. */
		if (record_wait_ms >= 0)
			until_poll = Min(until_poll, record_wait_ms);
		/* An endpoint held by its rate limit is let go in time. */
		until_release = limit_ms_to_release(GetCurrentTimestamp());
		if (until_release >= 0)
			until_poll = Min(until_poll, until_release);
		/* Deliveries that wait for fresh requests to age go in time. */
		until_release = pump_ms_to_age();
		if (until_release >= 0)
			until_poll = Min(until_poll, until_release);
		step_start = GetCurrentTimestamp();
		waiting_on_http = pump_in_flight() > 0;
		woken = target_wait(Max(until_poll, 0));
		polled_at = GetCurrentTimestamp();
		if (woken)
		{
			read_now = true;
			last_wake = polled_at;
		}
		if (waiting_on_http)
			count_since(RELAY_HTTP_US, step_start);
	}
}
