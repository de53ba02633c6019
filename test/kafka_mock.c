/*
 * kafka_mock.c
 *	  A Kafka cluster for the tests: librdkafka's mock cluster (rdkafka_mock.h)
 *	  served on 127.0.0.1 to other processes, driven through stdin.
 *
 * There is no Kafka broker on the test machines; librdkafka ships a mock
 * cluster that speaks the Kafka protocol well enough for a producer, an
 * idempotent one included, and for consumers such as kcat.  This program
 * starts one with N brokers (default 3), prints its bootstrap servers as
 * the first line of stdout, then reads one command a line and answers
 * "ok" (or "error: ..."):
 *
 *	topic NAME PARTITIONS			create a topic, replication factor 3 (or
 *									the number of brokers)
 *	error APIKEY CODE [COUNT]		the next COUNT requests of APIKEY (0:
 *									Produce, 3: Metadata) fail with the Kafka
 *									error CODE (7 request timed out, 6 not
 *									leader, 10 message too large)
 *	clear APIKEY					forget the errors pushed for APIKEY
 *	topicerror NAME CODE			metadata requests for topic NAME answer
 *									with error CODE (3: unknown topic, as a
 *									cluster with auto-creation off does)
 *	down BROKER | up BROKER			take a broker (1..N, -1: all) down or up
 *	rtt BROKER MS					delay a broker's answers
 *	quit							(or end of input) stop the cluster
 *
 * Build: cc -o kafka_mock kafka_mock.c -lrdkafka
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

int
main(int argc, char **argv)
{
	int			brokers = argc > 1 ? atoi(argv[1]) : 3;
	char		errstr[512];
	char		line[1024];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mc;

	if (brokers < 1)
		brokers = 1;
	/* The handle only keeps the cluster's books; it connects nowhere. */
	rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
	{
		fprintf(stderr, "kafka_mock: %s\n", errstr);
		return 1;
	}
	mc = rd_kafka_mock_cluster_new(rk, brokers);
	if (mc == NULL)
	{
		fprintf(stderr, "kafka_mock: could not start the mock cluster\n");
		return 1;
	}
	printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
	fflush(stdout);

	while (fgets(line, sizeof(line), stdin) != NULL)
	{
		char		name[512];
		int			a = 0;
		int			b = 0;
		int			c = 1;
		rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;

		if (sscanf(line, "topic %511s %d", name, &a) == 2)
			err = rd_kafka_mock_topic_create(mc, name, a, brokers < 3 ? brokers : 3);
		else if (sscanf(line, "error %d %d %d", &a, &b, &c) >= 2)
		{
			for (int i = 0; i < c; i++)
				rd_kafka_mock_push_request_errors(mc, (int16_t) a, 1, (rd_kafka_resp_err_t) b);
		}
		else if (sscanf(line, "topicerror %511s %d", name, &a) == 2)
			rd_kafka_mock_topic_set_error(mc, name, (rd_kafka_resp_err_t) a);
		else if (sscanf(line, "clear %d", &a) == 1)
			rd_kafka_mock_clear_request_errors(mc, (int16_t) a);
		else if (sscanf(line, "down %d", &a) == 1)
			err = rd_kafka_mock_broker_set_down(mc, a);
		else if (sscanf(line, "up %d", &a) == 1)
			err = rd_kafka_mock_broker_set_up(mc, a);
		else if (sscanf(line, "rtt %d %d", &a, &b) == 2)
			err = rd_kafka_mock_broker_set_rtt(mc, a, b);
		else if (strncmp(line, "quit", 4) == 0)
			break;
		else
		{
			printf("error: unknown command\n");
			fflush(stdout);
			continue;
		}
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			printf("error: %s\n", rd_kafka_err2str(err));
		else
			printf("ok\n");
		fflush(stdout);
	}
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(rk);
	return 0;
}
