/*-------------------------------------------------------------------------
 *
 * inbox.c
 *	  outbox._inbox_seen(): has a consumer already marked a message, as the
 *	  latest committed state says?
 *
 * The inbox is partitioned by rotation slot, so no unique index spans it:
 * mark_processed() serialises markers of one message with an advisory
 * lock, and then asks here.  The check reads with the latest snapshot, not
 * the transaction's: under REPEATABLE READ a mark committed after the
 * transaction began would be invisible and the message processed twice.
 * Seeing such a mark there is a serialization failure, as it is for the
 * unique index of an unpartitioned table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/snapmgr.h"

#include "spi_plan.h"

PG_FUNCTION_INFO_V1(outbox_inbox_seen);

static SPIPlanPtr seen_plan = NULL;

Datum
outbox_inbox_seen(PG_FUNCTION_ARGS)
{
	Datum		args[2] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1)};
	bool		seen;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (seen_plan == NULL)
	{
		Oid			types[2] = {TEXTOID, TEXTOID};

		seen_plan = outbox_prepare_kept("SELECT 1 FROM outbox.inbox i "
										"WHERE i.consumer = $1 AND i.message_id = $2",
										2, types);
	}
	rc = SPI_execute_snapshot(seen_plan, args, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, true, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "inbox lookup failed: %s", SPI_result_code_string(rc));
	seen = SPI_processed > 0;

	if (seen && IsolationUsesXactSnapshot())
	{
		rc = SPI_execute_snapshot(seen_plan, args, NULL, GetTransactionSnapshot(),
								  InvalidSnapshot, true, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "inbox lookup failed: %s", SPI_result_code_string(rc));
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent mark_processed()"),
					 errdetail("The message was marked processed by a transaction that committed after this one began.")));
	}
	SPI_finish();
	PG_RETURN_BOOL(seen);
}
