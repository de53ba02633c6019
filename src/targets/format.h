/*-------------------------------------------------------------------------
 *
 * format.h
 *	  What a request looks like in each endpoint format: Standard Webhooks,
 *	  CloudEvents structured mode, CloudEvents binary mode.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_FORMAT_H
#define OUTBOX_FORMAT_H

#include "datatype/timestamp.h"
#include "utils/uuid.h"

typedef enum OutboxFormat
{
	OUTBOX_FORMAT_STANDARD_WEBHOOKS = 0,
	OUTBOX_FORMAT_CLOUDEVENTS,	/* structured mode */
	OUTBOX_FORMAT_CLOUDEVENTS_BINARY
} OutboxFormat;

#define OUTBOX_FORMATS			3

/* "2026-11-29T10:50:27.670231Z" and a NUL, with room for a longer year */
#define OUTBOX_TIME_LEN			40
/* a UUID's text form and a NUL */
#define OUTBOX_UUID_TEXT_LEN	(UUID_LEN * 2 + 5)
/* the most header lines outbox_format_headers() gives */
#define OUTBOX_FORMAT_MAX_HEADERS	7

/*
 * What every format makes a request of.  data is the payload as JSON
 * text, data_len bytes, not necessarily NUL-terminated.
 */
typedef struct EventParts
{
	const pg_uuid_t *event_id;
	const char *type;
	TimestampTz emitted_at;
	const char *key;			/* NULL: none */
	const char *data;
	size_t		data_len;
} EventParts;

/* outbox.cloudevents_source (registered in guc.c); empty: the default */
extern char *outbox_cloudevents_source;

extern bool outbox_format_from_name(const char *name, OutboxFormat *format);
extern bool outbox_format_ce_header(const char *name, size_t len);
extern void outbox_format_set_database(const char *dbname);
extern void outbox_format_source_changed(void);
extern bool outbox_uri_reference_valid(const char *s);
extern void outbox_uuid_text(const pg_uuid_t *uuid, char *out);
extern void outbox_format_time(TimestampTz t, char *out);
extern char *outbox_format_body(OutboxFormat format, const EventParts *ev);
extern int	outbox_format_headers(OutboxFormat format, const EventParts *ev, char **lines);
extern bool outbox_format_sets_header(OutboxFormat format, const char *line);

#endif							/* OUTBOX_FORMAT_H */
