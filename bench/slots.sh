#!/usr/bin/env bash
# bench/slots.sh: requests in flight (issue 11), as root:
#
#     bash bench/slots.sh [MAX_CONCURRENCY ...]
#
# Builds and installs outbox from this tree (holding the lock scripts/test.sh
# takes), starts a private PostgreSQL 15 instance the way the tests do (as
# postgres through runuser, so with its open files limit) and
# bench/slow_receiver.js, which answers after DELAY_MS.  For each
# outbox.max_concurrency given (default 64 1000 5000): ENDPOINTS fresh
# endpoints on one receiver, EVENTS events each, and deliveries a second over
# WINDOW seconds after a second of warm-up, with the failures meanwhile.
# PGBIN may name a copy of PostgreSQL's tree elsewhere (bin, lib and share
# copied whole keep their relative paths): outbox is then built here and
# copied into it, without the lock.  Then the relay's private memory with HELD requests held open by a receiver
# that answers after a minute: the cost of a request in flight.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ENDPOINTS=${ENDPOINTS:-200}
EVENTS=${EVENTS:-400}
DELAY_MS=${DELAY_MS:-200}
WINDOW=${WINDOW:-8}
HELD=${HELD:-2000}
SETTINGS=("$@")
[ ${#SETTINGS[@]} -gt 0 ] || SETTINGS=(64 1000 5000)
PORT=5499
RPORT=18211
HPORT=18212

export LC_ALL=C.UTF-8
WORK=$(mktemp -d /tmp/outbox-slots.XXXXXX)
chown postgres "$WORK"
PIDS=()

cleanup()
{
	set +e
	for pid in "${PIDS[@]}"; do pkill -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done
	[ -f "$WORK/data/postmaster.pid" ] &&
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=bench/install_outbox.sh
. "$BENCH/install_outbox.sh"
install_outbox slots.sh

psql_() { runuser -u postgres -- "$PGBIN/psql" -h "$WORK" -p $PORT -d postgres -XAtq -c "$1"; }

runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/data" >/dev/null
cat >>"$WORK/data/postgresql.conf" <<EOF
port = $PORT
unix_socket_directories = '$WORK'
listen_addresses = ''
shared_preload_libraries = 'outbox'
outbox.allowed_networks = '127.0.0.1/32'
synchronous_commit = off
EOF
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/log" -w start >/dev/null
psql_ "CREATE EXTENSION outbox"
# (one node process holds thousands of connections; the open files limit
# must let it)
ulimit -n "$(ulimit -Hn)"
node "$BENCH/slow_receiver.js" $RPORT & PIDS+=($!)
node "$BENCH/slow_receiver.js" $HPORT & PIDS+=($!)
sleep 1

relay_pid() { psql_ "SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'"; }
stat() { psql_ "SELECT deliveries || ' ' || failures FROM outbox.relay_stats"; }
set_concurrency()
{
	psql_ "ALTER SYSTEM SET outbox.max_concurrency = $1"
	psql_ "SELECT pg_reload_conf()"
	sleep 0.5
}
drop_all() { psql_ "SELECT count(outbox.drop_endpoint(name)) FROM outbox.endpoints" >/dev/null; }

echo "relay open files limit: $(grep 'Max open files' /proc/"$(relay_pid)"/limits | awk '{print $4, $5}') (soft, hard)"
printf '%-16s %-12s %-12s %s\n' max_concurrency delivered/s failed/s "relay CPU s"
for c in "${SETTINGS[@]}"; do
	drop_all
	set_concurrency "$c"
	psql_ "SELECT count(outbox.create_endpoint('s${c}_' || i, 'http://127.0.0.1:$RPORT/delay/$DELAY_MS/e' || i))
	         FROM generate_series(1, $ENDPOINTS) i" >/dev/null
	psql_ "SELECT count(outbox.emit('bench.slots', jsonb_build_object('n', n))) FROM generate_series(1, $EVENTS) n" >/dev/null
	sleep 1
	pid=$(relay_pid)
	read -r d0 f0 <<<"$(stat)"
	cpu0=$(awk '{print $14 + $15}' /proc/"$pid"/stat)
	if [ -n "${PERF:-}" ]; then
		perf record -g -p "$pid" -o "$WORK/perf.$c" -- sleep "$WINDOW" 2>/dev/null >/dev/null
	else
		sleep "$WINDOW"
	fi
	read -r d1 f1 <<<"$(stat)"
	cpu1=$(awk '{print $14 + $15}' /proc/"$pid"/stat)
	printf '%-16s %-12s %-12s %s\n' "$c" $(((d1 - d0) / WINDOW)) $(((f1 - f0) / WINDOW)) \
		"$(echo "scale=1; ($cpu1 - $cpu0) / $(getconf CLK_TCK)" | bc)"
	[ -n "${PERF:-}" ] && cp "$WORK/perf.$c" /tmp/slots-perfdata.$c && perf report -i "$WORK/perf.$c" --no-children --sort dso,sym --stdio 2>/dev/null |
		grep -E "^ +[0-9.]+%" | head -12 >"/tmp/slots-perf.$c" || true
done
drop_all
grep -m3 -i "warning\|couldn" "$WORK/log" || true

# Memory: HELD requests in flight to a receiver that answers after a minute,
# one endpoint per 32 of them.
set_concurrency "$HELD"
pid=$(relay_pid)
before=$(awk '/RssAnon/ {print $2}' /proc/"$pid"/status)
n=$(((HELD + 31) / 32))
psql_ "SELECT count(outbox.create_endpoint('held_' || i, 'http://127.0.0.1:$HPORT/hang/h' || i, timeout => '5 minutes'))
         FROM generate_series(1, $n) i" >/dev/null
psql_ "SELECT count(outbox.emit('bench.held', jsonb_build_object('n', n))) FROM generate_series(1, 40) n" >/dev/null
open=0
for _ in $(seq 30); do
	sleep 2
	was=$open
	open=$(python3 -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1]))["open"])' "http://127.0.0.1:$HPORT/_status")
	[ "$open" -gt 0 ] && [ "$open" -eq "$was" ] && break
done
after=$(awk '/RssAnon/ {print $2}' /proc/"$pid"/status)
inflight=$(psql_ "SELECT coalesce(sum(in_flight), 0) FROM outbox._in_flight()" 2>/dev/null || echo "?")
echo "memory: $open connections open at the receiver, relay RssAnon $before kB -> $after kB" \
	"($(((after - before) * 1024 / (open > 0 ? open : 1))) bytes a request; _in_flight() says $inflight)"
