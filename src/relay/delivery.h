/*-------------------------------------------------------------------------
 *
 * delivery.h
 *	  The delivery data model: endpoints as the relay knows them, the
 *	  deliveries of an event to an endpoint, the batches they come in, and
 *	  the stream's pages.  read.c, record.c and pump.c own and schedule these;
 *	  store.c copies the events it reads into StreamEvents.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_DELIVERY_H
#define OUTBOX_DELIVERY_H

#include "datatype/timestamp.h"
#include "lib/ilist.h"
#include "lib/pairingheap.h"
#include "utils/uuid.h"

#include "relay/policy.h"
#include "targets/format.h"
#include "targets/target.h"

/* Where a detached endpoint's row moves with its detach (detach_past). */
typedef struct DetachPast
{
	char	   *snap;			/* the stream page's batch snapshot (text) */
	int64		last_id;
	bool		batch_done;
} DetachPast;

/* An endpoint as the relay knows it; refreshed from SQL each read round. */
typedef struct RelayEndpoint
{
	int			id;				/* hash key */
	bool		seen;			/* present in the latest load */
	bool		active;			/* not paused, not disabled */
	bool		follows;		/* reads with the stream, not on its own */
	int			share_counted;	/* while it follows: its stream_page_share()
								 * in the stream's broker_share if a broker,
								 * 0 */
	bool		detach;			/* stops following: its own position takes
								 * the stream's at the next record */
	bool		detach_past;	/* and moves past the stream page in flight,
								 * whose deliveries of it are all recorded */
	DetachPast	past;
	char	  **patterns;		/* event-type patterns it subscribes to */
	int			npatterns;
	uint64		match_gen;		/* scratch of route_match() */
	int			routed;			/* scratch of route_page(): its deliveries */
	struct Batch *part;			/* scratch of route_page(): its part */
	char	   *name;
	TargetKind	target;			/* where its deliveries go: by URL scheme */
	TargetEndpoint dest;		/* what its target knows of it: its URL,
								 * headers, signing keys and client
								 * authentication (credentials.c) */
	int			max_attempts;
	bool		ordered;
	int64		max_age_ms;		/* events older go unsent (expired); 0: none */
	int			in_flight;		/* its requests in flight */
	struct Batch *page;			/* page of new events in flight: its own, or
								 * its part of the stream's page; or NULL */
	struct Batch *due;			/* due retries in flight, or NULL */
	bool		more_page;		/* the last page was full: read again at once */
	bool		more_due;		/* due retries were recorded: read again */
	bool		woken_busy;		/* woken while its page was in flight: read
								 * again once that page is recorded */
	bool		verify_page;	/* skip events already answered with a 2xx: */
	bool		verify_due;		/* set at start and after a failed record */
	int			consecutive_failures;	/* since the last 2xx, in this relay */
	TimestampTz probed_at;		/* failing without pause: the full round
								 * that last read it a probe page */
	int			retry_failures; /* of those, in a row, that ask to try again:
								 * no answer in time, a 5xx, a 429 */
	TimestampTz failed_at;		/* the last of those, in this relay */
	bool		lagged;			/* detached for holding the stream back, and
								 * no definite answer since */
	double		answer_ms;		/* what its last definite answer took; 0:
								 * none in this relay */
	TimestampTz last_warning;	/* last "deliveries are failing" report */
	int			failures_unreported;
	/* its health row (relay_record_round, HEALTH_QUIET_MS) */
	TimestampTz health_at;		/* when a record last had its sent outcomes
								 * counted there; 0: not in this relay */
	TimestampTz health_failed_at;	/* and last one with a failure; 0: none */
	bool		health_quiet;	/* left out, in the record being made */
	/* requests in flight: pump_run() (DESIGN.md, The relay loop) */
	int			max_in_flight;	/* its cap; 0: outbox.endpoint_concurrency */
	bool		busy;			/* ready, or requests in flight: counted in
								 * the fair share */
	bool		ready;			/* in pump.c's ready list: deliveries may wait */
	dlist_node	ready_node;
	int			shown_at;		/* 1 + its entry in the shared table of
								 * requests in flight (shmem.c), 0: none */
	/* its rate limit and a receiver's pause (limit.c) */
	double		rate_limit;		/* requests a second; 0: none */
	double		tokens;			/* in its bucket, as of tokens_at */
	TimestampTz tokens_at;
	TimestampTz paused_until;	/* a 429 or 503's Retry-After; 0: none */
	TimestampTz changed_at;		/* its row's updated_at, as last loaded */
	bool		held;			/* deliveries wait for the limit or pause */
	TimestampTz held_until;		/* when it is looked at again */
	pairingheap_node held_node;
} RelayEndpoint;

typedef enum DeliveryState
{
	DELIVERY_WAITING,			/* not sent yet */
	DELIVERY_SENT,				/* request in flight */
	DELIVERY_DONE				/* outcome known (or deferred) */
} DeliveryState;

/* One event on its way to one endpoint. */
typedef struct Delivery
{
	struct Batch *batch;
	DeliveryState state;
	int			prev_same_key;	/* ordered endpoints: index of the previous
								 * delivery of this key in the batch, or -1 */
	int64		id;
	pg_uuid_t	event_id;
	int			attempt;		/* this attempt's number, 1-based */
	bool		deferred;		/* not sent now: deliver_at is later, or an
								 * earlier event of its key is still owed */
	bool		behind_key;		/* deferred behind an earlier event of its
								 * key: that one's retry wakes the relay */
	bool		already;		/* answered with a 2xx before a restart */
	bool		expired;		/* not sent: its deadline passed */
	bool		recorded;		/* its outcome is committed */
	TimestampTz deliver_at;
	TimestampTz deadline;		/* not sent from then on; 0: none
								 * (policy_deadline) */
	int16		priority;		/* higher is submitted first (priority.c) */
	const char *type;
	TimestampTz emitted_at;
	char	   *key;
	char	   *body;			/* in its endpoint's format */
	char	  **event_headers;
	int			n_event_headers;
	OutcomeKind outcome;
	TimestampTz next_at;
	TargetRequest req;			/* its attempt, as its target has it:
								 * delivery_request() to target_next_done() */
	TargetResult result;		/* of its attempt (req.result points here) */
	bool		took_slot;		/* its attempt holds one of the relay's slots */
	/* and counts as fresh until the relay waited this long (pump.c) */
	bool		fresh;
	int64		fresh_until;	/* in wait_blocked_us() */
	TimestampTz fresh_by;		/* or by the clock */
	dlist_node	fresh_node;
} Delivery;

/*
 * An event as read: of a stream page, or of an endpoint's page or due
 * retries until their batch is made.
 */
typedef struct StreamEvent
{
	int64		id;
	pg_uuid_t	event_id;
	char	   *type;
	TimestampTz deliver_at;		/* 0: none */
	char	   *key;
	TimestampTz emitted_at;
	char	   *data;			/* the payload, JSON text */
	size_t		data_len;
	char	   *body[OUTBOX_FORMATS];	/* in each format, made when first
										 * routed to an endpoint of it */
	char	  **headers;		/* "name: value" lines */
	int			n_headers;
	TimestampTz expires_at;		/* 0: none */
	int16		priority;
} StreamEvent;

/*
 * A page of the stream: events of every type, read once for all endpoints
 * that follow the stream, and routed to them as one Batch (a part) each.
 * Its memory holds the events' bodies, which the parts' deliveries point
 * to; it is freed once the stream has moved past it and no batch refers to
 * it any more (a detached endpoint's part may outlive it in the stream).
 */
typedef struct StreamPage
{
	MemoryContext cxt;
	char	   *snap;			/* its batch snapshot (text) */
	int64		last_id;
	bool		batch_done;		/* the page ended the stream's batch */
	int			n;				/* events read */
	StreamEvent *ev;
	int			parts;			/* parts not yet recorded whole */
	int			routed;			/* parts it was routed into */
	int			finished;		/* of those, parts with every outcome known,
								 * or taken off it by a detach */
	int			refs;			/* batches whose deliveries point into it */
	bool		in_stream;		/* the stream has not moved past it yet */
	TimestampTz read_at;		/* when its read committed */
	int			answered;		/* requests of its parts answered (or not),
								 * those that took slots */
	int			slow_answers;	/* of those, taking SLOW_ANSWER_MS or more */
	int64		cpu_at_read;	/* the relay's CPU time then (stream_cpu_us) */
	TimestampTz progress_at;	/* read, or a part finished, last */
	bool		holding;		/* stream_detach_laggards holds it, with
								 * parts late */
	TimestampTz held_at;		/* a hold with parts late ended (0: never) */
	bool		ahead_tried;	/* the page after it was read ahead (or
								 * tried: read_ahead) */
} StreamPage;

/*
 * Events read for the stream or for one endpoint (store_read_stream,
 * store_read_page, store_read_due), in memory the caller names.  What a
 * reader does not return stays NULL or zero.
 */
typedef struct EventRows
{
	int			n;
	StreamEvent *ev;			/* the events; deliver_at of the stream's and
								 * a page's, 0: none */
	bool	   *delivered;		/* page, due: answered with a 2xx already */
	bool	   *blocked;		/* page: waits behind an earlier event of its
								 * key (ordered endpoints) */
	int		   *attempts;		/* due: attempts made so far */
	char	   *snap;			/* stream, page: its batch snapshot (text) */
	bool		batch_done;		/* stream, page: it ended the batch */
	int			n_own;			/* page: its own rows, first; the rest are
								 * sent ahead of their page (priority) */
} EventRows;

/* What the relay read for one endpoint at once: a page or due retries. */
typedef struct Batch
{
	RelayEndpoint *ep;
	MemoryContext cxt;
	bool		is_page;
	StreamPage *stream;			/* a part of the stream's page: the stream's
								 * position moves past it, not the endpoint's */
	StreamPage *events;			/* the stream page its deliveries point
								 * into, or NULL: they are its own */
	char	   *snap;			/* the page's batch snapshot (text) */
	int64		last_id;
	bool		batch_done;		/* the page ended the batch */
	int			n;
	int			room;			/* deliveries allocated */
	int			next_submit;	/* first delivery that may still wait */
	int			pending;		/* deliveries without an outcome yet */
	int			unrecorded;		/* deliveries with an outcome not yet recorded */
	Delivery   *d;
	const char *disable_reason;
	TimestampTz last_flush;		/* when it was read, or last in a record
								 * round (a refused record's retry clock) */
	TimestampTz answered_at;	/* when a request of it was last sent or
								 * finished (or it was read) */
	bool		record_failed;	/* the last record failed or was refused */
	dlist_node	node;			/* in the relay's list of batches */
	bool		pumped;			/* pump_run() has seen it (its endpoint readied) */
} Batch;

extern Batch *delivery_new_batch(RelayEndpoint *ep, bool is_page, int n, MemoryContext cxt);
extern char *delivery_event_body(const StreamEvent *e, OutboxFormat format);
extern void delivery_of_event(Delivery *d, Batch *b, const StreamEvent *e);
extern Batch *delivery_batch_of_events(RelayEndpoint *ep, bool is_page, EventRows *rows,
									   MemoryContext cxt);
extern void delivery_free_events(EventRows *rows);
extern void delivery_settle(Delivery *d, OutcomeKind outcome);
extern void delivery_defer(Delivery *d, TimestampTz next_at);
extern void delivery_expire(Delivery *d);
extern TargetRequest *delivery_request(Delivery *d);

/* The delivery whose attempt req is (target_next_done). */
static inline Delivery *
delivery_of_request(TargetRequest *req)
{
	return (Delivery *) ((char *) req - offsetof(Delivery, req));
}

/*
 * Was a finished delivery sent?  Not when deferred, answered before a
 * restart, or expired: its outcome then says nothing of the receiver (no
 * duration, no status in the attempt log, not counted in the health row).
 */
static inline bool
delivery_was_sent(const Delivery *d)
{
	return !d->deferred && !d->already && !d->expired;
}

#endif							/* OUTBOX_DELIVERY_H */
