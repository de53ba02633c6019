/*-------------------------------------------------------------------------
 *
 * sender.c
 *	  Sender processes: HTTP for a relay on more cores than its own.
 *
 * A relay reads, signs and records; sending is most of its time (libcurl
 * and the kernel's TCP path, bench/perf-throughput.txt), and one process
 * gets one core.  With outbox.senders = N the relay starts N sender
 * processes, each with a libcurl multi handle of its own, and hands each
 * request to whichever of itself and its senders has the fewest in flight.
 * Everything else stays with the relay: what is read, in what order it is
 * submitted (per-key order included), what is recorded.  A sender only
 * turns requests into results, so two processes never work the same
 * events.
 *
 * A relay and a sender talk through two shm_mq queues in a DSM segment the
 * relay creates: requests one way (the URL, the header lines, the body),
 * results the other.  Neither side ever blocks on a queue: what does not
 * fit waits in a list and goes when the other side has read.  A queue
 * write sets the reader's latch, so both sleep in their usual wait on the
 * latch and libcurl's sockets (wait.c).
 *
 * A sender that exits (or could not be started, or is stuck: no answer
 * SENDER_GRACE_MS past a request's timeout) fails its requests in flight
 * as transport errors, so they are retried like any other; the relay
 * starts it again after SENDER_RESTART_MS and sends locally until then.  A
 * sender leaves when its relay does (the queues detach).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shm_mq.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "targets/http.h"
#include "relay/sender.h"
#include "targets/wait.h"
#include "targets/webhook.h"

/* Each queue, per sender and direction. */
#define QUEUE_SIZE			(256 * 1024)
/* A sender that exited is started again after this. */
#define SENDER_RESTART_MS	5000
/*
 * A result later than its request's timeout by this much means the sender
 * is stuck: it is stopped and its requests fail, as if it had exited.
 */
#define SENDER_GRACE_MS		10000

/*
 * A request, relay to sender; the URL, header lines, body, and client
 * certificate and key file names (mutual TLS) follow.
 */
typedef struct WireRequest
{
	uint32		id;
	uint32		url_len;
	uint32		headers_len;	/* lines, each ending in '\n' */
	uint32		body_len;
	uint32		cert_len;		/* 0: no client certificate */
	uint32		key_len;
	int64		timeout_ms;
} WireRequest;

/* A result, sender to relay. */
typedef struct WireResult
{
	uint32		id;
	bool		transport_error;
	int64		status;
	double		duration_ms;
	uint64		response_len;
	uint64		response_read;
	bool		response_cut;
	char		error[CURL_ERROR_SIZE];
	char		response[OUTBOX_RESPONSE_KEEP + 1];
	char		delivery[32];
	char		retry_after[64];
} WireResult;

/* A message waiting for room in its queue. */
typedef struct Outgoing
{
	dlist_node	node;
	Size		len;
	char		data[FLEXIBLE_ARRAY_MEMBER];
} Outgoing;

static Outgoing *
outgoing_new(MemoryContext cxt, Size len)
{
	Outgoing   *o = MemoryContextAlloc(cxt, offsetof(Outgoing, data) + len);

	o->len = len;
	return o;
}

/*
 * Send what waits, in order, without blocking.  False when the reader has
 * detached.
 */
static bool
flush(shm_mq_handle *mqh, dlist_head *waiting)
{
	while (!dlist_is_empty(waiting))
	{
		Outgoing   *o = dlist_head_element(Outgoing, node, waiting);
		shm_mq_result r = shm_mq_send(mqh, o->len, o->data, true, true);

		if (r == SHM_MQ_WOULD_BLOCK)
			return true;		/* sent again, whole, once there is room */
		if (r == SHM_MQ_DETACHED)
			return false;
		dlist_delete(&o->node);
		pfree(o);
	}
	return true;
}

/* ---------------------------------------------------------------------
 * The relay's side
 * ---------------------------------------------------------------------
 */

typedef struct Sender
{
	int			index;
	bool		alive;
	TimestampTz died_at;
	BackgroundWorkerHandle *worker;
	shm_mq_handle *requests;
	shm_mq_handle *results;
	dlist_head	waiting;		/* requests not yet in the queue */
	HttpRequest **by_id;		/* requests in flight here, by wire id */
	TimestampTz *due_by;		/* when each should have been answered */
	int			n_ids;
	int			in_flight;
	bool		refused;		/* warned that it could not be started */
} Sender;

static MemoryContext senders_cxt = NULL;
static dsm_segment *segment = NULL;
static Sender *senders = NULL;
static int	n_senders = 0;
static int	remote_in_flight = 0;
static const char *relay_dbname = NULL;
/* Finished requests not yet handed to the relay. */
static dlist_head finished = DLIST_STATIC_INIT(finished);

static char *
queue_address(int index, bool results)
{
	return (char *) dsm_segment_address(segment) + (Size) index * 2 * QUEUE_SIZE +
		(results ? QUEUE_SIZE : 0);
}

static void
launch(Sender *s)
{
	BackgroundWorker worker;
	shm_mq	   *requests = shm_mq_create(queue_address(s->index, false), QUEUE_SIZE);
	shm_mq	   *results = shm_mq_create(queue_address(s->index, true), QUEUE_SIZE);
	MemoryContext old;
	bool		registered;

	shm_mq_set_sender(requests, MyProc);
	shm_mq_set_receiver(results, MyProc);

	memset(&worker, 0, sizeof(worker));
	/* Connected to no database, as the launcher: to be in pg_stat_activity. */
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "outbox", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "outbox_sender_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "outbox sender %d for %s", s->index + 1, relay_dbname);
	strlcpy(worker.bgw_type, "outbox sender", BGW_MAXLEN);
	worker.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(segment));
	memcpy(worker.bgw_extra, &s->index, sizeof(s->index));
	worker.bgw_notify_pid = MyProcPid;

	s->died_at = GetCurrentTimestamp();
	/*
	 * The handle is allocated in the current context: the senders' own, not
	 * the relay loop's, which is reset every iteration (a sender started
	 * again by revive() had its handle freed under it, and stopping it
	 * later when stuck read freed memory).
	 */
	old = MemoryContextSwitchTo(senders_cxt);
	registered = RegisterDynamicBackgroundWorker(&worker, &s->worker);
	MemoryContextSwitchTo(old);
	if (!registered)
	{
		s->worker = NULL;
		if (s->refused)
			return;
		s->refused = true;
		ereport(WARNING,
				(errmsg("outbox could not start sender %d for database \"%s\"",
						s->index + 1, relay_dbname),
				 errdetail("The relay sends its requests itself meanwhile, and tries again every %d s.",
						   SENDER_RESTART_MS / 1000),
				 errhint("Raise max_worker_processes: each relay uses 1 + outbox.senders of them.")));
		return;
	}
	old = MemoryContextSwitchTo(senders_cxt);
	s->requests = shm_mq_attach(requests, segment, s->worker);
	s->results = shm_mq_attach(results, segment, s->worker);
	MemoryContextSwitchTo(old);
	s->alive = true;
	s->refused = false;
}

static bool senders_submit(HttpRequest *req, int in_flight);
static HttpRequest *senders_next_done(void);

/* What the webhook target hands its requests to (webhook.h). */
static const WebhookSenders relay_senders = {
	.submit = senders_submit,
	.next_done = senders_next_done,
};

/*
 * Start outbox.senders sender processes for this relay, and have the
 * webhook target hand them its requests.  Without any, every request is
 * sent by the relay itself.
 */
void
senders_start(const char *dbname)
{
	if (outbox_senders == 0)
		return;
	senders_cxt = AllocSetContextCreate(TopMemoryContext, "outbox senders", ALLOCSET_DEFAULT_SIZES);
	relay_dbname = MemoryContextStrdup(senders_cxt, dbname);
	segment = dsm_create((Size) outbox_senders * 2 * QUEUE_SIZE, 0);
	/* For the life of the relay: the senders leave when it detaches. */
	dsm_pin_mapping(segment);
	n_senders = outbox_senders;
	senders = MemoryContextAllocZero(senders_cxt, sizeof(Sender) * n_senders);
	for (int i = 0; i < n_senders; i++)
	{
		senders[i].index = i;
		dlist_init(&senders[i].waiting);
		launch(&senders[i]);
	}
	webhook_use_senders(&relay_senders);
}

/*
 * A sender is gone (or stuck, and told to stop): what it had in flight
 * fails as a transport error (it may or may not have reached the receiver;
 * the retry decides), and it is started again later.
 */
static void
lost(Sender *s, const char *what)
{
	int			failed = 0;

	for (int id = 0; id < s->n_ids; id++)
	{
		HttpRequest *req = s->by_id[id];

		if (req == NULL)
			continue;
		req->status = 0;
		req->transport_error = true;
		req->duration_ms = 0;
		strlcpy(req->error, "the outbox sender process sending it stopped", sizeof(req->error));
		dlist_push_tail(&finished, &req->node);
		s->by_id[id] = NULL;
		failed++;
	}
	while (!dlist_is_empty(&s->waiting))
	{
		Outgoing   *o = dlist_container(Outgoing, node, dlist_pop_head_node(&s->waiting));

		pfree(o);
	}
	remote_in_flight -= s->in_flight;
	s->in_flight = 0;
	shm_mq_detach(s->requests);
	shm_mq_detach(s->results);
	s->requests = s->results = NULL;
	s->alive = false;
	s->died_at = GetCurrentTimestamp();
	/* The relay's loop collects the failures without waiting to be woken. */
	SetLatch(MyLatch);
	/* At shutdown the senders are told to stop as the relay is. */
	ereport(ProcDiePending ? DEBUG1 : WARNING,
			(errmsg("outbox sender %d for database \"%s\" %s", s->index + 1, relay_dbname, what),
			 errdetail("Its %d requests in flight will be retried; it is started again in %d s.",
					   failed, SENDER_RESTART_MS / 1000)));
}

/* Start again the senders that have been gone long enough. */
static void
revive(void)
{
	TimestampTz now = 0;

	for (int i = 0; i < n_senders; i++)
	{
		Sender	   *s = &senders[i];
		pid_t		pid;

		if (s->alive)
			continue;
		if (now == 0)
			now = GetCurrentTimestamp();
		if (!TimestampDifferenceExceeds(s->died_at, now, SENDER_RESTART_MS))
			continue;
		/* Its queues are reused: it must be gone for good first. */
		if (s->worker != NULL && GetBackgroundWorkerPid(s->worker, &pid) != BGWH_STOPPED)
			continue;
		if (s->worker != NULL)
			pfree(s->worker);
		s->worker = NULL;
		launch(s);
	}
}

/*
 * Hand a request to the sender with the fewest in flight, unless the relay
 * has fewer of its own (in_flight counts all; a tie goes to a sender):
 * false, and the caller sends it.  As with http_submit(), the header list
 * is ours from here on.
 */
static bool
senders_submit(HttpRequest *req, int in_flight)
{
	Sender	   *best = NULL;
	int			fewest = in_flight - remote_in_flight;
	Size		url_len = strlen(req->url);
	Size		headers_len = 0;
	Size		cert_len = req->client_cert ? strlen(req->client_cert) : 0;
	Size		key_len = req->client_cert ? strlen(req->client_key) : 0;
	Outgoing   *o;
	WireRequest w;
	char	   *p;
	int			id;

	if (n_senders == 0)
		return false;
	for (int i = 0; i < n_senders; i++)
		if (senders[i].alive && senders[i].in_flight <= fewest)
		{
			best = &senders[i];
			fewest = senders[i].in_flight;
		}
	if (best == NULL)
		return false;

	for (struct curl_slist *l = req->headers; l != NULL; l = l->next)
		headers_len += strlen(l->data) + 1;
	o = outgoing_new(senders_cxt, sizeof(WireRequest) + url_len + headers_len + req->body_len +
					 cert_len + key_len);
	for (id = 0; id < best->n_ids && best->by_id[id] != NULL; id++)
		;
	if (id == best->n_ids)
	{
		int			n = Max(64, best->n_ids * 2);

		best->by_id = best->by_id == NULL ?
			MemoryContextAlloc(senders_cxt, sizeof(HttpRequest *) * n) :
			repalloc(best->by_id, sizeof(HttpRequest *) * n);
		memset(best->by_id + best->n_ids, 0, sizeof(HttpRequest *) * (n - best->n_ids));
		best->due_by = best->due_by == NULL ?
			MemoryContextAlloc(senders_cxt, sizeof(TimestampTz) * n) :
			repalloc(best->due_by, sizeof(TimestampTz) * n);
		best->n_ids = n;
	}
	w.id = id;
	w.url_len = url_len;
	w.headers_len = headers_len;
	w.body_len = req->body_len;
	w.cert_len = cert_len;
	w.key_len = key_len;
	w.timeout_ms = req->timeout_ms;
	memcpy(o->data, &w, sizeof(w));
	p = o->data + sizeof(w);
	memcpy(p, req->url, url_len);
	p += url_len;
	for (struct curl_slist *l = req->headers; l != NULL; l = l->next)
	{
		size_t		len = strlen(l->data);

		memcpy(p, l->data, len);
		p[len] = '\n';
		p += len + 1;
	}
	memcpy(p, req->body, req->body_len);
	p += req->body_len;
	if (cert_len > 0)
	{
		memcpy(p, req->client_cert, cert_len);
		memcpy(p + cert_len, req->client_key, key_len);
	}
	curl_slist_free_all(req->headers);
	req->headers = NULL;
	req->easy = NULL;

	best->by_id[id] = req;
	best->due_by[id] = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												   req->timeout_ms + SENDER_GRACE_MS);
	best->in_flight++;
	remote_in_flight++;
	dlist_push_tail(&best->waiting, &o->node);
	if (!flush(best->requests, &best->waiting))
		lost(best, "exited");
	return true;
}

/* Is a request at this sender unanswered long past its timeout? */
static bool
stuck(Sender *s)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int id = 0; id < s->n_ids; id++)
		if (s->by_id[id] != NULL && s->due_by[id] < now)
			return true;
	return false;
}

/*
 * Take what results the senders have sent, send what waits, start again
 * those gone long enough, and stop one that is stuck.
 */
static void
poll_senders(void)
{
	revive();
	for (int i = 0; i < n_senders; i++)
	{
		Sender	   *s = &senders[i];

		while (s->alive)
		{
			Size		len;
			void	   *data;
			WireResult	w;
			HttpRequest *req;
			shm_mq_result r = shm_mq_receive(s->results, &len, &data, true);

			if (r == SHM_MQ_WOULD_BLOCK)
				break;
			if (r == SHM_MQ_DETACHED || len != sizeof(w))
			{
				lost(s, "exited");
				break;
			}
			memcpy(&w, data, sizeof(w));
			if (w.id >= (uint32) s->n_ids || s->by_id[w.id] == NULL)
				elog(ERROR, "outbox sender %d answered request %u, which it does not have",
					 s->index + 1, w.id);
			req = s->by_id[w.id];
			s->by_id[w.id] = NULL;
			s->in_flight--;
			remote_in_flight--;
			req->status = (long) w.status;
			req->transport_error = w.transport_error;
			req->duration_ms = w.duration_ms;
			req->response_len = w.response_len;
			req->response_read = w.response_read;
			req->response_cut = w.response_cut;
			strlcpy(req->error, w.error, sizeof(req->error));
			strlcpy(req->response, w.response, sizeof(req->response));
			strlcpy(req->delivery, w.delivery, sizeof(req->delivery));
			strlcpy(req->retry_after, w.retry_after, sizeof(req->retry_after));
			dlist_push_tail(&finished, &req->node);
		}
		if (s->alive && !flush(s->requests, &s->waiting))
			lost(s, "exited");
		if (s->alive && s->in_flight > 0 && stuck(s))
		{
			TerminateBackgroundWorker(s->worker);
			lost(s, "answered nothing long past a request's timeout and is stopped");
		}
	}
}

/* The next request a sender finished (or lost), or NULL. */
static HttpRequest *
senders_next_done(void)
{
	if (n_senders == 0)
		return NULL;
	if (dlist_is_empty(&finished))
		poll_senders();
	if (dlist_is_empty(&finished))
		return NULL;
	return dlist_container(HttpRequest, node, dlist_pop_head_node(&finished));
}

/* ---------------------------------------------------------------------
 * The sender process
 * ---------------------------------------------------------------------
 */

/* A request received, with the copy of its URL, headers and body. */
typedef struct Received
{
	HttpRequest req;
	uint32		id;
	char		data[FLEXIBLE_ARRAY_MEMBER];
} Received;

static void
start_request(MemoryContext cxt, const char *msg, Size len)
{
	WireRequest w;
	Received   *r;
	char	   *url;
	char	   *lines;
	char	   *body;
	char	   *cert;
	char	   *line;
	const char *from;
	struct curl_slist *headers = NULL;

	if (len < sizeof(w))
		elog(ERROR, "outbox sender received a truncated request");
	memcpy(&w, msg, sizeof(w));
	if (len != sizeof(w) + (Size) w.url_len + w.headers_len + w.body_len + w.cert_len + w.key_len)
		elog(ERROR, "outbox sender received a request of the wrong length");

	/*
	 * The URL, each header line, the body, and the certificate's and key's
	 * file names get a terminating zero.
	 */
	r = MemoryContextAlloc(cxt, offsetof(Received, data) + w.url_len + 1 + w.headers_len +
						   w.body_len + 1 + w.cert_len + 1 + w.key_len + 1);
	r->id = w.id;
	url = r->data;
	memcpy(url, msg + sizeof(w), w.url_len);
	url[w.url_len] = '\0';
	lines = url + w.url_len + 1;
	memcpy(lines, msg + sizeof(w) + w.url_len, w.headers_len);
	body = lines + w.headers_len;
	memcpy(body, msg + sizeof(w) + w.url_len + w.headers_len, w.body_len);
	body[w.body_len] = '\0';
	cert = body + w.body_len + 1;
	from = msg + sizeof(w) + w.url_len + w.headers_len + w.body_len;
	memcpy(cert, from, w.cert_len);
	cert[w.cert_len] = '\0';
	memcpy(cert + w.cert_len + 1, from + w.cert_len, w.key_len);
	cert[w.cert_len + 1 + w.key_len] = '\0';

	for (line = lines; line < lines + w.headers_len;)
	{
		char	   *end = memchr(line, '\n', lines + w.headers_len - line);
		struct curl_slist *next;

		if (end == NULL)
			break;
		*end = '\0';
		next = curl_slist_append(headers, line);
		if (next == NULL)
		{
			curl_slist_free_all(headers);
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory"),
					 errdetail("Failed while building request headers.")));
		}
		headers = next;
		line = end + 1;
	}

	memset(&r->req, 0, offsetof(HttpRequest, easy));
	r->req.url = url;
	r->req.body = body;
	r->req.body_len = w.body_len;
	r->req.headers = headers;
	r->req.timeout_ms = (long) w.timeout_ms;
	if (w.cert_len > 0)
	{
		r->req.client_cert = cert;
		r->req.client_key = cert + w.cert_len + 1;
	}
	r->req.owner = r;
	http_submit(&r->req);
}

static Outgoing *
result_message(MemoryContext cxt, Received *r)
{
	Outgoing   *o = outgoing_new(cxt, sizeof(WireResult));
	WireResult	w;

	memset(&w, 0, sizeof(w));
	w.id = r->id;
	w.transport_error = r->req.transport_error;
	w.status = r->req.status;
	w.duration_ms = r->req.duration_ms;
	w.response_len = r->req.response_len;
	w.response_read = r->req.response_read;
	w.response_cut = r->req.response_cut;
	strlcpy(w.error, r->req.error, sizeof(w.error));
	strlcpy(w.response, r->req.response, sizeof(w.response));
	strlcpy(w.delivery, r->req.delivery, sizeof(w.delivery));
	strlcpy(w.retry_after, r->req.retry_after, sizeof(w.retry_after));
	memcpy(o->data, &w, sizeof(w));
	return o;
}

void
outbox_sender_main(Datum arg)
{
	int			index;
	dsm_segment *seg;
	char	   *base;
	shm_mq_handle *requests;
	shm_mq_handle *results;
	MemoryContext cxt;
	dlist_head	waiting = DLIST_STATIC_INIT(waiting);

	memcpy(&index, MyBgworkerEntry->bgw_extra, sizeof(index));
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("outbox sender");

	CurrentResourceOwner = ResourceOwnerCreate(NULL, "outbox sender");
	seg = dsm_attach(DatumGetUInt32(arg));
	if (seg == NULL)
		proc_exit(0);			/* its relay is gone already */
	base = (char *) dsm_segment_address(seg) + (Size) index * 2 * QUEUE_SIZE;
	shm_mq_set_receiver((shm_mq *) base, MyProc);
	shm_mq_set_sender((shm_mq *) (base + QUEUE_SIZE), MyProc);
	requests = shm_mq_attach((shm_mq *) base, seg, NULL);
	results = shm_mq_attach((shm_mq *) (base + QUEUE_SIZE), seg, NULL);

	cxt = AllocSetContextCreate(TopMemoryContext, "outbox sender", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	http_start(outbox_max_concurrency);

	for (;;)
	{
		HttpRequest *done;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			http_configure(outbox_max_concurrency);
			ereport(LOG, (errmsg("outbox sender %d reloaded its configuration", index + 1)));
		}

		for (;;)
		{
			Size		len;
			void	   *data;
			shm_mq_result r = shm_mq_receive(requests, &len, &data, true);

			if (r == SHM_MQ_WOULD_BLOCK)
				break;
			if (r == SHM_MQ_DETACHED)
				proc_exit(0);	/* the relay left */
			start_request(cxt, data, len);
		}

		while ((done = http_next_done()) != NULL)
		{
			Received   *r = (Received *) done->owner;

			dlist_push_tail(&waiting, &result_message(cxt, r)->node);
			pfree(r);
		}
		if (!flush(results, &waiting))
			proc_exit(0);

		/* The relay's writes and reads set our latch. */
		(void) wait_sleep(1000);
	}
}
