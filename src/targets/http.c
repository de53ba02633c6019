/*-------------------------------------------------------------------------
 *
 * http.c
 *	  HTTP through libcurl: the check of webhook and token URLs (libcurl's
 *	  own URL parser, so that what is accepted is exactly what libcurl will
 *	  later request), and the multi-handle wrapper the relay submits requests to,
 *	  with the address policy applied at connect time (address.c).
 *
 * The wrapper runs in the relay and in its sender processes (sender.c),
 * each with its own multi handle and no transaction open; see the comment
 * above pool_limits for who limits what.  HTTP/1.1 requests, http and
 * https, are only connected here (http_connect): http1.c makes their TLS,
 * writes and reads them.  libcurl sends the rest (http_send): to receivers
 * that speak only HTTP/2, with client certificates http1.c cannot load.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <curl/curl.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "targets/address.h"
#include "guc.h"
#include "targets/http.h"
#include "targets/http1.h"
#include "targets/wait.h"

/*
 * The URL as messages may show it: what stands between the scheme and the
 * last "@" is replaced by "***", since an error reaches clients, the
 * server log and whatever collects them.  The last "@" anywhere, not only
 * in the authority: a URL libcurl refused may have a password with "/",
 * "?" or "#" in it, and hiding too much of a bad URL costs nothing.
 */
static char *
url_for_messages(const char *url)
{
	size_t		scheme_len = strspn(url, "abcdefghijklmnopqrstuvwxyz"
									"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
	const char *auth = url;
	const char *at = strrchr(url, '@');

	if (at == NULL)
		return pstrdup(url);
	/* After "scheme:" and its slashes, however many ("http:/u:p@h" too). */
	if (scheme_len > 0 && url[scheme_len] == ':')
		auth = url + scheme_len + 1 + strspn(url + scheme_len + 1, "/");
	if (auth > at)
		auth = url;
	return psprintf("%.*s***%s", (int) (auth - url), url, at);
}

/* An invalid URL (what names it) is refused, credentials left out. */
void
http_bad_url(const char *url, const char *what, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid %s \"%s\"", what, url_for_messages(url)),
			 errdetail("%s", detail)));
}

/*
 * The URL as libcurl normalizes it, palloc'd; "what" names it in errors
 * (an endpoint URL, an OAuth2 token URL).  Only absolute http and https
 * URLs with a host and without credentials are accepted.  All libcurl
 * memory is freed before any error is raised.
 */
char *
http_check_url(const char *url, const char *what)
{
	CURLU	   *h;
	CURLUcode	rc;
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *user = NULL;
	char	   *full = NULL;
	char	   *port = NULL;
	char	   *result = NULL;
	const char *sep;
	const char *problem = NULL;
	char		detail[256];

	if (strlen(url) > OUTBOX_MAX_URL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too long", what),
				 errdetail("A URL is at most %d bytes.", OUTBOX_MAX_URL)));

	h = curl_url();
	if (h == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));

	/*
	 * libcurl guesses at what is not a URL ("https:///x" becomes host "x",
	 * "http:/x" is accepted): insist on "scheme://host" first.
	 */
	sep = strstr(url, "://");
	if (sep == NULL || sep[3] == '/' || sep[3] == '\0' ||
		strcspn(url, ":/?#") != (size_t) (sep - url))
		problem = "An endpoint URL starts with \"http://\" or \"https://\" and a host.";
	else if ((rc = curl_url_set(h, CURLUPART_URL, url, 0)) != CURLUE_OK)
	{
		snprintf(detail, sizeof(detail), "libcurl: %s.", curl_url_strerror(rc));
		problem = detail;
	}
	else if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
			 (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
		problem = "Only http and https URLs are accepted here (an endpoint URL may also be kafka://, nats:// or amqp://).";
	else if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		problem = "The URL has no host.";
	else if (curl_url_get(h, CURLUPART_PORT, &port, 0) == CURLUE_OK && strcmp(port, "0") == 0)
		problem = "Port 0 cannot be connected to.";
	else if (curl_url_get(h, CURLUPART_USER, &user, 0) == CURLUE_OK)
		problem = "Credentials in the URL are not accepted; send them in the endpoint's headers.";
	else if (curl_url_set(h, CURLUPART_FRAGMENT, NULL, 0) != CURLUE_OK ||
			 curl_url_get(h, CURLUPART_URL, &full, 0) != CURLUE_OK)
		problem = "libcurl could not rebuild the URL.";
	else
		result = pstrdup(full);

	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(full);
	curl_free(port);
	curl_url_cleanup(h);

	if (problem != NULL)
		http_bad_url(url, what, problem);
	return result;
}

/*
 * The multi-handle wrapper used by the relay and its senders.  A multi
 * handle per process keeps many requests in flight, reuses connections
 * (keep-alive) and multiplexes HTTP/2 where a server offers it.  Redirects
 * are never followed, only http and https are spoken, and what a response
 * may send is bounded (http.h): its header lines, 1xx responses included,
 * its chunk framing, and what follows the headers; the endpoint's timeout
 * bounds the time.
 *
 * The multi handle lives in a pool.  A reload that changes what may be
 * connected to (outbox.allowed_networks) or how servers are verified
 * (outbox.ca_file) retires the pool: new requests go to a fresh one, and
 * the old one is cleaned up, closing its connections, once its requests
 * in flight are done.  libcurl cannot close a multi handle's idle
 * connections otherwise, and a TLS connection cannot be checked again
 * against another CA.
 *
 * Memory: pools, easy handles and header lists are malloc'd (by libcurl)
 * or in TopMemoryContext, and freed here on every path, including
 * http_abandon_all() after an error.
 */

typedef struct HttpPool
{
	CURLM	   *multi;
	uint32		generation;		/* names it in its sockets' epoll data */
	TimestampTz timer_due;		/* when libcurl wants a call; 0: never */
	int			in_flight;		/* requests added and not yet released */
	dlist_node	node;			/* in retiring, once retired */
} HttpPool;

static HttpPool *current = NULL;
static dlist_head retiring = DLIST_STATIC_INIT(retiring);
static uint32 next_generation = 0;

/* In the epoll data of a socket of http1.c's, where a pool's generation is. */
#define HTTP1_TAG	PG_UINT32_MAX
static dlist_head in_flight = DLIST_STATIC_INIT(in_flight);

static bool http_watch(pgsocket fd, uint32 events);
static void http_forget(pgsocket fd);
static void http_connect(HttpRequest *req, const char *connect_url);
static void http_send(HttpRequest *req);

/* What http1.c asks of this side (http1.h). */
static const Http1Host http1_host = {
	.connect = http_connect,
	.send = http_send,
	.watch = http_watch,
	.forget = http_forget,
};

/*
 * The sockets libcurl wants watched (socket callback) and when it wants to
 * be called back regardless (timer callback), per pool, are in the
 * process's one wait (wait.c).
 *
 * On Linux the sockets live in an epoll set of our own, which sits in the
 * wait as a single socket: a change costs one epoll_ctl, and the wait's
 * set is built once.  Elsewhere each socket is in the wait on its own.
 */

static pg_attribute_unused() HttpPool *
pool_by_generation(uint32 generation)
{
	dlist_iter	iter;

	if (current != NULL && current->generation == generation)
		return current;
	dlist_foreach(iter, &retiring)
	{
		HttpPool   *pool = dlist_container(HttpPool, node, iter.cur);

		if (pool->generation == generation)
			return pool;
	}
	return NULL;
}

/*
 * Let libcurl act on fd (or on its timer: CURL_SOCKET_TIMEOUT), with every
 * signal blocked.  libcurl starts its threaded resolver's threads here,
 * and a thread takes the signal mask of the one that starts it: blocked,
 * PostgreSQL's handlers (SIGALRM's timeouts, SIGUSR1's latch, SIGTERM)
 * run only in this thread, never in a resolver's.  A signal that comes
 * meanwhile waits until the mask is restored.
 */
static void
multi_act(CURLM *multi, curl_socket_t fd, int flags)
{
	sigset_t	all_signals;
	sigset_t	old_signals;
	int			running;

	sigfillset(&all_signals);
	pthread_sigmask(SIG_SETMASK, &all_signals, &old_signals);
	PG_TRY();
	{
		curl_multi_socket_action(multi, fd, flags, &running);
	}
	PG_FINALLY();
	{
		pthread_sigmask(SIG_SETMASK, &old_signals, NULL);
	}
	PG_END_TRY();
}

#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>

static int	curl_epfd = -1;

/*
 * What the epoll set holds, by descriptor.  libcurl asks for a socket to
 * be watched when a request starts on its connection and to be forgotten
 * when the request is done, two system calls per request on a kept-alive
 * connection.  A socket libcurl opened through open_socket_cb is instead
 * left in the set while its connection idles (wanted false), and the next
 * request on it costs nothing when it waits for the same events; should it
 * wake while idle (the server closed it), act_on_sockets takes it out
 * then.  Such a socket is known from its opening to its closing
 * (close_socket_cb), which takes it out of the set with it, once it has
 * waited for an answer (see socket_cb).  Other sockets (the threaded
 * resolver's, and those of connections that never answered) leave the set
 * when libcurl forgets them.
 */
typedef struct WatchState
{
	uint32		registered;		/* EPOLLIN and EPOLLOUT as in the set; 0: not in it */
	bool		ours;			/* opened by open_socket_cb, not yet closed */
	bool		taken;			/* handed to http1.c: libcurl must not close it */
	bool		wanted;			/* libcurl watches it now */
} WatchState;

static WatchState *watch_states = NULL;
static int	n_watch_states = 0;

/* The state of fd, the array grown to hold it; NULL when out of memory. */
static WatchState *
watch_state(curl_socket_t fd)
{
	if (fd < 0)
		return NULL;
	if (fd >= n_watch_states)
	{
		int			grow = Max(fd + 1, Max(64, n_watch_states * 2));
		WatchState *more = realloc(watch_states, sizeof(WatchState) * grow);

		if (more == NULL)
			return NULL;
		memset(more + n_watch_states, 0, sizeof(WatchState) * (grow - n_watch_states));
		watch_states = more;
		n_watch_states = grow;
	}
	return &watch_states[fd];
}

/* A socket of our own is opened (open_socket_cb) or closed (close_socket_cb). */
static void
watch_opened(curl_socket_t fd, bool opened)
{
	WatchState *s = watch_state(fd);

	if (s == NULL)
		return;
	/* A closed descriptor leaves the epoll set by itself. */
	s->registered = 0;
	s->wanted = false;
	s->ours = opened;
	s->taken = false;
}

/* Put fd in the set for events, or change what it is watched for. */
static bool
watch_set(WatchState *s, curl_socket_t fd, uint32 events, uint32 generation)
{
	struct epoll_event ev;

	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.u64 = ((uint64) generation << 32) | (uint32) fd;
	if (epoll_ctl(curl_epfd, s->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0)
	{
		/* the record was wrong about the set: try the other way once */
		if (errno != ENOENT && errno != EEXIST)
			return false;
		if (epoll_ctl(curl_epfd, errno == ENOENT ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) != 0)
			return false;
	}
	s->registered = events;
	return true;
}

static void
watch_drop(WatchState *s, curl_socket_t fd)
{
	(void) epoll_ctl(curl_epfd, EPOLL_CTL_DEL, fd, NULL);
	if (s != NULL)
		s->registered = 0;
}

/* http1.c watches one of its sockets for events (EPOLLIN or EPOLLOUT). */
static bool
http_watch(pgsocket fd, uint32 events)
{
	WatchState *s = watch_state(fd);

	if (s == NULL)
		return false;
	s->wanted = true;
	if (s->registered == events)
		return true;
	return watch_set(s, fd, events, HTTP1_TAG);
}

/* http1.c is about to close one of its sockets. */
static void
http_forget(pgsocket fd)
{
	WatchState *s = watch_state(fd);

	if (s != NULL && s->registered != 0)
		watch_drop(s, fd);
	if (s != NULL)
		s->wanted = s->ours = s->taken = false;
}

/*
 * libcurl connected fd for http1.c: out of the set, and kept open when
 * libcurl closes its connection (close_socket_cb).
 */
static void
take_socket(pgsocket fd)
{
	WatchState *s = watch_state(fd);

	http_forget(fd);
	if (s != NULL)
		s->taken = true;
}

static int
socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	HttpPool   *pool = (HttpPool *) userp;
	WatchState *s = watch_state(fd);
	uint32		events;

	if (what == CURL_POLL_REMOVE)
	{
		/*
		 * Only a connection that waited for an answer is left in the set.
		 * libcurl 7.88 to 8.1 close a socket that never connected without
		 * the close-socket callback (curl pull request 11439): such a
		 * socket only ever waits to write, and is dropped now, for good.
		 */
		if (s != NULL && s->ours && (s->registered & EPOLLIN))
			s->wanted = false;	/* left in the set while it idles */
		else
		{
			watch_drop(s, fd);
			if (s != NULL)
				s->ours = false;
		}
		return 0;
	}
	if (s == NULL)
		return -1;				/* libcurl fails the transfer */
	events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	s->wanted = true;
	/* a socket belongs to one pool (its connection's) all its life */
	if (s->ours && s->registered == events)
		return 0;
	return watch_set(s, fd, events, pool->generation) ? 0 : -1;
}

/* Hand libcurl the ready sockets of our epoll set, each to its pool. */
static void
act_on_sockets(pgsocket epfd, uint32 events, void *arg)
{
	struct epoll_event evs[64];
	int			n;

	n = epoll_wait(curl_epfd, evs, lengthof(evs), 0);
	for (int i = 0; i < n; i++)
	{
		int			flags = 0;
		curl_socket_t fd = (curl_socket_t) (uint32) evs[i].data.u64;
		HttpPool   *pool;

		if ((uint32) (evs[i].data.u64 >> 32) == HTTP1_TAG)
		{
			http1_event(fd, evs[i].events);
			continue;
		}
		pool = pool_by_generation((uint32) (evs[i].data.u64 >> 32));
		if (pool == NULL)
		{
			/* its pool is gone, and so is the socket libcurl watched */
			(void) epoll_ctl(curl_epfd, EPOLL_CTL_DEL, fd, NULL);
			continue;
		}
		if (fd < n_watch_states && !watch_states[fd].wanted)
		{
			/* an idle connection woke (closed by the server, say) */
			watch_drop(&watch_states[fd], fd);
			continue;
		}
		if (evs[i].events & EPOLLIN)
			flags |= CURL_CSELECT_IN;
		if (evs[i].events & EPOLLOUT)
			flags |= CURL_CSELECT_OUT;
		if (evs[i].events & (EPOLLERR | EPOLLHUP))
			flags |= CURL_CSELECT_ERR;
		multi_act(pool->multi, fd, flags);
	}
}

/* At the start: our epoll set, in the wait. */
static void
start_watching(void)
{
	curl_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (curl_epfd < 0)
		elog(ERROR, "epoll_create1 failed: %m");
	if (!wait_watch(curl_epfd, WL_SOCKET_READABLE, act_on_sockets, NULL))
		elog(ERROR, "out of memory");
}

#else							/* !HAVE_SYS_EPOLL_H */

/* The wait set is rebuilt from what libcurl watches: nothing to track. */
static void
watch_opened(curl_socket_t fd, bool opened)
{
}

/* Without epoll http1.c sends nothing (http1_submit). */
static bool
http_watch(pgsocket fd, uint32 events)
{
	return false;
}

static void
http_forget(pgsocket fd)
{
}

static void
take_socket(pgsocket fd)
{
}

/* A socket of a pool's is ready: libcurl acts on it. */
static void
curl_socket_ready(pgsocket fd, uint32 events, void *arg)
{
	HttpPool   *pool = (HttpPool *) arg;
	int			flags = 0;

	if (events & WL_SOCKET_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & WL_SOCKET_WRITEABLE)
		flags |= CURL_CSELECT_OUT;
	if (flags)
		multi_act(pool->multi, fd, flags);
}

/* Each socket libcurl watches is in the wait, for what libcurl asks. */
static int
socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	uint32		events = 0;

	if (what == CURL_POLL_REMOVE)
	{
		wait_forget(fd);
		return 0;
	}
	if (what & CURL_POLL_IN)
		events |= WL_SOCKET_READABLE;
	if (what & CURL_POLL_OUT)
		events |= WL_SOCKET_WRITEABLE;
	/* out of memory: libcurl fails the transfer */
	return wait_watch(fd, events, curl_socket_ready, userp) ? 0 : -1;
}

static void
start_watching(void)
{
}
#endif							/* HAVE_SYS_EPOLL_H */

static int
timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	HttpPool   *pool = (HttpPool *) userp;

	pool->timer_due = timeout_ms < 0 ? 0 :
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	return 0;
}

/*
 * Connection limits.  libcurl queues nothing: a request it held back would
 * spend its timeout waiting, and a per-host limit would let a slow endpoint
 * hold every connection to a host a healthy endpoint shares.  The relay
 * itself caps requests in flight (outbox.max_concurrency in all,
 * outbox.endpoint_concurrency per endpoint), so connections in use never
 * exceed max_total; at most max_total idle ones are kept for reuse.
 */
static void
pool_limits(HttpPool *pool, int max_total)
{
	curl_multi_setopt(pool->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
	curl_multi_setopt(pool->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	curl_multi_setopt(pool->multi, CURLMOPT_MAXCONNECTS, (long) max_total);
}

static HttpPool *
pool_create(int max_total)
{
	HttpPool   *pool = MemoryContextAllocZero(TopMemoryContext, sizeof(HttpPool));

	pool->multi = curl_multi_init();
	if (pool->multi == NULL)
	{
		pfree(pool);
		elog(ERROR, "could not create a libcurl multi handle");
	}
	/* the epoll data of http1.c's sockets is HTTP1_TAG in place of a pool's */
	if (next_generation == HTTP1_TAG)
		next_generation = 0;
	pool->generation = next_generation++;
	curl_multi_setopt(pool->multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	curl_multi_setopt(pool->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(pool->multi, CURLMOPT_SOCKETDATA, pool);
	curl_multi_setopt(pool->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	curl_multi_setopt(pool->multi, CURLMOPT_TIMERDATA, pool);
	pool_limits(pool, max_total);
	return pool;
}

/* Clean up a retired pool with nothing in flight: its connections close. */
static void
pool_destroy(HttpPool *pool)
{
	Assert(pool != current && pool->in_flight == 0);
	dlist_delete(&pool->node);
	curl_multi_cleanup(pool->multi);
	pfree(pool);
}

/*
 * Easy handles are kept for reuse (reset, not freed): creating one per
 * request showed up in profiles as malloc and free.  A handle keeps the TLS
 * sessions it made, so only those of the current pool are kept.
 */
#define MAX_SPARE_HANDLES	256
static CURL *spare[MAX_SPARE_HANDLES];
static int	n_spare = 0;

static CURL *
get_handle(void)
{
	return n_spare > 0 ? spare[--n_spare] : curl_easy_init();
}

static void
put_handle(CURL *easy, HttpPool *pool)
{
	if (pool == current && n_spare < MAX_SPARE_HANDLES)
	{
		curl_easy_reset(easy);
		spare[n_spare++] = easy;
	}
	else
		curl_easy_cleanup(easy);
}

/*
 * What the connections of a pool were made under: the allowed networks and
 * the CA file, by name and by what is on disk (a file rewritten in place
 * counts as a change).
 */
typedef struct ConnectPolicy
{
	NetworkList allowed;
	char		ca_file[MAXPGPATH];
	bool		ca_found;
	struct stat ca_stat;
} ConnectPolicy;

static ConnectPolicy connect_policy;

static void
connect_policy_now(ConnectPolicy *p)
{
	memset(p, 0, sizeof(ConnectPolicy));
	p->allowed.n = outbox_allowed_networks.n;
	memcpy(p->allowed.nets, outbox_allowed_networks.nets,
		   sizeof(Network) * outbox_allowed_networks.n);
	strlcpy(p->ca_file, outbox_ca_file ? outbox_ca_file : "", sizeof(p->ca_file));
	p->ca_found = p->ca_file[0] != '\0' && stat(p->ca_file, &p->ca_stat) == 0;
}

static bool
connect_policy_changed(const ConnectPolicy *a, const ConnectPolicy *b)
{
	if (!address_networks_equal(&a->allowed, &b->allowed) ||
		strcmp(a->ca_file, b->ca_file) != 0 || a->ca_found != b->ca_found)
		return true;
	return a->ca_found &&
		(a->ca_stat.st_dev != b->ca_stat.st_dev ||
		 a->ca_stat.st_ino != b->ca_stat.st_ino ||
		 a->ca_stat.st_size != b->ca_stat.st_size ||
		 a->ca_stat.st_mtim.tv_sec != b->ca_stat.st_mtim.tv_sec ||
		 a->ca_stat.st_mtim.tv_nsec != b->ca_stat.st_mtim.tv_nsec ||
		 a->ca_stat.st_ctim.tv_sec != b->ca_stat.st_ctim.tv_sec ||
		 a->ca_stat.st_ctim.tv_nsec != b->ca_stat.st_ctim.tv_nsec);
}

/*
 * After a reload: apply the connection limits, and when the address policy
 * or the CA file changed, stop using every connection made so far (see the
 * pools above).  Requests in flight finish where they are.  The connections
 * kept are sized by what the open files limit leaves room for
 * (http_socket_room), as the relay's slots are.
 */
void
http_configure(int max_total)
{
	ConnectPolicy now;

	max_total = http_socket_room(max_total);
	connect_policy_now(&now);
	if (connect_policy_changed(&now, &connect_policy))
	{
		HttpPool   *old = current;
		int			unfinished = old->in_flight;

		current = pool_create(max_total);
		memcpy(&connect_policy, &now, sizeof(ConnectPolicy));
		dlist_push_tail(&retiring, &old->node);
		if (unfinished == 0)
			pool_destroy(old);
		while (n_spare > 0)
			curl_easy_cleanup(spare[--n_spare]);
		ereport(LOG,
				(errmsg("outbox closes its connections: outbox.allowed_networks or outbox.ca_file changed"),
				 errdetail("%d requests in flight finish on their connections first.",
						   unfinished)));
	}
	pool_limits(current, max_total);
	http1_retire(current->generation, max_total);
}

static TimestampTz http_due(void);
static void http_after(void);

/* libcurl's timers and http1.c's deadlines, in the wait (wait.h). */
static const WaitTimer http_timer = {
	.due = http_due,
	.after = http_after,
};

/*
 * At the start of the relay or a sender: libcurl, the first pool, our
 * epoll set in the wait, and our clocks.
 */
void
http_start(int max_total)
{
	if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
		elog(ERROR, "could not initialize libcurl");
	connect_policy_now(&connect_policy);
	max_total = http_socket_room(max_total);
	current = pool_create(max_total);
	http1_start(&http1_host);
	http1_retire(current->generation, max_total);
	start_watching();
	wait_add_timer(&http_timer);
}

/*
 * Descriptors beyond the connections SOCKETS_PER_SLOT counts: the epoll
 * set, sockets being closed, the threaded resolver's, a retiring pool's.
 */
#define SOCKET_MARGIN		64
/* What the relay always had room for beside PostgreSQL's own files. */
#define SOCKET_FLOOR		64

/*
 * Connections a slot may need kept open: its request's own, and one idle in
 * each of the two connection caches.  libcurl's (HTTP/2) keeps up to
 * `wanted` connections, in use and idle together (CURLMOPT_MAXCONNECTS, as
 * pool_limits sets it), and so does http1.c's (HTTP/1.1, http1_retire).
 * Each closes its idle connections beyond that only when a request
 * completes, never before it opens one, so with `wanted` idle in each,
 * `wanted` requests to hosts neither has a connection to open `wanted`
 * more.  Outside this count (SOCKET_MARGIN, and bursts beyond it): the
 * threaded resolver's two descriptors per lookup, a second socket while a
 * host with IPv4 and IPv6 addresses is connected to, a retiring pool's
 * connections until its last request ends, OAuth2 token fetches.
 */
#define SOCKETS_PER_SLOT	3

/*
 * Make room for `wanted` requests in flight and the connections kept
 * beside them: raise this process's soft limit on open files by
 * SOCKETS_PER_SLOT times that many (and a margin) above what PostgreSQL
 * budgets for its own files: the soft limit the process started with, or
 * max_files_per_process if lower (fd.c, set_max_safe_fds).  A server
 * started with a soft limit of 1,024 would otherwise fail every request
 * past about a thousand with "Couldn't connect" (EMFILE): 5,000 slots
 * delivered less than 1,000 did (DESIGN.md, The relay loop).  Returns how
 * many requests fit: wanted, or a third (SOCKETS_PER_SLOT) of what the hard
 * limit leaves (at least SOCKET_FLOOR), said once in a WARNING (t/030, part
 * 3).
 */
int
http_socket_room(int wanted)
{
	static rlim_t started_with = 0;
	static int	warned_for = 0;
	struct rlimit rl;
	rlim_t		postgres_files;
	rlim_t		need;
	int			room;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return wanted;
	if (started_with == 0)
		started_with = rl.rlim_cur;
	if (started_with == RLIM_INFINITY)
		return wanted;
	/*
	 * A server whose soft limit equals its hard one (LimitNOFILE=65536 in a
	 * systemd unit, say) had no room at all when the whole soft limit was
	 * taken for PostgreSQL's: it kept SOCKET_FLOOR requests in flight.
	 */
	postgres_files = Min(started_with, (rlim_t) max_files_per_process);
	need = postgres_files + SOCKETS_PER_SLOT * (rlim_t) wanted + SOCKET_MARGIN;
	if (rl.rlim_cur < need)
	{
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : Min(need, rl.rlim_max);
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			(void) getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur >= need)
		return wanted;
	room = rl.rlim_cur > postgres_files + SOCKET_MARGIN ?
		(int) ((rl.rlim_cur - postgres_files - SOCKET_MARGIN) / SOCKETS_PER_SLOT) : 0;
	room = Min(wanted, Max(room, SOCKET_FLOOR));
	if (warned_for != wanted)
	{
		warned_for = wanted;
		ereport(WARNING,
				(errmsg("outbox keeps at most %d requests in flight, not outbox.max_concurrency = %d",
						room, wanted),
				 errdetail("The hard limit on open files is %lu; PostgreSQL itself budgets for %lu of them.",
						   (unsigned long) rl.rlim_max, (unsigned long) postgres_files),
				 errhint("Raise the server's hard limit on open files (ulimit -Hn, or LimitNOFILE in its systemd unit).")));
	}
	return room;
}

/*
 * Every byte libcurl reads after a head comes here, raw.  The first call
 * starts the body's parser, chunked when libcurl reads it so.  Returns
 * false to make libcurl stop: a bound broken, or framing refused
 * (req->exceeded).
 */
static size_t
write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		n = size * nmemb;
	size_t		pos = 0;

	if (!req->body_started)
	{
		h1_body_only(&req->parser, req->curl_chunked);
		req->body_started = true;
	}
	while (pos < n)
	{
		size_t		used;
		const char *out;
		size_t		out_len;
		H1Event		ev = h1_parse(&req->parser, data + pos, n - pos, false, &used, &out, &out_len);

		pos += used;
		if (ev == H1_ERROR)
		{
			req->exceeded = req->parser.error;
			return 0;
		}
		if (ev == H1_BODY)
			http_response_keep(req, out, out_len);
		if (!http_response_bounds(req))
			return 0;
		if (ev != H1_BODY)
			break;				/* H1_MORE, or H1_DONE: libcurl ends it */
	}
	return n;
}

/*
 * libcurl's head lines.  A Transfer-Encoding that names chunked but ends
 * with another coding is refused at the head's end: libcurl would read
 * chunks where plain http reads to the connection's end (RFC 9112, 6.3).
 */
static size_t
header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		n = size * nmemb;

	if (!http_response_header(req, data, n))
		return 0;
	if (req->at_status && req->curl_chunked && !req->te_final_chunked)
	{
		req->exceeded = "the response's Transfer-Encoding names chunked, but not as its final coding";
		return 0;
	}
	return n;
}

/*
 * libcurl asks us for each socket it connects, with the address it
 * resolved: the address policy is applied to exactly the address that will
 * be connected to.  A refused address fails only that connection attempt.
 */
static curl_socket_t
open_socket_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	HttpRequest *req = (HttpRequest *) clientp;
	const char *why = address_refusal(&address->addr, &outbox_allowed_networks);
	curl_socket_t fd;

	if (why != NULL)
	{
		char		ip[INET6_ADDRSTRLEN] = "?";
		const void *raw = address->family == AF_INET6 ?
			(const void *) &((struct sockaddr_in6 *) &address->addr)->sin6_addr :
			(const void *) &((struct sockaddr_in *) &address->addr)->sin_addr;

		inet_ntop(address->family, raw, ip, sizeof(ip));
		snprintf(req->refused, sizeof(req->refused),
				 "refused to connect to %s, %s; outbox.allowed_networks can allow it", ip, why);
		return CURL_SOCKET_BAD;
	}
	fd = socket(address->family, address->socktype, address->protocol);
	if (fd != CURL_SOCKET_BAD)
		watch_opened(fd, true);
	return fd;
}

/* libcurl closes a socket it opened through open_socket_cb (or another). */
static int
close_socket_cb(void *clientp, curl_socket_t fd)
{
#ifdef HAVE_SYS_EPOLL_H
	WatchState *s = watch_state(fd);

	if (s != NULL && s->taken)
	{
		s->taken = false;		/* http1.c's now */
		return 0;
	}
#endif
	watch_opened(fd, false);
	return close(fd);
}

/* An easy handle for req, or an error (its header list freed). */
static CURL *
handle_for(HttpRequest *req)
{
	CURL	   *easy = get_handle();

	if (easy == NULL)
	{
		curl_slist_free_all(req->headers);
		req->headers = NULL;
		elog(ERROR, "could not create a libcurl easy handle");
	}
	req->easy = easy;
	req->pool = current;
	return easy;
}

/* Hand req's handle to libcurl, or an error (its header list freed). */
static void
add_to_pool(HttpRequest *req)
{
	if (curl_multi_add_handle(current->multi, req->easy) != CURLM_OK)
	{
		put_handle(req->easy, current);
		curl_slist_free_all(req->headers);
		req->headers = NULL;
		req->easy = NULL;
		req->pool = NULL;
		elog(ERROR, "could not add a request to the libcurl multi handle");
	}
	current->in_flight++;
	dlist_push_tail(&in_flight, &req->node);
}

/*
 * What every handle of ours is given: no signals, no Nagle, the error
 * text and req for the callbacks, the address policy at connect time
 * (open_socket_cb, close_socket_cb), and no proxy from the server's
 * environment (it would bypass the checks).
 */
static void
set_common_options(CURL *easy, HttpRequest *req)
{
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, req->error);
	curl_easy_setopt(easy, CURLOPT_PRIVATE, req);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, req);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, close_socket_cb);
	curl_easy_setopt(easy, CURLOPT_PROXY, "");
}

/* What is left of req's timeout, at least 1 ms (it counts from http_submit). */
static long
time_left_ms(const HttpRequest *req)
{
	long		left = req->timeout_ms -
		(long) ((GetCurrentTimestamp() - req->submitted_at) / 1000);

	return Max(left, 1);
}

/*
 * Have libcurl open a TCP connection to connect_url ("http://host:port/",
 * the origin of req's URL, https ones included), which http1.c sends req
 * on once connected (http_next_done): the name resolved, the address
 * policy applied (open_socket_cb), the endpoint's timeout counting from
 * http_submit.  TLS, where the URL is https, is http1.c's.
 */
static void
http_connect(HttpRequest *req, const char *connect_url)
{
	CURL	   *easy = handle_for(req);

	req->connecting = true;
	curl_easy_setopt(easy, CURLOPT_URL, connect_url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(easy, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, time_left_ms(req));
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, Min(time_left_ms(req), 10000L));
	set_common_options(easy, req);
	add_to_pool(req);
}

/*
 * Start a request; see HttpRequest for who owns what.  HTTP/1.1, http and
 * https alike, goes over http1.c's connections (on a kept one, or on one
 * libcurl opens for it); what http1.c does not send (a receiver that
 * speaks HTTP/2 only, a client certificate that cannot be loaded) goes
 * through libcurl (http_send).
 */
void
http_submit(HttpRequest *req)
{
	req->submitted_at = GetCurrentTimestamp();
	req->connecting = false;
	http_response_reset(req);
	if (!http1_submit(req))
		http_send(req);
}

/*
 * Send req through libcurl, in the time left of its timeout: what http1.c
 * hands over, HTTP/2 where the receiver speaks only that.
 */
static void
http_send(HttpRequest *req)
{
	CURL	   *easy = handle_for(req);

	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_POST, 1L);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, req->headers);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, "outbox/" OUTBOX_VERSION);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, time_left_ms(req));
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, Min(time_left_ms(req), 10000L));
	curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);

	/*
	 * No CURLOPT_PIPEWAIT: with it, a request to a host whose first
	 * connection has not yet answered (an endpoint that never answers, say)
	 * waited for that connection instead of opening its own, and failed
	 * when the other's request did.  Without it, libcurl multiplexes on a
	 * connection once the server is known to speak HTTP/2, and opens a
	 * connection of its own before that.
	 */
	/* The raw body: chunk framing is counted too (see write_cb). */
	curl_easy_setopt(easy, CURLOPT_HTTP_TRANSFER_DECODING, 0L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, req);
	set_common_options(easy, req);
	if (outbox_ca_file != NULL && outbox_ca_file[0] != '\0')
		curl_easy_setopt(easy, CURLOPT_CAINFO, outbox_ca_file);
	/*
	 * Mutual TLS: libcurl reuses a connection only for a request of the
	 * same client certificate (it is part of the TLS configuration a
	 * connection is matched by).
	 */
	if (req->client_cert != NULL)
	{
		curl_easy_setopt(easy, CURLOPT_SSLCERT, req->client_cert);
		curl_easy_setopt(easy, CURLOPT_SSLKEY, req->client_key);
	}

	add_to_pool(req);
}

/* Let libcurl act on the timer of each pool that is due. */
static void
act_on_timers(void)
{
	TimestampTz now = GetCurrentTimestamp();
	dlist_mutable_iter iter;

	if (current->timer_due != 0 && now >= current->timer_due)
	{
		current->timer_due = 0;
		multi_act(current->multi, CURL_SOCKET_TIMEOUT, 0);
	}
	dlist_foreach_modify(iter, &retiring)
	{
		HttpPool   *pool = dlist_container(HttpPool, node, iter.cur);

		if (pool->timer_due != 0 && now >= pool->timer_due)
		{
			pool->timer_due = 0;
			multi_act(pool->multi, CURL_SOCKET_TIMEOUT, 0);
		}
	}
}

/*
 * When libcurl or http1.c must act whether or not a socket wakes the wait:
 * the first of the pools' timers and http1.c's deadlines; now when http1.c
 * has a request that failed as it was sent, to be taken at once.
 */
static TimestampTz
http_due(void)
{
	TimestampTz first_due = current->timer_due;
	TimestampTz http1_due = http1_next_due();
	dlist_iter	iter;

	dlist_foreach(iter, &retiring)
	{
		HttpPool   *pool = dlist_container(HttpPool, node, iter.cur);

		if (pool->timer_due != 0 && (first_due == 0 || pool->timer_due < first_due))
			first_due = pool->timer_due;
	}
	if (http1_due != 0 && (first_due == 0 || http1_due < first_due))
		first_due = http1_due;
	if (http1_any_done())
		return GetCurrentTimestamp();
	return first_due;
}

/* After every wait: libcurl's timers that are due, http1.c's deadlines. */
static void
http_after(void)
{
	act_on_timers();
	if (http1_next_due() != 0)
		http1_expire(GetCurrentTimestamp());
}

/*
 * Take a request out of libcurl.  A retired pool whose last request this
 * was is cleaned up, closing its connections.
 */
static void
release(HttpRequest *req, bool keep_headers)
{
	HttpPool   *pool = req->pool;

	curl_multi_remove_handle(pool->multi, req->easy);
	put_handle(req->easy, pool);
	if (!keep_headers)
	{
		curl_slist_free_all(req->headers);
		req->headers = NULL;
	}
	req->easy = NULL;
	req->pool = NULL;
	dlist_delete(&req->node);
	if (--pool->in_flight == 0 && pool != current)
		pool_destroy(pool);
}

/* The next message of a pool about a finished request, or NULL. */
static CURLMsg *
next_message(HttpPool *pool)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(pool->multi, &left)) != NULL)
		if (msg->msg == CURLMSG_DONE)
			return msg;
	return NULL;
}

/*
 * The next finished request with its results filled in, or NULL.  Its
 * libcurl resources are already released.
 */
HttpRequest *
http_next_done(void)
{
	CURLMsg    *msg;
	HttpRequest *req;
	CURLcode	rc;
	double		total = 0;

	for (;;)
	{
		curl_socket_t fd = CURL_SOCKET_BAD;
		uint32		generation;

		if ((req = http1_next_done()) != NULL)
			return req;
		msg = next_message(current);
		if (msg == NULL)
		{
			dlist_iter	iter;

			dlist_foreach(iter, &retiring)
			{
				msg = next_message(dlist_container(HttpPool, node, iter.cur));
				if (msg != NULL)
					break;
			}
		}
		if (msg == NULL)
			return NULL;

		rc = msg->data.result;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
		if (!req->connecting)
			break;
		req->connecting = false;
		if (rc == CURLE_OK &&
			(curl_easy_getinfo(msg->easy_handle, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK ||
			 fd == CURL_SOCKET_BAD))
		{
			rc = CURLE_COULDNT_CONNECT;
			strlcpy(req->error, "libcurl connected but kept no socket", sizeof(req->error));
		}
		if (rc != CURLE_OK)
			break;
		/* Connected for http1.c: the socket is its own from here. */
		generation = req->pool->generation;
		take_socket(fd);
		release(req, true);
		http1_connected(req, fd, generation);
	}

	curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &req->status);
	curl_easy_getinfo(msg->easy_handle, CURLINFO_TOTAL_TIME, &total);
	req->duration_ms = total * 1000.0;

	if (req->exceeded != NULL)
	{
		/* The receiver broke a bound: whatever its status, no answer. */
		rc = CURLE_WRITE_ERROR;
		strlcpy(req->error, req->exceeded, sizeof(req->error));
	}
	else if (rc == CURLE_OUT_OF_MEMORY && req->error[0] == '\0' &&
			 (req->headers_read > 0 || req->status > 0))
	{
		/* libcurl refuses a single header line over 100 kB this way. */
		strlcpy(req->error, "a response header line exceeded libcurl's limit of 100 kB",
				sizeof(req->error));
	}
	else if (rc == CURLE_WRITE_ERROR && req->response_read > OUTBOX_RESPONSE_READ &&
			 req->status > 0)
	{
		/* Hanging up on a long response is not the receiver's failure. */
		rc = CURLE_OK;
		req->error[0] = '\0';
	}
	if (rc != CURLE_OK)
	{
		/* A reply broken off after its status line is no answer. */
		req->status = 0;
		req->transport_error = true;
		if (req->refused[0] != '\0')
			strlcpy(req->error, req->refused, sizeof(req->error));
		else if (req->error[0] == '\0')
			strlcpy(req->error, curl_easy_strerror(rc), sizeof(req->error));
		http_reword_auth_failure(req, rc == CURLE_SSL_CERTPROBLEM);
	}
	release(req, false);
	return req;
}

/* Drop every request in flight (after an error); their results are lost. */
void
http_abandon_all(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &in_flight)
		release(dlist_container(HttpRequest, node, iter.cur), false);
	http1_abandon_all();
}
