/*-------------------------------------------------------------------------
 *
 * record.c
 *	  The relay's recording: what finished, of every batch, goes into one
 *	  statement in a short transaction of its own (outbox._record), with the
 *	  positions that move (an endpoint's own page, the stream's page once
 *	  every part of it is recorded) and the endpoints detached since the
 *	  last record (DESIGN.md, "Recording outcomes").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "relay/record.h"
#include "relay/step.h"
#include "relay/store.h"
#include "relay/stream.h"

/*
 * How often what finished of batches still partly in flight is recorded,
 * all together (relay_record_round).
 */
#define RECORD_INTERVAL_MS	10
/* After a record failed or found its endpoint busy, try again after this. */
#define RECORD_RETRY_MS		200
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

/*
 * A recorded retry, or an event deferred to its deliver_at, ends the
 * loop's wait when it comes due (next_due): at once when that passed while
 * it waited for its record.  Only once the record committed: a record
 * declined or failed is tried again, and wakes nothing meanwhile.  One
 * deferred behind its key waits for that key's retry (or due_again).
 */
static void
wake_when_due(RelayState *rs, const Delivery *d)
{
	if ((d->outcome == OUTCOME_KIND_RETRY || d->outcome == OUTCOME_KIND_DEFERRED) &&
		!d->behind_key && d->next_at != 0)
		relay_wake_by(rs, d->next_at);
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
 * The recording step of relay_record_round: one statement.  Endpoints another
 * transaction holds (a drop_endpoint() not yet committed) come back in
 * locked; an endpoint that is gone is done, with nothing to record.
 */
static StepResult
record_step(RelayState *rs, void *arg)
{
	RecordRound *r = (RecordRound *) arg;

	r->set.noutcomes = outcome_rows(r, &r->set.outcomes);
	r->nlocked = store_record(&r->set, &r->locked, rs->cxt);
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
batch_recorded(RelayState *rs, Batch *b)
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
		MemoryContext old = MemoryContextSwitchTo(rs->cxt);

		ep->more_due = true;
		rs->due_again = lappend_int(rs->due_again, ep->id);
		MemoryContextSwitchTo(old);
	}
	dlist_delete(&b->node);
	relay_free_batch(b);
}

/* The stream's page is recorded whole and the stream moved past it. */
static void
stream_page_done(RelayState *rs, bool recorded)
{
	StreamPage *p = rs->stream_page;

	rs->stream_page = NULL;
	stream_size_pages(p);
	if (recorded)
	{
		rs->stream_verify = false;
		rs->stream_more = !p->batch_done || rs->stream_woken_busy;
	}
	else
	{
		/* read again from where the stream is, skipping what was answered */
		rs->stream_verify = true;
		rs->stream_more = false;
	}
	rs->stream_woken_busy = false;
	p->in_stream = false;
	relay_release_page(p);
}

/* Have the relay's wait end within ms for a record round. */
static void
record_again_in(RelayState *rs, long ms)
{
	rs->record_wait_ms = rs->record_wait_ms < 0 ? ms : Min(rs->record_wait_ms, ms);
}

/*
 * Does this round complete the stream's page?  Then its parts go now;
 * otherwise a finished part waits like a partial batch, so that a
 * thousand endpoints' parts finishing one after another make a record
 * every RECORD_INTERVAL_MS, not one each.
 */
static bool
page_completes(RelayState *rs)
{
	dlist_iter	iter;
	int			done = 0;

	if (rs->stream_page == NULL)
		return false;
	dlist_foreach(iter, &rs->active)
	{
		Batch	   *b = dlist_container(Batch, node, iter.cur);

		if (b->stream == rs->stream_page && b->pending == 0)
			done++;
	}
	return done == rs->stream_page->parts;
}

/* A position that moves with the record: an endpoint's, or the stream's (0). */
static void
add_page_done(RecordRound *r, int endpoint_id, char *snap, int64 last_id, bool batch_done)
{
	PageDone   *pd = &r->set.pages[r->set.npages++];

	pd->endpoint_id = endpoint_id;
	pd->batch = snap;
	pd->last_id = last_id;
	pd->batch_done = batch_done;
}

/*
 * Take into the round every batch with something to record whose time
 * has come (a refused record's retry waits RECORD_RETRY_MS on its own
 * clock), with the position of each complete page of an endpoint's own.
 * Sets *due when a batch makes the round due: a complete batch, or a
 * refused record's retry; partial progress, and a part of a page that
 * does not complete yet, go with a round that runs anyway.  Returns how
 * many parts of the stream's page are complete in the round.
 */
static int
take_batches(RelayState *rs, RecordRound *r, TimestampTz now, bool *due)
{
	dlist_iter	iter;
	bool		completes = page_completes(rs);
	int			room = 16;
	int			parts_done = 0;
	int			extra = list_length(rs->detaching) + 1;

	r->batches = palloc(sizeof(Batch *) * room);
	r->complete = palloc(sizeof(bool) * room);
	r->set.pages = palloc(sizeof(PageDone) * (room + extra));
	dlist_foreach(iter, &rs->active)
	{
		Batch	   *b = dlist_container(Batch, node, iter.cur);
		bool		complete = b->pending == 0;

		if (!complete && b->unrecorded == 0)
			continue;
		if (b->record_failed)
		{
			long		left = RECORD_RETRY_MS - TimestampDifferenceMilliseconds(b->last_flush, now);

			if (left > 0)
			{
				/* (the relay's wait ends in time for it) */
				record_again_in(rs, left);
				continue;
			}
			*due = true;
		}
		else if (complete && (b->stream == NULL || completes))
			*due = true;
		if (r->nbatches == room)
		{
			room *= 2;
			r->batches = repalloc(r->batches, sizeof(Batch *) * room);
			r->complete = repalloc(r->complete, sizeof(bool) * room);
			r->set.pages = repalloc(r->set.pages, sizeof(PageDone) * (room + extra));
		}
		r->complete[r->nbatches] = complete;
		r->batches[r->nbatches++] = b;
		if (complete && b->stream != NULL)
			parts_done++;
		if (complete && b->is_page && b->stream == NULL)
			add_page_done(r, b->ep->id, b->snap, b->last_id, b->batch_done);
	}
	return parts_done;
}

/*
 * The endpoints detached since the last record, each moved past the
 * stream's page with its detach when it has nothing of it left to do; and
 * the stream moved past its page once every part of it is recorded.
 */
static void
take_detaches(RelayState *rs, RecordRound *r, int parts_done)
{
	ListCell   *lc;

	r->set.detach = palloc(sizeof(int) * Max(list_length(rs->detaching), 1));
	foreach(lc, rs->detaching)
	{
		int			id = lfirst_int(lc);
		RelayEndpoint *ep = hash_search(rs->endpoints, &id, HASH_FIND, NULL);

		r->set.detach[r->set.ndetach++] = id;
		if (ep != NULL && ep->detach_past)
			add_page_done(r, id, ep->past.snap, ep->past.last_id, ep->past.batch_done);
	}
	if (rs->stream_page != NULL && rs->stream_page->parts == parts_done)
	{
		add_page_done(r, 0, rs->stream_page->snap, rs->stream_page->last_id,
					  rs->stream_page->batch_done);
		r->moves_stream = true;
	}
}

/* Endpoints whose successes alone leave their health row alone. */
static void
take_quiet(RecordRound *r, TimestampTz now)
{
	r->set.quiet = palloc(sizeof(int) * Max(r->nbatches, 1));
	for (int i = 0; i < r->nbatches; i++)
	{
		RelayEndpoint *ep = r->batches[i]->ep;

		ep->health_quiet = ep->health_at != 0 && ep->health_at <= now &&
			!TimestampDifferenceExceeds(ep->health_at, now, HEALTH_QUIET_MS) &&
			(ep->health_failed_at == 0 ||
			 TimestampDifferenceExceeds(ep->health_failed_at, now, HEALTH_QUIET_MS));
		if (ep->health_quiet)
			r->set.quiet[r->set.nquiet++] = ep->id;
	}
}

/*
 * The record failed (an error, the commit's included): nothing was
 * recorded.  Every batch in it is recorded again after RECORD_RETRY_MS if
 * still in flight; a complete batch of an endpoint's own is given up, its
 * events read again (skipping those answered with a 2xx), and so is the
 * stream's page once all of it is complete.
 */
static void
record_failed(RelayState *rs, RecordRound *r, TimestampTz now)
{
	for (int i = 0; i < r->nbatches; i++)
	{
		Batch	   *b = r->batches[i];

		b->last_flush = now;
		b->record_failed = true;
		if (b->is_page && b->stream == NULL)
			b->ep->verify_page = true;
		else if (!b->is_page)
			b->ep->verify_due = true;
		/* Given up once complete: its events are read again. */
		if (r->complete[i] && b->stream == NULL)
		{
			dlist_delete(&b->node);
			relay_free_batch(b);
		}
	}
	if (r->moves_stream)
	{
		dlist_mutable_iter iter;

		/* Every part is complete: give the whole page up. */
		dlist_foreach_modify(iter, &rs->active)
		{
			Batch	   *b = dlist_container(Batch, node, iter.cur);

			if (b->stream == rs->stream_page)
			{
				dlist_delete(&b->node);
				relay_free_batch(b);
			}
		}
		stream_page_done(rs, false);
	}
	/* Detaches not written are tried again, batches or not. */
	if (rs->detaching != NIL)
		record_again_in(rs, RECORD_RETRY_MS);
}

/*
 * Detaches written: those of endpoints another transaction holds are kept
 * to be written again after RECORD_RETRY_MS.
 */
static void
detaches_recorded(RelayState *rs, const RecordRound *r)
{
	List	   *still = NIL;
	ListCell   *lc;
	MemoryContext old;

	foreach(lc, rs->detaching)
	{
		int			id = lfirst_int(lc);
		RelayEndpoint *ep = hash_search(rs->endpoints, &id, HASH_FIND, NULL);

		if (ep != NULL && !is_locked(r, id))
		{
			ep->detach = false;
			ep->detach_past = false;
		}
	}
	old = MemoryContextSwitchTo(rs->cxt);
	foreach(lc, rs->detaching)
		if (is_locked(r, lfirst_int(lc)))
			still = lappend_int(still, lfirst_int(lc));
	list_free(rs->detaching);
	rs->detaching = still;
	MemoryContextSwitchTo(old);
	if (rs->detaching != NIL)
		record_again_in(rs, RECORD_RETRY_MS);
}

/*
 * The record committed, declined for the endpoints in r->locked (their
 * row held by another transaction: nothing of theirs was recorded and the
 * stream did not move; their batches are recorded again after
 * RECORD_RETRY_MS).  The deliveries recorded are marked so, and a complete
 * batch is freed.
 */
static void
record_done(RelayState *rs, RecordRound *r, TimestampTz now)
{
	detaches_recorded(rs, r);
	for (int i = 0; i < r->nbatches; i++)
	{
		Batch	   *b = r->batches[i];

		b->last_flush = now;
		b->record_failed = is_locked(r, b->ep->id);
		if (b->record_failed)
			continue;
		note_health(b, now);
		for (int j = 0; j < b->n; j++)
			if (b->d[j].state == DELIVERY_DONE)
			{
				if (!b->d[j].recorded)
					wake_when_due(rs, &b->d[j]);
				b->d[j].recorded = true;
			}
		b->unrecorded = 0;
		/*
		 * Disabled now: read nothing more for it until resumed, and stop
		 * following the stream, which would carry it past its events.
		 */
		if (b->disable_reason != NULL)
		{
			relay_detach(rs, b->ep);
			b->ep->active = false;
		}
		if (r->complete[i])
			batch_recorded(rs, b);
	}
	if (r->moves_stream && r->nlocked == 0)
		stream_page_done(rs, true);
	if (r->locked != NULL)
		pfree(r->locked);
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
 * the last record say so first.  What happens next follows from the
 * step's result: record_done, or record_failed.
 */
void
relay_record_round(RelayState *rs)
{
	TimestampTz now = GetCurrentTimestamp();
	RecordRound r;
	StepResult	result;

	/* (a clock set back counts as the interval up) */
	bool		due = rs->last_record_at > now ||
		TimestampDifferenceExceeds(rs->last_record_at, now, RECORD_INTERVAL_MS);

	rs->record_wait_ms = -1;
	memset(&r, 0, sizeof(r));
	take_detaches(rs, &r, take_batches(rs, &r, now, &due));

	/* (a detach alone is written too: a paused endpoint may wait on it) */
	if (r.nbatches == 0 && !r.moves_stream && r.set.ndetach == 0)
		return;
	if (!due && !r.moves_stream && r.set.ndetach == 0)
	{
		/* only partial progress, before the interval is up */
		long		left = RECORD_INTERVAL_MS -
			TimestampDifferenceMilliseconds(rs->last_record_at, now);

		record_again_in(rs, Max(left, 1));
		return;
	}
	take_quiet(&r, now);

	rs->last_record_at = now;
	result = relay_run_step(rs, "outbox: recording outcomes", record_step, &r);
	if (result == STEP_ABSENT)
		return;
	if (result == STEP_FAILED)
	{
		record_failed(rs, &r, now);
		return;
	}
	record_done(rs, &r, now);
	ereport(DEBUG1,
			(errmsg("outbox recorded %d batches", r.nbatches)));
}
