/*-------------------------------------------------------------------------
 *
 * spi_plan.h
 *	  The one way outbox prepares a statement it runs again and again: an
 *	  SPI plan kept for the life of the backend.  Callers are connected to
 *	  SPI.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SPI_PLAN_H
#define OUTBOX_SPI_PLAN_H

#include "executor/spi.h"

static inline SPIPlanPtr
outbox_prepare_kept(const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, argtypes);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql,
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "SPI_keepplan failed");
	return plan;
}

#endif							/* OUTBOX_SPI_PLAN_H */
