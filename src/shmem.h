/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  outbox's shared state: one slot per relay (its database, where it
 *	  sleeps, its endpoints' version and counters), the launcher's latch,
 *	  and the databases whose relay is held off by a database command.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

#include "datatype/timestamp.h"

/* What a relay counts since it started (outbox.relay_stats). */
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

/* Why a relay left its slot; the launcher decides what comes next. */
typedef enum RelayExit
{
	RELAY_EXIT_UNKNOWN,			/* died or stopped by a signal: start again */
	RELAY_EXIT_ABSENT,			/* no outbox (or an old version) in its
								 * database: wait until one is installed */
} RelayExit;

extern void outbox_shmem_init(void);
extern void outbox_shmem_require(void);
extern int	outbox_max_slots(void);

/* Launcher side */
extern void outbox_set_launcher(int pgprocno);
extern uint64 outbox_launch_requests(void);
extern void outbox_request_launch(void);
extern int	outbox_slot_for(Oid dboid);
extern Oid	outbox_slot_dboid(int slot);
extern int	outbox_slot_pid(int slot);
extern int	outbox_slot_claim(Oid dboid);
extern RelayExit outbox_slot_release(int slot, uint64 *requests_seen);
extern TimestampTz outbox_held_until(Oid dboid);
extern void outbox_hold_off(Oid dboid, int seconds);

/* Relay side */
extern void outbox_relay_attach(int slot, Oid dboid);
extern void outbox_relay_detach(RelayExit reason, uint64 requests_seen);
extern void outbox_count(RelayCounter counter, uint64 n);
extern uint64 outbox_endpoints_version(void);
extern int	outbox_show_in_flight(int shown_at, int endpoint_id, int n, bool held);

/* Backends */
extern void outbox_wake_relay(void);
extern void outbox_endpoints_changed(void);

/* A running relay, as outbox._relay_stats() shows it. */
typedef struct RelayStats
{
	int			pid;
	Oid			dboid;
	TimestampTz started_at;
	uint64		counters[RELAY_NCOUNTERS];
} RelayStats;

typedef void (*RelayStatsVisitor) (const RelayStats *stats, void *arg);
typedef void (*InFlightVisitor) (int endpoint_id, int in_flight, bool held,
								 void *arg);

/* Readers: the SQL functions of src/functions/relay_admin.c */
extern void outbox_visit_relays(RelayStatsVisitor visit, void *arg);
extern void outbox_visit_in_flight(InFlightVisitor visit, void *arg);

#endif							/* OUTBOX_SHMEM_H */
