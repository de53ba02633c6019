/*-------------------------------------------------------------------------
 *
 * store.h
 *	  Every SQL statement the relay runs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_STORE_H
#define OUTBOX_STORE_H

#include "targets/auth.h"
#include "relay/delivery.h"

/*
 * OUTBOX_VERSION, the version of the extension's SQL this library works
 * with, is outbox.control's default_version, passed in by the Makefile.
 */
#ifndef OUTBOX_VERSION
#error "OUTBOX_VERSION is defined by the Makefile, from outbox.control"
#endif

/* The bounds of an endpoint's timeout (outbox._check_endpoint_settings). */
#define OUTBOX_MIN_TIMEOUT_MS	1000
#define OUTBOX_MAX_TIMEOUT_MS	300000

/*
 * An endpoint's row as outbox._relay_endpoints() returns it, its secrets
 * turned into keys and its format into the enum (store_load_endpoints).
 */
typedef struct EndpointRow
{
	int			id;
	char	   *name;
	char	   *url;
	char	   *headers;		/* "name: value\n" lines */
	char	  **patterns;		/* event-type patterns it subscribes to */
	int			npatterns;
	bool		follows;		/* its position follows the stream */
	long		timeout_ms;		/* clamped to the bounds above */
	int			max_attempts;
	bool		ordered;
	bool		active;			/* not paused, not disabled */
	bool		key_ok;			/* its secret is valid: key and keylen are set */
	uint8		key[OUTBOX_KEY_MAX];
	int			keylen;
	uint8		old_key[OUTBOX_KEY_MAX];
	int			old_keylen;		/* 0: no previous secret, or an invalid one */
	int			max_in_flight;	/* 0: NULL, outbox.endpoint_concurrency */
	int64		max_age_ms;		/* 0: NULL, no limit */
	bool		format_ok;		/* its format is known: format is set */
	OutboxFormat format;
	bool		has_auth;		/* client authentication (auth.h) */
	const char *auth_problem;	/* what is wrong with it, or NULL */
	AuthConfig	auth;			/* its strings in the rows' memory */
	double		rate_limit;		/* requests a second; 0: NULL, none */
	TimestampTz changed_at;		/* its row's updated_at */
} EndpointRow;

/*
 * A page whose deliveries are all recorded, and the position it moves: an
 * endpoint's own, or with endpoint_id 0 the stream's.
 */
typedef struct PageDone
{
	int			endpoint_id;
	const char *batch;			/* the page's batch snapshot (text) */
	int64		last_id;
	bool		batch_done;
} PageDone;

/* One delivery's outcome, as outbox.outcome records it (store_record). */
typedef struct OutcomeRow
{
	int			endpoint_id;
	int64		id;
	const pg_uuid_t *event_id;
	int			attempt;
	OutcomeKind outcome;
	TimestampTz next_at;		/* 0: none */
	bool		sent;			/* a request went; the rest describe it */
	long		status;			/* 0: no response */
	const char *error;			/* "": none */
	double		duration_ms;
	const char *response;
	size_t		response_len;	/* 0: none kept */
	const char *disable_reason; /* NULL: the endpoint stays enabled */
} OutcomeRow;

/* What one record statement records (store_record). */
typedef struct RecordSet
{
	OutcomeRow *outcomes;
	int			noutcomes;
	PageDone   *pages;
	int			npages;
	int		   *detach;			/* endpoints that stop following the stream */
	int			ndetach;
	int		   *quiet;			/* endpoints whose successes alone leave
								 * their health row alone */
	int			nquiet;
} RecordSet;

extern Oid	store_extension_oid(void);
extern bool store_extension_present(void);
extern bool store_extension_ready(void);
extern void store_rotate(void);
extern int	store_load_endpoints(EndpointRow **rows, MemoryContext cxt);
extern bool store_read_stream(int limit, const char *ahead_of, int64 ahead_after,
							  EventRows *rows, MemoryContext cxt);
extern bool store_stream_at(const char *batch, int64 after_id);
extern void store_route_checks(int n, const int *eids, const pg_uuid_t *const *event_ids,
							   char *const *keys, const bool *ordered, bool verify,
							   bool *delivered, bool *blocked);
extern int	store_attach(const int *candidates, int n, int **attached);
extern int	store_due_endpoints(int **ids);
extern TimestampTz store_next_due(void);
extern bool store_read_page(int endpoint_id, int limit, bool verify, EventRows *rows,
							MemoryContext cxt);
extern bool store_read_due(int endpoint_id, int limit, bool verify, EventRows *rows,
						   MemoryContext cxt);
extern int	store_record(const RecordSet *set, int **locked, MemoryContext locked_cxt);

#endif							/* OUTBOX_STORE_H */
