/*-------------------------------------------------------------------------
 *
 * kafka.h
 *	  The Kafka target's URL (kafka://host:port[,host:port]/TOPIC?options),
 *	  as create_endpoint checks it and the target reads it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_KAFKA_H
#define OUTBOX_KAFKA_H

#include "targets/http.h"

#define KAFKA_TOPIC_MAX		249 /* Kafka's own limit on a topic name */
#define KAFKA_EVENT_TYPE	"{event_type}"

typedef struct KafkaUrl
{
	char		servers[OUTBOX_MAX_URL + 1];	/* bootstrap.servers */
	char		topic[KAFKA_TOPIC_MAX + 1]; /* may hold {event_type} */
	char		compression[8];	/* compression.type, "" for the default */
	int			linger_ms;		/* linger.ms, -1 for the default */
	bool		tls;			/* kafkas:// */
} KafkaUrl;

extern bool kafka_parse_url(const char *url, KafkaUrl *out, const char **problem);

#endif							/* OUTBOX_KAFKA_H */
