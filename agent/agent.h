/* The agent (docs/design.md §6): owns the policy (agent/policy.h), builds the
 * distributed optimizer over its parameter RRefs, hands the configuration
 * to every observer and trains in sync mode (the agent drives each update)
 * or async mode (observers update on their own through rl_update). Prints
 * progress lines and, last on stdout, a one-line JSON summary. */
#ifndef TRIB_AGENT_AGENT_H
#define TRIB_AGENT_AGENT_H

#include "agent/signals.h"
#include "rl/config.h"
#include "rpc/rpc.h"

struct agent;

/* An agent for one run of cfg (copied): opens the env, the checkpoint
 * being resumed (--resume) and the run directory (--logdir), and picks
 * the mode (sync.c or async.c, from the table in agent.c). NULL when one
 * fails, said on stderr ("agent: ...") and in rl_last_error(). Free with
 * agent_free. */
struct agent *agent_new(const struct rl_config *cfg);

/* Registers the agent's RPC functions and types (and only those; the
 * functions with a as their user data). Call once per process, before
 * rpc_init, after dist_autograd_init and dist_optim_init. */
void agent_register(struct agent *a);

/* The agent's rpc_opts for cfg (rank 0, world cfg->observers + 1, enough
 * handler threads for every observer's update to wait on the optimizer). */
struct rpc_opts agent_rpc_opts(const struct rl_config *cfg, const char *master);

/* rpc_init(opts), then trains until solved, out of budget, interrupted
 * (SIGINT/SIGTERM; agent_install_signals) or failed, then shuts the world
 * down. Once per agent. Returns the exit status: 0 solved, 1 not solved
 * or failed, 130/143 interrupted. */
int agent_run(struct agent *a, const struct rpc_opts *opts);
/* Whether agent_run got through rpc_init (every observer joined); false
 * when it failed or was interrupted before that. */
bool agent_rendezvous_done(const struct agent *a);
/* Whether agent_run gave up on an observer's call as the run ended (a
 * stuck env step or a silent peer past the stop's grace time): that
 * observer may never exit on its own. */
bool agent_gave_up(const struct agent *a);

/* Frees the agent (NULL: nothing). After agent_run, or instead of it. */
void agent_free(struct agent *a);

/* agent_install_signals, agent_watch_observers: agent/signals.h (included). */

#endif
