/*-------------------------------------------------------------------------
 *
 * address.h
 *	  Which network addresses the relay may connect to.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_ADDRESS_H
#define OUTBOX_ADDRESS_H

#include <sys/socket.h>

#define OUTBOX_MAX_NETWORKS 64

typedef struct Network
{
	int			family;			/* AF_INET or AF_INET6 */
	uint8		addr[16];
	int			prefix;			/* bits */
} Network;

typedef struct NetworkList
{
	int			n;
	Network		nets[OUTBOX_MAX_NETWORKS];
} NetworkList;

extern bool address_parse_networks(const char *text, NetworkList *list, const char **error);
extern bool address_networks_equal(const NetworkList *a, const NetworkList *b);
extern const char *address_refusal(const struct sockaddr *sa, const NetworkList *allowed);

#endif							/* OUTBOX_ADDRESS_H */
