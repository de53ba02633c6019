/*-------------------------------------------------------------------------
 *
 * response.h
 *	  One HTTP request and its response, as both HTTP paths carry it
 *	  (libcurl's, http.c; the relay's own HTTP/1.1, http1.c), and the bounds
 *	  on what a response may send (response.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RESPONSE_H
#define OUTBOX_RESPONSE_H

#include <curl/curl.h>

#include "datatype/timestamp.h"
#include "lib/ilist.h"

#include "targets/h1parse.h"
#include "targets/outcome.h"

/*
 * What a response may send.  Past OUTBOX_RESPONSE_READ bytes after the
 * headers the relay hangs up, and a plain long body counts as its status;
 * past either of the other two the attempt is a transport error that says
 * which bound the receiver broke.
 */
#define OUTBOX_RESPONSE_READ	(64 * 1024) /* after the headers, framing
											 * included: read at most, then
											 * hang up */
#define OUTBOX_RESPONSE_HEADERS (64 * 1024) /* the header lines of every
											 * response, 1xx included */
#define OUTBOX_RESPONSE_FRAMING (16 * 1024) /* chunk sizes, extensions and
											 * trailers */

struct HttpPool;

/*
 * One request.  The caller fills the inputs and keeps url, body, the
 * client certificate's paths and the request itself alive until
 * http_next_done() hands it back; http owns the header list from submit
 * on and frees it.
 */
typedef struct HttpRequest
{
	/* inputs */
	const char *url;
	const char *body;
	size_t		body_len;
	struct curl_slist *headers;
	long		timeout_ms;
	void	   *owner;
	const char *client_cert;	/* mutual TLS: certificate and key files, */
	const char *client_key;		/* or NULL */
	void		(*done) (struct HttpRequest *req);	/* or NULL: called as it
													 * is taken back, for a
													 * request that is no
													 * delivery (an OAuth2
													 * token request) */
	char	   *whole_body;		/* or NULL: keep the body as it came here, */
	size_t		whole_size;		/* at most this many bytes */

	/* results */
	long		status;			/* 0 when no response */
	bool		transport_error;	/* connect, TLS, timeout, protocol */
	char		error[CURL_ERROR_SIZE];
	char		refused[CURL_ERROR_SIZE];	/* why an address was refused */
	double		duration_ms;
	char		response[OUTBOX_RESPONSE_KEEP + 1];
	size_t		response_len;
	size_t		response_read;	/* bytes after the headers, framing too */
	bool		response_cut;	/* the body was longer than what is kept */
	char		delivery[32];	/* webhook-delivery response header */
	char		retry_after[64];	/* Retry-After response header */
	size_t		whole_len;		/* bytes kept in whole_body */
	bool		whole_over;		/* the body was longer than whole_size */

	/* the bounds on what the response sends (response.c) */
	size_t		headers_read;	/* header bytes, every response */
	H1Parser	parser;			/* the response's framing: the whole
								 * response on plain http (http1.c), the
								 * body after libcurl read the head */
	bool		at_status;		/* libcurl's next header line is a status
								 * line */
	bool		head_final;		/* the head being read is a final one (not
								 * 1xx) */
	bool		head_done;		/* a final head ended: lines after it are
								 * trailers */
	bool		curl_chunked;	/* libcurl reads the body as chunked */
	bool		te_final_chunked;	/* Transfer-Encoding ends with chunked */
	bool		body_started;	/* libcurl handed over body bytes */
	const char *exceeded;		/* the bound broken, or NULL */

	TimestampTz submitted_at;	/* http_submit: the timeout counts from here */
	bool		connecting;		/* libcurl connects it for http1.c */

	CURL	   *easy;
	struct HttpPool *pool;		/* the multi handle it was added to */
	dlist_node	node;			/* in the in-flight list */
} HttpRequest;

/*
 * A response byte as the attempt log keeps it: a text column, so only
 * printable ASCII, tabs and newlines survive; anything else becomes '?'.
 */
static inline char
http_kept_char(char c)
{
	unsigned char u = (unsigned char) c;

	return (u >= 0x20 && u < 0x7f) || c == '\n' || c == '\t' ? c : '?';
}

extern const char *http_header_value(const char *line, size_t len, const char *name,
									 size_t *vlen);
extern bool http_response_header(HttpRequest *req, const char *line, size_t n);
extern void http_response_keep(HttpRequest *req, const char *data, size_t n);
extern bool http_response_bounds(HttpRequest *req);
extern void http_response_reset(HttpRequest *req);
extern void http_reword_auth_failure(HttpRequest *req, bool cert_unusable);

#endif							/* OUTBOX_RESPONSE_H */
