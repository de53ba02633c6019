-- Installing the extension, and the SQL surface it creates.  A change to any
-- object, signature, volatility or privilege shows up here.
CREATE EXTENSION outbox;

-- Test helper used by the later files: run a statement and return "ok", or
-- the SQLSTATE and message of the error it raised.  The statement runs in a
-- subtransaction, so the caller's transaction goes on.
CREATE FUNCTION try(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- Version, and the schema the install script made for itself.
SELECT e.extname, e.extversion, n.nspname AS ext_schema
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'outbox';
SELECT nspname FROM pg_namespace WHERE nspname = 'outbox';

-- Every object that belongs to the extension.  From PostgreSQL 17 the row
-- types of tables and views and the array types are members too; each
-- follows its relation or element type, and is left out here so that the
-- list is the same on every version.
SELECT pg_describe_object(classid, objid, objsubid) AS member
  FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass
   AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
   AND deptype = 'e'
   AND NOT (classid = 'pg_type'::regclass AND objid IN (
        SELECT t.oid FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
            OR EXISTS (SELECT FROM pg_type e WHERE e.typarray = t.oid)))
 ORDER BY pg_describe_object(classid, objid, objsubid) COLLATE "C";

-- Relations in schema outbox: kind, persistence (all logged), partitioning.
SELECT c.relname, c.relkind, c.relpersistence, c.relispartition
  FROM pg_class c
 WHERE c.relnamespace = 'outbox'::regnamespace
 ORDER BY c.relname COLLATE "C";

-- Table columns.
SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull
  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'p')
   AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY c.relname COLLATE "C", a.attnum;

-- Functions: signature, result, language, volatility, SECURITY DEFINER, and
-- whether search_path is pinned.
SELECT p.oid::regprocedure AS function,
       pg_get_function_result(p.oid) AS result,
       l.lanname, p.provolatile, p.proisstrict AS strict, p.prosecdef AS secdef,
       p.proconfig
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'outbox'::regnamespace
 ORDER BY p.proname COLLATE "C", p.oid::regprocedure::text COLLATE "C";

-- Full argument lists of the public functions (names and defaults are API).
SELECT p.proname, pg_get_function_arguments(p.oid) AS arguments
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname !~ '^_'
 ORDER BY p.proname COLLATE "C", p.oid::regprocedure::text COLLATE "C";

-- Every SECURITY DEFINER function pins search_path to pg_catalog, pg_temp.
SELECT p.oid::regprocedure AS unpinned_secdef
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace AND p.prosecdef
   AND NOT coalesce(p.proconfig @> '{"search_path=pg_catalog, pg_temp"}', false);

-- PUBLIC has no privilege on the schema or on anything in it.
SELECT 'schema' AS kind, nspname AS name, a.privilege_type
  FROM pg_namespace, aclexplode(coalesce(nspacl, acldefault('n', nspowner))) a
 WHERE nspname = 'outbox' AND a.grantee = 0
UNION ALL
SELECT 'relation', relname, a.privilege_type
  FROM pg_class, aclexplode(coalesce(relacl, acldefault('r', relowner))) a
 WHERE relnamespace = 'outbox'::regnamespace AND a.grantee = 0
UNION ALL
SELECT 'function', oid::regprocedure::text, a.privilege_type
  FROM pg_proc, aclexplode(coalesce(proacl, acldefault('f', proowner))) a
 WHERE pronamespace = 'outbox'::regnamespace AND a.grantee = 0;

-- Tables holding user data are dumped by pg_dump.
SELECT dumped FROM (SELECT unnest(extconfig)::regclass AS dumped
                      FROM pg_extension WHERE extname = 'outbox') d
 ORDER BY dumped::text COLLATE "C";

-- Every object is documented.
-- (Identity sequences are implicit and need none.)
SELECT c.oid::regclass AS uncommented_relation
  FROM pg_class c
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
   AND NOT c.relispartition AND obj_description(c.oid, 'pg_class') IS NULL
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'i');
SELECT p.oid::regprocedure AS uncommented_function
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace AND obj_description(p.oid, 'pg_proc') IS NULL;

-- The GUCs, with their defaults, units and contexts.
SELECT name, setting, unit, context, boot_val
  FROM pg_settings WHERE name LIKE 'outbox.%' ORDER BY name COLLATE "C";

-- The rotation state starts with one row at slot 0.
SELECT singleton, cur_slot FROM outbox.queue;
