/*-------------------------------------------------------------------------
 *
 * transcript.h
 *	  Drive h1parse.c over a byte stream as http1.c does (bytes the parser
 *	  did not take are kept for the next call), fed in pieces of sizes a
 *	  caller chooses, and sum up what it said: for the unit cases
 *	  (cases.c), the fuzz target (fuzz.c) and the comparison with libcurl
 *	  (curl_diff.c).  The sum does not depend on how the stream was cut:
 *	  the fuzz target checks that it does not.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_H1_TRANSCRIPT_H
#define OUTBOX_H1_TRANSCRIPT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "targets/h1parse.h"

typedef struct Transcript
{
	char		final[160];		/* "keep", "close", "more" or "error: ..." */
	int			status;			/* of the last status line read */
	int			heads;			/* status lines read, interim ones too */
	size_t		lines;			/* head lines */
	size_t		line_bytes;
	size_t		body_len;		/* decoded body bytes */
	uint64_t	body_hash;		/* FNV-1a of them */
	char		body[65];		/* their first 64 */
	size_t		rest;			/* bytes after a complete response */
	size_t		taken;			/* bytes the parser took, all told */
} Transcript;

/* The size of the next piece to feed (at least 1). */
typedef size_t (*PieceFn) (void *arg);

static inline void
transcript_fail(const char *what)
{
	fprintf(stderr, "h1 transcript: %s\n", what);
	abort();
}

/*
 * Feed in[0..n) to a fresh parser (body_only: a body alone, chunked or
 * not), in pieces; ends: the connection ends after the last byte.
 * Checks the parser's promises on the way and aborts when one is broken.
 */
static inline void
transcript_run(const char *in, size_t n, bool ends, int body_only,
			   PieceFn piece, void *arg, Transcript *t)
{
	H1Parser	p;
	char	   *buf = malloc(n + 1);
	size_t		have = 0;
	size_t		fed = 0;
	size_t		steps = 0;

	memset(t, 0, sizeof(*t));
	if (body_only)
		h1_body_only(&p, body_only == 2);
	else
		h1_init(&p);
	for (;;)
	{
		size_t		pos = 0;
		bool		at_end;

		if (fed < n)
		{
			size_t		k = piece(arg);

			if (k == 0 || k > n - fed)
				k = n - fed;
			memcpy(buf + have, in + fed, k);
			have += k;
			fed += k;
		}
		at_end = ends && fed == n;
		for (;;)
		{
			size_t		used;
			const char *out;
			size_t		out_len;
			H1Event		ev = h1_parse(&p, buf + pos, have - pos, at_end, &used, &out, &out_len);

			if (used > have - pos)
				transcript_fail("took more bytes than it was given");
			if (out != NULL && (out < buf + pos || out + out_len > buf + pos + used))
				transcript_fail("pointed outside the bytes it took");
			if (++steps > 8 * (n + 16))
				transcript_fail("does not move on");
			pos += used;
			t->taken += used;
			if (ev == H1_MORE)
			{
				if (at_end)
					transcript_fail("asked for more after the end");
				break;
			}
			if (ev == H1_STATUS || ev == H1_HEADER || ev == H1_HEAD_END)
			{
				if (used == 0 || out_len != used || out[out_len - 1] != '\n')
					transcript_fail("a head line that is not one whole line");
				t->lines++;
				t->line_bytes += used;
				if (ev == H1_STATUS)
				{
					t->heads++;
					t->status = p.status;
				}
				continue;
			}
			if (ev == H1_BODY)
			{
				if (out_len == 0 && used == 0)
					transcript_fail("an empty body event that took nothing");
				for (size_t i = 0; i < out_len; i++)
				{
					if (t->body_len < 64)
						t->body[t->body_len] = out[i];
					t->body_len++;
					t->body_hash = (t->body_hash ^ (unsigned char) out[i]) * 1099511628211ULL;
				}
				continue;
			}
			if (ev == H1_DONE)
			{
				t->rest = (have - pos) + (n - fed);
				snprintf(t->final, sizeof(t->final), "%s", p.keep ? "keep" : "close");
			}
			else
				snprintf(t->final, sizeof(t->final), "error: %s", p.error);
			if (p.taken != t->taken)
				transcript_fail("counted other bytes than it took");
			free(buf);
			return;
		}
		memmove(buf, buf + pos, have - pos);
		have -= pos;
		if (fed == n)
		{
			snprintf(t->final, sizeof(t->final), "more");
			free(buf);
			return;
		}
	}
}

/* Are two transcripts the same in everything but the first body bytes? */
static inline bool
transcript_same(const Transcript *a, const Transcript *b)
{
	return strcmp(a->final, b->final) == 0 && a->status == b->status &&
		a->heads == b->heads && a->lines == b->lines &&
		a->line_bytes == b->line_bytes && a->body_len == b->body_len &&
		a->body_hash == b->body_hash && a->rest == b->rest;
}

static inline size_t
piece_all(void *arg)
{
	(void) arg;
	return 0;
}

static inline size_t
piece_one(void *arg)
{
	(void) arg;
	return 1;
}

#endif							/* OUTBOX_H1_TRANSCRIPT_H */
