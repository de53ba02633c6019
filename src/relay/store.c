/*-------------------------------------------------------------------------
 *
 * store.c
 *	  Every SQL statement the relay runs: check the installed version, load
 *	  endpoints, read the stream's next page, a page of new events or the
 *	  due retries of an endpoint, record outcomes, and rotate.
 *
 * Callers hold an open transaction with SPI connected and a snapshot
 * pushed (step.c's bracket).  Plans are prepared once and kept; reading
 * and recording are one statement each (see the relay internals in
 * outbox--1.7.sql).  Columns are found by name, once per result.  Results
 * are copied, as plain rows, into memory the caller names, since SPI's
 * memory ends with SPI_finish(); what follows from them (the endpoint
 * table, batches, what is deferred or verified) is the relay's (read.c,
 * record.c) and endpoints.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_enum.h"

#include "guc.h"
#include "spi_plan.h"
#include "relay/store.h"

static SPIPlanPtr endpoints_plan = NULL;
static SPIPlanPtr rotate_plan = NULL;

/* outbox's oid in this database, InvalidOid when it is not installed. */
Oid
store_extension_oid(void)
{
	return get_extension_oid("outbox", true);
}

/* Is outbox installed in this database (a catalog cache lookup)? */
bool
store_extension_present(void)
{
	return OidIsValid(store_extension_oid());
}

/*
 * Is the version of outbox this library serves installed in this database
 * (as our snapshot sees it)?  The relay serves no other: the SQL of an
 * older version, before ALTER EXTENSION outbox UPDATE, lacks what it calls.
 */
bool
store_extension_ready(void)
{
	bool		isnull;
	Datum		version;
	int			rc;

	if (!store_extension_present())
		return false;
	rc = SPI_execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'outbox'",
					 true, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		return false;
	version = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull || strcmp(TextDatumGetCString(version), OUTBOX_VERSION) != 0)
	{
		ereport(WARNING,
				(errmsg("outbox relay does not serve database \"%s\": its outbox is version %s, this library serves %s",
						get_database_name(MyDatabaseId),
						isnull ? "(none)" : TextDatumGetCString(version), OUTBOX_VERSION),
				 errhint("Run ALTER EXTENSION outbox UPDATE in that database.")));
		return false;
	}
	return true;
}

/*
 * Rotation: empty the oldest partition of the events, the attempt log and
 * the inbox once their retention has passed (outbox._rotate()).
 */
void
store_rotate(void)
{
	int			rc;

	if (rotate_plan == NULL)
		rotate_plan = outbox_prepare_kept("SELECT outbox._rotate()", 0, NULL);
	rc = SPI_execute_plan(rotate_plan, NULL, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "rotation failed: %s", SPI_result_code_string(rc));
}

static char *
col_text(HeapTuple tup, TupleDesc desc, int col)
{
	return SPI_getvalue(tup, desc, col);
}

static Datum
col_datum(HeapTuple tup, TupleDesc desc, int col, bool *isnull)
{
	return SPI_getbinval(tup, desc, col, isnull);
}

/*
 * An event-type pattern array (text[]), copied into cxt; what deconstructing
 * it takes stays in the current (SPI's) memory.
 */
static int
copy_patterns(Datum arr, char ***patterns, MemoryContext cxt)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	*patterns = MemoryContextAlloc(cxt, sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		(*patterns)[i] = MemoryContextStrdup(cxt, TextDatumGetCString(elems[i]));
	return n;
}

/* The columns of outbox._relay_endpoints(), by number. */
typedef struct EndpointColumns
{
	int			id,
				name,
				url,
				headers,
				timeout,
				max_attempts,
				ordered,
				active,
				secret,
				previous,
				types,
				follows,
				max_in_flight,
				format,
				max_age,
				auth,
				rate_limit,
				changed_at;
} EndpointColumns;

static void
endpoint_columns(TupleDesc desc, EndpointColumns *c)
{
	c->id = SPI_fnumber(desc, "id");
	c->name = SPI_fnumber(desc, "name");
	c->url = SPI_fnumber(desc, "url");
	c->headers = SPI_fnumber(desc, "header_lines");
	c->timeout = SPI_fnumber(desc, "timeout_ms");
	c->max_attempts = SPI_fnumber(desc, "max_attempts");
	c->ordered = SPI_fnumber(desc, "ordered");
	c->active = SPI_fnumber(desc, "active");
	c->secret = SPI_fnumber(desc, "secret");
	c->previous = SPI_fnumber(desc, "previous_secret");
	c->types = SPI_fnumber(desc, "event_types");
	c->follows = SPI_fnumber(desc, "follows");
	c->max_in_flight = SPI_fnumber(desc, "max_in_flight");
	c->format = SPI_fnumber(desc, "format");
	c->max_age = SPI_fnumber(desc, "max_age_ms");
	c->auth = SPI_fnumber(desc, "auth");
	c->rate_limit = SPI_fnumber(desc, "rate_limit");
	c->changed_at = SPI_fnumber(desc, "changed_at");
}

/* One row of outbox._relay_endpoints() into row; its strings into cxt. */
static void
endpoint_row(HeapTuple tup, TupleDesc desc, const EndpointColumns *c, EndpointRow *row,
			 MemoryContext cxt)
{
	bool		isnull;
	char	   *secret;
	char	   *old_secret;
	Datum		auth;

	row->id = DatumGetInt32(col_datum(tup, desc, c->id, &isnull));
	row->name = MemoryContextStrdup(cxt, col_text(tup, desc, c->name));
	row->url = MemoryContextStrdup(cxt, col_text(tup, desc, c->url));
	row->headers = MemoryContextStrdup(cxt, col_text(tup, desc, c->headers));
	row->npatterns = copy_patterns(col_datum(tup, desc, c->types, &isnull),
								   &row->patterns, cxt);
	row->follows = DatumGetBool(col_datum(tup, desc, c->follows, &isnull));

	/*
	 * Within the bounds create_endpoint() checks: an endpoint stored before
	 * 1.2 may hold a timeout that passed the interval comparison but not as
	 * milliseconds ('1 year -360 days 10 seconds').
	 */
	row->timeout_ms = DatumGetInt64(col_datum(tup, desc, c->timeout, &isnull));
	row->timeout_ms = Min(Max(row->timeout_ms, OUTBOX_MIN_TIMEOUT_MS), OUTBOX_MAX_TIMEOUT_MS);
	row->max_attempts = DatumGetInt32(col_datum(tup, desc, c->max_attempts, &isnull));
	row->ordered = DatumGetBool(col_datum(tup, desc, c->ordered, &isnull));
	row->active = DatumGetBool(col_datum(tup, desc, c->active, &isnull));

	secret = col_text(tup, desc, c->secret);
	row->key_ok = outbox_secret_key(secret, strlen(secret), row->key, &row->keylen);
	old_secret = col_text(tup, desc, c->previous);
	row->old_keylen = 0;
	if (old_secret != NULL &&
		!outbox_secret_key(old_secret, strlen(old_secret), row->old_key, &row->old_keylen))
		row->old_keylen = 0;
	/* NULL: outbox.endpoint_concurrency, whatever it is at the time */
	row->max_in_flight = DatumGetInt32(col_datum(tup, desc, c->max_in_flight, &isnull));
	if (isnull)
		row->max_in_flight = 0;
	row->format_ok = outbox_format_from_name(col_text(tup, desc, c->format), &row->format);
	row->max_age_ms = DatumGetInt64(col_datum(tup, desc, c->max_age, &isnull));
	if (isnull)
		row->max_age_ms = 0;
	/* checked when stored (_check_auth): a problem here cannot happen */
	auth = col_datum(tup, desc, c->auth, &isnull);
	row->has_auth = !isnull;
	row->auth_problem = isnull ? NULL :
		auth_read(DatumGetJsonbP(auth), &row->auth, cxt);
	row->rate_limit = DatumGetFloat8(col_datum(tup, desc, c->rate_limit, &isnull));
	if (isnull)
		row->rate_limit = 0;
	row->changed_at = DatumGetTimestampTz(col_datum(tup, desc, c->changed_at, &isnull));
}

/*
 * Every endpoint as outbox._relay_endpoints() returns it.  Returns how many,
 * the rows in *rows, allocated in the current memory context; their strings
 * (name, url, headers, patterns) are copied into cxt for the caller to keep.
 * Secrets come back as keys, the format as its enum; whether each was valid
 * is for the caller to act on.
 */
int
store_load_endpoints(EndpointRow **rows, MemoryContext cxt)
{
	EndpointColumns cols;
	int			rc;
	int			n;

	if (endpoints_plan == NULL)
		endpoints_plan = outbox_prepare_kept("SELECT * FROM outbox._relay_endpoints()", 0, NULL);

	rc = SPI_execute_plan(endpoints_plan, NULL, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "loading endpoints failed: %s", SPI_result_code_string(rc));

	endpoint_columns(SPI_tuptable->tupdesc, &cols);
	n = (int) SPI_processed;
	*rows = palloc0(sizeof(EndpointRow) * Max(n, 1));
	for (int i = 0; i < n; i++)
		endpoint_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, &cols, &(*rows)[i], cxt);
	return n;
}

/* Copy a text[] of header lines into current memory; returns how many. */
static int
copy_header_lines(Datum arr, char ***lines)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	*lines = n ? palloc(sizeof(char *) * n) : NULL;
	for (int i = 0; i < n; i++)
		(*lines)[i] = TextDatumGetCString(elems[i]);
	return n;
}

/*
 * The columns of an event reader's rows, by number; those a reader does
 * not return are below 1 (SPI_ERROR_NOATTRIBUTE).
 */
typedef struct EventColumns
{
	int			id,
				event,
				type,
				key,
				emitted,
				data,
				headers,
				deliver_at,
				delivered,
				blocked,
				attempts,
				batch,
				bytes_cut,
				expires_at,
				priority,
				ahead;
} EventColumns;

static void
event_columns(TupleDesc desc, EventColumns *c)
{
	c->id = SPI_fnumber(desc, "id");
	c->event = SPI_fnumber(desc, "event_id");
	c->type = SPI_fnumber(desc, "event_type");
	c->key = SPI_fnumber(desc, "key");
	c->emitted = SPI_fnumber(desc, "emitted_at");
	c->data = SPI_fnumber(desc, "data");
	c->headers = SPI_fnumber(desc, "header_lines");
	c->expires_at = SPI_fnumber(desc, "expires_at");
	c->priority = SPI_fnumber(desc, "priority");
	c->deliver_at = SPI_fnumber(desc, "deliver_at");
	c->delivered = SPI_fnumber(desc, "delivered");
	c->blocked = SPI_fnumber(desc, "blocked");
	c->attempts = SPI_fnumber(desc, "attempts");
	c->batch = SPI_fnumber(desc, "batch");
	c->bytes_cut = SPI_fnumber(desc, "bytes_cut");
	c->ahead = SPI_fnumber(desc, "ahead");
}

/* Row i of the reader's rows into rows->ev[i] and its arrays, in current memory. */
static void
event_row(HeapTuple tup, TupleDesc desc, const EventColumns *c, EventRows *rows, int i)
{
	StreamEvent *e = &rows->ev[i];
	bool		isnull;
	Datum		v;

	e->id = DatumGetInt64(col_datum(tup, desc, c->id, &isnull));
	memcpy(&e->event_id, DatumGetUUIDP(col_datum(tup, desc, c->event, &isnull)), sizeof(pg_uuid_t));
	e->type = col_text(tup, desc, c->type);
	e->key = col_text(tup, desc, c->key);
	e->emitted_at = DatumGetTimestampTz(col_datum(tup, desc, c->emitted, &isnull));
	e->data = TextDatumGetCString(col_datum(tup, desc, c->data, &isnull));
	e->data_len = strlen(e->data);
	e->n_headers = copy_header_lines(col_datum(tup, desc, c->headers, &isnull), &e->headers);
	v = col_datum(tup, desc, c->expires_at, &isnull);
	e->expires_at = isnull ? 0 : DatumGetTimestampTz(v);
	e->priority = DatumGetInt16(col_datum(tup, desc, c->priority, &isnull));
	if (c->deliver_at > 0)
	{
		v = col_datum(tup, desc, c->deliver_at, &isnull);
		e->deliver_at = isnull ? 0 : DatumGetTimestampTz(v);
	}
	if (c->delivered > 0)
		rows->delivered[i] = DatumGetBool(col_datum(tup, desc, c->delivered, &isnull));
	if (c->blocked > 0)
		rows->blocked[i] = DatumGetBool(col_datum(tup, desc, c->blocked, &isnull));
	if (c->attempts > 0)
		rows->attempts[i] = DatumGetInt32(col_datum(tup, desc, c->attempts, &isnull));
}

/*
 * Run a read plan (the stream, a page, due retries) and copy the events it
 * returned into cxt: id, event_id, event_type, key, emitted_at, data,
 * header_lines, expires_at and priority, which every reader returns, and those of deliver_at,
 * delivered, blocked, attempts, batch and bytes_cut that it returns.  False
 * when it returned nothing.  limit is the plan's: a page shorter than it,
 * and not cut by outbox.batch_bytes, ended its batch.
 */
static bool
read_events(SPIPlanPtr plan, Datum *args, const char *nulls, bool read_only, int limit,
			EventRows *rows, MemoryContext cxt, const char *what)
{
	int			rc;
	MemoryContext old;
	TupleDesc	desc;
	EventColumns c;
	bool		isnull;

	rc = SPI_execute_plan(plan, args, nulls, read_only, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading %s failed: %s", what, SPI_result_code_string(rc));
	memset(rows, 0, sizeof(EventRows));
	if (SPI_processed == 0)
		return false;

	desc = SPI_tuptable->tupdesc;
	event_columns(desc, &c);
	old = MemoryContextSwitchTo(cxt);
	rows->n = (int) SPI_processed;
	rows->ev = palloc0(sizeof(StreamEvent) * rows->n);
	if (c.delivered > 0)
		rows->delivered = palloc0(sizeof(bool) * rows->n);
	if (c.blocked > 0)
		rows->blocked = palloc0(sizeof(bool) * rows->n);
	if (c.attempts > 0)
		rows->attempts = palloc0(sizeof(int) * rows->n);
	for (int i = 0; i < rows->n; i++)
		event_row(SPI_tuptable->vals[i], desc, &c, rows, i);
	if (c.batch > 0)
		rows->snap = col_text(SPI_tuptable->vals[0], desc, c.batch);
	/* A page's own rows come first, those sent ahead after them. */
	rows->n_own = rows->n;
	if (c.ahead > 0)
		while (rows->n_own > 1 &&
			   DatumGetBool(col_datum(SPI_tuptable->vals[rows->n_own - 1], desc, c.ahead, &isnull)))
			rows->n_own--;
	/* A page that the byte budget ended is no sign the batch is done. */
	if (c.bytes_cut > 0)
		rows->batch_done = rows->n_own < limit &&
			!DatumGetBool(col_datum(SPI_tuptable->vals[rows->n_own - 1], desc, c.bytes_cut, &isnull));
	MemoryContextSwitchTo(old);
	/* Copied: SPI's copy goes now, not with the step's last read. */
	SPI_freetuptable(SPI_tuptable);
	return true;
}

/*
 * The next page of new events for an endpoint, at most limit events and
 * about outbox.batch_bytes of payload and headers, copied into cxt; false
 * when there is none.  With verify, events already answered with a 2xx
 * are marked delivered.  Each says whether it is blocked: on an ordered
 * endpoint, behind an earlier event of its key.  The page's own rows come
 * first (rows->n_own of them), then those sent ahead of their page.
 */
bool
store_read_page(int endpoint_id, int limit, bool verify, EventRows *rows, MemoryContext cxt)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[4];

	if (plan == NULL)
	{
		Oid			types[4] = {INT4OID, INT4OID, BOOLOID, INT8OID};

		plan = outbox_prepare_kept("SELECT id, event_id, event_type, deliver_at, key, emitted_at, data, header_lines, batch, "
								   "blocked, delivered, bytes_cut, expires_at, priority, ahead "
								   "FROM outbox._read_page($1, $2, $3, $4)", 4, types);
	}
	args[0] = Int32GetDatum(endpoint_id);
	args[1] = Int32GetDatum(limit);
	args[2] = BoolGetDatum(verify);
	args[3] = Int64GetDatum((int64) outbox_batch_bytes);
	return read_events(plan, args, NULL, false, limit, rows, cxt, "events");
}

/*
 * The due retries of an endpoint, bounded as a page, copied into cxt with
 * the attempts each has had; false when none is due.  verify as for a page.
 * _read_due returns one event per key on an ordered endpoint, so no
 * delivery waits for another.
 */
bool
store_read_due(int endpoint_id, int limit, bool verify, EventRows *rows, MemoryContext cxt)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[4];

	if (plan == NULL)
	{
		Oid			types[4] = {INT4OID, INT4OID, BOOLOID, INT8OID};

		plan = outbox_prepare_kept("SELECT id, event_id, event_type, attempts, key, emitted_at, data, header_lines, delivered, "
								   "expires_at, priority "
								   "FROM outbox._read_due($1, $2, $3, $4)", 4, types);
	}
	args[0] = Int32GetDatum(endpoint_id);
	args[1] = Int32GetDatum(limit);
	args[2] = BoolGetDatum(verify);
	args[3] = Int64GetDatum((int64) outbox_batch_bytes);
	return read_events(plan, args, NULL, true, limit, rows, cxt, "events");
}

/*
 * The next page of the stream (outbox._read_stream): events of every type,
 * bounded as an endpoint's page, copied into cxt; false when it has none.
 * With ahead_of (a batch snapshot, as text), the page after ahead_after in
 * that batch if it is still the stream's open one, read without writing:
 * the page after the one in flight, read ahead.
 */
bool
store_read_stream(int limit, const char *ahead_of, int64 ahead_after,
				  EventRows *rows, MemoryContext cxt)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	if (plan == NULL)
	{
		Oid			types[4] = {INT4OID, INT8OID, TEXTOID, INT8OID};

		plan = outbox_prepare_kept("SELECT id, event_id, event_type, deliver_at, key, emitted_at, "
								   "data, header_lines, batch, bytes_cut, expires_at, priority "
								   "FROM outbox._read_stream($1, $2, $3, $4)", 4, types);
	}
	args[0] = Int32GetDatum(limit);
	args[1] = Int64GetDatum((int64) outbox_batch_bytes);
	args[2] = ahead_of != NULL ? CStringGetTextDatum(ahead_of) : (Datum) 0;
	args[3] = Int64GetDatum(ahead_after);
	if (ahead_of == NULL)
		nulls[2] = nulls[3] = 'n';
	return read_events(plan, args, nulls, false, limit, rows, cxt, "the stream");
}

/*
 * Is the stream where a page read ahead starts: in batch (its snapshot, as
 * text), after after_id?
 */
bool
store_stream_at(const char *batch, int64 after_id)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[2];
	bool		isnull;
	int			rc;

	if (plan == NULL)
	{
		Oid			types[2] = {TEXTOID, INT8OID};

		plan = outbox_prepare_kept("SELECT EXISTS (SELECT 1 FROM outbox.stream s "
								   "WHERE s.next_snap::text = $1 AND s.after_id = $2)", 2, types);
	}
	args[0] = CStringGetTextDatum(batch);
	args[1] = Int64GetDatum(after_id);
	/* (not read-only: the step's own writes, _attach's, must be seen) */
	rc = SPI_execute_plan(plan, args, NULL, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "reading the stream's position failed: %s", SPI_result_code_string(rc));
	return DatumGetBool(col_datum(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

static Datum
build_array(Datum *values, bool *nulls, int n, Oid type)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int16		typlen;
	bool		typbyval;
	char		typalign;

	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs,
											  type, typlen, typbyval, typalign));
}

/* n ints as an int4[] argument. */
static Datum
int_array_datum(const int *values, int n)
{
	Datum	   *v = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		v[i] = Int32GetDatum(values[i]);
	return build_array(v, NULL, n, INT4OID);
}

/* An int4[] result's elements, allocated in cxt; returns how many. */
static int
int_array(Datum arr, int **out, MemoryContext cxt)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(arr), INT4OID, 4, true, TYPALIGN_INT,
					  &elems, &nulls, &n);
	*out = MemoryContextAlloc(cxt, sizeof(int) * Max(n, 1));
	for (int i = 0; i < n; i++)
		(*out)[i] = DatumGetInt32(elems[i]);
	return n;
}

/*
 * For n deliveries routed from a stream page (endpoint, event, key, and
 * whether the endpoint is ordered): whether each was answered with a 2xx
 * already (only with verify) and whether it waits behind its key.
 */
void
store_route_checks(int n, const int *eids, const pg_uuid_t *const *event_ids,
				   char *const *keys, const bool *ordered, bool verify,
				   bool *delivered, bool *blocked)
{
	static SPIPlanPtr plan = NULL;
	Datum		args[5];
	Datum	   *v = palloc(sizeof(Datum) * Max(n, 1));
	bool	   *nulls = palloc(sizeof(bool) * Max(n, 1));
	int			rc;
	int			c_delivered,
				c_blocked;

	if (plan == NULL)
	{
		Oid			types[5] = {INT4ARRAYOID, UUIDARRAYOID, TEXTARRAYOID, BOOLARRAYOID, BOOLOID};

		plan = outbox_prepare_kept("SELECT delivered, blocked FROM outbox._route_checks($1, $2, $3, $4, $5)",
								   5, types);
	}
	args[0] = int_array_datum(eids, n);
	for (int i = 0; i < n; i++)
		v[i] = UUIDPGetDatum(event_ids[i]);
	args[1] = build_array(v, NULL, n, UUIDOID);
	for (int i = 0; i < n; i++)
	{
		nulls[i] = keys[i] == NULL;
		v[i] = nulls[i] ? (Datum) 0 : CStringGetTextDatum(keys[i]);
	}
	args[2] = build_array(v, nulls, n, TEXTOID);
	for (int i = 0; i < n; i++)
		v[i] = BoolGetDatum(ordered[i]);
	args[3] = build_array(v, NULL, n, BOOLOID);
	args[4] = BoolGetDatum(verify);
	rc = SPI_execute_plan(plan, args, NULL, true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != (uint64) n)
		elog(ERROR, "checking routed events failed: %s", SPI_result_code_string(rc));
	c_delivered = SPI_fnumber(SPI_tuptable->tupdesc, "delivered");
	c_blocked = SPI_fnumber(SPI_tuptable->tupdesc, "blocked");
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		delivered[i] = DatumGetBool(col_datum(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
											  c_delivered, &isnull));
		blocked[i] = DatumGetBool(col_datum(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
											c_blocked, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
}

/*
 * Let those of the candidates whose own position equals the stream's follow
 * it again (outbox._attach); returns how many did, their ids in *attached.
 */
int
store_attach(const int *candidates, int n, int **attached)
{
	static SPIPlanPtr plan = NULL;
	Datum		arg;
	bool		isnull;
	int			rc;

	if (plan == NULL)
	{
		Oid			types[1] = {INT4ARRAYOID};

		plan = outbox_prepare_kept("SELECT outbox._attach($1)", 1, types);
	}
	arg = int_array_datum(candidates, n);
	rc = SPI_execute_plan(plan, &arg, NULL, false, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "attaching endpoints failed: %s", SPI_result_code_string(rc));
	return int_array(col_datum(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), attached,
					 CurrentMemoryContext);
}

/* The endpoints with retries due now; returns how many, their ids in *ids. */
int
store_due_endpoints(int **ids)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;
	int			rc;

	if (plan == NULL)
		plan = outbox_prepare_kept("SELECT outbox._due_endpoints()", 0, NULL);
	rc = SPI_execute_plan(plan, NULL, NULL, true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "finding due retries failed: %s", SPI_result_code_string(rc));
	return int_array(col_datum(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), ids,
					 CurrentMemoryContext);
}

/*
 * When the earliest retry or deferred event that is not due yet comes due
 * (0: none waits).  Those due now are store_due_endpoints'.
 */
TimestampTz
store_next_due(void)
{
	static SPIPlanPtr plan = NULL;
	bool		isnull;
	Datum		v;
	int			rc;

	if (plan == NULL)
		plan = outbox_prepare_kept("SELECT min(next_at) FROM outbox.retries WHERE next_at > now()", 0, NULL);
	rc = SPI_execute_plan(plan, NULL, NULL, true, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "finding the next due retry failed: %s", SPI_result_code_string(rc));
	v = col_datum(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? 0 : DatumGetTimestampTz(v);
}

/* The oid of a type of the extension's, by name. */
static Oid
outbox_type(const char *name)
{
	Oid			nsp = get_namespace_oid("outbox", false);
	Oid			type = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid,
									   CStringGetDatum(name), ObjectIdGetDatum(nsp));

	if (!OidIsValid(type))
		elog(ERROR, "type outbox.%s does not exist", name);
	return type;
}

/* The number of attributes of outbox.outcome and outbox.page_done. */
#define OUTCOME_ATTRS	11
#define PAGE_DONE_ATTRS 4

/* OutcomeKind's labels in outbox.outcome_kind, in the C enum's order. */
static const char *const outcome_kind_labels[] = {
	[OUTCOME_KIND_DELIVERED] = "delivered",
	[OUTCOME_KIND_RETRY] = "retry",
	[OUTCOME_KIND_DEAD] = "dead",
	[OUTCOME_KIND_DEFERRED] = "deferred",
	[OUTCOME_KIND_ALREADY] = "already",
	[OUTCOME_KIND_EXPIRED] = "expired",
};

#define OUTCOME_KINDS lengthof(outcome_kind_labels)

/*
 * The values of outbox.outcome_kind (the type of outbox.outcome's outcome
 * attribute), in OutcomeKind's order.  A label the type lacks is an error:
 * the two sides of the contract disagree.
 */
static void
outcome_kind_values(TupleDesc outcome_td, Datum *values)
{
	Oid			kind_type = TupleDescAttr(outcome_td, 4)->atttypid;

	for (int i = 0; i < (int) OUTCOME_KINDS; i++)
	{
		Oid			v = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
										ObjectIdGetDatum(kind_type),
										CStringGetDatum(outcome_kind_labels[i]));

		if (!OidIsValid(v))
			elog(ERROR, "type %s has no label \"%s\"",
				 format_type_be(kind_type), outcome_kind_labels[i]);
		values[i] = ObjectIdGetDatum(v);
	}
}

/* One delivery's outcome as an outbox.outcome. */
static Datum
outcome_datum(TupleDesc td, const Datum *kinds, const OutcomeRow *o)
{
	Datum		v[OUTCOME_ATTRS];
	bool		n[OUTCOME_ATTRS];

	memset(n, 0, sizeof(n));
	v[0] = Int32GetDatum(o->endpoint_id);
	v[1] = Int64GetDatum(o->id);
	v[2] = UUIDPGetDatum(o->event_id);
	v[3] = Int32GetDatum(o->attempt);
	v[4] = kinds[o->outcome];
	n[5] = o->next_at == 0;
	v[5] = TimestampTzGetDatum(o->next_at);
	n[6] = !o->sent || o->status == 0;
	v[6] = Int32GetDatum((int32) o->status);
	n[7] = !o->sent || o->error[0] == '\0';
	v[7] = n[7] ? (Datum) 0 : CStringGetTextDatum(o->error);
	n[8] = !o->sent;
	v[8] = Float4GetDatum((float4) o->duration_ms);
	n[9] = !o->sent || o->response_len == 0;
	v[9] = n[9] ? (Datum) 0 :
		PointerGetDatum(cstring_to_text_with_len(o->response, o->response_len));
	n[10] = o->disable_reason == NULL;
	v[10] = n[10] ? (Datum) 0 : CStringGetTextDatum(o->disable_reason);
	return HeapTupleGetDatum(heap_form_tuple(td, v, n));
}

/*
 * Record, in one statement (outbox._record), the set's outcomes, the pages
 * whose positions move, the endpoints that stop following the stream, and
 * those whose health row successes alone need not touch.  Returns how many
 * endpoints another transaction holds (a drop_endpoint() not yet
 * committed), their ids in *locked, allocated in locked_cxt (it outlives
 * the step's transaction): nothing of theirs was recorded, and the stream
 * did not move.  The caller marks the rest recorded once the
 * transaction committed.
 */
int
store_record(const RecordSet *set, int **locked, MemoryContext locked_cxt)
{
	static SPIPlanPtr plan = NULL;
	Oid			outcome_type = outbox_type("outcome");
	Oid			page_type = outbox_type("page_done");
	TupleDesc	outcome_td = lookup_rowtype_tupdesc_copy(outcome_type, -1);
	TupleDesc	page_td = lookup_rowtype_tupdesc_copy(page_type, -1);
	Datum	   *outcomes = palloc(sizeof(Datum) * Max(set->noutcomes, 1));
	Datum	   *pages = palloc(sizeof(Datum) * Max(set->npages, 1));
	Datum		kinds[OUTCOME_KINDS];
	Datum		args[4];
	bool		isnull;
	int			rc;

	if (plan == NULL)
	{
		Oid			types[4] = {get_array_type(outcome_type), get_array_type(page_type), INT4ARRAYOID,
								INT4ARRAYOID};

		plan = outbox_prepare_kept("SELECT outbox._record($1, $2, $3, $4)", 4, types);
	}

	outcome_kind_values(outcome_td, kinds);
	for (int i = 0; i < set->noutcomes; i++)
		outcomes[i] = outcome_datum(outcome_td, kinds, &set->outcomes[i]);
	for (int i = 0; i < set->npages; i++)
	{
		Datum		v[PAGE_DONE_ATTRS];
		bool		nulls[PAGE_DONE_ATTRS] = {false, false, false, false};
		const PageDone *p = &set->pages[i];

		nulls[0] = p->endpoint_id == 0;
		v[0] = Int32GetDatum(p->endpoint_id);
		v[1] = CStringGetTextDatum(p->batch);
		v[2] = Int64GetDatum(p->last_id);
		v[3] = BoolGetDatum(p->batch_done);
		pages[i] = HeapTupleGetDatum(heap_form_tuple(page_td, v, nulls));
	}

	args[0] = PointerGetDatum(construct_array(outcomes, set->noutcomes, outcome_type, -1, false, TYPALIGN_DOUBLE));
	args[1] = PointerGetDatum(construct_array(pages, set->npages, page_type, -1, false, TYPALIGN_DOUBLE));
	args[2] = int_array_datum(set->detach, set->ndetach);
	args[3] = int_array_datum(set->quiet, set->nquiet);
	rc = SPI_execute_plan(plan, args, NULL, false, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "recording outcomes failed: %s", SPI_result_code_string(rc));
	return int_array(col_datum(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull), locked,
					 locked_cxt);
}
