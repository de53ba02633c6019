/*-------------------------------------------------------------------------
 *
 * nats.c
 *	  The NATS JetStream target: a delivery as a message published to
 *	  JetStream with libnats, its publish acknowledgement as the result.
 *
 * An endpoint URL nats://host:port[,host:port]/SUBJECT names the servers
 * and the subject (tls://, the same, over TLS: the servers' certificates
 * verified against outbox.ca_file, or the system's bundle, and the one
 * host name the servers share; the endpoint's auth client_cert and
 * client_key presented); SUBJECT may contain {event_type}, which becomes the
 * event's type (its dots separate subject tokens, as NATS subjects do).
 * The message's data is the body in the endpoint's format; its headers
 * are Nats-Msg-Id (the event id: JetStream's duplicate window drops a copy
 * the relay sends again after a crash), webhook-id (the event id too),
 * type, key (when the event has one), timestamp (the emit time, RFC 3339),
 * the format's (Content-Type, and in CloudEvents binary mode the ce-*
 * attributes, as CloudEvents' NATS binding names them) and the event's
 * own headers, except those named Nats-* (JetStream reads those: an
 * application that may only emit must not set a message id or roll a
 * stream up), like one of the above, or set by the format.  Credentials
 * are never taken from the URL: the endpoint's auth gives a user and
 * password or a token (natsOptions_SetUserInfo, natsOptions_SetToken), and
 * a change of either makes a new connection.  A server that refuses them
 * ("Authorization Violation") leaves the connection unconnected until
 * libnats closes it: the publishes fail with that reason and are tried
 * again on the schedule, on a new connection.
 *
 * Each NATS endpoint has a connection of its own, made at its first
 * delivery, with a JetStream context, in a thread of its own
 * (connect_main): the relay's thread never waits on a name server or a
 * server.  The servers' names are resolved there, and every address is
 * checked against outbox.allowed_networks (address.c): libnats gets the
 * allowed addresses alone, and ignores the servers a cluster advertises,
 * so it connects to nothing else.  Deliveries submitted meanwhile wait on
 * the connection and go once it is made (or fail with why it was not);
 * those waiting longer than the endpoint's timeout fail.  The first
 * connection attempt is bounded by the endpoint's timeout (at most 2 s a
 * server); if no server answers, libnats goes on trying in its own
 * threads, for as long as the connection lives, and publishes wait in its
 * buffer meanwhile.  Why the
 * first attempt failed (a server's refusal of the credentials, say) is
 * kept for the attempt log: libnats, giving up after refusals, closes the
 * connection and keeps only "no server available".
 *
 * Publishing is asynchronous (js_PublishMsgAsync) with the endpoint's
 * timeout as the longest wait for an acknowledgement.  An acknowledgement
 * is delivered (status 200, the stream and sequence as the response, with
 * "duplicate" when the duplicate window dropped it); a refusal JetStream
 * will give again (the message is larger than the stream takes, the
 * stream is sealed), a message larger than the server's max_payload, or a
 * subject {event_type} makes longer than NATS_SUBJECT_SENT_MAX (never
 * sent) is rejected: a dead letter at once, with the reason; anything
 * else is a transport error, tried again on the schedule, with the reason
 * in the attempt log: no responders (no stream takes the subject, or the
 * stream's leader is being elected: the two look alike), a full stream
 * (discard new; room may come), no answer in time, a connection closed
 * for good (the next delivery makes a new one).
 *
 * Threads.  libnats runs threads of its own (reading, flushing, timers,
 * reconnecting, the acknowledgements' subscription); they never call into
 * PostgreSQL, and they are made with every signal blocked (started from
 * connect_main, which runs so, or under SIGNALS_OFF: a connection's first
 * publish), so that PostgreSQL's signal handlers run in
 * the relay's thread alone.  Of the callbacks of ours they run, two do
 * nothing (connected_cb, error_cb: the relay asks the connection when it
 * needs to know), and ack_cb moves an acknowledgement into a record taken
 * from a free list the relay filled beforehand (one per message in flight,
 * so it never allocates), queues it under a mutex, and, when the queue was
 * empty, writes a byte to a pipe the relay's wait watches
 * (target_wake_pipe).  nats_poll() takes the queued acknowledgements in the
 * relay's thread and matches each to its delivery by the message's
 * address.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>
#include <openssl/x509.h>

#include "lib/stringinfo.h"
#include "portability/instr_time.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "targets/address.h"
#include "targets/auth.h"
#include "targets/format.h"
#include "targets/nats.h"
#include "targets/target.h"

/* Block every signal around a libnats call that may start threads. */
#define SIGNALS_OFF(call) \
	do { \
		sigset_t	all_, old_; \
		sigfillset(&all_); \
		pthread_sigmask(SIG_SETMASK, &all_, &old_); \
		call; \
		pthread_sigmask(SIG_SETMASK, &old_, NULL); \
	} while (0)

/* One endpoint's connection. */
typedef struct NatsConn
{
	int			endpoint_id;
	char	   *url;			/* as it was made from */
	long		timeout_ms;
	NatsUrl		parsed;
	bool		subject_has_type;
	natsConnection *nc;			/* NULL: could not be made (why) */
	jsCtx	   *js;
	char		why[256];		/* why nc is NULL, or which address was left out */
	char		first_failure[192]; /* "; why the first attempt failed", or "" */
	TimestampTz made_at;
	TimestampTz used_at;		/* its last message was published */
	int			in_flight;		/* messages published, not yet answered */
	bool		published;		/* the acknowledgements' thread is started */
	bool		retired;		/* takes no more; destroyed once empty */
	/*
	 * Being made by connect_main in a thread of its own: until the relay
	 * sees connect_done (set under ack_lock), the thread owns nc, js, why
	 * and first_failure, and deliveries wait in waiting[].
	 */
	bool		connecting;
	bool		connect_done;
	TargetRequest **waiting;
	int			n_waiting;
	int			waiting_room;
	NetworkList allowed;		/* the address policy it was made under */
	char	   *username;		/* the endpoint's auth, when it has one */
	char	   *password;
	char	   *token;
	char	   *client_cert;	/* tls://: presented when set */
	char	   *client_key;
	char	   *ca_file;		/* outbox.ca_file it was made under */
	struct NatsConn *next;
} NatsConn;

/* A message on its way, by its address (the key). */
typedef struct NatsInFlight
{
	natsMsg    *msg;
	TargetRequest *tr;
	NatsConn   *conn;
	instr_time	start;
} NatsInFlight;

/*
 * An answer, as ack_cb leaves it for the relay.  The relay puts one on the
 * free list before each publish; ack_cb fills one and queues it.
 */
typedef struct NatsAck
{
	natsMsg    *msg;
	bool		ok;
	bool		duplicate;
	uint64		seq;
	char		stream[64];
	natsStatus	status;
	int			err_code;		/* JetStream's err_code, 0: none */
	char		text[200];
	struct NatsAck *next;
} NatsAck;

static NatsConn *conns = NULL;
static HTAB *in_flight = NULL;
static int	nats_in_flight = 0;

/* Guards the two lists below, shared with ack_cb. */
static pthread_mutex_t ack_lock = PTHREAD_MUTEX_INITIALIZER;
static NatsAck *ack_free = NULL;
static NatsAck *ack_ready = NULL;	/* newest first */
static int	ack_records = 0;	/* made, free or queued (the relay's count) */

/* The pipe ack_cb wakes the relay through. */
static int	wake_pipe[2] = {-1, -1};

/*
 * A connection with nothing in flight and no message for this long is
 * destroyed (its endpoint may be gone); the next delivery makes another.
 */
#define CONN_IDLE_MS	(10 * 60 * 1000)

/* Deliveries whose outcome is known, for nats_next_done(). */
static TargetRequest **done = NULL;
static int	n_done = 0;
static int	done_next = 0;
static int	done_room = 0;

/* ---------------------------------------------------------------------
 * The URL
 * ---------------------------------------------------------------------
 */

static bool
subject_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || c == '_' || c == '-';
}


/*
 * Parse a nats:// URL into out.  False, with the reason (a full sentence)
 * in *problem, when it is not one the target can use.  No allocation: the
 * relay calls it too.
 */
bool
nats_parse_url(const char *url, NatsUrl *out, const char **problem)
{
	const char *p;
	const char *slash;
	size_t		len;
	char		host[256];
	int			port;
	bool		token_empty = true;

	memset(out, 0, sizeof(*out));
	if (pg_strncasecmp(url, "tls://", 6) == 0)
	{
		out->tls = true;
		p = url + 6;
	}
	else if (pg_strncasecmp(url, "nats://", 7) == 0)
		p = url + 7;
	else
	{
		*problem = "A NATS endpoint URL starts with \"nats://\" (or \"tls://\").";
		return false;
	}
	if (strpbrk(url, "@#?") != NULL)
	{
		*problem = "A NATS endpoint URL has no credentials, options or fragment; credentials are never taken from the URL.";
		return false;
	}
	slash = strchr(p, '/');
	if (slash == NULL || slash == p)
	{
		*problem = "A NATS endpoint URL is nats://host:port[,host:port]/SUBJECT.";
		return false;
	}
	len = slash - p;
	for (const char *s = p; s < slash;)
	{
		const char *comma = memchr(s, ',', slash - s);
		const char *end = comma != NULL ? comma : slash;

		port = NATS_DEFAULT_PORT;
		if (!target_split_server(s, end - s, host, sizeof(host), &port) ||
			(comma != NULL && comma + 1 == slash))
		{
			*problem = "Each server is host:port (or [IPv6]:port), separated by commas.";
			return false;
		}
		/* libnats checks one name against every server's certificate */
		if (out->tls && out->tls_host[0] != '\0' && pg_strcasecmp(out->tls_host, host) != 0)
		{
			*problem = "The servers of a tls:// URL share one host name (or address): it is the name their certificates are checked against.";
			return false;
		}
		if (out->tls)
			strlcpy(out->tls_host, host, sizeof(out->tls_host));
		s = comma != NULL ? comma + 1 : slash;
	}
	memcpy(out->servers, p, len);
	out->servers[len] = '\0';

	/* The subject: tokens separated by ".", none empty, no wildcards. */
	p = slash + 1;
	len = strlen(p);
	if (len == 0 || len > NATS_SUBJECT_MAX)
	{
		*problem = "The subject is 1 to 255 bytes.";
		return false;
	}
	for (size_t i = 0; i < len;)
	{
		if (strncmp(p + i, NATS_EVENT_TYPE, strlen(NATS_EVENT_TYPE)) == 0)
		{
			i += strlen(NATS_EVENT_TYPE);
			token_empty = false;
		}
		else if (p[i] == '.' && !token_empty)
		{
			i++;
			token_empty = true;
		}
		else if (subject_char(p[i]))
		{
			i++;
			token_empty = false;
		}
		else
		{
			token_empty = true;
			break;
		}
	}
	if (token_empty)
	{
		*problem = "A subject is tokens of letters, digits, \"_\" and \"-\" separated by \".\", none empty, and may contain {event_type}.";
		return false;
	}
	memcpy(out->subject, p, len + 1);
	return true;
}

/* ---------------------------------------------------------------------
 * Connections
 * ---------------------------------------------------------------------
 */

/* libnats' threads call these; they do nothing (the relay asks instead). */
static void
connected_cb(natsConnection *nc, void *closure)
{
}

static void
error_cb(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
}

/* Wake the relay's wait: something is ready.  Any thread. */
static void
wake(void)
{
	char		c = 1;

	/* A full pipe already wakes the wait. */
	if (wake_pipe[1] >= 0 && write(wake_pipe[1], &c, 1) < 0)
		return;
}

/*
 * A publish was answered: run by the thread of libnats that serves the
 * acknowledgements' subscription.  It neither allocates nor calls into
 * PostgreSQL: it fills a record the relay put on the free list, queues it,
 * and wakes the relay.  The message is the relay's to destroy now.
 */
static void
ack_cb(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	NatsAck    *a;

	pthread_mutex_lock(&ack_lock);
	a = ack_free;
	if (a != NULL)
		ack_free = a->next;
	pthread_mutex_unlock(&ack_lock);
	if (a == NULL)
		return;					/* cannot happen: one record per message */

	memset(a, 0, offsetof(NatsAck, next));
	a->msg = msg;
	if (pa != NULL)
	{
		a->ok = true;
		a->duplicate = pa->Duplicate;
		a->seq = pa->Sequence;
		strlcpy(a->stream, pa->Stream ? pa->Stream : "", sizeof(a->stream));
	}
	else if (pae != NULL)
	{
		a->status = pae->Err;
		a->err_code = (int) pae->ErrCode;
		strlcpy(a->text, pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err),
				sizeof(a->text));
	}
	else
	{
		a->status = NATS_ERR;
		strlcpy(a->text, "no answer", sizeof(a->text));
	}

	/* (the relay takes the whole queue: one byte when it starts one) */
	pthread_mutex_lock(&ack_lock);
	a->next = ack_ready;
	ack_ready = a;
	pthread_mutex_unlock(&ack_lock);
	if (a->next == NULL)
		wake();
}

/* A libnats URL of one address: "nats://[v6]:port". */
#define NATS_ADDR_URL_MAX 80

/*
 * The servers of a URL as libnats URLs of their allowed addresses, in
 * urls (count in *n).  Names are resolved here; an address the policy
 * refuses is left out, and the last refusal is kept in why.  Runs in a
 * connecting thread: nothing of PostgreSQL's.
 */
static void
resolve_servers(const NatsUrl *u, const NetworkList *allowed, char (*urls)[NATS_ADDR_URL_MAX],
				int max, int *n, char *why, size_t why_len)
{
	const char *s = u->servers;

	*n = 0;
	why[0] = '\0';
	while (*s)
	{
		size_t		len = strcspn(s, ",");
		char		host[256];
		char		port_text[8];
		int			port = NATS_DEFAULT_PORT;
		struct addrinfo hints;
		struct addrinfo *res = NULL;
		int			rc;

		if (!target_split_server(s, len, host, sizeof(host), &port))
			break;				/* (checked at create_endpoint) */
		snprintf(port_text, sizeof(port_text), "%d", port);
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		rc = getaddrinfo(host, port_text, &hints, &res);
		if (rc != 0)
			snprintf(why, why_len, "could not resolve server \"%s\": %s", host, gai_strerror(rc));
		for (struct addrinfo *ai = res; ai != NULL && *n < max; ai = ai->ai_next)
		{
			const char *refusal = address_refusal(ai->ai_addr, allowed);
			char		ip[INET6_ADDRSTRLEN];
			const void *a = ai->ai_family == AF_INET6 ?
				(const void *) &((struct sockaddr_in6 *) ai->ai_addr)->sin6_addr :
				(const void *) &((struct sockaddr_in *) ai->ai_addr)->sin_addr;

			if (inet_ntop(ai->ai_family, a, ip, sizeof(ip)) == NULL)
				continue;
			if (refusal != NULL)
			{
				snprintf(why, why_len,
						 "refused to connect to server %s (%s), %s; outbox.allowed_networks can allow it",
						 host, ip, refusal);
				continue;
			}
			snprintf(urls[(*n)++], NATS_ADDR_URL_MAX,
					 ai->ai_family == AF_INET6 ? "nats://[%s]:%d" : "nats://%s:%d", ip, port);
		}
		if (res != NULL)
			freeaddrinfo(res);
		s += len;
		if (*s == ',')
			s++;
	}
}

/*
 * Make c's connection and JetStream context, in a thread of its own (the
 * relay goes on meanwhile: resolving the servers' names and the first
 * connection attempt take seconds when a server or a name server does not
 * answer); on failure c->nc stays NULL and c->why says why.  Reads only
 * what c was made from, which does not change, writes only what the
 * relay leaves alone until connect_done, and calls nothing of
 * PostgreSQL's.  Started with every signal blocked (conn_start), as are
 * then libnats' threads it starts.
 */
static void *
connect_main(void *arg)
{
	NatsConn   *c = arg;
	char		urls[64][NATS_ADDR_URL_MAX];
	int			n;
	natsOptions *opts = NULL;
	natsStatus	s;
	jsOptions	jo;

	resolve_servers(&c->parsed, &c->allowed, urls, lengthof(urls), &n, c->why, sizeof(c->why));
	if (n == 0)
	{
		if (c->why[0] == '\0')
			strlcpy(c->why, "no server address to connect to", sizeof(c->why));
		goto done;
	}
	s = natsOptions_Create(&opts);
	if (s == NATS_OK)
	{
		const char *servers[64];

		for (int i = 0; i < n; i++)
			servers[i] = urls[i];
		s = natsOptions_SetServers(opts, servers, n);
	}
	if (s == NATS_OK)
		s = natsOptions_SetIgnoreDiscoveredServers(opts, true);
	if (s == NATS_OK)
		s = natsOptions_SetName(opts, "outbox");
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(opts, Max(Min(c->timeout_ms, 2000), 1));
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(opts, -1);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(opts, 500);
	if (s == NATS_OK)
		s = natsOptions_SetRetryOnFailedConnect(opts, true, connected_cb, NULL);
	if (s == NATS_OK)
		s = natsOptions_SetErrorHandler(opts, error_cb, NULL);
	if (s == NATS_OK && c->username != NULL)
		s = natsOptions_SetUserInfo(opts, c->username, c->password);
	if (s == NATS_OK && c->token != NULL)
		s = natsOptions_SetToken(opts, c->token);
	/*
	 * TLS: libnats verifies the chain against the CA file given (the
	 * system's bundle when outbox.ca_file is empty: libnats loads none by
	 * itself) and, with an expected host name, the name; the servers it
	 * connects to are the addresses the policy allowed.
	 */
	if (s == NATS_OK && c->parsed.tls)
		s = natsOptions_SetSecure(opts, true);
	if (s == NATS_OK && c->parsed.tls)
		s = natsOptions_SetExpectedHostname(opts, c->parsed.tls_host);
	if (s == NATS_OK && c->parsed.tls)
		s = natsOptions_LoadCATrustedCertificates(opts, c->ca_file[0] ? c->ca_file :
												  X509_get_default_cert_file());
	if (s == NATS_OK && c->parsed.tls && c->client_cert != NULL)
		s = natsOptions_LoadCertificatesChain(opts, c->client_cert, c->client_key);
	if (s == NATS_OK)
	{
		s = natsConnection_Connect(&c->nc, opts);
		if (s == NATS_NOT_YET_CONNECTED)
		{
			/*
			 * libnats goes on trying.  Why the first attempt failed is
			 * kept now: a server's refusal (of the credentials, of the
			 * client certificate) is known only until libnats, trying on,
			 * gives up and keeps "no server available".
			 */
			const char *last = NULL;

			(void) natsConnection_GetLastError(c->nc, &last);
			if (last != NULL && last[0] != '\0')
				snprintf(c->first_failure, sizeof(c->first_failure),
						 "; the first connection attempt failed: %s%s",
						 pg_strcasecmp(last, "Authorization Violation") == 0 ?
						 "authentication failed, " : "", last);
			s = NATS_OK;
		}
	}
	if (s == NATS_OK)
	{
		jsOptions_Init(&jo);
		jo.PublishAsync.AckHandler = ack_cb;
		jo.PublishAsync.MaxPending = 0; /* the relay bounds what is in flight */
		s = natsConnection_JetStream(&c->js, c->nc, &jo);
	}
	if (s != NATS_OK)
	{
		const char *last = nats_GetLastError(NULL);

		/* (libnats' text may start with its source location: left out) */
		if (last != NULL && last[0] == '(' && strstr(last, "): ") != NULL)
			last = strstr(last, "): ") + 3;
		snprintf(c->why, sizeof(c->why), "libnats could not make a connection: %s",
				 last != NULL && last[0] ? last : natsStatus_GetText(s));
		if (c->nc != NULL)
			natsConnection_Destroy(c->nc);
		c->nc = NULL;
	}
	natsOptions_Destroy(opts);
done:
	pthread_mutex_lock(&ack_lock);
	c->connect_done = true;
	pthread_mutex_unlock(&ack_lock);
	wake();
	/* (what libnats kept for this thread: its last error, say) */
	nats_ReleaseThreadMemory();
	return NULL;
}

/*
 * Start making c's connection (connect_main); c->connecting until the
 * relay takes what came of it (connect_taken).
 */
static void
conn_start(NatsConn *c)
{
	pthread_attr_t attr;
	pthread_t	thread;
	sigset_t	all_signals;
	sigset_t	old_signals;
	int			rc;

	/*
	 * libnats writes the user, password and token into its CONNECT message's
	 * JSON as they are: a quote or a backslash would change the message.
	 * _check_auth_target refuses them; an auth written into the table by
	 * hand is refused here.
	 */
	if ((c->username != NULL && strpbrk(c->username, "\"\\") != NULL) ||
		(c->password != NULL && strpbrk(c->password, "\"\\") != NULL) ||
		(c->token != NULL && strpbrk(c->token, "\"\\") != NULL))
	{
		strlcpy(c->why, "authentication failed: auth's username, password or token holds a quote or a backslash, which NATS cannot carry",
				sizeof(c->why));
		return;
	}
	c->connecting = true;
	c->connect_done = false;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all_signals);
	pthread_sigmask(SIG_SETMASK, &all_signals, &old_signals);
	rc = pthread_create(&thread, &attr, connect_main, c);
	pthread_sigmask(SIG_SETMASK, &old_signals, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0)
	{
		c->connecting = false;
		snprintf(c->why, sizeof(c->why), "could not start a thread to connect: %s", strerror(rc));
	}
}

static void
conn_free(NatsConn *c)
{
	NatsConn  **link;

	for (link = &conns; *link != NULL; link = &(*link)->next)
		if (*link == c)
		{
			*link = c->next;
			break;
		}
	Assert(!c->connecting && c->n_waiting == 0);
	if (c->js != NULL)
		jsCtx_Destroy(c->js);
	if (c->nc != NULL)
		natsConnection_Destroy(c->nc);
	if (c->waiting != NULL)
		pfree(c->waiting);
	auth_forget(c->username);
	auth_forget(c->password);
	auth_forget(c->token);
	if (c->client_cert != NULL)
		pfree(c->client_cert);
	if (c->client_key != NULL)
		pfree(c->client_key);
	pfree(c->ca_file);
	pfree(c->url);
	pfree(c);
}

/* Is c made with the credentials ep's auth gives now? */
static bool
conn_auth_is(const NatsConn *c, const TargetEndpoint *ep)
{
	const AuthConfig *a = ep->auth != NULL ? &ep->auth->cfg : NULL;

	return auth_same(c->username, a != NULL ? a->username : NULL) &&
		auth_same(c->password, a != NULL ? a->password : NULL) &&
		auth_same(c->token, a != NULL ? a->token : NULL) &&
		auth_same(c->client_cert, a != NULL ? a->client_cert : NULL) &&
		auth_same(c->client_key, a != NULL ? a->client_key : NULL);
}

/*
 * The connection of ep, made if need be; one made from another URL,
 * timeout or credentials, or closed for good, is retired.  One that could not be made is
 * tried again after a second.
 */
static NatsConn *
conn_of(const TargetEndpoint *ep)
{
	NatsConn   *c;
	const char *problem;

	for (c = conns; c != NULL; c = c->next)
	{
		if (c->endpoint_id != ep->id || c->retired)
			continue;
		if (c->timeout_ms != ep->timeout_ms || strcmp(c->url, ep->url) != 0 ||
			!conn_auth_is(c, ep))
		{
			c->retired = true;
			continue;
		}
		if (c->connecting)
			return c;
		if ((c->nc == NULL &&
			 TimestampDifferenceExceeds(c->made_at, GetCurrentTimestamp(), 1000)) ||
			(c->nc != NULL && (c->js == NULL || natsConnection_IsClosed(c->nc))))
		{
			c->retired = true;
			continue;
		}
		return c;
	}
	c = MemoryContextAllocZero(TopMemoryContext, sizeof(NatsConn));
	c->endpoint_id = ep->id;
	c->url = MemoryContextStrdup(TopMemoryContext, ep->url);
	c->timeout_ms = ep->timeout_ms;
	c->allowed = outbox_allowed_networks;
	if (ep->auth != NULL)
	{
		c->username = auth_keep(ep->auth->cfg.username);
		c->password = auth_keep(ep->auth->cfg.password);
		c->token = auth_keep(ep->auth->cfg.token);
		c->client_cert = auth_keep(ep->auth->cfg.client_cert);
		c->client_key = auth_keep(ep->auth->cfg.client_key);
	}
	c->ca_file = MemoryContextStrdup(TopMemoryContext, outbox_ca_file != NULL ? outbox_ca_file : "");
	c->made_at = c->used_at = GetCurrentTimestamp();
	c->next = conns;
	conns = c;
	if (!nats_parse_url(ep->url, &c->parsed, &problem))
		strlcpy(c->why, problem, sizeof(c->why));
	else
	{
		c->subject_has_type = strstr(c->parsed.subject, NATS_EVENT_TYPE) != NULL;
		conn_start(c);
	}
	return c;
}

/* ---------------------------------------------------------------------
 * The target
 * ---------------------------------------------------------------------
 */

/* The subject of an event: the template with {event_type} filled in. */
static char *
subject_of(const NatsConn *c, const char *type)
{
	StringInfoData s;
	const char *t = c->parsed.subject;

	if (!c->subject_has_type)
		return (char *) t;
	initStringInfo(&s);
	while (*t)
	{
		if (strncmp(t, NATS_EVENT_TYPE, strlen(NATS_EVENT_TYPE)) == 0)
		{
			appendStringInfoString(&s, type);
			t += strlen(NATS_EVENT_TYPE);
		}
		else
			appendStringInfoChar(&s, *t++);
	}
	return s.data;
}

/* Is an event's header of this "name: value" line one we do not send? */
static bool
header_reserved(const char *line)
{
	static const char *const ours[] = {"webhook-id", "type", "key", "timestamp"};
	size_t		len = strcspn(line, ":");

	if (len >= 5 && pg_strncasecmp(line, "nats-", 5) == 0)
		return true;
	for (size_t i = 0; i < lengthof(ours); i++)
		if (len == strlen(ours[i]) && pg_strncasecmp(line, ours[i], len) == 0)
			return true;
	return false;
}

/*
 * Add a "Name: value" line to a message's headers: set (the format's, one
 * value) or added (an event's, which may repeat a name).
 */
static natsStatus
add_header_line(natsMsg *msg, const char *line, bool set)
{
	size_t		name_len = strcspn(line, ":");
	const char *value = line + name_len;
	char	   *name = pnstrdup(line, name_len);
	natsStatus	s;

	if (*value == ':')
		value++;
	while (*value == ' ')
		value++;
	s = set ? natsMsgHeader_Set(msg, name, value) : natsMsgHeader_Add(msg, name, value);
	pfree(name);
	return s;
}

/* Make room in done for every message in flight and one more. */
static void
done_make_room(void)
{
	target_reserve(&done, &done_room, nats_in_flight + n_done + 1);
}

/* A delivery's outcome is known without an answer: queue it, wake up. */
static void
fail_now(TargetRequest *tr, bool rejected, const char *fmt,...) pg_attribute_printf(3, 4);

static void
fail_now(TargetRequest *tr, bool rejected, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	vsnprintf(tr->result->error, sizeof(tr->result->error), fmt, args);
	va_end(args);
	tr->result->outcome = rejected ? TARGET_DEAD_LETTER : TARGET_RETRY;
	done_make_room();
	done[n_done++] = tr;
	wake();
}

/*
 * Will JetStream refuse this publish again, whatever the relay does?  A
 * message too large for the stream and a sealed stream; the rest (a full
 * stream may make room, a stream may be made for the subject, a cluster
 * elects a leader) is worth trying again.
 */
static bool
permanent_refusal(natsStatus status, int err_code)
{
	if (status == NATS_MAX_PAYLOAD)
		return true;
	switch (err_code)
	{
		case JSStreamMessageExceedsMaximumErr:
		case JSStreamSealedErr:
			return true;
		default:
			return false;
	}
}

/*
 * Publish one delivery's message.  The NatsInFlight entry, the message's
 * address as key, matches its answer to it.
 */
static void
nats_submit(TargetRequest *tr, int relay_in_flight)
{
	const TargetEndpoint *ep = tr->endpoint;
	NatsConn   *c = conn_of(ep);
	natsMsg    *msg = NULL;
	natsMsg    *key;
	natsStatus	s;
	jsPubOptions po;
	char		when[64];
	char	   *subject;
	NatsInFlight *f;
	NatsAck    *a;
	bool		found;
	EventParts	parts = {0};
	char	   *format_lines[OUTBOX_FORMAT_MAX_HEADERS];
	int			n_format;

	tr->result->bytes = strlen(tr->body);
	if (c->connecting)
	{
		/* sent once the connection is made (connect_taken) */
		if (c->n_waiting == c->waiting_room)
		{
			c->waiting_room = Max(16, 2 * c->waiting_room);
			c->waiting = c->waiting == NULL ?
				MemoryContextAlloc(TopMemoryContext, sizeof(TargetRequest *) * c->waiting_room) :
				repalloc(c->waiting, sizeof(TargetRequest *) * c->waiting_room);
		}
		c->waiting[c->n_waiting++] = tr;
		return;
	}
	if (c->nc == NULL)
	{
		fail_now(tr, false, "NATS: %s", c->why);
		return;
	}
	subject = subject_of(c, tr->type);
	if (strlen(subject) > NATS_SUBJECT_SENT_MAX)
	{
		/* (a server closes a connection whose protocol line is too long) */
		fail_now(tr, true, "NATS: the subject would be %zu bytes, more than %d",
				 strlen(subject), NATS_SUBJECT_SENT_MAX);
		return;
	}
	outbox_format_time(tr->emitted_at, when);
	s = natsMsg_Create(&msg, subject, NULL, tr->body, (int) strlen(tr->body));
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Nats-Msg-Id", tr->event_id_str);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "webhook-id", tr->event_id_str);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "type", tr->type);
	if (s == NATS_OK && tr->key != NULL)
		s = natsMsgHeader_Set(msg, "key", tr->key);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "timestamp", when);

	/* The format's: Content-Type, in binary mode also ce-* (as in HTTP) */
	parts.event_id = &tr->event_id;
	parts.type = tr->type;
	parts.emitted_at = tr->emitted_at;
	parts.key = tr->key;
	n_format = outbox_format_headers(ep->format, &parts, format_lines);
	for (int i = 0; i < n_format; i++)
	{
		if (s == NATS_OK)
			s = add_header_line(msg, format_lines[i], true);
		if (i > 0)
			pfree(format_lines[i]); /* (the first, Content-Type, is static) */
	}
	/* The event's own, but those the relay or the format sets. */
	for (int i = 0; s == NATS_OK && i < tr->n_event_headers; i++)
		if (!header_reserved(tr->event_headers[i]) &&
			!outbox_format_sets_header(ep->format, tr->event_headers[i]))
			s = add_header_line(msg, tr->event_headers[i], false);
	if (s != NATS_OK)
	{
		natsMsg_Destroy(msg);
		fail_now(tr, false, "NATS: could not make the message: %s", natsStatus_GetText(s));
		return;
	}

	if (subject != c->parsed.subject)
		pfree(subject);

	/*
	 * A record for its answer, before the answer can come: there are as
	 * many as messages ever were in flight at once, each on the free list
	 * or queued by ack_cb.
	 */
	if (ack_records <= nats_in_flight)
	{
		a = MemoryContextAllocZero(TopMemoryContext, sizeof(NatsAck));
		pthread_mutex_lock(&ack_lock);
		a->next = ack_free;
		ack_free = a;
		pthread_mutex_unlock(&ack_lock);
		ack_records++;
	}

	done_make_room();
	jsPubOptions_Init(&po);
	po.MaxWait = Max(ep->timeout_ms, 1);
	key = msg;
	if (c->published)
		s = js_PublishMsgAsync(c->js, &msg, &po);
	else
	{
		/* the first publish starts the acknowledgements' thread */
		SIGNALS_OFF(s = js_PublishMsgAsync(c->js, &msg, &po));
		c->published = (s == NATS_OK);
	}
	if (s != NATS_OK)
	{
		/*
		 * Not taken: the message is still ours (its record stays free).  A
		 * connection that never reached a server refuses messages with
		 * headers (it does not know yet whether the server takes them):
		 * say what is wrong, not that.
		 */
		const char *last = NULL;

		natsMsg_Destroy(msg);
		(void) natsConnection_GetLastError(c->nc, &last);
		if (natsConnection_Status(c->nc) != NATS_CONN_STATUS_CONNECTED)
			fail_now(tr, false, "NATS: not connected to a server%s%s%s%s%s",
					 last != NULL && last[0] ? "; last error: " : "",
					 last != NULL ? last : "",
					 c->first_failure,
					 c->why[0] ? "; " : "", c->why);
		else
			fail_now(tr, permanent_refusal(s, 0), "NATS: could not publish: %s",
					 nats_GetLastError(NULL) ? nats_GetLastError(NULL) : natsStatus_GetText(s));
		return;
	}
	f = hash_search(in_flight, &key, HASH_ENTER, &found);
	Assert(!found);
	f->tr = tr;
	f->conn = c;
	INSTR_TIME_SET_CURRENT(f->start);
	c->used_at = GetCurrentTimestamp();
	c->in_flight++;
	nats_in_flight++;
}

/*
 * An answer came for a message: fill its delivery's result and queue the
 * delivery for nats_next_done().  Runs in the relay's thread.
 */
static void
finish(NatsAck *a)
{
	NatsInFlight *f = hash_search(in_flight, &a->msg, HASH_FIND, NULL);
	TargetRequest *tr;
	TargetResult *r;
	instr_time	now;

	if (f == NULL)
		return;					/* cannot happen: every publish is entered */
	tr = f->tr;
	r = tr->result;
	INSTR_TIME_SET_CURRENT(now);
	INSTR_TIME_SUBTRACT(now, f->start);
	r->duration_ms = INSTR_TIME_GET_MILLISEC(now);
	if (a->ok)
	{
		r->outcome = TARGET_DELIVERED;
		r->response_len = snprintf(r->response, sizeof(r->response),
								   "stream %s seq " UINT64_FORMAT "%s", a->stream, a->seq,
								   a->duplicate ? " duplicate" : "");
	}
	else
	{
		r->outcome = permanent_refusal(a->status, a->err_code) ? TARGET_DEAD_LETTER : TARGET_RETRY;
		if (a->status == NATS_NO_RESPONDERS)
			snprintf(r->error, sizeof(r->error),
					 "NATS: no stream answered on subject \"%s\" (no responders: no stream takes the subject, or its leader is being elected)",
					 natsMsg_GetSubject(a->msg));
		else if (a->status == NATS_TIMEOUT)
		{
			const char *last = NULL;
			natsConnStatus cs = natsConnection_Status(f->conn->nc);

			(void) natsConnection_GetLastError(f->conn->nc, &last);
			snprintf(r->error, sizeof(r->error),
					 "NATS: no acknowledgement within %ld ms%s%s%s%s%s%s",
					 f->conn->timeout_ms,
					 cs == NATS_CONN_STATUS_CONNECTED ? "" : " (not connected to a server)",
					 last != NULL && last[0] ? "; last error: " : "",
					 last != NULL ? last : "",
					 cs == NATS_CONN_STATUS_CONNECTED ? "" : f->conn->first_failure,
					 f->conn->why[0] ? "; " : "", f->conn->why);
		}
		else if (a->err_code != 0)
			snprintf(r->error, sizeof(r->error), "NATS: JetStream refused the message: %s (err_code %d)",
					 a->text, a->err_code);
		else
			snprintf(r->error, sizeof(r->error), "NATS: %s", a->text);
	}
	f->conn->in_flight--;
	nats_in_flight--;
	hash_search(in_flight, &a->msg, HASH_REMOVE, NULL);
	Assert(n_done < done_room);
	done[n_done++] = tr;
}

/*
 * c's connection closed for good (libnats gave up on it): no answer will
 * come for what it has in flight.  Its JetStream context is destroyed,
 * and the messages with it; its deliveries fail (tried again on a new
 * connection), and it retires.  An answer ack_cb was already handing over
 * finds no delivery in finish() and is dropped.
 */
static void
conn_closed(NatsConn *c)
{
	HASH_SEQ_STATUS seq;
	NatsInFlight *f;

	jsCtx_Destroy(c->js);
	c->js = NULL;
	c->retired = true;
	hash_seq_init(&seq, in_flight);
	while ((f = hash_seq_search(&seq)) != NULL)
	{
		TargetRequest *tr;

		if (f->conn != c)
			continue;
		tr = f->tr;
		snprintf(tr->result->error, sizeof(tr->result->error),
				 "NATS: the connection closed before an acknowledgement came%s",
				 c->first_failure);
		tr->result->outcome = TARGET_RETRY;
		c->in_flight--;
		nats_in_flight--;
		done_make_room();
		done[n_done++] = tr;
		(void) hash_search(in_flight, &f->msg, HASH_REMOVE, NULL);
	}
}

/*
 * c's connection is made, or could not be: the deliveries that waited for
 * it go now (published, or failed with c->why), on c or, if c retired
 * meanwhile, on the endpoint's connection of now.  A failure is tried
 * again a second after it.
 */
static void
connect_taken(NatsConn *c)
{
	int			n = c->n_waiting;

	c->connecting = false;
	c->made_at = c->used_at = GetCurrentTimestamp();
	c->n_waiting = 0;
	for (int i = 0; i < n; i++)
		nats_submit(c->waiting[i], 0);
}

/*
 * The deliveries waiting for c's connection for longer than the
 * endpoint's timeout fail (tried again on the schedule); the connection
 * goes on being made for those that come later.
 */
static void
waiting_fail(NatsConn *c)
{
	for (int i = 0; i < c->n_waiting; i++)
		fail_now(c->waiting[i], false,
				 "NATS: no connection to a server within the endpoint's timeout (%ld ms): resolving the servers' names or connecting to them took longer",
				 c->timeout_ms);
	c->n_waiting = 0;
}

/* The next delivery whose outcome is known, or NULL. */
static TargetRequest *
nats_next_done(void)
{
	if (done_next < n_done)
		return done[done_next++];
	n_done = done_next = 0;
	return NULL;
}

/*
 * After a wait: empty the pipe, take the answers ack_cb queued, and
 * destroy retired connections once nothing of theirs is in flight, and
 * those unused for CONN_IDLE_MS.
 */
static void
nats_poll(void)
{
	char		buf[256];
	NatsAck    *ready;
	NatsAck    *oldest = NULL;
	NatsConn   *c;
	NatsConn   *next;
	TimestampTz now;

	if (conns == NULL)
		return;
	while (read(wake_pipe[0], buf, sizeof(buf)) > 0)
		;
	pthread_mutex_lock(&ack_lock);
	ready = ack_ready;
	ack_ready = NULL;
	pthread_mutex_unlock(&ack_lock);

	/* (queued newest first: answer in the order they came) */
	while (ready != NULL)
	{
		NatsAck    *a = ready;

		ready = a->next;
		a->next = oldest;
		oldest = a;
	}
	while (oldest != NULL)
	{
		NatsAck    *a = oldest;

		oldest = a->next;
		done_make_room();
		finish(a);
		natsMsg_Destroy(a->msg);
		pthread_mutex_lock(&ack_lock);
		a->next = ack_free;
		ack_free = a;
		pthread_mutex_unlock(&ack_lock);
	}
	now = GetCurrentTimestamp();
	for (c = conns; c != NULL; c = next)
	{
		next = c->next;
		if (c->connecting)
		{
			bool		made;

			pthread_mutex_lock(&ack_lock);
			made = c->connect_done;
			pthread_mutex_unlock(&ack_lock);
			if (made)
				connect_taken(c);
			else if (c->n_waiting > 0 &&
					 TimestampDifferenceExceeds(c->made_at, now, (int) Max(c->timeout_ms, 1)))
				waiting_fail(c);
			continue;
		}
		if (c->js != NULL && c->in_flight > 0 && natsConnection_IsClosed(c->nc))
			conn_closed(c);
		if (c->in_flight == 0 && !c->retired &&
			TimestampDifferenceExceeds(c->used_at, now, CONN_IDLE_MS))
			c->retired = true;
		if (c->retired && c->in_flight == 0)
			conn_free(c);
	}
}

/*
 * At exit: nothing in flight is waited for.  What was published may have
 * reached the stream, or not; the relay that comes next sends it again,
 * and the duplicate window drops the copies (the crash window).
 */
static void
nats_abandon_all(void)
{
	while (conns != NULL)
	{
		NatsConn   *c = conns;

		conns = c->next;
		if (c->connecting)
			continue;			/* (its thread owns them; the process is leaving) */
		if (c->js != NULL)
			jsCtx_Destroy(c->js);
		if (c->nc != NULL)
			natsConnection_Destroy(c->nc);
	}
}

/* At the relay's start: the pipe, watched by the relay's wait. */
static void
nats_start(void)
{
	HASHCTL		ctl;

	if (wake_pipe[0] >= 0)
		return;
	target_wake_pipe(wake_pipe);
	ctl.keysize = sizeof(natsMsg *);
	ctl.entrysize = sizeof(NatsInFlight);
	ctl.hcxt = TopMemoryContext;
	in_flight = hash_create("outbox NATS messages in flight", 256, &ctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/*
 * After a reload: connections made under other allowed networks or another
 * outbox.ca_file retire.
 */
static void
nats_configure(void)
{
	for (NatsConn *c = conns; c != NULL; c = c->next)
		if (!address_networks_equal(&c->allowed, &outbox_allowed_networks) ||
			strcmp(c->ca_file, outbox_ca_file != NULL ? outbox_ca_file : "") != 0)
			c->retired = true;
}

/* TargetOps.check_url: a URL nats_parse_url reads, as written. */
static char *
nats_check_url(const char *url, const char **problem)
{
	NatsUrl	parsed;

	return nats_parse_url(url, &parsed, problem) ? pstrdup(url) : NULL;
}

const TargetOps outbox_nats_target = {
	.name = "nats",
	.check_url = nats_check_url,
	.start = nats_start,
	.configure = nats_configure,
	.submit = nats_submit,
	.next_done = nats_next_done,
	.poll = nats_poll,
	.abandon_all = nats_abandon_all,
	.takes_slot = false,
};
