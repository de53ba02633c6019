/*-------------------------------------------------------------------------
 *
 * append.h
 *	  Appending events to outbox.events without SQL: what emit() and
 *	  emit_many() write with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_APPEND_H
#define OUTBOX_APPEND_H

#include "utils/uuid.h"

/* One event to append; a field left (Datum) 0 with its is_null set is NULL. */
typedef struct AppendEvent
{
	pg_uuid_t  *event_id;
	Datum		event_type;		/* text */
	Datum		payload;		/* jsonb */
	Datum		key;			/* text */
	bool		key_null;
	Datum		headers;		/* jsonb */
	bool		headers_null;
	Datum		deliver_at;		/* timestamptz */
	bool		deliver_at_null;
	Datum		expires_at;		/* timestamptz */
	bool		expires_at_null;
	int16		priority;		/* 0 is stored as NULL */
} AppendEvent;

typedef struct Appender Appender;

extern Appender *outbox_append_begin(void);
extern void outbox_append(Appender *appender, const AppendEvent *event);
extern void outbox_append_end(Appender *appender);
extern Oid	outbox_append_owner(void);

#endif							/* OUTBOX_APPEND_H */
