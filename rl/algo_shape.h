/* What follows from a run's algorithm (rl/algo.h) and its config: the
 * algorithm of a config, and per shape (one row each in algo_shape.c) the
 * rollout's length, the updates per rollout, the steps an update covers,
 * which reports fit, the start-up notice, the shape's config checks, and
 * the run's description. Separate from the registry (algo.c), which reads
 * no config, so that rl/config.c can use the registry while these read
 * the config. */
#ifndef TRIB_RL_ALGO_SHAPE_H
#define TRIB_RL_ALGO_SHAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envs/env.h"
#include "rl/algo.h"
#include "rl/config.h"

/* The algorithm of cfg (checked by rl_config_check; NULL only for an index
 * nothing registered). */
const struct rl_algo *rl_algo_of(const struct rl_config *cfg);

/* The rollout's length in steps: 1 (an episode's buffer is its own) or T. */
int rl_algo_rollout_steps(const struct rl_algo *a, const struct rl_config *cfg);
/* The updates one rollout (or episode) makes: 1, or epochs x minibatches. */
int64_t rl_algo_updates_per_rollout(const struct rl_algo *a, const struct rl_config *cfg);
/* The env steps an update covers (what a dropped one costs): the episode's
 * (report_steps), or B x T / rl_observer_minibatches (rl/config_fields.h). */
int64_t rl_algo_update_steps(const struct rl_algo *a, const struct rl_config *cfg, int64_t report_steps);
/* Whether a report's steps are one iteration's: 0, or -1 with
 * rl_last_error(). */
int rl_algo_report_steps_fit(const struct rl_algo *a, const struct rl_config *cfg, int max_episode_steps,
                             int64_t steps);
/* What the run waits for before its first update, for the start-up notice. */
void rl_algo_first_update(const struct rl_algo *a, const struct rl_config *cfg, char *out, size_t cap);
/* cfg's checks for algorithm a: its own hook's, then its shape's
 * (minibatches dividing a rollout, in async mode rl_observer_minibatches
 * too, --vtrace, a known estimator). 0, or -1 with
 * rl_last_error() naming the flag. */
int rl_algo_check(const struct rl_algo *a, const struct rl_config *cfg);
/* Whether sync --overlap's updates from a lagged rollout learn against a
 * proximal policy (--overlap-correction decoupled, rl/losses.h's
 * prox_logp): overlap in sync mode, a rollouts algorithm whose loss takes
 * one (its table's `prox`), and the correction asked for. */
bool rl_algo_overlap_prox(const struct rl_algo *a, const struct rl_config *cfg);
/* Refuses an env the algorithm cannot drive: 0, or -1 with rl_last_error(). */
int rl_algo_check_env(const struct rl_algo *a, const struct env_spec *spec);

#endif
