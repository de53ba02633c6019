/*-------------------------------------------------------------------------
 *
 * origin.c
 *	  outbox._system_identifier(): the cluster whose transaction ids the
 *	  positions and events are written in.
 *
 * Positions are snapshots and events carry transaction ids; both mean
 * something only in the cluster that wrote them.  Each position records the
 * system identifier it was written under; after pg_restore into another
 * cluster (or pg_upgrade) they differ, and outbox._rebase() translates the
 * restored state into this cluster's ids before anything is read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(outbox_system_identifier);

Datum
outbox_system_identifier(PG_FUNCTION_ARGS)
{
	char		buf[32];

	snprintf(buf, sizeof(buf), UINT64_FORMAT, GetSystemIdentifier());
	PG_RETURN_TEXT_P(cstring_to_text(buf));
}
