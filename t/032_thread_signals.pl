# PostgreSQL's signal handlers run in the relay's own thread only.  The
# server runs with test/threads/mask_check.c preloaded, which logs the
# signal mask of every thread any of its processes starts.  The relay
# resolves the host names of 300 endpoints (libcurl's threaded resolver
# starts a thread for each lookup), again at each retry, while it is sent
# SIGALRM (the handler of lock_timeout and statement_timeout), SIGUSR1
# (latch wake-ups) and SIGHUP (reloads) over and over.  Every thread
# started has every signal blocked, the relay neither crashes nor hangs,
# and a healthy endpoint beside them gets every event.
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use OutboxTest qw(:all);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $shim = PostgreSQL::Test::Utils::tempdir() . '/mask_check.so';
system('cc', '-shared', '-fPIC', '-o', $shim, "$FindBin::Bin/../test/threads/mask_check.c", '-ldl') == 0
  or die 'cannot build the mask check';

my $node;
{
	local $ENV{LD_PRELOAD} = $shim;
	# Retries come quickly, so that names are resolved again and again.
	$node = outbox_node('thread_signals', conf => qq{
outbox.retry_schedule = '200ms'
});
}
my ($url, $log, $receiver) = start_receiver();
my ($port) = $url =~ /:(\d+)$/;
wait_for_relay() or die 'no relay';
my $relay = relay_pid();

# 300 host names, each resolved in a thread of libcurl's; RFC 6761's
# .invalid names resolve to nothing (at once, or after the resolver's
# timeout where no name server answers), and the threads are started
# either way.  The healthy endpoint is given its address: no thread.
sql(qq{SELECT outbox.create_endpoint('ok', '$url/ok', ARRAY['t.all'])});
sql(join('', map { "SELECT outbox.create_endpoint('name_$_', 'http://n$_.outbox-test.invalid:$port/x', ARRAY['t.all']);\n" } 1 .. 300));

# Events for 10 s, while the relay is signalled.
my @ids;
my $until = time() + 10;
my $n = 0;
while (time() < $until)
{
	push @ids, split /\n/, sql(q{SELECT outbox.emit('t.all', '{}') FROM generate_series(1, 2)});
	kill 'ALRM', $relay for 1 .. 20;
	kill 'USR1', $relay for 1 .. 5;
	sql('SELECT pg_reload_conf()') if ++$n % 10 == 0;
	usleep(100_000);
}
ok(wait_received($log, got_all('/ok', @ids)), scalar(@ids) . ' events reached the healthy endpoint')
  or diag('received at /ok: ' . scalar(keys %{ ids_at('/ok', received($log)) })
	  . "; attempts at ok:\n" . sql(q{SELECT status, error, count(*) FROM outbox.attempts WHERE endpoint = 'ok' GROUP BY 1, 2})
	  . "\nendpoint_status:\n" . sql(q{SELECT * FROM outbox.endpoint_status WHERE name = 'ok'}));
is(relay_pid(), $relay, 'the relay neither crashed nor was restarted');
is(sql('SELECT 1'), '1', 'the server answers');

my $server_log = slurp_file($node->logfile);
my @blocked = $server_log =~ /^mask_check: pid \d+ started a thread with every signal blocked$/mg;
my @open = $server_log =~ /^(mask_check: pid \d+ started a thread with .* open)$/mg;
cmp_ok(scalar(@blocked), '>=', 300, scalar(@blocked) . ' threads started, each with every signal blocked');
is(scalar(@open), 0, 'no thread started with a signal open') or diag(join("\n", @open[ 0 .. ($#open < 4 ? $#open : 4) ]));
unlike($server_log, qr/terminated by signal|server process .* was terminated/, 'no process was terminated by a signal');

$node->stop;
$receiver->kill_kill;
done_testing();
