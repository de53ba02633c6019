-- Endpoints: create_endpoint, alter_endpoint, drop_endpoint, pause/resume
-- and endpoint_secret, with every refusal.

--------------------------------------------------------------------------
-- create_endpoint
--------------------------------------------------------------------------

-- Defaults: the returned secret is whsec_ + base64 of 32 random bytes, and
-- endpoint_secret() returns the same.
SELECT outbox.create_endpoint('ep-default', 'https://example.com/hook') AS secret_default \gset
SELECT :'secret_default' ~ '^whsec_[A-Za-z0-9+/]{43}=$' AS secret_format,
       length(decode(substr(:'secret_default', 7), 'base64')) AS key_bytes,
       outbox.endpoint_secret('ep-default') = :'secret_default' AS stored;
SELECT name, url, event_types, headers, ordered, timeout, max_attempts, paused,
       disabled_at, disabled_reason
  FROM outbox.endpoints WHERE name = 'ep-default';
-- Two endpoints get different secrets.
SELECT outbox.create_endpoint('ep-other', 'http://example.org') <> :'secret_default' AS different_secret;

-- A position row is created with the endpoint.
SELECT e.name, p.snap IS NOT NULL AS has_position
  FROM outbox.endpoints e JOIN outbox.positions p ON p.endpoint_id = e.id ORDER BY e.name COLLATE "C";

-- The position starts at the creating transaction: events emitted before it
-- are behind it, events emitted later (even in the same transaction) are not.
SELECT outbox.emit('before.endpoint', '1') AS before_id \gset
BEGIN;
SELECT outbox.create_endpoint('ep-snap', 'https://example.com/') IS NOT NULL AS created;
SELECT outbox.emit('after.endpoint', '1') AS after_id \gset
SELECT e.event_type, pg_visible_in_snapshot(e.txid, p.snap) AS already_done
  FROM outbox.events e, outbox.positions p
 WHERE p.endpoint_id = (SELECT id FROM outbox.endpoints WHERE name = 'ep-snap')
   AND e.event_id IN (:'before_id', :'after_id')
 ORDER BY e.id;
COMMIT;
-- The same under REPEATABLE READ, where the snapshot predates the
-- transaction's id.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) >= 0 AS snapshot_taken FROM outbox.events;
SELECT outbox.create_endpoint('ep-snap-rr', 'https://example.com/') IS NOT NULL AS created;
SELECT pg_visible_in_snapshot(pg_current_xact_id(), p.snap) AS own_txn_done,
       pg_visible_in_snapshot(e.txid, p.snap) AS earlier_event_done
  FROM outbox.positions p, outbox.events e
 WHERE p.endpoint_id = (SELECT id FROM outbox.endpoints WHERE name = 'ep-snap-rr')
   AND e.event_id = :'before_id';
COMMIT;

-- Every setting given, with the Standard Webhooks test secret.
SELECT outbox.create_endpoint('ep-full', 'https://hooks.example.com:8443/in/?a=1&b=2',
                              '{order.*,invoice.paid}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
                              '{"Authorization": "Bearer t0k3n", "X-Tenant": "acme"}',
                              true, '5 seconds', 3) AS returned_secret;
SELECT name, url, event_types, headers, ordered, timeout, max_attempts, paused
  FROM outbox.endpoints WHERE name = 'ep-full';
SELECT outbox.endpoint_secret('ep-full');
-- Named arguments; NULL headers mean none.
SELECT outbox.create_endpoint(name => 'ep-named', url => 'http://example.com:8080',
                              headers => NULL, max_attempts => 1) IS NOT NULL AS created;
SELECT name, url, headers, max_attempts FROM outbox.endpoints WHERE name = 'ep-named';

-- The views count what each endpoint is owed with _unread_all(), which
-- reads the events past each distinct position once: the same counts as
-- _unread() asked endpoint by endpoint (whose positions differ here).
-- One more endpoint between two emits, and one in the middle of a batch
-- (next_snap set, after_id at the first event of it).
SELECT count(outbox.emit(t, '{}')) AS emitted
  FROM unnest('{order.created,invoice.paid,invoice.sent,other}'::text[]) t;
SELECT outbox.create_endpoint('ep-between', 'https://example.com/', '{invoice.*}') IS NOT NULL AS created;
SELECT count(outbox.emit(t, '{}')) AS emitted
  FROM unnest('{order.created,invoice.paid,invoice.sent,other}'::text[]) t;
UPDATE outbox.positions p
   SET next_snap = pg_current_snapshot(),
       after_id = (SELECT min(e.id) FROM outbox.events e WHERE e.event_type = 'invoice.paid')
 WHERE p.endpoint_id = (SELECT id FROM outbox.endpoints WHERE name = 'ep-full');
SELECT count(*) AS endpoints,
       count(DISTINCT a.n) > 1 AS counts_differ,
       count(*) FILTER (WHERE (a.n, a.oldest) IS DISTINCT FROM (u.n, u.oldest)) AS disagreeing
  FROM outbox.endpoints ep
  JOIN outbox._unread_all() a ON a.endpoint_id = ep.id
  CROSS JOIN LATERAL outbox._unread(ep.id) u;
SELECT outbox.drop_endpoint('ep-between');

-- Secrets: the key may be 24 to 64 bytes.
SELECT s AS secret, try(format('SELECT outbox.create_endpoint(%L, %L, secret => %L)',
                               'ep-sec-' || n, 'https://example.com/', s)) AS result
  FROM unnest(ARRAY[
         'whsec_' || encode(convert_to(repeat('k', 24), 'UTF8'), 'base64'),
         'whsec_' || translate(encode(convert_to(repeat('k', 64), 'UTF8'), 'base64'), E'\n', ''),
         'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
         'whsec_',
         'whsec_!!!!MfKQ9r8GKYqrTwjUPD8ILPZIo2La',
         'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS',
         'whsec_MfKQ9r8GKYqr TwjUPD8ILPZIo2LaLaSw',
         'WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
         'whsec_' || encode(convert_to(repeat('k', 23), 'UTF8'), 'base64'),
         'whsec_' || translate(encode(convert_to(repeat('k', 65), 'UTF8'), 'base64'), E'\n', ''),
         ''
       ]) WITH ORDINALITY AS u(s, n);

-- Event type patterns that are valid.
SELECT p AS patterns, try(format('SELECT outbox.create_endpoint(%L, %L, %L)',
                                 'ep-pat-' || n, 'https://example.com/', p)) AS result
  FROM unnest(ARRAY['{*}', '{order.*}', '{order*}', '{a.b}', '{a.b,c.*,d*}', '{a_1.B_2}'])
       WITH ORDINALITY AS u(p, n);
SELECT name, event_types FROM outbox.endpoints WHERE name LIKE 'ep-pat-%' ORDER BY name COLLATE "C";

-- Event type patterns that are not.
SELECT p AS patterns, try(format('SELECT outbox.create_endpoint(%L, %L, %L)',
                                 'ep-badpat', 'https://example.com/', p)) AS result
  FROM unnest(ARRAY['{""}', '{NULL}', '{a,NULL}', '{**}', '{.*}', '{a.*.b}', '{*.a}',
                    '{a..*}', '{a.}', '{"a b"}', '{a-b}', '{}', '{{a},{b}}']) AS p;
SELECT try($$SELECT outbox.create_endpoint('ep-badpat', 'https://example.com/', NULL)$$) AS null_patterns;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L, %L)', 'ep-badpat', 'https://example.com/',
                  ARRAY[repeat('a', 256)])) AS pattern_256;

-- URLs: http and https only, normalized by libcurl (fragment dropped).
-- Addresses (loopback, private) are checked when the relay connects, not here.
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-url-' || n, u)) AS result
  FROM unnest(ARRAY[
         'http://example.com',
         'https://example.com:8443/path/to?x=1&y=two#fragment',
         'HTTPS://example.com/upper',
         'http://127.0.0.1:9000/hook',
         'http://[::1]:9000/hook'
       ]) WITH ORDINALITY AS v(u, n);
SELECT name, url FROM outbox.endpoints WHERE name LIKE 'ep-url-%' ORDER BY name COLLATE "C";
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badurl', u)) AS result
  FROM unnest(ARRAY[
         'ftp://example.com/',
         'file:///etc/passwd',
         'http://',
         'https:///path',
         'http:/example.com',
         'http://user:secret@example.com/',
         'http://user@example.com/',
         'example.com/hook',
         'garbage',
         '',
         'http://exa mple.com/',
         'http://example.com:99999/'
       ]) AS u;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badurl',
                  'https://example.com/' || repeat('a', 2029))) AS url_2049;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-url-2048',
                  'https://example.com/' || repeat('a', 2028))) AS url_2048;
SELECT try($$SELECT outbox.create_endpoint('ep-badurl', NULL)$$) AS null_url;

-- Kafka URLs (the Kafka target): servers, a topic that may contain
-- {event_type}, the options compression and linger_ms; the scheme is kept
-- in lower case; kafkas is the same over TLS.  Neither credentials nor
-- other options are accepted.
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-kafka-' || n, u)) AS result
  FROM unnest(ARRAY[
         'kafka://broker1:9092,broker2:9092/orders',
         'KAFKAS://broker1:9093,broker2:9093/orders',
         'KAFKA://[::1]:9092/events.{event_type}?compression=zstd&linger_ms=5',
         'kafka://broker/t'
       ]) WITH ORDINALITY AS v(u, n);
SELECT name, url FROM outbox.endpoints WHERE name LIKE 'ep-kafka-%' ORDER BY name COLLATE "C";
SELECT count(outbox.drop_endpoint(name)) AS dropped FROM outbox.endpoints WHERE name LIKE 'ep-kafka-%';
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badkafka', u)) AS result
  FROM unnest(ARRAY[
         'kafka://',
         'kafka://broker:9092',
         'kafka://broker:9092/',
         'kafka:///orders',
         'kafka://broker:0/orders',
         'kafka://broker:9092,/orders',
         'kafka://user:secret@broker:9092/orders',
         'kafkas://user:secret@broker:9092/orders',
         'kafka://broker:9092/or ders',
         'kafka://broker:9092/..',
         'kafka://broker:9092/orders?acks=0',
         'kafka://broker:9092/orders?compression=brotli',
         'kafka://broker:9092/orders?linger_ms=60001',
         'kafka://broker:9092/orders#x'
       ]) AS u;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badkafka',
                  'kafka://broker:9092/' || repeat('t', 250))) LIKE '22023: invalid endpoint URL %' AS topic_250_refused;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-kafka-249',
                  'kafka://broker:9092/' || repeat('t', 249))) AS topic_249;
SELECT count(outbox.drop_endpoint('ep-kafka-249')) AS dropped;
SELECT count(*) AS badkafka_written FROM outbox.endpoints WHERE name = 'ep-badkafka';

-- NATS JetStream URLs (the NATS target): servers (port 4222 when left
-- out), a subject of tokens that may contain {event_type}; the scheme is
-- kept in lower case; tls is the same over TLS, its servers sharing one
-- host name.  No credentials, options, wildcards or empty tokens.
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-nats-' || n, u)) AS result
  FROM unnest(ARRAY[
         'nats://n1:4222,n2:4222/orders',
         'TLS://nats.example:4222,nats.example:4223/orders',
         'NATS://[::1]:4222/events.{event_type}',
         'nats://localhost/orders.created',
         'nats://10.0.0.1:4222/a.{event_type}.b-c_d'
       ]) WITH ORDINALITY AS v(u, n);
SELECT name, url FROM outbox.endpoints WHERE name LIKE 'ep-nats-%' ORDER BY name COLLATE "C";
SELECT count(outbox.drop_endpoint(name)) AS dropped FROM outbox.endpoints WHERE name LIKE 'ep-nats-%';
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badnats', u)) AS result
  FROM unnest(ARRAY[
         'nats://',
         'nats://n1:4222',
         'nats://n1:4222/',
         'nats:///orders',
         'nats://n1:0/orders',
         'nats://n1:4222,/orders',
         'nats://user:secret@n1:4222/orders',
         'tls://n1:4222,n2:4222/orders',
         'tls://user:secret@n1:4222/orders',
         'nats://n1:4222/orders?stream=X',
         'nats://n1:4222/orders#x',
         'nats://n1:4222/orders.*',
         'nats://n1:4222/orders.>',
         'nats://n1:4222/orders..x',
         'nats://n1:4222/.orders',
         'nats://n1:4222/orders.',
         'nats://n1:4222/$JS.API.STREAM.DELETE.ORDERS',
         'nats://n1:4222/or ders'
       ]) AS u;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badnats',
                  'nats://n1:4222/' || repeat('s', 256))) LIKE '22023: invalid endpoint URL %' AS subject_256_refused;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-nats-255',
                  'nats://n1:4222/' || repeat('s', 255))) AS subject_255;
SELECT count(outbox.drop_endpoint('ep-nats-255')) AS dropped;
SELECT count(*) AS badnats_written FROM outbox.endpoints WHERE name = 'ep-badnats';
-- RabbitMQ URLs (the RabbitMQ target): host and port, a percent-encoded
-- virtual host ("/" when left out), exchange= (required, empty for the
-- default exchange) and routing_key= (may contain {event_type}); the
-- scheme is kept in lower case; amqps is AMQP over TLS (port 5671 by
-- default).  Neither credentials nor other options are accepted.
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-amqp-' || n, u)) AS result
  FROM unnest(ARRAY[
         'amqp://rabbit:5672/%2F?exchange=orders&routing_key=orders.{event_type}',
         'AMQP://rabbit?exchange=',
         'amqp://[::1]:5673/shop?routing_key=a%23b&exchange=amq.topic',
         'amqp://10.0.0.5/?exchange=orders',
         'AMQPS://rabbit/?exchange=orders'
       ]) WITH ORDINALITY AS v(u, n);
SELECT name, url FROM outbox.endpoints WHERE name LIKE 'ep-amqp-%' ORDER BY name COLLATE "C";
SELECT count(outbox.drop_endpoint(name)) AS dropped FROM outbox.endpoints WHERE name LIKE 'ep-amqp-%';
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badamqp', u)) AS result
  FROM unnest(ARRAY[
         'amqp://',
         'amqp://rabbit:5672/',
         'amqp://rabbit:5672/%2F',
         'amqp://:5672/?exchange=x',
         'amqp://rabbit:0/?exchange=x',
         'amqp://rabbit:65536/?exchange=x',
         'amqp://guest:guest@rabbit/?exchange=x',
         'amqps://guest:guest@rabbit/?exchange=x',
         'amqp://rabbit/a/b?exchange=x',
         'amqp://rabbit/%2?exchange=x',
         'amqp://rabbit/?exchange=or ders',
         'amqp://rabbit/?exchange=a/b',
         'amqp://rabbit/?exchange=x&exchange=y',
         'amqp://rabbit/?exchange=x&routing_key=',
         'amqp://rabbit/?exchange=x&mandatory=0',
         'amqp://rabbit/?exchange=x#f'
       ]) AS u;
-- BullMQ and Redis stream URLs (the Redis target): host and port (6379
-- by default), a database number, the queue or stream; bullmq options
-- job_id (no ":"), attempts, backoff, remove_on_complete, remove_on_fail,
-- prefix, layout, priority; redis option maxlen; bullmqs and rediss over
-- TLS.  Credentials and unknown options are refused.
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-redis-' || n, u)) AS result
  FROM unnest(ARRAY[
         'bullmq://redis:6379/emails',
         'BULLMQ://redis/2/emails?job_id=email-{key}-{event_id}&attempts=3&backoff=exponential:5000',
         'bullmq://[::1]:6380/q?remove_on_complete=100&remove_on_fail=false&prefix={bull}&layout=5&priority=off',
         'redis://redis/orders:stream',
         'REDIS://10.0.0.5:6379/3/audit?maxlen=1000',
         'BULLMQS://redis/q',
         'rediss://redis/s'
       ]) WITH ORDINALITY AS v(u, n);
SELECT name, url FROM outbox.endpoints WHERE name LIKE 'ep-redis-%' ORDER BY name COLLATE "C";
SELECT count(outbox.drop_endpoint(name)) AS dropped FROM outbox.endpoints WHERE name LIKE 'ep-redis-%';
SELECT u AS url, try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badredis', u)) AS result
  FROM unnest(ARRAY[
         'bullmq://',
         'bullmq://redis:6379/',
         'bullmq://redis:6379/x/q',
         'bullmq://redis/q:1',
         'bullmq://user:pw@redis/q',
         'bullmq://redis/q?job_id=a:{event_id}',
         'bullmq://redis/q?job_id={id}',
         'bullmq://redis/q?attempts=0',
         'bullmq://redis/q?backoff=linear:10',
         'bullmq://redis/q?remove_on_complete=maybe',
         'bullmq://redis/q?layout=3',
         'bullmq://redis/q?attempts=2&attempts=3',
         'bullmq://redis/q?maxlen=5',
         'redis://redis/s?maxlen=0',
         'redis://redis/s?job_id=x'
       ]) AS u;
SELECT count(*) AS badredis_written FROM outbox.endpoints WHERE name = 'ep-badredis';
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-badamqp',
                  'amqp://rabbit/?exchange=' || repeat('e', 256))) LIKE '22023: invalid endpoint URL %' AS exchange_256_refused;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', 'ep-amqp-255',
                  'amqp://rabbit/?exchange=' || repeat('e', 255))) AS exchange_255;
SELECT count(outbox.drop_endpoint('ep-amqp-255')) AS dropped;
SELECT count(*) AS badamqp_written FROM outbox.endpoints WHERE name = 'ep-badamqp';

-- Headers: the same rules as emit()'s.
SELECT h AS headers, try(format('SELECT outbox.create_endpoint(%L, %L, headers => %L)',
                                'ep-badhdr', 'https://example.com/', h)) AS result
  FROM unnest(ARRAY['[]', '"x"', '{"X-A": 1}', '{"X-A": "a\r\nb"}', '{"bad name": "v"}',
                    '{"webhook-signature": "v"}', '{"Content-Type": "text/plain"}']) AS h;

-- timeout: 1 second to 5 minutes; max_attempts: 1 to 100; neither NULL.
SELECT t AS timeout, try(format('SELECT outbox.create_endpoint(%L, %L, timeout => %L)',
                                'ep-to-' || n, 'https://example.com/', t)) AS result
  FROM unnest(ARRAY['1 second', '5 minutes', '999 milliseconds', '5 minutes 1 second',
                    '0', '-10 seconds', '1 day', '1 month']) WITH ORDINALITY AS u(t, n);
-- The bound holds for the milliseconds the relay uses, not only for the
-- interval comparison (which counts a year as 360 days, where
-- extract(epoch) takes 365.25): the first two compare as 10 seconds but
-- last 453,610 seconds, or -453,590; the third means 10 seconds either way.
SELECT t AS timeout, try(format('SELECT outbox.create_endpoint(%L, %L, timeout => %L)',
                                'ep-tb-' || n, 'https://example.com/', t)) AS result
  FROM unnest(ARRAY['1 year -360 days 10 seconds', '-1 year 360 days 10 seconds',
                    '1 month -30 days 10 seconds', '12 months -365 days 10 seconds']) WITH ORDINALITY AS u(t, n);
SELECT try($$SELECT outbox.alter_endpoint('ep-to-1', timeout => '1 year -360 days 10 seconds')$$) AS alter_bypass;
SELECT outbox._timeout_ms(timeout) AS timeout_ms FROM outbox.endpoints WHERE name = 'ep-to-1';
SELECT m AS max_attempts, try(format('SELECT outbox.create_endpoint(%L, %L, max_attempts => %s)',
                                     'ep-ma-' || n, 'https://example.com/', m)) AS result
  FROM unnest(ARRAY[1, 100, 0, 101, -1]) WITH ORDINALITY AS u(m, n);
-- max_in_flight: 1 to 10000, or NULL (the default) to follow
-- outbox.endpoint_concurrency; alter_endpoint takes 0 to go back to that.
SELECT m AS max_in_flight, try(format('SELECT outbox.create_endpoint(%L, %L, max_in_flight => %s)',
                                      'ep-mif-' || n, 'https://example.com/', m)) AS result
  FROM unnest(ARRAY[1, 10000, 0, 10001, -1]) WITH ORDINALITY AS u(m, n);
SELECT name, max_in_flight FROM outbox.endpoints WHERE name LIKE 'ep-mif-%' ORDER BY name;
SELECT try($$SELECT outbox.alter_endpoint('ep-mif-1', max_in_flight => 10001)$$) AS alter_too_many,
       try($$SELECT outbox.alter_endpoint('ep-mif-1', max_in_flight => -1)$$) AS alter_negative;
SELECT outbox.alter_endpoint('ep-mif-1', max_in_flight => 5);
SELECT max_in_flight FROM outbox.endpoints WHERE name = 'ep-mif-1';
SELECT outbox.alter_endpoint('ep-mif-1', timeout => '10 seconds');
SELECT max_in_flight AS kept FROM outbox.endpoints WHERE name = 'ep-mif-1';
SELECT outbox.alter_endpoint('ep-mif-1', max_in_flight => 0);
SELECT max_in_flight IS NULL AS follows_setting FROM outbox.endpoints WHERE name = 'ep-mif-1';
SELECT max_in_flight, in_flight FROM outbox.endpoint_status WHERE name = 'ep-mif-1';
SELECT try($$UPDATE outbox.endpoints SET max_in_flight = 0 WHERE name = 'ep-mif-1'$$) AS constraint_holds;
SELECT try($$SELECT outbox.create_endpoint('ep-null', 'https://example.com/', timeout => NULL)$$) AS null_timeout;
SELECT try($$SELECT outbox.create_endpoint('ep-null', 'https://example.com/', max_attempts => NULL)$$) AS null_max_attempts;
SELECT try($$SELECT outbox.create_endpoint('ep-null', 'https://example.com/', ordered => NULL)$$) AS null_ordered;

-- Names: 1 to 63 of [A-Za-z0-9_.:-], unique.
SELECT try($$SELECT outbox.create_endpoint('ep-default', 'https://example.net/')$$) AS duplicate;
SELECT n AS name, try(format('SELECT outbox.create_endpoint(%L, %L)', n, 'https://example.com/')) AS result
  FROM unnest(ARRAY['', 'a b', 'a/b', 'é', repeat('n', 64), 'x''; drop table outbox.endpoints; --']) AS n;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L)', repeat('n', 63), 'https://example.com/')) AS name_63;
SELECT try($$SELECT outbox.create_endpoint('A.z_0:9-', 'https://example.com/')$$) AS name_all_chars;
SELECT try($$SELECT outbox.create_endpoint(NULL, 'https://example.com/')$$) AS null_name;

-- Refusals left nothing behind: only the endpoints created above exist, each
-- with one secret and one position.
SELECT name FROM outbox.endpoints ORDER BY name COLLATE "C";
SELECT (SELECT count(*) FROM outbox.endpoints) AS endpoints,
       (SELECT count(*) FROM outbox.endpoint_secrets) AS secrets,
       (SELECT count(*) FROM outbox.positions) AS positions;

--------------------------------------------------------------------------
-- Unknown names: 42704 from every function that takes one.
--------------------------------------------------------------------------

SELECT f AS call, try(f) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.alter_endpoint('nope', max_attempts => 2)$$,
         $$SELECT outbox.drop_endpoint('nope')$$,
         $$SELECT outbox.pause_endpoint('nope')$$,
         $$SELECT outbox.resume_endpoint('nope')$$,
         $$SELECT outbox.endpoint_secret('nope')$$,
         $$SELECT outbox.endpoint_secret(NULL)$$
       ]) AS f;

--------------------------------------------------------------------------
-- alter_endpoint: each setting alone; NULL leaves it as it is.
--------------------------------------------------------------------------

SELECT outbox.create_endpoint('ep-alter', 'https://example.com/a') IS NOT NULL AS created;
SELECT outbox.endpoint_secret('ep-alter') AS alter_secret \gset
-- Nothing given: nothing changes.
SELECT outbox.alter_endpoint('ep-alter');
SELECT outbox.alter_endpoint('ep-alter', NULL, NULL, NULL, NULL, NULL, NULL, NULL);
SELECT url, event_types, headers, ordered, timeout, max_attempts,
       outbox.endpoint_secret('ep-alter') = :'alter_secret' AS secret_unchanged
  FROM outbox.endpoints WHERE name = 'ep-alter';
SELECT outbox.alter_endpoint('ep-alter', url => 'https://example.com/b#x');
SELECT outbox.alter_endpoint('ep-alter', event_types => '{order.*}');
SELECT outbox.alter_endpoint('ep-alter', headers => '{"X-Key": "v"}');
SELECT outbox.alter_endpoint('ep-alter', ordered => true);
SELECT outbox.alter_endpoint('ep-alter', timeout => '10 seconds');
SELECT outbox.alter_endpoint('ep-alter', max_attempts => 20);
SELECT url, event_types, headers, ordered, timeout, max_attempts,
       outbox.endpoint_secret('ep-alter') = :'alter_secret' AS secret_unchanged
  FROM outbox.endpoints WHERE name = 'ep-alter';
SELECT outbox.alter_endpoint('ep-alter', secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.endpoint_secret('ep-alter');
-- Headers can be cleared with '{}'.
SELECT outbox.alter_endpoint('ep-alter', headers => '{}');
SELECT headers FROM outbox.endpoints WHERE name = 'ep-alter';
-- Bad values are refused and change nothing.
SELECT f AS call, try(f) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.alter_endpoint('ep-alter', url => 'ftp://example.com/')$$,
         $$SELECT outbox.alter_endpoint('ep-alter', event_types => '{}')$$,
         $$SELECT outbox.alter_endpoint('ep-alter', event_types => '{**}')$$,
         $$SELECT outbox.alter_endpoint('ep-alter', secret => 'whsec_short')$$,
         $$SELECT outbox.alter_endpoint('ep-alter', headers => '{"host": "x"}')$$,
         $$SELECT outbox.alter_endpoint('ep-alter', timeout => '0')$$,
         $$SELECT outbox.alter_endpoint('ep-alter', max_attempts => 0)$$,
         $$SELECT outbox.alter_endpoint('ep-alter', url => 'https://example.com/c', max_attempts => 1000)$$
       ]) AS f;
SELECT url, event_types, headers, ordered, timeout, max_attempts,
       outbox.endpoint_secret('ep-alter') AS secret
  FROM outbox.endpoints WHERE name = 'ep-alter';

--------------------------------------------------------------------------
-- pause_endpoint and resume_endpoint
--------------------------------------------------------------------------

SELECT outbox.pause_endpoint('ep-alter');
SELECT paused FROM outbox.endpoints WHERE name = 'ep-alter';
-- Pausing twice is harmless.
SELECT outbox.pause_endpoint('ep-alter');
SELECT paused FROM outbox.endpoints WHERE name = 'ep-alter';
SELECT outbox.resume_endpoint('ep-alter');
SELECT paused FROM outbox.endpoints WHERE name = 'ep-alter';
-- resume_endpoint also clears a disable done by the relay.
UPDATE outbox.endpoints SET disabled_at = now(), disabled_reason = 'HTTP 410 Gone'
 WHERE name = 'ep-alter';
SELECT outbox.resume_endpoint('ep-alter');
SELECT paused, disabled_at, disabled_reason FROM outbox.endpoints WHERE name = 'ep-alter';

--------------------------------------------------------------------------
-- drop_endpoint removes the endpoint, its secret and its position.
--------------------------------------------------------------------------

SELECT id AS alter_id FROM outbox.endpoints WHERE name = 'ep-alter' \gset
SELECT outbox.drop_endpoint('ep-alter');
SELECT (SELECT count(*) FROM outbox.endpoints WHERE id = :alter_id) AS endpoints,
       (SELECT count(*) FROM outbox.endpoint_secrets WHERE endpoint_id = :alter_id) AS secrets,
       (SELECT count(*) FROM outbox.positions WHERE endpoint_id = :alter_id) AS positions;
SELECT try($$SELECT outbox.drop_endpoint('ep-alter')$$) AS drop_again;
-- The name can be used again.
SELECT outbox.create_endpoint('ep-alter', 'https://example.com/new') IS NOT NULL AS recreated;

-- A rolled-back create leaves nothing.
BEGIN;
SELECT outbox.create_endpoint('ep-rolled-back', 'https://example.com/') IS NOT NULL AS created;
ROLLBACK;
SELECT count(*) AS rolled_back FROM outbox.endpoints WHERE name = 'ep-rolled-back';

-- Clean up for the files that follow.
SELECT count(*) AS dropped FROM (SELECT outbox.drop_endpoint(name) FROM outbox.endpoints) d;
SELECT (SELECT count(*) FROM outbox.endpoints) AS endpoints,
       (SELECT count(*) FROM outbox.endpoint_secrets) AS secrets,
       (SELECT count(*) FROM outbox.positions) AS positions;
-- With no endpoints at all, unknown names are still refused.
SELECT f AS call, try(f) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.alter_endpoint('nope', max_attempts => 2)$$,
         $$SELECT outbox.drop_endpoint('nope')$$,
         $$SELECT outbox.pause_endpoint('nope')$$,
         $$SELECT outbox.resume_endpoint('nope')$$,
         $$SELECT outbox.endpoint_secret('nope')$$
       ]) AS f;

-- Recording: a failure after a success in the same record starts a new
-- failing period.  (Before 1.4 the old failing_since stayed, and an
-- endpoint that had just delivered could be disabled for no success
-- since then.)
SELECT outbox.create_endpoint('fs', 'http://127.0.0.1:9/fs', ARRAY['fs.t']) IS NOT NULL AS created;
UPDATE outbox.endpoint_health SET failing_since = now() - interval '1 day', consecutive_failures = 7
 WHERE endpoint_id = outbox._endpoint_id('fs');
SELECT outbox._record(ARRAY[
         ROW(outbox._endpoint_id('fs'), 1, gen_random_uuid(), 1, 'delivered', NULL, 200, NULL, 1, 'ok', NULL)::outbox.outcome,
         ROW(outbox._endpoint_id('fs'), 2, gen_random_uuid(), 1, 'retry', now() + interval '1 hour', 500, 'no', 1, 'no', NULL)::outbox.outcome],
       '{}', '{}') AS held;
SELECT failing_since > now() - interval '1 minute' AS new_period, consecutive_failures,
       last_failure_status
  FROM outbox.endpoint_health WHERE endpoint_id = outbox._endpoint_id('fs');
SELECT disabled_at IS NULL AS enabled FROM outbox.endpoints WHERE name = 'fs';
-- An endpoint the relay names quiet (it had its successes counted less
-- than a second ago): successes alone leave its health row alone; a
-- failure is counted all the same; the next success, not quiet (another
-- endpoint is), ends it.
UPDATE outbox.endpoint_health SET last_success_at = NULL, consecutive_failures = 0, failing_since = NULL
 WHERE endpoint_id = outbox._endpoint_id('fs');
SELECT outbox._record(ARRAY[
         ROW(outbox._endpoint_id('fs'), 4, gen_random_uuid(), 1, 'delivered', NULL, 200, NULL, 1, 'ok', NULL)::outbox.outcome],
       '{}', '{}', ARRAY[outbox._endpoint_id('fs')]) AS held;
SELECT last_success_at IS NULL AS untouched FROM outbox.endpoint_health WHERE endpoint_id = outbox._endpoint_id('fs');
SELECT outbox._record(ARRAY[
         ROW(outbox._endpoint_id('fs'), 5, gen_random_uuid(), 1, 'retry', now() + interval '1 hour', 503, 'down', 1, 'x', NULL)::outbox.outcome],
       '{}', '{}', ARRAY[outbox._endpoint_id('fs')]) AS held;
SELECT consecutive_failures, last_failure_status, failing_since IS NOT NULL AS failing
  FROM outbox.endpoint_health WHERE endpoint_id = outbox._endpoint_id('fs');
SELECT outbox._record(ARRAY[
         ROW(outbox._endpoint_id('fs'), 6, gen_random_uuid(), 1, 'delivered', NULL, 200, NULL, 1, 'ok', NULL)::outbox.outcome],
       '{}', '{}', ARRAY[outbox._endpoint_id('fs') + 1000]) AS held;
SELECT last_success_at IS NOT NULL AS written, consecutive_failures, failing_since IS NULL AS healthy
  FROM outbox.endpoint_health WHERE endpoint_id = outbox._endpoint_id('fs');
-- An outcome is one of outbox.outcome_kind's labels: a misspelt one is an
-- error, and nothing is recorded.
SELECT outbox._record(ARRAY[
         ROW(outbox._endpoint_id('fs'), 3, gen_random_uuid(), 1, 'delivred', NULL, 200, NULL, 1, 'ok', NULL)::outbox.outcome],
       '{}', '{}') AS held;
SELECT count(*) AS attempts_of_3 FROM outbox.attempt_log WHERE id = 3;
SELECT outbox.drop_endpoint('fs');
-- A record reaches the rows of its endpoints by key, however stale the
-- statistics: here they were taken after 2,000 endpoints had been dropped
-- (no live rows, and the pages kept), so the planner takes the health rows
-- and positions of 2,000 new ones for empty.  Joined on the key alone, the
-- plan walked every row of both tables as its outer side, on every record.
SELECT count(outbox.create_endpoint('churn' || n, 'http://127.0.0.1:9/c', ARRAY['churn.t']))
  FROM generate_series(1, 2000) n;
SELECT count(outbox.drop_endpoint('churn' || n)) FROM generate_series(1, 2000) n;
ANALYZE outbox.endpoint_health;
ANALYZE outbox.positions;
ANALYZE outbox.endpoints;
ANALYZE outbox.endpoint_secrets;
SELECT count(outbox.create_endpoint('churn' || n, 'http://127.0.0.1:9/c', ARRAY['churn.t']))
  FROM generate_series(1, 2000) n;
-- (the counts below are this session's since its last report: report now)
SELECT pg_stat_force_next_flush();
BEGIN;
SELECT count(outbox._record(ARRAY[
         ROW(outbox._endpoint_id('churn1'), 7, gen_random_uuid(), 1, 'delivered', NULL, 200, NULL, 1, 'ok', NULL)::outbox.outcome],
       ARRAY[ROW(outbox._endpoint_id('churn1'), 'none', 7, false)::outbox.page_done], '{}'))
  FROM generate_series(1, 8) AS records;
SELECT relname, idx_tup_fetch < 100 AS by_key
  FROM pg_stat_xact_user_tables WHERE relname IN ('endpoint_health', 'positions') ORDER BY relname;
ROLLBACK;
-- So does loading the endpoints: every row of three tables joined on their
-- keys, never as a nested loop (which walked every secret for each
-- endpoint, 2,000 x 2,000 rows here).
BEGIN;
CREATE TEMP TABLE read_before AS
  SELECT relname, idx_tup_fetch + seq_tup_read AS n FROM pg_stat_xact_user_tables;
SELECT count(*) AS loaded FROM outbox._relay_endpoints() WHERE starts_with(name, 'churn');
SELECT t.relname, t.idx_tup_fetch + t.seq_tup_read - coalesce(b.n, 0) < 3 * 2000 AS each_row_once
  FROM pg_stat_xact_user_tables t LEFT JOIN read_before b ON b.relname = t.relname
 WHERE t.relname IN ('endpoints', 'endpoint_secrets', 'positions')
 ORDER BY t.relname;
ROLLBACK;
-- And attaching them to the stream, here all 2,000 at once: each position
-- is reached by key (the update that took them from a locking subquery
-- compared each with every candidate).
BEGIN;
SELECT array_agg(id) AS churn_ids FROM outbox.endpoints WHERE starts_with(name, 'churn') \gset
UPDATE outbox.positions p SET snap = s.snap, next_snap = s.next_snap, after_id = s.after_id, follows = false
  FROM outbox.stream s WHERE p.endpoint_id = ANY (:'churn_ids'::integer[]);
SELECT idx_tup_fetch + seq_tup_read AS positions_read
  FROM pg_stat_xact_user_tables WHERE relname = 'positions' \gset
SELECT cardinality(outbox._attach(:'churn_ids'::integer[])) AS attached;
SELECT idx_tup_fetch + seq_tup_read - :positions_read < 10 * 2000 AS by_key
  FROM pg_stat_xact_user_tables WHERE relname = 'positions';
ROLLBACK;
SELECT count(outbox.drop_endpoint('churn' || n)) FROM generate_series(1, 2000) n;
