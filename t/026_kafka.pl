# The Kafka target against librdkafka's mock cluster (test/kafka_mock.c, 3
# brokers on 127.0.0.1), consumed with kcat: every committed event arrives
# once per subscribed endpoint, keys keep their order on an ordered
# endpoint, rolled-back events never arrive, injected broker errors give the
# right outcomes, and brokers down for a while lose nothing.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

# The mock cluster: built here, driven through its stdin.
my $dir = PostgreSQL::Test::Utils::tempdir;
my $mock_bin = "$dir/kafka_mock";
system('cc', '-o', $mock_bin, "$FindBin::Bin/../test/kafka_mock.c", '-lrdkafka') == 0
  or die 'could not build test/kafka_mock.c (librdkafka-dev: scripts/deps.sh)';
my ($mock_in, $mock_out, $mock_err) = ('', '', '');
my $mock = IPC::Run::start([$mock_bin, 3], '<', \$mock_in, '>', \$mock_out, '2>', \$mock_err,
	IPC::Run::timeout(600));
END
{
	local $?;    # the mock's exit status is not the test's
	$mock->kill_kill if $mock;
}
$mock->pump until $mock_out =~ /\n/;
my ($bootstrap) = $mock_out =~ /^(\S+)\n/;
like($bootstrap, qr/^127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}$/, 'mock cluster of 3 brokers serves on 127.0.0.1');
my $answers = 0;

# A command to the mock cluster; dies unless it answers ok.
sub mock
{
	my ($cmd) = @_;
	$mock_in .= "$cmd\n";
	$answers++;
	$mock->pump until (() = $mock_out =~ /^(?:ok|error.*)$/mg) >= $answers;
	my @all = $mock_out =~ /^(ok|error.*)$/mg;
	die "mock cluster: $cmd: $all[-1]" unless $all[-1] eq 'ok';
}

# Every message of a topic: [key, value, headers] in offset order per
# partition (so per key).
sub consume
{
	my ($topic) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(['kcat', '-C', '-b', $bootstrap, '-t', $topic, '-e', '-q', '-u',
			'-f', "%k\x1f%s\x1f%h\x1e"], '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "kcat failed: $err";
	return map { [ split /\x1f/, $_, 3 ] } grep { length } split /\x1e/, $out;
}

sub n_of { my ($v) = @_; return $v =~ /"n":\s*(\d+)/ ? $1 : -1 }

mock('topic orders 3');
mock('topic ev-order.created 2');
mock('topic ev-order.paid 2');

my $node = outbox_node('kafka', conf => "outbox.retry_schedule = '500ms'\n");

# URL checks at create_endpoint.
for my $bad ('kafka://', 'kafka:///orders', 'kafka://h:99999/t', 'kafka://h:9092/',
	'kafka://u:p@h:9092/t', 'kafka://h:9092/a b', 'kafka://h:9092/t?acks=0')
{
	my ($rc, $out, $err) = $node->psql('postgres',
		'SELECT outbox.create_endpoint(' . lit("bad") . ', ' . lit($bad) . ')');
	like($err, qr/invalid endpoint URL/, "refused: $bad");
}
is(sql(q{SELECT count(*) FROM outbox.endpoints}), '0', 'refused URLs wrote nothing');

sql("SELECT outbox.create_endpoint('k_orders', 'kafka://$bootstrap/orders', '{order.*}',
	ordered => true, timeout => '2 seconds')");
sql("SELECT outbox.create_endpoint('k_typed', 'KAFKA://$bootstrap/ev-{event_type}?linger_ms=1&compression=lz4',
	'{order.*}', timeout => '2 seconds')");
is(sql(q{SELECT url FROM outbox.endpoints WHERE name = 'k_typed'}),
	"kafka://$bootstrap/ev-{event_type}?linger_ms=1&compression=lz4", 'the scheme is kept in lower case');
wait_for_relay() or die 'relay did not start';

# 300 events in 30 transactions, 10 keys; one transaction rolled back.
emit_keyed_orders();

sub delivered
{
	my ($ep) = @_;
	return sql("SELECT count(DISTINCT event_id) FROM outbox.attempts WHERE endpoint = '$ep' AND status = 200");
}
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT (endpoint, event_id)) = 600 FROM outbox.attempts WHERE status = 200}),
	'the relay recorded 300 acknowledgements per endpoint');

my @orders = consume('orders');
my @typed = (consume('ev-order.created'), consume('ev-order.paid'));
is(scalar(@orders), 300, 'ordered endpoint: 300 messages in the topic');
is(scalar(@typed), 300, 'typed endpoint: 300 messages over its two topics');
my %seen;
$seen{ n_of($_->[1]) }++ for @orders;
is(scalar(grep { $seen{$_} == 1 } 0 .. 299), 300, 'each committed event arrived once');
ok(!exists $seen{9999}, 'the rolled-back event never arrived');
ok(!exists $seen{8888}, 'an event of an unsubscribed type was not sent');
is(scalar(grep { $_->[1] =~ /order\.created/ } consume('ev-order.created')), 200,
	'{event_type} chose the topic of each event');

# Per key, the partition holds the events in emit order.
my %by_key;
push @{ $by_key{ $_->[0] } }, n_of($_->[1]) for @orders;
my $in_order = grep {
	my @n = @{ $by_key{$_} };
	join(',', @n) eq join(',', sort { $a <=> $b } @n)
} keys %by_key;
is($in_order, 10, 'every key kept its order');

# Headers: webhook-id is the event id, type and timestamp are the event's.
my ($first) = grep { n_of($_->[1]) == 0 } @orders;
my ($id) = $first->[2] =~ /webhook-id=([0-9a-f-]{36})/;
ok(defined $id, 'the message carries webhook-id');
is(sql("SELECT count(*) FROM outbox.attempts WHERE event_id = '$id' AND endpoint = 'k_orders'"), '1',
	'webhook-id is the event id');
like($first->[2], qr/type=order\.paid/, 'the type header');
like($first->[2], qr/timestamp=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z/, 'the timestamp header, RFC 3339');
is($first->[0], 'key-0', 'the message key is the event key');
like($first->[2], qr{content-type=application/json}, 'the format\'s content-type header');

# Injected errors: not leader, request timed out: retried, delivered.
mock('error 0 6 3');
mock('error 0 7 2');
sql(q{SELECT outbox.emit('order.created', format('{"n": %s}', 1000 + i)::jsonb, 'key-' || i) FROM generate_series(0, 9) i});
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT event_id) = 310 FROM outbox.attempts WHERE status = 200 AND endpoint = 'k_orders'}),
	'after not leader and request timed out: delivered');
is(scalar(grep { n_of($_->[1]) >= 1000 && n_of($_->[1]) < 1010 } consume('orders')), 10,
	'each of those in the topic once');

# Message too large: a dead letter, with the broker's reason.
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT (endpoint, event_id)) = 620 FROM outbox.attempts WHERE status = 200}),
	'both endpoints drained');
mock('error 0 10 1');
my $big = sql(q{SELECT outbox.emit('order.created', '{"n": 2000}', 'key-big')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$big' AND last_error LIKE '%MSG_SIZE_TOO_LARGE%'"),
	'message too large: a dead letter with the broker\'s reason');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM (SELECT DISTINCT endpoint FROM outbox.attempts WHERE event_id = '$big') a"),
	'the other endpoint took it');

# Every broker down a while, then back: nothing lost.
mock('down -1');
my $down_ids = sql(q{SELECT string_agg(quote_literal(outbox.emit('order.created', format('{"n": %s}', 3000 + i)::jsonb,
	'key-' || (i % 10))::text), ',') FROM generate_series(0, 49) i});
my $offset = -s $node->logfile;
# (One of the two endpoints warned of the dead letter above, within the
# minute a warning stands for: the other warns now.)
ok(log_wait(qr/outbox deliveries to endpoint "k_\w+" are failing\n.*DETAIL:.*Message timed out/, $offset),
	'with the brokers down, the relay warns');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM outbox.attempts WHERE endpoint = 'k_orders' AND status IS NULL AND error LIKE '%timed out%'}),
	'the failures are in the attempt log');
mock('up -1');
ok($node->poll_query_until('postgres',
		"SELECT count(DISTINCT event_id) = 50 FROM outbox.attempts
		  WHERE endpoint = 'k_orders' AND status = 200 AND event_id IN ($down_ids)"),
	'after the brokers came back, every event was acknowledged');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id IN ($down_ids)"), '0', 'none was given up on');
my %after;
$after{ n_of($_->[1]) }++ for consume('orders');
is(scalar(grep { $after{$_} } 3000 .. 3049), 50, 'every event emitted while the brokers were down arrived');
my %by_key2;
push @{ $by_key2{ $_->[0] } }, n_of($_->[1]) for grep { n_of($_->[1]) >= 3000 } consume('orders');
my $first_seen_in_order = grep {
	my @n = @{ $by_key2{$_} };
	my %s; my @u = grep { !$s{$_}++ } @n;
	join(',', @u) eq join(',', sort { $a <=> $b } @u)
} keys %by_key2;
is($first_seen_in_order, 10, 'and each key kept its order (first copies)');

# CloudEvents binary mode: the attributes as ce_* headers (the Kafka
# binding of CloudEvents), the payload as the value.
mock('topic ce 1');
sql("SELECT outbox.create_endpoint('k_ce', 'kafka://$bootstrap/ce', '{audit.*}',
	format => 'cloudevents-binary', timeout => '2 seconds')");
my $ce_id = sql(q{SELECT outbox.emit('audit.logged', '{"who": "me"}', 'acct-1')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$ce_id' AND endpoint = 'k_ce' AND status = 200"),
	'cloudevents-binary endpoint: acknowledged');
my @ce = consume('ce');
is(scalar(@ce), 1, 'cloudevents-binary: one message');
is($ce[0][1], '{"who": "me"}', 'cloudevents-binary: the value is the payload');
like($ce[0][2], qr/(^|,)ce_specversion=1\.0(,|$)/, 'ce_specversion header');
like($ce[0][2], qr/(^|,)ce_id=\Q$ce_id\E(,|$)/, 'ce_id is the event id');
like($ce[0][2], qr/(^|,)ce_type=audit\.logged(,|$)/, 'ce_type is the event type');
like($ce[0][2], qr/(^|,)ce_subject=acct-1(,|$)/, 'ce_subject is the key');
like($ce[0][2], qr{(^|,)content-type=application/json(,|$)}, 'content-type of the payload');

# A topic the cluster does not know, with automatic creation off: a dead
# letter with the broker's reason.
mock('topicerror missing 3');
sql("SELECT outbox.create_endpoint('k_missing', 'kafka://$bootstrap/missing', '{gone.*}', timeout => '2 seconds')");
my $gone = sql(q{SELECT outbox.emit('gone.away', '{}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$gone' AND endpoint = 'k_missing'
		    AND last_error LIKE '%UNKNOWN_TOPIC%'"),
	'unknown topic: a dead letter with the broker\'s reason');

# SASL from the endpoint's auth.  librdkafka's mock cluster implements no
# SASL (no SaslHandshake nor SaslAuthenticate handler), so a broker that
# accepts credentials is not tested here: what is, is that the settings
# reach librdkafka (it starts a SASL handshake, which the mock refuses),
# that the failure is recorded with librdkafka's reason and tried again,
# and that the password is in no attempt and no log line.
my $t_sasl = time();
sql("SELECT outbox.create_endpoint('k_sasl', 'kafka://$bootstrap/orders', '{sasl.*}', timeout => '1 second',
	auth => '{\"sasl\": {\"mechanism\": \"SCRAM-SHA-256\", \"username\": \"outbox_pub\", \"password\": \"pw-Kaf3z\"}}')");
sql("SELECT outbox.create_endpoint('k_tls', 'kafkas://$bootstrap/orders', '{tls.*}', timeout => '1 second')");
my ($sasl, $tls) = split /\n/, sql(q{SELECT outbox.emit('sasl.test', '{"n": 4500}', 'key-0');
	SELECT outbox.emit('tls.test', '{"n": 4501}', 'key-0')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 1 FROM outbox.attempts WHERE event_id = '$sasl' AND endpoint = 'k_sasl'
		    AND status IS NULL
		    AND error LIKE 'authentication failed: Kafka: %SASL Handshake not supported by broker (required by mechanism SCRAM-SHA-256)%'"),
	'SASL against the mock cluster (which has none): librdkafka\'s reason in the attempt log');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id = '$sasl'"), '0', 'not a dead letter: tried again');
ok(!grep({ n_of($_->[1]) == 4500 } consume('orders')), 'nothing reached the topic');
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE error LIKE '%pw-Kaf3z%'}), '0', 'no attempt shows the password');
unlike(join("\n", grep { !/LOG:  statement: / && !/^\s/ } split /\n/, slurp_file($node->logfile)),
	qr/pw-Kaf3z/, 'the server log shows no password');
# kafkas:// (TLS, k_tls above): the mock cluster has no TLS listener
# either, so what is shown is that the producer speaks TLS to it (the
# handshake fails, and librdkafka's reason is recorded), not a TLS
# connection that works.
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 1 FROM outbox.attempts WHERE event_id = '$tls' AND endpoint = 'k_tls'
		    AND status IS NULL AND error LIKE '%ssl://%SSL%'"),
	'kafkas:// against the mock cluster (which has no TLS): the failed handshake in the attempt log');
sql(q{SELECT outbox.drop_endpoint('k_sasl'); SELECT outbox.drop_endpoint('k_tls')});
diag(sprintf('kafka sasl and tls: %d s', time() - $t_sasl));

# The address policy holds for brokers: with 127.0.0.1 no longer allowed,
# the producer made after the reload connects to none of them.
ok(reload_with('outbox.allowed_networks' => '10.1.2.0/24'), 'the relay reloaded allowed_networks');
my $refused = sql(q{SELECT outbox.emit('order.created', '{"n": 4000}', 'key-0')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox.attempts WHERE event_id = '$refused' AND endpoint = 'k_orders'
		    AND error LIKE '%refused to connect to broker%a loopback address%'"),
	'a broker address outside outbox.allowed_networks is refused, and the attempt log says why');
ok(!grep({ n_of($_->[1]) == 4000 } consume('orders')), 'and nothing reached the topic');

done_testing();
