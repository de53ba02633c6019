/*-------------------------------------------------------------------------
 *
 * emit.c
 *	  outbox.emit(): check the arguments, append one event to the current
 *	  events partition in the caller's transaction, and wake the relay when
 *	  that transaction commits.
 *
 * emit() runs as SECURITY DEFINER inside the caller's transaction and
 * takes no lock beyond the row-exclusive lock of any INSERT, so emitters
 * never wait on each other.  Each event records pg_current_xact_id(), the
 * top-level transaction id, which is what snapshots list: the relay reads
 * by snapshot, since ids from outbox.event_seq are drawn before commit.
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
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "guc.h"
#include "shmem.h"
#include "spi_plan.h"
#include "validate.h"

PG_FUNCTION_INFO_V1(emit);
PG_FUNCTION_INFO_V1(outbox_wake_at_commit);

/*
 * Did the current transaction emit, or change endpoints (or queue retries)?
 * Reset at its end.
 */
static bool emitted_in_xact = false;
static bool endpoints_changed_in_xact = false;
static bool callback_registered = false;

static SPIPlanPtr insert_plan = NULL;
static SPIPlanPtr insert_plan_controls = NULL;	/* with expires_at, priority */
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

/*
 * Fill uuid with a version 7 UUID: 48 bits of Unix time in milliseconds,
 * then random bits.  Time order keeps index insertions at the right edge.
 */
static void
make_uuid_v7(pg_uuid_t *uuid)
{
	TimestampTz now = GetCurrentTimestamp();
	uint64		ms;

	ms = (uint64) (now / 1000) +
		(uint64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
	if (!pg_strong_random(uuid->data + 6, UUID_LEN - 6))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random event id")));
	for (int i = 0; i < 6; i++)
		uuid->data[i] = (uint8) (ms >> (40 - 8 * i));
	uuid->data[6] = (uuid->data[6] & 0x0f) | 0x70;	/* version 7 */
	uuid->data[8] = (uuid->data[8] & 0x3f) | 0x80;	/* RFC 4122 variant */
}

static void
check_text_arg(FunctionCallInfo fcinfo, int argno, const char *name)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		return;
	t = PG_GETARG_TEXT_PP(argno);
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

/*
 * Look up the event a dedupe key already stands for.  Returns false when
 * the key is new, after claiming it for *event_id; otherwise overwrites
 * *event_id with the first event's id.  A concurrent emit of the same key
 * makes the INSERT wait for that transaction; if it committed, this one
 * returns its event id.  The caller has connected to SPI.
 */
static bool
dedupe_existing(Datum dedupe_key, pg_uuid_t *event_id)
{
	Datum		args[2];
	bool		isnull;
	int			rc;

	if (dedupe_insert_plan == NULL)
	{
		Oid			types[2] = {TEXTOID, UUIDOID};

		dedupe_insert_plan = outbox_prepare_kept(
										  "INSERT INTO outbox.dedupe (dedupe_key, event_id) VALUES ($1, $2) "
										  "ON CONFLICT (dedupe_key) DO NOTHING",
										  2, types);
		dedupe_lookup_plan = outbox_prepare_kept(
										  "SELECT event_id FROM outbox.dedupe WHERE dedupe_key = $1",
										  1, types);
	}

	args[0] = dedupe_key;
	args[1] = UUIDPGetDatum(event_id);
	rc = SPI_execute_plan(dedupe_insert_plan, args, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "inserting dedupe key failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
		return false;

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
	return true;
}

/*
 * outbox.emit(event_type, payload, key, headers, deliver_at, dedupe_key,
 * expires_at, priority) returns uuid.  See the file header.  An event with
 * neither an expires_at nor a priority other than 0 goes in with the INSERT
 * of before 1.5 (its new columns NULL), so that it costs what it did; so
 * does every event of a database whose SQL is still older than 1.5 (its
 * emit() passes six arguments, and its events table has no such columns).
 */
Datum
emit(PG_FUNCTION_ARGS)
{
	text	   *event_type;
	pg_uuid_t  *event_id;
	Datum		result;
	Datum		args[8];
	char		nulls[8];
	int32		priority = 0;
	bool		controls;
	int			rc;

	/* Check every argument before anything is written. */
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event_type must not be NULL")));
	event_type = PG_GETARG_TEXT_PP(0);
	outbox_check_event_type(VARDATA_ANY(event_type), VARSIZE_ANY_EXHDR(event_type));

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be NULL"),
				 errhint("Use 'null'::jsonb for a JSON null.")));
	{
		Size		size = outbox_jsonb_raw_size(PG_GETARG_DATUM(1));

		if (size > (Size) outbox_max_payload_size)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("event payload is too large"),
					 errdetail("The payload has %zu bytes; outbox.max_payload_size is %d.",
							   size, outbox_max_payload_size)));
	}

	check_text_arg(fcinfo, 2, "key");
	if (!PG_ARGISNULL(3))
	{
		Size		payload_size = outbox_jsonb_raw_size(PG_GETARG_DATUM(1));
		Size		headers_size = outbox_jsonb_raw_size(PG_GETARG_DATUM(3));

		outbox_check_header_object(PG_GETARG_JSONB_P(3), "event headers");
		/* Headers travel with the payload: one limit covers both. */
		if (payload_size + headers_size > (Size) outbox_max_payload_size)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("event payload and headers are too large"),
					 errdetail("The payload has %zu bytes and its headers %zu; together they may have at most outbox.max_payload_size, %d.",
							   payload_size, headers_size, outbox_max_payload_size)));
	}
	if (!PG_ARGISNULL(4))
	{
		TimestampTz deliver_at = PG_GETARG_TIMESTAMPTZ(4);
		TimestampTz now = GetCurrentTransactionStartTimestamp();

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
	check_text_arg(fcinfo, 5, "dedupe_key");
	if (PG_NARGS() > 7 && !PG_ARGISNULL(7))
		priority = PG_GETARG_INT32(7);
	if (priority < PG_INT16_MIN || priority > PG_INT16_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("priority must be between %d and %d", PG_INT16_MIN, PG_INT16_MAX),
				 errdetail("The value given was %d.", priority)));
	controls = priority != 0 || (PG_NARGS() > 6 && !PG_ARGISNULL(6));
	if (PG_NARGS() > 6 && !PG_ARGISNULL(6))
	{
		TimestampTz expires_at = PG_GETARG_TIMESTAMPTZ(6);

		if (TIMESTAMP_NOT_FINITE(expires_at))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("expires_at must be a finite timestamp"),
					 errhint("Pass NULL for an event that does not expire.")));
		/* One that expires before it may go would never go. */
		if (!PG_ARGISNULL(4) && expires_at <= PG_GETARG_TIMESTAMPTZ(4))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("expires_at must be later than deliver_at"),
					 errdetail("expires_at is %s and deliver_at %s.",
							   timestamptz_to_str(expires_at),
							   timestamptz_to_str(PG_GETARG_TIMESTAMPTZ(4)))));
	}

	event_id = palloc(sizeof(pg_uuid_t));
	make_uuid_v7(event_id);
	result = UUIDPGetDatum(event_id);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	if (!PG_ARGISNULL(5) && dedupe_existing(PG_GETARG_DATUM(5), event_id))
	{
		SPI_finish();
		PG_RETURN_DATUM(result);
	}

	if (!controls && insert_plan == NULL)
	{
		Oid			types[6] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID, JSONBOID, TIMESTAMPTZOID};

		insert_plan = outbox_prepare_kept(
								   "INSERT INTO outbox.events "
								   "(id, slot, event_id, txid, event_type, payload, key, headers, deliver_at, created_at) "
								   "SELECT nextval('outbox.event_seq'), q.cur_slot, $1, pg_current_xact_id(), "
								   "$2, $3, $4, $5, $6, now() FROM outbox.queue q",
								   6, types);
	}
	if (controls && insert_plan_controls == NULL)
	{
		Oid			types[8] = {UUIDOID, TEXTOID, JSONBOID, TEXTOID, JSONBOID, TIMESTAMPTZOID,
		TIMESTAMPTZOID, INT2OID};

		insert_plan_controls = outbox_prepare_kept(
												"INSERT INTO outbox.events "
												"(id, slot, event_id, txid, event_type, payload, key, headers, deliver_at, created_at, "
												"expires_at, priority) "
												"SELECT nextval('outbox.event_seq'), q.cur_slot, $1, pg_current_xact_id(), "
												"$2, $3, $4, $5, $6, now(), $7, $8 FROM outbox.queue q",
												8, types);
	}

	for (int i = 0; i < 6; i++)
	{
		args[i] = i == 0 ? result : PG_GETARG_DATUM(i - 1);
		nulls[i] = (i > 0 && PG_ARGISNULL(i - 1)) ? 'n' : ' ';
	}
	if (controls)
	{
		args[6] = PG_ARGISNULL(6) ? (Datum) 0 : PG_GETARG_DATUM(6);
		nulls[6] = PG_ARGISNULL(6) ? 'n' : ' ';
		args[7] = Int16GetDatum((int16) priority);
		nulls[7] = priority == 0 ? 'n' : ' ';
	}
	rc = SPI_execute_plan(controls ? insert_plan_controls : insert_plan, args, nulls, false, 0);
	if (rc != SPI_OK_INSERT || SPI_processed != 1)
		elog(ERROR, "inserting event failed: %s", SPI_result_code_string(rc));
	SPI_finish();

	register_callback();
	emitted_in_xact = true;

	PG_RETURN_DATUM(result);
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
