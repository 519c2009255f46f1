/* The advantage estimators' table (estimators.h). */
#include "rl/estimators.h"

#include <stddef.h>
#include <string.h>

#include "rl/rl_math.h"

static void gae(struct rl_rollout *ro, const struct rl_config *cfg)
{
    rl_rollout_advantages(ro, cfg->gamma, cfg->gae_lambda);
}

static void nstep(struct rl_rollout *ro, const struct rl_config *cfg)
{
    rl_rollout_advantages(ro, cfg->gamma, 1.0);
}

static void vtrace(struct rl_rollout *ro, const struct rl_config *cfg, const float *target_logp,
                   const float *values, const float *next_values)
{
    rl_vtrace(ro->T, ro->B, cfg->gamma, cfg->rho_bar, cfg->c_bar, ro->rewards, values, ro->logp, target_logp,
              ro->terminated, ro->truncated, ro->final_values, next_values, ro->adv, ro->ret);
    ro->explained_var = rl_explained_variance(values, ro->ret, ro->T * ro->B);
}

static const struct rl_estimator estimators[] = {
    { .name = "gae", .estimate = gae },
    { .name = "nstep", .estimate = nstep },
    { .name = "vtrace", .estimate = gae, .correct = vtrace },
};

const struct rl_estimator *rl_estimator_find(const char *name)
{
    for (size_t i = 0; name && i < sizeof estimators / sizeof estimators[0]; i++)
        if (strcmp(estimators[i].name, name) == 0) return &estimators[i];
    return NULL;
}

const struct rl_estimator *rl_estimator_for(const struct rl_config *cfg, const char *own)
{
    return rl_estimator_find(cfg->vtrace ? "vtrace" : own);
}
