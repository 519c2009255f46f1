/* The agent's policy: an nn module (on the CPU or the GPU) owned by the
 * agent and reached by observers through an RRef, with two methods:
 *   act(obs [B,D], last)  no graph; concurrent calls from different observers
 *                         are merged into one forward (deferred replies,
 *                         bounded rows and wait);
 *   evaluate(obs [N,D])   with graph, in the caller's distributed-autograd
 *                         context, so a backward there reaches the parameters.
 * Both answer rl_policy_out (messages.h). The parameters are also held as
 * RRefs for the distributed optimizer; the version is the optimizer's.
 * Sync mode's batched update is policy_batch.h, what the policy becomes
 * outside memory (its file, a checkpoint's bytes, an evaluation's copy)
 * policy_store.h; both reach the policy through the last section here. */
#ifndef TRIB_AGENT_POLICY_H
#define TRIB_AGENT_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "rl/config.h"
#include "rl/messages.h"
#include "rl/arch.h"
#include "rpc/rpc.h"

struct policy;

/* Registers the policy's RRef type, constructor and methods. Call before
 * rpc_init on the agent (observers only call them). */
void policy_register(void);

/* Builds the policy on this worker (owner RRef) through rpc_remote, moves
 * it to the GPU if cfg->device is cuda, starts the serving thread and makes
 * RRefs of its parameters. lockstep (the training mode's, state.h's struct
 * agent_mode.lockstep_act: sync): observers step in lockstep, so every
 * merged act forward waits for the act calls of all the callers of the
 * rollout (policy_set_sync_callers) and serves them in worker-id order;
 * else it waits for the active callers at most --max-wait-us. Blocks. NULL
 * with rpc_last_error(). */
struct policy *policy_new(const struct rl_config *cfg, const struct policy_arch *arch, bool lockstep);

/* Stops serving: pending and later act calls fail ("shutting down").
 * Call before rpc_shutdown, so no deferred reply is left open. */
void policy_stop(struct policy *p);

/* Stops serving and frees. Call after rpc_shutdown (observers' calls may
 * reach the object until then). Accepts NULL. */
void policy_free(struct policy *p);

/* The RRef observers call (borrowed). */
struct rref *policy_rref(struct policy *p);

/* Parameter RRefs for dist_optim (borrowed array of n). */
struct rref **policy_param_rrefs(struct policy *p, int *n);

/* Marks an observer (by RPC worker id) as no longer rolling out, e.g. when
 * it died, so merged calls stop waiting for it. Any thread. */
void policy_forget_caller(struct policy *p, int worker_id);

/* In lockstep (policy_new), at the start of a rollout: the observers (RPC
 * worker ids) whose act calls every merged forward waits for (all of them
 * step in lockstep; one whose `last` call was served drops out until the
 * next rollout), so that the same calls are merged in the same order (by
 * worker id) on every run. Act calls from any other worker are refused
 * until the next rollout. Any thread. */
void policy_set_sync_callers(struct policy *p, const int *ids, int n);

/* In lockstep: observer `id` was lost or dropped; merged forwards stop
 * waiting for it, and its act calls are refused (nothing when its `last`
 * call of the rollout was served already). Any thread. */
void policy_drop_sync_caller(struct policy *p, int id);

/* In lockstep: when the oldest queued act call has waited wait_s seconds
 * or more, the rollout's observers it waits for (no call of theirs
 * queued, their `last` one not served) into ids (at most cap, in id
 * order); returns how many (0 otherwise, and never out of lockstep).
 * Any thread. */
int policy_sync_laggards(struct policy *p, double wait_s, int *ids, int cap);

/* The evaluate method's work, for the agent's own handlers: a recorded
 * forward of obs (f32 [N, obs_dim], CPU) in the thread's current context,
 * for worker `caller`. With dropout, the mask comes from a stream of its
 * own: the policy's dropout state mixed with the caller and how many
 * forwards it had since the last policy_dropout_epoch, so that concurrent
 * callers draw the same masks whatever order their calls arrive in (a
 * sync run stays reproducible). Any thread. 0, or -1 with rpc_last_error(). */
int policy_evaluate(struct policy *p, struct tensor *obs, struct rl_policy_out *out, int caller);

/* Sync mode's overlap (cfg.overlap, docs/design.md §6): copies the
 * parameters (and the optimizer's version) into the acting copy, which
 * answers every act call from then on, so that observers act while the
 * learner updates the live parameters. With dropout the copy takes the
 * live module's mask state, which moves on. Main thread, with no act call
 * in flight (between rollouts). 0, or -1 with rpc_last_error(). */
int policy_freeze(struct policy *p);

/* Sync mode's overlap, --overlap-correction decoupled: a forward of obs
 * (CPU) by the acting copy (policy_freeze's parameters, its version in
 * out->version), without graph, into *out: the proximal policy's answer.
 * With dropout its masks come from a stream of its own, started at the
 * freeze, so that act calls draw what they would without it. Main thread
 * (between freezes); waits for an act forward in progress. 0, or -1 with
 * rpc_last_error() (no copy yet: policy_freeze was never called). */
int policy_forward_frozen(struct policy *p, struct tensor *obs, struct rl_policy_out *out);

/* Sync mode, at the start of each iteration: advances the dropout state
 * (saved in checkpoints) and restarts every caller's stream. */
void policy_dropout_epoch(struct policy *p);


/* Serving counters: act calls, forwards they were merged into, rows,
 * evaluate calls, and seconds spent in forwards (both methods). */
/* inline_forwards: the act forwards of those served on the I/O thread (a
 * complete small batch, no thread hand-off). */
struct policy_stats { int64_t act_calls, act_forwards, act_rows, evaluate_calls, inline_forwards; double forward_s; };
void policy_get_stats(struct policy *p, struct policy_stats *out);

/* The parameters, actor's then critic's (borrowed; for export and tests). */
int policy_params(struct policy *p, struct tensor ***params);



/* ---- for the policy's other files (policy_batch.c, policy_store.c) ---- */

/* The module lock: one forward, or one read or write of the parameters and
 * the dropout RNG, at a time. */
void policy_lock_module(struct policy *p);
void policy_unlock_module(struct policy *p);
/* Forward of obs (CPU) on the policy's device (rl_arch_forward), with the
 * optimizer's version. Caller holds the module lock. 0, or -1. */
int policy_forward(struct policy *p, struct tensor *obs, struct rl_policy_out *o);
/* Adds to the serving counters: evaluate calls, seconds of forward. Any thread. */
void policy_count_forward(struct policy *p, int64_t evaluate_calls, double seconds);
/* The architecture, the actor module (its dropout RNG: under the module
 * lock) and the env as the run named it (an id or a plug-in's path). */
const struct policy_arch *policy_shape(const struct policy *p);
struct nn_module *policy_actor(struct policy *p);
const char *policy_env_name(const struct policy *p);
/* The env's arguments as the run gave them (rl_config's env_arg: KEY=VALUE
 * lines), "" when none. */
const char *policy_env_args(const struct policy *p);

#endif
