-- Privileges and hijacking, beyond 07_privileges: every function and every
-- relation of schema outbox, for a role without grants, a role with only
-- USAGE on the schema, and a role with the grants docs/privileges.md recommends for an
-- application (emit and mark_processed).  Then objects a user creates in a
-- schema of its own (or in pg_temp) must not change what the SECURITY
-- DEFINER functions and the capture trigger do.

-- Something to protect, made by the superuser.
SELECT outbox.create_endpoint('sec-ep', 'https://example.com/hook',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') IS NOT NULL AS created;
SELECT md5(string_agg(e.name || e.url || e.event_types::text || e.headers::text || s.secret, ',' ORDER BY e.id))
       AS endpoints_before
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id \gset

CREATE ROLE regress_outbox_none LOGIN;
CREATE ROLE regress_outbox_usage LOGIN;
CREATE ROLE regress_outbox_app LOGIN;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_usage, regress_outbox_app;
-- docs/privileges.md.
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer),
                          outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer),
                          outbox.mark_processed(text, text),
                          outbox.mark_processed(text, uuid) TO regress_outbox_app;

-- Every call to try: each function with a valid-looking argument of each
-- type (not NULL: the planner folds a STRICT function of a NULL constant to
-- NULL without calling it, or checking the privilege to), and each relation
-- read, written, emptied and locked.
CREATE TABLE sec_calls (n serial PRIMARY KEY, kind text NOT NULL, obj text NOT NULL, call text NOT NULL);
INSERT INTO sec_calls (kind, obj, call)
SELECT 'function', p.proname,
       format('SELECT outbox.%I(%s)', p.proname,
              coalesce((SELECT string_agg(CASE format_type(t, NULL)
                                              WHEN 'text' THEN $$'sec-ep'$$
                                              WHEN 'jsonb' THEN $$'{}'::jsonb$$
                                              WHEN 'integer' THEN '1'
                                              WHEN 'smallint' THEN '0::smallint'
                                              WHEN 'bigint' THEN '1'
                                              WHEN 'numeric' THEN '1'
                                              WHEN 'boolean' THEN 'false'
                                              WHEN 'uuid' THEN $$'01890a5d-ac96-774b-bcce-b302099a8057'::uuid$$
                                              WHEN 'interval' THEN $$'1 second'::interval$$
                                              WHEN 'timestamp with time zone' THEN $$'2000-01-01'::timestamptz$$
                                              WHEN 'text[]' THEN $$'{*}'::text[]$$
                                              WHEN 'pg_snapshot' THEN $$'1:1:'::pg_snapshot$$
                                              WHEN 'xid8' THEN $$'1'::xid8$$
                                              ELSE format('%L::%s', '{}', format_type(t, NULL)) END,
                                          ', ' ORDER BY o)
                          FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a(t, o)), ''))
  FROM pg_proc p
 WHERE p.pronamespace = 'outbox'::regnamespace
 ORDER BY p.proname COLLATE "C", p.oid::regprocedure::text COLLATE "C";
INSERT INTO sec_calls (kind, obj, call)
SELECT CASE c.relkind WHEN 'v' THEN 'view' WHEN 'S' THEN 'sequence' ELSE 'table' END, c.relname, x.call
  FROM pg_class c
 CROSS JOIN LATERAL (SELECT a.attname FROM pg_attribute a
                     WHERE a.attrelid = c.oid AND a.attnum > 0 AND a.attidentity = ''
                     ORDER BY a.attnum LIMIT 1) a
 CROSS JOIN LATERAL (VALUES
         (1, format('SELECT * FROM %s LIMIT 1', c.oid::regclass)),
         (2, CASE WHEN c.relkind IN ('r', 'p') THEN format('INSERT INTO %s DEFAULT VALUES', c.oid::regclass) END),
         (3, CASE WHEN c.relkind IN ('r', 'p') THEN format('UPDATE %s SET %I = %I', c.oid::regclass, a.attname, a.attname) END),
         (4, CASE WHEN c.relkind IN ('r', 'p') THEN format('DELETE FROM %s', c.oid::regclass) END),
         (5, CASE WHEN c.relkind IN ('r', 'p') THEN format('TRUNCATE %s CASCADE', c.oid::regclass) END),
         (6, CASE WHEN c.relkind IN ('r', 'p', 'v') THEN format('LOCK TABLE %s IN ACCESS SHARE MODE', c.oid::regclass) END),
         (7, CASE WHEN c.relkind = 'S' THEN format('SELECT nextval(%L)', c.oid::regclass) END),
         (8, CASE WHEN c.relkind = 'S' THEN format('SELECT setval(%L, 1)', c.oid::regclass) END)) AS x(o, call)
 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
   AND x.call IS NOT NULL
 ORDER BY c.relname COLLATE "C", x.o;
GRANT SELECT ON sec_calls TO regress_outbox_none, regress_outbox_usage, regress_outbox_app;
-- (Counts are not shown: they grow with the schema.)
SELECT kind, count(*) > 0 AS covered FROM sec_calls GROUP BY kind ORDER BY kind COLLATE "C";

--------------------------------------------------------------------------
-- No grants at all: everything is refused at the schema.
--------------------------------------------------------------------------

BEGIN;
SET LOCAL ROLE regress_outbox_none;
CREATE TEMP TABLE sec_result ON COMMIT DROP AS
SELECT n, kind, obj, call, try(call) AS result FROM sec_calls;
SELECT obj, call, result FROM sec_result
 WHERE result <> '42501: permission denied for schema outbox' ORDER BY n;
-- Creating anything in the schema, or a capture trigger, is refused too.
SELECT try($$CREATE TABLE outbox.mine (x int)$$) AS create_table,
       try($$CREATE FUNCTION outbox.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'$$) AS create_function;
CREATE TEMP TABLE sec_own (id int PRIMARY KEY);
SELECT try($$CREATE TRIGGER sec_own_events AFTER INSERT ON sec_own
               FOR EACH ROW EXECUTE FUNCTION outbox.capture('own')$$) AS create_capture_trigger;
ROLLBACK;

--------------------------------------------------------------------------
-- USAGE on the schema and nothing else: every function and relation is
-- refused on its own privilege.
--------------------------------------------------------------------------

BEGIN;
SET LOCAL ROLE regress_outbox_usage;
CREATE TEMP TABLE sec_result ON COMMIT DROP AS
SELECT n, kind, obj, call, try(call) AS result FROM sec_calls;
-- Each is refused, naming the object it is about.
SELECT obj, call, result FROM sec_result
 WHERE result <> format('42501: permission denied for %s %s', kind, obj) ORDER BY n;
CREATE TEMP TABLE sec_own (id int PRIMARY KEY);
SELECT try($$CREATE TRIGGER sec_own_events AFTER INSERT ON sec_own
               FOR EACH ROW EXECUTE FUNCTION outbox.capture('own')$$) AS create_capture_trigger;
ROLLBACK;

--------------------------------------------------------------------------
-- The application role: emit and mark_processed work; nothing else does.
-- It cannot read or change endpoints or secrets, by any function, table or
-- view.
--------------------------------------------------------------------------

BEGIN;
SET LOCAL ROLE regress_outbox_app;
CREATE TEMP TABLE sec_result ON COMMIT DROP AS
SELECT n, kind, obj, call, try(call) AS result FROM sec_calls;
-- What is not refused for lack of privilege: the three granted functions
-- (emit() refuses "sec-ep" as an event type on its own).
SELECT obj, call, result FROM sec_result
 WHERE result <> format('42501: permission denied for %s %s', kind, obj) ORDER BY n;
-- The endpoint administration by name, with real arguments.
SELECT c AS call, try(c) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.create_endpoint('sec-app', 'https://attacker.example/')$$,
         $$SELECT outbox.alter_endpoint('sec-ep', url => 'https://attacker.example/')$$,
         $$SELECT outbox.alter_endpoint('sec-ep', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')$$,
         $$SELECT outbox.endpoint_secret('sec-ep')$$,
         $$SELECT outbox.rotate_secret('sec-ep')$$,
         $$SELECT outbox.rotate_secret('sec-ep', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')$$,
         $$SELECT outbox.retry_dead()$$,
         $$SELECT outbox.retry_dead('sec-ep')$$,
         $$SELECT outbox.replay('sec-ep', '-infinity')$$,
         $$SELECT outbox.drop_endpoint('sec-ep')$$,
         $$SELECT outbox.pause_endpoint('sec-ep')$$,
         $$SELECT outbox.resume_endpoint('sec-ep')$$,
         $$SELECT * FROM outbox.health()$$,
         $$SELECT * FROM outbox.endpoint_status$$,
         $$SELECT * FROM outbox.backlog$$,
         $$SELECT * FROM outbox.attempts$$,
         $$SELECT * FROM outbox.dead_letters$$,
         $$SELECT secret FROM outbox.endpoint_secrets$$,
         $$UPDATE outbox.endpoint_secrets SET secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'$$,
         $$UPDATE outbox.endpoints SET url = 'https://attacker.example/'$$,
         $$INSERT INTO outbox.endpoints (name, url, event_types) VALUES ('x', 'https://attacker.example/', '{*}')$$,
         $$DELETE FROM outbox.endpoints$$,
         $$SELECT outbox._read_page(1, 10, false, 1000)$$,
         $$SELECT outbox._record('{}', '{}', '{}')$$,
         $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x')$$
       ]) AS c;
-- Nor through what emit() and mark_processed() run as: their errors carry
-- no data, and they write only their own rows.
SELECT try($$SELECT outbox.emit('sec.app', '{}', headers => '{"webhook-signature": "v1,forged"}')$$) AS forged_signature;
SELECT outbox.emit('sec.app', '{"by": "app"}') IS NOT NULL AS emitted;
SELECT outbox.mark_processed('sec-app', 'msg-1') AS marked;
-- Granting a view to an operator shows no secret: the views have none.
ROLLBACK;
SELECT v.relname AS view, a.attname AS secret_column
  FROM pg_class v JOIN pg_attribute a ON a.attrelid = v.oid
 WHERE v.relnamespace = 'outbox'::regnamespace AND v.relkind = 'v' AND a.attname LIKE '%secret%';

-- Nothing about the endpoints changed.
SELECT md5(string_agg(e.name || e.url || e.event_types::text || e.headers::text || s.secret, ',' ORDER BY e.id))
       = :'endpoints_before' AS endpoints_unchanged
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id;

--------------------------------------------------------------------------
-- Hijacking.  The application role owns a schema of look-alikes of what
-- mark_processed() and capture() use, puts it first in search_path, and
-- creates temporary tables named like the catalogs capture() reads.  The
-- functions pin search_path to pg_catalog, pg_temp: the real objects are
-- used and the real rows are written.
--------------------------------------------------------------------------

CREATE SCHEMA regress_sec_evil AUTHORIZATION regress_outbox_app;
-- A table of the application's with a capture trigger, set up by the
-- administrator; its primary key is the event key.
CREATE TABLE regress_sec_evil.booking (id int PRIMARY KEY, guest text);
ALTER TABLE regress_sec_evil.booking OWNER TO regress_outbox_app;
CREATE TRIGGER booking_events AFTER INSERT OR UPDATE ON regress_sec_evil.booking
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('sec_booking');

SET ROLE regress_outbox_app;
-- Records who called a look-alike (none may ever be called).
CREATE TABLE regress_sec_evil.called (what text, by_user text);
GRANT INSERT ON regress_sec_evil.called TO PUBLIC;
CREATE TABLE regress_sec_evil.inbox (consumer text, message_id text, processed_at timestamptz);
CREATE FUNCTION regress_sec_evil.to_jsonb(anyelement) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('to_jsonb', current_user);
    RETURN '{"evil": true}';
END $$;
CREATE FUNCTION regress_sec_evil.jsonb_build_object(text, jsonb, text, jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('jsonb_build_object', current_user);
    RETURN '{"evil": true}';
END $$;
CREATE FUNCTION regress_sec_evil.octet_length(text) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('octet_length', current_user);
    RETURN 1;
END $$;
CREATE FUNCTION regress_sec_evil.evil_has_key(jsonb, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('?', current_user);
    RETURN true;
END $$;
CREATE OPERATOR regress_sec_evil.? (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = regress_sec_evil.evil_has_key);
CREATE FUNCTION regress_sec_evil.evil_get_text(jsonb, text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('->>', current_user);
    RETURN 'evil-key';
END $$;
CREATE OPERATOR regress_sec_evil.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = regress_sec_evil.evil_get_text);
CREATE FUNCTION regress_sec_evil.evil_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('=', current_user);
    RETURN false;
END $$;
CREATE OPERATOR regress_sec_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_sec_evil.evil_eq);
CREATE FUNCTION regress_sec_evil.evil_concat(text, text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called VALUES ('||', current_user);
    RETURN 'evil.type';
END $$;
CREATE OPERATOR regress_sec_evil.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_sec_evil.evil_concat);
-- Temporary look-alikes of the catalogs capture() reads for the key.
CREATE TEMP TABLE pg_index (indrelid oid, indkey int2vector, indisprimary boolean);
CREATE TEMP TABLE pg_attribute (attrelid oid, attnum int2, attname name);
SET search_path = regress_sec_evil, pg_temp, pg_catalog, public;
-- The look-alikes do win for the role's own queries.
SELECT octet_length('abc') AS evil_octet_length, 'a' = 'a' AS evil_equals,
       (SELECT count(*) FROM pg_index) AS evil_pg_index_rows;
DELETE FROM regress_sec_evil.called;

BEGIN;
SELECT outbox.mark_processed('sec-hijack', 'msg-1') AS first,
       outbox.mark_processed('sec-hijack', 'msg-1') AS second;
INSERT INTO regress_sec_evil.booking VALUES (7, 'Ann');
UPDATE regress_sec_evil.booking SET guest = 'Bob' WHERE id = 7;
SELECT count(*) AS rows_in_evil_inbox FROM regress_sec_evil.inbox;
COMMIT;
-- No look-alike was called.
SELECT what, by_user FROM regress_sec_evil.called;
RESET ROLE;
RESET search_path;

-- The real rows.
SELECT consumer, message_id FROM outbox.inbox WHERE consumer = 'sec-hijack';
SELECT event_type, key, payload FROM outbox.events WHERE event_type LIKE 'sec_booking.%' ORDER BY id;

-- A cast to json is run by to_jsonb() on a column of the user's own type:
-- it runs with the rights of the role that changed the row, not with those
-- of the extension's owner.
SET ROLE regress_outbox_app;
CREATE TYPE regress_sec_evil.mood AS ENUM ('calm');
CREATE FUNCTION regress_sec_evil.mood_json(regress_sec_evil.mood) RETURNS json LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_sec_evil.called
    SELECT 'cast to json', current_user || CASE WHEN rolsuper THEN ' (superuser)' ELSE '' END
      FROM pg_roles WHERE rolname = current_user;
    RETURN '"calm"';
END $$;
CREATE CAST (regress_sec_evil.mood AS json) WITH FUNCTION regress_sec_evil.mood_json(regress_sec_evil.mood);
ALTER TABLE regress_sec_evil.booking ADD COLUMN mood regress_sec_evil.mood;
INSERT INTO regress_sec_evil.booking VALUES (8, 'Cy', 'calm');
SELECT what, by_user FROM regress_sec_evil.called;
RESET ROLE;
SELECT event_type, key, payload FROM outbox.events WHERE event_type = 'sec_booking.inserted' AND key = '8';

-- An operator with the grants docs/privileges.md gives one reads every view and
-- health(), and still no table: what they call runs with the owner's
-- rights.
CREATE ROLE regress_outbox_ops LOGIN;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_ops;
GRANT SELECT ON outbox.endpoint_status, outbox.backlog, outbox.attempts,
                outbox.dead_letters, outbox.relay_stats TO regress_outbox_ops;
GRANT EXECUTE ON FUNCTION outbox.health(), outbox.rotation_holds(), outbox._unread_all(),
                          outbox._in_flight(), outbox._relay_stats() TO regress_outbox_ops;
SET ROLE regress_outbox_ops;
SELECT try($$SELECT count(*) FROM outbox.endpoint_status$$) AS endpoint_status,
       try($$SELECT count(*) FROM outbox.backlog$$) AS backlog,
       try($$SELECT count(*) FROM outbox.attempts$$) AS attempts,
       try($$SELECT count(*) FROM outbox.dead_letters$$) AS dead_letters,
       try($$SELECT count(*) FROM outbox.relay_stats$$) AS relay_stats,
       try($$SELECT count(*) FROM outbox.health()$$) AS health,
       try($$SELECT count(*) FROM outbox.rotation_holds()$$) AS rotation_holds;
SELECT try($$SELECT count(*) FROM outbox.events$$) AS events,
       try($$SELECT count(*) FROM outbox.endpoint_secrets$$) AS endpoint_secrets,
       try($$SELECT count(*) FROM outbox.positions$$) AS positions;
RESET ROLE;
DROP OWNED BY regress_outbox_ops;
DROP ROLE regress_outbox_ops;

-- Clean up.
SELECT outbox.drop_endpoint('sec-ep');
DROP TABLE sec_calls;
SET client_min_messages = warning;
DROP SCHEMA regress_sec_evil CASCADE;
RESET client_min_messages;
DROP OWNED BY regress_outbox_none, regress_outbox_usage, regress_outbox_app;
DROP ROLE regress_outbox_none, regress_outbox_usage, regress_outbox_app;
SELECT count(*) AS roles_left FROM pg_roles WHERE rolname LIKE 'regress_outbox_%';
