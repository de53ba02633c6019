# The relay as a process: many events to several filtered endpoints exactly
# once, out-of-order and prepared commits, the wake at commit, SIGHUP, a bad
# endpoint next to good ones, endpoints dropped or moved while in flight,
# SIGTERM and restart, the operators' views and health(), and DROP and
# CREATE EXTENSION under a running relay.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# A short retry schedule so that failures settle within the test; a small
# page so that a large transaction is read in many pages.
my $node = outbox_node('relay', conf => q{
max_prepared_transactions = 5
outbox.retry_schedule = '1s'
outbox.batch_size = 100
});
my ($url, $log, $receiver) = start_receiver();

# Evaluate $cond every 100 ms until it is true (up to the TAP timeout).
sub poll_until
{
	my ($cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if $cond->();
		usleep(100_000);
	}
	return 0;
}

sub health
{
	my ($check, $set) = @_;
	return $node->safe_psql('postgres',
		($set // '') . "SELECT status || ' | ' || detail FROM outbox.health() WHERE check_name = '$check'");
}

sub endpoint_status
{
	my ($name) = @_;
	my $row = $node->safe_psql('postgres', qq{
SELECT row_to_json(s) FROM (
  SELECT state, events_waiting, in_retry, dead, last_success_at IS NOT NULL AS succeeded,
         last_failure_status, last_failure_error, consecutive_failures, state_reason,
         oldest_waiting_age IS NOT NULL AS has_oldest
    FROM outbox.endpoint_status WHERE name = '$name') s});
	return decode_json($row);
}

########################################################################
# The relay in pg_stat_activity; health() with nothing wrong.
########################################################################

wait_for_relay() or die 'relay did not start';
is( $node->safe_psql('postgres',
		"SELECT application_name || ' ' || datname FROM pg_stat_activity WHERE backend_type = 'outbox relay'"),
	'outbox relay postgres',
	'relay shows in pg_stat_activity with its application_name and database');
like(health('relay running'), qr/^ok \| /, 'health: relay running ok');
like(health('oldest undelivered'), qr/^ok \| nothing waiting/, 'health: nothing undelivered');
like(health('dead letters'), qr/^ok \| 0 dead letters/, 'health: no dead letters');
like(health('endpoints disabled'), qr/^ok \| none disabled/, 'health: none disabled');

########################################################################
# 2,000 events of mixed types, from transactions of 1 to 1,000 events, some
# concurrent and committing out of order, to three filtered endpoints: each
# receives exactly the events it subscribes to, each once, with the body
# {"type", "timestamp", "data"}.
########################################################################

$node->safe_psql('postgres', q{
SELECT outbox.create_endpoint('ord', '} . $url . q{/ord', '{order.*}');
SELECT outbox.create_endpoint('usr', '} . $url . q{/usr', '{user.created}');
SELECT outbox.create_endpoint('all', '} . $url . q{/all', '{*}');
CREATE FUNCTION emit_bulk(i int) RETURNS uuid LANGUAGE sql AS $$
  SELECT outbox.emit((ARRAY['order.created', 'order.paid', 'user.created', 'user.deleted', 'audit.log'])[1 + i % 5],
                     jsonb_build_object('src', 'bulk', 'i', i, 'note', 'café "q" \ ' || i,
                                        'tags', jsonb_build_array(i % 7, 'x'),
                                        'nested', jsonb_build_object('even', i % 2 = 0, 'nil', NULL)))
$$;
});

# One transaction of 1,000 events (ten pages).
$node->safe_psql('postgres', 'SELECT count(emit_bulk(i)) FROM generate_series(1, 1000) i');
# 300 transactions of one event each.
$node->safe_psql('postgres',
	'DO $$ BEGIN FOR i IN 1001..1300 LOOP PERFORM emit_bulk(i); COMMIT; END LOOP; END $$');
# Two concurrent transactions, interleaved, committing in reverse order.
my $s1 = $node->background_psql('postgres');
my $s2 = $node->background_psql('postgres');
$s1->query_safe('BEGIN');
$s2->query_safe('BEGIN');
$s1->query_safe('SELECT count(emit_bulk(i)) FROM generate_series(1301, 1400) i');
$s2->query_safe('SELECT count(emit_bulk(i)) FROM generate_series(1401, 1500) i');
$s1->query_safe('SELECT count(emit_bulk(i)) FROM generate_series(1501, 1600) i');
$s2->query_safe('SELECT count(emit_bulk(i)) FROM generate_series(1601, 1700) i');
$s2->query_safe('COMMIT');
$s1->query_safe('COMMIT');
$s1->quit;
$s2->quit;
# Three transactions of 100.
$node->safe_psql('postgres', q{
BEGIN; SELECT count(emit_bulk(i)) FROM generate_series(1701, 1800) i; COMMIT;
BEGIN; SELECT count(emit_bulk(i)) FROM generate_series(1801, 1900) i; COMMIT;
BEGIN; SELECT count(emit_bulk(i)) FROM generate_series(1901, 2000) i; COMMIT;
});

my $events = decode_json(
	$node->safe_psql('postgres', q{
SELECT json_agg(json_build_object('id', event_id, 'type', event_type, 'payload', payload,
                'ts', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')) ORDER BY id)
  FROM outbox.events WHERE payload->>'src' = 'bulk'}));
is(scalar(@$events), 2000, '2,000 events emitted');

my %want = (
	'/ord' => [ map { $_->{id} } grep { $_->{type} =~ /^order\./ } @$events ],
	'/usr' => [ map { $_->{id} } grep { $_->{type} eq 'user.created' } @$events ],
	'/all' => [ map { $_->{id} } @$events ]);
is(scalar(@{ $want{'/ord'} }) . '/' . scalar(@{ $want{'/usr'} }), '800/400', 'type mix as planned');

for my $path (sort keys %want)
{
	ok(wait_received($log, got_all($path, @{ $want{$path} })),
		"$path received all " . scalar(@{ $want{$path} }) . ' events it subscribes to');
}
# Let the relay settle (every outcome recorded) before counting duplicates.
$node->poll_query_until('postgres', q{
SELECT bool_and(events_waiting = 0 AND in_retry = 0) FROM outbox.endpoint_status
 WHERE name IN ('ord', 'usr', 'all')})
  or die 'bulk deliveries not recorded';

{
	my @got = received($log);
	my %by_id = map { $_->{id} => $_ } @$events;
	my $json = JSON::PP->new->canonical;
	for my $path (sort keys %want)
	{
		my $n = ids_at($path, @got);
		my %expected = map { $_ => 1 } @{ $want{$path} };
		my @dups = grep { $n->{$_} > 1 } keys %$n;
		my @extra = grep { !$expected{$_} } keys %$n;
		is(scalar(@dups), 0, "$path: no event received twice");
		is(scalar(@extra), 0, "$path: no event it does not subscribe to");
		is(scalar(keys %$n), scalar(keys %expected), "$path: exactly the subscribed events");
	}

	my ($bad_body, $checked) = (0, 0);
	for my $r (grep { $_->{path} =~ m{^/(ord|usr|all)$} } @got)
	{
		my $e = $by_id{ $r->{headers}{'webhook-id'} } or next;
		# received() decoded the log line: the body is characters already.
		my $b = eval { $json->decode($r->{body}) };
		$checked++;
		unless ($b
			&& join(',', sort keys %$b) eq 'data,timestamp,type'
			&& $b->{type} eq $e->{type}
			&& $b->{timestamp} eq $e->{ts}
			&& $b->{timestamp} =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/
			&& $json->encode($b->{data}) eq $json->encode($e->{payload})
			&& $r->{headers}{'content-type'} eq 'application/json')
		{
			diag "bad body for $r->{headers}{'webhook-id'} at $r->{path}: $r->{body}"
			  if $bad_body++ < 3;
		}
	}
	is($checked, 3200, 'checked the body of every bulk delivery');
	is($bad_body, 0, 'every body is {"type","timestamp","data"} with data equal to the payload');
}
is( $node->safe_psql('postgres', q{
SELECT count(*) || ' ' || count(*) FILTER (WHERE a.status = 200 AND a.attempt = 1)
  FROM outbox.attempts a JOIN outbox.events e USING (event_id)
 WHERE e.payload->>'src' = 'bulk'}),
	'3200 3200', 'one successful first attempt logged per delivery');
# Fewer requests to the receiver from here on.
$node->safe_psql('postgres', "SELECT outbox.drop_endpoint('all')");

########################################################################
# Out-of-order commits: A emits first and commits last.  A prepared
# transaction's event is delivered after COMMIT PREPARED (by the poll
# timer: nothing wakes the relay then), never after ROLLBACK PREPARED.
########################################################################

$node->safe_psql('postgres', "SELECT outbox.create_endpoint('late', '$url/late', '{late.*}')");
my $sa = $node->background_psql('postgres');
$sa->query_safe('BEGIN');
my $a_id = $sa->query_safe(q{SELECT outbox.emit('late.a', '{"who": "A"}')});
my $a_seq = $sa->query_safe("SELECT id FROM outbox.events WHERE event_id = '$a_id'");
my $b_id = $node->safe_psql('postgres', q{SELECT outbox.emit('late.b', '{"who": "B"}')});
ok(wait_received($log, got_all('/late', $b_id)), 'B, committed first, delivered');
my $b_seq = $node->safe_psql('postgres', "SELECT id FROM outbox.events WHERE event_id = '$b_id'");
cmp_ok($a_seq, '<', $b_seq, "A's event has the lower id");
ok(!ids_at('/late', received($log))->{$a_id}, 'A not delivered while open');
$sa->query_safe('COMMIT');
$sa->quit;
ok(wait_received($log, got_all('/late', $a_id)), "A's event delivered after it committed last");

my $p1 = $node->safe_psql('postgres', q{
BEGIN; SELECT outbox.emit('late.prepared', '{"p": 1}'); PREPARE TRANSACTION 'p1';});
my $p2 = $node->safe_psql('postgres', q{
BEGIN; SELECT outbox.emit('late.prepared', '{"p": 2}'); PREPARE TRANSACTION 'p2';});
my $after = $node->safe_psql('postgres', q{SELECT outbox.emit('late.after', '{}')});
ok(wait_received($log, got_all('/late', $after)), 'event committed after the PREPAREs delivered');
ok(!ids_at('/late', received($log))->{$p1}, 'prepared event not delivered before COMMIT PREPARED');
$node->safe_psql('postgres', "COMMIT PREPARED 'p1'");
$node->safe_psql('postgres', "ROLLBACK PREPARED 'p2'");
ok(wait_received($log, got_all('/late', $p1)), 'prepared event delivered after COMMIT PREPARED');
my $after2 = $node->safe_psql('postgres', q{SELECT outbox.emit('late.after', '{}')});
ok(wait_received($log, got_all('/late', $after2)), 'later event delivered');
$node->poll_query_until('postgres',
	"SELECT events_waiting = 0 AND in_retry = 0 FROM outbox.endpoint_status WHERE name = 'late'")
  or die 'late not settled';
{
	my $n = ids_at('/late', received($log));
	ok(!$n->{$p2}, 'event of ROLLBACK PREPARED never delivered');
	is(scalar(keys %$n), 5, 'late received A, B, after, p1, after2 only');
	ok(!grep({ $_ > 1 } values %$n), 'late received each once');
}

########################################################################
# SIGHUP: poll_interval and max_concurrency reload.  With an hour's poll
# interval only the commit's wake can deliver an event.
########################################################################

ok(reload_with('outbox.poll_interval' => '1h'), 'relay logged the reload of poll_interval');
is($node->safe_psql('postgres', 'SHOW outbox.poll_interval'), '1h', 'poll_interval is an hour');

# The first event proves the relay is past whatever the reload woke it for;
# after it, the relay sleeps for an hour unless a commit wakes it.
my $w1 = $node->safe_psql('postgres', q{SELECT outbox.emit('late.wake', '{"n": 1}')});
ok(wait_received($log, got_all('/late', $w1)), 'event delivered after the reload');
$node->poll_query_until('postgres',
	"SELECT bool_and(events_waiting = 0) FROM outbox.endpoint_status")
  or die 'not settled';
my $w2 = $node->safe_psql('postgres', q{SELECT outbox.emit('late.wake', '{"n": 2}')});
ok(wait_received($log, got_all('/late', $w2)), 'with an hour between polls, the commit woke the relay');

# One request in flight at a time: each finished request must make room for
# the next without waiting for the (hour-long) poll timer.
ok(reload_with('outbox.max_concurrency' => 1), 'relay logged the reload of max_concurrency');
my @burst = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('late.burst', jsonb_build_object('i', i)) FROM generate_series(1, 10) i});
ok(wait_received($log, got_all('/late', @burst)), 'a burst of 10 arrives with max_concurrency = 1');

ok(reload_with('outbox.poll_interval' => undef, 'outbox.max_concurrency' => undef),
	'relay logged the reload back to the defaults');
is($node->safe_psql('postgres', 'SHOW outbox.max_concurrency'), '2048', 'max_concurrency is back to its default, 2048');

########################################################################
# A refused connection, an unresolvable host and a receiver slower than the
# endpoint's timeout: the good endpoint keeps receiving everything, the
# relay survives, and the failures are in outbox.attempts.  The good
# endpoint has a receiver of its own (another host:port).
########################################################################

my ($url2, $log2, $receiver2) = start_receiver();
my $pid = relay_pid();
$node->safe_psql('postgres', qq{
SELECT outbox.create_endpoint('refused', 'http://127.0.0.1:1/', '{fault.*}', max_attempts => 2);
SELECT outbox.create_endpoint('nxdomain', 'http://nonexistent.invalid/', '{fault.*}', max_attempts => 2);
SELECT outbox.create_endpoint('slow', '$url/slow?delay=5', '{fault.*}', timeout => '1 second', max_attempts => 2);
SELECT outbox.create_endpoint('good', '$url2/good', '{fault.*}');
});

my @round1 = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('fault.x', jsonb_build_object('round', 1, 'i', i)) FROM generate_series(1, 5) i});
ok(wait_received($log2, got_all('/good', @round1)), 'good endpoint received round 1');
# Good's deliveries were recorded before the slow endpoint's first timeout:
# the slow one held back nobody but itself.
$node->poll_query_until('postgres', q{
SELECT count(*) = 5 FROM outbox.attempts WHERE endpoint = 'slow' AND attempt = 1})
  or die 'slow attempts not recorded';
is( $node->safe_psql('postgres', q{
SELECT (SELECT max(at) FROM outbox.attempts WHERE endpoint = 'good')
     < (SELECT min(at) FROM outbox.attempts WHERE endpoint = 'slow')}),
	't', "good's deliveries were recorded before the slow endpoint's first timeout");

# Round 2 while the slow endpoint is in retry: one event a transaction.
$node->poll_query_until('postgres', q{
SELECT in_retry > 0 FROM outbox.endpoint_status WHERE name = 'slow'})
  or die 'no retries';
my @round2;
push @round2, $node->safe_psql('postgres',
	"SELECT outbox.emit('fault.y', jsonb_build_object('round', 2, 'i', $_))") for 1 .. 5;
ok(wait_received($log2, got_all('/good', @round2)), 'good endpoint received round 2 while the others retried');

# Two attempts each, then dead letters.
ok( $node->poll_query_until('postgres', q{
SELECT bool_and(dead = 10 AND in_retry = 0) FROM outbox.endpoint_status
 WHERE name IN ('refused', 'nxdomain', 'slow')}),
	'failing endpoints ended with 10 dead letters each');
is(relay_pid(), $pid, 'relay pid unchanged: the failures did not kill it');
{
	my %expect = (
		refused => qr/connect/i,
		nxdomain => qr/resolve/i,
		slow => qr/time/i);
	for my $ep (sort keys %expect)
	{
		my $rows = $node->safe_psql('postgres', qq{
SELECT count(*), count(*) FILTER (WHERE attempt = 1), count(*) FILTER (WHERE attempt = 2),
       count(*) FILTER (WHERE status IS NULL), count(DISTINCT error), min(error)
  FROM outbox.attempts WHERE endpoint = '$ep'});
		my ($n, $first, $second, $nostatus, $nerr, $err) = split /\|/, $rows;
		is("$n $first $second $nostatus", '20 10 10 20', "$ep: two attempts per event, no HTTP status");
		like($err, $expect{$ep}, "$ep: error text says why ($err)");
	}
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM outbox.attempts WHERE endpoint = 'good' AND status = 200"),
		'10', 'good: one successful attempt per event');
	my $st = endpoint_status('refused');
	is($st->{state}, 'active', 'refused endpoint is still active');
	ok(!$st->{succeeded} && $st->{consecutive_failures} == 20 && !defined $st->{last_failure_status}
		  && $st->{last_failure_error} =~ /connect/i,
		'endpoint_status of the refused endpoint: no success, 20 consecutive failures, the error');
}

########################################################################
# Endpoint lifecycle: dropping an endpoint with requests in flight or
# events in retry, moving an endpoint to another URL.
########################################################################

# doomed's receiver holds its requests until the test releases them.
my $release = PostgreSQL::Test::Utils::tempdir() . '/release_doomed';
$node->safe_psql('postgres', qq{
SELECT outbox.create_endpoint('doomed', '$url/doomed?hold=$release', '{life.*}');
SELECT outbox.create_endpoint('flaky', '$url/flaky?status=503', '{life.*}', max_attempts => 100);
SELECT outbox.create_endpoint('bystander', '$url/bystander', '{life.*}');
SELECT outbox.create_endpoint('moving', '$url/old', '{move.*}');
});
my @life1 = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('life.x', jsonb_build_object('i', i)) FROM generate_series(1, 5) i});
# doomed has read its page (its requests wait for the release); flaky has
# failed once and waits for a retry.
$node->poll_query_until('postgres', q{
SELECT (SELECT p.next_snap IS NOT NULL FROM outbox.positions p JOIN outbox.endpoints e ON e.id = p.endpoint_id
         WHERE e.name = 'doomed')
   AND (SELECT in_retry = 5 FROM outbox.endpoint_status WHERE name = 'flaky')})
  or die 'doomed and flaky not in flight / in retry';
ok(!ids_at('/doomed', received($log))->{ $life1[0] }, 'doomed: requests still in flight');
$node->safe_psql('postgres', q{
SELECT outbox.drop_endpoint('doomed');
SELECT outbox.drop_endpoint('flaky');});
my @life2 = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('life.y', jsonb_build_object('i', i)) FROM generate_series(1, 5) i});
ok(wait_received($log, got_all('/bystander', @life1, @life2)), 'bystander received everything after the drops');
# The in-flight requests to doomed end; the relay records (or drops) them
# and goes on.
{
	open(my $fh, '>', $release) or die "cannot write $release: $!";
	close $fh;
}
ok(wait_received($log, got_all('/doomed', @life1)), 'requests to the dropped endpoint finished');
my @life3 = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('life.z', jsonb_build_object('i', i)) FROM generate_series(1, 5) i});
ok(wait_received($log, got_all('/bystander', @life3)), 'later events still arrive');
{
	my @got = received($log);
	my $doomed = ids_at('/doomed', @got);
	my $flaky = ids_at('/flaky', @got);
	ok(!grep({ $doomed->{$_} || $flaky->{$_} } @life2, @life3),
		'nothing emitted after the drop went to the dropped endpoints');
}
is(relay_pid(), $pid, 'relay pid unchanged after dropping endpoints in use');

my $m1 = $node->safe_psql('postgres', q{SELECT outbox.emit('move.one', '{}')});
ok(wait_received($log, got_all('/old', $m1)), 'moving: first event at the old URL');
$node->safe_psql('postgres', "SELECT outbox.alter_endpoint('moving', url => '$url/new')");
my $m2 = $node->safe_psql('postgres', q{SELECT outbox.emit('move.two', '{}')});
ok(wait_received($log, got_all('/new', $m2)), 'moving: event after alter_endpoint at the new URL');
{
	my @got = received($log);
	ok(!ids_at('/old', @got)->{$m2} && !ids_at('/new', @got)->{$m1}, 'each at its own URL only');
}

########################################################################
# SIGTERM: the launcher starts a new relay and delivery goes on.
########################################################################

$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok(relay_restarted($node, $pid), 'relay restarted by the launcher after SIGTERM');
my $new_pid = relay_pid();
isnt($new_pid, $pid, 'a new relay process');
my @after_restart = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('life.restart', jsonb_build_object('i', i)) FROM generate_series(1, 5) i});
ok(wait_received($log, got_all('/bystander', @after_restart)), 'delivery continues after the restart');

########################################################################
# What operators see: a healthy, a failing, a paused and a disabled
# endpoint in endpoint_status, backlog, attempts and health().
########################################################################

$node->safe_psql('postgres', qq{
SELECT outbox.create_endpoint('healthy', '$url/healthy', '{view.*}');
SELECT outbox.create_endpoint('failing', '$url/failing?status=500', '{view.*}', max_attempts => 100);
SELECT outbox.create_endpoint('held', '$url/held', '{view.*}');
SELECT outbox.pause_endpoint('held');
});
my @view = split /\n/, $node->safe_psql('postgres',
	q{SELECT outbox.emit('view.x', jsonb_build_object('i', i)) FROM generate_series(1, 2) i});
ok(wait_received($log, got_all('/healthy', @view)), 'healthy endpoint received the view events');
$node->poll_query_until('postgres', q{
SELECT consecutive_failures >= 4 FROM outbox.endpoint_status WHERE name = 'failing'})
  or die 'failing endpoint did not fail twice per event';

like(health('oldest undelivered'), qr/^ok \| /, 'health: oldest undelivered ok while younger than 30 s');
{
	my $h = endpoint_status('healthy');
	is_deeply(
		[ @$h{qw(state events_waiting in_retry dead succeeded consecutive_failures)} ],
		[ 'active', 0, 0, 0, JSON::PP::true, 0 ],
		'endpoint_status healthy: active, nothing waiting, last success set');
	ok(!defined $h->{last_failure_status}, 'healthy: no failure status');

	my $f = endpoint_status('failing');
	is_deeply(
		[ @$f{qw(state events_waiting in_retry dead succeeded last_failure_status)} ],
		[ 'active', 2, 2, 0, JSON::PP::false, 500 ],
		'endpoint_status failing: active, 2 waiting in retry, last failure 500, no success');
	cmp_ok($f->{consecutive_failures}, '>=', 4, 'failing: consecutive failures counted');

	my $p = endpoint_status('held');
	is_deeply(
		[ @$p{qw(state state_reason events_waiting in_retry dead succeeded has_oldest)} ],
		[ 'paused', 'paused by pause_endpoint()', 2, 0, 0, JSON::PP::false, JSON::PP::true ],
		'endpoint_status paused: paused, 2 events waiting with an age');
}
is( $node->safe_psql('postgres', q{
SELECT deliveries_waiting >= 4, oldest_age > '0', emitted_last_minute >= 2, delivered_last_minute >= 2
  FROM outbox.backlog}),
	't|t|t|t', 'backlog: waiting deliveries, oldest age, emitted and delivered in the last minute');
is( $node->safe_psql('postgres', q{
SELECT string_agg(format('%s:%s:%s', endpoint, attempt, status), ' ' ORDER BY endpoint, attempt)
  FROM outbox.attempts WHERE event_id = '} . $view[0] . q{' AND attempt <= 2
   AND endpoint IN ('healthy', 'failing', 'held')}),
	'failing:1:500 failing:2:500 healthy:1:200',
	'attempts: one row per attempt with its number and status');
is( $node->safe_psql('postgres', q{
SELECT bool_and(duration_ms > 0 AND at IS NOT NULL AND event_type = 'view.x')
  FROM outbox.attempts WHERE event_id IN ('} . join("','", @view) . q{')}),
	't', 'attempts: every row has a duration, a time and the event type');

# The paused endpoint's events grow older than alert_after.
ok( poll_until(sub {
			health('oldest undelivered', "SET outbox.alert_after = '1s';") =~ /^warning \| /
		}),
	'health: oldest undelivered warns once older than outbox.alert_after');
like(health('oldest undelivered', "SET outbox.alert_after = '1s';"),
	qr/^warning \| \d+ deliveries waiting, the oldest for \S+ \(warning after 00:00:01\)/, 'its detail');
like(health('dead letters'), qr/^warning \| 30 dead letters/, 'health: dead letters warn');

$node->safe_psql('postgres', "SELECT outbox.create_endpoint('gone', '$url/gone?status=410', '{view.*}')");
my $g = $node->safe_psql('postgres', q{SELECT outbox.emit('view.gone', '{}')});
ok( $node->poll_query_until('postgres',
		"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'gone'"),
	'410 disabled the endpoint');
like(endpoint_status('gone')->{state_reason}, qr/410/, 'endpoint_status says why');
like(health('endpoints disabled'), qr/^warning \| 1 disabled: gone$/, 'health: endpoints disabled warns');
like(health('relay running'), qr/^ok \| /, 'health: relay running');

$node->safe_psql('postgres', "SELECT outbox.resume_endpoint('held')");
ok(wait_received($log, got_all('/held', @view)), 'resumed endpoint received what waited');

########################################################################
# DROP EXTENSION: the relay leaves quietly and is not started again until
# CREATE EXTENSION, after which a new relay delivers.
########################################################################

$pid = relay_pid();
my $log_before_drop = -s $node->logfile;
$node->safe_psql('postgres', 'DROP FUNCTION emit_bulk(int); DROP EXTENSION outbox');
ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'outbox relay'}),
	'relay leaves once the extension is dropped');
ok(log_wait(qr/outbox relay leaves database "postgres": outbox is not installed there/, $log_before_drop),
	'the relay logged why it left');
# Nothing starts it again: the launcher waits for a CREATE EXTENSION.  Five
# poll intervals and more than the launcher's restart delay pass.
my $t0 = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->poll_query_until('postgres', qq{SELECT clock_timestamp() > timestamptz '$t0' + interval '6 seconds'})
  or die 'clock did not move';
{
	my $all = slurp_file($node->logfile, $log_before_drop);
	my @started = $all =~ /outbox relay started for database "postgres"/g;
	is(scalar(@started), 0, 'no relay started in a database without the extension');
	my @errors = $all =~ /^.*\b(?:ERROR|FATAL|WARNING|PANIC):.*$/mg;
	note 'errors around the drop: ' . scalar(@errors) . "\n" . join("\n", @errors);
	cmp_ok(scalar(@errors), '<=', 2, 'at most a couple of errors as the extension went away');
}

$node->safe_psql('postgres', qq{
CREATE EXTENSION outbox;
SELECT outbox.create_endpoint('reborn', '$url/reborn', '{*}');});
my $r1 = $node->safe_psql('postgres', q{SELECT outbox.emit('again.created', '{"back": true}')});
ok(wait_received($log, got_all('/reborn', $r1)), 'after CREATE EXTENSION again, a new endpoint receives');
isnt(relay_pid(), $pid, 'delivered by a new relay, started at CREATE EXTENSION');

# Dropped and created again in one transaction: the relay never sees the
# extension absent, but what it kept of the old one (plans, type ids) is
# gone; it starts anew, and the new extension's endpoints receive.
$pid = relay_pid();
my $log_before_swap = -s $node->logfile;
$node->safe_psql('postgres', qq{
BEGIN;
DROP EXTENSION outbox;
CREATE EXTENSION outbox;
SELECT outbox.create_endpoint('swapped', '$url/swapped', '{*}');
COMMIT;});
my $r2 = $node->safe_psql('postgres', q{SELECT outbox.emit('swap.created', '{"swapped": true}')});
ok(wait_received($log, got_all('/swapped', $r2)), 'after DROP and CREATE EXTENSION in one transaction, an endpoint receives');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= 1 FROM outbox.attempts WHERE endpoint = 'swapped' AND status = 200"),
	'and its delivery is recorded');
ok(log_wait(qr/outbox relay leaves database "postgres": outbox was dropped and created again/, $log_before_swap),
	'the old relay said why it left');

$node->stop;
$receiver->kill_kill;
$receiver2->kill_kill;
done_testing();
