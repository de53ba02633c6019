/*-------------------------------------------------------------------------
 *
 * read.h
 *	  The relay's reading (read.c): read rounds, reading ahead, and whether
 *	  a round is wanted.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_READ_H
#define OUTBOX_RELAY_READ_H

#include "relay/state.h"

extern void relay_read_round(RelayState *rs, bool full);
extern void relay_read_ahead(RelayState *rs);
extern bool relay_worth_reading(RelayState *rs);
extern bool relay_want_more(RelayState *rs);
extern void relay_note_wake(RelayState *rs);

#endif							/* OUTBOX_RELAY_READ_H */
