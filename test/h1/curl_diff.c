/*-------------------------------------------------------------------------
 *
 * curl_diff.c
 *	  The parser (src/targets/h1parse.c) beside libcurl, response by
 *	  response: each response of cases.h is served by a thread of this
 *	  program on 127.0.0.1, asked for by libcurl (a GET, then a second GET
 *	  on the same handle, which goes on the same connection if libcurl kept
 *	  it) and read by the parser.  The two must agree on
 *	  - how the response ended: done (the parser's keep or close,
 *	    libcurl's CURLE_OK), waiting for bytes that do not come (the
 *	    parser's more, libcurl's timeout) or refused;
 *	  - its status and its body, when both read it to its end;
 *	  - whether the connection is used again: for the parser, keep with no
 *	    bytes after the response (http1.c closes a connection with bytes
 *	    no request asked for); for libcurl, the second request went on it.
 *	  Where they differ, the case is in differences[] below with the
 *	  reason (DESIGN.md, "The HTTP/1.1 parser", gives the same); a listed
 *	  case on which they agree fails as well, so that the list stays true.
 *	  Prints one "ok" or "not ok" line a case and ends with "h1 curl: N
 *	  passed, N failed"; exits 1 on any failure.
 *
 *	  cc -I src test/h1/curl_diff.c src/targets/h1parse.c -lcurl -lpthread
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "transcript.h"
#include "cases.h"

/* Where the parser and libcurl read a case differently, and why. */
static const struct
{
	const char *name;
	const char *reason;
}			differences[] = {
	/* libcurl keeps a connection RFC 9112 says to close */
	{"HTTP/1.0: keep-alive does not undo close",
	"libcurl lets a later keep-alive undo an earlier close; RFC 9112 9.3: close in Connection ends the connection"},
	{"HTTP/1.0 with Transfer-Encoding closes",
	"libcurl keeps it; RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing: close after it"},
	{"chunks beside a length close",
	"libcurl keeps it; RFC 9112 6.3: Transfer-Encoding beside Content-Length may be smuggling: close after it"},
	{"a folded line closes",
	"libcurl joins the folded line and keeps the connection; the parser drops obs-fold (RFC 9112 5.2) and closes"},
	{"a folded close closes",
	"libcurl ignores the folded close and keeps the connection; read as RFC 9112 5.2 folds it, it says close"},
	/* libcurl refuses transfer codings it does not decode */
	{"Transfer-Encoding gzip beside a length: to the end",
	"libcurl refuses a transfer coding other than chunked; the parser reads it to the connection's end (RFC 9112 "
	"6.3), the body undecoded, and waits for that end"},
	{"Transfer-Encoding gzip beside a length, ended",
	"libcurl refuses a transfer coding other than chunked; the parser reads it to the connection's end (RFC 9112 "
	"6.3), the body undecoded"},
	{"chunked not final: to the end",
	"libcurl refuses the coding list; the parser reads to the connection's end since chunked is not final (RFC "
	"9112 6.3)"},
	{"chunked followed by a word: not chunked",
	"libcurl refuses the coding; \"chunked x\" is no chunked coding, so the parser reads to the connection's end "
	"(RFC 9112 6.3)"},
	{"chunked, then another line: not final",
	"libcurl decodes chunks and then finds the stream cut; the final coding is identity, so the parser reads to "
	"the connection's end (RFC 9112 6.3)"},
	{"chunked last among codings",
	"libcurl refuses gzip as a transfer coding; the parser decodes the final chunked and hands on the rest as "
	"the body: an answer's body is only recorded"},
	/* libcurl reads on where the parser refuses */
	{"a folded Content-Length",
	"libcurl keeps the first length; a folded length leaves the body's end in doubt: refused"},
	{"a folded trailer",
	"libcurl passes the folded trailer line on; RFC 9112 7.1.2 makes trailers fields, and obs-fold is refused "
	"(5.2)"},
	{"white space before the colon",
	"libcurl takes no length from the field and reads to the end; RFC 9112 5.1: such a field is rejected"},
	{"a bare CR",
	"libcurl does not end the head there and waits; RFC 9112 2.2 lets a recipient refuse a bare CR"},
	{"two lengths that differ",
	"libcurl takes the last length and waits for its bytes; RFC 9110 8.6: differing lengths are an error"},
	{"a signed length",
	"libcurl reads +2 as 2; RFC 9110 8.6: Content-Length is digits only"},
	{"101",
	"libcurl takes 101 as an interim answer and waits for another; a webhook asks for no protocol switch"},
	{"not HTTP/1.x",
	"libcurl, asked for HTTP/1.1, waits on an HTTP/2 status line; the parser refuses it at once"},
	{"closed in the headers",
	"libcurl takes a head cut by the connection's end as the whole response; the parser refuses it: the "
	"response's framing was never known"},
};

#define N_DIFFERENCES (sizeof(differences) / sizeof(differences[0]))

/* What the server thread answers every second request. */
#define SECOND "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"

static int	listener = -1;

/* Read a request's head (a GET: no body) from fd; false at its end. */
static bool
read_head(int fd)
{
	char		buf[4096];
	size_t		have = 0;

	for (;;)
	{
		ssize_t		n = read(fd, buf + have, sizeof(buf) - 1 - have);

		if (n <= 0)
			return false;
		have += (size_t) n;
		buf[have] = '\0';
		if (strstr(buf, "\r\n\r\n") != NULL)
			return true;
		if (have == sizeof(buf) - 1)
			return false;
	}
}

static void
write_all(int fd, const char *p, size_t n)
{
	while (n > 0)
	{
		ssize_t		k = write(fd, p, n);

		if (k <= 0)
			return;
		p += k;
		n -= (size_t) k;
	}
}

static int
accept_within(int ms)
{
	struct pollfd pfd = {listener, POLLIN, 0};

	if (poll(&pfd, 1, ms) != 1)
		return -1;
	return accept(listener, NULL, NULL);
}

/*
 * The server: for each case in turn, the first connection gets the case's
 * response (then the end of the stream, if the case ends there), and the
 * second request, on that connection or a new one, gets SECOND.
 */
static void *
serve(void *arg)
{
	(void) arg;
	for (size_t i = 0; i < N_CASES; i++)
	{
		const Case *c = &cases[i];
		size_t		len = c->len ? c->len : strlen(c->input);
		int			first = accept_within(10000);
		bool		answered = false;

		if (first < 0)
			return NULL;
		if (read_head(first))
		{
			write_all(first, c->input, len);
			if (c->ends)
				shutdown(first, SHUT_WR);
		}
		while (!answered)
		{
			struct pollfd pfd[2] = {{listener, POLLIN, 0}, {first, POLLIN, 0}};
			int			n = poll(pfd, first >= 0 ? 2 : 1, 10000);

			if (n <= 0)
				break;
			if (first >= 0 && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
			{
				if (read_head(first))
				{
					write_all(first, SECOND, strlen(SECOND));
					answered = true;
				}
				else
				{
					close(first);
					first = -1;
				}
			}
			else if (pfd[0].revents & POLLIN)
			{
				int			fd = accept(listener, NULL, NULL);

				if (fd >= 0 && read_head(fd))
				{
					write_all(fd, SECOND, strlen(SECOND));
					answered = true;
				}
				if (fd >= 0)
				{
					/* libcurl closes it, or keeps it until the next case */
					shutdown(fd, SHUT_WR);
					close(fd);
				}
			}
		}
		if (first >= 0)
		{
			shutdown(first, SHUT_WR);
			close(first);
		}
	}
	return NULL;
}

typedef struct Body
{
	size_t		len;
	uint64_t	hash;
	char		first[65];
} Body;

static size_t
take_body(char *p, size_t size, size_t n, void *arg)
{
	Body	   *b = arg;

	for (size_t i = 0; i < size * n; i++)
	{
		if (b->len < 64)
			b->first[b->len] = p[i];
		b->len++;
		b->hash = (b->hash ^ (unsigned char) p[i]) * 1099511628211ULL;
	}
	return size * n;
}

/* How a response ended, in the words both sides are summed up in. */
static const char *
ending_of_parser(const Transcript *t)
{
	if (strcmp(t->final, "keep") == 0 || strcmp(t->final, "close") == 0)
		return "done";
	if (strcmp(t->final, "more") == 0)
		return "waiting";
	return "refused";
}

static const char *
ending_of_curl(CURLcode rc)
{
	if (rc == CURLE_OK)
		return "done";
	if (rc == CURLE_OPERATION_TIMEDOUT)
		return "waiting";
	return "refused";
}

static const char *
listed(const char *name)
{
	for (size_t i = 0; i < N_DIFFERENCES; i++)
		if (strcmp(differences[i].name, name) == 0)
			return differences[i].reason;
	return NULL;
}

int
main(void)
{
	struct sockaddr_in addr = {0};
	int			port;
	char		url[64];
	pthread_t	server;
	int			passed = 0;
	int			failed = 0;
	CURL	   *easy;

	/* a port below the ephemeral range, where outgoing connections are */
	listener = socket(AF_INET, SOCK_STREAM, 0);
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (port = 24100; port < 24900; port++)
	{
		addr.sin_port = htons((uint16_t) port);
		if (bind(listener, (struct sockaddr *) &addr, sizeof(addr)) == 0)
			break;
	}
	if (port == 24900 || listen(listener, 16) != 0)
	{
		printf("h1 curl: no port to listen on (%s)\n", strerror(errno));
		return 1;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	pthread_create(&server, NULL, serve, NULL);
	easy = curl_easy_init();

	for (size_t i = 0; i < N_CASES; i++)
	{
		const Case *c = &cases[i];
		size_t		len = c->len ? c->len : strlen(c->input);
		Transcript	t;
		Body		body = {0};
		Body		second = {0};
		char		error[CURL_ERROR_SIZE] = "";
		CURLcode	rc;
		CURLcode	rc2;
		long		status = 0;
		long		status2 = 0;
		long		connects = -1;
		bool		parser_reuses;
		bool		curl_reuses;
		const char *reason = listed(c->name);
		char		why[512] = "";

		transcript_run(c->input, len, c->ends, 0, piece_all, NULL, &t);

		curl_easy_reset(easy);
		curl_easy_setopt(easy, CURLOPT_URL, url);
		curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_1_1);
		curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 500L);
		curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
		curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, take_body);
		curl_easy_setopt(easy, CURLOPT_WRITEDATA, &body);
		rc = curl_easy_perform(easy);
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);

		curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, 5000L);
		curl_easy_setopt(easy, CURLOPT_WRITEDATA, &second);
		rc2 = curl_easy_perform(easy);
		curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status2);
		curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
		if (rc2 != CURLE_OK || status2 != 200 || second.len != 6)
		{
			printf("not ok %zu - %s: the second request failed (%s)\n", i + 1, c->name, curl_easy_strerror(rc2));
			failed++;
			continue;
		}

		parser_reuses = strcmp(t.final, "keep") == 0 && t.rest == 0;
		curl_reuses = connects == 0;
		if (strcmp(ending_of_parser(&t), ending_of_curl(rc)) != 0)
			snprintf(why, sizeof(why), "the parser: %s (%s); libcurl: %s (%s)", ending_of_parser(&t), t.final,
					 ending_of_curl(rc), rc == CURLE_OK ? "ok" : error[0] ? error : curl_easy_strerror(rc));
		else if (rc == CURLE_OK && status != t.status)
			snprintf(why, sizeof(why), "status: the parser %d, libcurl %ld", t.status, status);
		else if (rc == CURLE_OK && (body.len != t.body_len || body.hash != t.body_hash))
			snprintf(why, sizeof(why), "body: the parser %zu bytes \"%.*s\", libcurl %zu bytes \"%.*s\"",
					 t.body_len, (int) (t.body_len < 64 ? t.body_len : 64), t.body,
					 body.len, (int) (body.len < 64 ? body.len : 64), body.first);
		else if (parser_reuses != curl_reuses)
			snprintf(why, sizeof(why), "the connection: the parser %s it (%s, %zu bytes after), libcurl %s it",
					 parser_reuses ? "reuses" : "closes", t.final, t.rest, curl_reuses ? "reused" : "closed");

		if (why[0] == '\0' && reason == NULL)
		{
			printf("ok %zu - %s\n", i + 1, c->name);
			passed++;
		}
		else if (why[0] != '\0' && reason != NULL)
		{
			printf("ok %zu - %s # differs as documented: %s\n#   %s\n", i + 1, c->name, why, reason);
			passed++;
		}
		else if (why[0] != '\0')
		{
			printf("not ok %zu - %s: they differ, and the difference is not documented\n#   %s\n",
				   i + 1, c->name, why);
			failed++;
		}
		else
		{
			printf("not ok %zu - %s: listed as a difference, but they agree\n", i + 1, c->name);
			failed++;
		}
	}
	for (size_t j = 0; j < N_DIFFERENCES; j++)
	{
		bool		known = false;

		for (size_t i = 0; i < N_CASES; i++)
			known |= strcmp(cases[i].name, differences[j].name) == 0;
		if (!known)
		{
			printf("not ok - difference \"%s\" names no case\n", differences[j].name);
			failed++;
		}
	}
	curl_easy_cleanup(easy);
	pthread_join(server, NULL);
	printf("h1 curl: %d passed, %d failed\n", passed, failed);
	return failed > 0;
}
