/*-------------------------------------------------------------------------
 *
 * state.h
 *	  The relay's state in one place (RelayState), and the changes to it
 *	  that more than one of its jobs make: freeing batches and stream pages,
 *	  stopping an endpoint following the stream, asking for a full round.
 *
 * One RelayState exists per relay process (relay.c); the loop passes it
 * to the reading (read.c), the recording (record.c) and the transaction
 * bracket (step.c).  The sending side (pump.c) and the stream's shape
 * (stream.c) keep their own state and never see this one: they return
 * what they want detached, and relay.c detaches it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_STATE_H
#define OUTBOX_RELAY_STATE_H

#include "lib/ilist.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "relay/delivery.h"
#include "shmem.h"

typedef struct RelayState
{
	MemoryContext cxt;			/* the relay's: endpoints, lists, pages */
	HTAB	   *endpoints;		/* RelayEndpoint by id (endpoints.c) */

	/* Batches whose requests are being sent, and those read but not committed. */
	dlist_head	active;
	dlist_head	unconfirmed;

	/*
	 * The stream (DESIGN.md, "The read path"): its page in flight, or the
	 * one read in a transaction not yet committed; whether to read it again
	 * at once (the last page did not end its batch, or a commit came while
	 * it was out); whether its next page skips what was answered before a
	 * restart.
	 */
	StreamPage *stream_page;
	StreamPage *stream_unconfirmed;
	bool		stream_more;
	bool		stream_woken_busy;
	bool		stream_verify;

	/*
	 * The stream's page after the one in flight, read ahead (read_ahead),
	 * and the id it starts after: the next read takes it if the stream is
	 * there.
	 */
	StreamPage *stream_ahead;
	int64		ahead_after;

	/*
	 * In how many ms the next batch whose finished deliveries wait for
	 * their record is due, or detaches not yet written are tried again
	 * (relay_record_round; -1: none waits).  The relay's wait ends then: with
	 * slow receivers no other answer may come to wake it, and what a crash
	 * can repeat is bounded by this interval.
	 */
	long		record_wait_ms;
	TimestampTz last_record_at; /* when relay_record_round last ran its step */

	/*
	 * When the earliest retry or deferred event not yet due comes due (0:
	 * none known): a full round runs then, whatever outbox.poll_interval
	 * says.  Read at each full round, lowered by each retry or deferred
	 * outcome recorded with an earlier next_at, one already past included
	 * (record.c's wake_when_due).
	 */
	TimestampTz next_due;
	TimestampTz last_read;		/* when the last full round started (0: none) */

	/*
	 * Endpoints that do not follow the stream and may read on their own
	 * (active; rebuilt at each load), the ids of those whose due retries
	 * are to be read again at once and of those detached in memory whose
	 * rows still say they follow, and those attached by the read not yet
	 * committed (how many follow the stream is stream.c's).
	 */
	List	   *own_readers;
	int			own_next;		/* where the next read step starts in it */
	bool		own_cut;		/* the last read step ran out of time */
	List	   *due_again;
	List	   *detaching;
	List	   *attached_now;

	/*
	 * When the relay last took what its targets' sockets had (target_wait).
	 * A part's wait for an answer counts up to then
	 * (stream_detach_laggards): what arrived while the relay ran its SQL it
	 * has not seen yet.
	 */
	TimestampTz polled_at;

	/* The endpoints as loaded: the changes they include, when; or stale. */
	uint64		endpoints_version;
	TimestampTz endpoints_loaded_at;
	bool		endpoints_stale;
	uint64		version_before_read;

	/*
	 * The loop's clocks (relay.c): read at once (a commit woke it, or a
	 * page ended with more to read); the endpoints' version last seen; the
	 * last wake taken and the last rotation.
	 */
	bool		read_now;
	uint64		seen_version;
	TimestampTz last_wake;
	TimestampTz last_rotate;

	/*
	 * The extension (step.c): set when a step finds no outbox (of this
	 * library's version) here, with the launch requests counted before
	 * that look (shmem.h).  The extension the relay serves, by oid: one
	 * dropped and created again (in one transaction, so never seen absent)
	 * is another, whose types and functions the relay's kept plans do not
	 * know.  The relay leaves as if stopped, and the launcher starts it
	 * again (RELAY_EXIT_UNKNOWN).  relations_changed: set by any relation's
	 * cache invalidation; the extension is looked up again only then, and
	 * after a failed step.
	 */
	bool		extension_absent;
	uint64		requests_before_check;
	Oid			extension_oid;
	bool		extension_replaced;
	bool		relations_changed;
} RelayState;

extern void relay_state_init(RelayState *rs, MemoryContext cxt);
extern void relay_wake_by(RelayState *rs, TimestampTz at);
extern void relay_count_since(RelayCounter counter, TimestampTz start);
extern MemoryContext relay_batch_context(MemoryContext parent);
extern void relay_release_page(StreamPage *p);
extern void relay_shorten_page(StreamPage *p, int n);
extern void relay_free_batch(Batch *b);
extern void relay_detach(RelayState *rs, RelayEndpoint *ep);
extern void relay_detach_all(RelayState *rs, List *eps);

#endif							/* OUTBOX_RELAY_STATE_H */
