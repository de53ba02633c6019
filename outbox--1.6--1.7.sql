-- outbox 1.6 -> 1.7.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.7'" to load this file. \quit

-- Objects are changed in place (CREATE OR REPLACE, ALTER); nothing an
-- administrator may have granted on is dropped, so grants and initial
-- privileges stay as they are.

-- Redis endpoints (bullmq://, bullmqs://, redis://, rediss://) take an
-- ACL user and password in auth, which the target sends as AUTH; in 1.6
-- they took no auth.  The other schemes take what they took.
CREATE OR REPLACE FUNCTION outbox._check_auth_target(auth jsonb, url text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    scheme text := lower(split_part(url, '://', 1));
    target text;
    takes  text[];
    k      text;
BEGIN
    IF auth IS NULL THEN
        RETURN;
    END IF;
    CASE
        WHEN scheme IN ('http', 'https') THEN
            target := 'a webhook';
            takes := '{bearer,oauth2,client_cert,client_key}';
        WHEN scheme = 'amqp' THEN
            target := 'a RabbitMQ';
            takes := '{username,password}';
        WHEN scheme = 'amqps' THEN
            target := 'a RabbitMQ';
            takes := '{username,password,client_cert,client_key}';
        WHEN scheme = 'nats' THEN
            target := 'a NATS';
            takes := '{username,password,token}';
        WHEN scheme = 'tls' THEN
            target := 'a NATS';
            takes := '{username,password,token,client_cert,client_key}';
        WHEN scheme = 'kafka' THEN
            target := 'a Kafka';
            takes := '{sasl}';
        WHEN scheme = 'kafkas' THEN
            target := 'a Kafka';
            takes := '{sasl,client_cert,client_key}';
        WHEN scheme IN ('bullmq', 'bullmqs', 'redis', 'rediss') THEN
            target := 'a Redis';
            takes := '{username,password}';
        ELSE
            target := 'this';
            takes := '{}';
    END CASE;
    FOR k IN SELECT jsonb_object_keys(auth) ORDER BY 1 LOOP
        IF k IN ('client_cert', 'client_key') AND scheme IN ('amqp', 'nats', 'kafka') THEN
            RAISE EXCEPTION 'auth''s % is not supported for %:// endpoints', k, scheme
                USING ERRCODE = '0A000',
                      DETAIL = 'A client certificate is presented over TLS alone.',
                      HINT = format('Use %s://.', CASE scheme WHEN 'amqp' THEN 'amqps'
                                                              WHEN 'nats' THEN 'tls' ELSE 'kafkas' END);
        ELSIF NOT k = ANY (takes) THEN
            RAISE EXCEPTION 'auth''s % is not supported for % endpoint', k, target
                USING ERRCODE = '0A000',
                      DETAIL = format('The auth of an endpoint URL %s takes %s.',
                                      scheme || '://...', coalesce(nullif(array_to_string(takes, ', '), ''), 'no keys'));
        END IF;
    END LOOP;
    -- libnats writes these into its CONNECT message's JSON as they are.
    IF scheme IN ('nats', 'tls')
       AND EXISTS (SELECT 1 FROM jsonb_each_text(auth) kv
                    WHERE kv.key IN ('username', 'password', 'token') AND kv.value ~ '["\\]') THEN
        RAISE EXCEPTION 'auth''s username, password and token of a NATS endpoint may not hold a quote or a backslash'
            USING ERRCODE = '22023',
                  DETAIL = 'The NATS client sends them inside a JSON message without escaping them.';
    END IF;
END
$$;
