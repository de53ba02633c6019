#!/usr/bin/env bash
# bench/run.sh: the outbox benchmarks of issues 5 and 11, in one command, as
# root:
#
#     bash bench/run.sh
#
# Installs what is missing (Debian packages), builds and installs outbox from
# this tree, starts a private PostgreSQL 15 instance (temp dir, own socket),
# nginx as the receiver on 127.0.0.1 (also over HTTPS, with a certificate
# made here), two misbehaving receivers (receiver.py) and one that answers
# late or never (slow_receiver.js), runs the cases, prints one table of
# figures and ratios, and writes bench/RESULTS.md and the PNG plots beside
# it.  Every ratio compares figures measured in this run.  Everything it
# starts is stopped on exit.  Sizes can be changed through the variables
# below (e.g. SCALE_LARGE=200000 bash bench/run.sh for a quick run).
#
# Cases 1 to 7 (issue 5) run with the relay settings below; cases 8 to 13
# (issue 11: many endpoints, slow and dead receivers, HTTPS) run after them
# with every relay setting at the server's default.  Case 14 (Kafka,
# bench/kafka.sh: KAFKA_EVENTS, KAFKA_ROUNDS), case 15 (NATS JetStream,
# bench/nats.sh: NATS_EVENTS, NATS_ROUNDS) and case 16 (RabbitMQ,
# bench/rabbitmq.sh: AMQP_EVENTS, AMQP_ROUNDS) and cases 21 to 23 (Redis:
# BullMQ, streams, BullMQ beside webhooks; bench/redis.sh: REDIS_EVENTS,
# REDIS_ROUNDS, REDIS_FSYNC) run only when named, as do
# the cases of the delivery controls (issue 14): "expiry", "rate", "auth",
# "format", "mtls" and "oauth2", each one endpoint with a control on against
# off, and case 20 (endpoints created just before a burst: BURST_ENDPOINTS,
# BURST_ROUNDS).
# BENCH_CASES="8 9" runs only the cases named ("perf" is the profile pass); such a run writes
# bench/RESULTS.partial.md instead of RESULTS.md and draws no plots.  With
# today's relay a whole run takes about 20 minutes on 2 cores, cases 8 to
# 13 alone about 14.
# Case "expiry" (issue 14: one endpoint with expiry and priority in use
# against off) runs only when named: BENCH_CASES="expiry" (MANY_EVENTS and
# CONTROL_ROUNDS size it).  So does case "rate" (issue 14: rate limits;
# the LIMIT_* variables and MANY_EVENTS size it), and so do "auth",
# "format", "mtls" (a client certificate over HTTPS) and "oauth2" (OAuth2
# client credentials, the token from nginx), which MANY_EVENTS and
# CONTROL_ROUNDS size.
#
# It installs the extension into the system's PostgreSQL, as the test suite
# does, so it holds /tmp/outbox-test.lock (as scripts/test.sh does) while it
# runs.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
# Another PostgreSQL 15 (a relocatable copy whose pg_config names its own
# directories) may be named: outbox is installed into it instead, and the
# lock below is not taken.
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PY=/usr/bin/python3                 # Debian's, which has psycopg2

EMIT_SECONDS=${EMIT_SECONDS:-4}             # case 1: each pgbench run
EMIT_ROUNDS=${EMIT_ROUNDS:-5}               # case 1: rounds of the variants in turn
CAPTURE_ROWS=${CAPTURE_ROWS:-100000}        # case 1: rows of the UPDATE the triggers capture
WRK_SECONDS=${WRK_SECONDS:-5}               # case 2: the wrk ceiling, each round
THROUGHPUT_EVENTS=${THROUGHPUT_EVENTS:-200000}
THROUGHPUT_ROUNDS=${THROUGHPUT_ROUNDS:-3}   # case 2: rounds of the relay and of wrk
LATENCY_RATE=${LATENCY_RATE:-1000}          # case 3: events a second
LATENCY_SECONDS=${LATENCY_SECONDS:-30}
SCALE_SMALL=${SCALE_SMALL:-10000}           # case 4
SCALE_LARGE=${SCALE_LARGE:-1000000}
FANOUT_ENDPOINTS=${FANOUT_ENDPOINTS:-16}    # case 5
FANOUT_EVENTS=${FANOUT_EVENTS:-12500}       # per endpoint: 200,000 deliveries
ISOLATION_EVENTS=${ISOLATION_EVENTS:-100000}  # case 6
BIG_EVENTS=${BIG_EVENTS:-200}               # case 7: requests to the 100 MB receiver
BATCH_SIZE=${BATCH_SIZE:-500}               # the relay's settings (defaults)
MAX_CONCURRENCY=${MAX_CONCURRENCY:-64}
ENDPOINT_CONCURRENCY=${ENDPOINT_CONCURRENCY:-32}
SENDERS=${SENDERS:-1}                       # outbox.senders (default 0); case 2 also runs with 0
# Cases 8 to 13 and the named cases, at the server's default relay
# settings; DEFAULT_MAX_CONCURRENCY sets outbox.max_concurrency for them
# instead (what requests in flight cost: RESULTS names the settings used).
DEFAULT_MAX_CONCURRENCY=${DEFAULT_MAX_CONCURRENCY:-}
MANY_EVENTS=${MANY_EVENTS:-100000}          # cases 8, 9, 10, 12, 13: events a delivery run
ONE_ROUNDS=${ONE_ROUNDS:-3}                 # case 8: rounds of the relay and of wrk
MANY_ENDPOINTS=${MANY_ENDPOINTS:-1000}      # cases 9, 12
MANY_ENDPOINTS_LARGE=${MANY_ENDPOINTS_LARGE:-10000}  # cases 9, 10
BUSY_ENDPOINTS=${BUSY_ENDPOINTS:-10}        # case 10: those of the large set that get events
# Cases 9, 10 and 12: rounds (the medians count).  Five: their runs take
# 2 to 4 s, and single runs of one kind ranged from 2.2 to 3.8 s within one
# bench run (case 12 at fa818ed), case 10 gave 0.82 and 1.15 in two runs
# minutes apart.
MANY_ROUNDS=${MANY_ROUNDS:-5}
VIEW_EVENTS=${VIEW_EVENTS:-10000}          # case views: events waiting for the busy endpoints
SLOW_DELAY_MS=${SLOW_DELAY_MS:-200}         # case 11: the receiver's delay
SLOW_ENDPOINTS=${SLOW_ENDPOINTS:-200}
SLOW_ENDPOINTS_LARGE=${SLOW_ENDPOINTS_LARGE:-1000}
SLOW_WARMUP=${SLOW_WARMUP:-5}               # case 11: seconds before the window
SLOW_SECONDS=${SLOW_SECONDS:-20}            # case 11: the window deliveries are counted in
SLOW_EVENTS=${SLOW_EVENTS:-$((10000 * (SLOW_WARMUP + SLOW_SECONDS)))}  # twice the target's need
HANGING_ENDPOINTS=${HANGING_ENDPOINTS:-100} # case 12: of MANY_ENDPOINTS, never answering
HANG_TIMEOUT=${HANG_TIMEOUT:-5 seconds}     # case 12: their timeout
TLS_ROUNDS=${TLS_ROUNDS:-3}                 # case 13: rounds of http and https
HTTPS_WRK_CONNS=${HTTPS_WRK_CONNS:-64}      # case 17: wrk's connections over HTTPS
HOSTS=${HOSTS:-1000}                        # cases 18, 19: https host names, one per endpoint
HOSTS_ROUNDS=${HOSTS_ROUNDS:-3}             # case 18: rounds of one host and of HOSTS
BURST_ENDPOINTS=${BURST_ENDPOINTS:-1000}    # case 20: endpoints created just before a burst
BURST_ROUNDS=${BURST_ROUNDS:-5}             # case 20: rounds of one and of BURST_ENDPOINTS
CONTROL_ROUNDS=${CONTROL_ROUNDS:-3}         # case expiry: rounds of off and on
LIMIT_RATE=${LIMIT_RATE:-500}               # case rate: the limited endpoint's rate_limit
LIMIT_SECONDS=${LIMIT_SECONDS:-20}          # case rate: its backlog, in seconds at that rate
LIMIT_HIGH=${LIMIT_HIGH:-1000000}           # case rate: a limit far above what one endpoint gets
LIMIT_ROUNDS=${LIMIT_ROUNDS:-3}             # case rate: rounds without and with LIMIT_HIGH
# Case oauth2: the client nginx's /token knows, and the token it gives.
OAUTH2_CLIENT_ID=outbox-bench
OAUTH2_CLIENT_SECRET=bench-client-secret-0123456789
OAUTH2_TOKEN=bench-oauth2-token-0123456789abcdef
MANY_TIMEOUT=${MANY_TIMEOUT:-120}           # cases 8 to 13: longest wait for one delivery run
BENCH_CASES=${BENCH_CASES:-1 2 3 4 5 6 7 perf 8 9 10 11 12 13 17 18 19}

export LC_ALL=C.UTF-8
unset PGHOSTADDR PGDATABASE PGSERVICE PGOPTIONS PGPASSWORD

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "run.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and runs PostgreSQL as postgres)"

# One installer of the extension into the system's PostgreSQL at a time:
# this, or scripts/test.sh.
if [ "$PGBIN" = /usr/lib/postgresql/15/bin ]; then
	exec 9>/tmp/outbox-test.lock
	if ! flock -n 9; then
		log "waiting for /tmp/outbox-test.lock (a test or bench run is installing outbox)"
		flock 9
	fi
fi
# Thousands of connections at once (cases 11 and 12): the receivers and
# PostgreSQL inherit this.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

WORK=
NGINX_PID=
HANG_PID=
BIG_PID=
SLOW_PID=
HOSTS_SAVED=                        # /etc/hosts as it was, once map_hosts changed it
T0=$(date +%s)

cleanup()
{
	set +e
	for pid in $NGINX_PID $HANG_PID $BIG_PID $SLOW_PID; do
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	if [ -n "$WORK" ] && [ -f "$WORK/data/postmaster.pid" ]; then
		runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate -w stop >/dev/null 2>&1
	fi
	if [ -n "$HOSTS_SAVED" ] && [ -f "$HOSTS_SAVED" ]; then
		cat "$HOSTS_SAVED" >/etc/hosts
	fi
	[ -n "$WORK" ] && rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------

install_packages()
{
	local pkg missing=()

	for pkg in build-essential postgresql-15 postgresql-server-dev-15 libcurl4-openssl-dev \
		nginx wrk postgresql-15-pgq3 gnuplot-nox python3 python3-psycopg2 openssl librdkafka-dev kcat \
		libnats-dev nats-server librabbitmq-dev rabbitmq-server redis-server; do
		[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" = "install ok installed" ] ||
			missing+=("$pkg")
	done
	# Any node will do for slow_receiver.js; Debian's if there is none.
	command -v node >/dev/null || missing+=(nodejs)
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -q >/dev/null
		apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	fi
}

build_extension()
{
	log "building and installing outbox from $ROOT"
	mkdir "$WORK/build"
	(cd "$ROOT" && git ls-files -z -co --exclude-standard -- Makefile outbox.control 'outbox--*.sql' src |
		tar --null -T - -cf -) | tar -xf - -C "$WORK/build"
	if [ "$PGBIN" = /usr/lib/postgresql/15/bin ]; then
		make -C "$WORK/build" PG_CONFIG="$PGBIN/pg_config" -j2 install >"$WORK/build.log" 2>&1 ||
			{ cat "$WORK/build.log"; die "build failed"; }
	else
		# Built against the system's headers, copied into the other one.
		make -C "$WORK/build" PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config -j2 >"$WORK/build.log" 2>&1 ||
			{ cat "$WORK/build.log"; die "build failed"; }
		cp "$WORK/build/outbox.so" "$("$PGBIN/pg_config" --pkglibdir)/"
		cp "$WORK/build"/outbox.control "$WORK/build"/outbox--*.sql "$("$PGBIN/pg_config" --sharedir)/extension/"
	fi
}

# free_port [N]: N (1) distinct ports below 32768 nothing listens on.
free_port() { "$PY" "$BENCH/free_port.py" "$@"; }

psql_q() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
sql() { psql_q -At -c "$1"; }

start_postgres()
{
	log "starting PostgreSQL in $WORK/data"
	export PGHOST=$WORK PGPORT=$(free_port) PGUSER=postgres PGDATABASE=postgres
	runuser -u postgres -- "$PGBIN/initdb" -D "$WORK/data" -A trust -E UTF8 >/dev/null
	cat >>"$WORK/data/postgresql.conf" <<-EOF
		listen_addresses = ''
		port = $PGPORT
		unix_socket_directories = '$WORK'
		max_connections = 40
		max_prepared_transactions = 4
		shared_buffers = 1GB
		max_wal_size = 8GB
		checkpoint_timeout = 30min
		synchronous_commit = off
		shared_preload_libraries = 'outbox'
		outbox.database = 'postgres'
		outbox.allowed_networks = '127.0.0.1/32'
		outbox.batch_size = $BATCH_SIZE
		outbox.max_concurrency = $MAX_CONCURRENCY
		outbox.endpoint_concurrency = $ENDPOINT_CONCURRENCY
		outbox.senders = $SENDERS
		outbox.ca_file = '$WORK/tls/ca.crt'
	EOF
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w start >/dev/null
	psql_q -f "$BENCH/sql/setup.sql" >/dev/null
	PG_VERSION=$(sql "SHOW server_version")
}

# restart_with_senders N: restart PostgreSQL with outbox.senders = N and
# wait until the relay and its senders run.
restart_with_senders()
{
	sed -i "s/^outbox.senders = .*/outbox.senders = $1/" "$WORK/data/postgresql.conf"
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w restart >/dev/null
	for _ in $(seq 100); do
		[ "$(sql "SELECT count(*) FILTER (WHERE backend_type = 'outbox relay') || ' ' ||
		                 count(*) FILTER (WHERE backend_type = 'outbox sender') FROM pg_stat_activity")" = "1 $1" ] &&
			return 0
		sleep 0.1
	done
	die "the relay and its $1 senders did not start"
}

# make_certificates: a CA and a certificate for 127.0.0.1 signed by it, in
# $WORK/tls, for nginx's HTTPS servers; the relay trusts the CA through
# outbox.ca_file.  And for case "mtls", a client CA, which nginx's mutual
# TLS server trusts, and a client certificate signed by it, whose files the
# server user (postgres) reads.
make_certificates()
{
	local dir=$WORK/tls

	mkdir "$dir"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=outbox bench CA" \
		-keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
		-keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
	printf 'subjectAltName = IP:127.0.0.1,DNS:*.hosts.bench.test\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n' >"$dir/ext"
	openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
		-days 2 -extfile "$dir/ext" -out "$dir/server.crt" 2>/dev/null
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=outbox bench client CA" \
		-keyout "$dir/client-ca.key" -out "$dir/client-ca.crt" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj "/CN=outbox bench relay" \
		-keyout "$dir/client.key" -out "$dir/client.csr" 2>/dev/null
	printf 'basicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n' >"$dir/client-ext"
	openssl x509 -req -in "$dir/client.csr" -CA "$dir/client-ca.crt" -CAkey "$dir/client-ca.key" \
		-CAcreateserial -days 2 -extfile "$dir/client-ext" -out "$dir/client.crt" 2>/dev/null
	chown postgres:postgres "$dir/client.crt" "$dir/client.key"
	chmod 644 "$dir/client.crt"
	chmod 600 "$dir/client.key"
	chmod 755 "$dir"
	chmod 644 "$dir/ca.crt"
}

# wait_for_port PORT: until something accepts connections on 127.0.0.1:PORT.
wait_for_port()
{
	for _ in $(seq 50); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	die "nothing listens on 127.0.0.1:$1"
}

start_receivers()
{
	{ read -r NGINX_PORT; read -r TLS_PORT; read -r MTLS_PORT
	  read -r HANG_PORT; read -r BIG_PORT; read -r SLOW_PORT; read -r SLOW_TLS_PORT; } < <(free_port 7)
	mkdir -p "$WORK/nginx-body"
	sed -e "s|@DIR@|$WORK|g" -e "s|@PORT@|$NGINX_PORT|g" -e "s|@TLSPORT@|$TLS_PORT|g" \
		-e "s|@MTLSPORT@|$MTLS_PORT|g" -e "s|@TOKEN@|$OAUTH2_TOKEN|g" \
		-e "s|@BASIC@|$(printf '%s:%s' "$OAUTH2_CLIENT_ID" "$OAUTH2_CLIENT_SECRET" | base64 -w 0)|g" \
		"$BENCH/nginx.conf.in" >"$WORK/nginx.conf"
	nginx -p "$WORK" -c "$WORK/nginx.conf" &
	NGINX_PID=$!
	"$PY" "$BENCH/receiver.py" hang "$HANG_PORT" &
	HANG_PID=$!
	"$PY" "$BENCH/receiver.py" big "$BIG_PORT" &
	BIG_PID=$!
	node "$BENCH/slow_receiver.js" "$SLOW_PORT" "$SLOW_TLS_PORT" "$WORK/tls/server.crt" "$WORK/tls/server.key" \
		>"$WORK/slow_receiver.log" 2>&1 &
	SLOW_PID=$!
	wait_for_port "$NGINX_PORT"
	wait_for_port "$SLOW_PORT"
	wait_for_port "$SLOW_TLS_PORT"
	log "receivers: nginx on $NGINX_PORT (HTTPS on $TLS_PORT, mutual TLS on $MTLS_PORT)," \
		"never-answering on $HANG_PORT, 100 MB answers on $BIG_PORT, slow_receiver.js on $SLOW_PORT (HTTPS on $SLOW_TLS_PORT)"
}

# ---------------------------------------------------------------------------
# Helpers for the relay cases
# ---------------------------------------------------------------------------

RESULTS=                            # set in main: "key value" lines

result() { echo "$1 $2" >>"$RESULTS"; }

reset_outbox() { psql_q -f "$BENCH/sql/reset.sql" >/dev/null; }

# new_endpoint NAME URL [TIMEOUT]: an endpoint for bench.* events, paused
# so that its backlog waits until deliver.py resumes it.
new_endpoint()
{
	sql "SELECT outbox.create_endpoint('$1', '$2', '{bench.*}', timeout => '${3:-30 seconds}');
	     SELECT outbox.pause_endpoint('$1');" >/dev/null
}

# emit_backlog N [TYPES]: emit N bench.event events, 100,000 a transaction;
# with TYPES, of types bench.e1 to bench.eTYPES in turn instead; with
# TYPES "controls", with expires_at and priority (backlog_controls.sql).
emit_backlog()
{
	local n=$1 first=1 last t=$SECONDS

	while [ "$first" -le "$n" ]; do
		last=$((first + 99999 > n ? n : first + 99999))
		if [ "${2:-}" = controls ]; then
			psql_q -v first="$first" -v last="$last" -f "$BENCH/sql/backlog_controls.sql" >/dev/null
		elif [ -n "${2:-}" ]; then
			psql_q -v first="$first" -v last="$last" -v types="$2" -f "$BENCH/sql/backlog_types.sql" >/dev/null
		else
			psql_q -v first="$first" -v last="$last" -f "$BENCH/sql/backlog.sql" >/dev/null
		fi
		first=$((last + 1))
		[ "$n" -ge 500000 ] && log "  emitted $last/$n"
	done
	if [ "${2:-}" = controls ]; then
		log "  emitted $n events with expires_at and priority in $((SECONDS - t)) s"
	else
		log "  emitted $n events${2:+ of $2 types} in $((SECONDS - t)) s"
	fi
}

# follow_stream PREFIX COUNT: wait until COUNT endpoints named PREFIX...
# follow the relay's stream (DESIGN.md, "The stream"): new endpoints start
# on their own and follow it once they are where it is, which events
# nobody subscribes to bring about.
follow_stream()
{
	local t=$SECONDS

	for _ in $(seq 600); do
		# (by key: joined, on statistics taken before the endpoints were
		# created, this count took 8 s with 10,000 of them)
		[ "$(sql "SELECT count(*) FROM outbox.positions p
		          WHERE p.follows AND p.endpoint_id = ANY (ARRAY(SELECT e.id FROM outbox.endpoints e
		                                                         WHERE starts_with(e.name, '$1')))")" -ge "$2" ] && break
		sql "SELECT outbox.emit('warm.up', '{}')" >/dev/null
		sleep 0.1
	done
	log "  $2 endpoints $1* follow the stream after $((SECONDS - t)) s"
}

# emit_prepared N TYPES: N events of TYPES event types in one transaction,
# prepared and not committed: deliver --commit makes them visible at once
# to endpoints that keep following the stream meanwhile (pausing them would
# make each catch up on its own).
emit_prepared()
{
	local t=$SECONDS

	psql_q -v first=1 -v last="$1" -v types="$2" -c "BEGIN" -f "$BENCH/sql/backlog_types.sql" \
		-c "PREPARE TRANSACTION 'bench_backlog'" >/dev/null
	log "  emitted $1 events of $2 types in $((SECONDS - t)) s, prepared"
}

# deliver LABEL RESUME WAIT EVENTS [TIMEOUT [deliver.py options]]: resume
# endpoints, time the delivery.
deliver()
{
	"$PY" "$BENCH/deliver.py" --label "$1" --resume "$2" --wait "$3" --events "$4" \
		--results "$RESULTS" --timeout "${5:-600}" "${@:6}"
}

# new_endpoints PREFIX FIRST COUNT URL TYPE [TIMEOUT [PAUSED]]: endpoints
# PREFIX<i> for i from FIRST on, COUNT of them, each posting to URL<i> and
# subscribed to event type TYPE<i>; paused unless PAUSED is off.
new_endpoints()
{
	local t=$SECONDS

	psql_q -v prefix="$1" -v first="$2" -v n="$3" -v url="$4" -v types="$5" \
		-v timeout="${6:-30 seconds}" -v paused="${7:-on}" -f "$BENCH/sql/endpoints.sql" >/dev/null
	log "  created $3 endpoints $1$2.. in $((SECONDS - t)) s"
}

# following_endpoints PREFIX FIRST COUNT URL TYPE [TIMEOUT]: new_endpoints,
# not paused, and wait until they follow the stream.
following_endpoints()
{
	new_endpoints "$1" "$2" "$3" "$4" "$5" "${6:-30 seconds}" off
	follow_stream "$1" "$3"
}

# deliver_backlog LABEL PREFIX PER COUNT TYPES: PER events of each of TYPES
# event types in one prepared transaction, delivered to the endpoints
# PREFIX* (COUNT of them subscribed) from its commit on; timed as LABEL and
# checked.
deliver_backlog()
{
	emit_prepared $(($3 * $5)) "$5"
	deliver "$1" '' "$2*" "$3" "$MANY_TIMEOUT" --count-log --commit bench_backlog
	check_delivered_prefix "$2" $(($3 * $4))
}

# restart_postgres: restart the instance and wait for the relay.
restart_postgres()
{
	runuser -u postgres -- "$PGBIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w restart >/dev/null
	for _ in $(seq 100); do
		[ -n "$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'")" ] && return 0
		sleep 0.1
	done
	die "the relay did not start"
}

# relay_running: whether this database has its relay.
relay_running() { [ -n "$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'")" ]; }

# fresh_outbox: reset_outbox with the relay stopped, so that the next run
# starts with a relay that has nothing left to do.  Cases 8 to 13 need it:
# today's relay still sends the pages it has read for an endpoint after the
# endpoint is dropped (with case 11, 40,000 requests to dropped endpoints
# while the next case's endpoints got none), and with 10,000 endpoints one
# of its reading rounds keeps a transaction open for minutes, which
# drop_endpoint() waits for.
fresh_outbox()
{
	stop_relay
	reset_outbox
	start_relay
}

# stop_relay, start_relay: the launcher stops the relay of a database that
# outbox.database no longer names, and starts it again once it does.
stop_relay()
{
	sql "ALTER SYSTEM SET outbox.database = 'bench_relay_stopped'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	for _ in $(seq 300); do
		relay_running || return 0
		sleep 0.1
	done
	die "the relay did not stop"
}

start_relay()
{
	sql "ALTER SYSTEM RESET outbox.database" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	for _ in $(seq 300); do
		relay_running && return 0
		sleep 0.1
	done
	die "the relay did not start again"
}

# use_default_settings: from here on the relay runs with every setting of
# its own at the server's default, except the plumbing (database, allowed
# networks, CA file); restarts PostgreSQL once.
DEFAULT_SETTINGS=
use_default_settings()
{
	[ -z "$DEFAULT_SETTINGS" ] || return 0
	sed -i -E '/^outbox\.(batch_size|max_concurrency|endpoint_concurrency|senders) = /d' "$WORK/data/postgresql.conf"
	if [ -n "$DEFAULT_MAX_CONCURRENCY" ]; then
		echo "outbox.max_concurrency = $DEFAULT_MAX_CONCURRENCY" >>"$WORK/data/postgresql.conf"
	fi
	restart_postgres
	DEFAULT_SETTINGS=$(sql "SELECT string_agg(replace(name, 'outbox.', '') || '=' || setting, ',' ORDER BY name)
	                          FROM pg_settings
	                         WHERE name ~ '^outbox\.(.*concurrency|.*in_flight.*|batch_.*|senders)$'")
	log "relay settings from here on, the server's defaults${DEFAULT_MAX_CONCURRENCY:+ but max_concurrency}: $DEFAULT_SETTINGS"
	result env.default_settings "$DEFAULT_SETTINGS"
	if [ -n "$DEFAULT_MAX_CONCURRENCY" ]; then
		result env.default_override "max_concurrency=$DEFAULT_MAX_CONCURRENCY"
	fi
}

# keep_median_round PREFIX: of the rounds PREFIX_1, PREFIX_2, ... in the
# results, the one with the median rate stands for PREFIX (its rate, CPU
# and memory alike); PREFIX.rounds lists every round's rate.
keep_median_round()
{
	local mid round

	mid=$(median < <(sed -n "s/^$1_[0-9]*\.rate //p" "$RESULTS"))
	round=$(sed -n "s/^$1_\([0-9]*\)\.rate $mid\$/\1/p" "$RESULTS" | head -n 1)
	sed -n "s/^$1_$round\./$1./p" "$RESULTS" >"$WORK/median.round"
	cat "$WORK/median.round" >>"$RESULTS"
	result "$1.rounds" "$(sed -n "s/^$1_[0-9]*\.rate //p" "$RESULTS" | paste -sd,)"
}

# in_turn ROUND A B: A and B in the order a round runs them, A first in
# odd rounds and B in even ones.
in_turn() { if [ $(($1 % 2)) -eq 1 ]; then echo "$2 $3"; else echo "$3 $2"; fi; }

# figure KEY: a figure already in this run's results, or nothing.
figure() { sed -n "s/^$1 //p" "$RESULTS" | tail -n 1; }

# delivered_ok NAME: successful attempts to endpoint NAME, from the log.
delivered_ok()
{
	sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	      WHERE e.name = '$1' AND a.status BETWEEN 200 AND 299"
}

# delivered_ok_prefix PREFIX: successful attempts to the endpoints whose
# names start with PREFIX.
delivered_ok_prefix()
{
	sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	      WHERE starts_with(e.name, '$1') AND a.status BETWEEN 200 AND 299"
}

check_delivered_prefix()
{
	local prefix=$1 want=$2 got

	got=$(delivered_ok_prefix "$prefix")
	result "check.$prefix*" "$got/$want"
	[ "$got" -eq "$want" ] || log "  WARNING: the $prefix* endpoints received $got of $want events"
}

attempts_to() { sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id WHERE e.name = '$1'"; }

check_delivered()
{
	local name=$1 want=$2 got

	got=$(delivered_ok "$name")
	result "check.$name" "$got/$want"
	[ "$got" -eq "$want" ] || log "  WARNING: $name received $got of $want events"
}

# ---------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------

# pgbench_tps SCRIPT: run SCRIPT with pgbench, 4 clients, prepared,
# EMIT_SECONDS; print its transactions a second (PGOPTIONS as the caller
# set it).  Dies, showing pgbench's output, when it gave no figure.
pgbench_tps()
{
	local tps

	"$PGBIN/pgbench" -n -M prepared -c 4 -j 2 -T "$EMIT_SECONDS" -f "$1" >"$WORK/pgbench.log" 2>&1 || true
	tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$WORK/pgbench.log")
	[ -n "$tps" ] || { cat "$WORK/pgbench.log" >&2; die "pgbench gave no figure for $1"; }
	echo "$tps"
}

case_emit_cost()
{
	local mode variant round tps

	log "case 1: emit cost, pgbench 4 clients, prepared, ${EMIT_SECONDS} s a run," \
		"$EMIT_ROUNDS rounds of the variants in turn (the median counts)"
	: >"$WORK/emit.runs"
	for mode in off on; do
		for round in $(seq "$EMIT_ROUNDS"); do
			for variant in none bare pgq outbox; do
				psql_q -f "$BENCH/sql/emit_reset.sql" >/dev/null
				tps=$(PGOPTIONS="-c synchronous_commit=$mode" pgbench_tps "$BENCH/sql/emit_$variant.sql")
				echo "$mode $variant $tps" >>"$WORK/emit.runs"
				log "  synchronous_commit=$mode, round $round, $variant: $tps tps"
			done
		done
		for variant in none bare pgq outbox; do
			result "emit.$mode.$variant" "$(awk -v m="$mode" -v v="$variant" '$1 == m && $2 == v { print $3 }' "$WORK/emit.runs" |
				sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')"
			result "emit.$mode.$variant.rounds" "$(awk -v m="$mode" -v v="$variant" '$1 == m && $2 == v { print $3 }' "$WORK/emit.runs" |
				paste -sd,)"
		done
	done
	psql_q -f "$BENCH/sql/emit_reset.sql" >/dev/null
	case_emit_many
	case_capture
}

# Case 1, emit_many: 1,000 events a transaction through outbox.emit_many()
# against a multi-row INSERT of the same rows into bench_event, pgbench 4
# clients, EMIT_ROUNDS rounds in turn (the medians count).
case_emit_many()
{
	local round variant tps

	log "case 1, emit_many: 1,000 events a transaction, pgbench 4 clients, ${EMIT_SECONDS} s a run," \
		"$EMIT_ROUNDS rounds of the two in turn"
	: >"$WORK/emit_many.runs"
	for round in $(seq "$EMIT_ROUNDS"); do
		for variant in $(in_turn "$round" bare outbox); do
			psql_q -f "$BENCH/sql/emit_reset.sql" >/dev/null
			tps=$(pgbench_tps "$BENCH/sql/emit_many_$variant.sql")
			echo "$variant $tps" >>"$WORK/emit_many.runs"
			log "  round $round, $variant: $tps transactions of 1,000 events a second"
		done
	done
	for variant in bare outbox; do
		result "emit_many.$variant" "$(awk -v v="$variant" '$1 == v { print $2 }' "$WORK/emit_many.runs" | median)"
		result "emit_many.$variant.rounds" "$(awk -v v="$variant" '$1 == v { print $2 }' "$WORK/emit_many.runs" | paste -sd,)"
	done
	psql_q -f "$BENCH/sql/emit_reset.sql" >/dev/null
}

# Case 1, capture: an UPDATE of CAPTURE_ROWS rows of bench_cap with the
# capture trigger against a plain AFTER trigger writing the same payload
# and key into an ordinary table; EMIT_ROUNDS rounds in turn, rows a second
# (the medians count).
case_capture()
{
	local round variant t0 t1

	log "case 1, capture: an UPDATE of $CAPTURE_ROWS rows, capture trigger against a plain AFTER trigger;" \
		"$EMIT_ROUNDS rounds in turn"
	psql_q -c "TRUNCATE bench_cap; INSERT INTO bench_cap SELECT i, i, 10 FROM generate_series(1, $CAPTURE_ROWS) AS i" >/dev/null
	: >"$WORK/capture.runs"
	for round in $(seq "$EMIT_ROUNDS"); do
		for variant in $(in_turn "$round" plain capture); do
			psql_q -c "TRUNCATE bench_cap_log, outbox.events" -c "VACUUM ANALYZE bench_cap" -c "CHECKPOINT" \
				-c "DROP TRIGGER IF EXISTS bench_cap_trigger ON bench_cap" >/dev/null
			if [ "$variant" = capture ]; then
				psql_q -c "CREATE TRIGGER bench_cap_trigger AFTER UPDATE ON bench_cap
				           FOR EACH ROW EXECUTE FUNCTION outbox.capture('cap')" >/dev/null
			else
				psql_q -c "CREATE TRIGGER bench_cap_trigger AFTER UPDATE ON bench_cap
				           FOR EACH ROW EXECUTE FUNCTION bench_cap_plain()" >/dev/null
			fi
			t0=$(date +%s.%N)
			psql_q -c "UPDATE bench_cap SET amount = amount + 1" >/dev/null
			t1=$(date +%s.%N)
			if [ "$variant" = capture ] &&
				[ "$(sql "SELECT count(*) FROM outbox.events WHERE event_type = 'cap.updated'")" != "$CAPTURE_ROWS" ]; then
				die "case 1, capture: the UPDATE did not emit $CAPTURE_ROWS events"
			fi
			awk -v v="$variant" -v n="$CAPTURE_ROWS" -v t0="$t0" -v t1="$t1" \
				'BEGIN { printf "%s %.0f\n", v, n / (t1 - t0) }' >>"$WORK/capture.runs"
			log "  round $round, $variant: $(tail -n 1 "$WORK/capture.runs" | cut -d' ' -f2) rows a second"
		done
	done
	psql_q -c "DROP TRIGGER IF EXISTS bench_cap_trigger ON bench_cap" -c "TRUNCATE bench_cap_log" >/dev/null
	for variant in plain capture; do
		result "capture.$variant" "$(awk -v v="$variant" '$1 == v { print $2 }' "$WORK/capture.runs" | median)"
		result "capture.$variant.rounds" "$(awk -v v="$variant" '$1 == v { print $2 }' "$WORK/capture.runs" | paste -sd,)"
	done
	result capture.rows "$CAPTURE_ROWS"
	psql_q -f "$BENCH/sql/emit_reset.sql" >/dev/null
}

# The request wrk sends: the body of a bench event (as a standard-webhooks
# endpoint gets it, format.c) and the relay's headers.
write_wrk_request()
{
	local body_sql
	body_sql=$(cat <<-'EOF'
		SELECT '{"type":' || to_json(event_type)::text || ',"timestamp":"'
		       || to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
		       || '","data":' || payload::text || '}'
		  FROM outbox.events WHERE event_type = 'bench.event' LIMIT 1
	EOF
	)
	sql "$body_sql" >"$WORK/request"
	cat >>"$WORK/request" <<-EOF
		Content-Type: application/json
		Accept: */*
		User-Agent: outbox/1.0
		webhook-id: $(cat /proc/sys/kernel/random/uuid)
		webhook-timestamp: $(date +%s)
		webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	EOF
}

# median: the middle of the numbers on stdin (the lower middle of an even count).
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

case_throughput()
{
	local round rps

	log "case 2: relay throughput, $THROUGHPUT_EVENTS events waiting, one endpoint;" \
		"$THROUGHPUT_ROUNDS rounds of the relay and of wrk in turn (the medians count)"
	: >"$WORK/wrk.runs"
	for round in $(seq "$THROUGHPUT_ROUNDS"); do
		reset_outbox
		new_endpoint "thr$round" "http://127.0.0.1:$NGINX_PORT/thr"
		emit_backlog "$THROUGHPUT_EVENTS"
		deliver "throughput_$round" "thr$round" "thr$round" "$THROUGHPUT_EVENTS"
		check_delivered "thr$round" "$THROUGHPUT_EVENTS"
		# The ceiling: wrk sending the same request at the same concurrency.
		[ "$round" -gt 1 ] || write_wrk_request
		rps=$(BENCH_REQUEST="$WORK/request" wrk -t 1 -c "$ENDPOINT_CONCURRENCY" -d "${WRK_SECONDS}s" \
			-s "$BENCH/wrk_post.lua" "http://127.0.0.1:$NGINX_PORT/wrk" |
			sed -n 's/^Requests\/sec: *\([0-9.]*\)/\1/p')
		echo "$rps" >>"$WORK/wrk.runs"
		log "  wrk, 1 thread, $ENDPOINT_CONCURRENCY connections, ${WRK_SECONDS} s: $rps requests/s"
	done
	# The median round's figures (rate, CPU, memory) stand for the case.
	keep_median_round throughput
	result wrk.rate "$(median <"$WORK/wrk.runs")"
	result wrk.rounds "$(paste -sd, "$WORK/wrk.runs")"

	# For scale: the relay sending everything itself.
	[ "$SENDERS" -gt 0 ] || return 0
	log "  again with outbox.senders = 0"
	restart_with_senders 0
	reset_outbox
	new_endpoint alone "http://127.0.0.1:$NGINX_PORT/alone"
	emit_backlog "$THROUGHPUT_EVENTS"
	deliver alone alone alone "$THROUGHPUT_EVENTS"
	check_delivered alone "$THROUGHPUT_EVENTS"
	restart_with_senders "$SENDERS"
}

# profile_pass NAME RESUME TYPES: emit 100,000 events, resume endpoints
# RESUME and time the delivery to endpoint NAME under `perf record -g` of
# the processes of backend types TYPES (an SQL list), into $WORK/NAME.perf,
# and under `perf stat` of their system calls, into $WORK/NAME.syscalls;
# deliver.py's summary goes to $WORK/NAME.summary.
SYSCALLS="sendto recvfrom poll epoll_ctl epoll_wait"
profile_pass()
{
	local pids record_pid stat_pid call events=

	emit_backlog 100000
	pids=$(sql "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE backend_type IN ($3)")
	for call in $SYSCALLS; do
		events="$events${events:+,}syscalls:sys_enter_$call"
	done
	perf record -q -g -p "$pids" -o "$WORK/$1.perf" >/dev/null 2>&1 &
	record_pid=$!
	perf stat -x, -e "$events" -p "$pids" -o "$WORK/$1.syscalls" >/dev/null 2>&1 &
	stat_pid=$!
	sleep 0.5
	deliver "$1" "$2" "$1" 100000 | tee "$WORK/$1.summary"
	kill -INT "$record_pid" "$stat_pid" 2>/dev/null
	wait "$record_pid" "$stat_pid" || true
}

# syscalls_per_delivery NAME: profile NAME's system calls per delivery
# (the passes deliver 100,000 events).
syscalls_per_delivery()
{
	awk -F, '$3 ~ /sys_enter_/ { sub(/.*sys_enter_/, "", $3); printf "%s %.2f, ", $3, $1 / 100000 }' \
		"$WORK/$1.syscalls" | sed 's/, $//'
	echo
}

# by_library NAME: the top of profile NAME by library.
by_library()
{
	perf report -i "$WORK/$1.perf" --stdio --no-children --sort dso -g none 2>/dev/null |
		grep -v '^#' | grep -v '^$' | head -n 12
}

# With linux-perf installed (BENCH_PERF=0 to skip): case 2 again, with
# 100,000 events, under `perf record -g` of the relay and its senders; the
# top of the report goes to bench/perf-throughput.txt.  Then the relay alone
# delivering to a healthy endpoint by itself and beside the never-answering
# one of case 6 (bench/perf-isolation.txt).  Separate passes, so that the
# profiler does not slow the figures of the table.
case_profile()
{
	local name

	command -v perf >/dev/null && [ "${BENCH_PERF:-1}" = 1 ] || return 0
	log "profile: case 2 again under perf record -g"
	reset_outbox
	new_endpoint prof "http://127.0.0.1:$NGINX_PORT/prof"
	profile_pass prof prof "'outbox relay', 'outbox sender'"
	{
		echo "# perf record -g of the outbox relay and its $SENDERS senders during case 2 (100,000 events), by library"
		by_library prof
		echo "# system calls per delivery (perf stat): $(syscalls_per_delivery prof)"
		echo "# and by symbol (postgres has no debug symbols here: hex addresses are in it)"
		perf report -i "$WORK/prof.perf" --stdio --no-children --sort dso,symbol -g none \
			--percent-limit 0.7 2>/dev/null | grep -v '^#' | grep -v '^$' | head -n 40
	} >"$BENCH/perf-throughput.txt" || true
	log "  wrote $BENCH/perf-throughput.txt"

	# (prof names: the labels deliver.py writes must not be those of the table's cases)
	for name in profalone profbeside; do
		log "profile: the relay, delivering to a healthy endpoint ${name#prof} a never-answering one"
		reset_outbox
		new_endpoint "$name" "http://127.0.0.1:$NGINX_PORT/$name"
		if [ "$name" = profbeside ]; then
			new_endpoint hanging "http://127.0.0.1:$HANG_PORT/" "1 second"
			profile_pass "$name" "$name,hanging" "'outbox relay'"
		else
			profile_pass "$name" "$name" "'outbox relay'"
		fi
	done
	{
		echo "# perf record -g of the relay process alone (its $SENDERS senders send part of the"
		echo "# requests), by library, delivering 100,000 events to one endpoint: by itself,"
		echo "# then beside an endpoint that never answers (case 6, 1 s timeout)."
		for name in profalone profbeside; do
			echo "## ${name#prof}:$(sed 's/^ *[a-z_]*:/ /' "$WORK/$name.summary")"
			echo "# system calls per delivery (perf stat): $(syscalls_per_delivery "$name")"
			by_library "$name"
		done
	} >"$BENCH/perf-isolation.txt" || true
	log "  wrote $BENCH/perf-isolation.txt"
}

case_latency()
{
	log "case 3: latency, $LATENCY_RATE events/s for $LATENCY_SECONDS s"
	reset_outbox
	sql "SELECT outbox.create_endpoint('lat', 'http://127.0.0.1:$NGINX_PORT/latency', '{bench.latency}')" >/dev/null
	sleep 1                             # let the relay load the endpoint
	"$PY" "$BENCH/latency.py" --rate "$LATENCY_RATE" --seconds "$LATENCY_SECONDS" \
		--arrivals "$WORK/arrivals.log" --cdf "$WORK/latency.dat" --results "$RESULTS"
}

# table_stats LABEL: the outbox tables' total size, dead tuples and
# sequential scans of tables with more than 10,000 rows.
table_stats()
{
	sleep 1.5                           # the relay flushes its statistics each second
	result "$1.size_bytes" "$(sql "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
	                                 WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r'")"
	# The rotated partitions apart from the rest (endpoints, positions, ...).
	result "$1.rotated_bytes" "$(sql "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
	                                    WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r'
	                                      AND c.relispartition")"
	result "$1.dead_tuples" "$(sql "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = 'outbox'")"
	result "$1.dead_detail" "$(sql "SELECT coalesce(string_agg(relname || '=' || n_dead_tup, ',' ORDER BY relname), '-')
	                                  FROM pg_stat_user_tables WHERE schemaname = 'outbox' AND n_dead_tup > 0")"
	sql "SELECT relname, seq_scan, n_live_tup FROM pg_stat_user_tables WHERE schemaname = 'outbox'" >"$WORK/$1.seqscans"
}

# apply_retention BYTES: set the three retention periods to 2 s, wait (at
# most 60 s) until rotation has brought the outbox tables back within 10% of
# BYTES, record how long that took and the tables' statistics, and restore
# the periods.
apply_retention()
{
	local limit=$(($1 * 11 / 10)) t=$SECONDS s

	for s in retention attempt_retention inbox_retention; do
		sql "ALTER SYSTEM SET outbox.$s = '2s'" >/dev/null
	done
	sql "SELECT pg_reload_conf()" >/dev/null
	while [ $((SECONDS - t)) -lt 60 ] &&
		[ "$(sql "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c
		          WHERE c.relnamespace = 'outbox'::regnamespace AND c.relkind = 'r'")" -gt "$limit" ]; do
		sleep 0.5
	done
	result scale_retention.seconds $((SECONDS - t))
	table_stats scale_retained
	for s in retention attempt_retention inbox_retention; do
		sql "ALTER SYSTEM RESET outbox.$s" >/dev/null
	done
	sql "SELECT pg_reload_conf()" >/dev/null
}

case_scale()
{
	local before after

	log "case 4: scale, $SCALE_SMALL then $SCALE_LARGE events waiting"
	reset_outbox
	new_endpoint small "http://127.0.0.1:$NGINX_PORT/small"
	emit_backlog "$SCALE_SMALL"
	deliver scale_small small small "$SCALE_SMALL"
	check_delivered small "$SCALE_SMALL"

	reset_outbox
	table_stats scale_before
	new_endpoint large "http://127.0.0.1:$NGINX_PORT/large"
	emit_backlog "$SCALE_LARGE"
	table_stats scale_emitted
	deliver scale_large large large "$SCALE_LARGE"
	# Statistics before the check: its count of the attempt log is itself a
	# (parallel) sequential scan, not the relay's.
	table_stats scale_after
	check_delivered large "$SCALE_LARGE"
	# Sequential scans, while delivering, of tables that hold more than
	# 10,000 rows at either end (fields: name|scans|rows before|scans|rows after).
	result scale.seqscans "$(join -t '|' <(sort "$WORK/scale_emitted.seqscans") <(sort "$WORK/scale_after.seqscans") |
		awk -F'|' '$4 > $2 && ($3 > 10000 || $5 > 10000) { printf "%s%s=%d", sep, $1, $4 - $2; sep = "," }
		           END { if (!sep) printf "none" }')"
	log "  retention: periods of 2 s until the tables are back to their size at the start"
	apply_retention "$(awk '$1 == "scale_before.size_bytes" { print $2 }' "$RESULTS")"
}

case_fanout()
{
	local names i

	log "case 5: fan-out, $FANOUT_ENDPOINTS endpoints, $FANOUT_EVENTS events each"
	reset_outbox
	names=$(seq -f "fan%02g" 1 "$FANOUT_ENDPOINTS" | paste -sd,)
	for i in ${names//,/ }; do
		new_endpoint "$i" "http://127.0.0.1:$NGINX_PORT/$i"
	done
	emit_backlog "$FANOUT_EVENTS"
	deliver fanout "$names" "$names" "$FANOUT_EVENTS"
	check_delivered fan01 "$FANOUT_EVENTS"
}

case_isolation()
{
	local kind url

	for kind in failing hanging; do
		if [ "$kind" = failing ]; then
			url="http://127.0.0.1:$NGINX_PORT/fail"
			log "case 6a: isolation, one endpoint answering 503, $ISOLATION_EVENTS events"
		else
			url="http://127.0.0.1:$HANG_PORT/"
			log "case 6b: isolation, one endpoint never answering (1 s timeout), $ISOLATION_EVENTS events"
		fi
		reset_outbox
		new_endpoint healthy "http://127.0.0.1:$NGINX_PORT/healthy"
		new_endpoint "$kind" "$url" "1 second"
		emit_backlog "$ISOLATION_EVENTS"
		deliver "isolation_$kind" "healthy,$kind" healthy "$ISOLATION_EVENTS"
		check_delivered healthy "$ISOLATION_EVENTS"
		result "isolation_$kind.bad_attempts" "$(attempts_to "$kind")"
		result "isolation_$kind.bad_events" "$(sql "SELECT count(DISTINCT a.id) FROM outbox.attempt_log a
		                                            JOIN outbox.endpoints e ON e.id = a.endpoint_id WHERE e.name = '$kind'")"
		result "isolation_$kind.bad_retries" "$(sql "SELECT count(*) FROM outbox.attempt_log a
		                                             JOIN outbox.endpoints e ON e.id = a.endpoint_id
		                                             WHERE e.name = '$kind' AND a.attempt > 1")"
		log "  $kind endpoint: $(attempts_to "$kind") attempts meanwhile"
	done
}

case_memory_big()
{
	log "case 7: memory, $BIG_EVENTS requests answered with 100 MB each"
	reset_outbox
	new_endpoint big "http://127.0.0.1:$BIG_PORT/"
	emit_backlog "$BIG_EVENTS"
	deliver memory_big big big "$BIG_EVENTS"
	check_delivered big "$BIG_EVENTS"
}

# Cases 8 to 13, issue 11's: every relay setting at the server's default.

# wrk_rate URL CONNECTIONS: wrk's requests/s, one thread, WRK_SECONDS,
# sending the relay's request ($WORK/request, from the events present).
wrk_rate()
{
	[ -f "$WORK/request" ] || write_wrk_request
	BENCH_REQUEST="$WORK/request" wrk -t 1 -c "$2" -d "${WRK_SECONDS}s" -s "$BENCH/wrk_post.lua" "$1" |
		sed -n 's/^Requests\/sec: *\([0-9.]*\)/\1/p'
}

# curl_rate URL CONNECTIONS: requests/s of libcurl alone (bench/curl_post.c,
# built here), WRK_SECONDS, sending wrk's request the way http.c does.
curl_rate()
{
	[ -x "$WORK/curl_post" ] || cc -O2 -o "$WORK/curl_post" "$BENCH/curl_post.c" -lcurl
	[ -f "$WORK/request" ] || write_wrk_request
	local rate failed
	read -r rate failed < <("$WORK/curl_post" "$1" "$2" "$WRK_SECONDS" <"$WORK/request")
	[ -n "$rate" ] || die "bench/curl_post.c gave no rate"
	[ "$failed" = 0 ] || log "  libcurl alone: $failed requests not answered 2xx" >&2
	echo "$rate"
}

# Case 8: case 2 at the default settings (no senders).  Each round also
# times libcurl alone sending the same request at the same concurrency
# (bench/curl_post.c): what the relay could reach if reading, signing and
# recording cost nothing.
case_one_default()
{
	local round rps crps conns

	use_default_settings
	conns=$(sql "SELECT coalesce(current_setting('outbox.endpoint_concurrency', true), '32')")
	log "case 8: one endpoint at default settings, $MANY_EVENTS events waiting;" \
		"$ONE_ROUNDS rounds of the relay, of wrk and of libcurl alone ($conns connections) in turn (the medians count)"
	: >"$WORK/wrk8.runs"
	: >"$WORK/curl8.runs"
	for round in $(seq "$ONE_ROUNDS"); do
		fresh_outbox
		new_endpoint "one$round" "http://127.0.0.1:$NGINX_PORT/one"
		emit_backlog "$MANY_EVENTS"
		deliver "one_$round" "one$round" "one$round" "$MANY_EVENTS" "$MANY_TIMEOUT"
		check_delivered "one$round" "$MANY_EVENTS"
		rps=$(wrk_rate "http://127.0.0.1:$NGINX_PORT/wrk" "$conns")
		echo "$rps" >>"$WORK/wrk8.runs"
		log "  wrk, 1 thread, $conns connections, ${WRK_SECONDS} s: $rps requests/s"
		crps=$(curl_rate "http://127.0.0.1:$NGINX_PORT/wrk" "$conns")
		echo "$crps" >>"$WORK/curl8.runs"
		log "  libcurl alone (bench/curl_post.c), $conns in flight, ${WRK_SECONDS} s: $crps requests/s"
	done
	keep_median_round one
	result one_wrk.rate "$(median <"$WORK/wrk8.runs")"
	result one_wrk.rounds "$(paste -sd, "$WORK/wrk8.runs")"
	result one_curl.rate "$(median <"$WORK/curl8.runs")"
	result one_curl.rounds "$(paste -sd, "$WORK/curl8.runs")"
}

# Case 9: MANY_EVENTS events spread over 1,000 and then 10,000 endpoints,
# each subscribed to an event type of its own, on nginx; against all of
# them to one endpoint, delivered the same way (following the stream, one
# prepared backlog) in the same rounds, first in odd rounds and last in
# even ones.  MANY_ROUNDS rounds (the medians count).
case_many_endpoints()
{
	local label n per round

	use_default_settings
	log "case 9: $MANY_ENDPOINTS and $MANY_ENDPOINTS_LARGE endpoints, each with its own event type," \
		"against one endpoint, receiver answering at once; $MANY_ROUNDS rounds in turn (the medians count)"
	for round in $(seq "$MANY_ROUNDS"); do
		for label in $(in_turn "$round" many_one "many_small many_large"); do
			n=1
			[ "$label" = many_small ] && n=$MANY_ENDPOINTS
			[ "$label" = many_large ] && n=$MANY_ENDPOINTS_LARGE
			per=$((MANY_EVENTS / n))
			log "case 9, round $round: $n endpoints, $per events each"
			fresh_outbox
			following_endpoints many 1 "$n" "http://127.0.0.1:$NGINX_PORT/many" bench.e
			deliver_backlog "${label}_$round" many "$per" "$n" "$n"
		done
	done
	for label in many_one many_small many_large; do
		keep_median_round "$label"
	done
	result many_small.endpoints "$MANY_ENDPOINTS"
	result many_large.endpoints "$MANY_ENDPOINTS_LARGE"
}

# Case 10: BUSY_ENDPOINTS endpoints getting MANY_EVENTS events, alone and
# then with the rest of MANY_ENDPOINTS_LARGE defined beside them, whose
# event types nobody emits.  All are resumed together, so the idle ones'
# cost falls within the measurement.  MANY_ROUNDS rounds in turn, which
# goes first alternating from round to round (the medians count).
case_idle_endpoints()
{
	local busy=$BUSY_ENDPOINTS idle=$((MANY_ENDPOINTS_LARGE - BUSY_ENDPOINTS)) per label round

	use_default_settings
	per=$((MANY_EVENTS / busy))
	log "case 10: $busy endpoints, $per events each, alone and beside $idle that get no events;" \
		"$MANY_ROUNDS rounds in turn (the medians count)"
	for round in $(seq "$MANY_ROUNDS"); do
		for label in $(in_turn "$round" idle_alone idle_beside); do
			fresh_outbox
			if [ "$label" = idle_beside ]; then
				log "case 10, round $round: the $busy endpoints beside $idle"
				following_endpoints idle 1 "$idle" "http://127.0.0.1:$NGINX_PORT/idle" idle.e
			else
				log "case 10, round $round: the $busy endpoints alone"
			fi
			following_endpoints busy 1 "$busy" "http://127.0.0.1:$NGINX_PORT/busy" bench.e
			deliver_backlog "${label}_$round" busy "$per" "$busy" "$busy"
		done
	done
	for label in idle_alone idle_beside; do
		keep_median_round "$label"
	done
	result idle_beside.endpoints "$MANY_ENDPOINTS_LARGE"
	result idle_alone.endpoints "$busy"
}

# view_ms QUERY: the median of five timings of QUERY, in milliseconds.
view_ms()
{
	local i
	for i in 1 2 3 4 5; do
		psql_q -At -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
	done | sort -n | sed -n 3p
}

# Case views (issue 11, item 4: endpoints are cheap, for operators too):
# what endpoint_status, backlog and health() take with BUSY_ENDPOINTS
# endpoints alone and beside MANY_ENDPOINTS_LARGE - BUSY_ENDPOINTS others
# that follow the stream, the busy ones paused with VIEW_EVENTS events
# waiting.  Not in the default list: BENCH_CASES=views runs it.
case_views()
{
	local busy=$BUSY_ENDPOINTS idle=$((MANY_ENDPOINTS_LARGE - BUSY_ENDPOINTS)) label q

	use_default_settings
	for label in views_alone views_beside; do
		fresh_outbox
		if [ "$label" = views_alone ]; then
			log "case views: $busy endpoints alone, $VIEW_EVENTS events waiting"
		else
			log "case views: the same beside $idle endpoints that follow the stream"
			following_endpoints vidle 1 "$idle" "http://127.0.0.1:$NGINX_PORT/idle" idle.e
		fi
		result "$label.following" "$(sql 'SELECT count(*) FROM outbox.positions WHERE follows')"
		new_endpoints vbusy 1 "$busy" "http://127.0.0.1:$NGINX_PORT/busy" bench.e "30 seconds" on
		psql_q -v first=1 -v last="$VIEW_EVENTS" -v types="$busy" -f "$BENCH/sql/backlog_types.sql" >/dev/null
		result "$label.endpoints" "$(sql 'SELECT count(*) FROM outbox.endpoints')"
		result "$label.waiting" "$(sql 'SELECT deliveries_waiting FROM outbox.backlog')"
		for q in status:'SELECT count(*) FROM outbox.endpoint_status' \
			backlog:'SELECT deliveries_waiting FROM outbox.backlog' \
			health:'SELECT count(*) FROM outbox.health()'; do
			result "$label.${q%%:*}_ms" "$(view_ms "${q#*:}")"
			log "  ${q#*:}: $(grep "^$label.${q%%:*}_ms " "$RESULTS" | cut -d' ' -f2) ms"
		done
	done
}

# Case ahead (issue 14, priority across a backlog): what reading an
# endpoint's backlog costs per event when a share of its events carry a
# priority (0, 1%, 20% and 90%), page by page as the relay reads, with the
# relay stopped (bench/sql/ahead.sql).  Not in the default list:
# BENCH_CASES=ahead runs it.
case_ahead()
{
	local pct out
	stop_relay
	for pct in 0 0.01 0.2 0.9; do
		reset_outbox
		out=$(psql_q -At -F ' ' -v pct="$pct" -f "$BENCH/sql/ahead.sql" | tail -n 1)
		log "case ahead: $pct of the events with a priority: pages, ms a page, µs an event, sent ahead: $out"
		result "ahead_$pct.us_per_event" "$(echo "$out" | cut -d' ' -f3)"
		result "ahead_$pct.sent_ahead" "$(echo "$out" | cut -d' ' -f4)"
	done
	reset_outbox
	start_relay
}

# Case record (issue 11: what a record costs does not grow with its
# size): outbox._record of one delivery each for 100 and then for 1,000
# endpoints whose health rows are due for a write, as on a stream page of
# that many endpoints (bench/sql/record.sql), with the relay stopped.  The
# ratio is the time per endpoint at 1,000 against at 100.  Not in the
# default list: BENCH_CASES=record runs it.
case_record()
{
	local n ms

	stop_relay
	reset_outbox
	new_endpoints rec 1 1000 "http://127.0.0.1:$NGINX_PORT/rec" rec.e "30 seconds" on
	for n in 100 1000; do
		ms=$(psql_q -At -v n="$n" -f "$BENCH/sql/record.sql" | tail -n 1)
		result "record_$n.ms" "$ms"
		log "case record: $n endpoints, one delivery each, health rows due: $ms ms a record" \
			"($(echo "$ms $n" | awk '{printf "%.1f", $1 * 1000 / $2}') µs an endpoint)"
	done
	log "  µs an endpoint, 1,000 against 100: $(awk '/^record_100.ms /{a=$2} /^record_1000.ms /{b=$2}
		END {printf "%.2f", (b / 1000) / (a / 100)}' "$RESULTS")"
	reset_outbox
	start_relay
}

# receiver_status FIELD: a counter of slow_receiver.js.
receiver_status()
{
	"$PY" -c 'import json, sys, urllib.request
print(json.load(urllib.request.urlopen(sys.argv[1]))[sys.argv[2]])' "http://127.0.0.1:$SLOW_PORT/_status" "$1"
}

# Case 11: 200 and then 1,000 endpoints on a receiver that answers after
# SLOW_DELAY_MS, each with its own event type and a backlog larger than
# they can clear in the window: deliveries counted over SLOW_SECONDS after
# SLOW_WARMUP.  wrk with 2,000 connections to the same receiver gives its
# ceiling.
case_slow_receiver()
{
	local label n per

	use_default_settings
	result slow.delay_ms "$SLOW_DELAY_MS"
	for label in slow_small slow_large; do
		n=$SLOW_ENDPOINTS
		[ "$label" = slow_large ] && n=$SLOW_ENDPOINTS_LARGE
		per=$((SLOW_EVENTS / n))
		log "case 11: $n endpoints on a receiver answering after $SLOW_DELAY_MS ms, $per events each;" \
			"deliveries counted over $SLOW_SECONDS s after $SLOW_WARMUP s"
		fresh_outbox
		following_endpoints slow 1 "$n" "http://127.0.0.1:$SLOW_PORT/delay/$SLOW_DELAY_MS/slow" bench.e
		emit_prepared $((per * n)) "$n"
		deliver "$label" '' 'slow*' "$per" "$MANY_TIMEOUT" --commit bench_backlog \
			--window "$SLOW_SECONDS" --warmup "$SLOW_WARMUP"
		result "$label.endpoints" "$n"
		result "$label.connections" "$(receiver_status open)"
		log "  connections open to the receiver: $(receiver_status open)"
	done
	fresh_outbox
	result slow_wrk.rate "$(wrk_rate "http://127.0.0.1:$SLOW_PORT/delay/$SLOW_DELAY_MS/wrk" 2000)"
	log "  wrk, 1 thread, 2,000 connections to the same receiver: $(figure slow_wrk.rate) requests/s"
}

# later_rate PREFIX: the rate of successful attempts to the endpoints
# PREFIX* after the first second of the run (from the first one recorded
# on), over the time to the last one recorded: what the run gives once
# its start is over (empty when nothing was delivered).  The attempt
# log's times are those of the records' transactions, tens of ms apart.
later_rate()
{
	sql "WITH ok AS (SELECT a.at FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	                  WHERE starts_with(e.name, '$1') AND a.status BETWEEN 200 AND 299),
	          s AS (SELECT min(at) AS t0, max(at) AS t1 FROM ok)
	     SELECT round(((SELECT count(*) FROM ok WHERE ok.at >= s.t0 + interval '1 second')
	                   / greatest(extract(epoch FROM s.t1 - s.t0) - 1, 0.001))::numeric, 1)
	       FROM s WHERE s.t0 IS NOT NULL"
}

# Case 12: MANY_ENDPOINTS endpoints with their own event types, of which
# HANGING_ENDPOINTS post to a receiver that never answers (HANG_TIMEOUT).
# The same events are emitted in both runs; one has only the healthy
# endpoints, the other all of them.  MANY_ROUNDS rounds in turn, which
# goes first alternating from round to round (the medians count).
case_hanging_endpoints()
{
	local n=$MANY_ENDPOINTS bad=$HANGING_ENDPOINTS ok per label round

	use_default_settings
	ok=$((n - bad))
	per=$((MANY_EVENTS / n))
	log "case 12: $ok endpoints answering at once, $per events each, alone and beside $bad never" \
		"answering (timeout $HANG_TIMEOUT); $MANY_ROUNDS rounds in turn (the medians count)"
	for round in $(seq "$MANY_ROUNDS"); do
		for label in $(in_turn "$round" hang_alone hang_beside); do
			log "case 12, round $round: ${label#hang_}"
			fresh_outbox
			following_endpoints ok 1 "$ok" "http://127.0.0.1:$NGINX_PORT/ok" bench.e
			if [ "$label" = hang_beside ]; then
				following_endpoints hang $((ok + 1)) "$bad" "http://127.0.0.1:$SLOW_PORT/hang/" bench.e "$HANG_TIMEOUT"
			fi
			deliver_backlog "${label}_$round" ok "$per" "$ok" "$n"
			result "${label}_$round.later_rate" "$(later_rate ok)"
			if [ "$label" = hang_beside ]; then
				result "hang_beside_$round.bad_attempts" \
					"$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e
					        ON e.id = a.endpoint_id WHERE starts_with(e.name, 'hang')")"
			fi
		done
	done
	for label in hang_alone hang_beside; do
		keep_median_round "$label"
		result "$label.later_rate_median" \
			"$(sed -n "s/^${label}_[0-9]*\.later_rate //p" "$RESULTS" | median)"
	done
	result hang_alone.endpoints "$ok"
	result hang_beside.endpoints "$ok"
	result hang_beside.bad_endpoints "$bad"
	result hang_beside.timeout "${HANG_TIMEOUT// /_}"
	log "  the never-answering endpoints: $(figure hang_beside.bad_attempts) attempts meanwhile"
}

# Case 13: one endpoint over plain HTTP and over HTTPS (HTTP/1.1, kept
# alive), on the same nginx, rounds in turn (the medians count).
case_tls()
{
	local round scheme url

	use_default_settings
	log "case 13: one endpoint, $MANY_EVENTS events, over http and https; $TLS_ROUNDS rounds"
	for round in $(seq "$TLS_ROUNDS"); do
		for scheme in http https; do
			url="http://127.0.0.1:$NGINX_PORT/tls"
			[ "$scheme" = https ] && url="https://127.0.0.1:$TLS_PORT/tls"
			fresh_outbox
			new_endpoint "tls_$scheme$round" "$url"
			emit_backlog "$MANY_EVENTS"
			deliver "tls_${scheme}_$round" "tls_$scheme$round" "tls_$scheme$round" "$MANY_EVENTS" "$MANY_TIMEOUT"
			check_delivered "tls_$scheme$round" "$MANY_EVENTS"
		done
	done
	for scheme in http https; do
		keep_median_round "tls_$scheme"
	done
}

# map_hosts N: host names h1.hosts.bench.test to hN.hosts.bench.test
# resolve to 127.0.0.1 through /etc/hosts (which cleanup puts back as it
# was), for the cases with a host name per endpoint; nginx's and
# slow_receiver.js's certificate covers *.hosts.bench.test.
map_hosts()
{
	local i

	if [ -z "$HOSTS_SAVED" ]; then
		HOSTS_SAVED=$WORK/hosts.saved
		cp /etc/hosts "$HOSTS_SAVED"
	fi
	{
		cat "$HOSTS_SAVED"
		for i in $(seq "$1"); do
			echo "127.0.0.1 h$i.hosts.bench.test"
		done
	} >/etc/hosts
	getent hosts "h$1.hosts.bench.test" >/dev/null || die "h$1.hosts.bench.test does not resolve"
}

# relay_private_kb: the relay's private memory now (RssAnon), in kB.
relay_private_kb()
{
	local pid

	pid=$(sql "SELECT pid FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
	sed -n 's/^RssAnon:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$pid/status"
}

# Case 17: one https endpoint at default settings, MANY_EVENTS events
# waiting, against wrk over HTTPS on the same nginx (HTTPS_WRK_CONNS
# connections); ONE_ROUNDS rounds in turn (the medians count).
case_https()
{
	local round rps

	use_default_settings
	log "case 17: one https endpoint at default settings, $MANY_EVENTS events waiting;" \
		"$ONE_ROUNDS rounds of the relay and of wrk over HTTPS ($HTTPS_WRK_CONNS connections) in turn"
	: >"$WORK/wrk17.runs"
	for round in $(seq "$ONE_ROUNDS"); do
		fresh_outbox
		new_endpoint "https$round" "https://127.0.0.1:$TLS_PORT/https"
		emit_backlog "$MANY_EVENTS"
		deliver "https_$round" "https$round" "https$round" "$MANY_EVENTS" "$MANY_TIMEOUT"
		check_delivered "https$round" "$MANY_EVENTS"
		rps=$(wrk_rate "https://127.0.0.1:$TLS_PORT/wrk" "$HTTPS_WRK_CONNS")
		echo "$rps" >>"$WORK/wrk17.runs"
		log "  wrk over HTTPS, 1 thread, $HTTPS_WRK_CONNS connections, ${WRK_SECONDS} s: $rps requests/s"
	done
	keep_median_round https
	result https_wrk.rate "$(median <"$WORK/wrk17.runs")"
	result https_wrk.rounds "$(paste -sd, "$WORK/wrk17.runs")"
}

# Case 18: MANY_EVENTS events spread over HOSTS endpoints, each on a host
# name of its own over https and subscribed to an event type of its own,
# against all of them to one https endpoint on one such name, delivered
# as case 9 delivers (following the stream, one prepared backlog);
# HOSTS_ROUNDS rounds in turn (the medians count).  Also the relay's
# private memory once the HOSTS endpoints' connections are idle.
case_https_hosts()
{
	local label n per round url

	use_default_settings
	map_hosts "$HOSTS"
	url="https://h{i}.hosts.bench.test:$TLS_PORT/hosts"
	log "case 18: $HOSTS https endpoints on $HOSTS host names, each with its own event type," \
		"against one https endpoint; $HOSTS_ROUNDS rounds in turn (the medians count)"
	: >"$WORK/idle18.runs"
	for round in $(seq "$HOSTS_ROUNDS"); do
		for label in $(in_turn "$round" hosts_one hosts_many); do
			n=1
			[ "$label" = hosts_many ] && n=$HOSTS
			per=$((MANY_EVENTS / n))
			log "case 18, round $round: $n https endpoints on $n host names, $per events each"
			fresh_outbox
			following_endpoints hosts 1 "$n" "$url" bench.e
			deliver_backlog "${label}_$round" hosts "$per" "$n" "$n"
			if [ "$label" = hosts_many ]; then
				relay_private_kb >>"$WORK/idle18.runs"
				log "  relay private memory with the connections idle: $(tail -n 1 "$WORK/idle18.runs") kB"
			fi
		done
	done
	for label in hosts_one hosts_many; do
		keep_median_round "$label"
	done
	result hosts_many.endpoints "$HOSTS"
	result hosts_idle.rssanon_kb "$(sort -n "$WORK/idle18.runs" | tail -n 1)"
}

# Case 20: endpoints created just before a burst, as a user creates them:
# BURST_ENDPOINTS endpoints (each with its own event type) committed, then
# at once MANY_EVENTS events of their types emitted in one transaction and
# committed, against the same with one endpoint; timed from the burst's
# commit.  Unlike case 9, nothing waits for the endpoints to follow the
# stream.  BURST_ROUNDS rounds in turn; the median and the worst round
# are reported.
case_burst_new()
{
	local label n per round

	use_default_settings
	log "case 20: $BURST_ENDPOINTS endpoints created just before a burst of $MANY_EVENTS events, against one;" \
		"$BURST_ROUNDS rounds in turn"
	for round in $(seq "$BURST_ROUNDS"); do
		for label in $(in_turn "$round" burst_one burst_many); do
			n=1
			[ "$label" = burst_many ] && n=$BURST_ENDPOINTS
			per=$((MANY_EVENTS / n))
			log "case 20, round $round: $n endpoints created, then $per events each"
			fresh_outbox
			new_endpoints burst 1 "$n" "http://127.0.0.1:$NGINX_PORT/burst" bench.e "30 seconds" off
			deliver_backlog "${label}_$round" burst "$per" "$n" "$n"
		done
	done
	for label in burst_one burst_many; do
		keep_median_round "$label"
	done
	result burst_many.endpoints "$BURST_ENDPOINTS"
}

# Case 19: HOSTS https endpoints on HOSTS host names, on slow_receiver.js
# answering after SLOW_DELAY_MS, SLOW_EVENTS events; deliveries counted as
# in case 11 (a window after a warm-up).
case_https_slow()
{
	local per=$((SLOW_EVENTS / HOSTS))

	use_default_settings
	map_hosts "$HOSTS"
	result slow.delay_ms "$SLOW_DELAY_MS"
	log "case 19: $HOSTS https endpoints on $HOSTS host names, receiver answering after $SLOW_DELAY_MS ms," \
		"$per events each; deliveries counted over $SLOW_SECONDS s after $SLOW_WARMUP s"
	fresh_outbox
	following_endpoints hslow 1 "$HOSTS" "https://h{i}.hosts.bench.test:$SLOW_TLS_PORT/delay/$SLOW_DELAY_MS/s" bench.e
	emit_prepared $((per * HOSTS)) "$HOSTS"
	deliver hosts_slow '' 'hslow*' "$per" "$MANY_TIMEOUT" --commit bench_backlog \
		--window "$SLOW_SECONDS" --warmup "$SLOW_WARMUP"
	result hosts_slow.endpoints "$HOSTS"
	result hosts_slow.connections "$(receiver_status open)"
	log "  connections open to the receiver: $(receiver_status open)"
}

# Case "expiry" (issue 14, items 2 and 3): case 8's one endpoint, with
# expiry and priority off (plain events, no max_age) and on (every event
# with an expires_at a day ahead and a priority of 0, 1 or 2, the endpoint
# with a max_age of a day: every delivery's deadline is checked and every
# page sorted), rounds in turn, which goes first alternating from round to
# round; the medians count, on against off.
case_controls()
{
	local round mode

	use_default_settings
	log "case expiry: one endpoint, $MANY_EVENTS events, expiry and priority off and on;" \
		"$CONTROL_ROUNDS rounds in turn (the medians count)"
	for round in $(seq "$CONTROL_ROUNDS"); do
		for mode in $(in_turn "$round" off on); do
			fresh_outbox
			new_endpoint "ctl_$mode$round" "http://127.0.0.1:$NGINX_PORT/ctl"
			if [ "$mode" = on ]; then
				sql "SELECT outbox.alter_endpoint('ctl_$mode$round', max_age => '1 day')" >/dev/null
				emit_backlog "$MANY_EVENTS" controls
			else
				emit_backlog "$MANY_EVENTS"
			fi
			deliver "ctl_${mode}_$round" "ctl_$mode$round" "ctl_$mode$round" "$MANY_EVENTS" "$MANY_TIMEOUT"
			check_delivered "ctl_$mode$round" "$MANY_EVENTS"
		done
	done
	for mode in off on; do
		keep_median_round "ctl_$mode"
	done
	log "  expiry and priority on: $(figure ctl_on.rate)/s, off: $(figure ctl_off.rate)/s"
}

# Case 14 (issue 15): publishing to Kafka, outbox against kcat -P on
# librdkafka's mock cluster (bench/kafka.sh).  Not in the default list:
# BENCH_CASES=14 runs it.
case_kafka()
{
	RESULTS=$RESULTS PY=$PY PATH=$PGBIN:$PATH bash "$BENCH/kafka.sh"
}

# on_off NAME ROUNDS ARGS [URL_OFF [URL_ON]]: case 8's endpoint without and
# with alter_endpoint(..., ARGS), ROUNDS rounds in turn, which goes first
# alternating from round to round; the medians count (NAME_on against
# NAME_off).  The endpoint posts to nginx's /one over HTTP unless URL_OFF
# (without ARGS) and URL_ON (with them) say otherwise.
on_off()
{
	local name=$1 rounds=$2 args=$3 round mode url
	local url_off=${4:-http://127.0.0.1:$NGINX_PORT/one}
	local url_on=${5:-$url_off}

	for round in $(seq "$rounds"); do
		for mode in $(in_turn "$round" off on); do
			url=$url_off
			[ "$mode" = on ] && url=$url_on
			fresh_outbox
			new_endpoint "${name}_$mode$round" "$url"
			if [ "$mode" = on ]; then
				sql "SELECT outbox.alter_endpoint('${name}_on$round', $args)" >/dev/null
			fi
			emit_backlog "$MANY_EVENTS"
			deliver "${name}_${mode}_$round" "${name}_$mode$round" "${name}_$mode$round" "$MANY_EVENTS" "$MANY_TIMEOUT"
			check_delivered "${name}_$mode$round" "$MANY_EVENTS"
		done
	done
	keep_median_round "${name}_off"
	keep_median_round "${name}_on"
}

# Case "auth" (issue 14, item 5): case 8's endpoint without and with a
# bearer token (auth), and case "format" (item 4): with Standard Webhooks
# and with CloudEvents (structured mode); CONTROL_ROUNDS rounds each.
case_auth()
{
	use_default_settings
	log "case auth: one endpoint, $MANY_EVENTS events, without and with a bearer token;" \
		"$CONTROL_ROUNDS rounds in turn (the medians count)"
	on_off auth "$CONTROL_ROUNDS" "auth => '{\"bearer\": \"bench-token-0123456789abcdef\"}'"
}

case_format()
{
	use_default_settings
	log "case format: one endpoint, $MANY_EVENTS events, Standard Webhooks and CloudEvents;" \
		"$CONTROL_ROUNDS rounds in turn (the medians count)"
	on_off ce "$CONTROL_ROUNDS" "format => 'cloudevents'"
}

# Case "mtls" (issue 14, item 5): case 8's endpoint over HTTPS (HTTP/1.1,
# kept alive) on nginx's mutual TLS server, with a client certificate
# (auth's client_cert and client_key), against the same over HTTPS on
# case 13's server, which asks for none (on the mutual TLS server an
# endpoint without a certificate gets only 400s); the same nginx, server
# certificate and answer.  First curl shows that the mutual TLS server
# refuses a request without the certificate and answers one with it.
case_mtls()
{
	local without with dir=$WORK/tls

	use_default_settings
	without=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
		"https://127.0.0.1:$MTLS_PORT/one" -d x || true)
	with=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$dir/ca.crt" \
		--cert "$dir/client.crt" --key "$dir/client.key" "https://127.0.0.1:$MTLS_PORT/one" -d x || true)
	log "case mtls: the mutual TLS server answers $without without the client certificate, $with with it"
	[ "$without" != 200 ] && [ "$with" = 200 ] || die "nginx's mutual TLS server does not check client certificates"
	log "  one endpoint over https, $MANY_EVENTS events, without and with a client certificate;" \
		"$CONTROL_ROUNDS rounds in turn (the medians count)"
	on_off mtls "$CONTROL_ROUNDS" \
		"auth => '{\"client_cert\": \"$dir/client.crt\", \"client_key\": \"$dir/client.key\"}'" \
		"https://127.0.0.1:$TLS_PORT/one" "https://127.0.0.1:$MTLS_PORT/one"
}

# Case "oauth2" (issue 14, item 5): case 8's endpoint without auth (on
# nginx's /one) and with OAuth2 client credentials (on /oauth2, which
# answers 401 to a request without nginx's token), the token URL nginx's
# /token over HTTPS.  The relay fetches the token once an endpoint and
# keeps it for the run (expires_in is an hour): token.log counts the
# fetches, each round's in the results.
case_oauth2()
{
	local fetches

	use_default_settings
	log "case oauth2: one endpoint, $MANY_EVENTS events, without auth and with OAuth2" \
		"client credentials; $CONTROL_ROUNDS rounds in turn (the medians count)"
	: >"$WORK/token.log"
	on_off oauth2 "$CONTROL_ROUNDS" \
		"auth => '{\"oauth2\": {\"token_url\": \"https://127.0.0.1:$TLS_PORT/token\",
		           \"client_id\": \"$OAUTH2_CLIENT_ID\", \"client_secret\": \"$OAUTH2_CLIENT_SECRET\"}}'" \
		"http://127.0.0.1:$NGINX_PORT/one" "http://127.0.0.1:$NGINX_PORT/oauth2"
	fetches=$(grep -c ' 200$' "$WORK/token.log" || true)
	result oauth2_on.token_fetches "$fetches"
	result oauth2_on.token_requests "$(wc -l <"$WORK/token.log")"
	log "  token requests: $(wc -l <"$WORK/token.log"), answered 200: $fetches" \
		"(one an endpoint: $CONTROL_ROUNDS)"
}

# Case "rate" (issue 14, item 1): one endpoint limited to LIMIT_RATE
# requests a second, with LIMIT_SECONDS worth of events waiting: the rate it
# gets against its limit.  Then case 8's endpoint without a limit and with
# one far above what it gets (LIMIT_HIGH), rounds in turn, which goes first
# alternating from round to round; the medians count, on against off.
case_rate_limit()
{
	local n=$((LIMIT_RATE * LIMIT_SECONDS))

	use_default_settings
	log "case rate: one endpoint with rate_limit $LIMIT_RATE, $n events waiting"
	fresh_outbox
	new_endpoint limited "http://127.0.0.1:$NGINX_PORT/limited"
	sql "SELECT outbox.alter_endpoint('limited', rate_limit => $LIMIT_RATE)" >/dev/null
	emit_backlog "$n"
	deliver limited limited limited "$n" "$MANY_TIMEOUT"
	check_delivered limited "$n"
	result limited.limit "$LIMIT_RATE"
	log "  one endpoint, $MANY_EVENTS events, without a limit and with rate_limit $LIMIT_HIGH;" \
		"$LIMIT_ROUNDS rounds in turn (the medians count)"
	on_off limit "$LIMIT_ROUNDS" "rate_limit => $LIMIT_HIGH"
	result limit_on.limit "$LIMIT_HIGH"
}

# Case 15 (issue 16): publishing to NATS JetStream, outbox against a plain
# libnats publisher (bench/nats_publish.c) on a nats-server started by
# bench/nats.sh.  Not in the default list: BENCH_CASES=15 runs it.
case_nats()
{
	RESULTS=$RESULTS PY=$PY PATH=$PGBIN:$PATH bash "$BENCH/nats.sh"
}

# Case 16 (issue 16): publishing to RabbitMQ, outbox against a plain
# librabbitmq publisher with confirms, on a broker the case starts
# (bench/rabbitmq.sh).  Not in the default list: BENCH_CASES=16 runs it.
case_rabbitmq()
{
	RESULTS=$RESULTS PY=$PY PATH=$PGBIN:$PATH bash "$BENCH/rabbitmq.sh"
}

# Cases 21, 22 and 23 (issue 44): publishing to Redis, on a redis-server
# bench/redis.sh starts (REDIS_EVENTS, REDIS_ROUNDS, REDIS_FSYNC): 21
# BullMQ jobs against BullMQ's own Queue.addBulk, 22 stream entries against
# redis-benchmark -P 64, 23 the BullMQ endpoint beside BESIDE_ENDPOINTS
# webhook endpoints delivering to nginx against it alone.  Not in the
# default list: BENCH_CASES="21 22 23" runs them.
redis_case()
{
	use_default_settings
	REDIS_CASES=$1 RESULTS=$RESULTS PY=$PY PATH=$PGBIN:$PATH \
		WEBHOOK_URL="http://127.0.0.1:$NGINX_PORT/beside" bash "$BENCH/redis.sh"
}
case_redis_bullmq() { redis_case 21; }
case_redis_stream() { redis_case 22; }
case_redis_beside() { redis_case 23; }

# ---------------------------------------------------------------------------

# run_case NAME FUNCTION: FUNCTION, if BENCH_CASES names NAME; its wall
# time goes to the results as time.NAME.
run_case()
{
	local t=$SECONDS

	case " $BENCH_CASES " in
	*" $1 "*) ;;
	*) return 0 ;;
	esac
	"$2"
	result "time.$1" $((SECONDS - t))
	log "  (case $1 took $((SECONDS - t)) s)"
}

main()
{
	install_packages
	WORK=$(mktemp -d /tmp/outbox-bench.XXXXXX)
	chown postgres:postgres "$WORK"
	chmod 755 "$WORK"
	RESULTS=$WORK/results.txt
	build_extension
	make_certificates
	start_postgres
	start_receivers
	log "PostgreSQL $PG_VERSION, $(nproc) cores; relay batch_size $BATCH_SIZE," \
		"max_concurrency $MAX_CONCURRENCY, endpoint_concurrency $ENDPOINT_CONCURRENCY, senders $SENDERS"
	result env.pg_version "$PG_VERSION"
	result env.cores "$(nproc)"
	result env.cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1 | tr ' ' '_')"
	result env.git "$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
	result env.settings "batch_size=$BATCH_SIZE,max_concurrency=$MAX_CONCURRENCY,endpoint_concurrency=$ENDPOINT_CONCURRENCY,senders=$SENDERS"

	run_case 1 case_emit_cost
	run_case 2 case_throughput
	run_case 3 case_latency
	run_case 5 case_fanout
	run_case 7 case_memory_big
	run_case 6 case_isolation
	run_case 4 case_scale
	run_case perf case_profile
	run_case 8 case_one_default
	run_case 9 case_many_endpoints
	run_case 10 case_idle_endpoints
	run_case 11 case_slow_receiver
	run_case 12 case_hanging_endpoints
	run_case 13 case_tls
	run_case 17 case_https
	run_case 18 case_https_hosts
	run_case 19 case_https_slow
	run_case 20 case_burst_new
	run_case expiry case_controls
	run_case 14 case_kafka
	run_case rate case_rate_limit
	run_case auth case_auth
	run_case format case_format
	run_case mtls case_mtls
	run_case oauth2 case_oauth2
	run_case 15 case_nats
	run_case 16 case_rabbitmq
	run_case 21 case_redis_bullmq
	run_case 22 case_redis_stream
	run_case 23 case_redis_beside
	run_case views case_views
	run_case ahead case_ahead
	run_case record case_record

	result env.seconds "$(($(date +%s) - T0))"
	result env.cases "${BENCH_CASES// /,}"
	if [ "$BENCH_CASES" = "1 2 3 4 5 6 7 perf 8 9 10 11 12 13 17 18 19" ]; then
		"$PY" "$BENCH/report.py" --results "$RESULTS" --work "$WORK" --out "$BENCH"
		log "done in $(($(date +%s) - T0)) s; wrote $BENCH/RESULTS.md and $BENCH/*.png"
	else
		"$PY" "$BENCH/report.py" --results "$RESULTS" --work "$WORK" --out "$BENCH" --partial
		log "done in $(($(date +%s) - T0)) s; wrote $BENCH/RESULTS.partial.md"
	fi
	cp "$RESULTS" "$BENCH/results.last.txt"
}

main "$@"
