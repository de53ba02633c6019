# An endpoint that fails without pause only gets probes: its backlog waits
# at its position instead of being attempted (and costing the relay) event
# by event, and it flows again once the endpoint answers.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

# Pages of 50; no retry comes due during the test; one full read round
# per 200 ms (outbox_node's poll_interval), and one when a deliver_at
# comes due.
my $node = outbox_node('circuit', conf => "outbox.retry_schedule = '1h'\noutbox.batch_size = 50\n");
my ($url, $log, $receiver) = start_receiver();

sql("SELECT outbox.create_endpoint('down', '$url/down?status=500', '{t.down}')");
sql("SELECT outbox.create_endpoint('up', '$url/up', '{t.up}')");
sql("SELECT outbox.emit('t.down', jsonb_build_object('n', g)) FROM generate_series(1, 500) g");
sql("SELECT outbox.emit('t.up', jsonb_build_object('n', g)) FROM generate_series(1, 500) g");

ok(wait_received($log, sub { grep({ $_->{path} eq '/up' } @_) >= 500 }),
	'the healthy endpoint gets all its events');

# The first page (50 events) is sent whole; twenty failures in a row open
# the circuit, and from then on one new event is tried per full round.
# Ten probes after the first page: they are spread over at least nine poll
# intervals (1.8 s), where without the circuit the next pages would have
# gone out at once.
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 60 FROM outbox.attempts WHERE endpoint = 'down'"),
	'the failing endpoint is still being tried');
my ($span, $tried, $waiting) = split /\|/, sql(q{
SELECT (SELECT extract(epoch FROM max(at) - min(at))
          FROM (SELECT at FROM outbox.attempts WHERE endpoint = 'down' ORDER BY at DESC LIMIT 10) last10),
       (SELECT count(*) FROM outbox.attempts WHERE endpoint = 'down'),
       (SELECT events_waiting FROM outbox.endpoint_status WHERE name = 'down')});
cmp_ok($span, '>=', 1.6, "its last ten attempts were probes, about one per poll (over ${span} s)");
cmp_ok($tried, '<', 100, "it was probed, not flooded ($tried attempts of 500)");
cmp_ok($waiting, '>=', 400, "its backlog waits at its position ($waiting events waiting)");

# Full rounds also run whenever something comes due: here 40 events for
# the healthy endpoint with a deliver_at 50 ms apart, a full round each.
# They do not probe the failing endpoint faster than once per poll.
my $t0 = sql('SELECT extract(epoch FROM clock_timestamp())');
sql(q{SELECT outbox.emit('t.up', jsonb_build_object('late', g), deliver_at => now() + g * interval '50 ms')
        FROM generate_series(1, 40) g});
ok(wait_received($log, sub { grep({ $_->{path} eq '/up' } @_) >= 540 }), 'the 40 delayed events arrived');
my ($probes, $over) = split /\|/, sql(qq{
SELECT count(*), round((extract(epoch FROM clock_timestamp()) - $t0)::numeric, 2)
  FROM outbox.attempts WHERE endpoint = 'down' AND at > to_timestamp($t0)});
cmp_ok($probes, '<=', $over / 0.2 + 2,
	"rounds for what came due did not add probes ($probes probes in $over s, one per 0.2 s poll)");

# Once it answers, everything flows.
sql("SELECT outbox.alter_endpoint('down', url => '$url/down_healed')");
sql("UPDATE outbox.retries SET next_at = now()");
ok(wait_received($log, sub { grep({ $_->{path} eq '/down_healed' } @_) >= 500 }),
	'after it recovers, all 500 events arrive');
ok($node->poll_query_until('postgres',
	"SELECT events_waiting = 0 FROM outbox.endpoint_status WHERE name = 'down'"),
	'nothing left waiting');

$node->stop;
$receiver->kill_kill;
done_testing();
