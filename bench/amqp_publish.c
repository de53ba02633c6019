/*
 * bench/amqp_publish.c: a plain librabbitmq publisher, the baseline of the
 * RabbitMQ bench (bench/rabbitmq.sh).  It publishes each line of its input
 * as one message, as the RabbitMQ target does (persistent, mandatory, a
 * message_id, on one channel in confirm mode), keeping up to WINDOW
 * messages unconfirmed and reading confirms as they arrive, and prints the
 * number of messages confirmed and the seconds taken from the first
 * publish to the last confirm.
 *
 *     amqp_publish HOST PORT EXCHANGE ROUTING_KEY WINDOW < lines
 *
 * Logs in as guest on the default virtual host.  Exit status 1 on any
 * error, a returned message or a nack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

static void
die(const char *what, const char *why)
{
	fprintf(stderr, "amqp_publish: %s: %s\n", what, why);
	exit(1);
}

static void
check_reply(amqp_rpc_reply_t r, const char *what)
{
	if (r.reply_type != AMQP_RESPONSE_NORMAL)
		die(what, r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ?
			amqp_error_string2(r.library_error) : "the broker refused");
}

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Read one frame (waiting); returns how many messages it confirmed. */
static unsigned long
read_confirm(amqp_connection_state_t conn, unsigned long confirmed)
{
	amqp_frame_t frame;
	int			rc = amqp_simple_wait_frame(conn, &frame);

	if (rc != AMQP_STATUS_OK)
		die("reading confirms", amqp_error_string2(rc));
	if (frame.frame_type != AMQP_FRAME_METHOD)
		return 0;
	if (frame.payload.method.id == AMQP_BASIC_ACK_METHOD)
	{
		amqp_basic_ack_t *a = frame.payload.method.decoded;

		return a->multiple ? a->delivery_tag - confirmed : 1;
	}
	if (frame.payload.method.id == AMQP_BASIC_RETURN_METHOD)
		die("publishing", "a message came back unroutable");
	if (frame.payload.method.id == AMQP_BASIC_NACK_METHOD)
		die("publishing", "the broker refused a message (nack)");
	die("publishing", "the broker closed the channel or connection");
	return 0;
}

int
main(int argc, char **argv)
{
	amqp_connection_state_t conn;
	amqp_socket_t *sock;
	char	   *line = NULL;
	size_t		room = 0;
	ssize_t		len;
	unsigned long published = 0;
	unsigned long confirmed = 0;
	unsigned long window;
	double		start = 0;

	if (argc != 6)
	{
		fprintf(stderr, "usage: amqp_publish HOST PORT EXCHANGE ROUTING_KEY WINDOW < lines\n");
		return 2;
	}
	window = strtoul(argv[5], NULL, 10);
	conn = amqp_new_connection();
	sock = amqp_tcp_socket_new(conn);
	if (sock == NULL || amqp_socket_open(sock, argv[1], atoi(argv[2])) != AMQP_STATUS_OK)
		die("connecting", argv[1]);
	check_reply(amqp_login(conn, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 0, AMQP_SASL_METHOD_PLAIN,
						   "guest", "guest"), "logging in");
	amqp_channel_open(conn, 1);
	check_reply(amqp_get_rpc_reply(conn), "opening a channel");
	amqp_confirm_select(conn, 1);
	check_reply(amqp_get_rpc_reply(conn), "selecting confirms");

	while ((len = getline(&line, &room, stdin)) > 0)
	{
		amqp_basic_properties_t props;
		char		id[32];

		if (line[len - 1] == '\n')
			line[--len] = '\0';
		if (published == 0)
			start = now();
		snprintf(id, sizeof(id), "m-%lu", published);
		memset(&props, 0, sizeof(props));
		props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
			AMQP_BASIC_MESSAGE_ID_FLAG;
		props.content_type = amqp_cstring_bytes("application/json");
		props.delivery_mode = 2;
		props.message_id = amqp_cstring_bytes(id);
		if (amqp_basic_publish(conn, 1, amqp_cstring_bytes(argv[3]), amqp_cstring_bytes(argv[4]),
							   1, 0, &props, (amqp_bytes_t) {len, line}) != AMQP_STATUS_OK)
			die("publishing", "the connection failed");
		published++;
		while (published - confirmed >= window)
			confirmed += read_confirm(conn, confirmed);
	}
	while (confirmed < published)
		confirmed += read_confirm(conn, confirmed);
	printf("%lu %.3f\n", confirmed, now() - start);
	amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
	amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
	amqp_destroy_connection(conn);
	free(line);
	return 0;
}
