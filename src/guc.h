/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  outbox's configuration parameters.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_GUC_H
#define OUTBOX_GUC_H

#include "targets/address.h"
#include "relay/policy.h"

extern int	outbox_max_payload_size;
extern char *outbox_database;
extern int	outbox_max_relays;
extern int	outbox_senders;
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
extern char *outbox_cloudevents_source;

extern void outbox_guc_init(void);

#endif							/* OUTBOX_GUC_H */
