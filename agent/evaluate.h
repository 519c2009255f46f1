/* Evaluation episodes: a policy's forward run for N episodes of an env,
 * each env running exactly one episode (so short episodes are not
 * over-counted), at most AGENT_EVAL_MAX_ENVS envs at once, each episode
 * at most its cap of steps long, with greedy or sampled actions and, when the run
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

/* The most envs an evaluation holds at once: N episodes run in waves of
 * this many (a MuJoCo env holds megabytes), episode i in an env seeded as
 * env i of N would be, so the waves give the numbers one batch would. */
#define AGENT_EVAL_MAX_ENVS 64

/* The cap of an episode's steps where the env declares none
 * (max_episode_steps 0, which ABI 2 allows): an episode still running
 * then ends there, as if truncated. Where the env declares one, that. */
#define AGENT_EVAL_MAX_STEPS 10000

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
    /* Asked before every step (any thread's stop: a signal, the run's
     * time budget): NULL to go on, else what stops the evaluation
     * ("SIGINT", "--max-seconds 5"). NULL: nothing stops it. */
    const char *(*stop)(void *stop_user);
    void *stop_user;
};

/* The episodes' mean and (population) std of return and length. */
struct agent_eval_result {
    int episodes;
    double return_mean, return_std, length_mean, length_std;
};

/* Runs every episode to its end or its cap (autograd off on this thread
 * for the while). Blocks until then or until o->stop says stop; any
 * thread, one call per spec's envs at a time as the env asks. 0; 1 when
 * stopped, rl_last_error() saying by what and after how many episodes
 * ("stopped by SIGINT after 12 of 100 episodes"); or -1 with
 * rl_last_error() ("forward: ...", the env's error, "out of memory for N
 * envs", "evaluation with normalisation statistics of D values, the env
 * has E"). */
int agent_evaluate(const struct agent_eval_opts *o, struct agent_eval_result *out);

#endif
