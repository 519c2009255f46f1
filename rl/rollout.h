/* A rollout buffer: T steps x B envs of one observer, time-major (index
 * t*B + b), allocated once, plus the advantages/returns computed from it and
 * the gather of a minibatch's rows. Plain buffers: unit tests fill and read
 * them without processes. */
#ifndef TRIB_RL_ROLLOUT_H
#define TRIB_RL_ROLLOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/tensor.h"

struct rl_rollout {
    int T, B, obs_dim, act_dim;     /* act_dim: 1 for discrete actions */
    bool discrete;
    float *obs;                     /* [T*B, obs_dim] */
    int *act_i;                     /* [T*B] (discrete) */
    float *act_f;                   /* [T*B, act_dim] (continuous) */
    float *logp, *values, *rewards, *final_values, *adv, *ret;   /* [T*B] */
    bool *terminated, *truncated;   /* [T*B] */
    float *next_values;             /* [B] */
    int *perm;                      /* [T*B] */
    double explained_var;           /* of values for ret, by rl_rollout_advantages */
};

/* Allocates every buffer (zeroed). 0, or -1 with rl_last_error(). */
int rl_rollout_init(struct rl_rollout *r, int T, int B, int obs_dim, bool discrete, int act_dim);
void rl_rollout_deinit(struct rl_rollout *r);

/* advantages and returns by rl_gae over the buffer, and how much of the
 * returns' variance the values explained (rl_explained_variance). */
void rl_rollout_advantages(struct rl_rollout *r, double gamma, double lambda);

/* The rows perm[start .. start+n) as new CPU tensors: obs f32 [n,obs_dim],
 * actions int64 [n] or f32 [n,act_dim]; and the plain arrays old_logp,
 * adv, ret, old_values (n floats each, caller's buffers). 0, or -1. */
int rl_rollout_gather(const struct rl_rollout *r, int start, int n, struct tensor **obs, struct tensor **actions,
                      float *old_logp, float *adv, float *ret, float *old_values);

#endif
