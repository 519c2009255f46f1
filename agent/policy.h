/* The agent's policy: an nn module (on the CPU or the GPU) owned by the
 * agent and reached by observers through an RRef, with two methods:
 *   act(obs [B,D], last)  no graph; concurrent calls from different observers
 *                         are merged into one forward (deferred replies,
 *                         bounded rows and wait);
 *   evaluate(obs [N,D])   with graph, in the caller's distributed-autograd
 *                         context, so a backward there reaches the parameters.
 * Both answer rl_policy_out (messages.h). The parameters are also held as
 * RRefs for the distributed optimizer; the version is the optimizer's. */
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

/* Sync mode, at the start of each iteration: advances the dropout state
 * (saved in checkpoints) and restarts every caller's stream. */
void policy_dropout_epoch(struct policy *p);

/* Sync updates: one recorded forward over the observations of n
 * observers' minibatches (rows in that order), in the thread's current
 * distributed-autograd context. outs[k] gets observer k's part as leaf
 * tensors (requires grad, no graph) to send it: the gradients its backward
 * sends back accumulate on those leaves in the context. Then
 * policy_batch_backward(ctx) carries them, concatenated, through the one
 * forward to the parameters (one backward for the n observers: the same
 * arithmetic as a local update of the merged minibatch). NULL with
 * rpc_last_error(); free with policy_batch_free. */
struct policy_batch;
struct policy_batch *policy_evaluate_batch(struct policy *p, int n, struct tensor *const *obs,
                                           struct rl_policy_out *outs);
int policy_batch_backward(struct policy_batch *b, int64_t ctx);
void policy_batch_free(struct policy_batch *b);

/* Serving counters: act calls, forwards they were merged into, rows,
 * evaluate calls, and seconds spent in forwards (both methods). */
/* inline_forwards: the act forwards of those served on the I/O thread (a
 * complete small batch, no thread hand-off). */
struct policy_stats { int64_t act_calls, act_forwards, act_rows, evaluate_calls, inline_forwards; double forward_s; };
void policy_get_stats(struct policy *p, struct policy_stats *out);

/* The parameters, actor's then critic's (borrowed; for export and tests). */
int policy_params(struct policy *p, struct tensor ***params);

/* A copy of the policy as it is now, on the CPU, for the agent's own
 * evaluations (--eval-every): its architecture, an actor in eval mode (no
 * dropout) and, with a value head, a critic holding the parameters' values.
 * The caller keeps updates out while it is made (the agent's mu: async
 * updates run on handler threads); later updates do not reach it. 0, or -1
 * with rl_last_error(). */
struct policy_copy {
    struct policy_arch arch;
    struct nn_module *actor, *critic;
};
int policy_copy_new(struct policy *p, struct policy_copy *c);
/* Accepts a zeroed copy. */
void policy_copy_free(struct policy_copy *c);
/* Writes a copy as policy_save writes the policy (norm: the statistics it
 * was evaluated with), with n_extra more metadata entries (policy_info's
 * meta). 0, or -1 with rl_last_error(). */
struct safetensors_meta;
struct rl_norm_stats;
int policy_copy_save(struct policy *p, const struct policy_copy *c, const char *path, const struct env_spec *spec,
                     const struct rl_norm_stats *norm, const struct safetensors_meta *extra, int n_extra);

/* Checkpoints: the parameters (f32, actor's then critic's) and the dropout
 * RNG as bytes; load checks the sizes and writes them in (staged writes).
 * load: 0, or -1 with rl_last_error() (a size mismatch); the policy may
 * live on the GPU (the parameters are written there from the host). */
void policy_save_state(struct policy *p, unsigned char **out, size_t *len);
int policy_load_state(struct policy *p, const void *buf, size_t len);

/* Writes the policy as a .safetensors file (policy_file_write) recording
 * the env, its action space and, when norm is non-NULL with an obs side,
 * the observation statistics (rl/norm.h) the run normalised with. 0 or -1
 * with rl_last_error(). */
struct rl_norm_stats;
int policy_save(struct policy *p, const char *path, const struct env_spec *spec, const struct rl_norm_stats *norm);

#endif
