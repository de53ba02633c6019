-- bench/sql/backlog_controls.sql: backlog.sql's events with expiry and
-- priority in use: each expires a day after it is emitted, and has a
-- priority of 0, 1 or 2 in turn, so that every page the relay reads is
-- sorted.  The same bodies as backlog.sql.
SELECT count(outbox.emit('bench.event',
                         jsonb_build_object('n', g, 'customer', 'customer-' || g % 1000,
                                            'amount', 19.99, 'currency', 'EUR',
                                            'note', repeat('x', 120)),
                         expires_at => now() + interval '1 day',
                         priority => g % 3))
  FROM generate_series(:first, :last) AS g;
