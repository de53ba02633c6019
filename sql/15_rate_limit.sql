-- Rate limits per endpoint: the rate_limit argument of create_endpoint and
-- alter_endpoint, its checks and their SQLSTATEs, nothing written by a
-- refused call, and endpoint_status's columns.  What the relay does with a
-- limit is t/023_rate_limit.pl.

-- None by default; a whole number, a fraction, the largest.
SELECT outbox.create_endpoint('rl-none', 'https://example.com/') IS NOT NULL AS created;
SELECT outbox.create_endpoint('rl-20', 'https://example.com/', rate_limit => 20) IS NOT NULL AS created;
SELECT outbox.create_endpoint('rl-half', 'https://example.com/', rate_limit => 0.5) IS NOT NULL AS created;
SELECT outbox.create_endpoint('rl-max', 'https://example.com/', rate_limit => 1000000) IS NOT NULL AS created;
SELECT name, rate_limit FROM outbox.endpoints WHERE name LIKE 'rl-%' ORDER BY name;
-- No relay serves this database (outbox.database): nothing is held.
SELECT name, rate_limit, rate_limited FROM outbox.endpoint_status WHERE name LIKE 'rl-%' ORDER BY name;

-- Bad values: 0 and below, above a million, NaN, Infinity.  None writes
-- anything, the endpoint's position and secret included.
SELECT count(*) AS endpoints_before FROM outbox.endpoints \gset
SELECT r AS rate_limit, try(format('SELECT outbox.create_endpoint(%L, %L, rate_limit => %L::numeric)',
                                   'rl-bad-' || n, 'https://example.com/', r)) AS result
  FROM unnest(ARRAY['0', '-1', '-0.001', '1000000.5', '1e7', 'NaN', 'Infinity', '-Infinity'])
       WITH ORDINALITY AS u(r, n);
SELECT count(*) - :endpoints_before AS written FROM outbox.endpoints;
SELECT count(*) AS positions FROM outbox.positions p
 WHERE NOT EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.id = p.endpoint_id);

-- alter_endpoint: sets it, NULL leaves it, 0 takes it away; a bad value
-- changes nothing, the other arguments of the call included.
SELECT outbox.alter_endpoint('rl-none', rate_limit => 5);
SELECT rate_limit FROM outbox.endpoints WHERE name = 'rl-none';
SELECT outbox.alter_endpoint('rl-none', timeout => '10 seconds');
SELECT rate_limit AS kept FROM outbox.endpoints WHERE name = 'rl-none';
SELECT try($$SELECT outbox.alter_endpoint('rl-none', timeout => '20 seconds', rate_limit => -5)$$) AS alter_negative,
       try($$SELECT outbox.alter_endpoint('rl-none', rate_limit => 'NaN')$$) AS alter_nan,
       try($$SELECT outbox.alter_endpoint('rl-none', rate_limit => 2000000)$$) AS alter_too_many;
SELECT rate_limit, timeout FROM outbox.endpoints WHERE name = 'rl-none';
SELECT outbox.alter_endpoint('rl-none', rate_limit => 0);
SELECT rate_limit IS NULL AS no_limit FROM outbox.endpoints WHERE name = 'rl-none';
SELECT outbox.alter_endpoint('rl-20', rate_limit => 0.25);
SELECT rate_limit FROM outbox.endpoint_status WHERE name = 'rl-20';

-- The table's constraint holds for a direct write too.
SELECT try($$UPDATE outbox.endpoints SET rate_limit = 0 WHERE name = 'rl-20'$$) AS constraint_zero,
       try($$UPDATE outbox.endpoints SET rate_limit = 'NaN' WHERE name = 'rl-20'$$) AS constraint_nan;

-- The relay loads it as a double.
SELECT name, rate_limit FROM outbox._relay_endpoints() WHERE name LIKE 'rl-%' ORDER BY name;

-- The error in full.
\set SHOW_CONTEXT never
SELECT outbox.create_endpoint('rl-bad', 'https://example.com/', rate_limit => 0);
\set SHOW_CONTEXT errors

SELECT outbox.drop_endpoint(name) FROM outbox.endpoints WHERE name LIKE 'rl-%';
