/*-------------------------------------------------------------------------
 *
 * http.c
 *	  HTTP through libcurl.  For now: the check of endpoint URLs, with
 *	  libcurl's own URL parser so that what is accepted here is exactly what
 *	  libcurl will later request.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "fmgr.h"
#include "utils/builtins.h"

#include "http.h"

PG_FUNCTION_INFO_V1(outbox_check_url);

static void
bad_url(const char *url, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid endpoint URL \"%s\"", url),
			 errdetail("%s", detail)));
}

/*
 * outbox._check_url(text) returns text: the URL as libcurl normalizes it.
 * Only absolute http and https URLs with a host and without credentials
 * are accepted.  All libcurl memory is freed before any error is raised.
 */
Datum
outbox_check_url(PG_FUNCTION_ARGS)
{
	char	   *url = text_to_cstring(PG_GETARG_TEXT_PP(0));
	CURLU	   *h;
	CURLUcode	rc;
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *user = NULL;
	char	   *full = NULL;
	char	   *result = NULL;
	const char *problem = NULL;
	char		detail[256];

	if (strlen(url) > OUTBOX_MAX_URL)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("endpoint URL is too long"),
				 errdetail("A URL is at most %d bytes.", OUTBOX_MAX_URL)));

	h = curl_url();
	if (h == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));

	rc = curl_url_set(h, CURLUPART_URL, url, 0);
	if (rc != CURLUE_OK)
	{
		snprintf(detail, sizeof(detail), "libcurl: %s.", curl_url_strerror(rc));
		problem = detail;
	}
	else if (curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
			 (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0))
		problem = "Only http and https URLs are accepted.";
	else if (curl_url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		problem = "The URL has no host.";
	else if (curl_url_get(h, CURLUPART_USER, &user, 0) == CURLUE_OK)
		problem = "Credentials in the URL are not accepted; send them in the endpoint's headers.";
	else if (curl_url_set(h, CURLUPART_FRAGMENT, NULL, 0) != CURLUE_OK ||
			 curl_url_get(h, CURLUPART_URL, &full, 0) != CURLUE_OK)
		problem = "libcurl could not rebuild the URL.";
	else
		result = pstrdup(full);

	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(full);
	curl_url_cleanup(h);

	if (problem != NULL)
		bad_url(url, problem);
	PG_RETURN_TEXT_P(cstring_to_text(result));
}
