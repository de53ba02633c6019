/*-------------------------------------------------------------------------
 *
 * nats.h
 *	  The NATS JetStream target's URL (nats://host:port[,host:port]/SUBJECT),
 *	  as create_endpoint checks it and the target reads it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_NATS_H
#define OUTBOX_NATS_H

#include "targets/http.h"

#define NATS_SUBJECT_MAX	255 /* the subject template, in bytes */
#define NATS_SUBJECT_SENT_MAX	1024	/* a subject as sent */
#define NATS_EVENT_TYPE		"{event_type}"
#define NATS_DEFAULT_PORT	4222

typedef struct NatsUrl
{
	char		servers[OUTBOX_MAX_URL + 1];	/* host:port,host:port */
	char		subject[NATS_SUBJECT_MAX + 1];	/* may hold {event_type} */
	bool		tls;			/* tls:// */
	char		tls_host[256];	/* tls://: the servers' one host name */
} NatsUrl;

extern bool nats_parse_url(const char *url, NatsUrl *out, const char **problem);

#endif							/* OUTBOX_NATS_H */
