-- Hostile input: every SQL function called with NULLs, empty and huge
-- strings, JSON that is invalid or of the wrong shape, SQL-looking strings,
-- and numbers out of range.  Each gets a SQLSTATE and a message (or a
-- correct result), nothing is written by a refused call, and the server
-- stays up.  Then a randomized run with a fixed seed.
--
-- Long messages are cut to 100 characters: only their start is of interest.

--------------------------------------------------------------------------
-- Hand-written refusals.  The calls are listed in a table first, then run
-- in one transaction: if any call wrote anything before refusing, the
-- transaction would have an id (an aborted subtransaction's write still
-- assigns one) and the sequences would have moved.
--------------------------------------------------------------------------

CREATE TABLE fuzz_calls (n serial PRIMARY KEY, fn text NOT NULL, call text NOT NULL);

-- emit(): NULLs, empty, huge, SQL-looking, bad JSON and bad headers.
INSERT INTO fuzz_calls (fn, call) VALUES
  ('emit', $$SELECT outbox.emit(NULL, NULL)$$),
  ('emit', $$SELECT outbox.emit(NULL, '{}')$$),
  ('emit', $$SELECT outbox.emit('a', NULL)$$),
  ('emit', $$SELECT outbox.emit('', '{}')$$),
  ('emit', $$SELECT outbox.emit(' ', '{}')$$),
  ('emit', $$SELECT outbox.emit(repeat('x', 100000), '{}')$$),
  ('emit', $$SELECT outbox.emit(repeat('a.', 128) || 'a', '{}')$$),
  ('emit', $$SELECT outbox.emit('x''); DROP TABLE outbox.events; --', '{}')$$),
  ('emit', $$SELECT outbox.emit('order.created OR 1=1', '{}')$$),
  ('emit', $$SELECT outbox.emit('%s%s%s%n', '{}')$$),
  ('emit', $$SELECT outbox.emit(E'a\nb', '{}')$$),
  ('emit', $$SELECT outbox.emit('ordér', '{}')$$),
  ('emit', $$SELECT outbox.emit('😀', '{}')$$),
  ('emit', $$SELECT outbox.emit('a', '{"a": "\u0000"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{"a": "\ud800"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{"a": "\udc00\ud800"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{"a": 1')$$),
  ('emit', $$SELECT outbox.emit('a', '')$$),
  ('emit', $$SELECT outbox.emit('a', jsonb_build_object('k', repeat('x', 1100000)))$$),
  ('emit', $$SELECT outbox.emit('a', (SELECT jsonb_agg(g) FROM generate_series(1, 300000) g))$$),
  ('emit', $$SELECT outbox.emit('a', '{}', key => '')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', key => repeat('k', 100000))$$),
  ('emit', $$SELECT outbox.emit('a', '{}', key => chr(0))$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '[]')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '"X-A: b"')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '[{"X-A": "b"}]')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A": {"X-B": "c"}}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A": ["b", "c"]}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A": 1e400}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A": "\u0000"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A": "\ud800"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A": "b\r\nHost: evil"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A\r\nHost": "evil"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"X-A''; DROP TABLE x; --": "b"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"WEBHOOK-ID": "forged"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => '{"Content-Length": "0"}')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => jsonb_build_object('X-A', repeat('v', 100000)))$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => jsonb_build_object(repeat('h', 100000), 'v'))$$),
  ('emit', $$SELECT outbox.emit('a', '{}', headers => (SELECT jsonb_object_agg('X-' || g, 'v') FROM generate_series(1, 10000) g))$$),
  ('emit', $$SELECT outbox.emit('a', '{}', deliver_at => 'infinity')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', deliver_at => '-infinity')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', deliver_at => 'not a time')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', deliver_at => '294277-01-01')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', dedupe_key => '')$$),
  ('emit', $$SELECT outbox.emit('a', '{}', dedupe_key => repeat('d', 100000))$$);

-- create_endpoint() and alter_endpoint().
INSERT INTO fuzz_calls (fn, call) VALUES
  ('create_endpoint', $$SELECT outbox.create_endpoint(NULL, NULL)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint(NULL, 'https://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', NULL)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('', 'https://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint(repeat('n', 64), 'https://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint(repeat('n', 100000), 'https://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('x''); DROP TABLE outbox.endpoints; --', 'https://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint(E'f\n', 'https://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', '')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', ' ')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://' || repeat('a', 100000))$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/'' OR ''1''=''1')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', E'https://example.com/\r\nHost: evil')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://exa mple.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'javascript:alert(1)')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'file:///etc/passwd')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'gopher://example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', '//example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'http://[::1/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'http://example.com:65536/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'http://example.com:-1/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'http://example.com:000/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'http://:pw@example.com/')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', NULL)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', '{}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', '{NULL}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', '{""}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', '{{a},{b}}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', ARRAY['a'' OR 1=1 --'])$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', ARRAY['%', '_'])$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', ARRAY['**'])$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', ARRAY[repeat('p', 100000)])$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', secret => '')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', secret => 'whsec_' || repeat('A', 100000))$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', secret => 'whsec_''; DROP TABLE x; --')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', headers => '[]')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', headers => 'null')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', headers => '{"Authorization": null}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', headers => '{"X": "\ud800"}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', headers => '{"Host": "evil"}')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', ordered => NULL)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => NULL)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => '-1 second')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => '0')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => '0.999 seconds')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => '5 minutes 0.000001 seconds')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => '178000000 years')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => '-178000000 years')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => interval '1 month' - interval '2591999.5 seconds')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', timeout => 'forever')$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => NULL)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => 0)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => -1)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => -2147483648)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => 101)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => 2147483647)$$),
  ('create_endpoint', $$SELECT outbox.create_endpoint('f', 'https://example.com/', max_attempts => '2147483648')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint(NULL)$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint(repeat('n', 100000))$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('x''; DROP TABLE outbox.endpoints; --')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', url => '')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', url => 'ftp://example.com/')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', event_types => '{}')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', event_types => '{NULL}')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', secret => 'whsec_')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', headers => '"x"')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', headers => '{"Connection": "close"}')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', timeout => '-1 second')$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', max_attempts => -1)$$),
  ('alter_endpoint', $$SELECT outbox.alter_endpoint('fuzz-ep', max_attempts => 2147483647)$$);

-- The other endpoint functions and the operator functions.
INSERT INTO fuzz_calls (fn, call) VALUES
  ('drop_endpoint', $$SELECT outbox.drop_endpoint(NULL)$$),
  ('drop_endpoint', $$SELECT outbox.drop_endpoint('')$$),
  ('drop_endpoint', $$SELECT outbox.drop_endpoint('x'' OR ''1''=''1')$$),
  ('drop_endpoint', $$SELECT outbox.drop_endpoint('%')$$),
  ('pause_endpoint', $$SELECT outbox.pause_endpoint(NULL)$$),
  ('pause_endpoint', $$SELECT outbox.pause_endpoint('%')$$),
  ('resume_endpoint', $$SELECT outbox.resume_endpoint(NULL)$$),
  ('resume_endpoint', $$SELECT outbox.resume_endpoint(repeat('n', 100000))$$),
  ('endpoint_secret', $$SELECT outbox.endpoint_secret(NULL)$$),
  ('endpoint_secret', $$SELECT outbox.endpoint_secret('x'' OR ''1''=''1')$$),
  ('rotate_secret', $$SELECT outbox.rotate_secret(NULL)$$),
  ('rotate_secret', $$SELECT outbox.rotate_secret('nope')$$),
  ('rotate_secret', $$SELECT outbox.rotate_secret('fuzz-ep', '')$$),
  ('rotate_secret', $$SELECT outbox.rotate_secret('fuzz-ep', 'whsec_' || repeat('A', 100000))$$),
  ('retry_dead', $$SELECT outbox.retry_dead('')$$),
  ('retry_dead', $$SELECT outbox.retry_dead('x''; DELETE FROM outbox.dead_letter_log; --')$$),
  ('replay', $$SELECT outbox.replay(NULL, now())$$),
  ('replay', $$SELECT outbox.replay('fuzz-ep', NULL)$$),
  ('replay', $$SELECT outbox.replay('fuzz-ep', now(), NULL)$$),
  ('replay', $$SELECT outbox.replay('fuzz-ep', 'infinity', '-infinity')$$),
  ('replay', $$SELECT outbox.replay('fuzz-ep', now() + interval '1 second', now())$$),
  ('replay', $$SELECT outbox.replay('fuzz-ep', 'yesterday''; --', now())$$);

-- mark_processed(), both forms.
INSERT INTO fuzz_calls (fn, call) VALUES
  ('mark_processed', $$SELECT outbox.mark_processed(NULL, NULL)$$),
  ('mark_processed', $$SELECT outbox.mark_processed(NULL, 'm')$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', NULL::text)$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', NULL::uuid)$$),
  ('mark_processed', $$SELECT outbox.mark_processed('', '')$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', '')$$),
  ('mark_processed', $$SELECT outbox.mark_processed(repeat('c', 256), 'm')$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', repeat('m', 100000))$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', repeat('é', 128))$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', chr(0))$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', 'not-a-uuid'::uuid)$$),
  ('mark_processed', $$SELECT outbox.mark_processed('c', '{}'::jsonb::text::uuid)$$);

-- verify_signature() (STRICT: NULL in, NULL out, checked below).
INSERT INTO fuzz_calls (fn, call) VALUES
  ('verify_signature', $$SELECT outbox.verify_signature('', 'm', 1, 'b', 'v1,x')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_', 'm', 1, 'b', 'v1,x')$$),
  ('verify_signature', $$SELECT outbox.verify_signature(repeat('x', 100000), 'm', 1, 'b', 'v1,x')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_' || repeat('A', 100000), 'm', 1, 'b', 'v1,x')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!', 'm', 1, 'b', 'v1,x')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x', '-1 second')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x', '-178000000 years')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', '99999999999999999999', 'b', 'v1,x')$$),
  ('verify_signature', $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 'yesterday', 'b', 'v1,x')$$);

-- Internal functions (not granted to anyone; the superuser can call them).
INSERT INTO fuzz_calls (fn, call) VALUES
  ('_check_url', $$SELECT outbox._check_url('')$$),
  ('_check_url', $$SELECT outbox._check_url(repeat('h', 100000))$$),
  ('_check_url', $$SELECT outbox._check_url('http://' || repeat('a', 2042))$$),
  ('_check_event_types', $$SELECT outbox._check_event_types(NULL)$$),
  ('_check_event_types', $$SELECT outbox._check_event_types('{{*}}')$$),
  ('_check_headers', $$SELECT outbox._check_headers(NULL)$$),
  ('_check_headers', $$SELECT outbox._check_headers('1')$$),
  ('_check_secret', $$SELECT outbox._check_secret('')$$),
  ('_check_endpoint_settings', $$SELECT outbox._check_endpoint_settings('1000 years', 0)$$),
  ('_endpoint_id', $$SELECT outbox._endpoint_id(NULL)$$);

-- The endpoint the calls above name, made by the superuser.
SELECT outbox.create_endpoint('fuzz-ep', 'https://example.com/') IS NOT NULL AS created;

SELECT last_value AS event_seq_before FROM outbox.event_seq \gset
SELECT last_value AS endpoint_seq_before FROM outbox.endpoints_id_seq \gset
BEGIN;
SELECT n, call, left(try(call), 100) AS result FROM fuzz_calls ORDER BY n;
-- Every call was refused ...
SELECT count(*) AS not_refused FROM fuzz_calls WHERE try(call) = 'ok';
-- ... before writing anything.
SELECT pg_current_xact_id_if_assigned() IS NULL AS nothing_written,
       (SELECT last_value FROM outbox.event_seq) = :'event_seq_before' AS event_seq_unmoved,
       (SELECT last_value FROM outbox.endpoints_id_seq) = :'endpoint_seq_before' AS endpoint_seq_unmoved;
ROLLBACK;

-- The STRICT verify_signature() answers NULL for any NULL argument.
SELECT outbox.verify_signature(NULL, 'm', 1, 'b', 'v1,x') IS NULL AS null_secret,
       outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', NULL, 1, 'b', 'v1,x') IS NULL AS null_id,
       outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', NULL, 'b', 'v1,x') IS NULL AS null_ts,
       outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, NULL, 'v1,x') IS NULL AS null_body,
       outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', NULL) IS NULL AS null_sig,
       outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x', NULL) IS NULL AS null_tolerance;
-- Extreme timestamps and tolerances give false, not an overflow.
SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', ts, 'b', 'v1,x', tol) AS valid,
       ts, tol
  FROM unnest(ARRAY[-9223372036854775808, -1, 0, 9223372036854775807]) WITH ORDINALITY AS t(ts, i),
       unnest(ARRAY['0'::interval, '178000000 years', '-1 day 86400 seconds']) WITH ORDINALITY AS u(tol, j)
 ORDER BY i, j;
-- Huge body and a header of many signatures: false.
SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm',
                               extract(epoch FROM now())::bigint, repeat('b', 1000000),
                               repeat('v1,AAAA ', 100000)) AS many_signatures;

--------------------------------------------------------------------------
-- SQL-looking strings where any string is allowed are data: stored and
-- returned exactly as given, never run.
--------------------------------------------------------------------------

BEGIN;
SELECT outbox.emit('fuzz.sql_looking',
                   '{"q": "''; DROP TABLE outbox.events; --", "s": "$$ SELECT 1 $$", "n": "\\u0000"}',
                   key => $$'); DELETE FROM outbox.events; --$$,
                   headers => '{"X-Q": "1'' OR ''1''=''1", "X-Dollar": "$$; SELECT pg_sleep(10); $$"}',
                   dedupe_key => $$x' OR 'x'='x$$) AS sql_id \gset
SELECT event_type, payload, key, headers FROM outbox.events WHERE event_id = :'sql_id';
SELECT dedupe_key FROM outbox.dedupe WHERE event_id = :'sql_id';
SELECT outbox.mark_processed($$c'; DROP TABLE outbox.inbox; --$$, $$m" OR 1=1 --$$) AS first,
       outbox.mark_processed($$c'; DROP TABLE outbox.inbox; --$$, $$m" OR 1=1 --$$) AS second;
SELECT outbox.create_endpoint('fuzz-sql', $$https://example.com/hook?q='OR'1'='1;--&x=%27$$,
                              headers => '{"Authorization": "Bearer ''; DROP TABLE x; --"}') IS NOT NULL AS created;
SELECT name, url, headers FROM outbox.endpoints WHERE name = 'fuzz-sql';
SELECT to_regclass('outbox.events') IS NOT NULL AS events_still_there,
       to_regclass('outbox.inbox') IS NOT NULL AS inbox_still_there;
ROLLBACK;

--------------------------------------------------------------------------
-- The capture trigger with bad arguments and hostile rows.
--------------------------------------------------------------------------

CREATE TABLE fuzz_rows (id int PRIMARY KEY, t text, j jsonb);
CREATE TRIGGER fuzz_no_args AFTER INSERT ON fuzz_rows
    FOR EACH ROW EXECUTE FUNCTION outbox.capture();
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'a', '{}')$$) AS no_arguments;
DROP TRIGGER fuzz_no_args ON fuzz_rows;
CREATE TRIGGER fuzz_three_args AFTER INSERT ON fuzz_rows
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('a', 'id', 'x');
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'a', '{}')$$) AS three_arguments;
DROP TRIGGER fuzz_three_args ON fuzz_rows;
CREATE TRIGGER fuzz_before BEFORE INSERT ON fuzz_rows
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('a');
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'a', '{}')$$) AS before_trigger;
DROP TRIGGER fuzz_before ON fuzz_rows;
CREATE TRIGGER fuzz_statement AFTER INSERT ON fuzz_rows
    FOR EACH STATEMENT EXECUTE FUNCTION outbox.capture('a');
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'a', '{}')$$) AS statement_trigger;
DROP TRIGGER fuzz_statement ON fuzz_rows;
CREATE TRIGGER fuzz_bad_prefix AFTER INSERT ON fuzz_rows
    FOR EACH ROW EXECUTE FUNCTION outbox.capture($$x'); DROP TABLE fuzz_rows; --$$);
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'a', '{}')$$) AS sql_looking_prefix;
DROP TRIGGER fuzz_bad_prefix ON fuzz_rows;
CREATE TRIGGER fuzz_bad_key AFTER INSERT ON fuzz_rows
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('fuzz', 'id; DROP TABLE fuzz_rows');
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'a', '{}')$$) AS sql_looking_key_column;
DROP TRIGGER fuzz_bad_key ON fuzz_rows;
CREATE TRIGGER fuzz_rows_events AFTER INSERT OR UPDATE ON fuzz_rows
    FOR EACH ROW EXECUTE FUNCTION outbox.capture('fuzz', 't');
-- A key column value that is not a valid key, and a row too large to be
-- an event: the change itself is refused with the event.
SELECT try($$INSERT INTO fuzz_rows VALUES (1, '', '{}')$$) AS empty_key;
SELECT try($$INSERT INTO fuzz_rows VALUES (1, repeat('k', 1025), '{}')$$) AS long_key;
SELECT try($$INSERT INTO fuzz_rows VALUES (1, 'k', jsonb_build_object('x', repeat('x', 1100000)))$$) AS huge_row;
-- Hostile values are data.
INSERT INTO fuzz_rows VALUES (2, $$k'; DROP TABLE outbox.events; --$$, '{"a": "\\u0000", "b": "é😀"}');
SELECT count(*) AS rows_kept FROM fuzz_rows;
SELECT event_type, key, payload FROM outbox.events WHERE event_type LIKE 'fuzz.%' ORDER BY id;
DROP TABLE fuzz_rows;

--------------------------------------------------------------------------
-- Randomized: 2,000 calls of emit(), create_endpoint(), mark_processed()
-- (both forms) and verify_signature() with arguments drawn from pools of
-- hostile values, with a fixed seed.  Each call runs in a transaction of
-- its own.  A refused call must have written nothing (no transaction id,
-- no sequence moved) and have an expected SQLSTATE; a call that succeeds
-- must have written exactly its rows and returned a correct result.
--------------------------------------------------------------------------

-- Argument pools: SQL expressions, by kind.
CREATE TABLE fuzz_pool (kind text NOT NULL, n serial, expr text NOT NULL);
INSERT INTO fuzz_pool (kind, expr)
SELECT 'text', e FROM unnest(ARRAY[
    'NULL', $$''$$, $$' '$$, $$'a'$$, $$'fuzz.a'$$, $$'fuzz.b_2.c'$$, $$'NULL'$$,
    $$repeat('x', 100000)$$, $$repeat('é', 600)$$, $$repeat('k', 1024)$$,
    $$repeat('a', 255)$$, $$repeat('a', 256)$$, $$E'a\nb'$$, $$E'tab\there'$$,
    $$'x''); DROP TABLE outbox.events; --'$$, $$'1 OR 1=1'$$, $$'$$ || '$$$$' || $$'$$,
    $$'%s%s%n'$$, $$chr(1)$$, $$'😀'$$, $$'fuzz-ep'$$, $$'fuzz-rand'$$, $$'*'$$, $$'a b'$$,
    $$'\u0000'$$, $$'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'json', e FROM unnest(ARRAY[
    'NULL', $$'{}'$$, $$'[]'$$, $$'null'$$, $$'"s"'$$, $$'1e400'$$, $$'{"X-A": "b"}'$$,
    $$'{"X-A": 1}'$$, $$'{"X-A": "a\r\nb"}'$$, $$'{"a": "\u0000"}'$$, $$'{"a": "\ud800"}'$$,
    $$'{"a": "\\u0000"}'$$, $$'{bad'$$, $$''$$, $$jsonb_build_object('k', repeat('x', 1100000))$$,
    $$jsonb_build_object('X-Big', repeat('v', 9000))$$, $$'{"webhook-id": "x"}'$$,
    $$(SELECT jsonb_object_agg('X-' || g, 'v') FROM generate_series(1, 100) g)$$,
    $$'{"X-SQL": "''; DROP TABLE x; --"}'$$, $$'{"X-Nested": {"a": ["b"]}}'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'time', e FROM unnest(ARRAY[
    'NULL', $$'2030-01-01 00:00:00+00'$$, $$'infinity'$$, $$'-infinity'$$, $$'epoch'$$,
    $$'not a time'$$, $$'294277-01-01'$$, $$now()$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'url', e FROM unnest(ARRAY[
    'NULL', $$''$$, $$'https://example.com/'$$, $$'http://example.com:8080/x?y=1#frag'$$,
    $$'ftp://example.com/'$$, $$'http://'$$, $$'http://u:p@example.com/'$$, $$'http://[::1'$$,
    $$'https://' || repeat('a', 100000)$$, $$E'http://x/\r\nHost: y'$$, $$'javascript:alert(1)'$$,
    $$'http://169.254.169.254/'$$, $$'https://example.com/?q='' OR 1=1--'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'types', e FROM unnest(ARRAY[
    'NULL', $$'{*}'$$, $$'{}'$$, $$'{NULL}'$$, $$'{{a},{b}}'$$, $$'{fuzz.*,x}'$$,
    $$ARRAY['a b']$$, $$ARRAY[repeat('p', 300)]$$, $$'{%}'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'secret', e FROM unnest(ARRAY[
    'NULL', $$''$$, $$'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'$$, $$'whsec_'$$,
    $$'whsec_' || repeat('A', 100000)$$, $$'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'bool', e FROM unnest(ARRAY['NULL', 'true', 'false']) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'interval', e FROM unnest(ARRAY[
    'NULL', $$'1 second'$$, $$'30 seconds'$$, $$'0'$$, $$'-1 second'$$,
    $$'5 minutes 1 microsecond'$$, $$'178000000 years'$$, $$'forever'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'int', e FROM unnest(ARRAY[
    'NULL', $$'-2147483648'$$, $$'-1'$$, $$'0'$$, $$'1'$$, $$'8'$$, $$'100'$$, $$'101'$$,
    $$'2147483647'$$, $$'2147483648'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'bigint', e FROM unnest(ARRAY[
    'NULL', $$'0'$$, $$'-1'$$, $$extract(epoch FROM now())::bigint$$,
    $$'9223372036854775807'$$, $$'-9223372036854775808'$$, $$'9223372036854775808'$$, $$'x'$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'uuid', e FROM unnest(ARRAY[
    'NULL', $$'01890a5d-ac96-774b-bcce-b302099a8057'$$, $$'{01890a5d-ac96-774b-bcce-b302099a8058}'$$,
    $$'not-a-uuid'$$, $$''$$]) AS e;
INSERT INTO fuzz_pool (kind, expr)
SELECT 'tolerance', e FROM unnest(ARRAY[
    'NULL', $$'5 minutes'$$, $$'-1 second'$$, $$'178000000 years'$$, $$'0'$$]) AS e;
SELECT kind, count(*) AS pool_size FROM fuzz_pool GROUP BY kind ORDER BY kind COLLATE "C";

-- Half the time the given valid value, else any value of the pool: so that
-- calls get past their first argument often enough to test the others.
CREATE FUNCTION fuzz_pick(k text, good text) RETURNS text LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN random() < 0.5 THEN good
                ELSE (SELECT expr FROM fuzz_pool WHERE kind = k ORDER BY n
                      OFFSET floor(random() * (SELECT count(*) FROM fuzz_pool WHERE kind = k)) LIMIT 1)
           END
$$;

CREATE TABLE fuzz_outcome (n int PRIMARY KEY, fn text, call text, state text, result text, problem text);

-- Row counts of everything these functions may write.
CREATE FUNCTION fuzz_counts() RETURNS bigint[] LANGUAGE sql STABLE AS $$
    SELECT ARRAY[(SELECT count(*) FROM outbox.events), (SELECT count(*) FROM outbox.dedupe),
                 (SELECT count(*) FROM outbox.endpoints), (SELECT count(*) FROM outbox.endpoint_secrets),
                 (SELECT count(*) FROM outbox.positions), (SELECT count(*) FROM outbox.inbox),
                 (SELECT last_value FROM outbox.event_seq), (SELECT last_value FROM outbox.endpoints_id_seq)]
$$;

CREATE PROCEDURE fuzz_run(cases int) LANGUAGE plpgsql AS $$
DECLARE
    fns constant text[] := ARRAY['emit', 'create_endpoint', 'mark_processed',
                                 'mark_processed_uuid', 'verify_signature'];
    fn text;
    call text;
    state text;
    result text;
    problem text;
    c0 bigint[];
    c1 bigint[];
    d bigint[];
    wrote boolean;
BEGIN
    FOR i IN 1..cases LOOP
        fn := fns[1 + floor(random() * array_length(fns, 1))::int];
        call := CASE fn
            WHEN 'emit' THEN
                format('SELECT outbox.emit(%s, %s, key => %s, headers => %s, deliver_at => %s, dedupe_key => %s)',
                       fuzz_pick('text', $q$'fuzz.rand'$q$), fuzz_pick('json', $q$'{"n": 1}'$q$),
                       fuzz_pick('text', 'NULL'), fuzz_pick('json', 'NULL'),
                       fuzz_pick('time', 'NULL'), fuzz_pick('text', format('%L', 'dk-fuzz-' || i % 100)))
            WHEN 'create_endpoint' THEN
                format('SELECT outbox.create_endpoint(%s, %s, %s, %s, %s, %s, %s, %s)',
                       fuzz_pick('text', format('%L', 'fuzz-r' || i % 100)),
                       fuzz_pick('url', $q$'https://example.com/'$q$), fuzz_pick('types', $q$'{*}'$q$),
                       fuzz_pick('secret', 'NULL'), fuzz_pick('json', $q$'{}'$q$),
                       fuzz_pick('bool', 'false'), fuzz_pick('interval', $q$'30 seconds'$q$),
                       fuzz_pick('int', '8'))
            WHEN 'mark_processed' THEN
                format('SELECT outbox.mark_processed(%s, %s::text)',
                       fuzz_pick('text', $q$'fuzz'$q$), fuzz_pick('text', format('%L', 'm-' || i % 100)))
            WHEN 'mark_processed_uuid' THEN
                format('SELECT outbox.mark_processed(%s, %s::uuid)',
                       fuzz_pick('text', $q$'fuzz'$q$), fuzz_pick('uuid', $q$'01890a5d-ac96-774b-bcce-b302099a8059'$q$))
            ELSE
                -- The good values are the Standard Webhooks test vector.
                format('SELECT outbox.verify_signature(%s, %s, %s, %s, %s, %s)',
                       fuzz_pick('text', $q$'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'$q$),
                       fuzz_pick('text', $q$'msg_p5jXN8AQM9LWM0D4loKWxJek'$q$),
                       fuzz_pick('bigint', '1614265330'),
                       fuzz_pick('text', $q$'{"test": 2432232314}'$q$),
                       fuzz_pick('text', $q$'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='$q$),
                       fuzz_pick('tolerance', $q$'10000 days'$q$))
            END;
        c0 := fuzz_counts();
        state := 'ok';
        result := NULL;
        BEGIN
            EXECUTE call INTO result;
        EXCEPTION WHEN OTHERS THEN
            state := SQLSTATE;
        END;
        wrote := pg_current_xact_id_if_assigned() IS NOT NULL;
        c1 := fuzz_counts();
        SELECT array_agg(b - a ORDER BY o) INTO d
          FROM unnest(c0, c1) WITH ORDINALITY AS u(a, b, o);
        -- d: events, dedupe, endpoints, secrets, positions, inbox, event_seq, endpoint_seq
        problem := CASE
            WHEN state <> 'ok' AND (wrote OR d <> '{0,0,0,0,0,0,0,0}') THEN
                format('refused (%s) but wrote: xid %s, deltas %s', state, wrote, d)
            WHEN state <> 'ok' AND state NOT IN ('22023', '22004', '54000', '42710', '22P02',
                                                  '22P05', '22007', '22008', '22003') THEN
                'unexpected SQLSTATE ' || state
            WHEN state <> 'ok' THEN NULL
            WHEN fn = 'emit' AND NOT (d[3:6] = '{0,0,0,0}'
                                      AND ((d[1] = 1 AND d[2] IN (0, 1))
                                           OR (d[1] = 0 AND d[2] = 0 AND call !~ 'dedupe_key => NULL\)$'))
                                      AND (EXISTS (SELECT FROM outbox.events e WHERE e.event_id = result::uuid)))
                THEN format('emit wrote deltas %s, returned %s', d, result)
            WHEN fn = 'create_endpoint' AND NOT (d[1:6] = '{0,0,1,1,1,0}' AND result ~ '^whsec_')
                THEN format('create_endpoint wrote deltas %s', d)
            WHEN fn LIKE 'mark_processed%' AND NOT (d[1:5] = '{0,0,0,0,0}'
                                                    AND ((result = 'true' AND d[6] = 1)
                                                         OR (result = 'false' AND d[6] = 0)))
                THEN format('mark_processed returned %s with deltas %s', result, d)
            WHEN fn = 'verify_signature' AND (wrote OR d <> '{0,0,0,0,0,0,0,0}'
                                              OR coalesce(result, 'false') NOT IN ('true', 'false'))
                THEN format('verify_signature returned %s, wrote %s', result, d)
            END;
        INSERT INTO fuzz_outcome VALUES (i, fn, call, state, left(result, 10), problem);
        COMMIT;
    END LOOP;
END
$$;

SELECT max(id) AS endpoint_max_before FROM outbox.endpoints \gset
SELECT setseed(0.42);
CALL fuzz_run(2000);

-- Outcomes by function and SQLSTATE.
SELECT fn, state, count(*) FROM fuzz_outcome GROUP BY fn, state ORDER BY fn COLLATE "C", state COLLATE "C";
-- Results of the calls that succeeded.
SELECT fn, r AS result, count(*)
  FROM (SELECT fn, CASE WHEN result ~ '^whsec_' THEN 'whsec_...'
                        WHEN fn = 'emit' THEN 'an event id'
                        ELSE coalesce(result, '(null)') END AS r
          FROM fuzz_outcome WHERE state = 'ok') s
 GROUP BY fn, r ORDER BY fn COLLATE "C", r COLLATE "C";
-- Calls that wrote something they should not have, or failed unexpectedly:
-- none.
SELECT n, left(call, 200) AS call, problem FROM fuzz_outcome WHERE problem IS NOT NULL ORDER BY n;

-- Clean up: the endpoints the run made.
SELECT count(outbox.drop_endpoint(name)) AS fuzz_endpoints_dropped
  FROM outbox.endpoints WHERE id > :endpoint_max_before;
SELECT outbox.drop_endpoint('fuzz-ep');
DROP PROCEDURE fuzz_run(int);
DROP FUNCTION fuzz_counts();
DROP FUNCTION fuzz_pick(text, text);
DROP TABLE fuzz_outcome, fuzz_pool, fuzz_calls;
