/* The agent's checkpoints (runfiles/ckpt.h files in LOGDIR/checkpoints): the
 * configuration, the policy's parameters and dropout RNG, the optimizer's
 * state, the training counters, the run's normalisation statistics and, in
 * sync mode, every observer's RNG and env state (with each env's discounted
 * return), so a resumed sync run continues bit for bit. */
#ifndef TRIB_AGENT_CHECKPOINT_H
#define TRIB_AGENT_CHECKPOINT_H

#include "agent/policy.h"
#include "agent/run_stats.h"
#include "optim/dist_optim.h"
#include "runfiles/ckpt.h"
#include "rl/config.h"

#define AGENT_CKPT_KEEP 3

/* Where --anneal-lr's line starts: at env step `steps`, at `frac` of --lr
 * (a run's start: 0 and 1; agent_lr_resumed moves it when a resume
 * changes the budget). The lr at env step t is --lr * frac * (max_steps -
 * t) / (max_steps - steps). */
struct agent_lr_from {
    int64_t steps;
    double frac;
};

/* The schedule a checkpoint's run had: where its anneal started (section
 * "lr_schedule"; a checkpoint without one, from an older build: 0 and 1),
 * and its --max-steps, --anneal-lr and --lr. 0, or -1 with rl_last_error()
 * (steps outside 0..RUN_STATS_MAX_COUNT, frac outside [0, 1], no config);
 * agent_ckpt_open checks it too. */
int agent_ckpt_lr_schedule(const struct ckpt *c, struct agent_lr_from *from, int64_t *max_steps, bool *anneal,
                           double *lr);

/* What goes into a checkpoint. obs_state[k]: observer k's rl_get_state
 * bytes, or nil (async mode, or a lost observer). */
struct agent_ckpt_in {
    const struct rl_config *cfg;
    struct policy *policy;
    struct dist_optim *opt;
    struct run_stats *stats;
    int n_observers;
    const struct rpc_value *obs_state;
    const void *norm;               /* the run's normalisation statistics (agent_norm_save), NULL: none */
    size_t norm_len;
    struct agent_lr_from lr_from;   /* where the lr's linear anneal starts (section "lr_schedule") */
};

/* Writes LOGDIR/checkpoints/ckpt-<updates>.trib atomically, keeping the
 * newest AGENT_CKPT_KEEP. 0, or -1 with rl_last_error(). */
int agent_ckpt_write(const char *logdir, int64_t updates, const struct agent_ckpt_in *in);

/* Consecutive failed checkpoints after which a run stops (exit 1). */
#define AGENT_CKPT_MAX_FAILURES 3

/* agent_ckpt_write, counting failures in a row in *failed_in_row (0 after
 * a success). On failure -1 with rl_last_error() saying so loudly: "check-
 * point of update <n> FAILED (<k> in a row): <path>: <strerror>; a resume
 * would use <newest valid checkpoint>" (or "finds no valid checkpoint in
 * <dir>"), and, at AGENT_CKPT_MAX_FAILURES in a row, "; stopping the run".
 * A failed write leaves the older checkpoints as they were: rotation only
 * follows a good one. */
int agent_ckpt_save(const char *logdir, int64_t updates, const struct agent_ckpt_in *in, int *failed_in_row);

/* Loads the newest valid checkpoint of LOGDIR/checkpoints (newer ones that
 * are refused are reported on stderr) and checks it against cfg: the env,
 * algorithm, mode, observers, envs per observer, steps per rollout and the
 * policy's architecture must match, and every number of its counters and
 * version must be in range (run_stats_load; the version in
 * 0..RUN_STATS_MAX_COUNT). NULL with rl_last_error() when there is none,
 * none is valid, it does not match or a number is out of range; nothing
 * is written either way. */
struct ckpt *agent_ckpt_open(const char *logdir, const struct rl_config *cfg);

/* Applies a checkpoint's parameters, policy RNG, optimizer state, counters
 * and version. 0, or -1 with rl_last_error(). */
int agent_ckpt_restore(const struct ckpt *c, struct policy *p, struct dist_optim *opt, struct run_stats *stats);

/* The saved normalisation statistics (section "norm", borrowed bytes,
 * *len), or NULL with rl_last_error() when the checkpoint has none. */
const void *agent_ckpt_norm(const struct ckpt *c, size_t *len);

/* Observer k's saved state (borrowed bytes, *len), or NULL if none. */
const void *agent_ckpt_observer_state(const struct ckpt *c, int k, size_t *len);

#endif
