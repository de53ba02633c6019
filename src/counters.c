/*-------------------------------------------------------------------------
 *
 * counters.c
 *	  Counters per endpoint in shared memory: attempts by outcome, their
 *	  durations as a histogram, and per database the relay's starts.  They
 *	  only grow while the server runs (Prometheus' rate() takes a drop for a
 *	  restart); outbox.metrics shows them (DESIGN.md, "Metrics").
 *
 * A pool of counter sets, outbox.max_counted_endpoints of them for
 * endpoints and outbox.max_relays more for databases, each keyed by one
 * atomic word: database << 32 | endpoint id (0 for the database's own set;
 * 0 as a whole: free).  Only the relay of a database writes its sets, with
 * atomic adds and no lock; a database has one relay at most.  It takes a
 * set from the free list under this file's LWLock when it first counts an
 * endpoint (once per endpoint while the server runs), gives it back when
 * the endpoint is dropped, and keeps its database's sets in a local hash
 * table built at its start, so a restarted relay counts on where the last
 * one stopped.  When no set is free an endpoint's attempts are counted in
 * the database's own set, shown without an endpoint.  A set given back is
 * first added into the database's own, so that what is summed over a
 * database (the duration histogram, the attempts of all endpoints) never
 * goes down; and the database's own set remembers the extension it counted
 * for, so that after DROP EXTENSION and CREATE EXTENSION (whose endpoint
 * ids start again at 1) no new endpoint counts on an old one's set.
 *
 * Readers (outbox._counters()) walk the pool without a lock: each set's key
 * is read before and after its counters, and a set whose key changed
 * meanwhile is passed over.  Nothing a reader does makes a relay wait.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "counters.h"
#include "guc.h"

const double outbox_bucket_bounds[COUNTED_NBOUNDS] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30
};

typedef struct CounterSet
{
	pg_atomic_uint64 key;		/* dboid << 32 | endpoint id; 0: free */
	pg_atomic_uint64 outcomes[COUNTED_NOUTCOMES];
	pg_atomic_uint64 buckets[COUNTED_NBOUNDS + 1];	/* not cumulative */
	pg_atomic_uint64 micros;	/* durations' sum, in microseconds */
	pg_atomic_uint64 relay_starts;	/* the database's own set only */
	pg_atomic_uint64 extension;	/* the database's own: the extension's OID */
} CounterSet;

typedef struct CounterPool
{
	LWLock	   *lock;			/* the free list */
	int			nsets;
	int			nfree;
	int			reserved;		/* free sets kept for databases' own not taken yet */
	int		   *free_list;		/* nsets of them; the first nfree are free */
	CounterSet	sets[FLEXIBLE_ARRAY_MEMBER];
} CounterPool;

/* The relay's map from endpoint id to its set. */
typedef struct CountedEndpoint
{
	int			endpoint_id;	/* hash key */
	int			set;			/* -1: none was free */
} CountedEndpoint;

static CounterPool *pool = NULL;
static HTAB *my_sets = NULL;
static Oid	my_dboid = InvalidOid;
static int	my_db_set = -1;

static int
pool_sets(void)
{
	return outbox_max_counted_endpoints + outbox_max_relays;
}

Size
outbox_counters_size(void)
{
	Size		size = add_size(offsetof(CounterPool, sets),
								mul_size(pool_sets(), sizeof(CounterSet)));

	return add_size(size, mul_size(pool_sets(), sizeof(int)));
}

/* Lay the pool out, every set free.  Under AddinShmemInitLock. */
void
outbox_counters_startup(void)
{
	bool		found;

	pool = ShmemInitStruct("outbox counters", outbox_counters_size(), &found);
	if (found)
		return;
	pool->lock = &(GetNamedLWLockTranche("outbox counters"))->lock;
	pool->nsets = pool_sets();
	pool->nfree = pool->nsets;
	pool->reserved = outbox_max_relays;
	pool->free_list = (int *) &pool->sets[pool->nsets];
	for (int i = 0; i < pool->nsets; i++)
	{
		CounterSet *s = &pool->sets[i];

		pg_atomic_init_u64(&s->key, 0);
		for (int c = 0; c < COUNTED_NOUTCOMES; c++)
			pg_atomic_init_u64(&s->outcomes[c], 0);
		for (int b = 0; b <= COUNTED_NBOUNDS; b++)
			pg_atomic_init_u64(&s->buckets[b], 0);
		pg_atomic_init_u64(&s->micros, 0);
		pg_atomic_init_u64(&s->relay_starts, 0);
		pg_atomic_init_u64(&s->extension, 0);
		pool->free_list[i] = pool->nsets - 1 - i;
	}
}

static uint64
set_key(Oid dboid, int endpoint_id)
{
	return ((uint64) dboid << 32) | (uint32) endpoint_id;
}

/*
 * Take a free set for an endpoint of the relay's database (0: the
 * database's own), zeroed, its key published last.  -1 when none is free;
 * an endpoint leaves the reserved ones to databases.
 */
static int
claim_set(int endpoint_id)
{
	int			set = -1;
	CounterSet *s;

	LWLockAcquire(pool->lock, LW_EXCLUSIVE);
	if (pool->nfree > (endpoint_id == 0 ? 0 : pool->reserved))
	{
		set = pool->free_list[--pool->nfree];
		/* (a database's own set is never given back: one reserve less) */
		if (endpoint_id == 0 && pool->reserved > 0)
			pool->reserved--;
	}
	LWLockRelease(pool->lock);
	if (set < 0)
		return -1;
	s = &pool->sets[set];
	for (int c = 0; c < COUNTED_NOUTCOMES; c++)
		pg_atomic_write_u64(&s->outcomes[c], 0);
	for (int b = 0; b <= COUNTED_NBOUNDS; b++)
		pg_atomic_write_u64(&s->buckets[b], 0);
	pg_atomic_write_u64(&s->micros, 0);
	pg_atomic_write_u64(&s->relay_starts, 0);
	pg_atomic_write_u64(&s->extension, 0);
	pg_write_barrier();
	pg_atomic_write_u64(&s->key, set_key(my_dboid, endpoint_id));
	return set;
}

/*
 * Give an endpoint's set back to the free list, its counts added into the
 * database's own set first (taken off the readers' view before, so a
 * reader sees them once at most).
 */
static void
release_set(int set)
{
	CounterSet *s = &pool->sets[set];

	pg_atomic_write_u64(&s->key, 0);
	if (my_db_set >= 0)
	{
		CounterSet *db = &pool->sets[my_db_set];

		for (int c = 0; c < COUNTED_NOUTCOMES; c++)
			pg_atomic_fetch_add_u64(&db->outcomes[c], pg_atomic_read_u64(&s->outcomes[c]));
		for (int b = 0; b <= COUNTED_NBOUNDS; b++)
			pg_atomic_fetch_add_u64(&db->buckets[b], pg_atomic_read_u64(&s->buckets[b]));
		pg_atomic_fetch_add_u64(&db->micros, pg_atomic_read_u64(&s->micros));
	}
	LWLockAcquire(pool->lock, LW_EXCLUSIVE);
	pool->free_list[pool->nfree++] = set;
	LWLockRelease(pool->lock);
}

/*
 * The relay of dboid starts, for the extension extension_oid: find the sets
 * its database kept from relays before (one walk of the pool), and count
 * the start.  Sets kept for another installation of the extension (dropped
 * and created again since) are given back.
 */
void
outbox_counters_attach(Oid dboid, Oid extension_oid)
{
	HASH_SEQ_STATUS seq;
	CountedEndpoint *ce;
	HASHCTL		ctl;
	bool		found;

	if (pool == NULL)
		return;
	my_dboid = dboid;
	ctl.keysize = sizeof(int);
	ctl.entrysize = sizeof(CountedEndpoint);
	ctl.hcxt = TopMemoryContext;
	my_sets = hash_create("outbox counted endpoints", 1024, &ctl,
						  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	my_db_set = -1;
	for (int i = 0; i < pool->nsets; i++)
	{
		uint64		key = pg_atomic_read_u64(&pool->sets[i].key);
		int			endpoint_id = (int) (uint32) key;

		if (key == 0 || (Oid) (key >> 32) != dboid)
			continue;
		if (endpoint_id == 0)
		{
			my_db_set = i;
			continue;
		}
		ce = hash_search(my_sets, &endpoint_id, HASH_ENTER, &found);
		ce->set = i;
	}
	if (my_db_set < 0)
		my_db_set = claim_set(0);
	if (my_db_set < 0)
	{
		elog(LOG, "outbox: no counter set is free for this database: its attempts are not counted (outbox.max_relays)");
		return;
	}
	if (pg_atomic_read_u64(&pool->sets[my_db_set].extension) != extension_oid)
	{
		hash_seq_init(&seq, my_sets);
		while ((ce = hash_seq_search(&seq)) != NULL)
		{
			release_set(ce->set);
			hash_search(my_sets, &ce->endpoint_id, HASH_REMOVE, NULL);
		}
		pg_atomic_write_u64(&pool->sets[my_db_set].extension, extension_oid);
	}
	pg_atomic_fetch_add_u64(&pool->sets[my_db_set].relay_starts, 1);
}

/*
 * Count an attempt's outcome for an endpoint, and its duration when a
 * request was sent.  The relay only; costs a hash lookup and a few atomic
 * adds (a lock only for an endpoint's first count).
 */
void
outbox_count_outcome(int endpoint_id, CountedOutcome outcome, bool sent,
					 double duration_ms)
{
	CountedEndpoint *ce;
	CounterSet *s;
	bool		found;
	double		seconds = duration_ms / 1000.0;
	int			b = 0;

	if (my_sets == NULL)
		return;
	ce = hash_search(my_sets, &endpoint_id, HASH_ENTER, &found);
	/* (one that found none free tries again once sets were given back) */
	if (!found || (ce->set < 0 && pool->nfree > pool->reserved))
		ce->set = claim_set(endpoint_id);
	if (ce->set >= 0)
		s = &pool->sets[ce->set];
	else if (my_db_set >= 0)
		s = &pool->sets[my_db_set];
	else
		return;
	pg_atomic_fetch_add_u64(&s->outcomes[outcome], 1);
	if (!sent)
		return;
	while (b < COUNTED_NBOUNDS && seconds > outbox_bucket_bounds[b])
		b++;
	pg_atomic_fetch_add_u64(&s->buckets[b], 1);
	pg_atomic_fetch_add_u64(&s->micros, (uint64) Max(duration_ms * 1000.0, 0.0));
}

/* An endpoint was dropped: its set goes back (release_set). */
void
outbox_counters_forget(int endpoint_id)
{
	CountedEndpoint *ce;
	int			set;

	if (my_sets == NULL)
		return;
	ce = hash_search(my_sets, &endpoint_id, HASH_FIND, NULL);
	if (ce == NULL)
		return;
	set = ce->set;
	hash_search(my_sets, &endpoint_id, HASH_REMOVE, NULL);
	if (set >= 0)
		release_set(set);
}

/* Copy one set's counters, cumulating the buckets. */
static void
read_set(CounterSet *s, CounterSnapshot *snap)
{
	uint64		total = 0;

	for (int c = 0; c < COUNTED_NOUTCOMES; c++)
		snap->outcomes[c] = pg_atomic_read_u64(&s->outcomes[c]);
	for (int b = 0; b <= COUNTED_NBOUNDS; b++)
	{
		total += pg_atomic_read_u64(&s->buckets[b]);
		snap->buckets[b] = total;
	}
	snap->seconds_sum = pg_atomic_read_u64(&s->micros) / 1e6;
	snap->relay_starts = pg_atomic_read_u64(&s->relay_starts);
}

/*
 * Call visit for every set of this database, without a lock; none without
 * shared memory.
 */
void
outbox_visit_counters(CounterVisitor visit, void *arg)
{
	CounterSnapshot snap;

	if (pool == NULL)
		return;
	for (int i = 0; i < pool->nsets; i++)
	{
		CounterSet *s = &pool->sets[i];
		uint64		key = pg_atomic_read_u64(&s->key);

		if (key == 0 || (Oid) (key >> 32) != MyDatabaseId)
			continue;
		pg_read_barrier();
		read_set(s, &snap);
		pg_read_barrier();
		if (pg_atomic_read_u64(&s->key) != key)
			continue;
		snap.endpoint_id = (int) (uint32) key;
		visit(&snap, arg);
	}
}
