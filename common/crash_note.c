/* Crash lines around foreign code (crash_note.h). The lines are written
 * before the stretch begins; the handler only writes one and re-raises:
 * async-signal-safe. */
#define _GNU_SOURCE
#include "common/crash_note.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const int signals[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
#define N_SIGNALS (int)(sizeof signals / sizeof signals[0])

static char lines[N_SIGNALS][800];
static size_t lens[N_SIGNALS];
static struct sigaction before[N_SIGNALS];
static int active;

static void on_crash(int sig)
{
    for (int i = 0; i < N_SIGNALS; i++)
        if (signals[i] == sig) (void)!write(STDERR_FILENO, lines[i], lens[i]);
    /* the default action (SA_RESETHAND put it back): pending while this
     * handler runs, delivered as it returns; a fault that returns to its
     * instruction faults again, now fatally */
    raise(sig);
}

void crash_note_begin(const char *prog, const char *fmt, ...)
{
    char what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    struct sigaction sa = { .sa_handler = on_crash, .sa_flags = SA_RESETHAND };
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_SIGNALS; i++) {
        const char *abbrev = sigabbrev_np(signals[i]);
        int n = snprintf(lines[i], sizeof lines[i], "%s: crashed (signal %d, SIG%s) while %s\n", prog, signals[i],
                         abbrev ? abbrev : "?", what);
        lens[i] = n < 0 ? 0 : (size_t)n < sizeof lines[i] ? (size_t)n : sizeof lines[i] - 1;
        sigaction(signals[i], &sa, &before[i]);
    }
    active = 1;
}

void crash_note_end(void)
{
    if (!active) return;
    for (int i = 0; i < N_SIGNALS; i++) sigaction(signals[i], &before[i], NULL);
    active = 0;
}
