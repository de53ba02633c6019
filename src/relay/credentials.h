/*-------------------------------------------------------------------------
 *
 * credentials.h
 *	  An endpoint's client authentication as the relay keeps it (its
 *	  EndpointAuth, targets/auth.h, which its target reads): loaded with the
 *	  endpoint, and its OAuth2 tokens fetched without blocking the relay
 *	  and cached.
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

extern void credentials_load(RelayEndpoint *ep, AuthConfig *cfg, MemoryContext parent);
extern void credentials_free(RelayEndpoint *ep);
extern CredentialState credentials_state(RelayEndpoint *ep);
extern bool credentials_fetching(const RelayEndpoint *ep);
extern void credentials_start(HTAB *endpoints);
extern RelayEndpoint *credentials_next_answered(void);
extern void credentials_refused(RelayEndpoint *ep, uint32 generation);

#endif							/* OUTBOX_CREDENTIALS_H */
