/*-------------------------------------------------------------------------
 *
 * h1parse.h
 *	  An HTTP/1.1 response parser as a pure function: bytes in, events out
 *	  (h1parse.c).  No allocation, no I/O, nothing of PostgreSQL's, so the
 *	  fuzz target (test/h1/fuzz.c) and the unit cases (test/h1/cases.c)
 *	  build it on its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_H1PARSE_H
#define OUTBOX_H1PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum H1Event
{
	H1_MORE,					/* all given bytes are taken, or a line is not
								 * whole yet (used 0): more bytes, or the end */
	H1_STATUS,					/* a status line, interim ones included
								 * (status, minor); *out is the line */
	H1_HEADER,					/* a header line of a response's head */
	H1_HEAD_END,				/* the empty line ending a head: for a final
								 * response the framing is decided here */
	H1_BODY,					/* body bytes, chunk framing taken out */
	H1_DONE,					/* the response is complete; bytes after it
								 * are not its own (used 0 from here on) */
	H1_ERROR					/* the response is broken (error says how):
								 * the connection must be closed */
} H1Event;

typedef struct H1Parser
{
	int			state;
	int			minor;			/* HTTP/1.minor of the current response */
	int			status;			/* of the current response */
	int64_t		length;			/* Content-Length, -1 if none; in a body of
								 * that length, the bytes still to come */
	bool		te;				/* a Transfer-Encoding line was seen */
	bool		chunked;		/* chunked is its final coding */
	bool		conn_close;		/* Connection: close */
	bool		conn_keep;		/* Connection: keep-alive */
	bool		folded;			/* an obs-fold line was seen */
	bool		keep;			/* from the final head on: the connection may
								 * carry another request after this response */
	int			last_field;		/* the framing field the last line was, for
								 * a fold after it */
	int			chunk_state;
	uint64_t	chunk_left;		/* of the chunk being read */
	int			chunk_digits;
	uint64_t	head_bytes;		/* every head's lines, interim ones too */
	uint64_t	framing_bytes;	/* chunk sizes, extensions, line ends and
								 * trailers */
	uint64_t	taken;			/* every byte taken (used), all told */
	const char *error;			/* with H1_ERROR: why, a full phrase */
} H1Parser;

extern void h1_init(H1Parser *p);
extern void h1_body_only(H1Parser *p, bool chunked);
extern H1Event h1_parse(H1Parser *p, const char *data, size_t len, bool at_end,
						size_t *used, const char **out, size_t *out_len);
extern bool h1_in_head(const H1Parser *p);
extern bool h1_te_final_chunked(const char *value, size_t len, bool *chunked);

#endif							/* OUTBOX_H1PARSE_H */
