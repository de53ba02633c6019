/*-------------------------------------------------------------------------
 *
 * relay.c
 *	  The relay worker: its start, signals, the latch loop and its wait,
 *	  rotation, and leaving.  It reads committed events per endpoint in
 *	  short transactions (read.c), delivers them with no transaction open
 *	  (pump.c), and records the outcomes in a second short transaction
 *	  (record.c) (DESIGN.md, data flow).
 *
 * One relay serves one database: the launcher starts it with the database
 * in bgw_main_arg and its shared-memory slot in bgw_extra.  It leaves on
 * its own when outbox is not installed there (or is an older version), and
 * once a second it rotates the events, the attempt log and the inbox.  Per
 * endpoint at most one page of new events and one set of due retries are
 * in flight; a slow endpoint only holds back itself.  The relay never
 * waits on a lock held by a user's transaction for long: it skips what is
 * locked and tries again, and gives way in a deadlock.  Commits of
 * emitting transactions set our latch (emit.c); retries and deliver_at end
 * the loop's wait when they come due (next_due); outbox.poll_interval
 * covers prepared transactions.  The loop sleeps in one wait on the latch
 * and on what its targets watch (target_wait), until the earliest of what
 * comes due (next_wait_ms), so a commit wakes it even while requests are
 * in flight.  With outbox.senders, some requests are sent by sender
 * processes (sender.c); their results set the latch.  The relay's state is
 * one RelayState (state.h), passed to each of its jobs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"

#include "counters.h"
#include "guc.h"
#include "relay/credentials.h"
#include "relay/limit.h"
#include "relay/pump.h"
#include "relay/read.h"
#include "relay/record.h"
#include "relay/relay.h"
#include "relay/sender.h"
#include "relay/state.h"
#include "relay/step.h"
#include "relay/store.h"
#include "relay/stream.h"
#include "targets/format.h"
#include "targets/target.h"

/* While idle, latch wake-ups are taken at most this often. */
#define WAKE_COALESCE_MS	1
/* How often the relay looks for a partition to rotate. */
#define ROTATE_INTERVAL_MS	1000

/* The relay's state: one per process, passed to every job. */
static RelayState relay_state;

static void
relay_shmem_exit(int code, Datum arg)
{
	RelayState *rs = (RelayState *) DatumGetPointer(arg);

	outbox_relay_detach(rs->extension_absent && !rs->extension_replaced ?
						RELAY_EXIT_ABSENT : RELAY_EXIT_UNKNOWN,
						rs->requests_before_check);
	target_abandon_all();
	if (!rs->extension_absent)
		ereport(LOG, (errmsg("outbox relay stopping")));
}

/* The step of rotate_round; as the relay starts, the version check too. */
static StepResult
rotate_step(RelayState *rs, void *arg)
{
	bool		starting = *(bool *) arg;

	if (starting && !store_extension_ready())
		return STEP_ABSENT;
	store_rotate();
	return STEP_DONE;
}

/*
 * Translate positions from another cluster and rotate what has outlived its
 * retention (outbox._rotate()), in a transaction of its own; a failure (a
 * lock not granted at once, say) waits for the next time.  The first round,
 * as the relay starts, also checks the installed version, and runs before
 * anything is read.
 */
static void
rotate_round(RelayState *rs, bool starting)
{
	(void) relay_run_step(rs, "outbox: rotating", rotate_step, &starting);
}

/*
 * Become the relay of the database in arg: signals, the shared-memory slot
 * in bgw_extra, the connection, and the settings of the relay's sessions.
 * Returns the database's name, in TopMemoryContext.
 */
static char *
relay_connect(Datum arg, RelayState *rs)
{
	Oid			dboid = DatumGetObjectId(arg);
	int			slot;
	char	   *dbname;

	memcpy(&slot, MyBgworkerEntry->bgw_extra, sizeof(slot));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	CacheRegisterRelcacheCallback(relay_relation_changed, PointerGetDatum(rs));
	/* In the slot first, so that DROP DATABASE can stop us from now on. */
	outbox_relay_attach(slot, dboid);
	before_shmem_exit(relay_shmem_exit, PointerGetDatum(rs));
	/* Started just as a database command asked for the database alone. */
	if (outbox_held_until(dboid) != 0)
		proc_exit(1);
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("outbox relay");
	/* Losing the relay's own last commit can only repeat a delivery. */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * No JIT: the relay's statements are short, and enable_seqscan = off
	 * (set on its functions) lifts plan costs past jit_above_cost, so each
	 * once-a-second rotation check was compiled anew, about 30 ms of LLVM
	 * every time (bench case 3's p99).
	 */
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/* A lock held by another transaction fails a step, never stalls all. */
	SetConfigOption("lock_timeout", "1s", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * In a deadlock (DROP EXTENSION against a read round, say) the relay
	 * notices first and gives way: the other side is a user's command.
	 */
	SetConfigOption("deadlock_timeout", "50ms", PGC_SUSET, PGC_S_OVERRIDE);

	/* The name, for messages (a catalog lookup needs a transaction). */
	StartTransactionCommand();
	dbname = MemoryContextStrdup(TopMemoryContext, get_database_name(MyDatabaseId));
	CommitTransactionCommand();
	return dbname;
}

/* Leave when outbox is gone from the database (or replaced). */
static void
leave_if_absent(RelayState *rs, const char *dbname)
{
	if (!rs->extension_absent)
		return;
	if (rs->extension_replaced)
		ereport(LOG, (errmsg("outbox relay leaves database \"%s\": outbox was dropped and created again",
							 dbname),
					  errdetail("A new relay serves the new extension.")));
	else
		ereport(LOG, (errmsg("outbox relay leaves database \"%s\": outbox is not installed there",
							 dbname)));
	proc_exit(0);
}

/*
 * The loop's read: a full round (endpoints, pages and due retries) when
 * endpoints changed, the poll interval is up or a retry or deliver_at came
 * due; otherwise, when a commit woke the relay or a page ended with more to
 * read, a round of what may read now, if any may.
 */
static void
read_when_due(RelayState *rs, TimestampTz now)
{
	uint64		version = outbox_endpoints_version();

	if (version != rs->seen_version ||
		TimestampDifferenceExceeds(rs->last_read, now, outbox_poll_interval) ||
		(rs->next_due != 0 && now >= rs->next_due))
	{
		ResetLatch(MyLatch);
		rs->read_now = false;
		rs->next_due = 0;
		rs->seen_version = version;
		rs->last_read = now;
		relay_note_wake(rs);
		relay_read_round(rs, true);
		relay_count_since(RELAY_SQL_US, now);
	}
	else if (rs->read_now)
	{
		ResetLatch(MyLatch);
		rs->read_now = false;
		relay_note_wake(rs);
		if (relay_worth_reading(rs))
		{
			relay_read_round(rs, false);
			relay_count_since(RELAY_SQL_US, now);
		}
	}
}

/*
 * How long the loop may sleep, in ms: until the earliest of the poll
 * timer, the next retry or deliver_at due, the next look at the stream
 * page's laggards, finished deliveries' record, an endpoint's release from
 * its rate limit or pause, and fresh requests' ageing.  Each that is not
 * pending says -1.
 */
static long
next_wait_ms(RelayState *rs)
{
	TimestampTz now = GetCurrentTimestamp();
	long		waits[5];
	long		ms = outbox_poll_interval - TimestampDifferenceMilliseconds(rs->last_read, now);

	waits[0] = rs->next_due != 0 ? TimestampDifferenceMilliseconds(now, rs->next_due) : -1;
	waits[1] = stream_ms_to_look(now);
	waits[2] = rs->record_wait_ms;
	waits[3] = limit_ms_to_release(now);
	waits[4] = pump_ms_to_age();
	for (int i = 0; i < (int) lengthof(waits); i++)
		if (waits[i] >= 0)
			ms = Min(ms, waits[i]);
	return Max(ms, 0);
}

/*
 * Sleep on the latch, the targets' sockets and next_wait_ms() at once.
 * Under a stream of commits, wake-ups are taken at most once per
 * WAKE_COALESCE_MS while idle: every emitting commit sets the latch, and
 * waking for each would take a core from the emitters.
 */
static void
relay_sleep(RelayState *rs)
{
	TimestampTz start;
	bool		woken;
	bool		waiting_on_http = pump_in_flight() > 0;

	if (!waiting_on_http && rs->last_wake != 0 &&
		!TimestampDifferenceExceeds(rs->last_wake, GetCurrentTimestamp(), WAKE_COALESCE_MS))
		(void) WaitLatch(MyLatch, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 WAKE_COALESCE_MS, PG_WAIT_EXTENSION);
	start = GetCurrentTimestamp();
	woken = target_wait(next_wait_ms(rs));
	rs->polled_at = GetCurrentTimestamp();
	if (woken)
	{
		rs->read_now = true;
		rs->last_wake = rs->polled_at;
	}
	if (waiting_on_http)
		relay_count_since(RELAY_HTTP_US, start);
}

/*
 * One turn of the loop after its read and rotation: collect what finished
 * (making room for what waits), detach the stream's laggards, submit, and
 * record.  Returns whether to read again at once.
 */
static bool
send_and_record(RelayState *rs)
{
	TimestampTz start;

	relay_detach_all(rs, pump_collect());
	relay_detach_all(rs, stream_detach_laggards(rs->stream_page, &rs->active, rs->polled_at));
	relay_detach_all(rs, pump_run(&rs->active));
	start = GetCurrentTimestamp();
	relay_record_round(rs);
	relay_count_since(RELAY_SQL_US, start);
	return relay_want_more(rs);
}

void
outbox_relay_main(Datum arg)
{
	RelayState *rs = &relay_state;
	MemoryContext cxt;
	MemoryContext loop_cxt;
	char	   *dbname;

	cxt = AllocSetContextCreate(TopMemoryContext, "outbox relay", ALLOCSET_DEFAULT_SIZES);
	relay_state_init(rs, cxt);
	dbname = relay_connect(arg, rs);
	credentials_start(rs->endpoints);
	/* (and for the CloudEvents source it stands for by default) */
	outbox_format_set_database(dbname);

	target_start();
	rotate_round(rs, true);
	if (!rs->extension_absent)
	{
		senders_start(dbname);
		outbox_counters_attach(MyDatabaseId, rs->extension_oid);
	}
	rs->last_rotate = GetCurrentTimestamp();
	if (!rs->extension_absent)
		relay_read_round(rs, true);
	if (rs->extension_absent)
		proc_exit(0);
	rs->last_read = GetCurrentTimestamp();
	rs->read_now = true;
	/* (the first page's laggards are looked at from here) */
	rs->polled_at = rs->last_read;
	rs->seen_version = outbox_endpoints_version();
	ereport(LOG, (errmsg("outbox relay started for database \"%s\"", dbname)));

	loop_cxt = AllocSetContextCreate(cxt, "outbox relay loop", ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		TimestampTz now;

		/* Scratch memory of one iteration; batches have their own. */
		MemoryContextReset(loop_cxt);
		MemoryContextSwitchTo(loop_cxt);
		CHECK_FOR_INTERRUPTS();
		leave_if_absent(rs, dbname);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			target_configure();
			ereport(LOG, (errmsg("outbox relay reloaded its configuration")));
		}

		now = GetCurrentTimestamp();
		read_when_due(rs, now);
		if (TimestampDifferenceExceeds(rs->last_rotate, now, ROTATE_INTERVAL_MS))
		{
			rs->last_rotate = now;
			rotate_round(rs, false);
			relay_count_since(RELAY_SQL_US, now);
		}
		if (send_and_record(rs))
		{
			rs->read_now = true;
			continue;
		}
		relay_read_ahead(rs);
		relay_sleep(rs);
	}
}
