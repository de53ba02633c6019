# Client authentication (auth => jsonb): a client certificate presented to
# a TLS receiver that requires one (mutual TLS, certificates made here with
# openssl), a bearer token, and OAuth2 client credentials against the test
# receiver's token server: the token is fetched once for many deliveries,
# fetched again after a 401 and once it expires; a token URL the address
# policy refuses and a wrong client secret are recorded as authentication
# failures and retried.  No secret reaches outbox.attempts or the server
# log.  With outbox.senders = 1 and one request in flight at a time, a
# request goes to the sender process (sender.c), so the client certificate
# crosses the relay-to-sender queue.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use Digest::MD5 qw(md5_hex);
use MIME::Base64 qw(encode_base64);
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $dir = PostgreSQL::Test::Utils::tempdir();

# A CA; a server certificate for 127.0.0.1 and a client certificate, both
# signed by it.
make_certificates($dir, [ 'server', "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth" ],
	[ 'client', 'extendedKeyUsage = clientAuth' ]);
# A client certificate of another CA, which the receiver does not trust
# (self-signed).
openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
	'-subj', '/CN=outbox-stranger', '-keyout', "$dir/stranger.key", '-out', "$dir/stranger.crt");
chmod 0644, "$dir/stranger.crt";
chmod 0600, "$dir/stranger.key";
ok(-s "$dir/client.crt" && -s "$dir/server.crt" && -s "$dir/stranger.crt", 'certificates made');

# The HTTPS receiver that asks for a client certificate from the CA.
my ($tls_url, $tls_log, $tls) =
  start_tls_receiver("$dir/server.crt", "$dir/server.key", "$dir/ca.crt");

my $node = outbox_node('auth', conf => qq{
outbox.retry_schedule = '300ms'
outbox.senders = 1
outbox.ca_file = '$dir/ca.crt'
log_min_messages = debug1
# (the statements that carry the secrets are not logged: docs/privileges.md,
# "Secrets in errors, views and logs"; the relay's own messages are)
log_statement = none
});
my ($url, $log) = start_receiver();
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'outbox sender'"),
	'the sender process runs');

sub attempts_of
{
	my ($ep) = @_;
	return sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = " . lit($ep));
}

########################################################################
# Mutual TLS
########################################################################

sql(qq{SELECT outbox.create_endpoint('no-cert', '$tls_url/no-cert', '{m.*}', max_in_flight => 1,
	max_attempts => 100)});
sql(qq{SELECT outbox.create_endpoint('mtls', '$tls_url/mtls', '{m.*}', max_in_flight => 1,
	auth => jsonb_build_object('client_cert', '$dir/client.crt', 'client_key', '$dir/client.key'))});
sql(qq{SELECT outbox.create_endpoint('mtls-bearer', '$tls_url/mtls-bearer', '{m.*}', max_in_flight => 1,
	auth => jsonb_build_object('client_cert', '$dir/client.crt', 'client_key', '$dir/client.key',
	                           'bearer', 'tok-Mtls-91ab'))});
my $mid = sql(q{SELECT outbox.emit('m.event', '{"mtls": true}')});
ok(wait_received($tls_log, sub { my $n = ids_at('/mtls', @_); $n->{$mid} }),
	'with a client certificate the event is delivered');
ok(wait_received($tls_log, sub { my $n = ids_at('/mtls-bearer', @_); $n->{$mid} }),
	'with a client certificate and a bearer token too');
my ($m) = grep { $_->{path} eq '/mtls' } received($tls_log);
is($m->{client}, 'outbox-client', 'the receiver saw the client certificate');
my ($mb) = grep { $_->{path} eq '/mtls-bearer' } received($tls_log);
is($mb->{client}, 'outbox-client', 'beside a bearer token as well');
is($mb->{headers}{authorization}, 'Bearer tok-Mtls-91ab', 'which is sent as Authorization');
# The receiver's alert reaches libcurl unless a reset overtakes it ("not
# connected", "reset by peer"): such an attempt cannot know why and says
# what it saw.  The receiver ends a refused connection so that the alert
# comes first (webhook_receiver.py, refuse(); closed at once, 85 of 200
# curl requests here saw the reset, and CI once saw it on all four), so of
# several attempts some are recorded as authentication failures, and none
# as anything but that or the connection's end.
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 4 FROM outbox.attempts WHERE endpoint = 'no-cert'"),
	'without a client certificate: attempted and retried');
my @no_cert = split /\n/, sql("SELECT error FROM outbox.attempts WHERE endpoint = 'no-cert' ORDER BY at");
my $auth_failure = qr/^authentication failed: the receiver asks for a client certificate \(auth's client_cert\): .*alert/;
cmp_ok(scalar(grep { /$auth_failure/ } @no_cert), '>', 0,
	'without a client certificate: recorded as an authentication failure')
  or diag join("\n", @no_cert);
is(join("\n", grep { !/$auth_failure/ && !/not connected|reset by peer|broken pipe|connection died|SSL_ERROR_SYSCALL|closed/i } @no_cert), '',
	'without a client certificate: no attempt recorded as anything else');
is(scalar(grep { $_->{path} eq '/no-cert' } received($tls_log)), 0,
	'without a client certificate the receiver got nothing');
is(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'no-cert' AND (status IS NOT NULL OR error = '')"),
	'0', 'and each attempt is a failure without a status');

# A certificate the receiver does not trust.
sql(qq{SELECT outbox.create_endpoint('stranger', '$tls_url/stranger', '{s.*}', max_attempts => 100,
	auth => jsonb_build_object('client_cert', '$dir/stranger.crt', 'client_key', '$dir/stranger.key'))});
sql(q{SELECT outbox.emit('s.event', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 1 FROM outbox.attempts WHERE endpoint = 'stranger'"),
	'untrusted client certificate: attempted');
# (With TLS 1.3 the receiver's refusal comes after the client has
# finished its handshake: read in time, it is the alert; otherwise the
# connection is found closed first, a transport error without a status.)
like(sql("SELECT error FROM outbox.attempts WHERE endpoint = 'stranger' AND status IS NULL ORDER BY at LIMIT 1"),
	qr/^authentication failed: the receiver refused the client certificate: .*alert|not connected|reset|closed/i,
	'untrusted client certificate: recorded as a failure without a status');
is(scalar(grep { $_->{path} eq '/stranger' } received($tls_log)), 0,
	'untrusted client certificate: the receiver got nothing');

# A certificate file gone after create_endpoint checked it: each attempt
# fails as an authentication failure, and is retried.
PostgreSQL::Test::Utils::append_to_file("$dir/gone.crt", slurp_file("$dir/client.crt"));
sql(qq{SELECT outbox.create_endpoint('mtls-gone', '$tls_url/mtls-gone', '{g.*}', max_attempts => 100,
	auth => jsonb_build_object('client_cert', '$dir/gone.crt', 'client_key', '$dir/client.key'))});
unlink("$dir/gone.crt") or die "cannot remove $dir/gone.crt: $!";
sql(q{SELECT outbox.emit('g.event', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 2 FROM outbox.attempts WHERE endpoint = 'mtls-gone'"),
	'certificate file gone: attempted and retried');
like(sql("SELECT error FROM outbox.attempts WHERE endpoint = 'mtls-gone' ORDER BY at LIMIT 1"),
	qr/^authentication failed: the client certificate or key could not be used: /,
	'certificate file gone: recorded as an authentication failure');
is(scalar(grep { $_->{path} eq '/mtls-gone' } received($tls_log)), 0,
	'certificate file gone: the receiver got nothing');

########################################################################
# Bearer
########################################################################

my $bearer = 'tok-Bearer-5d8e21c0';
sql(qq{SELECT outbox.create_endpoint('bearer', '$url/bearer?require_bearer=$bearer&echo=1', '{b.*}',
	auth => '{"bearer": "$bearer"}')});
my $bid = sql(q{SELECT outbox.emit('b.event', '{}', headers => '{"authorization": "Bearer attacker", "X-T": "1"}')});
ok(wait_received($log, got_all('/bearer', $bid)), 'bearer: delivered');
my ($b) = grep { $_->{path} eq '/bearer' } received($log);
is($b->{status}, 200, 'bearer: the receiver accepted the token');
is(join(' | ', map { $_->[1] } grep { lc($_->[0]) eq 'authorization' } @{ $b->{header_list} }),
	"Bearer $bearer", "bearer: only auth's Authorization is sent, not the event's");
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'bearer'"), 'bearer: recorded');
my $echo = sql("SELECT response FROM outbox.attempts WHERE endpoint = 'bearer'");
unlike($echo, qr/5d8e21c0/, 'bearer: the echoed token is not in outbox.attempts');
like($echo, qr/Bearer \[redacted\]/, 'bearer: it says [redacted] there');

########################################################################
# OAuth2: cached, sent, fetched again after a 401 and on expiry
########################################################################

my $secret = 's3cret-CS-77aa';
my $md5 = md5_hex($secret);
my $token_url = "$url/token?token=1&client_id=outbox+client&secret_md5=$md5";
sub oauth_auth
{
	my ($turl, $cs, %more) = @_;
	return "jsonb_build_object('oauth2', jsonb_build_object('token_url', " . lit($turl)
	  . ", 'client_id', 'outbox client', 'client_secret', " . lit($cs)
	  . join('', map { ", '$_', " . lit($more{$_}) } sort keys %more) . '))';
}
sql("SELECT outbox.create_endpoint('oauth', '$url/oauth?require_issued=1&echo=token', '{o.*}', "
	  . 'auth => ' . oauth_auth($token_url, $secret, scope => 'hooks:write read') . ')');
my @oids = split /\n/, sql(q{SELECT outbox.emit('o.event', jsonb_build_object('n', n)) FROM generate_series(1, 20) n});
ok(wait_received($log, got_all('/oauth', @oids)), 'oauth2: 20 events delivered');
my @tokreq = grep { $_->{path} eq '/token' } received($log);
is(scalar(@tokreq), 1, 'oauth2: the token server was asked once for all of them');
my $tr = $tokreq[0];
is($tr->{headers}{'content-type'}, 'application/x-www-form-urlencoded', 'oauth2: a form is posted');
is($tr->{body}, 'grant_type=client_credentials&scope=hooks%3Awrite+read',
	'oauth2: the grant type and the scope, form-encoded');
is($tr->{headers}{authorization}, 'Basic ' . encode_base64("outbox+client:$secret", ''),
	'oauth2: the client authenticates with HTTP Basic (id and secret form-encoded)');
my %used = map { $_->{headers}{authorization} => 1 } grep { $_->{path} eq '/oauth' } received($log);
is(scalar(keys %used), 1, 'oauth2: every delivery carried the one token');
like((keys %used)[0], qr/^Bearer tok-1-/, 'oauth2: the token the server issued');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 20 FROM outbox.attempts WHERE endpoint = 'oauth' AND status = 200"),
	'oauth2: 20 deliveries recorded');

# The receiver takes each token three times, then answers 401: the relay
# fetches another, and the event refused is retried with it.
my $token2 = "$url/token2?token=1&client_id=outbox+client&secret_md5=$md5";
sql("SELECT outbox.create_endpoint('oauth401', '$url/oauth401?require_issued=1&token_uses=3', '{p.*}', "
	  . 'max_in_flight => 1, auth => ' . oauth_auth($token2, $secret) . ')');
my @pids;
push @pids, sql("SELECT outbox.emit('p.event', jsonb_build_object('n', $_))") for 1 .. 6;
ok(wait_received($log, sub { my $n = ids_at('/oauth401', grep { $_->{status} == 200 } @_);
	!grep { !$n->{$_} } @pids }), 'after a 401: every event delivered');
is(scalar(grep { $_->{path} eq '/token2' } received($log)), 2,
	'after a 401: the token was fetched once more');
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 6 FROM outbox.attempts WHERE endpoint = 'oauth401' AND status = 200"),
	'after a 401: six deliveries recorded');
is(sql("SELECT string_agg(attempt || ':' || status, ',' ORDER BY at) FROM outbox.attempts
         WHERE endpoint = 'oauth401' AND event_id IN (SELECT event_id FROM outbox.attempts
                                                       WHERE endpoint = 'oauth401' AND status = 401)"),
	'1:401,2:200', 'the event refused with the old token is retried, not dead-lettered');

# A token that expires (expires_in 1: kept 0.9 s) is fetched again.
my $token3 = "$url/token3?token=1&expires_in=1&client_id=outbox+client&secret_md5=$md5";
sql("SELECT outbox.create_endpoint('oauth-exp', '$url/oauth-exp?require_issued=1', '{x.*}', "
	  . 'auth => ' . oauth_auth($token3, $secret) . ')');
my $x1 = sql(q{SELECT outbox.emit('x.event', '{}')});
ok(wait_received($log, got_all('/oauth-exp', $x1)), 'expiring token: first event delivered');
my $first_at = sql('SELECT clock_timestamp()');
ok($node->poll_query_until('postgres', "SELECT clock_timestamp() > '$first_at'::timestamptz + interval '1 second'"),
	'expiring token: its lifetime has passed');
my $x2 = sql(q{SELECT outbox.emit('x.event', '{}')});
ok(wait_received($log, got_all('/oauth-exp', $x2)), 'expiring token: second event delivered');
is(scalar(grep { $_->{path} eq '/token3' } received($log)), 2, 'expiring token: fetched again');

# The auth changed while its token request is out (the token server takes
# 3 s): the answer, for an auth the endpoint no longer has, still lets the
# endpoint's waiting delivery go, without a token now.
my $token6 = "$url/token6?token=1&delay=3&client_id=outbox+client&secret_md5=$md5";
sql("SELECT outbox.create_endpoint('oauth-swap', '$url/oauth-swap', '{w.*}', "
	  . 'auth => ' . oauth_auth($token6, $secret) . ')');
my $w1 = sql(q{SELECT outbox.emit('w.event', '{}')});
my $asked_at = sql('SELECT clock_timestamp()');
$node->poll_query_until('postgres', "SELECT clock_timestamp() > '$asked_at'::timestamptz + interval '1 second'")
  or die 'clock did not move';
sql(q{SELECT outbox.alter_endpoint('oauth-swap', auth => '{}')});
{
	my $got;
	for (my $i = 0; $i < 200 && !$got; $i++)
	{
		$got = got_all('/oauth-swap', $w1)->(received($log));
		usleep(100_000) unless $got;
	}
	ok($got, 'auth changed during a token request: the delivery goes once the answer comes');
}

########################################################################
# Authentication failures: recorded as such, retried
########################################################################

# The token URL on an address outbox.allowed_networks (127.0.0.1/32) does
# not allow: no packet goes there.
(my $refused_url = $token_url) =~ s/127\.0\.0\.1/127.0.0.2/;
sql("SELECT outbox.create_endpoint('oauth-refused', '$url/refused?require_issued=1', '{r.*}', "
	  . 'max_attempts => 100, auth => ' . oauth_auth($refused_url, $secret) . ')');
# A wrong client secret: the token server answers 401 invalid_client.
sql("SELECT outbox.create_endpoint('oauth-wrong', '$url/wrong?require_issued=1', '{w.*}', "
	  . 'max_attempts => 100, auth => ' . oauth_auth("$url/token4?token=1&client_id=outbox+client&secret_md5=$md5",
		'not-the-secret') . ')');
# A token server that answers 200 with 15,000 nested arrays: refused
# before it is parsed, and the relay goes on.
sql("SELECT outbox.create_endpoint('oauth-deep', '$url/deep?require_issued=1', '{d.*}', "
	  . 'max_attempts => 100, auth => '
	  . oauth_auth("$url/token5?token=1&token_body=deep&client_id=outbox+client&secret_md5=$md5", $secret) . ')');
my $relay = relay_pid();
my $rid = sql(q{SELECT outbox.emit('r.event', '{}')});
my $wid = sql(q{SELECT outbox.emit('w.event', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 2 FROM outbox.attempts WHERE endpoint = 'oauth-refused'"),
	'token URL refused: attempted and retried');
like(sql("SELECT error FROM outbox.attempts WHERE endpoint = 'oauth-refused' ORDER BY at LIMIT 1"),
	qr/^authentication failed: the OAuth2 token request failed: refused to connect to 127\.0\.0\.2.*outbox\.allowed_networks/,
	'token URL refused: recorded as an authentication failure that says why');
is(sql("SELECT count(*) FROM outbox.attempts WHERE endpoint = 'oauth-refused' AND status IS NOT NULL"),
	'0', 'token URL refused: no attempt has a status');
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 2 FROM outbox.attempts WHERE endpoint = 'oauth-wrong'"),
	'wrong client secret: attempted and retried');
is(sql("SELECT DISTINCT error FROM outbox.attempts WHERE endpoint = 'oauth-wrong'"),
	'authentication failed: the OAuth2 token URL answered HTTP 401 (invalid_client)',
	'wrong client secret: recorded as an authentication failure');
sql(q{SELECT outbox.emit('d.event', '{}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) >= 1 FROM outbox.attempts WHERE endpoint = 'oauth-deep'"),
	'a hostile token response: attempted');
is(sql("SELECT DISTINCT error FROM outbox.attempts WHERE endpoint = 'oauth-deep'"),
	'authentication failed: the token response is not a JSON object',
	'a hostile token response: recorded as an authentication failure');
is(relay_pid(), $relay, 'the relay is the one from before');
is(scalar(grep { $_->{path} =~ m{^/(refused|wrong|deep)$} } received($log)), 0,
	'none of these endpoints got a request');
is(sql("SELECT count(*) FROM outbox.dead_letters WHERE endpoint IN ('oauth-refused', 'oauth-wrong')"),
	'0', 'nothing dead-lettered');
is(sql("SELECT state FROM outbox.endpoint_status WHERE name = 'oauth-wrong'"), 'active',
	'the endpoint stays active');

# Fixed: the next retry fetches a token and delivers.
sql("SELECT outbox.alter_endpoint('oauth-wrong', auth => "
	  . oauth_auth("$url/token4?token=1&client_id=outbox+client&secret_md5=$md5", $secret) . ')');
ok(wait_received($log, sub { my $n = ids_at('/wrong', grep { $_->{status} == 200 } @_); $n->{$wid} }),
	'client secret fixed with alter_endpoint: the event is delivered');

########################################################################
# No secret in the attempt log or the server log
########################################################################

my %issued = map { my $a = $_->{headers}{authorization} // ''; $a =~ /^Bearer (.*)/ ? ($1 => 1) : () }
  grep { $_->{path} =~ m{^/oauth} } received($log);
my @secrets = ($bearer, 'tok-Mtls-91ab', $secret, keys %issued);
ok(keys %issued >= 4, 'the tokens issued: ' . scalar(keys %issued));
my $attempts_text = sql(q{SELECT string_agg(coalesce(error, '') || ' ' || coalesce(response, ''), ' ')
                            FROM outbox.attempts});
my $server_log = slurp_file($node->logfile);
is(join(' ', grep { index($attempts_text, $_) >= 0 } @secrets), '',
	'no token or secret in outbox.attempts');
like($attempts_text, qr/invalid token \[redacted\]/, 'an echoed OAuth2 token says [redacted]');
is(join(' ', grep { index($server_log, $_) >= 0 } @secrets), '',
	'no token or secret in the server log (at log_min_messages = debug1)');

$node->stop;
$tls->kill_kill;
done_testing();
