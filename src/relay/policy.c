/*-------------------------------------------------------------------------
 *
 * policy.c
 *	  Status classification, the retry schedule and Retry-After: functions
 *	  of their arguments alone, with no I/O and no state (the relay passes
 *	  in the clock and the jitter).  The one library call is libcurl's HTTP
 *	  date parser (curl_getdate, for Retry-After), itself a function of the
 *	  text it is given: this file links with libcurl but uses none of its
 *	  state.
 *
 * A target says whether an attempt delivered, is to be tried again or is a
 * dead letter (target.h); the webhook target reads a receiver's answer by
 * the Standard Webhooks rules (webhook.c).  The relay adds one rule of its
 * own: a 410, or "webhook-delivery: disable", disables the endpoint.
 *
 * An event's deadline is the earlier of its expires_at and its emit time
 * plus its endpoint's max_age; from then on it is not sent, nor retried,
 * but recorded as expired (DESIGN.md, "Expiry and priority").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <math.h>
#include <curl/curl.h>

#include "relay/policy.h"

/*
 * What the relay does with a target's outcome.  The target's word stands,
 * with one addition: a receiver that answered 410, or "webhook-delivery:
 * disable" without a 2xx, has its endpoint disabled (and the event
 * retried later).  The webhook target reads an answer as the rules above
 * say (webhook.c, answer_outcome).
 */
Outcome
policy_classify(TargetOutcome outcome, long status, const char *delivery_header)
{
	if (outcome == TARGET_DELIVERED)
		return OUTCOME_DELIVERED;
	if (outcome == TARGET_DEAD_LETTER)
		return OUTCOME_DEAD;
	if (delivery_header != NULL && pg_strcasecmp(delivery_header, "disable") == 0)
		return OUTCOME_DISABLE;
	if (status == 410)
		return OUTCOME_DISABLE;
	return OUTCOME_RETRY;
}

/*
 * Parse a schedule such as "5s,5min,30min,2h" into delays in seconds.
 * Each entry is a decimal number (digits, optionally a fraction) and a
 * unit: ms, s, min, h or d; a bare number is seconds.  Spaces around
 * numbers, units and commas are ignored.  Returns false for an empty
 * schedule or entry, anything else that is not such a number and unit
 * (signs, exponents, hex, "inf", "nan"), more than OUTBOX_MAX_SCHEDULE
 * entries, or a delay over 30 days.
 */
bool
policy_parse_schedule(const char *text, RetrySchedule *schedule)
{
	const char *p = text;

	schedule->n = 0;
	for (;;)
	{
		const char *digits;
		char	   *end;
		double		v;
		double		mult = 1;

		while (isspace((unsigned char) *p))
			p++;
		/* The number: strtod() reads it, once we know it is plain decimal. */
		digits = p;
		while (isdigit((unsigned char) *p))
			p++;
		if (*p == '.')
		{
			p++;
			while (isdigit((unsigned char) *p))
				p++;
		}
		if (p == digits || (p == digits + 1 && *digits == '.'))
			return false;
		v = strtod(digits, &end);
		if (end != p)
			return false;
		while (isspace((unsigned char) *p))
			p++;
		if (strncmp(p, "ms", 2) == 0)
			mult = 0.001, p += 2;
		else if (strncmp(p, "min", 3) == 0)
			mult = 60, p += 3;
		else if (*p == 's')
			mult = 1, p += 1;
		else if (*p == 'h')
			mult = 3600, p += 1;
		else if (*p == 'd')
			mult = 86400, p += 1;
		while (isspace((unsigned char) *p))
			p++;
		if (schedule->n >= OUTBOX_MAX_SCHEDULE || v * mult > 30 * 86400)
			return false;
		schedule->delay_secs[schedule->n++] = v * mult;
		if (*p == '\0')
			return true;
		if (*p != ',')
			return false;
		p++;					/* an entry must follow */
	}
}

/*
 * Seconds to wait before attempt number attempt + 1, after attempt number
 * attempt (1-based) failed.  jitter in [-1, 1] scales the delay by up to
 * +-20%.  A Retry-After (seconds, 0 when absent) on 429 or 503 is honoured
 * when it asks for longer.
 */
double
policy_backoff(const RetrySchedule *schedule, int attempt,
			   long status, double retry_after, double jitter)
{
	int			i = Min(Max(attempt, 1), schedule->n) - 1;
	double		delay = schedule->delay_secs[i] * (1.0 + 0.2 * jitter);

	if ((status == 429 || status == 503) && retry_after > delay)
		delay = Min(retry_after, 86400.0);
	return Max(delay, 0.0);
}

/*
 * Seconds a Retry-After value asks for: delta-seconds or an HTTP date
 * (relative to now, Unix seconds).  0 when absent or unreadable.
 */
double
policy_retry_after(const char *value, double now)
{
	char	   *end;
	long		secs;
	time_t		when;

	if (value == NULL)
		return 0;
	while (isspace((unsigned char) *value))
		value++;
	secs = strtol(value, &end, 10);
	if (end != value)
		return secs > 0 ? (double) secs : 0;
	when = curl_getdate(value, NULL);
	if (when < 0)
		return 0;
	return Max((double) when - now, 0.0);
}

/*
 * Does the answer ask for the endpoint to be disabled?  True for the
 * outcome OUTCOME_DISABLE, and also for a 2xx that carries
 * "webhook-delivery: disable": that event is delivered, later ones wait.
 */
bool
policy_wants_disable(Outcome o, const char *delivery_header)
{
	return o == OUTCOME_DISABLE ||
		(delivery_header != NULL && pg_strcasecmp(delivery_header, "disable") == 0);
}

/* What is recorded for a response's outcome (disabling retries it). */
OutcomeKind
policy_outcome_kind(Outcome o)
{
	switch (o)
	{
		case OUTCOME_DELIVERED:
			return OUTCOME_KIND_DELIVERED;
		case OUTCOME_RETRY:
		case OUTCOME_DISABLE:
			return OUTCOME_KIND_RETRY;
		case OUTCOME_DEAD:
			return OUTCOME_KIND_DEAD;
	}
	return OUTCOME_KIND_RETRY;
}

/*
 * When a delivery expires: the earlier of expires_at (0: none) and
 * emitted_at plus max_age_ms (0: none); 0 when neither applies.
 */
TimestampTz
policy_deadline(TimestampTz expires_at, TimestampTz emitted_at, int64 max_age_ms)
{
	TimestampTz deadline = expires_at;

	if (max_age_ms > 0)
	{
		TimestampTz aged = emitted_at + max_age_ms * INT64CONST(1000);

		if (deadline == 0 || aged < deadline)
			deadline = aged;
	}
	return deadline;
}

/* Is a delivery with this deadline (0: none) expired at now? */
bool
policy_expired(TimestampTz deadline, TimestampTz now)
{
	return deadline != 0 && now >= deadline;
}
