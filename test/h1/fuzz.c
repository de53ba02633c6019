/*-------------------------------------------------------------------------
 *
 * fuzz.c
 *	  libFuzzer target for the HTTP/1.1 response parser (h1parse.c).
 *
 * The first byte of an input picks the mode (a whole response or a body
 * alone, chunked or not; whether the connection ends after the input) and
 * seeds the cuts; the rest is the byte stream.  Each input is read three
 * ways, whole, a byte at a time and in pieces cut at random, and the
 * parser must say the same of it every time (transcript.h), besides
 * keeping its promises on each call (never taking more than it was given,
 * never pointing outside it, always moving on, never asking for more
 * after the end).  The sanitizers catch what it reads or writes out of
 * bounds.  test/h1/run.sh builds and runs it on test/h1/corpus.
 *
 *-------------------------------------------------------------------------
 */
#include "transcript.h"

static uint32_t cut_state;

/* Pieces of 1 to 16 bytes, from a small generator seeded per input. */
static size_t
piece_random(void *arg)
{
	(void) arg;
	cut_state = cut_state * 1103515245u + 12345u;
	return 1 + ((cut_state >> 16) & 15);
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Transcript	whole;
	Transcript	bytes;
	Transcript	cut;
	const char *in;
	size_t		n;
	bool		ends;
	int			body_only;

	if (size < 1)
		return 0;
	ends = (data[0] & 1) != 0;
	body_only = (data[0] >> 1) % 4 == 3 ? 1 : (data[0] >> 1) % 4 == 2 ? 2 : 0;
	in = (const char *) data + 1;
	n = size - 1;

	transcript_run(in, n, ends, body_only, piece_all, NULL, &whole);
	transcript_run(in, n, ends, body_only, piece_one, NULL, &bytes);
	cut_state = data[0] * 2654435761u;
	transcript_run(in, n, ends, body_only, piece_random, NULL, &cut);
	if (!transcript_same(&whole, &bytes) || !transcript_same(&whole, &cut))
	{
		fprintf(stderr, "whole: %s status %d body %zu rest %zu\n", whole.final, whole.status,
				whole.body_len, whole.rest);
		fprintf(stderr, "bytes: %s status %d body %zu rest %zu\n", bytes.final, bytes.status,
				bytes.body_len, bytes.rest);
		fprintf(stderr, "cut:   %s status %d body %zu rest %zu\n", cut.final, cut.status,
				cut.body_len, cut.rest);
		transcript_fail("the same bytes read differently when cut differently");
	}
	if (whole.body_len + whole.line_bytes > n || whole.taken > n)
		transcript_fail("more bytes out than in");
	return 0;
}
