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

/*
 * OUTBOX_VERSION, the version of the extension's SQL this library works
 * with, is outbox.control's default_version, passed in by the Makefile.
 */
#ifndef OUTBOX_VERSION
#error "OUTBOX_VERSION is defined by the Makefile, from outbox.control"
#endif

/* The bounds of an endpoint's timeout (outbox._check_endpoint_settings). */
#define OUTBOX_MIN_TIMEOUT_MS	1000
#define OUTBOX_MAX_TIMEOUT_MS	300000

extern bool store_extension_present(void);
extern bool store_extension_ready(void);
extern void store_rotate(void);
extern void store_load_endpoints(HTAB *endpoints, MemoryContext cxt);
extern Batch *store_read_page(RelayEndpoint *ep, int limit, MemoryContext parent);
extern Batch *store_read_due(RelayEndpoint *ep, int limit, MemoryContext parent);
extern bool store_record(Batch *batch, bool complete);

#endif							/* OUTBOX_STORE_H */
