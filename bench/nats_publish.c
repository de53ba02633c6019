/*
 * bench/nats_publish.c: the baseline of bench/nats.sh, a plain JetStream
 * publisher written with libnats, as outbox's NATS target publishes:
 * asynchronous publishes (js_PublishMsgAsync) with an acknowledgement
 * handler, each message with the headers outbox sends (Nats-Msg-Id and
 * webhook-id unique, type, key, timestamp), at most MAX_PENDING
 * unacknowledged at once (bench/nats.sh passes what outbox has in flight
 * for one endpoint at most: a page, 4 x outbox.batch_size, 2000).
 *
 *     nats_publish SERVER_URL SUBJECT N SIZE [MAX_PENDING]
 *
 * Publishes N messages of SIZE bytes, waits for every acknowledgement, and
 * prints "acked A errors E seconds S rate R".  Exits 1 if any publish was
 * not acknowledged.
 *
 * Build: cc -O2 -o nats_publish bench/nats_publish.c -lnats
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

static atomic_long acked;
static atomic_long errors;

static void
ack_cb(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	if (pa != NULL)
		atomic_fetch_add(&acked, 1);
	else
	{
		if (atomic_fetch_add(&errors, 1) == 0 && pae != NULL)
			fprintf(stderr, "nats_publish: %s\n", pae->ErrText ? pae->ErrText : "error");
	}
	natsMsg_Destroy(msg);
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
check(natsStatus s, const char *what)
{
	if (s != NATS_OK)
	{
		fprintf(stderr, "nats_publish: %s: %s\n", what, natsStatus_GetText(s));
		exit(1);
	}
}

int
main(int argc, char **argv)
{
	natsOptions *opts;
	natsConnection *nc;
	jsCtx	   *js;
	jsOptions	jo;
	jsPubOptions po;
	long		n;
	int			size;
	char	   *body;
	char		id[64];
	char		key[32];
	double		t0;
	double		t1;

	if (argc < 5)
	{
		fprintf(stderr, "usage: nats_publish SERVER_URL SUBJECT N SIZE [MAX_PENDING]\n");
		return 2;
	}
	n = atol(argv[3]);
	size = atoi(argv[4]);
	body = malloc(size + 1);
	memset(body, 'x', size);
	body[size] = '\0';

	check(natsOptions_Create(&opts), "options");
	check(natsOptions_SetURL(opts, argv[1]), "options");
	check(natsConnection_Connect(&nc, opts), "connect");
	jsOptions_Init(&jo);
	jo.PublishAsync.AckHandler = ack_cb;
	jo.PublishAsync.MaxPending = argc > 5 ? atol(argv[5]) : 1000;
	jo.PublishAsync.StallWait = 10000;
	check(natsConnection_JetStream(&js, nc, &jo), "jetstream");
	jsPubOptions_Init(&po);
	po.MaxWait = 30000;

	t0 = now();
	for (long i = 0; i < n; i++)
	{
		natsMsg    *msg;

		snprintf(id, sizeof(id), "%08lx-%04x-7000-8000-%012lx", (long) t0, (unsigned) getpid() & 0xffff, i);
		snprintf(key, sizeof(key), "customer-%ld", i % 1000);
		check(natsMsg_Create(&msg, argv[2], NULL, body, size), "message");
		natsMsgHeader_Set(msg, "Nats-Msg-Id", id);
		natsMsgHeader_Set(msg, "webhook-id", id);
		natsMsgHeader_Set(msg, "type", "bench.event");
		natsMsgHeader_Set(msg, "key", key);
		natsMsgHeader_Set(msg, "timestamp", "2026-12-01T00:00:00.000000Z");
		check(js_PublishMsgAsync(js, &msg, &po), "publish");
	}
	po.MaxWait = 60000;
	check(js_PublishAsyncComplete(js, &po), "waiting for acknowledgements");
	t1 = now();
	printf("acked %ld errors %ld seconds %.3f rate %.0f\n",
		   (long) atomic_load(&acked), (long) atomic_load(&errors), t1 - t0, n / (t1 - t0));
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	natsOptions_Destroy(opts);
	return atomic_load(&acked) == n ? 0 : 1;
}
