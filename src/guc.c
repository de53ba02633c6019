/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  Every outbox.* configuration parameter, with its unit, bounds and
 *	  when a change takes effect.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/guc.h"
#include "utils/memutils.h"

#include "guc.h"

/* Largest payload emit() accepts, in bytes of the stored jsonb value. */
int			outbox_max_payload_size = 1024 * 1024;

void
outbox_guc_init(void)
{
	DefineCustomIntVariable("outbox.max_payload_size",
							"Largest event payload emit() accepts.",
							"Measured as the size of the stored jsonb value.",
							&outbox_max_payload_size,
							1024 * 1024,
							1,
							MaxAllocSize / 2,
							PGC_SUSET,
							GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("outbox");
}
