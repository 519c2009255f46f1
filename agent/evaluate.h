/* Evaluation episodes: a policy's forward run for N episodes of an env,
 * each env running exactly one episode (so short episodes are not
 * over-counted), with greedy or sampled actions and, when the run
 * normalised its observations, the statistics applied frozen. Shared by
 * tributary-eval (a loaded policy) and the agent's --eval-every (a copy of
 * the training policy, on the agent's thread, no RPC): one runner, so the
 * two give one number for one policy, env, seed and episode count. */
#ifndef TRIB_AGENT_EVALUATE_H
#define TRIB_AGENT_EVALUATE_H

#include <stdbool.h>
#include <stdint.h>

#include "envs/env.h"
#include "tensor/nn.h"

struct rl_policy_out;
struct rl_norm_stats;

/* The policy's forward: obs [B, obs_dim] f32 on the CPU -> out->a (logits
 * [B, n] or the Gaussian's mean [B, dim]) and, for a Gaussian, out->log_std
 * [dim], on the CPU (the caller clears out). 0, or -1 with
 * tensor_last_error(). */
typedef int (*agent_eval_forward_fn)(void *user, struct tensor *obs, struct rl_policy_out *out);

/* The forward of an actor module (obs -> logits, or mean and log_std), on
 * the CPU: user is the struct nn_module (not in training mode). */
int agent_eval_actor_forward(void *user, struct tensor *obs, struct rl_policy_out *out);

/* What to run: `episodes` envs of spec, one episode each, seeded with
 * `seed` (env i: env_rng_seed(seed, i); the sampling: its own stream of
 * seed), `sample` actions from the policy or take the greedy ones (the
 * most likely action, the Gaussian's mean; clipped to the action box), and
 * norm: the observation statistics applied frozen (rl_norm_stats_apply),
 * NULL when the run did not normalise. */
struct agent_eval_opts {
    const struct env_spec *spec;    /* borrowed */
    agent_eval_forward_fn forward;
    void *user;
    int episodes;
    uint64_t seed;
    bool sample;
    const struct rl_norm_stats *norm;
};

/* The episodes' mean and (population) std of return and length. */
struct agent_eval_result {
    int episodes;
    double return_mean, return_std, length_mean, length_std;
};

/* Runs every episode to its end (autograd off on this thread for the
 * while). Blocks; any thread, one call per spec's envs at a time as the
 * env asks. 0, or -1 with rl_last_error() ("forward: ...", the env's
 * error, "out of memory for N envs", "evaluation with normalisation
 * statistics of D values, the env has E"). */
int agent_evaluate(const struct agent_eval_opts *o, struct agent_eval_result *out);

#endif
