/*-------------------------------------------------------------------------
 *
 * kafka.c
 *	  The Kafka target: a delivery as a message produced with librdkafka,
 *	  its delivery report as the result.
 *
 * An endpoint URL kafka://host:port[,host:port]/TOPIC[?options] names the
 * bootstrap servers and the topic; TOPIC may contain {event_type}, which
 * becomes the event's type (characters a topic cannot have become "_").
 * The message's key is the event's key, so that a key stays in one
 * partition and keeps its order there; its value is the body in the
 * endpoint's format; its headers are webhook-id (the event id), type,
 * timestamp (the emit time, RFC 3339), the format's (content-type, and in
 * CloudEvents binary mode the ce_* attributes, as the Kafka binding of
 * CloudEvents names them) and the event's own headers; its
 * timestamp is the emit time.  Options: compression (none, gzip, snappy,
 * lz4, zstd) and linger_ms.  Credentials are never taken from the URL:
 * the endpoint's auth {"sasl": {"mechanism", "username", "password"}}
 * makes the producer authenticate with SASL (PLAIN, SCRAM-SHA-256 or
 * SCRAM-SHA-512); kafkas:// is the same over TLS (security.protocol SSL
 * or SASL_SSL: the brokers verified against outbox.ca_file, or OpenSSL's
 * default store, and by name; auth's client_cert and client_key
 * presented).  A change of auth makes a new producer.  A broker that refuses them fails
 * the messages when they time out, with librdkafka's reason ("client
 * error: SASL authentication error: ..."), tried again on the schedule.
 *
 * Each Kafka endpoint has a producer of its own (one rd_kafka_t), made at
 * its first delivery: idempotent, acks=all, message.timeout.ms the
 * endpoint's timeout.  librdkafka retries what a broker asks to be retried
 * (not leader, request timed out) within that time by itself; what is left
 * comes back in the delivery report.  A report without error is an
 * acknowledgement (recorded as status 200, so that the attempt log's
 * "answered with a 2xx" means delivered for brokers too, with the
 * partition and offset as the response); an error the broker will give
 * again (message too large, unknown topic, not authorized, invalid
 * record) is rejected: a dead letter at once, with the broker's reason;
 * any other is a transport error, tried again on the schedule.
 *
 * Threads.  librdkafka runs threads of its own; they never call into
 * PostgreSQL, and they are made with every signal blocked (producer_new),
 * so that PostgreSQL's signal handlers run in the relay's thread alone.
 * Every producer's main queue writes a byte to one pipe when it becomes
 * non-empty (rd_kafka_queue_io_event_enable); the relay's wait watches the
 * pipe (target_wake_pipe), and kafka_poll() serves the queues in the relay's
 * thread: delivery reports, errors and librdkafka's log lines (log.queue)
 * arrive there and nowhere else.  The one callback a librdkafka thread
 * runs is connect_cb, which applies the address policy
 * (outbox.allowed_networks, address.c) to every broker address before it
 * connects, the addresses brokers advertise included: it reads a copy of
 * the allowed networks kept in its producer, and writes the reason of its
 * last refusal there under a mutex.  A reload that changes the allowed
 * networks retires the producers: new deliveries get new ones.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "portability/instr_time.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "targets/address.h"
#include "targets/auth.h"
#include "targets/format.h"
#include "targets/kafka.h"
#include "targets/target.h"

/* One endpoint's producer. */
typedef struct Producer
{
	int			endpoint_id;
	char	   *url;			/* as it was made from (malloc'd) */
	long		timeout_ms;
	KafkaUrl	parsed;
	bool		topic_has_type;
	rd_kafka_t *rk;
	int			in_flight;		/* messages produced, not yet reported */
	TimestampTz used_at;		/* its last message was produced */
	bool		retired;		/* takes no more; destroyed once empty */
	bool		fatal;			/* failed for good: purge what it has */
	NetworkList allowed;		/* the address policy it was made under */
	char	   *sasl_mechanism; /* the endpoint's auth, when it has one */
	char	   *username;
	char	   *password;
	char	   *client_cert;	/* kafkas://: presented when set */
	char	   *client_key;
	char	   *ca_file;		/* outbox.ca_file it was made under */
	pthread_mutex_t lock;		/* guards refused, written by connect_cb */
	char		refused[256];	/* the last address refused, or "" */
	char		last_error[256];	/* the last client error (error_cb) */
	bool		last_error_auth;	/* it was an authentication failure */
	struct Producer *next;
} Producer;

/* A message on its way: what its delivery report is matched to. */
typedef struct KafkaMessage
{
	TargetRequest *tr;
	Producer   *p;
	instr_time	start;
} KafkaMessage;

static Producer *producers = NULL;

/*
 * Deliveries whose report came, for kafka_next_done().  Room for every
 * message in flight is made at submit, so that a delivery report, served
 * inside rd_kafka_poll(), never allocates.
 */
static TargetRequest **done = NULL;
static int	n_done = 0;
static int	done_next = 0;
static int	done_room = 0;
static int	kafka_in_flight = 0;

/* Serializes connect_cb's calls of address_refusal, from any thread. */
static pthread_mutex_t refusal_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pipe every producer's queue wakes the relay through. */
static int	wake_pipe[2] = {-1, -1};
static bool woke_self = false;	/* wake() wrote to it */

/*
 * A producer with nothing in flight and no message for this long is
 * destroyed (its endpoint may be gone); the next delivery makes another.
 */
#define PRODUCER_IDLE_MS	(10 * 60 * 1000)

/* ---------------------------------------------------------------------
 * The URL
 * ---------------------------------------------------------------------
 */

static bool
topic_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}


/*
 * Parse a kafka:// URL into out.  False, with the reason (a full sentence)
 * in *problem, when it is not one the target can use.  No allocation: the
 * relay calls it too.
 */
bool
kafka_parse_url(const char *url, KafkaUrl *out, const char **problem)
{
	const char *p;
	const char *slash;
	const char *query;
	size_t		len;

	memset(out, 0, sizeof(*out));
	out->linger_ms = -1;
	if (pg_strncasecmp(url, "kafkas://", 9) == 0)
	{
		out->tls = true;
		p = url + 9;
	}
	else if (pg_strncasecmp(url, "kafka://", 8) == 0)
		p = url + 8;
	else
	{
		*problem = "A Kafka endpoint URL starts with \"kafka://\" (or \"kafkas://\").";
		return false;
	}
	if (strpbrk(url, "@#") != NULL)
	{
		*problem = "A Kafka endpoint URL has no credentials and no fragment; credentials are never taken from the URL.";
		return false;
	}
	slash = strchr(p, '/');
	if (slash == NULL || slash == p)
	{
		*problem = "A Kafka endpoint URL is kafka://host:port[,host:port]/TOPIC.";
		return false;
	}
	len = slash - p;
	if (len > OUTBOX_MAX_URL)
	{
		*problem = "The server list is too long.";
		return false;
	}
	for (const char *s = p; s < slash;)
	{
		const char *comma = memchr(s, ',', slash - s);
		const char *end = comma != NULL ? comma : slash;

		char		host[OUTBOX_MAX_URL + 1];
		int			port = 0;

		/* (no port: librdkafka's default, 9092) */
		if (!target_split_server(s, end - s, host, sizeof(host), &port))
		{
			*problem = "Each server is host:port (or [IPv6]:port), separated by commas.";
			return false;
		}
		s = comma != NULL ? comma + 1 : slash;
		if (comma != NULL && s == slash)
		{
			*problem = "Each server is host:port (or [IPv6]:port), separated by commas.";
			return false;
		}
	}
	memcpy(out->servers, p, len);
	out->servers[len] = '\0';

	p = slash + 1;
	query = strchr(p, '?');
	len = query != NULL ? (size_t) (query - p) : strlen(p);
	if (len == 0 || len > KAFKA_TOPIC_MAX)
	{
		*problem = "The topic is 1 to 249 characters.";
		return false;
	}
	for (size_t i = 0; i < len;)
	{
		if (strncmp(p + i, KAFKA_EVENT_TYPE, strlen(KAFKA_EVENT_TYPE)) == 0)
			i += strlen(KAFKA_EVENT_TYPE);
		else if (topic_char(p[i]))
			i++;
		else
		{
			*problem = "A topic has letters, digits, \".\", \"_\" and \"-\", and may contain {event_type}.";
			return false;
		}
	}
	if ((len == 1 && p[0] == '.') || (len == 2 && strncmp(p, "..", 2) == 0))
	{
		*problem = "A topic cannot be \".\" or \"..\".";
		return false;
	}
	memcpy(out->topic, p, len);
	out->topic[len] = '\0';

	/* Options: compression=CODEC, linger_ms=N, separated by "&". */
	for (p = query != NULL ? query + 1 : NULL; p != NULL && *p != '\0';)
	{
		const char *amp = strchr(p, '&');
		size_t		opt_len = amp != NULL ? (size_t) (amp - p) : strlen(p);
		static const char *const codecs[] = {"none", "gzip", "snappy", "lz4", "zstd"};
		bool		ok = false;

		if (opt_len > 12 && strncmp(p, "compression=", 12) == 0)
		{
			for (size_t i = 0; i < lengthof(codecs); i++)
				if (opt_len - 12 == strlen(codecs[i]) && strncmp(p + 12, codecs[i], opt_len - 12) == 0)
				{
					strlcpy(out->compression, codecs[i], sizeof(out->compression));
					ok = true;
				}
		}
		else if (opt_len > 10 && opt_len <= 15 && strncmp(p, "linger_ms=", 10) == 0)
		{
			int			n = 0;

			ok = true;
			for (size_t i = 10; i < opt_len; i++)
			{
				if (!isdigit((unsigned char) p[i]))
					ok = false;
				else
					n = n * 10 + (p[i] - '0');
			}
			if (ok && n > 60000)
				ok = false;
			out->linger_ms = n;
		}
		if (!ok)
		{
			*problem = "The options are compression=none|gzip|snappy|lz4|zstd and linger_ms=0..60000, separated by \"&\".";
			return false;
		}
		p = amp != NULL ? amp + 1 : NULL;
	}
	return true;
}

/* ---------------------------------------------------------------------
 * Producers
 * ---------------------------------------------------------------------
 */

/*
 * Run by librdkafka's broker threads before each connection: the address
 * policy, on the producer's copy of it.  Returns 0 once connected (or
 * connecting: the socket is non-blocking), else an errno.
 */
static int
connect_cb(int sockfd, const struct sockaddr *addr, int addrlen, const char *id, void *opaque)
{
	Producer   *p = (Producer *) opaque;
	const char *why;
	bool		refused;

	/* (address_refusal's reason may be in a static buffer: one at a time) */
	pthread_mutex_lock(&refusal_lock);
	why = address_refusal(addr, &p->allowed);
	refused = why != NULL;
	if (refused)
	{
		pthread_mutex_lock(&p->lock);
		snprintf(p->refused, sizeof(p->refused),
				 "refused to connect to broker %s, %s; outbox.allowed_networks can allow it",
				 id, why);
		pthread_mutex_unlock(&p->lock);
	}
	pthread_mutex_unlock(&refusal_lock);
	if (refused)
		return EACCES;
	if (connect(sockfd, addr, addrlen) != 0 && errno != EINPROGRESS)
		return errno;
	return 0;
}

/* Will a broker give this error again, whatever the relay does? */
static bool
permanent_error(rd_kafka_resp_err_t err)
{
	switch (err)
	{
		case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
		case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
		case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
		case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
		case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
		case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_INVALID_RECORD:
		case RD_KAFKA_RESP_ERR_INVALID_MSG:
		case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
		case RD_KAFKA_RESP_ERR__INVALID_ARG:
			return true;
		default:
			return false;
	}
}

/* Wake the relay's wait: something is ready without a queue's byte. */
static void
wake(void)
{
	char		c = 1;

	woke_self = true;
	/* A full pipe already wakes the wait. */
	if (wake_pipe[1] >= 0 && write(wake_pipe[1], &c, 1) < 0)
		return;
}

/*
 * A message's outcome is known: fill its delivery's result and queue the
 * delivery for kafka_next_done().  Runs in the relay's thread (inside
 * rd_kafka_poll() for a report); never allocates nor raises an error.
 */
static void
finish(KafkaMessage *m, rd_kafka_resp_err_t err, int32 partition, int64 offset)
{
	TargetRequest *tr = m->tr;
	TargetResult *r = tr->result;
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, m->start);
	r->duration_ms = INSTR_TIME_GET_MILLISEC(now);
	r->bytes = strlen(tr->body);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		r->outcome = TARGET_DELIVERED;
		r->response_len = snprintf(r->response, sizeof(r->response),
								   "partition %d offset " INT64_FORMAT, partition, offset);
	}
	else
	{
		r->outcome = permanent_error(err) ? TARGET_DEAD_LETTER : TARGET_RETRY;
		if (err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
		{
			/* what kept it from the brokers, if anything was said */
			pthread_mutex_lock(&m->p->lock);
			snprintf(r->error, sizeof(r->error), "%sKafka: %s (%s)%s%s",
					 !m->p->refused[0] && m->p->last_error_auth ? "authentication failed: " : "",
					 rd_kafka_err2str(err), rd_kafka_err2name(err),
					 m->p->refused[0] ? "; " : m->p->last_error[0] ? "; client error: " : "",
					 m->p->refused[0] ? m->p->refused : m->p->last_error);
			pthread_mutex_unlock(&m->p->lock);
		}
		else
			snprintf(r->error, sizeof(r->error), "Kafka: %s (%s)",
					 rd_kafka_err2str(err), rd_kafka_err2name(err));
	}
	m->p->in_flight--;
	kafka_in_flight--;
	Assert(n_done < done_room);
	done[n_done++] = tr;
}

/* Delivery report: served by rd_kafka_poll() in the relay's thread. */
static void
dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque)
{
	finish((KafkaMessage *) msg->_private, msg->err, msg->partition, msg->offset);
}

/*
 * A client error (all brokers down, say): served by rd_kafka_poll().  The
 * latest is kept for the message of a delivery that times out; a fatal one
 * (the idempotent producer lost its sequence) retires the producer, and
 * what it had in flight is purged: reported as failed, tried again.
 */
static void
error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	Producer   *p = (Producer *) opaque;

	pthread_mutex_lock(&p->lock);
	strlcpy(p->last_error, reason, sizeof(p->last_error));
	p->last_error_auth = (err == RD_KAFKA_RESP_ERR__AUTHENTICATION);
	pthread_mutex_unlock(&p->lock);
	if (err == RD_KAFKA_RESP_ERR__FATAL && !p->retired)
	{
		char		why[256];

		rd_kafka_fatal_error(rk, why, sizeof(why));
		ereport(WARNING,
				(errmsg("outbox Kafka producer of endpoint %d failed and is made again", p->endpoint_id),
				 errdetail("librdkafka: %s.", why)));
		p->retired = true;
		p->fatal = true;		/* purged by kafka_poll */
	}
	else
		ereport(DEBUG1,
				(errmsg_internal("outbox Kafka producer of endpoint %d: %s", p->endpoint_id, reason)));
}

/* librdkafka's log lines, through the main queue (log.queue). */
static void
log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	ereport(DEBUG1, (errmsg_internal("librdkafka %s: %s", fac, buf)));
}

/* Set one producer setting; false, with librdkafka's reason, if refused. */
static bool
set_conf(rd_kafka_conf_t *conf, const char *name, const char *value, char *why, size_t why_len)
{
	char		errstr[256];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK)
		return true;
	snprintf(why, why_len, "librdkafka refused %s=%s: %s", name, value, errstr);
	return false;
}

/* A secret setting: refused, the reason names the setting, not the value. */
static bool
set_secret_conf(rd_kafka_conf_t *conf, const char *name, const char *value, char *why, size_t why_len)
{
	char		errstr[256];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK)
		return true;
	snprintf(why, why_len, "librdkafka refused the setting %s", name);
	return false;
}

/* Free what a producer holds besides librdkafka's handle, and it. */
static void
producer_release(Producer *p)
{
	pthread_mutex_destroy(&p->lock);
	auth_forget(p->sasl_mechanism);
	auth_forget(p->username);
	auth_forget(p->password);
	auth_forget(p->client_cert);
	auth_forget(p->client_key);
	auth_forget(p->ca_file);
	pfree(p->url);
	pfree(p);
}

/*
 * The security settings: SASL from p's auth, if any, and TLS for kafkas://
 * (the brokers verified against outbox.ca_file, or OpenSSL's default
 * store, and by name; the client certificate presented if auth has one).
 * False, with why, if librdkafka refused one.
 */
static bool
set_security(rd_kafka_conf_t *conf, const Producer *p, char *why, size_t why_len)
{
	const char *protocol = p->parsed.tls ? (p->sasl_mechanism ? "sasl_ssl" : "ssl") :
		(p->sasl_mechanism ? "sasl_plaintext" : "plaintext");

	if (!set_conf(conf, "security.protocol", protocol, why, why_len))
		return false;
	if (p->sasl_mechanism != NULL &&
		(!set_conf(conf, "sasl.mechanisms", p->sasl_mechanism, why, why_len) ||
		 !set_secret_conf(conf, "sasl.username", p->username, why, why_len) ||
		 !set_secret_conf(conf, "sasl.password", p->password, why, why_len)))
		return false;
	if (!p->parsed.tls)
		return true;
	return set_conf(conf, "enable.ssl.certificate.verification", "true", why, why_len) &&
		set_conf(conf, "ssl.endpoint.identification.algorithm", "https", why, why_len) &&
		(p->ca_file[0] == '\0' ||
		 set_conf(conf, "ssl.ca.location", p->ca_file, why, why_len)) &&
		(p->client_cert == NULL ||
		 (set_conf(conf, "ssl.certificate.location", p->client_cert, why, why_len) &&
		  set_conf(conf, "ssl.key.location", p->client_key, why, why_len)));
}

/* A new producer for ep, or NULL with the reason in why. */
static Producer *
producer_new(const TargetEndpoint *ep, char *why, size_t why_len)
{
	Producer   *p;
	rd_kafka_conf_t *conf;
	rd_kafka_queue_t *q;
	const char *problem;
	char		errstr[256];
	char		timeout[32];
	char		linger[32];
	char		propagation[32];
	sigset_t	all_signals;
	sigset_t	old_signals;

	p = MemoryContextAllocZero(TopMemoryContext, sizeof(Producer));
	if (!kafka_parse_url(ep->url, &p->parsed, &problem))
	{
		strlcpy(why, problem, why_len);
		pfree(p);
		return NULL;
	}
	p->endpoint_id = ep->id;
	p->url = MemoryContextStrdup(TopMemoryContext, ep->url);
	p->timeout_ms = ep->timeout_ms;
	p->topic_has_type = strstr(p->parsed.topic, KAFKA_EVENT_TYPE) != NULL;
	p->allowed = outbox_allowed_networks;
	if (ep->auth != NULL && ep->auth->cfg.sasl_mechanism != NULL)
	{
		p->sasl_mechanism = auth_keep(ep->auth->cfg.sasl_mechanism);
		p->username = auth_keep(ep->auth->cfg.username);
		p->password = auth_keep(ep->auth->cfg.password);
	}
	if (ep->auth != NULL && ep->auth->cfg.client_cert != NULL)
	{
		p->client_cert = auth_keep(ep->auth->cfg.client_cert);
		p->client_key = auth_keep(ep->auth->cfg.client_key);
	}
	p->ca_file = auth_keep(outbox_ca_file != NULL ? outbox_ca_file : "");
	pthread_mutex_init(&p->lock, NULL);

	conf = rd_kafka_conf_new();
	snprintf(timeout, sizeof(timeout), "%ld", Max(ep->timeout_ms, 1));
	snprintf(linger, sizeof(linger), "%d", p->parsed.linger_ms);
	/*
	 * A topic the cluster does not know (and will not create) fails the
	 * message as unknown within the attempt's time, not as timed out.
	 */
	snprintf(propagation, sizeof(propagation), "%ld", Min(30000, Max(ep->timeout_ms / 2, 1)));
	if (!set_conf(conf, "bootstrap.servers", p->parsed.servers, why, why_len) ||
		!set_conf(conf, "client.id", "outbox", why, why_len) ||
		!set_conf(conf, "enable.idempotence", "true", why, why_len) ||
		!set_conf(conf, "acks", "all", why, why_len) ||
		!set_conf(conf, "message.timeout.ms", timeout, why, why_len) ||
		!set_conf(conf, "topic.metadata.propagation.max.ms", propagation, why, why_len) ||
		(p->parsed.compression[0] &&
		 !set_conf(conf, "compression.type", p->parsed.compression, why, why_len)) ||
		(p->parsed.linger_ms >= 0 &&
		 !set_conf(conf, "linger.ms", linger, why, why_len)) ||
		!set_conf(conf, "log.queue", "true", why, why_len) ||
		!set_security(conf, p, why, why_len))
	{
		rd_kafka_conf_destroy(conf);
		producer_release(p);
		return NULL;
	}
	rd_kafka_conf_set_opaque(conf, p);
	rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_connect_cb(conf, connect_cb);

	/*
	 * librdkafka's threads inherit the signal mask of the thread that makes
	 * them: with every signal blocked, PostgreSQL's handlers run only in
	 * the relay's thread.
	 */
	sigfillset(&all_signals);
	pthread_sigmask(SIG_SETMASK, &all_signals, &old_signals);
	p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	pthread_sigmask(SIG_SETMASK, &old_signals, NULL);
	if (p->rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		snprintf(why, why_len, "librdkafka could not make a producer: %s", errstr);
		producer_release(p);
		return NULL;
	}
	/* Logs into the main queue, and the main queue wakes the relay. */
	rd_kafka_set_log_queue(p->rk, NULL);
	q = rd_kafka_queue_get_main(p->rk);
	rd_kafka_queue_io_event_enable(q, wake_pipe[1], "1", 1);
	rd_kafka_queue_destroy(q);

	p->next = producers;
	producers = p;
	return p;
}

/* Destroy a retired producer with nothing in flight. */
static void
producer_free(Producer *p)
{
	Producer  **link;

	for (link = &producers; *link != NULL; link = &(*link)->next)
		if (*link == p)
		{
			*link = p->next;
			break;
		}
	rd_kafka_destroy(p->rk);
	producer_release(p);
}

/*
 * The producer of ep, made if need be; one made from another URL,
 * timeout or SASL credentials is retired.  NULL, with why, when none can be made.
 */
static Producer *
producer_of(const TargetEndpoint *ep, char *why, size_t why_len)
{
	const AuthConfig *a = ep->auth != NULL ? &ep->auth->cfg : NULL;

	for (Producer *p = producers; p != NULL; p = p->next)
	{
		if (p->endpoint_id != ep->id || p->retired)
			continue;
		if (p->timeout_ms == ep->timeout_ms && strcmp(p->url, ep->url) == 0 &&
			auth_same(p->sasl_mechanism, a != NULL ? a->sasl_mechanism : NULL) &&
			auth_same(p->username, a != NULL ? a->username : NULL) &&
			auth_same(p->password, a != NULL ? a->password : NULL) &&
			auth_same(p->client_cert, a != NULL ? a->client_cert : NULL) &&
			auth_same(p->client_key, a != NULL ? a->client_key : NULL))
			return p;
		p->retired = true;
	}
	return producer_new(ep, why, why_len);
}

/* ---------------------------------------------------------------------
 * The target
 * ---------------------------------------------------------------------
 */

/* The topic of an event: the template with {event_type} filled in. */
static void
topic_of(const Producer *p, const char *type, char *out)
{
	const char *t = p->parsed.topic;
	size_t		n = 0;

	if (!p->topic_has_type)
	{
		strlcpy(out, t, KAFKA_TOPIC_MAX + 1);
		return;
	}
	while (*t && n < KAFKA_TOPIC_MAX)
	{
		if (strncmp(t, KAFKA_EVENT_TYPE, strlen(KAFKA_EVENT_TYPE)) == 0)
		{
			for (const char *c = type; *c && n < KAFKA_TOPIC_MAX; c++)
				out[n++] = topic_char(*c) ? *c : '_';
			t += strlen(KAFKA_EVENT_TYPE);
		}
		else
			out[n++] = *t++;
	}
	out[n] = '\0';
}

/*
 * Add a "Name: value" line as a message header.  A format's lines follow
 * the Kafka binding of CloudEvents: names in lower case, "ce-" attributes
 * as "ce_" (so Content-Type becomes content-type).
 */
static void
add_header_line(rd_kafka_headers_t *h, const char *line, bool format_line)
{
	size_t		name_len = strcspn(line, ":");
	const char *value = line + name_len;
	char		name[64];

	if (*value == ':')
		value++;
	while (*value == ' ')
		value++;
	if (!format_line || name_len >= sizeof(name))
	{
		rd_kafka_header_add(h, line, name_len, value, -1);
		return;
	}
	for (size_t i = 0; i < name_len; i++)
		name[i] = pg_tolower((unsigned char) line[i]);
	if (name_len > 3 && strncmp(name, "ce-", 3) == 0)
		name[2] = '_';
	rd_kafka_header_add(h, name, name_len, value, -1);
}

/* Make room in done for every message in flight and one more. */
static void
done_make_room(void)
{
	target_reserve(&done, &done_room, kafka_in_flight + n_done + 1);
}

/*
 * Produce one delivery's message.  The message copies what it sends; the
 * KafkaMessage is in current memory, the batch's, which lives until the
 * delivery is recorded.  A message librdkafka refuses at once is finished
 * at once, and the relay woken to collect it.
 */
static void
kafka_submit(TargetRequest *tr, int relay_in_flight)
{
	const TargetEndpoint *ep = tr->endpoint;
	KafkaMessage *m = palloc0(sizeof(KafkaMessage));
	char		why[256];
	char		topic[KAFKA_TOPIC_MAX + 1];
	char		when[64];
	rd_kafka_headers_t *h;
	rd_kafka_resp_err_t err;
	Producer   *p;
	size_t		key_len = tr->key != NULL ? strlen(tr->key) : 0;
	int64		timestamp_ms;
	EventParts	parts = {0};
	char	   *format_lines[OUTBOX_FORMAT_MAX_HEADERS];
	int			n_format;

	done_make_room();
	m->tr = tr;
	INSTR_TIME_SET_CURRENT(m->start);
	p = producer_of(ep, why, sizeof(why));
	if (p == NULL)
	{
		/* (create_endpoint checked the URL: cannot happen but once) */
		tr->result->outcome = TARGET_RETRY;
		snprintf(tr->result->error, sizeof(tr->result->error), "Kafka: %s", why);
		done[n_done++] = tr;
		wake();
		return;
	}
	m->p = p;
	p->used_at = GetCurrentTimestamp();
	p->in_flight++;
	kafka_in_flight++;
	topic_of(p, tr->type, topic);
	outbox_format_time(tr->emitted_at, when);
	timestamp_ms = tr->emitted_at / 1000 +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;

	parts.event_id = &tr->event_id;
	parts.type = tr->type;
	parts.emitted_at = tr->emitted_at;
	parts.key = tr->key;
	n_format = outbox_format_headers(ep->format, &parts, format_lines);

	h = rd_kafka_headers_new(3 + n_format + tr->n_event_headers);
	rd_kafka_header_add(h, "webhook-id", -1, tr->event_id_str, -1);
	rd_kafka_header_add(h, "type", -1, tr->type, -1);
	rd_kafka_header_add(h, "timestamp", -1, when, -1);
	for (int i = 0; i < n_format; i++)
		add_header_line(h, format_lines[i], true);
	for (int i = 1; i < n_format; i++)
		pfree(format_lines[i]);	/* (the first, Content-Type, is static) */
	/* The format's wins over an event's header of the same name. */
	for (int i = 0; i < tr->n_event_headers; i++)
		if (!outbox_format_sets_header(ep->format, tr->event_headers[i]))
			add_header_line(h, tr->event_headers[i], false);

	err = rd_kafka_producev(p->rk,
							RD_KAFKA_V_TOPIC(topic),
							RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							RD_KAFKA_V_KEY(tr->key, key_len),
							RD_KAFKA_V_VALUE(unconstify(char *, tr->body), strlen(tr->body)),
							RD_KAFKA_V_TIMESTAMP(timestamp_ms),
							RD_KAFKA_V_HEADERS(h),
							RD_KAFKA_V_OPAQUE(m),
							RD_KAFKA_V_END);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		rd_kafka_headers_destroy(h);	/* still ours after a failure */
		finish(m, err, -1, -1);
		wake();
	}
}

/* The next delivery whose outcome is known, or NULL. */
static TargetRequest *
kafka_next_done(void)
{
	if (done_next < n_done)
		return done[done_next++];
	n_done = done_next = 0;
	return NULL;
}

/*
 * After a wait: empty the pipe and serve every producer's queue (delivery
 * reports, errors, log lines); destroy retired producers once empty, and
 * those unused for PRODUCER_IDLE_MS.
 */
static void
kafka_poll(void)
{
	char		buf[256];
	Producer   *p;
	Producer   *next;
	TimestampTz now;

	if (producers == NULL && !woke_self)
		return;
	woke_self = false;
	while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
		;
	now = GetCurrentTimestamp();
	for (p = producers; p != NULL; p = next)
	{
		next = p->next;
		done_make_room();
		rd_kafka_poll(p->rk, 0);
		if (p->fatal)
		{
			p->fatal = false;
			rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
			rd_kafka_poll(p->rk, 0);
		}
		if (p->in_flight == 0 && !p->retired &&
			TimestampDifferenceExceeds(p->used_at, now, PRODUCER_IDLE_MS))
			p->retired = true;
		if (p->retired && p->in_flight == 0)
			producer_free(p);
	}
}

/*
 * At exit: nothing in flight is waited for.  What was produced may still
 * reach the brokers, or not; the relay that comes next sends it again
 * (the crash window).
 */
static void
kafka_abandon_all(void)
{
	while (producers != NULL)
	{
		Producer   *p = producers;

		rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT |
					   RD_KAFKA_PURGE_F_NON_BLOCKING);
		producers = p->next;
		rd_kafka_destroy_flags(p->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	}
}

/* At the relay's start: the pipe, watched by the relay's wait. */
static void
kafka_start(void)
{
	if (wake_pipe[0] >= 0)
		return;
	target_wake_pipe(wake_pipe);
}

/*
 * After a reload: producers made under other allowed networks or another
 * outbox.ca_file retire.
 */
static void
kafka_configure(void)
{
	for (Producer *p = producers; p != NULL; p = p->next)
		if (!address_networks_equal(&p->allowed, &outbox_allowed_networks) ||
			strcmp(p->ca_file, outbox_ca_file != NULL ? outbox_ca_file : "") != 0)
			p->retired = true;
}

/* TargetOps.check_url: a URL kafka_parse_url reads, as written. */
static char *
kafka_check_url(const char *url, const char **problem)
{
	KafkaUrl	parsed;

	return kafka_parse_url(url, &parsed, problem) ? pstrdup(url) : NULL;
}

const TargetOps outbox_kafka_target = {
	.name = "kafka",
	.check_url = kafka_check_url,
	.start = kafka_start,
	.configure = kafka_configure,
	.submit = kafka_submit,
	.next_done = kafka_next_done,
	.poll = kafka_poll,
	.abandon_all = kafka_abandon_all,
	.takes_slot = false,
};
