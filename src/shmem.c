/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared state: the relay's latch (as its PGPROC number) and a wake-up
 *	  counter.
 *
 * Only a preloaded library gets shared memory.  Everything here is a plain
 * atomic: committing backends read the relay's proc number and set its
 * latch without taking a lock, so a commit never waits on the relay.  A
 * stale proc number can at worst set an unrelated process's latch, which
 * latches tolerate as a spurious wake-up.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "shmem.h"

#define INVALID_PROCNO	PG_UINT32_MAX

typedef struct OutboxShared
{
	pg_atomic_uint32 relay_procno;	/* PGPROC number of the relay, or
									 * INVALID_PROCNO */
	pg_atomic_uint64 wakeups;	/* commits that woke the relay */
	pg_atomic_uint64 endpoints_version; /* bumped by commits that changed
										 * endpoints or queued retries */
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
		pg_atomic_init_u64(&shared->wakeups, 0);
		pg_atomic_init_u64(&shared->endpoints_version, 0);
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

bool
outbox_shmem_available(void)
{
	return shared != NULL;
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
	pg_atomic_fetch_add_u64(&shared->wakeups, 1);
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

uint64
outbox_wakeups(void)
{
	return shared ? pg_atomic_read_u64(&shared->wakeups) : 0;
}
