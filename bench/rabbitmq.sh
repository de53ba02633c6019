#!/usr/bin/env bash
# bench/rabbitmq.sh: case 16, publishing to RabbitMQ.  N events waiting for
# a paused RabbitMQ endpoint are published through outbox to a broker
# started here (Debian's rabbitmq-server on 127.0.0.1, its own ports and
# files), against a plain librabbitmq publisher (bench/amqp_publish.c)
# publishing N messages of the same size the same way (persistent,
# mandatory, one channel in confirm mode, confirms read as they arrive, up
# to AMQP_WINDOW unconfirmed), in the same run, to the same durable queue
# (which keeps the last 1000); the ratio is outbox's rate over the plain
# publisher's (target >= 0.5).
#
# Run by bench/run.sh (BENCH_CASES=16) against its PostgreSQL, or alone as
# root against any server with outbox preloaded and 127.0.0.1 allowed,
# through the PG* environment variables:
#
#     AMQP_EVENTS=5000 RESULTS=/tmp/r.txt bash bench/rabbitmq.sh
#
# Appends "rabbitmq.*" lines to $RESULTS and prints them.
set -euo pipefail

BENCH=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH")
PY=${PY:-/usr/bin/python3}
AMQP_EVENTS=${AMQP_EVENTS:-50000}
AMQP_ROUNDS=${AMQP_ROUNDS:-3}
AMQP_WINDOW=${AMQP_WINDOW:-}                # the plain publisher's unconfirmed messages; empty: outbox's page
RESULTS=${RESULTS:-$(mktemp /tmp/outbox-rabbitmq-results.XXXXXX)}
AWORK=$(mktemp -d /tmp/outbox-rabbitmq.XXXXXX)
chmod 755 "$AWORK"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -At -c "$1"; }
result() { echo "$1 $2" >>"$RESULTS"; echo "$1 $2"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
free_port() { "$PY" "$(dirname "$0")/free_port.py" "$@"; }

[ -d "$ROOT/t/node/node_modules/amqplib" ] ||
	{ echo "rabbitmq.sh: npm package amqplib missing in t/node (scripts/deps.sh)" >&2; exit 1; }
{ read -r PORT; read -r EPMD_PORT; read -r DIST_PORT; } < <(free_port 3)
BROKER_PID=
cleanup()
{
	[ -n "$BROKER_PID" ] && kill "$BROKER_PID" 2>/dev/null && wait "$BROKER_PID" 2>/dev/null || true
	epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
	rm -rf "$AWORK"
}
trap cleanup EXIT

# The broker, its files in $AWORK.
echo '[].' >"$AWORK/enabled_plugins"
env HOME="$AWORK" RABBITMQ_NODENAME="outboxbench$PORT@localhost" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
	RABBITMQ_NODE_PORT="$PORT" RABBITMQ_DIST_PORT="$DIST_PORT" ERL_EPMD_PORT="$EPMD_PORT" \
	ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}' \
	RABBITMQ_BASE="$AWORK" RABBITMQ_MNESIA_BASE="$AWORK/mnesia" RABBITMQ_LOG_BASE="$AWORK/log" \
	RABBITMQ_CONFIG_FILE="$AWORK/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$AWORK/advanced.config" \
	RABBITMQ_CONF_ENV_FILE="$AWORK/rabbitmq-env.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$AWORK/enabled_plugins" \
	RABBITMQ_PID_FILE="$AWORK/rabbitmq.pid" \
	/usr/lib/rabbitmq/bin/rabbitmq-server >"$AWORK/broker.out" 2>&1 &
BROKER_PID=$!
for _ in $(seq 600); do
	"$PY" -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break
	kill -0 "$BROKER_PID" 2>/dev/null || { cat "$AWORK/broker.out" >&2; exit 1; }
	sleep 0.1
done
AMQP_MAX_LENGTH=1000 node "$ROOT/t/node/amqp_client.js" "amqp://guest:guest@127.0.0.1:$PORT/%2F" \
	setup bench:direct bench=bench:bench

cc -O2 -o "$AWORK/amqp_publish" "$BENCH/amqp_publish.c" -lrabbitmq
# (one page in flight per endpoint: BROKER_PAGE_FACTOR x outbox.batch_size)
[ -n "$AMQP_WINDOW" ] || AMQP_WINDOW=$((4 * $(sql "SELECT current_setting('outbox.batch_size')")))
# The plain publisher's input: N lines the size of the bodies outbox sends
# (a standard-webhooks body of bench/sql/backlog.sql's payload, ~300 bytes).
awk -v n="$AMQP_EVENTS" 'BEGIN {
	note = sprintf("%120s", ""); gsub(/ /, "x", note);
	for (g = 1; g <= n; g++)
		printf("{\"data\": {\"n\": %d, \"note\": \"%s\", \"amount\": 19.99, \"currency\": \"EUR\", \"customer\": \"customer-%d\"}, \"type\": \"bench.event\", \"timestamp\": \"2026-12-01T00:00:00.000000Z\"}\n", g, note, g % 1000)
}' >"$AWORK/messages"

log "case 16: $AMQP_EVENTS events to RabbitMQ (127.0.0.1:$PORT); $AMQP_ROUNDS rounds of outbox and of the plain publisher in turn"
: >"$AWORK/outbox.runs"
: >"$AWORK/plain.runs"
for round in $(seq "$AMQP_ROUNDS"); do
	psql -X -q -v ON_ERROR_STOP=1 -f "$BENCH/sql/reset.sql" >/dev/null
	sql "SELECT outbox.create_endpoint('amqp$round', 'amqp://127.0.0.1:$PORT/?exchange=bench&routing_key=bench', '{bench.*}');
	     SELECT outbox.pause_endpoint('amqp$round');" >/dev/null
	psql -X -q -v ON_ERROR_STOP=1 -v first=1 -v last="$AMQP_EVENTS" -f "$BENCH/sql/backlog.sql" >/dev/null
	"$PY" "$BENCH/deliver.py" --label "amqp_outbox_$round" --resume "amqp$round" --wait "amqp$round" \
		--events "$AMQP_EVENTS" --results "$AWORK/deliver.txt" --timeout 600 | tail -n 2
	rate=$(sed -n "s/^amqp_outbox_$round\.rate //p" "$AWORK/deliver.txt" | tail -n 1)
	confirmed=$(sql "SELECT count(*) FROM outbox.attempt_log a JOIN outbox.endpoints e ON e.id = a.endpoint_id
	                 WHERE e.name = 'amqp$round' AND a.status = 200")
	[ "$confirmed" -eq "$AMQP_EVENTS" ] || log "  WARNING: outbox had $confirmed of $AMQP_EVENTS confirmed"
	echo "$rate" >>"$AWORK/outbox.runs"
	log "  outbox: $rate events/s ($confirmed confirmed)"

	read -r n secs < <("$AWORK/amqp_publish" 127.0.0.1 "$PORT" bench bench "$AMQP_WINDOW" <"$AWORK/messages")
	prate=$(awk -v n="$n" -v s="$secs" 'BEGIN { printf("%.0f", n / s) }')
	echo "$prate" >>"$AWORK/plain.runs"
	log "  plain publisher: $prate messages/s ($n confirmed)"
done
orate=$(median <"$AWORK/outbox.runs")
prate=$(median <"$AWORK/plain.runs")
result rabbitmq.outbox_rate "$orate"
result rabbitmq.plain_rate "$prate"
result rabbitmq.ratio "$(awk -v a="$orate" -v b="$prate" 'BEGIN { printf("%.2f", a / b) }')"
result rabbitmq.rounds "$(paste -sd, "$AWORK/outbox.runs")/$(paste -sd, "$AWORK/plain.runs")"
