-- Expiry and priority: emit's expires_at and priority, an endpoint's
-- max_age, their checks and SQLSTATEs (nothing written by a refused call),
-- what the readers return, the outcome 'expired' as _record records it, and
-- endpoint_status's count.  What the relay does with them is
-- t/024_expiry_priority.pl.

--------------------------------------------------------------------------
-- emit
--------------------------------------------------------------------------

-- New arguments by name; priority 0 (the default) is stored as NULL.
SELECT outbox.emit('exp.a', '{"n": 1}', expires_at => '2030-01-01 00:00:00+00') IS NOT NULL AS emitted,
       outbox.emit('exp.a', '{"n": 2}', priority => 7) IS NOT NULL AS with_priority,
       outbox.emit('exp.a', '{"n": 3}', priority => -3, expires_at => '2030-06-01 00:00:00+00') IS NOT NULL AS both,
       outbox.emit('exp.a', '{"n": 4}', priority => 0) IS NOT NULL AS zero,
       outbox.emit('exp.a', '{"n": 5}', priority => NULL) IS NOT NULL AS null_priority,
       outbox.emit('exp.a', '{"n": 6}', priority => 32767::smallint) IS NOT NULL AS smallint_arg;
-- By position, all eight; and the six of 1.4 still mean what they meant.
SELECT outbox.emit('exp.a', '{"n": 7}', 'k7', '{"X-A": "b"}', '2029-01-01 00:00:00+00', 'dk-exp-7',
                   '2029-01-02 00:00:00+00', -32768) IS NOT NULL AS all_eight,
       outbox.emit('exp.a', '{"n": 8}', 'k8', NULL, NULL, 'dk-exp-8') IS NOT NULL AS old_six;
SELECT payload->>'n' AS n, key, deliver_at AT TIME ZONE 'UTC' AS deliver_at_utc,
       expires_at AT TIME ZONE 'UTC' AS expires_at_utc, priority
  FROM outbox.events WHERE event_type = 'exp.a' ORDER BY id;
-- An expires_at already past is taken (the event expires unsent).
SELECT outbox.emit('exp.past', '1', expires_at => now() - interval '1 minute') IS NOT NULL AS past_taken;

-- Bad values: clear errors, nothing written.
SELECT count(*) AS events_before FROM outbox.events \gset
SELECT c AS call, try(c) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.emit('exp.bad', '1', expires_at => 'infinity')$$,
         $$SELECT outbox.emit('exp.bad', '1', expires_at => '-infinity')$$,
         $$SELECT outbox.emit('exp.bad', '1', deliver_at => '2030-01-01', expires_at => '2030-01-01')$$,
         $$SELECT outbox.emit('exp.bad', '1', deliver_at => '2030-01-02', expires_at => '2030-01-01')$$,
         $$SELECT outbox.emit('exp.bad', '1', priority => 32768)$$,
         $$SELECT outbox.emit('exp.bad', '1', priority => -32769)$$
       ]) AS c;
SELECT count(*) - :events_before AS written FROM outbox.events;

--------------------------------------------------------------------------
-- max_age
--------------------------------------------------------------------------

SELECT outbox.create_endpoint('exp-none', 'https://example.com/', ARRAY['exp.*']) IS NOT NULL AS created;
SELECT outbox.create_endpoint('exp-age', 'https://example.com/', ARRAY['exp.*'],
                              max_age => '15 minutes') IS NOT NULL AS created;
SELECT name, max_age, expired FROM outbox.endpoint_status WHERE name LIKE 'exp-%' ORDER BY name;
-- The relay loads it in milliseconds, as it does the timeout.
SELECT name, max_age_ms FROM outbox._relay_endpoints() WHERE name LIKE 'exp-%' ORDER BY name;

-- alter_endpoint: NULL leaves it, a value sets it, '0' takes it away.
SELECT outbox.alter_endpoint('exp-age', max_attempts => 3);
SELECT max_age FROM outbox.endpoints WHERE name = 'exp-age';
SELECT outbox.alter_endpoint('exp-none', max_age => '2 days');
SELECT outbox.alter_endpoint('exp-age', max_age => '0');
SELECT name, max_age FROM outbox.endpoints WHERE name LIKE 'exp-%' ORDER BY name;

-- Bad values: 22023, nothing written (the endpoint keeps its max_age, no
-- endpoint is made).
SELECT count(*) AS endpoints_before FROM outbox.endpoints \gset
SELECT a AS max_age,
       try(format('SELECT outbox.create_endpoint(%L, %L, max_age => %L)', 'exp-bad', 'https://example.com/', a)) AS on_create,
       try(format('SELECT outbox.alter_endpoint(%L, max_age => %L, max_attempts => 1)', 'exp-none', a)) AS on_alter
  FROM unnest(ARRAY['999 milliseconds', '-1 minute', '3651 days', '11 years', '1 year -400 days']) AS a;
SELECT try($$SELECT outbox.create_endpoint('exp-bad', 'https://example.com/', max_age => '0')$$) AS zero_on_create;
SELECT count(*) - :endpoints_before AS endpoints_written FROM outbox.endpoints;
SELECT name, max_age, max_attempts FROM outbox.endpoints WHERE name = 'exp-none';

--------------------------------------------------------------------------
-- What the relay reads
--------------------------------------------------------------------------

-- A page of an endpoint's own carries expires_at and priority (0 for none).
SELECT outbox.create_endpoint('exp-read', 'https://example.com/', ARRAY['exp.read']) IS NOT NULL AS created;
SELECT outbox.emit('exp.read', '1', expires_at => '2031-01-01 00:00:00+00', priority => 2) IS NOT NULL AS emitted,
       outbox.emit('exp.read', '2') IS NOT NULL AS emitted;
SELECT data, expires_at AT TIME ZONE 'UTC' AS expires_at_utc, priority
  FROM outbox._read_page(outbox._endpoint_id('exp-read'), 10, false, 1048576);

-- Due retries are read highest priority first, then oldest due; a failed
-- delivery's retry row takes its event's priority from _record.
SELECT outbox.emit('exp.read', to_jsonb(n), priority => p) IS NOT NULL AS emitted
  FROM (VALUES (3, 0), (4, 5), (5, -1), (6, 5)) v(n, p);
SELECT outbox._record(ARRAY(
         SELECT ROW(outbox._endpoint_id('exp-read'), e.id, e.event_id, 1, 'retry',
                    now() - interval '1 second' * e.id, 500, 'no', 1, NULL, NULL)::outbox.outcome
           FROM outbox.events e WHERE e.event_type = 'exp.read' AND e.payload::int >= 3),
       '{}', '{}') AS held;
SELECT data, priority
  FROM outbox._read_due(outbox._endpoint_id('exp-read'), 10, false, 1048576);
SELECT (SELECT payload FROM outbox.events e WHERE e.id = r.id) AS data, r.priority
  FROM outbox.retries r WHERE r.endpoint_id = outbox._endpoint_id('exp-read') ORDER BY r.id;

--------------------------------------------------------------------------
-- Recording 'expired'
--------------------------------------------------------------------------

-- An expired event is settled: an attempt-log row with error 'expired' and
-- no status, its retry row gone, no dead letter, no failure in the
-- endpoint's health (its 4 failures are the retries above);
-- endpoint_status counts it.
SELECT outbox._record(ARRAY(
         SELECT ROW(outbox._endpoint_id('exp-read'), e.id, e.event_id, 2, 'expired',
                    NULL, NULL, NULL, NULL, NULL, NULL)::outbox.outcome
           FROM outbox.events e WHERE e.event_type = 'exp.read' AND e.payload::int IN (3, 4)),
       '{}', '{}') AS held;
SELECT a.attempt, a.status, a.error, a.duration_ms, a.response, a.event_type
  FROM outbox.attempts a
 WHERE a.endpoint = 'exp-read' AND a.error = 'expired' ORDER BY a.event_id;
SELECT (SELECT payload FROM outbox.events e WHERE e.id = r.id) AS still_in_retry
  FROM outbox.retries r WHERE r.endpoint_id = outbox._endpoint_id('exp-read') ORDER BY r.id;
SELECT name, expired, in_retry, dead FROM outbox.endpoint_status WHERE name = 'exp-read';
SELECT consecutive_failures, last_failure_status FROM outbox.endpoint_health
 WHERE endpoint_id = outbox._endpoint_id('exp-read');

-- A page of expired events moves the endpoint's position on like any
-- other page: they are settled, not owed.
SELECT outbox.create_endpoint('exp-page', 'https://example.com/', ARRAY['exp.page']) IS NOT NULL AS created;
SELECT outbox.emit('exp.page', to_jsonb(n), expires_at => now()) IS NOT NULL AS emitted
  FROM generate_series(1, 3) n;
SELECT count(*) AS read, bool_and(batch IS NOT NULL) AS in_batch
  FROM outbox._read_page(outbox._endpoint_id('exp-page'), 10, false, 1048576) \gset
SELECT :read AS read;
SELECT outbox._record(ARRAY(
         SELECT ROW(outbox._endpoint_id('exp-page'), e.id, e.event_id, 1, 'expired',
                    NULL, NULL, NULL, NULL, NULL, NULL)::outbox.outcome
           FROM outbox.events e WHERE e.event_type = 'exp.page'),
       ARRAY(SELECT ROW(p.endpoint_id, p.next_snap::text, 0, true)::outbox.page_done
               FROM outbox.positions p WHERE p.endpoint_id = outbox._endpoint_id('exp-page')),
       '{}') AS held;
SELECT name, events_waiting, expired FROM outbox.endpoint_status WHERE name = 'exp-page';

SELECT outbox.drop_endpoint(name) FROM outbox.endpoints WHERE name LIKE 'exp-%' ORDER BY name;
