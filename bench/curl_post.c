/*
 * bench/curl_post.c: libcurl alone sending what the relay sends, for case 8
 * (bench/run.sh).  It keeps CONNECTIONS requests in flight through one
 * multi handle for SECONDS and prints the requests completed per second.
 * Each request is made as http.c makes it (an easy handle kept and reset,
 * the same options, a header and a write callback, the sockets in an epoll
 * set of its own, left there while their connection idles), but nothing is
 * read, signed or recorded: the figure is what libcurl and the kernel cost
 * on their own, the most a relay sending through libcurl on one core could
 * deliver.
 *
 * Usage: curl_post URL CONNECTIONS SECONDS < request
 * The request file is the one wrk reads (bench/wrk_post.lua): the body on
 * the first line, then one "name: value" header a line.  Prints the
 * requests answered 2xx a second, and how many were not.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

static CURLM *multi;
static int	epfd;
static double timer_due = -1;	/* when libcurl wants a call; -1: never */
static const char *url;
static char body[65536];
static size_t body_len;
static struct curl_slist *headers;
static long done_ok, done_failed;

/*
 * What the epoll set holds, by descriptor (EPOLLIN/EPOLLOUT, 0 for
 * nothing), and whether libcurl watches it now: as in http.c, a socket
 * that waited for an answer stays in the set while its connection idles.
 */
static unsigned registered[65536];
static bool wanted[65536];

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct epoll_event ev;
	unsigned	events;

	if (fd < 0 || fd >= 65536)
		return -1;
	if (what == CURL_POLL_REMOVE)
	{
		wanted[fd] = false;
		if (registered[fd] & EPOLLIN)
			return 0;			/* left in the set while its connection idles */
		epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
		registered[fd] = 0;
		return 0;
	}
	wanted[fd] = true;
	events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	if (registered[fd] == events)
		return 0;
	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.fd = fd;
	if (epoll_ctl(epfd, registered[fd] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0 &&
		epoll_ctl(epfd, errno == ENOENT ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) != 0)
		return -1;
	registered[fd] = events;
	return 0;
}

static curl_socket_t
open_cb(void *clientp, curlsocktype purpose, struct curl_sockaddr *address)
{
	curl_socket_t fd = socket(address->family, address->socktype, address->protocol);

	if (fd >= 0 && fd < 65536)
		registered[fd] = 0, wanted[fd] = false;
	return fd;
}

static int
close_cb(void *clientp, curl_socket_t fd)
{
	if (fd >= 0 && fd < 65536)
		registered[fd] = 0;
	return close(fd);
}

static int
timer_cb(CURLM *m, long ms, void *userp)
{
	timer_due = ms < 0 ? -1 : now() + ms / 1000.0;
	return 0;
}

static size_t
header_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	return size * nmemb;
}

static size_t
write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	return size * nmemb;
}

static void
submit(CURL *easy)
{
	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_POST, 1L);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) body_len);
	curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, "outbox-bench");
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(easy, CURLOPT_HTTP_TRANSFER_DECODING, 0L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, open_cb);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, close_cb);
	curl_easy_setopt(easy, CURLOPT_PROXY, "");
	curl_multi_add_handle(multi, easy);
}

/* Take what finished and start each handle again until the end. */
static void
collect(int again)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		CURL	   *easy = msg->easy_handle;
		long		status = 0;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
		if (msg->data.result == CURLE_OK && status >= 200 && status < 300)
			done_ok++;
		else
			done_failed++;
		curl_multi_remove_handle(multi, easy);
		curl_easy_reset(easy);
		if (again)
			submit(easy);
		else
			curl_easy_cleanup(easy);
	}
}

int
main(int argc, char **argv)
{
	char		line[8192];
	int			connections;
	double		seconds, start, end;
	int			running;

	if (argc != 4)
	{
		fprintf(stderr, "usage: curl_post URL CONNECTIONS SECONDS < request\n");
		return 2;
	}
	url = argv[1];
	connections = atoi(argv[2]);
	seconds = atof(argv[3]);
	if (fgets(body, sizeof(body), stdin) == NULL)
		return 2;
	body_len = strcspn(body, "\n");
	body[body_len] = '\0';
	while (fgets(line, sizeof(line), stdin) != NULL)
	{
		line[strcspn(line, "\n")] = '\0';
		if (strchr(line, ':') != NULL)
			headers = curl_slist_append(headers, line);
	}

	curl_global_init(CURL_GLOBAL_ALL);
	multi = curl_multi_init();
	epfd = epoll_create1(EPOLL_CLOEXEC);
	curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, 0L);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, 2048L);
	curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
	curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, timer_cb);

	start = now();
	end = start + seconds;
	for (int i = 0; i < connections; i++)
		submit(curl_easy_init());
	for (;;)
	{
		struct epoll_event evs[64];
		int			n;
		int			more = now() < end;
		int			wait_ms = 100;

		if (timer_due >= 0)
			wait_ms = timer_due <= now() ? 0 : (int) ((timer_due - now()) * 1000) + 1;
		n = epoll_wait(epfd, evs, 64, wait_ms);
		for (int i = 0; i < n; i++)
		{
			int			flags = 0;
			int			fd = evs[i].data.fd;

			if (!wanted[fd])
			{
				/* an idle connection woke (closed by the server, say) */
				epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
				registered[fd] = 0;
				continue;
			}
			if (evs[i].events & EPOLLIN)
				flags |= CURL_CSELECT_IN;
			if (evs[i].events & EPOLLOUT)
				flags |= CURL_CSELECT_OUT;
			if (evs[i].events & (EPOLLERR | EPOLLHUP))
				flags |= CURL_CSELECT_ERR;
			curl_multi_socket_action(multi, fd, flags, &running);
		}
		/* as the relay does (http.c, act_on_timers): libcurl's timer when due */
		if (timer_due >= 0 && now() >= timer_due)
		{
			timer_due = -1;
			curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
		}
		collect(more);
		if (!more)
			break;
	}
	/* what was counted is what finished within the window */
	printf("%.2f %ld\n", done_ok / (now() - start), done_failed);
	curl_multi_cleanup(multi);
	curl_slist_free_all(headers);
	return 0;
}
