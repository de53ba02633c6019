-- The upgrade path: each released version, 1.0 to 1.6, installed as that
-- release installed it, with data and grants in it, updated to the current
-- version by ALTER EXTENSION keeps its data and grants and ends up the same
-- as a fresh install, which runs the current version's install script
-- alone.  Each in a database of its own.
--
-- A release is installed from its own install script, what CREATE
-- EXTENSION ran at its release commit (test/releases.txt), not from 1.0
-- and today's update scripts: scripts/releases.sh takes it from git and
-- writes it into the extension directory as outbox--1.N.sql before the
-- run (scripts/test.sh does), so CREATE EXTENSION outbox VERSION '1.N'
-- runs it alone and ALTER EXTENSION outbox UPDATE runs today's update
-- scripts from there.

SELECT current_database() AS regress_db \gset

-- A fingerprint of the installed extension, one line per fact, without
-- OIDs: the objects the extension owns and the tables pg_dump dumps of it,
-- and everything in schema outbox with its definition: relations (kind,
-- owner, privileges, partition key and bound, view query, index
-- definition), columns in order (type, NOT NULL, default, identity,
-- collation, privileges), composite types' attributes among them,
-- constraints (keys, checks, foreign keys; NOT NULL is on the column's
-- line, since from PostgreSQL 18 a NOT NULL constraint also has a name,
-- which the server makes from the table's name when it was created, and
-- the update scripts built some tables under another name), triggers,
-- rules, policies, sequences, types, functions whole (arguments and
-- defaults, result, language, volatility, strictness, security, SET
-- clauses, body) with owner and privileges, and comments.  Privileges are compared as they take
-- effect: a NULL ACL is the default one written out.  The initial
-- privileges pg_dump compares with (pg_init_privs) are compared too, those
-- that differ from the default (as no row does): an update that recorded
-- the grants it gave back as initial would make pg_dump leave them out.  Left out: the stored defaults of rows older
-- than an ADD COLUMN (attmissingval).
-- outbox_differences(fresh) lists the lines that are in a fresh install's
-- fingerprint and not in this database's, or the other way round.
SELECT $def$
CREATE FUNCTION pg_temp.outbox_fingerprint() RETURNS SETOF text
LANGUAGE sql AS $$
    WITH ns AS (SELECT n.oid FROM pg_namespace n WHERE n.nspname = 'outbox'),
         rel AS (SELECT c.* FROM pg_class c, ns WHERE c.relnamespace = ns.oid)
    SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid)
      FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'outbox'
    UNION ALL
    SELECT format('dumped %s %s', u.tbl::regclass, u.cond)
      FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS u(tbl, cond)
     WHERE e.extname = 'outbox'
    UNION ALL
    SELECT format('schema %s owner %s acl %s', n.nspname, pg_get_userbyid(n.nspowner),
                  coalesce(n.nspacl, acldefault('n', n.nspowner)))
      FROM pg_namespace n, ns WHERE n.oid = ns.oid
    UNION ALL
    SELECT format('relation %s kind %s persistence %s owner %s%s%s%s%s row security %s %s replica identity %s%s',
                  c.oid::regclass, c.relkind, c.relpersistence, pg_get_userbyid(c.relowner),
                  CASE WHEN c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
                       THEN ' acl ' || coalesce(c.relacl, acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char",
                                                                     c.relowner))::text END,
                  ' options ' || c.reloptions::text, ' partition key ' || pg_get_partkeydef(c.oid),
                  ' bound ' || pg_get_expr(c.relpartbound, c.oid),
                  c.relrowsecurity, c.relforcerowsecurity, c.relreplident,
                  CASE WHEN c.relkind = 'v' THEN ': ' || pg_get_viewdef(c.oid)
                       WHEN c.relkind IN ('i', 'I') THEN ': ' || pg_get_indexdef(c.oid) END)
      FROM rel c
    UNION ALL
    SELECT format('partition %s of %s', i.inhrelid::regclass, i.inhparent::regclass)
      FROM pg_inherits i JOIN rel c ON c.oid = i.inhrelid
    UNION ALL
    SELECT format('column %s %s: %s %s not null %s default %s identity %s generated %s collation %s acl %s',
                  c.oid::regclass, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
                  format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(ad.adbin, ad.adrelid),
                  a.attidentity, a.attgenerated, co.collname, a.attacl)
      FROM rel c
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
      LEFT JOIN pg_collation co ON co.oid = a.attcollation
     WHERE c.relkind NOT IN ('i', 'I')
    UNION ALL
    SELECT format('constraint %s on %s: %s', co.conname,
                  coalesce(co.conrelid::regclass::text, format_type(co.contypid, NULL)),
                  pg_get_constraintdef(co.oid))
      FROM pg_constraint co, ns WHERE co.connamespace = ns.oid AND co.contype <> 'n'
    UNION ALL
    SELECT format('trigger %s enabled %s', pg_get_triggerdef(t.oid), t.tgenabled)
      FROM pg_trigger t JOIN rel c ON c.oid = t.tgrelid
     WHERE NOT t.tgisinternal
    UNION ALL
    SELECT 'rule ' || pg_get_ruledef(r.oid)
      FROM pg_rewrite r JOIN rel c ON c.oid = r.ev_class
     WHERE r.rulename <> '_RETURN'
    UNION ALL
    SELECT 'policy ' || p::text FROM pg_policies p WHERE p.schemaname = 'outbox'
    UNION ALL
    SELECT format('sequence %s as %s start %s increment %s min %s max %s cache %s cycle %s',
                  s.seqrelid::regclass, format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement,
                  s.seqmin, s.seqmax, s.seqcache, s.seqcycle)
      FROM pg_sequence s JOIN rel c ON c.oid = s.seqrelid
    UNION ALL
    SELECT format('sequence %s owned by %s (%s)', d.objid::regclass,
                  pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), d.deptype)
      FROM pg_depend d JOIN rel c ON c.oid = d.objid
     WHERE d.classid = 'pg_class'::regclass AND c.relkind = 'S' AND d.refobjsubid > 0
    UNION ALL
    SELECT format('type %s kind %s owner %s acl %s', format_type(t.oid, NULL), t.typtype,
                  pg_get_userbyid(t.typowner), coalesce(t.typacl, acldefault('T', t.typowner)))
      FROM pg_type t, ns WHERE t.typnamespace = ns.oid
    UNION ALL
    SELECT format('function %s owner %s acl %s', pg_get_functiondef(p.oid),
                  pg_get_userbyid(p.proowner), coalesce(p.proacl, acldefault('f', p.proowner)))
      FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
    UNION ALL
    SELECT format('initial privileges of %s: %s', pg_describe_object(ip.classoid, ip.objoid, ip.objsubid),
                  ip.initprivs)
      FROM pg_init_privs ip
      JOIN (SELECT 'pg_namespace'::regclass, n.oid, acldefault('n', n.nspowner)
              FROM pg_namespace n, ns WHERE n.oid = ns.oid
            UNION ALL
            SELECT 'pg_class'::regclass, c.oid,
                   acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner)
              FROM rel c
            UNION ALL
            SELECT 'pg_proc'::regclass, p.oid, acldefault('f', p.proowner)
              FROM pg_proc p, ns WHERE p.pronamespace = ns.oid
            UNION ALL
            SELECT 'pg_type'::regclass, t.oid, acldefault('T', t.typowner)
              FROM pg_type t, ns WHERE t.typnamespace = ns.oid) o(cls, oid, dflt)
        ON o.cls = ip.classoid AND o.oid = ip.objoid
     WHERE ip.privtype = 'e' AND (ip.objsubid <> 0 OR ip.initprivs <> o.dflt)
    UNION ALL
    SELECT format('comment on %s: %s', pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description)
      FROM pg_description d, ns
     WHERE (d.classoid = 'pg_namespace'::regclass AND d.objoid = ns.oid)
        OR (d.classoid = 'pg_class'::regclass AND d.objoid IN (SELECT c.oid FROM rel c))
        OR (d.classoid = 'pg_proc'::regclass
            AND d.objoid IN (SELECT p.oid FROM pg_proc p WHERE p.pronamespace = ns.oid))
        OR (d.classoid = 'pg_type'::regclass
            AND d.objoid IN (SELECT t.oid FROM pg_type t WHERE t.typnamespace = ns.oid))
        OR (d.classoid = 'pg_constraint'::regclass
            AND d.objoid IN (SELECT co.oid FROM pg_constraint co WHERE co.connamespace = ns.oid))
        OR (d.classoid = 'pg_trigger'::regclass
            AND d.objoid IN (SELECT t.oid FROM pg_trigger t JOIN rel c ON c.oid = t.tgrelid))
$$;
CREATE FUNCTION pg_temp.outbox_differences(fresh text[]) RETURNS TABLE (side text, line text)
LANGUAGE sql AS $$
    SELECT d.side, d.line
      FROM (SELECT 'fresh install only', f.line
              FROM (SELECT unnest(fresh) EXCEPT ALL SELECT pg_temp.outbox_fingerprint()) f(line)
            UNION ALL
            SELECT 'here only', h.line
              FROM (SELECT pg_temp.outbox_fingerprint() EXCEPT ALL SELECT unnest(fresh)) h(line)) d(side, line)
     ORDER BY d.line COLLATE "C", d.side
$$;
$def$ AS fingerprint_functions \gset

-- A fresh install.  With an install script of the current version at
-- hand, CREATE EXTENSION runs it alone, not 1.0 and the updates after it.
CREATE DATABASE outbox_fresh;
\c outbox_fresh
SELECT (pg_stat_file(c.setting || '/extension/outbox--' || x.default_version || '.sql')).size > 0
       AS install_script_of_current_version
  FROM pg_config c, pg_available_extensions x
 WHERE c.name = 'SHAREDIR' AND x.name = 'outbox';
CREATE EXTENSION outbox;
:fingerprint_functions;
-- What the fingerprint has lines of.
SELECT DISTINCT split_part(l, ' ', 1) AS kind FROM pg_temp.outbox_fingerprint() l ORDER BY 1;
SELECT array_agg(l ORDER BY l COLLATE "C") AS fresh FROM pg_temp.outbox_fingerprint() l \gset
\c :regress_db
DROP DATABASE outbox_fresh;

-- The releases' install scripts are in place, each the one its release
-- ran (a script rebuilt from today's files, or one missing, so that
-- CREATE EXTENSION would build that version from 1.0 and today's update
-- scripts, changes these lines).
SELECT v AS release, md5(pg_read_binary_file(c.setting || '/extension/outbox--' || v || '.sql')) AS install_script
  FROM pg_config c, unnest('{1.0,1.1,1.2,1.3,1.4,1.5,1.6}'::text[]) v
 WHERE c.name = 'SHAREDIR'
 ORDER BY v;

CREATE DATABASE outbox_upgrade;
\c outbox_upgrade
:fingerprint_functions;

CREATE EXTENSION outbox VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

-- Some 1.0 state: an endpoint with its secret, events, an attempt, inbox
-- rows, grants to a monitoring role on views the updates recreate or
-- change, and to an administrator on a function whose arguments 1.3 and
-- 1.4 change.
CREATE ROLE outbox_upgrade_monitor;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_monitor;
GRANT SELECT ON outbox.attempts, outbox.endpoint_status TO outbox_upgrade_monitor;
CREATE ROLE outbox_upgrade_admin;
GRANT EXECUTE ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer)
    TO outbox_upgrade_admin;
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

-- Grants on the views and the function the updates recreated carry over.
SELECT has_table_privilege('outbox_upgrade_monitor', 'outbox.attempts', 'SELECT') AS attempts,
       has_table_privilege('outbox_upgrade_monitor', 'outbox.endpoint_status', 'SELECT') AS endpoint_status,
       has_function_privilege('outbox_upgrade_admin',
                              'outbox.create_endpoint'::regproc,
                              'EXECUTE') AS create_endpoint;

-- An updated 1.0 is a fresh install: the same objects, definitions and
-- dumped tables.  (The grants given above are taken back first.)
REVOKE SELECT ON outbox.attempts, outbox.endpoint_status FROM outbox_upgrade_monitor;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_monitor;
REVOKE EXECUTE ON FUNCTION outbox.create_endpoint
    FROM outbox_upgrade_admin;
SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade;
DROP ROLE outbox_upgrade_monitor;
DROP ROLE outbox_upgrade_admin;

-- The same from 1.1, with what 1.2 changes in use: an event the relay
-- deferred to a later deliver_at (a retry of attempts 0), one that failed,
-- and an endpoint whose timeout passed 1.1's check as an interval only.
CREATE DATABASE outbox_upgrade_11;
\c outbox_upgrade_11
:fingerprint_functions;

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

SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade_11;

-- The same from 1.2, with what 1.3 changes in use: an endpoint with a
-- position of its own, events it has not passed, a failed one set aside
-- by rotation (outbox.delayed), and grants on create_endpoint and
-- alter_endpoint (made again with max_in_flight) and on endpoint_status
-- (given two columns).  The endpoint keeps reading its own pages until a
-- relay attaches it to the stream, the set-aside retry is read from its
-- copy, and the grants carry over.
CREATE DATABASE outbox_upgrade_12;
\c outbox_upgrade_12
:fingerprint_functions;

CREATE EXTENSION outbox VERSION '1.2';
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
CREATE ROLE outbox_upgrade_admin;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_admin;
GRANT EXECUTE ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer),
                          outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer)
   TO outbox_upgrade_admin;
GRANT SELECT ON outbox.endpoint_status TO outbox_upgrade_admin;
SELECT outbox.create_endpoint('up', 'https://example.com/hook', ordered => true) IS NOT NULL AS created;
SELECT outbox.emit('order.created', jsonb_build_object('n', n), key => 'k' || n) IS NOT NULL AS emitted
  FROM generate_series(1, 3) n;
INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
SELECT 1, e.id, e.event_id, e.key, 1, now() - interval '1 second'
  FROM outbox.events e WHERE e.key = 'k1';
SELECT outbox._set_aside(cur_slot) FROM outbox.queue;
SELECT d.payload, r.attempts FROM outbox.delayed d JOIN outbox.retries r USING (id);

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

SELECT name, ordered, events_waiting, in_retry, max_in_flight, in_flight FROM outbox.endpoint_status;
SELECT endpoint_id, follows FROM outbox.positions;
SELECT r.key, r.attempts, r.event_type, r.data
  FROM outbox._read_due(1, 10, false, 1048576) r;
SELECT r.key, r.event_type, r.data
  FROM outbox._read_page(1, 10, false, 1048576) r ORDER BY r.id;
SELECT has_function_privilege('outbox_upgrade_admin', 'outbox.create_endpoint'::regproc, 'EXECUTE') AS create_granted,
       has_function_privilege('outbox_upgrade_admin', 'outbox.alter_endpoint'::regproc, 'EXECUTE') AS alter_granted,
       has_table_privilege('outbox_upgrade_admin', 'outbox.endpoint_status', 'SELECT') AS status_granted;
SELECT outbox.alter_endpoint('up', max_in_flight => 2);
SELECT name, max_in_flight FROM outbox.endpoint_status;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM outbox_upgrade_admin CASCADE;
REVOKE ALL ON outbox.endpoint_status FROM outbox_upgrade_admin CASCADE;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_admin;
SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade_12;
DROP ROLE outbox_upgrade_admin;

-- The same from 1.3, with a grant on create_endpoint and alter_endpoint,
-- which 1.4 makes again with the format argument: existing endpoints are
-- standard-webhooks, as they were, and the grants carry over.
CREATE DATABASE outbox_upgrade_13;
\c outbox_upgrade_13
:fingerprint_functions;

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
           'outbox.create_endpoint'::regproc,
           'EXECUTE') AS create_granted,
       has_function_privilege('outbox_upgrade_admin',
           'outbox.alter_endpoint'::regproc,
           'EXECUTE') AS alter_granted;
SELECT outbox.alter_endpoint('up', format => 'cloudevents');
SELECT format FROM outbox.endpoints;

REVOKE EXECUTE ON FUNCTION outbox.create_endpoint, outbox.alter_endpoint
    FROM outbox_upgrade_admin;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_admin;
SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade_13;
DROP ROLE outbox_upgrade_admin;

-- The same from 1.4: an endpoint, events, a retry and grants made under 1.4
-- carry over to 1.5.  1.5 makes emit again with expires_at and priority,
-- and create_endpoint and alter_endpoint with max_age, auth and
-- rate_limit: the grants on them move to the new signatures; what 1.4
-- emitted has no expiry and priority 0, and the endpoint has no auth and
-- no rate limit.  endpoint_status is made again (rate_limit,
-- rate_limited): the grants on it carry over too.
CREATE DATABASE outbox_upgrade_14;
\c outbox_upgrade_14
:fingerprint_functions;

CREATE EXTENSION outbox VERSION '1.4';
CREATE ROLE outbox_upgrade_app;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_app;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text) TO outbox_upgrade_app;
GRANT EXECUTE ON FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)
   TO outbox_upgrade_app WITH GRANT OPTION;
CREATE ROLE outbox_upgrade_admin;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_admin;
GRANT EXECUTE ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)
   TO outbox_upgrade_admin;
GRANT SELECT ON outbox.endpoint_status TO outbox_upgrade_admin WITH GRANT OPTION;
SELECT outbox.create_endpoint('up', 'https://example.com/hook', format => 'cloudevents') IS NOT NULL AS created;
SELECT outbox.emit('order.created', '{"n": 1}', key => 'k1') IS NOT NULL AS emitted;
SELECT outbox.emit('order.created', '{"n": 2}', key => 'k2') IS NOT NULL AS emitted;
INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at)
SELECT 1, e.id, e.event_id, e.key, 1, now() - interval '1 second'
  FROM outbox.events e WHERE e.key = 'k2';

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

SELECT name, format, max_age, expired, rate_limit, rate_limited FROM outbox.endpoint_status;
SELECT r.event_type, r.key, r.data, r.expires_at, r.priority
  FROM outbox._read_page(1, 10, false, 1048576) r;
SELECT r.key, r.attempts, r.expires_at, r.priority
  FROM outbox._read_due(1, 10, false, 1048576) r;
SELECT p.oid::regprocedure AS emit,
       has_function_privilege('outbox_upgrade_app', p.oid, 'EXECUTE') AS emit_granted
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'outbox' AND p.proname = 'emit';
SELECT has_function_privilege('outbox_upgrade_app', 'outbox.alter_endpoint'::regproc,
           'EXECUTE WITH GRANT OPTION') AS alter_granted_with_option,
       has_function_privilege('outbox_upgrade_app', 'outbox.create_endpoint'::regproc,
           'EXECUTE') AS create_not_granted,
       has_function_privilege('outbox_upgrade_admin', 'outbox.create_endpoint'::regproc,
           'EXECUTE') AS create_granted_admin,
       has_table_privilege('outbox_upgrade_admin', 'outbox.endpoint_status', 'SELECT WITH GRANT OPTION')
           AS status_granted_admin;
-- The app role emits with the new arguments, and by position as before.
SET ROLE outbox_upgrade_app;
SELECT outbox.emit('order.created', '{"n": 3}', NULL, NULL, NULL, NULL,
                   expires_at => now() + interval '1 hour', priority => 5) IS NOT NULL AS emitted_new;
SELECT outbox.emit('order.created', '{"n": 4}', 'k4', NULL, NULL, 'dk-4') IS NOT NULL AS emitted_by_position;
RESET ROLE;
SELECT payload->>'n' AS n, key, expires_at IS NOT NULL AS expires, priority
  FROM outbox.events ORDER BY id;
SELECT s.auth IS NULL AS no_auth FROM outbox.endpoint_secrets s;
SELECT outbox.alter_endpoint('up', auth => '{"bearer": "tok-up"}');
SELECT s.auth FROM outbox.endpoint_secrets s;
SELECT outbox.alter_endpoint('up', rate_limit => 10);
SELECT name, rate_limit FROM outbox.endpoint_status;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM outbox_upgrade_app, outbox_upgrade_admin CASCADE;
REVOKE ALL ON outbox.endpoint_status FROM outbox_upgrade_admin CASCADE;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_app, outbox_upgrade_admin;
SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade_14;
DROP ROLE outbox_upgrade_app;
DROP ROLE outbox_upgrade_admin;

-- The same from 1.5: emit() becomes SECURITY INVOKER and capture() C, in
-- place (ALTER FUNCTION, CREATE OR REPLACE), so the grants on them and a
-- trigger that uses capture() stay; an application role with EXECUTE on
-- emit() and emit_many() emits without rights on the tables, and its row
-- changes are captured as before.
CREATE DATABASE outbox_upgrade_15;
\c outbox_upgrade_15
:fingerprint_functions;

CREATE EXTENSION outbox VERSION '1.5';
CREATE ROLE outbox_upgrade_app;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_app;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer),
                          outbox.capture()
   TO outbox_upgrade_app;
CREATE TABLE up_booking (id int PRIMARY KEY, guest text);
GRANT SELECT, INSERT, UPDATE ON up_booking TO outbox_upgrade_app;
CREATE TRIGGER up_booking_outbox AFTER INSERT OR UPDATE ON up_booking
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('booking');
INSERT INTO up_booking VALUES (1, 'Ada');

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

SELECT p.proname, p.prosecdef, p.proconfig, l.lanname,
       has_function_privilege('outbox_upgrade_app', p.oid, 'EXECUTE') AS app_granted
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'outbox'::regnamespace AND p.proname IN ('emit', 'emit_many', 'capture')
 ORDER BY p.proname;
GRANT EXECUTE ON FUNCTION outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer)
   TO outbox_upgrade_app;
SET ROLE outbox_upgrade_app;
INSERT INTO up_booking VALUES (2, 'Grace');
UPDATE up_booking SET guest = 'Ada L.' WHERE id = 1;
SELECT outbox.emit('order.created', '{"n": 1}', 'k1', dedupe_key => 'dk-up') IS NOT NULL AS emitted;
SELECT cardinality(outbox.emit_many('order.created', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[])) AS emitted_many;
RESET ROLE;
SELECT event_type, key, payload FROM outbox.events ORDER BY id;

DROP TABLE up_booking;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM outbox_upgrade_app CASCADE;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_app;
SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade_15;
DROP ROLE outbox_upgrade_app;

-- The same from 1.6: an application role granted emit() and emit_many()
-- and nothing on the tables, a trigger on the C capture(), an operator
-- granted endpoint_status and the functions it calls (as
-- docs/privileges.md says), an endpoint, events and an inbox mark made
-- under 1.6: all carry over, the application still emits, its row changes
-- are still captured, and the operator still reads the view.
CREATE DATABASE outbox_upgrade_16;
\c outbox_upgrade_16
:fingerprint_functions;

CREATE EXTENSION outbox VERSION '1.6';
SELECT extversion FROM pg_extension WHERE extname = 'outbox';
CREATE ROLE outbox_upgrade_app;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_app;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer),
                          outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer)
   TO outbox_upgrade_app;
CREATE ROLE outbox_upgrade_monitor;
GRANT USAGE ON SCHEMA outbox TO outbox_upgrade_monitor;
GRANT SELECT ON outbox.endpoint_status TO outbox_upgrade_monitor;
GRANT EXECUTE ON FUNCTION outbox._unread_all(), outbox._in_flight() TO outbox_upgrade_monitor;
CREATE TABLE up_booking (id int PRIMARY KEY, guest text);
GRANT SELECT, INSERT, UPDATE ON up_booking TO outbox_upgrade_app;
CREATE TRIGGER up_booking_outbox AFTER INSERT OR UPDATE ON up_booking
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('booking');
SELECT outbox.create_endpoint('up', 'https://example.com/hook', max_in_flight => 2) IS NOT NULL AS created;
SET ROLE outbox_upgrade_app;
INSERT INTO up_booking VALUES (1, 'Ada');
SELECT cardinality(outbox.emit_many('order.created', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
                                    ARRAY['k1', 'k2'])) AS emitted_many;
RESET ROLE;
SELECT outbox.mark_processed('billing', 'msg-1') AS marked;

ALTER EXTENSION outbox UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'outbox';

SET ROLE outbox_upgrade_app;
UPDATE up_booking SET guest = 'Ada L.' WHERE id = 1;
SELECT outbox.emit('order.created', '{"n": 3}', 'k3', priority => 1) IS NOT NULL AS emitted;
RESET ROLE;
SELECT event_type, key, payload, priority FROM outbox.events ORDER BY id;
SELECT outbox.mark_processed('billing', 'msg-1') AS again;
SET ROLE outbox_upgrade_monitor;
SELECT name, events_waiting, max_in_flight FROM outbox.endpoint_status;
RESET ROLE;

DROP TABLE up_booking;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM outbox_upgrade_app, outbox_upgrade_monitor CASCADE;
REVOKE ALL ON outbox.endpoint_status FROM outbox_upgrade_monitor CASCADE;
REVOKE USAGE ON SCHEMA outbox FROM outbox_upgrade_app, outbox_upgrade_monitor;
SELECT * FROM pg_temp.outbox_differences(:'fresh');

\c :regress_db
DROP DATABASE outbox_upgrade_16;
DROP ROLE outbox_upgrade_app;
DROP ROLE outbox_upgrade_monitor;
