# The relay's thread never waits on a broker's network.  A server that
# accepts connections and never says a word (a listening socket nobody
# accepts on: the kernel completes the handshakes) stands in for a NATS
# server, a Kafka broker, a RabbitMQ broker and Redis (a BullMQ queue, and
# a stream over a connection of its own: database 1) at once, each an endpoint
# that gets an event every 100 ms; beside them a webhook endpoint gets
# 2,000 events over 2 s.  Its deliveries never pause for a second or more,
# all of them arrive, and the broker endpoints' attempts fail as transport
# errors (retried), not as anything else.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use IO::Socket::INET;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = outbox_node('silent_brokers', conf => qq{
outbox.retry_schedule = '200ms'
});
my ($url, $log, $receiver) = start_receiver();
wait_for_relay() or die 'no relay';

my $port = PostgreSQL::Test::Cluster::get_free_port();
my $silent = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1', LocalPort => $port, Proto => 'tcp', Listen => 128, ReuseAddr => 1)
  or die "cannot listen on 127.0.0.1:$port: $!";

sql(qq{SELECT outbox.create_endpoint('ok', '$url/ok', ARRAY['w.e']);
SELECT outbox.create_endpoint('b_nats', 'nats://127.0.0.1:$port/silent', ARRAY['b.nats'], timeout => '2 seconds');
SELECT outbox.create_endpoint('b_kafka', 'kafka://127.0.0.1:$port/silent', ARRAY['b.kafka'], timeout => '2 seconds');
SELECT outbox.create_endpoint('b_amqp', 'amqp://127.0.0.1:$port/?exchange=silent', ARRAY['b.amqp'],
       timeout => '2 seconds');
SELECT outbox.create_endpoint('b_bullmq', 'bullmq://127.0.0.1:$port/silent', ARRAY['b.bullmq'],
       timeout => '2 seconds');
SELECT outbox.create_endpoint('b_redis', 'redis://127.0.0.1:$port/1/silent', ARRAY['b.redis'],
       timeout => '2 seconds');});

# 20 steps of 100 ms: 100 events to the webhook endpoint, one to each broker.
my @ids;
my $start = time();
for my $step (1 .. 20)
{
	push @ids, split /\n/, sql(q{
SELECT outbox.emit('b.nats', '{}'), outbox.emit('b.kafka', '{}'), outbox.emit('b.amqp', '{}'),
       outbox.emit('b.bullmq', '{}'), outbox.emit('b.redis', '{}');
SELECT outbox.emit('w.e', jsonb_build_object('n', g)) FROM generate_series(1, 100) g});
	my $next = $start + $step * 0.1;
	usleep(int(($next - time()) * 1e6)) if $next > time();
}
@ids = grep { !/\|/ } @ids;
is(scalar(@ids), 2000, '2,000 events emitted to the webhook endpoint over 2 s');
ok(wait_received($log, got_all('/ok', @ids)), 'every one arrived');

my @t = sort { $a <=> $b } map { $_->{t} } grep { $_->{path} eq '/ok' } received($log);
my $longest = $t[0] - $start;
for my $i (1 .. $#t)
{
	$longest = $t[$i] - $t[ $i - 1 ] if $t[$i] - $t[ $i - 1 ] > $longest;
}
cmp_ok($longest, '<', 1.0, sprintf('the webhook endpoint\'s deliveries never paused for 1 s (longest %.3f s)', $longest));

# The broker endpoints were tried, and failed as transport errors.
for my $ep (qw(b_nats b_kafka b_amqp b_bullmq b_redis))
{
	ok($node->poll_query_until('postgres', qq{SELECT count(*) > 0 FROM outbox.attempts WHERE endpoint = '$ep'}),
		"$ep was tried");
	is(sql(qq{SELECT count(*) FROM outbox.attempts WHERE endpoint = '$ep' AND (status IS NOT NULL OR error IS NULL)}),
		'0', "$ep: every attempt a transport error, none answered");
}
note(sql(q{SELECT endpoint, left(error, 150), count(*) FROM outbox.attempts WHERE endpoint LIKE 'b\_%' GROUP BY 1, 2 ORDER BY 1, 3 DESC}));

$node->stop;
close $silent;
$receiver->kill_kill;
done_testing();
