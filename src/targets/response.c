/*-------------------------------------------------------------------------
 *
 * response.c
 *	  An HTTP response as both of the HTTP paths read it (libcurl's, http.c;
 *	  the relay's own HTTP/1.1, http1.c): its head lines and body bytes are
 *	  handed here, which keeps what the attempt log keeps of them and holds
 *	  them to the bounds of response.h; and a failure about the client
 *	  certificate reworded.  Functions of the request alone, in the relay
 *	  or a sender, with no transaction open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "targets/response.h"

/*
 * What a response sends, as both paths see it.  libcurl is asked for the
 * raw body (transfer decoding off), so that its write callback (http.c)
 * sees every byte after the head, chunk framing included: h1parse.c's
 * decoder, run on the body alone (h1_body_only), tells body bytes from
 * framing, counts the framing and refuses framing it would not take on
 * plain http; libcurl still finds the response's end itself.  On plain
 * http (http1.c) the same parser reads the whole response, and hands each
 * head line and the decoded body here.
 */

/* Keep a body byte for the attempt log, or note that the kept text is cut. */
static inline void
keep_byte(HttpRequest *req, unsigned char c)
{
	if (req->response_len >= OUTBOX_RESPONSE_KEEP)
	{
		req->response_cut = true;
		return;
	}
	req->response[req->response_len++] = http_kept_char((char) c);
	req->response[req->response_len] = '\0';
}

/*
 * Keep decoded body bytes: the first OUTBOX_RESPONSE_KEEP for the attempt
 * log, and, for a caller that asked for the whole body (whole_body), up to
 * whole_size bytes as they came, then whole_over.
 */
void
http_response_keep(HttpRequest *req, const char *data, size_t n)
{
	size_t		keep = Min(n, OUTBOX_RESPONSE_KEEP - req->response_len);
	size_t		room = req->whole_size - req->whole_len;

	for (size_t i = 0; i < keep; i++)
		keep_byte(req, (unsigned char) data[i]);
	if (keep < n)
		req->response_cut = true;
	if (req->whole_body == NULL)
		return;
	if (n > room)
	{
		req->whole_over = true;
		n = room;
	}
	memcpy(req->whole_body + req->whole_len, data, n);
	req->whole_len += n;
}

/*
 * The bounds after the head, on what the parser has taken: past
 * OUTBOX_RESPONSE_FRAMING bytes of chunk framing the response is a flood
 * (req->exceeded); past OUTBOX_RESPONSE_READ bytes in all the relay hangs
 * up, and a long body counts as its status (http_next_done, http1.c).
 * Returns false at either.
 */
bool
http_response_bounds(HttpRequest *req)
{
	req->response_read = req->parser.taken - req->parser.head_bytes;
	if (req->parser.framing_bytes > OUTBOX_RESPONSE_FRAMING)
	{
		req->exceeded = "the response's chunk framing (sizes, extensions, trailers) exceeded 16 kB";
		return false;
	}
	if (req->response_read > OUTBOX_RESPONSE_READ)
		return false;			/* enough: hang up */
	return true;
}

/*
 * The value of header line[0..len) if its name is "name" (case-insensitive),
 * without the white space around it; NULL for another header.
 */
const char *
http_header_value(const char *line, size_t len, const char *name, size_t *vlen)
{
	size_t		nlen = strlen(name);

	if (len <= nlen || line[nlen] != ':' || pg_strncasecmp(line, name, nlen) != 0)
		return NULL;
	line += nlen + 1;
	len -= nlen + 1;
	while (len > 0 && (*line == ' ' || *line == '\t'))
		line++, len--;
	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n' ||
					   line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	*vlen = len;
	return line;
}

/* Copy the value of header "name" into dst if the line is that header. */
static void
take_header(const char *line, size_t len, const char *name, char *dst, size_t dstlen)
{
	size_t		vlen;
	const char *value = http_header_value(line, len, name, &vlen);

	if (value == NULL)
		return;
	vlen = Min(vlen, dstlen - 1);
	memcpy(dst, value, vlen);
	dst[vlen] = '\0';
}

/*
 * Each line of each response's head, 1xx responses included, comes here,
 * from libcurl (header_cb) or from http1.c: they are bounded together by
 * OUTBOX_RESPONSE_HEADERS.  Returns false past it (req->exceeded).  libcurl
 * also hands over a chunked or HTTP/2 body's trailer lines: after a final
 * head they are counted and not read, so a trailer is neither taken for a
 * status line (which would clear what the head said) nor for a header.
 */
bool
http_response_header(HttpRequest *req, const char *data, size_t n)
{
	const char *te;
	size_t		te_len;

	req->headers_read += n;
	if (req->headers_read > OUTBOX_RESPONSE_HEADERS)
	{
		req->exceeded = "the response's headers (1xx responses included) exceeded 64 kB";
		return false;
	}
	if (req->head_done)
		return true;
	if (req->at_status)
	{
		const char *sp = memchr(data, ' ', n);

		/* a status line starts a response: its own headers follow */
		req->at_status = false;
		req->head_final = !(sp != NULL && sp + 1 < data + n && sp[1] == '1');
		req->curl_chunked = false;
		req->te_final_chunked = false;
		req->delivery[0] = '\0';
		req->retry_after[0] = '\0';
		return true;
	}
	if (n <= 2 && (data[0] == '\r' || data[0] == '\n'))
	{
		req->at_status = true;	/* the head's end */
		req->head_done = req->head_final;
		return true;
	}
	take_header(data, n, "webhook-delivery", req->delivery, sizeof(req->delivery));
	take_header(data, n, "retry-after", req->retry_after, sizeof(req->retry_after));

	/*
	 * libcurl takes a body for chunked when "chunked" stands anywhere in any
	 * Transfer-Encoding line of the response, however long the line: the
	 * body's parser follows it (write_cb), and header_cb refuses a head
	 * whose final coding is another.
	 */
	if ((te = http_header_value(data, n, "transfer-encoding", &te_len)) != NULL)
	{
		for (size_t i = 0; i + 7 <= te_len; i++)
			if (pg_strncasecmp(te + i, "chunked", 7) == 0)
				req->curl_chunked = true;
		(void) h1_te_final_chunked(te, te_len, &req->te_final_chunked);
	}
	return true;
}

/* A request's results as they are before it is sent. */
void
http_response_reset(HttpRequest *req)
{
	req->status = 0;
	req->transport_error = false;
	req->error[0] = '\0';
	req->refused[0] = '\0';
	req->response[0] = '\0';
	req->response_len = 0;
	req->response_read = 0;
	req->response_cut = false;
	req->delivery[0] = '\0';
	req->retry_after[0] = '\0';
	req->headers_read = 0;
	h1_init(&req->parser);
	req->at_status = true;
	req->head_final = false;
	req->head_done = false;
	req->curl_chunked = false;
	req->te_final_chunked = false;
	req->body_started = false;
	req->exceeded = NULL;
	req->whole_len = 0;
	req->whole_over = false;
}

/*
 * A failure that is about the client certificate says so
 * (docs/authentication.md): one that could not be loaded, or a TLS alert
 * from the receiver about certificates (OpenSSL's text: "certificate
 * required", "bad certificate", "unknown ca", ...).  Our own check of the
 * receiver's certificate reads "SSL certificate problem" and is no alert.
 */
void
http_reword_auth_failure(HttpRequest *req, bool cert_unusable)
{
	char		why[CURL_ERROR_SIZE];
	const char *what;

	if (cert_unusable)
		what = "the client certificate or key could not be used";
	else if (strstr(req->error, "alert") != NULL &&
			 (strstr(req->error, "certificate") != NULL || strstr(req->error, "unknown ca") != NULL))
		what = req->client_cert != NULL ? "the receiver refused the client certificate" :
			"the receiver asks for a client certificate (auth's client_cert)";
	else
		return;
	strlcpy(why, req->error, sizeof(why));
	snprintf(req->error, sizeof(req->error), "authentication failed: %s: %s", what, why);
}
