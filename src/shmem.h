/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  outbox's shared state: where the relay sleeps, so that committing
 *	  transactions can wake it; the endpoints' version; the relay's counters.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

/* What the relay counts since it started (outbox.relay_stats). */
typedef enum RelayCounter
{
	RELAY_BATCHES,				/* batches recorded in full */
	RELAY_DELIVERIES,			/* requests answered with a 2xx */
	RELAY_FAILURES,				/* requests that failed */
	RELAY_RETRIES,				/* requests that were a second or later attempt */
	RELAY_BYTES,				/* request bodies sent, in bytes */
	RELAY_HTTP_US,				/* microseconds waiting with requests in flight */
	RELAY_SQL_US,				/* microseconds in reading and recording */
	RELAY_NCOUNTERS
} RelayCounter;

extern void outbox_shmem_init(void);
extern void outbox_relay_started(Oid dboid);
extern void outbox_count(RelayCounter counter, uint64 n);
extern void outbox_shmem_require(void);
extern void outbox_shmem_set_relay(int pgprocno);
extern void outbox_wake_relay(void);
extern void outbox_endpoints_changed(void);
extern uint64 outbox_endpoints_version(void);

#endif							/* OUTBOX_SHMEM_H */
