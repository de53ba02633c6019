/*-------------------------------------------------------------------------
 *
 * counters.h
 *	  Counters per endpoint that only grow while the server runs: attempts
 *	  by outcome and their durations as a histogram, and each database's
 *	  relay starts; in shared memory, written by the relays, read by
 *	  outbox._counters() (src/functions/metrics.c) for outbox.metrics.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COUNTERS_H
#define OUTBOX_COUNTERS_H

/* What an endpoint's counters count, by the outcome recorded. */
typedef enum CountedOutcome
{
	COUNTED_DELIVERED,
	COUNTED_RETRY,
	COUNTED_DEAD,
	COUNTED_EXPIRED,
	COUNTED_NOUTCOMES
} CountedOutcome;

/* Upper bounds of the duration histogram's buckets, in seconds (+Inf aside). */
#define COUNTED_NBOUNDS 12
extern const double outbox_bucket_bounds[COUNTED_NBOUNDS];

/* One endpoint's counters (endpoint_id 0: the database's own), as read. */
typedef struct CounterSnapshot
{
	int			endpoint_id;
	uint64		outcomes[COUNTED_NOUTCOMES];
	uint64		buckets[COUNTED_NBOUNDS + 1];	/* cumulative; the last is +Inf */
	double		seconds_sum;
	uint64		relay_starts;
} CounterSnapshot;

typedef void (*CounterVisitor) (const CounterSnapshot *snap, void *arg);

/* Shared memory (called by shmem.c's hooks) */
extern Size outbox_counters_size(void);
extern void outbox_counters_startup(void);

/* The relay of a database */
extern void outbox_counters_attach(Oid dboid, Oid extension_oid);
extern void outbox_count_outcome(int endpoint_id, CountedOutcome outcome,
								 bool sent, double duration_ms);
extern void outbox_counters_forget(int endpoint_id);

/* Readers: the counters of this database */
extern void outbox_visit_counters(CounterVisitor visit, void *arg);

#endif							/* OUTBOX_COUNTERS_H */
