/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launcher, which runs a relay in every database with outbox, and
 *	  the hook that stops a relay before DROP DATABASE and its kin.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_LAUNCHER_H
#define OUTBOX_LAUNCHER_H

extern void outbox_relay_register(void);
extern PGDLLEXPORT void outbox_launcher_main(Datum arg);
extern void outbox_launch_at_commit(void);

#endif							/* OUTBOX_LAUNCHER_H */
