/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared state: the relay's latch (as its PGPROC number), the version of
 *	  the endpoints, and the relay's counters.
 *
 * Only a preloaded library gets shared memory.  Everything here is a plain
 * atomic (but for what the relay writes alone): committing backends read the relay's proc number and set its
 * latch without taking a lock, so a commit never waits on the relay.  A
 * stale proc number can at worst set an unrelated process's latch, which
 * latches tolerate as a spurious wake-up.  The relay also keeps its
 * counters here (outbox.relay_stats), written by it alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "shmem.h"

PG_FUNCTION_INFO_V1(outbox_relay_stats);

#define INVALID_PROCNO	PG_UINT32_MAX

typedef struct OutboxShared
{
	pg_atomic_uint32 relay_procno;	/* PGPROC number of the relay, or
									 * INVALID_PROCNO */
	pg_atomic_uint64 endpoints_version; /* bumped by commits that changed
										 * endpoints or queued retries */
	/* The relay's counters, written by the relay alone */
	pg_atomic_uint32 relay_pid; /* 0 when no relay runs */
	Oid			relay_dboid;
	TimestampTz relay_started_at;
	pg_atomic_uint64 counters[RELAY_NCOUNTERS];
} OutboxShared;

static OutboxShared *shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
outbox_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(OutboxShared)));
}

static void
outbox_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("outbox", sizeof(OutboxShared), &found);
	if (!found)
	{
		pg_atomic_init_u32(&shared->relay_procno, INVALID_PROCNO);
		pg_atomic_init_u64(&shared->endpoints_version, 0);
		pg_atomic_init_u32(&shared->relay_pid, 0);
		shared->relay_dboid = InvalidOid;
		shared->relay_started_at = 0;
		for (int i = 0; i < RELAY_NCOUNTERS; i++)
			pg_atomic_init_u64(&shared->counters[i], 0);
	}
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

/* The relay announces where it sleeps (pgprocno), or -1 when it leaves. */
void
outbox_shmem_set_relay(int pgprocno)
{
	if (shared == NULL)
		return;
	pg_atomic_write_u32(&shared->relay_procno,
						pgprocno < 0 ? INVALID_PROCNO : (uint32) pgprocno);
	if (pgprocno < 0)
		pg_atomic_write_u32(&shared->relay_pid, 0);
}

/*
 * A relay starts: its counters start from zero.  Readers may see a mix of
 * old and new values for a moment; each counter on its own is exact.
 */
void
outbox_relay_started(Oid dboid)
{
	if (shared == NULL)
		return;
	for (int i = 0; i < RELAY_NCOUNTERS; i++)
		pg_atomic_write_u64(&shared->counters[i], 0);
	shared->relay_dboid = dboid;
	shared->relay_started_at = GetCurrentTimestamp();
	pg_write_barrier();
	pg_atomic_write_u32(&shared->relay_pid, (uint32) MyProcPid);
}

void
outbox_count(RelayCounter counter, uint64 n)
{
	if (shared != NULL && n > 0)
		pg_atomic_fetch_add_u64(&shared->counters[counter], n);
}

/*
 * outbox._relay_stats() returns one row: the running relay (pid NULL when
 * none) and its counters since it started.
 */
Datum
outbox_relay_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[10];
	bool		nulls[10] = {0};
	uint32		pid;

	outbox_shmem_require();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	pid = pg_atomic_read_u32(&shared->relay_pid);
	pg_read_barrier();
	if (pid == 0)
	{
		nulls[0] = nulls[1] = nulls[2] = true;
	}
	else
	{
		char	   *dbname = get_database_name(shared->relay_dboid);

		values[0] = Int32GetDatum((int32) pid);
		if (dbname)
			values[1] = CStringGetTextDatum(dbname);
		else
			nulls[1] = true;
		values[2] = TimestampTzGetDatum(shared->relay_started_at);
	}
	for (int i = 0; i < RELAY_HTTP_US; i++)
		values[3 + i] = Int64GetDatum((int64) pg_atomic_read_u64(&shared->counters[i]));
	values[8] = Float8GetDatum(pg_atomic_read_u64(&shared->counters[RELAY_HTTP_US]) / 1e6);
	values[9] = Float8GetDatum(pg_atomic_read_u64(&shared->counters[RELAY_SQL_US]) / 1e6);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * Wake the relay.  Called at commit of a transaction that emitted; must not
 * fail or block.  Without shared memory (library not preloaded) there is no
 * relay to wake.
 */
void
outbox_wake_relay(void)
{
	uint32		procno;

	if (shared == NULL)
		return;
	procno = pg_atomic_read_u32(&shared->relay_procno);
	if (procno != INVALID_PROCNO && procno < ProcGlobal->allProcCount)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* A committed transaction changed endpoints: the relay rereads them. */
void
outbox_endpoints_changed(void)
{
	if (shared == NULL)
		return;
	pg_atomic_fetch_add_u64(&shared->endpoints_version, 1);
}

uint64
outbox_endpoints_version(void)
{
	return shared ? pg_atomic_read_u64(&shared->endpoints_version) : 0;
}

