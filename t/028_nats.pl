# The NATS JetStream target against real servers: a cluster of three
# nats-server on 127.0.0.1 (random free ports, started and stopped here),
# streams made and read with the official client (t/node/nats_stream.js).
# Every committed event arrives once, keys keep their order on an ordered
# endpoint, rolled-back events never arrive; a missing stream and a full
# stream are retried with the server's reason and delivered once fixed;
# the format's headers (cloudevents-binary's ce-*) are sent; a
# message too large for the stream is a dead letter; allowed_networks
# refuses a server, and a reload that changes it applies to the
# connections at once; a node of the cluster killed while events flow loses
# nothing from a replicated (R3) stream; and crash rounds of the relay
# leave the stream holding every event exactly once (the duplicate window
# at work: Nats-Msg-Id is the event id); every server down, then back:
# the events wait, then each is published once.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $tool = "$FindBin::Bin/node/nats_stream.js";
die 't/node/node_modules is missing: run scripts/deps.sh (npm ci in t/node)'
  unless -d "$FindBin::Bin/node/node_modules/nats";

# The cluster: three servers with JetStream, routes between them.
my $dir = PostgreSQL::Test::Utils::tempdir;
my @port = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 3;
my @route = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 3;
my $routes = join(', ', map { "\"nats-route://127.0.0.1:$_\"" } @route);
my @server;
END
{
	local $?;    # the servers' exit status is not the test's
	$_->kill_kill for grep { defined } @server;
}

sub start_server
{
	my ($i) = @_;
	my $conf = "$dir/n$i.conf";
	open(my $fh, '>', $conf) or die "cannot write $conf: $!";
	print $fh qq{server_name: "n$i"
listen: "127.0.0.1:$port[$i]"
jetstream { store_dir: "$dir/n$i" }
cluster { name: "outbox", listen: "127.0.0.1:$route[$i]", routes: [$routes] }
};
	close $fh;
	$server[$i] = IPC::Run::start([ 'nats-server', '-c', $conf ],
		'>', "$dir/n$i.out", '2>', "$dir/n$i.log");
}
start_server($_) for 0 .. 2;
my $servers = join(',', map { "127.0.0.1:$_" } @port);

# The client tool; dies on failure unless asked to try.
sub tool
{
	my ($try, @args) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'node', $tool, $servers, @args ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	die "nats_stream.js @args: $err" unless $ok || $try;
	return $ok ? $out : undef;
}

sub add_stream
{
	my (%cfg) = @_;
	my $json = encode_json({ storage => 'file', num_replicas => 3, %cfg });
	# (the first one waits for the cluster to elect its meta leader)
	for (my $i = 0; $i < 60; $i++)
	{
		return if defined tool(1, 'add', $json);
		sleep 1;
	}
	die "stream $cfg{name} could not be made";
}

# Every message of a stream: hashes of seq, subject, headers, data.
# (Tried again for a while: after servers restart, a stream answers only
# once it has a leader.)
sub read_stream
{
	my ($name) = @_;
	my $out;
	for (my $i = 0; $i < 10 && !defined($out = tool(1, 'read', $name)); $i++)
	{
		sleep 1;
	}
	$out //= tool(0, 'read', $name);
	return map { decode_json($_) } grep { length } split /\n/, $out;
}

sub n_of { my ($v) = @_; return $v =~ /"n":\s*(\d+)/ ? $1 : -1 }

add_stream(name => 'ORDERS', subjects => ['orders.>']);
add_stream(name => 'TYPED', subjects => ['typed.>']);
add_stream(name => 'SMALL', subjects => ['small.>'], max_msg_size => 400);
add_stream(name => 'FULL', subjects => ['full.>'], max_msgs => 2, discard => 'new', num_replicas => 1);
pass('a JetStream cluster of three servers on 127.0.0.1, streams made');

my $node = outbox_node('nats', conf => "outbox.retry_schedule = '500ms'\nrestart_after_crash = on\n");

sql("SELECT outbox.create_endpoint('n_ordered', 'nats://$servers/orders.ordered', '{order.*}',
	ordered => true, timeout => '3 seconds')");
sql("SELECT outbox.create_endpoint('n_typed', 'NATS://$servers/typed.{event_type}', '{order.*}',
	timeout => '3 seconds')");
is(sql(q{SELECT url FROM outbox.endpoints WHERE name = 'n_typed'}),
	"nats://$servers/typed.{event_type}", 'the scheme is kept in lower case');
wait_for_relay() or die 'relay did not start';

# 300 events in 30 transactions, 10 keys; one transaction rolled back.
emit_keyed_orders();
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT (endpoint, event_id)) = 600 FROM outbox.attempts WHERE status = 200}),
	'the relay recorded 300 acknowledgements per endpoint');

my @ordered = grep { $_->{subject} eq 'orders.ordered' } read_stream('ORDERS');
my @typed = read_stream('TYPED');
is(scalar(@ordered), 300, 'ordered endpoint: 300 messages in the stream');
is(scalar(@typed), 300, 'typed endpoint: 300 messages');
my %seen;
$seen{ n_of($_->{data}) }++ for @ordered;
is(scalar(grep { ($seen{$_} // 0) == 1 } 0 .. 299), 300, 'each committed event arrived once');
ok(!exists $seen{9999}, 'the rolled-back event never arrived');
ok(!exists $seen{8888}, 'an event of an unsubscribed type was not sent');
is(scalar(grep { $_->{subject} eq 'typed.order.created' && $_->{data} =~ /order\.created/ } @typed),
	200, '{event_type} chose the subject of each event');

# Per key, the stream holds the events in emit order.
my %by_key;
push @{ $by_key{ $_->{headers}{key} } }, n_of($_->{data}) for @ordered;
is(scalar(keys %by_key), 10, 'the key header carries the event key');
my $in_order = grep {
	my @n = @{ $by_key{$_} };
	join(',', @n) eq join(',', sort { $a <=> $b } @n)
} keys %by_key;
is($in_order, 10, 'every key kept its order');

# Headers: Nats-Msg-Id and webhook-id are the event id; type, timestamp.
my ($first) = grep { n_of($_->{data}) == 0 } @ordered;
my $id = $first->{headers}{'Nats-Msg-Id'} // '';
like($id, qr/^[0-9a-f-]{36}$/, 'the message carries Nats-Msg-Id');
is($first->{headers}{'webhook-id'}, $id, 'webhook-id is the same');
is(sql("SELECT count(*) FROM outbox.attempts WHERE event_id = '$id' AND endpoint = 'n_ordered'"), '1',
	'Nats-Msg-Id is the event id');
is($first->{headers}{type}, 'order.paid', 'the type header');
like($first->{headers}{timestamp} // '', qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/,
	'the timestamp header, RFC 3339');
is($first->{headers}{timestamp},
	sql(qq{SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
	         FROM outbox.events WHERE event_id = '$id'}),
	"the timestamp header is the event's emit time, in UTC");
like(sql(qq{SELECT response FROM outbox.attempts WHERE event_id = '$id' AND endpoint = 'n_ordered'}),
	qr/^stream ORDERS seq \d+$/, 'the attempt log keeps the stream and sequence');

is($first->{headers}{'Content-Type'}, 'application/json', "the format's Content-Type");

# CloudEvents binary mode: the attributes as ce-* headers, the data alone.
add_stream(name => 'CE', subjects => ['ce.>'], num_replicas => 1);
sql("SELECT outbox.create_endpoint('n_ce', 'nats://$servers/ce.events', '{ce.*}',
	format => 'cloudevents-binary', timeout => '3 seconds')");
sql(q{SELECT outbox.emit('ce.made', '{"who": "me"}', 'k 1', headers => '{"ce-type": "forged", "X-Other": "o"}')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'n_ce' AND status = 200}),
	'cloudevents-binary endpoint: acknowledged');
my ($ce) = read_stream('CE');
is($ce->{data}, '{"who": "me"}', 'cloudevents-binary: the data is the payload');
is($ce->{headers}{'ce-id'}, $ce->{headers}{'Nats-Msg-Id'}, 'ce-id is the event id');
is($ce->{headers}{'ce-type'}, 'ce.made', 'ce-type is the event type, not the event header');
is($ce->{headers}{'ce-specversion'}, '1.0', 'ce-specversion');
is($ce->{headers}{'ce-subject'}, 'k%201', 'ce-subject is the key, percent-encoded');
is($ce->{headers}{'X-Other'}, 'o', "the event's other header");

# An event's own Nats-* headers are not sent: only the relay sets those.
sql(q{SELECT outbox.emit('order.created', '{"n": 7777}', 'key-h',
	headers => '{"X-Trace": "t1", "Nats-Msg-Id": "forged", "Nats-Rollup": "all"}')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM outbox.attempts a JOIN outbox.events e USING (event_id)
		   WHERE e.payload->>'n' = '7777' AND a.status = 200 AND endpoint = 'n_ordered'}),
	'an event with headers delivered');
my ($h) = grep { n_of($_->{data}) == 7777 && $_->{subject} eq 'orders.ordered' } read_stream('ORDERS');
is($h->{headers}{'X-Trace'}, 't1', "the event's own header is sent");
isnt($h->{headers}{'Nats-Msg-Id'}, 'forged', 'an event cannot set Nats-Msg-Id');
ok(!exists $h->{headers}{'Nats-Rollup'}, 'nor any other Nats-* header');

# A reload that takes 127.0.0.1 out of outbox.allowed_networks: the
# connections are made again under it, refused, and the event waits; put
# back, it is delivered.
reload_with('outbox.allowed_networks' => '10.0.0.0/8') or die 'no reload';
sql(q{SELECT outbox.emit('order.created', '{"n": 6666}', 'key-r')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 1 FROM outbox.attempts a JOIN outbox.events e USING (event_id)
		   WHERE a.endpoint = 'n_ordered' AND e.payload->>'n' = '6666'
		     AND a.error LIKE '%refused to connect to server 127.0.0.1 (127.0.0.1)%'}),
	'after a reload, the servers are refused under the new allowed_networks');
reload_with('outbox.allowed_networks' => undef) or die 'no reload';
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM outbox.attempts a JOIN outbox.events e USING (event_id)
		   WHERE a.endpoint = 'n_ordered' AND e.payload->>'n' = '6666' AND a.status = 200}),
	'and delivered once they are allowed again');

# No stream for the subject: retried with the reason, delivered once one is made.
sql("SELECT outbox.create_endpoint('n_nostream', 'nats://$servers/later.x', timeout => '3 seconds')");
sql(q{SELECT outbox.emit('later.x', '{"n": 1}')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 2 FROM outbox.attempts WHERE endpoint = 'n_nostream'
		   AND error LIKE '%no stream answered on subject "later.x" (no responders%'}),
	'no stream for the subject: an error that says so, tried again');
is(sql(q{SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 'n_nostream'}), '0', 'not a dead letter');
add_stream(name => 'LATER', subjects => ['later.>']);
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'n_nostream' AND status = 200}),
	'delivered once the stream exists');

# A message larger than the stream takes: a dead letter, with the reason.
sql("SELECT outbox.create_endpoint('n_small', 'nats://$servers/small.x', timeout => '3 seconds')");
sql(q{SELECT outbox.emit('small.x', json_build_object('n', 1, 'pad', repeat('x', 600))::jsonb)});
sql(q{SELECT outbox.emit('small.x', '{"n": 2}')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM outbox.dead_letters WHERE endpoint = 'n_small'}),
	'too large for the stream: a dead letter');
like(sql(q{SELECT last_error FROM outbox.dead_letters WHERE endpoint = 'n_small'}),
	qr/JetStream refused the message: .*(size|maximum).*\(err_code 10054\)/i, "with the server's reason");
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE endpoint = 'n_small'}), '2',
	'after one attempt; the other event delivered');

# A subject that {event_type} would make longer than 1024 bytes: a dead letter.
my $long_type = 'l' x 60;
my $template = join('.', ('{event_type}') x 19);
sql("SELECT outbox.create_endpoint('n_long', 'nats://$servers/$template', '{$long_type}', timeout => '3 seconds')");
sql("SELECT outbox.emit('$long_type', '{\"n\": 1}')");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM outbox.dead_letters WHERE endpoint = 'n_long'
		   AND last_error LIKE 'NATS: the subject would be 1158 bytes, more than 1024'}),
	'a subject longer than 1024 bytes: a dead letter, never sent');

# A full stream (discard new): retried with the reason, delivered once it has room.
sql("SELECT outbox.create_endpoint('n_full', 'nats://$servers/full.x', ordered => true, timeout => '3 seconds')");
sql(q{SELECT outbox.emit('full.x', format('{"n": %s}', i)::jsonb, 'k') FROM generate_series(1, 3) i});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 2 FROM outbox.attempts WHERE endpoint = 'n_full' AND status IS DISTINCT FROM 200
		   AND error LIKE '%JetStream refused the message: maximum messages exceeded (err_code 10077)%'}),
	'a full stream: the server\'s reason, tried again');
tool(0, 'update', encode_json({ name => 'FULL', subjects => ['full.>'], max_msgs => 10,
	discard => 'new', num_replicas => 1, storage => 'file' }));
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT event_id) = 3 FROM outbox.attempts WHERE endpoint = 'n_full' AND status = 200}),
	'delivered once the stream has room');
is(join(',', map { n_of($_->{data}) } read_stream('FULL')), '1,2,3', 'in order, each once');

# outbox.allowed_networks: a server outside it is never connected to.
sql(q{SELECT outbox.create_endpoint('n_refused', 'nats://127.0.0.2:4222/orders.refused', timeout => '1 second')});
sql(q{SELECT outbox.emit('order.refused', '{"n": 1}')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 1 FROM outbox.attempts WHERE endpoint = 'n_refused'
		   AND error LIKE '%refused to connect to server 127.0.0.2%allowed_networks%'}),
	'allowed_networks refuses a server outside it, and says so');
sql(q{SELECT outbox.drop_endpoint(name) FROM outbox.endpoints WHERE name IN ('n_refused', 'n_typed', 'n_small', 'n_full', 'n_nostream', 'n_long', 'n_ce')});

# A node of the cluster killed while events flow: nothing lost from the R3 stream.
my $before = sql(q{SELECT count(*) FROM outbox.events});
my $flow = IPC::Run::start(
	[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c',
		q{DO $$ BEGIN FOR t IN 0..199 LOOP
		    PERFORM outbox.emit('order.created', json_build_object('n', 10000 + t)::jsonb, 'key-' || (t % 10));
		    COMMIT; PERFORM pg_sleep(0.01); END LOOP; END $$} ],
	'>', \my $flow_out, '2>', \my $flow_err);
$node->poll_query_until('postgres',
	q{SELECT count(*) >= 40 FROM outbox.events WHERE (payload->>'n')::int >= 10000})
  or die 'events did not flow';
my $leader = decode_json(tool(0, 'info', 'ORDERS'))->{cluster}{leader} // 'n0';
my ($victim) = $leader =~ /^n(\d)$/;
$server[$victim]->kill_kill;
diag("killed nats-server $leader, the stream's leader, while events flowed");
$flow->finish or die "emitting failed: $flow_err";
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT event_id) = 200 FROM outbox.attempts a JOIN outbox.events e USING (event_id)
		   WHERE a.status = 200 AND a.endpoint = 'n_ordered' AND (e.payload->>'n')::int >= 10000}),
	'every event acknowledged with a node down');
my %copies;
$copies{ n_of($_->{data}) }++ for grep { $_->{subject} eq 'orders.ordered' } read_stream('ORDERS');
is(scalar(grep { ($copies{ 10000 + $_ } // 0) == 1 } 0 .. 199), 200,
	'the stream holds each of them once: nothing lost');
diag('with the node down: ' . sql(q{SELECT count(*) FROM outbox.attempts a JOIN outbox.events e USING (event_id)
  WHERE a.endpoint = 'n_ordered' AND a.status IS DISTINCT FROM 200 AND (e.payload->>'n')::int >= 10000})
	. ' attempts failed and were made again; '
	. sql(q{SELECT count(*) FROM outbox.attempts WHERE endpoint = 'n_ordered' AND response LIKE '% duplicate'})
	. ' copies dropped as duplicates');
diag('  ' . $_) for split /\n/, sql(q{SELECT DISTINCT error FROM outbox.attempts a JOIN outbox.events e USING (event_id)
  WHERE a.endpoint = 'n_ordered' AND a.status IS DISTINCT FROM 200 AND (e.payload->>'n')::int >= 10000});
start_server($victim);

# Credentials from the endpoint's auth: two servers of their own, one
# that takes a user and password, one a token.  The right ones are
# acknowledged; wrong ones leave the connection unconnected, recorded with
# the server's reason and tried again (no dead letter) until alter_endpoint
# corrects them; no attempt and no log line shows a secret.
my $t_creds = time();
my @auth_port = map { PostgreSQL::Test::Cluster::get_free_port() } 1 .. 2;
my %auth_env = (0 => { NATS_USER => 'outbox_pub', NATS_PASS => 'pw-Nats5x' }, 1 => { NATS_TOKEN => 'tok-Nats9y' });
for my $i (0 .. 1)
{
	my $conf = "$dir/auth$i.conf";
	my $who = $i == 0 ? 'users: [ { user: "outbox_pub", password: "pw-Nats5x" } ]' : 'token: "tok-Nats9y"';
	PostgreSQL::Test::Utils::append_to_file($conf, qq{listen: "127.0.0.1:$auth_port[$i]"
jetstream { store_dir: "$dir/auth$i" }
authorization { $who }
});
	push @server, IPC::Run::start([ 'nats-server', '-c', $conf ], '>', "$dir/auth$i.out", '2>', "$dir/auth$i.log");
	local %ENV = (%ENV, %{ $auth_env{$i} });
	my $cluster = $servers;
	$servers = "127.0.0.1:$auth_port[$i]";
	add_stream(name => 'CREDS', subjects => ['creds.>'], num_replicas => 1);
	$servers = $cluster;
}
sql("SELECT outbox.create_endpoint('n_user', 'nats://127.0.0.1:$auth_port[0]/creds.user', '{cred.user}',
	timeout => '2 seconds', auth => '{\"username\": \"outbox_pub\", \"password\": \"pw-Nats5x\"}');
     SELECT outbox.create_endpoint('n_token', 'nats://127.0.0.1:$auth_port[1]/creds.token', '{cred.token}',
	timeout => '2 seconds', auth => '{\"token\": \"tok-Nats9y\"}');
     SELECT outbox.create_endpoint('n_wrong', 'nats://127.0.0.1:$auth_port[0]/creds.wrong', '{cred.wrong}',
	timeout => '2 seconds', auth => '{\"username\": \"outbox_pub\", \"password\": \"pw-Wr0ng\"}')");
my ($c_user, $c_token, $c_wrong) = split /\n/, sql(q{SELECT outbox.emit('cred.user', '{"n": 1}');
	SELECT outbox.emit('cred.token', '{"n": 2}'); SELECT outbox.emit('cred.wrong', '{"n": 3}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox.attempts WHERE event_id IN ('$c_user', '$c_token') AND status = 200"),
	'a user and password, and a token, from auth: acknowledged');
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 2 FROM outbox.attempts WHERE event_id = '$c_wrong' AND status IS NULL
		    AND error LIKE '%authentication failed, Authorization Violation%'"),
	'a wrong password: an authentication failure with the server\'s reason in the attempt log, tried again');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id = '$c_wrong'"), '0', 'and no dead letter');
sql(q{SELECT outbox.alter_endpoint('n_wrong', auth => '{"username": "outbox_pub", "password": "pw-Nats5x"}')});
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$c_wrong' AND status = 200"),
	'corrected by alter_endpoint: acknowledged');
{
	local %ENV = (%ENV, %{ $auth_env{0} });
	my $cluster = $servers;
	$servers = "127.0.0.1:$auth_port[0]";
	is(join(',', sort map { $_->{subject} } read_stream('CREDS')), 'creds.user,creds.wrong',
		'the server\'s stream holds both messages');
	$servers = $cluster;
}
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE error LIKE '%pw-%' OR error LIKE '%tok-Nats%'}), '0',
	'no attempt shows a secret');
unlike(join("\n", grep { !/LOG:  statement: / && !/^\s/ } split /\n/, slurp_file($node->logfile)),
	qr/pw-Nats5x|pw-Wr0ng|tok-Nats9y/, 'the server log shows no secret');
diag(sprintf('nats credentials: %d s', time() - $t_creds));

# tls://: a server of its own with TLS that asks for a client certificate
# (certificates made here, the server's for localhost alone); the CA from
# outbox.ca_file, the name checked.
# With the client certificate from auth, acknowledged; without, the
# server closes the connection after the handshake (TLS 1.3), which is
# all libnats says: recorded, and the event tried again.
$t_creds = time();
my $tls_port = PostgreSQL::Test::Cluster::get_free_port();
make_certificates($dir, [ 'server', "subjectAltName = DNS:localhost\nextendedKeyUsage = serverAuth" ],
	[ 'client', 'extendedKeyUsage = clientAuth' ]);
PostgreSQL::Test::Utils::append_to_file("$dir/tls.conf", qq{listen: "127.0.0.1:$tls_port"
jetstream { store_dir: "$dir/tls" }
tls { cert_file: "$dir/server.crt", key_file: "$dir/server.key", ca_file: "$dir/ca.crt", verify: true }
});
push @server, IPC::Run::start([ 'nats-server', '-c', "$dir/tls.conf" ], '>', "$dir/tls.out", '2>', "$dir/tls.log");
{
	local %ENV = (%ENV, NATS_CA => "$dir/ca.crt", NATS_CERT => "$dir/client.crt", NATS_KEY => "$dir/client.key");
	my $cluster = $servers;
	$servers = "localhost:$tls_port";
	add_stream(name => 'TLS', subjects => ['tls.>'], num_replicas => 1);
	$servers = $cluster;
}
reload_with('outbox.ca_file' => "$dir/ca.crt") or die 'no reload';
sql("SELECT outbox.create_endpoint('n_tls', 'tls://localhost:$tls_port/tls.ok', '{tls.ok}', timeout => '2 seconds',
	auth => '{\"client_cert\": \"$dir/client.crt\", \"client_key\": \"$dir/client.key\"}');
     SELECT outbox.create_endpoint('n_tls_nocert', 'tls://localhost:$tls_port/tls.nocert', '{tls.nocert}',
	timeout => '2 seconds', max_attempts => 100)");
my ($t_ok, $t_nocert) = split /\n/, sql(q{SELECT outbox.emit('tls.ok', '{"n": 1}'); SELECT outbox.emit('tls.nocert', '{"n": 2}')});
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$t_ok' AND status = 200"),
	'tls:// with a client certificate from auth: acknowledged');
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 1 FROM outbox.attempts WHERE event_id = '$t_nocert' AND status IS NULL
		    AND error LIKE 'NATS: the connection closed before an acknowledgement came%'"),
	'tls:// without the client certificate the server asks for: a failed attempt (the server closes the connection)');
sql("SELECT outbox.create_endpoint('n_tls_ip', 'tls://127.0.0.1:$tls_port/tls.ip', '{tls.ip}', timeout => '2 seconds',
	auth => '{\"client_cert\": \"$dir/client.crt\", \"client_key\": \"$dir/client.key\"}')");
my $t_ip = sql(q{SELECT outbox.emit('tls.ip', '{"n": 3}')});
# (libnats keeps no reason for it: "not connected to a server", or, when
# the publish was buffered while libnats was still trying to connect, "the
# connection closed before an acknowledgement came")
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 1 FROM outbox.attempts WHERE event_id = '$t_ip' AND status IS NULL
		    AND (error LIKE 'NATS: not connected to a server%'
		         OR error LIKE 'NATS: the connection closed before an acknowledgement came%')"),
	'tls:// to an address the server\'s certificate does not name (only localhost): refused')
  or diag(sql("SELECT string_agg(coalesce(status::text, '') || ' ' || coalesce(error, ''), E'\\n' ORDER BY at)
                 FROM outbox.attempts WHERE event_id = '$t_ip'"));
is(sql("SELECT count(*) FROM outbox.attempts WHERE event_id = '$t_ip' AND status = 200"), '0', 'and never published');
# (max_attempts 100: only a refusal taken for permanent would make it one
# while the test runs)
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id = '$t_nocert'"), '0', 'not a dead letter')
  or diag(sql("SELECT string_agg(attempts || ' ' || coalesce(last_status::text, '') || ' ' || coalesce(last_error, ''), E'\\n')
                 FROM outbox.dead_letters WHERE event_id = '$t_nocert'"));
sql(q{SELECT outbox.drop_endpoint('n_tls'); SELECT outbox.drop_endpoint('n_tls_nocert');
      SELECT outbox.drop_endpoint('n_tls_ip')});
diag(sprintf('nats tls: %d s', time() - $t_creds));

# Crash rounds: the relay killed while events flow; the duplicate window
# keeps one copy of each in the stream.
add_stream(name => 'CRASH', subjects => ['crash.>']);
sql("SELECT outbox.create_endpoint('n_crash', 'nats://$servers/crash.events', '{crash.*}',
	ordered => true, timeout => '3 seconds')");
my ($dups_sent, $rounds) = (0, 3);
for my $round (1 .. $rounds)
{
	my $old_relay = relay_pid();
	my $emit = IPC::Run::start(
		[ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-c',
			qq{DO \$\$ BEGIN FOR t IN 0..149 LOOP
			    PERFORM outbox.emit('crash.made', json_build_object('r', $round, 't', t)::jsonb,
			                        'k' || (t % 7));
			    IF t % 10 = 9 THEN ROLLBACK; ELSE COMMIT; END IF; END LOOP; END \$\$} ],
		'>', \my $e_out, '2>', \my $e_err);
	my $trigger = 20 + int(rand(60));
	$node->poll_query_until('postgres', qq{
SELECT count(*) >= $trigger FROM outbox.attempts a JOIN outbox.events e USING (event_id)
 WHERE a.status = 200 AND a.endpoint = 'n_crash' AND e.payload->>'r' = '$round'})
	  or die "round $round: acknowledgements did not come";
	# All of the round's events are committed before the crash (its
	# restart would cut the emitting session off otherwise).
	$emit->finish or die "round $round: emitting failed: $e_err";
	kill 'KILL', $old_relay;
	relay_restarted($node, $old_relay)
	  or die "round $round: relay not running after the crash";
	ok($node->poll_query_until('postgres', q{
SELECT b.deliveries_waiting = 0 AND NOT EXISTS (SELECT 1 FROM outbox.retries) FROM outbox.backlog b}),
		"round $round: nothing owed after the restart");
}
my %committed = map { $_ => 1 } split /\n/,
  sql(q{SELECT event_id FROM outbox.events WHERE payload ? 'r'});
my %in_stream;
$in_stream{ $_->{headers}{'Nats-Msg-Id'} }++ for read_stream('CRASH');
is(scalar(keys %committed), $rounds * 135, 'the committed events of the rounds');
is(scalar(grep { !$in_stream{$_} } keys %committed), 0, 'crash rounds: no committed event lost');
is(scalar(grep { !$committed{$_} } keys %in_stream), 0, 'no phantom');
is(scalar(grep { $in_stream{$_} > 1 } keys %in_stream), 0, 'the stream holds each event once');
my $resent = sql(q{SELECT count(*) FROM outbox.attempts WHERE endpoint = 'n_crash' AND response LIKE '% duplicate'});
diag("crash rounds: $resent copies sent again after a crash were dropped by the duplicate window");

# Every server down for a while: attempts fail, not connected (time out,
# or are refused at once by a connection made while they were down: the
# relay restarted after the last crash round may make it only now); the
# events wait; the cluster back, they are published, each once.  (After a
# restart the stream answers "no responders" for some seconds, until its
# leader is elected: with this test's 500 ms schedule the default 8
# attempts would not outlast that.)
sql(q{SELECT outbox.alter_endpoint('n_crash', max_attempts => 100)});
$_->kill_kill for @server;
sql(q{SELECT outbox.emit('crash.made', json_build_object('down', i)::jsonb, 'kd' || (i % 3))
        FROM generate_series(1, 20) i});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 1 FROM outbox.attempts a JOIN outbox.events e USING (event_id)
		   WHERE a.endpoint = 'n_crash' AND e.payload ? 'down'
		     AND (a.error LIKE 'NATS: no acknowledgement within 3000 ms (not connected to a server)%'
		          OR a.error LIKE 'NATS: not connected to a server%')}),
	'every server down: attempts fail, not connected');
start_server($_) for 0 .. 2;
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT event_id) = 20 FROM outbox.attempts a JOIN outbox.events e USING (event_id)
		   WHERE a.endpoint = 'n_crash' AND e.payload ? 'down' AND a.status = 200}),
	'the servers back: every waiting event published');
my %down;
$down{ $_->{data} =~ /"down": ?(\d+)/ ? $1 : 0 }++ for read_stream('CRASH');
is(scalar(grep { ($down{$_} // 0) == 1 } 1 .. 20), 20, 'each once in the stream');

done_testing();
