/*-------------------------------------------------------------------------
 *
 * rabbitmq.h
 *	  The RabbitMQ target's URL
 *	  (amqp://host:port/VHOST?exchange=NAME&routing_key=TEMPLATE), as
 *	  create_endpoint checks it and the target reads it.
 *
 * (Not "amqp.h": that is librabbitmq's own header.)
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RABBITMQ_H
#define OUTBOX_RABBITMQ_H

#define AMQP_NAME_MAX		255 /* a short string: vhost, exchange, key */
#define AMQP_EVENT_TYPE		"{event_type}"
#define AMQP_DEFAULT_PORT	5672

typedef struct RabbitUrl
{
	char		host[256];		/* a name or an address, no brackets */
	int			port;
	char		vhost[AMQP_NAME_MAX + 1];	/* decoded; "/" by default */
	char		exchange[AMQP_NAME_MAX + 1];	/* "": the default exchange */
	char		routing_key[AMQP_NAME_MAX + 1]; /* decoded; may hold
												 * {event_type} */
	bool		tls;			/* amqps:// */
} RabbitUrl;

extern bool rabbitmq_parse_url(const char *url, RabbitUrl *out, const char **problem);

#endif							/* OUTBOX_RABBITMQ_H */
