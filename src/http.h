/*-------------------------------------------------------------------------
 *
 * http.h
 *	  HTTP through libcurl: endpoint URL checks (and, with the relay, the
 *	  multi-handle wrapper).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#define OUTBOX_MAX_URL	2048

#endif							/* OUTBOX_HTTP_H */
