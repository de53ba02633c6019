/*-------------------------------------------------------------------------
 *
 * auth.h
 *	  Client authentication of an endpoint: a bearer token, a client
 *	  certificate (mutual TLS), an OAuth2 client-credentials grant; its
 *	  checks, and the OAuth2 token request and response.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_AUTH_H
#define OUTBOX_AUTH_H

#include <curl/curl.h>

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

/* Bounds of the values, and of a token response kept whole. */
#define OUTBOX_AUTH_MAX_TOKEN		4096
#define OUTBOX_AUTH_MAX_VALUE		1024
#define OUTBOX_TOKEN_RESPONSE_MAX	(16 * 1024)

/*
 * An endpoint's auth object, read.  Each form is NULL when not given:
 * bearer, or the certificate and key (always both), or the OAuth2 grant
 * (token_url, client_id and client_secret all set; scope optional); for
 * the broker targets a user name and password (always both, at the top
 * level for RabbitMQ, NATS and Redis, in "sasl" with its mechanism for
 * Kafka) or a NATS token.  Which keys a URL's scheme takes is
 * outbox._check_auth_target's to say.
 */
typedef struct AuthConfig
{
	char	   *bearer;
	char	   *client_cert;
	char	   *client_key;
	char	   *token_url;
	char	   *client_id;
	char	   *client_secret;
	char	   *scope;
	char	   *username;
	char	   *password;
	char	   *token;
	char	   *sasl_mechanism;	/* PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 */
} AuthConfig;

/*
 * An endpoint's client authentication as it is applied, in a memory
 * context of its own: the relay keeps it (relay/credentials.c fetches its
 * OAuth2 tokens), targets read it.
 */
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

/* What auth objects are, for errors. */
#define OUTBOX_AUTH_FORMS \
	"auth is {\"bearer\": token}, {\"client_cert\": path, \"client_key\": path}, " \
	"or {\"oauth2\": {\"token_url\": url, \"client_id\": id, \"client_secret\": secret, " \
	"\"scope\": scopes}}; client_cert and client_key may stand beside bearer or oauth2.  " \
	"A broker's auth is {\"username\": name, \"password\": password} (RabbitMQ, NATS, " \
	"Redis, whose requirepass is the user \"default\"'s), " \
	"{\"token\": token} (NATS) or {\"sasl\": {\"mechanism\": m, \"username\": name, " \
	"\"password\": password}} (Kafka)."

extern const char *auth_read(Jsonb *auth, AuthConfig *out, MemoryContext cxt);
extern bool auth_equal(const AuthConfig *a, const AuthConfig *b);
extern bool auth_same(const char *a, const char *b);
extern char *auth_keep(const char *s);
extern void auth_forget(char *s);
extern char *auth_token_request_body(const AuthConfig *a);
extern char *auth_basic_header(const AuthConfig *a);
extern bool auth_token_response(char *body, size_t len, char **token,
								double *expires_in, char *why, size_t why_len);
extern void auth_oauth_error(char *body, size_t len, char *out, size_t out_len);
extern bool auth_sets_authorization(const EndpointAuth *a);
extern int	auth_secrets(const EndpointAuth *a, const char **values);

#endif							/* OUTBOX_AUTH_H */
