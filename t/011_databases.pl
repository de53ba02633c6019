# A relay in every database: the launcher starts one per database where
# outbox is installed, each delivers its own database's events; CREATE
# EXTENSION starts one without a restart and DROP EXTENSION ends it for good
# (no crash loop); DROP DATABASE, ALTER DATABASE RENAME and SET TABLESPACE
# and CREATE DATABASE ... TEMPLATE stop the relay instead of failing on it,
# and the relay comes back; a killed relay is started again; outbox.database
# (one name or a list) limits the databases served at a reload; an outbox
# of an older version gets no relay until it is updated; outbox.max_relays
# too small warns.
#
# The postmaster logs at DEBUG1 when it starts a background worker and
# when it forgets one that has exited: that is how a relay that starts and
# leaves at once (a database without outbox) is seen, and counted.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use JSON::PP;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = outbox_node('databases', conf => q{
log_min_messages = debug1
max_worker_processes = 16
outbox.max_relays = 12
});
my ($url, $log, $receiver) = start_receiver();
my $json = JSON::PP->new;
my $postmaster_started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

# The databases with a running relay, as "db db ...", from relay_stats.
sub relay_dbs
{
	return $node->safe_psql('postgres',
		q{SELECT coalesce(string_agg(database, ' ' ORDER BY database), '') FROM outbox.relay_stats});
}

# Emit $n events of $type in $db; each payload names the database it
# came from.  Returns the event ids.
sub emit_in
{
	my ($db, $type, $n) = @_;
	return split /\n/, $node->safe_psql($db, qq{
SELECT outbox.emit('$type', jsonb_build_object('db', current_database(), 'i', i))
  FROM generate_series(1, $n) i});
}

# The requests received at a path: [webhook-id, receive time, payload].
sub got_at
{
	my ($path) = @_;
	return map { [ $_->{headers}{'webhook-id'}, $_->{t}, $json->decode($_->{body})->{data} ] }
	  grep { $_->{path} eq $path } received($log);
}

# The 'relay running' row of health() in a database: "status | detail".
sub relay_health
{
	my ($db) = @_;
	return $node->safe_psql($db,
		"SELECT status || ' | ' || detail FROM outbox.health() WHERE check_name = 'relay running'");
}

# Lines of the server log from an offset that match a pattern.
sub log_lines
{
	my ($re, $offset) = @_;
	return grep { /$re/ } split /\n/, slurp_file($node->logfile, $offset);
}

########################################################################
# The launcher, and the relay of database postgres.
########################################################################

like(slurp_file($node->logfile), qr/LOG:  outbox launcher started/, 'launcher logged its start');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox launcher' AND datname IS NULL"),
	'1', 'one launcher, connected to no database');
$node->safe_psql('postgres', "SELECT outbox.create_endpoint('pg', '$url/postgres', '{db.*}')");
my @pg1 = emit_in('postgres', 'db.event', 3);
ok(wait_received($log, got_all('/postgres', @pg1)), 'postgres: its events delivered');

########################################################################
# A fresh database: once the launcher has looked there and found no
# outbox, only CREATE EXTENSION (its wake at commit) can start a relay.
########################################################################

my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE DATABASE db1');
# A reload wakes the launcher, which reads pg_database at once.
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
ok(log_wait(qr/DEBUG:  unregistering background worker "outbox relay for db1"/, $offset),
	'db1 without outbox: its relay started and left at once');
is(scalar(log_lines(qr/outbox relay started for database "db1"/, $offset)), 0,
	'... without logging a start');

$offset = -s $node->logfile;
my $t0 = time();
$node->safe_psql('db1', qq{
CREATE EXTENSION outbox;
SELECT outbox.create_endpoint('db1', '$url/db1', '{db.*}');});
my @db1 = emit_in('db1', 'db.event', 3);
ok(wait_received($log, got_all('/db1', @db1)), 'db1: events delivered after CREATE EXTENSION');
my $took = time() - $t0;
note sprintf('CREATE EXTENSION to delivery in db1: %.2f s', $took);
cmp_ok($took, '<', 5, 'db1 delivery started within seconds of CREATE EXTENSION');
ok(log_wait(qr/LOG:  outbox relay started for database "db1"/, $offset), 'relay for db1 logged its start');
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$postmaster_started, 'no server restart');

# More events in both, at once; each endpoint gets its own database's.
push @pg1, emit_in('postgres', 'db.event', 5);
push @db1, emit_in('db1', 'db.event', 5);
ok(wait_received($log, got_all('/postgres', @pg1)), 'postgres: second round delivered');
ok(wait_received($log, got_all('/db1', @db1)), 'db1: second round delivered');
$node->poll_query_until('postgres',
	q{SELECT events_waiting = 0 AND in_retry = 0 FROM outbox.endpoint_status WHERE name = 'pg'})
  or die 'postgres not settled';
$node->poll_query_until('db1',
	q{SELECT events_waiting = 0 AND in_retry = 0 FROM outbox.endpoint_status WHERE name = 'db1'})
  or die 'db1 not settled';
for my $case ([ 'postgres', \@pg1 ], [ 'db1', \@db1 ])
{
	my ($db, $ids) = @$case;
	my @got = got_at("/$db");
	is_deeply([ sort map { $_->[0] } @got ], [ sort @$ids ],
		"$db: its endpoint received exactly its own events, each once");
	is_deeply([ sort { $a cmp $b } keys %{ { map { $_->[2]{db} => 1 } @got } } ], [$db],
		"$db: every payload says it came from $db");
}

# relay_stats, from either database: both relays, the pids and databases
# of pg_stat_activity, and what each delivered.
for my $db ('postgres', 'db1')
{
	is( $node->safe_psql($db, q{
SELECT string_agg(format('%s:%s', s.database, s.deliveries), ' ' ORDER BY s.database)
  FROM outbox.relay_stats s
  JOIN pg_stat_activity a ON a.pid = s.pid AND a.datname = s.database
                         AND a.backend_type = 'outbox relay' AND a.application_name = 'outbox relay'}),
		'db1:8 postgres:8', "relay_stats seen from $db: both relays and their deliveries");
	like(relay_health($db), qr/^ok \| /, "health() in $db: relay running ok");
}

########################################################################
# An outbox of version 1.0 gets no relay (the relay says why), and more
# databases with outbox for the database commands below.
########################################################################

my $version = outbox_version();
$offset = -s $node->logfile;
$node->safe_psql('postgres', 'CREATE DATABASE v10');
$node->safe_psql('v10', qq{
CREATE EXTENSION outbox VERSION '1.0';
SELECT outbox.create_endpoint('v10', '$url/v10');});
my @v10 = emit_in('v10', 'db.event', 2);
my %ep_of = (dropme => 'dropme', renme => 'ren', tmpl => 'tmpl', movedb => 'movedb', limited => 'limited',
	failed => 'failed');
for my $db (sort keys %ep_of)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	# Each commits a launch request: the launcher looks at v10 again too.
	$node->safe_psql($db, qq{
CREATE EXTENSION outbox;
SELECT outbox.create_endpoint('$ep_of{$db}', '$url/$ep_of{$db}', '{$ep_of{$db}.*}');});
}
ok( log_wait(
		qr/WARNING:  outbox relay does not serve database "v10": its outbox is version 1\.0, this library serves \Q$version\E\n/,
		$offset),
	'v10: the relay warned that its outbox is version 1.0');
my %first;
for my $db (sort keys %ep_of)
{
	$first{$db} = [ emit_in($db, "$ep_of{$db}.before", 2) ];
	ok(wait_received($log, got_all("/$ep_of{$db}", @{ $first{$db} })), "$db: events delivered");
}
# (v10's relay shows for the moment between its start and its look.)
ok( $node->poll_query_until('postgres', q{
SELECT string_agg(database, ' ' ORDER BY database) = 'db1 dropme failed limited movedb postgres renme tmpl'
  FROM outbox.relay_stats}),
	"relay_stats: a relay in each database with outbox $version, none in v10");

########################################################################
# From here until CREATE EXTENSION commits again nothing asks the launcher
# to look for outbox: DROP EXTENSION must end db1's relay for good, and
# v10 must stay without one.  The database commands run meanwhile.
########################################################################

# A killed relay is started again, after a pause.
my $pg_pid = relay_pid('postgres');
my $t_kill = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pg_pid)");
my @pg_down = emit_in('postgres', 'db.event', 2);

$offset = -s $node->logfile;
my $db1_pid = relay_pid('db1');
$node->safe_psql('db1', 'DROP EXTENSION outbox');
ok(log_wait(qr/LOG:  outbox relay leaves database "db1": outbox is not installed there/, $offset),
	'db1: the relay left after DROP EXTENSION');
my $t_left = time();
my $after_leave = -s $node->logfile;
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $db1_pid")
  or die 'relay of db1 did not exit';
unlike(relay_dbs(), qr/\bdb1\b/, 'db1 no longer in relay_stats');

# DROP DATABASE with its relay running: quick, and the relay is gone.
my $drop_pid = relay_pid('dropme');
ok($drop_pid, 'dropme has a relay');
my $t = time();
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE dropme');
my $drop_took = time() - $t;
is($rc, 0, 'DROP DATABASE of a database with a running relay succeeds') or diag $err;
unlike($err, qr/being accessed by other users/, '... without "being accessed by other users"');
note sprintf('DROP DATABASE took %.2f s', $drop_took);
cmp_ok($drop_took, '<', 4, 'DROP DATABASE did not wait for the relay (under 4 s)');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $drop_pid"),
	'0', 'the relay of the dropped database is gone');
like(slurp_file($node->logfile, $after_leave), qr/\[$drop_pid\] .*LOG:  outbox relay stopping/,
	'it logged "outbox relay stopping"');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_database WHERE datname = 'dropme'"),
	'0', 'dropme is gone');

# ALTER DATABASE RENAME: quick; the relay comes back under the new name
# and delivers what was emitted while it was away.
my $ren_pid = relay_pid('renme');
$t = time();
($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE renme RENAME TO renamed');
my $ren_took = time() - $t;
is($rc, 0, 'ALTER DATABASE RENAME of a database with a running relay succeeds') or diag $err;
cmp_ok($ren_took, '<', 4, 'RENAME did not wait for the relay (under 4 s)');
my $t_renamed = time();
my @ren_away = emit_in('renamed', 'ren.away', 2);

# CREATE DATABASE ... TEMPLATE: quick; the copy gets a relay of its own.
my $tmpl_pid = relay_pid('tmpl');
$t = time();
($rc, $out, $err) = $node->psql('postgres', 'CREATE DATABASE copy TEMPLATE tmpl');
my $copy_took = time() - $t;
is($rc, 0, 'CREATE DATABASE TEMPLATE of a database with a running relay succeeds') or diag $err;
cmp_ok($copy_took, '<', 4, 'CREATE DATABASE TEMPLATE did not wait for the relay (under 4 s)');
$node->safe_psql('copy', qq{SELECT outbox.create_endpoint('copy', '$url/copy', '{copy.*}')});
my @copy = emit_in('copy', 'copy.event', 2);
my @tmpl_away = emit_in('tmpl', 'tmpl.away', 2);

# ALTER DATABASE SET TABLESPACE: quick; the relay comes back.
my $tsdir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', "CREATE TABLESPACE ts LOCATION '$tsdir'");
my $move_pid = relay_pid('movedb');
$t = time();
($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE movedb SET TABLESPACE ts');
my $move_took = time() - $t;
is($rc, 0, 'ALTER DATABASE SET TABLESPACE of a database with a running relay succeeds') or diag $err;
cmp_ok($move_took, '<', 4, 'SET TABLESPACE did not wait for the relay (under 4 s)');
my @move_away = emit_in('movedb', 'movedb.away', 2);

# A command that fails once the hook has stopped the relay: it comes back too.
my $failed_pid = relay_pid('failed');
($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE failed RENAME TO postgres');
isnt($rc, 0, 'ALTER DATABASE RENAME to a name in use fails');
like($err, qr/database "postgres" already exists/, '... because the name is in use');
my @failed_away = emit_in('failed', 'failed.away', 2);

is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid IN ($ren_pid, $tmpl_pid, $move_pid, $failed_pid)"),
	'0', 'the relays of the renamed, template, moved and failed-rename databases were stopped');
unlike(relay_dbs(), qr/\b(?:renamed|tmpl|movedb|failed)\b/, 'none of them is back while held off');

# outbox.database as a list (spaces around names) leaves out one database:
# its relay stops, and stays away for as long as the list says so (checked
# after the holds below, well past the 5 s restart pause).
$offset = -s $node->logfile;
my $limited_pid = relay_pid('limited');
$node->safe_psql('postgres', q{
ALTER SYSTEM SET outbox.database = ' postgres,renamed , tmpl,movedb,copy,db1,v10,failed ';
SELECT pg_reload_conf();});
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $limited_pid"),
	'outbox.database without limited: its relay stopped');
my $after_limit = -s $node->logfile;
like(slurp_file($node->logfile, $offset), qr/\[$limited_pid\] .*LOG:  outbox relay stopping/,
	'it logged "outbox relay stopping"');
like(relay_health('limited'), qr/^warning \| no relay serves this database/, 'health() in limited warns');
my @limited = emit_in('limited', 'limited.left_out', 2);

# The killed relay came back, after the launcher's pause.
ok(wait_received($log, got_all('/postgres', @pg_down)),
	'postgres: events emitted while its relay was down delivered');
my $pg_new = relay_pid('postgres');
isnt($pg_new, $pg_pid, 'postgres: a new relay process');
my $pg_started = $node->safe_psql('postgres', qq{
SELECT extract(epoch FROM started_at) FROM outbox.relay_stats WHERE database = 'postgres'});
note sprintf('killed relay restarted after %.2f s', $pg_started - $t_kill);
cmp_ok($pg_started - $t_kill, '>', 3, 'the killed relay was started again after a pause, not at once');

# Each relay comes back after the hold, serving its database only.
ok(wait_received($log, got_all('/ren', @ren_away)), 'renamed: events emitted while held off delivered');
note sprintf('relay of the renamed database back after %.2f s', time() - $t_renamed);
ok(wait_received($log, got_all('/copy', @copy)), 'copy: its own relay delivered its events');
ok(wait_received($log, got_all('/tmpl', @tmpl_away)), 'tmpl: its relay is back after the copy');
ok(wait_received($log, got_all('/movedb', @move_away)), 'movedb: its relay is back after the move');
ok(wait_received($log, got_all('/failed', @failed_away)), 'failed: its relay is back after the failed rename');
$node->poll_query_until('postgres',
	q{SELECT string_agg(database, ' ' ORDER BY database) = 'copy failed movedb postgres renamed tmpl' FROM outbox.relay_stats})
  or die 'relays not back: ' . relay_dbs();
is(relay_dbs(), 'copy failed movedb postgres renamed tmpl', 'relay_stats: renamed, tmpl, movedb, failed and copy served');
is( $node->safe_psql('postgres', q{
SELECT count(DISTINCT pid) FROM outbox.relay_stats s
  JOIN pg_stat_activity a USING (pid) WHERE a.datname = s.database}),
	'6', 'one relay process each, connected to its database');
{
	my %from = map { $_->[0] => $_->[2]{db} } map { got_at($_) } '/ren', '/tmpl', '/copy', '/movedb';
	is_deeply([ map { $from{$_} } @ren_away ], [ 'renamed', 'renamed' ], 'renamed events say so');
	is_deeply([ map { $from{$_} } @copy ], [ 'copy', 'copy' ], 'copy events came from the copy');
	is(scalar(grep { $_->[2]{db} ne 'tmpl' } got_at('/tmpl')), 0, 'the tmpl endpoint received only tmpl events');
}

# No crash loop: db1's relay left at least 5 s ago (the restart pause),
# and nothing started a relay there since.
my $since = time() - $t_left;
usleep(int((6 - $since) * 1_000_000)) if $since < 6;    # to prove a negative
note sprintf('checked db1 %.2f s after its relay left', time() - $t_left);
is(scalar(log_lines(qr/starting background worker process "outbox relay for db1"/, $after_leave)),
	0, 'db1 without outbox: no relay started again (no crash loop)');
is(scalar(log_lines(qr/outbox relay started for database "db1"/, $after_leave)), 0,
	'... and none logged a start');
unlike(relay_dbs(), qr/\bdb1\b/, 'db1 not in relay_stats');
like(relay_health('postgres'), qr/^ok \| /, 'health() in postgres ok');
# v10 likewise, and its events were not sent by anyone.
# (Only the start is looked for: the postmaster logs a stopped relay's
# "unregistering" and exit lines after it has left pg_stat_activity.)
is(scalar(log_lines(qr/starting background worker process "outbox relay for v10"/, $after_leave)), 0,
	'v10: no relay started');
is(scalar(got_at('/v10')), 0, 'v10: nothing delivered from an outbox of version 1.0');
# limited likewise, while outbox.database leaves it out.
is(scalar(log_lines(qr/starting background worker process "outbox relay for limited"|outbox relay started for database "limited"/, $after_limit)), 0,
	'limited, left out of outbox.database: no relay started');
unlike(relay_dbs(), qr/\blimited\b/, 'limited not in relay_stats');
ok(!grep({ my $id = $_->[0]; grep { $_ eq $id } @limited } got_at('/limited')),
	'limited: events emitted while left out not delivered');
$node->safe_psql('postgres', q{
ALTER SYSTEM RESET outbox.database;
SELECT pg_reload_conf();});
ok(wait_received($log, got_all('/limited', @limited)), 'limited: delivered once outbox.database is reset');

########################################################################
# CREATE EXTENSION again in db1, ALTER EXTENSION UPDATE in v10: relays.
########################################################################

$offset = -s $node->logfile;
$node->safe_psql('db1', qq{
CREATE EXTENSION outbox;
SELECT outbox.create_endpoint('db1', '$url/db1-again', '{db.*}');});
ok(log_wait(qr/LOG:  outbox relay started for database "db1"/, $offset), 'db1: CREATE EXTENSION again started a relay');
my @db1_again = emit_in('db1', 'db.event', 2);
ok(wait_received($log, got_all('/db1-again', @db1_again)), 'db1: delivery again');

my $t_update = time();
$node->safe_psql('v10', 'ALTER EXTENSION outbox UPDATE');
is($node->safe_psql('v10', "SELECT extversion FROM pg_extension WHERE extname = 'outbox'"),
	$version, "v10 updated to $version");
ok(log_wait(qr/LOG:  outbox relay started for database "v10"/, $offset),
	'v10: a relay started after ALTER EXTENSION UPDATE');
ok(wait_received($log, got_all('/v10', @v10)), 'v10: events emitted under 1.0 delivered after the update');
cmp_ok((sort { $a <=> $b } map { $_->[1] } got_at('/v10'))[0], '>=', $t_update,
	'... and not before it');
like(relay_health('v10'), qr/^ok \| /, 'health() in v10: relay running ok');
is(relay_dbs(), 'copy db1 failed limited movedb postgres renamed tmpl v10', 'relay_stats: nine relays');

########################################################################
# outbox.database = 'postgres' at a reload: the other relays stop, and
# come back at the reset.
########################################################################

$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
ALTER SYSTEM SET outbox.database = 'postgres';
SELECT pg_reload_conf();});
# pg_stat_activity: a relay leaves relay_stats before it logs its stop.
ok( $node->poll_query_until('postgres', q{
SELECT string_agg(datname, ' ') = 'postgres' FROM pg_stat_activity WHERE backend_type = 'outbox relay'}),
	"outbox.database = 'postgres': the other relays stopped");
is(relay_dbs(), 'postgres', 'relay_stats: postgres only');
is(relay_pid('postgres'), $pg_new, 'the relay of postgres kept running');
is(scalar(log_lines(qr/LOG:  outbox relay stopping/, $offset)), 8, 'eight relays logged their stop');
like(relay_health('db1'), qr/^warning \| no relay serves this database/, 'health() in db1 warns');
like(relay_health('postgres'), qr/^ok \| /, 'health() in postgres ok');
my @db1_limited = emit_in('db1', 'db.event', 2);
my @pg_limited = emit_in('postgres', 'db.event', 2);
ok(wait_received($log, got_all('/postgres', @pg_limited)), 'postgres still delivers');

$node->safe_psql('postgres', q{
ALTER SYSTEM RESET outbox.database;
SELECT pg_reload_conf();});
ok(wait_received($log, got_all('/db1-again', @db1_limited)), 'after the reset db1 delivers again');
ok( $node->poll_query_until('postgres', q{
SELECT string_agg(database, ' ' ORDER BY database) = 'copy db1 failed limited movedb postgres renamed tmpl v10'
  FROM outbox.relay_stats}),
	'after the reset every database has its relay again');
like(relay_health('db1'), qr/^ok \| /, 'health() in db1 ok again');
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'),
	$postmaster_started, 'still no server restart');
unlike(slurp_file($node->logfile), qr/being accessed by other users|PANIC|TRAP/,
	'no "being accessed by other users", no PANIC or assertion failure in the log');

$node->stop;

########################################################################
# outbox.max_relays = 1 and two databases with outbox: a warning; the
# slot goes to the other database once the first gives it up.
########################################################################

my $small = outbox_node('max_relays', conf => "outbox.max_relays = 1\n");
$small->poll_query_until('postgres', q{SELECT count(*) = 1 FROM outbox.relay_stats WHERE database = 'postgres'})
  or die 'no relay in postgres';
$offset = -s $small->logfile;
$small->safe_psql('postgres', 'CREATE DATABASE other');
$small->safe_psql('other', 'CREATE EXTENSION outbox');
ok( log_wait($small,
		qr/WARNING:  outbox: no relay for database "other": all 1 relays \(outbox\.max_relays\) are running/,
		$offset),
	'max_relays = 1: the launcher warned that database other gets no relay');
is( $small->safe_psql('postgres', q{SELECT string_agg(database, ' ') FROM outbox.relay_stats}),
	'postgres', 'only the relay of postgres runs');
like( $small->safe_psql('other',
		"SELECT status FROM outbox.health() WHERE check_name = 'relay running'"),
	qr/^warning$/, 'health() in other warns');
$small->safe_psql('postgres', 'DROP EXTENSION outbox');
ok( $small->poll_query_until('postgres',
		q{SELECT string_agg(datname, ' ') = 'other' FROM pg_stat_activity WHERE backend_type = 'outbox relay'}),
	'once postgres gives up its relay, other gets the slot');
is( $small->safe_psql('other',
		"SELECT status FROM outbox.health() WHERE check_name = 'relay running'"),
	'ok', 'health() in other ok');
$small->stop;

$receiver->kill_kill;
done_testing();
