/*-------------------------------------------------------------------------
 *
 * store.h
 *	  Every SQL statement the relay runs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STORE_H
#define OUTBOX_STORE_H

#include "relay.h"

extern bool store_extension_ready(void);
extern void store_load_endpoints(HTAB *endpoints, MemoryContext cxt);
extern Batch *store_read_page(RelayEndpoint *ep, int limit, MemoryContext parent);
extern Batch *store_read_due(RelayEndpoint *ep, int limit, MemoryContext parent);
extern bool store_record(Batch *batch, bool complete);
extern void store_forget_plans(void);

#endif							/* OUTBOX_STORE_H */
