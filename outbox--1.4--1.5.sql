-- outbox 1.4 -> 1.5.
\echo Use "ALTER EXTENSION outbox UPDATE TO '1.5'" to load this file. \quit

----------------------------------------------------------------------------
-- Rate limits per endpoint (issue 14)
----------------------------------------------------------------------------

-- Endpoints made before have none.
ALTER TABLE outbox.endpoints ADD COLUMN rate_limit numeric
    CONSTRAINT endpoints_rate_limit_check CHECK (rate_limit > 0 AND rate_limit <= 1000000);
COMMENT ON COLUMN outbox.endpoints.rate_limit IS
    'most requests a second to this endpoint (bursts of a tenth of a second''s worth); NULL: no limit';

-- NaN is greater than every number: the upper bound refuses it, and
-- 'Infinity'.
CREATE FUNCTION outbox._check_rate_limit(rate_limit numeric) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF rate_limit IS NOT NULL AND NOT (rate_limit > 0 AND rate_limit <= 1000000) THEN
        RAISE EXCEPTION 'rate_limit must be greater than 0 and at most 1000000'
            USING ERRCODE = '22023',
                  DETAIL = format('The value given was %s.', rate_limit),
                  HINT = 'It counts requests a second, 0.5 for one every two seconds; NULL (create_endpoint) or 0 (alter_endpoint) means no limit.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox._check_rate_limit(numeric) IS 'internal: validate an endpoint''s rate_limit';

-- create_endpoint and alter_endpoint take rate_limit last.  Their
-- signature changes, so they are dropped and created again; the grants
-- given on them are given again to the new ones.  So is endpoint_status,
-- whose _in_flight() now also says whether an endpoint is held, and which
-- shows the limit; the grants on it carry over too.
CREATE TEMP TABLE outbox_acl_1_4 AS
SELECT 'function' AS kind, p.proname::text AS name, p.proacl AS acl, p.proowner AS owner
  FROM pg_proc p
 WHERE p.oid IN ('outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)'::regprocedure,
                 'outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text)'::regprocedure)
   AND p.proacl IS NOT NULL
UNION ALL
SELECT 'view', c.relname::text, c.relacl, c.relowner
  FROM pg_class c
 WHERE c.oid = 'outbox.endpoint_status'::regclass AND c.relacl IS NOT NULL;

DROP FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text);
DROP FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text);
DROP VIEW outbox.endpoint_status;
DROP FUNCTION outbox._in_flight();

CREATE FUNCTION outbox._in_flight(OUT endpoint_id integer, OUT in_flight integer, OUT held boolean)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_in_flight';
COMMENT ON FUNCTION outbox._in_flight() IS
    'internal: the relay''s requests in flight now, and whether its rate limit holds the endpoint, per endpoint';

CREATE FUNCTION outbox.create_endpoint(
    name          text,
    url           text,
    event_types   text[]   DEFAULT '{*}',
    secret        text     DEFAULT NULL,
    headers       jsonb    DEFAULT '{}',
    ordered       boolean  DEFAULT false,
    timeout       interval DEFAULT '30 seconds',
    max_attempts  integer  DEFAULT 8,
    max_in_flight integer  DEFAULT NULL,
    format        text     DEFAULT 'standard-webhooks',
    rate_limit    numeric  DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid       integer;
    the_url   text;
    types     text[];
    hdrs      jsonb;
    the_secret text;
    fmt       text;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF name !~ '^[A-Za-z0-9_.:-]{1,63}$' THEN
        RAISE EXCEPTION 'invalid endpoint name: %', quote_literal(name)
            USING ERRCODE = '22023',
                  DETAIL = 'An endpoint name is 1 to 63 characters of letters, digits, "_", ".", ":" and "-".';
    END IF;
    IF url IS NULL THEN
        RAISE EXCEPTION 'endpoint url must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF ordered IS NULL OR timeout IS NULL OR max_attempts IS NULL OR format IS NULL THEN
        RAISE EXCEPTION 'ordered, timeout, max_attempts and format must not be NULL' USING ERRCODE = '22004';
    END IF;
    the_url := outbox._check_url(url);
    types := outbox._check_event_types(event_types);
    hdrs := outbox._check_headers(coalesce(headers, '{}'));
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(max_in_flight);
    PERFORM outbox._check_rate_limit(rate_limit);
    fmt := outbox._check_format(format, hdrs);
    the_secret := CASE WHEN secret IS NULL THEN outbox._new_secret()
                       ELSE outbox._check_secret(secret) END;

    IF EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = create_endpoint.name) THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
    END IF;

    INSERT INTO outbox.endpoints (name, url, event_types, headers, ordered, timeout, max_attempts,
                                  max_in_flight, format, rate_limit)
    VALUES (name, the_url, types, hdrs, ordered, timeout, max_attempts, max_in_flight, fmt,
            rate_limit)
    RETURNING id INTO eid;
    INSERT INTO outbox.endpoint_secrets (endpoint_id, secret) VALUES (eid, the_secret);
    INSERT INTO outbox.endpoint_health (endpoint_id) VALUES (eid);
    INSERT INTO outbox.positions (endpoint_id, snap) VALUES (eid, outbox._start_snapshot());
    PERFORM outbox._wake_at_commit();
    RETURN the_secret;
EXCEPTION
    WHEN unique_violation THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
END
$$;
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, numeric) IS
    'create a webhook endpoint that receives events emitted from now on; returns its signing secret';

-- max_in_flight 0 goes back to following outbox.endpoint_concurrency, and
-- rate_limit 0 to no limit; NULL leaves either as it is, as for every other
-- argument.  The headers and the
-- format an endpoint ends up with are checked together: changing either
-- one alone can make a pair the relay would not send.
CREATE FUNCTION outbox.alter_endpoint(
    name          text,
    url           text     DEFAULT NULL,
    event_types   text[]   DEFAULT NULL,
    secret        text     DEFAULT NULL,
    headers       jsonb    DEFAULT NULL,
    ordered       boolean  DEFAULT NULL,
    timeout       interval DEFAULT NULL,
    max_attempts  integer  DEFAULT NULL,
    max_in_flight integer  DEFAULT NULL,
    format        text     DEFAULT NULL,
    rate_limit    numeric  DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(name);
    the_url text;
    types   text[];
    hdrs    jsonb;
    the_secret text;
    cur     outbox.endpoints;
BEGIN
    IF url IS NOT NULL THEN the_url := outbox._check_url(url); END IF;
    IF event_types IS NOT NULL THEN types := outbox._check_event_types(event_types); END IF;
    IF headers IS NOT NULL THEN hdrs := outbox._check_headers(headers); END IF;
    IF secret IS NOT NULL THEN the_secret := outbox._check_secret(secret); END IF;
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(nullif(max_in_flight, 0));
    PERFORM outbox._check_rate_limit(nullif(rate_limit, 0));
    -- (locked: a concurrent change of the other half cannot slip between)
    SELECT * INTO cur FROM outbox.endpoints e WHERE e.id = eid FOR UPDATE;
    PERFORM outbox._check_format(coalesce(alter_endpoint.format, cur.format),
                                 coalesce(hdrs, cur.headers));

    UPDATE outbox.endpoints e
       SET url = coalesce(the_url, e.url),
           event_types = coalesce(types, e.event_types),
           headers = coalesce(hdrs, e.headers),
           ordered = coalesce(alter_endpoint.ordered, e.ordered),
           timeout = coalesce(alter_endpoint.timeout, e.timeout),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
           max_in_flight = CASE WHEN alter_endpoint.max_in_flight IS NULL THEN e.max_in_flight
                                ELSE nullif(alter_endpoint.max_in_flight, 0) END,
           format = coalesce(alter_endpoint.format, e.format),
           rate_limit = CASE WHEN alter_endpoint.rate_limit IS NULL THEN e.rate_limit
                             ELSE nullif(alter_endpoint.rate_limit, 0) END,
           updated_at = now()
     WHERE e.id = eid;
    IF the_secret IS NOT NULL THEN
        UPDATE outbox.endpoint_secrets
           SET secret = the_secret, previous_secret = NULL, previous_expires_at = NULL
         WHERE endpoint_id = eid;
    END IF;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, numeric) IS
    'change an endpoint; NULL leaves a setting as it is';

CREATE VIEW outbox.endpoint_status AS
SELECT ep.name,
       CASE WHEN ep.disabled_at IS NOT NULL THEN 'disabled'
            WHEN ep.paused THEN 'paused'
            ELSE 'active' END AS state,
       CASE WHEN ep.disabled_at IS NOT NULL THEN ep.disabled_reason
            WHEN ep.paused THEN 'paused by pause_endpoint()' END AS state_reason,
       ep.disabled_at,
       u.n + coalesce(r.n, 0) AS events_waiting,
       now() - least(u.oldest, r.oldest) AS oldest_waiting_age,
       coalesce(r.failed, 0) AS in_retry,
       (SELECT count(*) FROM outbox.dead_letter_log d WHERE d.endpoint_id = ep.id) AS dead,
       h.last_success_at,
       h.last_failure_at,
       h.last_failure_status,
       h.last_failure_error,
       h.consecutive_failures,
       ep.url,
       ep.event_types,
       ep.ordered,
       h.backlog_dropped,
       h.backlog_dropped_at,
       coalesce(ep.max_in_flight,
                current_setting('outbox.endpoint_concurrency', true)::integer) AS max_in_flight,
       coalesce(f.in_flight, 0) AS in_flight,
       ep.format,
       ep.rate_limit,
       coalesce(f.held, false) AS rate_limited
  FROM outbox.endpoints ep
  JOIN outbox.endpoint_health h ON h.endpoint_id = ep.id
  CROSS JOIN LATERAL outbox._unread(ep.id) u
  LEFT JOIN LATERAL (
        SELECT count(*) AS n, count(*) FILTER (WHERE rr.attempts > 0) AS failed,
               min(coalesce(e.created_at, dl.created_at))
                   FILTER (WHERE NOT (rr.attempts = 0 AND rr.next_at > now())) AS oldest
          FROM outbox.retries rr
          LEFT JOIN outbox.events e ON e.id = rr.id
          LEFT JOIN outbox.delayed dl ON dl.id = rr.id
         WHERE rr.endpoint_id = ep.id AND (e.id IS NOT NULL OR dl.id IS NOT NULL)) r ON true
  LEFT JOIN outbox._in_flight() f ON f.endpoint_id = ep.id;
COMMENT ON VIEW outbox.endpoint_status IS
    'one row per endpoint: state and why, events waiting and the age of the oldest, in retry, dead, last success and failure, backlog given up, cap on and requests in flight now, format, rate limit and whether it holds the endpoint now';

REVOKE ALL ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, numeric),
    outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, numeric),
    outbox._check_rate_limit(numeric), outbox._in_flight() FROM PUBLIC;
REVOKE ALL ON outbox.endpoint_status FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT o.kind, o.name, a.grantee, a.privilege_type, a.is_grantable
          FROM pg_temp.outbox_acl_1_4 o
         CROSS JOIN LATERAL aclexplode(o.acl) a
         WHERE a.grantee <> o.owner
    LOOP
        EXECUTE format('GRANT %s ON %s TO %s%s',
                       g.privilege_type,
                       CASE WHEN g.kind = 'view' THEN format('outbox.%I', g.name)
                            ELSE format('FUNCTION outbox.%I(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, numeric)', g.name) END,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;
DROP TABLE pg_temp.outbox_acl_1_4;

-- The relay loads the limit.
DROP FUNCTION outbox._relay_endpoints();
CREATE FUNCTION outbox._relay_endpoints()
RETURNS TABLE (id integer, name text, url text, header_lines text, timeout_ms bigint,
               max_attempts integer, ordered boolean, active boolean, secret text,
               previous_secret text, event_types text[], follows boolean, max_in_flight integer,
               format text, rate_limit double precision, changed_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT e.id, e.name, e.url, array_to_string(outbox._header_lines(e.headers), E'\n'),
           outbox._timeout_ms(e.timeout), e.max_attempts, e.ordered,
           NOT e.paused AND e.disabled_at IS NULL, s.secret,
           CASE WHEN s.previous_expires_at > now() THEN s.previous_secret END,
           e.event_types, p.follows, e.max_in_flight, e.format, e.rate_limit::double precision,
           e.updated_at
      FROM outbox.endpoints e
      JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
      JOIN outbox.positions p ON p.endpoint_id = e.id
     ORDER BY e.id
$$;
COMMENT ON FUNCTION outbox._relay_endpoints() IS 'internal: every endpoint as the relay loads it';
REVOKE ALL ON FUNCTION outbox._relay_endpoints() FROM PUBLIC;
