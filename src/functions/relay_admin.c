/*-------------------------------------------------------------------------
 *
 * relay_admin.c
 *	  The SQL functions about the relays themselves: outbox._launch(),
 *	  which the install and update scripts call to have the launcher look
 *	  again, and the two readers of shared memory behind the monitoring
 *	  views, outbox._relay_stats() and outbox._in_flight().
 *
 * Each is a thin wrapper: the launcher (src/relay/launcher.c) and shared
 * memory (src/shmem.c) do the work and know nothing of fmgr.  The readers
 * take no lock; what they show is what each relay last published.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "relay/launcher.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(outbox_launch);
PG_FUNCTION_INFO_V1(outbox_relay_stats);
PG_FUNCTION_INFO_V1(outbox_in_flight);

/*
 * outbox._launch(): the launcher looks at the databases again once this
 * transaction commits.
 */
Datum
outbox_launch(PG_FUNCTION_ARGS)
{
	outbox_launch_at_commit();
	PG_RETURN_VOID();
}

/* One row of outbox._relay_stats(), into the tuplestore of rsinfo. */
static void
put_relay_stats(const RelayStats *stats, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[10];
	bool		nulls[10] = {0};
	char	   *dbname = get_database_name(stats->dboid);

	values[0] = Int32GetDatum((int32) stats->pid);
	if (dbname)
		values[1] = CStringGetTextDatum(dbname);
	else
		nulls[1] = true;
	values[2] = TimestampTzGetDatum(stats->started_at);
	for (int c = 0; c < RELAY_HTTP_US; c++)
		values[3 + c] = Int64GetDatum((int64) stats->counters[c]);
	values[8] = Float8GetDatum(stats->counters[RELAY_HTTP_US] / 1e6);
	values[9] = Float8GetDatum(stats->counters[RELAY_SQL_US] / 1e6);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * outbox._relay_stats() returns a row per running relay, in any database:
 * its pid, database, start and counters since then.  Needs shared memory.
 */
Datum
outbox_relay_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	outbox_shmem_require();
	InitMaterializedSRF(fcinfo, 0);
	outbox_visit_relays(put_relay_stats, rsinfo);
	return (Datum) 0;
}

/* One row of outbox._in_flight(), into the tuplestore of rsinfo. */
static void
put_in_flight(int endpoint_id, int in_flight, bool held, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[3];
	bool		nulls[3] = {0};

	values[0] = Int32GetDatum((int32) endpoint_id);
	values[1] = Int32GetDatum((int32) in_flight);
	values[2] = BoolGetDatum(held);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * outbox._in_flight() returns (endpoint_id, in_flight, held): the requests
 * the relay of this database has in flight now, its senders' included, and
 * whether its rate limit holds the endpoint, per endpoint with either.  No
 * rows while no relay runs here, or without shared memory.
 */
Datum
outbox_in_flight(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	outbox_visit_in_flight(put_in_flight, rsinfo);
	return (Datum) 0;
}
