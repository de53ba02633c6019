-- outbox.emit(): what it writes, what it refuses, and dedupe keys.

--------------------------------------------------------------------------
-- Success cases
--------------------------------------------------------------------------

-- All arguments, positionally; the returned id is a version 7 UUID.
SELECT outbox.emit('order.created', '{"id": 1, "total": 9.5}', 'order-1',
                   '{"X-Tenant": "acme"}', '2030-01-02 03:04:05+00', 'dk-all') AS id_all \gset
SELECT :'id_all' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$' AS is_uuid_v7;

-- The row: every argument stored as given, in the current slot.
SELECT event_type, payload, key, headers, deliver_at AT TIME ZONE 'UTC' AS deliver_at_utc,
       slot = (SELECT cur_slot FROM outbox.queue) AS in_current_slot
  FROM outbox.events WHERE event_id = :'id_all';
SELECT dedupe_key, event_id = :'id_all' AS same_id FROM outbox.dedupe;

-- Named arguments, defaults for the rest.
SELECT outbox.emit(payload => '{"a": 1}', event_type => 'order.shipped',
                   key => 'order-1') IS NOT NULL AS emitted;
SELECT event_type, payload, key, headers, deliver_at
  FROM outbox.events WHERE event_type = 'order.shipped';

-- Any JSON value is a payload: null, scalars, arrays, empty containers.
SELECT outbox.emit('json.null', 'null') IS NOT NULL AS emitted;
SELECT outbox.emit('json.number', '42') IS NOT NULL AS emitted;
SELECT outbox.emit('json.string', '"text"') IS NOT NULL AS emitted;
SELECT outbox.emit('json.boolean', 'false') IS NOT NULL AS emitted;
SELECT outbox.emit('json.array', '[1, "two", null, {"three": 3}]') IS NOT NULL AS emitted;
SELECT outbox.emit('json.empty_object', '{}') IS NOT NULL AS emitted;
SELECT outbox.emit('json.empty_array', '[]') IS NOT NULL AS emitted;
SELECT event_type, payload, jsonb_typeof(payload) AS json_type
  FROM outbox.events WHERE event_type LIKE 'json.%' ORDER BY id;

-- Event type edge cases that are valid: one part, digits and "_", 255 bytes.
SELECT outbox.emit('x', '1') IS NOT NULL AS one_part,
       outbox.emit('A_1.b_2.C3', '1') IS NOT NULL AS mixed,
       outbox.emit(repeat('a', 255), '1') IS NOT NULL AS len_255;

-- Key and headers at their limits: a 1024-byte key (multibyte counts bytes),
-- empty headers, a tab inside a header value.
SELECT outbox.emit('limits', '1', key => repeat('k', 1024)) IS NOT NULL AS key_1024,
       outbox.emit('limits', '1', key => repeat('é', 512)) IS NOT NULL AS key_1024_bytes,
       outbox.emit('limits', '1', headers => '{}') IS NOT NULL AS empty_headers,
       outbox.emit('limits', '1', headers => '{"X-A": "a\tb"}') IS NOT NULL AS tab_in_value;
SELECT octet_length(key) AS key_bytes, headers FROM outbox.events
 WHERE event_type = 'limits' ORDER BY id;

-- Within one transaction: the row carries this transaction's id, now() as
-- created_at, and ids grow in emit order.
BEGIN;
SELECT outbox.emit('txn.first', '1') AS id_first \gset
SELECT outbox.emit('txn.second', '2') AS id_second \gset
SELECT event_type,
       txid = pg_current_xact_id() AS txid_is_mine,
       created_at = now() AS created_now
  FROM outbox.events WHERE event_type LIKE 'txn.%' ORDER BY id;
SELECT (SELECT id FROM outbox.events WHERE event_id = :'id_first') <
       (SELECT id FROM outbox.events WHERE event_id = :'id_second') AS ids_in_order;
COMMIT;

-- Emitted ids are unique.
SELECT count(*) = count(DISTINCT event_id) AS ids_unique FROM outbox.events;

--------------------------------------------------------------------------
-- Refusals: each gives its SQLSTATE, and nothing is written.  They run in
-- one transaction: if emit() wrote anything before refusing, the
-- transaction would have an id and the event sequence would have moved
-- (neither is undone by the error).
--------------------------------------------------------------------------

SELECT count(*) AS events_before FROM outbox.events \gset
SELECT last_value AS seq_before FROM outbox.event_seq \gset
BEGIN;

-- NULL event type or payload.
SELECT try($$SELECT outbox.emit(NULL, '1')$$) AS null_type;
SELECT try($$SELECT outbox.emit('a', NULL)$$) AS null_payload;

-- Bad event types.
SELECT t AS event_type, try(format('SELECT outbox.emit(%L, %L)', t, '1')) AS result
  FROM unnest(ARRAY['', 'a..b', '.a', 'a.', '.', 'a b', 'a-b', 'a/b', 'ü',
                    'x''; drop table outbox.events; --', 'a*']) AS t;
SELECT try(format('SELECT outbox.emit(%L, %L)', repeat('a', 256), '1')) AS type_256;

-- Payload larger than outbox.max_payload_size (set to 1kB here; the
-- boundary is checked further down).
SET LOCAL outbox.max_payload_size = '1kB';
SHOW outbox.max_payload_size;
SELECT pg_column_size(to_jsonb(repeat('x', 1017))) - 4 AS stored_bytes,
       try(format('SELECT outbox.emit(%L, to_jsonb(repeat(%L, 1017)))', 'big', 'x')) AS over_limit;
RESET outbox.max_payload_size;
SHOW outbox.max_payload_size;
-- A payload over the default 1MB, which would be stored compressed.
SELECT try($$SELECT outbox.emit('big', jsonb_build_object('a', repeat('x', 1100000)))$$) AS over_1mb;

-- Bad headers: not an object, non-string values, nesting, control
-- characters, bad names, names outbox sets itself, too many, too long.
SELECT h AS headers, try(format('SELECT outbox.emit(%L, %L, headers => %L)', 'a', '1', h)) AS result
  FROM unnest(ARRAY[
         '[]', '["a"]', '"text"', '1', 'null',
         '{"X-A": 1}', '{"X-A": null}', '{"X-A": true}', '{"X-A": {"b": "c"}}', '{"X-A": ["b"]}',
         '{"X-A": "a\r\nX-Injected: 1"}', '{"X-A": "a\nb"}', '{"X-A": "a\u007fb"}',
         '{"": "v"}', '{"X A": "v"}', '{"X-A:": "v"}', '{"Ä": "v"}',
         '{"webhook-id": "v"}', '{"Webhook-Signature": "v"}', '{"webhook-timestamp": "v"}',
         '{"content-type": "text/plain"}', '{"Content-Length": "1"}', '{"host": "evil"}',
         '{"Transfer-Encoding": "chunked"}']) AS h;
SELECT try(format('SELECT outbox.emit(%L, %L, headers => %L)', 'a', '1',
                  (SELECT jsonb_object_agg('X-' || i, 'v') FROM generate_series(1, 65) i))) AS headers_65;
SELECT try(format('SELECT outbox.emit(%L, %L, headers => %L)', 'a', '1',
                  jsonb_build_object('X-Long', repeat('v', 8193)))) AS value_8193;
SELECT try(format('SELECT outbox.emit(%L, %L, headers => %L)', 'a', '1',
                  jsonb_build_object(repeat('h', 257), 'v'))) AS name_257;

-- Bad key: empty or longer than 1024 bytes.
SELECT try($$SELECT outbox.emit('a', '1', key => '')$$) AS empty_key;
SELECT try(format('SELECT outbox.emit(%L, %L, key => %L)', 'a', '1', repeat('k', 1025))) AS key_1025;
SELECT try(format('SELECT outbox.emit(%L, %L, key => %L)', 'a', '1', repeat('é', 513))) AS key_1026_bytes;

-- deliver_at must be finite, and at most 3650 days after now(): the
-- largest timestamp there is, a millisecond Unix time read as seconds, and
-- a day past the limit.
SELECT try($$SELECT outbox.emit('a', '1', deliver_at => 'infinity')$$) AS deliver_infinity;
SELECT try($$SELECT outbox.emit('a', '1', deliver_at => '-infinity')$$) AS deliver_minus_infinity;
SELECT try($$SELECT outbox.emit('app.later', '{}', deliver_at => '294276-12-31 23:59:59+00')$$) AS deliver_294276;
SELECT try($$SELECT outbox.emit('a', '1', deliver_at => to_timestamp(1767225600000))$$) AS deliver_ms_as_s;
SELECT try($$SELECT outbox.emit('a', '1', deliver_at => now() + interval '3651 days')$$) AS deliver_3651_days;

-- Headers count towards outbox.max_payload_size with the payload: each
-- fits alone, not together.
SET outbox.max_payload_size = '16kB';
SELECT try(format('SELECT outbox.emit(%L, %L, headers => %L)', 'a', to_jsonb(repeat('p', 10000)),
                  jsonb_build_object('X-A', repeat('h', 8000)))) AS payload_and_headers;
SELECT try(format('SELECT outbox.emit(%L, %L, headers => %L)', 'a', '1',
                  (SELECT jsonb_object_agg('X-' || i, repeat('h', 8000)) FROM generate_series(1, 3) i))) AS headers_alone;
RESET outbox.max_payload_size;

-- Bad dedupe key: empty or longer than 1024 bytes.
SELECT try($$SELECT outbox.emit('a', '1', dedupe_key => '')$$) AS empty_dedupe_key;
SELECT try(format('SELECT outbox.emit(%L, %L, dedupe_key => %L)', 'a', '1', repeat('d', 1025))) AS dedupe_key_1025;

-- Nothing was written: no transaction id, sequence and tables unchanged.
SELECT pg_current_xact_id_if_assigned() IS NULL AS nothing_written;
COMMIT;
SELECT last_value = :seq_before AS sequence_unchanged FROM outbox.event_seq;
SELECT count(*) = :events_before AS events_unchanged FROM outbox.events;
SELECT count(*) AS dedupe_rows FROM outbox.dedupe;

-- The limits themselves are accepted: a payload of exactly
-- outbox.max_payload_size (the stored jsonb value of a JSON string of n
-- bytes takes n + 8), and 64 headers.
BEGIN;
SET LOCAL outbox.max_payload_size = '1kB';
SELECT pg_column_size(to_jsonb(repeat('x', 1016))) - 4 AS stored_bytes,
       outbox.emit('big', to_jsonb(repeat('x', 1016))) IS NOT NULL AS at_limit;
COMMIT;
SELECT outbox.emit('a', '1', headers => (SELECT jsonb_object_agg('X-' || i, 'v')
                                           FROM generate_series(1, 64) i)) IS NOT NULL AS headers_64;
-- A deliver_at just inside the limit.
SELECT outbox.emit('a', '1', deliver_at => now() + interval '3650 days') IS NOT NULL AS deliver_3650_days;

--------------------------------------------------------------------------
-- Dedupe keys
--------------------------------------------------------------------------

-- Twice in one statement: the same id, one event.
SELECT outbox.emit('dd.same_stmt', '1', dedupe_key => 'dk-1') =
       outbox.emit('dd.same_stmt', '2', dedupe_key => 'dk-1') AS same_id;
SELECT payload FROM outbox.events WHERE event_type = 'dd.same_stmt';

-- In separate transactions: the second returns the first id and writes
-- nothing, even with another type and payload.
SELECT outbox.emit('dd.first', '1', dedupe_key => 'dk-2') AS dd_first \gset
SELECT last_value AS seq_before FROM outbox.event_seq \gset
SELECT outbox.emit('dd.second', '2', dedupe_key => 'dk-2') = :'dd_first' AS same_id;
SELECT event_type, payload FROM outbox.events WHERE event_type LIKE 'dd.%' AND event_type <> 'dd.same_stmt';
SELECT last_value = :seq_before AS no_event_drawn FROM outbox.event_seq;

-- The key of an earlier test (emitted with all arguments) is taken as well.
SELECT outbox.emit('other', '1', dedupe_key => 'dk-all') = :'id_all' AS same_id;

-- Events without a dedupe key write no dedupe rows.
SELECT count(*) AS dedupe_rows FROM outbox.dedupe;

--------------------------------------------------------------------------
-- Rollback leaves nothing
--------------------------------------------------------------------------

SELECT count(*) AS events_before FROM outbox.events \gset
BEGIN;
SELECT outbox.emit('rb.event', '1') IS NOT NULL AS emitted;
SELECT outbox.emit('rb.event', '2', dedupe_key => 'dk-rb') AS rb_id \gset
SELECT count(*) AS inside FROM outbox.events WHERE event_type = 'rb.event';
ROLLBACK;
SELECT count(*) = :events_before AS events_unchanged FROM outbox.events;
SELECT count(*) AS rb_dedupe FROM outbox.dedupe WHERE dedupe_key = 'dk-rb';
-- The rolled-back dedupe key is free again: a new event with a new id.
SELECT outbox.emit('rb.again', '3', dedupe_key => 'dk-rb') <> :'rb_id' AS new_id;
SELECT event_type, payload FROM outbox.events WHERE event_type LIKE 'rb.%';

-- Savepoints: an emit rolled back to a savepoint is gone, the others stay.
BEGIN;
SELECT outbox.emit('sp.kept', '1') IS NOT NULL AS emitted;
SAVEPOINT s;
SELECT outbox.emit('sp.dropped', '2', dedupe_key => 'dk-sp') IS NOT NULL AS emitted;
ROLLBACK TO SAVEPOINT s;
SELECT outbox.emit('sp.kept', '3', dedupe_key => 'dk-sp') IS NOT NULL AS emitted;
COMMIT;
SELECT event_type, payload FROM outbox.events WHERE event_type LIKE 'sp.%' ORDER BY id;
-- An emit in a subtransaction records the top-level transaction id, which
-- is what snapshots list.
BEGIN;
SAVEPOINT s;
SELECT outbox.emit('sp.sub', '1') IS NOT NULL AS emitted;
SELECT txid = pg_current_xact_id() AS top_level_txid FROM outbox.events WHERE event_type = 'sp.sub';
RELEASE SAVEPOINT s;
COMMIT;
-- The savepoint's dedupe key went with it; the key belongs to the kept event.
SELECT e.event_type, e.payload AS dedupe_key_event
  FROM outbox.dedupe d JOIN outbox.events e ON e.event_id = d.event_id
 WHERE d.dedupe_key = 'dk-sp';

--------------------------------------------------------------------------
-- Where an INSERT is refused, so is emit()
--------------------------------------------------------------------------

BEGIN READ ONLY;
SELECT try($$SELECT outbox.emit('ro.event', '1')$$) AS read_only;
ROLLBACK;
BEGIN READ ONLY;
SELECT try($$SELECT outbox.emit_many('ro.event', ARRAY['1']::jsonb[])$$) AS read_only_many;
ROLLBACK;
SELECT count(*) AS ro_events FROM outbox.events WHERE event_type = 'ro.event';

--------------------------------------------------------------------------
-- emit_many(): one event per payload, in array order, the rest shared
--------------------------------------------------------------------------

SELECT max(id) AS last_event FROM outbox.events \gset
SELECT outbox.emit_many('many.event', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                        ARRAY['k1', NULL, 'k3'], headers => '{"X-Batch": "b1"}',
                        priority => 2) AS many_ids \gset
SELECT cardinality(:'many_ids'::uuid[]) AS ids;
-- The ids come back in the order of the payloads, and the events went in
-- in that order, in this transaction (the same txid).
SELECT e.payload, e.key, e.headers, e.priority, e.deliver_at,
       e.event_id = (:'many_ids'::uuid[])[u.i] AS id_in_order
  FROM outbox.events e
  JOIN unnest(:'many_ids'::uuid[]) WITH ORDINALITY AS u(id, i) ON u.id = e.event_id
 WHERE e.id > :last_event ORDER BY e.id;
SELECT count(DISTINCT txid) AS transactions FROM outbox.events WHERE event_type = 'many.event';
-- Without keys, and an empty array (nothing written, an empty result).
SELECT cardinality(outbox.emit_many('many.nokey', ARRAY['1', '2']::jsonb[])) AS nokey_ids;
SELECT count(*) AS nokey_events, count(key) AS with_key FROM outbox.events WHERE event_type = 'many.nokey';
SELECT outbox.emit_many('many.empty', '{}'::jsonb[]) AS empty_ids;
SELECT count(*) AS empty_events FROM outbox.events WHERE event_type = 'many.empty';
-- Bad input: every element is checked before anything is written.
SELECT count(*) AS events_before FROM outbox.events \gset
SELECT try($$SELECT outbox.emit_many(NULL, ARRAY['1']::jsonb[])$$) AS null_type,
       try($$SELECT outbox.emit_many('bad type', ARRAY['1']::jsonb[])$$) AS bad_type,
       try($$SELECT outbox.emit_many('m.e', NULL)$$) AS null_payloads,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1', NULL]::jsonb[])$$) AS null_payload,
       try($$SELECT outbox.emit_many('m.e', ARRAY[['1'], ['2']]::jsonb[])$$) AS two_dimensions,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1', '2']::jsonb[], ARRAY['k'])$$) AS keys_short,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1', '2']::jsonb[], ARRAY['k', ''])$$) AS empty_key,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1']::jsonb[], headers => '{"webhook-id": "x"}')$$) AS reserved_header,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1']::jsonb[], deliver_at => 'infinity')$$) AS infinite_deliver_at,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1']::jsonb[], priority => 40000)$$) AS big_priority,
       try($$SELECT outbox.emit_many('m.e', ARRAY['1']::jsonb[], deliver_at => now() + interval '1 day',
                                     expires_at => now())$$) AS expires_first;
SET outbox.max_payload_size = 100;
SELECT try(format($$SELECT outbox.emit_many('m.e', ARRAY['1', %L]::jsonb[])$$,
                  jsonb_build_object('big', repeat('x', 200)))) AS one_too_large;
RESET outbox.max_payload_size;
SELECT count(*) = :events_before AS nothing_written FROM outbox.events;

--------------------------------------------------------------------------
-- Row triggers an administrator puts on outbox.events fire as on an
-- INSERT; one that skips the row makes emit() fail, not lose the event
--------------------------------------------------------------------------

CREATE TABLE emit_audit (event_type text, payload jsonb);
CREATE FUNCTION emit_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO emit_audit VALUES (NEW.event_type, NEW.payload);
    RETURN NULL;
END $$;
CREATE TRIGGER emit_audit AFTER INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION emit_audit();
BEGIN;
SELECT outbox.emit('audit.one', '1') IS NOT NULL AS emitted;
SELECT cardinality(outbox.emit_many('audit.many', ARRAY['2', '3']::jsonb[])) AS emitted_many;
COMMIT;
SELECT * FROM emit_audit ORDER BY payload;
DROP TRIGGER emit_audit ON outbox.events;
CREATE FUNCTION emit_skip() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RETURN NULL;
END $$;
CREATE TRIGGER emit_skip BEFORE INSERT ON outbox.events
    FOR EACH ROW EXECUTE FUNCTION emit_skip();
SELECT try($$SELECT outbox.emit('audit.skipped', '1')$$) AS skipped;
DROP TRIGGER emit_skip ON outbox.events;
SELECT count(*) AS skipped_events FROM outbox.events WHERE event_type = 'audit.skipped';
DROP TABLE emit_audit;
DROP FUNCTION emit_audit(), emit_skip();
