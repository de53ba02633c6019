/*-------------------------------------------------------------------------
 *
 * emit.h
 *	  What emit(), emit_many() and the capture trigger share: the checks of
 *	  an event's key and payload, its id, and the wake-up at commit.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EMIT_H
#define OUTBOX_EMIT_H

#include "utils/uuid.h"

extern void outbox_make_event_id(pg_uuid_t *uuid);
extern void outbox_check_key(Datum value, bool isnull, const char *name);
extern Size outbox_check_payload(Datum payload, bool isnull);
extern void outbox_emitted(void);

#endif							/* OUTBOX_EMIT_H */
