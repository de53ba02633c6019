/*-------------------------------------------------------------------------
 *
 * http.c
 *	  HTTP through libcurl: the check of endpoint URLs (libcurl's own URL
 *	  parser, so that what is accepted is exactly what libcurl will later
 *	  request), and the multi-handle wrapper the relay submits requests to,
 *	  with the address policy applied at connect time (address.c).
 *
 * The wrapper runs in the relay only, with no transaction open; see the
 * comment above http_configure for who limits what.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <curl/curl.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "address.h"
#include "guc.h"
#include "http.h"

PG_FUNCTION_INFO_V1(outbox_check_url);

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

static void
bad_url(const char *url, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid endpoint URL \"%s\"", url_for_messages(url)),
			 errdetail("%s", detail)));
}

/*
 * outbox._check_url(text) returns text: the URL as libcurl normalizes it.
 * Only absolute http and https URLs with a host and without credentials
 * are accepted.  All libcurl memory is freed before any error is raised.
 */
Datum
outbox_check_url(PG_FUNCTION_ARGS)
{
	char	   *url = text_to_cstring(PG_GETARG_TEXT_PP(0));
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
				 errmsg("endpoint URL is too long"),
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
		problem = "Only http and https URLs are accepted.";
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
		bad_url(url, problem);
	PG_RETURN_TEXT_P(cstring_to_text(result));
}

/*
 * The multi-handle wrapper used by the relay.  One multi handle per relay
 * process keeps many requests in flight, reuses connections (keep-alive)
 * and multiplexes HTTP/2 where a server offers it.  Redirects are never
 * followed, only http and https are spoken, and at most
 * OUTBOX_RESPONSE_READ bytes of a response are read.
 *
 * Memory: easy handles and header lists are malloc'd by libcurl and freed
 * here on every path, including http_abandon_all() after an error.
 */

static CURLM *multi = NULL;
static dlist_head in_flight = DLIST_STATIC_INIT(in_flight);

/*
 * The sockets libcurl wants watched (socket callback) and when it wants to
 * be called back regardless (timer callback).  The relay sleeps in one
 * WaitEventSet on its latch and on these.
 *
 * On Linux the sockets live in an epoll set of our own, which sits in the
 * WaitEventSet as a single socket: a change costs one epoll_ctl, and the
 * WaitEventSet is built once.  Elsewhere the WaitEventSet is rebuilt from
 * the list of watched sockets whenever it changed.
 */
static TimestampTz timer_due = 0;	/* 0: no timer */
static WaitEventSet *wait_set = NULL;

#ifdef HAVE_SYS_EPOLL_H
#include <sys/epoll.h>

static int	curl_epfd = -1;

/*
 * A socket libcurl starts watching has no pointer assigned (socketp) yet:
 * it is added, and marked, so that later changes are one MOD each rather
 * than a MOD that fails first (a system call per request saved).
 */
static int	watched_mark;

static int
socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct epoll_event ev;

	if (what == CURL_POLL_REMOVE)
	{
		/* libcurl tells us before it closes the socket */
		(void) epoll_ctl(curl_epfd, EPOLL_CTL_DEL, fd, NULL);
		return 0;
	}
	memset(&ev, 0, sizeof(ev));
	ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	ev.data.fd = fd;
	if (socketp != NULL && epoll_ctl(curl_epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
		return 0;
	if (epoll_ctl(curl_epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ||
		(errno == EEXIST && epoll_ctl(curl_epfd, EPOLL_CTL_MOD, fd, &ev) == 0))
	{
		curl_multi_assign(multi, fd, &watched_mark);
		return 0;
	}
	return -1;					/* libcurl fails the transfer */
}

static void
build_wait_set(void)
{
	if (wait_set != NULL)
		return;
	curl_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (curl_epfd < 0)
		elog(ERROR, "epoll_create1 failed: %m");
	wait_set = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, curl_epfd, NULL, NULL);
}

/* Hand libcurl the ready sockets of our epoll set. */
static void
act_on_sockets(void)
{
	struct epoll_event evs[64];
	int			n;
	int			running;

	n = epoll_wait(curl_epfd, evs, lengthof(evs), 0);
	for (int i = 0; i < n; i++)
	{
		int			flags = 0;

		if (evs[i].events & EPOLLIN)
			flags |= CURL_CSELECT_IN;
		if (evs[i].events & EPOLLOUT)
			flags |= CURL_CSELECT_OUT;
		if (evs[i].events & (EPOLLERR | EPOLLHUP))
			flags |= CURL_CSELECT_ERR;
		curl_multi_socket_action(multi, evs[i].data.fd, flags, &running);
	}
}

#else							/* !HAVE_SYS_EPOLL_H */

typedef struct WatchedSocket
{
	curl_socket_t fd;
	int			what;			/* CURL_POLL_IN, _OUT or _INOUT */
} WatchedSocket;

static WatchedSocket *watched = NULL;
static int	n_watched = 0;
static int	max_watched = 0;
static bool watch_changed = true;

static int
socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	int			i;

	for (i = 0; i < n_watched; i++)
		if (watched[i].fd == fd)
			break;
	if (what == CURL_POLL_REMOVE)
	{
		if (i < n_watched)
			watched[i] = watched[--n_watched];
	}
	else
	{
		if (i == n_watched)
		{
			if (n_watched == max_watched)
			{
				int			grow = Max(16, max_watched * 2);
				WatchedSocket *more = realloc(watched, sizeof(WatchedSocket) * grow);

				if (more == NULL)
					return -1;	/* libcurl fails the transfer */
				watched = more;
				max_watched = grow;
			}
			watched[n_watched++].fd = fd;
		}
		watched[i].what = what;
	}
	watch_changed = true;
	return 0;
}

static void
build_wait_set(void)
{
	if (wait_set != NULL && !watch_changed)
		return;
	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	wait_set = CreateWaitEventSet(TopMemoryContext, n_watched + 2);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < n_watched; i++)
	{
		uint32		events = 0;

		if (watched[i].what & CURL_POLL_IN)
			events |= WL_SOCKET_READABLE;
		if (watched[i].what & CURL_POLL_OUT)
			events |= WL_SOCKET_WRITEABLE;
		AddWaitEventToSet(wait_set, events, watched[i].fd, NULL, NULL);
	}
	watch_changed = false;
}
#endif							/* HAVE_SYS_EPOLL_H */

static int
timer_cb(CURLM *m, long timeout_ms, void *userp)
{
	timer_due = timeout_ms < 0 ? 0 :
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
void
http_configure(int max_total)
{
	curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long) max_total);
}

void
http_start(int max_total)
{
	if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
		elog(ERROR, "could not initialize libcurl");
	multi = curl_multi_init();
	if (multi == NULL)
		elog(ERROR, "could not create a libcurl multi handle");
	curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);
	http_configure(max_total);
}

static size_t
write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		n = size * nmemb;

	if (req->response_len < OUTBOX_RESPONSE_KEEP)
	{
		size_t		keep = Min(n, OUTBOX_RESPONSE_KEEP - req->response_len);

		for (size_t i = 0; i < keep; i++)
			req->response[req->response_len++] = http_kept_char(data[i]);
		req->response[req->response_len] = '\0';
	}
	req->response_read += n;
	if (req->response_read > OUTBOX_RESPONSE_READ)
		return 0;				/* enough: hang up */
	return n;
}

/* Copy the value of header "name" (case-insensitive) into dst if it is it. */
static void
take_header(const char *line, size_t len, const char *name, char *dst, size_t dstlen)
{
	size_t		nlen = strlen(name);
	size_t		vlen;

	if (len <= nlen || line[nlen] != ':' || pg_strncasecmp(line, name, nlen) != 0)
		return;
	line += nlen + 1;
	len -= nlen + 1;
	while (len > 0 && (*line == ' ' || *line == '\t'))
		line++, len--;
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n' || line[len - 1] == ' '))
		len--;
	vlen = Min(len, dstlen - 1);
	memcpy(dst, line, vlen);
	dst[vlen] = '\0';
}

static size_t
header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		n = size * nmemb;

	take_header(data, n, "webhook-delivery", req->delivery, sizeof(req->delivery));
	take_header(data, n, "retry-after", req->retry_after, sizeof(req->retry_after));
	return n;
}

/*
 * Easy handles are kept for reuse (reset, not freed): creating one per
 * request showed up in profiles as malloc and free.
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
put_handle(CURL *easy)
{
	if (n_spare < MAX_SPARE_HANDLES)
	{
		curl_easy_reset(easy);
		spare[n_spare++] = easy;
	}
	else
		curl_easy_cleanup(easy);
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
	return socket(address->family, address->socktype, address->protocol);
}

/* Start a request; see HttpRequest for who owns what. */
void
http_submit(HttpRequest *req)
{
	CURL	   *easy = get_handle();

	if (easy == NULL)
	{
		curl_slist_free_all(req->headers);
		req->headers = NULL;
		elog(ERROR, "could not create a libcurl easy handle");
	}
	req->easy = easy;
	req->status = 0;
	req->transport_error = false;
	req->error[0] = '\0';
	req->refused[0] = '\0';
	req->response[0] = '\0';
	req->response_len = 0;
	req->response_read = 0;
	req->delivery[0] = '\0';
	req->retry_after[0] = '\0';

	curl_easy_setopt(easy, CURLOPT_URL, req->url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_POST, 1L);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, req->body);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, req->headers);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, "outbox/" OUTBOX_VERSION);
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, Min(req->timeout_ms, 10000L));
	curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
	/* HTTP/2: wait to multiplex on a connection rather than open more. */
	curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, req);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, req->error);
	curl_easy_setopt(easy, CURLOPT_PRIVATE, req);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, req);
	/* No proxy from the server's environment: it would bypass the checks. */
	curl_easy_setopt(easy, CURLOPT_PROXY, "");
	if (outbox_ca_file != NULL && outbox_ca_file[0] != '\0')
		curl_easy_setopt(easy, CURLOPT_CAINFO, outbox_ca_file);

	if (curl_multi_add_handle(multi, easy) != CURLM_OK)
	{
		put_handle(easy);
		curl_slist_free_all(req->headers);
		req->headers = NULL;
		req->easy = NULL;
		elog(ERROR, "could not add a request to the libcurl multi handle");
	}
	dlist_push_tail(&in_flight, &req->node);
}

/*
 * Sleep until the latch is set, a socket libcurl watches is ready, libcurl's
 * timer is due, or timeout_ms passed; then let libcurl do its work.
 * Returns true when the latch was set (the caller resets it).
 */
bool
http_wait(long timeout_ms)
{
	WaitEvent	events[16];
	int			n;
	int			running;
	bool		latch = false;
	long		wait_ms = timeout_ms;

	if (timer_due != 0)
		wait_ms = Min(wait_ms, Max(0, TimestampDifferenceMilliseconds(GetCurrentTimestamp(), timer_due)));
	build_wait_set();

	n = WaitEventSetWait(wait_set, wait_ms, events, lengthof(events), PG_WAIT_EXTENSION);
	for (int i = 0; i < n; i++)
	{
		if (events[i].events & WL_LATCH_SET)
		{
			latch = true;
			continue;
		}
#ifdef HAVE_SYS_EPOLL_H
		if (events[i].events & WL_SOCKET_READABLE)
			act_on_sockets();
#else
		{
			int			flags = 0;

			if (events[i].events & WL_SOCKET_READABLE)
				flags |= CURL_CSELECT_IN;
			if (events[i].events & WL_SOCKET_WRITEABLE)
				flags |= CURL_CSELECT_OUT;
			if (flags)
				curl_multi_socket_action(multi, events[i].fd, flags, &running);
		}
#endif
	}
	if (timer_due != 0 && GetCurrentTimestamp() >= timer_due)
	{
		timer_due = 0;
		curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
	}
	return latch;
}

static void
release(HttpRequest *req)
{
	curl_multi_remove_handle(multi, req->easy);
	put_handle(req->easy);
	curl_slist_free_all(req->headers);
	req->easy = NULL;
	req->headers = NULL;
	dlist_delete(&req->node);
}

/*
 * The next finished request with its results filled in, or NULL.  Its
 * libcurl resources are already released.
 */
HttpRequest *
http_next_done(void)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		HttpRequest *req;
		CURLcode	rc = msg->data.result;
		double		total = 0;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &req);
		curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &req->status);
		curl_easy_getinfo(msg->easy_handle, CURLINFO_TOTAL_TIME, &total);
		req->duration_ms = total * 1000.0;

		/* Hanging up on a long response is not the receiver's failure. */
		if (rc == CURLE_WRITE_ERROR && req->response_read > OUTBOX_RESPONSE_READ && req->status > 0)
		{
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
		}
		release(req);
		return req;
	}
	return NULL;
}

/* Drop every request in flight (after an error); their results are lost. */
void
http_abandon_all(void)
{
	dlist_mutable_iter iter;

	dlist_foreach_modify(iter, &in_flight)
		release(dlist_container(HttpRequest, node, iter.cur));
}
