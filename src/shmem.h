/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  outbox's shared state: where the relay sleeps, so that committing
 *	  transactions can wake it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SHMEM_H
#define OUTBOX_SHMEM_H

extern void outbox_shmem_init(void);
extern bool outbox_shmem_available(void);
extern void outbox_shmem_require(void);
extern void outbox_shmem_set_relay(int pgprocno);
extern void outbox_wake_relay(void);
extern uint64 outbox_wakeups(void);
extern void outbox_endpoints_changed(void);
extern uint64 outbox_endpoints_version(void);

#endif							/* OUTBOX_SHMEM_H */
