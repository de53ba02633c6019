/*-------------------------------------------------------------------------
 *
 * emit.h
 *	  outbox.emit() and the commit-time wake of the relay.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_EMIT_H
#define OUTBOX_EMIT_H

#endif							/* OUTBOX_EMIT_H */
