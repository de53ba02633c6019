/*-------------------------------------------------------------------------
 *
 * target.h
 *	  The delivery-target interface: where the relay hands a delivery and
 *	  what it gets back.
 *
 * The relay reads, orders, retries, dead-letters, logs attempts, keeps
 * health and the circuit breaker, and owns the crash window, for every
 * target alike.  A target only turns a delivery into a TargetResult: it
 * builds what goes on the wire from the delivery and its endpoint, owns
 * its I/O (libcurl's sockets, a broker client's threads) and tells the
 * relay's single wait what to wake on.  The endpoint's URL scheme chooses
 * the target (target_of_url): http and https go to the webhook target
 * (webhook.c, over http.c), kafka to the Kafka target (kafka.c), nats to
 * the NATS JetStream target (nats.c), amqp to the RabbitMQ target
 * (rabbitmq.c).
 *
 * Everything here runs in the relay's process and thread, but check_url,
 * which create_endpoint() and alter_endpoint() call in any backend, inside
 * its transaction (through outbox._check_url).  A target whose
 * client library runs threads of its own (librdkafka, libnats) keeps them away from
 * PostgreSQL: their news reaches the relay through a pipe in its wait set,
 * and the target reads it in target_poll().
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_TARGET_H
#define OUTBOX_TARGET_H

#include "targets/http.h"

struct Delivery;

/* The targets, by URL scheme. */
typedef enum TargetKind
{
	TARGET_WEBHOOK,				/* http://, https:// */
	TARGET_KAFKA,				/* kafka:// */
	TARGET_NATS,				/* nats:// (JetStream) */
	TARGET_RABBITMQ,			/* amqp:// */
	TARGET_KINDS
} TargetKind;

#define OUTBOX_TARGET_ERROR_SIZE	CURL_ERROR_SIZE

/*
 * What one attempt came to, as the relay decides an outcome from it and
 * the attempt log keeps it.  A webhook answers with a status (and maybe a
 * response, Retry-After and webhook-delivery); a broker acknowledges
 * (status 0, no error), fails in a way worth trying again
 * (transport_error), or refuses for good (rejected), with its reason in
 * error.
 */
typedef struct TargetResult
{
	long		status;			/* HTTP status, 0: none (brokers: always) */
	bool		transport_error;	/* no definite answer: tried again */
	bool		rejected;		/* refused for good: a dead letter at once */
	char		error[OUTBOX_TARGET_ERROR_SIZE];	/* why not, for the log */
	double		duration_ms;
	char		response[OUTBOX_RESPONSE_KEEP + 1];
	size_t		response_len;
	bool		response_cut;	/* the body was longer than what is kept */
	char		delivery[32];	/* webhook-delivery response header */
	char		retry_after[64];	/* Retry-After response header */
	size_t		bytes;			/* body bytes sent */
} TargetResult;

/*
 * A target.  check_url() reads an endpoint URL of its schemes: the URL as
 * the endpoint keeps it (palloc'd), or NULL with *problem saying why not;
 * it may also raise the error itself.  It runs in any backend, for
 * create_endpoint() and alter_endpoint().  submit() takes a delivery whose
 * event_id_str is filled and whose result is zeroed, and must not fail for
 * a reason of the delivery's:
 * what cannot be sent comes back from next_done() with a result that says
 * why.  next_done() returns one finished delivery at a time, NULL when
 * none.  poll() is called after every wait: a target whose client library
 * runs threads of its own has them write to a pipe the wait watches
 * (http_wait_also) and takes what they brought here, in the relay's
 * thread.  abandon_all() is called at exit: nothing is waited for.
 */
typedef struct TargetOps
{
	const char *name;
	char	   *(*check_url) (const char *url, const char **problem);
	void		(*submit) (struct Delivery *d, int relay_in_flight);
	struct Delivery *(*next_done) (void);
	void		(*poll) (void);
	void		(*abandon_all) (void);
	bool		takes_slot;		/* a delivery in flight holds one of the
								 * relay's slots (a socket of its own) */
} TargetOps;

extern TargetKind target_of_url(const char *url);
extern char *target_check_url(const char *url);
extern bool target_takes_slot(TargetKind kind);
extern bool target_split_server(const char *s, size_t len, char *host, size_t host_size,
								int *port);

extern void target_wake_pipe(int fds[2]);
extern void target_reserve(struct Delivery ***list, int *room, int want);
extern void target_start(void);
extern void target_configure(void);
extern void target_submit(struct Delivery *d, TargetKind kind, int relay_in_flight);
extern struct Delivery *target_next_done(void);
extern bool target_wait(long timeout_ms);
extern void target_abandon_all(void);

/* The targets (webhook.c, kafka.c, nats.c, rabbitmq.c). */
extern const TargetOps outbox_webhook_target;
extern const TargetOps outbox_kafka_target;
extern const TargetOps outbox_nats_target;
extern const TargetOps outbox_rabbitmq_target;

#endif							/* OUTBOX_TARGET_H */
