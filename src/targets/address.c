/*-------------------------------------------------------------------------
 *
 * address.c
 *	  The address policy: targets in loopback, private, link-local (the
 *	  cloud metadata address among them), unspecified, multicast or
 *	  reserved ranges are refused unless outbox.allowed_networks names them.
 *	  IPv4-mapped and IPv4-compatible IPv6 addresses are judged by the IPv4
 *	  address inside.  IPv6 addresses that carry an IPv4 address to a
 *	  translator or tunnel (NAT64's 64:ff9b::/96, IPv4-translated
 *	  ::ffff:0:0/96, 6to4's 2002::/16, Teredo's 2001::/32) are refused when
 *	  the IPv4 address inside would be,
 *	  unless outbox.allowed_networks names the IPv6 address itself: what the
 *	  gateway reaches is not for this server to allow by its IPv4 rules.
 *	  No state but one static buffer for messages.  http.c applies the
 *	  policy to the address libcurl is about to connect to, so the address
 *	  checked is the address used (no window for a DNS answer to change in
 *	  between).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>

#include "targets/address.h"

typedef struct Range
{
	int			family;
	const char *addr;
	int			prefix;
	const char *what;
} Range;

static const Range refused[] = {
	{AF_INET, "0.0.0.0", 8, "an unspecified (\"this network\") address"},
	{AF_INET, "10.0.0.0", 8, "a private address"},
	{AF_INET, "100.64.0.0", 10, "a shared (carrier-grade NAT) address"},
	{AF_INET, "127.0.0.0", 8, "a loopback address"},
	{AF_INET, "169.254.0.0", 16, "a link-local address (cloud metadata lives here)"},
	{AF_INET, "172.16.0.0", 12, "a private address"},
	{AF_INET, "192.0.0.0", 24, "an IETF protocol address"},
	{AF_INET, "192.0.2.0", 24, "a documentation address"},
	{AF_INET, "192.168.0.0", 16, "a private address"},
	{AF_INET, "198.18.0.0", 15, "a benchmarking address"},
	{AF_INET, "198.51.100.0", 24, "a documentation address"},
	{AF_INET, "203.0.113.0", 24, "a documentation address"},
	{AF_INET, "224.0.0.0", 4, "a multicast address"},
	{AF_INET, "240.0.0.0", 4, "a reserved address"},
	{AF_INET6, "::", 128, "an unspecified address"},
	{AF_INET6, "::1", 128, "a loopback address"},
	{AF_INET6, "64:ff9b:1::", 48, "a local-use NAT64 address"},
	{AF_INET6, "100::", 64, "a discard-only address"},
	{AF_INET6, "2001:db8::", 32, "a documentation address"},
	{AF_INET6, "3fff::", 20, "a documentation address"},
	{AF_INET6, "fc00::", 7, "a private (unique local) address"},
	{AF_INET6, "fe80::", 10, "a link-local address"},
	{AF_INET6, "fec0::", 10, "a site-local address"},
	{AF_INET6, "ff00::", 8, "a multicast address"},
};

static bool
in_network(const uint8 *addr, const uint8 *net, int prefix)
{
	int			full = prefix / 8;
	int			rest = prefix % 8;

	if (memcmp(addr, net, full) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((addr[full] ^ net[full]) & (uint8) (0xff << (8 - rest))) == 0;
}

/*
 * Parse "10.1.0.0/16, ::1, 127.0.0.1/32" into list.  A bare address is a
 * host (/32 or /128).  On failure sets *error and returns false.
 */
bool
address_parse_networks(const char *text, NetworkList *list, const char **error)
{
	char	   *copy = strdup(text);
	char	   *save = NULL;

	list->n = 0;
	if (copy == NULL)
	{
		*error = "out of memory";
		return false;
	}
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		Network    *net;
		char	   *slash;
		char	   *end;
		int			max;

		while (isspace((unsigned char) *tok))
			tok++;
		end = tok + strlen(tok);
		while (end > tok && isspace((unsigned char) end[-1]))
			*--end = '\0';
		if (*tok == '\0')
			continue;
		if (list->n >= OUTBOX_MAX_NETWORKS)
		{
			*error = "too many networks";
			free(copy);
			return false;
		}
		net = &list->nets[list->n];
		memset(net, 0, sizeof(Network));
		slash = strchr(tok, '/');
		if (slash)
			*slash = '\0';
		if (inet_pton(AF_INET, tok, net->addr) == 1)
			net->family = AF_INET, max = 32;
		else if (inet_pton(AF_INET6, tok, net->addr) == 1)
			net->family = AF_INET6, max = 128;
		else
		{
			*error = "not an IPv4 or IPv6 network";
			free(copy);
			return false;
		}
		net->prefix = max;
		if (slash)
		{
			char	   *num_end;
			long		p = strtol(slash + 1, &num_end, 10);

			if (num_end == slash + 1 || *num_end != '\0' || p < 0 || p > max)
			{
				*error = "invalid prefix length";
				free(copy);
				return false;
			}
			net->prefix = (int) p;
		}
		list->n++;
	}
	free(copy);
	return true;
}

/* Why addr (of family) is in a refused range, or NULL. */
static const char *
range_refusal(int family, const uint8 *addr)
{
	for (size_t i = 0; i < lengthof(refused); i++)
	{
		uint8		net[16];

		if (refused[i].family != family)
			continue;
		if (inet_pton(family, refused[i].addr, net) != 1)
			continue;
		if (in_network(addr, net, refused[i].prefix))
			return refused[i].what;
	}
	return NULL;
}

/*
 * The IPv4 addresses an IPv6 address carries to a translator or tunnel:
 * how many (0 to 2) into v4, with the kind of address ("a NAT64") in *kind.
 */
static int
embedded_ipv4(const uint8 *a6, uint8 v4[2][4], const char **kind)
{
	static const uint8 nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
	static const uint8 translated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};

	if (memcmp(a6, nat64, 12) == 0 || memcmp(a6, translated, 12) == 0)
	{
		*kind = a6[1] == 0x64 ? "a NAT64" : "an IPv4-translated";
		memcpy(v4[0], a6 + 12, 4);
		return 1;
	}
	if (a6[0] == 0x20 && a6[1] == 0x02)
	{
		*kind = "a 6to4";
		memcpy(v4[0], a6 + 2, 4);
		return 1;
	}
	if (a6[0] == 0x20 && a6[1] == 0x01 && a6[2] == 0 && a6[3] == 0)
	{
		/* Teredo: the server, then the client's address inverted */
		*kind = "a Teredo";
		memcpy(v4[0], a6 + 4, 4);
		for (int i = 0; i < 4; i++)
			v4[1][i] = (uint8) ~a6[12 + i];
		return 2;
	}
	return 0;
}

/* Do two network lists allow the same networks, in the same order? */
bool
address_networks_equal(const NetworkList *a, const NetworkList *b)
{
	return a->n == b->n && memcmp(a->nets, b->nets, sizeof(Network) * a->n) == 0;
}

/*
 * NULL when the relay may connect to sa, else why not.  The reason is a
 * static string, or for an IPv4 address inside an IPv6 one a buffer of the
 * calling thread's that its next call overwrites: the broker targets'
 * threads (kafka.c's connect callback, rabbitmq.c's publishers) call this
 * too, each under a lock of its own, so the buffer is per thread.
 */
const char *
address_refusal(const struct sockaddr *sa, const NetworkList *allowed)
{
	static __thread char why_inside[128];
	uint8		addr[16];
	int			family;
	const char *why;

	if (sa->sa_family == AF_INET)
	{
		family = AF_INET;
		memcpy(addr, &((const struct sockaddr_in *) sa)->sin_addr, 4);
	}
	else if (sa->sa_family == AF_INET6)
	{
		static const uint8 mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		static const uint8 compat[12] = {0};
		const uint8 *a6 = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;

		family = AF_INET6;
		memcpy(addr, a6, 16);
		/* ::ffff:a.b.c.d and ::a.b.c.d are judged as a.b.c.d */
		if (memcmp(a6, mapped, 12) == 0 ||
			(memcmp(a6, compat, 12) == 0 && (a6[12] | a6[13] | a6[14]) != 0))
		{
			family = AF_INET;
			memcpy(addr, a6 + 12, 4);
		}
	}
	else
		return "not an IP address";

	for (int i = 0; i < allowed->n; i++)
		if (allowed->nets[i].family == family &&
			in_network(addr, allowed->nets[i].addr, allowed->nets[i].prefix))
			return NULL;

	if ((why = range_refusal(family, addr)) != NULL)
		return why;
	if (family == AF_INET6)
	{
		uint8		v4[2][4];
		const char *kind = NULL;
		int			n = embedded_ipv4(addr, v4, &kind);

		for (int i = 0; i < n; i++)
			if ((why = range_refusal(AF_INET, v4[i])) != NULL)
			{
				snprintf(why_inside, sizeof(why_inside),
						 "%s address carrying %s", kind, why);
				return why_inside;
			}
	}
	return NULL;
}
