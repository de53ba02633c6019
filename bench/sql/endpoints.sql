-- bench/sql/endpoints.sql: create endpoints :prefix1 to :prefix:n (psql
-- variables), in one transaction.  Endpoint i posts to :url followed by i
-- (or, where :url has "{i}" in it, to :url with i in its place: a host
-- name per endpoint) and subscribes to event type :types followed by i, with the given
-- timeout; with :paused = on it is paused, so that its backlog waits until
-- deliver.py resumes it.
BEGIN;
SELECT count(outbox.create_endpoint(:'prefix' || i,
                                    CASE WHEN strpos(:'url', '{i}') > 0 THEN replace(:'url', '{i}', i::text)
                                         ELSE :'url' || i END,
                                    ARRAY[:'types' || i],
                                    timeout => :'timeout'))
  FROM generate_series(1, :n) AS i;
SELECT count(outbox.pause_endpoint(:'prefix' || i))
  FROM generate_series(1, :n) AS i
 WHERE :'paused'::boolean;
COMMIT;
