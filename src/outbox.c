/*-------------------------------------------------------------------------
 *
 * outbox.c
 *	  Module entry point: the magic block and _PG_init, which only calls
 *	  each part's init.
 *
 * Loaded through shared_preload_libraries, the module defines its GUCs,
 * reserves shared memory, and registers the launcher (which starts a relay
 * per database with outbox installed) with the hook that stops a relay
 * before DROP DATABASE and its kin (launcher.c).  Loaded on
 * demand (by a plain CREATE EXTENSION or the first call of a function) it
 * only defines the GUCs; functions that need shared memory then say so.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#include "guc.h"
#include "relay/launcher.h"
#include "shmem.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	outbox_guc_init();
	outbox_shmem_init();
	outbox_relay_register();
}
