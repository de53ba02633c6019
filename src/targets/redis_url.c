/*-------------------------------------------------------------------------
 *
 * redis_url.c
 *	  The Redis target's URLs (redis.h): bullmq://, bullmqs://, redis:// and
 *	  rediss://, read into a RedisUrl.  create_endpoint checks them through
 *	  the target's check_url (in any backend), and the target reads them at
 *	  each submit (in the relay); nothing here allocates.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <limits.h>

#include "targets/redis.h"
#include "targets/target.h"

#define URL_SHAPE "A Redis endpoint URL is bullmq://host[:port][/db]/QUEUE[?options] or redis://host[:port][/db]/STREAM[?maxlen=N] (bullmqs://, rediss:// over TLS)."

/* Is every one of len bytes of s among the letters, digits and extra? */
static bool
all_of(const char *s, size_t len, const char *extra)
{
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char) s[i]) && strchr(extra, s[i]) == NULL)
			return false;
	return true;
}

/* A decimal number of len bytes, in 0..max; false if it is not one. */
static bool
number_of(const char *s, size_t len, long max, long *out)
{
	long		n = 0;

	if (len == 0 || len > 10)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (!isdigit((unsigned char) s[i]))
			return false;
		n = n * 10 + (s[i] - '0');
	}
	if (n > max)
		return false;
	*out = n;
	return true;
}

/* remove_on_complete / remove_on_fail: true, false or a count. */
static bool
keep_of(const char *s, size_t len, RedisKeep *keep, long *n)
{
	if (len == 4 && strncmp(s, "true", 4) == 0)
		*keep = REDIS_KEEP_TRUE;
	else if (len == 5 && strncmp(s, "false", 5) == 0)
		*keep = REDIS_KEEP_FALSE;
	else if (number_of(s, len, INT_MAX, n))
		*keep = REDIS_KEEP_COUNT;
	else
		return false;
	return true;
}

/* A job id template: the placeholders and [A-Za-z0-9_.~-]; not ":". */
static bool
job_id_template_ok(const char *t, size_t len, const char **problem)
{
	static const char *const holders[] = {"{event_id}", "{key}", "{event_type}", "{endpoint}"};

	if (len == 0 || len > REDIS_JOB_ID_MAX)
	{
		*problem = "A job_id template is 1 to 255 bytes.";
		return false;
	}
	for (size_t i = 0; i < len;)
	{
		if (t[i] == '{')
		{
			bool		known = false;

			for (int h = 0; h < (int) lengthof(holders); h++)
			{
				size_t		hl = strlen(holders[h]);

				if (len - i >= hl && strncmp(t + i, holders[h], hl) == 0)
				{
					i += hl;
					known = true;
					break;
				}
			}
			if (!known)
			{
				*problem = "A job_id template may contain {event_id}, {key}, {event_type} and {endpoint}, and no other \"{\".";
				return false;
			}
			continue;
		}
		if (t[i] == ':' || (t[i] == '%' && len - i >= 3 && t[i + 1] == '3' &&
							(t[i + 2] == 'A' || t[i + 2] == 'a')))
		{
			*problem = "A job id may not contain \":\": BullMQ refuses such ids.";
			return false;
		}
		if (!all_of(t + i, 1, "_.~-"))
		{
			*problem = "A job_id template has letters, digits, \"_\", \".\", \"~\", \"-\" and the placeholders {event_id}, {key}, {event_type} and {endpoint}.";
			return false;
		}
		i++;
	}
	return true;
}

/* One option of a bullmq:// URL; false, with why, if it is not one. */
static bool
bullmq_option(const char *o, size_t len, RedisUrl *out, uint32 *seen, const char **problem)
{
	const char *eq = memchr(o, '=', len);
	size_t		nl = eq != NULL ? (size_t) (eq - o) : len;
	const char *v = eq != NULL ? eq + 1 : o + len;
	size_t		vl = eq != NULL ? len - nl - 1 : 0;
	static const char *const names[] = {"job_id", "attempts", "backoff", "remove_on_complete",
	"remove_on_fail", "prefix", "layout", "priority"};
	int			which = -1;

	for (int i = 0; i < (int) lengthof(names); i++)
		if (nl == strlen(names[i]) && strncmp(o, names[i], nl) == 0)
			which = i;
	if (which < 0 || eq == NULL || (*seen & (1 << which)))
	{
		*problem = "The options of a bullmq:// URL are job_id, attempts, backoff, remove_on_complete, remove_on_fail, prefix, layout and priority, each once, separated by \"&\".";
		return false;
	}
	*seen |= 1 << which;
	switch (which)
	{
		case 0:
			if (!job_id_template_ok(v, vl, problem))
				return false;
			memcpy(out->job_id, v, vl);
			out->job_id[vl] = '\0';
			return true;
		case 1:
			if (!number_of(v, vl, 1000000, &out->attempts) || out->attempts < 1)
			{
				*problem = "attempts is 1 to 1000000.";
				return false;
			}
			return true;
		case 2:
			{
				const char *colon = memchr(v, ':', vl);
				size_t		tl = colon != NULL ? (size_t) (colon - v) : 0;

				if (colon == NULL ||
					!((tl == 5 && strncmp(v, "fixed", 5) == 0) ||
					  (tl == 11 && strncmp(v, "exponential", 11) == 0)) ||
					!number_of(colon + 1, vl - tl - 1, INT_MAX, &out->backoff_ms))
				{
					*problem = "backoff is exponential:MS or fixed:MS (milliseconds).";
					return false;
				}
				memcpy(out->backoff_type, v, tl);
				out->backoff_type[tl] = '\0';
				return true;
			}
		case 3:
		case 4:
			if (!(which == 3 ? keep_of(v, vl, &out->remove_on_complete, &out->remove_on_complete_n) :
				  keep_of(v, vl, &out->remove_on_fail, &out->remove_on_fail_n)))
			{
				*problem = "remove_on_complete and remove_on_fail are true, false or a number of jobs to keep.";
				return false;
			}
			return true;
		case 5:
			if (vl == 0 || vl > REDIS_NAME_MAX || !all_of(v, vl, "_.~-:{}"))
			{
				*problem = "A prefix has letters, digits, \"_\", \".\", \"~\", \"-\", \":\", \"{\" and \"}\", 1 to 255 of them.";
				return false;
			}
			memcpy(out->prefix, v, vl);
			out->prefix[vl] = '\0';
			return true;
		case 6:
			if (!((vl == 4 && strncmp(v, "auto", 4) == 0) ||
				  (vl == 1 && (v[0] == '4' || v[0] == '5' || v[0] == '6'))))
			{
				*problem = "layout is auto (from the queue's meta.version), 6, 5 or 4: the BullMQ major whose Workers read the queue.";
				return false;
			}
			memcpy(out->layout, v, vl);
			out->layout[vl] = '\0';
			return true;
		default:
			if (vl == 2 && strncmp(v, "on", 2) == 0)
				out->priority = true;
			else if (vl == 3 && strncmp(v, "off", 3) == 0)
				out->priority = false;
			else
			{
				*problem = "priority is on (events' priorities become BullMQ's) or off (every job is added without one).";
				return false;
			}
			return true;
	}
}

/*
 * Parse a bullmq:// or redis:// URL into out.  False, with the reason (a
 * full sentence) in *problem, when it is not one the target can use.  No
 * allocation: the relay calls it too.
 */
bool
redis_parse_url(const char *url, RedisUrl *out, const char **problem)
{
	const char *p;
	const char *end;
	const char *query;
	const char *slash;
	size_t		len;
	uint32		seen = 0;

	memset(out, 0, sizeof(*out));
	out->port = REDIS_DEFAULT_PORT;
	strlcpy(out->prefix, "bull", sizeof(out->prefix));
	strlcpy(out->job_id, "{event_id}", sizeof(out->job_id));
	strlcpy(out->layout, "auto", sizeof(out->layout));
	out->priority = true;
	if (pg_strncasecmp(url, "bullmqs://", 10) == 0)
	{
		out->bullmq = out->tls = true;
		p = url + 10;
	}
	else if (pg_strncasecmp(url, "bullmq://", 9) == 0)
	{
		out->bullmq = true;
		p = url + 9;
	}
	else if (pg_strncasecmp(url, "rediss://", 9) == 0)
	{
		out->tls = true;
		p = url + 9;
	}
	else if (pg_strncasecmp(url, "redis://", 8) == 0)
		p = url + 8;
	else
	{
		*problem = URL_SHAPE;
		return false;
	}
	if (strpbrk(url, "@#") != NULL)
	{
		*problem = "A Redis endpoint URL has no credentials and no fragment; credentials are never taken from the URL.";
		return false;
	}

	/* host[:port] */
	end = p + strcspn(p, "/?");
	if (!target_split_server(p, end - p, out->host, sizeof(out->host), &out->port))
	{
		*problem = "The host is a name, an IPv4 address or [an IPv6 address], the port 1 to 65535.";
		return false;
	}
	p = end;

	/* /[DB/]NAME */
	if (*p != '/')
	{
		*problem = URL_SHAPE;
		return false;
	}
	p++;
	query = strchr(p, '?');
	len = query != NULL ? (size_t) (query - p) : strlen(p);
	slash = memchr(p, '/', len);
	if (slash != NULL)
	{
		long		db;

		if (!number_of(p, slash - p, 65535, &db))
		{
			*problem = "The database is a number, as in bullmq://host:6379/2/QUEUE.";
			return false;
		}
		out->db = (int) db;
		len -= slash + 1 - p;
		p = slash + 1;
	}
	if (len == 0 || len > REDIS_NAME_MAX ||
		!all_of(p, len, out->bullmq ? "_.~-" : "_.~-:{}"))
	{
		*problem = out->bullmq ?
			"A queue name has letters, digits, \"_\", \".\", \"~\" and \"-\", 1 to 255 of them." :
			"A stream key has letters, digits, \"_\", \".\", \"~\", \"-\", \":\", \"{\" and \"}\", 1 to 255 of them.";
		return false;
	}
	memcpy(out->name, p, len);
	out->name[len] = '\0';

	/* options, separated by "&" */
	for (p = query != NULL ? query + 1 : NULL; p != NULL;)
	{
		const char *amp = strchr(p, '&');
		size_t		opt_len = amp != NULL ? (size_t) (amp - p) : strlen(p);

		if (out->bullmq)
		{
			if (!bullmq_option(p, opt_len, out, &seen, problem))
				return false;
		}
		else if (opt_len > 7 && strncmp(p, "maxlen=", 7) == 0 && !seen &&
				 number_of(p + 7, opt_len - 7, LONG_MAX / 2, &out->maxlen) && out->maxlen > 0)
			seen = 1;
		else
		{
			*problem = "The one option of a redis:// URL is maxlen=N (N at least 1), the length streams are trimmed to, approximately.";
			return false;
		}
		p = amp != NULL ? amp + 1 : NULL;
	}
	return true;
}
