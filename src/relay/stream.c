/*-------------------------------------------------------------------------
 *
 * stream.c
 *	  The shape of the stream (DESIGN.md, "The read path"): how many
 *	  endpoints follow it, how many events a page of it holds and an
 *	  endpoint's share of one, and which parts of the page in flight hold
 *	  the other followers back (the laggards, which stop following).  The
 *	  relay reads, routes (read.c) and records (record.c) the pages.
 *	  Called in the relay's process only; nothing here needs a
 *	  transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/resource.h>

#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "relay/credentials.h"
#include "guc.h"
#include "relay/pump.h"
#include "targets/target.h"
#include "relay/stream.h"

/*
 * A part of the stream's page with requests in flight and no answer for
 * this long, while other endpoints follow the stream, is a laggard: it
 * holds the others back (stream_detach_laggards).  Longer than a lost
 * SYN's first retransmission (1 s): a burst of new connections to one host
 * must not detach everyone (seen with 2,048 parts at once).
 */
#define DETACH_AFTER_MS		1500
/*
 * A page with at least HOLD_MIN_PARTS parts in flight, more than half of
 * its parts, while nothing at all was answered for HOLD_QUIET_MS (and it
 * was read that long ago), is held: none of its parts is detached until
 * answers come back, or until nothing was answered for DETACH_HOLD_MS.
 * Detaching a few parts costs little; the hold is for many
 * (stream_detach_laggards).
 */
#define HOLD_MIN_PARTS		10
#define HOLD_QUIET_MS		200
#define DETACH_HOLD_MS		6000
/*
 * No hold keeps a part with no answer for this long: holds that end and
 * start again (answers of other endpoints trickling in) must not keep a
 * dead receiver's part until its timeout.
 */
#define OVERDUE_MS			(DETACH_AFTER_MS + DETACH_HOLD_MS)

/*
 * When stream_detach_laggards should look at the page again if no answer
 * comes first (an answer wakes the relay anyway): the first moment at which
 * a part's wait runs out, a silence starts or ends a hold, or a part becomes
 * overdue.  0: no look is due; 1 (long past): look at once
 * (stream_look_now).
 */
static TimestampTz look_at = 0;

/*
 * How many active endpoints follow the stream; of those, endpoints of a
 * broker, and their stream_page_share()s.
 */
static int	followers = 0;
static int	broker_followers = 0;
static int64 broker_share = 0;

/*
 * A stream page that route_page cut short (an endpoint's share was full):
 * its length, which bounds the next pages' reads, so that what follows is
 * not read only to be left for the next page (an HTTP endpoint beside a
 * Kafka endpoint of the same event types: pages of 2,500 cut at 500), and
 * the pages since that were not cut.  After STREAM_CUT_PAGES of those the
 * full size is tried again.
 */
#define STREAM_CUT_PAGES	8
static int	stream_cut = 0;
static int	stream_uncut = 0;

/*
 * The events an endpoint gets at most in a page, its own or its part of the
 * stream's: outbox.batch_size, or for a target whose deliveries take no
 * slot (a broker) BROKER_PAGE_FACTOR times that, but not more than half its
 * max_in_flight (nor less than outbox.batch_size): a part is sent and
 * acknowledged whole before the stream moves on.
 */
int
stream_page_share(const RelayEndpoint *ep)
{
	int			share = BROKER_PAGE_FACTOR * outbox_batch_size;

	if (target_takes_slot(ep->target))
		return outbox_batch_size;
	if (ep->max_in_flight > 0)
		share = Min(share, Max(ep->max_in_flight / 2, outbox_batch_size));
	return share;
}

/*
 * ep starts (sign 1) or stops (-1) following the stream: count it, and a
 * broker's share, as counted when it started (its URL may change meanwhile).
 */
void
stream_count_follower(RelayEndpoint *ep, int sign)
{
	if (sign > 0)
		ep->share_counted = target_takes_slot(ep->target) ? 0 : stream_page_share(ep);
	followers += sign;
	if (ep->share_counted > 0)
	{
		broker_followers += sign;
		broker_share += sign * ep->share_counted;
	}
	if (sign < 0)
		ep->share_counted = 0;
}

int
stream_followers(void)
{
	return followers;
}

/* Before the followers are counted again from scratch (a load). */
void
stream_forget_followers(void)
{
	followers = 0;
	broker_followers = 0;
	broker_share = 0;
}

/*
 * A page was routed: cut short (an endpoint's share was full) at its
 * length now, or whole.
 */
void
stream_page_routed(const StreamPage *p, bool cut)
{
	if (cut)
	{
		stream_cut = p->n;
		stream_uncut = 0;
	}
	else if (stream_cut > 0 && ++stream_uncut >= STREAM_CUT_PAGES)
		stream_cut = 0;
}

/*
 * How many events a page of the stream may hold (DESIGN.md, "The stream").
 * outbox.batch_size, as an endpoint reading on its own reads; while most
 * requests of the pages take SLOW_ANSWER_MS or longer, twice as many as
 * the last page, up to the relay's slots, so that endpoints whose
 * receivers answer slowly have requests in flight side by side instead of
 * a few each (bench case 11: 2,200 deliveries a second from pages of 500
 * with receivers answering after 200 ms, 6,300 from pages of 2,048); and
 * back by halves once most are answered sooner.  Receivers that answer at
 * once gain nothing from large pages, and more requests in flight cost
 * the relay more each (bench case 9: 1,000 endpoints on nginx got 16,900
 * deliveries a second from pages of 500, 9,100 from pages of 2,048).  That
 * is the share of the endpoints whose requests take slots.  Each broker
 * endpoint that follows adds its stream_page_share() (BROKER_PAGE_FACTOR x
 * outbox.batch_size at most; all of them together at most that factor of
 * the slots): its messages take no slot, and its rate is about a page per
 * acknowledgement (bench case 14: Kafka from 44,000 events a second to
 * 94,000).  No endpoint gets more than its stream_page_share() of a page
 * (route_page), a page that was cut for that bounds the next ones
 * (stream_cut), and outbox.batch_bytes bounds its memory.
 */
static int	stream_size = 0;	/* as asked; within_page_bounds() at use */

/* size, within outbox.batch_size and the relay's slots (or batch_size). */
static int
within_page_bounds(int size)
{
	return Min(Max(size, outbox_batch_size), Max(pump_slots(), outbox_batch_size));
}

int
stream_page_size(void)
{
	int64		takers = (int64) outbox_batch_size * Max(followers - broker_followers, 0);
	int64		size = Min(takers, within_page_bounds(stream_size)) +
		Min(broker_share, (int64) BROKER_PAGE_FACTOR * Max(pump_slots(), outbox_batch_size));

	if (stream_cut > 0)
		size = Min(size, stream_cut);
	return (int) Max(size, 1);
}

/*
 * CPU time of the relay's own thread, in µs: not the threads of its
 * targets (libnats, librdkafka, librabbitmq), nor its senders' (with
 * outbox.senders they take some answers in, and the test below sees only
 * the relay).  Where RUSAGE_THREAD is missing, the whole process's, which
 * only makes pages grow less.
 */
int64
stream_cpu_us(void)
{
	struct rusage ru;

#ifdef RUSAGE_THREAD
	if (getrusage(RUSAGE_THREAD, &ru) != 0)
#else
	if (getrusage(RUSAGE_SELF, &ru) != 0)
#endif
		return 0;
	return (int64) (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
		ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

/*
 * After a stream page: the share of it of the endpoints whose requests take
 * slots, from how those requests took (a broker's share is fixed:
 * stream_page_share).  Larger after a page that did not end its batch (more is
 * waiting), and only while the relay was idle for a quarter of its time or
 * more: a relay at a full core is slow to take its answers in, so they
 * look slow, and a larger page would only make each take longer (bench
 * case 9 with 10,000 endpoints on nginx: pages grew to 2,048 in some runs,
 * 9,400 deliveries a second instead of 12,000 to 13,000).  Then the size
 * stays.
 */
void
stream_size_pages(const StreamPage *p)
{
	int			size = within_page_bounds(stream_size);
	int64		life = GetCurrentTimestamp() - p->read_at;
	int64		idle = life - (stream_cpu_us() - p->cpu_at_read);

	if (p->answered == 0)
		return;
	if (p->slow_answers * 2 > p->answered && !p->batch_done && idle * 4 >= life)
		size = within_page_bounds(size * 2);
	else if (p->slow_answers * 2 <= p->answered)
		size = within_page_bounds(size / 2);
	stream_size = size;
}

/* Make look_at t if t is after now and sooner than look_at. */
static void
look_sooner(TimestampTz t, TimestampTz now)
{
	if (t > now && (look_at == 0 || t < look_at))
		look_at = t;
}

/*
 * Endpoints whose parts of the stream's page are still in flight hold back
 * every other endpoint that follows the stream.  A part is a laggard when
 * it has requests in flight and has had no answer, nor sent anything, for
 * a while (a large part answered steadily is none, nor one whose requests
 * wait for slots; one whose OAuth2 token is being fetched counts as in
 * flight): DETACH_AFTER_MS while more than a quarter of the page's parts
 * are left, or, once at most a quarter are, twice as long as the others
 * took (from the page's read to the last part that finished, parts with
 * nothing to send included), or twice what its endpoint's last definite
 * answer took if that is longer, at least LAGGARD_MIN_MS and at most
 * DETACH_AFTER_MS.
 *
 * Each part's wait counts from its own last answer, not from the others'
 * last finish: parts of healthy endpoints that trickle in late must not
 * put it off again and again (in bench case 12 a page waited 2.2 s that
 * way for 100 endpoints that never answer), so a receiver that never
 * answers costs the others a fraction of a second, not its timeout.  The
 * wait counts up to when the relay last took its sockets' answers (now:
 * the relay's polled_at), not up to the moment it looks: a step of SQL
 * that ran for seconds saw no answers, yet the receivers may have sent
 * them all.  A receiver far away (300 ms, say) beside many near ones is
 * kept by its own answers' time rather than detached on every page.
 *
 * Laggards stop following (their parts become their own pages) and are
 * lagged: one request at a time until an answer (pump_endpoint_cap).  But
 * when many parts are in flight (HOLD_MIN_PARTS), most of the page's, and
 * nothing at all was answered lately, every receiver (or the network) may
 * be stalled: detaching them all would only make each read on its own.
 * Then the page is held: nothing is detached while the silence lasts, up
 * to DETACH_HOLD_MS of it, and parts whose waits ran out meanwhile go only
 * once it is over.  The silence counts from the last answer to any
 * request, or from the page's read if that is later.  When answers come
 * back after parts were late, every part's wait starts again from the
 * look that saw them: the first answer must not make the others, a few
 * milliseconds behind it, laggards for the time everyone waited.  When the
 * silence reaches DETACH_HOLD_MS, the late parts go at once, and a part
 * with no answer of its own for OVERDUE_MS goes whatever the holds
 * (answers trickling in from elsewhere could end and start them again and
 * again).  An endpoint alone on the stream holds nobody back.
 *
 * active: the relay's batches in flight (Batch), the parts of p among
 * them.  Returns the laggards, marked lagged: the caller detaches them.
 */
List *
stream_detach_laggards(StreamPage *p, dlist_head *active, TimestampTz now)
{
	dlist_iter	iter;
	List	   *slow = NIL;
	List	   *overdue = NIL;
	List	   *leaving;
	ListCell   *lc;
	TimestampTz quiet_since;
	TimestampTz unsent_look;
	long		wait = DETACH_AFTER_MS;
	int			waiting = 0;
	bool		held = false;

	look_at = 0;
	if (p == NULL || p->parts == 0 || followers <= 1 || now == 0)
		return NIL;
	quiet_since = Max(pump_last_answer_at(), p->read_at);
	/* (a part with nothing sent yet is looked at by then) */
	unsent_look = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), LAGGARD_MIN_MS / 2);
	if ((p->routed - p->finished) * 4 <= p->routed)
		wait = Max(LAGGARD_MIN_MS,
				   Min(2 * (p->progress_at - p->read_at) / 1000, DETACH_AFTER_MS));
	dlist_foreach(iter, active)
	{
		Batch	   *b = dlist_container(Batch, node, iter.cur);
		long		own;

		if (b->stream != p || b->pending == 0)
			continue;
		if (b->ep->in_flight == 0 && !credentials_fetching(b->ep))
		{
			/* Sent, perhaps, before the next look: its wait starts then. */
			look_sooner(unsent_look, now);
			continue;
		}
		waiting++;
		/*
		 * A receiver known to take its time gets twice its last answer's
		 * (while more than a quarter are left, wait is the cap already).
		 * The wait counts from its last answer, or from the end of the
		 * page's last hold; no hold keeps a part past OVERDUE_MS.
		 */
		own = Min(Max(wait, (long) (2 * b->ep->answer_ms)), DETACH_AFTER_MS);
		if (TimestampDifferenceExceeds(b->answered_at, now, OVERDUE_MS))
			overdue = lappend(overdue, b->ep);
		else if (TimestampDifferenceExceeds(Max(b->answered_at, p->held_at), now, own))
			slow = lappend(slow, b->ep);
		else
			look_sooner(TimestampTzPlusMilliseconds(Max(b->answered_at, p->held_at), own), now);
		look_sooner(TimestampTzPlusMilliseconds(b->answered_at, OVERDUE_MS), now);
	}
	if (waiting >= HOLD_MIN_PARTS)
	{
		look_sooner(TimestampTzPlusMilliseconds(quiet_since, HOLD_QUIET_MS), now);
		look_sooner(TimestampTzPlusMilliseconds(quiet_since, DETACH_HOLD_MS), now);
	}
	if (waiting >= HOLD_MIN_PARTS && waiting * 2 > p->routed &&
		TimestampDifferenceExceeds(quiet_since, now, HOLD_QUIET_MS) &&
		!TimestampDifferenceExceeds(quiet_since, now, DETACH_HOLD_MS))
	{
		/* Held while the silence lasts; parts late meanwhile make it count. */
		p->holding |= (slow != NIL || overdue != NIL);
		held = true;
	}
	else if (p->holding && !TimestampDifferenceExceeds(quiet_since, now, DETACH_HOLD_MS))
	{
		/* Answers came back: every wait starts again from here. */
		p->holding = false;
		p->held_at = now;
		held = true;
		/* (no wait is shorter than the floor; the look then finds them all) */
		look_sooner(TimestampTzPlusMilliseconds(now, LAGGARD_MIN_MS), now);
	}
	else
		p->holding = false;
	/* The overdue go in any case, the others unless the page is held. */
	leaving = held ? overdue : list_concat(overdue, slow);
	foreach(lc, leaving)
	{
		RelayEndpoint *ep = (RelayEndpoint *) lfirst(lc);

		ereport(DEBUG1,
				(errmsg("outbox endpoint \"%s\" stops following the stream: its deliveries hold the others back",
						ep->name)));
		ep->lagged = true;
	}
	list_free(slow);
	return leaving;
}

/*
 * Have the relay look at the stream's page again without waiting: a part
 * left it (relay_detach, state.c), and the quarter left, the hold or the
 * others' time may have changed with it.
 */
void
stream_look_now(void)
{
	look_at = 1;
}

/*
 * Milliseconds from now until stream_detach_laggards should look at the
 * stream's page again, if no answer wakes the relay before; -1 if no look is
 * due.  The relay sleeps no longer.
 */
long
stream_ms_to_look(TimestampTz now)
{
	if (look_at == 0)
		return -1;
	if (look_at <= now)
		return 0;
	/* Rounded up: waking a moment early would find nothing to do. */
	return (long) ((look_at - now + 999) / 1000);
}
