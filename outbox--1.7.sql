-- outbox 1.7: the SQL surface and the storage the relay reads, as a fresh
-- CREATE EXTENSION makes it.
--
-- This script creates version 1.7 directly.  An installed 1.0 reaches the
-- same state through the update scripts outbox--1.0--1.1.sql to
-- outbox--1.6--1.7.sql in turn; sql/10_upgrade.sql checks that both end up with
-- the same objects and definitions.  A change to the schema goes into a new
-- update script, and this file is renamed to the new version and changed
-- the same way.
--
-- Storage follows DESIGN.md.  Events are appended to a small set of tables
-- (partitions of outbox.events, one per rotation slot) and are never
-- updated or deleted one by one; the attempt log and the inbox are
-- partitioned the same way, and rotation empties the oldest partition of
-- each once its retention has passed.  The relay reads events through one
-- shared position (outbox.stream) that the endpoints keeping up follow;
-- an endpoint that falls behind reads from its own position until it is
-- back.  Only failures and delayed events get per-event rows.  Every object
-- lives in schema outbox, created here so that DROP EXTENSION removes all
-- of it.

\echo Use "CREATE EXTENSION outbox" to load this file. \quit

CREATE SCHEMA outbox;
REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
COMMENT ON SCHEMA outbox IS 'transactional outbox: events, endpoints, inbox and the views operators read';

----------------------------------------------------------------------------
-- Helpers written in C (granted to no one)
----------------------------------------------------------------------------

CREATE FUNCTION outbox._system_identifier() RETURNS text
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox_system_identifier';
COMMENT ON FUNCTION outbox._system_identifier() IS 'internal: this cluster''s system identifier';

CREATE FUNCTION outbox._launch() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_launch';
COMMENT ON FUNCTION outbox._launch() IS 'internal: at commit, ask the launcher to start relays where outbox is now installed';

CREATE FUNCTION outbox._wake_at_commit() RETURNS void
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_wake_at_commit';
COMMENT ON FUNCTION outbox._wake_at_commit() IS 'internal: at commit, make the relay reread endpoints and look for work';

CREATE FUNCTION outbox._inbox_seen(consumer text, message_id text) RETURNS boolean
LANGUAGE c VOLATILE STRICT AS 'MODULE_PATHNAME', 'outbox_inbox_seen';
COMMENT ON FUNCTION outbox._inbox_seen(text, text) IS 'internal: whether a committed mark_processed() recorded the message (latest snapshot)';

CREATE FUNCTION outbox._raw_size(value jsonb) RETURNS integer
LANGUAGE c IMMUTABLE STRICT AS 'MODULE_PATHNAME', 'outbox_raw_size';
COMMENT ON FUNCTION outbox._raw_size(jsonb) IS
    'internal: bytes of a jsonb value as emit() measures it (uncompressed), read without detoasting it';

CREATE FUNCTION outbox._check_url(url text) RETURNS text
LANGUAGE c STRICT IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_url';
COMMENT ON FUNCTION outbox._check_url(text) IS 'internal: validate an endpoint URL (http, https, kafka, kafkas, nats, tls, amqp or amqps), return it normalized';

CREATE FUNCTION outbox._check_event_types(patterns text[]) RETURNS text[]
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_event_types';
COMMENT ON FUNCTION outbox._check_event_types(text[]) IS 'internal: validate endpoint event-type patterns';

CREATE FUNCTION outbox._check_headers(headers jsonb) RETURNS jsonb
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_headers';
COMMENT ON FUNCTION outbox._check_headers(jsonb) IS 'internal: validate a flat object of HTTP header names and string values';

CREATE FUNCTION outbox._check_secret(secret text) RETURNS text
LANGUAGE c STRICT IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_secret';
COMMENT ON FUNCTION outbox._check_secret(text) IS 'internal: validate a whsec_ signing secret';

CREATE FUNCTION outbox._new_secret() RETURNS text
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_new_secret';
COMMENT ON FUNCTION outbox._new_secret() IS 'internal: a new whsec_ secret of 32 random bytes';

CREATE FUNCTION outbox._relay_stats(
    OUT pid integer, OUT database text, OUT started_at timestamptz,
    OUT batches bigint, OUT deliveries bigint, OUT failures bigint, OUT retries bigint,
    OUT bytes_sent bigint, OUT http_seconds double precision, OUT sql_seconds double precision)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_relay_stats';
COMMENT ON FUNCTION outbox._relay_stats() IS 'internal: the shared-memory counters of every running relay';

-- The relay's requests in flight per endpoint now, its senders' included,
-- and whether its rate limit holds the endpoint, from shared memory
-- (shmem.c); endpoints with neither have no row.
CREATE FUNCTION outbox._in_flight(OUT endpoint_id integer, OUT in_flight integer, OUT held boolean)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_in_flight';
COMMENT ON FUNCTION outbox._in_flight() IS
    'internal: the relay''s requests in flight now, and whether its rate limit holds the endpoint, per endpoint';

----------------------------------------------------------------------------
-- Events
----------------------------------------------------------------------------

CREATE SEQUENCE outbox.event_seq AS bigint;
COMMENT ON SEQUENCE outbox.event_seq IS 'orders events within a batch; drawn after the emitting transaction has its id';

-- The rotation state: which slot emit() appends to.  One row, always.
CREATE TABLE outbox.queue (
    singleton   boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cur_slot    smallint NOT NULL DEFAULT 0 CHECK (cur_slot BETWEEN 0 AND 2),
    rotated_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO outbox.queue DEFAULT VALUES;
COMMENT ON TABLE outbox.queue IS 'rotation state: the events partition emit() currently appends to';

CREATE TABLE outbox.events (
    id          bigint      NOT NULL,
    slot        smallint    NOT NULL,
    event_id    uuid        NOT NULL,
    txid        xid8        NOT NULL,
    event_type  text        NOT NULL,
    payload     jsonb       NOT NULL,
    key         text,
    headers     jsonb,
    deliver_at  timestamptz,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz,
    priority    smallint
) PARTITION BY LIST (slot);
CREATE TABLE outbox.events_0 PARTITION OF outbox.events FOR VALUES IN (0);
CREATE TABLE outbox.events_1 PARTITION OF outbox.events FOR VALUES IN (1);
CREATE TABLE outbox.events_2 PARTITION OF outbox.events FOR VALUES IN (2);
CREATE INDEX events_id_idx ON outbox.events (id);
CREATE INDEX events_txid_idx ON outbox.events (txid);
-- The events with a priority, for _read_page's look ahead.
CREATE INDEX events_ahead_idx ON outbox.events (id) WHERE priority > 0;

COMMENT ON TABLE outbox.events IS 'emitted events, insert-only; partitions are emptied by rotation, never row by row';
COMMENT ON COLUMN outbox.events.id IS 'order of emission (within a batch, events are delivered in id order)';
COMMENT ON COLUMN outbox.events.slot IS 'rotation slot (partition) the event was appended to';
COMMENT ON COLUMN outbox.events.event_id IS 'the webhook-id receivers see; the same on every attempt';
COMMENT ON COLUMN outbox.events.txid IS 'pg_current_xact_id() of the emitting transaction: the relay reads by snapshot, not by id';
COMMENT ON COLUMN outbox.events.event_type IS 'dot-separated type, matched against endpoint event_types';
COMMENT ON COLUMN outbox.events.payload IS 'the "data" member of the delivered body';
COMMENT ON COLUMN outbox.events.key IS 'ordering key: on ordered endpoints, events of one key are delivered one after another';
COMMENT ON COLUMN outbox.events.headers IS 'extra HTTP headers sent with this event';
COMMENT ON COLUMN outbox.events.deliver_at IS 'not delivered before this time (NULL: at once)';
COMMENT ON COLUMN outbox.events.created_at IS 'emit time (transaction start); the "timestamp" member of the body';
COMMENT ON COLUMN outbox.events.expires_at IS 'not sent from this time on: recorded as expired instead (NULL: never)';
COMMENT ON COLUMN outbox.events.priority IS 'higher goes first among what the relay holds for an endpoint at once (NULL: 0)';

-- Dedupe keys live beside the events: a unique index on a partitioned table
-- must contain the partition key, and emit() without a dedupe_key must pay
-- nothing for the feature.
CREATE TABLE outbox.dedupe (
    dedupe_key  text PRIMARY KEY,
    event_id    uuid NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.dedupe IS 'dedupe keys given to emit(): a second emit of a key returns the first event id and writes nothing';

-- Rotation (DESIGN.md): the events, the attempt log and the inbox each live
-- in three partitions by slot.  One slot takes new rows; every half
-- retention period the relay moves on to the next slot, emptying it with
-- TRUNCATE first.  That slot was last written at least one retention period
-- ago, so rows are kept for between one and one and a half periods.  Events
-- an endpoint's position has not passed hold the events rotation back.
--
-- Per rotated table and slot: which slot takes new rows, when it began to,
-- and when each other slot stopped.  For events, outbox.queue.cur_slot
-- (what emit() reads) always equals the current slot here.  Not dumped: a
-- restored database starts its periods at the restore.
CREATE TABLE outbox.rotation (
    tbl        text NOT NULL CHECK (tbl IN ('events', 'attempt_log', 'inbox')),
    slot       smallint NOT NULL CHECK (slot BETWEEN 0 AND 2),
    current    boolean NOT NULL,
    opened_at  timestamptz,
    closed_at  timestamptz,
    PRIMARY KEY (tbl, slot)
);
COMMENT ON TABLE outbox.rotation IS 'rotation state of events, attempt_log and inbox: the slot taking rows, and when each slot opened and closed';
-- Slot 0 of each takes rows from now on; the others count as closed now.
INSERT INTO outbox.rotation (tbl, slot, current, opened_at, closed_at)
SELECT t, s, s = 0, CASE WHEN s = 0 THEN now() END, CASE WHEN s <> 0 THEN now() END
  FROM unnest(ARRAY['events', 'attempt_log', 'inbox']) AS t, generate_series(0, 2) AS s;

----------------------------------------------------------------------------
-- Endpoints
----------------------------------------------------------------------------

CREATE TABLE outbox.endpoints (
    id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    url             text NOT NULL,
    event_types     text[] NOT NULL,
    headers         jsonb NOT NULL DEFAULT '{}',
    ordered         boolean NOT NULL DEFAULT false,
    timeout         interval NOT NULL DEFAULT '30 seconds',
    max_attempts    integer NOT NULL DEFAULT 8,
    paused          boolean NOT NULL DEFAULT false,
    disabled_at     timestamptz,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- NULL: outbox.endpoint_concurrency
    max_in_flight   integer CONSTRAINT endpoints_max_in_flight_check CHECK (max_in_flight BETWEEN 1 AND 10000),
    format          text NOT NULL DEFAULT 'standard-webhooks'
                    CONSTRAINT endpoints_format_check
                    CHECK (format IN ('standard-webhooks', 'cloudevents', 'cloudevents-binary')),
    -- NULL: events do not age out
    max_age         interval,
    -- NULL: no limit
    rate_limit      numeric CONSTRAINT endpoints_rate_limit_check
                    CHECK (rate_limit > 0 AND rate_limit <= 1000000)
);
COMMENT ON TABLE outbox.endpoints IS 'webhook endpoints and what they subscribe to; change through the endpoint functions';
COMMENT ON COLUMN outbox.endpoints.event_types IS 'patterns: exact type, "*", or a prefix ending in "*" (e.g. "booking.*")';
COMMENT ON COLUMN outbox.endpoints.ordered IS 'deliver events of one key one after another';
COMMENT ON COLUMN outbox.endpoints.paused IS 'set by pause_endpoint(); events wait';
COMMENT ON COLUMN outbox.endpoints.disabled_at IS 'set when the relay disabled the endpoint (see disabled_reason); events wait';
COMMENT ON COLUMN outbox.endpoints.max_in_flight IS
    'most requests in flight to this endpoint; NULL: outbox.endpoint_concurrency';
COMMENT ON COLUMN outbox.endpoints.format IS
    'what requests look like: standard-webhooks, cloudevents (structured mode) or cloudevents-binary';
COMMENT ON COLUMN outbox.endpoints.max_age IS
    'an event older than this (since its emit) is not sent to this endpoint but recorded as expired; NULL: no limit';
COMMENT ON COLUMN outbox.endpoints.rate_limit IS
    'most requests a second to this endpoint (bursts of a tenth of a second''s worth); NULL: no limit';

-- Delivery health, written by the relay once per recorded batch.  Apart
-- from outbox.endpoints so that an administrator's open transaction on an
-- endpoint never makes the relay wait.
CREATE TABLE outbox.endpoint_health (
    endpoint_id          integer PRIMARY KEY REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    last_success_at      timestamptz,
    last_failure_at      timestamptz,
    last_failure_status  integer,
    last_failure_error   text,
    consecutive_failures integer NOT NULL DEFAULT 0,
    failing_since        timestamptz,
    backlog_dropped      bigint NOT NULL DEFAULT 0,
    backlog_dropped_at   timestamptz
);
COMMENT ON TABLE outbox.endpoint_health IS 'per endpoint: last success and failure, consecutive failures; written by the relay';
COMMENT ON COLUMN outbox.endpoint_health.failing_since IS 'first failure since the last success; the relay disables the endpoint when it is older than outbox.disable_after';
COMMENT ON COLUMN outbox.endpoint_health.backlog_dropped IS
    'events given up because the endpoint stayed disabled longer than outbox.retention and rotation needed their partition';

-- Secrets are kept apart so that endpoints can be shown to a monitoring role
-- without them.
CREATE TABLE outbox.endpoint_secrets (
    endpoint_id         integer PRIMARY KEY REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    secret              text NOT NULL,
    previous_secret     text,
    previous_expires_at timestamptz,
    -- NULL: none; see outbox._check_auth
    auth                jsonb
);
COMMENT ON TABLE outbox.endpoint_secrets IS 'signing secrets (whsec_...); readable only by the extension owner and superusers';
COMMENT ON COLUMN outbox.endpoint_secrets.auth IS
    'client authentication: {"bearer": ...}, {"client_cert": ..., "client_key": ...}, {"oauth2": {...}}; a broker''s {"username": ..., "password": ...}, {"token": ...} or {"sasl": {...}}; NULL: none';

-- Each endpoint's position.  Every event whose transaction is visible in
-- snap has been dealt with for that endpoint.  While a batch is being worked
-- through, next_snap is its upper snapshot and after_id the last event id
-- of it dealt with: the batch is "visible in next_snap, not in snap", read
-- in pages by id.  It starts at the snapshot of the endpoint's creation, so
-- an endpoint receives what was emitted after it existed.  While follows is
-- set, the endpoint is where outbox.stream (below) is, and its own snap,
-- next_snap and after_id wait unused.  system_identifier names the cluster
-- whose transaction ids the snapshots hold (see _rebase).
CREATE TABLE outbox.positions (
    endpoint_id integer PRIMARY KEY REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    snap        pg_snapshot NOT NULL,
    next_snap   pg_snapshot,
    after_id    bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    system_identifier text NOT NULL DEFAULT outbox._system_identifier(),
    follows     boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE outbox.positions IS 'per-endpoint read position: events of transactions visible in snap are done for that endpoint';
COMMENT ON COLUMN outbox.positions.system_identifier IS
    'cluster whose transaction ids snap and next_snap are in; another one (after a restore) makes the relay rebase';
COMMENT ON COLUMN outbox.positions.follows IS
    'the endpoint is where outbox.stream is; its own snap, next_snap and after_id are not used meanwhile';

-- The relay's one position over all events.  An endpoint whose position
-- row says follows is exactly where the stream is: every event the stream
-- has passed is done for it (delivered, dead, waiting in outbox.retries,
-- or of a type it does not subscribe to).  The relay reads a page of the
-- stream once and routes each event to the following endpoints whose
-- patterns match it.  An endpoint that falls behind (paused, disabled,
-- failing without pause, slower than the others, just created) is
-- detached: its own position takes the stream's, and it reads its own
-- pages until it is back where the stream is, then follows again.
--
-- No row at install: the relay makes it on its first read.  It is dumped,
-- so that a restore carries on from where the stream was.
CREATE TABLE outbox.stream (
    singleton         boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    snap              pg_snapshot NOT NULL,
    next_snap         pg_snapshot,
    after_id          bigint NOT NULL DEFAULT 0,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    system_identifier text NOT NULL DEFAULT outbox._system_identifier()
);
COMMENT ON TABLE outbox.stream IS 'the relay''s shared read position: events of transactions visible in snap are done for every endpoint that follows it';

----------------------------------------------------------------------------
-- Delivery records: only failures and delayed events get per-event rows
----------------------------------------------------------------------------

-- Append-only log of every HTTP attempt, in three partitions by rotation
-- slot.
CREATE TABLE outbox.attempt_log (
    at          timestamptz NOT NULL DEFAULT now(),
    endpoint_id integer NOT NULL,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    attempt     integer NOT NULL,
    duration_ms real,
    status      integer,
    error       text,
    response    text,
    slot        smallint NOT NULL
) PARTITION BY LIST (slot);
CREATE TABLE outbox.attempt_log_0 PARTITION OF outbox.attempt_log FOR VALUES IN (0);
CREATE TABLE outbox.attempt_log_1 PARTITION OF outbox.attempt_log FOR VALUES IN (1);
CREATE TABLE outbox.attempt_log_2 PARTITION OF outbox.attempt_log FOR VALUES IN (2);
CREATE INDEX attempt_log_event_idx ON outbox.attempt_log (event_id);
-- endpoint_status counts each endpoint's expired events; only they are indexed.
CREATE INDEX attempt_log_expired_idx ON outbox.attempt_log (endpoint_id) WHERE error = 'expired';
COMMENT ON TABLE outbox.attempt_log IS 'every delivery attempt, appended by the relay; read it through outbox.attempts; rotated after outbox.attempt_retention';
COMMENT ON COLUMN outbox.attempt_log.slot IS 'rotation slot (partition) the row was appended to';

-- Events that failed (or wait for deliver_at) and are due again at next_at.
CREATE TABLE outbox.retries (
    endpoint_id integer NOT NULL REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    key         text,
    attempts    integer NOT NULL,
    next_at     timestamptz NOT NULL,
    last_status integer,
    last_error  text,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    priority    smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (endpoint_id, id)
);
-- _read_due reads an endpoint's due retries highest priority first.
CREATE INDEX retries_due_idx ON outbox.retries (endpoint_id, priority DESC, next_at, id);
CREATE INDEX retries_key_idx ON outbox.retries (endpoint_id, key, id) WHERE key IS NOT NULL;
COMMENT ON TABLE outbox.retries IS 'events owed to an endpoint again at next_at: failed attempts, events with a later deliver_at, and on ordered endpoints events waiting behind an earlier one of their key';
COMMENT ON COLUMN outbox.retries.attempts IS 'attempts made so far (0: not sent yet)';
COMMENT ON COLUMN outbox.retries.queued_at IS 'when the event became owed here: its first failure, deferral, replay() or retry_dead()';
COMMENT ON COLUMN outbox.retries.priority IS 'the event''s priority: due retries are read highest first';

-- Events given up on for an endpoint.  The event itself is copied so that a
-- dead letter outlives the rotation of its events partition.
CREATE TABLE outbox.dead_letter_log (
    endpoint_id integer NOT NULL REFERENCES outbox.endpoints (id) ON DELETE CASCADE,
    id          bigint NOT NULL,
    event_id    uuid NOT NULL,
    event_type  text NOT NULL,
    payload     jsonb NOT NULL,
    key         text,
    headers     jsonb,
    created_at  timestamptz NOT NULL,
    attempts    integer NOT NULL,
    last_status integer,
    last_error  text,
    dead_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint_id, id)
);
COMMENT ON TABLE outbox.dead_letter_log IS 'events given up on for an endpoint, with a copy of the event; read it through outbox.dead_letters';

-- Delayed and retried events (DESIGN.md, "Delayed copies").  The relay
-- reads an event with a later deliver_at like any other and defers it into
-- outbox.retries for each endpoint subscribed to it (attempts = 0, next_at
-- = deliver_at); a failed delivery waits there too (attempts > 0).  When
-- rotation is about to empty a partition, the events of it that wait in
-- retries are first copied whole into outbox.delayed, which rotation never
-- empties; the retries keep referring to them by id, and whatever reads an
-- event for a retry reads it from outbox.events or from that copy.  Copy
-- and TRUNCATE commit together or not at all.  A copy goes once no retry
-- refers to it, at the next rotation of the events, and its dedupe key
-- with it.  So only positions and locks hold the events rotation.
CREATE TABLE outbox.delayed (
    id          bigint PRIMARY KEY,
    event_id    uuid        NOT NULL,
    event_type  text        NOT NULL,
    payload     jsonb       NOT NULL,
    key         text,
    headers     jsonb,
    deliver_at  timestamptz,
    created_at  timestamptz NOT NULL,
    set_aside_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    priority    smallint
);
COMMENT ON TABLE outbox.delayed IS
    'copies of events waiting in outbox.retries (a later deliver_at, behind an earlier event of their key, or failed), made when rotation empties their events partition; rotation never empties this table';
COMMENT ON COLUMN outbox.delayed.id IS 'the event''s id in outbox.events, which its retries refer to';
COMMENT ON COLUMN outbox.delayed.set_aside_at IS 'when rotation copied the event here';
-- Rotation keeps the dedupe keys of copied events: it looks copies up by
-- event_id.
CREATE INDEX delayed_event_idx ON outbox.delayed (event_id);

----------------------------------------------------------------------------
-- Inbox
----------------------------------------------------------------------------

-- In three partitions by rotation slot.  No unique index can span them, so
-- mark_processed() checks for a message in every partition under an
-- advisory lock.  (The primary key is named as the update from 1.0 named
-- it, when this table was built as inbox_new.)
CREATE TABLE outbox.inbox (
    consumer     text NOT NULL,
    message_id   text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    slot         smallint NOT NULL,
    CONSTRAINT inbox_new_pkey PRIMARY KEY (consumer, message_id, slot)
) PARTITION BY LIST (slot);
CREATE TABLE outbox.inbox_0 PARTITION OF outbox.inbox FOR VALUES IN (0);
CREATE TABLE outbox.inbox_1 PARTITION OF outbox.inbox FOR VALUES IN (1);
CREATE TABLE outbox.inbox_2 PARTITION OF outbox.inbox FOR VALUES IN (2);
COMMENT ON TABLE outbox.inbox IS 'messages a consumer has processed, recorded by mark_processed(); rotated after outbox.inbox_retention';
COMMENT ON COLUMN outbox.inbox.slot IS 'rotation slot (partition) the row was appended to';

----------------------------------------------------------------------------
-- What pg_dump dumps: the tables whose rows are the user's.  queue and
-- rotation are the extension's own state: a restore keeps the rows its
-- CREATE EXTENSION made (and must, or loading the dumped row would collide
-- with them).
----------------------------------------------------------------------------

SELECT pg_catalog.pg_extension_config_dump('outbox.queue', 'WHERE false');
SELECT pg_catalog.pg_extension_config_dump('outbox.events', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events_0', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events_1', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.events_2', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.event_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.dedupe', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoints', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoints_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_health', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.positions', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.retries', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.dead_letter_log', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log_0', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log_1', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.attempt_log_2', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_0', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_1', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.inbox_2', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.delayed', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.stream', '');

----------------------------------------------------------------------------
-- Helpers written in SQL, used by the functions and views below
----------------------------------------------------------------------------

-- A duration GUC (such as "5d" or "30s") as an interval; the default when
-- the library is not loaded in this session.
CREATE FUNCTION outbox._setting_interval(name text, fallback interval) RETURNS interval
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(nullif(current_setting(name, true), '')::interval, fallback)
$$;
COMMENT ON FUNCTION outbox._setting_interval(text, interval) IS 'internal: a duration setting as an interval';

-- Endpoint event-type patterns as LIKE patterns ("_" is literal in types).
CREATE FUNCTION outbox._like_patterns(patterns text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT array_agg(CASE WHEN p LIKE '%*' THEN replace(left(p, -1), '_', '\_') || '%'
                          ELSE replace(p, '_', '\_') END)
      FROM unnest(patterns) AS p
$$;
COMMENT ON FUNCTION outbox._like_patterns(text[]) IS 'internal: event-type patterns as LIKE patterns';

CREATE FUNCTION outbox._header_lines(headers jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(k || ': ' || v), '{}') FROM jsonb_each_text(coalesce(headers, '{}')) AS h(k, v)
$$;
COMMENT ON FUNCTION outbox._header_lines(jsonb) IS 'internal: a header object as "name: value" lines';

-- Has this endpoint answered this event with a 2xx since a given time?
CREATE FUNCTION outbox._delivered(eid integer, evid uuid, since timestamptz) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox.attempt_log a
                    WHERE a.event_id = evid AND a.endpoint_id = eid AND a.at >= since
                      AND a.status BETWEEN 200 AND 299)
$$;
COMMENT ON FUNCTION outbox._delivered(integer, uuid, timestamptz) IS 'internal: whether an endpoint has answered an event with a 2xx since a time';

-- An endpoint timeout in milliseconds, as the relay uses it.  Interval
-- comparison counts a month as 30 days, extract(epoch) a year as 365.25
-- days, so '1 year -360 days 10 seconds' compares as 10 seconds and lasts
-- 453,610 seconds: the bounds are checked on this number.
CREATE FUNCTION outbox._timeout_ms(timeout interval) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT (extract(epoch FROM timeout) * 1000)::bigint
$$;
COMMENT ON FUNCTION outbox._timeout_ms(interval) IS 'internal: an endpoint timeout in milliseconds, as the relay uses it';

-- Bytes an event costs the relay when read: its payload and its headers.
-- No SET clause, so that it is inlined into the reads; callers pin
-- search_path.
CREATE FUNCTION outbox._event_bytes(payload jsonb, headers jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT outbox._raw_size(payload) OPERATOR(pg_catalog.+) coalesce(outbox._raw_size(headers), 0)
$$;
COMMENT ON FUNCTION outbox._event_bytes(jsonb, jsonb) IS 'internal: bytes of an event''s payload and headers, for the relay''s page budget';

-- Does snapshot a see every transaction that b sees?  (a was taken after
-- b, or is b.)  Everything b sees lies below b's xmax and is not in b's
-- in-progress list; a sees it when a's xmax is no lower and none of a's
-- in-progress transactions below b's xmax is one that b sees.
CREATE FUNCTION outbox._snap_contains(a pg_snapshot, b pg_snapshot) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_snapshot_xmax(a) >= pg_snapshot_xmax(b)
       AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(a) x
                        WHERE x < pg_snapshot_xmax(b) AND pg_visible_in_snapshot(x, b))
$$;
COMMENT ON FUNCTION outbox._snap_contains(pg_snapshot, pg_snapshot) IS
    'internal: whether snapshot a sees every transaction snapshot b sees';

-- The first id of the batch of events visible in upto and not in since, or
-- NULL when there is none.  Through the txid index: ids are drawn before
-- commit, so a batch can begin below ids already read.  (OFFSET 0 keeps
-- min() from walking the id index instead.)  No SET clause, so that it is
-- inlined; its callers pin search_path and turn sequential scans off.
CREATE FUNCTION outbox._batch_first_id(since pg_snapshot, upto pg_snapshot) RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT min(b.id)
      FROM (SELECT e.id, e.txid FROM outbox.events e
             WHERE e.txid OPERATOR(pg_catalog.>=) pg_catalog.pg_snapshot_xmin(since)
               AND e.txid OPERATOR(pg_catalog.<) pg_catalog.pg_snapshot_xmax(upto)
            OFFSET 0) b
     WHERE pg_catalog.pg_visible_in_snapshot(b.txid, upto)
       AND NOT pg_catalog.pg_visible_in_snapshot(b.txid, since)
$$;
COMMENT ON FUNCTION outbox._batch_first_id(pg_snapshot, pg_snapshot) IS
    'internal: the first event id of the batch visible in one snapshot and not in an earlier one';

----------------------------------------------------------------------------
-- Emit
----------------------------------------------------------------------------

-- expires_at and priority come last, so that calls by position made for
-- 1.4 mean what they meant.  priority is an integer argument, so that
-- "priority => 5" needs no cast, kept in a smallint (-32768 to 32767).
-- Not SECURITY DEFINER: the C function appends the event without asking
-- for rights on the tables (src/functions/append.c), so EXECUTE on it is
-- the right to emit, and a call pays no change of user and search_path.
-- The dedupe key alone is written through SQL, as the owner, with
-- search_path pinned.
CREATE FUNCTION outbox.emit(
    event_type text,
    payload    jsonb,
    key        text DEFAULT NULL,
    headers    jsonb DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    dedupe_key text DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    priority   integer DEFAULT 0)
RETURNS uuid
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'emit';
COMMENT ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer) IS
    'write one event in the calling transaction; returns its id (the webhook-id receivers see)';

-- Many events of one type in one call: payloads[i] with keys[i], the rest
-- shared, appended in array order.  No dedupe key: emit() takes one.
CREATE FUNCTION outbox.emit_many(
    event_type text,
    payloads   jsonb[],
    keys       text[] DEFAULT NULL,
    headers    jsonb DEFAULT NULL,
    deliver_at timestamptz DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    priority   integer DEFAULT 0)
RETURNS uuid[]
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', 'emit_many';
COMMENT ON FUNCTION outbox.emit_many(text, jsonb[], text[], jsonb, timestamptz, timestamptz, integer) IS
    'write one event of the type per payload in the calling transaction, keys[i] with payloads[i]; returns their ids in that order';

-- The capture trigger turns row changes into events: prefix.inserted,
-- prefix.updated (payload {"old": ..., "new": ...}) and prefix.deleted, keyed
-- by the primary key or by the column named in the second argument
-- (src/functions/capture.c).  Not SECURITY DEFINER: to_jsonb() of a row can
-- run functions of the table owner's choosing (casts of its column types),
-- which must not run with the extension owner's rights.  The writing role
-- needs USAGE on the schema and EXECUTE on outbox.emit(), as if it emitted
-- itself; the event is appended as emit() appends it.
CREATE FUNCTION outbox.capture()
RETURNS trigger
LANGUAGE c
AS 'MODULE_PATHNAME', 'capture';
COMMENT ON FUNCTION outbox.capture() IS
    'AFTER INSERT OR UPDATE OR DELETE FOR EACH ROW trigger: emits <prefix>.inserted|updated|deleted keyed by the primary key (or the column named by the second argument)';

----------------------------------------------------------------------------
-- Input checks shared by the endpoint functions
----------------------------------------------------------------------------

-- Refuse bad endpoint settings with one message per field.  NULL means "not
-- given" here; callers decide whether that is allowed.
CREATE FUNCTION outbox._check_endpoint_settings(
    timeout interval, max_attempts integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF timeout IS NOT NULL AND (timeout < interval '1 second' OR timeout > interval '5 minutes'
                                OR isfinite(timeout) IS NOT TRUE) THEN
        RAISE EXCEPTION 'endpoint timeout must be between 1 second and 5 minutes'
            USING ERRCODE = '22023', DETAIL = format('The timeout given was %s.', timeout);
    END IF;
    IF timeout IS NOT NULL AND outbox._timeout_ms(timeout) NOT BETWEEN 1000 AND 300000 THEN
        RAISE EXCEPTION 'endpoint timeout must be between 1 second and 5 minutes'
            USING ERRCODE = '22023',
                  DETAIL = format('The timeout given was %s, which the relay counts as %s ms (a year as 365.25 days, a month as 30).',
                                  timeout, outbox._timeout_ms(timeout));
    END IF;
    IF max_attempts IS NOT NULL AND (max_attempts < 1 OR max_attempts > 100) THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 100'
            USING ERRCODE = '22023', DETAIL = format('The value given was %s.', max_attempts);
    END IF;
END
$$;
COMMENT ON FUNCTION outbox._check_endpoint_settings(interval, integer) IS 'internal: validate endpoint timeout and max_attempts';

CREATE FUNCTION outbox._check_max_in_flight(max_in_flight integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_in_flight IS NOT NULL AND (max_in_flight < 1 OR max_in_flight > 10000) THEN
        RAISE EXCEPTION 'max_in_flight must be between 1 and 10000'
            USING ERRCODE = '22023',
                  DETAIL = format('The value given was %s.', max_in_flight),
                  HINT = 'NULL (create_endpoint) follows outbox.endpoint_concurrency.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox._check_max_in_flight(integer) IS 'internal: validate an endpoint''s max_in_flight';

-- Checked on the number the relay uses (outbox._timeout_ms: a month as 30
-- days, a year as 365.25), as the timeout is.
CREATE FUNCTION outbox._check_max_age(max_age interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF max_age IS NOT NULL AND (isfinite(max_age) IS NOT TRUE
                                OR outbox._timeout_ms(max_age) NOT BETWEEN 1000 AND 3650 * 86400000::bigint) THEN
        RAISE EXCEPTION 'max_age must be between 1 second and 3650 days'
            USING ERRCODE = '22023',
                  DETAIL = format('The value given was %s.', max_age),
                  HINT = 'NULL (create_endpoint) or ''0'' (alter_endpoint) means no limit.';
    END IF;
END
$$;
COMMENT ON FUNCTION outbox._check_max_age(interval) IS 'internal: validate an endpoint''s max_age';

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

-- The format's name, checked, and the endpoint's headers against it: in
-- cloudevents-binary the relay sets the ce-* headers of the attributes it
-- maps, and an endpoint may not set them too.
CREATE FUNCTION outbox._check_format(format text, headers jsonb) RETURNS text
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_format';
COMMENT ON FUNCTION outbox._check_format(text, jsonb) IS
    'internal: validate an endpoint''s format, and its headers for that format';

-- Client authentication: the object checked (bearer, client_cert with
-- client_key, oauth2; a broker's username with password, token, sasl),
-- NULL for '{}' (none).  A client certificate is a file the server reads:
-- naming one takes the privileges of pg_read_server_files, and its key
-- may not need a passphrase.
CREATE FUNCTION outbox._check_auth(auth jsonb) RETURNS jsonb
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_check_auth';
COMMENT ON FUNCTION outbox._check_auth(jsonb) IS
    'internal: validate an endpoint''s client authentication';

-- Client authentication, by the endpoint's target: each scheme takes the
-- keys its target applies (docs/authentication.md) and refuses the others
-- rather than sending without them; Redis (bullmq, redis and their TLS
-- schemes, 1.7) an ACL user and password, sent as AUTH.  auth is one
-- _check_auth passed; no message names a value.
CREATE FUNCTION outbox._check_auth_target(auth jsonb, url text) RETURNS void
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
COMMENT ON FUNCTION outbox._check_auth_target(jsonb, text) IS
    'internal: refuse auth keys that an endpoint''s target does not apply';

-- An endpoint whose auth sends an Authorization header (bearer, oauth2)
-- may not have one among its own headers.
CREATE FUNCTION outbox._check_auth_headers(auth jsonb, headers jsonb) RETURNS void
LANGUAGE c IMMUTABLE AS 'MODULE_PATHNAME', 'outbox_check_auth_headers';
COMMENT ON FUNCTION outbox._check_auth_headers(jsonb, jsonb) IS
    'internal: refuse an Authorization header beside client authentication that sets it';

CREATE FUNCTION outbox._endpoint_id(name text) RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT e.id INTO eid FROM outbox.endpoints e WHERE e.name = _endpoint_id.name;
    IF eid IS NULL THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', name USING ERRCODE = '42704';
    END IF;
    RETURN eid;
END
$$;
COMMENT ON FUNCTION outbox._endpoint_id(text) IS 'internal: an endpoint''s id by name, or error 42704';

-- The snapshot an endpoint starts from: the current one, with the calling
-- transaction itself counted as not yet committed, so that events this
-- transaction emits after creating (or resuming from) it are delivered.
CREATE FUNCTION outbox._start_snapshot() RETURNS pg_snapshot
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    -- Under REPEATABLE READ the snapshot may predate this transaction's id,
    -- which then lies at or past xmax and is invisible already.
    WITH s AS (SELECT pg_current_snapshot() AS snap, pg_current_xact_id() AS me)
    SELECT CASE WHEN me >= pg_snapshot_xmax(snap) THEN snap
           ELSE format('%s:%s:%s',
                       least(pg_snapshot_xmin(snap), me),
                       pg_snapshot_xmax(snap),
                       (SELECT string_agg(x::text, ',' ORDER BY x::text::numeric)
                          FROM (SELECT pg_snapshot_xip(snap) AS x UNION SELECT me) u))::pg_snapshot
           END
      FROM s
$$;
COMMENT ON FUNCTION outbox._start_snapshot() IS 'internal: current snapshot with the calling transaction counted as in progress';

----------------------------------------------------------------------------
-- Endpoint administration
----------------------------------------------------------------------------

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
    max_age       interval DEFAULT NULL,
    auth          jsonb    DEFAULT NULL,
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
    the_auth  jsonb;
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
    PERFORM outbox._check_max_age(max_age);
    PERFORM outbox._check_rate_limit(rate_limit);
    fmt := outbox._check_format(format, hdrs);
    the_auth := outbox._check_auth(create_endpoint.auth);
    PERFORM outbox._check_auth_headers(the_auth, hdrs);
    PERFORM outbox._check_auth_target(the_auth, the_url);
    the_secret := CASE WHEN secret IS NULL THEN outbox._new_secret()
                       ELSE outbox._check_secret(secret) END;

    IF EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = create_endpoint.name) THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
    END IF;

    INSERT INTO outbox.endpoints (name, url, event_types, headers, ordered, timeout, max_attempts,
                                  max_in_flight, format, max_age, rate_limit)
    VALUES (name, the_url, types, hdrs, ordered, timeout, max_attempts, max_in_flight, fmt, max_age,
            rate_limit)
    RETURNING id INTO eid;
    INSERT INTO outbox.endpoint_secrets (endpoint_id, secret, auth) VALUES (eid, the_secret, the_auth);
    INSERT INTO outbox.endpoint_health (endpoint_id) VALUES (eid);
    INSERT INTO outbox.positions (endpoint_id, snap) VALUES (eid, outbox._start_snapshot());
    PERFORM outbox._wake_at_commit();
    RETURN the_secret;
EXCEPTION
    WHEN unique_violation THEN
        RAISE EXCEPTION 'endpoint "%" already exists', name USING ERRCODE = '42710';
END
$$;
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, interval, jsonb, numeric) IS
    'create a webhook endpoint that receives events emitted from now on; returns its signing secret';

-- max_in_flight 0 goes back to following outbox.endpoint_concurrency,
-- max_age '0' and rate_limit 0 to no limit; NULL leaves each as it is, as
-- for every other argument.  The headers and the format an endpoint ends
-- up with are checked together: changing either one alone can make a pair
-- the relay would not send.
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
    max_age       interval DEFAULT NULL,
    auth          jsonb    DEFAULT NULL,
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
    the_auth jsonb;
BEGIN
    IF url IS NOT NULL THEN the_url := outbox._check_url(url); END IF;
    IF event_types IS NOT NULL THEN types := outbox._check_event_types(event_types); END IF;
    IF headers IS NOT NULL THEN hdrs := outbox._check_headers(headers); END IF;
    IF secret IS NOT NULL THEN the_secret := outbox._check_secret(secret); END IF;
    -- '{}' checks to NULL: the endpoint's auth is cleared
    IF alter_endpoint.auth IS NOT NULL THEN the_auth := outbox._check_auth(alter_endpoint.auth); END IF;
    PERFORM outbox._check_endpoint_settings(timeout, max_attempts);
    PERFORM outbox._check_max_in_flight(nullif(max_in_flight, 0));
    PERFORM outbox._check_max_age(nullif(max_age, interval '0'));
    PERFORM outbox._check_rate_limit(nullif(rate_limit, 0));
    -- (locked: a concurrent change of the other half cannot slip between)
    SELECT * INTO cur FROM outbox.endpoints e WHERE e.id = eid FOR UPDATE;
    PERFORM outbox._check_format(coalesce(alter_endpoint.format, cur.format),
                                 coalesce(hdrs, cur.headers));
    PERFORM outbox._check_auth_headers(
                CASE WHEN alter_endpoint.auth IS NOT NULL THEN the_auth
                     ELSE (SELECT s.auth FROM outbox.endpoint_secrets s WHERE s.endpoint_id = eid) END,
                coalesce(hdrs, cur.headers));
    PERFORM outbox._check_auth_target(
                CASE WHEN alter_endpoint.auth IS NOT NULL THEN the_auth
                     ELSE (SELECT s.auth FROM outbox.endpoint_secrets s WHERE s.endpoint_id = eid) END,
                coalesce(the_url, cur.url));

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
           max_age = CASE WHEN alter_endpoint.max_age IS NULL THEN e.max_age
                          ELSE nullif(alter_endpoint.max_age, interval '0') END,
           rate_limit = CASE WHEN alter_endpoint.rate_limit IS NULL THEN e.rate_limit
                             ELSE nullif(alter_endpoint.rate_limit, 0) END,
           updated_at = now()
     WHERE e.id = eid;
    IF the_secret IS NOT NULL THEN
        UPDATE outbox.endpoint_secrets
           SET secret = the_secret, previous_secret = NULL, previous_expires_at = NULL
         WHERE endpoint_id = eid;
    END IF;
    IF alter_endpoint.auth IS NOT NULL THEN
        UPDATE outbox.endpoint_secrets s SET auth = the_auth WHERE s.endpoint_id = eid;
    END IF;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, text[], text, jsonb, boolean, interval, integer, integer, text, interval, jsonb, numeric) IS
    'change an endpoint; NULL leaves a setting as it is (auth => ''{}'' removes its client authentication)';

CREATE FUNCTION outbox.drop_endpoint(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(drop_endpoint.name);
BEGIN
    DELETE FROM outbox.endpoints WHERE id = eid;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.drop_endpoint(text) IS 'remove an endpoint with its secret and position; its undelivered events are not sent';

CREATE FUNCTION outbox.pause_endpoint(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(pause_endpoint.name);
BEGIN
    UPDATE outbox.endpoints SET paused = true, updated_at = now()
     WHERE id = eid;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.pause_endpoint(text) IS 'stop delivering to an endpoint; its events wait until resume_endpoint()';

CREATE FUNCTION outbox.resume_endpoint(name text) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(resume_endpoint.name);
BEGIN
    -- A disabled endpoint's failed events are due at once, not after the
    -- rest of their backoff.
    UPDATE outbox.retries r SET next_at = now()
     WHERE r.endpoint_id = eid AND r.attempts > 0 AND r.next_at > now()
       AND EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.id = eid AND e.disabled_at IS NOT NULL);
    UPDATE outbox.endpoints
       SET paused = false, disabled_at = NULL, disabled_reason = NULL, updated_at = now()
     WHERE id = eid;
    -- A resumed endpoint gets a fresh outbox.disable_after window.
    UPDATE outbox.endpoint_health SET failing_since = NULL WHERE endpoint_id = eid;
    PERFORM outbox._wake_at_commit();
END
$$;
COMMENT ON FUNCTION outbox.resume_endpoint(text) IS 'deliver to a paused or disabled endpoint again, starting with the events that waited (a disabled endpoint''s retries become due at once)';

CREATE FUNCTION outbox.endpoint_secret(name text) RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.secret FROM outbox.endpoint_secrets s WHERE s.endpoint_id = outbox._endpoint_id(name)
$$;
COMMENT ON FUNCTION outbox.endpoint_secret(text) IS 'the signing secret of an endpoint';

CREATE FUNCTION outbox.rotate_secret(name text, new_secret text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(name);
    the_secret text := CASE WHEN new_secret IS NULL THEN outbox._new_secret()
                            ELSE outbox._check_secret(new_secret) END;
BEGIN
    UPDATE outbox.endpoint_secrets
       SET previous_secret = secret,
           previous_expires_at = now() + outbox._setting_interval('outbox.secret_overlap', '24 hours'),
           secret = the_secret
     WHERE endpoint_id = eid;
    PERFORM outbox._wake_at_commit();
    RETURN the_secret;
END
$$;
COMMENT ON FUNCTION outbox.rotate_secret(text, text) IS
    'give an endpoint a new signing secret; requests carry signatures by both the new and the previous one for outbox.secret_overlap';

----------------------------------------------------------------------------
-- Sending again
----------------------------------------------------------------------------

CREATE FUNCTION outbox.retry_dead(endpoint text DEFAULT NULL) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := CASE WHEN endpoint IS NULL THEN NULL ELSE outbox._endpoint_id(endpoint) END;
    n bigint;
BEGIN
    WITH moved AS (
        DELETE FROM outbox.dead_letter_log d
         WHERE (eid IS NULL OR d.endpoint_id = eid)
           AND (EXISTS (SELECT 1 FROM outbox.events e WHERE e.id = d.id)
                OR EXISTS (SELECT 1 FROM outbox.delayed dl WHERE dl.id = d.id))
        RETURNING d.endpoint_id, d.id, d.event_id, d.key
    )
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at, priority)
    SELECT m.endpoint_id, m.id, m.event_id, m.key, 0, now(),
           coalesce((SELECT e.priority FROM outbox.events e WHERE e.id = m.id),
                    (SELECT dl.priority FROM outbox.delayed dl WHERE dl.id = m.id), 0)
      FROM moved m
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox._wake_at_commit();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.retry_dead(text) IS
    'deliver dead letters again (of one endpoint, or of all when NULL), with a fresh count of attempts; returns how many';

CREATE FUNCTION outbox.replay(endpoint text, since timestamptz, until timestamptz DEFAULT now()) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    eid integer := outbox._endpoint_id(endpoint);
    pats text[];
    n bigint;
BEGIN
    IF since IS NULL OR until IS NULL THEN
        RAISE EXCEPTION 'since and until must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF since > until THEN
        RAISE EXCEPTION 'since must not be later than until' USING ERRCODE = '22023';
    END IF;
    SELECT outbox._like_patterns(ep.event_types) INTO pats FROM outbox.endpoints ep WHERE ep.id = eid;
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at, priority)
    SELECT eid, e.id, e.event_id, e.key, 0, now(), coalesce(e.priority, 0)
      FROM outbox.events e
     WHERE e.created_at >= since AND e.created_at < until
       AND e.event_type LIKE ANY (pats)
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM outbox._wake_at_commit();
    RETURN n;
END
$$;
COMMENT ON FUNCTION outbox.replay(text, timestamptz, timestamptz) IS
    'deliver again the retained events emitted in [since, until) that the endpoint subscribes to; returns how many';

----------------------------------------------------------------------------
-- Inbox
----------------------------------------------------------------------------

-- Markers of one message queue on an advisory lock (first key 0x6f627801,
-- "ob" 1), since no unique index spans the inbox's partitions; the check
-- then reads the latest committed state (outbox._inbox_seen).
CREATE FUNCTION outbox.mark_processed(consumer text, message_id text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF consumer IS NULL OR message_id IS NULL THEN
        RAISE EXCEPTION 'consumer and message_id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF consumer = '' OR message_id = '' THEN
        RAISE EXCEPTION 'consumer and message_id must not be empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(consumer) > 255 OR octet_length(message_id) > 255 THEN
        RAISE EXCEPTION 'consumer or message_id too long'
            USING ERRCODE = '54000',
                  DETAIL = format('Each is at most 255 bytes; got %s and %s.',
                                  octet_length(consumer), octet_length(message_id));
    END IF;
    -- A concurrent marker of the same message makes this wait for its
    -- transaction: if it commits, this one finds its row and returns false.
    PERFORM pg_advisory_xact_lock(1868724225, hashtext(consumer || E'\n' || message_id));
    IF outbox._inbox_seen(consumer, message_id) THEN
        RETURN false;
    END IF;
    INSERT INTO outbox.inbox (consumer, message_id, slot)
    SELECT consumer, message_id, r.slot FROM outbox.rotation r WHERE r.tbl = 'inbox' AND r.current;
    RETURN true;
END
$$;
COMMENT ON FUNCTION outbox.mark_processed(text, text) IS
    'record that consumer processed message_id, in the calling transaction; true the first time, false for a duplicate';

CREATE FUNCTION outbox.mark_processed(consumer text, message_id uuid) RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT outbox.mark_processed(consumer, message_id::text)
$$;
COMMENT ON FUNCTION outbox.mark_processed(text, uuid) IS 'mark_processed() for a uuid message id (an outbox webhook-id)';

----------------------------------------------------------------------------
-- Signatures (for receivers that are PostgreSQL databases)
----------------------------------------------------------------------------

CREATE FUNCTION outbox.verify_signature(
    secret     text,
    message_id text,
    "timestamp" bigint,
    body       text,
    signature  text,
    tolerance  interval DEFAULT '5 minutes')
RETURNS boolean
LANGUAGE c STRICT STABLE
AS 'MODULE_PATHNAME', 'verify_signature';
COMMENT ON FUNCTION outbox.verify_signature(text, text, bigint, text, text, interval) IS
    'check a Standard Webhooks request: true when a v1 signature in the webhook-signature header matches and the timestamp is within tolerance of now';

----------------------------------------------------------------------------
-- Positions as they stand
----------------------------------------------------------------------------

-- The owed-by-position rule, written once: a position (its batch's
-- snapshot, the next batch's snapshot while that batch is read, the last id
-- of it sent) has not passed the event (txid, id) when the event's
-- transaction is outside the snapshot and, while a batch is being read,
-- the event is beyond what of the batch was sent or outside the batch.
-- Every reader of positions that asks what an endpoint still owes uses it
-- (_unread, _unread_all, rotation_holds, _slot_owed, _release_disabled,
-- _rebase); the readers of pages (_read_stream, _read_page) walk the same
-- rule in the index order they read by.  A body in standard SQL, so that
-- the planner inlines it and the txid bound stays an index condition.
CREATE FUNCTION outbox._not_passed(snap pg_snapshot, next_snap pg_snapshot, after_id bigint,
                                   txid xid8, id bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN txid OPERATOR(pg_catalog.>=) pg_catalog.pg_snapshot_xmin(snap)
       AND NOT pg_catalog.pg_visible_in_snapshot(txid, snap)
       AND (next_snap IS NULL OR id OPERATOR(pg_catalog.>) after_id
            OR NOT pg_catalog.pg_visible_in_snapshot(txid, next_snap));
COMMENT ON FUNCTION outbox._not_passed(pg_snapshot, pg_snapshot, bigint, xid8, bigint) IS
    'internal: whether a position has not passed an event yet (what it owes)';

-- Every endpoint's position as it stands: its own, or the stream's when it
-- follows the stream.  What reads positions reads this.
CREATE VIEW outbox._positions AS
SELECT p.endpoint_id,
       CASE WHEN p.follows THEN s.snap ELSE p.snap END AS snap,
       CASE WHEN p.follows THEN s.next_snap ELSE p.next_snap END AS next_snap,
       CASE WHEN p.follows THEN s.after_id ELSE p.after_id END AS after_id,
       p.follows,
       CASE WHEN p.follows THEN s.updated_at ELSE p.updated_at END AS updated_at
  FROM outbox.positions p
  -- (s.singleton: an index condition, so that the callers that turn
  -- sequential scans off do not plan around a "disabled" scan of it)
  LEFT JOIN outbox.stream s ON s.singleton AND p.follows;
COMMENT ON VIEW outbox._positions IS 'internal: each endpoint''s position, its own or the stream''s';

-- Events an endpoint is owed that its position has not passed yet.
CREATE FUNCTION outbox._unread(eid integer)
RETURNS TABLE (n bigint, oldest timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*), min(e.created_at)
      FROM outbox._positions p
      JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
      JOIN outbox.events e
        ON outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
       AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
       AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
     WHERE p.endpoint_id = eid
$$;
COMMENT ON FUNCTION outbox._unread(integer) IS 'internal: count and oldest of the events an endpoint''s position has not passed';

-- The same for every endpoint at once, for the views.  Asked endpoint by
-- endpoint, the question costs endpoints x events: every endpoint walks
-- the events past its position.  Endpoints that follow the stream share
-- its position, so the events past each distinct position are counted
-- once, by event type, and each endpoint then adds up the types it
-- subscribes to: the cost is the events past the distinct positions plus
-- endpoints x event types.
-- With the owner's rights, as health() and rotation_holds(): an operator
-- granted the views and these functions needs no rights on the tables
-- (README, "Privileges").
CREATE FUNCTION outbox._unread_all()
RETURNS TABLE (endpoint_id integer, n bigint, oldest timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
    WITH pos AS (
        SELECT p.endpoint_id, p.snap, p.next_snap, p.after_id,
               dense_rank() OVER (ORDER BY p.snap::text, p.next_snap::text, p.after_id) AS k
          FROM outbox._positions p
    ), owed AS (
        SELECT d.k, e.event_type, count(*) AS n, min(e.created_at) AS oldest
          FROM (SELECT DISTINCT ON (pos.k) pos.k, pos.snap, pos.next_snap, pos.after_id
                  FROM pos ORDER BY pos.k) d
          JOIN outbox.events e
            ON outbox._not_passed(d.snap, d.next_snap, d.after_id, e.txid, e.id)
           AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
         GROUP BY d.k, e.event_type
    ), subscribed AS (
        SELECT ep.id, outbox._like_patterns(ep.event_types) AS patterns FROM outbox.endpoints ep
    )
    SELECT s.id, coalesce(sum(o.n), 0)::bigint, min(o.oldest)
      FROM subscribed s
      LEFT JOIN pos ON pos.endpoint_id = s.id
      LEFT JOIN owed o ON o.k = pos.k AND o.event_type LIKE ANY (s.patterns)
     GROUP BY s.id
$$;
COMMENT ON FUNCTION outbox._unread_all() IS 'internal: _unread for every endpoint, each distinct position read once';

----------------------------------------------------------------------------
-- What operators see
----------------------------------------------------------------------------

-- One row per endpoint.  Retries count as waiting whether their event is in
-- outbox.events or set aside in outbox.delayed; the age of what waits
-- leaves out events not due yet.  max_in_flight is the endpoint's cap (its
-- own, or outbox.endpoint_concurrency as this session sees it), in_flight
-- its requests in flight now, as the relay last published them; format
-- what its requests look like; max_age its limit on an event's age, and
-- expired the events it was not sent because they expired, as the attempt
-- log still has them (outbox.attempt_retention); rate_limit its limit
-- (NULL: none), and rate_limited whether the relay holds deliveries to it
-- back now, for its limit or for a Retry-After it answered, as the relay
-- last published it.
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
       ep.max_age,
       (SELECT count(*) FROM outbox.attempt_log a
         WHERE a.endpoint_id = ep.id AND a.error = 'expired') AS expired,
       ep.rate_limit,
       coalesce(f.held, false) AS rate_limited
  FROM outbox.endpoints ep
  JOIN outbox.endpoint_health h ON h.endpoint_id = ep.id
  JOIN outbox._unread_all() u ON u.endpoint_id = ep.id
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
    'one row per endpoint: state and why, events waiting and the age of the oldest, in retry, dead, last success and failure, backlog given up, cap on and requests in flight now, format, max_age and events expired, rate limit and whether it holds the endpoint now';

-- Retries count as waiting whether their event is in outbox.events or set
-- aside in outbox.delayed.  The age of what waits leaves out events not
-- due yet (not sent, next_at later): a reminder due next week is not late.
CREATE VIEW outbox.backlog AS
WITH waiting AS (
    SELECT u.n, u.oldest FROM outbox._unread_all() u
    UNION ALL
    SELECT 1, CASE WHEN r.attempts = 0 AND r.next_at > now() THEN NULL
                   ELSE coalesce(e.created_at, d.created_at) END
      FROM outbox.retries r
      LEFT JOIN outbox.events e ON e.id = r.id
      LEFT JOIN outbox.delayed d ON d.id = r.id
     WHERE e.id IS NOT NULL OR d.id IS NOT NULL
)
SELECT (SELECT coalesce(sum(n), 0)::bigint FROM waiting) AS deliveries_waiting,
       (SELECT now() - min(oldest) FROM waiting) AS oldest_age,
       (SELECT count(*) FROM outbox.events e WHERE e.created_at > now() - interval '1 minute') AS emitted_last_minute,
       (SELECT count(*) FROM outbox.attempt_log a
         WHERE a.at > now() - interval '1 minute' AND a.status BETWEEN 200 AND 299) AS delivered_last_minute;
COMMENT ON VIEW outbox.backlog IS
    'deliveries not yet made (an event owed to two endpoints counts twice), the age of the oldest, and the flow of the last minute';

CREATE VIEW outbox.attempts AS
SELECT a.event_id, ep.name AS endpoint, a.attempt, a.at, a.duration_ms, a.status, a.error,
       a.response, coalesce(e.event_type, d.event_type) AS event_type
  FROM outbox.attempt_log a
  LEFT JOIN outbox.endpoints ep ON ep.id = a.endpoint_id
  LEFT JOIN outbox.events e ON e.id = a.id
  LEFT JOIN outbox.delayed d ON d.id = a.id;
COMMENT ON VIEW outbox.attempts IS
    'every delivery attempt kept (outbox.attempt_retention): event, endpoint, attempt number, time, duration, status, error and the first bytes of the response';

CREATE VIEW outbox.dead_letters AS
SELECT d.event_id, ep.name AS endpoint, d.event_type, d.key, d.attempts, d.last_status,
       d.last_error, d.dead_at, d.created_at AS emitted_at, d.payload
  FROM outbox.dead_letter_log d
  JOIN outbox.endpoints ep ON ep.id = d.endpoint_id;
COMMENT ON VIEW outbox.dead_letters IS 'events given up on per endpoint; outbox.retry_dead() sends them again';

CREATE VIEW outbox.relay_stats AS SELECT * FROM outbox._relay_stats();
COMMENT ON VIEW outbox.relay_stats IS
    'one row per running relay (one per database served) and what it did since it started: batches recorded, deliveries, failures, retries, request bytes sent, seconds waiting with requests in flight and seconds in SQL';

-- What keeps the events partition that rotation empties next from being
-- emptied, one line each: endpoints whose position has not passed some of
-- its events (paused, disabled, or behind), and transactions holding a lock
-- on it (one that emitted into it and is still open, or one reading it),
-- each once whatever lock modes it holds.  Events waiting in retries are
-- not listed: rotation sets them aside.  Empty when nothing holds it.  A
-- transaction's uncommitted events are invisible here as they are to the
-- relay: while it is open, its lock is what holds the partition.
-- (jit off: with sequential scans off its costs pass jit_above_cost, and
-- compiling took 400 ms of a health() check that runs in milliseconds)
CREATE FUNCTION outbox.rotation_holds()
RETURNS TABLE (holder text, detail text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
    WITH nxt AS (
        SELECT ((r.slot + 1) % 3)::smallint AS s
          FROM outbox.rotation r WHERE r.tbl = 'events' AND r.current
    ), behind AS (
        SELECT ep.name, ep.paused, ep.disabled_at, count(*) AS n
          FROM nxt, outbox._positions p
          JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
          JOIN outbox.events e
            ON outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
           AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
         WHERE e.slot = nxt.s
         GROUP BY ep.name, ep.paused, ep.disabled_at
    )
    SELECT format('endpoint "%s"', b.name),
           format('endpoint "%s" (%s) has not passed %s of its events in partition outbox.events_%s',
                  b.name,
                  CASE WHEN b.disabled_at IS NOT NULL THEN format('disabled since %s', b.disabled_at)
                       WHEN b.paused THEN 'paused'
                       ELSE 'active: behind' END,
                  b.n, (SELECT s FROM nxt))
      FROM behind b
    UNION ALL
    SELECT DISTINCT
           CASE WHEN l.pid IS NULL THEN format('prepared transaction %s', coalesce(px.gid, l.virtualtransaction))
                ELSE format('pid %s', l.pid) END,
           CASE WHEN l.pid IS NULL
                THEN format('prepared transaction %s (prepared at %s) holds a lock on outbox.events_%s',
                            quote_literal(coalesce(px.gid, l.virtualtransaction)), px.prepared, (SELECT s FROM nxt))
                ELSE format('a transaction of pid %s (%s, open since %s) holds a lock on outbox.events_%s',
                            l.pid, a.state, a.xact_start, (SELECT s FROM nxt)) END
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      LEFT JOIN pg_prepared_xacts px ON l.pid IS NULL AND px.transaction::text = split_part(l.virtualtransaction, '/', 2)
     WHERE l.locktype = 'relation' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.relation = format('outbox.events_%s', (SELECT s FROM nxt))::regclass
       AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
       AND a.backend_type IS DISTINCT FROM 'outbox relay'
$$;
COMMENT ON FUNCTION outbox.rotation_holds() IS
    'what keeps the events partition that rotation empties next from being emptied: one row per endpoint behind or transaction holding a lock on it';

CREATE FUNCTION outbox.health()
RETURNS TABLE (check_name text, status text, detail text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'relay running',
           CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                              WHERE backend_type = 'outbox relay' AND datname = current_database())
                THEN 'ok' ELSE 'warning' END,
           CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity
                              WHERE backend_type = 'outbox relay' AND datname = current_database())
                THEN 'a relay serves this database'
                ELSE 'no relay serves this database: is outbox in shared_preload_libraries, does outbox.database allow this database, and is outbox.max_relays large enough?' END
    UNION ALL
    SELECT 'oldest undelivered',
           CASE WHEN coalesce(b.oldest_age, '0') > outbox._setting_interval('outbox.alert_after', '30 seconds')
                THEN 'warning' ELSE 'ok' END,
           CASE WHEN b.deliveries_waiting = 0 THEN 'nothing waiting'
                WHEN b.oldest_age IS NULL THEN format('%s deliveries waiting, none due yet', b.deliveries_waiting)
                ELSE format('%s deliveries waiting, the oldest for %s (warning after %s)',
                            b.deliveries_waiting, date_trunc('second', b.oldest_age),
                            outbox._setting_interval('outbox.alert_after', '30 seconds')) END
      FROM outbox.backlog b
    UNION ALL
    SELECT 'dead letters',
           CASE WHEN n > 0 THEN 'warning' ELSE 'ok' END,
           format('%s dead letters', n)
      FROM (SELECT count(*) AS n FROM outbox.dead_letter_log) d
    UNION ALL
    SELECT 'endpoints disabled',
           CASE WHEN n > 0 THEN 'warning' ELSE 'ok' END,
           CASE WHEN n > 0 THEN format('%s disabled: %s', n, names) ELSE 'none disabled' END
      FROM (SELECT count(*) AS n, string_agg(name, ', ' ORDER BY name) AS names
              FROM outbox.endpoints WHERE disabled_at IS NOT NULL) x
    UNION ALL
    -- The events partition in use should change every half retention
    -- period; when it has not for a whole one, something holds the next
    -- partition (outbox.rotation_holds() says what) and the events tables
    -- grow.  Once the rotation is due, what holds it is named even before.
    SELECT 'events rotation',
           CASE WHEN late THEN 'warning' ELSE 'ok' END,
           CASE WHEN late AND holds IS NOT NULL
                THEN format('events are kept past outbox.retention (%s); held by: %s', retention, holds)
                WHEN late
                THEN format('events are kept past outbox.retention (%s); nothing holds the partition to be emptied now: it goes at the relay''s next rotation', retention)
                WHEN holds IS NOT NULL
                THEN format('events are rotated on time so far; waiting on: %s', holds)
                ELSE 'events are rotated on time' END
      FROM (SELECT r.opened_at < now() - ret AS late, ret AS retention,
                   CASE WHEN r.opened_at < now() - ret / 2
                        THEN (SELECT string_agg(h.detail, '; ' ORDER BY h.detail) FROM outbox.rotation_holds() h) END AS holds
              FROM outbox.rotation r,
                   LATERAL (SELECT outbox._setting_interval('outbox.retention', '7 days') AS ret) s
             WHERE r.tbl = 'events' AND r.current) x
$$;
COMMENT ON FUNCTION outbox.health() IS
    'one row per check (relay running, oldest undelivered, dead letters, endpoints disabled, events rotation and what holds it) with ok or warning';

----------------------------------------------------------------------------
-- Relay internals: what the background worker reads and records.  Each is
-- one statement from the worker's point of view; none is granted to anyone.
----------------------------------------------------------------------------

-- Every endpoint as the relay loads it (store.c relies on the order of the
-- columns).  A function with sequential scans off: the relay keeps its
-- plan, made while the tables are small, and a join of sequential scans
-- took seconds per load with 10,000 endpoints; by their keys it is one
-- merge of three index scans.
CREATE FUNCTION outbox._relay_endpoints()
RETURNS TABLE (id integer, name text, url text, header_lines text, timeout_ms bigint,
               max_attempts integer, ordered boolean, active boolean, secret text,
               previous_secret text, event_types text[], follows boolean, max_in_flight integer,
               format text, max_age_ms bigint, auth jsonb, rate_limit double precision,
               changed_at timestamptz)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
-- Every row of three tables, joined on their keys: never a nested loop.
-- On statistics taken before 10,000 endpoints were created the planner
-- took each table for a row or two and walked every secret for each
-- endpoint (41 s a load; bench case 9).
SET enable_nestloop = off
SET jit = off
AS $$
    SELECT e.id, e.name, e.url, array_to_string(outbox._header_lines(e.headers), E'\n'),
           outbox._timeout_ms(e.timeout), e.max_attempts, e.ordered,
           NOT e.paused AND e.disabled_at IS NULL, s.secret,
           CASE WHEN s.previous_expires_at > now() THEN s.previous_secret END,
           e.event_types, p.follows, e.max_in_flight, e.format, outbox._timeout_ms(e.max_age), s.auth,
           e.rate_limit::double precision, e.updated_at
      FROM outbox.endpoints e
      JOIN outbox.endpoint_secrets s ON s.endpoint_id = e.id
      JOIN outbox.positions p ON p.endpoint_id = e.id
     ORDER BY e.id
$$;
COMMENT ON FUNCTION outbox._relay_endpoints() IS 'internal: every endpoint as the relay loads it';

-- Endpoints with retries due now: the relay reads due retries of these
-- only, not of every endpoint.
CREATE FUNCTION outbox._due_endpoints() RETURNS integer[]
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(DISTINCT r.endpoint_id), '{}')
      FROM outbox.retries r WHERE r.next_at <= now()
$$;
COMMENT ON FUNCTION outbox._due_endpoints() IS 'internal: endpoints that have retries due now';

-- The stream's row, made at the current snapshot if there is none yet, and
-- locked for the caller's transaction.  None (NULL) while positions from
-- another cluster wait for the stream's row of a restore still loading
-- (pg_restore loads outbox.positions before outbox.stream): _rebase
-- translates both once it is there.
CREATE FUNCTION outbox._stream_row() RETURNS outbox.stream
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st outbox.stream;
BEGIN
    SELECT * INTO st FROM outbox.stream FOR UPDATE;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM outbox.positions p
                              WHERE p.system_identifier <> outbox._system_identifier()) THEN
        RETURN NULL;
    ELSIF NOT FOUND THEN
        INSERT INTO outbox.stream (snap) VALUES (pg_current_snapshot())
        ON CONFLICT (singleton) DO NOTHING;
        SELECT * INTO st FROM outbox.stream FOR UPDATE;
    END IF;
    RETURN st;
END
$$;

-- The next page of the stream: events of its batch after after_id, of any
-- type, in id order, at most lim and ending after the event that brings it
-- to max_bytes (one event at least).  Opens a new batch (visible now, not
-- in the stream's snapshot) when none is open and there is an event in it;
-- closes a batch found empty.  The relay routes each event to the
-- following endpoints that subscribe to its type, and moves the stream
-- past the page when it records the page's last outcomes (_record).  This
-- reader and the two below return an event's type, emit time and payload
-- (as JSON text), of which the relay makes the body of each endpoint's
-- format (src/targets/format.c), and its expires_at and priority (0 for
-- NULL), which the relay applies per endpoint.  bytes_cut is true on the
-- event that brings the page to max_bytes, which is then its last: the
-- page is no sign its batch is done (a flag per row, not a maximum over
-- the page, which cost a quarter of the read).
CREATE FUNCTION outbox._read_stream(lim integer, max_bytes bigint,
                                    ahead_of text DEFAULT NULL, ahead_after bigint DEFAULT NULL)
RETURNS TABLE (id bigint, event_id uuid, event_type text, deliver_at timestamptz, key text,
               emitted_at timestamptz, data text, header_lines text[], batch text, bytes_cut boolean,
               expires_at timestamptz, priority smallint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    st  outbox.stream;
    nxt pg_snapshot;
    lo  bigint;
BEGIN
    -- Reading ahead (the relay, while the page that ends at ahead_after
    -- is out): the page after it, if its batch ahead_of is still the
    -- open one; nothing is written or locked.
    IF ahead_of IS NOT NULL THEN
        SELECT * INTO st FROM outbox.stream;
        IF st.next_snap IS NULL OR st.next_snap::text <> ahead_of THEN
            RETURN;
        END IF;
        st.after_id := ahead_after;
    ELSE
        st := outbox._stream_row();
        IF st.snap IS NULL THEN
            RETURN;
        END IF;
    END IF;
    -- At most twice: an open batch found empty is closed, then a new one
    -- is opened from the current snapshot.
    FOR attempt IN 1..2 LOOP
        IF st.next_snap IS NULL THEN
            nxt := pg_current_snapshot();
            IF nxt::text = st.snap::text THEN
                RETURN;
            END IF;
            lo := outbox._batch_first_id(st.snap, nxt);
            -- Nothing new: an idle relay writes nothing.
            IF lo IS NULL THEN
                RETURN;
            END IF;
            UPDATE outbox.stream s SET next_snap = nxt, after_id = lo - 1, updated_at = now()
            RETURNING * INTO st;
        END IF;

        RETURN QUERY
            SELECT e.id, e.event_id, e.event_type, e.deliver_at, e.key, e.created_at, e.payload::text,
                   CASE WHEN e.headers IS NULL THEN '{}' ELSE outbox._header_lines(e.headers) END,
                   st.next_snap::text,
                   e.upto >= max_bytes,
                   e.expires_at, coalesce(e.priority, 0::smallint)
              FROM (SELECT ev.*, sum(ev.sz) OVER (ORDER BY ev.id) AS upto
                      FROM (SELECT e1.id, e1.event_id, e1.event_type, e1.deliver_at, e1.key,
                                   e1.created_at, e1.payload, e1.headers, e1.expires_at, e1.priority,
                                   outbox._event_bytes(e1.payload, e1.headers) AS sz
                              FROM outbox.events e1
                             WHERE e1.id > st.after_id
                               AND pg_visible_in_snapshot(e1.txid, st.next_snap)
                               AND NOT pg_visible_in_snapshot(e1.txid, st.snap)
                             ORDER BY e1.id
                             LIMIT lim) ev) e
             WHERE e.upto - e.sz < max_bytes
             ORDER BY e.id;
        IF FOUND OR ahead_of IS NOT NULL THEN
            RETURN;
        END IF;
        UPDATE outbox.stream s
           SET snap = s.next_snap, next_snap = NULL, after_id = 0, updated_at = now()
        RETURNING * INTO st;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._read_stream(integer, bigint, text, bigint) IS
    'internal: the next page of the relay''s shared stream, every event type, bounded in events and in bytes; or the page after the one in flight, read ahead';

-- For the events of a stream page routed to endpoints (one pair per
-- delivery, in order): whether the endpoint answered it with a 2xx already
-- (with verify, after a restart), and, for an ordered endpoint, whether an
-- earlier event of its key is still owed (it waits behind it).
CREATE FUNCTION outbox._route_checks(eids integer[], event_ids uuid[], keys text[],
                                     ordered boolean[], verify boolean)
RETURNS TABLE (delivered boolean, blocked boolean)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT verify AND outbox._delivered(r.eid, r.evid, '-infinity'),
           r.ord AND r.key IS NOT NULL
               AND EXISTS (SELECT 1 FROM outbox.retries q WHERE q.endpoint_id = r.eid AND q.key = r.key)
      FROM unnest(eids, event_ids, keys, ordered) WITH ORDINALITY AS r(eid, evid, key, ord, n)
     ORDER BY r.n
$$;
COMMENT ON FUNCTION outbox._route_checks(integer[], uuid[], text[], boolean[], boolean) IS
    'internal: per routed delivery of a stream page, whether it was delivered already and whether it waits behind its key';

-- Endpoints that are back where the stream is follow it again: their own
-- position equals the stream's, and the relay has nothing of theirs or of
-- the stream in flight (it passes only such endpoints).  While no endpoint
-- follows the stream, its position matters to nobody, and it moves to the
-- position of a candidate between batches first (the relay does not read
-- the stream meanwhile: endpoints would otherwise have to chase it).
-- Returns those that now follow.
CREATE FUNCTION outbox._attach(candidates integer[]) RETURNS integer[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- (by key: a kept plan's scan of every position would test each against
-- the whole array, which only constant arrays hash)
SET enable_seqscan = off
AS $$
DECLARE
    st outbox.stream := outbox._stream_row();
    attached integer[];
BEGIN
    IF st.snap IS NULL THEN
        RETURN '{}';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.follows) THEN
        UPDATE outbox.stream s SET snap = c.snap, next_snap = NULL, after_id = 0, updated_at = now()
          FROM (SELECT p.snap FROM outbox.positions p
                 WHERE p.endpoint_id = ANY (candidates) AND p.next_snap IS NULL
                 ORDER BY p.endpoint_id LIMIT 1) c
        RETURNING s.* INTO st;
        IF NOT FOUND THEN
            SELECT * INTO st FROM outbox.stream;
        END IF;
    END IF;
    -- The rows are locked where they are chosen (a row a concurrent
    -- drop_endpoint() holds is left alone), then updated by key.  Each
    -- statement reaches them by key alone: an update that took them from a
    -- locking subquery of its own was planned, on statistics taken before
    -- 10,000 endpoints were created, as a nested loop comparing each row
    -- with every candidate (7.5 s for one attach; bench case 9).
    SELECT coalesce(array_agg(l.endpoint_id), '{}') INTO attached
      FROM (SELECT p.endpoint_id FROM outbox.positions p
             WHERE p.endpoint_id = ANY (candidates) AND NOT p.follows
               AND p.snap::text = st.snap::text
               AND p.next_snap::text IS NOT DISTINCT FROM st.next_snap::text
               AND (p.next_snap IS NULL OR p.after_id = st.after_id)
               FOR UPDATE SKIP LOCKED) l;
    UPDATE outbox.positions p SET follows = true, updated_at = now()
     WHERE p.endpoint_id = ANY (attached);
    RETURN attached;
END
$$;
COMMENT ON FUNCTION outbox._attach(integer[]) IS
    'internal: endpoints whose position reached the stream''s follow it again';

-- Whether an endpoint has attempted an event (an attempt is logged: sent,
-- or found expired) or holds it in retries (failed, or deferred): an
-- event sent ahead of its page is passed over when its page comes.
CREATE FUNCTION outbox._attempted(eid integer, evid bigint, ev uuid) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN EXISTS (SELECT 1 FROM outbox.attempt_log a
                WHERE a.event_id OPERATOR(pg_catalog.=) ev AND a.endpoint_id OPERATOR(pg_catalog.=) eid)
    OR EXISTS (SELECT 1 FROM outbox.retries r
                WHERE r.endpoint_id OPERATOR(pg_catalog.=) eid AND r.id OPERATOR(pg_catalog.=) evid);
COMMENT ON FUNCTION outbox._attempted(integer, bigint, uuid) IS
    'internal: whether an endpoint has attempted an event or holds it in retries (one sent ahead of its page)';

-- The next page of events owed to an endpoint that does not follow the
-- stream, read from its own position in id order: at most lim events, and
-- it ends after the event that brings it to max_bytes (one event at least).
-- When no batch is open it starts one, visible in the stream's snapshot
-- (the end of the stream's open batch, or where the stream is) and not in
-- the position's, when that lies ahead of the endpoint, so that it arrives
-- where the stream is and can follow it again; an endpoint already there
-- reads nothing and waits to be attached.  Otherwise (the stream is behind
-- the endpoint, as for one just created) the batch ends at the current
-- snapshot.  Each try walks at most a span of ids (a few tries per call),
-- moving past a span with none of the endpoint's events, so that a read
-- costs milliseconds however far behind the endpoint is.  Writes only the
-- position's batch bounds; the relay advances after_id when it records the
-- page.  bytes_cut, on a page's last own row, is true when the byte budget
-- ended it or more ids follow the span (read only on a page shorter than
-- lim): such a page is not the end of its batch.  Unless the
-- endpoint is ordered, the page also carries, after its own rows (ahead
-- true), up to a quarter of it of the batch's highest-priority events
-- further on (not on a probe's page, nor in the stream's own batch), so
-- that priority reaches past the page across a backlog;
-- when the page of such an event comes, the event is passed over, since
-- the endpoint attempted it (_attempted: its retry, if it failed, goes on
-- as any other).  The relay advances after_id to the last row that is not
-- ahead.
CREATE FUNCTION outbox._read_page(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, event_type text, deliver_at timestamptz, key text,
               emitted_at timestamptz, data text, header_lines text[], batch text, blocked boolean,
               delivered boolean, bytes_cut boolean, expires_at timestamptz, priority smallint,
               ahead boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    -- Ids a read walks at most per try: an endpoint whose types are rare
    -- among the events pays in steps of this, so that one far behind costs
    -- the relay's read step milliseconds, not the walk of its whole backlog.
    span bigint := greatest(lim, 1)::bigint * 20 + 10000;
    top  bigint;
    pos  outbox.positions;
    nxt  pg_snapshot;
    target pg_snapshot;
    lo   bigint;
    pats text[];
    match_all boolean;
    is_ordered boolean;
    in_stream_batch boolean;
BEGIN
    SELECT outbox._like_patterns(ep.event_types), '*' = ANY (ep.event_types), ep.ordered
      INTO pats, match_all, is_ordered
      FROM outbox.endpoints ep WHERE ep.id = eid;
    FOR attempt IN 1..4 LOOP
        -- A position locked by a concurrent drop_endpoint() is left alone,
        -- and one that follows the stream is read with the stream.
        SELECT * INTO pos FROM outbox.positions p WHERE p.endpoint_id = eid
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND OR pos.follows THEN
            RETURN;
        END IF;
        IF pos.next_snap IS NULL THEN
            SELECT coalesce(s.next_snap, s.snap) INTO target FROM outbox.stream s;
            IF target::text = pos.snap::text THEN
                RETURN;
            ELSIF target IS NOT NULL AND outbox._snap_contains(target, pos.snap) THEN
                nxt := target;
            ELSE
                nxt := pg_current_snapshot();
                IF nxt::text = pos.snap::text THEN
                    RETURN;
                END IF;
            END IF;
            lo := outbox._batch_first_id(pos.snap, nxt);
            IF lo IS NULL THEN
                -- Nothing between: a position bound for the stream's
                -- snapshot moves there at once; otherwise an idle relay
                -- writes nothing.
                IF nxt::text = target::text THEN
                    UPDATE outbox.positions p SET snap = nxt, after_id = 0, updated_at = now()
                     WHERE p.endpoint_id = eid;
                END IF;
                RETURN;
            END IF;
            UPDATE outbox.positions p SET next_snap = nxt, after_id = lo - 1, updated_at = now()
             WHERE p.endpoint_id = eid
            RETURNING * INTO pos;
        END IF;

        top := (SELECT max(e.id) FROM outbox.events e);
        in_stream_batch := EXISTS (SELECT 1 FROM outbox.stream s
                                    WHERE s.snap::text = pos.snap::text
                                      AND s.next_snap::text = pos.next_snap::text);
        RETURN QUERY
            WITH page AS (
                SELECT e.id, e.event_id, e.event_type, e.deliver_at, e.key, e.created_at, e.payload,
                       e.headers, e.expires_at, coalesce(e.priority, 0::smallint) AS priority,
                       -- cut: by the byte budget (on the event that reaches it, the
                       -- page's last), or by the span while more ids follow (on
                       -- every event: the relay reads it on the last, and only
                       -- of a page shorter than lim)
                       e.upto >= max_bytes OR pos.after_id + span < top AS bytes_cut
                  FROM (SELECT ev.id, ev.event_id, ev.deliver_at, ev.key, ev.event_type, ev.created_at,
                               ev.payload, ev.headers, ev.sz, ev.expires_at, ev.priority,
                               sum(ev.sz) OVER (ORDER BY ev.id) AS upto
                          FROM (SELECT e1.*, outbox._event_bytes(e1.payload, e1.headers) AS sz
                                  FROM outbox.events e1
                                 WHERE e1.id > pos.after_id AND e1.id <= pos.after_id + span
                                   AND pg_visible_in_snapshot(e1.txid, pos.next_snap)
                                   AND NOT pg_visible_in_snapshot(e1.txid, pos.snap)
                                   AND (match_all OR e1.event_type LIKE ANY (pats))
                                   -- one sent ahead by an earlier page is passed over
                                   -- (also after the endpoint became ordered)
                                   AND (coalesce(e1.priority, 0) <= 0
                                        OR NOT outbox._attempted(eid, e1.id, e1.event_id))
                                 ORDER BY e1.id
                                 LIMIT lim) ev) e
                 WHERE e.upto - e.sz < max_bytes
            ), ahead AS (
                -- Sent ahead: the highest-priority events of the batch past
                -- the page, above the page's lowest priority, found among
                -- the next 4 x lim events with a priority (events_ahead_idx:
                -- of any type or batch), not attempted here yet; a quarter
                -- of the page in events and in bytes at most.  Never on an
                -- ordered endpoint, on a probe's page (lim below 4), or in
                -- the stream's own batch (an endpoint that left the stream
                -- mid-batch may follow it again at the same point, and the
                -- stream would send what it sent ahead again).
                SELECT h.*
                  FROM (SELECT c.*, sum(c.sz) OVER (ORDER BY c.priority DESC, c.id) AS upto
                          FROM (SELECT x.id, x.event_id, x.event_type, x.deliver_at, x.key, x.created_at,
                                       x.payload, x.headers, x.expires_at, x.priority,
                                       outbox._event_bytes(x.payload, x.headers) AS sz
                                  FROM (SELECT e2.* FROM outbox.events e2
                                         WHERE NOT is_ordered AND lim >= 4 AND NOT in_stream_batch
                                           AND e2.priority > 0
                                           AND e2.id > (SELECT max(pg.id) FROM page pg)
                                         ORDER BY e2.id
                                         LIMIT 4 * lim) x
                                 WHERE x.priority > (SELECT min(pg.priority) FROM page pg)
                                   AND pg_visible_in_snapshot(x.txid, pos.next_snap)
                                   AND NOT pg_visible_in_snapshot(x.txid, pos.snap)
                                   AND (match_all OR x.event_type LIKE ANY (pats))
                                   AND NOT outbox._attempted(eid, x.id, x.event_id)
                                 ORDER BY x.priority DESC, x.id
                                 LIMIT greatest(lim / 4, 1)) c) h
                 WHERE h.upto <= max_bytes / 4
            )
            SELECT pg.id, pg.event_id, pg.event_type, pg.deliver_at, pg.key, pg.created_at, pg.payload::text,
                   CASE WHEN pg.headers IS NULL THEN '{}' ELSE outbox._header_lines(pg.headers) END,
                   pos.next_snap::text,
                   is_ordered AND pg.key IS NOT NULL
                       AND EXISTS (SELECT 1 FROM outbox.retries r
                                    WHERE r.endpoint_id = eid AND r.key = pg.key),
                   verify AND outbox._delivered(eid, pg.event_id, '-infinity'),
                   pg.bytes_cut, pg.expires_at, pg.priority, false
              FROM page pg
            UNION ALL
            SELECT a.id, a.event_id, a.event_type, a.deliver_at, a.key, a.created_at, a.payload::text,
                   CASE WHEN a.headers IS NULL THEN '{}' ELSE outbox._header_lines(a.headers) END,
                   pos.next_snap::text, false, false, false, a.expires_at, a.priority, true
              FROM ahead a
             ORDER BY 15, 1;
        IF FOUND THEN
            RETURN;
        END IF;
        -- None of its events in this span, and more ids follow: past it.
        IF pos.after_id + span < top THEN
            UPDATE outbox.positions p SET after_id = pos.after_id + span, updated_at = now()
             WHERE p.endpoint_id = eid
            RETURNING * INTO pos;
            CONTINUE;
        END IF;
        UPDATE outbox.positions p
           SET snap = p.next_snap, next_snap = NULL, after_id = 0, updated_at = now()
         WHERE p.endpoint_id = eid;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._read_page(integer, integer, boolean, bigint) IS
    'internal: the next page of events owed to an endpoint by its position, bounded in events and in bytes';

-- Events of an endpoint whose retry (or deliver_at) is due, at most lim,
-- ending after the one that brings them to max_bytes (one at least),
-- highest priority first, then oldest due.  An event set aside by rotation
-- is read from outbox.delayed.
CREATE FUNCTION outbox._read_due(eid integer, lim integer, verify boolean, max_bytes bigint)
RETURNS TABLE (id bigint, event_id uuid, event_type text, attempts integer, key text,
               emitted_at timestamptz, data text, header_lines text[], delivered boolean,
               expires_at timestamptz, priority smallint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT x.id, x.event_id, x.event_type, x.attempts, x.key, x.created_at, x.payload::text,
           CASE WHEN x.headers IS NULL THEN '{}' ELSE outbox._header_lines(x.headers) END,
           -- only a 2xx since it was queued: replay() re-sends on purpose
           verify AND outbox._delivered(eid, x.event_id, x.queued_at),
           x.expires_at, x.priority
      FROM (SELECT y.*, sum(y.sz) OVER (ORDER BY y.priority DESC, y.next_at, y.id) AS upto
              FROM (SELECT r.id, r.attempts, r.queued_at, r.next_at, r.priority, ev.event_id, ev.event_type,
                           ev.created_at, ev.payload, ev.key, ev.headers, ev.expires_at,
                           outbox._event_bytes(ev.payload, ev.headers) AS sz
                      FROM outbox.retries r
                      JOIN outbox.endpoints ep ON ep.id = r.endpoint_id
                      CROSS JOIN LATERAL (
                            SELECT e.event_id, e.event_type, e.created_at, e.payload, e.key, e.headers,
                                   e.expires_at
                              FROM outbox.events e WHERE e.id = r.id
                            UNION ALL
                            SELECT d.event_id, d.event_type, d.created_at, d.payload, d.key, d.headers,
                                   d.expires_at
                              FROM outbox.delayed d WHERE d.id = r.id
                            LIMIT 1) ev
                     WHERE r.endpoint_id = eid AND r.next_at <= now()
                       -- ordered: only the oldest owed event of a key is sent
                       AND NOT (ep.ordered AND r.key IS NOT NULL
                                AND EXISTS (SELECT 1 FROM outbox.retries r2
                                             WHERE r2.endpoint_id = r.endpoint_id AND r2.key = r.key
                                               AND r2.id < r.id))
                     ORDER BY r.priority DESC, r.next_at, r.id
                     LIMIT lim) y) x
     WHERE x.upto - x.sz < max_bytes
     ORDER BY x.priority DESC, x.next_at, x.id
$$;
COMMENT ON FUNCTION outbox._read_due(integer, integer, boolean, bigint) IS
    'internal: events whose retry or deliver_at has come, for one endpoint, bounded in events and in bytes';

----------------------------------------------------------------------------
-- Recording outcomes
----------------------------------------------------------------------------

-- What is recorded of a delivery: 'delivered', 'retry', 'dead',
-- 'deferred' (not sent: its deliver_at is later, or it waits behind its
-- key), 'already' (answered with a 2xx before a restart; not sent) or
-- 'expired' (not sent: past the event's expires_at or the endpoint's
-- max_age; an attempt-log row with error 'expired').  The relay's
-- OutcomeKind (src/relay/policy.h) has the same labels; a label either
-- side lacks is an error, not a silent mismatch.
CREATE TYPE outbox.outcome_kind AS ENUM ('delivered', 'retry', 'dead', 'deferred', 'already', 'expired');
COMMENT ON TYPE outbox.outcome_kind IS 'internal: what is recorded of a delivery';

-- One finished delivery, as the relay records it.  disable_reason is set
-- on the delivery whose answer asked to disable the endpoint (410,
-- webhook-delivery: disable).
CREATE TYPE outbox.outcome AS (
    endpoint_id    integer,
    id             bigint,
    event_id       uuid,
    attempt        integer,
    outcome        outbox.outcome_kind,
    next_at        timestamptz,
    status         integer,
    error          text,
    duration_ms    real,
    response       text,
    disable_reason text
);
COMMENT ON TYPE outbox.outcome IS 'internal: one finished delivery, as the relay records it';

-- A page whose deliveries are all recorded: the position it moves.
-- endpoint_id NULL is the stream.  batch is the page's batch snapshot
-- (text); the position moves only if it is still in that batch.
CREATE TYPE outbox.page_done AS (
    endpoint_id integer,
    batch       text,
    last_id     bigint,
    batch_done  boolean
);
COMMENT ON TYPE outbox.page_done IS 'internal: a page read and recorded whole, and the position it moves';

-- What a record needs to know of each endpoint's outcomes, gathered in one
-- pass over them (_record): which statements have anything to do, and the
-- endpoint's health.  last_ok and last_fail are positions in the outcomes.
CREATE TYPE outbox.endpoint_outcomes AS (
    endpoint_id integer,
    special     boolean,
    retry       boolean,
    dead        boolean,
    settles     boolean,
    asks        boolean,
    reason      text,
    counted     boolean,
    last_ok     bigint,
    fails       bigint,
    last_fail   bigint
);
COMMENT ON TYPE outbox.endpoint_outcomes IS 'internal: one endpoint''s outcomes in a record, summed up';

-- Record, in one statement, finished deliveries of any endpoints, the
-- pages they complete, and the endpoints that stop following the stream
-- (detach: their own position takes the stream's, before the stream moves);
-- quiet names endpoints whose health row needs no write for successes
-- alone (see the health statement).
-- Returns the endpoints whose row another transaction holds (a
-- drop_endpoint() not yet committed): nothing of theirs was recorded, and
-- the stream did not move; the relay tries them again later.  An endpoint
-- that is gone has nothing left to record and is not returned.
CREATE FUNCTION outbox._record(outcomes outbox.outcome[], pages outbox.page_done[], detach integer[],
                               quiet integer[] DEFAULT '{}')
RETURNS integer[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    per outbox.endpoint_outcomes[];
    wanted integer[];
    held integer[];
    locked integer[];
    skip integer[];
    owing integer[];
    any_retry boolean;
    any_dead boolean;
    any_asks boolean;
    health_ids integer[];
    own_pages integer[];
    nestloop text;
BEGIN
    -- One pass over the outcomes, per endpoint; the statements below read
    -- this, and most of them have nothing to do (five of them walked every
    -- outcome before: 28% of a record's time, against 12% for this pass).
    per := ARRAY(
        SELECT ROW(o.endpoint_id,
                   bool_or(o.outcome NOT IN ('delivered', 'already') OR o.attempt <> 1
                           OR o.disable_reason IS NOT NULL),
                   bool_or(o.outcome IN ('retry', 'deferred')),
                   bool_or(o.outcome = 'dead'),
                   bool_or(o.outcome IN ('delivered', 'dead', 'already', 'expired')),
                   bool_or(o.outcome NOT IN ('delivered', 'expired') OR o.disable_reason IS NOT NULL),
                   min(o.disable_reason),
                   -- health counts what was sent: not a deferral, nor an
                   -- event delivered before or expired
                   bool_or(o.outcome NOT IN ('deferred', 'already', 'expired')),
                   max(o.n) FILTER (WHERE o.outcome = 'delivered'),
                   count(*) FILTER (WHERE o.outcome NOT IN ('delivered', 'deferred', 'already', 'expired')),
                   max(o.n) FILTER (WHERE o.outcome NOT IN ('delivered', 'deferred', 'already', 'expired'))
                  )::outbox.endpoint_outcomes
          FROM unnest(outcomes) WITH ORDINALITY AS o(endpoint_id, id, event_id, attempt, outcome, next_at,
                                                     status, error, duration_ms, response, disable_reason, n)
         GROUP BY o.endpoint_id);

    -- Hold against a concurrent drop, without waiting (one relay serves
    -- every endpoint, so it must not queue behind an open transaction),
    -- each endpoint whose record writes a row of its own: a retry, a dead
    -- letter, its position, its state.  A first attempt delivered writes
    -- only the attempt log, which has no key to the endpoint, and the
    -- health row, skipped when locked: most endpoints of a stream page are
    -- not locked at all (a lock is a write to the endpoint's row).
    wanted := ARRAY(SELECT DISTINCT x FROM (
                        SELECT e.endpoint_id FROM unnest(per) e WHERE e.special
                        UNION ALL SELECT p.endpoint_id FROM unnest(pages) p WHERE p.endpoint_id IS NOT NULL
                        UNION ALL SELECT unnest(detach)) u(x)
                     ORDER BY x);
    IF cardinality(wanted) > 0 THEN
        held := ARRAY(SELECT e.id FROM outbox.endpoints e WHERE e.id = ANY (wanted)
                       ORDER BY e.id FOR KEY SHARE SKIP LOCKED);
        locked := ARRAY(SELECT e.id FROM outbox.endpoints e
                         WHERE e.id = ANY (wanted) AND e.id <> ALL (held));
        -- Endpoints held elsewhere, and those gone: nothing of theirs is written.
        skip := locked || ARRAY(SELECT x FROM unnest(wanted) x
                                 WHERE NOT EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.id = x));
    ELSE
        locked := '{}';
        skip := '{}';
    END IF;
    IF cardinality(locked) > 0 THEN
        -- The stream moves only when everything routed to it is recorded.
        pages := ARRAY(SELECT p FROM unnest(pages) p
                        WHERE p.endpoint_id IS NOT NULL AND p.endpoint_id <> ALL (locked));
        detach := ARRAY(SELECT d FROM unnest(detach) d WHERE d <> ALL (locked));
    END IF;
    -- (the outcomes stay whole, so that per's positions hold: every
    -- statement below passes over those of skipped endpoints)
    IF cardinality(skip) > 0 THEN
        per := ARRAY(SELECT e FROM unnest(per) e WHERE e.endpoint_id <> ALL (skip));
    END IF;
    SELECT coalesce(bool_or(e.retry), false), coalesce(bool_or(e.dead), false), coalesce(bool_or(e.asks), false)
      INTO any_retry, any_dead, any_asks
      FROM unnest(per) e;

    -- Detached endpoints start from the stream's position as it is now,
    -- before this statement moves it.
    IF cardinality(detach) > 0 THEN
        UPDATE outbox.positions p
           SET follows = false, snap = s.snap, next_snap = s.next_snap, after_id = s.after_id,
               updated_at = now()
          FROM outbox.stream s
         WHERE p.endpoint_id = ANY (detach) AND p.follows;
    END IF;

    INSERT INTO outbox.attempt_log (endpoint_id, id, event_id, attempt, duration_ms, status, error, response, slot)
    SELECT o.endpoint_id, o.id, o.event_id, o.attempt, o.duration_ms, o.status,
           CASE WHEN o.outcome = 'expired' THEN 'expired' ELSE o.error END, o.response,
           (SELECT r.slot FROM outbox.rotation r WHERE r.tbl = 'attempt_log' AND r.current)
      FROM unnest(outcomes) o
     WHERE o.outcome NOT IN ('deferred', 'already') AND o.endpoint_id <> ALL (skip);

    -- Only failures and deferrals get rows.  The event is in outbox.events,
    -- or in outbox.delayed once rotation set it aside.
    IF any_retry THEN
    -- One row per endpoint and event: its page and its due retries may both
    -- hold an event (replay() queues events a position has not passed), and
    -- an upsert may not touch a row twice.  The latest attempt wins.
    INSERT INTO outbox.retries AS r (endpoint_id, id, event_id, key, attempts, next_at, last_status, last_error,
                                     priority)
    SELECT DISTINCT ON (o.endpoint_id, o.id)
           o.endpoint_id, o.id, o.event_id, e.key, o.attempt, o.next_at, o.status, o.error,
           coalesce(e.priority, 0)
      FROM unnest(outcomes) o
      CROSS JOIN LATERAL (SELECT ev.key, ev.priority FROM outbox.events ev WHERE ev.id = o.id
                          UNION ALL
                          SELECT d.key, d.priority FROM outbox.delayed d WHERE d.id = o.id
                          LIMIT 1) e
     WHERE o.outcome IN ('retry', 'deferred') AND o.endpoint_id <> ALL (skip)
     ORDER BY o.endpoint_id, o.id, o.attempt DESC
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, next_at = EXCLUDED.next_at,
           last_status = EXCLUDED.last_status, last_error = EXCLUDED.last_error;
    END IF;

    IF any_dead THEN
    INSERT INTO outbox.dead_letter_log AS d (endpoint_id, id, event_id, event_type, payload, key, headers,
                                             created_at, attempts, last_status, last_error)
    SELECT DISTINCT ON (o.endpoint_id, o.id)
           o.endpoint_id, o.id, e.event_id, e.event_type, e.payload, e.key, e.headers, e.created_at,
           o.attempt, o.status, o.error
      FROM unnest(outcomes) o
      CROSS JOIN LATERAL (SELECT ev.event_id, ev.event_type, ev.payload, ev.key, ev.headers, ev.created_at
                            FROM outbox.events ev WHERE ev.id = o.id
                          UNION ALL
                          SELECT dl.event_id, dl.event_type, dl.payload, dl.key, dl.headers, dl.created_at
                            FROM outbox.delayed dl WHERE dl.id = o.id
                          LIMIT 1) e
     WHERE o.outcome = 'dead' AND o.endpoint_id <> ALL (skip)
     ORDER BY o.endpoint_id, o.id, o.attempt DESC
    ON CONFLICT (endpoint_id, id) DO UPDATE
       SET attempts = EXCLUDED.attempts, last_status = EXCLUDED.last_status,
           last_error = EXCLUDED.last_error, dead_at = now();
    END IF;

    -- By primary key, one probe per event, of the endpoints that owe any
    -- retry at all (one probe each first: most outcomes are first attempts
    -- of endpoints that owe none, and a probe per outcome was a seventh of
    -- a record).  An expired event is settled too: not sent, and not owed
    -- any more.  The probes are a lateral subquery (its LIMIT keeps it one)
    -- and the rows are deleted by their ctid: a join of retries with
    -- unnest(outcomes) left the planner free to walk every retry row for
    -- each outcome, and the relay keeps the plan made while retries was
    -- empty (bench case 6: records of a healthy endpoint took 52 ms instead
    -- of 2 beside 500 retries of a failing one).
    owing := ARRAY(SELECT e.endpoint_id FROM unnest(per) e
                    WHERE e.settles
                      AND EXISTS (SELECT 1 FROM outbox.retries r WHERE r.endpoint_id = e.endpoint_id));
    IF cardinality(owing) > 0 THEN
    DELETE FROM outbox.retries r
     WHERE r.ctid = ANY (ARRAY(
               SELECT q.ctid
                 FROM unnest(outcomes) o
                 CROSS JOIN LATERAL (SELECT r2.ctid FROM outbox.retries r2
                                      WHERE r2.endpoint_id = o.endpoint_id AND r2.id = o.id
                                      LIMIT 1) q
                WHERE o.outcome IN ('delivered', 'dead', 'already', 'expired')
                  AND o.endpoint_id = ANY (owing)));
    END IF;

    -- Own pages move their endpoint's position, the stream's page the
    -- stream; each only if it is still in the page's batch (a rebase or a
    -- release may have moved it meanwhile).  Rows of endpoints are reached
    -- by key only, here and in the health rows below (= ANY of the ids):
    -- joined on the key alone, a plan made while the table looked empty
    -- (statistics taken after the endpoints before had been dropped) may
    -- walk every row of it as the outer side, on every record (bench case
    -- 10: records of 10 endpoints beside 10,000 took 5 to 22 ms instead of
    -- about 1, the health rows walked twice each time).
    own_pages := ARRAY(SELECT d.endpoint_id FROM unnest(pages) d WHERE d.endpoint_id IS NOT NULL);
    IF cardinality(own_pages) > 0 THEN
    UPDATE outbox.positions p
       SET snap = CASE WHEN d.batch_done THEN p.next_snap ELSE p.snap END,
           next_snap = CASE WHEN d.batch_done THEN NULL ELSE p.next_snap END,
           after_id = CASE WHEN d.batch_done THEN 0 ELSE d.last_id END,
           updated_at = now()
      FROM unnest(pages) d
     WHERE d.endpoint_id IS NOT NULL AND p.endpoint_id = d.endpoint_id
       AND p.endpoint_id = ANY (own_pages)
       AND NOT p.follows AND p.next_snap::text = d.batch;
    END IF;
    UPDATE outbox.stream s
       SET snap = CASE WHEN d.batch_done THEN s.next_snap ELSE s.snap END,
           next_snap = CASE WHEN d.batch_done THEN NULL ELSE s.next_snap END,
           after_id = CASE WHEN d.batch_done THEN 0 ELSE d.last_id END,
           updated_at = now()
      FROM unnest(pages) d
     WHERE d.endpoint_id IS NULL AND s.next_snap::text = d.batch;

    -- Endpoint health: one row update per endpoint, from the attempts made
    -- (skipped for this record if resume_endpoint() holds the row).  An
    -- expired event was not sent: it says nothing of the receiver.  The
    -- endpoints in quiet are left out unless they failed here: the relay
    -- had their outcomes counted less than a second ago, with no failure
    -- for a second (its probe of each row was a third of a record of a
    -- thousand endpoints, one delivery each).
    -- A row whose only news is another success is written at most once a
    -- second, and looked at about that often (last_success_at is about two
    -- seconds old at most): with thousands of endpoints on a stream page, a
    -- write per endpoint per page cost more than the deliveries.  Only the rows
    -- written are locked (a lock is a write too: before 1.4 every endpoint
    -- of the record had its row locked).  The rows are locked where they are
    -- chosen, and updated by key from there: an update that took them from
    -- a locking subquery of its own (IN (SELECT ... FOR UPDATE)) was planned
    -- as a nested loop that compared each row it updated with every row
    -- locked (bench case record: 31 to 44 ms for a thousand endpoints with
    -- their rows due, against 14 to 19 ms now).
    health_ids := ARRAY(SELECT e.endpoint_id FROM unnest(per) e WHERE e.counted);
    -- Hash joins, never nested loops, between the record's rows and the
    -- health rows: on statistics taken before 10,000 endpoints were made,
    -- the nested loops scanned every row of the record for each health row
    -- (20 to 47 ms a record of about 250 endpoints; bench case 9).
    nestloop := current_setting('enable_nestloop');
    PERFORM set_config('enable_nestloop', 'off', true);
    WITH s AS (
        SELECT e.endpoint_id, e.last_ok, e.fails, e.last_fail
          FROM unnest(per) e JOIN outbox.endpoint_health hl ON hl.endpoint_id = e.endpoint_id
         WHERE e.counted AND hl.endpoint_id = ANY (health_ids)
           AND (e.fails > 0 OR NOT EXISTS (SELECT 1 FROM unnest(quiet) q WHERE q = e.endpoint_id))
           AND (e.fails > 0 OR hl.last_success_at IS NULL OR hl.last_success_at < now() - interval '1 second'
                OR hl.consecutive_failures <> 0 OR hl.failing_since IS NOT NULL)
           FOR UPDATE OF hl SKIP LOCKED
    )
    UPDATE outbox.endpoint_health h
       SET last_success_at = CASE WHEN s.last_ok IS NOT NULL THEN now() ELSE h.last_success_at END,
           last_failure_at = CASE WHEN s.fails > 0 THEN now() ELSE h.last_failure_at END,
           last_failure_status = CASE WHEN s.fails > 0 THEN (outcomes[s.last_fail::integer]).status
                                      ELSE h.last_failure_status END,
           last_failure_error = CASE WHEN s.fails > 0 THEN (outcomes[s.last_fail::integer]).error
                                     ELSE h.last_failure_error END,
           -- (failures after a success of this record: a walk of the
           -- outcomes, for an endpoint that had both)
           consecutive_failures = CASE WHEN s.last_ok IS NULL THEN h.consecutive_failures + s.fails
                                       WHEN s.fails = 0 THEN 0
                                       ELSE (SELECT count(*)
                                               FROM unnest(outcomes) WITH ORDINALITY
                                                    AS a(endpoint_id, id, event_id, attempt, outcome, next_at,
                                                         status, error, duration_ms, response, disable_reason, n)
                                              WHERE a.endpoint_id = s.endpoint_id AND a.n > s.last_ok
                                                AND a.outcome NOT IN ('delivered', 'deferred', 'already',
                                                                      'expired')) END,
           -- a failure after a success of this record starts a new failing
           -- period (before 1.4 it kept the old one: an endpoint that had
           -- just delivered could be disabled for no success since then)
           failing_since = CASE WHEN s.last_ok IS NOT NULL AND coalesce(s.last_fail < s.last_ok, true) THEN NULL
                                WHEN s.last_ok IS NOT NULL THEN now()
                                WHEN s.fails > 0 THEN coalesce(h.failing_since, now())
                                ELSE h.failing_since END
      FROM s
     WHERE h.endpoint_id = s.endpoint_id AND h.endpoint_id = ANY (health_ids);
    PERFORM set_config('enable_nestloop', nestloop, true);

    -- Disable when asked to, or after outbox.disable_after of failures; if
    -- an administrator holds the endpoint, a later record decides.  Only
    -- endpoints with something other than a delivery in this record may be
    -- disabled (a delivery ends failing_since above), and only their rows
    -- are locked: before 1.4 the lock wrote every endpoint's row that had
    -- an outcome, one write per endpoint and record.
    IF any_asks THEN
    WITH asked AS (
        SELECT e.endpoint_id, e.reason FROM unnest(per) e WHERE e.asks
    )
    UPDATE outbox.endpoints ep
       SET disabled_at = now(), updated_at = now(),
           disabled_reason = coalesce(asked.reason,
                                      format('no successful delivery since %s (outbox.disable_after is %s)',
                                             h.failing_since, outbox._setting_interval('outbox.disable_after', '5 days')))
      FROM asked
      JOIN outbox.endpoint_health h ON h.endpoint_id = asked.endpoint_id
     WHERE ep.id = asked.endpoint_id AND ep.disabled_at IS NULL
       AND (asked.reason IS NOT NULL
            OR h.failing_since < now() - outbox._setting_interval('outbox.disable_after', '5 days'))
       AND ep.id IN (SELECT id FROM outbox.endpoints WHERE id IN (SELECT endpoint_id FROM asked)
                        FOR NO KEY UPDATE SKIP LOCKED);
    -- The relay loads its endpoints again once this commits: one disabled
    -- for outbox.disable_after is not sent to any more.
    IF FOUND THEN
        PERFORM outbox._wake_at_commit();
    END IF;
    END IF;
    RETURN locked;
END
$$;
COMMENT ON FUNCTION outbox._record(outbox.outcome[], outbox.page_done[], integer[], integer[]) IS
    'internal: record finished deliveries of any endpoints in one statement, move the positions of the pages they complete, detach endpoints from the stream, leave the health rows of quiet endpoints alone for successes';

----------------------------------------------------------------------------
-- Rotation
----------------------------------------------------------------------------

-- Copy the events of slot s that wait in retries (sent or not) into
-- outbox.delayed, before rotation empties the slot.
CREATE FUNCTION outbox._set_aside(s smallint) RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    INSERT INTO outbox.delayed (id, event_id, event_type, payload, key, headers, deliver_at, created_at,
                                expires_at, priority)
    SELECT DISTINCT ON (e.id) e.id, e.event_id, e.event_type, e.payload, e.key, e.headers, e.deliver_at, e.created_at,
           e.expires_at, e.priority
      FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
     WHERE e.slot = s
     ORDER BY e.id
    ON CONFLICT (id) DO NOTHING
$$;
COMMENT ON FUNCTION outbox._set_aside(smallint) IS
    'internal: copy the events of an events partition that wait in retries into outbox.delayed';

-- Does any endpoint still owe an event of this events slot: one of the
-- types it subscribes to that its position has not passed, or one waiting
-- in retries that has no copy in outbox.delayed?
CREATE FUNCTION outbox._slot_owed(s smallint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
    SELECT EXISTS (SELECT 1 FROM outbox._positions p JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
                    WHERE EXISTS (SELECT 1 FROM outbox.events e
                                   WHERE e.slot = s
                                     AND outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
                                     AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))))
        OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events e ON e.id = r.id
                    WHERE e.slot = s AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id))
$$;
COMMENT ON FUNCTION outbox._slot_owed(smallint) IS 'internal: whether some endpoint still owes an event of an events partition';

-- An endpoint disabled for longer than retention gives up its backlog when
-- it holds up the rotation of slot s: its position moves to now (its own
-- position: it no longer follows the stream), its retries go, and
-- endpoint_health counts what was dropped.  Its retries of
-- events set aside in outbox.delayed do not hold rotation, so they alone
-- do not make it give anything up.
CREATE FUNCTION outbox._release_disabled(s smallint, retention interval) RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    ep record;
    n bigint;
BEGIN
    FOR ep IN
        SELECT e.id, e.name, e.disabled_at, e.event_types FROM outbox.endpoints e
          JOIN outbox._positions p ON p.endpoint_id = e.id
         WHERE e.disabled_at < now() - retention
           AND (EXISTS (SELECT 1 FROM outbox.events ev
                         WHERE ev.slot = s
                           AND outbox._not_passed(p.snap, p.next_snap, p.after_id, ev.txid, ev.id)
                           AND ev.event_type LIKE ANY (outbox._like_patterns(e.event_types)))
                OR EXISTS (SELECT 1 FROM outbox.retries r JOIN outbox.events ev ON ev.id = r.id
                            WHERE r.endpoint_id = e.id AND ev.slot = s
                              AND NOT EXISTS (SELECT 1 FROM outbox.delayed d WHERE d.id = r.id)))
    LOOP
        -- Skip an endpoint whose position another transaction holds.
        PERFORM 1 FROM outbox.positions p WHERE p.endpoint_id = ep.id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        n := (SELECT u.n FROM outbox._unread(ep.id) u)
             + (SELECT count(*) FROM outbox.retries r WHERE r.endpoint_id = ep.id);
        DELETE FROM outbox.retries r WHERE r.endpoint_id = ep.id;
        UPDATE outbox.positions p
           SET snap = pg_current_snapshot(), next_snap = NULL, after_id = 0, follows = false,
               updated_at = now()
         WHERE p.endpoint_id = ep.id;
        IF n > 0 THEN
            UPDATE outbox.endpoint_health h
               SET backlog_dropped = h.backlog_dropped + n, backlog_dropped_at = now()
             WHERE h.endpoint_id = ep.id;
            RAISE LOG 'outbox: endpoint "%", disabled since %, gave up % waiting events to rotation',
                ep.name, ep.disabled_at, n;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._release_disabled(smallint, interval) IS
    'internal: endpoints disabled longer than retention give up the backlog that holds up rotation';

-- Move each rotated table on to its next slot once the current one has
-- taken rows for half its retention period, emptying the next slot first.
-- Run by the relay as it starts and about once a second; cheap when there
-- is nothing to do.
-- The partition to empty is locked with a short timeout, so that a stream
-- of short transactions reading it cannot hold rotation off for ever.
CREATE FUNCTION outbox._rotate() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t text;
    retention interval;
    cur smallint;
    opened timestamptz;
    nxt smallint;
    nxt_closed timestamptz;
    has_rows boolean;
BEGIN
    -- Positions from another cluster (pg_upgrade) are translated first.
    PERFORM outbox._rebase();
    FOREACH t IN ARRAY ARRAY['events', 'attempt_log', 'inbox'] LOOP
        retention := outbox._setting_interval(
            CASE t WHEN 'events' THEN 'outbox.retention'
                   WHEN 'attempt_log' THEN 'outbox.attempt_retention'
                   ELSE 'outbox.inbox_retention' END, '7 days');
        SELECT r.slot, r.opened_at INTO cur, opened
          FROM outbox.rotation r WHERE r.tbl = t AND r.current;
        CONTINUE WHEN opened > now() - retention / 2;
        nxt := (cur + 1) % 3;
        SELECT r.closed_at INTO nxt_closed FROM outbox.rotation r WHERE r.tbl = t AND r.slot = nxt;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM outbox.%I)', t || '_' || nxt) INTO has_rows;
        -- Rows of the next slot are removed only once they are old enough,
        -- and events only once no endpoint owes them (checked again under
        -- the lock: replay() may have queued some meanwhile).  Events that
        -- wait in retries are set aside first: they do not hold it, nor
        -- make an endpoint disabled longer than retention give them up.
        CONTINUE WHEN has_rows AND nxt_closed > now() - retention;
        IF has_rows AND t = 'events' THEN
            PERFORM outbox._set_aside(nxt);
            PERFORM outbox._release_disabled(nxt, retention);
            CONTINUE WHEN outbox._slot_owed(nxt);
        END IF;
        BEGIN
            PERFORM set_config('lock_timeout', '200ms', true);
            EXECUTE format('LOCK TABLE outbox.%I IN ACCESS EXCLUSIVE MODE', t || '_' || nxt);
        EXCEPTION WHEN lock_not_available THEN
            CONTINUE;
        END;
        IF has_rows THEN
            IF t = 'events' THEN
                PERFORM outbox._set_aside(nxt);
            END IF;
            CONTINUE WHEN t = 'events' AND outbox._slot_owed(nxt);
            EXECUTE format('TRUNCATE outbox.%I', t || '_' || nxt);
        END IF;
        IF t = 'events' THEN
            -- Set-aside copies no retry refers to any more go at each
            -- rotation of the events.
            DELETE FROM outbox.delayed d
             WHERE NOT EXISTS (SELECT 1 FROM outbox.retries r WHERE r.id = d.id);
            -- Dedupe keys go with the events emitted before that slot
            -- closed, except those of events that still have a copy.
            DELETE FROM outbox.dedupe d
             WHERE d.created_at < nxt_closed
               AND NOT EXISTS (SELECT 1 FROM outbox.delayed dl WHERE dl.event_id = d.event_id);
        END IF;
        UPDATE outbox.rotation r
           SET current = (r.slot = nxt),
               opened_at = CASE WHEN r.slot = nxt THEN now() ELSE r.opened_at END,
               closed_at = CASE WHEN r.slot = cur THEN now() WHEN r.slot = nxt THEN NULL ELSE r.closed_at END
         WHERE r.tbl = t;
        IF t = 'events' THEN
            UPDATE outbox.queue SET cur_slot = nxt, rotated_at = now();
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION outbox._rotate() IS 'internal: rebase positions from another cluster, then rotate events, attempt_log and inbox past their retention (run by the relay)';

----------------------------------------------------------------------------
-- Restore into another cluster
----------------------------------------------------------------------------

-- Positions written in another cluster (read back by pg_restore, or kept
-- through pg_upgrade) are snapshots of its transaction ids, and so are the
-- events' txids: they mean nothing here.  Translate them while they can
-- still be compared with each other: every event an endpoint's position has
-- not passed becomes a retry of that endpoint, due now (due at deliver_at
-- if later), which the relay delivers again with its webhook-id and in key
-- order on ordered endpoints; then every event is made visible to all
-- (FrozenTransactionId), the stream starts from this cluster's present and
-- every endpoint follows it.  An endpoint is sent again exactly what its
-- position (its own, or the stream's that it followed) owed.
CREATE FUNCTION outbox._rebase() RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    here text := outbox._system_identifier();
    owed bigint;
BEGIN
    -- Cheap when there is nothing to do (the relay asks once a second).
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here)
       AND NOT EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here) THEN
        RETURN;
    END IF;
    PERFORM 1 FROM outbox.stream FOR UPDATE;
    PERFORM 1 FROM outbox.positions p ORDER BY p.endpoint_id FOR UPDATE;
    IF NOT EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here)
       AND NOT EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here) THEN
        RETURN;
    END IF;
    -- Restored positions that follow the stream wait for its restored row
    -- (loaded after them when the restore is not one transaction): its
    -- trigger rebases them all then.
    IF EXISTS (SELECT 1 FROM outbox.positions p WHERE p.system_identifier <> here AND p.follows)
       AND NOT EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here) THEN
        RETURN;
    END IF;
    INSERT INTO outbox.retries (endpoint_id, id, event_id, key, attempts, next_at, priority)
    SELECT p.endpoint_id, e.id, e.event_id, e.key, 0, greatest(now(), e.deliver_at), coalesce(e.priority, 0)
      FROM outbox._positions p
      JOIN outbox.positions own ON own.endpoint_id = p.endpoint_id
      JOIN outbox.endpoints ep ON ep.id = p.endpoint_id
      JOIN outbox.events e
        ON outbox._not_passed(p.snap, p.next_snap, p.after_id, e.txid, e.id)
       AND e.event_type LIKE ANY (outbox._like_patterns(ep.event_types))
     WHERE own.system_identifier <> here
        OR (own.follows AND EXISTS (SELECT 1 FROM outbox.stream s WHERE s.system_identifier <> here))
    ON CONFLICT (endpoint_id, id) DO NOTHING;
    GET DIAGNOSTICS owed = ROW_COUNT;
    UPDATE outbox.events e SET txid = '3' WHERE e.txid <> '3';
    DELETE FROM outbox.stream;
    INSERT INTO outbox.stream (snap) VALUES (pg_current_snapshot());
    UPDATE outbox.positions p
       SET snap = s.snap, next_snap = NULL, after_id = 0, follows = true, updated_at = now(),
           system_identifier = here
      FROM outbox.stream s
     WHERE p.system_identifier <> here OR p.follows;
    PERFORM outbox._wake_at_commit();
    RAISE LOG 'outbox: positions were written by another cluster (a restore or an upgrade): % events still owed are queued to be delivered again',
        owed;
END
$$;
COMMENT ON FUNCTION outbox._rebase() IS 'internal: translate positions and events restored from another cluster into this one''s transaction ids';

-- A restore loads positions in the same transaction as everything else
-- (pg_restore --single-transaction): translate them when it commits, before
-- any application emits into the restored database.  (The relay also does
-- it as it starts and once a second, for pg_upgrade: outbox._rotate().)
CREATE FUNCTION outbox._rebase_restored() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM outbox._rebase();
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION outbox._rebase_restored() IS 'internal: trigger rebasing positions restored from another cluster';

CREATE CONSTRAINT TRIGGER positions_restored AFTER INSERT ON outbox.positions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.system_identifier <> outbox._system_identifier())
    EXECUTE FUNCTION outbox._rebase_restored();
COMMENT ON TRIGGER positions_restored ON outbox.positions IS
    'at commit, rebase positions that a restore brought from another cluster';

CREATE CONSTRAINT TRIGGER stream_restored AFTER INSERT ON outbox.stream
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.system_identifier <> outbox._system_identifier())
    EXECUTE FUNCTION outbox._rebase_restored();
COMMENT ON TRIGGER stream_restored ON outbox.stream IS
    'at commit, rebase a stream position that a restore brought from another cluster';

----------------------------------------------------------------------------
-- Grants across an update
----------------------------------------------------------------------------

-- An update script changes objects in place (ALTER, CREATE OR REPLACE) and
-- drops none that an administrator may have granted something on: a
-- function whose arguments change keeps its old signature beside the new
-- one, or the update notes say to grant again.  What an extension script
-- grants is recorded as the extension's initial privileges, which pg_dump
-- leaves out, and no script writes pg_init_privs itself (1.5's
-- _grants_before() and _grants_back() did, and are gone since 1.6).

----------------------------------------------------------------------------
-- Metrics (1.7): every number an exporter serves, in Prometheus' names
----------------------------------------------------------------------------

-- Counters that only grow while the server runs, from the relay's shared
-- memory (src/counters.c): per endpoint, attempts by what they came to and
-- the seconds they took; the row with endpoint_id NULL is the database's
-- own (its relay's starts, and the attempts to endpoints beyond
-- outbox.max_counted_endpoints).
CREATE FUNCTION outbox._counters(
    OUT endpoint_id integer, OUT delivered bigint, OUT retry bigint, OUT dead bigint, OUT expired bigint,
    OUT seconds_sum double precision, OUT relay_starts bigint)
RETURNS SETOF record
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_counters';
COMMENT ON FUNCTION outbox._counters() IS
    'internal: this database''s counters in shared memory, per endpoint: attempts by outcome, their durations, the relay''s starts';

-- The duration histogram of every attempt of this database, summed over
-- its endpoints' counters in one walk of shared memory.
CREATE FUNCTION outbox._duration_totals(OUT buckets bigint[], OUT seconds_sum double precision)
LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'outbox_duration_totals';
COMMENT ON FUNCTION outbox._duration_totals() IS
    'internal: the attempt duration histogram of this database: cumulative buckets and the sum of seconds';

-- (STABLE, not IMMUTABLE: folded while planning, it would be called, and
-- its EXECUTE checked, before the view's own privileges are)
CREATE FUNCTION outbox._duration_bounds() RETURNS double precision[]
LANGUAGE c STABLE AS 'MODULE_PATHNAME', 'outbox_duration_bounds';
COMMENT ON FUNCTION outbox._duration_bounds() IS
    'internal: the upper bounds, in seconds, of the attempt duration histogram''s buckets';

-- What each endpoint is owed and due, as endpoint_status counts it
-- (events its position has not passed, of the types it subscribes to, and
-- its retries), for many endpoints at once: the events the stream has not
-- passed are read once for every endpoint that follows it, those of the
-- other positions once per distinct position, and each endpoint's
-- patterns are matched against the types owed, not against every event.
-- oldest leaves out what is not due yet.  With the owner's rights, as
-- _unread_all().  PL/pgSQL for its kept plan: an exporter reads it on one
-- connection, and planning this statement each time cost more than
-- running it while nothing is owed.
CREATE FUNCTION outbox._pending()
RETURNS TABLE (endpoint_id integer, n bigint, oldest timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH own AS (
        SELECT p.endpoint_id, p.snap, p.next_snap, p.after_id,
               dense_rank() OVER (ORDER BY p.snap::text, p.next_snap::text, p.after_id) AS k
          FROM outbox.positions p
         WHERE NOT p.follows
    ), owed AS (
        SELECT 0::bigint AS k, e.event_type, count(*) AS n, min(e.created_at) AS oldest
          FROM outbox.stream s
          JOIN outbox.events e
            ON outbox._not_passed(s.snap, s.next_snap, s.after_id, e.txid, e.id)
           AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
         GROUP BY e.event_type
        UNION ALL
        SELECT d.k, e.event_type, count(*), min(e.created_at)
          FROM (SELECT DISTINCT ON (own.k) own.k, own.snap, own.next_snap, own.after_id
                  FROM own ORDER BY own.k) d
          JOIN outbox.events e
            ON outbox._not_passed(d.snap, d.next_snap, d.after_id, e.txid, e.id)
           AND pg_visible_in_snapshot(e.txid, pg_current_snapshot())
         GROUP BY d.k, e.event_type
    ), keyed AS (
        SELECT p.endpoint_id, coalesce(own.k, 0) AS k
          FROM outbox.positions p
          LEFT JOIN own ON own.endpoint_id = p.endpoint_id
    ), unread AS (
        SELECT w.endpoint_id, sum(w.n) AS n, min(w.oldest) AS oldest
          FROM (SELECT DISTINCT ON (kd.endpoint_id, o.event_type) kd.endpoint_id, o.n, o.oldest
                  FROM keyed kd
                  JOIN owed o ON o.k = kd.k
                  JOIN outbox.endpoints ep ON ep.id = kd.endpoint_id
                  CROSS JOIN LATERAL unnest(ep.event_types) t(pattern)
                 WHERE t.pattern = o.event_type OR t.pattern = '*'
                    OR (right(t.pattern, 1) = '*'
                        AND left(o.event_type, length(t.pattern) - 1) = left(t.pattern, -1))) w
         GROUP BY w.endpoint_id
    ), retrying AS (
        SELECT rr.endpoint_id, count(*) AS n,
               min(coalesce(e.created_at, dl.created_at))
                   FILTER (WHERE NOT (rr.attempts = 0 AND rr.next_at > now())) AS oldest
          FROM outbox.retries rr
          LEFT JOIN outbox.events e ON e.id = rr.id
          LEFT JOIN outbox.delayed dl ON dl.id = rr.id
         WHERE e.id IS NOT NULL OR dl.id IS NOT NULL
         GROUP BY rr.endpoint_id
    )
    SELECT coalesce(u.endpoint_id, r.endpoint_id), (coalesce(u.n, 0) + coalesce(r.n, 0))::bigint,
           least(u.oldest, r.oldest)
      FROM unread u
      FULL JOIN retrying r ON r.endpoint_id = u.endpoint_id;
END
$$;
COMMENT ON FUNCTION outbox._pending() IS
    'internal: per endpoint owed anything, the deliveries owed and the emit time of the oldest one due';

-- One row per sample: name and labels as Prometheus names them, the value,
-- the family's type (a histogram's rows carry their sample's name:
-- _bucket with le, _sum, _count) and what it means.  The gauges come from
-- the tables and the relay's shared memory; the counters from shared
-- memory alone, never from the attempt log, which rotation empties.  Every
-- endpoint has its outbox_endpoint_up; its other samples are there while
-- they are not 0 (a counter from its first count): beside thousands of
-- endpoints each sample is a cost to every read, and most are 0.  Each
-- metric is a branch of its own, so that a reader asking for some names
-- computes only theirs.  Reading it takes no lock the relay waits on: the
-- tables are read as any SELECT reads them, shared memory without a lock,
-- and a partition's size only while its rotation is overdue.
CREATE VIEW outbox.metrics AS
WITH counted AS (
    SELECT * FROM outbox._counters()
), ep AS (
    SELECT e.id, e.name, jsonb_build_object('endpoint', e.name) AS labels,
           e.disabled_at IS NULL AND NOT e.paused AND h.consecutive_failures = 0 AS up,
           p.n AS pending, extract(epoch FROM now() - p.oldest) AS oldest_age,
           c.delivered, c.retry, c.dead, c.expired
      FROM outbox.endpoints e
      JOIN outbox.endpoint_health h ON h.endpoint_id = e.id
      LEFT JOIN outbox._pending() p ON p.endpoint_id = e.id
      LEFT JOIN counted c ON c.endpoint_id = e.id
), db AS (
    SELECT c.delivered, c.retry, c.dead, c.expired, c.relay_starts FROM counted c WHERE c.endpoint_id IS NULL
), durations AS (
    SELECT t.buckets, t.seconds_sum, outbox._duration_bounds() AS bounds FROM outbox._duration_totals() t
), rotated AS (
    SELECT r.tbl, jsonb_build_object('table', r.tbl) AS labels, extract(epoch FROM now() - r.opened_at) AS age,
           extract(epoch FROM s.retention) AS retention,
           format('outbox.%s_%s', r.tbl, (r.slot + 1) % 3) AS next_partition
      FROM outbox.rotation r
      CROSS JOIN LATERAL (
            SELECT outbox._setting_interval(CASE r.tbl WHEN 'events' THEN 'outbox.retention'
                                                       WHEN 'attempt_log' THEN 'outbox.attempt_retention'
                                                       ELSE 'outbox.inbox_retention' END,
                                            '7 days') AS retention) s
     WHERE r.current
)
SELECT 'outbox_endpoint_up'::text AS name, ep.labels, CASE WHEN ep.up THEN 1 ELSE 0 END::double precision AS value,
       'gauge'::text AS type,
       '1 when the endpoint is active and its last attempt did not fail; 0 when paused, disabled or failing'::text AS help
  FROM ep
UNION ALL
SELECT 'outbox_events_pending', ep.labels, ep.pending, 'gauge',
       'deliveries owed to the endpoint: events not yet sent and retries (an event owed to two endpoints counts for each)'
  FROM ep WHERE ep.pending > 0
UNION ALL
SELECT 'outbox_oldest_pending_age_seconds', ep.labels, ep.oldest_age, 'gauge',
       'age of the oldest delivery owed to the endpoint and due, since its emit'
  FROM ep WHERE ep.oldest_age IS NOT NULL
UNION ALL
SELECT 'outbox_dead_letters', ep.labels, d.n, 'gauge',
       'events given up on for the endpoint, as outbox.dead_letters has them'
  FROM (SELECT dl.endpoint_id, count(*) AS n FROM outbox.dead_letter_log dl GROUP BY dl.endpoint_id) d
  JOIN ep ON ep.id = d.endpoint_id
UNION ALL
SELECT 'outbox_deliveries_total', ep.labels || o.outcome, o.n, 'counter',
       'attempts by what they came to (delivered, retry, dead, expired), since the server started'
  FROM ep
  CROSS JOIN LATERAL (VALUES ('{"outcome": "delivered"}'::jsonb, ep.delivered), ('{"outcome": "retry"}', ep.retry),
                             ('{"outcome": "dead"}', ep.dead), ('{"outcome": "expired"}', ep.expired)) o(outcome, n)
 WHERE o.n > 0
UNION ALL
-- (attempts to endpoints beyond outbox.max_counted_endpoints, without an
-- endpoint label)
SELECT 'outbox_deliveries_total', o.outcome, o.n, 'counter',
       'attempts by what they came to (delivered, retry, dead, expired), since the server started'
  FROM db
  CROSS JOIN LATERAL (VALUES ('{"outcome": "delivered"}'::jsonb, db.delivered), ('{"outcome": "retry"}', db.retry),
                             ('{"outcome": "dead"}', db.dead), ('{"outcome": "expired"}', db.expired)) o(outcome, n)
 WHERE o.n > 0
UNION ALL
SELECT 'outbox_attempt_duration_seconds_bucket', jsonb_build_object('le', coalesce(b.le::text, '+Inf')),
       d.buckets[b.i::integer], 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM durations d
  CROSS JOIN LATERAL unnest(d.bounds || NULL::double precision) WITH ORDINALITY b(le, i)
UNION ALL
SELECT 'outbox_attempt_duration_seconds_sum', '{}', d.seconds_sum, 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM durations d
UNION ALL
SELECT 'outbox_attempt_duration_seconds_count', '{}', d.buckets[cardinality(d.buckets)], 'histogram',
       'how long attempts took, from the request''s start to its answer, since the server started'
  FROM durations d
UNION ALL
SELECT 'outbox_relay_running', '{}',
       CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
                          WHERE backend_type = 'outbox relay' AND datname = current_database())
            THEN 1 ELSE 0 END,
       'gauge', '1 when a relay serves this database'
UNION ALL
SELECT 'outbox_relay_restarts_total', '{}', coalesce((SELECT greatest(db.relay_starts - 1, 0) FROM db), 0),
       'counter', 'relays started again for this database since the server started (a crash, a stop, an update)'
UNION ALL
SELECT 'outbox_rotation_retention_seconds', r.labels, r.retention, 'gauge',
       'how long rows of the table are kept (outbox.retention, attempt_retention, inbox_retention)'
  FROM rotated r
UNION ALL
SELECT 'outbox_rotation_age_seconds', r.labels, r.age, 'gauge',
       'since the table''s current partition began to take rows; it moves on every half retention'
  FROM rotated r
UNION ALL
SELECT 'outbox_rotation_held_seconds', r.labels, greatest(r.age - r.retention / 2, 0), 'gauge',
       'how long the table''s rotation is overdue: something holds the partition to be emptied (outbox.rotation_holds())'
  FROM rotated r
UNION ALL
SELECT 'outbox_rotation_held_bytes', r.labels,
       CASE WHEN r.age > r.retention / 2 THEN pg_total_relation_size(r.next_partition::regclass) ELSE 0 END,
       'gauge', 'bytes of the partition whose rotation is overdue, kept until it is emptied; 0 when none is'
  FROM rotated r;
COMMENT ON VIEW outbox.metrics IS
    'every metric an exporter serves, one row per sample in Prometheus naming: name, labels, value, type (gauge, counter, histogram) and help';

----------------------------------------------------------------------------
-- Privileges: PUBLIC gets nothing.  README tells an administrator what to
-- grant to an application role (emit, mark_processed) and to operators.
----------------------------------------------------------------------------

REVOKE ALL ON ALL TABLES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA outbox FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;

-- Start delivery in this database once this transaction commits.
SELECT outbox._launch();
