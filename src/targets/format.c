/*-------------------------------------------------------------------------
 *
 * format.c
 *	  What a request looks like in each endpoint format (docs/formats.md):
 *	  its body, its Content-Type and, in CloudEvents binary mode, the ce-*
 *	  headers of the event's attributes.  Signing and the
 *	  other headers are the relay's, the same in every format (pump.c,
 *	  submit).
 *
 * Standard Webhooks: {"type": ..., "timestamp": ..., "data": payload}.
 * CloudEvents 1.0 structured mode: the event as a JSON object with
 * specversion, id, source, type, subject (the key, when there is one),
 * time, datacontenttype and data; binary mode: the payload as the body and
 * every attribute but datacontenttype (which is the Content-Type) as a
 * ce-* header, percent-encoded as the HTTP binding asks.
 *
 * The relay calls these without a transaction; what they return is
 * palloc'd in the caller's memory context.  The CloudEvents source is
 * outbox.cloudevents_source, or by default the relay's database as
 * postgresql:///<name>; outbox_format_set_database() gives the name once.
 * The setting's variable is defined here, its one reader, so that this
 * file reads nothing of guc.h; guc.c registers it with its check
 * (outbox_uri_reference_valid) and assign hook (outbox_format_source_changed).
 * outbox._check_format() (src/functions/checks.c) is the SQL side: the
 * names, and the headers an endpoint may not set in a format.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "targets/format.h"

static const char *const format_names[OUTBOX_FORMATS] = {
	"standard-webhooks", "cloudevents", "cloudevents-binary"
};

static const char *const content_types[OUTBOX_FORMATS] = {
	"Content-Type: application/json",
	"Content-Type: application/cloudevents+json",
	"Content-Type: application/json"
};

/*
 * The headers of binary mode's attributes.  A user's header of one of
 * these names would contradict the event (or, ce-datacontenttype, the
 * Content-Type, which the HTTP binding says must not be repeated so).
 */
static const char *const ce_attribute_headers[] = {
	"ce-specversion", "ce-id", "ce-source", "ce-type", "ce-subject", "ce-time",
	"ce-datacontenttype", NULL
};

/* outbox.cloudevents_source: set by the GUC machinery (guc.c). */
char	   *outbox_cloudevents_source = NULL;

/* The relay's database, and the source derived from it and the setting. */
static char *database_name = NULL;
static char *source_json = NULL;	/* a JSON string, quotes included */
static char *source_header = NULL;	/* percent-encoded for a header */

bool
outbox_format_from_name(const char *name, OutboxFormat *format)
{
	for (int f = 0; f < OUTBOX_FORMATS; f++)
		if (strcmp(name, format_names[f]) == 0)
		{
			*format = (OutboxFormat) f;
			return true;
		}
	return false;
}

static inline bool
unreserved_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

/*
 * Is s made of the characters of a URI-reference (RFC 3986): unreserved,
 * reserved, and "%" followed by two hex digits?  The grammar beyond the
 * characters is the user's to get right; what matters here is that the
 * value cannot break a JSON string or a header line.
 */
bool
outbox_uri_reference_valid(const char *s)
{
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (c == '%')
		{
			if (!isxdigit((unsigned char) s[1]) || !isxdigit((unsigned char) s[2]))
				return false;
			s += 2;
		}
		else if (!unreserved_char(c) && strchr(":/?#[]@!$&'()*+,;=", c) == NULL)
			return false;
	}
	return true;
}

/*
 * Append s percent-encoded: every byte but those kept.  keep_printable
 * keeps what the CloudEvents HTTP binding lets a header value carry as it
 * is (printable ASCII but space, '"' and '%'); otherwise only unreserved
 * characters are kept (a URI path segment).
 */
static void
append_percent_encoded(StringInfo buf, const char *s, bool keep_printable)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;
		bool		keep = keep_printable ?
			(c > 0x20 && c < 0x7f && c != '"' && c != '%') : unreserved_char(c);

		if (keep)
			appendStringInfoChar(buf, (char) c);
		else
		{
			appendStringInfoChar(buf, '%');
			appendStringInfoChar(buf, hex[c >> 4]);
			appendStringInfoChar(buf, hex[c & 0xf]);
		}
	}
}

static char *
percent_encoded(const char *s, bool keep_printable)
{
	StringInfoData buf;

	initStringInfo(&buf);
	append_percent_encoded(&buf, s, keep_printable);
	return buf.data;
}

/* The relay's database, for the default source (copied). */
void
outbox_format_set_database(const char *dbname)
{
	database_name = MemoryContextStrdup(TopMemoryContext, dbname);
	outbox_format_source_changed();
}

/* outbox.cloudevents_source changed (its assign hook): derive it again. */
void
outbox_format_source_changed(void)
{
	if (source_json)
		pfree(source_json);
	if (source_header)
		pfree(source_header);
	source_json = NULL;
	source_header = NULL;
}

/* Derive the source's two forms, once per value of the setting. */
static void
ensure_source(void)
{
	MemoryContext old;
	StringInfoData raw;
	StringInfoData json;

	if (source_json != NULL)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	initStringInfo(&raw);
	if (outbox_cloudevents_source && outbox_cloudevents_source[0] != '\0')
		appendStringInfoString(&raw, outbox_cloudevents_source);
	else
	{
		appendStringInfoString(&raw, "postgresql:///");
		append_percent_encoded(&raw, database_name ? database_name : "", false);
	}
	initStringInfo(&json);
	escape_json(&json, raw.data);
	source_json = json.data;
	source_header = percent_encoded(raw.data, true);
	pfree(raw.data);
	MemoryContextSwitchTo(old);
}

/* A UUID's text form, as uuid_out writes it, into out[OUTBOX_UUID_TEXT_LEN]. */
void
outbox_uuid_text(const pg_uuid_t *uuid, char *out)
{
	static const char hex[] = "0123456789abcdef";
	char	   *p = out;

	for (int i = 0; i < UUID_LEN; i++)
	{
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*p++ = '-';
		*p++ = hex[uuid->data[i] >> 4];
		*p++ = hex[uuid->data[i] & 0xf];
	}
	*p = '\0';
}

/* v's last width decimal digits at p, zero-padded (v >= 0). */
static inline void
put_digits(char *p, int v, int width)
{
	for (int i = width - 1; i >= 0; i--)
	{
		p[i] = '0' + v % 10;
		v /= 10;
	}
}

/*
 * An emit time as RFC 3339 in UTC with microseconds, as 1.3's SQL wrote
 * it (to_char 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), into out[OUTBOX_TIME_LEN]:
 * the CloudEvents time, and the brokers' timestamp header.  created_at is
 * the emitting transaction's start, never infinite; should one be, the
 * Unix epoch stands in rather than failing every read.
 */
void
outbox_format_time(TimestampTz t, char *out)
{
	struct pg_tm tm;
	fsec_t		fsec;

	if (TIMESTAMP_NOT_FINITE(t) || timestamp2tm(t, NULL, &tm, &fsec, NULL, NULL) != 0)
	{
		strlcpy(out, "1970-01-01T00:00:00.000000Z", OUTBOX_TIME_LEN);
		return;
	}
	if (tm.tm_year < 1 || tm.tm_year > 9999)
	{
		snprintf(out, OUTBOX_TIME_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
				 tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) fsec);
		return;
	}
	/* (by hand: snprintf was 3% of the relay's time publishing to NATS) */
	put_digits(out, tm.tm_year, 4);
	out[4] = '-';
	put_digits(out + 5, tm.tm_mon, 2);
	out[7] = '-';
	put_digits(out + 8, tm.tm_mday, 2);
	out[10] = 'T';
	put_digits(out + 11, tm.tm_hour, 2);
	out[13] = ':';
	put_digits(out + 14, tm.tm_min, 2);
	out[16] = ':';
	put_digits(out + 17, tm.tm_sec, 2);
	out[19] = '.';
	put_digits(out + 20, (int) fsec, 6);
	out[26] = 'Z';
	out[27] = '\0';
}

/* The body of a request in format: palloc'd, NUL-terminated. */
char *
outbox_format_body(OutboxFormat format, const EventParts *ev)
{
	StringInfoData buf;
	char		time[OUTBOX_TIME_LEN];
	char		id[OUTBOX_UUID_TEXT_LEN];

	if (format == OUTBOX_FORMAT_CLOUDEVENTS_BINARY)
		return pnstrdup(ev->data, ev->data_len);

	outbox_format_time(ev->emitted_at, time);
	initStringInfo(&buf);
	enlargeStringInfo(&buf, ev->data_len + 256);
	if (format == OUTBOX_FORMAT_STANDARD_WEBHOOKS)
	{
		appendStringInfoString(&buf, "{\"type\":");
		escape_json(&buf, ev->type);
		appendStringInfo(&buf, ",\"timestamp\":\"%s\",\"data\":", time);
	}
	else
	{
		ensure_source();
		outbox_uuid_text(ev->event_id, id);
		appendStringInfo(&buf, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":%s,\"type\":",
						 id, source_json);
		escape_json(&buf, ev->type);
		if (ev->key != NULL && ev->key[0] != '\0')
		{
			appendStringInfoString(&buf, ",\"subject\":");
			escape_json(&buf, ev->key);
		}
		appendStringInfo(&buf, ",\"time\":\"%s\",\"datacontenttype\":\"application/json\",\"data\":",
						 time);
	}
	appendBinaryStringInfo(&buf, ev->data, ev->data_len);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * The header lines the format sets: its Content-Type, and in binary mode
 * the attributes' ce-* headers.  Fills lines[OUTBOX_FORMAT_MAX_HEADERS]
 * and returns how many; the Content-Type line is static, the others are
 * palloc'd.
 */
int
outbox_format_headers(OutboxFormat format, const EventParts *ev, char **lines)
{
	char		time[OUTBOX_TIME_LEN];
	char		id[OUTBOX_UUID_TEXT_LEN];
	int			n = 0;

	lines[n++] = unconstify(char *, content_types[format]);
	if (format != OUTBOX_FORMAT_CLOUDEVENTS_BINARY)
		return n;
	ensure_source();
	outbox_format_time(ev->emitted_at, time);
	outbox_uuid_text(ev->event_id, id);
	lines[n++] = pstrdup("ce-specversion: 1.0");
	lines[n++] = psprintf("ce-id: %s", id);
	lines[n++] = psprintf("ce-source: %s", source_header);
	/* (event types are letters, digits, "_" and ".": nothing to encode) */
	lines[n++] = psprintf("ce-type: %s", ev->type);
	lines[n++] = psprintf("ce-time: %s", time);
	if (ev->key != NULL && ev->key[0] != '\0')
	{
		char	   *subject = percent_encoded(ev->key, true);

		lines[n++] = psprintf("ce-subject: %s", subject);
		pfree(subject);
	}
	return n;
}

/* Is name (len bytes) a ce-* header binary mode sets, in any case? */
bool
outbox_format_ce_header(const char *name, size_t len)
{
	for (int i = 0; ce_attribute_headers[i]; i++)
		if (strlen(ce_attribute_headers[i]) == len &&
			pg_strncasecmp(ce_attribute_headers[i], name, len) == 0)
			return true;
	return false;
}

/*
 * Does the format set the header of this "name: value" line itself?  Then
 * a user's header of that name (an event's) is not sent: in binary mode
 * the event's attributes are the event's, whatever its headers say.
 */
bool
outbox_format_sets_header(OutboxFormat format, const char *line)
{
	return format == OUTBOX_FORMAT_CLOUDEVENTS_BINARY &&
		outbox_format_ce_header(line, strcspn(line, ":"));
}
