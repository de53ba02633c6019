/*-------------------------------------------------------------------------
 *
 * http.c
 *	  HTTP through libcurl.  For now: the check of endpoint URLs, with
 *	  libcurl's own URL parser so that what is accepted here is exactly what
 *	  libcurl will later request.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "fmgr.h"
#include "utils/builtins.h"

#include "http.h"

PG_FUNCTION_INFO_V1(outbox_check_url);

static void
bad_url(const char *url, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid endpoint URL \"%s\"", url),
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
static int	n_in_flight = 0;

void
http_configure(int max_total, int max_per_host)
{
	curl_multi_setopt(multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long) max_total);
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) max_per_host);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long) max_total);
}

void
http_start(int max_total, int max_per_host)
{
	if (curl_global_init(CURL_GLOBAL_ALL) != CURLE_OK)
		elog(ERROR, "could not initialize libcurl");
	multi = curl_multi_init();
	if (multi == NULL)
		elog(ERROR, "could not create a libcurl multi handle");
	curl_multi_setopt(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX);
	http_configure(max_total, max_per_host);
}

static size_t
write_cb(char *data, size_t size, size_t nmemb, void *userdata)
{
	HttpRequest *req = (HttpRequest *) userdata;
	size_t		n = size * nmemb;

	if (req->response_len < OUTBOX_RESPONSE_KEEP)
	{
		size_t		keep = Min(n, OUTBOX_RESPONSE_KEEP - req->response_len);

		/* Kept for a text column: only printable ASCII survives. */
		for (size_t i = 0; i < keep; i++)
		{
			unsigned char c = (unsigned char) data[i];

			req->response[req->response_len++] =
				(c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t' ? (char) c : '?';
		}
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

/* Start a request; see HttpRequest for who owns what. */
void
http_submit(HttpRequest *req)
{
	CURL	   *easy = curl_easy_init();

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
	curl_easy_setopt(easy, CURLOPT_USERAGENT, "outbox/1.0");
	curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, req->timeout_ms);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, Min(req->timeout_ms, 10000L));
	curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, (long) CURL_HTTP_VERSION_2TLS);
	curl_easy_setopt(easy, CURLOPT_PIPEWAIT, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, req);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, req->error);
	curl_easy_setopt(easy, CURLOPT_PRIVATE, req);

	if (curl_multi_add_handle(multi, easy) != CURLM_OK)
	{
		curl_easy_cleanup(easy);
		curl_slist_free_all(req->headers);
		req->headers = NULL;
		req->easy = NULL;
		elog(ERROR, "could not add a request to the libcurl multi handle");
	}
	dlist_push_tail(&in_flight, &req->node);
	n_in_flight++;
}

int
http_in_flight(void)
{
	return n_in_flight;
}

/* Let libcurl work for up to timeout_ms (returns early on socket activity). */
void
http_wait(int timeout_ms)
{
	int			running;

	curl_multi_poll(multi, NULL, 0, timeout_ms, NULL);
	curl_multi_perform(multi, &running);
}

static void
release(HttpRequest *req)
{
	curl_multi_remove_handle(multi, req->easy);
	curl_easy_cleanup(req->easy);
	curl_slist_free_all(req->headers);
	req->easy = NULL;
	req->headers = NULL;
	dlist_delete(&req->node);
	n_in_flight--;
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
			rc = CURLE_OK;
		if (rc != CURLE_OK)
		{
			req->transport_error = true;
			if (req->error[0] == '\0')
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
