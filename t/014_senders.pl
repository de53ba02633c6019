# Sender processes (outbox.senders): requests sent through them arrive
# signed and exactly once, per-key order holds across the relay and its
# senders, receivers' answers come back whole (status, Retry-After,
# webhook-delivery, the address policy's refusal), a sender that exits
# costs a retry and is started again, and senders leave with their relay.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = outbox_node('senders', conf => qq{
outbox.senders = 2
outbox.retry_schedule = '300ms'
outbox.batch_size = 50
});
my ($url, $log, $receiver) = start_receiver();

sub sender_pids
{
	return sql("SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
	             WHERE backend_type = 'outbox sender'");
}

$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'outbox sender'")
  or die 'senders did not start';
is(sql("SELECT string_agg(application_name, ',') FROM pg_stat_activity
         WHERE backend_type = 'outbox sender'"),
	'outbox sender,outbox sender', 'the relay started two senders');

# Many events at once: the relay keeps some requests and hands the others
# to its senders (fewest in flight), so all three send.
my $secret = sql("SELECT outbox.create_endpoint('plain', '$url/plain?delay=0.02', '{t.*}')");
sql("SELECT outbox.create_endpoint('keyed', '$url/keyed?delay=0.01', '{k.*}', ordered => true)");
sql(q{SELECT outbox.emit('t.e', jsonb_build_object('n', g)) FROM generate_series(1, 300) g});
sql(q{SELECT outbox.emit('k.e', jsonb_build_object('key', g % 10, 'seq', g / 10), key => (g % 10)::text)
        FROM generate_series(0, 199) g});
ok(wait_received($log, sub { scalar(keys %{ ids_at('/plain', @_) }) == 300
								  && scalar(keys %{ ids_at('/keyed', @_) }) == 200 }),
	'500 events delivered through the relay and two senders');
$node->poll_query_until('postgres', q{SELECT count(*) = 500 FROM outbox.attempt_log})
  or die 'attempts not recorded';
my @got = received($log);
is(scalar(grep { $_->{path} =~ m{^/(plain|keyed)$} } @got), 500, 'each exactly once');
is(sql(q{SELECT count(*) FILTER (WHERE status = 200) || '/' || count(*) FROM outbox.attempt_log}),
	'500/500', 'every attempt recorded with its 200');
is(sql(q{SELECT count(*) FROM outbox.retries}), '0', 'nothing left to retry');

# Each sender sent some of them: it keeps its connections to the receiver
# open for the next request (its only sockets).
for my $pid (split /,/, sender_pids())
{
	my $sockets = grep { (readlink($_) // '') =~ /^socket:/ } glob("/proc/$pid/fd/*");
	cmp_ok($sockets, '>', 0, "sender $pid holds connections it sent requests over");
}

# Signatures made by the relay survive the trip through a sender.
my ($first) = grep { $_->{path} eq '/plain' } @got;
is(sql(sprintf(q{SELECT outbox.verify_signature('%s', '%s', '%s', $b$%s$b$, '%s')},
		$secret, $first->{headers}{'webhook-id'}, $first->{headers}{'webhook-timestamp'},
		$first->{body}, $first->{headers}{'webhook-signature'})),
	't', 'a request sent by a sender verifies');

# Per key, events arrived in order of seq, each sent after the previous one
# was answered.
my %last;
my $in_order = 1;
for my $r (sort { $a->{t} <=> $b->{t} } grep { $_->{path} eq '/keyed' } @got)
{
	my $d = decode_json($r->{body})->{data};
	$in_order = 0 if defined $last{ $d->{key} } && $d->{seq} != $last{ $d->{key} } + 1;
	$last{ $d->{key} } = $d->{seq};
}
ok($in_order, 'per-key order held on the ordered endpoint');
is(join(',', map { $last{$_} } sort { $a <=> $b } keys %last), join(',', (19) x 10),
	'every key reached its last event');

# A request larger than the queue between relay and sender (256 kB) goes
# through in pieces.
sql(q{SELECT outbox.emit('t.big', jsonb_build_object('fill', repeat('x', 900000)))});
ok(wait_received($log, sub { grep { $_->{body} =~ /"t\.big"/ && length($_->{body}) > 900000 } @_ }),
	'a 900 kB event arrived whole');

# Answers come back whole: a 503 with Retry-After is retried after it, a
# webhook-delivery: disable disables, and a refused address is reported
# with the address policy's words.
sql("SELECT outbox.create_endpoint('busy', '$url/busy?status=503&retry_after=1', '{b.*}')");
sql("SELECT outbox.create_endpoint('quit', '$url/quit?status=400&delivery=disable', '{q.*}')");
sql(q{SELECT outbox.create_endpoint('far', 'http://127.0.0.2:9/far', '{f.*}')});
sql(q{SELECT outbox.emit('b.e', '{}'); SELECT outbox.emit('q.e', '{}'); SELECT outbox.emit('f.e', '{}')});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 3 FROM outbox.attempts WHERE endpoint IN ('busy', 'quit', 'far')})
  or die 'no attempts at the failing endpoints';
my $next = sql(q{SELECT round(extract(epoch FROM r.next_at - a.at))
                   FROM outbox.retries r JOIN outbox.attempts a ON a.event_id = r.event_id
                  WHERE a.endpoint = 'busy'});
ok($next >= 1, "503 with Retry-After: 1 is retried after it (in ${next} s)");
is(sql(q{SELECT status FROM outbox.attempts WHERE endpoint = 'busy'}), '503', '503 recorded');
like(sql(q{SELECT disabled_reason FROM outbox.endpoints WHERE name = 'quit'}),
	qr/webhook-delivery: disable/, 'webhook-delivery: disable came back from the sender');
like(sql(q{SELECT error FROM outbox.attempts WHERE endpoint = 'far'}),
	qr/refused to connect to 127\.0\.0\.2.*outbox\.allowed_networks/,
	'a sender applies the address policy');
sql(q{SELECT outbox.drop_endpoint(n) FROM unnest('{busy,quit,far}'::text[]) n});

# A sender that exits: what it had in flight fails as a transport error and
# is retried; it is started again after 5 s, and nothing is lost.
my $old = sender_pids();
my $before = sql('SELECT count(*) FROM outbox.attempt_log');
my $offset = -s $node->logfile;
sql("SELECT outbox.create_endpoint('slow', '$url/slow?delay=1', '{s.*}')");
sql(q{SELECT outbox.emit('s.e', jsonb_build_object('n', g)) FROM generate_series(1, 6) g});
$node->poll_query_until('postgres', q{SELECT count(*) > 0 FROM pg_stat_activity
                                       WHERE backend_type = 'outbox relay'})
  or die;
# (all six in flight: each is answered only after a second)
$node->poll_query_until('postgres', q{SELECT in_flight = 6 FROM outbox.endpoint_status WHERE name = 'slow'})
  or die 'the six events did not all go out';
sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'outbox sender'});
ok(log_wait(qr/outbox sender \d for database "postgres" exited/, $offset),
	'the relay noticed its senders exit');
ok( $node->poll_query_until('postgres', q{
	SELECT count(DISTINCT event_id) = 6 FROM outbox.attempts WHERE endpoint = 'slow' AND status = 200}),
	'every event in flight at an exited sender was delivered after all');
# With nothing else in flight, four of the six went to the senders (ties
# go to a sender), each answered only after a second.
is(sql(q{SELECT string_agg(DISTINCT error, ',') FROM outbox.attempts
          WHERE endpoint = 'slow' AND status IS NULL}),
	'the outbox sender process sending it stopped',
	'requests lost with their sender are recorded as such, and retried');
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'outbox sender'")
  or die 'senders were not started again';
isnt(sender_pids(), $old, 'two new senders run');

# A sender that is stuck (stopped here with SIGSTOP) is given up on 10 s
# after a request's timeout: its requests are retried, by the relay itself
# until a new sender runs.
$offset = -s $node->logfile;
my @stopped = split /,/, sender_pids();
kill 'STOP', @stopped;
sql("SELECT outbox.create_endpoint('stall', '$url/stall', '{st.*}', timeout => '1 second')");
sql(q{SELECT outbox.emit('st.e', jsonb_build_object('n', g)) FROM generate_series(1, 4) g});
ok(log_wait(qr/outbox sender \d for database "postgres" answered nothing long past a request's timeout/,
		$offset), 'a stuck sender is given up on');
ok( $node->poll_query_until('postgres', q{
	SELECT count(DISTINCT event_id) = 4 FROM outbox.attempts WHERE endpoint = 'stall' AND status = 200}),
	'its events were delivered after all');
kill 'CONT', @stopped;
ok( $node->poll_query_until('postgres', qq{
	SELECT count(*) = 2 FROM pg_stat_activity
	 WHERE backend_type = 'outbox sender' AND NOT pid = ANY ('{@{[ join(',', @stopped) ]}}'::int[])}),
	'the stuck senders were stopped and replaced');

# Senders leave with their relay, and the next relay starts its own.
$old = sender_pids();
sql(q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'outbox relay'});
ok( $node->poll_query_until('postgres', qq{
	SELECT count(*) = 0 FROM pg_stat_activity
	 WHERE backend_type = 'outbox sender' AND pid = ANY ('{$old}'::int[])}),
	'senders left with their relay');
$node->poll_query_until('postgres',
	"SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'outbox sender'")
  or die 'the next relay started no senders';
sql(q{SELECT outbox.emit('t.e', '{"after": true}')});
ok(wait_received($log, sub { grep { $_->{body} =~ /"after"/ } @_ }), 'and delivery goes on');

# Without worker slots for its senders the relay says so and sends itself.
$node->stop;
# The logical replication launcher, outbox's launcher and one relay.
$node->append_conf('postgresql.conf', "max_worker_processes = 3\n");
$offset = -s $node->logfile;
$node->start;
ok(log_wait(qr/outbox could not start sender 1 for database "postgres"/, $offset),
	'a sender without a worker slot is reported');
sql(q{SELECT outbox.emit('t.e', '{"alone": true}')});
ok(wait_received($log, sub { grep { $_->{body} =~ /"alone"/ } @_ }), 'the relay sends by itself');

$node->stop;
$receiver->kill_kill;
done_testing();
