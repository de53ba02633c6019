/*-------------------------------------------------------------------------
 *
 * endpoints.h
 *	  The relay's endpoint table, loaded from outbox.endpoints (see
 *	  endpoints.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ENDPOINTS_H
#define OUTBOX_ENDPOINTS_H

#include "utils/hsearch.h"

#include "relay/delivery.h"

extern HTAB *endpoints_create(MemoryContext cxt);
extern void endpoints_load(HTAB *endpoints, MemoryContext cxt);

#endif							/* OUTBOX_ENDPOINTS_H */
