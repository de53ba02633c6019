/*-------------------------------------------------------------------------
 *
 * route.h
 *	  Which endpoints want an event: the relay's table of event-type
 *	  patterns, built from the endpoints it loaded.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ROUTE_H
#define OUTBOX_ROUTE_H

#include "utils/hsearch.h"

#include "relay/delivery.h"

extern void route_build(HTAB *endpoints, MemoryContext parent);
extern int	route_match(const char *type, RelayEndpoint ***matches);

#endif							/* OUTBOX_ROUTE_H */
