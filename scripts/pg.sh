#!/usr/bin/env bash
# scripts/pg.sh MAJOR: make a PostgreSQL of that major version ready to build
# and test outbox against, and print its pg_config on the last line.
#
#   15   Debian 12's own packages (scripts/deps.sh installs them).
#   17   built from the source package postgresql-17 of Debian 13 (trixie),
#   18   from postgresql-18 of Debian unstable (sid).
#
# For 17 and 18 the upstream tarball is fetched from Debian's archive with
# `apt-get source --download-only` (a deb-src line for that suite is added
# under /etc/apt/sources.list.d), unpacked without Debian's patches, and built
# into a cache folder outside the checkout, $OUTBOX_PG_CACHE
# (/var/cache/outbox-pg by default): core, pg_regress, pg_isolation_regress
# and the TAP modules (PostgreSQL::Test::Cluster), which is what PGXS's
# installcheck needs.  No contrib module: the suite uses none.
#
# OUTBOX_CASSERT=1 builds with --enable-cassert --enable-debug, into a prefix
# of its own (MAJOR-cassert); it is the default for 18, so CI runs one major
# with assertions on.  OUTBOX_CASSERT=0 asks for 18 without them.
#
# A finished build is reused as it is, without network; remove its folder to
# build again (for instance after Debian ships a new minor release).  Run as
# root.  Progress goes to stderr, the build's own output to a log file in the
# cache; stdout has the pg_config path alone.
set -euo pipefail

usage()
{
	echo "usage: $0 15|17|18   (OUTBOX_CASSERT=0|1, OUTBOX_PG_CACHE=DIR)" >&2
	exit 2
}

say()
{
	echo "pg.sh: $*" >&2
}

[ $# -eq 1 ] || usage
MAJOR=$1

# Where each major's source package is: the Debian suite that carries it.
case $MAJOR in
15) SUITE= ;;
17) SUITE=trixie ;;
18) SUITE=sid ;;
*) usage ;;
esac

if [ "$MAJOR" = 15 ]; then
	if [ "${OUTBOX_CASSERT:-0}" = 1 ]; then
		say "Debian's PostgreSQL 15 is built without assertions; use 17 or 18 for OUTBOX_CASSERT=1"
		exit 1
	fi
	PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
	if [ ! -x "$PG_CONFIG" ]; then
		say "$PG_CONFIG is missing: run scripts/deps.sh (postgresql-server-dev-15)"
		exit 1
	fi
	echo "$PG_CONFIG"
	exit 0
fi

CACHE=${OUTBOX_PG_CACHE:-/var/cache/outbox-pg}
if [ "$MAJOR" = 18 ]; then
	CASSERT=${OUTBOX_CASSERT:-1}
else
	CASSERT=${OUTBOX_CASSERT:-0}
fi
NAME=$MAJOR
CONFIGURE_FLAGS=(--enable-tap-tests --with-openssl --with-icu --with-readline --with-zlib)
if [ "$CASSERT" = 1 ]; then
	NAME=$MAJOR-cassert
	CONFIGURE_FLAGS+=(--enable-cassert --enable-debug)
fi
DIR=$CACHE/$NAME
PREFIX=$DIR/install
PG_CONFIG=$PREFIX/bin/pg_config
# Written last, once everything is installed: its presence means a finished
# build.  It records what was built and how.
STAMP=$PREFIX/.outbox-build

if [ -f "$STAMP" ] && [ -x "$PG_CONFIG" ]; then
	say "reusing $(head -n 1 "$STAMP") in $PREFIX"
	echo "$PG_CONFIG"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	say "no finished build of PostgreSQL $NAME in $DIR; run as root to build it"
	exit 1
fi

mkdir -p "$CACHE"
# Two runs for the same build take turns; the second finds the first's.
exec 8>"$CACHE/$NAME.lock"
if ! flock -n 8; then
	say "waiting for another build of $NAME to finish"
	flock 8
	if [ -f "$STAMP" ] && [ -x "$PG_CONFIG" ]; then
		say "reusing $(head -n 1 "$STAMP") in $PREFIX"
		echo "$PG_CONFIG"
		exit 0
	fi
fi

# What building PostgreSQL needs, from Debian 12.
BUILD_DEPS=(build-essential bison flex perl libipc-run-perl libreadline-dev
	zlib1g-dev libssl-dev libicu-dev pkg-config bzip2 dpkg-dev)
missing=()
for pkg in "${BUILD_DEPS[@]}"; do
	status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
	[ "$status" = "install ok installed" ] || missing+=("$pkg")
done

# Fetched when the version the archive's index lists cannot be downloaded:
# an older upstream tarball of the same major still in the pool, and its
# SHA-256 (from that release's .dsc).
declare -A FALLBACK_TARBALL=(
	[17]="postgresql-17_17.11.orig.tar.bz2 dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979"
)

# The mirror this machine already uses for Debian, so the source comes from
# the same place as its packages.
mirror_url()
{
	local url
	url=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources |
		awk '{ for (i = 2; i <= NF; i++) print $i }' | grep -E '/debian/?$' | head -n 1 || true)
	if [ -z "$url" ]; then
		url=$(grep -hsE '^deb +(\[[^]]*\] +)?[a-z]+://' /etc/apt/sources.list |
			sed -E 's/^deb +(\[[^]]*\] +)?//' | awk '{ print $1 }' |
			grep -E '/debian/?$' | head -n 1 || true)
	fi
	echo "${url:-http://deb.debian.org/debian}"
}

SOURCES_FILE=/etc/apt/sources.list.d/outbox-src-$SUITE.sources
if [ ! -f "$SOURCES_FILE" ]; then
	say "adding the deb-src line for Debian $SUITE ($SOURCES_FILE)"
	cat >"$SOURCES_FILE" <<EOF
# Added by outbox's scripts/pg.sh: the source package of postgresql-$MAJOR.
# Source only (deb-src): no binary package of this suite is installed.
Types: deb-src
URIs: $(mirror_url)
Suites: $SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi

export DEBIAN_FRONTEND=noninteractive
say "apt-get update"
apt-get update -q >&2
if [ ${#missing[@]} -gt 0 ]; then
	say "installing build dependencies: ${missing[*]}"
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# The upstream tarball (.orig.tar.*), checked by apt against the signed
# index of the archive.  Debian's patches (its directory layout, socket
# directory) are not applied: this is upstream PostgreSQL.
DOWNLOADS=$CACHE/downloads
mkdir -p "$DOWNLOADS"
VERSION=$(apt-cache showsrc "postgresql-$MAJOR" | sed -n 's/^Version: //p' | sort -V | tail -n 1)
if [ -z "$VERSION" ]; then
	say "no source package postgresql-$MAJOR in Debian $SUITE"
	exit 1
fi
UPSTREAM=${VERSION%%-*}
UPSTREAM=${UPSTREAM#*:}
TARBALL=$(ls "$DOWNLOADS/postgresql-${MAJOR}_$UPSTREAM".orig.tar.* 2>/dev/null | head -n 1 || true)
if [ -z "$TARBALL" ]; then
	say "fetching the source of postgresql-$MAJOR $VERSION into $DOWNLOADS"
	# apt's downloader runs as _apt and must be able to write here.
	chown _apt "$DOWNLOADS" 2>/dev/null || true
	if (cd "$DOWNLOADS" && apt-get source -q --download-only "postgresql-$MAJOR=$VERSION" >&2); then
		TARBALL=$(ls "$DOWNLOADS/postgresql-${MAJOR}_$UPSTREAM".orig.tar.* | head -n 1)
	elif [ -n "${FALLBACK_TARBALL[$MAJOR]:-}" ]; then
		# The archive's index can list a new point release before its pool
		# serves the files (seen: trixie listed 17.12 while they answered
		# 404).  Then take the release before it, checked against the
		# SHA-256 that its .dsc gives.
		read -r file sha256 <<<"${FALLBACK_TARBALL[$MAJOR]}"
		UPSTREAM=${file#postgresql-"${MAJOR}"_}
		UPSTREAM=${UPSTREAM%.orig.tar.*}
		say "the source of $VERSION cannot be fetched; fetching $file from the pool instead, SHA-256 checked"
		VERSION="$UPSTREAM, the archive's $VERSION missing"
		TARBALL=$DOWNLOADS/$file
		/usr/lib/apt/apt-helper download-file \
			"$(mirror_url)/pool/main/p/postgresql-$MAJOR/$file" "$TARBALL" "SHA256:$sha256" >&2
	else
		say "cannot fetch the source of postgresql-$MAJOR $VERSION"
		exit 1
	fi
fi

# Build in a fresh source tree; the stamp is written only at the end, so an
# interrupted build is started again from scratch next time.
rm -rf "$DIR"
mkdir -p "$DIR"
LOG=$DIR/build.log
say "unpacking $(basename "$TARBALL") into $DIR"
tar -xf "$TARBALL" -C "$DIR"
SRC=$DIR/postgresql-$UPSTREAM
if [ ! -d "$SRC" ]; then
	say "the tarball did not unpack into $SRC"
	exit 1
fi

# The machine is shared: the lowest CPU and I/O priority, two jobs.
quiet()
{
	nice -n 19 ionice -c3 "$@" >>"$LOG" 2>&1
}
fail()
{
	say "$1 failed; the last lines of $LOG:"
	tail -n 40 "$LOG" >&2
	exit 1
}

START=$(date +%s)
say "configuring PostgreSQL $UPSTREAM (${CONFIGURE_FLAGS[*]}), prefix $PREFIX; log in $LOG"
(cd "$SRC" && quiet ./configure --prefix="$PREFIX" "${CONFIGURE_FLAGS[@]}") || fail configure
say "building (make -j2, nice 19)"
quiet make -C "$SRC" -j2 || fail make
say "installing"
# The top-level install also installs pg_regress, pg_isolation_regress
# (PGXS's installcheck runs them from the install) and, with
# --enable-tap-tests, the PostgreSQL::Test modules.
quiet make -C "$SRC" install || fail "make install"
quiet make -C "$SRC/src/test/isolation" install || fail "make install (isolation)"
quiet make -C "$SRC/src/test/perl" install || fail "make install (TAP modules)"
PGXSDIR=$("$PG_CONFIG" --pgxs)
PGXSDIR=${PGXSDIR%/src/makefiles/pgxs.mk}
for f in "$PGXSDIR/src/test/regress/pg_regress" \
	"$PGXSDIR/src/test/isolation/pg_isolation_regress" \
	"$PGXSDIR/src/test/perl/PostgreSQL/Test/Cluster.pm"; do
	if [ ! -e "$f" ]; then
		say "$f is missing after the install"
		exit 1
	fi
done
END=$(date +%s)

{
	echo "PostgreSQL $UPSTREAM (postgresql-$MAJOR $VERSION from Debian $SUITE)"
	echo "configure: ${CONFIGURE_FLAGS[*]}"
	echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((END - START)) s"
} >"$STAMP"
say "built PostgreSQL $UPSTREAM in $((END - START)) s"
echo "$PG_CONFIG"
