# An endpoints load while a request is still connecting: the request is
# sent to its URL as submitted.  A load frees and replaces every
# endpoint's strings (src/relay/endpoints.c), and http1.c reads the
# request's URL once libcurl has connected (origin_of); a request that
# pointed at its endpoint's URL read freed memory there, and on
# PostgreSQL 16 and later (whose allocator keeps its free list in a freed
# chunk) or with assertions (which fill it with 0x7F) it failed with
# libcurl's "URL using bad/illegal format".  The receiver here is a
# listening socket whose accept queue is full, so the relay's connection
# waits for a retransmitted SYN until the test makes room, after another
# endpoint was created and delivered to (which takes a load).
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use IO::Select;
use OutboxTest qw(:DEFAULT sql attempts);
use PostgreSQL::Test::Utils;
use Socket qw(AF_INET SOCK_STREAM SOL_SOCKET SO_REUSEADDR INADDR_LOOPBACK
  inet_aton pack_sockaddr_in unpack_sockaddr_in);
use Test::More;
use Time::HiRes qw(usleep);

my $node = outbox_node('reload_in_flight', conf => "outbox.retry_schedule = '1h'\n");
my ($url, $log, $rx) = start_receiver();

# A listener with a backlog of 0: one connection not yet accepted fills
# its queue, and the kernel drops the SYNs that come after it.
socket(my $listener, AF_INET, SOCK_STREAM, 0) or die "socket: $!";
setsockopt($listener, SOL_SOCKET, SO_REUSEADDR, 1) or die "setsockopt: $!";
bind($listener, pack_sockaddr_in(0, INADDR_LOOPBACK)) or die "bind: $!";
listen($listener, 0) or die "listen: $!";
my ($port) = unpack_sockaddr_in(getsockname($listener));
socket(my $filler, AF_INET, SOCK_STREAM, 0) or die "socket: $!";
connect($filler, pack_sockaddr_in($port, inet_aton('127.0.0.1'))) or die "connect: $!";

# Is a connection to the listener's port waiting for its SYN's answer?
sub syn_sent
{
	open(my $fh, '<', '/proc/net/tcp') or die "cannot read /proc/net/tcp: $!";
	while (my $line = <$fh>)
	{
		my @f = split ' ', $line;
		next unless defined $f[3] && $f[2] =~ /:([0-9A-F]{4})$/;
		return 1 if hex($1) == $port && $f[3] eq '02';
	}
	return 0;
}

sql("SELECT outbox.create_endpoint('held', 'http://127.0.0.1:$port/held', '{held.*}')");
my $id = sql(q{SELECT outbox.emit('held.one', '{}')});
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
usleep(50_000) until syn_sent() || time() > $deadline;
ok(syn_sent(), 'the relay is connecting to the receiver whose queue is full');

# A new endpoint, delivered to: the relay loaded the endpoints meanwhile.
sql("SELECT outbox.create_endpoint('probe', '$url/probe', '{probe.*}')");
my $probe = sql(q{SELECT outbox.emit('probe.one', '{}')});
ok(wait_received($log, sub { grep { $_->{headers}{'webhook-id'} eq $probe } @_ }),
	'an endpoint created meanwhile was delivered to (the endpoints were loaded)');
ok(syn_sent(), 'the request to the held endpoint was still connecting then');

# Room in the queue: the relay's next SYN is answered.  Its request is
# read and answered 200.
my $sel = IO::Select->new($listener);
die 'the filler connection was not queued' unless $sel->can_read(5);
accept(my $queued, $listener) or die "accept: $!";
close $queued;
close $filler;
my $head = '';
if ($sel->can_read($PostgreSQL::Test::Utils::timeout_default))
{
	accept(my $conn, $listener) or die "accept: $!";
	my $csel = IO::Select->new($conn);
	while ($head !~ /\r\n\r\n/ && $csel->can_read($PostgreSQL::Test::Utils::timeout_default))
	{
		my $n = sysread($conn, $head, 4096, length $head);
		last unless $n;
	}
	my ($len) = $head =~ /^content-length:\s*(\d+)/im;
	my $body = $head =~ /\r\n\r\n(.*)\z/s ? $1 : '';
	while (defined $len && length($body) < $len && $csel->can_read(5))
	{
		last unless sysread($conn, $body, $len - length($body), length $body);
	}
	syswrite($conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
	close $conn;
}
like($head, qr{\APOST /held HTTP/1\.1\r\n}, 'the request went to the URL it was submitted with');
like($head, qr{^webhook-id: \Q$id\E\r?$}mi, 'with the held event');
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM outbox.attempts WHERE endpoint = 'held'"),
	'the held attempt was recorded');
is(attempts($id, 'held'), '1:200', 'the attempt succeeded');
is(sql("SELECT coalesce(string_agg(error, ','), '') FROM outbox.attempts WHERE endpoint = 'held'"),
	'', 'with no error');

$node->stop;
done_testing();
