/* An observer (docs/design.md §6): B envs in a vec_env, an RRef to the agent's
 * policy, and the observer's side of each algorithm: rollouts (one act
 * call per step for all B envs), the minibatch losses it computes locally
 * (their backward crosses to the agent's parameters), whole episodes (an
 * episodes algorithm: rl/algo.h), and the async loop that updates on its
 * own. It serves only its algorithm's functions, registered at set-up. */
#ifndef TRIB_OBSERVER_OBSERVER_H
#define TRIB_OBSERVER_OBSERVER_H

#include "rpc/rpc.h"

struct observer;

/* A fresh observer; it gets its env and policy from the agent's setup call.
 * Registers the observer's functions (and only those) with the RPC layer:
 * call once per process, before rpc_init, after dist_autograd_init. */
struct observer *observer_new(void);

/* Accepts NULL. Call after rpc_shutdown. */
void observer_free(struct observer *o);

/* A whole observer process: dist_autograd_init, observer_new, rpc_init with
 * opts, serve until the agent shuts the world down. Messages go to stderr
 * prefixed with the worker's name; with announce (a process started on
 * its own, not forked by tributary-train), also what it waits for while
 * it waits for the agent, every few seconds, and when it joined. Returns
 * the exit status (0, or 1 when rpc_init failed or the agent was lost). */
int observer_run(const struct rpc_opts *opts, bool announce);

#endif
