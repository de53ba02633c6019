/*-------------------------------------------------------------------------
 *
 * priority.c
 *	  Order a batch's deliveries by their events' priority (emit's
 *	  priority argument), highest first, before the relay submits them in
 *	  array order (pump.c, pump_batch).  What a batch holds is what the
 *	  relay holds for one endpoint at once: a part of a stream page, a page
 *	  of its own, or its due retries (which _read_due already returns
 *	  highest priority first).  Priority orders submission within that; it
 *	  does not make the relay read an endpoint's later events sooner, so it
 *	  matters when an endpoint has more in a batch than it may send at once
 *	  (its max_in_flight, its share of the slots).  DESIGN.md, "Expiry and
 *	  priority".
 *
 * The sort is stable: events of equal priority keep their id order.  On
 * an ordered endpoint the events of one key keep their order whatever
 * their priorities: each keyed event is sorted by the highest priority of
 * itself and the later events of its key in the batch, so an urgent event
 * takes the events it must wait for ahead with it.  Runs before
 * link_same_key, which chains the deliveries of a key in array order.
 *
 * A batch whose events all have priority 0 is left as it is, at the cost
 * of one pass.  Needs no transaction; allocates in the batch's context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "relay/priority.h"

/* A delivery's place in the sort: its effective priority, then its index. */
typedef struct PriorityKey
{
	int			priority;
	int			index;
} PriorityKey;

static int
compare_keys(const void *a, const void *b)
{
	const PriorityKey *x = (const PriorityKey *) a;
	const PriorityKey *y = (const PriorityKey *) b;

	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	return x->index < y->index ? -1 : (x->index > y->index ? 1 : 0);
}

/*
 * Sort b's deliveries, highest (effective) priority first, stably.  Only
 * the array is reordered: the batch's bounds (last_id, snap) stay as read.
 * Quadratic in the deliveries of keyed events on an ordered endpoint, as
 * link_same_key is, and only when some priority is not 0.
 */
void
priority_order(Batch *b)
{
	PriorityKey *keys;
	Delivery   *sorted;
	bool		any = false;

	for (int i = 0; i < b->n && !any; i++)
		any = b->d[i].priority != 0;
	if (!any)
		return;

	keys = MemoryContextAlloc(b->cxt, sizeof(PriorityKey) * b->n);
	for (int i = b->n - 1; i >= 0; i--)
	{
		Delivery   *d = &b->d[i];

		keys[i].index = i;
		keys[i].priority = d->priority;
		if (!b->ep->ordered || d->key == NULL)
			continue;
		/* The next of its key, walking back, already holds its chain's most. */
		for (int j = i + 1; j < b->n; j++)
			if (b->d[j].key != NULL && strcmp(b->d[j].key, d->key) == 0)
			{
				keys[i].priority = Max(keys[i].priority, keys[j].priority);
				break;
			}
	}
	qsort(keys, b->n, sizeof(PriorityKey), compare_keys);

	sorted = MemoryContextAlloc(b->cxt, sizeof(Delivery) * b->n);
	for (int i = 0; i < b->n; i++)
		sorted[i] = b->d[keys[i].index];
	memcpy(b->d, sorted, sizeof(Delivery) * b->n);
	pfree(sorted);
	pfree(keys);
}
