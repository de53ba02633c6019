-- Client authentication: auth => jsonb of create_endpoint and
-- alter_endpoint.  What the relay sends is t/025_auth.pl; here, the forms
-- accepted, the checks and their SQLSTATEs, nothing written by a refused
-- call, where auth is kept (with the signing secrets, in no view), and who
-- may name a client certificate.

SELECT current_setting('data_directory') || '/PG_VERSION' AS pem \gset

-- Each form, and a client certificate beside bearer or oauth2.
SELECT outbox.create_endpoint('auth-bearer', 'https://example.com/',
                              auth => '{"bearer": "tok-4f1a9c"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-mtls', 'https://example.com/',
                              auth => jsonb_build_object('client_cert', :'pem', 'client_key', :'pem')) IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-oauth', 'https://example.com/',
                              auth => '{"oauth2": {"token_url": "https://auth.example.com/token",
                                        "client_id": "outbox", "client_secret": "cs-8d2e7b", "scope": "hooks:write read"}}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-both', 'https://example.com/',
                              auth => jsonb_build_object('bearer', 'tok-b0th77', 'client_cert', :'pem', 'client_key', :'pem')) IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-none', 'https://example.com/', auth => '{}') IS NOT NULL AS created;
-- Kept with the secrets; '{}' is no auth.
SELECT e.name, jsonb_typeof(s.auth) AS auth, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s.auth) k) AS forms
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name LIKE 'auth-%' ORDER BY e.name;

-- No view shows it: no column named auth, and no row of any view holds a
-- token, a secret or a certificate's path.
SELECT v.relname AS view, a.attname AS auth_column
  FROM pg_class v JOIN pg_attribute a ON a.attrelid = v.oid
 WHERE v.relnamespace = 'outbox'::regnamespace AND v.relkind = 'v' AND a.attname LIKE '%auth%';
SELECT count(*) AS rows_with_auth
  FROM (SELECT to_jsonb(x)::text AS t FROM outbox.endpoint_status x
        UNION ALL SELECT to_jsonb(x)::text FROM outbox.backlog x) r
 WHERE r.t LIKE '%tok-4f1a9c%' OR r.t LIKE '%cs-8d2e7b%' OR r.t LIKE '%tok-b0th77%' OR r.t LIKE '%PG_VERSION%';

-- Bad values: 22023 each, with a message that names the key and no value.
-- None writes anything.
SELECT count(*) AS endpoints_before FROM outbox.endpoints \gset
SELECT a AS auth, try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)',
                             'auth-bad-' || n, 'https://example.com/', a)) AS result
  FROM unnest(ARRAY[
         '[]', '"tok"', 'null', '{"Bearer": "x"}', '{"bearer": 42}', '{"bearer": ""}',
         '{"bearer": "two words"}', '{"bearer": "line\nbreak"}', '{"bearer": null}',
         '{"client_cert": "/nonexistent/c.pem"}', '{"client_key": "/nonexistent/k.pem"}',
         '{"client_cert": "relative.pem", "client_key": "relative.pem"}',
         '{"client_cert": "/nonexistent/c.pem", "client_key": "/nonexistent/k.pem"}',
         '{"client_cert": "/", "client_key": "/"}',
         '{"oauth2": "https://auth.example.com/token"}',
         '{"oauth2": {}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i"}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_secret": "s"}}',
         '{"oauth2": {"client_id": "i", "client_secret": "s"}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_id": "", "client_secret": "s"}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": 7}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s", "scope": ""}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s", "scope": "a  b"}}',
         '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s", "audience": "x"}}',
         '{"oauth2": {"token_url": "ftp://a.example/t", "client_id": "i", "client_secret": "s"}}',
         '{"oauth2": {"token_url": "https://u:p@a.example/t", "client_id": "i", "client_secret": "s"}}',
         '{"bearer": "t", "oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s"}}'
       ]) WITH ORDINALITY AS u(a, n);
SELECT try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)', 'auth-bad-long', 'https://example.com/',
                  jsonb_build_object('bearer', repeat('t', 4097)))) AS long_bearer;
-- An unreadable file (the server runs as a user that cannot read /etc/shadow).
SELECT try($$SELECT outbox.create_endpoint('auth-bad-shadow', 'https://example.com/',
               auth => '{"client_cert": "/etc/shadow", "client_key": "/etc/shadow"}')$$) AS unreadable;
-- An Authorization header of the endpoint's own beside bearer or oauth2,
-- in any case; beside a client certificate alone it is the endpoint's.
SELECT try($$SELECT outbox.create_endpoint('auth-bad-hdr', 'https://example.com/',
               headers => '{"authorization": "Bearer other"}', auth => '{"bearer": "tok"}')$$) AS bearer_and_header;
SELECT try($$SELECT outbox.create_endpoint('auth-bad-hdr', 'https://example.com/',
               headers => '{"AUTHORIZATION": "Bearer other"}',
               auth => '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s"}}')$$) AS oauth2_and_header;
SELECT outbox.create_endpoint('auth-mtls-hdr', 'https://example.com/', headers => '{"Authorization": "Bearer own"}',
                              auth => jsonb_build_object('client_cert', :'pem', 'client_key', :'pem')) IS NOT NULL AS cert_and_header;
SELECT count(*) - :endpoints_before - 1 AS written FROM outbox.endpoints;

-- alter_endpoint: NULL leaves auth; a new object replaces it; '{}' removes
-- it; a bad one changes nothing, the other arguments of the call included.
SELECT s.auth AS auth_before FROM outbox.endpoint_secrets s WHERE s.endpoint_id = outbox._endpoint_id('auth-bearer') \gset
SELECT outbox.alter_endpoint('auth-bearer', timeout => '10 seconds');
SELECT s.auth = :'auth_before'::jsonb AS auth_kept FROM outbox.endpoint_secrets s
 WHERE s.endpoint_id = outbox._endpoint_id('auth-bearer');
SELECT outbox.alter_endpoint('auth-bearer', auth => '{"bearer": "tok-new-5e"}');
SELECT s.auth ->> 'bearer' AS bearer FROM outbox.endpoint_secrets s WHERE s.endpoint_id = outbox._endpoint_id('auth-bearer');
SELECT try($$SELECT outbox.alter_endpoint('auth-bearer', url => 'https://changed.example/', auth => '{"bearer": ""}')$$) AS bad_alter;
SELECT try($$SELECT outbox.alter_endpoint('auth-bearer', headers => '{"Authorization": "Bearer x"}')$$) AS header_beside_bearer;
SELECT try($$SELECT outbox.alter_endpoint('auth-mtls-hdr', auth => '{"bearer": "tok"}')$$) AS bearer_beside_header;
SELECT e.url, e.headers, s.auth ->> 'bearer' AS bearer
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id WHERE e.name = 'auth-bearer';
-- Both at once: the header goes and the bearer comes in one call.
SELECT outbox.alter_endpoint('auth-mtls-hdr', headers => '{}', auth => '{"bearer": "tok-swap"}');
SELECT e.headers, s.auth ->> 'bearer' AS bearer
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id WHERE e.name = 'auth-mtls-hdr';
SELECT outbox.alter_endpoint('auth-bearer', auth => '{}');
SELECT s.auth IS NULL AS removed FROM outbox.endpoint_secrets s WHERE s.endpoint_id = outbox._endpoint_id('auth-bearer');
-- Without auth, an Authorization header is the endpoint's own again.
SELECT outbox.alter_endpoint('auth-bearer', headers => '{"Authorization": "Bearer own"}');

-- Who may name a client certificate: an administrator that is not a
-- superuser (granted everything in schema outbox) may give a bearer token
-- or OAuth2, but a file of the server's only with the privileges of
-- pg_read_server_files (42501).
CREATE ROLE regress_outbox_admin;
GRANT USAGE ON SCHEMA outbox TO regress_outbox_admin;
GRANT ALL ON ALL TABLES IN SCHEMA outbox TO regress_outbox_admin;
GRANT ALL ON ALL SEQUENCES IN SCHEMA outbox TO regress_outbox_admin;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox TO regress_outbox_admin;
SET ROLE regress_outbox_admin;
SELECT try($$SELECT outbox.create_endpoint('auth-admin', 'https://example.com/', auth => '{"bearer": "tok-admin"}')$$) AS bearer;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)', 'auth-admin-cert', 'https://example.com/',
                  jsonb_build_object('client_cert', :'pem', 'client_key', :'pem'))) AS cert;
SELECT try(format('SELECT outbox.alter_endpoint(%L, auth => %L)', 'auth-admin',
                  jsonb_build_object('client_cert', :'pem', 'client_key', :'pem'))) AS alter_cert;
-- Altering something else of an endpoint with a certificate needs no file
-- privilege: the stored auth is not checked again.
SELECT try($$SELECT outbox.alter_endpoint('auth-mtls', timeout => '20 seconds')$$) AS alter_other;
RESET ROLE;
GRANT pg_read_server_files TO regress_outbox_admin;
SET ROLE regress_outbox_admin;
SELECT try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)', 'auth-admin-cert', 'https://example.com/',
                  jsonb_build_object('client_cert', :'pem', 'client_key', :'pem'))) AS cert_with_privilege;
RESET ROLE;
SELECT e.name, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s.auth) k) AS forms
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name LIKE 'auth-admin%' ORDER BY e.name;

-- The broker targets' forms: RabbitMQ a user and password, NATS those or
-- a token, Kafka SASL, and over TLS (amqps, tls, kafkas) a client
-- certificate beside them; each refuses the keys its target does not
-- apply (0A000), and a webhook refuses the brokers' keys; bad values are
-- 22023.  Nothing is written by a refused call.
SELECT outbox.create_endpoint('auth-amqp', 'amqp://127.0.0.1:5672/?exchange=x',
                              auth => '{"username": "pub", "password": "pw-amqp-31"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-amqps', 'amqps://127.0.0.1/?exchange=x',
                              auth => jsonb_build_object('username', 'pub', 'password', 'pw-amqps-97',
                                                         'client_cert', :'pem', 'client_key', :'pem')) IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-nats', 'nats://127.0.0.1:4222/s',
                              auth => '{"username": "pub", "password": "pw-nats-42"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-nats-tok', 'nats://127.0.0.1:4222/s',
                              auth => '{"token": "tok-nats-53"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-nats-tls', 'tls://127.0.0.1:4222/s',
                              auth => jsonb_build_object('token', 'tok-nats-tls-08',
                                                         'client_cert', :'pem', 'client_key', :'pem')) IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-kafkas', 'kafkas://127.0.0.1:9093/t',
                              auth => jsonb_build_object('sasl', '{"mechanism": "PLAIN", "username": "pub", "password": "pw-kafkas-19"}'::jsonb,
                                                         'client_cert', :'pem', 'client_key', :'pem')) IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-kafka', 'kafka://127.0.0.1:9092/t',
                              auth => '{"sasl": {"mechanism": "SCRAM-SHA-512", "username": "pub", "password": "pw-kafka-64"}}') IS NOT NULL AS created;
SELECT e.name, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s.auth) k) AS forms
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name IN ('auth-amqp', 'auth-amqps', 'auth-nats', 'auth-nats-tok', 'auth-nats-tls', 'auth-kafka', 'auth-kafkas')
 ORDER BY e.name;
-- Never in a view.
SELECT count(*) AS rows_with_broker_secrets
  FROM (SELECT to_jsonb(x)::text AS t FROM outbox.endpoint_status x
        UNION ALL SELECT to_jsonb(x)::text FROM outbox.backlog x) r
 WHERE r.t LIKE '%pw-amqp-31%' OR r.t LIKE '%pw-amqps-97%' OR r.t LIKE '%pw-nats-42%' OR r.t LIKE '%tok-nats-53%' OR r.t LIKE '%pw-kafka-64%'
    OR r.t LIKE '%tok-nats-tls-08%' OR r.t LIKE '%pw-kafkas-19%';
SELECT count(*) AS endpoints_before FROM outbox.endpoints \gset
SELECT u, regexp_replace(a::text, '"/[^"]*PG_VERSION"', '"PEM"', 'g') AS auth, try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)', 'auth-bad-broker', u, a)) AS result
  FROM (VALUES
         -- a key the scheme's target does not apply: 0A000
         ('amqp://127.0.0.1/?exchange=x', '{"bearer": "tok-x"}'),
         ('amqp://127.0.0.1/?exchange=x', '{"token": "tok-x"}'),
         ('amqp://127.0.0.1/?exchange=x', '{"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}}'),
         ('nats://127.0.0.1:4222/s', '{"bearer": "tok-x"}'),
         ('nats://127.0.0.1:4222/s', jsonb_build_object('client_cert', :'pem', 'client_key', :'pem')),  -- tls only
         ('amqp://127.0.0.1/?exchange=x', jsonb_build_object('client_cert', :'pem', 'client_key', :'pem')),  -- amqps only
         ('kafka://127.0.0.1:9092/t', '{"username": "u", "password": "p"}'),
         ('kafka://127.0.0.1:9092/t', jsonb_build_object('client_cert', :'pem', 'client_key', :'pem')),  -- kafkas only
         ('kafka://127.0.0.1:9092/t', '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s"}}'),
         ('https://example.com/', '{"username": "u", "password": "p"}'),
         ('https://example.com/', '{"token": "tok-x"}'),
         ('https://example.com/', '{"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}}'),
         -- bad values: 22023, naming the key and not the value
         ('amqp://127.0.0.1/?exchange=x', '{"username": "u"}'),
         ('amqp://127.0.0.1/?exchange=x', '{"password": "pw-alone-75"}'),
         ('amqp://127.0.0.1/?exchange=x', '{"username": "u", "password": ""}'),
         ('amqp://127.0.0.1/?exchange=x', '{"username": "u", "password": 7}'),
         ('amqp://127.0.0.1/?exchange=x', '{"username": "u", "password": "line\nbreak-86"}'),
         ('nats://127.0.0.1:4222/s', '{"token": "two words"}'),
         ('nats://127.0.0.1:4222/s', '{"token": "t", "username": "u", "password": "p"}'),
         ('nats://127.0.0.1:4222/s', '{"username": "u", "password": "pw\",\"user\":\"other"}'),
         ('tls://127.0.0.1:4222/s', '{"token": "back\\\\slash"}'),
         ('kafka://127.0.0.1:9092/t', '{"sasl": "PLAIN"}'),
         ('kafka://127.0.0.1:9092/t', '{"sasl": {"mechanism": "GSSAPI", "username": "u", "password": "p"}}'),
         ('kafka://127.0.0.1:9092/t', '{"sasl": {"username": "u", "password": "p"}}'),
         ('kafka://127.0.0.1:9092/t', '{"sasl": {"mechanism": "PLAIN", "username": "u"}}'),
         ('kafka://127.0.0.1:9092/t', '{"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p", "realm": "r"}}'),
         ('kafka://127.0.0.1:9092/t', '{"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}, "username": "u"}')
       ) AS v(u, a);
-- A client key with a passphrase is refused: the relay has none to give.
SELECT current_setting('data_directory') || '/encrypted_key.pem' AS enc_key \gset
COPY (SELECT '-----BEGIN ENCRYPTED PRIVATE KEY-----') TO :'enc_key';
SELECT regexp_replace(try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)', 'auth-enc', 'https://example.com/',
                                 jsonb_build_object('client_cert', :'pem', 'client_key', :'enc_key'))),
                      '"/[^"]*/encrypted_key.pem"', '"KEY"') AS encrypted_key;
-- A broker's auth moves with its URL: another target's keys are refused.
SELECT try($$SELECT outbox.alter_endpoint('auth-amqp', url => 'kafka://127.0.0.1:9092/t')$$) AS amqp_auth_to_kafka_url;
SELECT try($$SELECT outbox.alter_endpoint('auth-kafka', url => 'amqp://127.0.0.1/?exchange=x')$$) AS sasl_to_amqp_url;
SELECT try($$SELECT outbox.alter_endpoint('auth-admin', url => 'nats://127.0.0.1:4222/s')$$) AS bearer_endpoint_to_nats;
SELECT try($$SELECT outbox.alter_endpoint('auth-nats', auth => '{"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}}')$$) AS sasl_to_nats;
SELECT count(*) - :endpoints_before AS written FROM outbox.endpoints;
SELECT e.name, e.url, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s.auth) k) AS forms
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name IN ('auth-amqp', 'auth-kafka', 'auth-nats', 'auth-admin') ORDER BY e.name;
-- Both at once: a new URL with the auth its target takes.
SELECT outbox.alter_endpoint('auth-amqp', url => 'nats://127.0.0.1:4222/s', auth => '{"token": "tok-moved"}');
SELECT e.url, s.auth ? 'token' AS token FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name = 'auth-amqp';

-- Redis (1.7): bullmq, bullmqs, redis and rediss take an ACL user and
-- password (sent as AUTH); a password alone is refused (the user of
-- requirepass is "default"), and so is every other form (0A000), a
-- client certificate included (not presented yet).  Credentials in the
-- URL are refused whether or not auth is given, and the refusal does not
-- show them.  Nothing is written by a refused call.
SELECT outbox.create_endpoint('auth-bullmq', 'bullmq://127.0.0.1:6379/q',
                              auth => '{"username": "pub", "password": "pw-bullmq-23"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-bullmqs', 'bullmqs://127.0.0.1:6380/2/q',
                              auth => '{"username": "default", "password": "pw-bullmqs-61"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-redis', 'redis://127.0.0.1:6379/s',
                              auth => '{"username": "pub", "password": "pw with spaces-38"}') IS NOT NULL AS created;
SELECT outbox.create_endpoint('auth-rediss', 'rediss://127.0.0.1:6380/s',
                              auth => '{"username": "pub", "password": "pw-rediss-77"}') IS NOT NULL AS created;
SELECT e.name, e.url, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s.auth) k) AS forms
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name IN ('auth-bullmq', 'auth-bullmqs', 'auth-redis', 'auth-rediss')
 ORDER BY e.name;
SELECT count(*) AS rows_with_redis_secrets
  FROM (SELECT to_jsonb(x)::text AS t FROM outbox.endpoint_status x
        UNION ALL SELECT to_jsonb(x)::text FROM outbox.backlog x
        UNION ALL SELECT to_jsonb(x)::text FROM outbox.endpoints x) r
 WHERE r.t LIKE '%pw-bullmq-23%' OR r.t LIKE '%pw-bullmqs-61%' OR r.t LIKE '%pw with spaces-38%'
    OR r.t LIKE '%pw-rediss-77%';
SELECT count(*) AS endpoints_before FROM outbox.endpoints \gset
SELECT u, regexp_replace(a::text, '"/[^"]*PG_VERSION"', '"PEM"', 'g') AS auth, try(format('SELECT outbox.create_endpoint(%L, %L, auth => %L)', 'auth-bad-redis', u, a)) AS result
  FROM (VALUES
         -- a form Redis does not take: 0A000
         ('bullmq://127.0.0.1/q', '{"bearer": "tok-x"}'),
         ('redis://127.0.0.1/s', '{"bearer": "tok-x"}'),
         ('bullmqs://127.0.0.1/q', '{"token": "tok-x"}'),
         ('rediss://127.0.0.1/s', '{"oauth2": {"token_url": "https://a.example/t", "client_id": "i", "client_secret": "s"}}'),
         ('redis://127.0.0.1/s', '{"sasl": {"mechanism": "PLAIN", "username": "u", "password": "p"}}'),
         ('rediss://127.0.0.1/s', jsonb_build_object('username', 'u', 'password', 'p', 'client_cert', :'pem', 'client_key', :'pem')),
         -- bad values: 22023
         ('bullmq://127.0.0.1/q', '{"password": "pw-alone-12"}'),
         ('redis://127.0.0.1/s', '{"username": "u"}'),
         ('redis://127.0.0.1/s', '{"username": "u", "password": "line\nbreak-53"}'),
         -- credentials in the URL: 22023, shown as ***
         ('redis://u:pw-in-url-44@127.0.0.1/s', NULL),
         ('rediss://u:pw-in-url-44@127.0.0.1/s', '{"username": "u", "password": "p"}'),
         ('bullmq://:pw-in-url-44@127.0.0.1/q', NULL)
       ) AS v(u, a);
SELECT try($$SELECT outbox.alter_endpoint('auth-nats-tok', url => 'redis://127.0.0.1/s')$$) AS nats_token_to_redis_url;
SELECT try($$SELECT outbox.alter_endpoint('auth-redis', auth => '{"bearer": "tok-x"}')$$) AS bearer_to_redis;
SELECT try($$SELECT outbox.alter_endpoint('auth-redis', url => 'redis://u:pw-in-url-44@127.0.0.1/s')$$) AS credentials_into_url;
SELECT count(*) - :endpoints_before AS written FROM outbox.endpoints;
SELECT e.name, e.url, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(s.auth) k) AS forms
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name IN ('auth-nats-tok', 'auth-redis') ORDER BY e.name;
-- A user and password move between RabbitMQ and Redis with the URL; a new
-- password is kept (the relay logs in with it on a new connection).
SELECT outbox.alter_endpoint('auth-bullmq', url => 'amqp://127.0.0.1/?exchange=x');
SELECT outbox.alter_endpoint('auth-bullmq', url => 'bullmq://127.0.0.1:6379/q',
                             auth => '{"username": "pub", "password": "pw-bullmq-new-90"}');
SELECT e.url, s.auth->>'username' AS username, s.auth->>'password' = 'pw-bullmq-new-90' AS new_password
  FROM outbox.endpoints e JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
 WHERE e.name = 'auth-bullmq';

-- Clean up.
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints WHERE name LIKE 'auth-%' ORDER BY name;
SELECT count(*) AS secrets_left FROM outbox.endpoint_secrets;
DROP OWNED BY regress_outbox_admin;
DROP ROLE regress_outbox_admin;
