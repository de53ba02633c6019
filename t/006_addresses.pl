# The address policy: loopback, private, link-local, unspecified and
# IPv4-mapped forms of them, and IPv6 addresses carrying such an IPv4
# address to a gateway (NAT64, 6to4, Teredo, IPv4-translated), are refused
# at connect time unless outbox.allowed_networks names them.  Refused targets get no packet: the
# check runs before the socket exists.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;

my $node = outbox_node('addresses',
	conf => "outbox.retry_schedule = '1h'\noutbox.allowed_networks = ''\n");
my ($url, $log, $receiver) = start_receiver();
my ($port) = $url =~ /:(\d+)$/;

my %targets = (
	loopback     => "http://127.0.0.1:$port/x",
	localhost    => "http://localhost:$port/x",
	mapped       => "http://[::ffff:127.0.0.1]:$port/x",
	unspecified  => "http://0.0.0.0:$port/x",
	private10    => 'http://10.1.2.3/x',
	private172   => 'http://172.16.0.1/x',
	private192   => 'http://192.168.1.1/x',
	metadata     => 'http://169.254.169.254/latest/meta-data/',
	mapped_meta  => 'http://[::ffff:169.254.169.254]/x',
	v6_loopback  => "http://[::1]:$port/x",
	v6_private   => 'http://[fd00::1]/x',
	# IPv4 addresses carried inside IPv6 ones to a translator or tunnel
	nat64_loopback  => "http://[64:ff9b::7f00:1]:$port/x",
	nat64_meta      => 'http://[64:ff9b::a9fe:a9fe]/x',
	sixto4_private  => 'http://[2002:a01:203::1]/x',
	sixto4_loopback => "http://[2002:7f00:1::1]:$port/x",
	teredo_private  => 'http://[2001:0:4136:e378:8000:63bf:3f57:fefe]/x',
	translated_meta => 'http://[::ffff:0:a9fe:a9fe]/x',
	doc_v4          => 'http://192.0.2.10/x',
	site_local      => 'http://[fec0::1]/x',
);
for my $name (sort keys %targets)
{
	$node->safe_psql('postgres',
		"SELECT outbox.create_endpoint('$name', '$targets{$name}', event_types => '{t.$name}')");
	$node->safe_psql('postgres', "SELECT outbox.emit('t.$name', '{}')");
}

for my $name (sort keys %targets)
{
	ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = '$name'"),
		"$name: one attempt recorded");
	my $error = $node->safe_psql('postgres',
		"SELECT error FROM outbox.attempts WHERE endpoint = '$name'");
	like($error, qr/refused to connect to .*outbox\.allowed_networks/, "$name: refused ($error)");
}
is(scalar(received($log)), 0, 'the receiver on 127.0.0.1 got nothing');

# Allowing 127.0.0.1 lets exactly the targets that resolve to it through:
# localhost (whose ::1 answer stays refused), and the IPv4-mapped form.
ok(reload_with('outbox.allowed_networks' => '127.0.0.1/32'), 'the relay reloaded allowed_networks');
$node->safe_psql('postgres', "SELECT outbox.resume_endpoint(name) FROM outbox.endpoints");
$node->safe_psql('postgres',
	"UPDATE outbox.retries SET next_at = now()");
ok(wait_received($log, sub { scalar(@_) >= 3 }), 'allowed targets delivered');
$node->poll_query_until('postgres',
	"SELECT count(*) = 3 FROM outbox.attempts WHERE status = 200")
  or diag $node->safe_psql('postgres', 'SELECT endpoint, status, error FROM outbox.attempts');
my $ok = $node->safe_psql('postgres',
	"SELECT string_agg(endpoint, ',' ORDER BY endpoint) FROM outbox.attempts WHERE status = 200");
is($ok, 'localhost,loopback,mapped', 'targets resolving to 127.0.0.1 are allowed; nothing else');

# Allowing 127.0.0.1 does not allow the loopback address of a NAT64 or 6to4
# gateway: the IPv6 address itself would have to be named.
for my $name (qw(nat64_loopback sixto4_loopback))
{
	ok($node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM outbox.attempts WHERE endpoint = '$name'"),
		"$name: tried again after the reload");
	my $error = $node->safe_psql('postgres',
		"SELECT error FROM outbox.attempts WHERE endpoint = '$name' ORDER BY attempt DESC LIMIT 1");
	like($error, qr/refused to connect to .*carrying a loopback address/,
		"$name: still refused ($error)");
}

$node->stop;
$receiver->kill_kill;
done_testing();
