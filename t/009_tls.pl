# TLS: an https endpoint whose certificate the system does not trust is
# refused (the verification error is in outbox.attempts); once
# outbox.ca_file names the CA that signed it (ALTER SYSTEM and a reload),
# the retried event is delivered.  A certificate from that CA for another
# name stays refused.  The certificates are made here with openssl.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $dir = PostgreSQL::Test::Utils::tempdir();

# A CA, and two server certificates signed by it: one for 127.0.0.1 and
# localhost, one for another name only.
make_certificates($dir,
	[ 'server', "subjectAltName = IP:127.0.0.1,DNS:localhost\nextendedKeyUsage = serverAuth" ],
	[ 'other', "subjectAltName = DNS:other.example\nextendedKeyUsage = serverAuth" ]);
ok(-s "$dir/server.crt" && -s "$dir/other.crt", 'certificates made');

# An HTTPS receiver per server certificate.
my ($url, $log, $rx) = start_tls_receiver("$dir/server.crt", "$dir/server.key");
my ($other_url, $other_log, $other_rx) = start_tls_receiver("$dir/other.crt", "$dir/other.key");

my $node = outbox_node('tls', conf => "outbox.retry_schedule = '500ms'\n");
wait_for_relay() or die 'relay did not start';
is(sql('SHOW outbox.ca_file'), '', 'outbox.ca_file is empty: the system store is used');

# Many attempts: the event must survive until the CA is configured.
sql("SELECT outbox.create_endpoint('tls', '$url/tls', '{tls.*}', max_attempts => 100)");
sql("SELECT outbox.create_endpoint('tls_name', '$other_url/other', '{tls.*}', max_attempts => 100)");
my $id = sql(q{SELECT outbox.emit('tls.event', '{"secure": true}')});

ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 2 FROM outbox.attempts WHERE endpoint = 'tls'"),
	'untrusted: attempted and retried');
is(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'tls' AND status IS NOT NULL"), '0',
	'untrusted: no attempt got an HTTP status');
like(sql("SELECT error FROM outbox.attempts WHERE endpoint = 'tls' ORDER BY at LIMIT 1"),
	qr/SSL certificate problem|certificate verify failed/, 'untrusted: refused, the error says why');
is(scalar(received($log)), 0, 'untrusted: the receiver got no request');
is(sql("SELECT count(*) FROM outbox.dead_letters"), '0', 'no dead letter yet');

# Trust the CA.
ok(reload_with('outbox.ca_file' => "$dir/ca.crt"), 'the relay reloaded its configuration');
is(sql('SHOW outbox.ca_file'), "$dir/ca.crt", 'outbox.ca_file names the CA');

ok(wait_received($log, sub { grep { $_->{headers}{'webhook-id'} eq $id } @_ }),
	'with outbox.ca_file, the retried event is delivered over https');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'tls' AND status = 200"),
	'the delivery is recorded as a 200');
is(sql("SELECT count(*) FROM outbox.retries r JOIN outbox.endpoints e ON e.id = r.endpoint_id WHERE e.name = 'tls'"),
	'0', 'nothing left to retry');
my ($r) = grep { $_->{headers}{'webhook-id'} eq $id } received($log);
like($r->{body}, qr/"data":\{"secure": true\}/, 'the body arrived intact');

# A certificate from the trusted CA for another name is still refused.
my $n = sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'tls_name'");
ok($node->poll_query_until('postgres',
	"SELECT count(*) > $n FROM outbox.attempts WHERE endpoint = 'tls_name'"),
	'wrong name: attempted after the reload');
like(sql("SELECT error FROM outbox.attempts WHERE endpoint = 'tls_name' ORDER BY at DESC LIMIT 1"),
	qr/^SSL certificate problem: no certificate subject name matches the address 127\.0\.0\.1$/,
	'wrong name: refused although the CA is trusted');
is(scalar(received($other_log)), 0, 'wrong name: the receiver got no request');

# A fresh event is delivered at once.
my $id2 = sql(q{SELECT outbox.emit('tls.event', '{"n": 2}')});
ok(wait_received($log, sub { grep { $_->{headers}{'webhook-id'} eq $id2 } @_ }),
	'a new event is delivered over https');

# Session resumption: a receiver that closes the connection after each
# answer gets each event on a new connection, whose handshake resumes the
# session the one before got (a TLS 1.3 ticket).
sql("SELECT outbox.create_endpoint('resume', '$url/resume?close=1', '{resume.*}', ordered => true)");
sql(q{SELECT outbox.emit('resume.event', jsonb_build_object('n', i), key => 'k') FROM generate_series(1, 4) i});
my @resumed;
ok(wait_received($log, sub { @resumed = grep { $_->{path} eq '/resume' } @_; @resumed >= 4 }),
	'resume: four events on four connections');
is(join(' ', map { $_->{tls_resumed} ? 'resumed' : 'full' } @resumed), 'full resumed resumed resumed',
	'resume: the first handshake is a full one, each later one resumes a session');

# Trailers.  Over HTTP/1.1 the relay reads libcurl's raw chunked body and
# its trailer lines itself; over HTTP/2 libcurl hands the trailers (their
# own HEADERS frame) to the header callback after the head, where they
# must not be read as the next response's status line: that cleared the
# head's webhook-delivery, and a 500 asking to disable the endpoint was
# only retried.
my ($h2_url, $h2_log, $h2_rx) = start_h2_receiver("$dir/server.crt", "$dir/server.key");
sql("SELECT outbox.create_endpoint('trailer_h1', '$url/t1?status=500&delivery=disable&trailer=1', '{trail.*}')");
sql("SELECT outbox.create_endpoint('trailer_h2', '$h2_url/t2?status=500&delivery=disable&trailer=1', '{trail.*}')");
sql(q{SELECT outbox.emit('trail.event', '{"n": 3}')});
for my $ep ('trailer_h1', 'trailer_h2')
{
	ok($node->poll_query_until('postgres',
		"SELECT state = 'disabled' FROM outbox.endpoint_status WHERE name = '$ep'"),
		"$ep: the head's webhook-delivery: disable is read despite the trailer");
	is(sql("SELECT count(*) || ' ' || min(status) FROM outbox.attempts WHERE endpoint = '$ep'"), '1 500',
		"$ep: one attempt, answered 500, not retried");
}
is(scalar(grep { $_->{version} eq '2' } received($h2_log)), 1, 'the HTTP/2 receiver was asked once');

# The CA file rewritten in place with another CA, and a reload: the
# connection kept alive from before (verified against the old CA) is
# closed, and the next event is refused.
openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
	'-subj', '/CN=outbox other CA', '-keyout', "$dir/ca2.key", '-out', "$dir/ca2.crt",
	'-addext', 'basicConstraints=critical,CA:TRUE',
	'-addext', 'keyUsage=critical,keyCertSign,cRLSign');
PostgreSQL::Test::Utils::append_to_file("$dir/ca.new", PostgreSQL::Test::Utils::slurp_file("$dir/ca2.crt"));
chmod 0644, "$dir/ca.new";
{
	# The same name and file (inode): only what is in it changes.
	open(my $fh, '+<', "$dir/ca.crt") or die "cannot open $dir/ca.crt: $!";
	print $fh PostgreSQL::Test::Utils::slurp_file("$dir/ca.new");
	truncate($fh, tell($fh));
	close $fh;
}
my $offset = -s $node->logfile;
sql('SELECT pg_reload_conf()');
ok($node->wait_for_log(qr/outbox relay reloaded its configuration/, $offset),
	'CA file rewritten: the relay reloaded its configuration');
my $id3 = sql(q{SELECT outbox.emit('tls.event', '{"n": 3}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 1 FROM outbox.attempts WHERE endpoint = 'tls' AND event_id = '$id3'"),
	'CA file rewritten: the next event was attempted');
like(sql("SELECT coalesce(status::text, '-') || ' ' || error FROM outbox.attempts
           WHERE endpoint = 'tls' AND event_id = '$id3' ORDER BY at LIMIT 1"),
	qr/^- .*(SSL certificate problem|certificate verify failed)/,
	'CA file rewritten: refused, the certificate is checked against the new CA');
is(scalar(grep { $_->{headers}{'webhook-id'} eq $id3 } received($log)), 0,
	'CA file rewritten: the receiver did not get it on the old connection');

$node->stop;
$rx->kill_kill;
$other_rx->kill_kill;
done_testing();
