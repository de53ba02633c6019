/*-------------------------------------------------------------------------
 *
 * webhook.h
 *	  The webhook target's one setting from outside: the processes that
 *	  send its requests besides the relay (the relay's senders, sender.c),
 *	  which register themselves here.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_WEBHOOK_H
#define OUTBOX_WEBHOOK_H

#include "targets/http.h"

/*
 * Where the webhook target may hand a request instead of sending it
 * itself.  submit() takes it, as http_submit() would, or returns false
 * (the target sends it); next_done() returns one that finished, or NULL.
 */
typedef struct WebhookSenders
{
	bool		(*submit) (HttpRequest *req, int relay_in_flight);
	HttpRequest *(*next_done) (void);
} WebhookSenders;

extern void webhook_use_senders(const WebhookSenders *senders);

#endif							/* OUTBOX_WEBHOOK_H */
