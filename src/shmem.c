/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared state: one slot per relay, the launcher's latch and launch
 *	  requests, and databases whose relay is held off.
 *
 * Only a preloaded library gets shared memory.  The launcher assigns a slot
 * to a database under the lock (claim, release); the relay in it publishes
 * where it sleeps and counts what it does.  Committing backends find their
 * database's slot and set the relay's latch with plain atomic reads and no
 * lock, so a commit never waits: a stale read can at worst set an
 * unrelated process's latch, which latches tolerate as a spurious wake-up,
 * and a relay starting reads everything anyway.
 *
 * Each slot also shows what its relay has in flight per endpoint, its
 * senders' requests included, and which endpoints its rate limit holds
 * (limit.c): a table of SHOWN_ENTRIES entries, each one atomic word holding
 * an endpoint id, a count and the held flag, written by the relay alone
 * and read by outbox._in_flight() without a lock.  An endpoint holds an
 * entry only while it has a request in flight or is held.  At most
 * OUTBOX_MAX_CONCURRENCY endpoints have requests in flight, and at most
 * that many entries go to held endpoints with none (more are not shown as
 * held), so there are never more endpoints to show than entries.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "counters.h"
#include "guc.h"
#include "shmem.h"

#define INVALID_PROCNO	PG_UINT32_MAX
/* Entries of a slot's table of endpoints in flight or held. */
#define SHOWN_ENTRIES	(2 * OUTBOX_MAX_CONCURRENCY)
/* In an entry's low word: the endpoint is held; the rest is its count. */
#define SHOWN_HELD		((uint32) 1 << 31)
/* Databases at once whose relay a database command holds off. */
#define MAX_HOLDS		16

typedef struct RelaySlot
{
	pg_atomic_uint32 dboid;		/* InvalidOid: free (changed under lock) */
	pg_atomic_uint32 procno;	/* the relay's PGPROC number, or
								 * INVALID_PROCNO while none runs */
	pg_atomic_uint32 pid;		/* 0 while no relay runs */
	pg_atomic_uint64 endpoints_version; /* bumped by commits that changed
										 * endpoints or queued retries */
	TimestampTz started_at;
	RelayExit	exit_reason;	/* set by the relay as it leaves */
	uint64		requests_seen;	/* launch requests when it looked for the
								 * extension (RELAY_EXIT_ABSENT) */
	pg_atomic_uint64 counters[RELAY_NCOUNTERS];
	/* endpoint id << 32 | SHOWN_HELD if held | requests in flight; 0: free */
	pg_atomic_uint64 in_flight[SHOWN_ENTRIES];
} RelaySlot;

typedef struct HeldDatabase
{
	Oid			dboid;
	TimestampTz until;
} HeldDatabase;

typedef struct OutboxShared
{
	LWLock	   *lock;			/* slot assignment and holds */
	pg_atomic_uint32 launcher_procno;
	pg_atomic_uint64 launch_requests;	/* bumped by CREATE/ALTER EXTENSION */
	HeldDatabase holds[MAX_HOLDS];
	int			nslots;
	RelaySlot	slots[FLEXIBLE_ARRAY_MEMBER];
} OutboxShared;

static OutboxShared *shared = NULL;

/* This process's relay slot, and a backend's cached slot for its database. */
static int	my_slot = -1;
static int	cached_slot = -1;

/*
 * The relay's free entries of its slot's in-flight table, as a stack, and
 * how many entries it gave to held endpoints with nothing in flight.
 */
static int *free_entries = NULL;
static int	n_free = 0;
static int	n_held_only = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
shared_size(void)
{
	return add_size(offsetof(OutboxShared, slots),
					mul_size(outbox_max_relays, sizeof(RelaySlot)));
}

static void
outbox_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(shared_size()));
	RequestNamedLWLockTranche("outbox", 1);
	RequestAddinShmemSpace(MAXALIGN(outbox_counters_size()));
	RequestNamedLWLockTranche("outbox counters", 1);
}

static void
outbox_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("outbox", shared_size(), &found);
	if (!found)
	{
		memset(shared, 0, shared_size());
		shared->lock = &(GetNamedLWLockTranche("outbox"))->lock;
		pg_atomic_init_u32(&shared->launcher_procno, INVALID_PROCNO);
		pg_atomic_init_u64(&shared->launch_requests, 0);
		shared->nslots = outbox_max_relays;
		for (int i = 0; i < shared->nslots; i++)
		{
			RelaySlot  *s = &shared->slots[i];

			pg_atomic_init_u32(&s->dboid, InvalidOid);
			pg_atomic_init_u32(&s->procno, INVALID_PROCNO);
			pg_atomic_init_u32(&s->pid, 0);
			pg_atomic_init_u64(&s->endpoints_version, 0);
			for (int c = 0; c < RELAY_NCOUNTERS; c++)
				pg_atomic_init_u64(&s->counters[c], 0);
			for (int e = 0; e < SHOWN_ENTRIES; e++)
				pg_atomic_init_u64(&s->in_flight[e], 0);
		}
	}
	outbox_counters_startup();
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Install the hooks that reserve and initialise shared memory.  Does nothing
 * unless called from shared_preload_libraries.
 */
void
outbox_shmem_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = outbox_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = outbox_shmem_startup;
}

/* Error out when the library was not preloaded. */
void
outbox_shmem_require(void)
{
	if (shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("outbox must be loaded via shared_preload_libraries"),
				 errhint("Add outbox to shared_preload_libraries and restart the server.")));
}

int
outbox_max_slots(void)
{
	return shared ? shared->nslots : 0;
}

/*----------------------------------------------------------------------
 * The launcher
 *----------------------------------------------------------------------
 */

void
outbox_set_launcher(int pgprocno)
{
	pg_atomic_write_u32(&shared->launcher_procno,
						pgprocno < 0 ? INVALID_PROCNO : (uint32) pgprocno);
}

uint64
outbox_launch_requests(void)
{
	return pg_atomic_read_u64(&shared->launch_requests);
}

/*
 * Ask the launcher to look again for databases with outbox installed: a
 * transaction that ran CREATE or ALTER EXTENSION committed.
 */
void
outbox_request_launch(void)
{
	uint32		procno;

	if (shared == NULL)
		return;
	pg_atomic_fetch_add_u64(&shared->launch_requests, 1);
	procno = pg_atomic_read_u32(&shared->launcher_procno);
	if (procno != INVALID_PROCNO && procno < ProcGlobal->allProcCount)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* The slot serving a database, or -1. */
int
outbox_slot_for(Oid dboid)
{
	for (int i = 0; i < shared->nslots; i++)
		if (pg_atomic_read_u32(&shared->slots[i].dboid) == dboid)
			return i;
	return -1;
}

Oid
outbox_slot_dboid(int slot)
{
	return pg_atomic_read_u32(&shared->slots[slot].dboid);
}

/* The pid of the relay in a slot; 0 before it attached or after it left. */
int
outbox_slot_pid(int slot)
{
	return (int) pg_atomic_read_u32(&shared->slots[slot].pid);
}

/* Take a free slot for a database; -1 when all are taken. */
int
outbox_slot_claim(Oid dboid)
{
	int			slot = -1;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < shared->nslots && slot < 0; i++)
	{
		RelaySlot  *s = &shared->slots[i];

		if (pg_atomic_read_u32(&s->dboid) != InvalidOid)
			continue;
		slot = i;
		s->exit_reason = RELAY_EXIT_UNKNOWN;
		s->started_at = 0;
		pg_atomic_write_u32(&s->procno, INVALID_PROCNO);
		pg_atomic_write_u32(&s->pid, 0);
		for (int c = 0; c < RELAY_NCOUNTERS; c++)
			pg_atomic_write_u64(&s->counters[c], 0);
		pg_atomic_write_u32(&s->dboid, dboid);
	}
	LWLockRelease(shared->lock);
	return slot;
}

/* The relay of a slot has gone: free it, and say why it left. */
RelayExit
outbox_slot_release(int slot, uint64 *requests_seen)
{
	RelaySlot  *s = &shared->slots[slot];
	RelayExit	reason;

	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	reason = s->exit_reason;
	*requests_seen = s->requests_seen;
	pg_atomic_write_u32(&s->procno, INVALID_PROCNO);
	pg_atomic_write_u32(&s->pid, 0);
	pg_atomic_write_u32(&s->dboid, InvalidOid);
	LWLockRelease(shared->lock);
	return reason;
}

/*
 * Until when a database command holds off the relay of this database; 0
 * when it does not.
 */
TimestampTz
outbox_held_until(Oid dboid)
{
	TimestampTz until = 0;
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(shared->lock, LW_SHARED);
	for (int i = 0; i < MAX_HOLDS; i++)
		if (shared->holds[i].dboid == dboid && shared->holds[i].until > now)
			until = Max(until, shared->holds[i].until);
	LWLockRelease(shared->lock);
	return until;
}

/*
 * Keep the launcher from starting a relay in a database for a while, and
 * stop the one running there: DROP DATABASE and its kin need the database
 * to themselves.  Waits, up to the given time, until the relay has gone.
 */
void
outbox_hold_off(Oid dboid, int seconds)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz until = TimestampTzPlusMilliseconds(now, seconds * 1000);
	int			free_entry = -1;
	int			slot;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < MAX_HOLDS; i++)
	{
		HeldDatabase *h = &shared->holds[i];

		if (h->dboid == dboid || h->until <= now)
		{
			if (free_entry < 0 || h->dboid == dboid)
				free_entry = i;
		}
	}
	if (free_entry >= 0)
	{
		shared->holds[free_entry].dboid = dboid;
		shared->holds[free_entry].until = until;
	}
	LWLockRelease(shared->lock);

	while ((slot = outbox_slot_for(dboid)) >= 0 && GetCurrentTimestamp() < until)
	{
		uint32		pid = pg_atomic_read_u32(&shared->slots[slot].pid);

		if (pid != 0)
			kill((pid_t) pid, SIGTERM);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*----------------------------------------------------------------------
 * The relay
 *----------------------------------------------------------------------
 */

/* A relay takes its slot: counters from zero, its latch published. */
void
outbox_relay_attach(int slot, Oid dboid)
{
	RelaySlot  *s;

	if (slot < 0 || slot >= shared->nslots ||
		pg_atomic_read_u32(&shared->slots[slot].dboid) != dboid)
		elog(ERROR, "outbox relay slot %d is not assigned to database %u", slot, dboid);
	s = &shared->slots[slot];
	my_slot = slot;
	for (int i = 0; i < RELAY_NCOUNTERS; i++)
		pg_atomic_write_u64(&s->counters[i], 0);
	/* Nothing in flight yet; every entry free, the first on top. */
	if (free_entries == NULL)
		free_entries = MemoryContextAlloc(TopMemoryContext, sizeof(int) * SHOWN_ENTRIES);
	for (int e = 0; e < SHOWN_ENTRIES; e++)
	{
		pg_atomic_write_u64(&s->in_flight[e], 0);
		free_entries[e] = SHOWN_ENTRIES - 1 - e;
	}
	n_free = SHOWN_ENTRIES;
	n_held_only = 0;
	s->started_at = GetCurrentTimestamp();
	s->exit_reason = RELAY_EXIT_UNKNOWN;
	pg_write_barrier();
	pg_atomic_write_u32(&s->procno, (uint32) MyProcNumber);
	pg_atomic_write_u32(&s->pid, (uint32) MyProcPid);
}

/*
 * The relay leaves; the launcher frees the slot once the worker is gone.
 * requests_seen: the launch requests counted before it looked for the
 * extension, so that one made since is not taken for "absent".
 */
void
outbox_relay_detach(RelayExit reason, uint64 requests_seen)
{
	RelaySlot  *s;

	if (my_slot < 0)
		return;
	s = &shared->slots[my_slot];
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	s->exit_reason = reason;
	s->requests_seen = requests_seen;
	pg_atomic_write_u32(&s->procno, INVALID_PROCNO);
	pg_atomic_write_u32(&s->pid, 0);
	LWLockRelease(shared->lock);
	my_slot = -1;
}

void
outbox_count(RelayCounter counter, uint64 n)
{
	if (my_slot >= 0 && n > 0)
		pg_atomic_fetch_add_u64(&shared->slots[my_slot].counters[counter], n);
}

uint64
outbox_endpoints_version(void)
{
	return my_slot >= 0 ? pg_atomic_read_u64(&shared->slots[my_slot].endpoints_version) : 0;
}

/*
 * Show that an endpoint has n requests in flight, and whether it is held.
 * shown_at is what the previous call returned for it (0 the first time):
 * 1 + its entry, kept while n > 0 or held and freed otherwise.  Returns the
 * new shown_at.  A held endpoint with nothing in flight beyond the
 * OUTBOX_MAX_CONCURRENCY such is shown as not held.  Should the table ever
 * be full (it cannot: see SHOWN_ENTRIES), the endpoint is not shown, and
 * reads as nothing in flight, not held.
 */
int
outbox_show_in_flight(int shown_at, int endpoint_id, int n, bool held)
{
	pg_atomic_uint64 *table;
	bool		was_held_only = false;

	if (my_slot < 0)
		return 0;
	table = shared->slots[my_slot].in_flight;
	n = Max(n, 0);
	if (shown_at > 0)
		was_held_only = (uint32) pg_atomic_read_u64(&table[shown_at - 1]) == SHOWN_HELD;
	if (n == 0 && held && !was_held_only && n_held_only >= OUTBOX_MAX_CONCURRENCY)
		held = false;
	n_held_only += (n == 0 && held ? 1 : 0) - (was_held_only ? 1 : 0);
	if (n == 0 && !held)
	{
		if (shown_at > 0)
		{
			pg_atomic_write_u64(&table[shown_at - 1], 0);
			free_entries[n_free++] = shown_at - 1;
		}
		return 0;
	}
	if (shown_at == 0)
	{
		if (n_free == 0)
		{
			n_held_only -= (n == 0 ? 1 : 0);
			return 0;
		}
		shown_at = free_entries[--n_free] + 1;
	}
	pg_atomic_write_u64(&table[shown_at - 1],
						((uint64) (uint32) endpoint_id << 32) |
						(held ? SHOWN_HELD : 0) | (uint32) n);
	return shown_at;
}

/*----------------------------------------------------------------------
 * Backends
 *----------------------------------------------------------------------
 */

/* The slot of this backend's database, or NULL; no lock taken. */
static RelaySlot *
my_database_slot(void)
{
	if (shared == NULL || !OidIsValid(MyDatabaseId))
		return NULL;
	if (cached_slot < 0 ||
		pg_atomic_read_u32(&shared->slots[cached_slot].dboid) != MyDatabaseId)
		cached_slot = outbox_slot_for(MyDatabaseId);
	return cached_slot >= 0 ? &shared->slots[cached_slot] : NULL;
}

/*
 * Wake the relay of this database.  Called at commit of a transaction that
 * emitted; must not fail or block.
 */
void
outbox_wake_relay(void)
{
	RelaySlot  *s = my_database_slot();
	uint32		procno;

	if (s == NULL)
		return;
	procno = pg_atomic_read_u32(&s->procno);
	if (procno != INVALID_PROCNO && procno < ProcGlobal->allProcCount)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* A committed transaction changed endpoints: the relay rereads them. */
void
outbox_endpoints_changed(void)
{
	RelaySlot  *s = my_database_slot();

	if (s != NULL)
		pg_atomic_fetch_add_u64(&s->endpoints_version, 1);
}

/*----------------------------------------------------------------------
 * Readers: what outbox._relay_stats() and outbox._in_flight() show
 * (src/functions/relay_admin.c).  No lock is taken and none is held while
 * the caller's function runs, which may therefore raise an error.
 *----------------------------------------------------------------------
 */

/*
 * Call visit once per running relay, in any database, with its pid,
 * database, start and counters since then.  Nothing without shared memory.
 */
void
outbox_visit_relays(RelayStatsVisitor visit, void *arg)
{
	if (shared == NULL)
		return;
	for (int i = 0; i < shared->nslots; i++)
	{
		RelaySlot  *s = &shared->slots[i];
		RelayStats	stats;

		stats.pid = (int) pg_atomic_read_u32(&s->pid);
		stats.dboid = pg_atomic_read_u32(&s->dboid);
		if (stats.pid == 0 || !OidIsValid(stats.dboid))
			continue;
		pg_read_barrier();
		stats.started_at = s->started_at;
		for (int c = 0; c < RELAY_NCOUNTERS; c++)
			stats.counters[c] = pg_atomic_read_u64(&s->counters[c]);
		visit(&stats, arg);
	}
}

/*
 * Call visit once per endpoint that the relay of this database has
 * requests in flight to now, its senders' included, or whose rate limit
 * holds it (limit.c).  Each entry is one the relay published, and those of
 * different endpoints may be a moment apart.  Nothing while no relay runs
 * here, or without shared memory.
 */
void
outbox_visit_in_flight(InFlightVisitor visit, void *arg)
{
	RelaySlot  *s = my_database_slot();

	if (s == NULL || pg_atomic_read_u32(&s->pid) == 0)
		return;
	for (int e = 0; e < SHOWN_ENTRIES; e++)
	{
		uint64		v = pg_atomic_read_u64(&s->in_flight[e]);

		if ((uint32) v == 0)
			continue;
		visit((int) (v >> 32), (int) ((uint32) v & ~SHOWN_HELD),
			  ((uint32) v & SHOWN_HELD) != 0, arg);
	}
}
