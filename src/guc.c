/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  Every outbox.* configuration parameter, with its unit, bounds and
 *	  when a change takes effect.
 *
 * Parameters read by the launcher and the relays are PGC_SIGHUP: they
 * reread them on reload.  outbox.max_relays and outbox.max_counted_endpoints
 * are PGC_POSTMASTER: they size shared memory; so is outbox.senders, which
 * is read as a relay starts.
 *
 * The rest of outbox reads its settings here (guc.h); this file reads only
 * the parsers that check a value (policy.c, address.c, format.c), none of
 * which includes guc.h, so the arrows point one way.  For that reason
 * outbox.cloudevents_source's variable is defined in format.c, its one
 * reader; it is registered here with the others.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"
#include "utils/memutils.h"

#include "compat.h"
#include "guc.h"
#include "relay/policy.h"
#include "targets/address.h"
#include "targets/format.h"

int			outbox_max_payload_size = 1024 * 1024;
char	   *outbox_database = NULL;
int			outbox_max_relays = 8;
int			outbox_senders = 0;
int			outbox_max_counted_endpoints = 10000;
/* Read in SQL (current_setting) by the rotation: no C reader. */
static int	outbox_retention = 7 * 86400;
static int	outbox_attempt_retention = 7 * 86400;
static int	outbox_inbox_retention = 7 * 86400;
int			outbox_poll_interval = 1000;
int			outbox_max_concurrency = 2048;
int			outbox_endpoint_concurrency = 32;
int			outbox_batch_size = 500;
int			outbox_batch_bytes = 4 * 1024 * 1024;
char	   *outbox_retry_schedule = NULL;
RetrySchedule outbox_schedule;
int			outbox_disable_after = 5 * 86400;
int			outbox_secret_overlap = 86400;
int			outbox_alert_after = 30;
char	   *outbox_allowed_networks_text = NULL;
NetworkList outbox_allowed_networks;
char	   *outbox_ca_file = NULL;

static bool
check_retry_schedule(char **newval, void **extra, GucSource source)
{
	RetrySchedule parsed;

	if (!policy_parse_schedule(*newval, &parsed))
	{
		GUC_check_errdetail("A schedule is a comma-separated list of delays such as \"5s,5min,2h\" (units ms, s, min, h, d; at most %d entries of at most 30 days).",
							OUTBOX_MAX_SCHEDULE);
		return false;
	}
	*extra = outbox_guc_malloc(sizeof(RetrySchedule));	/* freed by the GUC machinery */
	if (*extra == NULL)
		return false;
	memcpy(*extra, &parsed, sizeof(RetrySchedule));
	return true;
}

static void
assign_retry_schedule(const char *newval, void *extra)
{
	memcpy(&outbox_schedule, extra, sizeof(RetrySchedule));
}

static bool
check_allowed_networks(char **newval, void **extra, GucSource source)
{
	NetworkList parsed;
	const char *error = NULL;

	if (!address_parse_networks(*newval, &parsed, &error))
	{
		GUC_check_errdetail("%s; give a comma-separated list of addresses or networks such as \"127.0.0.1/32, 10.0.0.0/8, ::1\".",
							error);
		return false;
	}
	*extra = outbox_guc_malloc(sizeof(NetworkList));	/* freed by the GUC machinery */
	if (*extra == NULL)
		return false;
	memcpy(*extra, &parsed, sizeof(NetworkList));
	return true;
}

static void
assign_allowed_networks(const char *newval, void *extra)
{
	memcpy(&outbox_allowed_networks, extra, sizeof(NetworkList));
}

static bool
check_cloudevents_source(char **newval, void **extra, GucSource source)
{
	if (!outbox_uri_reference_valid(*newval))
	{
		GUC_check_errdetail("The source is a URI-reference: letters, digits, \"%%\" and two hex digits, and -._~:/?#[]@!$&'()*+,;= only; empty stands for postgresql:///<database>.");
		return false;
	}
	return true;
}

/* The format derives the source anew from the next event it formats. */
static void
assign_cloudevents_source(const char *newval, void *extra)
{
	outbox_format_source_changed();
}

void
outbox_guc_init(void)
{
	DefineCustomIntVariable("outbox.max_payload_size",
							"Largest event payload, with its headers, emit() accepts.",
							"Measured as the size of the stored jsonb values, uncompressed.",
							&outbox_max_payload_size,
							1024 * 1024, 1, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomStringVariable("outbox.database",
							   "Databases a relay may serve: a comma-separated list of names.",
							   "Empty: every database where outbox is installed.",
							   &outbox_database,
							   "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_relays",
							"Most databases served at once, one relay each.",
							"Each relay, and the launcher, is a background worker counted in max_worker_processes.",
							&outbox_max_relays,
							8, 1, 1024,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_counted_endpoints",
							"Most endpoints counted apart in outbox.metrics, across every database.",
							"Each takes about 160 bytes of shared memory; attempts to endpoints beyond it are counted without an endpoint.",
							&outbox_max_counted_endpoints,
							10000, 0, 1000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.senders",
							"Sender processes each relay sends HTTP requests through, besides itself.",
							"Each is a background worker counted in max_worker_processes; 0: the relay sends everything itself.",
							&outbox_senders,
							0, 0, 16,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.poll_interval",
							"How often the relay looks for work when nothing wakes it.",
							"Covers events of prepared transactions and probes of failing endpoints; commits wake the relay at once, retries and deliver_at when due.",
							&outbox_poll_interval,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.max_concurrency",
							"Most HTTP requests the relay keeps in flight at once.",
							"Shared fairly among the endpoints with work; each request in flight costs the relay about 20 kB (measured over plain HTTP) and a socket.",
							&outbox_max_concurrency,
							2048, 1, OUTBOX_MAX_CONCURRENCY,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.endpoint_concurrency",
							"Most HTTP requests in flight to one endpoint.",
							"For endpoints without max_in_flight of their own.",
							&outbox_endpoint_concurrency,
							32, 1, OUTBOX_MAX_CONCURRENCY,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.batch_size",
							"Most events the relay reads for one endpoint at a time.",
							NULL,
							&outbox_batch_size,
							500, 1, 100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	/*
	 * A page's events are held in the relay's memory while they are sent
	 * (their bodies, and a copy while they are read), per endpoint a page of
	 * new events and one of due retries: the budget bounds that memory by
	 * bytes too, whatever the payloads weigh.  A page ends after the event
	 * that reaches it, so one event larger than the budget is still sent.
	 */
	DefineCustomIntVariable("outbox.batch_bytes",
							"Most payload and header bytes the relay reads for one endpoint at a time.",
							"A page ends after the event that reaches this size; it always holds one event.",
							&outbox_batch_bytes,
							4 * 1024 * 1024, 64 * 1024, MaxAllocSize / 2,
							PGC_SIGHUP, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomStringVariable("outbox.retry_schedule",
							   "Delays between delivery attempts.",
							   "After the last entry, the last delay repeats until the endpoint's max_attempts.",
							   &outbox_retry_schedule,
							   "5s,5min,30min,2h,5h,10h,10h",
							   PGC_SIGHUP, 0,
							   check_retry_schedule, assign_retry_schedule, NULL);

	DefineCustomStringVariable("outbox.allowed_networks",
							   "Networks the relay may deliver to although they are loopback, private or link-local.",
							   "A comma-separated list of addresses or CIDR networks; empty refuses all such targets.",
							   &outbox_allowed_networks_text,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_allowed_networks, assign_allowed_networks, NULL);

	DefineCustomStringVariable("outbox.ca_file",
							   "File of CA certificates that HTTPS and TLS broker endpoints are verified against.",
							   "Empty: the system's certificate store.",
							   &outbox_ca_file,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("outbox.cloudevents_source",
							   "The source attribute of the CloudEvents the relay sends.",
							   "A URI-reference; empty: postgresql:///<database>, the relay's database name percent-encoded.",
							   &outbox_cloudevents_source,
							   "",
							   PGC_SIGHUP, 0,
							   check_cloudevents_source, assign_cloudevents_source, NULL);

	/* The rest are read in SQL through current_setting(). */
	DefineCustomIntVariable("outbox.retention",
							"How long delivered events are kept before rotation removes them.",
							"Events still owed to an endpoint are kept until delivered or dead-lettered.",
							&outbox_retention,
							7 * 86400, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.attempt_retention",
							"How long the attempt log is kept.",
							NULL,
							&outbox_attempt_retention,
							7 * 86400, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.inbox_retention",
							"How long mark_processed() remembers a message.",
							"A duplicate arriving later than this is not recognised.",
							&outbox_inbox_retention,
							7 * 86400, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);


	DefineCustomIntVariable("outbox.disable_after",
							"Disable an endpoint that has had no successful delivery for this long.",
							"Counted from its first failure after the last success.",
							&outbox_disable_after,
							5 * 86400, 1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.secret_overlap",
							"How long rotate_secret() keeps signing with the previous secret too.",
							NULL,
							&outbox_secret_overlap,
							86400, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("outbox.alert_after",
							"Age of the oldest undelivered event at which outbox.health() warns.",
							NULL,
							&outbox_alert_after,
							30, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("outbox");
}
