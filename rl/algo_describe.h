/* The run's description (struct rl_algo.describe, rl/algo_table.h) for each
 * shape, for an algorithm's table to use as is or to extend: below the
 * registry and the tables (it calls nothing of theirs). */
#ifndef TRIB_RL_ALGO_DESCRIBE_H
#define TRIB_RL_ALGO_DESCRIBE_H

#include <stddef.h>

struct rl_config;

/* rl_algo.describe for each shape: "N observers x 1 episode per update"
 * and "gamma G"; "N observers x B envs x T steps" and "gamma G, lambda L". */
void rl_describe_episodes(const struct rl_config *cfg, char *shape, size_t shape_cap, char *update, size_t update_cap);
void rl_describe_rollouts(const struct rl_config *cfg, char *shape, size_t shape_cap, char *update, size_t update_cap);

/* In a mode whose observers update alone (async), how one observer's
 * rollout splits (rl_observer_minibatches, rl/config_fields.h), appended to
 * update (of update_cap, NUL-terminated): "; async: each observer's rollout
 * in K minibatches of M samples", and where that is not sync's size,
 * "(sync's: S; F x the updates per sample)". Nothing in sync mode. */
void rl_describe_async_minibatches(const struct rl_config *cfg, char *update, size_t update_cap);

#endif
