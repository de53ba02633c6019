/*-------------------------------------------------------------------------
 *
 * outcome.h
 *	  What one attempt of a target came to: delivered, to be tried again or
 *	  a dead letter, why not, and what the receiver answered.  A target
 *	  fills it (target.h); the relay decides from it (relay/policy.c) and
 *	  keeps it in the attempt log.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_OUTCOME_H
#define OUTBOX_OUTCOME_H

#include <curl/curl.h>

#define OUTBOX_TARGET_ERROR_SIZE	CURL_ERROR_SIZE
#define OUTBOX_RESPONSE_KEEP	512 /* response bytes kept for the log */

/* What one attempt came to, as the target says. */
typedef enum TargetOutcome
{
	TARGET_RETRY,				/* no definite answer, or one that asks to
								 * be tried again (a zeroed result) */
	TARGET_DELIVERED,			/* taken: acknowledged, or answered 2xx */
	TARGET_DEAD_LETTER			/* refused for good */
} TargetOutcome;

/*
 * The result of one attempt: its outcome with the reason why not (error;
 * empty when the detail says it), and as detail what the receiver
 * answered: the response kept for the attempt log (a broker's
 * acknowledgement says where the message went) and, from a webhook's
 * receiver, its HTTP status (0: no answer; brokers never have one),
 * webhook-delivery and Retry-After.
 */
typedef struct TargetResult
{
	TargetOutcome outcome;
	char		error[OUTBOX_TARGET_ERROR_SIZE];	/* why not, for the log */
	double		duration_ms;
	size_t		bytes;			/* body bytes sent */
	/* detail */
	char		response[OUTBOX_RESPONSE_KEEP + 1];
	size_t		response_len;
	bool		response_cut;	/* the body was longer than what is kept */
	long		status;			/* HTTP status, 0: none */
	char		delivery[32];	/* webhook-delivery response header */
	char		retry_after[64];	/* Retry-After response header */
} TargetResult;

#endif							/* OUTBOX_OUTCOME_H */
