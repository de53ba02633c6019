/*-------------------------------------------------------------------------
 *
 * step.c
 *	  The relay's transaction bracket: each step of its loop (a read, a
 *	  record, a rotation) runs in a short transaction of its own, and an
 *	  error in it is reported and rolled back without leaving the loop.
 *	  Whether outbox is still installed here (of this library's version) is
 *	  looked up as a step begins, when relations changed since.
 *
 * The bracket is the one every step holds (DESIGN.md, "The SQL–relay
 * contract"): statement timestamp, start transaction, SPI connect, push
 * snapshot, the step, SPI finish, pop snapshot, commit, statistics.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/snapmgr.h"

#include "relay/step.h"
#include "relay/store.h"

/*
 * A relation's cache invalidation (the relay registers this with arg its
 * RelayState): the extension is looked up again at the next step.
 * pg_extension has no syscache, so each lookup is an index scan (5% of
 * the relay's thread at 50,000 NATS messages a second, one per step).  A
 * drop of outbox drops its tables, whose invalidations come at the latest
 * with their locks; a step begun between the drop's commit and its
 * invalidations fails on the dropped objects, and the next one looks
 * (DESIGN.md, "Launcher and relays").
 */
void
relay_relation_changed(Datum arg, Oid relid)
{
	((RelayState *) DatumGetPointer(arg))->relations_changed = true;
}

/*
 * Start a step's transaction.  False when outbox is no longer installed
 * (DROP EXTENSION committed): the step does nothing, the transaction is
 * still to be ended, and the main loop leaves.
 */
static bool
begin_tx(RelayState *rs, const char *activity)
{
	rs->requests_before_check = outbox_launch_requests();
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	if (rs->relations_changed || !OidIsValid(rs->extension_oid))
	{
		Oid			oid;

		rs->relations_changed = false;
		oid = store_extension_oid();

		if (!OidIsValid(oid))
			rs->extension_absent = true;
		else if (!OidIsValid(rs->extension_oid))
			rs->extension_oid = oid;
		else if (oid != rs->extension_oid)
			rs->extension_absent = rs->extension_replaced = true;
	}
	return !rs->extension_absent;
}

/* Commit a step's transaction. */
static void
commit_tx(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/* After the commit: statistics, and idle in pg_stat_activity. */
static void
report_idle(void)
{
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* Report the error being handled and leave no transaction behind. */
static void
recover(RelayState *rs, MemoryContext cxt)
{
	EmitErrorReport();
	AbortCurrentTransaction();
	FlushErrorState();
	rs->relations_changed = true;	/* (the error may have been in the lookup) */
	MemoryContextSwitchTo(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Run one step of the loop in a short transaction of its own (the bracket
 * of begin_tx and commit_tx).  An error anywhere, in the commit too, is
 * reported and rolled back, and the step has failed: a result counts only
 * once its commit returned.  Without the extension the step is not run and
 * the main loop leaves.
 */
StepResult
relay_run_step(RelayState *rs, const char *activity, StepFunc step, void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;

	/* Set inside PG_TRY and read after it: volatile (setjmp). */
	volatile StepResult result = STEP_FAILED;

	PG_TRY();
	{
		StepResult	r = STEP_ABSENT;

		if (begin_tx(rs, activity))
			r = step(rs, arg);
		commit_tx();
		result = r;
		report_idle();
		/* (the commit left TopMemoryContext current) */
		MemoryContextSwitchTo(cxt);
	}
	PG_CATCH();
	{
		recover(rs, cxt);
	}
	PG_END_TRY();
	if (result == STEP_ABSENT)
		rs->extension_absent = true;
	return result;
}
