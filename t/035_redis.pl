# The Redis target against a real redis-server (started here on 127.0.0.1,
# appendfsync always, its files in a temporary directory) and real BullMQ
# Workers from npm (bullmq 6 and 5, t/node/bullmq_worker.js): jobs arrive
# with their name, data, id template, attempts and backoff, and a Worker
# that throws once sees BullMQ's own retry; priorities keep their order; the
# same event added twice runs once and is recorded delivered; a paused
# queue takes jobs; URLs and job ids BullMQ would refuse are refused; stream
# entries carry the event's fields; TLS; AUTH as an ACL user (a wrong
# password adds nothing and is tried again, NOPERM is a dead letter); a
# Redis stopped and started in the middle of 1,000 adds loses nothing and
# adds nothing twice; a Redis away for 30 s is tried at the circuit's pace
# and everything is added once it is back; hostile replies fail the attempt
# and the relay keeps running; crash rounds, with webhook endpoints beside
# the queue and the stream, lose nothing and add no job twice.
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

my $server = '/usr/bin/redis-server';
plan skip_all => 'redis-server is not installed (scripts/deps.sh)' unless -x $server;
my $worker = "$FindBin::Bin/node/bullmq_worker.js";
-d "$FindBin::Bin/node/node_modules/bullmq" && -d "$FindBin::Bin/node/node_modules/bullmq5"
  or die 'npm packages bullmq and bullmq5 missing in t/node (scripts/deps.sh)';

# Redis: its own port and directory; every acknowledged write on disk.
my $dir = PostgreSQL::Test::Utils::tempdir;
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $redis;
my $redis_out = '';

# TLS on a second port of the same server, with certificates made here (a
# CA, the server's for 127.0.0.1 alone).
my $tls = PostgreSQL::Test::Utils::tempdir;
my $tls_port = PostgreSQL::Test::Cluster::get_free_port();
make_certificates($tls, [ 'server', "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth" ]);

sub redis_up
{
	my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 1);
	return defined $sock;
}

sub start_redis
{
	$redis = IPC::Run::start(
		[ $server, '--port', $port, '--bind', '127.0.0.1', '--dir', $dir, '--save', '',
		  '--appendonly', 'yes', '--appendfsync', 'always', '--daemonize', 'no',
		  '--tls-port', $tls_port, '--tls-cert-file', "$tls/server.crt", '--tls-key-file', "$tls/server.key",
		  '--tls-ca-cert-file', "$tls/ca.crt", '--tls-auth-clients', 'no' ],
		'<', \undef, '>&', \$redis_out);
	my $deadline = time() + 30;
	until (redis_up())
	{
		die "redis-server did not start:\n$redis_out" if time() > $deadline || !$redis->pumpable;
		usleep(100_000);
	}
}

sub stop_redis
{
	return unless $redis;
	$redis->signal('TERM');    # a clean shutdown: the AOF is complete
	$redis->finish;
	undef $redis;
}

# Hostile servers, stopped however the test ends.
my @hostile;

END
{
	local $?;
	if ($redis)
	{
		$redis->signal('KILL');
		$redis->finish;
	}
	$_->kill_kill for @hostile;
}

sub cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'redis-cli', '-p', $port, @_ ], '>', \$out, '2>', \$err, IPC::Run::timeout(30))
	  or die "redis-cli @_: $err";
	chomp $out;
	return $out;
}

sub node
{
	my ($major, $queue, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'node', $worker, $major, $port, $queue, @args ], '>', \$out, '2>', \$err,
		IPC::Run::timeout(90))
	  or die "bullmq_worker.js @args: $err";
	return $out;
}

# What a Worker ran: its lines (hashes) and the counts at its end.
sub run_worker
{
	my ($major, $queue, $n, $seconds) = @_;
	my @lines = map { decode_json($_) } grep { /^\{/ } split /\n/,
	  node($major, $queue, 'run', $n, $seconds // 20);
	my ($counts) = map { $_->{counts} } grep { exists $_->{counts} } @lines;
	return ([ grep { !exists $_->{counts} } @lines ], $counts);
}

# A stream's entries after entry id $after (from the first without one),
# oldest first, each as [milliseconds since the epoch (its id's time),
# { field => value }].
sub stream_entries
{
	my ($key, $after) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'redis-cli', '-p', $port, '-2', '--json', 'XRANGE', $key, defined $after ? "($after" : '-', '+' ],
		'>', \$out, '2>', \$err, IPC::Run::timeout(30))
	  or die "redis-cli XRANGE $key: $err";
	return map {
		my ($id, $fields) = @$_;
		$id =~ /^(\d+)-\d+$/ or die "stream $key: an entry id $id";
		[ $1, {@$fields} ]
	} @{ decode_json($out) };
}

# The id of a stream's last entry; undef when it has none.
sub stream_last_id
{
	my ($key) = @_;
	my $last = cli('XREVRANGE', $key, '+', '-', 'COUNT', '1');
	return $last eq '' ? undef : (split /\n/, $last)[0];
}

# A queue's adds (its events stream's "added" events) against the
# committed events (id => 1), for job ids {event_id}: committed events
# never added, job ids added more than once, job ids added that never
# committed.
sub job_adds
{
	my ($queue, $committed) = @_;
	my %added;
	$added{ $_->[1]{jobId} }++ for grep { $_->[1]{event} eq 'added' } stream_entries("bull:$queue:events");
	return (scalar(grep { !$added{$_} } keys %$committed), scalar(grep { $added{$_} > 1 } keys %added),
		scalar(grep { !$committed->{$_} } keys %added));
}

start_redis();
ok(redis_up(), "redis-server listens on 127.0.0.1:$port");

my $node = outbox_node('redis', conf => qq{
outbox.retry_schedule = '300ms'
outbox.ca_file = '$tls/ca.crt'
restart_after_crash = on
});

# URLs refused at create_endpoint, with nothing written.
for my $bad ("bullmq://127.0.0.1:$port/q?job_id=a:{event_id}", "bullmq://127.0.0.1:$port/",
 "bullmq://u:p\@127.0.0.1:$port/q",
	"bullmq://127.0.0.1:$port/q?attempts=0", "bullmq://127.0.0.1:$port/q?backoff=linear:5",
	"bullmq://127.0.0.1:$port/q?job_id={id}", "redis://127.0.0.1:$port/s?maxlen=x")
{
	my ($rc, $out, $err) = $node->psql('postgres',
		'SELECT outbox.create_endpoint(' . lit('bad') . ', ' . lit($bad) . ')');
	like($err, qr/invalid endpoint URL/, "refused: $bad");
}
my (undef, undef, $colon_err) = $node->psql('postgres',
	"SELECT outbox.create_endpoint('bad', 'bullmq://127.0.0.1:$port/q?job_id=a:{event_id}')");
like($colon_err, qr/may not contain ":"/, 'a ":" in the job id template: said so');
is(sql(q{SELECT count(*) FROM outbox.endpoints}), '0', 'refused URLs wrote nothing');
wait_for_relay() or die 'relay did not start';

# Both majors: jobs with their name, data, id, attempts and backoff; the
# one that throws once is retried by BullMQ; priorities in order.
for my $major (6, 5)
{
	my $q = "orders$major";
	node($major, $q, 'setup');
	my $since = sql('SELECT now()');
	sql("SELECT outbox.create_endpoint('bq$major',
		'BULLMQ://127.0.0.1:$port/$q?job_id=email-{key}-{event_id}&attempts=3&backoff=fixed:200&remove_on_complete=false',
		'{booking.*,fail.once,prio.*}')");
	my @booking = split /\n/, sql(q{
SELECT outbox.emit('booking.confirmed', '{"n": 1}', 'b1');
SELECT outbox.emit('booking.rescheduled', '{"n": 2}', 'b1');
SELECT outbox.emit('booking.cancelled', '{"n": 3}', 'b1');
SELECT outbox.emit('fail.once', '{"n": 4}', 'f1');});
	my @prio = split /\n/, sql(q{BEGIN;
SELECT outbox.emit('prio.low', '{"n": 5}', 'p1', priority => 1);
SELECT outbox.emit('prio.high', '{"n": 6}', 'p5', priority => 5);
SELECT outbox.emit('prio.mid', '{"n": 7}', 'p3', priority => 3);
COMMIT;});
	@prio = grep { /^[0-9a-f-]{36}$/ } @prio;
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 7 FROM outbox.attempts WHERE endpoint = 'bq$major' AND status = 200"),
		"bullmq $major: 7 jobs added, recorded delivered");
	like(sql("SELECT response FROM outbox.attempts WHERE endpoint = 'bq$major' AND event_id = '$booking[0]'"),
		qr/^job email-b1-$booking[0] added$/, "bullmq $major: the attempt log shows the job id");
	is(sql("SELECT url FROM outbox.endpoints WHERE name = 'bq$major'"),
		"bullmq://127.0.0.1:$port/$q?job_id=email-{key}-{event_id}&attempts=3&backoff=fixed:200&remove_on_complete=false",
		"bullmq $major: the scheme is kept in lower case");

	my ($runs, $counts) = run_worker($major, $q, 7);
	my %by_id;
	push @{ $by_id{ $_->{id} } }, $_ for @$runs;
	is(scalar(keys %by_id), 7, "bullmq $major: a Worker ran 7 jobs");
	my $first = $by_id{"email-b1-$booking[0]"}[0];
	is($first->{name}, 'booking.confirmed', "bullmq $major: the job name is the event type");
	is($first->{data}{type}, 'booking.confirmed', "bullmq $major: the data is the Standard Webhooks body");
	is($first->{data}{data}{n}, 1, "bullmq $major: with the payload");
	is($first->{opts}{attempts}, 3, "bullmq $major: attempts");
	is_deeply($first->{opts}{backoff}, { type => 'fixed', delay => 200 }, "bullmq $major: backoff");
	my $fail = $by_id{"email-f1-$booking[3]"};
	is(scalar(@$fail), 2, "bullmq $major: the job that threw ran again");
	is(join(',', map { $_->{attemptsMade} } @$fail), '0,1', "bullmq $major: the second run is BullMQ's retry");
	my @order = map { $_->{name} } grep { $_->{name} =~ /^prio/ } @$runs;
	is(join(',', @order[0 .. 2]), 'prio.high,prio.mid,prio.low',
		"bullmq $major: higher priority ran first");
	my @names = map { $_->{name} } grep { $_->{name} =~ /^booking/ } @$runs;
	is(join(',', @names), 'booking.confirmed,booking.rescheduled,booking.cancelled',
		"bullmq $major: events of one priority in their order");
	is($counts->{completed}, 7, "bullmq $major: getJobCounts: 7 completed");
	is(($counts->{failed} // 0) + ($counts->{waiting} // 0) + ($counts->{prioritized} // 0) + ($counts->{delayed} // 0),
		0, "bullmq $major: none failed, waiting or delayed");

	# The same events sent again (replay; the endpoint subscribes to the
	# other major's events too, emitted before $since): BullMQ's dedupe,
	# recorded delivered.
	sql("SELECT outbox.replay('bq$major', '$since')");
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 7 FROM outbox.attempts WHERE endpoint = 'bq$major' AND status = 200
			    AND response LIKE '%already in the queue'"),
		"bullmq $major: a replayed event is delivered as already in the queue");
	($runs, $counts) = run_worker($major, $q, 1, 2);
	is(scalar(@$runs), 0, "bullmq $major: and no job ran twice");

	# A paused queue takes jobs; they run once it is resumed.
	node($major, $q, 'pause');
	my $paused = sql(q{SELECT outbox.emit('booking.confirmed', '{"n": 8}', 'b2')});
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'bq$major' AND event_id = '$paused' AND status = 200"),
		"bullmq $major: a paused queue took the job");
	node($major, $q, 'resume');
	($runs, $counts) = run_worker($major, $q, 1);
	is(join(',', map { $_->{id} } @$runs), "email-b2-$paused", "bullmq $major: it ran after resume");
	sql("SELECT outbox.drop_endpoint('bq$major')");
}

# A consumer that dedupes with mark_processed() in its own transaction:
# with remove_on_complete=true BullMQ forgets a finished job, so a replay
# adds it again and it runs again; the second run changes nothing.  An
# event type the consumer does not handle is marked and does not block.
sql("CREATE TABLE received (job_id text PRIMARY KEY, name text)");
my $since_mark = sql('SELECT now()');
sql("SELECT outbox.create_endpoint('bq_mark', 'bullmq://127.0.0.1:$port/marked?remove_on_complete=true&priority=off',
	'{order.placed,user.unknown}')");
my @marked = split /\n/, sql(q{SELECT outbox.emit('order.placed', '{"n": 30}');
SELECT outbox.emit('user.unknown', '{"n": 31}'); SELECT outbox.emit('order.placed', '{"n": 32}');});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 3 FROM outbox.attempts WHERE endpoint = 'bq_mark' AND status = 200"),
	'mark: 3 jobs added');
my @first_runs = map { decode_json($_) } grep { /^\{"id"/ } split /\n/,
  node(6, 'marked', 'mark', 3, 20, $node->host, $node->port);
is(join(',', map { $_->{first} ? 1 : 0 } @first_runs), '1,1,1', 'mark: each job marked the first time');
is(sql('SELECT count(*) FROM received'), '2', 'mark: the two order.placed jobs applied, the unknown type only marked');
is(cli('EXISTS', "bull:marked:$marked[0]"), '0', 'mark: BullMQ removed the finished jobs (remove_on_complete)');
sql("SELECT outbox.replay('bq_mark', '$since_mark')");
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 6 FROM outbox.attempts WHERE endpoint = 'bq_mark' AND status = 200 AND response LIKE '%added'"),
	'mark: a replay of removed jobs adds them again (the dedupe lasts as long as the job)');
my @second_runs = map { decode_json($_) } grep { /^\{"id"/ } split /\n/,
  node(6, 'marked', 'mark', 3, 20, $node->host, $node->port);
is(join(',', map { $_->{first} ? 1 : 0 } @second_runs), '0,0,0', 'mark: the second runs found them marked');
is(sql('SELECT count(*) FROM received'), '2', 'mark: and changed nothing');
sql("SELECT outbox.drop_endpoint('bq_mark')");

# A job id BullMQ would refuse is a dead letter with the reason.
sql("SELECT outbox.create_endpoint('bq_key', 'bullmq://127.0.0.1:$port/keyed?job_id={key}', '{keyed}', max_attempts => 1)");
my ($colon, $int) = split /\n/, sql(q{SELECT outbox.emit('keyed', '{}', 'a:b'); SELECT outbox.emit('keyed', '{}', '42');});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$colon' AND last_error LIKE '%contains \":\"%'"),
	'a job id with ":" is a dead letter that says why');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$int' AND last_error LIKE '%is an integer%'"),
	'an integer job id is a dead letter that says why');
sql("SELECT outbox.drop_endpoint('bq_key')");

# Streams: XADD with the event's fields; the entry id in the attempt log.
sql("SELECT outbox.create_endpoint('st', 'redis://127.0.0.1:$port/orders:stream?maxlen=1000', '{order.*}')");
my $ev = sql(q{SELECT outbox.emit('order.paid', '{"n": 10}', 'k-10', headers => '{"x-trace": "t1"}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'st' AND event_id = '$ev' AND status = 200"),
	'stream: the entry was added');
my $entry_id = sql("SELECT response FROM outbox.attempts WHERE endpoint = 'st' AND event_id = '$ev'");
like($entry_id, qr/^\d+-\d+$/, 'stream: the attempt log shows the entry id');
my @fields = split /\n/, cli('XRANGE', 'orders:stream', $entry_id, $entry_id);
my %f = @fields[ 1 .. $#fields ];
is($f{event_id}, $ev, 'stream: event_id');
is($f{type}, 'order.paid', 'stream: type');
is($f{key}, 'k-10', 'stream: key');
is(decode_json($f{headers})->{'x-trace'}, 't1', 'stream: the event\'s headers');
is(decode_json($f{body})->{data}{n}, 10, 'stream: the body');
like($f{timestamp}, qr/^\d{4}-\d\d-\d\dT/, 'stream: the timestamp');

# WRONGTYPE: a dead letter with Redis's message.
cli('SET', 'not-a-stream', 'x');
sql("SELECT outbox.create_endpoint('st_wrong', 'redis://127.0.0.1:$port/not-a-stream', '{wrong.type}')");
my $wrong = sql(q{SELECT outbox.emit('wrong.type', '{}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$wrong' AND last_error LIKE '%WRONGTYPE%'"),
	'WRONGTYPE is a dead letter with Redis\'s message');

# TLS: bullmqs:// and rediss:// verified against outbox.ca_file and the
# URL's host; a name the certificate does not have fails the attempt.
sql("SELECT outbox.create_endpoint('bq_tls', 'bullmqs://127.0.0.1:$tls_port/tlsq', '{tls.job}');
     SELECT outbox.create_endpoint('st_tls', 'rediss://127.0.0.1:$tls_port/tls-stream', '{tls.entry}');
     SELECT outbox.create_endpoint('st_tls_name', 'rediss://localhost:$tls_port/tls-name', '{tls.name}')");
my ($tls_job, $tls_entry, $tls_name) = split /\n/,
  sql(q{SELECT outbox.emit('tls.job', '{"n": 20}'); SELECT outbox.emit('tls.entry', '{"n": 21}');
        SELECT outbox.emit('tls.name', '{"n": 22}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox.attempts WHERE event_id IN ('$tls_job', '$tls_entry') AND status = 200"),
	'TLS: the job and the entry were added');
my ($tls_runs) = run_worker(6, 'tlsq', 1);
is(join(',', map { $_->{id} } @$tls_runs), $tls_job, 'TLS: a Worker ran the job');
is(cli('XLEN', 'tls-stream'), '1', 'TLS: the stream has the entry');
ok($node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM outbox.attempts WHERE event_id = '$tls_name' AND status IS NULL
		    AND error LIKE '%certificate verify failed%'"),
	'TLS: a host name the certificate does not have fails the attempt');
note(sql("SELECT error FROM outbox.attempts WHERE event_id = '$tls_name' LIMIT 1"));
sql(q{SELECT outbox.drop_endpoint('st_tls_name')});

# AUTH: an ACL user the test makes, with the least the add script and XADD
# need (its keys alone; the default user stays open, as the Workers use
# it).  Endpoints with its user and password deliver over a connection
# logged in as that user; a wrong password is an authentication failure
# with Redis's WRONGPASS in the attempt log, tried again (no dead letter),
# that adds nothing (not even as the default user, which would run what
# follows a refused AUTH on the same connection), until alter_endpoint
# gives the right one; a key the user may not write is a dead letter with
# NOPERM; credentials in the URL and a bearer token are refused at
# create_endpoint.  The password is in no attempt and not in the log.
cli('ACL', 'SETUSER', 'outbox_pub', 'reset', 'on', '>pw-Red1s', '~bull:authq:*', '~auth-stream',
	'+script|load', '+evalsha', '+hget', '+hset', '+hmget', '+exists', '+incr', '+llen', '+lpush',
	'+zadd', '+xadd');
my $red_auth = q{auth => '{"username": "outbox_pub", "password": "pw-Red1s"}'};
sql("SELECT outbox.create_endpoint('bq_auth', 'bullmq://127.0.0.1:$port/authq', '{auth.job}', $red_auth);
     SELECT outbox.create_endpoint('st_auth', 'redis://127.0.0.1:$port/auth-stream', '{auth.entry}', $red_auth);
     SELECT outbox.create_endpoint('st_noperm', 'redis://127.0.0.1:$port/other-stream', '{auth.noperm}', $red_auth);
     SELECT outbox.create_endpoint('bq_wrongpw', 'bullmq://127.0.0.1:$port/authq', '{auth.wrong}',
	max_attempts => 100, auth => '{\"username\": \"outbox_pub\", \"password\": \"pw-Wr0ng\"}')");
my ($auth_job, $auth_entry, $auth_noperm, $auth_wrong) = split /\n/,
  sql(q{SELECT outbox.emit('auth.job', '{"n": 30}'); SELECT outbox.emit('auth.entry', '{"n": 31}');
        SELECT outbox.emit('auth.noperm', '{"n": 32}'); SELECT outbox.emit('auth.wrong', '{"n": 33}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox.attempts WHERE event_id IN ('$auth_job', '$auth_entry') AND status = 200"),
	'AUTH: the job and the entry were added as the endpoint\'s user');
like(cli('CLIENT', 'LIST'), qr/ user=outbox_pub /, 'AUTH: the relay\'s connection is logged in as that user');
ok($node->poll_query_until('postgres',
		"SELECT count(*) >= 2 FROM outbox.attempts WHERE event_id = '$auth_wrong' AND status IS NULL
		    AND error LIKE 'authentication failed: Redis: AUTH as the endpoint''s user: WRONGPASS%'"),
	'AUTH: a wrong password is an authentication failure with Redis\'s WRONGPASS, tried again');
note(sql("SELECT error FROM outbox.attempts WHERE event_id = '$auth_wrong' LIMIT 1"));
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE event_id = '$auth_wrong'"), '0',
	'AUTH: a wrong password is not a dead letter');
is(cli('EXISTS', "bull:authq:$auth_wrong"), '0', 'AUTH: a wrong password added no job');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE event_id = '$auth_noperm' AND last_error LIKE '%NOPERM%'"),
	'AUTH: a key the user may not write is a dead letter with NOPERM');
is(cli('EXISTS', 'other-stream'), '0', 'AUTH: and the stream was not written');
sql(q{SELECT outbox.alter_endpoint('bq_wrongpw', auth => '{"username": "outbox_pub", "password": "pw-Red1s"}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$auth_wrong' AND status = 200"),
	'AUTH: the password corrected by alter_endpoint: a new connection logs in');
my ($auth_runs) = run_worker(6, 'authq', 2);
is(join(',', sort map { $_->{id} } @$auth_runs), join(',', sort ($auth_job, $auth_wrong)),
	'AUTH: a Worker ran both jobs');
is(cli('XLEN', 'auth-stream'), '1', 'AUTH: the stream has the entry');
for my $bad ([ "redis://outbox_pub:url-S3cret\@127.0.0.1:$port/auth-stream", "'{}'", qr/invalid endpoint URL "redis:\/\/\*\*\*\@/ ],
	[ "bullmq://127.0.0.1:$port/authq", q{'{"bearer": "tok-Red1s"}'}, qr/auth's bearer is not supported for a Redis endpoint/ ])
{
	my (undef, undef, $err) = $node->psql('postgres',
		'SELECT outbox.create_endpoint(' . lit('bad') . ', ' . lit($bad->[0]) . ", auth => $bad->[1])");
	like($err, $bad->[2], "AUTH: refused at create_endpoint: $bad->[0] with auth $bad->[1]");
}
is(sql(q{SELECT count(*) FROM outbox.endpoints WHERE name = 'bad'}), '0', 'AUTH: the refusals wrote nothing');
is(sql(q{SELECT count(*) FROM outbox.attempts WHERE error LIKE '%pw-%' OR response LIKE '%pw-%'}), '0',
	'AUTH: no attempt shows a password');
# (the test's own statements, logged by log_statement, aside)
unlike(join("\n", grep { !/LOG:  statement: / && !/^\s/ } split /\n/, slurp_file($node->logfile)),
	qr/pw-(Red1s|Wr0ng)/, 'AUTH: the server log shows no password');
sql(q{SELECT outbox.drop_endpoint(name) FROM outbox.endpoints WHERE name IN ('bq_auth', 'st_auth', 'st_noperm', 'bq_wrongpw')});

# Redis stopped and started in the middle of a flow of 1,000 jobs: a
# client emits them in 100 transactions of 10, 20 ms apart; once 300 are
# added Redis holds the adds that come (CLIENT PAUSE WRITE holds every
# script: a busy Redis), and stops (a clean shutdown) with adds in flight
# (the endpoint's timeout, 5 s, outlasts the hold) while the rest are
# being emitted.  The adds it cut off and those tried while it is away
# fail and are tried again.  Every committed event is added as a job
# exactly once (the queue's own "added" events name each job id once),
# and a Worker runs each once.
sql("SELECT outbox.create_endpoint('bq_restart', 'bullmq://127.0.0.1:$port/restart', '{restart.*}', timeout => '5 seconds',
	max_attempts => 100)");
my $flow = "$dir/restart-flow.sql";
open my $flow_fh, '>', $flow or die "cannot write $flow: $!";
print $flow_fh "SELECT count(outbox.emit('restart.e', jsonb_build_object('n', g))) FROM generate_series("
  . ($_ * 10 + 1) . ', ' . ($_ * 10 + 10) . ") g;\nSELECT pg_sleep(0.02);\n"
  for 0 .. 99;
close $flow_fh;
my ($flow_out, $flow_err) = ('', '');
my $emitter = IPC::Run::start(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-f', $flow ],
	'>', \$flow_out, '2>', \$flow_err);
ok($node->poll_query_until('postgres',
		q{SELECT count(*) >= 300 FROM outbox.attempts WHERE endpoint = 'bq_restart' AND status = 200}),
	'restart: jobs flow');
cli('CLIENT', 'PAUSE', '10000', 'WRITE');
ok($node->poll_query_until('postgres', q{SELECT in_flight > 0 FROM outbox.endpoint_status WHERE name = 'bq_restart'}),
	'restart: adds in flight, held by Redis');
stop_redis();
my ($emitted_at_stop, $added_at_stop) = split /\|/, sql(q{
SELECT (SELECT count(*) FROM outbox.events WHERE event_type = 'restart.e'),
       (SELECT count(*) FROM outbox.attempts WHERE endpoint = 'bq_restart' AND status = 200)});
cmp_ok($emitted_at_stop, '<', 1000,
	"restart: Redis stopped in the middle of the flow ($emitted_at_stop of 1,000 emitted, $added_at_stop added)");
ok($node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM outbox.attempts
 WHERE endpoint = 'bq_restart' AND status IS NULL
   AND (error = 'Redis: the server closed the connection' OR error LIKE 'Redis: the connection failed: %')}),
	'restart: the adds in flight when Redis stopped failed (the connection lost)');
ok($node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM outbox.attempts
 WHERE endpoint = 'bq_restart' AND status IS NULL AND error LIKE 'Redis: could not connect to %'}),
	'restart: and so did the adds tried while Redis was down');
start_redis();
$emitter->finish or die "restart: the emitting client failed: $flow_err";
ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT event_id) = 1000 FROM outbox.attempts WHERE endpoint = 'bq_restart' AND status = 200}),
	'restart: all 1,000 recorded delivered');
note('restart: failed attempts: '
	  . sql(q{SELECT string_agg(n || ' x ' || e, '; ') FROM (SELECT left(error, 80) e, count(*) n
  FROM outbox.attempts WHERE endpoint = 'bq_restart' AND status IS NULL GROUP BY 1) s}));
my %restart_ids = map { $_ => 1 } split /\n/, sql(q{SELECT event_id FROM outbox.events WHERE event_type = 'restart.e'});
is(scalar(keys %restart_ids), 1000, 'restart: 1,000 events committed');
my ($lost, $twice, $phantom) = job_adds('restart', \%restart_ids);
is("$lost/$twice/$phantom", '0/0/0', 'restart: every committed event added as a job once (lost/twice/phantom)');
is(cli('ZCARD', 'bull:restart:prioritized'), '1000', 'restart: 1,000 jobs in the queue');
my ($restart_runs, $restart_counts) = run_worker(6, 'restart', 1000, 60);
my %ran;
$ran{ $_->{id} }++ for @$restart_runs;
is(scalar(grep { ($ran{$_} // 0) != 1 } keys %restart_ids) + scalar(grep { !$restart_ids{$_} } keys %ran), 0,
	'restart: a Worker ran each job once, and nothing else');
is($restart_counts->{completed}, 1000, 'restart: getJobCounts: 1,000 completed');

# Redis killed (SIGKILL) and away for 30 s, measured from the kill.  The
# adds fail as transport errors and are tried again all along, never
# sooner than the retry schedule allows; twenty failures in a row open
# the circuit (endpoint_health counts them), after which the endpoint's
# new events are only probed and the rest wait at their position, and
# the endpoint makes about one attempt a second.  outbox.health() warns
# of the oldest undelivered.  Once Redis is back the circuit closes,
# health shows it, and all 800 events are added, each once.
sql("SELECT outbox.create_endpoint('bq_down', 'bullmq://127.0.0.1:$port/down', '{down.*}', timeout => '1 second',
	max_attempts => 100)");
sql(q{SELECT outbox.emit('down.a', jsonb_build_object('n', g)) FROM generate_series(1, 50) g});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 50 FROM outbox.attempts WHERE endpoint = 'bq_down' AND status = 200}),
	'down: the first 50 added');
my $t_kill = Time::HiRes::time();
$redis->signal('KILL');
$redis->finish;
undef $redis;
sql(q{SELECT outbox.emit('down.b', jsonb_build_object('n', g)) FROM generate_series(51, 300) g});
ok($node->poll_query_until('postgres', q{
SELECT h.consecutive_failures >= 20 AND h.failing_since IS NOT NULL
  FROM outbox.endpoint_health h JOIN outbox.endpoints e ON e.id = h.endpoint_id WHERE e.name = 'bq_down'}),
	'down: health shows the failures in a row (the circuit is open)');
# Events that come while the circuit is open.
my $t_open = Time::HiRes::time();
sql(q{SELECT outbox.emit('down.c', jsonb_build_object('n', g)) FROM generate_series(301, 800) g});
# The outage: what is left of the 30 s.
my $left = $t_kill + 30 - Time::HiRes::time();
usleep(int($left * 1e6)) if $left > 0;
my $down_health = sql(q{SET outbox.alert_after = '10s';
SELECT status || ': ' || detail FROM outbox.health() WHERE check_name = 'oldest undelivered'});
like($down_health, qr/^warning: /, 'down: outbox.health() warns of the oldest undelivered');
my $t_back = Time::HiRes::time();
cmp_ok($t_back - $t_kill, '>=', 30, sprintf('down: Redis away for at least 30 s (%.1f s)', $t_back - $t_kill));
start_redis();

# The attempts made while Redis was away.  What bounds them: the retry
# schedule (no event again within 240 ms), the circuit (one new event per
# 200 ms), and, tighter than both, a failing endpoint's one request in
# flight (pump_endpoint_cap) each waiting for the Redis target's next
# connection attempt, made at most once a second: about one attempt a
# second.
my $outage = sprintf(q{endpoint = 'bq_down' AND at > to_timestamp(%.3f) AND at <= to_timestamp(%.3f)}, $t_kill, $t_back);
my ($tried, $answered, $retried, $events_tried, $max_per_event, $by_schedule, $min_gap, $longest_pause, $since_open)
  = split /\|/, sql(sprintf(q{
WITH a AS (SELECT * FROM outbox.attempts WHERE %s),
     per AS (SELECT event_id, count(*) n, min(at) first FROM a GROUP BY 1),
     gaps AS (SELECT extract(epoch FROM at - lag(at) OVER (PARTITION BY event_id ORDER BY attempt)) gap FROM a),
     pauses AS (SELECT extract(epoch FROM t - lag(t) OVER (ORDER BY t)) p
                  FROM (SELECT at t FROM a UNION ALL SELECT to_timestamp(%.3f)) x)
SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM a WHERE status IS NOT NULL),
       (SELECT count(*) FROM a WHERE attempt > 1), (SELECT count(*) FROM per), (SELECT max(n) FROM per),
       (SELECT sum(1 + floor(extract(epoch FROM to_timestamp(%.3f) - first) / 0.24))::bigint FROM per),
       (SELECT round(min(gap)::numeric, 3) FROM gaps), (SELECT round(max(p)::numeric, 3) FROM pauses),
       (SELECT count(*) FROM a WHERE at > to_timestamp(%.3f))},
	$outage, $t_back, $t_back, $t_open));
my ($probes, $c_waiting) = split /\|/, sql(sprintf(q{
SELECT (SELECT count(*) FROM outbox.attempts WHERE %s AND attempt = 1 AND event_type = 'down.c'),
       (SELECT count(*) FROM outbox.events e WHERE event_type = 'down.c'
           AND NOT EXISTS (SELECT 1 FROM outbox.attempts a WHERE a.event_id = e.event_id AND %s))},
	$outage, $outage));
my $open_s = $t_back - $t_open;
diag(sprintf('down: Redis away %.1f s: %d attempts (%d retries) on %d events, at most %d an event, shortest retry %s s, '
		. 'longest pause %s s; the schedule alone allows %d; with the circuit open (%.1f s) %d attempts, '
		. '%d of them probes of the 500 new events, %d of which waited untried',
		$t_back - $t_kill, $tried, $retried, $events_tried, $max_per_event, $min_gap, $longest_pause, $by_schedule,
		$open_s, $since_open, $probes, $c_waiting));
is($answered, 0, 'down: no add was answered while Redis was away');
cmp_ok($retried, '>', 0, "down: failed adds were tried again while Redis was away ($retried retries)");
cmp_ok($longest_pause, '<', 3, "down: tried all along the outage (longest pause ${longest_pause} s)");
cmp_ok($min_gap, '>=', 0.2, "down: no event tried again sooner than the schedule allows (shortest ${min_gap} s)");
cmp_ok($tried, '<=', $by_schedule, "down: $tried attempts, within the $by_schedule the schedule allows");
my $pace_max = int($open_s) + 3;
cmp_ok($since_open, '<=', $pace_max,
	sprintf('down: with the circuit open, about one attempt a second, not more (%d in %.1f s)', $since_open, $open_s));
my $probe_max = int($open_s / 0.2) + 2;
cmp_ok($probes, '<=', $probe_max, "down: new events only probed, at one per 200 ms at most ($probes)");
cmp_ok($c_waiting, '>', 0, "down: the rest of them waited at their position ($c_waiting not tried)");

ok($node->poll_query_until('postgres',
		q{SELECT count(DISTINCT event_id) = 800 FROM outbox.attempts WHERE endpoint = 'bq_down' AND status = 200}),
	'down: all 800 added once Redis is back');
ok($node->poll_query_until('postgres', q{
SELECT h.consecutive_failures = 0 AND h.failing_since IS NULL
  FROM outbox.endpoint_health h JOIN outbox.endpoints e ON e.id = h.endpoint_id WHERE e.name = 'bq_down'}),
	'down: health shows it healthy again (the circuit closed)');
diag(sprintf('down: the first add %.1f s after Redis was started again, the last %.1f s after',
		split /\|/, sql(sprintf(q{SELECT extract(epoch FROM min(at)) - %.3f, extract(epoch FROM max(at)) - %.3f
  FROM outbox.attempts WHERE endpoint = 'bq_down' AND status = 200 AND at > to_timestamp(%.3f)}, $t_back, $t_back, $t_back))));
$node->poll_query_until('postgres', 'SELECT deliveries_waiting = 0 FROM outbox.backlog')
  or die 'down: deliveries still waiting';
like(sql(q{SET outbox.alert_after = '10s';
SELECT status || ': ' || detail FROM outbox.health() WHERE check_name = 'oldest undelivered'}),
	qr/^ok: /, 'down: outbox.health() no longer warns');
is(sql(q{SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 'bq_down'}), '0', 'down: no dead letter');
my %down_ids = map { $_ => 1 } split /\n/, sql(q{SELECT event_id FROM outbox.events WHERE event_type LIKE 'down.%'});
($lost, $twice, $phantom) = job_adds('down', \%down_ids);
is("$lost/$twice/$phantom", '0/0/0', 'down: every committed event added as a job once (lost/twice/phantom)');
is(cli('ZCARD', 'bull:down:prioritized'), '800', 'down: 800 jobs in the queue');

# Hostile servers: an oversized bulk string, an array, an endless line.
my %hostile_reply = (huge => "\$999999999\r\n", array => "*2\r\n:1\r\n:2\r\n", endless => '+' . ('x' x 10000));
for my $kind (sort keys %hostile_reply)
{
	my $hport = PostgreSQL::Test::Cluster::get_free_port();
	my $code = q{use IO::Socket::INET; my ($port, $reply) = ($ARGV[0], pack('H*', $ARGV[1]));
		my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Listen => 16, ReuseAddr => 1)
		  or die $!;
		$SIG{PIPE} = 'IGNORE';
		while (my $c = $l->accept) { my $b; sysread($c, $b, 65536); print $c $reply; sleep 1; close $c }};
	push @hostile, IPC::Run::start([ 'perl', '-e', $code, $hport, unpack('H*', $hostile_reply{$kind}) ],
		'<', \undef, '>', \my $o, '2>', \my $e);
	usleep(300_000);
	sql("SELECT outbox.create_endpoint('h_$kind', 'bullmq://127.0.0.1:$hport/q', '{hostile.$kind}', timeout => '2 seconds')");
}
my $pid = relay_pid();
sql(qq{SELECT outbox.emit('hostile.$_', '{}')}) for sort keys %hostile_reply;
for my $kind (sort keys %hostile_reply)
{
	ok($node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM outbox.attempts WHERE endpoint = 'h_$kind' AND status IS NULL AND error IS NOT NULL"),
		"hostile $kind: the attempt failed");
	note(sql("SELECT error FROM outbox.attempts WHERE endpoint = 'h_$kind' LIMIT 1"));
}
like(sql(q{SELECT error FROM outbox.attempts WHERE endpoint = 'h_huge' LIMIT 1}), qr/bulk string of 999999999 bytes/,
	'hostile: the oversized bulk string is named');
like(sql(q{SELECT error FROM outbox.attempts WHERE endpoint = 'h_array' LIMIT 1}), qr/array/, 'hostile: the array is named');
like(sql(q{SELECT error FROM outbox.attempts WHERE endpoint = 'h_endless' LIMIT 1}), qr/longer than 4096/,
	'hostile: the endless line is named');
is(relay_pid(), $pid, 'the relay kept running');
my $after = sql(q{SELECT outbox.emit('order.paid', '{"n": 11}')});
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'st' AND event_id = '$after' AND status = 200"),
	'and delivers to a healthy endpoint');

sql(qq{SELECT outbox.drop_endpoint('h_$_')}) for sort keys %hostile_reply;

# Crash rounds: the relay killed, then the server stopped -m immediate,
# while two clients emit (one transaction in ten rolled back) to a BullMQ
# queue, a stream and two webhook endpoints (t/webhook_receiver.py, one of
# them answering after 10 ms), all subscribed to the same events.  For
# each endpoint, as t/007_crash.pl checks webhooks: every committed event
# arrived (lost 0), nothing of a rolled-back transaction did (phantom 0),
# and a copy beyond the first is the one resend of an event that first
# arrived no earlier than the crash window before the crash (1 s: the
# relay commits asynchronously, DESIGN.md "The crash window").  A job so
# re-sent is answered "already there" (BullMQ's "duplicated" event) and
# never added twice; a stream has no dedupe and gets the copy.
my ($url, $log) = start_receiver();
sql("SELECT outbox.create_endpoint('bq_crash', 'bullmq://127.0.0.1:$port/crash', '{crash.*}');
     SELECT outbox.create_endpoint('st_crash', 'redis://127.0.0.1:$port/crash-stream', '{crash.*}');
     SELECT outbox.create_endpoint('wh_crash', '$url/crash', '{crash.*}');
     SELECT outbox.create_endpoint('wh_crash_slow', '$url/crash-slow?delay=0.01', '{crash.*}')");
my %crash_path = ('/crash' => 'wh_crash', '/crash-slow' => 'wh_crash_slow');
my $window = 1.0;

# One endpoint's copies in a round (event id => the times they arrived)
# against the round's committed events: lost, phantom, copies beyond the
# first, those outside the crash window (a second resend, or a first copy
# more than $window before the crash), and how long before the crash the
# oldest duplicated event first arrived.
sub crash_tally
{
	my ($committed, $copies, $t_crash) = @_;
	my %r = (lost => scalar(grep { !$copies->{$_} } keys %$committed), phantom => 0, dup => 0, outside => 0,
		oldest => 0);
	for my $id (keys %$copies)
	{
		my @t = sort { $a <=> $b } @{ $copies->{$id} };
		if (!$committed->{$id})
		{
			$r{phantom}++;
			next;
		}
		next if @t < 2;
		$r{dup} += @t - 1;
		my $age = $t_crash - $t[0];
		$r{oldest} = $age if $age > $r{oldest};
		$r{outside}++ if @t > 2 || $age > $window;
	}
	return \%r;
}

my %all_committed;
for my $kind (qw(relay server))
{
	my $old_relay = relay_pid();
	die "crash ($kind): no relay to kill" unless $old_relay =~ /^\d+$/;
	my $stream_from = stream_last_id('crash-stream');
	my $events_from = stream_last_id('bull:crash:events');
	my @h;
	for my $c (1 .. 2)
	{
		my $file = "$dir/crash-$kind-$c.sql";
		open my $fh, '>', $file or die $!;
		for my $t (1 .. 60)
		{
			my $rb = rand() < 0.1 ? 'true' : 'false';
			print $fh "BEGIN;\n";
			print $fh "SELECT outbox.emit('crash.e', '{\"r\": \"$kind\", \"c\": $c, \"t\": $t, \"i\": $_, \"rb\": $rb}', 'c$c-k"
			  . int(rand(5)) . "');\n" for 0 .. int(rand(3));
			# (held open a few ms: emitting lasts about as long as delivering)
			printf $fh "SELECT pg_sleep(%.4f);\n", rand(0.01);
			print $fh $rb eq 'true' ? "ROLLBACK;\n" : "COMMIT;\n";
		}
		close $fh;
		push @h, IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('postgres'), '-f', $file ],
			'>', \my $out, '2>', \my $err);
	}
	my $trigger = 20 + int(rand(60));
	$node->poll_query_until('postgres', qq{
SELECT count(*) >= $trigger FROM outbox.attempts a JOIN outbox.events e USING (event_id)
 WHERE a.status = 200 AND a.endpoint = 'bq_crash' AND e.payload->>'r' = '$kind'})
	  or die "$kind: $trigger adds did not come";
	my $t_crash = Time::HiRes::time();
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
	relay_restarted($node, $old_relay) or die "$kind: relay not running after the crash";
	ok($node->poll_query_until('postgres', q{
SELECT b.deliveries_waiting = 0 AND NOT EXISTS (SELECT 1 FROM outbox.retries) FROM outbox.backlog b}),
		"crash ($kind): nothing owed after the restart");
	my %committed = map { $_ => 1 }
	  split /\n/, sql(qq{SELECT event_id FROM outbox.events WHERE payload->>'r' = '$kind'});

	# What arrived at each endpoint: event id => the times of its copies.
	# BullMQ: the add ("added") and the resends answered "already there"
	# ("duplicated") in the queue's events stream; the stream: its
	# entries; the webhooks: the receiver's log.  Times as Redis's entry
	# ids and the receiver say them.
	my %got = map { $_ => {} } qw(bq_crash st_crash wh_crash wh_crash_slow);
	my %added;
	my $added_twice = 0;
	for my $e (stream_entries('bull:crash:events', $events_from))
	{
		my ($ms, $f) = @$e;
		next unless $f->{event} eq 'added' || $f->{event} eq 'duplicated';
		push @{ $got{bq_crash}{ $f->{jobId} } }, $ms / 1000;
		$added_twice++ if $f->{event} eq 'added' && $added{ $f->{jobId} }++;
	}
	push @{ $got{st_crash}{ $_->[1]{event_id} } }, $_->[0] / 1000 for stream_entries('crash-stream', $stream_from);
	for my $r (received($log))
	{
		my $ep = $crash_path{ $r->{path} } or next;
		my $data = eval { decode_json($r->{body})->{data} } // {};
		next unless ($data->{r} // '') eq $kind;
		push @{ $got{$ep}{ $r->{headers}{'webhook-id'} } }, $r->{t};
	}
	my %tally = map { $_ => crash_tally(\%committed, $got{$_}, $t_crash) } keys %got;
	for my $ep (sort keys %tally)
	{
		my $t = $tally{$ep};
		is("$t->{lost}/$t->{phantom}/$t->{outside}", '0/0/0',
			"crash ($kind) $ep: every committed event arrived, no phantom, duplicates only in the window "
			  . '(lost/phantom/outside)');
	}
	is($added_twice, 0, "crash ($kind): no job added twice");
	diag(sprintf('redis crash round (%s): %d events; ', $kind, scalar(keys %committed))
		  . join('; ', map { sprintf('%s lost %d phantom %d copies %d (oldest first %.0f ms before the crash)',
				$_, @{ $tally{$_} }{qw(lost phantom dup)}, $tally{$_}{oldest} * 1000) } sort keys %tally)
		  . "; jobs added twice $added_twice");
	$all_committed{$_} = 1 for keys %committed;
}
my @all_jobs = grep { length } split /\n/, cli('ZRANGE', 'bull:crash:prioritized', '0', '-1');
is(scalar(grep { !$all_committed{$_} } @all_jobs), 0, 'crash: no phantom job');
is(scalar(@all_jobs), scalar(keys %all_committed), 'crash: one job per committed event');

$node->stop;
stop_redis();
done_testing();
