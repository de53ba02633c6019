/*-------------------------------------------------------------------------
 *
 * rabbitmq.c
 *	  The RabbitMQ target: a delivery as a message published with
 *	  librabbitmq (AMQP 0-9-1), its publisher confirm as the result.
 *
 * An endpoint URL amqp://host[:port][/VHOST]?exchange=NAME[&routing_key=K]
 * (amqps:// for AMQP over TLS, port 5671 by default) names the broker, the virtual host (percent-encoded; "/" when left out,
 * written %2F otherwise), the exchange ("exchange=" alone: the default
 * exchange, which routes by queue name) and the routing key, which may
 * contain {event_type} and is {event_type} when left out.  Credentials are
 * never taken from the URL: the target logs in (SASL PLAIN) with the
 * endpoint's auth {"username", "password"}, and without one as RabbitMQ's
 * default user guest, which the broker accepts over loopback only.  A
 * login the broker refuses fails the connection like any other failure to
 * connect: its messages are tried again on the schedule, with the broker's
 * reason in the attempt log (docs/authentication.md: a wrong password is
 * fixed by the operator, and the events wait for it meanwhile rather than
 * being lost).
 *
 * TLS (amqps://): librabbitmq's OpenSSL socket, the broker's certificate
 * verified against outbox.ca_file (the system's store when empty) and
 * the URL's host name (or address), a client certificate presented when
 * the endpoint's auth has client_cert and client_key.  The connection is
 * made to an address the policy allowed, as for amqp://, so the name is
 * checked by OpenSSL from the context's verification parameters and not
 * by librabbitmq, which would check the address it was given.
 *
 * A message is persistent (delivery_mode 2), published with mandatory
 * set; its message_id is the event id, its type the event type, its
 * timestamp the emit time, its content type that of the body in the
 * endpoint's format, and its headers carry type, key (when the event has
 * one), timestamp (RFC 3339), in CloudEvents binary mode the attributes
 * as cloudEvents_* and the event's own headers.  The channel is
 * in confirm mode: a basic.ack is the outcome (recorded as status 200,
 * with the delivery tag as the response, as the Kafka target does); a
 * message the broker could not route comes back first (basic.return) and
 * is a dead letter with the broker's reason ("312 NO_ROUTE"); a channel
 * closed for a missing exchange or refused access (404, 403) makes the
 * messages it had dead letters with the broker's reason; a basic.nack, a
 * lost connection, a connection that cannot be made and a confirm that
 * does not come within the endpoint's timeout are transport errors, tried
 * again on the schedule.
 *
 * Threads.  librabbitmq is synchronous: logging in is a series of round
 * trips, and a publish writes until the socket took it all.  So that the
 * relay never waits on a broker, each RabbitMQ endpoint has a publisher
 * thread that owns its connection; the relay's thread and it share only
 * the Publisher's lists, under its mutex.  The relay hands it messages
 * (inbox, and a byte on the publisher's pipe); the thread connects (one
 * attempt a second at most, each bounded by the endpoint's timeout, 10 s at
 * most: TCP connect, handshake and each RPC), publishes, reads confirms as
 * they arrive (poll() on the connection's socket and its pipe), and moves
 * each finished message to the done list, writing a byte to one pipe that
 * the relay's wait watches (target_wake_pipe).  rabbitmq_poll() then fills
 * the deliveries' results in the relay's thread.  The threads never call
 * into PostgreSQL (no palloc, no ereport): they use malloc'd messages,
 * librabbitmq, the resolver and the address policy (address.c, on the
 * publisher's copy of outbox.allowed_networks, one call at a time), and
 * are made with every signal blocked.  A publish blocks its thread, and
 * only it, while the broker does not read (a publishing connection the
 * broker blocked for a resource alarm is not published to until it is
 * unblocked); the relay's deliveries to that endpoint wait meanwhile.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "portability/instr_time.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "targets/address.h"
#include "targets/auth.h"
#include "targets/format.h"
#include "targets/rabbitmq.h"
#include "targets/target.h"

#define AMQP_CHANNEL			1
#define AMQPS_DEFAULT_PORT		5671
#define AMQP_CONNECT_MAX_MS		10000	/* connect, log in, open: each step */
#define AMQP_RECONNECT_MS		1000	/* between two connection attempts */
#define AMQP_ERROR_LEN			256

/*
 * A publisher with nothing in flight and no message for this long is
 * stopped (its endpoint may be gone); the next delivery makes another.
 */
#define PUBLISHER_IDLE_MS		(10 * 60 * 1000)

/*
 * One message, malloc'd in one piece by the relay, published by the
 * thread, its outcome filled by the thread, freed by the relay.
 */
typedef struct AmqpMessage
{
	struct AmqpMessage *next;
	TargetRequest *tr;				/* the relay's: the thread never touches it */
	instr_time	start;
	instr_time	end;
	uint64		deadline_ms;	/* monotonic: no confirm by then, give up */
	/* what is published: pointers into the same allocation */
	char	   *routing_key;
	char	   *body;
	size_t		body_len;
	char	   *message_id;
	char	   *type;
	const char *content_type;	/* static */
	amqp_table_entry_t *headers;
	int			n_headers;
	int64		timestamp;		/* seconds since 1970 */
	/* the thread's */
	uint64		tag;			/* delivery tag, once published */
	bool		returned;		/* came back unroutable */
	/* the outcome */
	bool		ok;
	bool		rejected;
	char		error[AMQP_ERROR_LEN];
} AmqpMessage;

/* A list of messages, in order. */
typedef struct MessageList
{
	AmqpMessage *head;
	AmqpMessage *tail;
} MessageList;

/* One endpoint's publisher and its thread. */
typedef struct Publisher
{
	/* the relay's; read by the thread, never written once it runs */
	int			endpoint_id;
	char	   *url;			/* as it was made from (palloc'd) */
	long		timeout_ms;
	RabbitUrl	parsed;
	bool		key_has_type;
	NetworkList allowed;		/* the address policy it was made under */
	char	   *username;		/* the login; NULL: guest (palloc'd) */
	char	   *password;
	char	   *client_cert;	/* amqps: presented when set (palloc'd) */
	char	   *client_key;
	char	   *ca_file;		/* outbox.ca_file it was made under; "": none */
	int			wake[2];		/* relay -> thread */
	pthread_t	thread;
	int			in_flight;		/* handed to the thread, not collected */
	TimestampTz used_at;		/* its last message was handed over */
	bool		retired;		/* takes no more; stopped once empty */
	struct Publisher *next;

	/* shared, under lock */
	pthread_mutex_t lock;
	MessageList inbox;			/* to publish */
	MessageList done;			/* outcome known */
	bool		stop;			/* the thread is to end */
	bool		exited;			/* it did */
} Publisher;

static Publisher *publishers = NULL;

/* Deliveries whose outcome was collected, for rabbitmq_next_done(). */
static TargetRequest **done = NULL;
static int	n_done = 0;
static int	done_next = 0;
static int	done_room = 0;

/* The pipe every publisher thread wakes the relay through. */
static int	relay_wake[2] = {-1, -1};
static bool woke_self = false;	/* relay_wake_self() wrote to it */

/* Serializes the threads' calls of address_refusal (a static buffer). */
static pthread_mutex_t refusal_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------------
 * The URL
 * ---------------------------------------------------------------------
 */

static bool
unreserved(char c)
{
	return isalnum((unsigned char) c) || c == '-' || c == '.' || c == '_' || c == '~';
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * Percent-decode len bytes of s into out (AMQP_NAME_MAX + 1 bytes).
 * Unreserved characters, the extra ones allowed and %XX escapes of
 * printable ASCII are accepted; false otherwise, or when too long.
 */
static bool
decode(const char *s, size_t len, const char *extra, char *out)
{
	size_t		n = 0;

	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (c == '%')
		{
			int			hi,
						lo;

			if (i + 2 >= len)
				return false;
			hi = hex_value(s[i + 1]);
			lo = hex_value(s[i + 2]);
			if (hi < 0 || lo < 0)
				return false;
			c = (char) (hi * 16 + lo);
			if (c < 0x20 || c == 0x7f)
				return false;
			i += 2;
		}
		else if (!unreserved(c) && strchr(extra, c) == NULL)
			return false;
		if (n >= AMQP_NAME_MAX)
			return false;
		out[n++] = c;
	}
	out[n] = '\0';
	return true;
}

/*
 * Parse an amqp:// URL into out.  False, with the reason (a full sentence)
 * in *problem, when it is not one the target can use.  No allocation: the
 * relay calls it too.
 */
bool
rabbitmq_parse_url(const char *url, RabbitUrl *out, const char **problem)
{
	const char *p;
	const char *end;
	const char *query;
	size_t		len;
	bool		have_exchange = false;
	bool		have_key = false;

	memset(out, 0, sizeof(*out));
	out->port = AMQP_DEFAULT_PORT;
	strlcpy(out->vhost, "/", sizeof(out->vhost));
	strlcpy(out->routing_key, AMQP_EVENT_TYPE, sizeof(out->routing_key));
	if (pg_strncasecmp(url, "amqps://", 8) == 0)
	{
		out->tls = true;
		out->port = AMQPS_DEFAULT_PORT;
	}
	else if (pg_strncasecmp(url, "amqp://", 7) != 0)
	{
		*problem = "A RabbitMQ endpoint URL starts with \"amqp://\" or \"amqps://\".";
		return false;
	}
	if (strpbrk(url, "@#") != NULL)
	{
		*problem = "A RabbitMQ endpoint URL has no credentials and no fragment; credentials are never taken from the URL.";
		return false;
	}

	/* host[:port] */
	p = url + (out->tls ? 8 : 7);
	end = p + strcspn(p, "/?");
	if (*p == '[')
	{
		const char *close = memchr(p, ']', end - p);

		if (close == NULL || close == p + 1 || close - p - 1 >= (long) sizeof(out->host))
		{
			*problem = "The host is a name, an IPv4 address or [an IPv6 address].";
			return false;
		}
		for (const char *c = p + 1; c < close; c++)
			if (!(isxdigit((unsigned char) *c) || *c == ':' || *c == '.'))
			{
				*problem = "The host is a name, an IPv4 address or [an IPv6 address].";
				return false;
			}
		memcpy(out->host, p + 1, close - p - 1);
		p = close + 1;
	}
	else
	{
		len = strcspn(p, ":/?");
		if (len == 0 || len >= sizeof(out->host))
		{
			*problem = "A RabbitMQ endpoint URL is amqp://host[:port][/VHOST]?exchange=NAME[&routing_key=KEY].";
			return false;
		}
		for (size_t i = 0; i < len; i++)
			if (!(isalnum((unsigned char) p[i]) || p[i] == '.' || p[i] == '-'))
			{
				*problem = "The host is a name, an IPv4 address or [an IPv6 address].";
				return false;
			}
		memcpy(out->host, p, len);
		p += len;
	}
	if (p < end)
	{
		long		n = 0;

		if (*p != ':' || end - p < 2 || end - p > 6)
		{
			*problem = "The port is 1 to 65535.";
			return false;
		}
		for (p++; p < end; p++)
		{
			if (!isdigit((unsigned char) *p))
			{
				*problem = "The port is 1 to 65535.";
				return false;
			}
			n = n * 10 + (*p - '0');
		}
		if (n < 1 || n > 65535)
		{
			*problem = "The port is 1 to 65535.";
			return false;
		}
		out->port = (int) n;
	}

	/* /VHOST, percent-encoded; none or empty: "/" */
	query = strchr(p, '?');
	if (*p == '/')
	{
		p++;
		len = query != NULL ? (size_t) (query - p) : strlen(p);
		if (len > 0 && !decode(p, len, "", out->vhost))
		{
			*problem = "The virtual host is percent-encoded (\"/\" is %2F), printable and at most 255 bytes.";
			return false;
		}
	}
	if (query == NULL)
	{
		*problem = "A RabbitMQ endpoint URL names its exchange: ?exchange=NAME (\"exchange=\" alone for the default exchange).";
		return false;
	}

	/* exchange=NAME, routing_key=KEY, separated by "&", each once */
	for (p = query + 1; p != NULL;)
	{
		const char *amp = strchr(p, '&');
		size_t		opt_len = amp != NULL ? (size_t) (amp - p) : strlen(p);

		if (opt_len >= 9 && strncmp(p, "exchange=", 9) == 0 && !have_exchange)
		{
			if (!decode(p + 9, opt_len - 9, "", out->exchange) ||
				strspn(out->exchange,
					   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") !=
				strlen(out->exchange))
			{
				*problem = "An exchange name has letters, digits, \"-\", \"_\", \".\" and \":\", at most 255.";
				return false;
			}
			have_exchange = true;
		}
		else if (opt_len > 12 && strncmp(p, "routing_key=", 12) == 0 && !have_key)
		{
			if (!decode(p + 12, opt_len - 12, "{}*:", out->routing_key))
			{
				*problem = "A routing key is percent-encoded, printable and at most 255 bytes; it may contain {event_type}.";
				return false;
			}
			have_key = true;
		}
		else
		{
			*problem = "The options are exchange=NAME and routing_key=KEY, each once, separated by \"&\".";
			return false;
		}
		p = amp != NULL ? amp + 1 : NULL;
	}
	if (!have_exchange)
	{
		*problem = "A RabbitMQ endpoint URL names its exchange: ?exchange=NAME (\"exchange=\" alone for the default exchange).";
		return false;
	}
	return true;
}

/* ---------------------------------------------------------------------
 * The publisher thread: no PostgreSQL in here
 * ---------------------------------------------------------------------
 */

static uint64
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
list_append(MessageList *l, AmqpMessage *m)
{
	m->next = NULL;
	if (l->tail != NULL)
		l->tail->next = m;
	else
		l->head = m;
	l->tail = m;
}

static AmqpMessage *
list_pop(MessageList *l)
{
	AmqpMessage *m = l->head;

	if (m != NULL)
	{
		l->head = m->next;
		if (l->head == NULL)
			l->tail = NULL;
		m->next = NULL;
	}
	return m;
}

/* What the thread has: the connection and the messages it owns. */
typedef struct PublisherState
{
	Publisher  *p;
	amqp_connection_state_t conn;	/* NULL: none */
	bool		blocked;		/* connection.blocked: publish nothing */
	uint64		next_tag;
	uint64		next_connect_ms;
	MessageList pending;		/* taken from the inbox, not yet published */
	MessageList unconfirmed;	/* published, by delivery tag */
	MessageList finished;		/* to hand back */
} PublisherState;

/* A message's outcome is known: it goes back to the relay. */
static void
message_finish(PublisherState *s, AmqpMessage *m, bool ok, bool rejected, const char *fmt,...)
	pg_attribute_printf(5, 6);

static void
message_finish(PublisherState *s, AmqpMessage *m, bool ok, bool rejected, const char *fmt,...)
{
	va_list		args;

	m->ok = ok;
	m->rejected = rejected;
	va_start(args, fmt);
	vsnprintf(m->error, sizeof(m->error), fmt, args);
	va_end(args);
	INSTR_TIME_SET_CURRENT(m->end);
	list_append(&s->finished, m);
}

/* Every message of a list fails alike: not sent, or sent with no answer. */
static void
fail_all(PublisherState *s, MessageList *l, bool rejected, const char *why)
{
	AmqpMessage *m;

	while ((m = list_pop(l)) != NULL)
		message_finish(s, m, false, rejected, "%s", why);
}

/* Close the connection; what waited for a confirm fails with why. */
static void
disconnect(PublisherState *s, bool rejected, const char *why)
{
	if (s->conn != NULL)
	{
		amqp_destroy_connection(s->conn);
		s->conn = NULL;
	}
	s->blocked = false;
	fail_all(s, &s->unconfirmed, rejected, why);
}

/* librabbitmq's reply as text. */
static void
reply_text(amqp_rpc_reply_t r, const char *what, char *out, size_t len)
{
	if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
		snprintf(out, len, "RabbitMQ: %s: %s", what, amqp_error_string2(r.library_error));
	else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
			 r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
	{
		amqp_connection_close_t *c = r.reply.decoded;

		snprintf(out, len, "RabbitMQ: %s: the broker closed the connection: %d %.*s", what,
				 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
	}
	else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
			 r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
	{
		amqp_channel_close_t *c = r.reply.decoded;

		snprintf(out, len, "RabbitMQ: %s: the broker closed the channel: %d %.*s", what,
				 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
	}
	else
		snprintf(out, len, "RabbitMQ: %s failed", what);
}

/*
 * A TLS socket on conn for p (amqps://): the broker verified against
 * outbox.ca_file (or the system's store) and the URL's host, p's client
 * certificate presented if it has one.  NULL, with why, on failure; the
 * socket belongs to conn.
 */
static amqp_socket_t *
tls_socket_new(amqp_connection_state_t conn, const Publisher *p, char *why, size_t why_len)
{
	amqp_socket_t *sock = amqp_ssl_socket_new(conn);
	SSL_CTX    *ctx;
	X509_VERIFY_PARAM *param;
	unsigned char ip[16];
	bool		is_ip;

	if (sock == NULL)
	{
		snprintf(why, why_len, "RabbitMQ: could not make a TLS socket");
		return NULL;
	}
	amqp_ssl_socket_set_verify_peer(sock, 1);
	/* librabbitmq would check the address connected to: OpenSSL checks the name */
	amqp_ssl_socket_set_verify_hostname(sock, 0);
	ctx = amqp_ssl_socket_get_context(sock);
	param = SSL_CTX_get0_param(ctx);
	is_ip = inet_pton(AF_INET, p->parsed.host, ip) == 1 || inet_pton(AF_INET6, p->parsed.host, ip) == 1;
	if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, p->parsed.host) :
		 X509_VERIFY_PARAM_set1_host(param, p->parsed.host, 0)) != 1)
	{
		snprintf(why, why_len, "RabbitMQ: could not set the host \"%s\" to verify", p->parsed.host);
		return NULL;
	}
	if (p->ca_file[0] != '\0')
	{
		if (amqp_ssl_socket_set_cacert(sock, p->ca_file) != AMQP_STATUS_OK)
		{
			snprintf(why, why_len, "RabbitMQ: could not read outbox.ca_file \"%s\"", p->ca_file);
			return NULL;
		}
	}
	else if (SSL_CTX_set_default_verify_paths(ctx) != 1)
	{
		snprintf(why, why_len, "RabbitMQ: could not load the system's CA certificates");
		return NULL;
	}
	if (p->client_cert != NULL &&
		amqp_ssl_socket_set_key(sock, p->client_cert, p->client_key) != AMQP_STATUS_OK)
	{
		snprintf(why, why_len, "RabbitMQ: could not read the client certificate \"%s\" or its key",
				 p->client_cert);
		return NULL;
	}
	return sock;
}

/*
 * Connect, log in, open the channel in confirm mode; false, with why, if
 * that fails.  Each address the host resolves to is judged by the address
 * policy before it is connected to.  Every step is bounded in time.
 */
static bool
connect_broker(PublisherState *s, char *why, size_t why_len)
{
	Publisher  *p = s->p;
	struct addrinfo hints = {0};
	struct addrinfo *res = NULL;
	char		port[8];
	long		step_ms = Min(Max(p->timeout_ms, 1), AMQP_CONNECT_MAX_MS);
	struct timeval tv = {step_ms / 1000, (step_ms % 1000) * 1000};
	int			rc;
	bool		connected = false;
	amqp_rpc_reply_t r;

	snprintf(port, sizeof(port), "%d", p->parsed.port);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(p->parsed.host, port, &hints, &res);
	if (rc != 0)
	{
		snprintf(why, why_len, "RabbitMQ: could not resolve host \"%s\": %s",
				 p->parsed.host, gai_strerror(rc));
		return false;
	}
	snprintf(why, why_len, "RabbitMQ: host \"%s\" has no address", p->parsed.host);
	for (struct addrinfo *a = res; a != NULL && !connected; a = a->ai_next)
	{
		char		numeric[NI_MAXHOST];
		const char *refused;
		amqp_socket_t *sock;

		if (getnameinfo(a->ai_addr, a->ai_addrlen, numeric, sizeof(numeric),
						NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		pthread_mutex_lock(&refusal_lock);
		refused = address_refusal(a->ai_addr, &p->allowed);
		if (refused != NULL)
			snprintf(why, why_len,
					 "refused to connect to RabbitMQ at %s (%s), %s; outbox.allowed_networks can allow it",
					 p->parsed.host, numeric, refused);
		pthread_mutex_unlock(&refusal_lock);
		if (refused != NULL)
			continue;

		s->conn = amqp_new_connection();
		sock = s->conn == NULL ? NULL : p->parsed.tls ? tls_socket_new(s->conn, p, why, why_len) :
			amqp_tcp_socket_new(s->conn);
		if (sock == NULL)
		{
			if (s->conn == NULL || !p->parsed.tls)
				snprintf(why, why_len, "RabbitMQ: out of memory");
			if (s->conn != NULL)
				amqp_destroy_connection(s->conn);
			s->conn = NULL;
			break;
		}
		rc = amqp_socket_open_noblock(sock, numeric, p->parsed.port, &tv);
		if (rc != AMQP_STATUS_OK)
		{
			/* (librabbitmq keeps no errno worth reporting here) */
			snprintf(why, why_len, "RabbitMQ: could not connect to %s port %d%s: %s",
					 numeric, p->parsed.port, p->parsed.tls ? " over TLS" : "",
					 amqp_error_string2(rc));
			amqp_destroy_connection(s->conn);
			s->conn = NULL;
			continue;
		}
		connected = true;
	}
	freeaddrinfo(res);
	if (!connected)
	{
		if (s->conn != NULL)
		{
			amqp_destroy_connection(s->conn);
			s->conn = NULL;
		}
		return false;
	}

	amqp_set_handshake_timeout(s->conn, &tv);
	amqp_set_rpc_timeout(s->conn, &tv);
	r = amqp_login(s->conn, p->parsed.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, 0,
				   AMQP_SASL_METHOD_PLAIN,
				   p->username != NULL ? p->username : "guest",
				   p->password != NULL ? p->password : "guest");
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		/*
		 * A refused login: RabbitMQ closes with 403 ACCESS_REFUSED (said
		 * as an authentication failure, as the webhook target says its
		 * own), or (older brokers) just closes the socket, which
		 * librabbitmq reports as a lost connection.
		 */
		char		text[AMQP_ERROR_LEN];
		bool		refused = r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
			r.reply.id == AMQP_CONNECTION_CLOSE_METHOD &&
			((amqp_connection_close_t *) r.reply.decoded)->reply_code == AMQP_ACCESS_REFUSED;

		reply_text(r, p->username != NULL ? "logging in as the endpoint's user" :
				   "logging in as guest", text, sizeof(text));
		snprintf(why, why_len, "%s%s", refused ? "authentication failed: " : "", text);
		goto fail;
	}
	amqp_channel_open(s->conn, AMQP_CHANNEL);
	r = amqp_get_rpc_reply(s->conn);
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		reply_text(r, "opening a channel", why, why_len);
		goto fail;
	}
	amqp_confirm_select(s->conn, AMQP_CHANNEL);
	r = amqp_get_rpc_reply(s->conn);
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
	{
		reply_text(r, "selecting publisher confirms", why, why_len);
		goto fail;
	}
	amqp_maybe_release_buffers(s->conn);
	s->next_tag = 1;
	s->blocked = false;
	return true;

fail:
	amqp_destroy_connection(s->conn);
	s->conn = NULL;
	return false;
}

/* The routing key of a message: the template with {event_type} filled in. */
static size_t
routing_key_of(const Publisher *p, const char *type, char *out)
{
	const char *t = p->parsed.routing_key;
	size_t		n = 0;

	while (*t && n < AMQP_NAME_MAX)
	{
		if (p->key_has_type && strncmp(t, AMQP_EVENT_TYPE, strlen(AMQP_EVENT_TYPE)) == 0)
		{
			for (const char *c = type; *c && n < AMQP_NAME_MAX; c++)
				out[n++] = *c;
			t += strlen(AMQP_EVENT_TYPE);
		}
		else
			out[n++] = *t++;
	}
	out[n] = '\0';
	return n;
}

/* Publish one message; false when the connection failed. */
static bool
publish(PublisherState *s, AmqpMessage *m, char *why, size_t why_len)
{
	Publisher  *p = s->p;
	amqp_basic_properties_t props;
	int			rc;

	memset(&props, 0, sizeof(props));
	props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
		AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TYPE_FLAG |
		AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_APP_ID_FLAG;
	props.content_type = amqp_cstring_bytes(m->content_type);
	props.delivery_mode = 2;	/* persistent */
	props.message_id = amqp_cstring_bytes(m->message_id);
	props.type = amqp_cstring_bytes(m->type);
	props.timestamp = (uint64_t) m->timestamp;
	props.app_id = amqp_cstring_bytes("outbox");
	props.headers.num_entries = m->n_headers;
	props.headers.entries = m->headers;

	rc = amqp_basic_publish(s->conn, AMQP_CHANNEL,
							amqp_cstring_bytes(p->parsed.exchange),
							amqp_cstring_bytes(m->routing_key),
							1, 0, &props,
							(amqp_bytes_t) {m->body_len, m->body});
	if (rc != AMQP_STATUS_OK)
	{
		snprintf(why, why_len, "RabbitMQ: publishing failed: %s", amqp_error_string2(rc));
		return false;
	}
	m->tag = s->next_tag++;
	list_append(&s->unconfirmed, m);
	return true;
}

/* Acknowledged or refused: tag, or every tag up to it when multiple. */
static void
confirm(PublisherState *s, uint64 tag, bool multiple, bool ack)
{
	AmqpMessage **link = &s->unconfirmed.head;
	AmqpMessage *prev = NULL;

	while (*link != NULL)
	{
		AmqpMessage *m = *link;

		if (m->tag > tag || (!multiple && m->tag != tag))
		{
			if (m->tag > tag)
				break;
			prev = m;
			link = &m->next;
			continue;
		}
		*link = m->next;
		if (s->unconfirmed.tail == m)
			s->unconfirmed.tail = prev;
		if (!ack)
			message_finish(s, m, false, false, "RabbitMQ refused the message (basic.nack)");
		else if (m->returned)
		{
			char		reason[AMQP_ERROR_LEN];

			strlcpy(reason, m->error, sizeof(reason));
			message_finish(s, m, false, true, "%s", reason);
		}
		else
			message_finish(s, m, true, false, "%s", "");
	}
}

/*
 * A basic.return: its content (a header frame, then the body) follows;
 * the unconfirmed message of that message_id is marked with the reason.
 * False when the connection failed.
 */
static bool
returned(PublisherState *s, amqp_basic_return_t *ret, char *why, size_t why_len)
{
	char		reason[AMQP_ERROR_LEN];
	amqp_frame_t frame;
	struct timeval tv = {AMQP_CONNECT_MAX_MS / 1000, 0};
	uint64		body_left = 0;
	char		id[128] = "";
	int			rc;

	snprintf(reason, sizeof(reason),
			 "RabbitMQ returned the message as unroutable: %d %.*s (exchange \"%.*s\", routing key \"%.*s\")",
			 ret->reply_code, (int) ret->reply_text.len, (char *) ret->reply_text.bytes,
			 (int) ret->exchange.len, (char *) ret->exchange.bytes,
			 (int) ret->routing_key.len, (char *) ret->routing_key.bytes);
	rc = amqp_simple_wait_frame_noblock(s->conn, &frame, &tv);
	if (rc != AMQP_STATUS_OK || frame.frame_type != AMQP_FRAME_HEADER)
	{
		snprintf(why, why_len, "RabbitMQ: reading a returned message: %s",
				 rc != AMQP_STATUS_OK ? amqp_error_string2(rc) : "no content header");
		return false;
	}
	{
		amqp_basic_properties_t *props = frame.payload.properties.decoded;

		body_left = frame.payload.properties.body_size;
		if (props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
			snprintf(id, sizeof(id), "%.*s", (int) props->message_id.len,
					 (char *) props->message_id.bytes);
	}
	while (body_left > 0)
	{
		rc = amqp_simple_wait_frame_noblock(s->conn, &frame, &tv);
		if (rc != AMQP_STATUS_OK || frame.frame_type != AMQP_FRAME_BODY)
		{
			snprintf(why, why_len, "RabbitMQ: reading a returned message: %s",
					 rc != AMQP_STATUS_OK ? amqp_error_string2(rc) : "no body");
			return false;
		}
		body_left -= Min(body_left, frame.payload.body_fragment.len);
	}
	for (AmqpMessage *m = s->unconfirmed.head; m != NULL; m = m->next)
		if (!m->returned && strcmp(m->message_id, id) == 0)
		{
			m->returned = true;
			strlcpy(m->error, reason, sizeof(m->error));
			break;
		}
	return true;
}

/*
 * Read what the broker sent, without waiting: confirms, returns, closes,
 * flow control.  False when the connection is gone (already closed here).
 */
static bool
read_frames(PublisherState *s)
{
	struct timeval zero = {0, 0};
	char		why[AMQP_ERROR_LEN];

	for (;;)
	{
		amqp_frame_t frame;
		int			rc = amqp_simple_wait_frame_noblock(s->conn, &frame, &zero);

		if (rc == AMQP_STATUS_TIMEOUT)
			break;
		if (rc != AMQP_STATUS_OK)
		{
			snprintf(why, sizeof(why), "RabbitMQ: the connection failed: %s", amqp_error_string2(rc));
			disconnect(s, false, why);
			return false;
		}
		if (frame.frame_type != AMQP_FRAME_METHOD)
			continue;
		switch (frame.payload.method.id)
		{
			case AMQP_BASIC_ACK_METHOD:
				{
					amqp_basic_ack_t *a = frame.payload.method.decoded;

					confirm(s, a->delivery_tag, a->multiple, true);
					break;
				}
			case AMQP_BASIC_NACK_METHOD:
				{
					amqp_basic_nack_t *n = frame.payload.method.decoded;

					confirm(s, n->delivery_tag, n->multiple, false);
					break;
				}
			case AMQP_BASIC_RETURN_METHOD:
				if (!returned(s, frame.payload.method.decoded, why, sizeof(why)))
				{
					disconnect(s, false, why);
					return false;
				}
				break;
			case AMQP_CONNECTION_BLOCKED_METHOD:
				s->blocked = true;
				break;
			case AMQP_CONNECTION_UNBLOCKED_METHOD:
				s->blocked = false;
				break;
			case AMQP_CHANNEL_CLOSE_METHOD:
				{
					amqp_channel_close_t *c = frame.payload.method.decoded;

					/* no such exchange, access refused: so for every message */
					snprintf(why, sizeof(why), "RabbitMQ closed the channel: %d %.*s",
							 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
					disconnect(s, c->reply_code == 404 || c->reply_code == 403, why);
					return false;
				}
			case AMQP_CONNECTION_CLOSE_METHOD:
				{
					amqp_connection_close_t *c = frame.payload.method.decoded;

					snprintf(why, sizeof(why), "RabbitMQ closed the connection: %d %.*s",
							 c->reply_code, (int) c->reply_text.len, (char *) c->reply_text.bytes);
					disconnect(s, false, why);
					return false;
				}
			default:
				break;
		}
	}
	amqp_maybe_release_buffers(s->conn);
	return true;
}

/* Hand the finished messages to the relay, and wake it. */
static void
hand_back(PublisherState *s)
{
	Publisher  *p = s->p;
	AmqpMessage *m;
	char		c = 1;

	if (s->finished.head == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	while ((m = list_pop(&s->finished)) != NULL)
		list_append(&p->done, m);
	pthread_mutex_unlock(&p->lock);
	/* A full pipe already wakes the relay. */
	if (write(relay_wake[1], &c, 1) < 0)
		return;
}

/* The publisher thread: connect, publish, read confirms, until stopped. */
static void *
publisher_main(void *arg)
{
	PublisherState st = {0};
	PublisherState *s = &st;
	Publisher  *p = (Publisher *) arg;
	char		why[AMQP_ERROR_LEN] = "";

	s->p = p;
	for (;;)
	{
		struct pollfd fds[2];
		int			nfds = 1;
		uint64		now;
		long		wait_ms = 1000;
		AmqpMessage *m;
		bool		stop;

		pthread_mutex_lock(&p->lock);
		stop = p->stop;
		while ((m = list_pop(&p->inbox)) != NULL)
			list_append(&s->pending, m);
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;

		now = now_ms();
		if (s->conn == NULL && s->pending.head != NULL && now >= s->next_connect_ms)
		{
			s->next_connect_ms = now + AMQP_RECONNECT_MS;
			if (!connect_broker(s, why, sizeof(why)))
				fail_all(s, &s->pending, false, why);
			now = now_ms();
		}
		while (s->conn != NULL && !s->blocked && (m = list_pop(&s->pending)) != NULL)
		{
			if (!publish(s, m, why, sizeof(why)))
			{
				message_finish(s, m, false, false, "%s", why);
				disconnect(s, false, why);
			}
		}
		if (s->conn != NULL)
			(void) read_frames(s);

		/* No confirm in time: the connection is not to be trusted. */
		now = now_ms();
		if (s->unconfirmed.head != NULL && s->unconfirmed.head->deadline_ms <= now)
		{
			snprintf(why, sizeof(why), "RabbitMQ: no publisher confirm within %ld ms", p->timeout_ms);
			disconnect(s, false, why);
		}
		/* Waiting for a connection, or while blocked: not past the deadline. */
		while (s->pending.head != NULL && s->pending.head->deadline_ms <= now)
		{
			m = list_pop(&s->pending);
			message_finish(s, m, false, false, "%s",
						   s->blocked ? "RabbitMQ blocked the connection (a resource alarm) for longer than the timeout" :
						   why[0] ? why : "RabbitMQ: not connected within the timeout");
		}
		hand_back(s);

		/* Wait for the broker, the relay, the next deadline or reconnect. */
		fds[0].fd = p->wake[0];
		fds[0].events = POLLIN;
		if (s->conn != NULL)
		{
			if (amqp_frames_enqueued(s->conn) || amqp_data_in_buffer(s->conn))
				continue;
			fds[1].fd = amqp_get_sockfd(s->conn);
			fds[1].events = POLLIN;
			nfds = 2;
		}
		if (s->unconfirmed.head != NULL)
			wait_ms = Min(wait_ms, (long) (s->unconfirmed.head->deadline_ms - Min(now, s->unconfirmed.head->deadline_ms)));
		if (s->pending.head != NULL)
		{
			wait_ms = Min(wait_ms, (long) (s->pending.head->deadline_ms - Min(now, s->pending.head->deadline_ms)));
			if (s->conn == NULL)
				wait_ms = Min(wait_ms, (long) (s->next_connect_ms - Min(now, s->next_connect_ms)));
		}
		if (poll(fds, nfds, (int) wait_ms) > 0 && (fds[0].revents & POLLIN))
		{
			char		buf[64];

			while (read(p->wake[0], buf, sizeof(buf)) > 0)
				;
		}
	}
	if (s->conn != NULL)
		amqp_destroy_connection(s->conn);
	pthread_mutex_lock(&p->lock);
	p->exited = true;
	pthread_mutex_unlock(&p->lock);
	/* the relay frees the publisher at its next look */
	if (write(relay_wake[1], "1", 1) < 0)
		return NULL;
	return NULL;
}

/* ---------------------------------------------------------------------
 * Publishers, as the relay keeps them
 * ---------------------------------------------------------------------
 */

/* Wake a publisher's thread. */
static void
publisher_wake(Publisher *p)
{
	char		c = 1;

	if (write(p->wake[1], &c, 1) < 0)
		return;					/* full: it will wake anyway */
}

/* Free a publisher's login (the password wiped first) and TLS files. */
static void
publisher_forget_login(Publisher *p)
{
	if (p->client_cert != NULL)
		pfree(p->client_cert);
	if (p->client_key != NULL)
		pfree(p->client_key);
	if (p->ca_file != NULL)
		pfree(p->ca_file);
	p->client_cert = p->client_key = p->ca_file = NULL;
	auth_forget(p->password);
	auth_forget(p->username);
	p->username = p->password = NULL;
}

/* Are the publisher's login and client certificate those of ep's auth now? */
static bool
publisher_login_is(const Publisher *p, const TargetEndpoint *ep)
{
	const AuthConfig *a = ep->auth != NULL ? &ep->auth->cfg : NULL;

	return auth_same(p->username, a != NULL ? a->username : NULL) &&
		auth_same(p->password, a != NULL ? a->password : NULL) &&
		auth_same(p->client_cert, a != NULL ? a->client_cert : NULL) &&
		auth_same(p->client_key, a != NULL ? a->client_key : NULL);
}

/* Free what a publisher holds besides its thread (not running), and it. */
static void
publisher_release(Publisher *p)
{
	close(p->wake[0]);
	close(p->wake[1]);
	pthread_mutex_destroy(&p->lock);
	publisher_forget_login(p);
	pfree(p->url);
	pfree(p);
}

/* A new publisher for ep, its thread running; NULL, with why, if not. */
static Publisher *
publisher_new(const TargetEndpoint *ep, char *why, size_t why_len)
{
	Publisher  *p;
	const char *problem;
	sigset_t	all_signals;
	sigset_t	old_signals;
	int			rc;

	p = MemoryContextAllocZero(TopMemoryContext, sizeof(Publisher));
	if (!rabbitmq_parse_url(ep->url, &p->parsed, &problem))
	{
		strlcpy(why, problem, why_len);
		pfree(p);
		return NULL;
	}
	if (pipe(p->wake) != 0)
	{
		snprintf(why, why_len, "could not create a pipe: %m");
		pfree(p);
		return NULL;
	}
	for (int i = 0; i < 2; i++)
	{
		(void) fcntl(p->wake[i], F_SETFL, O_NONBLOCK);
		(void) fcntl(p->wake[i], F_SETFD, FD_CLOEXEC);
	}
	p->endpoint_id = ep->id;
	p->url = MemoryContextStrdup(TopMemoryContext, ep->url);
	p->timeout_ms = Max(ep->timeout_ms, 1);
	p->key_has_type = strstr(p->parsed.routing_key, AMQP_EVENT_TYPE) != NULL;
	p->allowed = outbox_allowed_networks;
	if (ep->auth != NULL && ep->auth->cfg.username != NULL)
	{
		p->username = auth_keep(ep->auth->cfg.username);
		p->password = auth_keep(ep->auth->cfg.password);
	}
	if (ep->auth != NULL && ep->auth->cfg.client_cert != NULL)
	{
		p->client_cert = MemoryContextStrdup(TopMemoryContext, ep->auth->cfg.client_cert);
		p->client_key = MemoryContextStrdup(TopMemoryContext, ep->auth->cfg.client_key);
	}
	p->ca_file = MemoryContextStrdup(TopMemoryContext, outbox_ca_file != NULL ? outbox_ca_file : "");
	pthread_mutex_init(&p->lock, NULL);

	/* With every signal blocked, PostgreSQL's handlers run in the relay. */
	sigfillset(&all_signals);
	pthread_sigmask(SIG_SETMASK, &all_signals, &old_signals);
	rc = pthread_create(&p->thread, NULL, publisher_main, p);
	pthread_sigmask(SIG_SETMASK, &old_signals, NULL);
	if (rc != 0)
	{
		snprintf(why, why_len, "could not start a publisher thread: %s", strerror(rc));
		publisher_release(p);
		return NULL;
	}
	p->next = publishers;
	publishers = p;
	return p;
}

/* Free a publisher whose thread ended. */
static void
publisher_free(Publisher *p)
{
	Publisher **link;

	for (link = &publishers; *link != NULL; link = &(*link)->next)
		if (*link == p)
		{
			*link = p->next;
			break;
		}
	pthread_join(p->thread, NULL);
	publisher_release(p);
}

/*
 * The publisher of ep, made if need be; one made from another URL,
 * timeout or login is retired.  NULL, with why, when none can be made.
 */
static Publisher *
publisher_of(const TargetEndpoint *ep, char *why, size_t why_len)
{
	for (Publisher *p = publishers; p != NULL; p = p->next)
	{
		if (p->endpoint_id != ep->id || p->retired)
			continue;
		if (p->timeout_ms == Max(ep->timeout_ms, 1) && strcmp(p->url, ep->url) == 0 &&
			publisher_login_is(p, ep))
			return p;
		p->retired = true;
	}
	return publisher_new(ep, why, why_len);
}

/* ---------------------------------------------------------------------
 * The target
 * ---------------------------------------------------------------------
 */

static void
done_push(TargetRequest *tr)
{
	if (n_done >= done_room)
	{
		int			want = Max(64, done_room * 2);

		done = done == NULL ? MemoryContextAlloc(TopMemoryContext, sizeof(TargetRequest *) * want) :
			repalloc(done, sizeof(TargetRequest *) * want);
		done_room = want;
	}
	done[n_done++] = tr;
}

/* Wake the relay's own wait: a result is ready without a thread's byte. */
static void
relay_wake_self(void)
{
	char		c = 1;

	woke_self = true;
	if (write(relay_wake[1], &c, 1) < 0)
		return;
}

/* Copy len bytes of s to *at as a NUL-terminated string; advance *at. */
static char *
put(char **at, const char *s, size_t len)
{
	char	   *r = *at;

	memcpy(r, s, len);
	r[len] = '\0';
	*at += len + 1;
	return r;
}

/* A header entry of a UTF-8 string value. */
static void
header_set(amqp_table_entry_t *e, char *name, char *value)
{
	e->key = amqp_cstring_bytes(name);
	e->value.kind = AMQP_FIELD_KIND_UTF8;
	e->value.value.bytes = amqp_cstring_bytes(value);
}

/* A "Name: value" line's value, after the colon and spaces. */
static const char *
line_value(const char *line, size_t name_len)
{
	const char *value = line + name_len;

	if (*value == ':')
		value++;
	while (*value == ' ')
		value++;
	return value;
}

/*
 * The message of a delivery, malloc'd in one piece (the thread reads it
 * while the relay goes on), or NULL when out of memory.  The format's
 * header lines give the content type and, in CloudEvents binary mode, the
 * ce-* attributes, sent as cloudEvents_* headers (the CloudEvents AMQP
 * binding's names); the event's headers follow, but those the format sets.
 */
static AmqpMessage *
message_new(TargetRequest *tr, Publisher *p)
{
	const TargetEndpoint *ep = tr->endpoint;
	char		key[AMQP_NAME_MAX + 1];
	char		when[64];
	size_t		key_len = routing_key_of(p, tr->type, key);
	size_t		body_len = strlen(tr->body);
	size_t		type_len = strlen(tr->type);
	size_t		ekey_len = tr->key != NULL ? strlen(tr->key) : 0;
	EventParts	parts = {0};
	char	   *format_lines[OUTBOX_FORMAT_MAX_HEADERS];
	int			n_format;
	int			n_headers;
	size_t		size;
	AmqpMessage *m;
	char	   *at;
	int			h = 0;
	int64		secs;

	parts.event_id = &tr->event_id;
	parts.type = tr->type;
	parts.emitted_at = tr->emitted_at;
	parts.key = tr->key;
	n_format = outbox_format_headers(ep->format, &parts, format_lines);
	n_headers = 2 + (tr->key != NULL) + n_format + tr->n_event_headers;
	outbox_format_time(tr->emitted_at, when);
	secs = (int64) (timestamptz_to_time_t(tr->emitted_at));
	size = MAXALIGN(sizeof(AmqpMessage)) + MAXALIGN(sizeof(amqp_table_entry_t) * n_headers) +
		key_len + 1 + body_len + 1 + strlen(tr->event_id_str) + 1 + type_len + 1 +
		ekey_len + 1 + strlen(when) + 1 + sizeof("type") + sizeof("key") + sizeof("timestamp");
	for (int i = 0; i < n_format; i++)
		size += strlen(format_lines[i]) + sizeof("cloudEvents_") + 2;
	for (int i = 0; i < tr->n_event_headers; i++)
		size += strlen(tr->event_headers[i]) + 2;
	m = malloc(size);
	if (m == NULL)
	{
		for (int i = 1; i < n_format; i++)
			pfree(format_lines[i]);
		return NULL;
	}
	memset(m, 0, sizeof(AmqpMessage));
	m->headers = (amqp_table_entry_t *) ((char *) m + MAXALIGN(sizeof(AmqpMessage)));
	at = (char *) m->headers + MAXALIGN(sizeof(amqp_table_entry_t) * n_headers);
	m->tr = tr;
	m->routing_key = put(&at, key, key_len);
	m->body = put(&at, tr->body, body_len);
	m->body_len = body_len;
	m->message_id = put(&at, tr->event_id_str, strlen(tr->event_id_str));
	m->type = put(&at, tr->type, type_len);
	m->timestamp = secs;
	m->content_type = "application/json";
	header_set(&m->headers[h++], put(&at, "type", 4), m->type);
	header_set(&m->headers[h++], put(&at, "timestamp", 9), put(&at, when, strlen(when)));
	if (tr->key != NULL)
	{
		char	   *name = put(&at, "key", 3);

		header_set(&m->headers[h++], name, put(&at, tr->key, ekey_len));
	}
	for (int i = 0; i < n_format; i++)
	{
		const char *line = format_lines[i];
		size_t		name_len = strcspn(line, ":");
		const char *value = line_value(line, name_len);

		if (name_len == strlen("Content-Type") && pg_strncasecmp(line, "Content-Type", name_len) == 0)
			m->content_type = put(&at, value, strlen(value));
		else if (name_len > 3 && pg_strncasecmp(line, "ce-", 3) == 0)
		{
			char	   *name = at;

			memcpy(at, "cloudEvents_", 12);
			memcpy(at + 12, line + 3, name_len - 3);
			at[12 + name_len - 3] = '\0';
			at += 12 + name_len - 3 + 1;
			header_set(&m->headers[h++], name, put(&at, value, strlen(value)));
		}
		else
			header_set(&m->headers[h++], put(&at, line, name_len), put(&at, value, strlen(value)));
	}
	for (int i = 1; i < n_format; i++)
		pfree(format_lines[i]);	/* (the first, Content-Type, is static) */
	for (int i = 0; i < tr->n_event_headers; i++)
	{
		const char *line = tr->event_headers[i];
		size_t		name_len = strcspn(line, ":");

		if (outbox_format_sets_header(ep->format, line))
			continue;
		header_set(&m->headers[h++], put(&at, line, name_len),
				   put(&at, line_value(line, name_len), strlen(line_value(line, name_len))));
	}
	m->n_headers = h;
	return m;
}

/*
 * Hand one delivery's message to its endpoint's publisher thread.  What
 * cannot be handed over is finished at once, and the relay woken to
 * collect it.
 */
static void
rabbitmq_submit(TargetRequest *tr, int relay_in_flight)
{
	const TargetEndpoint *ep = tr->endpoint;
	char		why[256];
	Publisher  *p = publisher_of(ep, why, sizeof(why));
	AmqpMessage *m = p != NULL ? message_new(tr, p) : NULL;
	bool		was_empty;

	if (m == NULL)
	{
		tr->result->outcome = TARGET_RETRY;
		snprintf(tr->result->error, sizeof(tr->result->error), "RabbitMQ: %s",
				 p == NULL ? why : "out of memory");
		done_push(tr);
		relay_wake_self();
		return;
	}
	INSTR_TIME_SET_CURRENT(m->start);
	{
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		m->deadline_ms = (uint64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + p->timeout_ms;
	}
	p->in_flight++;
	p->used_at = GetCurrentTimestamp();
	pthread_mutex_lock(&p->lock);
	was_empty = p->inbox.head == NULL;
	list_append(&p->inbox, m);
	pthread_mutex_unlock(&p->lock);
	/* a non-empty inbox has woken the thread already, which then takes it all */
	if (was_empty)
		publisher_wake(p);
}

/* The next delivery whose outcome is known, or NULL. */
static TargetRequest *
rabbitmq_next_done(void)
{
	if (done_next < n_done)
		return done[done_next++];
	n_done = done_next = 0;
	return NULL;
}

/* A finished message's outcome into its delivery's result; frees it. */
static void
collect(AmqpMessage *m)
{
	TargetRequest *tr = m->tr;
	TargetResult *r = tr->result;

	INSTR_TIME_SUBTRACT(m->end, m->start);
	r->duration_ms = INSTR_TIME_GET_MILLISEC(m->end);
	r->bytes = m->body_len;
	if (m->ok)
	{
		r->outcome = TARGET_DELIVERED;
		r->response_len = snprintf(r->response, sizeof(r->response),
								   "confirmed, delivery tag " UINT64_FORMAT, m->tag);
	}
	else
	{
		r->outcome = m->rejected ? TARGET_DEAD_LETTER : TARGET_RETRY;
		strlcpy(r->error, m->error, sizeof(r->error));
	}
	free(m);
	done_push(tr);
}

/*
 * After a wait: empty the pipe, collect every publisher's finished
 * messages; stop the threads of retired publishers once empty (and retire
 * those unused for PUBLISHER_IDLE_MS), and free those whose thread ended.
 */
static void
rabbitmq_poll(void)
{
	char		buf[256];
	Publisher  *p;
	Publisher  *next;
	TimestampTz now;

	if (publishers == NULL && !woke_self)
		return;
	woke_self = false;
	while (read(relay_wake[0], buf, sizeof(buf)) > 0)
		;
	now = GetCurrentTimestamp();
	for (p = publishers; p != NULL; p = next)
	{
		MessageList got;
		AmqpMessage *m;
		bool		exited;

		next = p->next;
		pthread_mutex_lock(&p->lock);
		got = p->done;
		p->done.head = p->done.tail = NULL;
		exited = p->exited;
		pthread_mutex_unlock(&p->lock);
		while ((m = list_pop(&got)) != NULL)
		{
			p->in_flight--;
			collect(m);
		}
		if (p->in_flight == 0 && !p->retired &&
			TimestampDifferenceExceeds(p->used_at, now, PUBLISHER_IDLE_MS))
			p->retired = true;
		if (p->retired && p->in_flight == 0)
		{
			if (exited)
				publisher_free(p);
			else
			{
				pthread_mutex_lock(&p->lock);
				p->stop = true;
				pthread_mutex_unlock(&p->lock);
				publisher_wake(p);
			}
		}
	}
}

/*
 * At exit: nothing in flight is waited for; the threads are told to stop
 * and end with the process.  What was published may be confirmed or not;
 * the relay that comes next sends it again (the crash window).
 */
static void
rabbitmq_abandon_all(void)
{
	for (Publisher *p = publishers; p != NULL; p = p->next)
	{
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_mutex_unlock(&p->lock);
		publisher_wake(p);
	}
}

/* At the relay's start: the pipe, watched by the relay's wait. */
static void
rabbitmq_start(void)
{
	if (relay_wake[0] >= 0)
		return;
	target_wake_pipe(relay_wake);
}

/*
 * After a reload: publishers made under other allowed networks or another
 * outbox.ca_file retire.
 */
static void
rabbitmq_configure(void)
{
	for (Publisher *p = publishers; p != NULL; p = p->next)
		if (!address_networks_equal(&p->allowed, &outbox_allowed_networks) ||
			strcmp(p->ca_file, outbox_ca_file != NULL ? outbox_ca_file : "") != 0)
			p->retired = true;
}

/* TargetOps.check_url: a URL rabbitmq_parse_url reads, as written. */
static char *
rabbitmq_check_url(const char *url, const char **problem)
{
	RabbitUrl	parsed;

	return rabbitmq_parse_url(url, &parsed, problem) ? pstrdup(url) : NULL;
}

const TargetOps outbox_rabbitmq_target = {
	.name = "rabbitmq",
	.check_url = rabbitmq_check_url,
	.start = rabbitmq_start,
	.configure = rabbitmq_configure,
	.submit = rabbitmq_submit,
	.next_done = rabbitmq_next_done,
	.poll = rabbitmq_poll,
	.abandon_all = rabbitmq_abandon_all,
	.takes_slot = false,
};
