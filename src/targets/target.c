/*-------------------------------------------------------------------------
 *
 * target.c
 *	  The delivery targets behind one interface (target.h): which target an
 *	  endpoint's URL names and that target's check of it (in any backend),
 *	  and the relay's calls spread over all of them, each target's
 *	  operation in turn.
 *
 * The relay sleeps in one wait (wait.c): on its latch, on what the targets
 * registered there at their start (libcurl's sockets and clocks, the pipes
 * the Kafka target's queues, the NATS target's acknowledgements and the
 * RabbitMQ and Redis targets' publisher threads write to); after it, every target
 * reads what arrived (target_wait).  All but target_check_url runs in the
 * relay, with no transaction open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <fcntl.h>
#include <unistd.h>

#include "utils/memutils.h"

#include "targets/http.h"
#include "targets/target.h"
#include "targets/wait.h"

static const TargetOps *const targets[TARGET_KINDS] = {
	[TARGET_WEBHOOK] = &outbox_webhook_target,
	[TARGET_KAFKA] = &outbox_kafka_target,
	[TARGET_NATS] = &outbox_nats_target,
	[TARGET_RABBITMQ] = &outbox_rabbitmq_target,
	[TARGET_REDIS] = &outbox_redis_target,
};

/* The target of an endpoint URL (_check_url accepted it). */
TargetKind
target_of_url(const char *url)
{
	if (pg_strncasecmp(url, "kafka://", 8) == 0 || pg_strncasecmp(url, "kafkas://", 9) == 0)
		return TARGET_KAFKA;
	if (pg_strncasecmp(url, "nats://", 7) == 0 || pg_strncasecmp(url, "tls://", 6) == 0)
		return TARGET_NATS;
	if (pg_strncasecmp(url, "amqp://", 7) == 0 || pg_strncasecmp(url, "amqps://", 8) == 0)
		return TARGET_RABBITMQ;
	if (pg_strncasecmp(url, "bullmq://", 9) == 0 || pg_strncasecmp(url, "bullmqs://", 10) == 0 ||
		pg_strncasecmp(url, "redis://", 8) == 0 || pg_strncasecmp(url, "rediss://", 9) == 0)
		return TARGET_REDIS;
	return TARGET_WEBHOOK;
}

/*
 * An endpoint URL, checked by its target: the URL the endpoint keeps, its
 * scheme in lower case; an invalid one is an error (22023).
 */
char *
target_check_url(const char *url)
{
	const char *problem = NULL;
	char	   *checked = targets[target_of_url(url)]->check_url(url, &problem);

	if (checked == NULL)
		http_bad_url(url, "endpoint URL", problem);
	for (char *c = checked; *c != '\0' && *c != ':'; c++)
		*c = pg_tolower((unsigned char) *c);
	return checked;
}

/*
 * One server of a broker URL's list, "host[:port]" or "[v6][:port]", of len
 * bytes: the host (without brackets) into host, the port into *port (left
 * as it was when none is written).  False if it is not one, or the host
 * does not fit in host_size.
 */
bool
target_split_server(const char *s, size_t len, char *host, size_t host_size, int *port)
{
	const char *h = s;
	size_t		host_len;
	size_t		rest;
	long		n = 0;

	if (len == 0)
		return false;
	if (s[0] == '[')
	{
		const char *close = memchr(s, ']', len);

		if (close == NULL || close == s + 1)
			return false;
		for (const char *c = s + 1; c < close; c++)
			if (!(isxdigit((unsigned char) *c) || *c == ':' || *c == '.'))
				return false;
		h = s + 1;
		host_len = close - h;
		rest = len - (close - s + 1);
	}
	else
	{
		host_len = 0;
		while (host_len < len && s[host_len] != ':')
		{
			char		c = s[host_len];

			if (!(isalnum((unsigned char) c) || c == '.' || c == '-'))
				return false;
			host_len++;
		}
		if (host_len == 0)
			return false;
		rest = len - host_len;
	}
	if (host_len >= host_size)
		return false;
	memcpy(host, h, host_len);
	host[host_len] = '\0';
	if (rest == 0)
		return true;
	if (s[len - rest] != ':' || rest < 2 || rest > 6)
		return false;
	for (size_t i = len - rest + 1; i < len; i++)
	{
		if (!isdigit((unsigned char) s[i]))
			return false;
		n = n * 10 + (s[i] - '0');
	}
	if (n < 1 || n > 65535)
		return false;
	*port = (int) n;
	return true;
}

/* Does a delivery in flight to a target of this kind hold a relay slot? */
bool
target_takes_slot(TargetKind kind)
{
	return targets[kind]->takes_slot;
}

/*
 * Make room in a target's list of finished deliveries (in TopMemoryContext)
 * for want of them: it grows at least twofold, from 64.
 */
void
target_reserve(TargetRequest ***list, int *room, int want)
{
	if (want <= *room)
		return;
	want = Max(want, Max(64, *room * 2));
	*list = *list == NULL ? MemoryContextAlloc(TopMemoryContext, sizeof(TargetRequest *) * want) :
		repalloc(*list, sizeof(TargetRequest *) * want);
	*room = want;
}

/*
 * Make the pipe through which a target's own threads wake the relay: both
 * ends non-blocking and closed on exec, the reading end in the relay's wait
 * (wait.c), read by the target in its poll().  For the broker targets, at
 * their start.
 */
void
target_wake_pipe(int fds[2])
{
	if (pipe(fds) != 0)
		elog(ERROR, "could not create a pipe: %m");
	for (int i = 0; i < 2; i++)
	{
		(void) fcntl(fds[i], F_SETFL, O_NONBLOCK);
		(void) fcntl(fds[i], F_SETFD, FD_CLOEXEC);
	}
	if (!wait_watch(fds[0], WL_SOCKET_READABLE, NULL, NULL))
		elog(ERROR, "out of memory");
}

/* At the relay's start, before the first submit: every target, in order. */
void
target_start(void)
{
	for (int i = 0; i < TARGET_KINDS; i++)
		targets[i]->start();
}

/* After a configuration reload. */
void
target_configure(void)
{
	for (int i = 0; i < TARGET_KINDS; i++)
		targets[i]->configure();
}

/* Hand a request to its target; its result comes from target_next_done. */
void
target_submit(TargetRequest *req, TargetKind kind, int relay_in_flight)
{
	targets[kind]->submit(req, relay_in_flight);
}

/* A request whose attempt finished, of any target, or NULL. */
TargetRequest *
target_next_done(void)
{
	for (int i = 0; i < TARGET_KINDS; i++)
	{
		TargetRequest *req = targets[i]->next_done();

		if (req != NULL)
			return req;
	}
	return NULL;
}

/*
 * Sleep until the latch is set, a target's socket is ready, or timeout_ms
 * passed; then let every target take what arrived.  True when the latch
 * was set (the caller resets it).
 */
bool
target_wait(long timeout_ms)
{
	bool		latch = wait_sleep(timeout_ms);

	for (int i = 0; i < TARGET_KINDS; i++)
		targets[i]->poll();
	return latch;
}

/* At exit: nothing in flight is waited for. */
void
target_abandon_all(void)
{
	for (int i = 0; i < TARGET_KINDS; i++)
		targets[i]->abandon_all();
}
