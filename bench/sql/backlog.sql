-- bench/sql/backlog.sql: emit events :first to :last (psql variables) in
-- one transaction.  The body the relay sends is about 300 bytes.
SELECT count(outbox.emit('bench.event',
                         jsonb_build_object('n', g, 'customer', 'customer-' || g % 1000,
                                            'amount', 19.99, 'currency', 'EUR',
                                            'note', repeat('x', 120))))
  FROM generate_series(:first, :last) AS g;
