/*-------------------------------------------------------------------------
 *
 * endpoints.c
 *	  The relay's endpoint table: a RelayEndpoint (delivery.h) per
 *	  endpoint id, made and refreshed from outbox.endpoints.
 *
 * The relay's state owns the table (a hash table in its memory,
 * endpoints_create) and asks for a load in a read step when the endpoints changed or have
 * not been loaded for a while (endpoints_load).  A load takes each row's
 * settings, keys, rate limit (limit.c) and client credentials
 * (credentials.c) over into its entry and leaves alone what the relay
 * keeps of it: batches in flight, counts, failures, and that it no longer
 * follows the stream when the relay detached it but has not recorded that
 * yet.  What follows from a load (routes, who reads on its own) is
 * read.c's (endpoints_loaded).  The SQL is store.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "counters.h"
#include "relay/credentials.h"
#include "relay/delivery.h"
#include "relay/endpoints.h"
#include "relay/limit.h"
#include "relay/store.h"
#include "targets/target.h"

/*
 * The endpoint table, keyed by endpoint id, in cxt.  Empty: the first
 * endpoints_load fills it.
 */
HTAB *
endpoints_create(MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int);
	ctl.entrysize = sizeof(RelayEndpoint);
	ctl.hcxt = cxt;
	return hash_create("outbox endpoints", 64, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

static void
free_endpoint_strings(RelayEndpoint *ep)
{
	pfree(ep->name);
	pfree(ep->dest.url);
	pfree(ep->dest.headers);
	for (int i = 0; i < ep->npatterns; i++)
		pfree(ep->patterns[i]);
	if (ep->patterns)
		pfree(ep->patterns);
	ep->patterns = NULL;
	ep->npatterns = 0;
}

/*
 * After a load: endpoints that were not in it are inactive, and removed
 * once nothing of theirs is in flight, held or to be detached.
 */
static void
prune_unseen(HTAB *endpoints)
{
	HASH_SEQ_STATUS seq;
	RelayEndpoint *ep;

	hash_seq_init(&seq, endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
	{
		if (ep->seen)
			continue;
		ep->active = false;
		if (ep->page == NULL && ep->due == NULL && !ep->detach && !ep->held)
		{
			free_endpoint_strings(ep);
			credentials_free(ep);
			outbox_counters_forget(ep->id);
			hash_search(endpoints, &ep->id, HASH_REMOVE, NULL);
		}
	}
}

/*
 * Refresh the endpoint table from SQL (in a read step: the caller holds a
 * transaction with SPI connected).  Each row's strings, allocated in cxt
 * (the relay's long-lived memory), are taken over by its entry.  Entries
 * that disappeared and have nothing in flight are removed; those with
 * something in flight stay inactive until it finishes.
 */
void
endpoints_load(HTAB *endpoints, MemoryContext cxt)
{
	static bool first_load = true;	/* since this relay started */
	HASH_SEQ_STATUS seq;
	RelayEndpoint *ep;
	EndpointRow *rows;
	int			n = store_load_endpoints(&rows, cxt);
	TimestampTz now = GetCurrentTimestamp();

	hash_seq_init(&seq, endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
		ep->seen = false;

	for (int i = 0; i < n; i++)
	{
		EndpointRow *row = &rows[i];
		bool		found;

		ep = hash_search(endpoints, &row->id, HASH_ENTER, &found);
		if (!found)
		{
			memset(((char *) ep) + sizeof(int), 0, sizeof(RelayEndpoint) - sizeof(int));
			/*
			 * What a relay before us had in flight may have arrived; an
			 * endpoint that appears later cannot have had anything in flight.
			 */
			ep->verify_page = first_load;
			ep->verify_due = first_load;
		}
		else
			free_endpoint_strings(ep);
		ep->name = row->name;
		ep->dest.id = ep->id;
		ep->dest.name = row->name;
		ep->dest.url = row->url;
		ep->target = target_of_url(ep->dest.url);
		ep->dest.headers = row->headers;
		ep->patterns = row->patterns;
		ep->npatterns = row->npatterns;
		/*
		 * The relay knows best whether an endpoint follows the stream: it
		 * may have detached it without having recorded that yet.
		 */
		if (!found || !ep->detach)
			ep->follows = row->follows;
		ep->dest.timeout_ms = row->timeout_ms;
		ep->max_attempts = row->max_attempts;
		ep->ordered = row->ordered;
		ep->active = row->active;
		ep->seen = true;

		if (row->key_ok)
		{
			memcpy(ep->dest.key, row->key, row->keylen);
			ep->dest.keylen = row->keylen;
		}
		else
		{
			ereport(WARNING,
					(errmsg("outbox endpoint \"%s\" has an invalid signing secret; not delivering to it",
							ep->name)));
			ep->active = false;
		}
		memcpy(ep->dest.old_key, row->old_key, row->old_keylen);
		ep->dest.old_keylen = row->old_keylen;
		ep->max_in_flight = row->max_in_flight;
		ep->max_age_ms = row->max_age_ms;
		limit_set_rate(ep, row->rate_limit, now);
		/* Changed (altered, paused, resumed): a Retry-After's pause ends. */
		if (found && row->changed_at != ep->changed_at)
			limit_unpause(ep, now);
		ep->changed_at = row->changed_at;
		if (row->format_ok)
			ep->dest.format = row->format;
		else
		{
			/* (endpoints_format_check: cannot happen) */
			ereport(WARNING,
					(errmsg("outbox endpoint \"%s\" has an unknown format; not delivering to it",
							ep->name)));
			ep->active = false;
		}
		if (row->auth_problem != NULL)
		{
			/* (checked when stored, by _check_auth: cannot happen) */
			ereport(WARNING,
					(errmsg("outbox endpoint \"%s\" has invalid client authentication; not delivering to it",
							ep->name),
					 errdetail("%s.", row->auth_problem)));
			ep->active = false;
			credentials_free(ep);
		}
		else
			credentials_load(ep, row->has_auth ? &row->auth : NULL, cxt);
	}
	pfree(rows);
	first_load = false;
	prune_unseen(endpoints);
}
