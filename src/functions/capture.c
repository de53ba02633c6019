/*-------------------------------------------------------------------------
 *
 * capture.c
 *	  outbox.capture(): the AFTER ... FOR EACH ROW trigger that turns a row
 *	  change into an event, <prefix>.inserted, .updated or .deleted, keyed
 *	  by the primary key (or by the column named by its second argument).
 *
 * The payload is to_jsonb() of the row (of OLD for a delete), and for an
 * update {"old": to_jsonb(OLD), "new": to_jsonb(NEW)}.  The key is the key
 * column's value as ->> reads it from that JSON, or for a primary key of
 * several columns their values in index order joined with ",", a NULL
 * one as empty.  A table without a primary key gives events without a key.
 *
 * It runs with the rights of the role that changed the row, not the
 * extension owner's: to_jsonb() of a row can call casts of the table
 * owner's choosing.  That role needs USAGE on schema outbox and EXECUTE on
 * outbox.emit(), as when it emits itself; the event is appended as emit()
 * appends it (append.c).  What a statement's rows share (the event types,
 * the key columns, the rights) is worked out at its first row and kept in
 * the trigger's fn_extra.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_index.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_func.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "compat.h"
#include "functions/append.h"
#include "functions/emit.h"
#include "functions/validate.h"

PG_FUNCTION_INFO_V1(capture);

/* What the rows of one statement share; in the trigger's fn_extra. */
typedef struct CaptureState
{
	Oid			relid;
	Oid			checked_user;	/* rights checked for this role */
	FmgrInfo	to_jsonb;		/* to_jsonb() of the table's row type */
	Datum		types[3];		/* text: prefix.inserted, .updated, .deleted,
								 * each checked at its first use; 0 before */
	int			nkeys;			/* key columns; 0: events without a key */
	char	  **keys;
	bool		named_key;		/* the key column is the trigger's argument */
} CaptureState;

enum
{
	CHANGE_INSERT,
	CHANGE_UPDATE,
	CHANGE_DELETE
};

static const char *const suffixes[3] = {"inserted", "updated", "deleted"};

/* Refuse a role that could not call outbox.emit() itself. */
static void
check_rights(void)
{
	Oid			namespace = get_namespace_oid("outbox", false);
	Oid			argtypes[8] = {TEXTOID, JSONBOID, TEXTOID, JSONBOID, TIMESTAMPTZOID,
	TEXTOID, TIMESTAMPTZOID, INT4OID};
	Oid			emit;
	AclResult	acl;

	acl = object_aclcheck(NamespaceRelationId, namespace, GetUserId(), ACL_USAGE);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_SCHEMA, "outbox");
	emit = LookupFuncName(list_make2(makeString("outbox"), makeString("emit")),
						  8, argtypes, false);
	acl = object_aclcheck(ProcedureRelationId, emit, GetUserId(), ACL_EXECUTE);
	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_FUNCTION, "emit");
}

/*
 * The primary key's columns of rel, in index order, into state: every
 * column of the index (INCLUDE ones too), deferrable or not, as the
 * PL/pgSQL function of before read them from pg_index.
 */
static void
primary_key_columns(CaptureState *state, Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	state->nkeys = 0;
	foreach(lc, indexes)
	{
		HeapTuple	tuple = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		Form_pg_index form;

		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "cache lookup failed for index %u", lfirst_oid(lc));
		form = (Form_pg_index) GETSTRUCT(tuple);
		if (form->indisprimary)
		{
			state->nkeys = form->indnatts;
			state->keys = palloc(sizeof(char *) * state->nkeys);
			for (int i = 0; i < state->nkeys; i++)
				state->keys[i] = get_attname(RelationGetRelid(rel), form->indkey.values[i], false);
		}
		ReleaseSysCache(tuple);
		if (state->nkeys > 0)
			break;
	}
	list_free(indexes);
}

static CaptureState *
capture_state(FunctionCallInfo fcinfo, TriggerData *td)
{
	CaptureState *state = fcinfo->flinfo->fn_extra;
	Relation	rel = td->tg_relation;
	MemoryContext old;

	if (state != NULL && state->relid == RelationGetRelid(rel))
	{
		if (state->checked_user != GetUserId())
		{
			check_rights();
			state->checked_user = GetUserId();
		}
		return state;
	}

	if (td->tg_trigger->tgnargs < 1 || td->tg_trigger->tgnargs > 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("outbox.capture() takes one or two arguments"),
				 errdetail("The first names the event type prefix, the optional second the key column.")));
	check_rights();

	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	state = palloc0(sizeof(CaptureState));
	state->relid = RelationGetRelid(rel);
	state->checked_user = GetUserId();
	fmgr_info_cxt(F_TO_JSONB, &state->to_jsonb, fcinfo->flinfo->fn_mcxt);
	/* to_jsonb() learns its argument's type from the call expression */
	state->to_jsonb.fn_expr = (Node *)
		makeFuncExpr(F_TO_JSONB, JSONBOID,
					 list_make1(makeNullConst(rel->rd_rel->reltype, -1, InvalidOid)),
					 InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
	if (td->tg_trigger->tgnargs == 2)
	{
		state->named_key = true;
		state->nkeys = 1;
		state->keys = palloc(sizeof(char *));
		state->keys[0] = pstrdup(td->tg_trigger->tgargs[1]);
	}
	else
		primary_key_columns(state, rel);
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = state;
	return state;
}

static Jsonb *
row_to_jsonb(CaptureState *state, HeapTuple tuple, TupleDesc desc)
{
	Datum		row = heap_copy_tuple_as_datum(tuple, desc);

	return DatumGetJsonbP(FunctionCall1(&state->to_jsonb, row));
}

/*
 * The member name of the object rec as ->> reads it: NULL for a JSON null
 * (or, with *found false, for no such member).
 */
static char *
member_text(Jsonb *rec, const char *name, bool *found)
{
	JsonbValue	k;
	JsonbValue *v;

	k.type = jbvString;
	k.val.string.val = (char *) name;
	k.val.string.len = strlen(name);
	v = findJsonbValueFromContainer(&rec->root, JB_FOBJECT, &k);
	*found = v != NULL;
	if (v == NULL)
		return NULL;
	switch (v->type)
	{
		case jbvNull:
			return NULL;
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   NumericGetDatum(v->val.numeric)));
		case jbvBinary:
			return JsonbToCString(NULL, v->val.binary.data, v->val.binary.len);
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
	return NULL;
}

/* The event's key from rec (see the file header); NULL for none. */
static text *
event_key(CaptureState *state, Jsonb *rec, Relation rel)
{
	StringInfoData buf;
	bool		found;
	char	   *value;

	if (state->nkeys == 0)
		return NULL;
	if (state->nkeys == 1)
	{
		value = member_text(rec, state->keys[0], &found);
		if (!found && state->named_key)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("column \"%s\" does not exist in table %s", state->keys[0],
							quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
													   RelationGetRelationName(rel)))));
		return value == NULL ? NULL : cstring_to_text(value);
	}
	initStringInfo(&buf);
	for (int i = 0; i < state->nkeys; i++)
	{
		value = member_text(rec, state->keys[i], &found);
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		if (value != NULL)
			appendStringInfoString(&buf, value);
	}
	return cstring_to_text_with_len(buf.data, buf.len);
}

/* {"old": old, "new": new} */
static Jsonb *
old_and_new(Jsonb *old, Jsonb *new)
{
	JsonbParseState *parse = NULL;
	JsonbValue	v;
	JsonbValue *result;
	Jsonb	   *members[2] = {old, new};
	const char *names[2] = {"old", "new"};

	pushJsonbValue(&parse, WJB_BEGIN_OBJECT, NULL);
	for (int i = 0; i < 2; i++)
	{
		v.type = jbvString;
		v.val.string.val = (char *) names[i];
		v.val.string.len = 3;
		pushJsonbValue(&parse, WJB_KEY, &v);
		v.type = jbvBinary;
		v.val.binary.data = &members[i]->root;
		v.val.binary.len = VARSIZE(members[i]) - VARHDRSZ;
		pushJsonbValue(&parse, WJB_VALUE, &v);
	}
	result = pushJsonbValue(&parse, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(result);
}

Datum
capture(PG_FUNCTION_ARGS)
{
	TriggerData *td;
	CaptureState *state;
	TupleDesc	desc;
	Jsonb	   *rec;
	Jsonb	   *payload;
	text	   *key;
	int			change;
	pg_uuid_t	event_id;
	AppendEvent event;
	Appender   *appender;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("outbox.capture() must be an AFTER ... FOR EACH ROW trigger")));
	td = (TriggerData *) fcinfo->context;
	if (!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_AFTER(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("outbox.capture() must be an AFTER ... FOR EACH ROW trigger")));
	state = capture_state(fcinfo, td);
	desc = RelationGetDescr(td->tg_relation);

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
	{
		change = CHANGE_INSERT;
		rec = row_to_jsonb(state, td->tg_trigtuple, desc);
		payload = rec;
	}
	else if (TRIGGER_FIRED_BY_UPDATE(td->tg_event))
	{
		change = CHANGE_UPDATE;
		rec = row_to_jsonb(state, td->tg_newtuple, desc);
		payload = old_and_new(row_to_jsonb(state, td->tg_trigtuple, desc), rec);
	}
	else if (TRIGGER_FIRED_BY_DELETE(td->tg_event))
	{
		change = CHANGE_DELETE;
		rec = row_to_jsonb(state, td->tg_trigtuple, desc);
		payload = rec;
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("outbox.capture() must be an AFTER ... FOR EACH ROW trigger")));

	if (state->types[change] == (Datum) 0)
	{
		char	   *type = psprintf("%s.%s", td->tg_trigger->tgargs[0], suffixes[change]);

		MemoryContext old;

		outbox_check_event_type(type, strlen(type));
		old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		state->types[change] = PointerGetDatum(cstring_to_text(type));
		MemoryContextSwitchTo(old);
	}
	key = event_key(state, rec, td->tg_relation);
	(void) outbox_check_payload(JsonbPGetDatum(payload), false);
	outbox_check_key(PointerGetDatum(key), key == NULL, "key");

	memset(&event, 0, sizeof(event));
	outbox_make_event_id(&event_id);
	event.event_id = &event_id;
	event.event_type = state->types[change];
	event.payload = JsonbPGetDatum(payload);
	event.key_null = key == NULL;
	event.key = PointerGetDatum(key);
	event.headers_null = true;
	event.deliver_at_null = true;
	event.expires_at_null = true;

	appender = outbox_append_begin();
	outbox_append(appender, &event);
	outbox_append_end(appender);
	outbox_emitted();

	return PointerGetDatum(NULL);
}
