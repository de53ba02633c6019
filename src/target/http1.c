/*-------------------------------------------------------------------------
 *
 * http1.c
 *	  HTTP/1.1 on plain (http://) connections: the request written and the
 *	  response read by the relay itself, on a connection libcurl opened.
 *
 * libcurl resolves the name, applies the address policy (http.c,
 * open_socket_cb), connects and hands the socket over (http.c,
 * http_connect and http_next_done); from then on the connection is this
 * file's: one request at a time, kept alive for the next request to the
 * same origin.  What libcurl does for each request on a kept connection
 * (its state machine, the connection cache walked for a match, the
 * handle's buffers) cost more than everything else the relay does for a
 * delivery: on its own it reached 0.40 of wrk's rate, where the relay
 * needs 0.30 (bench/RESULTS.md, case 8).  HTTPS stays with libcurl (TLS,
 * HTTP/2).
 *
 * The response is read as libcurl's callbacks would see it: every status
 * and header line through http_response_header, every byte of the body
 * through http_response_keep, so the bounds of http.h and what the attempt
 * log keeps are the same on both paths.  The framing is h1parse.c's: a
 * Content-Length, chunks, or the connection's end; 1xx responses are
 * skipped; anything else that is not HTTP/1.x fails the request and closes
 * the connection.
 *
 * The endpoint's timeout counts from http_submit, connecting included.  A
 * kept connection that the receiver closed before answering (it had timed
 * the connection out as it was reused) is not the receiver's failure: the
 * request is sent again once on a fresh connection, as libcurl does.
 *
 * Memory: a connection is malloc'd with a read buffer of HTTP1_BUFFER bytes,
 * grown up to the header bound when one line is longer; the request's head
 * is malloc'd while it is sent.  Idle connections are kept up to the
 * relay's limit on connections (http1_retire), each for at most
 * HTTP1_MAX_IDLE_MS.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "lib/pairingheap.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "h1parse.h"
#include "http1.h"

#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>

#define HTTP1_BUFFER		16384
#define HTTP1_MAX_ORIGIN	300
/* libcurl's default (CURLOPT_MAXAGE_CONN): older idle connections are closed */
#define HTTP1_MAX_IDLE_MS	118000
/* origins kept without a connection before they are pruned (prune_origins) */
#define ORIGINS_KEPT		(2 * max_idle + 256)

typedef struct Origin
{
	char		key[HTTP1_MAX_ORIGIN];	/* "http://host:port" as in the URL */
	bool		usable;			/* false: libcurl sends its requests */
	char		host[HTTP1_MAX_ORIGIN];	/* the Host header, as libcurl sends it */
	dlist_head	idle;			/* its idle connections, newest first */
	int			conns;			/* its connections, idle or in use */
} Origin;

typedef struct Conn
{
	pgsocket	fd;
	uint32		generation;		/* the pool it was made under (http.c) */
	Origin	   *origin;
	HttpRequest *req;			/* in flight on it, or NULL when idle */
	bool		reused;			/* a request was answered on it before */
	TimestampTz idle_since;
	dlist_node	origin_node;	/* in origin->idle while idle */
	dlist_node	lru_node;		/* in idle_lru while idle */
	pairingheap_node due_node;	/* in due while a request is on it */
	TimestampTz due;			/* when that request times out */

	/* the request being written: its head, then the body (req->body) */
	char	   *head;
	size_t		head_len;
	size_t		sent;			/* of head and body together */

	/* the response being read (its parser is req->parser) */
	char	   *buf;
	size_t		buf_size;
	size_t		buf_len;
	uint64		received;		/* bytes read for this request */
} Conn;

static HTAB *origins = NULL;
static Conn **conns = NULL;		/* by descriptor */
static int	n_conns = 0;
static dlist_head idle_lru = DLIST_STATIC_INIT(idle_lru);	/* oldest first */
static int	n_idle = 0;
static int	max_idle = 64;		/* connections kept, in use ones included */
static int	n_busy = 0;			/* connections with a request on them */
static uint32 current_generation = 0;
static dlist_head done = DLIST_STATIC_INIT(done);

static int
due_cmp(const pairingheap_node *a, const pairingheap_node *b, void *arg)
{
	const Conn *x = pairingheap_const_container(Conn, due_node, a);
	const Conn *y = pairingheap_const_container(Conn, due_node, b);

	/* the first due on top */
	return x->due < y->due ? 1 : x->due > y->due ? -1 : 0;
}

static pairingheap due_heap = {due_cmp, NULL, NULL};

/*
 * The Host header of url as libcurl sends it: the host in ASCII (an
 * international name in punycode, an IPv6 address in brackets without its
 * zone), and the port unless it is 80.  False when libcurl cannot say.
 */
static bool
host_header(const char *url, char *dst, size_t size)
{
	CURLU	   *h = curl_url();
	char	   *host = NULL;
	char	   *port = NULL;
	bool		ok = false;

	if (h != NULL && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(h, CURLUPART_HOST, &host, CURLU_PUNYCODE) == CURLUE_OK)
	{
		if (curl_url_get(h, CURLUPART_PORT, &port, 0) == CURLUE_OK && strcmp(port, "80") != 0)
			ok = snprintf(dst, size, "%s:%s", host, port) < (int) size;
		else
			ok = snprintf(dst, size, "%s", host) < (int) size;
		for (const char *c = dst; ok && *c; c++)
			if ((unsigned char) *c <= 0x20 || (unsigned char) *c >= 0x7f)
				ok = false;
	}
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(h);
	return ok;
}

/*
 * Before an origin is added to a table that holds more than
 * ORIGINS_KEPT, the origins without a connection go: a database whose
 * endpoints move through many hosts keeps no more origins than it has
 * connections, plus that many.  Only connections point at an origin.
 */
static void
prune_origins(void)
{
	HASH_SEQ_STATUS seq;
	Origin	   *o;

	if (hash_get_num_entries(origins) <= ORIGINS_KEPT)
		return;
	hash_seq_init(&seq, origins);
	while ((o = (Origin *) hash_seq_search(&seq)) != NULL)
		if (o->conns == 0)
			(void) hash_search(origins, o->key, HASH_REMOVE, NULL);
}

/*
 * The origin of a plain http URL, or NULL for any other or one this file
 * does not send to.  URLs reach here as http_check_url normalized them: a
 * lower-case scheme and a path.  Looked up once per request; what libcurl
 * says of a host is asked once per origin.
 */
static Origin *
origin_of(const char *url)
{
	char		key[HTTP1_MAX_ORIGIN];
	const char *path;
	bool		found;
	Origin	   *o;

	if (strncmp(url, "http://", 7) != 0 || (path = strchr(url + 7, '/')) == NULL ||
		path - url >= HTTP1_MAX_ORIGIN)
		return NULL;
	if (origins == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = HTTP1_MAX_ORIGIN;
		ctl.entrysize = sizeof(Origin);
		ctl.hcxt = TopMemoryContext;
		origins = hash_create("outbox http origins", 64, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	memset(key, 0, sizeof(key));
	memcpy(key, url, path - url);
	o = (Origin *) hash_search(origins, key, HASH_FIND, NULL);
	if (o == NULL)
	{
		prune_origins();
		o = (Origin *) hash_search(origins, key, HASH_ENTER, &found);
		dlist_init(&o->idle);
		o->conns = 0;
		o->usable = host_header(url, o->host, sizeof(o->host));
	}
	return o->usable ? o : NULL;
}

static void
idle_remove(Conn *c)
{
	dlist_delete(&c->origin_node);
	dlist_delete(&c->lru_node);
	n_idle--;
}

/* Close a connection that has no request on it any more. */
static void
conn_close(Conn *c)
{
	Assert(c->req == NULL);
	c->origin->conns--;
	http_forget(c->fd);
	close(c->fd);
	conns[c->fd] = NULL;
	free(c->head);
	free(c->buf);
	free(c);
}

/*
 * The request on c is done (results filled in): to the done list.
 * Returns when, for the connection's idle time.
 */
static TimestampTz
finish(Conn *c)
{
	HttpRequest *req = c->req;
	TimestampTz now = GetCurrentTimestamp();

	pairingheap_remove(&due_heap, &c->due_node);
	req->duration_ms = (double) (now - req->submitted_at) / 1000.0;
	dlist_push_tail(&done, &req->node);
	c->req = NULL;
	n_busy--;
	free(c->head);
	c->head = NULL;
	return now;
}

/* The request failed with error; the connection is closed. */
static void
fail(Conn *c, const char *error)
{
	HttpRequest *req = c->req;

	req->status = 0;
	req->transport_error = true;
	strlcpy(req->error, error, sizeof(req->error));
	(void) finish(c);
	conn_close(c);
}

static void retry_fresh(Conn *c);

/*
 * Sending or receiving failed (errno): on a kept connection before any
 * answer, the receiver had closed it, and the request goes again on a
 * fresh one (retry_fresh); otherwise the request fails.
 */
static void
io_failed(Conn *c, const char *what)
{
	char		why[128];

	if (c->reused && c->received == 0)
	{
		retry_fresh(c);
		return;
	}
	snprintf(why, sizeof(why), "%s failed: %s%s", what, strerror(errno),
			 errno == ECONNRESET ? " (the connection was reset)" : "");
	fail(c, why);
}

/*
 * A kept connection the receiver had closed: send the request again on a
 * fresh one, once.
 */
static void
retry_fresh(Conn *c)
{
	HttpRequest *req = c->req;

	pairingheap_remove(&due_heap, &c->due_node);
	c->req = NULL;
	n_busy--;
	conn_close(c);
	http_response_reset(req);
	http_connect(req);
}

/* The response is complete: the connection idles, or is closed. */
static void
complete(Conn *c, bool reusable)
{
	TimestampTz now;

	/* an answer before the whole request was sent: the connection is spent */
	if (c->sent < c->head_len + c->req->body_len)
		reusable = false;
	c->req->status = c->req->parser.status;
	now = finish(c);
	if (!reusable || c->generation != current_generation || max_idle == 0)
	{
		conn_close(c);
		return;
	}
	c->reused = true;
	c->idle_since = now;
	c->buf_len = 0;
	free(c->buf);				/* an idle connection holds no buffer */
	c->buf = NULL;
	c->buf_size = 0;
	dlist_push_head(&c->origin->idle, &c->origin_node);
	dlist_push_tail(&idle_lru, &c->lru_node);
	n_idle++;
	/* watched for reading while it idles: a close wakes us (http1_event) */
	if (!http_watch(c->fd, EPOLLIN))
	{
		idle_remove(c);
		conn_close(c);
		return;
	}
	/* connections in use and idle together at most max_idle */
	while (n_idle > 0 && n_idle + n_busy > max_idle)
	{
		Conn	   *old = dlist_container(Conn, lru_node, dlist_head_node(&idle_lru));

		idle_remove(old);
		conn_close(old);
	}
}

/* Write what is left of the request; then wait for the response. */
static void
send_request(Conn *c)
{
	HttpRequest *req = c->req;

	while (c->sent < c->head_len + req->body_len)
	{
		struct iovec iov[2];
		struct msghdr msg;
		int			n_iov = 0;
		ssize_t		n;

		if (c->sent < c->head_len)
		{
			iov[n_iov].iov_base = c->head + c->sent;
			iov[n_iov++].iov_len = c->head_len - c->sent;
		}
		if (req->body_len > 0)
		{
			size_t		from = c->sent > c->head_len ? c->sent - c->head_len : 0;

			iov[n_iov].iov_base = (char *) req->body + from;
			iov[n_iov++].iov_len = req->body_len - from;
		}
		memset(&msg, 0, sizeof(msg));
		msg.msg_iov = iov;
		msg.msg_iovlen = n_iov;
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		{
			/* reading too: a receiver may answer before it has read all */
			if (!http_watch(c->fd, EPOLLOUT | EPOLLIN))
				fail(c, "could not watch the connection's socket");
			return;
		}
		if (n < 0)
		{
			io_failed(c, "sending the request");
			return;
		}
		c->sent += n;
	}
	if (!http_watch(c->fd, EPOLLIN))
		fail(c, "could not watch the connection's socket");
}

/* Start req on c: the request's head written, then sent. */
static void
start(Conn *c, HttpRequest *req)
{
	StringInfoData h;
	const char *path = strchr(req->url + 7, '/');
	bool		has_type = false;
	bool		has_accept = false;
	bool		has_agent = false;

	c->req = req;
	n_busy++;
	c->sent = 0;
	c->buf_len = 0;
	c->received = 0;
	h1_init(&req->parser);
	c->due = req->submitted_at + (TimestampTz) req->timeout_ms * 1000;
	pairingheap_add(&due_heap, &c->due_node);

	/*
	 * As libcurl writes it: a header line of ours replaces its default of
	 * the same name, and one without a value ("Expect:") is not sent.
	 */
	initStringInfo(&h);
	appendStringInfo(&h, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, c->origin->host);
	for (struct curl_slist *l = req->headers; l != NULL; l = l->next)
	{
		const char *colon = strchr(l->data, ':');
		size_t		name_len = colon ? (size_t) (colon - l->data) : strlen(l->data);

		if (name_len == 12 && pg_strncasecmp(l->data, "content-type", 12) == 0)
			has_type = true;
		else if (name_len == 6 && pg_strncasecmp(l->data, "accept", 6) == 0)
			has_accept = true;
		else if (name_len == 10 && pg_strncasecmp(l->data, "user-agent", 10) == 0)
			has_agent = true;
	}
	if (!has_agent)
		appendStringInfoString(&h, "User-Agent: outbox/" OUTBOX_VERSION "\r\n");
	if (!has_accept)
		appendStringInfoString(&h, "Accept: */*\r\n");
	for (struct curl_slist *l = req->headers; l != NULL; l = l->next)
	{
		const char *colon = strchr(l->data, ':');
		const char *value = colon ? colon + 1 : "";

		while (*value == ' ' || *value == '\t')
			value++;
		if (colon != NULL && *value != '\0')
			appendStringInfo(&h, "%s\r\n", l->data);
	}
	appendStringInfo(&h, "Content-Length: %zu\r\n", req->body_len);
	if (!has_type)
		appendStringInfoString(&h, "Content-Type: application/x-www-form-urlencoded\r\n");
	appendStringInfoString(&h, "\r\n");
	c->head = malloc(h.len);
	if (c->head == NULL)
	{
		pfree(h.data);
		fail(c, "out of memory");
		return;
	}
	memcpy(c->head, h.data, h.len);
	c->head_len = h.len;
	pfree(h.data);
	send_request(c);
}

/*
 * Send req if it is plain http: on a kept connection to its origin that is
 * still quiet (a zero-time peek: no answer the receiver sent out of turn,
 * no close), or on one libcurl opens for it (http_connect).  False for a
 * request that libcurl sends.
 */
bool
http1_submit(HttpRequest *req)
{
	Origin	   *o = origin_of(req->url);

	if (o == NULL)
		return false;
	while (!dlist_is_empty(&o->idle))
	{
		Conn	   *c = dlist_container(Conn, origin_node, dlist_pop_head_node(&o->idle));
		char		b;

		dlist_delete(&c->lru_node);
		n_idle--;
		if (c->generation != current_generation ||
			TimestampDifferenceExceeds(c->idle_since, req->submitted_at, HTTP1_MAX_IDLE_MS) ||
			recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 ||
			(errno != EAGAIN && errno != EWOULDBLOCK))
		{
			conn_close(c);
			continue;
		}
		start(c, req);
		return true;
	}
	http_connect(req);
	return true;
}

/*
 * No memory for a connection libcurl made for req: the socket is closed,
 * and req fails, to be retried like any transport error.
 */
static void
unconnected(HttpRequest *req, pgsocket fd)
{
	http_forget(fd);
	close(fd);
	req->status = 0;
	req->transport_error = true;
	strlcpy(req->error, "out of memory for a connection", sizeof(req->error));
	req->duration_ms = (double) (GetCurrentTimestamp() - req->submitted_at) / 1000.0;
	dlist_push_tail(&done, &req->node);
}

/* libcurl connected req's socket fd (http.c): the connection is ours. */
void
http1_connected(HttpRequest *req, pgsocket fd, uint32 generation)
{
	Conn	   *c;

	if (fd >= n_conns)
	{
		int			grow = Max(fd + 1, Max(64, n_conns * 2));
		Conn	  **more = realloc(conns, sizeof(Conn *) * grow);

		if (more == NULL)
		{
			unconnected(req, fd);
			return;
		}
		memset(more + n_conns, 0, sizeof(Conn *) * (grow - n_conns));
		conns = more;
		n_conns = grow;
	}
	c = calloc(1, sizeof(Conn));
	if (c == NULL)
	{
		unconnected(req, fd);
		return;
	}
	c->fd = fd;
	c->generation = generation;
	c->origin = origin_of(req->url);
	Assert(c->origin != NULL);
	c->origin->conns++;
	conns[fd] = c;
	start(c, req);
}

/*
 * Make room in the buffer for the rest of a head line longer than what it
 * holds, up to the head's bound.  False once the request failed.
 */
static bool
grow_for_line(Conn *c)
{
	HttpRequest *req = c->req;
	size_t		grow = Min(c->buf_size * 2, OUTBOX_RESPONSE_HEADERS + 2);
	char	   *more;

	if (grow <= c->buf_size)
	{
		/* the line alone passes the bound */
		(void) http_response_header(req, c->buf, c->buf_len);
		fail(c, req->exceeded ? req->exceeded :
			 "the response's headers (1xx responses included) exceeded 64 kB");
		return false;
	}
	more = realloc(c->buf, grow);
	if (more == NULL)
	{
		fail(c, "out of memory");
		return false;
	}
	c->buf = more;
	c->buf_size = grow;
	return true;
}

/*
 * Read what the buffer holds through the request's parser (h1parse.c):
 * head lines to http.c's bounds, the decoded body to what the attempt log
 * keeps.  Returns false once the request is finished (or failed) and c may
 * be gone.
 */
static bool
parse(Conn *c, bool at_end)
{
	HttpRequest *req = c->req;
	H1Parser   *p = &req->parser;
	size_t		pos = 0;

	/* a kept connection closed as the request came: not the receiver's failure */
	if (at_end && c->reused && c->received == 0)
	{
		retry_fresh(c);
		return false;
	}
	for (;;)
	{
		size_t		used;
		const char *out;
		size_t		out_len;
		H1Event		ev = h1_parse(p, c->buf + pos, c->buf_len - pos, at_end,
								  &used, &out, &out_len);

		pos += used;
		switch (ev)
		{
			case H1_MORE:
				break;
			case H1_STATUS:
			case H1_HEADER:
			case H1_HEAD_END:
				if (!http_response_header(req, out, out_len))
				{
					fail(c, req->exceeded);
					return false;
				}
				continue;
			case H1_BODY:
				http_response_keep(req, out, out_len);
				if (http_response_bounds(req))
					continue;
				if (req->exceeded != NULL)
					fail(c, req->exceeded);
				else
					complete(c, false); /* enough read: hang up, the status
										 * counts (http.c, write_cb) */
				return false;
			case H1_DONE:
				/* bytes after the response: the receiver is out of step */
				complete(c, p->keep && pos == c->buf_len && !at_end);
				return false;
			case H1_ERROR:
				fail(c, p->error);
				return false;
		}
		break;
	}
	if (!http_response_bounds(req))
	{
		/* chunk framing alone (H1_MORE takes it without an event) */
		if (req->exceeded != NULL)
			fail(c, req->exceeded);
		else
			complete(c, false);
		return false;
	}
	/* keep what is not read yet at the buffer's start */
	if (pos > 0)
	{
		memmove(c->buf, c->buf + pos, c->buf_len - pos);
		c->buf_len -= pos;
	}
	if (h1_in_head(p) && c->buf_len >= c->buf_size - 1)
		return grow_for_line(c);
	return true;
}

/* Read what the socket has. */
static void
receive(Conn *c)
{
	for (;;)
	{
		ssize_t		n;

		if (c->buf == NULL)
		{
			c->buf = malloc(HTTP1_BUFFER);
			if (c->buf == NULL)
			{
				fail(c, "out of memory");
				return;
			}
			c->buf_size = HTTP1_BUFFER;
		}
		n = recv(c->fd, c->buf + c->buf_len, c->buf_size - c->buf_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0)
		{
			io_failed(c, "receiving the response");
			return;
		}
		c->buf_len += n;
		c->received += n;
		if (!parse(c, n == 0))
			return;
		if (n == 0)
			return;
	}
}

/* The epoll set says fd is ready (http.c, act_on_sockets). */
void
http1_event(pgsocket fd, uint32 events)
{
	Conn	   *c = fd < n_conns ? conns[fd] : NULL;

	if (c == NULL)
		return;					/* closed since (and out of the set with it) */
	if (c->req == NULL)
	{
		/* an idle connection woke: the receiver closed it, or spoke out of turn */
		idle_remove(c);
		conn_close(c);
		return;
	}
	if (c->sent == c->head_len + c->req->body_len)
	{
		receive(c);
		return;
	}
	/* still sending: an early answer is read first */
	if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
	{
		receive(c);
		if (conns[fd] != c || c->req == NULL)
			return;				/* answered, or failed */
	}
	if (events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
		send_request(c);
}

/* Is a request done and not yet taken (one that failed as it was sent)? */
bool
http1_any_done(void)
{
	return !dlist_is_empty(&done);
}

HttpRequest *
http1_next_done(void)
{
	HttpRequest *req;

	if (dlist_is_empty(&done))
		return NULL;
	req = dlist_container(HttpRequest, node, dlist_pop_head_node(&done));
	curl_slist_free_all(req->headers);
	req->headers = NULL;
	return req;
}

/* When the first request in flight here times out; 0 when none is. */
TimestampTz
http1_next_due(void)
{
	if (pairingheap_is_empty(&due_heap))
		return 0;
	return pairingheap_container(Conn, due_node, pairingheap_first(&due_heap))->due;
}

/* Fail the requests whose time is up. */
void
http1_expire(TimestampTz now)
{
	while (!pairingheap_is_empty(&due_heap))
	{
		Conn	   *c = pairingheap_container(Conn, due_node, pairingheap_first(&due_heap));
		char		why[128];

		if (c->due > now)
			break;
		snprintf(why, sizeof(why), "timed out after %ld ms with %llu bytes of the response received",
				 c->req->timeout_ms, (unsigned long long) c->received);
		fail(c, why);
	}
}

/*
 * The pool is now generation, keeping at most max idle connections
 * (http.c, http_configure): idle connections of other pools are closed now,
 * those in use once their requests are done.
 */
void
http1_retire(uint32 generation, int max)
{
	dlist_mutable_iter iter;

	current_generation = generation;
	max_idle = max;
	dlist_foreach_modify(iter, &idle_lru)
	{
		Conn	   *c = dlist_container(Conn, lru_node, iter.cur);

		if (c->generation != generation || n_idle > max_idle)
		{
			idle_remove(c);
			conn_close(c);
		}
	}
}

/* Drop every request in flight (after an error): their connections close. */
void
http1_abandon_all(void)
{
	while (!pairingheap_is_empty(&due_heap))
	{
		Conn	   *c = pairingheap_container(Conn, due_node, pairingheap_first(&due_heap));

		pairingheap_remove_first(&due_heap);
		curl_slist_free_all(c->req->headers);
		c->req->headers = NULL;
		c->req = NULL;
		n_busy--;
		conn_close(c);
	}
	while (!dlist_is_empty(&done))
	{
		HttpRequest *req = dlist_container(HttpRequest, node, dlist_pop_head_node(&done));

		curl_slist_free_all(req->headers);
		req->headers = NULL;
	}
}

#else							/* !HAVE_SYS_EPOLL_H */

/* Without epoll every request goes through libcurl. */
bool
http1_submit(HttpRequest *req)
{
	return false;
}
void
http1_connected(HttpRequest *req, pgsocket fd, uint32 generation)
{
	elog(ERROR, "http1_connected without epoll");
}
void
http1_event(pgsocket fd, uint32 events)
{
}
HttpRequest *
http1_next_done(void)
{
	return NULL;
}
bool
http1_any_done(void)
{
	return false;
}
TimestampTz
http1_next_due(void)
{
	return 0;
}
void
http1_expire(TimestampTz now)
{
}
void
http1_retire(uint32 generation, int max)
{
}
void
http1_abandon_all(void)
{
}
#endif							/* HAVE_SYS_EPOLL_H */
