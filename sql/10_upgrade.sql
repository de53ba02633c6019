-- The upgrade path: outbox 1.0, with data and grants in it, updated to the
-- current version by ALTER EXTENSION keeps its data and grants and ends up
-- the same as a fresh install.  In a database of its own.

SELECT current_database() AS regress_db \gset

-- A fingerprint of the installed extension: every member object with its
-- definition (function bodies and settings, columns, view queries,
-- privileges), and the tables pg_dump dumps.
SELECT $def$
CREATE FUNCTION pg_temp.outbox_fingerprint() RETURNS text
LANGUAGE sql AS $$
    SELECT md5(string_agg(d, E'\n' ORDER BY d COLLATE "C"))
      FROM (SELECT pg_describe_object(dep.classid, dep.objid, 0)
                   || coalesce(' ' || (SELECT p.prosrc || p.provolatile::text || p.prosecdef::text
                                              || coalesce(p.proconfig::text, '') || coalesce(p.proacl, acldefault('f', p.proowner))::text
                                         FROM pg_proc p WHERE dep.classid = 'pg_proc'::regclass AND p.oid = dep.objid), '')
                   || coalesce(' ' || (SELECT string_agg(a.attname || ':' || format_type(a.atttypid, a.atttypmod)
                                                         || a.attnotnull::text, ',' ORDER BY a.attnum)
                                         FROM pg_attribute a
                                        WHERE dep.classid = 'pg_class'::regclass AND a.attrelid = dep.objid
                                          AND a.attnum > 0 AND NOT a.attisdropped), '')
                   || coalesce(' ' || (SELECT pg_get_viewdef(c.oid) || coalesce(c.relacl, acldefault('r', c.relowner))::text
                                         FROM pg_class c
                                        WHERE dep.classid = 'pg_class'::regclass AND c.oid = dep.objid
                                          AND c.relkind = 'v'), '') AS d
              FROM pg_depend dep
             WHERE dep.refclassid = 'pg_extension'::regclass
               AND dep.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'outbox')
               AND dep.deptype = 'e'
            UNION ALL
            SELECT 'config ' || c::regclass::text || ' ' || coalesce(f, '')
              FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(c, f)
             WHERE e.extname = 'outbox') x
$$
$def$ AS fingerprint_function \gset
:fingerprint_function;
SELECT pg_temp.outbox_fingerprint() AS fresh \gset

CREATE DATABASE outbox_upgrade;
\c outbox_upgrade
:fingerprint_function;

CREATE EXTENSION outbox VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

-- Some 1.0 state: an endpoint with its secret, events, an attempt, inbox
-- rows, and grants to a monitoring role.
CREATE ROLE outbox_upgrade_monitor;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_monitor;
GRANT SELECT ON outbox.attempts, outbox.endpoint_status TO outbox_upgrade_monitor;
SELECT outbox.create_endpoint('up', 'https://example.com/hook', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') AS secret;
SELECT outbox.emit('order.created', jsonb_build_object('n', n)) IS NOT NULL AS emitted
  FROM generate_series(1, 3) n;
INSERT INTO outbox.attempt_log (endpoint_id, id, event_id, attempt, status)
SELECT 1, e.id, e.event_id, 1, 200 FROM outbox.events e ORDER BY e.id LIMIT 1;
SELECT outbox.mark_processed('billing', 'msg-1') AS marked;

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

-- Everything is still there, in the first slot of the rotated tables.
SELECT count(*) AS events FROM outbox.events;
SELECT endpoint, attempt, status, event_type FROM outbox.attempts;
SELECT consumer, message_id, slot FROM outbox.inbox;
SELECT outbox.endpoint_secret('up') AS secret;
SELECT name, state, events_waiting, backlog_dropped FROM outbox.endpoint_status;
SELECT p.system_identifier = outbox._system_identifier() AS position_here FROM outbox.positions p;
SELECT tbl, slot, current FROM outbox.rotation ORDER BY tbl, slot;

-- The inbox still recognises what was marked before the update.
SELECT outbox.mark_processed('billing', 'msg-1') AS again, outbox.mark_processed('billing', 'msg-2') AS new;

-- Grants on the views the update recreated carry over.
SELECT has_table_privilege('outbox_upgrade_monitor', 'outbox.attempts', 'SELECT') AS attempts,
       has_table_privilege('outbox_upgrade_monitor', 'outbox.endpoint_status', 'SELECT') AS endpoint_status;

-- An updated 1.0 is a fresh install: the same objects, definitions and
-- dumped tables.  (The grant given above is taken back first.)
REVOKE SELECT ON outbox.attempts, outbox.endpoint_status FROM outbox_upgrade_monitor;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_monitor;
SELECT pg_temp.outbox_fingerprint() = :'fresh' AS same_as_fresh_install;

\c :regress_db
DROP DATABASE outbox_upgrade;
DROP ROLE outbox_upgrade_monitor;

-- The same from 1.1, with what 1.2 changes in use: an event the relay
-- deferred to a later deliver_at (a retry of attempts 0), one that failed,
-- and an endpoint whose timeout passed 1.1's check as an interval only.
CREATE DATABASE outbox_upgrade_11;
\c outbox_upgrade_11
:fingerprint_function;

CREATE EXTENSION outbox VERSION '1.1';
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
SELECT outbox.create_endpoint('up', 'https://example.com/hook', timeout => '1 year -360 days 10 seconds',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw') AS secret;
SELECT outbox.emit('order.created', jsonb_build_object('n', n),
                   deliver_at => CASE WHEN n = 1 THEN now() + interval '30 days' END) IS NOT NULL AS emitted
  FROM generate_series(1, 2) n;
INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
SELECT 1, e.id, e.event_id, e.key, CASE WHEN e.deliver_at IS NULL THEN 1 ELSE 0 END,
       coalesce(e.deliver_at, now() - interval '1 second')
  FROM outbox.events e;

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

-- The retries are still owed, the one due can be read, and rotation would
-- set both aside, the deferred one and the failed one (the slot is still
-- owed by the endpoint's position, which no relay moved here).
SELECT name, events_waiting, in_retry FROM outbox.endpoint_status;
SELECT attempts, event_type, data AS second_event
  FROM outbox._read_due(1, 10, false, 1048576);
SELECT outbox._set_aside(cur_slot) FROM outbox.queue;
SELECT d.payload, r.attempts FROM outbox.delayed d JOIN outbox.retries r USING (id);
SELECT outbox._slot_owed(cur_slot) AS slot_still_owed FROM outbox.queue;
-- The stored timeout is left as it is; the relay holds it to 5 minutes.
SELECT outbox._timeout_ms(timeout) AS stored_timeout_ms FROM outbox.endpoints;

SELECT pg_temp.outbox_fingerprint() = :'fresh' AS same_as_fresh_install;

\c :regress_db
DROP DATABASE outbox_upgrade_11;

-- The same from 1.3, with a grant on create_endpoint and alter_endpoint,
-- which 1.4 makes again with the format argument: existing endpoints are
-- standard-webhooks, as they were, and the grants carry over.
CREATE DATABASE outbox_upgrade_13;
\c outbox_upgrade_13
:fingerprint_function;

CREATE EXTENSION outbox VERSION '1.3';
CREATE ROLE outbox_upgrade_admin;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_admin;
GRANT EXECUTE ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer),
                          outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer)
   TO outbox_upgrade_admin;
SELECT outbox.create_endpoint('up', 'https://example.com/hook', max_in_flight => 4) IS NOT NULL AS created;
SELECT outbox.emit('order.created', '{"n": 1}', key => 'k1') IS NOT NULL AS emitted;

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

SELECT name, format, max_in_flight FROM outbox.endpoint_status;
-- The event emitted under 1.3 reads as 1.4's readers return it.
SELECT r.event_type, r.key, r.data, r.emitted_at = e.created_at AS emit_time
  FROM outbox._read_page(1, 10, false, 1048576) r JOIN outbox.events e USING (id);
SELECT has_function_privilege('outbox_upgrade_admin',
           'outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)',
           'EXECUTE') AS create_granted,
       has_function_privilege('outbox_upgrade_admin',
           'outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)',
           'EXECUTE') AS alter_granted;
SELECT outbox.alter_endpoint('up', format => 'cloudevents');
SELECT format FROM outbox.endpoints;

REVOKE EXECUTE ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text),
                           outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)
    FROM outbox_upgrade_admin;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_admin;
SELECT pg_temp.outbox_fingerprint() = :'fresh' AS same_as_fresh_install;

\c :regress_db
DROP DATABASE outbox_upgrade_13;
DROP ROLE outbox_upgrade_admin;
