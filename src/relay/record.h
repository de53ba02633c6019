/*-------------------------------------------------------------------------
 *
 * record.h
 *	  The relay's recording of outcomes and positions (record.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_RECORD_H
#define OUTBOX_RELAY_RECORD_H

#include "relay/state.h"

extern void relay_record_round(RelayState *rs);

#endif							/* OUTBOX_RELAY_RECORD_H */
