/*-------------------------------------------------------------------------
 *
 * target.h
 *	  The delivery-target interface: what a target is handed of an endpoint
 *	  and of an attempt, what it gives back, and the operations every
 *	  target implements.
 *
 * The relay reads, orders, retries, dead-letters, logs attempts, keeps
 * health and the circuit breaker, and owns the crash window, for every
 * target alike.  A target only turns a TargetRequest into a TargetResult:
 * it builds what goes on the wire from the request and its TargetEndpoint,
 * owns its I/O (libcurl's sockets, a broker client's threads) and
 * registers what it waits on with the wait (wait.h).  The endpoint's URL
 * scheme chooses the target (target_of_url): http and https go to the
 * webhook target (webhook.c, over http.c), kafka to the Kafka target
 * (kafka.c), nats to the NATS JetStream target (nats.c), amqp to the
 * RabbitMQ target (rabbitmq.c), bullmq and redis to the Redis target
 * (redis.c: BullMQ jobs, stream entries).  Nothing here knows the relay: the relay
 * embeds a TargetEndpoint in each of its endpoints and a TargetRequest in
 * each of its deliveries (relay/delivery.h).
 *
 * Everything here runs in the relay's process and thread, but check_url,
 * which create_endpoint() and alter_endpoint() call in any backend, inside
 * its transaction (through outbox._check_url).  A target whose client
 * library runs threads of its own (librdkafka, libnats) keeps them away
 * from PostgreSQL: their news reaches the relay through a pipe in the
 * wait, and the target reads it in its poll().
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_TARGET_H
#define OUTBOX_TARGET_H

#include "datatype/timestamp.h"
#include "utils/uuid.h"

#include "targets/auth.h"
#include "targets/format.h"
#include "targets/outcome.h"
#include "targets/sign.h"

/* The targets, by URL scheme. */
typedef enum TargetKind
{
	TARGET_WEBHOOK,				/* http://, https:// */
	TARGET_KAFKA,				/* kafka:// */
	TARGET_NATS,				/* nats:// (JetStream) */
	TARGET_RABBITMQ,			/* amqp:// */
	TARGET_REDIS,				/* bullmq://, redis:// */
	TARGET_KINDS
} TargetKind;

/*
 * What a target knows of an endpoint: the relay fills it at each load of
 * its endpoints, and it lives as long as the relay's endpoint.  Its
 * strings (and auth) do not: a load frees and replaces them, also while
 * requests to the endpoint are in flight, so a target copies what it reads
 * of them after submit() returns.
 */
typedef struct TargetEndpoint
{
	int			id;
	const char *name;			/* the endpoint's name */
	char	   *url;
	char	   *headers;		/* "name: value\n" lines, endpoint's own */
	OutboxFormat format;		/* what its requests look like */
	uint8		key[OUTBOX_KEY_MAX];	/* signing secret (webhooks) */
	int			keylen;
	uint8		old_key[OUTBOX_KEY_MAX];
	int			old_keylen;		/* 0: no rotation under way */
	long		timeout_ms;
	EndpointAuth *auth;			/* client authentication, or NULL */
} TargetEndpoint;

/*
 * One attempt to deliver one event to one endpoint, as the relay hands it
 * to a target: filled before submit(), untouched by the relay until
 * next_done() hands it back.  The strings are the relay's and outlive
 * the attempt.  The target writes auth_generation and *result.
 */
typedef struct TargetRequest
{
	const TargetEndpoint *endpoint;
	pg_uuid_t	event_id;
	char		event_id_str[UUID_LEN * 2 + 5];
	const char *type;
	const char *key;			/* the event's key, or NULL */
	const char *body;			/* in the endpoint's format */
	char	  **event_headers;	/* "name: value" lines */
	int			n_event_headers;
	TimestampTz emitted_at;
	int16		priority;		/* the event's: higher goes first */
	uint32		auth_generation;	/* of the OAuth2 token it was sent with */
	TargetResult *result;		/* zeroed by the relay before submit() */
} TargetRequest;

/*
 * A target.  check_url() reads an endpoint URL of its schemes: the URL as
 * the endpoint keeps it (palloc'd), or NULL with *problem saying why not;
 * it may also raise the error itself.  It runs in any backend, for
 * create_endpoint() and alter_endpoint().  start() is called once at the
 * relay's start, before the first submit: a target sets up its client and
 * registers what it waits on with the wait (wait.h); configure() after
 * every configuration reload.  submit() must not fail for a reason of the
 * request's: what cannot be sent comes back from next_done() with a
 * result that says why.  next_done() returns one finished request at a
 * time, NULL when none.  poll() is called after every wait: a target
 * whose client library runs threads of its own has them write to a pipe
 * the wait watches (target_wake_pipe) and takes what they brought here,
 * in the relay's thread.  abandon_all() is called at exit: nothing is
 * waited for.
 */
typedef struct TargetOps
{
	const char *name;
	char	   *(*check_url) (const char *url, const char **problem);
	void		(*start) (void);
	void		(*configure) (void);
	void		(*submit) (TargetRequest *req, int relay_in_flight);
	TargetRequest *(*next_done) (void);
	void		(*poll) (void);
	void		(*abandon_all) (void);
	bool		takes_slot;		/* a request in flight holds one of the
								 * relay's slots (a socket of its own) */
} TargetOps;

extern TargetKind target_of_url(const char *url);
extern char *target_check_url(const char *url);
extern bool target_takes_slot(TargetKind kind);
extern bool target_split_server(const char *s, size_t len, char *host, size_t host_size,
								int *port);

extern void target_wake_pipe(int fds[2]);
extern void target_reserve(TargetRequest ***list, int *room, int want);
extern void target_start(void);
extern void target_configure(void);
extern void target_submit(TargetRequest *req, TargetKind kind, int relay_in_flight);
extern TargetRequest *target_next_done(void);
extern bool target_wait(long timeout_ms);
extern void target_abandon_all(void);

/* The targets (webhook.c, kafka.c, nats.c, rabbitmq.c, redis.c). */
extern const TargetOps outbox_webhook_target;
extern const TargetOps outbox_kafka_target;
extern const TargetOps outbox_nats_target;
extern const TargetOps outbox_rabbitmq_target;
extern const TargetOps outbox_redis_target;

#endif							/* OUTBOX_TARGET_H */
