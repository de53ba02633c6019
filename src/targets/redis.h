/*-------------------------------------------------------------------------
 *
 * redis.h
 *	  The Redis target's URLs, as create_endpoint checks them and the target
 *	  reads them: bullmq://HOST[:PORT][/DB]/QUEUE[?options] (a BullMQ job
 *	  per event) and redis://HOST[:PORT][/DB]/STREAM[?maxlen=N] (a stream
 *	  entry per event); bullmqs:// and rediss:// over TLS.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_REDIS_H
#define OUTBOX_REDIS_H

#include <stdbool.h>

#define REDIS_DEFAULT_PORT	6379
#define REDIS_NAME_MAX		255 /* a queue, a stream key, a prefix */
#define REDIS_JOB_ID_MAX	255 /* a job id template, and a job id */

/* remove_on_complete / remove_on_fail: not given, true, false or a count */
typedef enum RedisKeep
{
	REDIS_KEEP_UNSET = 0,
	REDIS_KEEP_TRUE,			/* BullMQ's true: keep none */
	REDIS_KEEP_FALSE,			/* BullMQ's false: keep all */
	REDIS_KEEP_COUNT			/* keep the last N */
} RedisKeep;

typedef struct RedisUrl
{
	bool		bullmq;			/* bullmq:// (else redis://, a stream) */
	bool		tls;			/* bullmqs://, rediss:// */
	char		host[256];		/* a name or an address, no brackets */
	int			port;
	int			db;				/* SELECT'ed when not 0 */
	char		name[REDIS_NAME_MAX + 1];	/* the queue, or the stream key */
	/* redis:// */
	long		maxlen;			/* XADD MAXLEN ~ N; 0: no trimming */
	/* bullmq:// */
	char		prefix[REDIS_NAME_MAX + 1]; /* "bull" by default */
	char		job_id[REDIS_JOB_ID_MAX + 1];	/* template, "{event_id}" */
	long		attempts;		/* 0: BullMQ's default (one) */
	char		backoff_type[16];	/* "": none; "fixed", "exponential" */
	long		backoff_ms;
	RedisKeep	remove_on_complete;
	long		remove_on_complete_n;
	RedisKeep	remove_on_fail;
	long		remove_on_fail_n;
	char		layout[8];		/* "auto", "6", "5", "4" */
	bool		priority;		/* events' priorities mapped (default) */
} RedisUrl;

extern bool redis_parse_url(const char *url, RedisUrl *out, const char **problem);

#endif							/* OUTBOX_REDIS_H */
