/*-------------------------------------------------------------------------
 *
 * sender.h
 *	  Sender processes: a relay's HTTP requests spread over more than one
 *	  core (outbox.senders).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SENDER_H
#define OUTBOX_SENDER_H

#include "targets/http.h"

/* The relay's side. */
extern void senders_start(const char *dbname);

/* The sender process. */
extern PGDLLEXPORT void outbox_sender_main(Datum arg);

#endif							/* OUTBOX_SENDER_H */
