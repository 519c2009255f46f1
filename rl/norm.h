/* Running normalisation of observations and rewards, as CleanRL's
 * ppo_continuous_action.py has it through Gymnasium's NormalizeObservation,
 * TransformObservation(clip), NormalizeReward and TransformReward(clip):
 *
 *   RunningMeanStd: float64 mean and (population) variance, starting from
 *   mean 0, var 1, count 1e-4; a batch of rows is folded in from its own
 *   mean, variance and count by Chan et al.'s parallel formula
 *   (update_mean_var_count_from_moments).
 *   observation: obs_rms.update(obs), then (obs - mean) / sqrt(var + 1e-8),
 *   clipped to [-clip_obs, clip_obs] (the reset observation too).
 *   reward: ret = ret * gamma * (1 - terminated) + r (each env's discounted
 *   return), ret_rms.update(ret), then r / sqrt(ret_var + 1e-8), clipped to
 *   [-clip_reward, clip_reward].
 *
 * One set of statistics per run (struct rl_norm_stats), owned by the agent.
 * An observer keeps the agent's set as it last received it (`global`) and
 * what its own envs added since (`delta`, count 0 at first), and normalises
 * with global merged with delta: one observer acts exactly as one process
 * with one RunningMeanStd would (up to rounding). Its delta travels to the
 * agent with its report and is cleared there (rl_norm_take_delta); the
 * agent merges the deltas it receives (sync: in worker order, so a sync run
 * stays bit-reproducible) into its set and sends the set back
 * (rl_norm_adopt) before the observer's next rollout. So 1 observer and 16
 * observers normalise alike, and the rollout stores the observations the
 * policy acted on (normalised with the statistics of that step).
 *
 * The set is saved in checkpoints, in the policy file and in the
 * safetensors export (tensors obs_norm.mean, obs_norm.var, obs_norm.count
 * as F64; metadata obs_clip, obs_eps), so tributary-eval and a PyTorch user
 * normalise as training did; evaluation applies it frozen
 * (rl_norm_stats_apply). Nothing here allocates after init. */
#ifndef TRIB_RL_NORM_H
#define TRIB_RL_NORM_H

#include <stdbool.h>
#include <stddef.h>

#include "rpc/rpc.h"
#include "runfiles/policy_file.h"

#define RL_NORM_EPS 1e-8       /* added to the variance before the sqrt */
#define RL_NORM_COUNT0 1e-4    /* RunningMeanStd's initial count */

/* The bounds that keep every set finite whatever a member sends
 * (runfiles/policy_file.h's POLICY_NORM_*: the policy file's reader checks
 * the same): a count is at most 2^53; a value a learner folds in is at
 * most RL_NORM_VALUE_MAX (2^53 x FLT_MAX) in magnitude, so a delta, which
 * summarises such rows, has mean^2 + var <= RL_NORM_VALUE_MAX^2 in each
 * component (the rows' mean square), and so has any merge of such deltas;
 * a set (the run's, a checkpoint's, the wire's) may hold up to
 * RL_NORM_MOMENT_MAX, twice that, the room its merges' rounding takes.
 * Within them Chan's formula cannot overflow. */
#define RL_NORM_COUNT_MAX POLICY_NORM_COUNT_MAX
#define RL_NORM_VALUE_MAX POLICY_NORM_VALUE_MAX
#define RL_NORM_MOMENT_MAX POLICY_NORM_MOMENT_MAX

/* A running mean and variance of dim-vectors (float64). */
struct rl_rms {
    int dim;
    double count;
    double *mean, *var;        /* [dim] */
};
/* mean 0, var 1, count RL_NORM_COUNT0 (Gymnasium's start); 0 or -1 with
 * rl_last_error() (out of memory, dim < 1). */
int rl_rms_init(struct rl_rms *r, int dim);
void rl_rms_free(struct rl_rms *r);
/* An empty set: count 0, mean 0, var 0 (what a delta starts from). */
void rl_rms_clear(struct rl_rms *r);
/* dst = src (same dim). */
void rl_rms_copy(struct rl_rms *dst, const struct rl_rms *src);
/* Folds rows x dim floats in as one batch (their mean, population
 * variance and count), Gymnasium's RunningMeanStd.update. */
void rl_rms_update(struct rl_rms *r, const float *x, int rows);
/* The same for double rows (the reward's discounted returns). */
void rl_rms_update_d(struct rl_rms *r, const double *x, int rows);
/* into = into merged with from (Chan's formula; a count-0 side is a no-op). */
void rl_rms_merge(struct rl_rms *into, const struct rl_rms *from);

/* The run's statistics: observations (dim = the env's obs dim) and the
 * discounted return (dim 1). A side that is off has dim 0 and is not used. */
struct rl_norm_stats {
    struct rl_rms obs, ret;
    double clip_obs, clip_reward;
};
/* obs_dim 0 / ret off: that side off. 0 or -1 with rl_last_error(). */
int rl_norm_stats_init(struct rl_norm_stats *s, int obs_dim, bool ret_on, double clip_obs, double clip_reward);
void rl_norm_stats_free(struct rl_norm_stats *s);
/* into += from, side by side (dims must match; the agent checks them
 * at unpack). */
void rl_norm_stats_merge(struct rl_norm_stats *into, const struct rl_norm_stats *from);
/* The same, once the result is known to be a set within the bounds
 * (count <= RL_NORM_COUNT_MAX, each mean and variance finite, variance >=
 * 0, mean^2 + var <= RL_NORM_MOMENT_MAX); otherwise -1 with rl_last_error()
 * naming the side and the value it would make, and into unchanged. */
int rl_norm_stats_merge_checked(struct rl_norm_stats *into, const struct rl_norm_stats *from);
/* A set within the bounds (as merge_checked's result): 0, or -1 with
 * rl_last_error() naming side.field[i]. */
int rl_norm_stats_check(const struct rl_norm_stats *s);
/* A member's delta d (checked as a set already) for a report: each side's
 * count must be the rows the report fed in (obs_rows observations,
 * ret_rows discounted returns; a side that is off is not looked at), and
 * each component's mean^2 + var at most RL_NORM_VALUE_MAX^2. 0, or -1 with
 * rl_last_error() naming the field. */
int rl_norm_delta_check(const struct rl_norm_stats *d, double obs_rows, double ret_rows);
/* dst = src, side by side (dims must match; clips are dst's own). */
void rl_norm_stats_copy(struct rl_norm_stats *dst, const struct rl_norm_stats *src);
/* The observation side of s as the policy file records it: a view that
 * borrows s's arrays (dim 0 when the side is off or s is NULL). The one
 * conversion between the two structs: the export, tributary-eval's
 * checkpoint reader and rl_norm_stats_apply use it. */
struct policy_norm rl_norm_stats_view(const struct rl_norm_stats *s);
/* Normalises rows observations in place with the statistics as they are
 * (no update): policy_norm_apply over rl_norm_stats_view(s), so training,
 * evaluation, tributary-eval and the export normalise alike (a NaN stays
 * NaN). No-op when the obs side is off. */
void rl_norm_stats_apply(const struct rl_norm_stats *s, float *obs, int rows);
/* Wire form: a map {obs: {count, mean (f64 bytes), var}, ret: {...}};
 * unpack checks dims against the run's (obs_dim, ret_on) and the values
 * as rl_norm_stats_check does, naming the field. */
struct rpc_value rl_norm_stats_pack(const struct rl_norm_stats *s);
int rl_norm_stats_unpack(const struct rpc_value *v, int obs_dim, bool ret_on, double clip_obs, double clip_reward,
                         struct rl_norm_stats *s);

/* A byte form for checkpoints: count, mean and var of each side that is on
 * (f64, host order). size: its bytes. load: into a set made by
 * rl_norm_stats_init with the run's dims, checking the size and the values
 * as unpack does; 0 or -1 with rl_last_error(). */
size_t rl_norm_stats_size(const struct rl_norm_stats *s);
void rl_norm_stats_save(const struct rl_norm_stats *s, unsigned char *out);
int rl_norm_stats_load(struct rl_norm_stats *s, const void *b, size_t n);

/* An observer's (a learner's) side: the agent's set as last received, its
 * own delta since, and each env's discounted return. */
struct rl_norm {
    int B;
    double gamma;
    struct rl_norm_stats global, delta, now;  /* now = global merged with delta */
    double *ret;                              /* [B] */
};
/* Off entirely (returns 0, n zeroed) unless cfg->norm_obs or
 * cfg->norm_reward. */
struct rl_config;
int rl_norm_init(struct rl_norm *n, const struct rl_config *cfg, int B, int obs_dim);
void rl_norm_free(struct rl_norm *n);
bool rl_norm_on(const struct rl_norm *n);
/* B fresh observations (after reset or a step): fold them into delta, then
 * normalise them in place with global + delta. */
void rl_norm_obs(struct rl_norm *n, float *obs, int rows);
/* A step's B raw rewards and terminations -> the rewards to learn from
 * (scaled and clipped; a copy when the reward side is off). */
void rl_norm_reward(struct rl_norm *n, const float *r, const bool *terminated, float *out);
/* The same for envs first..first+rows-1 only (r, terminated and out hold
 * their rows): each env's discounted return is its own. */
void rl_norm_reward_rows(struct rl_norm *n, int first, int rows, const float *r, const bool *terminated, float *out);
/* Copies the delta out for the agent (into a set made by
 * rl_norm_stats_init with the same dims) and clears it. */
void rl_norm_take_delta(struct rl_norm *n, struct rl_norm_stats *out);
/* The agent's merged set becomes global (delta is kept: normally empty). */
void rl_norm_adopt(struct rl_norm *n, const struct rl_norm_stats *global);

#endif
