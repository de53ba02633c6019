# A hostile receiver: endpoints that refuse, reset, stall, drip, flood
# (bodies, headers, 1xx responses, chunk framing), redirect, throttle,
# vanish or do not speak HTTP, and endpoints that never answer beside a
# healthy one on the same host.  Each case is one
# endpoint of t/hostile_receiver.py (the URL path picks the misbehaviour).
# After each, the relay is the same process and still delivers promptly to
# a well-behaved endpoint (t/webhook_receiver.py) an event emitted after the
# hostile one, and outbox.attempts, outbox.retries and outbox.dead_letters
# say what happened.  retry_schedule is an hour, so each case makes exactly
# one attempt.  With OUTBOX_HOSTILE_TLS set (t/034_hostile_tls.pl) the
# hostile receiver speaks TLS and its endpoints are https: the same cases
# over the relay's TLS connections.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:DEFAULT sql lit relay_pid);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $tls = $ENV{OUTBOX_HOSTILE_TLS};
my $cert_dir = PostgreSQL::Test::Utils::tempdir();
OutboxTest::make_certificates($cert_dir,
	[ 'server', "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth" ]) if $tls;
my $node = outbox_node('hostile', conf => "outbox.retry_schedule = '1h'\n" .
	($tls ? "outbox.ca_file = '$cert_dir/ca.crt'\n" : ''));
my ($good_url, $good_log, $good_rx) = start_receiver();
my ($good_port) = $good_url =~ /:(\d+)$/;

# A hostile receiver: (base URL, log path, harness).
sub start_hostile
{
	my $hdir = PostgreSQL::Test::Utils::tempdir();
	my $hlog = "$hdir/hostile.jsonl";
	my $rx = IPC::Run::start([ 'python3', "$FindBin::Bin/hostile_receiver.py",
		'--log', $hlog, '--port-file', "$hdir/port",
		'--port', PostgreSQL::Test::Cluster::get_free_port(),
		$tls ? ('--cert', "$cert_dir/server.crt", '--key', "$cert_dir/server.key") : () ]);
	for (my $i = 0; $i < 100 && !-e "$hdir/port"; $i++) { usleep(100_000); }
	die 'hostile receiver did not start' unless -e "$hdir/port";
	return (($tls ? 'https' : 'http') . '://127.0.0.1:' . PostgreSQL::Test::Utils::slurp_file("$hdir/port"), $hlog, $rx);
}
my ($hurl, $hlog, $hostile_rx) = start_hostile();

# A port nobody listens on, below the ephemeral range (a connection to a
# closed port in it may meet itself: TCP's simultaneous open).
my $closed_port = PostgreSQL::Test::Cluster::get_free_port();

# Peak and current resident memory of a process, in kB.
sub memory_kb
{
	my ($pid) = @_;
	my $status = PostgreSQL::Test::Utils::slurp_file("/proc/$pid/status");
	my ($hwm) = $status =~ /^VmHWM:\s+(\d+) kB/m;
	my ($rss) = $status =~ /^VmRSS:\s+(\d+) kB/m;
	return ($hwm, $rss);
}

# What the hostile receiver logged for a path.
# Wait until the event's one attempt is recorded with a 200: true once it
# is, false after the TAP timeout.
sub answered_200
{
	my ($event_id) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$event_id' AND status = 200");
}

sub hostile_log
{
	my ($path) = @_;
	return grep { $_->{path} eq $path } received($hlog);
}

$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
  or die 'relay did not start';
my $pid = relay_pid();

sql("SELECT outbox.create_endpoint('good', '$good_url/good', '{good.*}')");
my $warmup = sql(q{SELECT outbox.emit('good.warmup', '{}')});
ok(wait_received($good_log, sub { grep { $_->{headers}{'webhook-id'} eq $warmup } @_ }),
	'the well-behaved endpoint receives');

my %id;

# Run one case: endpoint $name at $url (extra create_endpoint arguments in
# $extra), one event for it, then one for the good endpoint.  Waits until
# the good endpoint has that event and the hostile attempt is recorded.
# Returns the hostile event id and the Unix time the good event arrived.
sub hostile_case
{
	my ($name, $url, $extra) = @_;
	sql(sprintf("SELECT outbox.create_endpoint(%s, %s, '{h.%s}'%s)",
		lit($name), lit($url), $name, $extra ? ", $extra" : ''));
	my $id = sql("SELECT outbox.emit('h.$name', '{\"case\": \"$name\"}')");
	my $gid = sql("SELECT outbox.emit('good.after', '{\"after\": \"$name\"}')");
	$id{$name} = $id;
	my @got;
	ok(wait_received($good_log, sub { @got = grep { $_->{headers}{'webhook-id'} eq $gid } @_ }),
		"$name: the good endpoint received the event emitted after it");
	ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = '$name'"),
		"$name: one attempt recorded");
	is(relay_pid(), $pid, "$name: the relay is the same process");
	return ($id, @got ? $got[0]{t} : 0);
}

# The attempt's columns, '|'-separated.
sub attempt
{
	my ($name, $cols) = @_;
	return sql("SELECT $cols FROM outbox.attempts WHERE endpoint = '$name'");
}

# Retried once on the schedule (an hour, +-20%): waiting in outbox.retries.
sub retried_on_schedule
{
	my ($name) = @_;
	is(sql("SELECT r.attempts || ' ' || (r.next_at BETWEEN now() + interval '45 min' AND now() + interval '75 min')
	          FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = '$name'"),
		'1 true', "$name: waits in outbox.retries for the next attempt in about an hour");
	is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = '$name'"), '0',
		"$name: not a dead letter");
}

############################################################################
# Transport failures: retried.
############################################################################

hostile_case('refused', "http://127.0.0.1:$closed_port/x");
like(attempt('refused', "coalesce(status::text, '-') || ' ' || error"),
	qr/^- .*(Connection refused|Couldn't connect|Failed to connect)/i, 'refused: a connection error, no status');
retried_on_schedule('refused');

hostile_case('nxdomain', 'http://nonexistent.invalid/');
like(attempt('nxdomain', "coalesce(status::text, '-') || ' ' || error"),
	qr/^- .*resolve/i, 'nxdomain: could not resolve, no status');
retried_on_schedule('nxdomain');

for my $where (qw(status headers body))
{
	my $name = "reset_$where";
	hostile_case($name, "$hurl/$name");
	is(scalar(hostile_log("/$name")), 1, "$name: the receiver got the request");
	like(attempt($name, 'error'), qr/reset|closed the connection|not an HTTP\/1\.x response/i,
		"$name: a transport error (" . attempt($name, 'error') . ')');
	retried_on_schedule($name);
}

# Chunk framing that libcurl refused ("Illegal or missing hexadecimal
# sequence") is refused on plain http too (h1parse.c), not taken for the
# body's end.
hostile_case('chunk_bad', "$hurl/chunk_bad");
like(attempt('chunk_bad', "coalesce(status::text, '-') || ' ' || error"),
	qr/^- .*chunk size line without a size/i,
	'chunk_bad: a transport error, no status (' . attempt('chunk_bad', 'error') . ')');
retried_on_schedule('chunk_bad');

# Framings refused (RFC 9112): a status line among the headers (not a
# field: the head's state says where a status line stands), junk after a
# chunk size ("0x10" is no last chunk), a folded Content-Length.
for my $c ([ 'status_in_headers', qr/a line that is not a header field/ ],
	[ 'chunk_size_junk', qr/bytes after a chunk size that are not an extension/ ],
	[ 'folded_length', qr/folded Content-Length or Transfer-Encoding line/ ])
{
	my ($name, $error) = @$c;
	hostile_case($name, "$hurl/canned/$name");
	like(attempt($name, "coalesce(status::text, '-') || ' ' || error"), qr/^- .*$error/,
		"$name: a transport error, no status (" . attempt($name, 'error') . ')');
	retried_on_schedule($name);
}

hostile_case('garbage', "$hurl/garbage");
like(attempt('garbage', "coalesce(status::text, '-') || ' ' || error"),
	qr/^- .*not an HTTP\/1\.x response/i,
	'garbage: a transport error, no status (' . attempt('garbage', 'error') . ')');
retried_on_schedule('garbage');

############################################################################
# Timeouts: the endpoint's timeout (2 seconds) ends the request, whether the
# receiver says nothing or one byte a second.  The good endpoint is served
# while the hostile request hangs.
############################################################################

for my $name (qw(silent drip))
{
	my ($hid, $good_at) = hostile_case($name, "$hurl/$name", "timeout => '2 seconds'");
	like(attempt($name, "coalesce(status::text, '-') || ' ' || error"),
		qr/^- .*timed out/i, "$name: a timeout error, no status");
	cmp_ok(attempt($name, 'duration_ms'), '>=', 1900, "$name: it lasted the endpoint's timeout");
	cmp_ok(attempt($name, 'duration_ms'), '<', 10000, "$name: and not much longer");
	cmp_ok($good_at, '<', attempt($name, 'extract(epoch FROM at)'),
		"$name: the good endpoint's event arrived while the hostile request hung");
	retried_on_schedule($name);
}
ok(wait_received($hlog, sub { grep { $_->{path} eq '/silent' && $_->{client_closed} } @_ }),
	'silent: the relay hung up on it');

############################################################################
# Floods: a 100 MB body, then (below) headers, 1xx responses and chunk
# framing.  Memory stays bounded, the body kept in the attempt log is
# capped at 512 bytes, and a 200 with a long body is delivered.
############################################################################

my ($hwm0, $rss0) = memory_kb($pid);
note("relay memory before the floods: VmHWM $hwm0 kB, VmRSS $rss0 kB");

hostile_case('huge', "$hurl/huge", "timeout => '1 minute'");
is(attempt('huge', "status || ' ' || coalesce(error, '-')"), '200 -', 'huge: 200, no error');
is(attempt('huge', 'length(response)'), '512', 'huge: 512 bytes of the body kept');
like(attempt('huge', 'response'), qr/^BEGIN\?\?\?0123456789abcdef0123/,
	'huge: the first bytes, non-printable ones as "?"');
is(sql("SELECT count(*) FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = 'huge'"),
	'0', 'huge: delivered, nothing to retry');
my @hung;
ok(wait_received($hlog, sub { @hung = grep { $_->{path} eq '/huge' && exists $_->{hung_up_after} } @_ }),
	'huge: the relay hung up before the body ended');
cmp_ok($hung[0]{hung_up_after}, '<', 100 * 1024 * 1024, 'huge: not all 100 MB were read')
  if @hung;
note('huge: the receiver sent ' . ($hung[0]{hung_up_after} // '?') . ' bytes before the relay hung up');

############################################################################
# Floods that are not a body: header lines (long or short), 1xx responses,
# a chunk extension without end.  Each is cut at its bound (http.h) long
# before the endpoint's timeout, and is a transport error that names the
# bound: the receiver misbehaved, so the event is retried.
############################################################################

for my $c ([ 'endless_headers', qr/the response's headers .*exceeded 64 kB/ ],
	[ 'many_headers', qr/the response's headers .*exceeded 64 kB/ ],
	[ 'continue_flood', qr/the response's headers \(1xx responses included\) exceeded 64 kB/ ],
	[ 'chunk_ext_flood', qr/the response's chunk framing .*exceeded 16 kB/ ],
	# "chunked" far along in one Transfer-Encoding line, as its final
	# coding: chunks, so the framing is counted.
	[ 'te_padded_flood', qr/the response's chunk framing .*exceeded 16 kB/ ])
{
	my ($name, $error) = @$c;
	hostile_case($name, "$hurl/$name", "timeout => '30 seconds'");
	like(attempt($name, "coalesce(status::text, '-') || ' ' || coalesce(error, '-')"),
		qr/^- $error/, "$name: a transport error that names the bound (" . attempt($name, 'error') . ')');
	cmp_ok(attempt($name, 'duration_ms'), '<', 10000,
		"$name: cut at the bound, not at the endpoint's 30 s timeout");
	retried_on_schedule($name);
}

# "chunked" in a Transfer-Encoding line of its own before another: not the
# final coding, so the body runs to the connection's end (RFC 9112, 6.3),
# and the flood is read as a long body: up to 64 kB, then hung up on, the
# status counting.
hostile_case('te_twice_flood', "$hurl/te_twice_flood", "timeout => '30 seconds'");
is(attempt('te_twice_flood', "status || ' ' || coalesce(error, '-')"), '200 -',
	'te_twice_flood: chunked not final: a long body, 200, no error (' . attempt('te_twice_flood', "coalesce(error, '-')") . ')');
cmp_ok(attempt('te_twice_flood', 'duration_ms'), '<', 10000,
	"te_twice_flood: hung up on at the read bound, not at the endpoint's 30 s timeout");

# Two chunk-extension floods open at once beside a healthy endpoint with a
# backlog: the floods are cut, and the backlog arrives.
sql(q{SELECT outbox.create_endpoint('ext_pair', '} . $hurl . q{/chunk_ext_flood', '{pair.*}', timeout => '30 seconds')});
sql(q{SELECT outbox.emit('pair.flood', '{}') FROM generate_series(1, 2)});
my @backlog = split /\n/, sql(q{SELECT outbox.emit('good.backlog', jsonb_build_object('i', i)) FROM generate_series(1, 1000) i});
ok(wait_received($good_log, got_all('/good', @backlog)),
	'two chunk-extension floods open: the healthy endpoint received its 1000 events');
ok($node->poll_query_until('postgres', "SELECT count(*) = 2 FROM outbox.attempts WHERE endpoint = 'ext_pair'"),
	'ext_pair: both attempts recorded');
is(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'ext_pair'
         AND error LIKE '%chunk framing%exceeded 16 kB' AND duration_ms < 10000"), '2',
	'ext_pair: both floods were cut at the framing bound, not at the timeout');

############################################################################
# Chunked bodies that never end: one fast (read up to 64 kB, then hung up
# on; the status counts, as for any long body, and the body kept in the
# attempt log is decoded), one a chunk at a time (the endpoint's timeout
# ends it).
############################################################################

hostile_case('chunked_endless', "$hurl/chunked_endless", "timeout => '30 seconds'");
is(attempt('chunked_endless', "status || ' ' || coalesce(error, '-')"), '200 -',
	'chunked_endless: 200, no error');
{
	my $data = substr('DECODED-' . ('0123456789abcdef' x 8), 0, 100);
	is(attempt('chunked_endless', 'response'), substr($data x 6, 0, 512),
		'chunked_endless: the 512 bytes kept are the decoded body, without the chunk framing');
}
ok(wait_received($hlog, sub { grep { $_->{path} eq '/chunked_endless' && exists $_->{hung_up_after} } @_ }),
	'chunked_endless: the relay hung up');

hostile_case('chunked_drip', "$hurl/chunked_drip", "timeout => '2 seconds'");
like(attempt('chunked_drip', "coalesce(status::text, '-') || ' ' || error"),
	qr/^- .*timed out/i, 'chunked_drip: a timeout error, no status');
cmp_ok(attempt('chunked_drip', 'duration_ms'), '>=', 1900, "chunked_drip: it lasted the endpoint's timeout");
cmp_ok(attempt('chunked_drip', 'duration_ms'), '<', 10000, 'chunked_drip: and not much longer');
retried_on_schedule('chunked_drip');

# A well-formed chunked answer (an extension, a trailer): delivered, the
# body kept decoded, and the connection used again for the next event,
# although libcurl hands outbox the chunked bytes undecoded.  A receiver
# of its own: the kept connection answers every request so.
my ($ck_url, $ck_log, $ck_rx) = start_hostile();
sql("SELECT outbox.create_endpoint('chunked_ok', '$ck_url/chunked_ok', '{h.chunked_ok}')");
my $ok1 = sql(q{SELECT outbox.emit('h.chunked_ok', '{"n": 1}')});
ok(answered_200($ok1), 'chunked_ok: delivered');
is(sql("SELECT response || '|' || coalesce(error, '-') FROM outbox.attempts WHERE event_id = '$ok1'"),
	'hello world|-', 'chunked_ok: the body is kept decoded, no error');
my $ok2 = sql(q{SELECT outbox.emit('h.chunked_ok', '{"n": 2}')});
ok(wait_received($ck_log, sub { grep { ($_->{on_connection} // 0) == 2 } @_ }),
	'chunked_ok: the next event went on the same connection');
ok(answered_200($ok2), 'chunked_ok: and was delivered');

# A kept connection that the receiver closes when the next request comes,
# without answering it (its idle timeout ran out just then): that is not
# the receiver's failure, and the request is sent again once, on a fresh
# connection (http1.c, as libcurl does).  One attempt, delivered; the
# receiver saw the event twice.
my ($kc_url, $kc_log, $kc_rx) = start_hostile();
sql("SELECT outbox.create_endpoint('closes_kept', '$kc_url/closes_kept', '{h.closes_kept}')");
my $kc1 = sql(q{SELECT outbox.emit('h.closes_kept', '{"n": 1}')});
ok(answered_200($kc1), 'closes_kept: the first event delivered');
my $kc2 = sql(q{SELECT outbox.emit('h.closes_kept', '{"n": 2}')});
ok(answered_200($kc2),
	'closes_kept: the second, whose kept connection was closed on it, delivered');
is(sql("SELECT count(*) || ' ' || count(error) FROM outbox.attempts WHERE event_id = '$kc2'"), '1 0',
	'closes_kept: in one attempt, without an error');
is(join(',', map { $_->{on_connection} // 1 }
	  grep { ($_->{headers}{'webhook-id'} // '') eq $kc2 } received($kc_log)), '2,1',
	'closes_kept: sent on the kept connection, then again on a fresh one');
$kc_rx->kill_kill;

# Framings that leave a kept connection in doubt (RFC 9112): the answer
# counts as its framing says, the connection is closed after it, and the
# next event goes on a fresh one.  A receiver of its own for each, that
# answers every request on a connection so and logs one on a connection
# used before.
for my $c ([ 'te_gzip_length', 'Transfer-Encoding gzip beside Content-Length: read to the end' ],
	[ 'folded_close', 'Connection: keep-alive folded onto a line " close"' ],
	[ 'http10_te', 'HTTP/1.0 with Transfer-Encoding' ],
	[ 'http10_close_keep', 'HTTP/1.0, close and then keep-alive' ])
{
	my ($name, $what) = @$c;
	my ($c_url, $c_log, $c_rx) = start_hostile();
	sql("SELECT outbox.create_endpoint('$name', '$c_url/canned/$name', '{h.$name}')");
	my $e1 = sql("SELECT outbox.emit('h.$name', '{\"n\": 1}')");
	ok(answered_200($e1), "$name ($what): delivered");
	is(sql("SELECT response || '|' || coalesce(error, '-') FROM outbox.attempts WHERE event_id = '$e1'"),
		'ok|-', "$name: the body as its framing says, no error");
	my $e2 = sql("SELECT outbox.emit('h.$name', '{\"n\": 2}')");
	ok(answered_200($e2), "$name: the next event delivered");
	is(join(',', map { $_->{on_connection} // 1 }
		  grep { my $w = $_->{headers}{'webhook-id'} // ''; $w eq $e1 || $w eq $e2 } received($c_log)),
		'1,1', "$name: the connection was closed after the answer, the next event went on a fresh one");
	$c_rx->kill_kill;
}

# An answer sent out of turn after a complete one (a 204, then an unasked
# 200 50 ms later) is not taken for the next event's answer: the kept
# connection it came on is closed, and the next event is sent on a fresh
# one, where it gets its own 204.
my ($lb_url, $lb_log, $lb_rx) = start_hostile();
sql("SELECT outbox.create_endpoint('late_bytes', '$lb_url/late_bytes', '{h.late_bytes}')");
my $lb1 = sql(q{SELECT outbox.emit('h.late_bytes', '{"n": 1}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$lb1' AND status = 204"),
	'late_bytes: the first event answered 204');
ok(wait_received($lb_log, sub { grep { exists $_->{late_sent} } @_ }),
	'late_bytes: the receiver sent its unasked 200');
my $lb2 = sql(q{SELECT outbox.emit('h.late_bytes', '{"n": 2}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$lb2'"),
	'late_bytes: the second event attempted');
is(sql("SELECT status FROM outbox.attempts WHERE event_id = '$lb2'"), '204',
	'late_bytes: the second event got its own answer (204), not the unasked 200');
is(join(',', map { $_->{on_connection} // 1 }
	  grep { ($_->{headers}{'webhook-id'} // '') eq $lb2 } received($lb_log)),
	'1', 'late_bytes: it was sent on a fresh connection');
$lb_rx->kill_kill;

my ($hwm1, $rss1) = memory_kb($pid);
note("relay memory after the floods: VmHWM $hwm1 kB, VmRSS $rss1 kB");
cmp_ok($hwm1 - $hwm0, '<', 20 * 1024, 'the relay\'s peak memory grew by less than 20 MB');
cmp_ok($rss1 - $rss0, '<', 20 * 1024, 'the relay\'s resident memory grew by less than 20 MB');

############################################################################
# Answers with a status: redirects are not followed, Retry-After is
# honoured (and capped), 410 disables, 400 dead-letters.
############################################################################

for my $s (301, 302)
{
	my $name = "redirect$s";
	hostile_case($name, "$hurl/status/$s?location=" .
		  "http%3A%2F%2Flocalhost%3A$good_port%2Ffollowed$s");
	is(attempt($name, 'status'), $s, "$name: the $s is recorded");
	retried_on_schedule($name);
	is(scalar(grep { $_->{path} eq "/followed$s" } received($good_log)), 0,
		"$name: the Location on another host was not requested");
}

for my $s (429, 503)
{
	my $name = "retry_after$s";
	hostile_case($name, "$hurl/status/$s?retry_after=7200");
	is(sql("SELECT r.attempts || ' ' || r.last_status || ' '
	               || (r.next_at BETWEEN now() + interval '115 min' AND now() + interval '121 min')
	          FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = '$name'"),
		"1 $s true", "$s: Retry-After of two hours honoured over the one-hour schedule");
}
# An absurd Retry-After is capped at a day.
hostile_case('retry_after_absurd', "$hurl/status/503?retry_after=99999999999999999999999");
is(sql("SELECT r.next_at BETWEEN now() + interval '23 hours' AND now() + interval '1 day'
          FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = 'retry_after_absurd'"),
	't', 'an absurd Retry-After is capped at one day');

hostile_case('gone', "$hurl/status/410");
is(sql("SELECT state || ' ' || state_reason FROM outbox.endpoint_status WHERE name = 'gone'"),
	'disabled 410 Gone', '410: the endpoint is disabled');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint = 'gone'"), '0',
	'410: the event is not a dead letter (it waits for the endpoint)');

hostile_case('bad_request', "$hurl/status/400");
is(sql("SELECT attempts || ' ' || last_status FROM outbox.dead_letters WHERE endpoint = 'bad_request'"),
	'1 400', '400: a dead letter after one attempt');

############################################################################
# All together now: the hostile endpoints' retries come due at once, and
# the relay still serves the good endpoint.
############################################################################

sql("UPDATE outbox.retries SET next_at = now()");
# A 429 or 503 with Retry-After paused its whole endpoint in the relay for
# that long (docs/webhooks.md, Rate limits); resuming the endpoint ends the pause.
sql(q{SELECT outbox.resume_endpoint(name) FROM outbox.endpoints
       WHERE name IN ('retry_after429', 'retry_after503', 'retry_after_absurd')});
my @last = split /\n/, sql(q{SELECT outbox.emit('good.last', jsonb_build_object('i', i)) FROM generate_series(1, 20) i});
my %want = map { $_ => 1 } @last;
ok(wait_received($good_log, sub { (grep { $want{ $_->{headers}{'webhook-id'} } } @_) == 20 }),
	'with every hostile retry due at once, the good endpoint received 20 new events');
ok($node->poll_query_until('postgres', q{
SELECT NOT EXISTS (SELECT FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id
                    WHERE e.name <> 'gone' AND r.attempts < 2)}),
	'no hostile retry is left waiting for its second attempt');
# Every event that failed was sent again: a second attempt logged, and for
# the hostile receiver's endpoints a second request with the same
# webhook-id.  (An attempt that failed after a "200" status line is a
# failure like any other: it must not count as delivered later.)
for my $name (qw(refused nxdomain reset_status reset_headers reset_body garbage silent drip
	endless_headers many_headers continue_flood chunk_ext_flood chunked_drip redirect301 redirect302 retry_after429 retry_after503 retry_after_absurd))
{
	is(sql("SELECT string_agg(attempt::text, ',' ORDER BY attempt) FROM outbox.attempts WHERE endpoint = '$name'"),
		'1,2', "$name: attempted a second time");
}
for my $name (qw(reset_status reset_headers reset_body garbage endless_headers many_headers
	continue_flood chunk_ext_flood chunked_drip))
{
	my $twice = sub {
		(grep { $_->{path} eq "/$name" && ($_->{headers}{'webhook-id'} // '') eq $id{$name} } @_) == 2;
	};
	# (No need to wait for a request whose attempt was never made.)
	ok(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = '$name'") == 2
		  && wait_received($hlog, $twice),
		"$name: the receiver got the event a second time");
}
############################################################################
# Never-answering endpoints beside a healthy one on the same host and port
# (a receiver of their own, to which no connection is open yet).  Each
# request gets a connection of its own at once: the healthy endpoint's
# events arrive while the never-answering requests still hang, and none
# waits for another endpoint's connection.
############################################################################

my ($iso_url, $iso_log, $iso_rx) = start_hostile();
for my $name (qw(never_a never_b))
{
	sql("SELECT outbox.create_endpoint('$name', '$iso_url/silent', '{iso.silent}', timeout => '30 seconds')");
}
sql(q{SELECT outbox.emit('iso.silent', jsonb_build_object('i', i)) FROM generate_series(1, 3) i});
ok(wait_received($iso_log, sub { grep { $_->{path} eq '/silent' } @_ }),
	'a never-answering request holds a connection to the receiver');
sql("SELECT outbox.create_endpoint('beside', '$iso_url/ok', '{iso.ok}')");
my @beside = split /\n/, sql(q{SELECT outbox.emit('iso.ok', jsonb_build_object('i', i)) FROM generate_series(1, 20) i});
ok($node->poll_query_until('postgres', "SELECT count(*) = 20 FROM outbox.attempts WHERE endpoint = 'beside'"),
	'beside: 20 attempts recorded');
is(sql("SELECT count(*) FILTER (WHERE status = 200) || ' ' || count(*) FILTER (WHERE error IS NOT NULL)
          FROM outbox.attempts WHERE endpoint = 'beside'"),
	'20 0', 'beside: all 20 delivered, none failed');
is(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint IN ('never_a', 'never_b')"), '0',
	'beside: delivered while the never-answering requests still hang');
ok(wait_received($iso_log, got_all('/ok', @beside)), 'beside: the receiver got the 20 events');
ok(wait_received($iso_log, sub { (grep { $_->{path} eq '/silent' && !exists $_->{client_closed} } @_) == 6 }),
	'the 6 never-answering requests (two endpoints, 3 each) all reached the receiver');

is(relay_pid(), $pid, 'the relay is still the same process');
my ($hwm2) = memory_kb($pid);
cmp_ok($hwm2 - $hwm0, '<', 20 * 1024, 'peak memory still bounded after the second round');
is(sql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay'}), '1',
	'one relay');
unlike(PostgreSQL::Test::Utils::slurp_file($node->logfile), qr/terminated by signal|(?:server process|client backend) .* exited with exit code [1-9]/,
	'no process crashed');

$node->stop;
$good_rx->kill_kill;
$hostile_rx->kill_kill;
$iso_rx->kill_kill;
$ck_rx->kill_kill;
done_testing();
