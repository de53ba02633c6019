/*-------------------------------------------------------------------------
 *
 * state.c
 *	  The relay's state (state.h): its start, and the changes to it that
 *	  more than one of the relay's jobs make.  Runs in the relay's loop;
 *	  nothing here touches SQL.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "relay/endpoints.h"
#include "relay/state.h"
#include "relay/stream.h"

/* A relay's state as it starts, its memory under cxt. */
void
relay_state_init(RelayState *rs, MemoryContext cxt)
{
	memset(rs, 0, sizeof(*rs));
	rs->cxt = cxt;
	rs->endpoints = endpoints_create(cxt);
	dlist_init(&rs->active);
	dlist_init(&rs->unconfirmed);
	rs->stream_verify = true;
	rs->record_wait_ms = -1;
	rs->endpoints_stale = true;
	rs->extension_oid = InvalidOid;
	rs->relations_changed = true;
	rs->read_now = true;
}

/* A full round at "at" at the latest: next_due lowered to it. */
void
relay_wake_by(RelayState *rs, TimestampTz at)
{
	if (rs->next_due == 0 || at < rs->next_due)
		rs->next_due = at;
}

/* Add the microseconds since start to a relay counter. */
void
relay_count_since(RelayCounter counter, TimestampTz start)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now > start)
		outbox_count(counter, (uint64) (now - start));
}

/*
 * A memory context for a new batch, which the batch takes over.  One for a
 * batch to be read goes under the step's transaction until it is made
 * (MemoryContextSetParent), so that an error reading it frees it.
 */
MemoryContext
relay_batch_context(MemoryContext parent)
{
	return AllocSetContextCreate(parent, "outbox batch", ALLOCSET_SMALL_SIZES);
}

/* Free a stream page once the stream is past it and no batch points in. */
void
relay_release_page(StreamPage *p)
{
	if (p->in_stream || p->refs > 0)
		return;
	MemoryContextDelete(p->cxt);
	pfree(p);
}

/* End a stream page after its first n events: not the end of its batch. */
void
relay_shorten_page(StreamPage *p, int n)
{
	p->n = n;
	p->last_id = p->ev[n - 1].id;
	p->batch_done = false;
}

/* Free a batch (taken off its list by the caller) and what it holds. */
void
relay_free_batch(Batch *b)
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
		relay_release_page(events);
	}
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
relay_detach(RelayState *rs, RelayEndpoint *ep)
{
	MemoryContext old;

	if (!ep->follows)
		return;
	ep->follows = false;
	if (ep->active)
		stream_count_follower(ep, -1);
	old = MemoryContextSwitchTo(rs->cxt);
	if (!ep->detach)
		rs->detaching = lappend_int(rs->detaching, ep->id);
	if (ep->active)
		rs->own_readers = list_append_unique_ptr(rs->own_readers, ep);
	MemoryContextSwitchTo(old);
	ep->detach = true;
	ep->detach_past = false;
	if (rs->stream_page == NULL)
		return;
	/* Fewer parts left may shorten the others' waits: look again at once. */
	stream_look_now();
	if (ep->page != NULL && ep->page->stream == rs->stream_page)
	{
		if (ep->page->pending > 0)
			rs->stream_page->finished++;
		ep->page->stream = NULL;
		rs->stream_page->parts--;
		return;
	}
	/* (its row still follows the stream: the detach moves it past) */
	ep->detach_past = true;
	if (ep->past.snap != NULL)
		pfree(ep->past.snap);
	ep->past.snap = MemoryContextStrdup(rs->cxt, rs->stream_page->snap);
	ep->past.last_id = rs->stream_page->last_id;
	ep->past.batch_done = rs->stream_page->batch_done;
}

/*
 * Detach each endpoint of a list that the sending side (pump.c) or the
 * stream's look at its laggards (stream.c) asked to detach, and free the
 * list.
 */
void
relay_detach_all(RelayState *rs, List *eps)
{
	ListCell   *lc;

	foreach(lc, eps)
		relay_detach(rs, (RelayEndpoint *) lfirst(lc));
	list_free(eps);
}
