/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher: one background worker that runs a relay in every
 *	  database where outbox is installed, and the hook that stops a
 *	  database's relay before a command that needs the database alone.
 *
 * The launcher is connected to no database; it reads pg_database and
 * starts a relay (a dynamic background worker) for each database that
 * outbox.database allows, up to outbox.max_relays.  Whether outbox is
 * installed can only be seen from inside a database, so the relay looks:
 * without the extension (or with an older version of its SQL) it leaves at
 * once, and the launcher does not try that database again until a new
 * database appears or a CREATE or ALTER EXTENSION outbox commits
 * (outbox._launch(), called by the install and update scripts, calls
 * outbox_launch_at_commit()).  A relay
 * that stopped any other way is started again after RESTART_DELAY_MS.
 *
 * DROP DATABASE, ALTER DATABASE RENAME or SET TABLESPACE and CREATE
 * DATABASE ... TEMPLATE refuse to run while another session is connected
 * to the database; a relay would make them wait and fail.  The utility hook
 * stops the relay first and holds the launcher off that database for
 * HOLD_SECONDS.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "guc.h"
#include "relay/launcher.h"
#include "shmem.h"

/* How often the launcher reads pg_database when nothing wakes it. */
#define SCAN_INTERVAL_MS	10000
/* A relay that stopped unexpectedly is started again after this. */
#define RESTART_DELAY_MS	5000
/* How long a database command keeps the launcher off its database. */
#define HOLD_SECONDS		10

/* What the launcher knows of a database, between scans. */
typedef struct KnownDatabase
{
	Oid			dboid;			/* hash key */
	bool		absent;			/* its relay found no (current) outbox */
	TimestampTz retry_at;		/* no relay before this */
	bool		seen;			/* in the latest scan */
} KnownDatabase;

typedef struct DatabaseEntry
{
	Oid			dboid;
	char	   *name;
} DatabaseEntry;

static ProcessUtility_hook_type prev_utility_hook = NULL;
static bool launch_at_commit = false;
static bool launch_callback_registered = false;

/* The launcher: a static background worker, started by the postmaster. */
static void
register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	/* Not on a standby: relays start once recovery has finished. */
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "outbox_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "outbox launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "outbox launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/*
 * Does outbox.database allow a relay in this database?  It is a list of
 * names separated by commas, each taken whole (spaces and tabs around it
 * trimmed, case kept); a list without any name, empty or only separators,
 * allows every database.
 */
static bool
database_allowed(const char *name)
{
	const char *p = outbox_database;
	size_t		len = strlen(name);

	if (p == NULL || p[strspn(p, " \t,")] == '\0')
		return true;			/* no name: every database */
	while (*p)
	{
		const char *start;
		const char *end;

		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		start = p;
		while (*p && *p != ',')
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t) (end - start) == len && strncmp(start, name, len) == 0)
			return true;
	}
	return false;
}

/* The databases a relay could serve: connectable, not templates, valid. */
static List *
list_databases(MemoryContext cxt)
{
	List	   *result = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext old;
		DatabaseEntry *entry;

		if (!db->datallowconn || db->datistemplate || database_is_invalid_form(db))
			continue;
		old = MemoryContextSwitchTo(cxt);
		entry = palloc(sizeof(DatabaseEntry));
		entry->dboid = db->oid;
		entry->name = pstrdup(NameStr(db->datname));
		result = lappend(result, entry);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return result;
}

/* Start a relay for a database in a free slot; false if none could be. */
static bool
start_relay(DatabaseEntry *db, BackgroundWorkerHandle **handles, bool *warned)
{
	BackgroundWorker worker;
	int			slot = outbox_slot_claim(db->dboid);

	if (slot < 0)
	{
		if (!*warned)
			ereport(WARNING,
					(errmsg("outbox: no relay for database \"%s\": all %d relays (outbox.max_relays) are running",
							db->name, outbox_max_slots()),
					 errhint("Raise outbox.max_relays (and max_worker_processes) and restart the server.")));
		*warned = true;
		return false;
	}

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "outbox_relay_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "outbox relay for %s", db->name);
	strlcpy(worker.bgw_type, "outbox relay", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(db->dboid);
	memcpy(worker.bgw_extra, &slot, sizeof(slot));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handles[slot]))
	{
		uint64		ignored;

		(void) outbox_slot_release(slot, &ignored);
		handles[slot] = NULL;
		if (!*warned)
			ereport(WARNING,
					(errmsg("outbox: could not start a relay for database \"%s\": no background worker slot is free",
							db->name),
					 errhint("Raise max_worker_processes: outbox needs one for its launcher and one per database it serves.")));
		*warned = true;
		return false;
	}
	return true;
}

/*
 * Free the slots of relays that have stopped, and note why: a database
 * without outbox is not tried again until something changes; a relay that
 * failed is started again after a pause.  Slots left by a launcher that
 * died are freed once no relay is attached to them.
 */
static void
reap(BackgroundWorkerHandle **handles, HTAB *known)
{
	for (int slot = 0; slot < outbox_max_slots(); slot++)
	{
		pid_t		pid;
		Oid			dboid;
		KnownDatabase *kd;
		uint64		requests_seen;
		RelayExit	reason;

		dboid = outbox_slot_dboid(slot);
		if (handles[slot] != NULL)
		{
			if (GetBackgroundWorkerPid(handles[slot], &pid) != BGWH_STOPPED)
				continue;
			pfree(handles[slot]);
			handles[slot] = NULL;
		}
		else if (!OidIsValid(dboid) || outbox_slot_pid(slot) != 0)
		{
			/*
			 * A free slot, or one whose relay a previous launcher started
			 * (we have no handle for it): freed once that relay has left.
			 */
			continue;
		}
		reason = outbox_slot_release(slot, &requests_seen);
		kd = hash_search(known, &dboid, HASH_ENTER, NULL);
		if (reason == RELAY_EXIT_ABSENT && requests_seen == outbox_launch_requests())
		{
			kd->absent = true;
			kd->retry_at = 0;
		}
		else
		{
			kd->absent = false;
			kd->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   reason == RELAY_EXIT_ABSENT ? 0 : RESTART_DELAY_MS);
		}
	}
}

/*
 * One look at pg_database: start a relay for each database that is allowed
 * and has none, unless it is held off or waiting to restart; stop the relay
 * of a database outbox.database no longer names; forget databases that are
 * gone.  Returns how long the launcher may sleep before the next look.
 * Allocates in the caller's per-iteration context cxt.
 */
static long
scan_databases(HTAB *known, BackgroundWorkerHandle **handles,
			   MemoryContext cxt, bool *warned)
{
	List	   *databases;
	ListCell   *lc;
	HASH_SEQ_STATUS seq;
	KnownDatabase *kd;
	TimestampTz now;
	TimestampTz retry_at;
	long		sleep_ms = SCAN_INTERVAL_MS;

	databases = list_databases(cxt);
	hash_seq_init(&seq, known);
	while ((kd = hash_seq_search(&seq)) != NULL)
		kd->seen = false;
	now = GetCurrentTimestamp();
	foreach(lc, databases)
	{
		DatabaseEntry *db = lfirst(lc);
		int			slot = outbox_slot_for(db->dboid);
		bool		found;

		kd = hash_search(known, &db->dboid, HASH_ENTER, &found);
		if (!found)
		{
			kd->absent = false;
			kd->retry_at = 0;
		}
		kd->seen = true;

		if (!database_allowed(db->name))
		{
			/* outbox.database no longer names it: stop its relay. */
			if (slot >= 0 && handles[slot] != NULL)
				TerminateBackgroundWorker(handles[slot]);
			continue;
		}
		if (slot >= 0 || kd->absent)
			continue;
		/* Held off by a database command, or waiting to restart. */
		retry_at = Max(kd->retry_at, outbox_held_until(db->dboid));
		if (retry_at > now)
		{
			sleep_ms = Min(sleep_ms, TimestampDifferenceMilliseconds(now, retry_at) + 1);
			continue;
		}
		(void) start_relay(db, handles, warned);
	}
	/* Forget databases that are gone. */
	hash_seq_init(&seq, known);
	while ((kd = hash_seq_search(&seq)) != NULL)
		if (!kd->seen && outbox_slot_for(kd->dboid) < 0)
			(void) hash_search(known, &kd->dboid, HASH_REMOVE, NULL);
	return sleep_ms;
}

void
outbox_launcher_main(Datum arg)
{
	HASHCTL		ctl;
	HTAB	   *known;
	BackgroundWorkerHandle **handles;
	MemoryContext loop_cxt;
	uint64		requests_handled = 0;
	bool		warned = false;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("outbox launcher");
	outbox_set_launcher(MyProcNumber);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(KnownDatabase);
	known = hash_create("outbox databases", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	handles = MemoryContextAllocZero(TopMemoryContext,
									 sizeof(BackgroundWorkerHandle *) * outbox_max_slots());
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "outbox launcher loop", ALLOCSET_DEFAULT_SIZES);

	ereport(LOG, (errmsg("outbox launcher started")));
	for (;;)
	{
		HASH_SEQ_STATUS seq;
		KnownDatabase *kd;
		long		sleep_ms;
		uint64		requests;

		MemoryContextReset(loop_cxt);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			warned = false;
		}

		reap(handles, known);
		/* An extension was created or updated somewhere: look everywhere. */
		requests = outbox_launch_requests();
		if (requests != requests_handled)
		{
			requests_handled = requests;
			hash_seq_init(&seq, known);
			while ((kd = hash_seq_search(&seq)) != NULL)
				kd->absent = false;
		}

		sleep_ms = scan_databases(known, handles, loop_cxt, &warned);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/*----------------------------------------------------------------------
 * outbox._launch() (src/functions/relay_admin.c): the install and update
 * scripts ask the launcher to look again once their transaction commits.
 *----------------------------------------------------------------------
 */

static void
launch_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (launch_at_commit)
				outbox_request_launch();
			launch_at_commit = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			launch_at_commit = false;
			break;
		default:
			break;
	}
}

/*
 * Ask the launcher to look at the databases again when the current
 * transaction commits; nothing happens if it aborts.
 */
void
outbox_launch_at_commit(void)
{
	if (!launch_callback_registered)
	{
		RegisterXactCallback(launch_xact_callback, NULL);
		launch_callback_registered = true;
	}
	launch_at_commit = true;
}

/*----------------------------------------------------------------------
 * Database commands that need the database to themselves
 *----------------------------------------------------------------------
 */

static void
hold_off_database(const char *name)
{
	Oid			dboid;

	if (name == NULL)
		return;
	dboid = get_database_oid(name, true);
	/* Only for whom the command can succeed: its owner or a superuser. */
	if (OidIsValid(dboid) && object_ownercheck(DatabaseRelationId, dboid, GetUserId()))
		outbox_hold_off(dboid, HOLD_SECONDS);
}

/* The database a utility statement needs alone, if any. */
static const char *
database_needed_alone(Node *parsetree)
{
	ListCell   *lc;

	switch (nodeTag(parsetree))
	{
		case T_DropdbStmt:
			return ((DropdbStmt *) parsetree)->dbname;
		case T_RenameStmt:
			if (((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
				return ((RenameStmt *) parsetree)->subname;
			return NULL;
		case T_CreatedbStmt:
			foreach(lc, ((CreatedbStmt *) parsetree)->options)
			{
				DefElem    *opt = lfirst(lc);

				if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
					return defGetString(opt);
			}
			return NULL;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
			{
				DefElem    *opt = lfirst(lc);

				if (strcmp(opt->defname, "tablespace") == 0)
					return ((AlterDatabaseStmt *) parsetree)->dbname;
			}
			return NULL;
		default:
			return NULL;
	}
}

static void
outbox_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	hold_off_database(database_needed_alone(pstmt->utilityStmt));

	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context,
						  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/*
 * Set relays going: register the launcher, which starts a relay in each
 * database with outbox, and hook the database commands that must stop a
 * relay first.  Does nothing unless called from shared_preload_libraries.
 */
void
outbox_relay_register(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	register_launcher();
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = outbox_process_utility;
}
