/*-------------------------------------------------------------------------
 *
 * append.c
 *	  Append events to the current partition of outbox.events with the
 *	  executor's tuple routines, as logical replication's apply worker
 *	  inserts rows: no statement is parsed, planned or run through SPI.
 *
 * What a call of emit() cost through SPI (an INSERT ... SELECT planned once
 * and kept, the partition found by tuple routing, SECURITY DEFINER with a
 * SET search_path) was most of what separated it from a bare INSERT of the
 * same row (DESIGN.md, "Emit").  Here the slot is read from outbox.queue in
 * the caller's snapshot, as the INSERT ... SELECT read it, the partition of
 * that slot is opened directly, and each event is stored as
 * ExecSimpleRelationInsert stores a row: constraints, indexes and row
 * triggers, as an INSERT would (not the partition's bound: the slot column
 * is the partition's by construction; nor statement triggers).  The locks are an INSERT's:
 * RowExclusiveLock on outbox.events and on the partition, AccessShareLock
 * on outbox.queue, held to the end of the transaction, so rotation
 * (outbox._rotate) waits for an emitter as it did.
 *
 * No privilege is checked on the tables: the caller's right to emit is its
 * EXECUTE on the function, and nothing here runs code a user chose (no
 * cast, no operator, no search_path lookup).  The column values come from
 * the caller, checked by emit.c.  Columns are found by name in the
 * partition, so a database whose SQL is older than this library (its
 * events without expires_at and priority) takes events as before.
 *
 * Callers run inside a transaction with an active snapshot (any SQL
 * function call does).  The relation ids are kept for the backend's life
 * and forgotten when the relation cache says one of them changed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/xid8.h"

#include "compat.h"
#include "functions/append.h"

#define NSLOTS 3

/* The columns of outbox.events that emit() fills, by name. */
typedef enum EventColumn
{
	COL_ID,
	COL_SLOT,
	COL_EVENT_ID,
	COL_TXID,
	COL_EVENT_TYPE,
	COL_PAYLOAD,
	COL_KEY,
	COL_HEADERS,
	COL_DELIVER_AT,
	COL_CREATED_AT,
	COL_EXPIRES_AT,
	COL_PRIORITY,
	NCOLUMNS
} EventColumn;

static const char *const column_names[NCOLUMNS] = {
	"id", "slot", "event_id", "txid", "event_type", "payload", "key",
	"headers", "deliver_at", "created_at", "expires_at", "priority"
};

static const Oid column_types[NCOLUMNS] = {
	INT8OID, INT2OID, UUIDOID, XID8OID, TEXTOID, JSONBOID, TEXTOID,
	JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT2OID
};

/* Columns a version of the events table may lack (those 1.5 added). */
#define COLUMN_OPTIONAL(c)	((c) == COL_EXPIRES_AT || (c) == COL_PRIORITY)

/*
 * The relations emit() writes, looked up by name once.  attnums[s] maps
 * each column to its attribute number in partition s (0: it has none),
 * worked out when that partition is first written.
 */
typedef struct AppendCatalog
{
	bool		valid;
	bool		callback_registered;
	bool		loading;		/* load_catalog is looking the names up */
	uint64		invalidations;	/* of these relations, or while loading */
	Oid			events;
	Oid			partitions[NSLOTS];
	Oid			queue;
	Oid			sequence;
	AttrNumber	cur_slot_attnum;
	bool		mapped[NSLOTS];
	AttrNumber	attnums[NSLOTS][NCOLUMNS];
} AppendCatalog;

static AppendCatalog catalog;

static void look_up_catalog(void);

struct Appender
{
	Relation	events;
	Relation	partition;
	const AttrNumber *attnums;
	int16		slot;
	EState	   *estate;
	ResultRelInfo *result;
	TupleTableSlot *tuple;
	Datum		txid;
	Datum		created_at;
};

/*
 * The relation cache says relid changed (InvalidOid: everything may have).
 * While the names are being looked up any change counts, since the ids
 * are not all known yet.
 */
static void
forget_catalog(Datum arg, Oid relid)
{
	bool		ours = catalog.loading || relid == InvalidOid ||
		relid == catalog.events || relid == catalog.queue || relid == catalog.sequence;

	for (int s = 0; s < NSLOTS; s++)
		if (relid == catalog.partitions[s])
			ours = true;
	if (ours)
	{
		catalog.valid = false;
		catalog.invalidations++;
	}
}

static Oid
lookup_relation(Oid namespace, const char *name)
{
	Oid			relid = get_relname_relid(name, namespace);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"outbox.%s\" does not exist", name),
				 errhint("The extension's objects were changed by hand; reinstall it.")));
	return relid;
}

/*
 * Look the relations up by name, again until no invalidation came in
 * meanwhile (a lookup can take them in).
 */
static void
load_catalog(void)
{
	if (!catalog.callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_catalog, (Datum) 0);
		catalog.callback_registered = true;
	}
	while (!catalog.valid)
	{
		uint64		seen = catalog.invalidations;

		catalog.loading = true;
		look_up_catalog();
		catalog.loading = false;
		catalog.valid = catalog.invalidations == seen;
	}
}

static void
look_up_catalog(void)
{
	Oid			namespace;

	namespace = get_namespace_oid("outbox", false);
	catalog.events = lookup_relation(namespace, "events");
	catalog.queue = lookup_relation(namespace, "queue");
	catalog.sequence = lookup_relation(namespace, "event_seq");
	for (int s = 0; s < NSLOTS; s++)
	{
		char		name[NAMEDATALEN];

		snprintf(name, sizeof(name), "events_%d", s);
		catalog.partitions[s] = lookup_relation(namespace, name);
		catalog.mapped[s] = false;
	}
	catalog.cur_slot_attnum = get_attnum(catalog.queue, "cur_slot");
	if (catalog.cur_slot_attnum == InvalidAttrNumber)
		elog(ERROR, "outbox.queue has no column cur_slot");
}

/* Map the columns of partition s, open as rel. */
static void
map_columns(int s, Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	memset(catalog.attnums[s], 0, sizeof(catalog.attnums[s]));
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped)
			continue;
		for (int c = 0; c < NCOLUMNS; c++)
			if (strcmp(NameStr(att->attname), column_names[c]) == 0)
			{
				if (att->atttypid != column_types[c])
					elog(ERROR, "column \"%s\" of relation \"%s\" has type %s, not %s",
						 column_names[c], RelationGetRelationName(rel),
						 format_type_be(att->atttypid), format_type_be(column_types[c]));
				catalog.attnums[s][c] = att->attnum;
			}
	}
	for (int c = 0; c < NCOLUMNS; c++)
		if (catalog.attnums[s][c] == 0 && !COLUMN_OPTIONAL(c))
			elog(ERROR, "relation \"%s\" has no column \"%s\"",
				 RelationGetRelationName(rel), column_names[c]);
	catalog.mapped[s] = true;
}

/*
 * The slot emit() appends to now: outbox.queue's, in the active snapshot
 * (the statement's).  A long statement may go on appending to a slot that
 * rotation closed meanwhile; rotation empties a slot only under an ACCESS
 * EXCLUSIVE lock, which waits for the emitter's transaction, and only once
 * no position owes an event of it.
 */
static int16
current_slot(void)
{
	Relation	queue = table_open(catalog.queue, AccessShareLock);
	TableScanDesc scan;
	HeapTuple	tuple;
	Datum		value;
	bool		isnull;
	int16		slot;

	scan = table_beginscan(queue, GetActiveSnapshot(), 0, NULL);
	tuple = heap_getnext(scan, ForwardScanDirection);
	if (tuple == NULL)
		elog(ERROR, "outbox.queue has no row");
	value = heap_getattr(tuple, catalog.cur_slot_attnum, RelationGetDescr(queue), &isnull);
	if (isnull)
		elog(ERROR, "outbox.queue.cur_slot is NULL");
	slot = DatumGetInt16(value);
	table_endscan(scan);
	table_close(queue, NoLock);
	if (slot < 0 || slot >= NSLOTS)
		elog(ERROR, "outbox.queue.cur_slot is %d", slot);
	return slot;
}

/*
 * Get ready to append events in the calling transaction: refused where an
 * INSERT would be (a read-only transaction, a standby, parallel mode).
 * The appender lives in the current memory context until
 * outbox_append_end; on an error the transaction's end cleans up after it.
 */
Appender *
outbox_append_begin(void)
{
	Appender   *a;
	RangeTblEntry *rte;

	PreventCommandIfReadOnly("emit()");
	PreventCommandIfParallelMode("emit()");
	if (!ActiveSnapshotSet())
		elog(ERROR, "emit() needs an active snapshot");

	load_catalog();
	a = palloc0(sizeof(Appender));
	a->slot = current_slot();
	a->events = table_open(catalog.events, RowExclusiveLock);
	a->partition = table_open(catalog.partitions[a->slot], RowExclusiveLock);
	if (a->partition->rd_rel->relkind != RELKIND_RELATION)
		elog(ERROR, "relation \"%s\" is not a table", RelationGetRelationName(a->partition));
	/* The lock may have waited for a change of the tables: look again. */
	load_catalog();
	if (catalog.partitions[a->slot] != RelationGetRelid(a->partition))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not emit: outbox's events partitions changed meanwhile"),
				 errhint("Try the transaction again.")));
	if (!catalog.mapped[a->slot])
		map_columns(a->slot, a->partition);
	a->attnums = catalog.attnums[a->slot];

	a->estate = CreateExecutorState();
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(a->partition);
	rte->relkind = RELKIND_RELATION;
	rte->rellockmode = RowExclusiveLock;
	outbox_init_range_table(a->estate, rte);
	a->result = makeNode(ResultRelInfo);
	InitResultRelInfo(a->result, a->partition, 1, NULL, 0);
	/* so that ExecCloseResultRelations closes its indexes and what triggers open */
	a->estate->es_opened_result_relations = list_make1(a->result);
	a->estate->es_output_cid = GetCurrentCommandId(true);
	ExecOpenIndices(a->result, false);
	a->tuple = MakeSingleTupleTableSlot(RelationGetDescr(a->partition),
										table_slot_callbacks(a->partition));
	AfterTriggerBeginQuery();

	/* pg_current_xact_id() and now(), as the INSERT wrote them */
	a->txid = FullTransactionIdGetDatum(GetTopFullTransactionId());
	a->created_at = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	return a;
}

static void
set_column(Appender *a, EventColumn c, Datum value, bool isnull)
{
	AttrNumber	attnum = a->attnums[c];

	if (attnum == 0)
	{
		if (isnull)
			return;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("this database's outbox has no column %s", column_names[c]),
				 errhint("Run ALTER EXTENSION outbox UPDATE.")));
	}
	a->tuple->tts_values[attnum - 1] = value;
	a->tuple->tts_isnull[attnum - 1] = isnull;
}

/*
 * Store the tuple as ExecSimpleRelationInsert would, without its check of
 * the partition's bound: the slot column is the partition's own by
 * construction, and that check (an expression planned on every call) cost
 * a tenth of an emit.  Constraints, indexes and row triggers as an INSERT;
 * a BEFORE trigger that skips the row is an error, as it was when a
 * statement inserted the event.
 */
static void
insert_tuple(Appender *a, TupleTableSlot *tuple)
{
	ResultRelInfo *result = a->result;
	List	   *recheck = NIL;

	if (result->ri_TrigDesc && result->ri_TrigDesc->trig_insert_before_row &&
		!ExecBRInsertTriggers(a->estate, result, tuple))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("a trigger on outbox.%s suppressed an event", RelationGetRelationName(a->partition)),
				 errdetail("Triggers on outbox's tables must not skip rows.")));
	if (a->partition->rd_att->constr)
		ExecConstraints(result, tuple, a->estate);
	table_tuple_insert(a->partition, tuple, a->estate->es_output_cid, 0, NULL);
	if (result->ri_NumIndices > 0)
		recheck = outbox_insert_index_tuples(result, tuple, a->estate);
	ExecARInsertTriggers(a->estate, result, tuple, recheck, NULL);
	list_free(recheck);
}

/* Append one event.  Its id is drawn from outbox.event_seq here. */
void
outbox_append(Appender *a, const AppendEvent *e)
{
	TupleTableSlot *tuple = a->tuple;
	int64		id;

	ExecClearTuple(tuple);
	memset(tuple->tts_isnull, true, tuple->tts_tupleDescriptor->natts * sizeof(bool));

	id = nextval_internal(catalog.sequence, false);
	set_column(a, COL_ID, Int64GetDatum(id), false);
	set_column(a, COL_SLOT, Int16GetDatum(a->slot), false);
	set_column(a, COL_EVENT_ID, UUIDPGetDatum(e->event_id), false);
	set_column(a, COL_TXID, a->txid, false);
	set_column(a, COL_EVENT_TYPE, e->event_type, false);
	set_column(a, COL_PAYLOAD, e->payload, false);
	set_column(a, COL_KEY, e->key, e->key_null);
	set_column(a, COL_HEADERS, e->headers, e->headers_null);
	set_column(a, COL_DELIVER_AT, e->deliver_at, e->deliver_at_null);
	set_column(a, COL_CREATED_AT, a->created_at, false);
	set_column(a, COL_EXPIRES_AT, e->expires_at, e->expires_at_null);
	set_column(a, COL_PRIORITY, Int16GetDatum(e->priority), e->priority == 0);
	ExecStoreVirtualTuple(tuple);
	insert_tuple(a, tuple);
	ResetPerTupleExprContext(a->estate);
}

/*
 * Fire what after-row triggers queued, and release the appender: the
 * partition, its indexes and what triggers opened are closed (their
 * locks kept to the transaction's end).
 */
void
outbox_append_end(Appender *a)
{
	AfterTriggerEndQuery(a->estate);
	ExecDropSingleTupleTableSlot(a->tuple);
	ExecResetTupleTable(a->estate->es_tupleTable, false);
	/* the indexes, and the relations triggers opened */
	ExecCloseResultRelations(a->estate);
	FreeExecutorState(a->estate);
	table_close(a->partition, NoLock);
	table_close(a->events, NoLock);
	pfree(a);
}

/* The owner of outbox.events: the extension's owner. */
Oid
outbox_append_owner(void)
{
	HeapTuple	tuple;
	Oid			owner;

	load_catalog();
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(catalog.events));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", catalog.events);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}
