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

#include "targets/http.h"

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
