/*-------------------------------------------------------------------------
 *
 * limit.h
 *	  Per-endpoint rate limits and Retry-After pauses: each endpoint's token
 *	  bucket, and the relay's endpoints held until they may send again (see
 *	  limit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_LIMIT_H
#define OUTBOX_LIMIT_H

#include "relay/delivery.h"

/* The longest pause a Retry-After is honoured for, in seconds. */
#define LIMIT_MAX_PAUSE_SECS	86400.0

extern double limit_burst(double rate);
extern void limit_set_rate(RelayEndpoint *ep, double rate, TimestampTz now);
extern bool limit_take(RelayEndpoint *ep, TimestampTz now);
extern void limit_pause(RelayEndpoint *ep, double seconds, TimestampTz now);
extern void limit_unpause(RelayEndpoint *ep, TimestampTz now);
extern bool limit_may_follow(const RelayEndpoint *ep, TimestampTz now);
extern int	limit_page_size(const RelayEndpoint *ep, int size);
extern void limit_hold(RelayEndpoint *ep, TimestampTz now);
extern RelayEndpoint *limit_next_released(TimestampTz now);
extern long limit_ms_to_release(TimestampTz now);

#endif							/* OUTBOX_LIMIT_H */
