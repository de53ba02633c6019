/*-------------------------------------------------------------------------
 *
 * wait.h
 *	  The one wait of a process that sends: on its latch, on the sockets
 *	  and pipes targets register, and on their clocks (wait.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_WAIT_H
#define OUTBOX_WAIT_H

#include "datatype/timestamp.h"
#include "storage/latch.h"

/*
 * A watched socket is ready: events holds WL_SOCKET_READABLE and
 * WL_SOCKET_WRITEABLE as they are.  Called in wait_sleep(), which the
 * callback may not re-enter; it may watch and forget sockets.
 */
typedef void (*WaitReady) (pgsocket fd, uint32 events, void *arg);

/*
 * A module's clocks: due() says when it must act whether or not a socket
 * wakes it (0: no need; a time past: at once), after() is called after
 * every wait to act on what is due.
 */
typedef struct WaitTimer
{
	TimestampTz (*due) (void);
	void		(*after) (void);
} WaitTimer;

extern bool wait_watch(pgsocket fd, uint32 events, WaitReady ready, void *arg);
extern void wait_forget(pgsocket fd);
extern void wait_add_timer(const WaitTimer *timer);
extern bool wait_sleep(long timeout_ms);
extern int64 wait_blocked_us(void);

#endif							/* OUTBOX_WAIT_H */
