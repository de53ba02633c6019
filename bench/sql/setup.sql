-- bench/sql/setup.sql: the benchmark database's objects.  Run once by
-- bench/run.sh on its private instance.
--
-- bench_order is the "business row" every emit-cost transaction inserts;
-- bench_event has the columns of outbox.events and only a primary key (the
-- bare-INSERT baseline of case 1); the PgQ queue "bench" is the other one.
CREATE EXTENSION outbox;
CREATE EXTENSION pgq;
SELECT pgq.create_queue('bench');

CREATE TABLE bench_order (
    id          bigserial PRIMARY KEY,
    customer    integer NOT NULL,
    amount      numeric(10, 2) NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bench_event (
    id          bigserial PRIMARY KEY,
    slot        smallint NOT NULL,
    event_id    uuid NOT NULL,
    txid        xid8 NOT NULL,
    event_type  text NOT NULL,
    payload     jsonb NOT NULL,
    key         text,
    headers     jsonb,
    deliver_at  timestamptz,
    created_at  timestamptz NOT NULL
);

-- Case 1's capture rounds: a table of CAPTURE_ROWS rows updated whole, with
-- outbox.capture() or with a plain AFTER trigger that writes the same
-- payload and key into an ordinary table (bench_cap_log).
CREATE TABLE bench_cap (
    id          integer PRIMARY KEY,
    customer    integer NOT NULL,
    amount      numeric(10, 2) NOT NULL
);
CREATE TABLE bench_cap_log (
    id          bigserial PRIMARY KEY,
    event_type  text NOT NULL,
    payload     jsonb NOT NULL,
    key         text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE FUNCTION bench_cap_plain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_cap_log (event_type, payload, key)
    VALUES ('cap.updated', jsonb_build_object('old', to_jsonb(OLD), 'new', to_jsonb(NEW)), NEW.id::text);
    RETURN NULL;
END
$$;
