-- bench/sql/reset.sql: before each relay case, drop every endpoint and
-- empty the event, attempt, retry and dead-letter tables, so that cases do
-- not see each other's rows.  One table a statement: the relay may still be
-- recording for a dropped endpoint, and taking the locks one at a time
-- waits for it instead of deadlocking with it.
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints;
TRUNCATE outbox.retries;
TRUNCATE outbox.dead_letter_log;
TRUNCATE outbox.attempt_log;
TRUNCATE outbox.events;
VACUUM ANALYZE outbox.events, outbox.attempt_log, outbox.retries, outbox.positions, outbox.endpoints;
CHECKPOINT;
