/*-------------------------------------------------------------------------
 *
 * route.c
 *	  Which endpoints want an event.  An endpoint subscribes to event-type
 *	  patterns: "*", an event type, or a prefix followed by "*" (validate.c).
 *	  The relay routes each event of a stream page through this table, so
 *	  that what routing an event costs depends on the endpoints that want
 *	  it and on the prefix patterns, never on how many endpoints subscribe
 *	  to other types: exact types are found in a hash table.
 *
 * The table is rebuilt after each load of the endpoints (route_build); it
 * points into the relay's endpoint hash table, whose entries stay where
 * they are until removed, and a load is the only place that removes them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"

#include "relay/route.h"
#include "functions/validate.h"

/* An event type and the endpoints subscribed to exactly it. */
typedef struct TypeRoute
{
	char		type[OUTBOX_MAX_EVENT_TYPE + 1];	/* hash key */
	RelayEndpoint **eps;
	int			n;
	int			room;
} TypeRoute;

/* A prefix pattern ("order.*", "order*") or "*" (an empty prefix). */
typedef struct PrefixRoute
{
	const char *prefix;
	int			len;
	RelayEndpoint *ep;
} PrefixRoute;

static MemoryContext route_cxt = NULL;
static HTAB *types = NULL;
static PrefixRoute *prefixes = NULL;
static int	nprefixes = 0;

/* route_match's answer, and the mark that keeps an endpoint in it once. */
static RelayEndpoint **matches_buf = NULL;
static int	matches_room = 0;
static uint64 match_gen = 0;

static void
add_type_route(const char *type, RelayEndpoint *ep)
{
	char		key[OUTBOX_MAX_EVENT_TYPE + 1];
	TypeRoute  *r;
	bool		found;

	memset(key, 0, sizeof(key));
	strlcpy(key, type, sizeof(key));
	r = hash_search(types, key, HASH_ENTER, &found);
	if (!found)
	{
		r->room = 4;
		r->n = 0;
		r->eps = MemoryContextAlloc(route_cxt, sizeof(RelayEndpoint *) * r->room);
	}
	else if (r->n == r->room)
	{
		r->room *= 2;
		r->eps = repalloc(r->eps, sizeof(RelayEndpoint *) * r->room);
	}
	r->eps[r->n++] = ep;
}

/*
 * Build the table from every endpoint loaded (active or not: route_match's
 * callers decide which may receive).
 */
void
route_build(HTAB *endpoints, MemoryContext parent)
{
	HASH_SEQ_STATUS seq;
	RelayEndpoint *ep;
	HASHCTL		ctl;
	int			room = 16;

	if (route_cxt == NULL)
		route_cxt = AllocSetContextCreate(parent, "outbox routes", ALLOCSET_DEFAULT_SIZES);
	else
		MemoryContextReset(route_cxt);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = OUTBOX_MAX_EVENT_TYPE + 1;
	ctl.entrysize = sizeof(TypeRoute);
	ctl.hcxt = route_cxt;
	types = hash_create("outbox routes by type", 256, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	prefixes = MemoryContextAlloc(route_cxt, sizeof(PrefixRoute) * room);
	nprefixes = 0;

	hash_seq_init(&seq, endpoints);
	while ((ep = hash_seq_search(&seq)) != NULL)
	{
		for (int i = 0; i < ep->npatterns; i++)
		{
			const char *p = ep->patterns[i];
			int			len = strlen(p);

			if (len == 0 || p[len - 1] != '*')
			{
				add_type_route(p, ep);
				continue;
			}
			if (nprefixes == room)
			{
				room *= 2;
				prefixes = repalloc(prefixes, sizeof(PrefixRoute) * room);
			}
			prefixes[nprefixes].prefix = p;
			prefixes[nprefixes].len = len - 1;
			prefixes[nprefixes].ep = ep;
			nprefixes++;
		}
	}
}

static void
add_match(RelayEndpoint *ep, int *n)
{
	if (ep->match_gen == match_gen)
		return;					/* two of its patterns match */
	ep->match_gen = match_gen;
	if (*n == matches_room)
	{
		matches_room = Max(64, matches_room * 2);
		matches_buf = matches_buf ?
			repalloc(matches_buf, sizeof(RelayEndpoint *) * matches_room) :
			MemoryContextAlloc(TopMemoryContext, sizeof(RelayEndpoint *) * matches_room);
	}
	matches_buf[(*n)++] = ep;
}

/*
 * The endpoints with a pattern that matches type, each once, in *matches
 * (valid until the next call); returns how many.
 */
int
route_match(const char *type, RelayEndpoint ***matches)
{
	char		key[OUTBOX_MAX_EVENT_TYPE + 1];
	TypeRoute  *r;
	int			n = 0;

	match_gen++;
	memset(key, 0, sizeof(key));
	strlcpy(key, type, sizeof(key));
	r = types ? hash_search(types, key, HASH_FIND, NULL) : NULL;
	if (r != NULL)
		for (int i = 0; i < r->n; i++)
			add_match(r->eps[i], &n);
	for (int i = 0; i < nprefixes; i++)
		if (strncmp(type, prefixes[i].prefix, prefixes[i].len) == 0)
			add_match(prefixes[i].ep, &n);
	*matches = matches_buf;
	return n;
}
