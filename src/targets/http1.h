/*-------------------------------------------------------------------------
 *
 * http1.h
 *	  HTTP/1.1 over plain connections that libcurl opened (http1.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP1_H
#define OUTBOX_HTTP1_H

#include "datatype/timestamp.h"

#include "targets/response.h"

/*
 * What http1.c asks of the libcurl side (http.c), which starts it:
 * connect a request's socket (then handed back through http1_connected),
 * take a request back to send it through libcurl, and watch or forget one
 * of http1.c's sockets in the epoll set (events: EPOLLIN, EPOLLOUT).
 */
typedef struct Http1Host
{
	void		(*connect) (HttpRequest *req, const char *connect_url);
	void		(*send) (HttpRequest *req);
	bool		(*watch) (pgsocket fd, uint32 events);
	void		(*forget) (pgsocket fd);
} Http1Host;

extern void http1_start(const Http1Host *host);
extern bool http1_submit(HttpRequest *req);
extern void http1_connected(HttpRequest *req, pgsocket fd, uint32 generation);
extern void http1_event(pgsocket fd, uint32 events);
extern HttpRequest *http1_next_done(void);
extern bool http1_any_done(void);
extern TimestampTz http1_next_due(void);
extern void http1_expire(TimestampTz now);
extern void http1_retire(uint32 generation, int max_idle);
extern void http1_abandon_all(void);

#endif							/* OUTBOX_HTTP1_H */
