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
