/* The signals that stop a run and the watch on observer processes
 * (signals.h). */
#define _GNU_SOURCE
#include "agent/signals.h"

#include <signal.h>
#include <unistd.h>

static volatile sig_atomic_t got_signal;

int agent_signal(void) { return got_signal; }
const volatile sig_atomic_t *agent_signal_flag(void) { return &got_signal; }

static void on_signal(int sig)
{
    if (got_signal) _exit(128 + sig);
    got_signal = sig;
}

void agent_install_signals(void)
{
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static agent_ended_fn watch_ended;  /* agent_watch_observers; set before the run */
static void *watch_user;

void agent_watch_observers(agent_ended_fn ended, void *user)
{
    watch_ended = ended;
    watch_user = user;
}

bool agent_observer_ended(int rank, char *how, size_t cap)
{
    return watch_ended && watch_ended(rank, how, cap, watch_user);
}
