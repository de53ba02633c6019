#!/usr/bin/env bash
# scripts/deps.sh: install the Debian 12 packages that outbox needs to build,
# test and demo, and the npm packages of the test receivers in t/node.  Run
# as root; installs only what is missing, so a second run changes nothing
# and needs no network.
set -euo pipefail

PACKAGES=(
	build-essential gcc make
	postgresql-15 postgresql-server-dev-15
	libcurl4-openssl-dev    # also brings curl-config
	librdkafka-dev          # the Kafka target; rdkafka_mock.h for the tests
	kcat                    # TAP tests: consumes from the mock Kafka cluster
	libnats-dev             # the NATS JetStream target
	nats-server             # TAP tests: a JetStream cluster on 127.0.0.1
	librabbitmq-dev         # the RabbitMQ target
	libssl-dev              # amqps: the RabbitMQ target sets OpenSSL's verification
	rabbitmq-server         # TAP tests: a broker each test starts itself
	redis-server            # TAP tests: Redis for BullMQ and streams, started by the test
	prometheus              # TAP tests: Prometheus (and promtool) on outbox.metrics
	prometheus-postgres-exporter  # TAP tests: the exporter with contrib/prometheus/queries.yaml
	libipc-run-perl perl    # TAP tests: IPC::Run and prove
	python3                 # scripts/receiver.py
	clang libclang-rt-14-dev  # test/h1: the parser's libFuzzer target
	openssl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "install ok installed" ]; then
		missing+=("$pkg")
	fi
done
# Node.js and npm for the receivers of t/node (any node of 18 or later will
# do: one installed otherwise is used as it is).
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all required packages are installed"
elif [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages: ${missing[*]}; run as root to install them" >&2
	exit 1
else
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# nats-server's package enables a default instance (port 4222), started
# where systemd runs; the tests start servers of their own on free ports
# and need none, so it is stopped and disabled (systemctl disables it
# without systemd running too).
if [ "$(id -u)" -eq 0 ] && command -v systemctl >/dev/null &&
	systemctl is-enabled --quiet nats-server 2>/dev/null; then
	echo "deps: disabling the default nats-server instance"
	if [ -d /run/systemd/system ]; then
		systemctl disable --now nats-server >/dev/null 2>&1 || true
	else
		systemctl disable nats-server >/dev/null 2>&1 || true
	fi
fi

# The Debian package of rabbitmq-server starts a broker on install (where
# the init system lets it) and at boot: the tests start their own, on
# ports of their own, and rely on no other; stop and disable this one.
if [ "$(id -u)" -eq 0 ] && dpkg-query -W -f='${Status}' rabbitmq-server 2>/dev/null | grep -q 'install ok installed'; then
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true
	else
		# (the init script's stop starts an epmd even when no broker runs)
		if pgrep -u rabbitmq -x beam.smp >/dev/null 2>&1; then
			service rabbitmq-server stop >/dev/null 2>&1 || true
		fi
		update-rc.d rabbitmq-server disable >/dev/null 2>&1 || true
	fi
fi

# The Debian package of redis-server enables a default instance on port
# 6379; the tests start their own on ports of their own: stop and disable
# it.
if [ "$(id -u)" -eq 0 ] && dpkg-query -W -f='${Status}' redis-server 2>/dev/null | grep -q 'install ok installed'; then
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		systemctl disable --now redis-server >/dev/null 2>&1 || true
	else
		if [ -f /run/redis/redis-server.pid ]; then
			service redis-server stop >/dev/null 2>&1 || true
		fi
		update-rc.d redis-server disable >/dev/null 2>&1 || true
	fi
fi

# Prometheus and postgres_exporter: their packages enable a default
# instance each (ports 9090 and 9187, the exporter against the local
# server); t/037 starts its own on ports of its own with a configuration
# of its own: stop and disable these.
for svc in prometheus prometheus-postgres-exporter; do
	if [ "$(id -u)" -eq 0 ] && dpkg-query -W -f='${Status}' "$svc" 2>/dev/null | grep -q 'install ok installed'; then
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
			systemctl disable --now "$svc" >/dev/null 2>&1 || true
		else
			if [ -f "/run/prometheus/$svc.pid" ]; then
				service "$svc" stop >/dev/null 2>&1 || true
			fi
			update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
	fi
done

# The npm packages of t/node (the CloudEvents SDK, the NATS and AMQP
# clients, BullMQ 6 and 5 (as bullmq5) with ioredis), exactly as
# t/node/package-lock.json pins them, into t/node/node_modules.  Done again
# only when the lock file changed since the last install (a copy of it is
# kept in node_modules), so a second run needs no network.
NODE_DIR=$(cd "$(dirname "$0")/../t/node" && pwd)
if cmp -s "$NODE_DIR/package-lock.json" "$NODE_DIR/node_modules/.outbox-installed-lock" 2>/dev/null; then
	echo "deps: npm packages of t/node are installed"
else
	echo "deps: installing the npm packages of t/node"
	(cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
	cp "$NODE_DIR/package-lock.json" "$NODE_DIR/node_modules/.outbox-installed-lock"
fi
