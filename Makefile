# outbox: PGXS build.  See README.md for the two commands that build, test
# and demo it; `make installcheck` (as a non-root user) runs the whole suite,
# once the releases' install scripts the upgrade test starts from are in
# place (scripts/releases.sh install; scripts/test.sh does it).

EXTENSION = outbox
MODULE_big = outbox
# src/            the module: _PG_init, settings, shared memory
# src/functions/  SQL-callable functions: emit(), mark_processed(), checks,
#                 the relays' _launch(), stats and requests in flight
# src/relay/      the background workers: launcher, relay loop, senders,
#                 what they deliver (delivery.h), the SQL they run (store.c)
# src/targets/    where deliveries go and what they look like: HTTP/1.1
#                 over http and https (TLS through OpenSSL) on connections
#                 libcurl opens, HTTP/2 through libcurl, Kafka through
#                 librdkafka, NATS JetStream through libnats, RabbitMQ
#                 through librabbitmq, BullMQ and Redis streams over a
#                 RESP client of ours, the address policy, signatures,
#                 formats
OBJS = \
	src/outbox.o \
	src/guc.o \
	src/shmem.o \
	src/counters.o \
	src/functions/append.o \
	src/functions/emit.o \
	src/functions/capture.o \
	src/functions/checks.o \
	src/functions/signature.o \
	src/functions/validate.o \
	src/functions/inbox.o \
	src/functions/origin.o \
	src/functions/relay_admin.o \
	src/functions/metrics.o \
	src/targets/sign.o \
	src/targets/format.o \
	src/targets/wait.o \
	src/targets/response.o \
	src/targets/http.o \
	src/targets/h1parse.o \
	src/targets/http1.o \
	src/targets/address.o \
	src/targets/auth.o \
	src/targets/target.o \
	src/targets/webhook.o \
	src/targets/kafka.o \
	src/targets/nats.o \
	src/targets/rabbitmq.o \
	src/targets/redis.o \
	src/targets/redis_url.o \
	src/relay/policy.o \
	src/relay/delivery.o \
	src/relay/priority.o \
	src/relay/store.o \
	src/relay/launcher.o \
	src/relay/route.o \
	src/relay/limit.o \
	src/relay/state.o \
	src/relay/step.o \
	src/relay/read.o \
	src/relay/record.o \
	src/relay/relay.o \
	src/relay/stream.o \
	src/relay/pump.o \
	src/relay/endpoints.o \
	src/relay/sender.o \
	src/relay/credentials.o
# (named from $(srcdir), which PGXS prefixes again when it installs them)
DATA = $(notdir $(wildcard $(srcdir)/outbox--*.sql))

PG_CONFIG ?= pg_config
CURL_CONFIG ?= curl-config

# The version lives in outbox.control alone; the C code gets it from there
# as OUTBOX_VERSION (the SQL version a relay serves, the User-Agent).
# Expanded once PGXS has set srcdir.
OUTBOX_VERSION = $(shell sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(srcdir)/outbox.control)

SRC_DIRS = src src/functions src/relay src/targets
# One include path: headers are named by folder ("relay/delivery.h"), so
# none of ours can shadow a library's (libnats installs <nats.h>).
PG_CPPFLAGS = -I$(srcdir)/src -DOUTBOX_VERSION='"$(OUTBOX_VERSION)"' $(shell $(CURL_CONFIG) --cflags)
# No -Werror here: a newer compiler's new warning must not break a user's
# build.  scripts/test.sh (CI) adds it with COPT=-Werror.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
SHLIB_LINK = $(shell $(CURL_CONFIG) --libs) -lrdkafka -lnats -lrabbitmq -lssl -lcrypto

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
$(OBJS): $(foreach d,$(SRC_DIRS),$(wildcard $(srcdir)/$(d)/*.h)) $(srcdir)/outbox.control

# A build outside the tree (VPATH, as pg_buildext builds each major in
# build-NN/ for debian/): the object folders are made there first.
ifdef VPATH
$(OBJS) $(OBJS:.o=.bc): | outbox-object-dirs
.PHONY: outbox-object-dirs
outbox-object-dirs:
	@mkdir -p $(SRC_DIRS)
endif

# The TAP tests alone: make tapcheck [PROVE_TESTS=t/001_delivery.pl]
.PHONY: tapcheck
tapcheck:
	$(prove_installcheck)
