-- outbox.verify_signature(): Standard Webhooks verification.

-- The test vector from the Standard Webhooks specification.
\set secret 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
\set msg_id 'msg_p5jXN8AQM9LWM0D4loKWxJek'
\set ts 1614265330
\set body '{"test": 2432232314}'
\set sig 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE='

-- The right signature, with a tolerance that covers the vector's age.
SELECT outbox.verify_signature(:'secret', :'msg_id', :ts, :'body', :'sig', '10000 days') AS valid;
-- With the default tolerance of 5 minutes the 2021 timestamp is too old.
SELECT outbox.verify_signature(:'secret', :'msg_id', :ts, :'body', :'sig') AS too_old;
-- Anything changed: body, id, timestamp, secret.
SELECT outbox.verify_signature(:'secret', :'msg_id', :ts, '{"test": 2432232315}', :'sig', '10000 days') AS body_changed,
       outbox.verify_signature(:'secret', :'msg_id', :ts, '{"test":2432232314}', :'sig', '10000 days') AS body_reformatted,
       outbox.verify_signature(:'secret', 'msg_p5jXN8AQM9LWM0D4loKWxJel', :ts, :'body', :'sig', '10000 days') AS id_changed,
       outbox.verify_signature(:'secret', :'msg_id', :ts + 1, :'body', :'sig', '10000 days') AS timestamp_changed,
       outbox.verify_signature('whsec_' || encode(convert_to(repeat('k', 24), 'UTF8'), 'base64'),
                               :'msg_id', :ts, :'body', :'sig', '10000 days') AS other_secret;

-- The header may list several signatures separated by spaces (during a
-- secret rotation); one match is enough.  Only "v1," entries count.
SELECT s AS signature_header,
       outbox.verify_signature(:'secret', :'msg_id', :ts, :'body', s, '10000 days') AS valid
  FROM unnest(ARRAY[
         'v1,bogus v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
         'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,bogus',
         'v1a,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
         'v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
         'g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
         'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE',
         'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE==',
         'v1,G0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
         'v1,',
         'v1',
         '',
         ' '
       ]) AS s;

-- NULL in any argument gives NULL (the function is strict).
SELECT outbox.verify_signature(NULL, :'msg_id', :ts, :'body', :'sig') IS NULL AS null_secret,
       outbox.verify_signature(:'secret', :'msg_id', :ts, NULL, :'sig') IS NULL AS null_body;

-- Refusals: a malformed secret or a negative tolerance (22023).
SELECT c AS call, try(c) AS result
  FROM unnest(ARRAY[
         $$SELECT outbox.verify_signature('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x')$$,
         $$SELECT outbox.verify_signature('whsec_short', 'm', 1, 'b', 'v1,x')$$,
         $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x', '-1 second')$$,
         $$SELECT outbox.verify_signature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'm', 1, 'b', 'v1,x', '1 day -86401 seconds')$$
       ]) AS c;

-- The tolerance window around now, checked with signatures computed here in
-- SQL (HMAC-SHA256 from sha256(), verified first against the test vector).
CREATE FUNCTION hmac_sha256(key bytea, msg bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    k bytea := key || decode(repeat('00', 64 - length(key)), 'hex');  -- keys here are at most 64 bytes
    ipad bytea := k;
    opad bytea := k;
BEGIN
    FOR i IN 0..63 LOOP
        ipad := set_byte(ipad, i, get_byte(k, i) # 54);
        opad := set_byte(opad, i, get_byte(k, i) # 92);
    END LOOP;
    RETURN sha256(opad || sha256(ipad || msg));
END
$$;
CREATE FUNCTION sign_v1(secret text, msg_id text, ts bigint, body text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 'v1,' || encode(hmac_sha256(decode(substr(secret, 7), 'base64'),
                                       convert_to(msg_id || '.' || ts || '.' || body, 'UTF8')), 'base64')
$$;
SELECT sign_v1(:'secret', :'msg_id', :ts, :'body') = :'sig' AS helper_matches_vector;

SELECT extract(epoch FROM now())::bigint AS now_ts \gset
SELECT d AS seconds_from_now,
       outbox.verify_signature(:'secret', 'msg_now', :now_ts + d, :'body',
                               sign_v1(:'secret', 'msg_now', :now_ts + d, :'body')) AS default_tolerance,
       outbox.verify_signature(:'secret', 'msg_now', :now_ts + d, :'body',
                               sign_v1(:'secret', 'msg_now', :now_ts + d, :'body'), '1 hour') AS one_hour
  FROM unnest(ARRAY[0, -120, 120, -3000, 3000, -4000, 4000]) AS d;
-- A day ahead is outside an hour's tolerance.
SELECT outbox.verify_signature(:'secret', 'msg_now', :now_ts + 86400, :'body',
                               sign_v1(:'secret', 'msg_now', :now_ts + 86400, :'body'), '1 hour') AS day_ahead;
-- A longer key (64 bytes) and a multibyte body.
SELECT 'whsec_' || translate(encode(convert_to(repeat('K', 64), 'UTF8'), 'base64'), E'\n', '') AS long_secret \gset
SELECT outbox.verify_signature(:'long_secret', 'msg_utf8', :now_ts, '{"name": "Zoë ✓"}',
                               sign_v1(:'long_secret', 'msg_utf8', :now_ts, '{"name": "Zoë ✓"}')) AS long_key_utf8_body;

DROP FUNCTION sign_v1(text, text, bigint, text);
DROP FUNCTION hmac_sha256(bytea, bytea);
