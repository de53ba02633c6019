/*-------------------------------------------------------------------------
 *
 * compat.h
 *		What differs between the PostgreSQL major versions outbox builds
 *		against (15, 17 and 18), in one place.
 *
 * The code is written against the newest server API.  Where an older
 * server lacks a name the code uses, this header provides it (the
 * object_aclcheck() family, PostgreSQL 16); where a function changed its
 * arguments between versions, the code calls a small outbox_ wrapper
 * defined here, whose arguments are the same on every version.  The
 * PG_VERSION_NUM tests of the C code are in this file alone.
 *
 * Include it after postgres.h.  It holds no state (macros, one typedef and
 * static inline functions), and is safe in any process and under any lock.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_COMPAT_H
#define OUTBOX_COMPAT_H

#include "common/base64.h"
#include "common/jsonapi.h"
#include "executor/executor.h"
#include "nodes/pg_list.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#if PG_VERSION_NUM < 150000
#error "outbox needs PostgreSQL 15 or later"
#endif

/* PostgreSQL 16 moved the varlena macros (VARDATA_ANY, ...) out of postgres.h. */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

/*
 * A function that does not return: PostgreSQL 18 has pg_noreturn, written
 * before the declaration, in place of pg_attribute_noreturn() after it.
 */
#ifndef pg_noreturn
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define pg_noreturn _Noreturn
#else
#define pg_noreturn __attribute__((noreturn))
#endif
#endif

/* PostgreSQL 17 names a backend's PGPROC by its number, MyProcNumber. */
#if PG_VERSION_NUM < 170000
#define MyProcNumber (MyProc->pgprocno)
#endif

/*
 * PostgreSQL 16 folded pg_<class>_aclcheck() and pg_<class>_ownercheck()
 * into object_aclcheck() and object_ownercheck(), which take the catalog's
 * OID.  On 15, the classes outbox checks map to the old functions; any
 * other is a coding error caught on the first call.
 */
#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
#endif

#if PG_VERSION_NUM < 160000
#include "catalog/pg_database.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"

static inline AclResult
object_aclcheck(Oid classid, Oid objectid, Oid roleid, AclMode mode)
{
	switch (classid)
	{
		case NamespaceRelationId:
			return pg_namespace_aclcheck(objectid, roleid, mode);
		case ProcedureRelationId:
			return pg_proc_aclcheck(objectid, roleid, mode);
	}
	elog(ERROR, "object_aclcheck() for catalog %u is not provided for PostgreSQL 15",
		 classid);
	return ACLCHECK_NO_PRIV;	/* keep the compiler quiet */
}

static inline bool
object_ownercheck(Oid classid, Oid objectid, Oid roleid)
{
	switch (classid)
	{
		case DatabaseRelationId:
			return pg_database_ownercheck(objectid, roleid);
	}
	elog(ERROR, "object_ownercheck() for catalog %u is not provided for PostgreSQL 15",
		 classid);
	return false;				/* keep the compiler quiet */
}
#endif

/*
 * Memory for a GUC check hook's *extra, which the GUC machinery frees: with
 * free() up to 15, with guc_free() from 16, so it must come from
 * guc_malloc() there.  NULL (after a LOG) when out of memory.
 */
static inline void *
outbox_guc_malloc(size_t size)
{
#if PG_VERSION_NUM >= 160000
	return guc_malloc(LOG, size);
#else
	return malloc(size);
#endif
}

/*
 * A WaitEventSet for nevents events that lives until FreeWaitEventSet() or
 * the end of the process, owned by no resource owner.  Up to 16 the first
 * argument of CreateWaitEventSet() is the memory context; from 17 it is a
 * resource owner, and the set is always allocated in TopMemoryContext.
 */
static inline WaitEventSet *
outbox_create_wait_event_set(int nevents)
{
#if PG_VERSION_NUM >= 170000
	return CreateWaitEventSet(NULL, nevents);
#else
	return CreateWaitEventSet(TopMemoryContext, nevents);
#endif
}

/*
 * Make the executor state's range table the one relation rte (a plain
 * relation, already opened and locked by the caller), as the logical
 * replication worker does for the table it applies to.  From 16 the
 * relation's permissions are an RTEPermissionInfo of their own, and from 18
 * the range table also says which relations were not pruned.  No permission
 * is checked here, on any version: the caller has done that.
 */
static inline void
outbox_init_range_table(EState *estate, RangeTblEntry *rte)
{
#if PG_VERSION_NUM >= 160000
	List	   *perminfos = NIL;

	addRTEPermissionInfo(&perminfos, rte);
#endif
#if PG_VERSION_NUM >= 180000
	ExecInitRangeTable(estate, list_make1(rte), perminfos, bms_make_singleton(1));
#elif PG_VERSION_NUM >= 160000
	ExecInitRangeTable(estate, list_make1(rte), perminfos);
#else
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/*
 * The index entries of a tuple just inserted into rri's relation (not an
 * update, no ON CONFLICT): ExecInsertIndexTuples() with the arguments of a
 * plain INSERT, which gained onlySummarizing in 16.  Returns the indexes
 * whose deferred constraints need a recheck, in the current memory context.
 */
static inline List *
outbox_insert_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot, EState *estate)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL, false);
#else
	return ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL);
#endif
}

/*
 * What a JSON parser callback (JsonSemAction's members) returns: from 16 a
 * JsonParseErrorType, before nothing.  A callback is declared
 * "static OutboxJsonResult f(...)" and ends with
 * "return OUTBOX_JSON_OK;".
 */
#if PG_VERSION_NUM >= 160000
typedef JsonParseErrorType OutboxJsonResult;
#define OUTBOX_JSON_OK JSON_SUCCESS
#else
typedef void OutboxJsonResult;
#define OUTBOX_JSON_OK
#endif

/*
 * A lexer over len bytes of json in the given encoding, allocated in the
 * current memory context.  From 17 the first argument is a context to fill
 * (NULL: allocate one) and the length a size_t.
 */
static inline JsonLexContext *
outbox_make_json_lex(const char *json, size_t len, int encoding, bool need_escapes)
{
#if PG_VERSION_NUM >= 170000
	return makeJsonLexContextCstringLen(NULL, json, len, encoding, need_escapes);
#else
	return makeJsonLexContextCstringLen((char *) json, (int) len, encoding, need_escapes);
#endif
}

/*
 * Base64 of bytes.  PostgreSQL 18 declares the bytes uint8, earlier versions
 * char; these take either.  Both return the length written, or -1 when dst is
 * too short (or, decoding, src is not base64).
 */
static inline int
outbox_b64_encode(const void *src, int len, char *dst, int dstlen)
{
#if PG_VERSION_NUM >= 180000
	return pg_b64_encode((const uint8 *) src, len, dst, dstlen);
#else
	return pg_b64_encode((const char *) src, len, dst, dstlen);
#endif
}

static inline int
outbox_b64_decode(const char *src, int len, void *dst, int dstlen)
{
#if PG_VERSION_NUM >= 180000
	return pg_b64_decode(src, len, (uint8 *) dst, dstlen);
#else
	return pg_b64_decode(src, len, (char *) dst, dstlen);
#endif
}

#endif							/* OUTBOX_COMPAT_H */
