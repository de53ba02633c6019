/*-------------------------------------------------------------------------
 *
 * credentials.h
 *	  An endpoint's client authentication as the relay applies it: the
 *	  Authorization header it adds, its client certificate, and its OAuth2
 *	  tokens, fetched without blocking the relay and cached.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_CREDENTIALS_H
#define OUTBOX_CREDENTIALS_H

#include "utils/hsearch.h"

#include "targets/auth.h"
#include "relay/delivery.h"

/* What an endpoint's deliveries may do now. */
typedef enum CredentialState
{
	CREDENTIALS_READY,			/* be sent */
	CREDENTIALS_WAIT,			/* wait: its OAuth2 token is being fetched */
	CREDENTIALS_FAILED			/* fail: fetching a token failed just now */
} CredentialState;

/* An endpoint's client authentication, in a memory context of its own. */
typedef struct EndpointAuth
{
	MemoryContext cxt;			/* holds this and its strings */
	AuthConfig	cfg;
	char	   *header;			/* "Authorization: Bearer ..." now, or NULL */
	/* OAuth2 */
	char	   *token;			/* the access token now, or NULL */
	char	   *old_token;		/* the one before, still redacted */
	TimestampTz expires_at;		/* when the token is fetched again */
	uint32		generation;		/* of the token: which one a request had */
	uint64		fetch;			/* the fetch in flight, by number; 0: none */
	TimestampTz failed_at;		/* the last fetch failed then; 0: it did not */
	char		failure[CURL_ERROR_SIZE];	/* and why, for the attempt log */
} EndpointAuth;

extern void credentials_load(RelayEndpoint *ep, AuthConfig *cfg, MemoryContext parent);
extern void credentials_free(RelayEndpoint *ep);
extern CredentialState credentials_state(RelayEndpoint *ep);
extern bool credentials_set_authorization(const RelayEndpoint *ep);
extern bool credentials_fetching(const RelayEndpoint *ep);
extern void credentials_start(HTAB *endpoints);
extern void credentials_fetch_done(HttpRequest *req);
extern RelayEndpoint *credentials_next_answered(void);
extern void credentials_refused(RelayEndpoint *ep, uint32 generation);
extern int	credentials_secrets(const RelayEndpoint *ep, const char **values);

#endif							/* OUTBOX_CREDENTIALS_H */
