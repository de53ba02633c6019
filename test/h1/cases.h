/*-------------------------------------------------------------------------
 *
 * cases.h
 *	  The HTTP/1.1 response cases: each a response, whether the connection
 *	  ends after it, and what the parser must read from it.  cases.c checks
 *	  the parser against them; curl_diff.c feeds them to libcurl as well.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_H1_CASES_H
#define OUTBOX_H1_CASES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct Case
{
	const char *name;
	const char *input;
	bool		ends;			/* the connection ends after the input */
	const char *expect;			/* "final|status|body|rest" */
	size_t		len;			/* of the input, when it holds a NUL */
} Case;

#define OK200 "HTTP/1.1 200 OK\r\n"
#define CHUNKED_OK "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"

static const Case cases[] = {
	/* framing that leaves no doubt */
	{"content-length", OK200 "Content-Length: 2\r\n\r\nok", false, "keep|200|ok|0"},
	{"chunked, an extension and a trailer", OK200 "Transfer-Encoding: chunked\r\n\r\n" CHUNKED_OK, false,
	"keep|200|hello world|0"},
	{"chunk extensions with white space", OK200 "Transfer-Encoding: chunked\r\n\r\n2 ;a=b ; c\r\nok\r\n0 \r\n\r\n", false,
	"keep|200|ok|0"},
	{"no reason phrase", "HTTP/1.1 204\r\n\r\n", false, "keep|204||0"},
	{"LF alone ends lines", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", false, "keep|200|ok|0"},
	{"204: no body whatever the length", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false,
	"keep|204||0"},
	{"304: no body", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", false, "keep|304||0"},
	{"1xx responses skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: x\r\n\r\n"
	OK200 "Content-Length: 0\r\n\r\n", false, "keep|200||0"},
	{"a body to the connection's end", OK200 "\r\nto the end", true, "close|200|to the end|0"},
	{"a body to the end, not ended yet", OK200 "\r\nto the", false, "more|200|to the|0"},
	{"a list of equal lengths", OK200 "Content-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok", false,
	"keep|200|ok|0"},

	/* what ends a kept connection */
	{"bytes after the response", OK200 "Content-Length: 2\r\n\r\nok" OK200 "Content-Length: 0\r\n\r\n", false,
	"keep|200|ok|38"},
	{"Connection: close", OK200 "Connection: close\r\nContent-Length: 2\r\n\r\nok", false, "close|200|ok|0"},
	{"close among Connection's options", OK200 "Connection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", false,
	"close|200||0"},
	{"HTTP/1.0 closes", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, "close|200|ok|0"},
	{"HTTP/1.0 with keep-alive stays", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", false,
	"keep|200|ok|0"},
	{"HTTP/1.0: keep-alive does not undo close", "HTTP/1.0 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\n"
	"Content-Length: 0\r\n\r\n", false, "close|200||0"},
	{"HTTP/1.0: close after keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\n"
	"Content-Length: 0\r\n\r\n", false, "close|200||0"},
	{"HTTP/1.0 with Transfer-Encoding closes", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n"
	"Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, "close|200|ok|0"},
	{"chunks beside a length close", OK200 "Content-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
	"2\r\nok\r\n0\r\n\r\n", false, "close|200|ok|0"},
	{"Transfer-Encoding gzip beside a length: to the end", OK200 "Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok",
	false, "more|200|ok|0"},
	{"Transfer-Encoding gzip beside a length, ended", OK200 "Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nok",
	true, "close|200|ok|0"},
	{"chunked not final: to the end", OK200 "Transfer-Encoding: chunked, gzip\r\n\r\n2\r\nok\r\n0\r\n\r\n", true,
	"close|200|2\r\nok\r\n0\r\n\r\n|0"},
	{"chunked followed by a word: not chunked", OK200 "Transfer-Encoding: chunked x\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	true, "close|200|2\r\nok\r\n0\r\n\r\n|0"},
	{"chunked, then another line: not final", OK200 "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\nab",
	true, "close|200|ab|0"},
	{"chunked last among codings", OK200 "Transfer-Encoding: gzip;q=1, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false,
	"keep|200|ok|0"},
	{"a folded line closes", OK200 "X-A: b\r\n c\r\nContent-Length: 2\r\n\r\nok", false, "close|200|ok|0"},
	{"a folded close closes", OK200 "Connection: keep-alive\r\n close\r\nContent-Length: 2\r\n\r\nok", false,
	"close|200|ok|0"},

	/* refused */
	{"a folded Content-Length", OK200 "Content-Length: 5\r\n 7\r\n\r\nhello", false,
	"error: the response's head has a folded Content-Length or Transfer-Encoding line|200||0"},
	{"a status line among the headers", OK200 "Transfer-Encoding: chunked\r\nHTTP/1.1 200 OK\r\n\r\n0\r\n\r\n", false,
	"error: the response's head has a line that is not a header field|200||0"},
	{"a line without a colon", OK200 "Content-Length 2\r\n\r\nok", false,
	"error: the response's head has a line that is not a header field|200||0"},
	{"white space before the colon", OK200 "Content-Length : 2\r\n\r\nok", false,
	"error: the response's head has a header field name with a character not allowed in it|200||0"},
	{"a bare CR", OK200 "X-A: b\rc\r\n\r\n", false,
	"error: the response's head has a bare CR or a NUL in a line|200||0"},
	{"a NUL", OK200 "X-A: b\0c\r\n\r\n", false,
	"error: the response's head has a bare CR or a NUL in a line|200||0", sizeof(OK200 "X-A: b\0c\r\n\r\n") - 1},
	{"two lengths that differ", OK200 "Content-Length: 2\r\nContent-Length: 3\r\n\r\nok", false,
	"error: the response's Content-Length is not one number|200||0"},
	{"a signed length", OK200 "Content-Length: +2\r\n\r\nok", false,
	"error: the response's Content-Length is not one number|200||0"},
	{"an empty length", OK200 "Content-Length: \r\n\r\n", false,
	"error: the response's Content-Length is not one number|200||0"},
	{"an empty length after a length", OK200 "Content-Length: 2\r\nContent-Length:\r\n\r\nok", false,
	"error: the response's Content-Length is not one number|200||0"},
	{"a length of no element after a length", OK200 "Content-Length: 2\r\nContent-Length: ,\r\n\r\nok", false,
	"error: the response's Content-Length is not one number|200||0"},
	{"a trailer that is not a field", OK200 "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nno field\r\n\r\n",
	false, "error: the response has a trailer line that is not a header field|200|ok|0"},
	{"a folded trailer", OK200 "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-A: b\r\n c\r\n\r\n",
	false, "error: the response has a trailer line that is not a header field|200|ok|0"},
	{"a bare CR in a trailer", OK200 "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-A: b\rc\r\n\r\n",
	false, "error: the response has a CR without LF in its chunk framing|200|ok|0"},
	{"junk after a chunk size", OK200 "Transfer-Encoding: chunked\r\n\r\n0x10\r\n0123456789abcdef\r\n0\r\n\r\n",
	false, "error: the response has bytes after a chunk size that are not an extension|200||0"},
	{"a chunk size line without a size", OK200 "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", false,
	"error: the response has a chunk size line without a size|200||0"},
	{"chunk data longer than its size", OK200 "Transfer-Encoding: chunked\r\n\r\n2\r\nokay\r\n0\r\n\r\n", false,
	"error: the response has a chunk whose data is longer than its size|200|ok|0"},
	{"a chunk size too large", OK200 "Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n", false,
	"error: the response has a chunk size too large|200||0"},
	{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", false,
	"error: the receiver switched protocols (101), which a webhook does not ask for|101||0"},
	{"not HTTP/1.x", "HTTP/2 200\r\n\r\n", false,
	"error: the receiver's answer is not an HTTP/1.x response|0||0"},
	{"a status of two digits", "HTTP/1.1 20 OK\r\n\r\n", false,
	"error: the receiver's answer is not an HTTP/1.x response|0||0"},
	{"a status below 100", "HTTP/1.1 099 Odd\r\n\r\n", false,
	"error: the receiver's answer is not an HTTP/1.x response|0||0"},
	{"an empty line before the status", "\r\n" OK200 "\r\n", false,
	"error: the receiver's answer is not an HTTP/1.x response|0||0"},
	{"closed without answering", "", true, "error: the receiver closed the connection without answering|0||0"},
	{"closed in the headers", OK200 "Content-Le", true,
	"error: the receiver closed the connection in the response's headers|200||0"},
	{"closed in a length's body", OK200 "Content-Length: 5\r\n\r\nok", true,
	"error: the receiver closed the connection before the response ended|200|ok|0"},
	{"closed in the chunks", OK200 "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n", true,
	"error: the receiver closed the connection before the response ended|200|ok|0"},
};

#define N_CASES (sizeof(cases) / sizeof(cases[0]))

#endif							/* OUTBOX_H1_CASES_H */
