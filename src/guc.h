/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  outbox's configuration parameters, read by the rest of outbox.
 *	  outbox.cloudevents_source's variable is format.h's.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_GUC_H
#define OUTBOX_GUC_H

#include "targets/address.h"
#include "relay/policy.h"

/*
 * The most requests a relay keeps in flight (outbox.max_concurrency's upper
 * bound).  Each relay slot has a table of twice that many entries for its
 * endpoints' requests in flight and which are held by their rate limit
 * (outbox._in_flight()): an endpoint takes an entry only while it has one
 * in flight or is held, and held endpoints with none take at most half
 * (shmem.c), so the table cannot run out.
 */
#define OUTBOX_MAX_CONCURRENCY	10000

extern int	outbox_max_payload_size;
extern char *outbox_database;
extern int	outbox_max_relays;
extern int	outbox_senders;
extern int	outbox_max_counted_endpoints;
extern int	outbox_poll_interval;
extern int	outbox_max_concurrency;
extern int	outbox_endpoint_concurrency;
extern int	outbox_batch_size;
extern int	outbox_batch_bytes;
extern char *outbox_retry_schedule;
extern RetrySchedule outbox_schedule;
extern int	outbox_disable_after;
extern int	outbox_secret_overlap;
extern int	outbox_alert_after;
extern NetworkList outbox_allowed_networks;
extern char *outbox_ca_file;

extern void outbox_guc_init(void);

#endif							/* OUTBOX_GUC_H */
