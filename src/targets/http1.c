/*-------------------------------------------------------------------------
 *
 * http1.c
 *	  HTTP/1.1 over http and https: the TLS handshake made, the request
 *	  written and the response read by the relay itself, on a TCP
 *	  connection libcurl opened.
 *
 * libcurl resolves the name, applies the address policy (http.c,
 * open_socket_cb), connects and hands the socket over (http.c, through
 * the Http1Host it starts this file with, and http_next_done); from then
 * on the connection is this file's: TLS through OpenSSL where the URL is https, then one request at
 * a time, kept alive for the next request to the same origin.  What
 * libcurl does for each request on a kept connection (its state machine,
 * the connection cache walked for a match, the handle's buffers) cost more
 * than everything else the relay does for a delivery; over https it
 * reached half the rate of plain http (DESIGN.md, "HTTP/1.1 without
 * libcurl's requests").
 * libcurl still sends what this file does not: to a receiver that speaks
 * only HTTP/2 (it refuses the ALPN offer of http/1.1, or picks another
 * protocol) and with a client certificate that cannot be loaded (libcurl's
 * error says why).
 *
 * TLS: one SSL_CTX per client certificate (none, for most endpoints),
 * made again when the pool's generation changes (outbox.ca_file or
 * outbox.allowed_networks reloaded, http.c, http_configure) or the
 * certificate's files change on disk.  The receiver's certificate is
 * verified against outbox.ca_file, or libcurl's default CA store, and
 * against the URL's host name (or address), which is also sent as SNI
 * (not an address).  ALPN offers http/1.1.  Each origin keeps the last
 * session the receiver gave it (TLS 1.3 tickets included), and a new
 * connection resumes it: a handshake without certificates.
 *
 * The response is read as libcurl's callbacks would see it: every status
 * and header line through http_response_header, every byte of the body
 * through http_response_keep (response.c), so the bounds of response.h
 * and what the attempt log keeps are the same on both paths.  The framing
 * is h1parse.c's: a Content-Length, chunks, or the connection's end; 1xx
 * responses are skipped; anything else that is not HTTP/1.x fails the
 * request and closes the connection.
 *
 * The endpoint's timeout counts from http_submit, connecting and the
 * handshake included.  A kept connection that the receiver closed before
 * answering (it had timed the connection out as it was reused) is not the
 * receiver's failure: the request is sent again once on a fresh
 * connection, as libcurl does.
 *
 * Memory: a connection is malloc'd with a read buffer of HTTP1_BUFFER bytes,
 * grown up to the header bound when one line is longer; the request's head
 * (over TLS, with the body after it) is malloc'd while it is sent.  An
 * idle connection holds no buffer of ours, and OpenSSL releases its own
 * (SSL_MODE_RELEASE_BUFFERS).  Idle connections are kept up to the relay's
 * limit on connections (http1_retire), each for at most HTTP1_MAX_IDLE_MS.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "lib/pairingheap.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "targets/h1parse.h"
#include "targets/http1.h"
#include "targets/response.h"

#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>

/* The libcurl side, which connects, takes requests back and watches. */
static const Http1Host *host = NULL;

#define HTTP1_BUFFER		16384
#define HTTP1_MAX_ORIGIN	300
/* libcurl's default (CURLOPT_MAXAGE_CONN): older idle connections are closed */
#define HTTP1_MAX_IDLE_MS	118000
/* origins kept without a connection before they are pruned (prune_origins) */
#define ORIGINS_KEPT		(2 * max_idle + 256)
/* how often a client certificate's files are looked at for a change */
#define TLS_CHECK_MS		1000

/*
 * What connections over TLS are made with: the receiver verified against
 * the CA store of the pool's generation, a client certificate or none.
 * One per certificate and key seen, kept for the process's life (there are
 * as many as endpoints name distinct files); its ctx is made again, under
 * a new id, when the generation or the files change, so an origin made
 * under the old one is not found again.
 */
typedef struct TlsConfig
{
	char	   *cert;			/* malloc'd paths, or NULL for none */
	char	   *key;
	uint32		id;				/* in the keys of its origins; never 0 */
	uint32		generation;		/* the pool's, when ctx was made */
	SSL_CTX    *ctx;			/* NULL: it could not be made */
	struct stat cert_stat;
	struct stat key_stat;
	TimestampTz checked_at;
	struct TlsConfig *next;
} TlsConfig;

static TlsConfig *tls_configs = NULL;
static uint32 last_tls_id = 0;

typedef struct OriginKey
{
	char		url[HTTP1_MAX_ORIGIN];	/* "http[s]://host[:port]" as in the URL */
	uint32		tls;			/* its TlsConfig's id; 0 for plain http */
} OriginKey;

typedef struct Origin
{
	OriginKey	key;
	bool		usable;			/* false: libcurl sends its requests */
	char		host[HTTP1_MAX_ORIGIN];	/* the Host header, as libcurl sends it */
	char		connect[HTTP1_MAX_ORIGIN + 16]; /* "http://host:port/", what
												 * libcurl connects to */
	TlsConfig  *tls;			/* NULL for plain http */
	char		name[HTTP1_MAX_ORIGIN]; /* https: the host name or address
										 * verified */
	bool		name_is_address;	/* an address: no SNI */
	SSL_SESSION *session;		/* the last the receiver gave, or NULL */
	uint32		session_generation;
	dlist_head	idle;			/* its idle connections, newest first */
	int			conns;			/* its connections, idle or in use */
} Origin;

typedef struct Conn
{
	pgsocket	fd;
	uint32		generation;		/* the pool it was made under (http.c) */
	Origin	   *origin;
	SSL		   *ssl;			/* over https, else NULL */
	bool		handshaking;	/* the TLS handshake is not done yet */
	bool		clean;			/* its last response was read whole: a
								 * close sends close_notify */
	HttpRequest *req;			/* in flight on it, or NULL when idle */
	bool		reused;			/* a request was answered on it before */
	TimestampTz idle_since;
	dlist_node	origin_node;	/* in origin->idle while idle */
	dlist_node	lru_node;		/* in idle_lru while idle */
	pairingheap_node due_node;	/* in due while a request is on it */
	TimestampTz due;			/* when that request times out */

	/* the request being written: its head, then the body (req->body) */
	char	   *head;
	size_t		head_len;		/* over TLS the body follows in head */
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
 * A session the receiver gave a connection (after its handshake, or in a
 * TLS 1.3 ticket later): the origin keeps the newest, which the next
 * connection resumes.  Returns 1: the origin owns the session.
 */
static int
session_given(SSL *ssl, SSL_SESSION *session)
{
	Conn	   *c = (Conn *) SSL_get_app_data(ssl);

	if (c == NULL || c->generation != current_generation)
		return 0;
	if (c->origin->session != NULL)
		SSL_SESSION_free(c->origin->session);
	c->origin->session = session;
	c->origin->session_generation = c->generation;
	return 1;
}

/* Has the file at path changed from what st says (or gone)? */
static bool
file_changed(const char *path, const struct stat *st)
{
	struct stat now;

	if (path == NULL)
		return false;
	if (stat(path, &now) != 0)
		return true;
	return now.st_dev != st->st_dev || now.st_ino != st->st_ino ||
		now.st_size != st->st_size ||
		now.st_mtim.tv_sec != st->st_mtim.tv_sec ||
		now.st_mtim.tv_nsec != st->st_mtim.tv_nsec;
}

/*
 * Make t's SSL_CTX for the current generation: the CA store (outbox.ca_file,
 * or libcurl's default bundle and directory), TLS 1.2 at least, the peer
 * verified, ALPN http/1.1, sessions kept by the origins, and the client
 * certificate.  NULL when any of it fails; the request then goes through
 * libcurl, whose error says what.
 */
static SSL_CTX *
tls_context(TlsConfig *t)
{
	SSL_CTX    *ctx = SSL_CTX_new(TLS_client_method());
	bool		ok = ctx != NULL;

	ERR_clear_error();
	if (ok)
	{
		curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
		static const unsigned char alpn[] = "\x08http/1.1";

		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
						 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
		/* a receiver that closes without close_notify ends the response */
		SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
		SSL_CTX_sess_set_new_cb(ctx, session_given);
		ok = SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1) == 0;
		/*
		 * As libcurl verifies: outbox.ca_file in place of its default
		 * bundle, its default directory beside it, and a CA in either
		 * trusted as the chain's end though it is an intermediate.
		 */
		X509_STORE_set_flags(SSL_CTX_get_cert_store(ctx), X509_V_FLAG_PARTIAL_CHAIN);
		if (ok && outbox_ca_file != NULL && outbox_ca_file[0] != '\0')
			ok = SSL_CTX_load_verify_locations(ctx, outbox_ca_file, v->capath) == 1;
		else if (ok && (v->cainfo != NULL || v->capath != NULL))
			ok = SSL_CTX_load_verify_locations(ctx, v->cainfo, v->capath) == 1;
		else if (ok)
			ok = SSL_CTX_set_default_verify_paths(ctx) == 1;
		if (ok && t->cert != NULL)
			ok = SSL_CTX_use_certificate_chain_file(ctx, t->cert) == 1 &&
				SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) == 1 &&
				SSL_CTX_check_private_key(ctx) == 1;
	}
	ERR_clear_error();
	if (!ok && ctx != NULL)
	{
		SSL_CTX_free(ctx);
		ctx = NULL;
	}
	return ctx;
}

/*
 * The TLS configuration for req's client certificate (or none), made
 * again when the generation changed or, looked at once a TLS_CHECK_MS, the
 * certificate's files did.  NULL when it cannot be had.
 */
static TlsConfig *
tls_config_for(const HttpRequest *req)
{
	TlsConfig  *t;

	for (t = tls_configs; t != NULL; t = t->next)
		if ((t->cert == NULL) == (req->client_cert == NULL) &&
			(t->cert == NULL ||
			 (strcmp(t->cert, req->client_cert) == 0 && strcmp(t->key, req->client_key) == 0)))
			break;
	if (t == NULL)
	{
		t = calloc(1, sizeof(TlsConfig));
		if (t == NULL)
			return NULL;
		if (req->client_cert != NULL &&
			((t->cert = strdup(req->client_cert)) == NULL ||
			 (t->key = strdup(req->client_key)) == NULL))
		{
			free(t->cert);
			free(t);
			return NULL;
		}
		t->next = tls_configs;
		tls_configs = t;
	}
	else if (t->generation == current_generation && t->ctx != NULL)
	{
		TimestampTz now = req->submitted_at;

		if (t->cert == NULL || !TimestampDifferenceExceeds(t->checked_at, now, TLS_CHECK_MS))
			return t;
		t->checked_at = now;
		if (!file_changed(t->cert, &t->cert_stat) && !file_changed(t->key, &t->key_stat))
			return t;
	}
	else if (t->generation == current_generation &&
			 !TimestampDifferenceExceeds(t->checked_at, req->submitted_at, TLS_CHECK_MS))
		return NULL;			/* failed a moment ago */

	/* (re)made: the old ctx lives on in the connections made with it */
	if (t->ctx != NULL)
		SSL_CTX_free(t->ctx);
	t->checked_at = req->submitted_at;
	t->generation = current_generation;
	if (t->cert != NULL &&
		(stat(t->cert, &t->cert_stat) != 0 || stat(t->key, &t->key_stat) != 0))
		t->ctx = NULL;
	else
		t->ctx = tls_context(t);
	if (++last_tls_id == 0)
		last_tls_id = 1;
	t->id = last_tls_id;
	return t->ctx != NULL ? t : NULL;
}

/*
 * What libcurl says of the origin of url: the Host header it sends (the
 * host in ASCII, an international name in punycode, an IPv6 address in
 * brackets without its zone, the port unless it is the scheme's), the URL
 * of a plain TCP connection to the same host and port, and for https the
 * name certificates are checked against.  False when libcurl cannot say.
 */
static bool
describe_origin(const char *url, Origin *o)
{
	CURLU	   *h = curl_url();
	char	   *host = NULL;
	char	   *port = NULL;
	char	   *connect = NULL;
	const char *standard = o->tls != NULL ? "443" : "80";
	bool		ok = false;

	if (h != NULL && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
		curl_url_get(h, CURLUPART_HOST, &host, CURLU_PUNYCODE) == CURLUE_OK &&
		curl_url_get(h, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK)
	{
		if (strcmp(port, standard) != 0)
			ok = snprintf(o->host, sizeof(o->host), "%s:%s", host, port) < (int) sizeof(o->host);
		else
			ok = snprintf(o->host, sizeof(o->host), "%s", host) < (int) sizeof(o->host);
		for (const char *c = o->host; ok && *c; c++)
			if ((unsigned char) *c <= 0x20 || (unsigned char) *c >= 0x7f)
				ok = false;
		/* the same host and port over plain TCP: libcurl connects, no more */
		ok = ok && curl_url_set(h, CURLUPART_SCHEME, "http", 0) == CURLUE_OK &&
			curl_url_set(h, CURLUPART_PORT, port, 0) == CURLUE_OK &&
			curl_url_set(h, CURLUPART_PATH, "/", 0) == CURLUE_OK &&
			curl_url_set(h, CURLUPART_QUERY, NULL, 0) == CURLUE_OK &&
			curl_url_set(h, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
			curl_url_set(h, CURLUPART_USER, NULL, 0) == CURLUE_OK &&
			curl_url_set(h, CURLUPART_PASSWORD, NULL, 0) == CURLUE_OK &&
			curl_url_get(h, CURLUPART_URL, &connect, 0) == CURLUE_OK &&
			strlcpy(o->connect, connect, sizeof(o->connect)) < sizeof(o->connect);
		if (ok && o->tls != NULL)
		{
			size_t		len = strlen(host);
			unsigned char raw[16];

			/* an IPv6 address comes in brackets */
			if (host[0] == '[' && len > 2 && host[len - 1] == ']')
			{
				ok = len - 2 < sizeof(o->name);
				if (ok)
				{
					memcpy(o->name, host + 1, len - 2);
					o->name[len - 2] = '\0';
				}
			}
			else
				ok = strlcpy(o->name, host, sizeof(o->name)) < sizeof(o->name);
			o->name_is_address = ok &&
				(inet_pton(AF_INET, o->name, raw) == 1 || inet_pton(AF_INET6, o->name, raw) == 1);
		}
	}
	curl_free(host);
	curl_free(port);
	curl_free(connect);
	curl_url_cleanup(h);
	return ok;
}

/* An origin goes: its session with it.  Only connections point at one. */
static void
origin_remove(Origin *o)
{
	if (o->session != NULL)
		SSL_SESSION_free(o->session);
	(void) hash_search(origins, &o->key, HASH_REMOVE, NULL);
}

/*
 * Before an origin is added to a table that holds more than
 * ORIGINS_KEPT, the origins without a connection go: a database whose
 * endpoints move through many hosts keeps no more origins than it has
 * connections, plus that many.
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
			origin_remove(o);
}

/*
 * The origin of req's URL, http or https, or NULL for one this file does
 * not send to (libcurl does).  URLs reach here as http_check_url
 * normalized them: a lower-case scheme and a path.  Looked up once per
 * request; what libcurl says of a host is asked once per origin.
 */
static Origin *
origin_of(const HttpRequest *req)
{
	const char *url = req->url;
	OriginKey	key;
	const char *path;
	TlsConfig  *tls = NULL;
	bool		found;
	Origin	   *o;

	if (strncmp(url, "http://", 7) == 0)
		path = strchr(url + 7, '/');
	else if (strncmp(url, "https://", 8) == 0)
		path = strchr(url + 8, '/');
	else
		return NULL;
	if (path == NULL || path - url >= HTTP1_MAX_ORIGIN)
		return NULL;
	if (url[4] == 's' && (tls = tls_config_for(req)) == NULL)
		return NULL;
	if (origins == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(OriginKey);
		ctl.entrysize = sizeof(Origin);
		ctl.hcxt = TopMemoryContext;
		origins = hash_create("outbox http origins", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memset(&key, 0, sizeof(key));
	memcpy(key.url, url, path - url);
	key.tls = tls != NULL ? tls->id : 0;
	o = (Origin *) hash_search(origins, &key, HASH_FIND, NULL);
	if (o == NULL)
	{
		prune_origins();
		o = (Origin *) hash_search(origins, &key, HASH_ENTER, &found);
		dlist_init(&o->idle);
		o->conns = 0;
		o->tls = tls;
		o->session = NULL;
		o->session_generation = 0;
		o->usable = describe_origin(url, o);
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
	if (c->ssl != NULL)
	{
		/*
		 * A close_notify where the connection is in order: a receiver's
		 * OpenSSL forgets the session of a connection that ends without
		 * one, and the next connection could not resume it.  Not waited
		 * for the receiver's.
		 */
		ERR_clear_error();
		if (c->clean)
			(void) SSL_shutdown(c->ssl);
		ERR_clear_error();
		SSL_free(c->ssl);
	}
	host->forget(c->fd);
	close(c->fd);
	conns[c->fd] = NULL;
	free(c->head);
	free(c->buf);
	free(c);
}

/* What c writes for its request: the head, and the body (over TLS in head). */
static inline size_t
request_size(const Conn *c)
{
	return c->head_len + (c->ssl != NULL ? 0 : c->req->body_len);
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

/*
 * Take the request off c, which is closed: it is sent again from its
 * start, its results as before it was sent.
 */
static HttpRequest *
take_back(Conn *c)
{
	HttpRequest *req = c->req;

	pairingheap_remove(&due_heap, &c->due_node);
	c->req = NULL;
	n_busy--;
	conn_close(c);
	http_response_reset(req);
	return req;
}

/*
 * A kept connection the receiver had closed: send the request again on a
 * fresh one, once.
 */
static void
retry_fresh(Conn *c)
{
	Origin	   *o = c->origin;

	host->connect(take_back(c), o->connect);
}

/*
 * The receiver speaks no HTTP/1.1 over TLS: its origin's requests go
 * through libcurl from now on (HTTP/2), this one first.
 */
static void
to_libcurl(Conn *c)
{
	c->origin->usable = false;
	host->send(take_back(c));
}

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
 * An OpenSSL call on c returned ret, and it was not a wait for the socket:
 * the request fails with what went wrong, in libcurl's words where libcurl
 * has them (t/009, t/025: "SSL certificate problem: ..."), a failure
 * about client certificates said as such (http_reword_auth_failure).  On
 * a kept connection before any answer it is sent again (io_failed); a
 * receiver that refuses ALPN's http/1.1 gets it through libcurl.
 */
static void
tls_failed(Conn *c, int ret, const char *what)
{
	HttpRequest *req = c->req;
	int			kind = SSL_get_error(c->ssl, ret);
	unsigned long e = ERR_peek_last_error();
	long		verified = SSL_get_verify_result(c->ssl);
	char		why[CURL_ERROR_SIZE];

	if (c->handshaking && ERR_GET_LIB(e) == ERR_LIB_SSL &&
		ERR_GET_REASON(e) == SSL_R_TLSV1_ALERT_NO_APPLICATION_PROTOCOL)
	{
		ERR_clear_error();
		to_libcurl(c);
		return;
	}
	if ((kind == SSL_ERROR_SYSCALL || kind == SSL_ERROR_ZERO_RETURN) && e == 0)
	{
		if (kind == SSL_ERROR_ZERO_RETURN)
			errno = 0;			/* a close, as OpenSSL reads an early EOF */
		ERR_clear_error();
		if (errno != 0)
			io_failed(c, what);
		else if (c->reused && c->received == 0)
			retry_fresh(c);
		else
			fail(c, c->handshaking ? "the receiver closed the connection during the TLS handshake" :
				 "the receiver closed the connection");
		return;
	}
	if (c->handshaking && verified == X509_V_ERR_HOSTNAME_MISMATCH)
		snprintf(why, sizeof(why),
				 "SSL certificate problem: no certificate subject name matches the host name '%s'",
				 c->origin->name);
	else if (c->handshaking && verified == X509_V_ERR_IP_ADDRESS_MISMATCH)
		snprintf(why, sizeof(why),
				 "SSL certificate problem: no certificate subject name matches the address %s",
				 c->origin->name);
	else if (c->handshaking && verified != X509_V_OK)
		snprintf(why, sizeof(why), "SSL certificate problem: %s",
				 X509_verify_cert_error_string(verified));
	else
	{
		char		text[256];

		if (e != 0)
			ERR_error_string_n(e, text, sizeof(text));
		else
			snprintf(text, sizeof(text), "OpenSSL error %d", kind);
		snprintf(why, sizeof(why), "%s failed over TLS: %s", what, text);
	}
	ERR_clear_error();
	if (!c->handshaking && c->reused && c->received == 0)
	{
		retry_fresh(c);
		return;
	}
	fail(c, why);
	http_reword_auth_failure(req, false);
}

/* The response is complete: the connection idles, or is closed. */
static void
complete(Conn *c, bool reusable)
{
	TimestampTz now;

	/* an answer before the whole request was sent: the connection is spent */
	if (c->sent < request_size(c))
		reusable = false;
	/* bytes after the response still inside OpenSSL: out of step too */
	if (c->ssl != NULL && SSL_has_pending(c->ssl))
		reusable = false;
	c->req->status = c->req->parser.status;
	c->clean = true;
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
	if (!host->watch(c->fd, EPOLLIN))
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

/*
 * The socket events an OpenSSL call that returned ret waits for, or 0
 * when it failed.
 */
static uint32
tls_wait(Conn *c, int ret)
{
	switch (SSL_get_error(c->ssl, ret))
	{
		case SSL_ERROR_WANT_READ:
			return EPOLLIN;
			/* reading too: a receiver may answer before it has read all */
		case SSL_ERROR_WANT_WRITE:
			return EPOLLOUT | EPOLLIN;
		default:
			return 0;
	}
}

/* Write what is left of the request over TLS (the body is in head). */
static void
send_tls(Conn *c)
{
	while (c->sent < c->head_len)
	{
		int			n;
		uint32		wait;

		ERR_clear_error();
		n = SSL_write(c->ssl, c->head + c->sent, (int) Min(c->head_len - c->sent, (size_t) INT_MAX));
		if (n > 0)
		{
			c->sent += n;
			continue;
		}
		if ((wait = tls_wait(c, n)) == 0)
		{
			tls_failed(c, n, "sending the request");
			return;
		}
		if (!host->watch(c->fd, wait))
			fail(c, "could not watch the connection's socket");
		return;
	}
	if (!host->watch(c->fd, EPOLLIN))
		fail(c, "could not watch the connection's socket");
}

/* Write what is left of the request; then wait for the response. */
static void
send_request(Conn *c)
{
	HttpRequest *req = c->req;

	if (c->ssl != NULL)
	{
		send_tls(c);
		return;
	}
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
			if (!host->watch(c->fd, EPOLLOUT | EPOLLIN))
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
	if (!host->watch(c->fd, EPOLLIN))
		fail(c, "could not watch the connection's socket");
}

/*
 * Write the request's head (over TLS with the body after it: one buffer,
 * written in as few records as it fits), then send it.
 */
static void
write_head(Conn *c)
{
	HttpRequest *req = c->req;
	StringInfoData h;
	const char *path = strchr(req->url + (c->ssl != NULL ? 8 : 7), '/');
	size_t		with_body;
	bool		has_type = false;
	bool		has_accept = false;
	bool		has_agent = false;

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
	with_body = h.len + (c->ssl != NULL ? req->body_len : 0);
	c->head = malloc(with_body);
	if (c->head == NULL)
	{
		pfree(h.data);
		fail(c, "out of memory");
		return;
	}
	memcpy(c->head, h.data, h.len);
	if (c->ssl != NULL && req->body_len > 0)
		memcpy(c->head + h.len, req->body, req->body_len);
	c->head_len = with_body;
	pfree(h.data);
	send_request(c);
}

/* req is c's from now on: its timeout is watched, its response read. */
static void
begin(Conn *c, HttpRequest *req)
{
	c->req = req;
	n_busy++;
	c->clean = false;
	c->sent = 0;
	c->buf_len = 0;
	c->received = 0;
	h1_init(&req->parser);
	c->due = req->submitted_at + (TimestampTz) req->timeout_ms * 1000;
	pairingheap_add(&due_heap, &c->due_node);
}

/*
 * Go on with c's TLS handshake; once it is done, the request is sent.  A
 * receiver that chose another protocol than http/1.1 in ALPN gets it
 * through libcurl.
 */
static void
handshake(Conn *c)
{
	int			ret;
	uint32		wait;
	const unsigned char *alpn = NULL;
	unsigned int alpn_len = 0;

	ERR_clear_error();
	ret = SSL_do_handshake(c->ssl);
	if (ret == 1)
	{
		SSL_get0_alpn_selected(c->ssl, &alpn, &alpn_len);
		if (alpn_len > 0 && !(alpn_len == 8 && memcmp(alpn, "http/1.1", 8) == 0))
		{
			to_libcurl(c);
			return;
		}
		c->handshaking = false;
		write_head(c);
		return;
	}
	if ((wait = tls_wait(c, ret)) == 0)
		tls_failed(c, ret, "the TLS handshake");
	else if (!host->watch(c->fd, wait == EPOLLIN ? EPOLLIN : EPOLLOUT))
		fail(c, "could not watch the connection's socket");
}

/*
 * Is an idle connection still quiet: nothing from the receiver, or over
 * TLS only what OpenSSL reads by itself (a session ticket, a key update)?
 * False when the receiver closed it or spoke out of turn.
 */
static bool
quiet(Conn *c)
{
	char		b;
	int			ret;

	if (c->ssl != NULL && SSL_has_pending(c->ssl))
		return false;
	if (recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK;
	if (c->ssl == NULL)
		return false;
	ERR_clear_error();
	ret = SSL_read(c->ssl, &b, 1);
	if (ret <= 0 && SSL_get_error(c->ssl, ret) == SSL_ERROR_WANT_READ)
		return true;
	if (ret <= 0 && SSL_get_error(c->ssl, ret) != SSL_ERROR_ZERO_RETURN)
		c->clean = false;		/* no close_notify after a failure */
	ERR_clear_error();
	return false;
}

/*
 * Send req if it is http or https: on a kept connection to its origin that
 * is still quiet, or on one libcurl opens for it (http_connect).  False
 * for a request that libcurl sends.
 */
bool
http1_submit(HttpRequest *req)
{
	Origin	   *o = origin_of(req);

	if (o == NULL)
		return false;
	while (!dlist_is_empty(&o->idle))
	{
		Conn	   *c = dlist_container(Conn, origin_node, dlist_pop_head_node(&o->idle));

		dlist_delete(&c->lru_node);
		n_idle--;
		if (c->generation != current_generation ||
			TimestampDifferenceExceeds(c->idle_since, req->submitted_at, HTTP1_MAX_IDLE_MS) ||
			!quiet(c))
		{
			conn_close(c);
			continue;
		}
		begin(c, req);
		write_head(c);
		return true;
	}
	host->connect(req, o->connect);
	return true;
}

/*
 * No memory for a connection libcurl made for req: the socket is closed,
 * and req fails, to be retried like any transport error.
 */
static void
unconnected(HttpRequest *req, pgsocket fd)
{
	host->forget(fd);
	close(fd);
	req->status = 0;
	req->transport_error = true;
	strlcpy(req->error, "out of memory for a connection", sizeof(req->error));
	req->duration_ms = (double) (GetCurrentTimestamp() - req->submitted_at) / 1000.0;
	dlist_push_tail(&done, &req->node);
}

/*
 * libcurl connected req's socket fd (http.c): the connection is ours, and
 * over https its handshake starts.  An origin that cannot be had now (its
 * TLS configuration failed since the request was submitted) hands req to
 * libcurl.
 */
void
http1_connected(HttpRequest *req, pgsocket fd, uint32 generation)
{
	Origin	   *o = origin_of(req);
	Conn	   *c;

	if (o == NULL)
	{
		host->forget(fd);
		close(fd);
		host->send(req);
		return;
	}
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
	c->origin = o;
	o->conns++;
	conns[fd] = c;
	begin(c, req);
	if (o->tls == NULL)
	{
		write_head(c);
		return;
	}
	c->ssl = SSL_new(o->tls->ctx);
	if (c->ssl == NULL || SSL_set_fd(c->ssl, fd) != 1)
	{
		ERR_clear_error();
		fail(c, "out of memory for a TLS connection");
		return;
	}
	c->handshaking = true;
	SSL_set_app_data(c->ssl, c);
	SSL_set_connect_state(c->ssl);
	if (o->name_is_address)
		X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), o->name);
	else
	{
		SSL_set_tlsext_host_name(c->ssl, o->name);
		SSL_set1_host(c->ssl, o->name);
	}
	if (o->session != NULL && o->session_generation == generation)
		SSL_set_session(c->ssl, o->session);
	handshake(c);
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

/*
 * Read once from c into its buffer: bytes read (> 0), 0 at the
 * connection's end, -1 when nothing is there yet (the socket is watched
 * for what it waits for), -2 when the request failed.
 */
static ssize_t
read_some(Conn *c)
{
	ssize_t		n;

	if (c->ssl == NULL)
	{
		do
			n = recv(c->fd, c->buf + c->buf_len, c->buf_size - c->buf_len, 0);
		while (n < 0 && errno == EINTR);
		if (n >= 0)
			return n;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -1;
		io_failed(c, "receiving the response");
		return -2;
	}
	ERR_clear_error();
	n = SSL_read(c->ssl, c->buf + c->buf_len, (int) Min(c->buf_size - c->buf_len, (size_t) INT_MAX));
	if (n > 0)
		return n;
	switch (SSL_get_error(c->ssl, (int) n))
	{
		case SSL_ERROR_ZERO_RETURN:
			return 0;
		case SSL_ERROR_WANT_READ:
			/* no longer for writing, if a write was waited for */
			if (!host->watch(c->fd, EPOLLIN))
			{
				fail(c, "could not watch the connection's socket");
				return -2;
			}
			return -1;
		case SSL_ERROR_WANT_WRITE:
			if (!host->watch(c->fd, EPOLLOUT | EPOLLIN))
			{
				fail(c, "could not watch the connection's socket");
				return -2;
			}
			return -1;
		default:
			tls_failed(c, (int) n, "receiving the response");
			return -2;
	}
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
		n = read_some(c);
		if (n < 0)
			return;
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
		if (c->ssl != NULL && quiet(c))
			return;				/* a session ticket, read */
		idle_remove(c);
		conn_close(c);
		return;
	}
	if (c->handshaking)
	{
		handshake(c);
		return;
	}
	if (c->sent == request_size(c))
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
	/* over TLS a write may wait for reading (OpenSSL says which) */
	if (c->ssl != NULL || (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)))
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

	if (generation != current_generation && origins != NULL)
	{
		HASH_SEQ_STATUS seq;
		Origin	   *o;

		/* sessions verified under the old CA store are not resumed */
		hash_seq_init(&seq, origins);
		while ((o = (Origin *) hash_seq_search(&seq)) != NULL)
			if (o->session != NULL)
			{
				SSL_SESSION_free(o->session);
				o->session = NULL;
			}
	}
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

/* At the start of the relay or a sender, by the libcurl side (http.c). */
void
http1_start(const Http1Host *h)
{
	host = h;
}

#else							/* !HAVE_SYS_EPOLL_H */

/* Without epoll every request goes through libcurl. */
void
http1_start(const Http1Host *h)
{
}
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
