/*
 * mask_check.c: a library preloaded into a test server (LD_PRELOAD) that
 * reports, on stderr (the server log), the signal mask of every thread
 * started in any of the server's processes.  PostgreSQL's signal handlers
 * must run only in a process's main thread; a thread started with any of
 * the signals PostgreSQL handles unblocked can take one of them.  Each
 * start is one line:
 *
 *   mask_check: pid P started a thread with every signal blocked
 *   mask_check: pid P started a thread with SIGALRM SIGUSR1 ... open
 *
 * t/032_thread_signals.pl reads them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

typedef int (*create_fn) (pthread_t *, const pthread_attr_t *, void *(*) (void *), void *);

/* The signals PostgreSQL's processes handle. */
static const struct
{
	int			signo;
	const char *name;
}			handled[] = {
	{SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"},
	{SIGTERM, "SIGTERM"}, {SIGALRM, "SIGALRM"}, {SIGUSR1, "SIGUSR1"},
	{SIGUSR2, "SIGUSR2"}, {SIGCHLD, "SIGCHLD"}, {SIGURG, "SIGURG"},
};

int
pthread_create(pthread_t *thread, const pthread_attr_t *attr,
			   void *(*start) (void *), void *arg)
{
	static create_fn real = NULL;
	sigset_t	mask;
	char		line[256];
	size_t		len;
	int			open = 0;

	if (real == NULL)
		real = (create_fn) dlsym(RTLD_NEXT, "pthread_create");
	pthread_sigmask(SIG_SETMASK, NULL, &mask);
	len = (size_t) snprintf(line, sizeof(line), "mask_check: pid %d started a thread with", (int) getpid());
	for (size_t i = 0; i < sizeof(handled) / sizeof(handled[0]); i++)
		if (!sigismember(&mask, handled[i].signo))
		{
			open++;
			len += (size_t) snprintf(line + len, sizeof(line) - len, " %s", handled[i].name);
		}
	if (open > 0)
		len += (size_t) snprintf(line + len, sizeof(line) - len, " open\n");
	else
		len += (size_t) snprintf(line + len, sizeof(line) - len, " every signal blocked\n");
	/* one write: lines of processes writing at once stay whole */
	if (write(STDERR_FILENO, line, len) < 0)
		(void) 0;
	return real(thread, attr, start, arg);
}
