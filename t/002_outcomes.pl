# Every outcome class of a delivery, as a user sees it: the requests the
# receiver got, outbox.attempts, outbox.retries, outbox.dead_letters and
# outbox.endpoint_status.  Retry timing, Retry-After, disable_after,
# pause/resume, retry_dead, replay and rotate_secret.
#
# Each endpoint has its own path on the receiver (which decides how to
# answer from the query string) and subscribes to its own event type
# "t.<name>", so the cases run side by side on one node.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# A short schedule keeps the retries of the first part quick.
my $node = outbox_node('outcomes', conf => "outbox.retry_schedule = '100ms'\n");
my ($url, $log, $receiver) = start_receiver();

sub urlencode
{
	my ($s) = @_;
	$s =~ s/([^A-Za-z0-9._~-])/sprintf('%%%02X', ord($1))/ge;
	return $s;
}

# Create endpoint $name at $url/$name?$query for events of type t.$name;
# $extra are more SQL arguments (e.g. "max_attempts => 3").  Returns the
# endpoint's secret.
sub endpoint
{
	my ($name, $query, $extra) = @_;
	my $u = "$url/$name" . ($query ? "?$query" : '');
	return sql(sprintf("SELECT outbox.create_endpoint(%s, %s, ARRAY['t.%s']%s)",
		lit($name), lit($u), $name, $extra ? ", $extra" : ''));
}

# Emit one event for endpoint $name; returns its id (the webhook-id).
sub emit
{
	my ($name, $n) = @_;
	return sql("SELECT outbox.emit('t.$name', '{\"n\": $n}')");
}

# Requests the receiver got on /$path (optionally only of one webhook-id).
sub reqs
{
	my ($path, $id) = @_;
	return grep {
		$_->{path} eq "/$path"
		  && (!defined $id || $_->{headers}{'webhook-id'} eq $id)
	} received($log);
}

# Wait until /$path got at least $n requests.
sub wait_reqs
{
	my ($path, $n, $id) = @_;
	return wait_received($log,
		sub { scalar(grep { $_->{path} eq "/$path" && (!defined $id || $_->{headers}{'webhook-id'} eq $id) } @_) >= $n });
}

sub status_of
{
	my ($ep, $cols) = @_;
	return sql("SELECT $cols FROM outbox.endpoint_status WHERE name = '$ep'");
}

sub statuses { return join(',', map { $_->{status} } @_); }

wait_for_relay() or die 'relay did not start';

############################################################################
# Part 1: outcome classes, all at once.
############################################################################

my %secret;
endpoint('ok', '');
endpoint('ctl', '');
endpoint('r302', 'status=302&fail_first=1&location=' . urlencode("$url/followed302"));
endpoint('r307', 'status=307&fail_first=1&location=' . urlencode("$url/followed307"));
my @retried = (408, 425, 429, 500, 503);
endpoint("s$_", "status=$_&fail_first=2") for @retried;
endpoint("ra$_", "status=$_&fail_first=1&retry_after=2") for (429, 503);
endpoint("s$_", "status=$_") for (400, 404);
endpoint('gone', 'status=410');
endpoint('abort', 'status=500&delivery=abort-message');
endpoint('dis', 'status=500&delivery=disable');
endpoint('abort200', 'delivery=abort-message');
endpoint('dis200', 'delivery=disable');
endpoint('maxed', 'status=500', 'max_attempts => 3');
$secret{rot} = endpoint('rot', '');
endpoint('paused', '');

my $since = sql('SELECT now()');
my %id;
$id{$_} = emit($_, 1)
  for (qw(ok r302 r307 ra429 ra503 s400 s404 gone abort dis abort200 dis200 maxed), map { "s$_" } @retried);

# 2xx: delivered once.
ok(wait_reqs('ok', 1), '2xx: the event arrived');
is(attempts($id{ok}, 'ok'), '1:200', '2xx: one attempt recorded');

# 3xx: a failure, not followed, retried.  Had the redirect been followed,
# the attempt would show the status of the Location's answer (for 307, a
# POST to /followed307 that the receiver would log and answer 200).
for my $s (302, 307)
{
	ok(wait_reqs("r$s", 2), "$s: retried");
	is(attempts($id{"r$s"}, "r$s"), "1:$s,2:200", "$s: a failed attempt, then delivered on the retry");
	is(scalar(reqs("followed$s")), 0, "$s: the Location was not requested");
}

# 408, 425, 429, 500, 503: retried, then delivered, with one webhook-id.
for my $s (@retried)
{
	ok(wait_reqs("s$s", 3), "$s: three requests");
	my @r = reqs("s$s");
	is(statuses(@r), "$s,$s,200", "$s: failed twice, then delivered");
	is(scalar(grep { $_->{headers}{'webhook-id'} eq $id{"s$s"} } @r), 3,
		"$s: the same webhook-id on every retry");
	is(attempts($id{"s$s"}, "s$s"), "1:$s,2:$s,3:200", "$s: attempts 1, 2, 3 recorded");
}

# 400, 404: dead letter at once.
for my $s (400, 404)
{
	ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.dead_letters WHERE endpoint = 's$s'"),
		"$s: a dead letter");
	is(sql("SELECT event_id || ' ' || attempts || ' ' || last_status FROM outbox.dead_letters WHERE endpoint = 's$s'"),
		$id{"s$s"} . " 1 $s", "$s: dead letter after one attempt, with its status");
	is(sql("SELECT count(*) FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = 's$s'"),
		'0', "$s: nothing left to retry");
}

# 410: the endpoint is disabled; the event waits for it.
ok($node->poll_query_until('postgres',
	"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'gone'"),
	'410: endpoint disabled');
like(status_of('gone', 'state_reason'), qr/410/, '410: the reason says 410');
is(sql("SELECT r.attempts || ' ' || r.last_status FROM outbox.retries r WHERE r.event_id = '$id{gone}'"),
	'1 410', '410: the event waits in outbox.retries, not a dead letter');

# webhook-delivery: abort-message dead-letters a 500 that would be retried.
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.dead_letters WHERE endpoint = 'abort'"),
	'abort-message: a dead letter');
is(sql("SELECT attempts || ' ' || last_status FROM outbox.dead_letters WHERE endpoint = 'abort'"),
	'1 500', 'abort-message: after one attempt');

# webhook-delivery: disable.
ok($node->poll_query_until('postgres',
	"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'dis'"),
	'webhook-delivery: disable disables the endpoint');
like(status_of('dis', 'state_reason'), qr/webhook-delivery: disable/, 'disable: the reason says why');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 'dis'"), '0',
	'disable: the event is not a dead letter');

# The same headers on a 2xx: the receiver accepted the event, so it is
# delivered; sending it again would be a duplicate outside the one window
# DESIGN promise 3 allows.
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'abort200'"),
	'200 with abort-message: attempt recorded');
ok($node->poll_query_until('postgres',
	"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'dis200'"),
	'200 with disable: the endpoint is disabled');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 'abort200'"), '0',
	'200 with abort-message: delivered, not a dead letter');
is(sql("SELECT count(*) FROM outbox.retries WHERE event_id = '$id{dis200}'"), '0',
	'200 with disable: delivered, not waiting to be sent again');

# max_attempts.
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.dead_letters WHERE endpoint = 'maxed'"),
	'max_attempts: a dead letter');
is(sql("SELECT attempts || ' ' || last_status FROM outbox.dead_letters WHERE endpoint = 'maxed'"),
	'3 500', 'max_attempts: dead after 3 attempts');
is(attempts($id{maxed}, 'maxed'), '1:500,2:500,3:500', 'max_attempts: attempts 1 to 3 recorded');

# Retry-After on 429 and 503 outweighs the 100ms schedule.  The gap is
# measured on the receiver's clock between two attempts of one webhook-id.
for my $s (429, 503)
{
	ok(wait_reqs("ra$s", 2), "$s with Retry-After: retried");
	my @r = reqs("ra$s");
	is(statuses(@r), "$s,200", "$s with Retry-After: delivered on the retry");
	my $gap = $r[1]{t} - $r[0]{t};
	cmp_ok($gap, '>=', 1.5, "$s with Retry-After: 2: the retry waited (${gap}s)");
}

# By now (the Retry-After cases took 2 s, twenty times the schedule) any
# repeat of a settled delivery would have arrived.
is(scalar(reqs('ok')), 1, '2xx: delivered once');
is(scalar(reqs($_)), 1, "$_: exactly one request") for qw(s400 s404 gone abort dis abort200 dis200);
is(scalar(reqs('maxed')), 3, 'max_attempts: exactly 3 requests');
is(scalar(reqs("s$_")), 3, "$_: no request after the delivery") for @retried;

############################################################################
# Part 2: waiting events; pause and resume; retry_dead; replay.
############################################################################

# A disabled and a paused endpoint get nothing.  The control endpoint's
# events, emitted with and after theirs, show the relay has read past them.
sql('SELECT outbox.pause_endpoint(\'paused\')');
my $gone2;
my @paused_ids;
{
	my @out = split /\n/, sql(q{
BEGIN;
SELECT outbox.emit('t.gone', '{"n": 2}');
SELECT outbox.emit('t.paused', '{"n": 1}');
SELECT outbox.emit('t.paused', '{"n": 2}');
SELECT outbox.emit('t.paused', '{"n": 3}');
SELECT outbox.emit('t.ctl', '{"n": 1}');
COMMIT;
});
	$gone2 = $out[0];
	@paused_ids = @out[1 .. 3];
}
ok(wait_reqs('ctl', 1), 'control event arrived');
emit('ctl', 2);
ok(wait_reqs('ctl', 2), 'second control event arrived');
is(scalar(reqs('paused')), 0, 'paused: nothing arrives');
is(status_of('paused', "state || ' ' || events_waiting"), 'paused 3', 'paused: endpoint_status counts 3 waiting');
is(scalar(reqs('gone')), 1, '410: a later event is not sent while disabled');
is(status_of('gone', "state || ' ' || events_waiting"), 'disabled 2',
	'410: endpoint_status counts the failed and the later event waiting');

sql('SELECT outbox.resume_endpoint(\'paused\')');
ok(wait_reqs('paused', 3), 'paused: resume delivers what waited');
is(join(',', sort map { $_->{headers}{'webhook-id'} } reqs('paused')),
	join(',', sort @paused_ids), 'paused: each waiting event once');
ok($node->poll_query_until('postgres',
	"SELECT state || ' ' || events_waiting FROM outbox.endpoint_status WHERE name = 'paused'", 'active 0'),
	'paused: nothing waiting after resume');

# The disabled endpoint is pointed at a healthy path and resumed.
sql("SELECT outbox.alter_endpoint('gone', url => " . lit("$url/gone_healed") . ")");
sql('SELECT outbox.resume_endpoint(\'gone\')');
ok(wait_reqs('gone_healed', 2), '410: resume delivers the waiting events');
is(join(',', sort map { $_->{headers}{'webhook-id'} } reqs('gone_healed')),
	join(',', sort($id{gone}, $gone2)), '410: the failed event and the later one, once each');
is(status_of('gone', 'state'), 'active', '410: endpoint active again');

# retry_dead requeues the dead letters of one endpoint.
sql("SELECT outbox.alter_endpoint('s400', url => " . lit("$url/s400_healed") . ")");
is(sql("SELECT outbox.retry_dead('s400')"), '1', 'retry_dead: one dead letter requeued');
ok(wait_reqs('s400_healed', 1), 'retry_dead: the event arrives');
is(join(',', map { $_->{headers}{'webhook-id'} } reqs('s400_healed')), $id{s400},
	'retry_dead: with its webhook-id');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = 's400'"),
	'retry_dead: nothing left to retry');
is(attempts($id{s400}, 's400'), '1:400,1:200', 'retry_dead: a fresh count of attempts');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 's400'"), '0',
	'retry_dead: no dead letter left');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 's404'"), '1',
	'retry_dead: another endpoint\'s dead letter stays');

# replay re-delivers retained events with their webhook-id.
is(sql("SELECT outbox.replay('ok', '$since')"), '1', 'replay: one event requeued');
ok(wait_reqs('ok', 2), 'replay: delivered again');
is(join(',', map { $_->{headers}{'webhook-id'} } reqs('ok')), "$id{ok},$id{ok}",
	'replay: the same webhook-id as before');

############################################################################
# Part 3: rotate_secret.
############################################################################

# Verify signature $sig of request $r with $secret.
sub verify
{
	my ($secret, $r, $sig) = @_;
	return sql(sprintf('SELECT outbox.verify_signature(%s, %s, %s, %s, %s)',
		map { lit($_) } $secret, $r->{headers}{'webhook-id'},
		$r->{headers}{'webhook-timestamp'}, $r->{body}, $sig));
}

my $new = sql("SELECT outbox.rotate_secret('rot')");
isnt($new, $secret{rot}, 'rotate_secret returns a new secret');
my $rot1 = emit('rot', 1);
ok(wait_reqs('rot', 1, $rot1), 'rotated: event arrived');
my ($r) = reqs('rot', $rot1);
my @sigs = split / /, $r->{headers}{'webhook-signature'};
is(scalar(@sigs), 2, 'rotated: two signatures');
like($_, qr/^v1,\S+$/, 'rotated: a v1 signature') for @sigs;
is(verify($new, $r, $sigs[0]), 't', 'rotated: the first verifies with the new secret');
is(verify($secret{rot}, $r, $sigs[1]), 't', 'rotated: the second verifies with the old secret');
is(verify($secret{rot}, $r, $sigs[0]), 'f', 'rotated: the first is not the old secret\'s');
is(verify($new, $r, $r->{headers}{'webhook-signature'}), 't', 'rotated: the header verifies with the new secret');
is(verify($secret{rot}, $r, $r->{headers}{'webhook-signature'}), 't', 'rotated: the header verifies with the old secret');

my $newer = sql("SET outbox.secret_overlap = 0; SELECT outbox.rotate_secret('rot')");
my $rot2 = emit('rot', 2);
ok(wait_reqs('rot', 1, $rot2), 'no overlap: event arrived');
($r) = reqs('rot', $rot2);
like($r->{headers}{'webhook-signature'}, qr/^v1,\S+$/, 'no overlap: one signature');
is(verify($newer, $r, $r->{headers}{'webhook-signature'}), 't', 'no overlap: it verifies with the new secret');
is(verify($new, $r, $r->{headers}{'webhook-signature'}), 'f', 'no overlap: not with the previous one');

############################################################################
# Part 4: retry timing follows outbox.retry_schedule (with +-20% jitter).
############################################################################

ok(reload_with('outbox.retry_schedule' => '1s,2s'), 'schedule: the relay reloaded 1s,2s');
endpoint('timing', 'status=500&fail_first=2');
my $tid = emit('timing', 1);
ok(wait_reqs('timing', 3), 'schedule: three attempts');
my @t = reqs('timing');
is(statuses(@t), '500,500,200', 'schedule: delivered on the third');
# Lower bounds only: the next attempt is due no earlier than 80% of the
# delay after the failed one was answered; later depends on the machine.
my ($g1, $g2) = ($t[1]{t} - $t[0]{t}, $t[2]{t} - $t[1]{t});
cmp_ok($g1, '>=', 0.8 - 0.05, "schedule: first retry after ~1s (${g1}s)");
cmp_ok($g2, '>=', 1.6 - 0.05, "schedule: second retry after ~2s (${g2}s)");

############################################################################
# Part 5: outbox.disable_after.
############################################################################

ok(reload_with('outbox.retry_schedule' => '300ms', 'outbox.disable_after' => '2s'),
	'disable_after: the relay reloaded 2s');
endpoint('flaky', 'status=500', 'max_attempts => 100');
my $fid = emit('flaky', 1);
ok($node->poll_query_until('postgres',
	"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'flaky'"),
	'disable_after: an endpoint failing for 2s is disabled');
like(status_of('flaky', 'state_reason'), qr/no successful delivery since .*disable_after/,
	'disable_after: the reason says why');
is(sql("SELECT e.disabled_at - h.failing_since >= interval '2s' FROM outbox.endpoints e JOIN outbox.endpoint_health h ON h.endpoint_id = e.id WHERE e.name = 'flaky'"),
	't', 'disable_after: not before 2s of failures');
cmp_ok(scalar(reqs('flaky')), '>=', 2, 'disable_after: it was retried meanwhile');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 'flaky'"), '0',
	'disable_after: the event is not a dead letter');

sql("SELECT outbox.alter_endpoint('flaky', url => " . lit("$url/flaky_healed") . ")");
sql("SELECT outbox.resume_endpoint('flaky')");
is(status_of('flaky', "state || ' ' || coalesce(state_reason, '-')"), 'active -',
	'disable_after: resume_endpoint clears the state');
ok(wait_reqs('flaky_healed', 1, $fid), 'disable_after: the event arrives after resume');
ok($node->poll_query_until('postgres',
	"SELECT state || ' ' || consecutive_failures || ' ' || in_retry FROM outbox.endpoint_status WHERE name = 'flaky'",
	'active 0 0'),
	'disable_after: endpoint healthy after the delivery');

############################################################################
# Part 6: resume_endpoint sends what waited for the endpoint.
############################################################################

# With an hour between attempts, the event that met the 410 waits out that
# hour after the endpoint is resumed, unless resuming makes it due.  The
# event emitted after the resume shows the relay has been at work; the
# bounded wait after it is many poll intervals (200ms) long.
ok(reload_with('outbox.retry_schedule' => '1h'), 'resume: the relay reloaded a schedule of 1h');
endpoint('gone_late', 'status=410');
my $late1 = emit('gone_late', 1);
ok($node->poll_query_until('postgres',
	"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = 'gone_late'"),
	'resume: endpoint disabled by a 410');
sql("SELECT outbox.alter_endpoint('gone_late', url => " . lit("$url/gone_late_healed") . ")");
sql("SELECT outbox.resume_endpoint('gone_late')");
my $late2 = emit('gone_late', 2);
ok(wait_reqs('gone_late_healed', 1, $late2), 'resume: an event emitted after the resume arrives');
# Its backoff after the 410 is an hour: only the resume can make it due.
ok(wait_reqs('gone_late_healed', 1, $late1),
	'resume: the event that met the 410 arrives without waiting out its backoff');

$node->stop;
$receiver->kill_kill;
done_testing();
