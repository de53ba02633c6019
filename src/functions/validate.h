/*-------------------------------------------------------------------------
 *
 * validate.h
 *	  Checks of user input shared by emit() and the endpoint functions.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_VALIDATE_H
#define OUTBOX_VALIDATE_H

#include "utils/jsonb.h"

#define OUTBOX_MAX_EVENT_TYPE	255
#define OUTBOX_MAX_KEY			1024
#define OUTBOX_MAX_HEADERS		64
#define OUTBOX_MAX_HEADER_NAME	256
#define OUTBOX_MAX_HEADER_VALUE 8192
/* deliver_at at most this many days after now() (about ten years). */
#define OUTBOX_MAX_DELAY_DAYS	3650

extern bool outbox_event_type_valid(const char *s, int len);
extern void outbox_check_event_type(const char *s, int len);
extern void outbox_check_header_object(Jsonb *headers, const char *what);
extern Size outbox_jsonb_raw_size(Datum value);

#endif							/* OUTBOX_VALIDATE_H */
