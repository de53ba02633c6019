-- bench/sql/backlog_types.sql: emit events :first to :last (psql
-- variables) in one transaction, of :types event types in turn,
-- bench.e1 to bench.e:types, for the cases whose endpoints each have an
-- event type of their own.  The same bodies as backlog.sql.
SELECT count(outbox.emit('bench.e' || (1 + g % :types),
                         jsonb_build_object('n', g, 'customer', 'customer-' || g % 1000,
                                            'amount', 19.99, 'currency', 'EUR',
                                            'note', repeat('x', 120))))
  FROM generate_series(:first, :last) AS g;
