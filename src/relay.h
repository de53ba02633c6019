/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  The relay: a background worker that delivers committed events to
 *	  their webhook endpoints.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "datatype/timestamp.h"
#include "utils/uuid.h"

#include "http.h"
#include "policy.h"
#include "sign.h"

/* An endpoint as the relay knows it; refreshed from SQL each read round. */
typedef struct RelayEndpoint
{
	int			id;				/* hash key */
	bool		seen;			/* present in the latest load */
	bool		active;			/* not paused, not disabled */
	char	   *name;
	char	   *url;
	char	   *headers;		/* "name: value\n" lines, endpoint's own */
	uint8		key[OUTBOX_KEY_MAX];
	int			keylen;
	uint8		old_key[OUTBOX_KEY_MAX];
	int			old_keylen;		/* 0: no rotation under way */
	long		timeout_ms;
	int			max_attempts;
	bool		ordered;
	int			in_flight;		/* its requests in flight */
	struct Batch *page;			/* page of new events in flight, or NULL */
	struct Batch *due;			/* due retries in flight, or NULL */
	bool		more_page;		/* the last page was full: read again at once */
	bool		more_due;		/* due retries were recorded: read again */
	bool		woken_busy;		/* woken while its page was in flight: read
								 * again once that page is recorded */
	bool		verify_page;	/* skip events already answered with a 2xx: */
	bool		verify_due;		/* set at start and after a failed record */
	int			consecutive_failures;	/* since the last 2xx, in this relay */
	TimestampTz last_warning;	/* last "deliveries are failing" report */
	int			failures_unreported;
	/* requests in flight: pump() (DESIGN.md, The relay loop) */
	int			max_in_flight;	/* its cap; 0: outbox.endpoint_concurrency */
	bool		busy;			/* ready, or requests in flight: counted in
								 * the fair share */
	bool		ready;			/* in pump()'s list: deliveries may wait */
	dlist_node	ready_node;
	int			shown_at;		/* 1 + its entry in the shared table of
								 * requests in flight (shmem.c), 0: none */
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
	char		event_id_str[UUID_LEN * 2 + 5];
	int			attempt;		/* this attempt's number, 1-based */
	bool		deferred;		/* not sent now: deliver_at is later, or an
								 * earlier event of its key is still owed */
	bool		already;		/* answered with a 2xx before a restart */
	bool		recorded;		/* its outcome is committed */
	TimestampTz deliver_at;
	char	   *key;
	char	   *body;
	char	  **event_headers;
	int			n_event_headers;
	const char *outcome;
	TimestampTz next_at;
	HttpRequest req;
} Delivery;

/* What the relay read for one endpoint at once: a page or due retries. */
typedef struct Batch
{
	RelayEndpoint *ep;
	MemoryContext cxt;
	bool		is_page;
	char	   *snap;			/* the page's batch snapshot (text) */
	int64		last_id;
	bool		batch_done;		/* the page ended the batch */
	int			n;
	int			next_submit;	/* first delivery that may still wait */
	int			pending;		/* deliveries without an outcome yet */
	Delivery   *d;
	const char *disable_reason;
	TimestampTz last_flush;		/* when finished deliveries were last recorded */
	bool		record_failed;	/* the last record failed or was refused */
	dlist_node	node;			/* in the relay's list of batches */
	bool		pumped;			/* pump() has seen it (its endpoint readied) */
} Batch;

extern PGDLLEXPORT void outbox_relay_main(Datum arg);

#endif							/* OUTBOX_RELAY_H */
