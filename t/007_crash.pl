# Crash rounds (DESIGN promises 1-3): several clients emit thousands of
# events to a few hundred endpoints (one for every event, one for order
# events, and 300 with an event type each: half the events are of those),
# about one transaction in ten rolling back, one event in five with a
# priority (endpoints behind send those ahead of their pages); at a
# random moment during delivery the relay is killed with SIGKILL, or a
# client backend is (both force the postmaster's crash restart), or the
# server is stopped with -m immediate and started again.  Once the backlog
# is empty, the receiver's log is checked against outbox.events and against
# what the clients know they committed and rolled back:
#   - every committed event reached every endpoint subscribed to it (lost: 0),
#     except the one in twenty emitted already expired (expires_at => now()),
#     which reached none and is recorded expired at each instead: settled,
#     not lost;
#   - no event of a rolled-back or crashed transaction arrived (phantom: 0);
#   - every duplicate is a request first received just before the crash (or
#     after it, still on the wire) and sent again by the restarted relay: the
#     documented window (in flight at the crash, answered within the last
#     recording interval, or recorded by a commit not yet flushed);
#   - the relay runs again, started once per crash (no crash loop), and no
#     batch or retry is left behind.
# Three rounds of each kind by default; OUTBOX_SOAK=N runs N rounds of
# random kinds.  OUTBOX_SEED=S replays a run (the seed is printed).
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use IPC::Run;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use Time::Local qw(timegm);

my $seed = $ENV{OUTBOX_SEED} // (time() * 1000 + $$) % 2**31;
srand($seed);
diag("crash rounds: seed $seed (OUTBOX_SEED=$seed replays the same choices)");

my $soak = $ENV{OUTBOX_SOAK} // 0;
my @kinds;
if ($soak)
{
	my @k = qw(relay backend immediate);
	@kinds = map { $k[ int(rand(3)) ] } 1 .. $soak;
}
else
{
	@kinds = map { my $k = $_; ($k) x 3 } qw(relay backend immediate);
	# A seeded shuffle: kinds alternate unpredictably.
	for (my $i = $#kinds; $i > 0; $i--)
	{
		my $j = int(rand($i + 1));
		@kinds[ $i, $j ] = @kinds[ $j, $i ];
	}
}

my $n_clients = 4;
my $txns_per_client = 300;    # 1-5 events each: about 3,600 events a round
my @types = qw(order.created order.paid user.created audit.log);
# Endpoints with an event type of their own (OUTBOX_CRASH_ENDPOINTS): the
# stream routes each event to the one that wants it.
my $n_bulk = $ENV{OUTBOX_CRASH_ENDPOINTS} // 300;

# The endpoints an event of this type is owed to, by receiver path.
sub paths_for
{
	my ($type) = @_;
	my @paths = ('/all');
	push @paths, '/ord' if $type =~ /^order\./;
	push @paths, "/b$1" if $type =~ /^bulk\.(\d+)$/;
	return @paths;
}

sub subscribed_at
{
	my ($path, $type) = @_;
	return scalar(grep { $_ eq $path } paths_for($type));
}

# A duplicate must have been first received no earlier than this before the
# crash: 3 x wal_writer_delay (PostgreSQL's bound on how long an
# asynchronous commit stays unwritten: 600 ms by default; soak runs saw
# 439 ms), plus the 10 ms recording interval, plus scheduling slack.  The
# crashes here are process crashes: the test default fsync = off loses
# nothing the kernel was handed, so only WAL still in shared memory is lost.
my $window = 1.0;

# The postmaster restarts after a crash (the test default is not to);
# log timestamps in UTC so that they compare with the receiver's clock; no
# statement logging for thousands of emits.
my $node = outbox_node('crash', conf => q{
restart_after_crash = on
log_statement = none
log_timezone = 'UTC'
outbox.retry_schedule = '1s'
});
my ($url, $log, $receiver) = start_receiver();

$node->safe_psql('postgres', qq{
SELECT outbox.create_endpoint('all', '$url/all', '{*}');
SELECT outbox.create_endpoint('ord', '$url/ord', '{order.*}');
SELECT count(outbox.create_endpoint('b' || n, '$url/b' || n, ARRAY['bulk.' || n]))
  FROM generate_series(0, $n_bulk - 1) n;});

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $json = JSON::PP->new->canonical;

wait_for_relay() or die 'relay did not start';

# Unix time of a server log line ('%m' prefix, log_timezone UTC).
sub log_time
{
	my ($line) = @_;
	$line =~ /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)? UTC/
	  or die "no timestamp in log line: $line";
	return timegm($6, $5, $4, $3, $2 - 1, $1) + ($7 // 0);
}

# Lines appended to the receiver's log since *$pos, counted; moves *$pos.
sub count_new_lines
{
	my ($pos) = @_;
	open(my $fh, '<', $log) or die "cannot read $log: $!";
	seek($fh, $$pos, 0);
	local $/;
	my $chunk = <$fh> // '';
	close $fh;
	# Only whole lines.
	my $end = rindex($chunk, "\n");
	return 0 if $end < 0;
	$$pos += $end + 1;
	return (substr($chunk, 0, $end + 1) =~ tr/\n//);
}

# What a client will do: a list of transactions, each with its events,
# whether it rolls back, and its text for psql.  Each transaction holds
# itself open a few milliseconds, so that transactions overlap and commit
# out of id order, and emitting lasts about as long as delivering.  The
# script says "C t" once transaction t's COMMIT returned, "R t" once it
# rolled back.
sub plan_client
{
	my ($round, $c) = @_;
	my @txns;
	for my $t (0 .. $txns_per_client - 1)
	{
		my $rb = rand() < 0.1 ? 1 : 0;
		my @events;
		for my $k (0 .. int(rand(5)))
		{
			my $type = $n_bulk > 0 && rand() < 0.5 ? 'bulk.' . int(rand($n_bulk)) : $types[ int(rand(@types)) ];
			push @events, { id => "$round.$c.$t.$k", type => $type, exp => rand() < 0.05 ? 1 : 0,
				prio => rand() < 0.2 ? 1 + int(rand(3)) : 0 };
		}
		my $sql = "BEGIN;\nSELECT "
		  . join(', ',
			map {
				"outbox.emit('$_->{type}', '"
				  . qq({"id": "$_->{id}", "r": $round, "c": $c, "t": $t, "rb": )
				  . ($rb ? 'true' : 'false') . "}'"
				  . ($_->{exp} ? ', expires_at => now()' : '')
				  . ($_->{prio} ? ", priority => $_->{prio})" : ')')
			} @events)
		  . ";\nSELECT pg_sleep(" . sprintf('%.4f', rand(0.01)) . ");\n"
		  . ($rb ? "ROLLBACK;\n\\echo R $t\n" : "COMMIT;\n\\echo C $t\n");
		push @txns, { rb => $rb, events => \@events, sql => $sql };
	}
	return { txns => \@txns, round => $round, c => $c };
}

# Run transactions $from.. of a client's plan in a psql process; the
# output accumulates in $plan->{out}.
sub start_client
{
	my ($plan, $from) = @_;
	my $file = "$tmp/client_$plan->{round}_$plan->{c}_$from.sql";
	open(my $fh, '>', $file) or die "cannot write $file: $!";
	print $fh "\\o /dev/null\n", map { $_->{sql} } @{ $plan->{txns} }[ $from .. $#{ $plan->{txns} } ];
	close $fh;
	$plan->{out} //= '';
	$plan->{err} //= '';
	return IPC::Run::start(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres') . ' application_name=crash_client',
			'-f', $file
		],
		'>>', \$plan->{out}, '2>>', \$plan->{err});
}

# The transaction after the last one a client reported: the next one to
# run, or the one a crash cut off.
sub next_txn
{
	my ($plan) = @_;
	my @done = $plan->{out} =~ /^[CR] (\d+)$/mg;
	return @done ? $done[-1] + 1 : 0;
}

my %total = (rounds => 0, events => 0, deliveries => 0, lost => 0, phantom => 0,
	dup => 0, in_flight => 0, indoubt_committed => 0, max_dup_age => 0);
my %by_kind;
my $t_start = time();

for my $round (1 .. scalar(@kinds))
{
	my $kind = $kinds[ $round - 1 ];
	my $log_offset = -s $node->logfile;
	my $recv_offset = -s $log;
	my $old_relay = relay_pid();

	# Clients and the deliveries they will cause if nothing crashes.
	my @plans = map { plan_client($round, $_) } 0 .. $n_clients - 1;
	my $expected = 0;
	for my $p (@plans)
	{
		for my $tx (grep { !$_->{rb} } @{ $p->{txns} })
		{
			$expected += scalar(paths_for($_->{type})) for grep { !$_->{exp} } @{ $tx->{events} };
		}
	}
	# The crash comes once this many requests arrived: somewhere in
	# delivery, while the clients may still be emitting.
	my $trigger = int($expected * (0.05 + 0.85 * rand()));

	my @h = map { start_client($_, 0) } @plans;
	# A victim for the "backend" kind when no client is left running.
	my $victim;
	if ($kind eq 'backend')
	{
		$victim = IPC::Run::start(
			[
				'psql', '-X', '-q',
				'-d', $node->connstr('postgres') . ' application_name=crash_victim',
				'-c', 'SELECT pg_sleep(600)'
			],
			'>', \my $vout, '2>', \my $verr);
	}

	# Wait for the trigger (or for delivery to run dry: then crash anyway).
	my $pos = $recv_offset;
	my $got = 0;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while ($got < $trigger && time() < $deadline)
	{
		$got += count_new_lines(\$pos);
		last if $got >= $trigger;
		usleep(10_000);
	}
	die "round $round: only $got of $trigger requests before the deadline" if $got < $trigger;

	# Crash.
	my ($t_crash, $victim_pid);
	if ($kind eq 'relay')
	{
		$victim_pid = $old_relay;
		$t_crash = time();
		kill 'KILL', $victim_pid;
	}
	elsif ($kind eq 'backend')
	{
		$victim_pid = $node->safe_psql('postgres', q{
SELECT pid FROM pg_stat_activity
 WHERE application_name IN ('crash_client', 'crash_victim') AND pid <> pg_backend_pid()
 ORDER BY application_name = 'crash_client' DESC, random() LIMIT 1});
		die "round $round: no backend to kill" unless $victim_pid;
		$t_crash = time();
		# A client may just have finished: then the victim it is.  Its
		# backend may also be exiting, or exited and not yet reaped: the
		# kill then succeeds and nothing crashes.  So the victim too, unless
		# the postmaster soon says the client's backend was killed.
		my $killed = kill 'KILL', $victim_pid;
		# (a "server process" up to 16, a "client backend" from 17)
		my $said = qr/(?:server process|client backend) \(PID $victim_pid\) was terminated by signal 9/;
		my $until = time() + 5;
		usleep(50_000) while $killed && time() < $until
		  && slurp_file($node->logfile, $log_offset) !~ $said;
		unless ($killed && slurp_file($node->logfile, $log_offset) =~ $said)
		{
			$victim_pid = $node->safe_psql('postgres',
				"SELECT pid FROM pg_stat_activity WHERE application_name = 'crash_victim'");
			$t_crash = time();
			kill 'KILL', $victim_pid or die "round $round: could not kill $victim_pid";
		}
	}
	else
	{
		$t_crash = time();
		$node->stop('immediate');
		$node->start;
	}
	# The clients lose their connections (or have finished).
	$_->finish for @h;
	$victim->finish if $victim;
	my @cut = grep { next_txn($_) < $txns_per_client } @plans;

	# Restarted: the relay runs again, and the crash was the kind intended.
	if ($kind ne 'immediate')
	{
		ok(log_wait(qr/all server processes terminated; reinitializing/, $log_offset),
			"round $round: the postmaster restarted the server processes");
	}
	relay_restarted($node, $old_relay)
	  or die "round $round: relay not running after the crash";
	# Right after the restart, no retry is due later than the schedule
	# allows ('1s' plus 20% jitter).
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM outbox.retries WHERE next_at > now() + interval '1.2 seconds'"),
		'0', "round $round: after the restart no retry is scheduled beyond the schedule");
	my $crash_log = slurp_file($node->logfile, $log_offset);
	my $evidence =
	    $kind eq 'relay' ? qr/background worker "outbox relay" \(PID $victim_pid\) was terminated by signal 9/
	  : $kind eq 'backend' ? qr/(?:server process|client backend) \(PID $victim_pid\) was terminated by signal 9/
	  :                      qr/received immediate shutdown request/;
	like($crash_log, $evidence, "round $round ($kind): the crash happened");

	# While the restarted relay catches up, endpoints stand at different
	# positions: the views' count of what each is owed (_unread_all(), each
	# distinct position read once) agrees with asking endpoint by endpoint.
	# (Once: asked by endpoint, it walks the events 300 times.)
	if ($round == 1)
	{
		is($node->safe_psql('postgres', q{
SELECT count(*) FILTER (WHERE (a.n, a.oldest) IS DISTINCT FROM (u.n, u.oldest))
  FROM outbox.endpoints ep
  JOIN outbox._unread_all() a ON a.endpoint_id = ep.id
  CROSS JOIN LATERAL outbox._unread(ep.id) u}),
			'0', "round $round: the views count what each endpoint is owed as _unread() does");
	}

	# The clients reconnect and go on after the transaction the crash cut
	# off (whose fate they do not know).
	@h = map { start_client($_, next_txn($_) + 1) } grep { next_txn($_) + 1 < $txns_per_client } @cut;
	$_->finish for @h;
	for my $p (@plans)
	{
		# Done, or the crash cut off its last transaction.
		die "client $p->{c} stopped at transaction " . next_txn($p) . ": $p->{err}"
		  if next_txn($p) < $txns_per_client - 1;
	}

	# Wait until everything owed is delivered and recorded.
	$node->poll_query_until('postgres', 'SELECT deliveries_waiting = 0 FROM outbox.backlog')
	  or die "round $round: backlog not empty";
	$node->poll_query_until('postgres',
		'SELECT count(*) = 0 FROM outbox._positions WHERE next_snap IS NOT NULL')
	  or diag "round $round: a batch is still open";

	# The relay was started once for this crash, and is still the one running.
	$crash_log = slurp_file($node->logfile, $log_offset);
	my @starts = $crash_log =~ /^(.*outbox relay started.*)$/mg;
	is(scalar(@starts), 1, "round $round ($kind): relay started once after the crash (no crash loop)")
	  or diag join("\n", @starts);
	my $t_relay = log_time($starts[0]);
	my $new_relay = relay_pid();
	like($new_relay, qr/^\d+$/, "round $round: relay running");
	# Errors logged by the relay, before the crash or after it.
	my @errors = $crash_log =~ /^\S+ \S+ \S+ \[(?:$old_relay|$new_relay)\] .*\b(?:ERROR|FATAL):.*$/mg;
	is(scalar(@errors), 0, "round $round: the relay logged no error") or diag join("\n", grep { defined } @errors[ 0 .. 4 ]);
	my $errors = @errors;

	# Nothing left in retry, no batch left open.
	is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.retries'),
		'0', "round $round: no retries left");
	is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox._positions WHERE next_snap IS NOT NULL'),
		'0', "round $round: no batch left open");

	# What the clients know: transactions whose COMMIT returned, and those
	# they rolled back.  A transaction whose COMMIT was cut off is in doubt.
	my (%acked, %planned_rb, %planned_commit, %ev_planned);
	for my $c (0 .. $n_clients - 1)
	{
		$acked{"$c.$_"} = 1 for $plans[$c]{out} =~ /^C (\d+)$/mg;
		for my $t (0 .. $#{ $plans[$c]{txns} })
		{
			my $tx = $plans[$c]{txns}[$t];
			($tx->{rb} ? \%planned_rb : \%planned_commit)->{"$c.$t"} = $tx;
			$ev_planned{ $_->{id} } = { %$_, tx => "$c.$t", rb => $tx->{rb} } for @{ $tx->{events} };
		}
	}

	# What committed: outbox.events of this round.
	my %db;    # webhook-id => event
	my %db_by_payload;
	for my $line (split /\n/, $node->safe_psql('postgres', qq{
SELECT event_id, event_type, payload->>'id', expires_at IS NOT NULL
  FROM outbox.events WHERE (payload->>'r')::int = $round}))
	{
		my ($eid, $type, $pid, $exp) = split /\|/, $line;
		$db{$eid} = { type => $type, id => $pid, exp => $exp eq 't' };
		$db_by_payload{$pid} = $eid;
	}
	# Deliveries recorded expired, by receiver path and webhook-id.
	my %expired = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', q{
SELECT '/' || a.endpoint || ' ' || a.event_id FROM outbox.attempts a WHERE a.error = 'expired'});

	my $phantom = 0;
	my @problems;
	# The database against the clients: every acknowledged commit is there
	# whole, nothing of a rolled-back or unplanned transaction is.
	my $lost_commits = 0;
	for my $tx (keys %acked)
	{
		my ($c, $t) = split /\./, $tx;
		for my $e (@{ $plans[$c]{txns}[$t]{events} })
		{
			next if $db_by_payload{ $e->{id} };
			$lost_commits++;
			push @problems, "acknowledged commit $round.$tx: event $e->{id} not in outbox.events";
		}
	}
	for my $e (values %db)
	{
		my $p = $ev_planned{ $e->{id} };
		next if $p && !$p->{rb} && $p->{type} eq $e->{type};
		$phantom++;
		push @problems, "outbox.events holds $e->{id}, which was rolled back or never planned";
	}
	# A transaction whose COMMIT did not return (cut off by the crash, at
	# COMMIT or before) is in doubt: all of it committed or none.
	my $indoubt_committed = 0;
	for my $tx (grep { !$acked{$_} } keys %planned_commit)
	{
		my @ev = @{ $planned_commit{$tx}{events} };
		my $n = grep { $db_by_payload{ $_->{id} } } @ev;
		$indoubt_committed++ if $n;
		next if $n == 0 || $n == @ev;
		$phantom++;
		push @problems, "transaction $round.$tx committed only $n of " . scalar(@ev) . ' events';
	}

	# The receiver's log for this round.
	my (%n, %first, %last);
	my $requests = 0;
	{
		open(my $fh, '<', $log) or die;
		seek($fh, $recv_offset, 0);
		while (my $line = <$fh>)
		{
			chomp $line;
			next if $line eq '';
			my $r = eval { decode_json($line) } or next;
			my $eid = $r->{headers}{'webhook-id'} // '';
			my $body = eval { $json->decode($r->{body}) } // {};
			my $data = $body->{data} // {};
			next unless ($data->{r} // -1) == $round;    # not ours
			$requests++;
			my $e = $db{$eid};
			if (!$e || $e->{id} ne ($data->{id} // '') || $data->{rb}
				|| !subscribed_at($r->{path}, $e->{type}))
			{
				$phantom++;
				push @problems, "received $eid at $r->{path} (payload id "
				  . ($data->{id} // '?') . '): not a committed event subscribed there';
				next;
			}
			my $k = "$r->{path} $eid";
			$n{$k}++;
			# The receiver logs a request when it answers, so the log's
			# order is not the order of receipt: take the earliest and the
			# latest receipt.
			$first{$k} = $r->{t} if !defined $first{$k} || $r->{t} < $first{$k};
			$last{$k} = $r->{t} if !defined $last{$k} || $r->{t} > $last{$k};
		}
		close $fh;
	}

	# Lost: a committed event missing at an endpoint subscribed to it.  One
	# emitted expired must not arrive, and must be recorded expired there.
	my ($lost, $deliveries, $n_expired) = (0, 0, 0);
	for my $eid (keys %db)
	{
		for my $path (paths_for($db{$eid}{type}))
		{
			if ($db{$eid}{exp})
			{
				$n_expired++;
				if ($n{"$path $eid"})
				{
					$phantom++;
					push @problems, "expired: $db{$eid}{id} ($eid) was sent to $path";
				}
				elsif (!$expired{"$path $eid"})
				{
					$lost++;
					push @problems, "lost: $db{$eid}{id} ($eid), expired, is not recorded expired at $path";
				}
				next;
			}
			$deliveries++;
			next if $n{"$path $eid"};
			$lost++;
			push @problems, "lost: $db{$eid}{id} ($eid) never reached $path";
		}
	}

	# Duplicates: each must be a resend by the restarted relay of a request
	# first received in the window before the crash (or on the wire at it).
	# A request on the wire at the crash may be read by a busy receiver
	# after the new relay started (CI saw 0.3 s), so the copies are also
	# counted against the attempt log: every request the new relay sent is
	# an attempt it recorded (at the record's commit, after it started), so
	# at most one copy may lack one (the old relay's, unrecorded), and the
	# new relay sends an event once.
	my %new_attempts = map { split /\|/ } split /\n/, $node->safe_psql('postgres', sprintf(q{
SELECT '/' || endpoint || ' ' || event_id, count(*) FROM outbox.attempts
 WHERE at >= to_timestamp(%.3f) GROUP BY 1}, $t_relay));
	my ($dup, $outside, $max_age) = (0, 0, 0);
	for my $k (grep { $n{$_} > 1 } keys %n)
	{
		$dup += $n{$k} - 1;
		my $age = $t_crash - $first{$k};
		$max_age = $age if $age > $max_age;
		my $new = $new_attempts{$k} // 0;
		if ($age > $window || $last{$k} < $t_relay - 0.05 || $new > 1 || $n{$k} - $new > 1)
		{
			$outside++;
			push @problems, sprintf(
				'duplicate %s (%d times, %d recorded by the new relay) outside the window: first %.3f s before the crash, last %.3f s after the relay restarted',
				$k, $n{$k}, $new, $age, $last{$k} - $t_relay);
		}
	}
	{
		my @d = grep { $n{$_} > 1 } keys %n;
		my @ages = sort { $a <=> $b } map { sprintf('%.0f', ($t_crash - $first{$_}) * 1000) } @d;
		my %mult; $mult{ $n{$_} }++ for @d;
		note "duplicates: keys " . scalar(@d) . " mult " . join(',', map {"$_:$mult{$_}"} sort keys %mult) . " ages(ms) " . join(' ', @ages[0..($#ages<40?$#ages:40)]) . " relay restart after " . sprintf('%.3f', $t_relay - $t_crash);
	}
	# Requests that were on the wire at the crash: received after it and
	# before the new relay started.
	my $in_flight = grep { $first{$_} >= $t_crash && $first{$_} < $t_relay } keys %first;

	diag sprintf(
		"round %d (%s): crash after %d of ~%d requests%s; %d events (%d in-doubt committed), %d deliveries, %d expired, %d requests; "
		  . "lost %d, phantom %d, duplicates %d (oldest first receipt %.0f ms before the crash), %d on the wire at the crash, relay errors %d",
		$round, $kind, $trigger, $expected, @cut ? ', ' . scalar(@cut) . ' clients cut off' : '',
		scalar(keys %db), $indoubt_committed, $deliveries, $n_expired, $requests, $lost, $phantom, $dup, $max_age * 1000,
		$in_flight, $errors);
	diag $_ for @problems[ 0 .. ($#problems < 9 ? $#problems : 9) ];

	is($lost_commits, 0, "round $round: every acknowledged commit is in outbox.events");
	is($lost, 0, "round $round: every committed event reached every endpoint subscribed to it, or was recorded expired there");
	cmp_ok($n_expired, '>', 0, "round $round: some deliveries expired");
	is($phantom, 0, "round $round: no rolled-back, cut-off or unsubscribed event arrived");
	is($outside, 0, "round $round: every duplicate lies in the documented window");
	cmp_ok(scalar(keys %db), '>', 0, "round $round: events were committed");

	$total{rounds}++;
	$total{events} += keys %db;
	$total{deliveries} += $deliveries;
	$total{lost} += $lost;
	$total{phantom} += $phantom;
	$total{dup} += $dup;
	$total{in_flight} += $in_flight;
	$total{indoubt_committed} += $indoubt_committed;
	$total{max_dup_age} = $max_age if $max_age > $total{max_dup_age};
	$by_kind{$kind}{rounds}++;
	$by_kind{$kind}{dup} += $dup;
}

diag sprintf(
	'crash summary: %d rounds (%s), %d events checked (%d deliveries), lost %d, phantom %d, '
	  . 'duplicates %d (oldest first receipt %.0f ms before its crash; %d requests on the wire at the crashes), seed %d, %.0f s',
	$total{rounds},
	join(', ', map { "$by_kind{$_}{rounds} $_" } sort keys %by_kind),
	$total{events}, $total{deliveries}, $total{lost}, $total{phantom}, $total{dup},
	$total{max_dup_age} * 1000, $total{in_flight}, $seed, time() - $t_start);

$node->stop;
$receiver->kill_kill;
done_testing();
