/*-------------------------------------------------------------------------
 *
 * metrics.c
 *	  The SQL functions behind outbox.metrics that read shared memory:
 *	  outbox._counters(), this database's counters per endpoint (attempts
 *	  by outcome, the durations, the relay's starts),
 *	  outbox._duration_totals(), the duration histogram of the whole
 *	  database, and outbox._duration_bounds(), its bucket bounds.
 *
 * Thin wrappers over src/counters.c, which keeps the counters and knows
 * nothing of fmgr.  They take no lock: what they show is what the relay
 * last counted, and reading it never makes the relay wait.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"

#include "counters.h"

PG_FUNCTION_INFO_V1(outbox_counters);
PG_FUNCTION_INFO_V1(outbox_duration_totals);
PG_FUNCTION_INFO_V1(outbox_duration_bounds);

/* One row of outbox._counters(), into the tuplestore of rsinfo. */
static void
put_counters(const CounterSnapshot *snap, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[COUNTED_NOUTCOMES + 3];
	bool		nulls[COUNTED_NOUTCOMES + 3] = {0};
	int			c = 0;

	if (snap->endpoint_id == 0)
		nulls[c] = true;
	values[c++] = Int32GetDatum(snap->endpoint_id);
	for (int o = 0; o < COUNTED_NOUTCOMES; o++)
		values[c++] = Int64GetDatum((int64) snap->outcomes[o]);
	values[c++] = Float8GetDatum(snap->seconds_sum);
	values[c++] = Int64GetDatum((int64) snap->relay_starts);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * outbox._counters() returns (endpoint_id, delivered, retry, dead, expired,
 * seconds_sum, relay_starts) per endpoint of this database counted since
 * the server started, and a row with endpoint_id NULL for the database
 * itself: its relay's starts, and the attempts to endpoints that found no
 * free counters.  No rows without shared memory.
 */
Datum
outbox_counters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	outbox_visit_counters(put_counters, rsinfo);
	return (Datum) 0;
}

/* Add one set's histogram to the database's (arg). */
static void
add_counters(const CounterSnapshot *snap, void *arg)
{
	CounterSnapshot *total = (CounterSnapshot *) arg;

	for (int b = 0; b <= COUNTED_NBOUNDS; b++)
		total->buckets[b] += snap->buckets[b];
	total->seconds_sum += snap->seconds_sum;
}

/*
 * outbox._duration_totals() returns (buckets, seconds_sum): the attempts of
 * every endpoint of this database, cumulative per bound of
 * _duration_bounds() and a last for +Inf, and their durations' sum.  One
 * walk of the pool; zeros without shared memory.
 */
Datum
outbox_duration_totals(PG_FUNCTION_ARGS)
{
	CounterSnapshot total = {0};
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {0};
	Datum		buckets[COUNTED_NBOUNDS + 1];

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	outbox_visit_counters(add_counters, &total);
	for (int b = 0; b <= COUNTED_NBOUNDS; b++)
		buckets[b] = Int64GetDatum((int64) total.buckets[b]);
	values[0] = PointerGetDatum(construct_array(buckets, COUNTED_NBOUNDS + 1, INT8OID,
												sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = Float8GetDatum(total.seconds_sum);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/* outbox._duration_bounds(): the upper bounds of the histogram's buckets. */
Datum
outbox_duration_bounds(PG_FUNCTION_ARGS)
{
	Datum		bounds[COUNTED_NBOUNDS];

	for (int b = 0; b < COUNTED_NBOUNDS; b++)
		bounds[b] = Float8GetDatum(outbox_bucket_bounds[b]);
	PG_RETURN_ARRAYTYPE_P(construct_array(bounds, COUNTED_NBOUNDS, FLOAT8OID,
										  sizeof(float8), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}
