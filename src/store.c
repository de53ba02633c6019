/*-------------------------------------------------------------------------
 *
 * store.c
 *	  Every SQL statement the relay runs: check the installed version, load
 *	  endpoints, read a page of new events or the due retries of an
 *	  endpoint, record a batch's outcomes, and rotate.
 *
 * Callers hold an open transaction with SPI connected and a snapshot
 * pushed (relay.c's bracket).  Plans are prepared once and kept; reading
 * and recording are one statement each (see the relay internals in
 * outbox--1.0.sql).  Results are copied into memory the caller names,
 * since SPI's memory ends with SPI_finish().
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
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "spi_plan.h"
#include "store.h"

static SPIPlanPtr endpoints_plan = NULL;
static SPIPlanPtr page_plan = NULL;
static SPIPlanPtr due_plan = NULL;
static SPIPlanPtr record_plan = NULL;
static SPIPlanPtr rotate_plan = NULL;

/* Until the first load of endpoints since this relay started. */
static bool first_load = true;

/* Is outbox installed in this database (a catalog cache lookup)? */
bool
store_extension_present(void)
{
	return OidIsValid(get_extension_oid("outbox", true));
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
 * Refresh the endpoint table from SQL.  Entries that disappeared and have
 * nothing in flight are removed; those with something in flight stay
 * inactive until it finishes.
 */
void
store_load_endpoints(HTAB *endpoints, MemoryContext cxt)
{
	HASH_SEQ_STATUS seq;
	RelayEndpoint *ep;
	int			rc;

	if (endpoints_plan == NULL)
		endpoints_plan = outbox_prepare_kept(
								 "SELECT e.id, e.name, e.url, "
								 "  array_to_string(outbox._header_lines(e.headers), E'\\n'), "
								 "  outbox._timeout_ms(e.timeout), e.max_attempts, e.ordered, "
								 "  NOT e.paused AND e.disabled_at IS NULL, s.secret, "
								 "  CASE WHEN s.previous_expires_at > now() THEN s.previous_secret END, "
								 "  e.max_in_flight "
								 "FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id",
								 0, NULL);

	rc = SPI_execute_plan(endpoints_plan, NULL, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "loading endpoints failed: %s", SPI_result_code_string(rc));

	hash_seq_init(&seq, endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
		ep->seen = false;

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		bool		found;
		int			id = DatumGetInt32(col_datum(tup, desc, 1, &isnull));
		char	   *secret;
		char	   *old_secret;
		MemoryContext old;

		ep = hash_search(endpoints, &id, HASH_ENTER, &found);
		if (!found)
		{
			memset(((char *) ep) + sizeof(int), 0, sizeof(RelayEndpoint) - sizeof(int));
			/*
			 * What a relay before us had in flight may have arrived; an
			 * endpoint that appears later cannot have had anything in flight.
			 */
			ep->verify_page = first_load;
			ep->verify_due = first_load;
		}
		else
		{
			pfree(ep->name);
			pfree(ep->url);
			pfree(ep->headers);
		}
		old = MemoryContextSwitchTo(cxt);
		ep->name = pstrdup(col_text(tup, desc, 2));
		ep->url = pstrdup(col_text(tup, desc, 3));
		ep->headers = pstrdup(col_text(tup, desc, 4));
		MemoryContextSwitchTo(old);
		/*
		 * Within the bounds create_endpoint() checks: an endpoint stored
		 * before 1.2 may hold a timeout that passed the interval comparison
		 * but not as milliseconds ('1 year -360 days 10 seconds').
		 */
		ep->timeout_ms = DatumGetInt64(col_datum(tup, desc, 5, &isnull));
		ep->timeout_ms = Min(Max(ep->timeout_ms, OUTBOX_MIN_TIMEOUT_MS), OUTBOX_MAX_TIMEOUT_MS);
		ep->max_attempts = DatumGetInt32(col_datum(tup, desc, 6, &isnull));
		ep->ordered = DatumGetBool(col_datum(tup, desc, 7, &isnull));
		ep->active = DatumGetBool(col_datum(tup, desc, 8, &isnull));
		ep->seen = true;

		secret = col_text(tup, desc, 9);
		if (!outbox_secret_key(secret, strlen(secret), ep->key, &ep->keylen))
		{
			ereport(WARNING,
					(errmsg("outbox endpoint \"%s\" has an invalid signing secret; not delivering to it",
							ep->name)));
			ep->active = false;
		}
		old_secret = col_text(tup, desc, 10);
		ep->old_keylen = 0;
		if (old_secret != NULL &&
			!outbox_secret_key(old_secret, strlen(old_secret), ep->old_key, &ep->old_keylen))
			ep->old_keylen = 0;
		/* NULL: outbox.endpoint_concurrency, whatever it is at the time */
		ep->max_in_flight = DatumGetInt32(col_datum(tup, desc, 11, &isnull));
		if (isnull)
			ep->max_in_flight = 0;
	}

	first_load = false;
	hash_seq_init(&seq, endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
	{
		if (ep->seen)
			continue;
		ep->active = false;
		if (ep->page == NULL && ep->due == NULL)
		{
			pfree(ep->name);
			pfree(ep->url);
			pfree(ep->headers);
			hash_search(endpoints, &ep->id, HASH_REMOVE, NULL);
		}
	}
}

static Batch *
new_batch(RelayEndpoint *ep, bool is_page, int n, MemoryContext parent)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "outbox batch", ALLOCSET_DEFAULT_SIZES);
	Batch	   *b = MemoryContextAllocZero(cxt, sizeof(Batch));

	b->ep = ep;
	b->cxt = cxt;
	b->is_page = is_page;
	b->n = n;
	b->d = MemoryContextAllocZero(cxt, sizeof(Delivery) * n);
	return b;
}

/* Copy a text[] of header lines into the delivery. */
static void
copy_header_lines(Delivery *d, Datum arr)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(arr), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	d->n_event_headers = n;
	d->event_headers = n ? palloc(sizeof(char *) * n) : NULL;
	for (int i = 0; i < n; i++)
		d->event_headers[i] = TextDatumGetCString(elems[i]);
}

/*
 * On an ordered endpoint, chain each delivery to the previous one of its
 * key in the batch, so that it is sent only after that one is done.
 * Quadratic in the batch size (outbox.batch_size, 500 by default), which
 * is small beside the HTTP work.
 */
static void
link_same_key(Batch *b)
{
	for (int i = 0; i < b->n; i++)
	{
		Delivery   *d = &b->d[i];

		d->prev_same_key = -1;
		if (!b->ep->ordered || d->key == NULL)
			continue;
		for (int j = i - 1; j >= 0; j--)
			if (b->d[j].key != NULL && strcmp(b->d[j].key, d->key) == 0)
			{
				d->prev_same_key = j;
				break;
			}
	}
}

/*
 * Run a read plan (page or due retries) for ep, at most limit events and
 * about outbox.batch_bytes of payload and headers, and copy what both return
 * into a new batch under parent: id, event_id, key, body, header_lines
 * and delivered.  NULL when it returned nothing.  The caller reads its
 * own columns from SPI_tuptable afterwards.
 */
static Batch *
read_batch(SPIPlanPtr plan, RelayEndpoint *ep, bool is_page, int limit, bool verify,
		   MemoryContext parent)
{
	Datum		args[4];
	int			rc;
	Batch	   *b;
	MemoryContext old;
	TupleDesc	desc;
	int			c_id,
				c_event,
				c_key,
				c_body,
				c_headers,
				c_delivered;

	args[0] = Int32GetDatum(ep->id);
	args[1] = Int32GetDatum(limit);
	args[2] = BoolGetDatum(verify);
	args[3] = Int64GetDatum((int64) outbox_batch_bytes);
	rc = SPI_execute_plan(plan, args, NULL, !is_page, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading events failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return NULL;

	desc = SPI_tuptable->tupdesc;
	c_id = SPI_fnumber(desc, "id");
	c_event = SPI_fnumber(desc, "event_id");
	c_key = SPI_fnumber(desc, "key");
	c_body = SPI_fnumber(desc, "body");
	c_headers = SPI_fnumber(desc, "header_lines");
	c_delivered = SPI_fnumber(desc, "delivered");

	b = new_batch(ep, is_page, (int) SPI_processed, parent);
	old = MemoryContextSwitchTo(b->cxt);
	for (int i = 0; i < b->n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		Delivery   *d = &b->d[i];
		bool		isnull;

		d->batch = b;
		d->prev_same_key = -1;
		d->id = DatumGetInt64(col_datum(tup, desc, c_id, &isnull));
		memcpy(&d->event_id, DatumGetUUIDP(col_datum(tup, desc, c_event, &isnull)), sizeof(pg_uuid_t));
		d->key = col_text(tup, desc, c_key);
		d->body = TextDatumGetCString(col_datum(tup, desc, c_body, &isnull));
		copy_header_lines(d, col_datum(tup, desc, c_headers, &isnull));
		d->already = DatumGetBool(col_datum(tup, desc, c_delivered, &isnull));
	}
	MemoryContextSwitchTo(old);
	return b;
}

/*
 * The next page of new events for ep, or NULL when there is none.  The
 * batch lives in a new memory context under parent.
 */
Batch *
store_read_page(RelayEndpoint *ep, int limit, MemoryContext parent)
{
	Batch	   *b;
	TupleDesc	desc;
	int			c_deliver_at,
				c_blocked;
	bool		bytes_cut;
	bool		cut_null;

	if (page_plan == NULL)
	{
		Oid			types[4] = {INT4OID, INT4OID, BOOLOID, INT8OID};

		page_plan = outbox_prepare_kept("SELECT id, event_id, deliver_at, key, body, header_lines, batch, blocked, delivered, bytes_cut "
										"FROM outbox._read_page($1, $2, $3, $4)", 4, types);
	}
	b = read_batch(page_plan, ep, true, limit, ep->verify_page, parent);
	if (b == NULL)
		return NULL;

	desc = SPI_tuptable->tupdesc;
	c_deliver_at = SPI_fnumber(desc, "deliver_at");
	c_blocked = SPI_fnumber(desc, "blocked");
	b->snap = MemoryContextStrdup(b->cxt, col_text(SPI_tuptable->vals[0], desc, SPI_fnumber(desc, "batch")));
	for (int i = 0; i < b->n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		Delivery   *d = &b->d[i];
		bool		isnull;
		Datum		v;

		v = col_datum(tup, desc, c_deliver_at, &isnull);
		d->deliver_at = isnull ? 0 : DatumGetTimestampTz(v);
		d->deferred = !isnull && d->deliver_at > GetCurrentTimestamp();
		/* On an ordered endpoint, waiting behind an earlier event of its key. */
		if (DatumGetBool(col_datum(tup, desc, c_blocked, &isnull)))
		{
			d->deferred = true;
			d->deliver_at = GetCurrentTimestamp();
		}
		d->attempt = d->deferred ? 0 : 1;
	}
	link_same_key(b);
	b->last_id = b->d[b->n - 1].id;
	/* A page that the byte budget ended is no sign the batch is done. */
	bytes_cut = DatumGetBool(col_datum(SPI_tuptable->vals[b->n - 1], desc,
									   SPI_fnumber(desc, "bytes_cut"), &cut_null));
	b->batch_done = b->n < limit && !bytes_cut;
	/* Copied: SPI's copy goes now, not with the round's last read. */
	SPI_freetuptable(SPI_tuptable);
	return b;
}

/*
 * The due retries of ep, or NULL when none is due.  _read_due returns one
 * event per key on an ordered endpoint, so no delivery waits for another.
 */
Batch *
store_read_due(RelayEndpoint *ep, int limit, MemoryContext parent)
{
	Batch	   *b;
	int			c_attempts;

	if (due_plan == NULL)
	{
		Oid			types[4] = {INT4OID, INT4OID, BOOLOID, INT8OID};

		due_plan = outbox_prepare_kept("SELECT id, event_id, attempts, key, body, header_lines, delivered "
									   "FROM outbox._read_due($1, $2, $3, $4)", 4, types);
	}
	b = read_batch(due_plan, ep, false, limit, ep->verify_due, parent);
	if (b == NULL)
		return NULL;

	c_attempts = SPI_fnumber(SPI_tuptable->tupdesc, "attempts");
	for (int i = 0; i < b->n; i++)
	{
		bool		isnull;

		b->d[i].attempt = DatumGetInt32(col_datum(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
												  c_attempts, &isnull)) + 1;
	}
	SPI_freetuptable(SPI_tuptable);
	return b;
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

/*
 * Record, in one statement, the outcomes of the deliveries of b that are
 * finished and not recorded yet; with complete (nothing of b left in
 * flight), a page's position moves past it too.  Returns false when a
 * concurrent transaction holds the endpoint (nothing was recorded: try
 * again later); true otherwise, also when the endpoint is gone.  The
 * caller marks the deliveries recorded once the transaction committed.
 */
bool
store_record(Batch *b, bool complete)
{
	int			n = 0;
	Datum		args[14];
	char		argnulls[14];
	Datum	   *ids = palloc(sizeof(Datum) * b->n);
	Datum	   *event_ids = palloc(sizeof(Datum) * b->n);
	Datum	   *attempts = palloc(sizeof(Datum) * b->n);
	Datum	   *outcomes = palloc(sizeof(Datum) * b->n);
	Datum	   *next_ats = palloc(sizeof(Datum) * b->n);
	bool	   *next_nulls = palloc(sizeof(bool) * b->n);
	Datum	   *statuses = palloc(sizeof(Datum) * b->n);
	bool	   *status_nulls = palloc(sizeof(bool) * b->n);
	Datum	   *errors = palloc(sizeof(Datum) * b->n);
	bool	   *error_nulls = palloc(sizeof(bool) * b->n);
	Datum	   *durations = palloc(sizeof(Datum) * b->n);
	bool	   *duration_nulls = palloc(sizeof(bool) * b->n);
	Datum	   *responses = palloc(sizeof(Datum) * b->n);
	bool	   *response_nulls = palloc(sizeof(bool) * b->n);
	int			rc;

	if (record_plan == NULL)
	{
		Oid			types[14] = {INT4OID, TEXTOID, INT8OID, BOOLOID,
			INT8ARRAYOID, UUIDARRAYOID, INT4ARRAYOID, TEXTARRAYOID,
			TIMESTAMPTZARRAYOID, INT4ARRAYOID, TEXTARRAYOID,
		FLOAT4ARRAYOID, TEXTARRAYOID, TEXTOID};

		record_plan = outbox_prepare_kept("SELECT outbox._record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
							  14, types);
	}

	for (int i = 0; i < b->n; i++)
	{
		Delivery   *d = &b->d[i];
		bool		sent = !d->deferred && !d->already;

		if (d->state != DELIVERY_DONE || d->recorded)
			continue;
		ids[n] = Int64GetDatum(d->id);
		event_ids[n] = UUIDPGetDatum(&d->event_id);
		attempts[n] = Int32GetDatum(d->attempt);
		outcomes[n] = CStringGetTextDatum(d->outcome);
		next_nulls[n] = d->next_at == 0;
		next_ats[n] = TimestampTzGetDatum(d->next_at);
		status_nulls[n] = !sent || d->req.status == 0;
		statuses[n] = Int32GetDatum((int32) d->req.status);
		error_nulls[n] = !sent || d->req.error[0] == '\0';
		errors[n] = error_nulls[n] ? (Datum) 0 : CStringGetTextDatum(d->req.error);
		duration_nulls[n] = !sent;
		durations[n] = Float4GetDatum((float4) d->req.duration_ms);
		response_nulls[n] = !sent || d->req.response_len == 0;
		responses[n] = response_nulls[n] ? (Datum) 0 :
			PointerGetDatum(cstring_to_text_with_len(d->req.response, d->req.response_len));
		n++;
	}

	args[0] = Int32GetDatum(b->ep->id);
	args[1] = b->snap ? CStringGetTextDatum(b->snap) : (Datum) 0;
	args[2] = Int64GetDatum(b->last_id);
	args[3] = BoolGetDatum(b->batch_done);
	args[4] = build_array(ids, NULL, n, INT8OID);
	args[5] = build_array(event_ids, NULL, n, UUIDOID);
	args[6] = build_array(attempts, NULL, n, INT4OID);
	args[7] = build_array(outcomes, NULL, n, TEXTOID);
	args[8] = build_array(next_ats, next_nulls, n, TIMESTAMPTZOID);
	args[9] = build_array(statuses, status_nulls, n, INT4OID);
	args[10] = build_array(errors, error_nulls, n, TEXTOID);
	args[11] = build_array(durations, duration_nulls, n, FLOAT4OID);
	args[12] = build_array(responses, response_nulls, n, TEXTOID);
	args[13] = b->disable_reason ? CStringGetTextDatum(b->disable_reason) : (Datum) 0;
	for (int i = 0; i < 14; i++)
		argnulls[i] = ' ';
	/* The position moves only once nothing of the page is in flight. */
	if (b->snap == NULL || !b->is_page || !complete)
		argnulls[1] = 'n';
	if (b->disable_reason == NULL)
		argnulls[13] = 'n';

	rc = SPI_execute_plan(record_plan, args, argnulls, false, 0);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "recording outcomes failed: %s", SPI_result_code_string(rc));
	{
		bool		isnull;

		return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
}
