/* What follows from a run's algorithm and its config (algo_shape.h): one
 * row per shape. */
#include "rl/algo_shape.h"

#include <stdio.h>

#include "rl/estimators.h"
#include "rl/rl.h"

const struct rl_algo *rl_algo_of(const struct rl_config *cfg) { return rl_algo_get(cfg->algo); }

struct shape {
    int (*rollout_steps)(const struct rl_config *cfg);
    int64_t (*updates_per_rollout)(const struct rl_config *cfg);
    int64_t (*update_steps)(const struct rl_config *cfg, int64_t report_steps);
    int (*steps_fit)(const struct rl_config *cfg, int max_episode_steps, int64_t steps);
    void (*first_update)(const struct rl_config *cfg, char *out, size_t cap);
    int (*check)(const struct rl_config *cfg);
};

static int one(const struct rl_config *cfg) { return (void)cfg, 1; }
static int rollout_T(const struct rl_config *cfg) { return cfg->steps_per_rollout; }
static int64_t one_update(const struct rl_config *cfg) { return (void)cfg, 1; }
static int64_t mb_updates(const struct rl_config *cfg) { return (int64_t)cfg->epochs * cfg->minibatches; }
static int64_t episode_steps(const struct rl_config *cfg, int64_t report_steps) { return (void)cfg, report_steps; }

static int64_t minibatch_steps(const struct rl_config *cfg, int64_t report_steps)
{
    (void)report_steps;
    return (int64_t)cfg->envs_per_observer * cfg->steps_per_rollout / rl_observer_minibatches(cfg);
}

static int episode_fits(const struct rl_config *cfg, int max_episode_steps, int64_t steps)
{
    (void)cfg;
    int64_t max_len = max_episode_steps > 0 ? max_episode_steps : RL_DEFAULT_MAX_EPISODE;
    if (steps < 1 || steps > max_len)
        return rl_set_error("report: steps %lld is not one episode's (1..%lld)", (long long)steps, (long long)max_len);
    return 0;
}

static int rollout_fits(const struct rl_config *cfg, int max_episode_steps, int64_t steps)
{
    (void)max_episode_steps;
    if (steps != (int64_t)cfg->steps_per_rollout * cfg->envs_per_observer)
        return rl_set_error("report: steps %lld is not a rollout's (%d steps x %d envs)", (long long)steps,
                            cfg->steps_per_rollout, cfg->envs_per_observer);
    return 0;
}

static void episode_first(const struct rl_config *cfg, char *out, size_t cap)
{
    (void)cfg;
    snprintf(out, cap, "the first update (each observer plays a whole episode first)");
}

static void rollout_first(const struct rl_config *cfg, char *out, size_t cap)
{
    snprintf(out, cap, "the first update (each observer first steps %d env%s x %d steps)", cfg->envs_per_observer,
             cfg->envs_per_observer == 1 ? "" : "s", cfg->steps_per_rollout);
}

/* --vtrace's needs, named from the tables: the modes whose updates lag
 * (rl/config_fields.h's RL_MODES) and the rollouts algorithms. */
static int vtrace_needs(void)
{
    char modes[128] = "", algos[256];
    size_t n = 0;
    for (int m = 0; m < RL_MODE_COUNT; m++)
        if (rl_mode_lags((enum rl_mode)m))
            n += (size_t)snprintf(modes + n, sizeof modes - n, "%s--mode %s", n ? " or " : "", rl_mode_choice(m));
    return rl_set_error("--vtrace corrects the lag of a rollouts algorithm's updates: it needs %s and an --algo of "
                        "the rollouts shape (%s)", modes, rl_algo_names_of_shape(RL_SHAPE_ROLLOUTS, algos, sizeof algos));
}

/* what applies to an episodes algorithm: one whole episode per observer per update */
static int episode_check(const struct rl_config *cfg)
{
    char algos[256];
    if (cfg->norm_obs || cfg->norm_reward)
        return rl_set_error("--norm-obs and --norm-reward go with a rollouts algorithm (%s): %s learns from "
                            "whole episodes of raw rewards",
                            rl_algo_names_of_shape(RL_SHAPE_ROLLOUTS, algos, sizeof algos), rl_algo_of(cfg)->name);
    return cfg->vtrace ? vtrace_needs() : 0;
}

static int rollout_check(const struct rl_config *c)
{
    const struct rl_algo *a = rl_algo_of(c);
    if (!rl_estimator_find(a->estimator))
        return rl_set_error("algorithm %s: unknown estimator '%s'", a->name, a->estimator);
    if ((c->steps_per_rollout * c->envs_per_observer) % c->minibatches != 0)
        return rl_set_error("--minibatches (%d) must divide --steps-per-rollout x --envs-per-observer (%d)",
                            c->minibatches, c->steps_per_rollout * c->envs_per_observer);
    int k = rl_observer_minibatches(c);
    if (k != c->minibatches && (c->steps_per_rollout * c->envs_per_observer) % k != 0)
        return rl_set_error("--mode %s: each observer splits its rollout (--steps-per-rollout x --envs-per-observer = "
                            "%d samples) into --minibatches / --observers = %d minibatches, which must divide it",
                            rl_mode_choice(c->mode), c->steps_per_rollout * c->envs_per_observer, k);
    if (c->vtrace && !rl_mode_lags(c->mode)) return vtrace_needs();
    return 0;
}

static const struct shape shapes[RL_SHAPE_COUNT] = {
    [RL_SHAPE_EPISODES] = { one, one_update, episode_steps, episode_fits, episode_first, episode_check },
    [RL_SHAPE_ROLLOUTS] = { rollout_T, mb_updates, minibatch_steps, rollout_fits, rollout_first, rollout_check },
};

int rl_algo_rollout_steps(const struct rl_algo *a, const struct rl_config *cfg)
{
    return shapes[a->shape].rollout_steps(cfg);
}

int64_t rl_algo_updates_per_rollout(const struct rl_algo *a, const struct rl_config *cfg)
{
    return shapes[a->shape].updates_per_rollout(cfg);
}

int64_t rl_algo_update_steps(const struct rl_algo *a, const struct rl_config *cfg, int64_t report_steps)
{
    return shapes[a->shape].update_steps(cfg, report_steps);
}

int rl_algo_report_steps_fit(const struct rl_algo *a, const struct rl_config *cfg, int max_episode_steps,
                             int64_t steps)
{
    return shapes[a->shape].steps_fit(cfg, max_episode_steps, steps);
}

void rl_algo_first_update(const struct rl_algo *a, const struct rl_config *cfg, char *out, size_t cap)
{
    shapes[a->shape].first_update(cfg, out, cap);
}

int rl_algo_check(const struct rl_algo *a, const struct rl_config *cfg)
{
    if (a->check && a->check(cfg) != 0) return -1;
    return shapes[a->shape].check(cfg);
}

int rl_algo_check_env(const struct rl_algo *a, const struct env_spec *spec)
{
    if (a->discrete_only && spec->act.kind != SPACE_DISCRETE)
        return rl_set_error("%s here needs a discrete action space (%s has a box)", a->title, spec->id);
    return 0;
}

bool rl_algo_overlap_prox(const struct rl_algo *a, const struct rl_config *cfg)
{
    return a && a->shape == RL_SHAPE_ROLLOUTS && a->prox && cfg->overlap && cfg->mode == RL_MODE_SYNC &&
           cfg->overlap_correction == RL_OVERLAP_CORR_DECOUPLED;
}
