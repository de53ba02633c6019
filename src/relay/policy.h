/*-------------------------------------------------------------------------
 *
 * policy.h
 *	  What an attempt's outcome means and when to try again: functions of
 *	  their arguments alone (see policy.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_POLICY_H
#define OUTBOX_POLICY_H

#include "datatype/timestamp.h"

#include "targets/outcome.h"

typedef enum Outcome
{
	OUTCOME_DELIVERED,
	OUTCOME_RETRY,				/* try again after a backoff */
	OUTCOME_DEAD,				/* give up on this event for this endpoint */
	OUTCOME_DISABLE				/* retry later, and disable the endpoint */
} Outcome;

/*
 * What is recorded of a delivery: outbox.outcome_kind on the SQL side,
 * label for label (store.c converts; an unknown label is an error there).
 */
typedef enum OutcomeKind
{
	OUTCOME_KIND_DELIVERED,		/* answered with a 2xx */
	OUTCOME_KIND_RETRY,			/* to be tried again at next_at */
	OUTCOME_KIND_DEAD,			/* given up: a dead letter */
	OUTCOME_KIND_DEFERRED,		/* not sent: deliver_at is later, or it waits
								 * behind its key */
	OUTCOME_KIND_ALREADY,		/* answered with a 2xx before a restart; not
								 * sent again */
	OUTCOME_KIND_EXPIRED		/* not sent: past its event's expires_at or
								 * its endpoint's max_age (policy_deadline) */
} OutcomeKind;

#define OUTBOX_MAX_SCHEDULE 32

typedef struct RetrySchedule
{
	int			n;
	double		delay_secs[OUTBOX_MAX_SCHEDULE];
} RetrySchedule;

extern Outcome policy_classify(TargetOutcome outcome, long status, const char *delivery_header);
extern bool policy_parse_schedule(const char *text, RetrySchedule *schedule);
extern double policy_backoff(const RetrySchedule *schedule, int attempt,
							 long status, double retry_after, double jitter);
extern double policy_retry_after(const char *value, double now);
extern bool policy_wants_disable(Outcome o, const char *delivery_header);
extern OutcomeKind policy_outcome_kind(Outcome o);
extern TimestampTz policy_deadline(TimestampTz expires_at, TimestampTz emitted_at, int64 max_age_ms);
extern bool policy_expired(TimestampTz deadline, TimestampTz now);

#endif							/* OUTBOX_POLICY_H */
