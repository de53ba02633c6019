/*-------------------------------------------------------------------------
 *
 * wait.c
 *	  The one wait of the relay and of each of its senders: a WaitEventSet
 *	  on the process's latch, postmaster death, and what the targets
 *	  register: sockets with a callback for when they are ready (libcurl's
 *	  epoll set, http.c), pipes their own threads write to (the broker
 *	  targets, through target_wake_pipe; read in their poll()), and clocks
 *	  (libcurl's timers, http1.c's deadlines).
 *
 * The set is made at the first wait and made again only after the sockets
 * watched changed: on Linux that is at the start (libcurl's sockets live
 * in an epoll set of http.c's, one socket here); elsewhere libcurl's
 * sockets come and go here one by one.  wait_watch() is called from
 * libcurl's callbacks, so nothing here that may be called from a callback
 * raises an error: the list grows with realloc, and a failure is
 * returned.  Runs with no transaction open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "targets/wait.h"

/* A socket watched: for what, and whom to tell (NULL: its owner reads it). */
typedef struct Watched
{
	pgsocket	fd;
	uint32		events;			/* WL_SOCKET_READABLE, WL_SOCKET_WRITEABLE */
	WaitReady	ready;
	void	   *arg;
} Watched;

static Watched *watched = NULL;
static int	n_watched = 0;
static int	max_watched = 0;

#define WAIT_TIMERS_MAX		4
static const WaitTimer *timers[WAIT_TIMERS_MAX];
static int	n_timers = 0;

static WaitEventSet *wait_set = NULL;
static bool set_changed = true;

/* Time this process spent asleep in wait_sleep(), in µs (pump.c). */
static int64 blocked_us = 0;

/* The entry of fd, or -1. */
static int
watched_index(pgsocket fd)
{
	for (int i = 0; i < n_watched; i++)
		if (watched[i].fd == fd)
			return i;
	return -1;
}

/*
 * Watch fd for events (WL_SOCKET_READABLE, WL_SOCKET_WRITEABLE), or change
 * what it is watched for; ready is called with arg when it is ready, or,
 * when NULL, the wait only wakes and the socket's owner reads it.  False
 * when out of memory (nothing changed); raises no error.
 */
bool
wait_watch(pgsocket fd, uint32 events, WaitReady ready, void *arg)
{
	int			i = watched_index(fd);

	if (i < 0)
	{
		if (n_watched == max_watched)
		{
			int			grow = Max(16, max_watched * 2);
			Watched    *more = realloc(watched, sizeof(Watched) * grow);

			if (more == NULL)
				return false;
			watched = more;
			max_watched = grow;
		}
		i = n_watched++;
		watched[i].fd = fd;
	}
	else if (watched[i].events == events && watched[i].ready == ready &&
			 watched[i].arg == arg)
		return true;
	watched[i].events = events;
	watched[i].ready = ready;
	watched[i].arg = arg;
	set_changed = true;
	return true;
}

/* Stop watching fd (before it is closed); nothing if it was not watched. */
void
wait_forget(pgsocket fd)
{
	int			i = watched_index(fd);

	if (i < 0)
		return;
	watched[i] = watched[--n_watched];
	set_changed = true;
}

/* Have the wait keep a module's clocks (at its start, once). */
void
wait_add_timer(const WaitTimer *timer)
{
	if (n_timers >= WAIT_TIMERS_MAX)
		elog(ERROR, "too many clocks for the relay's wait");
	timers[n_timers++] = timer;
}

static void
build_wait_set(void)
{
	if (wait_set != NULL && !set_changed)
		return;
	if (wait_set != NULL)
		FreeWaitEventSet(wait_set);
	wait_set = outbox_create_wait_event_set(2 + n_watched);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < n_watched; i++)
		AddWaitEventToSet(wait_set, watched[i].events, watched[i].fd, NULL, NULL);
	set_changed = false;
}

/*
 * Sleep until the latch is set, a watched socket is ready, a clock is due,
 * or timeout_ms passed; then tell each ready socket's callback, and let
 * every clock act.  Returns true when the latch was set (the caller resets
 * it).
 */
bool
wait_sleep(long timeout_ms)
{
	WaitEvent	events[16];
	int			n;
	bool		latch = false;
	long		wait_ms = timeout_ms;
	TimestampTz first_due = 0;
	TimestampTz blocked_from;

	for (int i = 0; i < n_timers; i++)
	{
		TimestampTz due = timers[i]->due();

		if (due != 0 && (first_due == 0 || due < first_due))
			first_due = due;
	}
	if (first_due != 0)
		wait_ms = Min(wait_ms, Max(0, TimestampDifferenceMilliseconds(GetCurrentTimestamp(), first_due)));
	build_wait_set();

	blocked_from = GetCurrentTimestamp();
	n = WaitEventSetWait(wait_set, wait_ms, events, lengthof(events), PG_WAIT_EXTENSION);
	blocked_us += GetCurrentTimestamp() - blocked_from;
	for (int i = 0; i < n; i++)
	{
		int			w;

		if (events[i].events & WL_LATCH_SET)
		{
			latch = true;
			continue;
		}
		/* (by descriptor: a callback before may have changed the list) */
		w = watched_index(events[i].fd);
		if (w < 0 || watched[w].ready == NULL)
			continue;
		watched[w].ready(events[i].fd,
						 events[i].events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE),
						 watched[w].arg);
	}
	for (int i = 0; i < n_timers; i++)
		timers[i]->after();
	return latch;
}

/* Time this process spent asleep in wait_sleep(), in µs. */
int64
wait_blocked_us(void)
{
	return blocked_us;
}
