/*-------------------------------------------------------------------------
 *
 * sign.h
 *	  Standard Webhooks signing secrets and signatures.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_SIGN_H
#define OUTBOX_SIGN_H

#define OUTBOX_SECRET_PREFIX	"whsec_"
#define OUTBOX_SECRET_PREFIX_LEN	(sizeof(OUTBOX_SECRET_PREFIX) - 1)
#define OUTBOX_KEY_MIN			24
#define OUTBOX_KEY_MAX			64
#define OUTBOX_NEW_KEY_LEN		32
/* base64 of a 32-byte HMAC-SHA256, plus NUL */
#define OUTBOX_SIGNATURE_LEN	45

extern bool outbox_secret_key(const char *secret, int len, uint8 *key, int *keylen);
extern void outbox_secret_key_checked(text *secret, uint8 *key, int *keylen);
extern void outbox_sign(const uint8 *key, int keylen,
						const char *msgid, int msgidlen, int64 timestamp,
						const char *body, size_t bodylen,
						char *signature);

#endif							/* OUTBOX_SIGN_H */
