#!/usr/bin/env bash
# scripts/demo.sh: show outbox end to end on a throwaway cluster.  Installs
# what is missing, builds and installs the extension, starts a private server
# (127.0.0.1 only) and scripts/receiver.py, emits a few events in committed
# and rolled-back transactions, and shows what the receiver got.  Run as
# root; everything it starts is stopped and removed on exit.
#
# OUTBOX_DEMO_INSTALLED=1 installs and builds nothing: the demo runs against
# the outbox already installed (a postgresql-NN-outbox package, say), and
# needs only that PostgreSQL and python3.  PG_CONFIG names the PostgreSQL
# (/usr/lib/postgresql/15/bin/pg_config by default).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/copy_tree.sh
. "$ROOT/scripts/copy_tree.sh"
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
INSTALLED=${OUTBOX_DEMO_INSTALLED:-0}
export LC_ALL=C.UTF-8
unset PGHOST PGHOSTADDR PGPORT PGDATA PGDATABASE PGUSER PGSERVICE PGOPTIONS

heading()
{
	printf '\n==== %s ====\n' "$*"
}

if [ "$INSTALLED" != 1 ]; then
	heading "dependencies"
	bash "$ROOT/scripts/deps.sh"
fi
PGBIN=$("$PG_CONFIG" --bindir)

WORK=$(mktemp -d /tmp/outbox-demo.XXXXXX)
DATA=$WORK/data
RECEIVER_PID=

cleanup()
{
	local rc=$?
	if [ "$rc" -ne 0 ] && [ -f "$WORK/server.log" ]; then
		echo "demo.sh: failed; the server log ends with:"
		tail -n 30 "$WORK/server.log"
	fi
	if [ -n "$RECEIVER_PID" ]; then
		kill "$RECEIVER_PID" 2>/dev/null || true
		wait "$RECEIVER_PID" 2>/dev/null || true
	fi
	if [ -f "$DATA/postmaster.pid" ]; then
		as_postgres "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 ||
			as_postgres "$PGBIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

as_postgres()
{
	(cd "$WORK" && runuser -u postgres -- "$@")
}

# first_free_port N: the first port from N up that 127.0.0.1 can bind.
first_free_port()
{
	python3 - "$1" <<'EOF'
import socket, sys
port = int(sys.argv[1])
while True:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            break
        except OSError:
            port += 1
print(port)
EOF
}

if [ "$INSTALLED" = 1 ]; then
	heading "the installed outbox"
	chown postgres:postgres "$WORK"
	for f in "$("$PG_CONFIG" --pkglibdir)/outbox.so" "$("$PG_CONFIG" --sharedir)/extension/outbox.control"; do
		if [ ! -f "$f" ]; then
			echo "demo.sh: OUTBOX_DEMO_INSTALLED=1, but $f is missing"
			exit 1
		fi
		echo "$f"
	done
else
	heading "build and install"
	# Build in a copy, so the checkout gets no build products.
	mkdir "$WORK/build"
	copy_tree "$ROOT" "$WORK/build"
	chown -R postgres:postgres "$WORK"
	as_postgres make -s -C "$WORK/build" PG_CONFIG="$PG_CONFIG" clean >/dev/null
	as_postgres make -s -C "$WORK/build" PG_CONFIG="$PG_CONFIG"
	make -s -C "$WORK/build" PG_CONFIG="$PG_CONFIG" install
	echo "installed into $("$PG_CONFIG" --pkglibdir)"
fi

heading "start a throwaway server"
PGPORT_DEMO=$(first_free_port 25432)
as_postgres "$PGBIN/initdb" -D "$DATA" -A trust -U postgres --no-sync >/dev/null
cat >>"$DATA/postgresql.conf" <<EOF
# outbox demo
listen_addresses = '127.0.0.1'
port = $PGPORT_DEMO
unix_socket_directories = '$DATA'
shared_preload_libraries = 'outbox'
# the receiver runs on this machine; loopback targets are refused unless allowed
outbox.allowed_networks = '127.0.0.1/32'
EOF
as_postgres "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/server.log" -w start >/dev/null
echo "server running on 127.0.0.1:$PGPORT_DEMO, data in $DATA"

heading "start the webhook receiver"
RECEIVER_PORT=$(first_free_port 8765)
RECEIVER_LOG=$WORK/receiver.log
python3 "$ROOT/scripts/receiver.py" --host 127.0.0.1 --port "$RECEIVER_PORT" \
	>"$RECEIVER_LOG" 2>&1 &
RECEIVER_PID=$!
for _ in $(seq 50); do
	grep -q '^listening on' "$RECEIVER_LOG" && break
	kill -0 "$RECEIVER_PID" 2>/dev/null || { cat "$RECEIVER_LOG"; exit 1; }
	sleep 0.1
done
echo "receiver on http://127.0.0.1:$RECEIVER_PORT/hooks, logging to $RECEIVER_LOG"

psql_demo()
{
	as_postgres "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DATA" -p "$PGPORT_DEMO" -d postgres "$@"
}

heading "emit events"
psql_demo -a -v url="http://127.0.0.1:$RECEIVER_PORT/hooks" <<'SQL'
CREATE EXTENSION outbox;
SELECT outbox.create_endpoint('demo', :'url', '{order.*}');

-- committed: all three are delivered
BEGIN;
SELECT outbox.emit('order.created', '{"id": 1, "total": "25.00"}'::jsonb, key => 'order-1');
SELECT outbox.emit('order.paid', '{"id": 1, "method": "card"}'::jsonb, key => 'order-1');
SELECT outbox.emit('order.created', '{"id": 2, "total": "9.90"}'::jsonb, key => 'order-2');
COMMIT;

-- rolled back: never delivered
BEGIN;
SELECT outbox.emit('order.created', '{"id": 3, "total": "1.00"}'::jsonb, key => 'order-3');
ROLLBACK;
SQL

heading "outbox.events"
psql_demo -c 'SELECT id, event_id, event_type, key, payload FROM outbox.events ORDER BY id;'

heading "delivery"
# The relay registers at server start; give it a moment to show up.
for _ in $(seq 50); do
	relays=$(psql_demo -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
	[ "$relays" -gt 0 ] && break
	sleep 0.1
done
relays=$(psql_demo -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'outbox relay'")
if [ "$relays" -eq 0 ]; then
	echo "No relay is running yet: delivery comes with the relay, so this demo"
	echo "shows only the emitted rows above."
	exit 0
fi

received=0
for _ in $(seq 100); do
	received=$(grep -c '^#[0-9]* POST' "$RECEIVER_LOG" || true)
	[ "$received" -ge 3 ] && break
	sleep 0.1
done
echo "the receiver got $received request(s):"
echo
cat "$RECEIVER_LOG"
if [ "$received" -lt 3 ]; then
	echo
	echo "demo.sh: expected 3 deliveries within 10 s, got $received"
	exit 1
fi
sleep 1    # give a wrongly delivered rolled-back event the time to show up
received=$(grep -c '^#[0-9]* POST' "$RECEIVER_LOG" || true)
if [ "$received" -ne 3 ]; then
	echo
	echo "demo.sh: expected exactly 3 deliveries, got $received"
	exit 1
fi
echo
echo "All 3 committed events were delivered; the rolled-back one was not."

heading "what operators see"
psql_demo -c "SELECT endpoint, event_type, attempt, status, round(duration_ms::numeric, 1) AS ms FROM outbox.attempts ORDER BY at"
psql_demo -c "SELECT name, state, events_waiting, in_retry, dead, last_success_at IS NOT NULL AS has_succeeded FROM outbox.endpoint_status"
psql_demo -c "SELECT * FROM outbox.health()"
