# bench/install_outbox.sh: sourced by the benches that start their own
# PostgreSQL (slots.sh, metrics.sh).  install_outbox NAME builds outbox from
# $ROOT and installs it into $PGBIN's PostgreSQL: into Debian's 15 while
# holding the lock scripts/test.sh takes (on fd 9, kept until the bench
# exits), or, when PGBIN names a copy of a PostgreSQL tree elsewhere, built
# against 15 and copied into that tree, without the lock.

install_outbox()
{
	if [ "$PGBIN" = /usr/lib/postgresql/15/bin ]; then
		exec 9>/tmp/outbox-test.lock
		echo "$1: waiting for the test lock" >&2
		flock 9
		make -s -C "$ROOT" PG_CONFIG="$PGBIN/pg_config" install >/dev/null
	else
		make -s -C "$ROOT" PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config >/dev/null
		cp "$ROOT/outbox.so" "$("$PGBIN/pg_config" --pkglibdir)/"
		cp "$ROOT"/outbox.control "$ROOT"/outbox--*.sql "$("$PGBIN/pg_config" --sharedir)/extension/"
	fi
}
