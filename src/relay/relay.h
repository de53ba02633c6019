/*-------------------------------------------------------------------------
 *
 * relay.h
 *	  The relay: a background worker that delivers committed events to
 *	  their endpoints.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include "fmgr.h"

extern PGDLLEXPORT void outbox_relay_main(Datum arg);

#endif							/* OUTBOX_RELAY_H */
