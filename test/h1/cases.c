/*-------------------------------------------------------------------------
 *
 * cases.c
 *	  The HTTP/1.1 response parser (src/targets/h1parse.c) case by case:
 *	  each response, fed whole and then a byte at a time, must read the
 *	  same and as expected.  Prints one "ok" or "not ok" line a case and
 *	  ends with "N passed, N failed"; exits 1 on any failure.
 *
 *	  cc -I src test/h1/cases.c src/targets/h1parse.c
 *
 *-------------------------------------------------------------------------
 */
#include "transcript.h"
#include "cases.h"

/* The case's transcript as "final|status|body|rest". */
static void
summary(const Transcript *t, char *dst, size_t size)
{
	snprintf(dst, size, "%s|%d|%.*s|%zu", t->final, t->status,
			 (int) (t->body_len < 64 ? t->body_len : 64), t->body, t->rest);
}

int
main(void)
{
	int			passed = 0;
	int			failed = 0;

	for (size_t i = 0; i < N_CASES; i++)
	{
		const Case *c = &cases[i];
		Transcript	whole;
		Transcript	bytes;
		char		got[512];
		size_t		len = c->len ? c->len : strlen(c->input);

		transcript_run(c->input, len, c->ends, 0, piece_all, NULL, &whole);
		transcript_run(c->input, len, c->ends, 0, piece_one, NULL, &bytes);
		summary(&whole, got, sizeof(got));
		if (!transcript_same(&whole, &bytes))
		{
			char		other[512];

			summary(&bytes, other, sizeof(other));
			printf("not ok %zu - %s: whole and byte by byte differ\n#   whole:   %s\n#   bytes:   %s\n",
				   i + 1, c->name, got, other);
			failed++;
		}
		else if (strcmp(got, c->expect) != 0)
		{
			printf("not ok %zu - %s\n#   got:     %s\n#   expected: %s\n", i + 1, c->name, got, c->expect);
			failed++;
		}
		else
		{
			printf("ok %zu - %s\n", i + 1, c->name);
			passed++;
		}
	}
	printf("h1 cases: %d passed, %d failed\n", passed, failed);
	return failed > 0;
}
