# Secrets of an endpoint stay the endpoint's: an application that may only
# emit cannot override or add to the endpoint's own headers (its
# Authorization, say), a receiver that echoes its request does not put
# them into outbox.attempts, and a URL's credentials are not echoed in
# errors.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('secrets', conf => "outbox.retry_schedule = '1h'\n");
my ($url, $log, $receiver) = start_receiver();

# An application role that may emit and nothing more.
sql(q{
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA outbox TO app;
GRANT EXECUTE ON FUNCTION outbox.emit(text, jsonb, text, jsonb, timestamptz, text, timestamptz, integer) TO app;
});

my $admin_token = 'Bearer ADMIN-7f3a91c2e5';
sql(qq{SELECT outbox.create_endpoint('guarded', '$url/guarded?echo=1',
	event_types => '{t.guarded}',
	headers => '{"Authorization": "$admin_token", "X-Tenant": "acme-tenant", "X-V": "1"}')});

# The emitter's headers: one of the endpoint's names in another case, one
# of its own.
my $id = $node->safe_psql('postgres', q{
SELECT outbox.emit('t.guarded', '{}', headers =>
	'{"authorization": "Bearer attacker", "x-TENANT": "evil", "X-Trace": "t-1"}')},
	extra_params => [ '-U', 'app' ]);

ok(wait_received($log, got_all('/guarded', $id)), 'the event arrived');
my ($req) = grep { $_->{path} eq '/guarded' } received($log);
sub values_of
{
	my ($r, $name) = @_;
	return join(' | ', map { $_->[1] } grep { lc($_->[0]) eq $name } @{ $r->{header_list} });
}
is(values_of($req, 'authorization'), $admin_token,
	"the endpoint's Authorization is the only one sent");
is(values_of($req, 'x-tenant'), 'acme-tenant',
	"an endpoint's header wins whatever the case of the emitter's");
is(values_of($req, 'x-trace'), 't-1', "an emitter's header of its own name is sent");

# The receiver echoed the request: the endpoint's header values are not in
# the attempt log, the rest of the echo is.
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'guarded'"),
	'the attempt is recorded');
my $response = sql("SELECT response FROM outbox.attempts WHERE endpoint = 'guarded'");
unlike($response, qr/ADMIN-7f3a91c2e5/, 'the Authorization value is not in outbox.attempts');
unlike($response, qr/acme-tenant/, 'nor another header value of the endpoint');
like($response, qr/\[redacted\]/, 'where they stood it says [redacted]');
like($response, qr/t-1/, "the rest of the echo is kept (the event's own header)");

# A value cut off where the kept response (512 bytes) ends is redacted too.
# The echo starts with the event's body: a first event finds where the
# token stands, a second one is padded so that the cut falls inside it.
sql(qq{SELECT outbox.create_endpoint('cut', '$url/cut?echo=1',
	event_types => '{t.cut}', headers => '{"Authorization": "$admin_token"}')});
sub cut_response
{
	my ($pad) = @_;
	my $id = sql("SELECT outbox.emit('t.cut', jsonb_build_object('pad', repeat('p', $pad)))");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$id'")
	  or die "no attempt recorded for $id";
	return sql("SELECT response FROM outbox.attempts WHERE event_id = '$id'");
}
my $at = index(cut_response(0), '[redacted]');
$at = index(cut_response(0), 'Bearer ADMIN') if $at < 0;    # without redaction
ok($at > 0 && $at < 490, "the token stands at $at of the echo");
# Keep "Bearer ADMIN-7" (14 bytes) of it, cut off after that.
$response = cut_response(512 - 14 - $at);
unlike($response, qr/ADMIN/, 'no start of the token where the kept response is cut off');
like($response, qr/\[redacted\]$/, 'the cut-off start says [redacted]');

my ($rc, $out, $err);

# A receiver that echoes only the token of a value of several words.
sql(qq{SELECT outbox.create_endpoint('token', '$url/token?echo=token',
	event_types => '{t.token}', headers => '{"Authorization": "$admin_token"}')});
my $token_id = sql("SELECT outbox.emit('t.token', '{}')");
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM outbox.attempts WHERE event_id = '$token_id'"),
	'the token echo is recorded');
is(sql("SELECT response FROM outbox.attempts WHERE event_id = '$token_id'"),
	'invalid token [redacted]', 'a token echoed alone is redacted too');

# A URL's credentials are refused, and the error does not repeat them,
# also where the password has a "/" (libcurl refuses that URL itself).
($rc, $out, $err) = $node->psql('postgres',
	q{SELECT outbox.create_endpoint('creds', 'https://bob:pa/ss#w?rd@example.com/hook')});
isnt($rc, 0, 'a URL with "/", "#" and "?" in its password is refused');
like($err, qr/invalid endpoint URL "https:\/\/\*\*\*\@example\.com\/hook"/,
	'the error shows it without the credentials');

($rc, $out, $err) = $node->psql('postgres',
	q{SELECT outbox.create_endpoint('creds', 'https://alice:s3cr3t-pw@example.com/hook')});
isnt($rc, 0, 'a URL with credentials is refused');
like($err, qr/invalid endpoint URL "https:\/\/\*\*\*\@example\.com\/hook"/,
	'the error shows the URL without them');
unlike($err, qr/s3cr3t|alice/, 'neither the password nor the user is echoed');

# The server log: the error line is clean, but the failed statement is
# logged as written (log_min_error_statement, and here log_statement =
# all too), secret and all, unless the session turns both off first, as
# docs/privileges.md advises.
my @lines = grep { /s3cr3t-pw/ } split /\n/, slurp_file($node->logfile);
ok(!(grep { /ERROR:/ } @lines), 'no ERROR line in the server log has the password');
ok(scalar(grep { /STATEMENT:/ } @lines), 'the STATEMENT line has it, as docs/privileges.md says');
my $before = -s $node->logfile;
$node->psql('postgres', q{SET log_statement = none; SET log_min_error_statement = panic;
	SELECT outbox.create_endpoint('creds', 'https://alice:0ther-pw@example.com/hook')});
ok($node->log_contains('invalid endpoint URL "https://\*\*\*\@example.com/hook"', $before),
	'the second refusal is logged');
ok(!$node->log_contains('0ther-pw', $before),
	'with log_statement = none and log_min_error_statement = panic the statement is not logged');

$node->stop;
done_testing();
