/*-------------------------------------------------------------------------
 *
 * priority.h
 *	  The order in which a batch's deliveries are submitted (priority.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_PRIORITY_H
#define OUTBOX_PRIORITY_H

#include "relay/delivery.h"

extern void priority_order(Batch *b);

#endif							/* OUTBOX_PRIORITY_H */
