/*-------------------------------------------------------------------------
 *
 * pump.h
 *	  The sending side of the relay (pump.c): slots, the ready list,
 *	  submitting deliveries to their targets and collecting their results.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_PUMP_H
#define OUTBOX_PUMP_H

#include "lib/ilist.h"
#include "nodes/pg_list.h"

#include "relay/delivery.h"

/* Answers this slow, most of a stream page's, make the next page larger. */
#define SLOW_ANSWER_MS		50

/*
 * An endpoint whose target takes no slot (a broker) reads pages this many
 * times outbox.batch_size on its own: with one page in flight per
 * endpoint its rate is about a page per acknowledgement, and its messages
 * cost the relay no socket (bench case 14).
 */
#define BROKER_PAGE_FACTOR	4

extern int	pump_slots(void);
extern int	pump_endpoint_cap(const RelayEndpoint *ep);
extern List *pump_run(dlist_head *active);
extern List *pump_collect(void);
extern int	pump_in_flight(void);
extern long pump_ms_to_age(void);
extern bool pump_any_ready(void);
extern TimestampTz pump_last_answer_at(void);

#endif							/* OUTBOX_PUMP_H */
