/* The agent (docs/design.md §6): owns the policy (agent/policy.h), builds the
 * distributed optimizer over its parameter RRefs, hands the configuration
 * to every observer and trains in sync mode (the agent drives each update)
 * or async mode (observers update on their own through rl_update). Prints
 * progress lines and, last on stdout, a one-line JSON summary. */
#ifndef TRIB_AGENT_AGENT_H
#define TRIB_AGENT_AGENT_H

#include "rl/config.h"
#include "rpc/rpc.h"

/* Registers the agent's RPC functions and types (and only those). Call
 * once per process before rpc_init, after dist_autograd_init and
 * dist_optim_init. */
void agent_register(void);

/* The agent's rpc_opts for cfg (rank 0, world cfg->observers + 1, enough
 * handler threads for every observer's update to wait on the optimizer). */
struct rpc_opts agent_rpc_opts(const struct rl_config *cfg, const char *master);

/* rpc_init(opts), then trains until solved, out of budget, interrupted
 * (SIGINT/SIGTERM; agent_install_signals) or failed, then shuts the world
 * down. Returns the exit status: 0 solved, 1 not solved or failed, 130/143
 * interrupted. */
int agent_run(const struct rl_config *cfg, const struct rpc_opts *opts);
/* Whether the last agent_run got through rpc_init (every observer joined);
 * false when it failed or was interrupted before that. */
bool agent_rendezvous_done(void);
/* Whether the last agent_run gave up on an observer's call as the run
 * ended (a stuck env step or a silent peer past the stop's grace time):
 * that observer may never exit on its own. */
bool agent_gave_up(void);

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

#endif
