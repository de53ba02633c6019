/*-------------------------------------------------------------------------
 *
 * h1parse.c
 *	  An HTTP/1.1 response parser: bytes in, events out, nothing else.
 *
 * The caller keeps the bytes.  It hands h1_parse what it holds that the
 * parser has not taken yet, and gets one event back with how many bytes
 * that event took (*used).  Lines of a head are taken whole or not at all:
 * when a line's end is not there yet, H1_MORE takes nothing and the caller
 * keeps the bytes for the next call (http1.c grows its buffer up to the
 * head's bound, http.h).  Bodies are taken as they come: H1_BODY points
 * into the caller's bytes at the body's decoded part, chunk framing
 * counted and left out.  at_end says the connection ends after the bytes
 * given; a body that runs to the connection's end ends there.
 *
 * The grammar is RFC 9112's, read strictly where a lenient reading could
 * make the parser and the receiver disagree on where a response ends:
 *   - a status line is known by where it stands (the start of a response),
 *     never by its first bytes; a header line must be a field (a token,
 *     a colon, a value), and a bare CR or a NUL in a head is refused;
 *   - Transfer-Encoding overrides Content-Length, and only a final
 *     "chunked" makes a body chunked: with another final coding the body
 *     runs to the connection's end (RFC 9112, 6.3);
 *   - Content-Length is digits (a list of equal values counts once); two
 *     values that differ are refused;
 *   - a chunk size is hex digits followed only by white space, chunk
 *     extensions (";...") and the line's end, and a trailer line is a
 *     field (a token, a colon, a value without NUL or bare CR);
 *   - an obs-fold line is refused after Content-Length or
 *     Transfer-Encoding and closes the connection after any other field.
 * The connection is kept (keep) only when the head leaves no doubt:
 * HTTP/1.1 without "close" among Connection's options, or HTTP/1.0 with
 * "keep-alive" and without "close"; not with Transfer-Encoding beside
 * Content-Length or on HTTP/1.0, a fold, or a body to the connection's end.
 * Bytes after a complete response are never the next response's: the
 * parser stops at H1_DONE, and the caller closes a connection that has
 * any (http1.c, complete).
 *
 * DESIGN.md, "The HTTP/1.1 engine", says where the parser and libcurl
 * read a response differently, and why.
 *
 *-------------------------------------------------------------------------
 */
#include "targets/h1parse.h"

#include <string.h>

/* Where a response stands (state). */
enum
{
	S_STATUS,					/* a status line is next */
	S_HEADERS,					/* header lines, to the empty one */
	S_LENGTH,					/* a body of Content-Length bytes */
	S_CHUNKS,					/* a chunked body */
	S_TO_CLOSE,					/* a body that ends with the connection */
	S_DONE,
	S_ERROR
};

/* Where a chunked body stands (chunk_state). */
enum
{
	C_SIZE,						/* the hex size */
	C_SIZE_WS,					/* white space after the size */
	C_EXT,						/* a chunk extension, to the line's end */
	C_SIZE_LF,					/* the LF after a size line's CR */
	C_DATA,						/* chunk_left bytes of data */
	C_DATA_CR,					/* the line end after a chunk's data */
	C_DATA_LF,					/* its LF after the CR */
	C_TRAILER_START,			/* the start of a trailer line (or the end) */
	C_TRAILER_NAME,				/* a trailer field's name */
	C_TRAILER,					/* a trailer field's value */
	C_TRAILER_LF,				/* the LF after a trailer line's CR */
	C_END_LF					/* the LF of the last line */
};

/* The framing fields (last_field). */
enum
{
	F_OTHER,
	F_LENGTH,
	F_TE,
	F_CONNECTION
};

static inline char
lower(char c)
{
	return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c;
}

/* Is s[0..n) the lower-case word w, ignoring case? */
static bool
word_is(const char *s, size_t n, const char *w)
{
	if (strlen(w) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (lower(s[i]) != w[i])
			return false;
	return true;
}

/* A tchar of RFC 9110, 5.6.2: what a field name or a coding is made of. */
static bool
is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		(c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static inline bool
is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static inline bool
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* s[0..*n) without white space at either end. */
static const char *
trim(const char *s, size_t *n)
{
	while (*n > 0 && is_ows(*s))
		s++, (*n)--;
	while (*n > 0 && is_ows(s[*n - 1]))
		(*n)--;
	return s;
}

/*
 * Call each(element, length, arg) for each element of a comma-separated
 * list, white space trimmed, empty elements skipped (RFC 9110, 5.6.1).
 * Stops, returning false, when each does.
 */
static bool
each_element(const char *s, size_t n, bool (*each) (const char *, size_t, void *), void *arg)
{
	while (n > 0)
	{
		const char *comma = memchr(s, ',', n);
		size_t		len = comma ? (size_t) (comma - s) : n;
		size_t		elen = len;
		const char *e = trim(s, &elen);

		if (elen > 0 && !each(e, elen, arg))
			return false;
		if (comma == NULL)
			break;
		s += len + 1;
		n -= len + 1;
	}
	return true;
}

/* A Transfer-Encoding element: is its coding "chunked"? */
static bool
te_element(const char *e, size_t n, void *arg)
{
	size_t		name = 0;
	size_t		rest;

	while (name < n && is_tchar((unsigned char) e[name]))
		name++;
	/*
	 * A coding's parameters follow a ';'.  Anything else after its name
	 * ("chunked x") makes an element that names no coding known here, as
	 * a coding that is not chunked: the body is not read as chunks.
	 */
	rest = name;
	while (rest < n && is_ows(e[rest]))
		rest++;
	*(int *) arg = word_is(e, name, "chunked") && (rest == n || e[rest] == ';') ? 1 : 0;
	return true;
}

/*
 * Does a Transfer-Encoding value end with the chunked coding?  Sets
 * *chunked and returns true when the value names a coding at all; false
 * for an empty value (*chunked unchanged).  The later of two lines holds
 * the final coding.  http.c asks this of the responses libcurl reads.
 */
bool
h1_te_final_chunked(const char *value, size_t len, bool *chunked)
{
	int			last = -1;

	(void) each_element(value, len, te_element, &last);
	if (last < 0)
		return false;
	*chunked = last == 1;
	return true;
}

/* Is there a digit in s[0..n)? */
static bool
has_digit(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (is_digit(s[i]))
			return true;
	return false;
}

/* A Content-Length element: digits, the same number as any before it. */
static bool
length_element(const char *e, size_t n, void *arg)
{
	int64_t    *length = (int64_t *) arg;
	int64_t		v = 0;

	if (n > 18)
		return false;
	for (size_t i = 0; i < n; i++)
	{
		if (!is_digit(e[i]))
			return false;
		v = v * 10 + (e[i] - '0');
	}
	if (*length >= 0 && *length != v)
		return false;
	*length = v;
	return true;
}

/* A Connection option. */
static bool
connection_element(const char *e, size_t n, void *arg)
{
	H1Parser   *p = (H1Parser *) arg;

	if (word_is(e, n, "close"))
		p->conn_close = true;
	else if (word_is(e, n, "keep-alive"))
		p->conn_keep = true;
	return true;
}

static H1Event
fail(H1Parser *p, const char *why)
{
	p->state = S_ERROR;
	p->keep = false;
	p->error = why;
	return H1_ERROR;
}

/* A response is next, on a fresh connection or a kept one. */
void
h1_init(H1Parser *p)
{
	memset(p, 0, sizeof(*p));
	p->state = S_STATUS;
	p->length = -1;
}

/*
 * Only the body is parsed here, its head read by someone else (libcurl,
 * http.c): chunked, or as it comes until the caller says it ended.
 */
void
h1_body_only(H1Parser *p, bool chunked)
{
	h1_init(p);
	p->chunked = chunked;
	p->state = chunked ? S_CHUNKS : S_TO_CLOSE;
	p->chunk_state = C_SIZE;
}

/* Is the parser inside a head (the status line not yet read, or headers)? */
bool
h1_in_head(const H1Parser *p)
{
	return p->state == S_STATUS || p->state == S_HEADERS;
}

/* A status line: "HTTP/1.d ddd", then the end or a space and a reason. */
static bool
status_line(H1Parser *p, const char *s, size_t n)
{
	if (n < 12 || memcmp(s, "HTTP/1.", 7) != 0 || !is_digit(s[7]) || s[8] != ' ' ||
		!is_digit(s[9]) || !is_digit(s[10]) || !is_digit(s[11]) || (n > 12 && s[12] != ' '))
		return false;
	p->minor = s[7] - '0';
	p->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
	p->length = -1;
	p->te = false;
	p->chunked = false;
	p->conn_close = false;
	p->conn_keep = false;
	p->folded = false;
	p->last_field = F_OTHER;
	return p->status >= 100;
}

/* The empty line ends a head: after a final one, how the body is framed. */
static H1Event
head_end(H1Parser *p)
{
	if (p->status < 200)
	{
		if (p->status == 101)
			return fail(p, "the receiver switched protocols (101), which a webhook does not ask for");
		p->state = S_STATUS;	/* an interim response: the answer follows */
		return H1_HEAD_END;
	}
	p->keep = !p->conn_close && !p->folded && (p->minor >= 1 || p->conn_keep);
	if (p->status == 204 || p->status == 304)
	{
		/* no body, whatever the head says of one */
		p->state = S_LENGTH;
		p->length = 0;
		if (p->te)
			p->keep = false;
	}
	else if (p->te)
	{
		/* framing in doubt: read as Transfer-Encoding says, then close */
		if (p->length >= 0 || p->minor == 0)
			p->keep = false;
		p->length = -1;
		if (p->chunked)
		{
			p->state = S_CHUNKS;
			p->chunk_state = C_SIZE;
			p->chunk_left = 0;
			p->chunk_digits = 0;
		}
		else
		{
			p->state = S_TO_CLOSE;
			p->keep = false;
		}
	}
	else if (p->length >= 0)
		p->state = S_LENGTH;
	else
	{
		p->state = S_TO_CLOSE;
		p->keep = false;
	}
	return H1_HEAD_END;
}

/* A header line, s[0..n) without its line end. */
static H1Event
header_line(H1Parser *p, const char *s, size_t n)
{
	const char *colon;
	const char *value;
	size_t		vlen;

	if (n == 0)
		return head_end(p);
	if (is_ows(s[0]))
	{
		/* obs-fold: the line continues the field before it */
		if (p->last_field == F_LENGTH || p->last_field == F_TE)
			return fail(p, "the response's head has a folded Content-Length or Transfer-Encoding line");
		p->folded = true;
		return H1_HEADER;
	}
	colon = memchr(s, ':', n);
	if (colon == NULL || colon == s)
		return fail(p, "the response's head has a line that is not a header field");
	for (const char *c = s; c < colon; c++)
		if (!is_tchar((unsigned char) *c))
			return fail(p, "the response's head has a header field name with a character not allowed in it");
	vlen = n - (colon + 1 - s);
	value = trim(colon + 1, &vlen);
	p->last_field = F_OTHER;
	if (word_is(s, colon - s, "content-length"))
	{
		/* (a line of no element, beside another, is no number either) */
		if (!has_digit(value, vlen) ||
			!each_element(value, vlen, length_element, &p->length) || p->length < 0)
			return fail(p, "the response's Content-Length is not one number");
		p->last_field = F_LENGTH;
	}
	else if (word_is(s, colon - s, "transfer-encoding"))
	{
		p->te = true;
		(void) h1_te_final_chunked(value, vlen, &p->chunked);
		p->last_field = F_TE;
	}
	else if (word_is(s, colon - s, "connection"))
	{
		(void) each_element(value, vlen, connection_element, p);
		p->last_field = F_CONNECTION;
	}
	return H1_HEADER;
}

/* A line of a head: the status line or a header line. */
static H1Event
head_line(H1Parser *p, const char *data, size_t len, bool at_end,
		  size_t *used, const char **out, size_t *out_len)
{
	const char *nl = memchr(data, '\n', len);
	size_t		n;

	if (nl == NULL)
	{
		if (!at_end)
			return H1_MORE;
		if (p->state == S_STATUS && p->head_bytes == 0 && len == 0)
			return fail(p, "the receiver closed the connection without answering");
		return fail(p, "the receiver closed the connection in the response's headers");
	}
	*used = nl + 1 - data;
	*out = data;
	*out_len = *used;
	p->head_bytes += *used;
	p->taken += *used;
	n = nl - data;
	if (n > 0 && data[n - 1] == '\r')
		n--;
	if (p->state == S_STATUS && !status_line(p, data, n))
		return fail(p, "the receiver's answer is not an HTTP/1.x response");
	if (memchr(data, '\r', n) != NULL || memchr(data, '\0', n) != NULL)
		return fail(p, "the response's head has a bare CR or a NUL in a line");
	if (p->state == S_STATUS)
	{
		p->state = S_HEADERS;
		return H1_STATUS;
	}
	return header_line(p, data, n);
}

/* The end of a chunk size line: its data next, or the trailers. */
static inline void
size_line_end(H1Parser *p)
{
	p->chunk_state = p->chunk_left > 0 ? C_DATA : C_TRAILER_START;
}

/* A chunked body: framing taken byte by byte, data handed out whole. */
static H1Event
chunks(H1Parser *p, const char *data, size_t len, bool at_end,
	   size_t *used, const char **out, size_t *out_len)
{
	size_t		i = 0;

	while (i < len)
	{
		unsigned char c;
		int			digit;

		if (p->chunk_state == C_DATA)
		{
			size_t		take = len - i < p->chunk_left ? len - i : (size_t) p->chunk_left;

			p->chunk_left -= take;
			if (p->chunk_left == 0)
				p->chunk_state = C_DATA_CR;
			*out = data + i;
			*out_len = take;
			*used = i + take;
			p->taken += *used;
			return H1_BODY;
		}
		c = (unsigned char) data[i++];
		p->framing_bytes++;
		switch (p->chunk_state)
		{
			case C_SIZE:
				digit = c >= '0' && c <= '9' ? c - '0' :
					c >= 'a' && c <= 'f' ? c - 'a' + 10 :
					c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
				if (digit >= 0)
				{
					if (p->chunk_left >= ((uint64_t) 1 << 56))
						return fail(p, "the response has a chunk size too large");
					p->chunk_left = p->chunk_left * 16 + digit;
					p->chunk_digits++;
					break;
				}
				if (p->chunk_digits == 0)
					return fail(p, "the response has a chunk size line without a size");
				if (c == ';')
					p->chunk_state = C_EXT;
				else if (is_ows(c))
					p->chunk_state = C_SIZE_WS;
				else if (c == '\r')
					p->chunk_state = C_SIZE_LF;
				else if (c == '\n')
					size_line_end(p);
				else
					return fail(p, "the response has bytes after a chunk size that are not an extension");
				break;
			case C_SIZE_WS:
				if (c == ';')
					p->chunk_state = C_EXT;
				else if (c == '\r')
					p->chunk_state = C_SIZE_LF;
				else if (c == '\n')
					size_line_end(p);
				else if (!is_ows(c))
					return fail(p, "the response has bytes after a chunk size that are not an extension");
				break;
			case C_EXT:
				if (c == '\r')
					p->chunk_state = C_SIZE_LF;
				else if (c == '\n')
					size_line_end(p);
				else if (c == '\0')
					return fail(p, "the response has a NUL in a chunk extension");
				break;
			case C_SIZE_LF:
				if (c != '\n')
					return fail(p, "the response has a CR without LF in its chunk framing");
				size_line_end(p);
				break;
			case C_DATA_CR:
			case C_DATA_LF:
				if (c == '\r' && p->chunk_state == C_DATA_CR)
					p->chunk_state = C_DATA_LF;
				else if (c == '\n')
				{
					p->chunk_state = C_SIZE;
					p->chunk_left = 0;
					p->chunk_digits = 0;
				}
				else
					return fail(p, "the response has a chunk whose data is longer than its size");
				break;
			case C_TRAILER_START:
				if (c == '\r')
					p->chunk_state = C_END_LF;
				else if (c == '\n')
				{
					p->state = S_DONE;
					*used = i;
					p->taken += i;
					return H1_DONE;
				}
				else if (is_tchar(c))
					p->chunk_state = C_TRAILER_NAME;
				else
					return fail(p, "the response has a trailer line that is not a header field");
				break;
			case C_TRAILER_NAME:
				if (c == ':')
					p->chunk_state = C_TRAILER;
				else if (!is_tchar(c))
					return fail(p, "the response has a trailer line that is not a header field");
				break;
			case C_TRAILER:
				if (c == '\r')
					p->chunk_state = C_TRAILER_LF;
				else if (c == '\n')
					p->chunk_state = C_TRAILER_START;
				else if (c == '\0')
					return fail(p, "the response has a NUL in a trailer line");
				break;
			case C_TRAILER_LF:
				if (c != '\n')
					return fail(p, "the response has a CR without LF in its chunk framing");
				p->chunk_state = C_TRAILER_START;
				break;
			case C_END_LF:
				if (c != '\n')
					return fail(p, "the response has a CR without LF in its chunk framing");
				p->state = S_DONE;
				*used = i;
				p->taken += i;
				return H1_DONE;
		}
	}
	*used = len;
	p->taken += len;
	if (at_end)
		return fail(p, "the receiver closed the connection before the response ended");
	return H1_MORE;
}

/*
 * The next event of the response in data[0..len), at most len bytes taken
 * (*used).  *out and *out_len are the line (H1_STATUS, H1_HEADER,
 * H1_HEAD_END: the whole line, its line end included) or the body bytes
 * (H1_BODY); they point into data.
 */
H1Event
h1_parse(H1Parser *p, const char *data, size_t len, bool at_end,
		 size_t *used, const char **out, size_t *out_len)
{
	size_t		take;

	*used = 0;
	*out = NULL;
	*out_len = 0;
	switch (p->state)
	{
		case S_STATUS:
		case S_HEADERS:
			return head_line(p, data, len, at_end, used, out, out_len);
		case S_LENGTH:
			if (p->length == 0)
			{
				p->state = S_DONE;
				return H1_DONE;
			}
			if (len == 0)
				return at_end ?
					fail(p, "the receiver closed the connection before the response ended") : H1_MORE;
			take = (uint64_t) len < (uint64_t) p->length ? len : (size_t) p->length;
			p->length -= take;
			*out = data;
			*out_len = take;
			*used = take;
			p->taken += take;
			return H1_BODY;
		case S_CHUNKS:
			return chunks(p, data, len, at_end, used, out, out_len);
		case S_TO_CLOSE:
			if (len == 0)
			{
				if (!at_end)
					return H1_MORE;
				p->state = S_DONE;
				return H1_DONE;
			}
			*out = data;
			*out_len = len;
			*used = len;
			p->taken += len;
			return H1_BODY;
		case S_DONE:
			return H1_DONE;
		default:
			return H1_ERROR;
	}
}
