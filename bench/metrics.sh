#!/usr/bin/env bash
# bench/metrics.sh: what reading outbox.metrics costs beside many endpoints
# (issue 46), as root:
#
#     bash bench/metrics.sh [ENDPOINTS]
#
# Builds and installs outbox from this tree (holding the lock scripts/test.sh
# takes), starts a private PostgreSQL 15 instance and nginx answering 200,
# and makes ENDPOINTS endpoints (10,000 by default).  Two states, each
# measured by reading the whole view READS times (20) in one session and
# printing the fastest, the median and the slowest read in milliseconds,
# and the samples read:
#   healthy: one event delivered to every endpoint (each has its counter
#     set in shared memory), nothing owed;
#   failing: every endpoint's receiver gone (127.0.0.1:9, refused at once)
#     and one more event, attempted once and owed by every endpoint as a
#     retry (the retry schedule is an hour: the relay is idle meanwhile).  PGBIN may name a
# copy of PostgreSQL's tree elsewhere (bin, lib and share copied whole keep
# their relative paths): outbox is then built here and copied into it,
# without the lock.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ENDPOINTS=${1:-10000}
READS=${READS:-20}
PORT=5498
NPORT=${NPORT:-18213}

export LC_ALL=C.UTF-8
WORK=$(mktemp -d /tmp/outbox-metrics.XXXXXX)
chown postgres "$WORK"

cleanup()
{
	set +e
	[ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid")"
	[ -f "$WORK/data/postmaster.pid" ] &&
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=bench/install_outbox.sh
. "$BENCH/install_outbox.sh"
install_outbox metrics.sh

psql_() { runuser -u postgres -- "$PGBIN/psql" -h "$WORK" -p $PORT -d postgres -XAtq -c "$1"; }

cat >"$WORK/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$NPORT; location / { return 200; } } }
CONF
nginx -p "$WORK" -c "$WORK/nginx.conf"

runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/data" >/dev/null
cat >>"$WORK/data/postgresql.conf" <<CONF
port = $PORT
unix_socket_directories = '$WORK'
listen_addresses = ''
shared_preload_libraries = 'outbox'
outbox.allowed_networks = '127.0.0.1/32'
outbox.retry_schedule = '1h'
synchronous_commit = off
CONF
runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/log" -w start >/dev/null
psql_ "CREATE EXTENSION outbox"
psql_ "SELECT count(outbox.create_endpoint('ep-' || i, 'http://127.0.0.1:$NPORT/', '{bench.*}', max_attempts => 100))
         FROM generate_series(1, $ENDPOINTS) i" >/dev/null

# wait_until QUERY: until it returns t, at most 300 s
wait_until()
{
	local deadline=$((SECONDS + 300))
	until [ "$(psql_ "$1")" = t ]; do
		[ $SECONDS -lt $deadline ] || { echo "metrics.sh: timed out: $1" >&2; exit 1; }
		sleep 1
	done
}

# measure STATE: read the whole view READS times in one session, as an
# exporter keeps its connection, every column through its output function
# as if sent to a client (COPY to /dev/null).
measure()
{
	psql_ "ANALYZE" >/dev/null
	local samples times
	samples=$(psql_ "SELECT count(*) FROM outbox.metrics")
	{
		echo '\timing on'
		for _ in $(seq "$READS"); do echo "COPY (SELECT * FROM outbox.metrics) TO '/dev/null';"; done
	} >"$WORK/read.sql"
	chown postgres "$WORK/read.sql"
	times=$(runuser -u postgres -- "$PGBIN/psql" -h "$WORK" -p $PORT -d postgres -XAtq -f "$WORK/read.sql" |
		sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | sort -n)
	echo "$1: outbox.metrics beside $ENDPOINTS endpoints, $samples samples, $(psql_ "SELECT count(*) FROM outbox.retries") retry rows:"
	echo "  fastest $(echo "$times" | head -1) ms, median $(echo "$times" | sed -n "$(((READS + 1) / 2))p") ms, slowest $(echo "$times" | tail -1) ms over $READS reads"
}

psql_ "SELECT outbox.emit('bench.one', '{}')" >/dev/null
wait_until "SELECT count(*) >= $ENDPOINTS FROM outbox._counters() WHERE delivered > 0"
measure healthy

psql_ "SELECT count(*) FROM (SELECT outbox.alter_endpoint(name, url => 'http://127.0.0.1:9/') FROM outbox.endpoints) a" >/dev/null
psql_ "SELECT outbox.emit('bench.two', '{}')" >/dev/null
wait_until "SELECT count(*) >= $ENDPOINTS FROM outbox._counters() WHERE retry > 0"
measure failing
