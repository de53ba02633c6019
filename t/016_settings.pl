# The settings that are lists, as the relay and the launcher read them at
# a reload: outbox.retry_schedule (how long a failed delivery waits),
# outbox.allowed_networks (which targets the relay may connect to) and
# outbox.database (which databases get a relay).  A bad value in
# postgresql.conf is refused at the reload with the parser's reason in the
# server log, and the value before it stays in force.  What ALTER SYSTEM
# accepts and refuses, value by value, is sql/11_settings.sql.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('settings', conf => "outbox.retry_schedule = '1h'\n");
my ($url, $log, $receiver) = start_receiver();
wait_for_relay() or die 'relay did not start';

# Append a setting to postgresql.conf (the last line wins) and reload; the
# log offset before, once the relay of postgres has reloaded.
sub reload_file
{
	my ($line) = @_;
	my $offset = -s $node->logfile;
	$node->append_conf('postgresql.conf', "$line\n");
	$node->reload;
	defined log_wait(qr/outbox relay reloaded its configuration/, $offset)
	  or die "the relay did not reload after: $line";
	return $offset;
}

############################################################################
# outbox.retry_schedule: the delay after attempt n is entry n, the last
# entry repeating, with +-20% jitter.
############################################################################

sql("SELECT outbox.create_endpoint('fail', '$url/fail?status=500', '{t.fail}', max_attempts => 100)");

# Seconds from an event's attempt $n (its failure recorded) until its retry
# is due.
sub delay_after
{
	my ($id, $n) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.retries WHERE event_id = '$id' AND attempts = $n")
	  or die "attempt $n of $id was not recorded";
	return sql(qq{
SELECT extract(epoch FROM r.next_at - a.at) FROM outbox.retries r
  JOIN outbox.attempts a ON a.event_id = r.event_id AND a.attempt = r.attempts
 WHERE r.event_id = '$id'});
}

# Make an event's retry due now, and return the delay after its next attempt.
sub delay_after_retry
{
	my ($id, $n) = @_;
	sql("UPDATE outbox.retries SET next_at = now() WHERE event_id = '$id'");
	return delay_after($id, $n);
}

# Is a delay within the jitter of the schedule's $secs (and a second)?
sub about
{
	my ($delay, $secs) = @_;
	return $delay >= 0.8 * $secs - 1 && $delay <= 1.2 * $secs + 1;
}

my $id = sql(q{SELECT outbox.emit('t.fail', '{}')});
my $d = delay_after($id, 1);
ok(about($d, 3600), "schedule '1h': the first retry is due after about an hour ($d s)");

reload_file(q{outbox.retry_schedule = ' 2min , 1.5d '});
$id = sql(q{SELECT outbox.emit('t.fail', '{}')});
$d = delay_after($id, 1);
ok(about($d, 120), "schedule ' 2min , 1.5d ': after attempt 1, about 2 minutes ($d s)");
$d = delay_after_retry($id, 2);
ok(about($d, 129600), "after attempt 2, about a day and a half ($d s)");
$d = delay_after_retry($id, 3);
ok(about($d, 129600), "after attempt 3, the last delay again ($d s)");

# 'nan' parses as a number to strtod(): the schedule refuses it.
my $offset = reload_file(q{outbox.retry_schedule = 'nan'});
ok( defined log_wait(qr/invalid value for parameter "outbox\.retry_schedule": "nan"\n.*DETAIL:  A schedule is a comma-separated list of delays/,
		$offset),
	"schedule 'nan': refused at the reload, with the reason in the log");
is(sql('SHOW outbox.retry_schedule'), ' 2min , 1.5d ', 'the schedule before it stays in force');
$id = sql(q{SELECT outbox.emit('t.fail', '{}')});
$d = delay_after($id, 1);
ok(about($d, 120), "... and the relay still waits about 2 minutes after a failure ($d s)");
sql("SELECT outbox.drop_endpoint('fail')");

############################################################################
# outbox.allowed_networks: checked on the address the relay connects to
# (receivers listen on 127.0.0.1; outbox_node allows 127.0.0.1/32).  The
# check is made as a connection opens, and a connection kept alive from
# before a reload is used again: each attempt below goes to a receiver of
# its own, so that it needs a new connection.
############################################################################

sql("SELECT outbox.create_endpoint('net', '$url/net', '{t.net}', max_attempts => 100)");

# Point the endpoint at a new receiver and emit an event to it; its first
# attempt's status, or its error.
sub first_attempt
{
	my ($fresh_url) = start_receiver();
	sql("SELECT outbox.alter_endpoint('net', url => '$fresh_url/net')");
	my $id = sql(q{SELECT outbox.emit('t.net', '{}')});
	$node->poll_query_until('postgres', "SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$id'")
	  or die "no attempt of $id";
	return sql("SELECT coalesce(status::text, error) FROM outbox.attempts WHERE event_id = '$id'");
}

$offset = reload_file(q{outbox.allowed_networks = '127.0.0.1/33'});
ok( defined log_wait(qr/invalid value for parameter "outbox\.allowed_networks": "127\.0\.0\.1\/33"\n.*DETAIL:  invalid prefix length; give a comma-separated list/,
		$offset),
	"networks '127.0.0.1/33': refused at the reload, with the reason in the log");
is(sql('SHOW outbox.allowed_networks'), '127.0.0.1/32', 'the list before it stays in force');
is(first_attempt(), '200', '... and 127.0.0.1 is still allowed');

reload_file(q{outbox.allowed_networks = '::1, 10.0.0.0/8'});
like(first_attempt(), qr/^refused to connect to 127\.0\.0\.1, a loopback address/,
	"networks '::1, 10.0.0.0/8': 127.0.0.1 is refused");

reload_file(q{outbox.allowed_networks = ' , 127.0.0.0/8 ,, '});
is(first_attempt(), '200', "networks ' , 127.0.0.0/8 ,, ': a network holding 127.0.0.1 allows it");

reload_file(q{outbox.allowed_networks = '127.1.2.3/8'});
is(first_attempt(), '200', "networks '127.1.2.3/8': only the prefix's bits of the address count");

reload_file(q{outbox.allowed_networks = ''});
like(first_attempt(), qr/^refused to connect to 127\.0\.0\.1/, "networks '': 127.0.0.1 is refused again");
reload_file(q{outbox.allowed_networks = '127.0.0.1/32'});

############################################################################
# outbox.database: names taken whole, case kept, spaces around them and
# empty entries ignored; no name at all means every database.  A relay
# left out is stopped; an allowed one keeps running.
############################################################################

for my $db ('post', 'Mixed', 'two words')
{
	sql(qq{CREATE DATABASE "$db"});
	sql('CREATE EXTENSION outbox', $db);
}

# Wait until the databases with a relay are $want (names in byte order).
sub relays_become
{
	my ($want) = @_;
	return $node->poll_query_until('postgres', q{
SELECT string_agg(datname, ',' ORDER BY datname COLLATE "C") FROM pg_stat_activity
 WHERE backend_type = 'outbox relay'}, $want);
}

ok(relays_become('Mixed,post,postgres,two words'), "database '': a relay in every database with outbox");
my %pid = map { $_ => relay_pid($_) } 'post', 'two words';

$node->append_conf('postgresql.conf', "outbox.database = 'MIXED, post , , two words,'\n");
$node->reload;
ok(relays_become('post,two words'),
	"database 'MIXED, post , , two words,': the relays of Mixed (other case) and postgres (a longer name) stop");
is(join(',', map { relay_pid($_) } 'post', 'two words'), join(',', @pid{ 'post', 'two words' }),
	'the relays of post and "two words" kept running');

$node->append_conf('postgresql.conf', "outbox.database = 'postgres'\n");
$node->reload;
ok(relays_become('postgres'), "database 'postgres': post (a shorter name) and \"two words\" stop, postgres starts");

$node->append_conf('postgresql.conf', "outbox.database = ' , ,'\n");
$node->reload;
ok(relays_become('Mixed,post,postgres,two words'), "database ' , ,': no name, every database again");

$node->stop;
$receiver->kill_kill;
done_testing();
