/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  The relay: a background worker that delivers committed events to
 *	  their webhook endpoints.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "fmgr.h"

#include "relay/delivery.h"

extern PGDLLEXPORT void outbox_relay_main(Datum arg);

/*
 * Stop an endpoint following the stream (relay.c; pump.c holds endpoints,
 * stream.c detaches laggards).
 */
extern void relay_detach(RelayEndpoint *ep);

#endif							/* OUTBOX_RELAY_H */
