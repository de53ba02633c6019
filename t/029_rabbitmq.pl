# The RabbitMQ target against a real broker (rabbitmq-server, started here
# on 127.0.0.1 with free ports and its files in a temporary directory),
# consumed with the npm amqplib client (t/node/amqp_client.js): every
# committed event arrives, keys keep their order on an ordered endpoint,
# rolled-back events never arrive, the message carries the event's id,
# type and key (and CloudEvents attributes in binary mode); an unroutable message, and one for a missing exchange, is
# a dead letter with the broker's reason; a login that hangs holds up only
# its own endpoint; the broker stopped and started while events flow loses nothing;
# crash rounds (relay killed, server stopped -m immediate) lose nothing
# and duplicate only in the crash window; the address policy holds.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $server = '/usr/lib/rabbitmq/bin/rabbitmq-server';
plan skip_all => 'rabbitmq-server is not installed (scripts/deps.sh)' unless -x $server;
my $client = "$FindBin::Bin/node/amqp_client.js";
-d "$FindBin::Bin/node/node_modules/amqplib"
  or die 'npm package amqplib missing in t/node (scripts/deps.sh)';

# The broker: its own node name, ports, epmd and files, so that nothing of
# another broker on this machine is used or disturbed.
my $base = PostgreSQL::Test::Utils::tempdir;
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $dist_port = PostgreSQL::Test::Cluster::get_free_port();
my $epmd_port = PostgreSQL::Test::Cluster::get_free_port();
my %broker_env = (
	HOME => $base,
	RABBITMQ_NODENAME => "outbox$port\@localhost",
	RABBITMQ_NODE_IP_ADDRESS => '127.0.0.1',
	RABBITMQ_NODE_PORT => $port,
	RABBITMQ_DIST_PORT => $dist_port,
	ERL_EPMD_PORT => $epmd_port,
	ERL_EPMD_ADDRESS => '127.0.0.1',
	RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS => '-kernel inet_dist_use_interface {127,0,0,1}',
	RABBITMQ_BASE => $base,
	RABBITMQ_MNESIA_BASE => "$base/mnesia",
	RABBITMQ_LOG_BASE => "$base/log",
	RABBITMQ_CONFIG_FILE => "$base/rabbitmq",
	RABBITMQ_ADVANCED_CONFIG_FILE => "$base/advanced.config",
	RABBITMQ_CONF_ENV_FILE => "$base/rabbitmq-env.conf",
	RABBITMQ_ENABLED_PLUGINS_FILE => "$base/enabled_plugins",
	RABBITMQ_PID_FILE => "$base/rabbitmq.pid",
);
PostgreSQL::Test::Utils::append_to_file("$base/enabled_plugins", "[].\n");

# AMQP over TLS: a listener of its own, with certificates made here (a CA,
# the broker's for 127.0.0.1, a client's); the broker asks for a client
# certificate and refuses a connection without one.
my $tls = PostgreSQL::Test::Utils::tempdir;
my $tls_port = PostgreSQL::Test::Cluster::get_free_port();
my $t_certs = time();
make_certificates($tls, [ 'server', "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth" ],
	[ 'client', 'extendedKeyUsage = clientAuth' ]);
PostgreSQL::Test::Utils::append_to_file("$base/rabbitmq.conf", qq{listeners.ssl.1 = 127.0.0.1:$tls_port
ssl_options.cacertfile = $tls/ca.crt
ssl_options.certfile = $tls/server.crt
ssl_options.keyfile = $tls/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
});
my $certs_s = time() - $t_certs;
my $broker;
my $broker_out = '';

sub broker_up
{
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 1);
	return defined $sock;
}

sub start_broker
{
	local %ENV = (%ENV, %broker_env);
	$broker = IPC::Run::start([$server], '<', \undef, '>&', \$broker_out);
	my $deadline = time() + 90;
	until (broker_up())
	{
		die "the broker did not start:\n$broker_out" if time() > $deadline || !$broker->pumpable;
		usleep(200_000);
	}
}

sub stop_broker
{
	return unless $broker;
	$broker->signal('TERM');
	$broker->finish;    # waits until it has stopped
	undef $broker;
}

END
{
	local $?;
	if ($broker)
	{
		$broker->signal('KILL');
		$broker->finish;
	}
	system('epmd', '-port', $epmd_port, '-kill') if $epmd_port;
}

my $amqp = "amqp://guest:guest\@127.0.0.1:$port/%2F";

sub client
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(['node', $client, $amqp, @args], '>', \$out, '2>', \$err, IPC::Run::timeout(60))
	  or die "amqp_client @args: $err";
	return $out;
}

# Every message of a queue, taken off it: hashes in queue order.
sub drain
{
	my ($queue) = @_;
	return map { decode_json($_) } grep { length } split /\n/, client('drain', $queue);
}

sub n_of { my ($v) = @_; return $v =~ /"n":\s*(\d+)/ ? $1 : -1 }

start_broker();
ok(broker_up(), "a broker listens on 127.0.0.1:$port");
client('setup', 'orders:topic', 'events:direct',
	'q_orders=orders:#', 'q_created=events:ev.order.created', 'q_paid=events:ev.order.paid',
	'q_ce_bin=events:ce.bin', 'q_ce_struct=events:ce.struct');

my $node = outbox_node('rabbitmq', conf => qq{
outbox.retry_schedule = '500ms'
restart_after_crash = on
outbox.ca_file = '$tls/ca.crt'
});

# URL checks at create_endpoint (sql/03_endpoints.sql has the full list).
for my $bad ("amqp://127.0.0.1:$port/", "amqp://guest:guest\@127.0.0.1:$port/?exchange=orders",
	"amqp://127.0.0.1:$port/?exchange=or%20ders",
	"amqp://127.0.0.1:$port/?exchange=orders&mandatory=0")
{
	my ($rc, $out, $err) = $node->psql('postgres',
		'SELECT outbox.create_endpoint(' . lit("bad") . ', ' . lit($bad) . ')');
	like($err, qr/invalid endpoint URL/, "refused: $bad");
}
is(sql(q{SELECT count(*) FROM outbox.endpoints}), '0', 'refused URLs wrote nothing');

sql("SELECT outbox.create_endpoint('r_orders', 'amqp://127.0.0.1:$port/?exchange=orders&routing_key=o.{event_type}',
	'{order.*}', ordered => true, timeout => '3 seconds')");
sql("SELECT outbox.create_endpoint('r_typed', 'AMQP://127.0.0.1:$port/%2F?exchange=events&routing_key=ev.{event_type}',
	'{order.*}', timeout => '3 seconds')");
is(sql(q{SELECT url FROM outbox.endpoints WHERE name = 'r_typed'}),
	"amqp://127.0.0.1:$port/%2F?exchange=events&routing_key=ev.{event_type}", 'the scheme is kept in lower case');
wait_for_relay() or die 'relay did not start';

# 300 events in 30 transactions, 10 keys; one transaction rolled back.
emit_keyed_orders();
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT (endpoint, event_id)) = 600 FROM outbox.attempts WHERE status = 200}),
	'the relay recorded 300 publisher confirms per endpoint');

my @orders = drain('q_orders');
is(scalar(@orders), 300, 'ordered endpoint: 300 messages in its queue');
my %seen;
$seen{ n_of($_->{body}) }++ for @orders;
is(scalar(grep { ($seen{$_} // 0) == 1 } 0 .. 299), 300, 'each committed event arrived once');
ok(!exists $seen{9999}, 'the rolled-back event never arrived');
ok(!exists $seen{8888}, 'an event of an unsubscribed type was not sent');
my %by_key;
push @{ $by_key{ $_->{headers}{key} } }, n_of($_->{body}) for @orders;
is(scalar(grep {
	my @n = @{ $by_key{$_} };
	join(',', @n) eq join(',', sort { $a <=> $b } @n)
} keys %by_key), 10, 'every key kept its order');
my @created = drain('q_created');
my @paid = drain('q_paid');
is(scalar(@created), 200, '{event_type} in the routing key: 200 created');
is(scalar(@paid), 100, 'and 100 paid');
is(scalar(grep { $_->{routing_key} eq 'ev.order.paid' && $_->{type} eq 'order.paid' } @paid), 100,
	'each with its routing key and type');

my ($first) = grep { n_of($_->{body}) == 0 } @orders;
is(sql("SELECT count(*) FROM outbox.attempts WHERE event_id = '$first->{message_id}' AND endpoint = 'r_orders'"), '1',
	'message_id is the event id');
is($first->{delivery_mode}, 2, 'persistent (delivery_mode 2)');
is($first->{content_type}, 'application/json', 'the content type of the body');
is($first->{headers}{key}, 'key-0', 'the key header');
is($first->{headers}{type}, 'order.paid', 'the type header');
like($first->{headers}{timestamp}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'the timestamp header, RFC 3339');
is($first->{routing_key}, 'o.order.paid', 'the routing key template');
like(sql(q{SELECT response FROM outbox.attempts WHERE endpoint = 'r_orders' AND status = 200 LIMIT 1}),
	qr/^confirmed, delivery tag \d+$/, 'the attempt log shows the confirm');

# CloudEvents binary mode: the attributes as cloudEvents_* headers (the
# CloudEvents AMQP binding's names), the data alone as the body; the
# structured mode's content type.
sql("SELECT outbox.create_endpoint('r_ce', 'amqp://127.0.0.1:$port/?exchange=events&routing_key=ce.bin',
	'{ce.test}', format => 'cloudevents-binary');
     SELECT outbox.create_endpoint('r_ces', 'amqp://127.0.0.1:$port/?exchange=events&routing_key=ce.struct',
	'{ce.test}', format => 'cloudevents')");
my $ce = sql(q{SELECT outbox.emit('ce.test', '{"n": 5500}', 'key-ce')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox.attempts WHERE event_id = '$ce' AND status = 200"),
	'CloudEvents endpoints: confirmed');
my ($bin) = drain('q_ce_bin');
my ($struct) = drain('q_ce_struct');
is_deeply([ @{ $bin->{headers} }{qw(cloudEvents_specversion cloudEvents_id cloudEvents_type cloudEvents_subject)} ],
	[ '1.0', $ce, 'ce.test', 'key-ce' ], 'binary mode: the attributes as cloudEvents_* headers');
like($bin->{body}, qr/^\{"n": ?5500\}$/, 'binary mode: the data alone as the body');
is($bin->{content_type}, 'application/json', 'binary mode: the data\'s content type');
is($struct->{content_type}, 'application/cloudevents+json', 'structured mode: its content type');
like($struct->{body}, qr/"specversion": ?"1\.0"/, 'structured mode: the event as the body');
sql(q{SELECT outbox.drop_endpoint('r_ce'); SELECT outbox.drop_endpoint('r_ces')});

# Unroutable: no queue is bound for ev.order.refunded.
my $lost_one = sql(q{SELECT outbox.emit('order.refunded', '{"n": 5000}', 'key-1')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$lost_one' AND endpoint = 'r_typed'
		    AND last_error LIKE '%unroutable: 312 NO_ROUTE%'"),
	'an unroutable message is a dead letter with the broker\'s reason');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$lost_one' AND endpoint = 'r_orders' AND status = 200"),
	'the other endpoint routed it');
is(scalar(grep { n_of($_->{body}) == 5000 } drain('q_orders')), 1, 'and its queue has it');

# No such exchange: the broker closes the channel (404), a dead letter
# with its reason; the endpoint's next message gets a new connection.
sql("SELECT outbox.create_endpoint('r_nowhere', 'amqp://127.0.0.1:$port/?exchange=nowhere', '{lost.test}')");
my $no_exchange = sql(q{SELECT outbox.emit('lost.test', '{"n": 6000}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$no_exchange' AND endpoint = 'r_nowhere'
		    AND last_error LIKE '%404 NOT_FOUND%nowhere%'"),
	'a missing exchange is a dead letter with the broker\'s reason');
my $no_exchange2 = sql(q{SELECT outbox.emit('lost.test', '{"n": 6001}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$no_exchange2' AND endpoint = 'r_nowhere'
		    AND last_error LIKE '%404 NOT_FOUND%'"),
	'and so is the next one, over a new connection');
sql(q{SELECT outbox.drop_endpoint('r_nowhere')});

# Credentials from the endpoint's auth: a user the test makes, with a
# password; the right one delivers, a wrong one is a failed login in the
# attempt log, tried again (no dead letter), until alter_endpoint gives the
# right one.  The password is in no attempt and not in the server's log.
my $t_creds = time();
{
	local %ENV = (%ENV, %broker_env);
	my $ctl = '/usr/lib/rabbitmq/bin/rabbitmqctl';
	for my $cmd ([ 'add_user', 'outbox_pub', 'pw-Rab7q' ], [ 'set_permissions', '-p', '/', 'outbox_pub', '.*', '.*', '.*' ])
	{
		my ($o, $e) = ('', '');
		IPC::Run::run([ $ctl, @$cmd ], '>', \$o, '2>', \$e, IPC::Run::timeout(60))
		  or die "rabbitmqctl $cmd->[0]: $o $e";
	}
}
sql("SELECT outbox.create_endpoint('r_user', 'amqp://127.0.0.1:$port/?exchange=orders&routing_key=o.{event_type}',
	'{cred.ok}', auth => '{\"username\": \"outbox_pub\", \"password\": \"pw-Rab7q\"}');
     SELECT outbox.create_endpoint('r_wrong', 'amqp://127.0.0.1:$port/?exchange=orders&routing_key=o.{event_type}',
	'{cred.wrong}', auth => '{\"username\": \"outbox_pub\", \"password\": \"pw-Wr0ng\"}')");
my $cred_ok = sql(q{SELECT outbox.emit('cred.ok', '{"n": 6100}')});
my $cred_wrong = sql(q{SELECT outbox.emit('cred.wrong', '{"n": 6101}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$cred_ok' AND endpoint = 'r_user' AND status = 200"),
	'a user and password from auth: confirmed');
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 2 FROM outbox.attempts WHERE event_id = '$cred_wrong' AND endpoint = 'r_wrong'
		    AND status IS NULL
		    AND error LIKE 'authentication failed: RabbitMQ: logging in as the endpoint''s user%403 ACCESS_REFUSED%'"),
	'a wrong password: an authentication failure in the attempt log, and tried again');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id = '$cred_wrong'"), '0',
	'a wrong password is not a dead letter');
sql(q{SELECT outbox.alter_endpoint('r_wrong', auth => '{"username": "outbox_pub", "password": "pw-Rab7q"}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$cred_wrong' AND status = 200"),
	'the password corrected by alter_endpoint: the next attempt logs in');
is(scalar(grep { n_of($_->{body}) >= 6100 && n_of($_->{body}) <= 6101 } drain('q_orders')), 2,
	'both messages are in the queue');
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE error LIKE '%pw-%' OR response LIKE '%pw-%'}), '0',
	'no attempt shows a password');
# (the test's own statements, logged by log_statement, aside)
unlike(join("\n", grep { !/LOG:  statement: / && !/^\s/ } split /\n/, slurp_file($node->logfile)),
	qr/pw-(Rab7q|Wr0ng)/, 'the server log shows no password');
sql(q{SELECT outbox.drop_endpoint('r_user'); SELECT outbox.drop_endpoint('r_wrong')});
diag(sprintf('rabbitmq credentials: %d s', time() - $t_creds));

# amqps://: the broker verified against outbox.ca_file and the URL's
# host, a client certificate from auth presented; without one the broker
# refuses, and under a name its certificate does not have the relay
# refuses: each a failure in the attempt log, tried again.
$t_creds = time();
my $tls_auth = qq{"username": "outbox_pub", "password": "pw-Rab7q"};
sql("SELECT outbox.create_endpoint('r_tls', 'amqps://127.0.0.1:$tls_port/?exchange=orders&routing_key=o.{event_type}',
	'{tls.ok}', auth => '{$tls_auth, \"client_cert\": \"$tls/client.crt\", \"client_key\": \"$tls/client.key\"}');
     SELECT outbox.create_endpoint('r_tls_nocert', 'amqps://127.0.0.1:$tls_port/?exchange=orders',
	'{tls.nocert}', auth => '{$tls_auth}');
     SELECT outbox.create_endpoint('r_tls_name', 'amqps://localhost:$tls_port/?exchange=orders',
	'{tls.name}', auth => '{$tls_auth, \"client_cert\": \"$tls/client.crt\", \"client_key\": \"$tls/client.key\"}')");
my ($tls_ok, $tls_nocert, $tls_name) = split /\n/, sql(q{SELECT outbox.emit('tls.ok', '{"n": 6200}');
	SELECT outbox.emit('tls.nocert', '{"n": 6201}'); SELECT outbox.emit('tls.name', '{"n": 6202}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$tls_ok' AND status = 200"),
	'amqps with a client certificate: confirmed');
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 2 FROM outbox.attempts WHERE event_id = '$tls_nocert' AND status IS NULL
		    AND error LIKE '%SSL error%'"),
	'amqps without the client certificate the broker asks for: failed, tried again');
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 2 FROM outbox.attempts WHERE event_id = '$tls_name' AND status IS NULL
		    AND error LIKE '%over TLS: SSL peer cert verification failed%'"),
	'amqps under a name the broker\'s certificate does not have: refused, tried again');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id IN ('$tls_nocert', '$tls_name')"), '0',
	'neither is a dead letter');
is(scalar(grep { n_of($_->{body}) == 6200 } drain('q_orders')), 1, 'the message over TLS is in the queue');
sql(q{SELECT outbox.drop_endpoint('r_tls'); SELECT outbox.drop_endpoint('r_tls_nocert');
      SELECT outbox.drop_endpoint('r_tls_name')});
diag(sprintf('rabbitmq tls: %d s, and %d s for the certificates', time() - $t_creds, $certs_s));

# A server that accepts the connection and never speaks: the login waits
# out the endpoint's timeout in the publisher's thread, and meanwhile the
# relay goes on delivering to the other endpoints (the silent one's part of
# the stream's page is left behind as a laggard).
my $silent = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => PostgreSQL::Test::Cluster::get_free_port(),
	Listen => 5, ReuseAddr => 1)
  or die "cannot listen: $!";
my $silent_port = $silent->sockport;
sql("SELECT outbox.create_endpoint('r_silent', 'amqp://127.0.0.1:$silent_port/?exchange=orders', '{silent.test}',
	timeout => '8 seconds')");
my ($mute, $meanwhile) = split /\n/, sql(q{BEGIN;
SELECT outbox.emit('silent.test', '{"n": 7000}');
SELECT outbox.emit('order.created', '{"n": 7001}', 'key-2');
COMMIT;});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox.attempts WHERE event_id = '$meanwhile' AND status = 200"),
	'while a login hangs, the relay delivers to the other endpoints');
is(sql("SELECT count(*) FROM outbox.attempts WHERE event_id = '$mute'"), '0',
	'before the hanging login gave up');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$mute' AND endpoint = 'r_silent'
		    AND status IS NULL AND error LIKE '%logging in%' AND duration_ms BETWEEN 7000 AND 20000"),
	'then the login timed out after the endpoint\'s timeout, and the attempt log says so');
sql(q{SELECT outbox.drop_endpoint('r_silent')});
close $silent;
drain($_) for qw(q_orders q_created);

# The broker stopped and started while events flow: nothing lost.
my $flow = IPC::Run::start(['psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c', q{
DO $$ BEGIN
  FOR i IN 0..59 LOOP
    PERFORM outbox.emit('order.created', format('{"n": %s}', 3000 + i)::jsonb, 'key-' || (i % 10));
    COMMIT;
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$}], '>', \my $flow_out, '2>', \my $flow_err);
$node->poll_query_until('postgres', q{SELECT count(*) >= 10 FROM outbox.events WHERE (payload->>'n')::int >= 3000})
  or die 'events do not flow';
stop_broker();
ok(!broker_up(), 'the broker stopped');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM outbox.attempts WHERE endpoint = 'r_orders' AND status IS NULL}),
	'with the broker down, attempts fail and are logged');
start_broker();
$flow->finish;
ok($node->poll_query_until('postgres', q{
SELECT count(*) = 60 FROM outbox.events e
 WHERE (payload->>'n')::int BETWEEN 3000 AND 3059
   AND EXISTS (SELECT 1 FROM outbox.attempts a WHERE a.event_id = e.event_id AND a.endpoint = 'r_orders' AND a.status = 200)}),
	'after the broker came back, every event was confirmed');
is(sql(q{SELECT count(*) FROM outbox.dead_letters d JOIN outbox.events e USING (event_id)
         WHERE (e.payload->>'n')::int BETWEEN 3000 AND 3059}), '0', 'none was given up on');
my %after;
$after{ n_of($_->{body}) }++ for drain('q_orders');
is(scalar(grep { $after{$_} } 3000 .. 3059), 60, 'every event emitted around the restart is in the queue');
drain($_) for qw(q_created q_paid);

# Crash rounds: the relay killed, the server stopped -m immediate.
my $tmp = PostgreSQL::Test::Utils::tempdir;
my %seen_ids;
for my $kind (qw(relay immediate))
{
	my $old_relay = relay_pid();
	my @h;
	for my $c (0 .. 1)
	{
		my $file = "$tmp/client_${kind}_$c.sql";
		open(my $fh, '>', $file) or die "cannot write $file: $!";
		print $fh "\\o /dev/null\n";
		for my $t (0 .. 99)
		{
			print $fh "BEGIN;\n";
			for my $i (0 .. int(rand(3)))
			{
				my $key = "c$c-k" . int(rand(10));
				print $fh "SELECT outbox.emit('order.created', '{\"r\": \"$kind\", \"c\": $c, \"t\": $t, \"i\": $i}', '$key');\n";
			}
			print $fh rand() < 0.1 ? "ROLLBACK;\n" : "COMMIT;\n";
		}
		close $fh;
		push @h, IPC::Run::start(['psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', $file],
			'>', \my $out, '2>', \my $err);
	}
	my $trigger = 20 + int(rand(100));
	$node->poll_query_until('postgres', qq{
SELECT count(*) >= $trigger FROM outbox.attempts a JOIN outbox.events e USING (event_id)
 WHERE a.status = 200 AND a.endpoint = 'r_orders' AND e.payload->>'r' = '$kind'})
	  or die "$kind: $trigger confirms did not come";
	if ($kind eq 'relay')
	{
		kill 'KILL', $old_relay;
	}
	else
	{
		$node->stop('immediate');
		$node->start;
	}
	$_->finish for @h;
	relay_restarted($node, $old_relay)
	  or die "$kind: relay not running after the crash";
	ok($node->poll_query_until('postgres', q{
SELECT b.deliveries_waiting = 0 AND NOT EXISTS (SELECT 1 FROM outbox.retries) FROM outbox.backlog b}),
		"$kind: nothing owed after the restart");

	my %committed = map { my ($id, $key, $n) = split /\|/; ($id => [ $key, $n ]) }
	  split /\n/, sql(qq{SELECT event_id || '|' || key || '|' || id FROM outbox.events
	                     WHERE payload->>'r' = '$kind'});
	my (%copies, %first_order);
	for my $m (drain('q_orders'))
	{
		my $id = $m->{message_id};
		next if $seen_ids{$id};
		push @{ $first_order{ $m->{headers}{key} } }, $id unless $copies{$id}++;
	}
	my ($lost, $phantom, $dup, $out_of_order) = tally_copies(\%committed, \%copies, \%first_order);
	is($lost, 0, "$kind: no committed event lost");
	is($phantom, 0, "$kind: no phantom");
	is($out_of_order, 0, "$kind: per key, first copies in emit order");
	diag(sprintf('rabbitmq crash round (%s): %d events, lost %d, phantom %d, duplicates %d',
			$kind, scalar(keys %committed), $lost, $phantom, $dup));
	$seen_ids{$_} = 1 for keys %copies;
}

# The address policy holds for brokers: with 127.0.0.1 no longer allowed,
# the publisher made after the reload connects nowhere.
ok(reload_with('outbox.allowed_networks' => '10.1.2.0/24'), 'the relay reloaded allowed_networks');
my $refused = sql(q{SELECT outbox.emit('order.created', '{"n": 4000}', 'key-0')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox.attempts WHERE event_id = '$refused' AND endpoint = 'r_orders'
		    AND error LIKE '%refused to connect to RabbitMQ at 127.0.0.1%loopback%'"),
	'a broker address outside outbox.allowed_networks is refused, and the attempt log says why');
ok(!grep({ n_of($_->{body}) == 4000 } drain('q_orders')), 'and nothing reached the queue');

stop_broker();
done_testing();
