/* What the agent learns from outside its RPC world: the signals that stop
 * a run (SIGINT, SIGTERM) and, where the caller can see them
 * (tributary-train, whose children they are), observer processes that
 * ended. Process-wide by nature (a signal handler has no user pointer);
 * below every other file of the agent. */
#ifndef TRIB_AGENT_SIGNALS_H
#define TRIB_AGENT_SIGNALS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* SIGINT/SIGTERM stop training at the end of the iteration in progress,
 * giving up the calls still in flight 5 s after the signal (agent_run then
 * writes the summary and the final checkpoint), or the wait for the
 * observers in rpc_init (a second one exits at once). */
void agent_install_signals(void);

/* How the agent learns at once that an observer process has ended, where
 * the caller can see it (tributary-train, whose children they are):
 * ended(rank, how, cap, user) returns true once observer `rank`'s process
 * has ended, with how it ended in how (rl_describe_end: "crashed (signal
 * 11, SIGSEGV)"). Called from agent_run's thread, often; must not block
 * or reap. NULL: none (observers elsewhere are lost when they say so or
 * their heartbeats stop). Set before agent_run. */
typedef bool (*agent_ended_fn)(int rank, char *how, size_t cap, void *user);
void agent_watch_observers(agent_ended_fn ended, void *user);

/* The signal (SIGINT, SIGTERM) that stops the run, 0 before one; the flag
 * itself for rpc_opts.cancel. Any thread. */
int agent_signal(void);
const volatile sig_atomic_t *agent_signal_flag(void);

/* Whether observer `rank`'s process has ended, with how (the ended
 * function of agent_watch_observers; false when none is set). */
bool agent_observer_ended(int rank, char *how, size_t cap);

#endif
