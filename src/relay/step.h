/*-------------------------------------------------------------------------
 *
 * step.h
 *	  One step of the relay's loop in a short transaction of its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_RELAY_STEP_H
#define OUTBOX_RELAY_STEP_H

#include "relay/state.h"

/* How a step's transaction ended. */
typedef enum StepResult
{
	STEP_DONE,					/* committed */
	STEP_DECLINED,				/* committed, but the step found it could not
								 * do its work yet (an endpoint's row locked
								 * by another transaction) */
	STEP_ABSENT,				/* outbox is not installed (of this version) */
	STEP_FAILED					/* an error, reported; nothing took effect */
} StepResult;

typedef StepResult (*StepFunc) (RelayState *rs, void *arg);

extern StepResult relay_run_step(RelayState *rs, const char *activity, StepFunc step,
								 void *arg);
extern void relay_relation_changed(Datum arg, Oid relid);

#endif							/* OUTBOX_RELAY_STEP_H */
