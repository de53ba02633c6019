/*-------------------------------------------------------------------------
 *
 * validate.c
 *	  Checks of user input shared by emit() and the endpoint functions:
 *	  event types, event-type patterns and HTTP header objects; and the
 *	  size of a jsonb value as emit()'s limit and the relay's page budget
 *	  count it.
 *
 * Each check raises an ERROR with a SQLSTATE before anything is written;
 * none needs a transaction state beyond the caller's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "functions/validate.h"

PG_FUNCTION_INFO_V1(outbox_check_event_types);
PG_FUNCTION_INFO_V1(outbox_check_headers);
PG_FUNCTION_INFO_V1(outbox_raw_size);

static inline bool
type_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '_';
}

/*
 * Is s[0..len) one or more dot-separated parts of [A-Za-z0-9_], at most
 * OUTBOX_MAX_EVENT_TYPE bytes?
 */
bool
outbox_event_type_valid(const char *s, int len)
{
	bool		part_empty = true;

	if (len < 1 || len > OUTBOX_MAX_EVENT_TYPE)
		return false;
	for (int i = 0; i < len; i++)
	{
		if (s[i] == '.')
		{
			if (part_empty)
				return false;
			part_empty = true;
		}
		else if (type_char(s[i]))
			part_empty = false;
		else
			return false;
	}
	return !part_empty;
}

void
outbox_check_event_type(const char *s, int len)
{
	if (!outbox_event_type_valid(s, len))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid event type \"%s\"",
						pnstrdup(s, Min(len, OUTBOX_MAX_EVENT_TYPE + 1))),
				 errdetail("An event type is one or more dot-separated parts of letters, digits and \"_\", at most %d bytes.",
						   OUTBOX_MAX_EVENT_TYPE)));
}

/*
 * An event-type pattern is "*", an event type, or an event type followed by
 * "*" or ".*" (a prefix match).
 */
static bool
pattern_valid(const char *s, int len)
{
	if (len == 1 && s[0] == '*')
		return true;
	if (len > OUTBOX_MAX_EVENT_TYPE)
		return false;
	if (len >= 2 && s[len - 1] == '*')
	{
		len--;
		if (s[len - 1] == '.')
			len--;
	}
	return outbox_event_type_valid(s, len);
}

/*
 * outbox._check_event_types(text[]) returns text[]: the patterns, checked.
 */
Datum
outbox_check_event_types(PG_FUNCTION_ARGS)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event_types must not be NULL"),
				 errhint("Use '{*}' to subscribe to every event type.")));
	arr = PG_GETARG_ARRAYTYPE_P(0);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event_types must be a one-dimensional array")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event_types must not be empty"),
				 errhint("Use '{*}' to subscribe to every event type.")));
	for (int i = 0; i < n; i++)
	{
		text	   *t;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("event_types must not contain NULL")));
		t = DatumGetTextPP(elems[i]);
		if (!pattern_valid(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid event type pattern \"%s\"", text_to_cstring(t)),
					 errdetail("A pattern is \"*\", an event type, or an event type followed by \"*\" or \".*\".")));
	}
	PG_RETURN_ARRAYTYPE_P(arr);
}

static bool
token_char(unsigned char c)
{
	/* RFC 9110 tchar */
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Headers the relay sets itself; a user value would contradict them. */
static bool
header_reserved(const char *name, int len)
{
	static const char *const reserved[] = {
		"content-type", "content-length", "host", "transfer-encoding",
		"connection", "expect", "te", "upgrade", "keep-alive",
		"webhook-id", "webhook-timestamp", "webhook-signature", NULL
	};

	for (int i = 0; reserved[i]; i++)
		if (strlen(reserved[i]) == (size_t) len &&
			pg_strncasecmp(reserved[i], name, len) == 0)
			return true;
	return false;
}

/*
 * Check that headers is a flat object of HTTP header names and string
 * values that cannot break the request (no CR or LF), and that it names none
 * of the headers the relay sets.  "what" names the argument in messages.
 */
void
outbox_check_header_object(Jsonb *headers, const char *what)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			count = 0;

	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", what),
				 errdetail("Headers are given as {\"name\": \"value\", ...}.")));

	it = JsonbIteratorInit(&headers->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			const char *name = v.val.string.val;
			int			len = v.val.string.len;

			if (++count > OUTBOX_MAX_HEADERS)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("%s has too many headers", what),
						 errdetail("At most %d headers are allowed.", OUTBOX_MAX_HEADERS)));
			if (len < 1 || len > OUTBOX_MAX_HEADER_NAME)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("invalid header name in %s", what),
						 errdetail("A header name is 1 to %d characters.", OUTBOX_MAX_HEADER_NAME)));
			for (int i = 0; i < len; i++)
				if (!token_char((unsigned char) name[i]))
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("invalid header name \"%s\" in %s",
									pnstrdup(name, len), what),
							 errdetail("Header names are letters, digits and !#$%%&'*+-.^_`|~.")));
			if (header_reserved(name, len))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header \"%s\" in %s is set by outbox itself",
								pnstrdup(name, len), what)));
		}
		else if (tok == WJB_VALUE)
		{
			if (v.type != jbvString)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("header values in %s must be strings", what)));
			if (v.val.string.len > OUTBOX_MAX_HEADER_VALUE)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("header value in %s is too long", what),
						 errdetail("A header value is at most %d bytes.", OUTBOX_MAX_HEADER_VALUE)));
			for (int i = 0; i < v.val.string.len; i++)
			{
				unsigned char c = (unsigned char) v.val.string.val[i];

				if ((c < 0x20 && c != '\t') || c == 0x7f)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("header values in %s must not contain control characters", what),
							 errdetail("Line breaks would let a value inject headers.")));
			}
		}
	}
}

/*
 * outbox._check_headers(jsonb) returns jsonb: the object, checked.
 */
Datum
outbox_check_headers(PG_FUNCTION_ARGS)
{
	Jsonb	   *headers;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("headers must not be NULL"),
				 errhint("Use '{}' for no headers.")));
	headers = PG_GETARG_JSONB_P(0);
	outbox_check_header_object(headers, "headers");
	PG_RETURN_JSONB_P(headers);
}

/*
 * Bytes of a jsonb datum, uncompressed and without its header, read from
 * the datum's header or TOAST pointer: nothing is detoasted.
 */
Size
outbox_jsonb_raw_size(Datum value)
{
	return toast_raw_datum_size(value) - VARHDRSZ;
}

/*
 * outbox._raw_size(jsonb) returns integer: outbox_jsonb_raw_size(), for
 * the relay's reads (page budget).  A jsonb value is below 1 GB.
 */
Datum
outbox_raw_size(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32((int32) outbox_jsonb_raw_size(PG_GETARG_DATUM(0)));
}
