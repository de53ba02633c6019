# Retention by rotation (outbox--1.0--1.1.sql, outbox._rotate()), with
# every retention period at 4s.
#
# Part 1: under steady load for several periods (events emitted and marked
# processed in the inbox, delivered to one endpoint), the events, the
# attempt log and the inbox stay bounded: rotation happens, no row outlives
# one and a half periods (plus the relay's once-a-second check), no event
# goes before one period, and nothing is lost.
# Part 2: a paused endpoint keeps what it is owed across several periods;
# the events rotation waits for it (the attempt log and the inbox do not)
# and health() warns; resume_endpoint() delivers all of it.
# Part 3: an endpoint disabled by a 410 for longer than outbox.retention
# gives its backlog up to rotation, and the events tables that had grown
# behind it shrink again.
# Throughout, the partitions are emptied by TRUNCATE only: no dead tuples,
# no row deleted or updated.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util qw(max min);
use Time::HiRes qw(time usleep);

my $retention = 4;    # seconds: outbox.retention, attempt_retention, inbox_retention
# The relay looks for a slot to rotate once a second, so a half period
# lasts up to a second longer than retention / 2: rows live at most
# 1.5 * retention plus three such seconds, and one more for the sampling.
my $max_age = 1.5 * $retention + 4;
my $per_batch = 25;    # events per load transaction, one about every 100ms

my $t_start = time();
my $node = outbox_node('retention', conf => qq{
outbox.retention = '${retention}s'
outbox.attempt_retention = '${retention}s'
outbox.inbox_retention = '${retention}s'
});
my ($url, $log, $receiver) = start_receiver();

# One session for the test's queries, one that emits the load.
my $mon = $node->background_psql('postgres');
$mon->set_query_timer_restart;
# (queries through it: monitor(); OutboxTest's sql() connects anew each time)
sub monitor { return $mon->query_safe($_[0]); }

# What rotation does takes a few half periods: waiting for it ten whole
# periods is generous, and a failure does not wait out the TAP timeout.
my $patience = 10 * $retention;

# Poll $query until it returns $expected ('t' by default).
sub poll_sql
{
	my ($query, $expected) = @_;
	$expected //= 't';
	my $deadline = time() + $patience;
	my $got;
	while (time() < $deadline)
	{
		$got = monitor($query);
		return 1 if $got eq $expected;
		usleep(100_000);
	}
	diag("still $got, not $expected, after ${patience}s: $query");
	return 0;
}

$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
  or die 'relay did not start';

############################################################################
# What the receiver got, read incrementally: the receiver's log grows by
# ten thousand requests, too many to decode whole at every look.
############################################################################

my %got;    # path => { webhook-id => times received }
my ($log_pos, $log_rest) = (0, '');

sub read_receiver
{
	open(my $fh, '<', $log) or return;
	seek($fh, $log_pos, 0);
	my $new = do { local $/; <$fh> } // '';
	close $fh;
	$log_pos += length($new);
	my @lines = split /\n/, $log_rest . $new, -1;
	$log_rest = pop @lines;    # a line not yet written whole
	for (@lines)
	{
		my ($path) = /"path": "([^"]*)"/;
		my ($id) = /"webhook-id": "([^"]*)"/;
		$got{$path}{$id}++ if defined $path && defined $id;
	}
	return;
}

# Wait until every one of @ids arrived at $path.
sub wait_arrived
{
	my ($path, @ids) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		read_receiver();
		return 1 unless grep { !$got{$path}{$_} } @ids;
		usleep(100_000);
	}
	return 0;
}

############################################################################
# Samples: sizes, ages and rotation state, about twice a second.
############################################################################

sub partitions
{
	my ($tbl) = @_;
	return "(SELECT sum(pg_total_relation_size(format('outbox.${tbl}_%s', s)::regclass)) FROM generate_series(0, 2) s)";
}

my $kept = $retention - 0.5;    # everything younger than this must still be there
my $sample_sql = join(",\n", 'SELECT ' . partitions('events'),
	partitions('attempt_log'),
	partitions('inbox'),
	'(SELECT count(*) FROM outbox.events)',
	'(SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) FROM outbox.events)',
	'(SELECT coalesce(extract(epoch FROM now() - min(at)), 0) FROM outbox.attempt_log)',
	'(SELECT coalesce(extract(epoch FROM now() - min(processed_at)), 0) FROM outbox.inbox)',
	# Events and inbox rows of the load gone before one retention period.
	"(SELECT count(*) FROM load_ids l WHERE l.at > now() - interval '$kept s'
	    AND NOT EXISTS (SELECT 1 FROM outbox.events e WHERE e.event_id = l.id))",
	"(SELECT count(*) FROM load_ids l WHERE l.at > now() - interval '$kept s'
	    AND NOT EXISTS (SELECT 1 FROM outbox.inbox i WHERE i.consumer = 'load' AND i.message_id = l.id::text))",
	q{(SELECT sum(n_dead_tup) FROM pg_stat_user_tables
	    WHERE schemaname = 'outbox' AND relname ~ '^events_[0-2]$')},
	q{(SELECT status FROM outbox.health() WHERE check_name = 'events rotation')},
	q{(SELECT string_agg(tbl || '=' || slot || '@' || extract(epoch FROM opened_at), ' ' ORDER BY tbl)
	     FROM outbox.rotation WHERE current)});
my @fields = qw(events attempt_log inbox event_rows events_age attempt_log_age inbox_age
  early_events early_inbox dead_tup health rotation);

my @samples;
my $phase = 'setup';
my $t0;    # start of the load
my %rot;   # table => { cur => "slot@opened_at", n => rotations seen }

sub sample
{
	my %s;
	@s{@fields} = split /\|/, monitor($sample_sql);
	$s{t} = time() - ($t0 // $t_start);
	$s{phase} = $phase;
	for (split / /, $s{rotation})
	{
		my ($tbl, $cur) = split /=/;
		$rot{$tbl}{n}++ if defined $rot{$tbl}{cur} && $rot{$tbl}{cur} ne $cur;
		$rot{$tbl}{cur} = $cur;
	}
	push @samples, \%s;
	return \%s;
}

# Sample until $done->(sample) holds; false after $timeout seconds.
sub sample_until
{
	my ($timeout, $done) = @_;
	my $deadline = time() + $timeout;
	while (1)
	{
		my $next = time() + 0.5;
		return 1 if $done->(sample());
		return 0 if time() > $deadline;
		my $wait = $next - time();
		usleep(int($wait * 1e6)) if $wait > 0;
	}
}

sub kb { return sprintf('%.0f', $_[0] / 1024); }

############################################################################
# Part 1: steady load.
############################################################################

# The load's endpoint; another one, subscribed to nothing emitted, must
# not hold rotation up.
monitor("SELECT outbox.create_endpoint('load', '$url/load', '{t.load}')");
monitor("SELECT outbox.create_endpoint('idle', '$url/idle', '{t.none}')");
monitor(q{
CREATE TABLE load_ctl (stop boolean NOT NULL);
INSERT INTO load_ctl VALUES (false);
CREATE TABLE load_ids (id uuid PRIMARY KEY, at timestamptz NOT NULL);
CREATE INDEX ON load_ids (at);
});

# Every ~100ms a transaction emits $per_batch events and marks them
# processed, until told to stop (or after 10 minutes).  The
# pause comes first, so that each transaction's now() (the events'
# created_at) is when it writes.
my $gen = $node->background_psql('postgres', timeout => 600);
$gen->query_until(qr/load started/, qq{\\echo load started
DO \$\$
BEGIN
	WHILE NOT (SELECT stop FROM load_ctl)
	      AND clock_timestamp() < statement_timestamp() + interval '10 min' LOOP
		PERFORM pg_sleep(0.1);
		COMMIT;
		INSERT INTO load_ids (id, at)
		SELECT outbox.emit('t.load', jsonb_build_object('n', g)), now()
		  FROM generate_series(1, $per_batch) g;
		PERFORM outbox.mark_processed('load', l.id) FROM load_ids l WHERE l.at = now();
		COMMIT;
	END LOOP;
END
\$\$;
});
$t0 = time();
$phase = 'load';
sample();
$_->{n} = 0 for values %rot;

my $rotations = 12;    # half periods: six retention periods
ok( sample_until(
		$patience + $rotations * $retention / 2,
		sub { min(map { $rot{$_}{n} // 0 } qw(events attempt_log inbox)) >= $rotations }),
	"load: events, attempt log and inbox each rotated $rotations times");
diag(sprintf('load: rotations %s after %.1fs',
	join(', ', map { "$_ $rot{$_}{n}" } sort keys %rot), time() - $t0));

my @load = grep { $_->{phase} eq 'load' } @samples;
my $load_end = $load[-1]{t};
my $emitted = monitor('SELECT count(*) FROM load_ids');
diag(sprintf('load: %d events emitted in %.1fs (%.0f/s)', $emitted, $load_end, $emitted / $load_end));

# The figures, per retention period: the largest of each table.
diag('period  events kB  rows  attempt_log kB  inbox kB  oldest event s');
for my $p (0 .. int($load_end / $retention))
{
	my @in = grep { int($_->{t} / $retention) == $p } @load;
	next unless @in;
	diag(sprintf('%6d %10s %5d %15s %9s %15.1f', $p,
		kb(max(map { $_->{events} } @in)),
		max(map { $_->{event_rows} } @in),
		kb(max(map { $_->{attempt_log} } @in)),
		kb(max(map { $_->{inbox} } @in)),
		max(map { $_->{events_age} } @in)));
}

my %load_max;
for my $tbl (qw(events attempt_log inbox))
{
	my $first = max(map { $_->{$tbl} } grep { $_->{t} < 2 * $retention } @load);
	my $last = max(map { $_->{$tbl} } grep { $_->{t} >= $load_end - 2 * $retention } @load);
	$load_max{$tbl} = max(map { $_->{$tbl} } @load);
	cmp_ok($last, '<=', 2 * $first,
		"load: $tbl in the last two periods (" . kb($last) . ' kB) within twice the first two (' . kb($first) . ' kB)');
	my $oldest = max(map { $_->{"${tbl}_age"} } @load);
	cmp_ok($oldest, '<=', $max_age, "load: no $tbl row older than ${max_age}s (oldest seen ${oldest}s)");
	cmp_ok($oldest, '>=', $kept, "load: $tbl rows are kept a retention period (oldest seen ${oldest}s)");
}
is(max(map { $_->{early_events} + $_->{early_inbox} } @load), 0,
	'load: no event or inbox row went before one retention period');
is(monitor("SELECT count(*) FROM outbox.events WHERE created_at < now() - interval '$max_age s'"), '0',
	"load: no event older than ${max_age}s remains");

############################################################################
# Part 2: a paused endpoint holds the events rotation.
############################################################################

# Created paused, so that the relay never sees them active.  "gone"
# answers 410: it is for part 3.
monitor(qq{
BEGIN;
SELECT outbox.create_endpoint('paused', '$url/paused', '{t.paused}');
SELECT outbox.pause_endpoint('paused');
SELECT outbox.create_endpoint('gone', '$url/gone?status=410', '{t.gone}');
SELECT outbox.pause_endpoint('gone');
COMMIT;
});
my @owed = split /\n/, monitor(q{
BEGIN;
SELECT outbox.emit('t.paused', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
SELECT outbox.emit('t.gone', jsonb_build_object('n', g)) FROM generate_series(1, 20) g;
COMMIT;
});
my @paused_ids = @owed[0 .. 4];
my @gone_ids = @owed[5 .. 24];
my $owed_list = join(',', map { "'$_'" } @owed);
my $paused_at = time();
$phase = 'paused';
my %rot_before = map { $_ => $rot{$_}{n} } keys %rot;

my (%owed_seen, $warned, $held_cur);
ok( sample_until(
		$patience,
		sub {
			my ($s) = @_;
			$owed_seen{ monitor(qq{
				SELECT (SELECT count(*) FROM outbox.events WHERE event_id IN ($owed_list)) || ' '
				    || (SELECT string_agg(name || ':' || events_waiting, ' ' ORDER BY name)
				          FROM outbox.endpoint_status WHERE name IN ('paused', 'gone'))}) }++;
			if ($s->{health} eq 'warning' && !$warned)
			{
				$warned = time() - $paused_at;
				$held_cur = $rot{events}{cur};
			}
			return $warned && time() - $paused_at >= 4 * $retention;
		}),
	'paused: health() warns about the events rotation');
diag(sprintf('paused: warning %.1fs after the events were emitted; held for %.1fs', $warned // -1,
	time() - $paused_at));
is(join(', ', sort keys %owed_seen), '25 gone:20 paused:5',
	'paused: across four periods every owed event is kept and counted waiting');
is($rot{events}{cur}, $held_cur, 'paused: the events rotation does not move once it warned');
cmp_ok(min(map { $rot{$_}{n} - $rot_before{$_} } qw(attempt_log inbox)), '>=', 4,
	'paused: the attempt log and the inbox rotate on');
like(monitor(q{SELECT detail FROM outbox.health() WHERE check_name = 'events rotation'}),
	qr/past outbox\.retention \(00:00:04\).*paused/, 'paused: health() says why');
read_receiver();
ok(!$got{'/paused'} && !$got{'/gone'}, 'paused: nothing was sent to the paused endpoints');
my $paused_peak = max(map { $_->{events} } grep { $_->{phase} eq 'paused' } @samples);
diag('paused: events tables grew to ' . kb($paused_peak) . ' kB (' . kb($load_max{events})
	  . ' kB at most under load)');

############################################################################
# Part 3: an endpoint disabled by a 410 gives its backlog up.
############################################################################

$phase = 'disabled';
monitor("SELECT outbox.resume_endpoint('gone')");
ok(poll_sql("SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'gone'"),
	'disabled: the 410 disabled the endpoint');
my @late_ids = split /\n/,
  monitor(q{SELECT outbox.emit('t.gone', jsonb_build_object('late', g)) FROM generate_series(1, 10) g});
my $gone_list = join(',', map { "'$_'" } @gone_ids, @late_ids);

# The paused endpoint gets all it is owed.
monitor("SELECT outbox.resume_endpoint('paused')");
ok(wait_arrived('/paused', @paused_ids), 'paused: resume_endpoint delivers every waiting event');
is(scalar(keys %{ $got{'/paused'} }), 5, 'paused: and nothing else');

# Before outbox.retention has passed, the backlog is kept.
ok(poll_sql(q{
	SELECT events_waiting = 30 OR backlog_dropped > 0 FROM outbox.endpoint_status WHERE name = 'gone'}),
	'disabled: the 20 events that met the 410 and the 10 emitted since wait');

my $dropped;
ok( sample_until(
		$patience,
		sub {
			$dropped = monitor(q{SELECT backlog_dropped FROM outbox.endpoint_status WHERE name = 'gone'});
			return $dropped > 0;
		}),
	'disabled: rotation dropped the backlog');
is($dropped, 30, 'disabled: backlog_dropped counts the 30 events given up');
is( monitor(q{
	SELECT state || ' ' || events_waiting || ' ' || (backlog_dropped_at - disabled_at >= interval '4 s')
	  FROM outbox.endpoint_status WHERE name = 'gone'}),
	'disabled 0 true',
	'disabled: still disabled, nothing waiting, given up no sooner than outbox.retention after the 410');
ok($node->log_contains(qr/outbox: endpoint "gone", disabled since [^,]+, gave up 30 waiting events to rotation/),
	'disabled: the release is logged');
my $hold_peak = max(map { $_->{events} } grep { $_->{phase} ne 'load' } @samples);
cmp_ok($hold_peak, '>=', 1.5 * $load_max{events},
	'disabled: the events tables had grown behind the held rotation (' . kb($hold_peak) . ' kB)');

my $released_at = time();
$phase = 'released';
ok(sample_until($patience, sub { $_[0]{events} <= 1.25 * $load_max{events} }),
	'released: the events tables shrink back to their size under load');
diag(sprintf('released: events tables %s kB after %.1fs (peak %s kB, %s kB at most under load)',
	kb($samples[-1]{events}), time() - $released_at, kb($hold_peak), kb($load_max{events})));

# While the events waited, the attempt log and the inbox kept their
# retention; and at no time did anything go early.
my @held = grep { $_->{phase} ne 'load' } @samples;
my $oldest_held = max(map { ($_->{attempt_log_age}, $_->{inbox_age}) } @held);
cmp_ok($oldest_held, '<=', $max_age,
	"held: no attempt log or inbox row older than ${max_age}s (oldest seen ${oldest_held}s)");
is(max(map { $_->{early_events} + $_->{early_inbox} } @held), 0,
	'held: no event or inbox row went before one retention period');
ok(poll_sql(qq{SELECT count(*) = 0 FROM outbox.events WHERE event_id IN ($owed_list, $gone_list)}),
	'released: the delivered and the given-up events are rotated away');
ok(poll_sql(q{SELECT status FROM outbox.health() WHERE check_name = 'events rotation'}, 'ok'),
	'released: health() no longer warns about the events rotation');

############################################################################
# The end: nothing of the load lost; rotation by TRUNCATE only.
############################################################################

monitor('UPDATE load_ctl SET stop = true');
$gen->quit;
is($gen->{stderr}, '', 'the load ran without error');
$emitted = monitor('SELECT count(*) FROM load_ids');
my @load_ids = split /\n/, $node->safe_psql('postgres', 'SELECT id FROM load_ids');
ok(wait_arrived('/load', @load_ids), "every one of the $emitted events of the load arrived");
my $dups = grep { $got{'/load'}{$_} > 1 } keys %{ $got{'/load'} };
diag("load: $emitted emitted, " . scalar(keys %{ $got{'/load'} }) . " distinct received, $dups more than once");
is(scalar(grep { !$got{'/load'}{$_} } @load_ids), 0, 'no event of the load lost');

is(max(map { $_->{dead_tup} } @samples), 0, 'no dead tuples in the events partitions at any sample');
# The counters of every emitting transaction reach the statistics.
ok($node->poll_query_until('postgres', qq{
	SELECT sum(n_tup_ins) >= $emitted + 35 FROM pg_stat_user_tables
	 WHERE schemaname = 'outbox' AND relname ~ '^events_[0-2]\$'}),
	'statistics count every event inserted');
is( monitor(q{
	SELECT string_agg(format('%s: %s updated, %s deleted, %s dead', relname, n_tup_upd, n_tup_del, n_dead_tup),
	                  ', ' ORDER BY relname)
	  FROM pg_stat_user_tables
	 WHERE schemaname = 'outbox' AND relname ~ '^(events|attempt_log|inbox)_[0-2]$'
	   AND n_tup_upd + n_tup_del + n_dead_tup > 0}),
	'', 'no row of a rotated partition was ever updated or deleted, none is dead');

diag(sprintf('run time %.1fs', time() - $t_start));
$mon->quit;
$node->stop;
$receiver->kill_kill;
done_testing();
