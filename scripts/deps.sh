#!/usr/bin/env bash
# scripts/deps.sh: install the Debian 12 packages that outbox needs to build,
# test and demo.  Run as root; installs only the packages that are missing,
# so a second run changes nothing and needs no network.
set -euo pipefail

PACKAGES=(
	build-essential gcc make
	postgresql-15 postgresql-server-dev-15
	libcurl4-openssl-dev    # also brings curl-config
	libipc-run-perl perl    # TAP tests: IPC::Run and prove
	python3                 # scripts/receiver.py
	openssl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	if [ "$status" != "install ok installed" ]; then
		missing+=("$pkg")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all required packages are installed"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing packages: ${missing[*]}; run as root to install them" >&2
	exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
