/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  outbox's configuration parameters.
 *
 *-------------------------------------------------------------------------
 */
#ifndef OUTBOX_GUC_H
#define OUTBOX_GUC_H

extern int	outbox_max_payload_size;

extern void outbox_guc_init(void);

#endif							/* OUTBOX_GUC_H */
