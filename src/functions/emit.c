/*-------------------------------------------------------------------------
 *
 * emit.c
 *	  outbox.emit() and emit_many(): check the arguments, append the events
 *	  to the current events partition in the caller's transaction
 *	  (append.c), and wake the relay when that transaction commits.
 *
 * They run with the caller's rights inside its transaction (the append
 * asks for none on the tables; a dedupe_key is claimed as the extension's
 * owner) and take no lock beyond the row-exclusive lock of any INSERT, so
 * emitters never wait on each other.  Each event records
 * pg_current_xact_id(), the top-level transaction id, which is what
 * snapshots list: the relay reads by snapshot, since ids from
 * outbox.event_seq are drawn before commit.
 *
 * The wake-up is a transaction callback: at COMMIT it sets the relay's
 * latch (shared memory); an aborted or prepared transaction wakes nothing
 * (the relay's poll timer covers prepared ones).  No NOTIFY: its commit-time
 * lock would serialize all emitters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "functions/append.h"
#include "functions/emit.h"
#include "functions/validate.h"
#include "guc.h"
#include "shmem.h"
#include "spi_plan.h"

PG_FUNCTION_INFO_V1(emit);
PG_FUNCTION_INFO_V1(emit_many);
PG_FUNCTION_INFO_V1(outbox_wake_at_commit);

/*
 * Did the current transaction emit, or change endpoints (or queue retries)?
 * Reset at its end.
 */
static bool emitted_in_xact = false;
static bool endpoints_changed_in_xact = false;
static bool callback_registered = false;

static SPIPlanPtr dedupe_insert_plan = NULL;
static SPIPlanPtr dedupe_lookup_plan = NULL;

static void
emit_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (endpoints_changed_in_xact)
				outbox_endpoints_changed();
			if (emitted_in_xact || endpoints_changed_in_xact)
				outbox_wake_relay();
			emitted_in_xact = false;
			endpoints_changed_in_xact = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			emitted_in_xact = false;
			endpoints_changed_in_xact = false;
			break;
		default:
			break;
	}
}

static void
register_callback(void)
{
	if (!callback_registered)
	{
		RegisterXactCallback(emit_xact_callback, NULL);
		callback_registered = true;
	}
}

/* The calling transaction emitted: wake the relay when it commits. */
void
outbox_emitted(void)
{
	register_callback();
	emitted_in_xact = true;
}

/*
 * Random bytes for event ids, drawn from pg_strong_random() a block at a
 * time: each call of it costs about as much as the rest of emit()'s checks
 * together (OpenSSL 3 looks up its DRBG's parameters on every call), and
 * ten bytes an event from a block of 1,000 are the same bytes.  Only
 * backends emit, and each fills its own block after it was forked.
 */
#define RANDOM_BLOCK 1000
static uint8 random_block[RANDOM_BLOCK];
static int	random_used = RANDOM_BLOCK;

static void
random_bytes(uint8 *dst, int n)
{
	if (random_used + n > RANDOM_BLOCK)
	{
		if (!pg_strong_random(random_block, RANDOM_BLOCK))
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random event id")));
		random_used = 0;
	}
	memcpy(dst, random_block + random_used, n);
	/* used bytes are not kept */
	memset(random_block + random_used, 0, n);
	random_used += n;
}

/*
 * Fill uuid with a version 7 UUID: 48 bits of Unix time in milliseconds,
 * then random bits.  Time order keeps index insertions at the right edge.
 */
void
outbox_make_event_id(pg_uuid_t *uuid)
{
	TimestampTz now = GetCurrentTimestamp();
	uint64		ms;

	ms = (uint64) (now / 1000) +
		(uint64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
	random_bytes(uuid->data + 6, UUID_LEN - 6);
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (uint8) (ms >> (40 - 8 * i));
	uuid->data[6] = (uuid->data[6] & 0x0f) | 0x70;	/* version 7 */
	uuid->data[8] = (uuid->data[8] & 0x3f) | 0x80;	/* RFC 4122 variant */
}

/* A key or dedupe_key: NULL, or 1 to OUTBOX_MAX_KEY bytes. */
void
outbox_check_key(Datum value, bool isnull, const char *name)
{
	text	   *t;
	int			len;

	if (isnull)
		return;
	t = DatumGetTextPP(value);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name),
				 errhint("Pass NULL for no %s.", name)));
	if (len > OUTBOX_MAX_KEY)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too long", name),
				 errdetail("A %s is at most %d bytes; this one has %d.",
						   name, OUTBOX_MAX_KEY, len)));
}

/* The payload alone; returns its size. */
Size
outbox_check_payload(Datum payload, bool isnull)
{
	Size		size;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be NULL"),
				 errhint("Use 'null'::jsonb for a JSON null.")));
	size = outbox_jsonb_raw_size(payload);
	if (size > (Size) outbox_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("event payload is too large"),
				 errdetail("The payload has %zu bytes; outbox.max_payload_size is %d.",
						   size, outbox_max_payload_size)));
	return size;
}

/* Headers travel with the payload: one limit covers both. */
static void
check_total_size(Size payload_size, Size headers_size)
{
	if (payload_size + headers_size > (Size) outbox_max_payload_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("event payload and headers are too large"),
				 errdetail("The payload has %zu bytes and its headers %zu; together they may have at most outbox.max_payload_size, %d.",
						   payload_size, headers_size, outbox_max_payload_size)));
}

static void
check_event_type(Datum event_type, bool isnull)
{
	text	   *t;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event_type must not be NULL")));
	t = DatumGetTextPP(event_type);
	outbox_check_event_type(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/* An event's headers, if any; returns their size (0 without). */
static Size
check_headers(const AppendEvent *e)
{
	if (e->headers_null)
		return 0;
	outbox_check_header_object(DatumGetJsonbP(e->headers), "event headers");
	return outbox_jsonb_raw_size(e->headers);
}

static void
check_deliver_at(const AppendEvent *e)
{
	TimestampTz deliver_at;
	TimestampTz now = GetCurrentTransactionStartTimestamp();

	if (e->deliver_at_null)
		return;
	deliver_at = DatumGetTimestampTz(e->deliver_at);
	if (TIMESTAMP_NOT_FINITE(deliver_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("deliver_at must be a finite timestamp")));
	/* Both finite: the difference cannot overflow. */
	if (deliver_at - now > (int64) OUTBOX_MAX_DELAY_DAYS * USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("deliver_at is too far in the future"),
				 errdetail("deliver_at may be at most %d days (about ten years) after the transaction's start; %s is later.",
						   OUTBOX_MAX_DELAY_DAYS, timestamptz_to_str(deliver_at))));
}

/* priority as given, into e->priority (a smallint) */
static void
check_priority(AppendEvent *e, int32 priority)
{
	if (priority < PG_INT16_MIN || priority > PG_INT16_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority must be between %d and %d", PG_INT16_MIN, PG_INT16_MAX),
				 errdetail("The value given was %d.", priority)));
	e->priority = (int16) priority;
}

static void
check_expires_at(const AppendEvent *e)
{
	TimestampTz expires_at;

	if (e->expires_at_null)
		return;
	expires_at = DatumGetTimestampTz(e->expires_at);
	if (TIMESTAMP_NOT_FINITE(expires_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("expires_at must be a finite timestamp"),
				 errhint("Pass NULL for an event that does not expire.")));
	/* One that expires before it may go would never go. */
	if (!e->deliver_at_null && expires_at <= DatumGetTimestampTz(e->deliver_at))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("expires_at must be later than deliver_at"),
				 errdetail("expires_at is %s and deliver_at %s.",
						   timestamptz_to_str(expires_at),
						   timestamptz_to_str(DatumGetTimestampTz(e->deliver_at)))));
}

/* The elements of a one-dimensional array (of elements of type) named name. */
static int
array_elements(ArrayType *array, Oid type, const char *name, Datum **values, bool **nulls)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			n;

	if (ARR_NDIM(array) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", name)));
	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	deconstruct_array(array, type, typlen, typbyval, typalign, values, nulls, &n);
	return n;
}

/* Argument argno as a Datum, *isnull set; absent arguments are NULL. */
static Datum
optional_arg(FunctionCallInfo fcinfo, int argno, bool *isnull)
{
	*isnull = PG_NARGS() <= argno || PG_ARGISNULL(argno);
	return *isnull ? (Datum) 0 : PG_GETARG_DATUM(argno);
}

/*
 * Look up the event a dedupe key already stands for.  Returns false when
 * the key is new, after claiming it for *event_id; otherwise overwrites
 * *event_id with the first event's id.  A concurrent emit of the same key
 * makes the INSERT wait for that transaction; if it committed, this one
 * returns its event id.
 *
 * emit() runs with the caller's rights; this, the one part of it that runs
 * SQL, runs as the extension's owner with search_path pinned to
 * pg_catalog, pg_temp, as a SECURITY DEFINER function would.
 */
static bool
dedupe_existing(Datum dedupe_key, pg_uuid_t *event_id)
{
	Datum		args[2];
	bool		isnull;
	bool		existing;
	int			rc;
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(outbox_append_owner(),
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (dedupe_insert_plan == NULL)
	{
		Oid			types[2] = {TEXTOID, UUIDOID};

		dedupe_insert_plan = outbox_prepare_kept(
										  "INSERT INTO outbox.dedupe (dedupe_key, event_id) VALUES ($1, $2) "
										  "ON CONFLICT (dedupe_key) DO NOTHING",
										  2, types);
		dedupe_lookup_plan = outbox_prepare_kept(
										  "SELECT event_id FROM outbox.dedupe WHERE dedupe_key OPERATOR(pg_catalog.=) $1",
										  1, types);
	}

	args[0] = dedupe_key;
	args[1] = UUIDPGetDatum(event_id);
	rc = SPI_execute_plan(dedupe_insert_plan, args, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "inserting dedupe key failed: %s", SPI_result_code_string(rc));
	existing = SPI_processed != 1;
	if (existing)
	{
		/* Not read-only: a fresh snapshot sees a key committed concurrently. */
		rc = SPI_execute_plan(dedupe_lookup_plan, args, NULL, false, 1);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "looking up dedupe key failed: %s", SPI_result_code_string(rc));
		if (SPI_processed != 1)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent emit with the same dedupe_key")));
		memcpy(event_id,
			   DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
			   sizeof(pg_uuid_t));
	}
	SPI_finish();
	AtEOXact_GUC(true, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	return existing;
}

/*
 * outbox.emit(event_type, payload, key, headers, deliver_at, dedupe_key,
 * expires_at, priority) returns uuid.  See the file header.  Every argument
 * is checked before anything is written.  A database whose SQL is older
 * than 1.5 calls it with six arguments (its events table has no
 * expires_at or priority).
 */
Datum
emit(PG_FUNCTION_ARGS)
{
	AppendEvent event;
	Appender   *appender;
	Size		payload_size;
	bool		dedupe_null;
	Datum		dedupe_key;
	bool		isnull;
	Datum		result;

	/* Each argument in turn, and all before anything is written. */
	memset(&event, 0, sizeof(event));
	event.event_type = optional_arg(fcinfo, 0, &isnull);
	check_event_type(event.event_type, isnull);
	event.payload = optional_arg(fcinfo, 1, &isnull);
	payload_size = outbox_check_payload(event.payload, isnull);
	event.key = optional_arg(fcinfo, 2, &event.key_null);
	outbox_check_key(event.key, event.key_null, "key");
	event.headers = optional_arg(fcinfo, 3, &event.headers_null);
	if (!event.headers_null)
		check_total_size(payload_size, check_headers(&event));
	event.deliver_at = optional_arg(fcinfo, 4, &event.deliver_at_null);
	check_deliver_at(&event);
	dedupe_key = optional_arg(fcinfo, 5, &dedupe_null);
	outbox_check_key(dedupe_key, dedupe_null, "dedupe_key");
	check_priority(&event, PG_NARGS() > 7 && !PG_ARGISNULL(7) ? PG_GETARG_INT32(7) : 0);
	event.expires_at = optional_arg(fcinfo, 6, &event.expires_at_null);
	check_expires_at(&event);

	event.event_id = palloc(sizeof(pg_uuid_t));
	outbox_make_event_id(event.event_id);
	result = UUIDPGetDatum(event.event_id);

	if (!dedupe_null && dedupe_existing(dedupe_key, event.event_id))
		PG_RETURN_DATUM(result);

	appender = outbox_append_begin();
	outbox_append(appender, &event);
	outbox_append_end(appender);

	outbox_emitted();

	PG_RETURN_DATUM(result);
}

/*
 * outbox.emit_many(event_type, payloads, keys, headers, deliver_at,
 * expires_at, priority) returns uuid[]: one event of the type for each
 * element of payloads, with the key at the same index of keys (NULL keys:
 * none), the rest shared; their ids in the order of payloads.  Every
 * element is checked before anything is written.  The events are appended
 * in array order, as that many calls of emit() would append them.
 */
Datum
emit_many(PG_FUNCTION_ARGS)
{
	AppendEvent event;
	Appender   *appender;
	Size		headers_size;
	bool		isnull;
	bool		has_keys = false;
	Datum	   *payload_values;
	bool	   *payload_nulls;
	Datum	   *key_values = NULL;
	bool	   *key_nulls = NULL;
	int			n;
	int			nkeys;
	Datum	   *ids;
	pg_uuid_t  *uuids;

	/* What the events share, then each event, before anything is written. */
	memset(&event, 0, sizeof(event));
	event.event_type = optional_arg(fcinfo, 0, &isnull);
	check_event_type(event.event_type, isnull);
	event.headers = optional_arg(fcinfo, 3, &event.headers_null);
	headers_size = check_headers(&event);
	event.deliver_at = optional_arg(fcinfo, 4, &event.deliver_at_null);
	check_deliver_at(&event);
	check_priority(&event, PG_ARGISNULL(6) ? 0 : PG_GETARG_INT32(6));
	event.expires_at = optional_arg(fcinfo, 5, &event.expires_at_null);
	check_expires_at(&event);

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payloads must not be NULL")));
	n = array_elements(PG_GETARG_ARRAYTYPE_P(1), JSONBOID, "payloads",
					   &payload_values, &payload_nulls);
	for (int i = 0; i < n; i++)
		check_total_size(outbox_check_payload(payload_values[i], payload_nulls[i]),
						 headers_size);

	if (!PG_ARGISNULL(2))
	{
		has_keys = true;
		nkeys = array_elements(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, "keys",
							   &key_values, &key_nulls);
		if (nkeys != n)
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("keys must have as many elements as payloads"),
					 errdetail("payloads has %d elements and keys %d.", n, nkeys)));
		for (int i = 0; i < n; i++)
			outbox_check_key(key_values[i], key_nulls[i], "key");
	}

	ids = palloc(sizeof(Datum) * Max(n, 1));
	uuids = palloc(sizeof(pg_uuid_t) * Max(n, 1));
	if (n > 0)
	{
		appender = outbox_append_begin();
		for (int i = 0; i < n; i++)
		{
			CHECK_FOR_INTERRUPTS();
			outbox_make_event_id(&uuids[i]);
			ids[i] = UUIDPGetDatum(&uuids[i]);
			event.event_id = &uuids[i];
			event.payload = payload_values[i];
			event.key_null = !has_keys || key_nulls[i];
			event.key = event.key_null ? (Datum) 0 : key_values[i];
			outbox_append(appender, &event);
		}
		outbox_append_end(appender);
		outbox_emitted();
	}
	PG_RETURN_ARRAYTYPE_P(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/*
 * outbox._wake_at_commit() returns void: when the calling transaction
 * commits, the relay rereads its endpoints and looks for work at once.
 * Called by the functions that change endpoints or queue retries.
 */
Datum
outbox_wake_at_commit(PG_FUNCTION_ARGS)
{
	register_callback();
	endpoints_changed_in_xact = true;
	PG_RETURN_VOID();
}
