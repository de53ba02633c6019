/*-------------------------------------------------------------------------
 *
 * redis.c
 *	  The Redis target: a delivery as a BullMQ job (bullmq://) or as a
 *	  Redis stream entry (redis://), over a RESP2 client of our own.
 *
 * URLs (redis.h, read by redis_url.c; docs/redis.md for the user's view):
 *   bullmq://HOST[:PORT][/DB]/QUEUE[?job_id=T&attempts=N&backoff=K:MS
 *            &remove_on_complete=V&remove_on_fail=V&prefix=P&layout=L
 *            &priority=on|off]
 *   redis://HOST[:PORT][/DB]/STREAM[?maxlen=N]
 * bullmqs:// and rediss:// are the same over TLS (OpenSSL): the server's
 * certificate is verified against outbox.ca_file (the system's store when
 * empty) and the URL's host, a name (also sent as SNI) or an address.
 * Credentials are never taken from the URL: an endpoint's auth
 * {"username", "password"} is sent as AUTH (an ACL user) when there is one.
 *
 * A job is added by one Lua script of ours (bullmq_add below), loaded once
 * per connection with SCRIPT LOAD and run with EVALSHA: it writes what
 * BullMQ's own Queue.add writes for a job that is neither delayed nor a
 * child (the job hash, the wait list or the prioritized set, the events
 * stream, the marker that wakes blocked Workers), or nothing but BullMQ's
 * "duplicated" event when a job of that id exists.  Its reply is 1
 * (added) or 0 (already there): both are delivered.  The job's name is the
 * event type, its data the body in the endpoint's format (JSON in every
 * format), its id the job_id template expanded.  A stream entry is
 * XADD key [MAXLEN ~ N] * with the event's id, type, key, timestamp,
 * headers and body as fields; the entry id is the attempt's response.
 *
 * Replies: an error reply Redis gives for a state that passes (OOM,
 * READONLY, LOADING, MASTERDOWN, BUSY, TRYAGAIN, CLUSTERDOWN, NOREPLICAS,
 * MISCONF, and a login refused: NOAUTH, WRONGPASS, said as "authentication
 * failed") is tried again, like a 5xx; NOSCRIPT reloads the script and
 * sends the job again, once; any other error reply (WRONGTYPE, NOPERM for
 * a command or key the ACL user may not use, our script's refusal of an id
 * BullMQ would refuse, other ERRs) is a dead letter with Redis's message.
 * An error reply to AUTH (the endpoint's auth, never the URL's) or SELECT
 * fails the connection: what was sent and what waited for it is tried
 * again, with Redis's message.  A lost connection, one
 * that cannot be made and a reply that does not come within the
 * endpoint's timeout are transport errors, tried again.  A reply that is
 * not what was asked for (a wrong type, a bulk string or a line over
 * REDIS_REPLY_MAX, an array) fails the connection: its requests are tried
 * again.
 *
 * Threads.  Each (host, port, db, login, timeout) has a publisher thread
 * that owns one connection; endpoints naming the same server share it.
 * The relay builds each request's command (a RESP array, malloc'd) in its
 * own thread and hands it over (inbox, a byte on the publisher's pipe);
 * the thread resolves the host, checks every address against the address
 * policy (address.c, on the publisher's copy of outbox.allowed_networks,
 * one call at a time), connects (bounded by the timeout, 10 s at most, one
 * attempt a second at most), sends AUTH and SELECT and waits for their
 * answers (Redis runs what follows a refused AUTH as the user the
 * connection had, and what follows a failed SELECT in database 0), then
 * writes every command it has in one write and reads the replies in order
 * (pipelining: a page of jobs costs one round trip), and moves each
 * finished message to the done list, writing a byte to one pipe the
 * relay's wait watches (target_wake_pipe).  redis_poll() fills the
 * deliveries' results in the relay's thread.  The threads never call into
 * PostgreSQL (no palloc, no ereport) and are made with every signal
 * blocked.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lib/stringinfo.h"
#include "portability/instr_time.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "targets/address.h"
#include "targets/auth.h"
#include "targets/format.h"
#include "targets/redis.h"
#include "targets/target.h"

#define REDIS_CONNECT_MAX_MS	10000	/* connecting, at most */
#define REDIS_RECONNECT_MS		1000	/* between two connection attempts */
#define REDIS_ERROR_LEN			256
#define REDIS_REPLY_MAX			4096	/* a reply line or bulk string */
#define REDIS_INBUF				(4 * REDIS_REPLY_MAX)
#define PUBLISHER_IDLE_MS		(10 * 60 * 1000)
#define REDIS_GATHER_MIN		64		/* fewer new commands than this... */
#define REDIS_GATHER_US			100		/* ...and the thread waits this once */

/*
 * The add script.  KEYS: the job hash, wait, paused, meta, id, prioritized,
 * pc, marker, active, events (all of prefix:queue:).  ARGV: job id, name,
 * data (JSON text), opts (JSON text), priority (0: none), timestamp (ms),
 * layout ("6", "5", "4" or "auto": from meta.version), "1" to bump the id
 * counter as Queue.add does.  Returns 1 (added) or 0 (a job of that id
 * exists: only the "duplicated" event is written).  Every check comes
 * before the first write: Redis does not undo a script's writes.
 */
static const char bullmq_add[] =
"local call = redis.call\n"
"local k_job, k_wait, k_paused, k_meta, k_id, k_prio, k_pc, k_marker, k_active, k_events =\n"
"  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]\n"
"local id, name, data, opts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]\n"
"local prio = tonumber(ARGV[5])\n"
"local ts = ARGV[6]\n"
"local layout = ARGV[7]\n"
"local function refuse(msg)\n"
"  return redis.error_reply('ERR outbox-bullmq: ' .. msg)\n"
"end\n"
"if id == nil or id == '' or id == '0' then return refuse('job id empty or \"0\"') end\n"
"if string.find(id, ':', 1, true) then return refuse('job id \"' .. id .. '\" contains \":\"') end\n"
"if string.match(id, '^%-?%d+$') then return refuse('job id \"' .. id .. '\" is an integer') end\n"
"if prio == nil or prio < 0 or prio > 2097151 or prio ~= math.floor(prio) then\n"
"  return refuse('priority must be an integer in 0..2097151')\n"
"end\n"
"if not string.match(ts, '^%d+$') then return refuse('timestamp must be integer ms') end\n"
"if layout == 'auto' then\n"
"  local v = call('HGET', k_meta, 'version')\n"
"  local m = v and string.match(v, '^bullmq:(%d+)%.')\n"
"  local major = m and tonumber(m) or nil\n"
"  if major == nil then layout = 'both'\n"
"  elseif major <= 4 then layout = '4'\n"
"  elseif major == 5 then layout = '5'\n"
"  else layout = '6' end\n"
"elseif layout ~= '4' and layout ~= '5' and layout ~= '6' then\n"
"  return refuse('layout must be 4, 5, 6 or auto')\n"
"end\n"
"if ARGV[8] ~= '0' then call('INCR', k_id) end\n"
"local cap = call('HGET', k_meta, 'opts.maxLenEvents')\n"
"if not cap then\n"
"  cap = 10000\n"
"  call('HSET', k_meta, 'opts.maxLenEvents', cap)\n"
"end\n"
"if call('EXISTS', k_job) == 1 then\n"
"  call('XADD', k_events, 'MAXLEN', '~', cap, '*', 'event', 'duplicated', 'jobId', id)\n"
"  return 0\n"
"end\n"
"call('HSET', k_job, 'name', name, 'data', data, 'opts', opts, 'timestamp', ts, 'delay', 0, 'priority', prio)\n"
"call('XADD', k_events, '*', 'event', 'added', 'jobId', id, 'name', name)\n"
"local meta = call('HMGET', k_meta, 'paused', 'concurrency')\n"
"local paused = meta[1] ~= false\n"
"local quiet = paused\n"
"if not quiet and meta[2] and layout ~= '4' then\n"
"  quiet = call('LLEN', k_active) >= tonumber(meta[2])\n"
"end\n"
"if prio == 0 then\n"
"  call('LPUSH', (paused and layout ~= '6') and k_paused or k_wait, id)\n"
"  if not quiet and layout ~= '4' then call('ZADD', k_marker, 0, '0') end\n"
"else\n"
"  local n = call('INCR', k_pc)\n"
"  call('ZADD', k_prio, prio * 4294967296 + n % 4294967296, id)\n"
"  if not quiet then\n"
"    if layout ~= '4' then call('ZADD', k_marker, 0, '0') end\n"
"    if (layout == '4' or layout == 'both') and call('LLEN', k_wait) == 0 then\n"
"      call('LPUSH', k_wait, '0:0')\n"
"    end\n"
"  end\n"
"end\n"
"call('XADD', k_events, 'MAXLEN', '~', cap, '*', 'event', 'waiting', 'jobId', id)\n"
"return 1\n";

/* The script's SHA1 in hex, as EVALSHA names it (redis_start). */
static char bullmq_add_sha[41];

/* What a message is: a delivery's command, or one of the connection's. */
typedef enum MsgKind
{
	MSG_JOB,					/* EVALSHA of the add script */
	MSG_ENTRY,					/* XADD */
	MSG_AUTH,
	MSG_SELECT,
	MSG_LOAD					/* SCRIPT LOAD */
} MsgKind;

/*
 * One command, malloc'd in one piece by the relay (a delivery's) or the
 * thread (the connection's own), sent by the thread, its outcome filled by
 * the thread, freed by the relay (or by the thread, for its own).
 */
typedef struct RedisMessage
{
	struct RedisMessage *next;
	MsgKind		kind;
	TargetRequest *tr;			/* the relay's: the thread never touches it */
	instr_time	start;
	instr_time	end;
	uint64		deadline_ms;	/* monotonic: no reply by then, give up */
	char	   *cmd;			/* the RESP array, in the same allocation */
	size_t		cmd_len;
	size_t		body_len;
	int			noscript;		/* NOSCRIPT replies it had */
	char		job_id[REDIS_JOB_ID_MAX + 1];
	/* the outcome */
	bool		ok;
	bool		rejected;
	char		error[REDIS_ERROR_LEN];
	char		response[REDIS_JOB_ID_MAX + 64];
} RedisMessage;

typedef struct MessageList
{
	RedisMessage *head;
	RedisMessage *tail;
} MessageList;

/* One server's publisher and its thread. */
typedef struct Publisher
{
	/* the relay's; read by the thread, never written once it runs */
	char		host[256];
	int			port;
	int			db;
	bool		tls;
	long		timeout_ms;
	NetworkList allowed;		/* the address policy it was made under */
	char	   *ca_file;		/* outbox.ca_file it was made under; "": none */
	char	   *username;		/* AUTH; NULL: none (auth_keep'd) */
	char	   *password;
	int			wake[2];		/* relay -> thread */
	pthread_t	thread;
	int			in_flight;		/* handed to the thread, not collected */
	TimestampTz used_at;
	bool		retired;
	struct Publisher *next;

	/* shared, under lock */
	pthread_mutex_t lock;
	MessageList inbox;
	MessageList done;
	bool		stop;
	bool		exited;
} Publisher;

static Publisher *publishers = NULL;

static TargetRequest **done = NULL;
static int	n_done = 0;
static int	done_next = 0;
static int	done_room = 0;

static int	relay_wake[2] = {-1, -1};
static bool woke_self = false;

/* Serializes the threads' calls of address_refusal. */
static pthread_mutex_t refusal_lock = PTHREAD_MUTEX_INITIALIZER;

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
list_append(MessageList *l, RedisMessage *m)
{
	m->next = NULL;
	if (l->tail != NULL)
		l->tail->next = m;
	else
		l->head = m;
	l->tail = m;
}

static RedisMessage *
list_pop(MessageList *l)
{
	RedisMessage *m = l->head;

	if (m != NULL)
	{
		l->head = m->next;
		if (l->head == NULL)
			l->tail = NULL;
		m->next = NULL;
	}
	return m;
}

/* Put the whole of l in front of into; l is left empty. */
static void
list_prepend_all(MessageList *into, MessageList *l)
{
	if (l->head == NULL)
		return;
	l->tail->next = into->head;
	if (into->tail == NULL)
		into->tail = l->tail;
	into->head = l->head;
	l->head = l->tail = NULL;
}

/* One RESP2 reply, as parsed: its bytes point into the input buffer. */
typedef struct Reply
{
	char		type;			/* '+', '-', ':', '$' */
	const char *s;
	size_t		len;
	long long	integer;
	bool		nil;
} Reply;

/* What the thread has: the connection and the messages it owns. */
typedef struct Conn
{
	Publisher  *p;
	int			fd;				/* -1: none */
	SSL_CTX    *ctx;			/* TLS: the connection's, or NULL */
	SSL		   *ssl;
	bool		script_loaded;	/* SCRIPT LOAD sent on this connection */
	int			setup_waiting;	/* AUTH, SELECT sent, not answered yet */
	bool		out_secret;		/* out held AUTH (the password) */
	char		load_error[REDIS_ERROR_LEN];	/* its error reply, if any */
	char	   *out;			/* to write: out[out_off..out_len) */
	size_t		out_len;
	size_t		out_off;
	size_t		out_room;
	char		in[REDIS_INBUF];
	size_t		in_len;
	uint64		next_connect_ms;
	MessageList pending;		/* not sent yet */
	MessageList sent;			/* sent, awaiting their replies, in order */
	MessageList resend;			/* NOSCRIPT: sent again after SCRIPT LOAD */
	MessageList finished;		/* to hand back */
} Conn;

static void
message_finish(Conn *c, RedisMessage *m, bool ok, bool rejected, const char *fmt,...)
	pg_attribute_printf(5, 6);

/* Free a command of the thread's own; AUTH's holds the password: wiped. */
static void
own_free(RedisMessage *m)
{
	if (m == NULL)
		return;
	if (m->kind == MSG_AUTH)
		explicit_bzero(m->cmd, m->cmd_len);
	free(m);
}

/* Wipe the write buffer if it held AUTH (before it is reused or freed). */
static void
out_wipe(Conn *c)
{
	if (c->out_secret && c->out != NULL)
		explicit_bzero(c->out, c->out_room);
	c->out_secret = false;
}

/* A delivery's message has its outcome: it goes back to the relay. */
static void
message_finish(Conn *c, RedisMessage *m, bool ok, bool rejected, const char *fmt,...)
{
	va_list		args;

	if (m->tr == NULL)
	{
		own_free(m);
		return;
	}
	m->ok = ok;
	m->rejected = rejected;
	va_start(args, fmt);
	vsnprintf(m->error, sizeof(m->error), fmt, args);
	va_end(args);
	INSTR_TIME_SET_CURRENT(m->end);
	list_append(&c->finished, m);
}

static void
fail_all(Conn *c, MessageList *l, const char *why)
{
	RedisMessage *m;

	while ((m = list_pop(l)) != NULL)
		message_finish(c, m, false, false, "%s", why);
}

/* Free the connection's TLS state, if any (not its socket). */
static void
tls_end(Conn *c)
{
	if (c->ssl != NULL)
		SSL_free(c->ssl);
	if (c->ctx != NULL)
		SSL_CTX_free(c->ctx);
	c->ssl = NULL;
	c->ctx = NULL;
}

/* Why a TLS call failed: the verification result, or OpenSSL's error. */
static void
tls_reason(Conn *c, const char *what, char *why, size_t why_len)
{
	long		verify = c->ssl != NULL ? SSL_get_verify_result(c->ssl) : X509_V_OK;
	unsigned long e = ERR_get_error();
	char		text[160] = "the connection closed";

	if (verify != X509_V_OK)
		snprintf(text, sizeof(text), "certificate verify failed: %s",
				 X509_verify_cert_error_string(verify));
	else if (e != 0)
		ERR_error_string_n(e, text, sizeof(text));
	snprintf(why, why_len, "Redis: %s failed: %s", what, text);
}

/*
 * TLS over the connection just made: the server's certificate verified
 * against outbox.ca_file (or the system's store) and the URL's host; the
 * handshake bounded by step_ms.  False, with why, if it fails.
 */
static bool
tls_start(Conn *c, long step_ms, char *why, size_t why_len)
{
	Publisher  *p = c->p;
	unsigned char ip[16];
	bool		is_ip = inet_pton(AF_INET, p->host, ip) == 1 || inet_pton(AF_INET6, p->host, ip) == 1;
	uint64		deadline = now_ms() + step_ms;
	X509_VERIFY_PARAM *param;

	ERR_clear_error();
	c->ctx = SSL_CTX_new(TLS_client_method());
	if (c->ctx == NULL)
	{
		snprintf(why, why_len, "Redis: could not make a TLS context");
		return false;
	}
	SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
	if (p->ca_file[0] != '\0' ?
		SSL_CTX_load_verify_locations(c->ctx, p->ca_file, NULL) != 1 :
		SSL_CTX_set_default_verify_paths(c->ctx) != 1)
	{
		if (p->ca_file[0] != '\0')
			snprintf(why, why_len, "Redis: could not read outbox.ca_file \"%s\"", p->ca_file);
		else
			snprintf(why, why_len, "Redis: could not load the system's CA certificates");
		return false;
	}
	c->ssl = SSL_new(c->ctx);
	if (c->ssl == NULL)
	{
		snprintf(why, why_len, "Redis: could not make a TLS connection");
		return false;
	}
	/* out may be realloc'd between a write that wanted more and its retry */
	SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	param = SSL_get0_param(c->ssl);
	if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, p->host) :
		 X509_VERIFY_PARAM_set1_host(param, p->host, 0)) != 1 ||
		(!is_ip && SSL_set_tlsext_host_name(c->ssl, p->host) != 1) ||
		SSL_set_fd(c->ssl, c->fd) != 1)
	{
		snprintf(why, why_len, "Redis: could not set the host \"%s\" to verify", p->host);
		return false;
	}
	for (;;)
	{
		int			rc = SSL_connect(c->ssl);
		int			err;
		struct pollfd pfd = {c->fd, 0, 0};
		uint64		now;

		if (rc == 1)
			return true;
		err = SSL_get_error(c->ssl, rc);
		if (err == SSL_ERROR_WANT_READ)
			pfd.events = POLLIN;
		else if (err == SSL_ERROR_WANT_WRITE)
			pfd.events = POLLOUT;
		else
		{
			tls_reason(c, "the TLS handshake", why, why_len);
			return false;
		}
		now = now_ms();
		if (now >= deadline || poll(&pfd, 1, (int) (deadline - now)) <= 0)
		{
			snprintf(why, why_len, "Redis: no TLS handshake within %ld ms", step_ms);
			return false;
		}
	}
}

/*
 * Close the connection; what awaited a reply is tried again, with why.  On
 * a connection that never got past AUTH and SELECT (a refused password,
 * no answer), what waited to be sent fails with that reason too, as when
 * a connection cannot be made.
 */
static void
drop(Conn *c, const char *why)
{
	tls_end(c);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->script_loaded = false;
	out_wipe(c);
	c->out_len = c->out_off = 0;
	c->in_len = 0;
	list_prepend_all(&c->pending, &c->resend);
	fail_all(c, &c->sent, why);
	if (c->setup_waiting > 0)
		fail_all(c, &c->pending, why);
	c->setup_waiting = 0;
}

/* A command of the thread's own (AUTH, SELECT, SCRIPT LOAD); NULL: no memory. */
static RedisMessage *
own_command(MsgKind kind, const char *const *args, int nargs, long timeout_ms)
{
	size_t		size = 32;
	RedisMessage *m;
	char	   *at;

	for (int i = 0; i < nargs; i++)
		size += strlen(args[i]) + 32;
	m = malloc(sizeof(RedisMessage) + size);
	if (m == NULL)
		return NULL;
	memset(m, 0, sizeof(RedisMessage));
	m->kind = kind;
	m->cmd = at = (char *) (m + 1);
	at += sprintf(at, "*%d\r\n", nargs);
	for (int i = 0; i < nargs; i++)
		at += sprintf(at, "$%zu\r\n%s\r\n", strlen(args[i]), args[i]);
	m->cmd_len = at - m->cmd;
	m->deadline_ms = now_ms() + timeout_ms;
	return m;
}

/* Queue m's command for writing; false when out of memory. */
static bool
out_append(Conn *c, RedisMessage *m)
{
	if (c->out_len + m->cmd_len > c->out_room)
	{
		size_t		want = Max(c->out_room * 2, c->out_len + m->cmd_len + 16384);
		char	   *grown = realloc(c->out, want);

		if (grown == NULL)
			return false;
		c->out = grown;
		c->out_room = want;
	}
	memcpy(c->out + c->out_len, m->cmd, m->cmd_len);
	c->out_len += m->cmd_len;
	list_append(&c->sent, m);
	return true;
}

/*
 * Queue AUTH (the endpoint's user and password, never in a message) and
 * SELECT on the connection just made; send_pending sends nothing else
 * until both are answered.  False, with why, when out of memory.
 */
static bool
queue_setup(Conn *c, long step_ms, char *why, size_t why_len)
{
	Publisher  *p = c->p;

	c->script_loaded = false;
	c->load_error[0] = '\0';
	c->setup_waiting = 0;
	if (p->username != NULL)
	{
		const char *args[] = {"AUTH", p->username, p->password};
		RedisMessage *m = own_command(MSG_AUTH, args, 3, step_ms);

		c->out_secret = true;
		if (m == NULL || !out_append(c, m))
		{
			own_free(m);
			drop(c, "Redis: out of memory");
			snprintf(why, why_len, "Redis: out of memory");
			return false;
		}
		c->setup_waiting++;
	}
	if (p->db != 0)
	{
		char		db[16];
		const char *args[] = {"SELECT", db};
		RedisMessage *m;

		snprintf(db, sizeof(db), "%d", p->db);
		m = own_command(MSG_SELECT, args, 2, step_ms);
		if (m == NULL || !out_append(c, m))
		{
			own_free(m);
			drop(c, "Redis: out of memory");
			snprintf(why, why_len, "Redis: out of memory");
			return false;
		}
		c->setup_waiting++;
	}
	return true;
}

/*
 * Connect to the publisher's server: each address the host resolves to is
 * judged by the address policy first, and each connect is bounded in time.
 * Then AUTH and SELECT are queued (queue_setup).  False, with why, if no
 * connection.
 */
static bool
connect_server(Conn *c, char *why, size_t why_len)
{
	Publisher  *p = c->p;
	struct addrinfo hints = {0};
	struct addrinfo *res = NULL;
	char		port[8];
	long		step_ms = Min(p->timeout_ms, REDIS_CONNECT_MAX_MS);
	int			rc;

	snprintf(port, sizeof(port), "%d", p->port);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(p->host, port, &hints, &res);
	if (rc != 0)
	{
		snprintf(why, why_len, "Redis: could not resolve host \"%s\": %s", p->host, gai_strerror(rc));
		return false;
	}
	snprintf(why, why_len, "Redis: host \"%s\" has no address", p->host);
	for (struct addrinfo *a = res; a != NULL && c->fd < 0; a = a->ai_next)
	{
		char		numeric[NI_MAXHOST];
		const char *refused;
		int			fd;
		int			one = 1;

		if (getnameinfo(a->ai_addr, a->ai_addrlen, numeric, sizeof(numeric),
						NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		pthread_mutex_lock(&refusal_lock);
		refused = address_refusal(a->ai_addr, &p->allowed);
		if (refused != NULL)
			snprintf(why, why_len,
					 "refused to connect to Redis at %s (%s), %s; outbox.allowed_networks can allow it",
					 p->host, numeric, refused);
		pthread_mutex_unlock(&refusal_lock);
		if (refused != NULL)
			continue;
		fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
		{
			snprintf(why, why_len, "Redis: could not make a socket: %s", strerror(errno));
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) != 0)
		{
			struct pollfd pfd = {fd, POLLOUT, 0};
			int			err = errno;
			socklen_t	err_len = sizeof(err);

			if (err == EINPROGRESS)
			{
				rc = poll(&pfd, 1, (int) step_ms);
				if (rc == 0)
					err = ETIMEDOUT;
				else if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) != 0)
					err = errno;
			}
			if (err != 0)
			{
				snprintf(why, why_len, "Redis: could not connect to %s port %d: %s",
						 numeric, p->port, err == ETIMEDOUT ?
						 "no answer within the timeout" : strerror(err));
				close(fd);
				continue;
			}
		}
		(void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		if (p->tls && !tls_start(c, step_ms, why, why_len))
		{
			tls_end(c);
			close(fd);
			c->fd = -1;
			break;				/* (a certificate refused is refused at every address) */
		}
	}
	freeaddrinfo(res);
	if (c->fd < 0)
		return false;

	return queue_setup(c, step_ms, why, why_len);
}

/*
 * Queue every pending message (the script first, if a job needs it), once
 * AUTH and SELECT are answered: Redis runs what follows a refused AUTH on
 * the same connection as the user it had (the default user, often open to
 * all), and what follows a failed SELECT in database 0.
 */
static void
send_pending(Conn *c)
{
	RedisMessage *m;

	if (c->setup_waiting > 0)
		return;
	while ((m = list_pop(&c->pending)) != NULL)
	{
		if (m->kind == MSG_JOB && !c->script_loaded)
		{
			const char *args[] = {"SCRIPT", "LOAD", bullmq_add};
			RedisMessage *load = own_command(MSG_LOAD, args, 3, c->p->timeout_ms);

			if (load == NULL || !out_append(c, load))
			{
				free(load);
				message_finish(c, m, false, false, "Redis: out of memory");
				continue;
			}
			c->script_loaded = true;
		}
		if (!out_append(c, m))
			message_finish(c, m, false, false, "Redis: out of memory");
	}
}

/* Write what is queued, as far as the socket takes it; false: failed. */
static bool
flush_out(Conn *c, char *why, size_t why_len)
{
	while (c->out_off < c->out_len)
	{
		ssize_t		n;

		if (c->ssl != NULL)
		{
			int			w;
			int			err;

			ERR_clear_error();
			w = SSL_write(c->ssl, c->out + c->out_off, (int) Min(c->out_len - c->out_off, 1024 * 1024));
			if (w > 0)
			{
				c->out_off += w;
				continue;
			}
			err = SSL_get_error(c->ssl, w);
			if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ)
				return true;
			tls_reason(c, "writing over TLS", why, why_len);
			return false;
		}
		n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return true;
		if (n <= 0)
		{
			snprintf(why, why_len, "Redis: the connection failed: %s", strerror(errno));
			return false;
		}
		c->out_off += n;
	}
	out_wipe(c);
	c->out_len = c->out_off = 0;
	if (c->out_room > 4 * 1024 * 1024)
	{
		free(c->out);
		c->out = NULL;
		c->out_room = 0;
	}
	return true;
}

/*
 * Parse one reply of avail bytes at buf: the bytes it took, 0 when it is
 * not all there yet, -1 (with why) when it is not one this client takes:
 * a line or a bulk string over REDIS_REPLY_MAX, an array, a RESP3 type.
 */
static ssize_t
parse_reply(const char *buf, size_t avail, Reply *r, char *why, size_t why_len)
{
	const char *eol;
	size_t		head;
	long long	n = 0;
	bool		neg = false;
	const char *d;

	if (avail == 0)
		return 0;
	eol = memchr(buf, '\n', Min(avail, (size_t) REDIS_REPLY_MAX + 3));
	if (eol == NULL)
	{
		if (avail >= REDIS_REPLY_MAX + 3)
		{
			snprintf(why, why_len, "Redis sent a reply line longer than %d bytes", REDIS_REPLY_MAX);
			return -1;
		}
		return 0;
	}
	if (eol == buf || eol[-1] != '\r')
	{
		snprintf(why, why_len, "Redis sent a malformed reply (no CRLF)");
		return -1;
	}
	head = eol + 1 - buf;
	memset(r, 0, sizeof(*r));
	r->type = buf[0];
	switch (buf[0])
	{
		case '+':
		case '-':
			r->s = buf + 1;
			r->len = head - 3;
			return head;
		case ':':
		case '$':
		case '*':
			d = buf + 1;
			if (*d == '-')
			{
				neg = true;
				d++;
			}
			if (d == eol - 1 || eol - 1 - d > 18)
			{
				snprintf(why, why_len, "Redis sent a malformed number");
				return -1;
			}
			for (; d < eol - 1; d++)
			{
				if (!isdigit((unsigned char) *d))
				{
					snprintf(why, why_len, "Redis sent a malformed number");
					return -1;
				}
				n = n * 10 + (*d - '0');
			}
			n = neg ? -n : n;
			break;
		default:
			snprintf(why, why_len, "Redis sent a reply of a type this client does not take (first byte 0x%02x)",
					 (unsigned char) buf[0]);
			return -1;
	}
	if (buf[0] == ':')
	{
		r->integer = n;
		return head;
	}
	if (buf[0] == '*')
	{
		snprintf(why, why_len, "Redis sent an array (of %lld elements) where none is asked for", n);
		return -1;
	}
	if (n == -1)
	{
		r->nil = true;
		return head;
	}
	if (n < 0 || n > REDIS_REPLY_MAX)
	{
		snprintf(why, why_len, "Redis sent a bulk string of %lld bytes, more than the %d this client takes",
				 n, REDIS_REPLY_MAX);
		return -1;
	}
	if (avail < head + n + 2)
		return 0;
	if (buf[head + n] != '\r' || buf[head + n + 1] != '\n')
	{
		snprintf(why, why_len, "Redis sent a malformed bulk string");
		return -1;
	}
	r->s = buf + head;
	r->len = n;
	return head + n + 2;
}

/* Is an error reply's first word one of the n words? */
static bool
error_word_in(const char *s, size_t len, const char *const *words, int n)
{
	size_t		wl = 0;

	while (wl < len && s[wl] != ' ')
		wl++;
	for (int i = 0; i < n; i++)
		if (wl == strlen(words[i]) && strncmp(s, words[i], wl) == 0)
			return true;
	return false;
}

/*
 * Does an error reply say Redis is in a state that passes?  A login
 * refused (NOAUTH, WRONGPASS) is one: the operator corrects the endpoint's
 * auth, and the events wait, as for the other brokers.
 */
static bool
transient_error(const char *s, size_t len)
{
	static const char *const words[] = {"OOM", "READONLY", "LOADING", "MASTERDOWN", "BUSY",
		"TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS"};

	return error_word_in(s, len, words, lengthof(words));
}

/* Does an error reply refuse the connection's login? */
static bool
auth_error(const char *s, size_t len)
{
	static const char *const words[] = {"NOAUTH", "WRONGPASS"};

	return error_word_in(s, len, words, lengthof(words));
}

/* A reply's type, for errors. */
static const char *
reply_type(const Reply *r)
{
	switch (r->type)
	{
		case '+':
			return "a status";
		case '-':
			return "an error";
		case ':':
			return "an integer";
		default:
			return r->nil ? "a nil" : "a bulk string";
	}
}

/* What a message asked, for errors. */
static const char *
asked(const RedisMessage *m)
{
	switch (m->kind)
	{
		case MSG_JOB:
			return "an add (EVALSHA)";
		case MSG_ENTRY:
			return "XADD";
		case MSG_AUTH:
			return "AUTH";
		case MSG_SELECT:
			return "SELECT";
		default:
			return "SCRIPT LOAD";
	}
}

/*
 * The reply r to the oldest command sent.  False, with why, when the
 * connection is not to be trusted any more.
 */
static bool
take_reply(Conn *c, const Reply *r, char *why, size_t why_len)
{
	RedisMessage *m = list_pop(&c->sent);
	int			len = (int) Min(r->len, 200);

	if (m == NULL)
	{
		snprintf(why, why_len, "Redis sent a reply to nothing asked");
		return false;
	}
	switch (m->kind)
	{
		case MSG_AUTH:
		case MSG_SELECT:
			if (r->type == '+')
			{
				c->setup_waiting--;
				own_free(m);
				return true;
			}
			if (r->type == '-')
				snprintf(why, why_len, "%sRedis: %s: %.*s",
						 m->kind == MSG_AUTH ? "authentication failed: " : "",
						 m->kind == MSG_AUTH ? "AUTH as the endpoint's user" : "SELECT",
						 len, r->s);
			else
				snprintf(why, why_len, "Redis answered %s with %s", asked(m), reply_type(r));
			own_free(m);
			return false;
		case MSG_LOAD:
			free(m);
			if (r->type == '-')
			{
				snprintf(c->load_error, sizeof(c->load_error), "%.*s", len, r->s);
				return true;
			}
			if (r->type == '$' && !r->nil && r->len == 40 &&
				pg_strncasecmp(r->s, bullmq_add_sha, 40) == 0)
				return true;
			snprintf(why, why_len, "Redis answered SCRIPT LOAD with %s, not the script's SHA1",
					 reply_type(r));
			return false;
		default:
			break;
	}
	if (r->type == '-')
	{
		if (r->len >= 8 && strncmp(r->s, "NOSCRIPT", 8) == 0 && m->noscript++ == 0)
		{
			/* flushed (SCRIPT FLUSH, a restart): load it again, send again */
			c->script_loaded = false;
			list_append(&c->resend, m);
			return true;
		}
		if (r->len >= 8 && strncmp(r->s, "NOSCRIPT", 8) == 0)
			message_finish(c, m, false, true, "Redis: %.*s (the add script could not be loaded%s%s)",
						   len, r->s, c->load_error[0] ? ": " : "", c->load_error);
		else
			message_finish(c, m, false, !transient_error(r->s, r->len), "%sRedis: %.*s",
						   auth_error(r->s, r->len) ? "authentication failed: " : "", len, r->s);
		return true;
	}
	if (m->kind == MSG_JOB && r->type == ':' && (r->integer == 0 || r->integer == 1))
	{
		snprintf(m->response, sizeof(m->response), r->integer == 1 ?
				 "job %s added" : "job %s already in the queue", m->job_id);
		message_finish(c, m, true, false, "%s", "");
		return true;
	}
	if (m->kind == MSG_ENTRY && r->type == '$' && !r->nil)
	{
		snprintf(m->response, sizeof(m->response), "%.*s", len, r->s);
		message_finish(c, m, true, false, "%s", "");
		return true;
	}
	snprintf(why, why_len, "Redis answered %s with %s", asked(m), reply_type(r));
	message_finish(c, m, false, false, "%s", why);
	return false;
}

/*
 * Read what Redis sent, without waiting, and take every whole reply.
 * False, with why, when the connection failed or sent what is not taken.
 */
static bool
read_replies(Conn *c, char *why, size_t why_len)
{
	for (;;)
	{
		ssize_t		n;
		size_t		off = 0;

		/* (cannot be full: a reply that does not fit was refused whole) */
		Assert(c->in_len < sizeof(c->in));
		if (c->ssl != NULL)
		{
			int			err;

			ERR_clear_error();
			n = SSL_read(c->ssl, c->in + c->in_len, (int) (sizeof(c->in) - c->in_len));
			if (n <= 0)
			{
				err = SSL_get_error(c->ssl, (int) n);
				if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE)
					break;
				if (err == SSL_ERROR_ZERO_RETURN)
					snprintf(why, why_len, "Redis: the server closed the connection");
				else
					tls_reason(c, "reading over TLS", why, why_len);
				return false;
			}
		}
		else
			n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0)
		{
			snprintf(why, why_len, n == 0 ? "Redis: the server closed the connection" :
					 "Redis: the connection failed: %s", strerror(errno));
			return false;
		}
		c->in_len += n;
		for (;;)
		{
			Reply		r;
			ssize_t		took = parse_reply(c->in + off, c->in_len - off, &r, why, why_len);

			if (took < 0)
				return false;
			if (took == 0)
				break;
			off += took;
			if (!take_reply(c, &r, why, why_len))
				return false;
		}
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	list_prepend_all(&c->pending, &c->resend);
	return true;
}

/* Hand the finished messages to the relay, and wake it. */
static void
hand_back(Conn *c)
{
	Publisher  *p = c->p;
	RedisMessage *m;
	char		b = 1;

	if (c->finished.head == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	while ((m = list_pop(&c->finished)) != NULL)
		list_append(&p->done, m);
	pthread_mutex_unlock(&p->lock);
	if (write(relay_wake[1], &b, 1) < 0)
		return;					/* full: the relay wakes anyway */
}

/* Milliseconds from now to t, 0 if past. */
static long
until(uint64 t, uint64 now)
{
	return t > now ? (long) (t - now) : 0;
}

/* The publisher thread: connect, send, read replies, until stopped. */
static void *
publisher_main(void *arg)
{
	Conn		conn;
	Conn	   *c = &conn;
	Publisher  *p = (Publisher *) arg;
	char		why[REDIS_ERROR_LEN] = "";
	bool		gathered = false;

	memset(c, 0, sizeof(Conn));
	c->p = p;
	c->fd = -1;
	for (;;)
	{
		struct pollfd fds[2];
		int			nfds = 1;
		long		wait_ms = 1000;
		uint64		now;
		RedisMessage *m;
		bool		stop;
		int			took = 0;

		pthread_mutex_lock(&p->lock);
		stop = p->stop;
		while ((m = list_pop(&p->inbox)) != NULL)
		{
			list_append(&c->pending, m);
			took++;
		}
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;

		/*
		 * The relay hands a page over one command at a time, and the first
		 * wakes this thread: when few came, wait a moment, once, for the
		 * rest, so that a page goes out in a few writes (and Redis reads it
		 * in a few) rather than in many small ones.
		 */
		if (took > 0 && took < REDIS_GATHER_MIN && c->fd >= 0 && !gathered)
		{
			gathered = true;
			usleep(REDIS_GATHER_US);
			continue;
		}
		gathered = false;

		now = now_ms();
		if (c->fd < 0 && c->pending.head != NULL && now >= c->next_connect_ms)
		{
			c->next_connect_ms = now + REDIS_RECONNECT_MS;
			if (!connect_server(c, why, sizeof(why)))
				fail_all(c, &c->pending, why);
		}
		if (c->fd >= 0)
		{
			send_pending(c);
			if (!flush_out(c, why, sizeof(why)))
				drop(c, why);
		}
		if (c->fd >= 0 && !read_replies(c, why, sizeof(why)))
			drop(c, why);

		now = now_ms();
		if (c->fd >= 0 && c->sent.head != NULL && c->sent.head->deadline_ms <= now)
		{
			snprintf(why, sizeof(why), "Redis: no reply within %ld ms", p->timeout_ms);
			drop(c, why);
		}
		while (c->pending.head != NULL && c->fd < 0 && c->pending.head->deadline_ms <= now)
			message_finish(c, list_pop(&c->pending), false, false, "%s",
						   why[0] ? why : "Redis: not connected within the timeout");
		hand_back(c);

		/* NOSCRIPT'ed jobs to send again over the connection: at once */
		if (c->fd >= 0 && c->pending.head != NULL && c->setup_waiting == 0)
			continue;

		fds[0].fd = p->wake[0];
		fds[0].events = POLLIN;
		if (c->fd >= 0)
		{
			fds[1].fd = c->fd;
			fds[1].events = POLLIN | (c->out_len > c->out_off ? POLLOUT : 0);
			nfds = 2;
			if (c->sent.head != NULL)
				wait_ms = Min(wait_ms, until(c->sent.head->deadline_ms, now));
		}
		else if (c->pending.head != NULL)
		{
			wait_ms = Min(wait_ms, until(c->pending.head->deadline_ms, now));
			wait_ms = Min(wait_ms, until(c->next_connect_ms, now));
		}
		if (poll(fds, nfds, (int) wait_ms) > 0 && (fds[0].revents & POLLIN))
		{
			char		buf[64];

			while (read(p->wake[0], buf, sizeof(buf)) > 0)
				;
		}
	}
	tls_end(c);
	if (c->fd >= 0)
		close(c->fd);
	out_wipe(c);
	free(c->out);
	pthread_mutex_lock(&p->lock);
	p->exited = true;
	pthread_mutex_unlock(&p->lock);
	if (write(relay_wake[1], "1", 1) < 0)
		return NULL;
	return NULL;
}

/* ---------------------------------------------------------------------
 * Publishers, as the relay keeps them
 * ---------------------------------------------------------------------
 */

static void
publisher_wake(Publisher *p)
{
	char		c = 1;

	if (write(p->wake[1], &c, 1) < 0)
		return;
}

static void
publisher_release(Publisher *p)
{
	close(p->wake[0]);
	close(p->wake[1]);
	pthread_mutex_destroy(&p->lock);
	auth_forget(p->password);
	auth_forget(p->username);
	pfree(p->ca_file);
	pfree(p);
}

/* Is p the publisher for u's server, with ep's login and timeout? */
static bool
publisher_is(const Publisher *p, const RedisUrl *u, const TargetEndpoint *ep)
{
	const AuthConfig *a = ep->auth != NULL ? &ep->auth->cfg : NULL;

	return !p->retired && p->port == u->port && p->db == u->db && p->tls == u->tls &&
		strcmp(p->host, u->host) == 0 && p->timeout_ms == Max(ep->timeout_ms, 1) &&
		auth_same(p->username, a != NULL ? a->username : NULL) &&
		auth_same(p->password, a != NULL ? a->password : NULL);
}

/* The publisher of u's server for ep, made if need be; NULL, with why. */
static Publisher *
publisher_of(const RedisUrl *u, const TargetEndpoint *ep, char *why, size_t why_len)
{
	Publisher  *p;
	sigset_t	all_signals;
	sigset_t	old_signals;
	int			rc;

	for (p = publishers; p != NULL; p = p->next)
		if (publisher_is(p, u, ep))
			return p;

	p = MemoryContextAllocZero(TopMemoryContext, sizeof(Publisher));
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
	strlcpy(p->host, u->host, sizeof(p->host));
	p->port = u->port;
	p->db = u->db;
	p->tls = u->tls;
	p->timeout_ms = Max(ep->timeout_ms, 1);
	p->allowed = outbox_allowed_networks;
	p->ca_file = MemoryContextStrdup(TopMemoryContext, outbox_ca_file != NULL ? outbox_ca_file : "");
	if (ep->auth != NULL && ep->auth->cfg.username != NULL)
	{
		p->username = auth_keep(ep->auth->cfg.username);
		p->password = auth_keep(ep->auth->cfg.password);
	}
	pthread_mutex_init(&p->lock, NULL);

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

static void
publisher_free(Publisher *p)
{
	for (Publisher **link = &publishers; *link != NULL; link = &(*link)->next)
		if (*link == p)
		{
			*link = p->next;
			break;
		}
	pthread_join(p->thread, NULL);
	publisher_release(p);
}

/* ---------------------------------------------------------------------
 * Commands, built in the relay's thread
 * ---------------------------------------------------------------------
 */

/*
 * A RESP header: kind ('*' or '$'), n in decimal, CRLF.  Written by hand:
 * a command has a dozen or more of these, and each through
 * appendStringInfo's printf was a measurable part of the relay's time at
 * 100,000 stream entries a second (bench case 22).
 */
static void
resp_header(StringInfo buf, char kind, size_t n)
{
	char		tmp[24];
	int			i = sizeof(tmp);

	tmp[--i] = '\n';
	tmp[--i] = '\r';
	do
	{
		tmp[--i] = (char) ('0' + n % 10);
		n /= 10;
	} while (n > 0);
	tmp[--i] = kind;
	appendBinaryStringInfo(buf, tmp + i, sizeof(tmp) - i);
}

static void
resp_array(StringInfo buf, int n)
{
	resp_header(buf, '*', (size_t) n);
}

static void
resp_arg(StringInfo buf, const char *s, size_t len)
{
	enlargeStringInfo(buf, (int) len + 24);
	resp_header(buf, '$', len);
	memcpy(buf->data + buf->len, s, len);
	buf->len += (int) len;
	buf->data[buf->len++] = '\r';
	buf->data[buf->len++] = '\n';
	buf->data[buf->len] = '\0';
}

static void
resp_str(StringInfo buf, const char *s)
{
	resp_arg(buf, s, strlen(s));
}

/*
 * The job id of a request: u's template expanded into out.  NULL, or why
 * BullMQ would refuse it (then it is a dead letter).
 */
static const char *
job_id_of(const RedisUrl *u, const TargetRequest *tr, char *out)
{
	const char *t = u->job_id;
	StringInfoData id;
	const char *why = NULL;

	initStringInfo(&id);
	while (*t)
	{
		if (strncmp(t, "{event_id}", 10) == 0)
		{
			appendStringInfoString(&id, tr->event_id_str);
			t += 10;
		}
		else if (strncmp(t, "{event_type}", 12) == 0)
		{
			appendStringInfoString(&id, tr->type);
			t += 12;
		}
		else if (strncmp(t, "{endpoint}", 10) == 0)
		{
			appendStringInfoString(&id, tr->endpoint->name != NULL ? tr->endpoint->name : "");
			t += 10;
		}
		else if (strncmp(t, "{key}", 5) == 0)
		{
			if (tr->key == NULL)
				why = "the job_id template has {key} and the event has no key";
			else
				appendStringInfoString(&id, tr->key);
			t += 5;
		}
		else
			appendStringInfoChar(&id, *t++);
	}
	if (why == NULL)
	{
		const char *digits = id.data + (id.data[0] == '-');

		if (id.len > REDIS_JOB_ID_MAX)
			why = "the job id is longer than 255 bytes";
		else if (strchr(id.data, ':') != NULL)
			why = "the job id contains \":\", which BullMQ refuses";
		else if (id.len == 0 || strcmp(id.data, "0") == 0)
			why = "the job id is empty or \"0\", which BullMQ refuses";
		else if (*digits != '\0' && strspn(digits, "0123456789") == strlen(digits))
			why = "the job id is an integer, which BullMQ refuses";
	}
	strlcpy(out, id.data, REDIS_JOB_ID_MAX + 1);
	pfree(id.data);
	return why;
}

/* BullMQ's removeOnComplete / removeOnFail as JSON. */
static void
keep_json(StringInfo buf, const char *name, RedisKeep keep, long n)
{
	if (keep == REDIS_KEEP_UNSET)
		return;
	appendStringInfo(buf, ",\"%s\":", name);
	if (keep == REDIS_KEEP_COUNT)
		appendStringInfo(buf, "%ld", n);
	else
		appendStringInfoString(buf, keep == REDIS_KEEP_TRUE ? "true" : "false");
}

/* EVALSHA of the add script for a job: its id in job_id. */
static void
job_command(StringInfo cmd, const RedisUrl *u, const TargetRequest *tr, const char *job_id)
{
	static const char *const suffixes[] = {"wait", "paused", "meta", "id", "prioritized",
	"pc", "marker", "active", "events"};
	StringInfoData opts;
	StringInfoData key;
	char		number[32];
	int			priority = u->priority ? 32768 - (int) tr->priority : 0;
	int64		ts = GetCurrentTimestamp() / 1000 +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;

	/* opts as Queue.add stores them */
	initStringInfo(&opts);
	appendStringInfo(&opts, "{\"attempts\":%ld", u->attempts);
	if (u->backoff_type[0] != '\0')
		appendStringInfo(&opts, ",\"backoff\":{\"type\":\"%s\",\"delay\":%ld}",
						 u->backoff_type, u->backoff_ms);
	keep_json(&opts, "removeOnComplete", u->remove_on_complete, u->remove_on_complete_n);
	keep_json(&opts, "removeOnFail", u->remove_on_fail, u->remove_on_fail_n);
	if (priority > 0)
		appendStringInfo(&opts, ",\"priority\":%d", priority);
	if (strcmp(u->layout, "4") == 0)
		appendStringInfoString(&opts, ",\"delay\":0");
	appendStringInfoString(&opts, ",\"jobId\":");
	escape_json(&opts, job_id);
	appendStringInfoChar(&opts, '}');

	resp_array(cmd, 3 + 10 + 8);
	resp_str(cmd, "EVALSHA");
	resp_str(cmd, bullmq_add_sha);
	resp_str(cmd, "10");
	initStringInfo(&key);
	appendStringInfo(&key, "%s:%s:%s", u->prefix, u->name, job_id);
	resp_arg(cmd, key.data, key.len);
	for (int i = 0; i < (int) lengthof(suffixes); i++)
	{
		resetStringInfo(&key);
		appendStringInfo(&key, "%s:%s:%s", u->prefix, u->name, suffixes[i]);
		resp_arg(cmd, key.data, key.len);
	}
	resp_str(cmd, job_id);
	resp_str(cmd, tr->type);
	resp_str(cmd, tr->body);
	resp_arg(cmd, opts.data, opts.len);
	snprintf(number, sizeof(number), "%d", priority);
	resp_str(cmd, number);
	snprintf(number, sizeof(number), INT64_FORMAT, ts);
	resp_str(cmd, number);
	resp_str(cmd, u->layout);
	resp_str(cmd, "1");
	pfree(opts.data);
	pfree(key.data);
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
 * len bytes at s as a JSON string: copied as they are when none needs
 * escaping (a header's name and value nearly always), else through
 * escape_json, which escapes the same bytes.
 */
static void
json_string(StringInfo h, const char *s, size_t len)
{
	char	   *copy;

	for (size_t i = 0; i < len; i++)
		if ((unsigned char) s[i] < ' ' || s[i] == '"' || s[i] == '\\')
		{
			copy = pnstrdup(s, len);
			escape_json(h, copy);
			pfree(copy);
			return;
		}
	enlargeStringInfo(h, (int) len + 2);
	appendStringInfoChar(h, '"');
	appendBinaryStringInfo(h, s, (int) len);
	appendStringInfoChar(h, '"');
}

/* Add a "Name: value" line to a JSON object being built. */
static void
header_json(StringInfo h, const char *line, bool *first)
{
	size_t		name_len = strcspn(line, ":");
	const char *value = line_value(line, name_len);

	appendStringInfoChar(h, *first ? '{' : ',');
	*first = false;
	json_string(h, line, name_len);
	appendStringInfoChar(h, ':');
	json_string(h, value, strlen(value));
}

/*
 * XADD of an entry: event_id, type, key (when the event has one),
 * timestamp (RFC 3339), headers (a JSON object: the format's, then the
 * event's own) and body.
 */
static void
entry_command(StringInfo cmd, const RedisUrl *u, const TargetRequest *tr)
{
	EventParts	parts = {0};
	char	   *format_lines[OUTBOX_FORMAT_MAX_HEADERS];
	int			n_format;
	StringInfoData h;
	bool		first = true;
	char		when[OUTBOX_TIME_LEN];
	char		number[32];

	parts.event_id = &tr->event_id;
	parts.type = tr->type;
	parts.emitted_at = tr->emitted_at;
	parts.key = tr->key;
	n_format = outbox_format_headers(tr->endpoint->format, &parts, format_lines);
	initStringInfo(&h);
	for (int i = 0; i < n_format; i++)
		header_json(&h, format_lines[i], &first);
	for (int i = 1; i < n_format; i++)
		pfree(format_lines[i]);	/* (the first, Content-Type, is static) */
	for (int i = 0; i < tr->n_event_headers; i++)
		if (!outbox_format_sets_header(tr->endpoint->format, tr->event_headers[i]))
			header_json(&h, tr->event_headers[i], &first);
	appendStringInfoString(&h, first ? "{}" : "}");
	outbox_format_time(tr->emitted_at, when);

	resp_array(cmd, 3 + (u->maxlen > 0 ? 3 : 0) + 10 + (tr->key != NULL ? 2 : 0));
	resp_str(cmd, "XADD");
	resp_str(cmd, u->name);
	if (u->maxlen > 0)
	{
		resp_str(cmd, "MAXLEN");
		resp_str(cmd, "~");
		snprintf(number, sizeof(number), "%ld", u->maxlen);
		resp_str(cmd, number);
	}
	resp_str(cmd, "*");
	resp_str(cmd, "event_id");
	resp_str(cmd, tr->event_id_str);
	resp_str(cmd, "type");
	resp_str(cmd, tr->type);
	if (tr->key != NULL)
	{
		resp_str(cmd, "key");
		resp_str(cmd, tr->key);
	}
	resp_str(cmd, "timestamp");
	resp_str(cmd, when);
	resp_str(cmd, "headers");
	resp_arg(cmd, h.data, h.len);
	resp_str(cmd, "body");
	resp_str(cmd, tr->body);
	pfree(h.data);
}

/* ---------------------------------------------------------------------
 * The target
 * ---------------------------------------------------------------------
 */

static void
done_push(TargetRequest *tr)
{
	target_reserve(&done, &done_room, n_done + 1);
	done[n_done++] = tr;
}

static void
relay_wake_self(void)
{
	char		c = 1;

	woke_self = true;
	if (write(relay_wake[1], &c, 1) < 0)
		return;
}

/* A request that never reaches a thread: finished here. */
static void
finish_now(TargetRequest *tr, TargetOutcome outcome, const char *fmt,...)
	pg_attribute_printf(3, 4);

static void
finish_now(TargetRequest *tr, TargetOutcome outcome, const char *fmt,...)
{
	va_list		args;

	tr->result->outcome = outcome;
	va_start(args, fmt);
	vsnprintf(tr->result->error, sizeof(tr->result->error), fmt, args);
	va_end(args);
	done_push(tr);
	relay_wake_self();
}

/*
 * The buffer a command is built in, emptied: one for the relay, kept across
 * submits (in TopMemoryContext) so that a page of commands does not
 * allocate and grow one each; let go of after a command over 1 MB.
 */
static StringInfo
command_buffer(void)
{
	static StringInfoData buf;

	if (buf.data != NULL && buf.maxlen > 1024 * 1024)
	{
		pfree(buf.data);
		buf.data = NULL;
	}
	if (buf.data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&buf);
		MemoryContextSwitchTo(old);
	}
	else
		resetStringInfo(&buf);
	return &buf;
}

/*
 * Build a delivery's command and hand it to its server's publisher thread.
 * A job id BullMQ would refuse is a dead letter at once; what cannot be
 * handed over is tried again.
 */
static void
redis_submit(TargetRequest *tr, int relay_in_flight)
{
	const TargetEndpoint *ep = tr->endpoint;
	RedisUrl	u;
	const char *problem;
	char		why[256];
	char		job_id[REDIS_JOB_ID_MAX + 1] = "";
	Publisher  *p;
	StringInfo	cmd;
	RedisMessage *m;
	bool		was_empty;

	if (!redis_parse_url(ep->url, &u, &problem))
	{
		finish_now(tr, TARGET_DEAD_LETTER, "Redis: %s", problem);
		return;
	}
	if (u.bullmq && (problem = job_id_of(&u, tr, job_id)) != NULL)
	{
		finish_now(tr, TARGET_DEAD_LETTER, "BullMQ: %s (\"%s\")", problem, job_id);
		return;
	}
	p = publisher_of(&u, ep, why, sizeof(why));
	if (p == NULL)
	{
		finish_now(tr, TARGET_RETRY, "Redis: %s", why);
		return;
	}
	cmd = command_buffer();
	if (u.bullmq)
		job_command(cmd, &u, tr, job_id);
	else
		entry_command(cmd, &u, tr);
	m = malloc(sizeof(RedisMessage) + cmd->len);
	if (m == NULL)
	{
		finish_now(tr, TARGET_RETRY, "Redis: out of memory");
		return;
	}
	memset(m, 0, sizeof(RedisMessage));
	m->kind = u.bullmq ? MSG_JOB : MSG_ENTRY;
	m->tr = tr;
	m->cmd = (char *) (m + 1);
	memcpy(m->cmd, cmd->data, cmd->len);
	m->cmd_len = cmd->len;
	m->body_len = strlen(tr->body);
	strlcpy(m->job_id, job_id, sizeof(m->job_id));
	INSTR_TIME_SET_CURRENT(m->start);
	m->deadline_ms = now_ms() + p->timeout_ms;

	p->in_flight++;
	p->used_at = GetCurrentTimestamp();
	pthread_mutex_lock(&p->lock);
	was_empty = p->inbox.head == NULL;
	list_append(&p->inbox, m);
	pthread_mutex_unlock(&p->lock);
	if (was_empty)
		publisher_wake(p);
}

static TargetRequest *
redis_next_done(void)
{
	if (done_next < n_done)
		return done[done_next++];
	n_done = done_next = 0;
	return NULL;
}

/* A finished message's outcome into its delivery's result; frees it. */
static void
collect(RedisMessage *m)
{
	TargetRequest *tr = m->tr;
	TargetResult *r = tr->result;

	INSTR_TIME_SUBTRACT(m->end, m->start);
	r->duration_ms = INSTR_TIME_GET_MILLISEC(m->end);
	r->bytes = m->body_len;
	if (m->ok)
	{
		r->outcome = TARGET_DELIVERED;
		r->response_len = strlcpy(r->response, m->response, sizeof(r->response));
		r->response_len = Min(r->response_len, sizeof(r->response) - 1);
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
 * messages; stop the threads of publishers retired (or unused for
 * PUBLISHER_IDLE_MS) once empty, and free those whose thread ended.
 */
static void
redis_poll(void)
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
		RedisMessage *m;
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

/* At exit: the threads are told to stop; nothing is waited for. */
static void
redis_abandon_all(void)
{
	for (Publisher *p = publishers; p != NULL; p = p->next)
	{
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_mutex_unlock(&p->lock);
		publisher_wake(p);
	}
}

/* At the relay's start: the pipe, and the add script's SHA1. */
static void
redis_start(void)
{
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (relay_wake[0] >= 0)
		return;
	target_wake_pipe(relay_wake);
	if (EVP_Digest(bullmq_add, strlen(bullmq_add), digest, &n, EVP_sha1(), NULL) != 1 || n != 20)
		elog(ERROR, "could not compute the SHA1 of the BullMQ add script");
	for (unsigned int i = 0; i < n; i++)
		sprintf(bullmq_add_sha + 2 * i, "%02x", digest[i]);
}

/*
 * After a reload: publishers made under other allowed networks or another
 * outbox.ca_file retire.
 */
static void
redis_configure(void)
{
	for (Publisher *p = publishers; p != NULL; p = p->next)
		if (!address_networks_equal(&p->allowed, &outbox_allowed_networks) ||
			strcmp(p->ca_file, outbox_ca_file != NULL ? outbox_ca_file : "") != 0)
			p->retired = true;
}

/* TargetOps.check_url: a URL redis_parse_url reads, as written. */
static char *
redis_check_url(const char *url, const char **problem)
{
	RedisUrl	parsed;

	return redis_parse_url(url, &parsed, problem) ? pstrdup(url) : NULL;
}

const TargetOps outbox_redis_target = {
	.name = "redis",
	.check_url = redis_check_url,
	.start = redis_start,
	.configure = redis_configure,
	.submit = redis_submit,
	.next_done = redis_next_done,
	.poll = redis_poll,
	.abandon_all = redis_abandon_all,
	.takes_slot = false,
};
