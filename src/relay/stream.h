/*-------------------------------------------------------------------------
 *
 * stream.h
 *	  The shape of the stream: its followers, the size of its pages and an
 *	  endpoint's share of one, and the laggards of the page in flight.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STREAM_H
#define OUTBOX_STREAM_H

#include "lib/ilist.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "relay/delivery.h"

/*
 * Once at most a quarter of a page's parts are left, a part is a laggard
 * sooner: after twice as long as the others took, this at least: low
 * enough that parts to endpoints that never answer do not hold the others
 * back for long (bench case 12).  An endpoint that answers, but later than
 * this, is detached before its first answer; its answers' time then keeps
 * it while they stay about as long (it is the last one's, and starts at 0
 * in each relay).  Every follower waits for each page held back.  The
 * relay looks again when a wait runs out (stream_ms_to_look).
 */
#define LAGGARD_MIN_MS		100

extern int	stream_followers(void);
extern void stream_forget_followers(void);
extern void stream_count_follower(RelayEndpoint *ep, int sign);
extern int	stream_page_share(const RelayEndpoint *ep);
extern int	stream_page_size(void);
extern void stream_page_routed(const StreamPage *p, bool cut);
extern int64 stream_cpu_us(void);
extern void stream_size_pages(const StreamPage *p);
extern List *stream_detach_laggards(StreamPage *p, dlist_head *active, TimestampTz now);
extern long stream_ms_to_look(TimestampTz now);
extern void stream_look_now(void);

#endif							/* OUTBOX_STREAM_H */
