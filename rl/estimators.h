/* Advantage estimators (docs/design.md §6): the second small table beside
 * the algorithms'. An RL_SHAPE_ROLLOUTS algorithm names its estimator
 * (struct rl_algo.estimator); --vtrace replaces it by V-trace. Chosen once,
 * from the config, by rl_estimator_for.
 *   gae:    GAE(gamma, --gae-lambda) (CleanRL ppo.py; A2C's with lambda 1,
 *           as its preset has, is n-step returns);
 *   nstep:  n-step bootstrapped returns, GAE at lambda 1 whatever
 *           --gae-lambda says;
 *   vtrace: IMPALA's V-trace for the policy as it is when the update
 *           starts (async runs, whose rollouts lag behind it): GAE first,
 *           then `correct` replaces advantages and returns. */
#ifndef TRIB_RL_ESTIMATORS_H
#define TRIB_RL_ESTIMATORS_H

#include "rl/config.h"
#include "rl/rollout.h"

struct rl_estimator {
    const char *name;
    /* advantages, returns and explained variance of the finished rollout
     * from its own values (ro->next_values filled) */
    void (*estimate)(struct rl_rollout *ro, const struct rl_config *cfg);
    /* NULL, or: replaces them for a target policy whose log-probs of the
     * rollout's actions are target_logp [T*B], values [T*B] and
     * next_values [B] (the caller asks the policy first) */
    void (*correct)(struct rl_rollout *ro, const struct rl_config *cfg, const float *target_logp,
                    const float *values, const float *next_values);
};

/* The estimator named `name`, or NULL. */
const struct rl_estimator *rl_estimator_find(const char *name);
/* cfg's: V-trace with --vtrace, else the algorithm's, named `own` (NULL:
 * an RL_SHAPE_EPISODES algorithm, which keeps its own returns). */
const struct rl_estimator *rl_estimator_for(const struct rl_config *cfg, const char *own);

#endif
