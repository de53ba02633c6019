/*-------------------------------------------------------------------------
 *
 * http.h
 *	  HTTP through libcurl: endpoint URL checks and the multi-handle
 *	  wrapper the relay submits requests to (the request itself:
 *	  response.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#include "compat.h"
#include "targets/response.h"

#define OUTBOX_MAX_URL			2048

extern char *http_check_url(const char *url, const char *what);
pg_noreturn extern void http_bad_url(const char *url, const char *what, const char *detail);
extern int	http_socket_room(int wanted);
extern void http_start(int max_total);
extern void http_configure(int max_total);
extern void http_submit(HttpRequest *req);
extern HttpRequest *http_next_done(void);
extern void http_abandon_all(void);

#endif							/* OUTBOX_HTTP_H */
