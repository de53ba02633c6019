-- Privileges: PUBLIC gets nothing; an application role given the grants
-- docs/privileges.md recommends can emit and mark_processed, and nothing
-- more; neither emit() nor the SECURITY DEFINER functions can be hijacked
-- through search_path.

-- Something to read, made by the superuser.
SELECT outbox.create_endpoint('ep-priv', 'https://example.com/') IS NOT NULL AS created;
SELECT outbox.emit('priv.setup', '1') IS NOT NULL AS emitted;

CREATE ROLE regress_outbox_app LOGIN;

-- Without grants: nothing in schema outbox is usable (42501 each).
SET ROLE regress_outbox_app;
SELECT c AS call, try(c) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.emit('a', '1')$$,
         $$SELECT outbox.mark_processed('c', 'm')$$,
         $$SELECT outbox.mark_processed('c', '01890a5d-ac96-774b-bcce-b302099a8057'::uuid)$$,
         $$SELECT * FROM outbox.events$$,
         $$SELECT * FROM outbox.endpoints$$,
         $$SELECT * FROM outbox.endpoint_secrets$$,
         $$SELECT * FROM outbox.inbox$$,
         $$SELECT outbox.endpoint_secret('ep-priv')$$,
         $$SELECT outbox.create_endpoint('ep-app', 'https://example.com/')$$,
         $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x')$$
       ]) AS c;
RESET ROLE;

-- The grants docs/privileges.md recommends for an application role.
GRANT USAGE ON SCHEMA outbox TO regress_outbox_app;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer),
                          outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer),
                          outbox.mark_processed(text, text),
                          outbox.mark_processed(text, uuid)
   TO regress_outbox_app;

SET ROLE regress_outbox_app;
-- It can emit (with every argument) and mark_processed.
SELECT outbox.emit('priv.app', '{"by": "app"}', 'k', '{"X-A": "b"}', '2030-01-01', 'dk-priv') IS NOT NULL AS emitted;
SELECT outbox.emit('priv.app', '{"by": "app"}', dedupe_key => 'dk-priv') IS NOT NULL AS deduped;
SELECT cardinality(outbox.emit_many('priv.many', ARRAY['1', '2']::jsonb[], ARRAY['a', 'b'])) AS emitted_many;
SELECT outbox.mark_processed('app', 'msg-1') AS first, outbox.mark_processed('app', 'msg-1') AS second;
SELECT outbox.mark_processed('app', '01890a5d-ac96-774b-bcce-b302099a8057'::uuid) AS uuid_first;
-- Refusals still say what is wrong, not "permission denied".
SELECT try($$SELECT outbox.emit('bad type', '1')$$) AS bad_type;
SELECT try($$SELECT outbox.mark_processed('', 'm')$$) AS empty_consumer;
-- It still cannot read the tables, see secrets or manage endpoints.
SELECT c AS call, try(c) AS result
  FROM unnest(ARRAY[
         $$SELECT * FROM outbox.events$$,
         $$SELECT * FROM outbox.dedupe$$,
         $$SELECT * FROM outbox.endpoints$$,
         $$SELECT * FROM outbox.endpoint_secrets$$,
         $$SELECT * FROM outbox.positions$$,
         $$SELECT * FROM outbox.inbox$$,
         $$SELECT * FROM outbox.queue$$,
         $$SELECT nextval('outbox.event_seq')$$,
         $$INSERT INTO outbox.events (id, slot, event_id, txid, event_type, payload, created_at)
           VALUES (1, 0, gen_random_uuid(), '1', 'forged', '1', now())$$,
         $$DELETE FROM outbox.inbox$$,
         $$UPDATE outbox.queue SET cur_slot = 1$$,
         $$SELECT outbox.endpoint_secret('ep-priv')$$,
         $$SELECT outbox.create_endpoint('ep-app', 'https://example.com/')$$,
         $$SELECT outbox.alter_endpoint('ep-priv', url => 'https://attacker.example/')$$,
         $$SELECT outbox.drop_endpoint('ep-priv')$$,
         $$SELECT outbox.pause_endpoint('ep-priv')$$,
         $$SELECT outbox._new_secret()$$,
         $$SELECT outbox._check_url('https://example.com/')$$,
         $$CREATE TABLE outbox.mine (x int)$$
       ]) AS c;
RESET ROLE;

-- What the app role wrote, seen by the superuser.
SELECT event_type, payload, key, headers FROM outbox.events WHERE event_type = 'priv.app';
SELECT consumer, message_id FROM outbox.inbox WHERE consumer = 'app' ORDER BY message_id COLLATE "C";

-- search_path hijacking: the app role owns a schema with look-alikes of what
-- emit() and mark_processed() use, and puts it first.  emit() looks
-- nothing up by name but its own tables (in schema outbox) and writes the
-- dedupe key with search_path pinned to pg_catalog, pg_temp, as
-- mark_processed() runs, so the look-alikes are never called.
CREATE SCHEMA regress_evil AUTHORIZATION regress_outbox_app;
SET ROLE regress_outbox_app;
CREATE FUNCTION regress_evil.now() RETURNS timestamptz
    LANGUAGE sql AS $$ SELECT timestamptz '2000-01-01 00:00:00+00' $$;
CREATE FUNCTION regress_evil.nextval(text) RETURNS bigint
    LANGUAGE sql AS $$ SELECT -1::bigint $$;
CREATE FUNCTION regress_evil.pg_current_xact_id() RETURNS xid8
    LANGUAGE sql AS $$ SELECT '1'::xid8 $$;
CREATE FUNCTION regress_evil.octet_length(text) RETURNS int
    LANGUAGE sql AS $$ SELECT 1 $$;
CREATE FUNCTION regress_evil.texteq_evil(text, text) RETURNS boolean
    LANGUAGE sql AS $$ SELECT false $$;
CREATE OPERATOR regress_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_evil.texteq_evil);
CREATE TABLE regress_evil.queue (singleton boolean, cur_slot smallint, rotated_at timestamptz);
INSERT INTO regress_evil.queue VALUES (true, 2, now());
CREATE TABLE regress_evil.events (id bigint, slot smallint, event_id uuid, txid xid8,
    event_type text, payload jsonb, key text, headers jsonb, deliver_at timestamptz,
    created_at timestamptz);
SET search_path = regress_evil, pg_catalog, public;
-- The look-alikes do win for the app role's own queries.
SELECT now() = '2000-01-01 00:00:00+00' AS evil_now_active, nextval('x') AS evil_nextval;
BEGIN;
SELECT outbox.emit('priv.hijack', '1') AS hijack_id \gset
-- The dedupe key is looked up with the real "=": the second emit of a key
-- returns the first one's id.
SELECT outbox.emit('priv.hijack', '2', dedupe_key => 'dk-hijack') AS hijack_dedupe_id \gset
SELECT outbox.emit('priv.hijack', '3', dedupe_key => 'dk-hijack') = :'hijack_dedupe_id' AS hijack_deduped;
-- mark_processed still refuses a 256-byte id.
SELECT try(format('SELECT outbox.mark_processed(%L, %L)', 'app', repeat('m', 256))) AS long_id;
SELECT outbox.mark_processed('app', 'msg-hijack') AS first, outbox.mark_processed('app', 'msg-hijack') AS second;
RESET ROLE;
RESET search_path;
SELECT id > 0 AS real_sequence,
       slot = (SELECT cur_slot FROM outbox.queue) AS real_slot,
       txid = pg_current_xact_id() AS real_txid,
       created_at = now() AS real_now
  FROM outbox.events WHERE event_id = :'hijack_id';
SELECT count(*) AS evil_events FROM regress_evil.events;
COMMIT;

-- Clean up.
DROP OWNED BY regress_outbox_app;
DROP ROLE regress_outbox_app;
SELECT outbox.drop_endpoint('ep-priv');
