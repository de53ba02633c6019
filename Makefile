# outbox: PGXS build.  See README.md for the two commands that build, test
# and demo it; `make installcheck` (as a non-root user) runs the whole suite.

EXTENSION = outbox
MODULE_big = outbox
OBJS = \
	src/outbox.o \
	src/guc.o \
	src/shmem.o \
	src/emit.o \
	src/validate.o \
	src/sign.o \
	src/format.o \
	src/http.o \
	src/address.o \
	src/policy.o \
	src/delivery.o \
	src/store.o \
	src/launcher.o \
	src/inbox.o \
	src/origin.o \
	src/route.o \
	src/relay.o \
	src/sender.o

DATA = $(wildcard outbox--*.sql)

PG_CONFIG ?= pg_config
CURL_CONFIG ?= curl-config

# The version lives in outbox.control alone; the C code gets it from there
# as OUTBOX_VERSION (the SQL version a relay serves, the User-Agent).
# Expanded once PGXS has set srcdir.
OUTBOX_VERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(srcdir)/outbox.control)

PG_CPPFLAGS = -I$(srcdir)/src -DOUTBOX_VERSION='"$(OUTBOX_VERSION)"' $(shell $(CURL_CONFIG) --cflags)
# No -Werror here: a newer compiler's new warning must not break a user's
# build.  scripts/test.sh (CI) adds it with COPT=-Werror.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
SHLIB_LINK = $(shell $(CURL_CONFIG) --libs)

# pg_regress and pg_isolation_regress each start a private instance with the
# library preloaded, so the suite never touches a running server.
REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --temp-instance=tmp_check_regress --temp-config=test/outbox.conf
ISOLATION = $(patsubst specs/%.spec,%,$(sort $(wildcard specs/*.spec)))
ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=test/outbox.conf
TAP_TESTS = 1

EXTRA_CLEAN = tmp_check_regress tmp_check_iso output_iso

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

ifeq ($(OUTBOX_VERSION),)
$(error outbox.control has no default_version)
endif

# PGXS does not track headers: rebuild every object when one changes, or
# when the version in outbox.control does.
$(OBJS): $(wildcard $(srcdir)/src/*.h) $(srcdir)/outbox.control

# The TAP tests alone: make tapcheck [PROVE_TESTS=t/001_delivery.pl]
.PHONY: tapcheck
tapcheck:
	$(prove_installcheck)
