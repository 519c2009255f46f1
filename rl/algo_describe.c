/* The run's description per shape (algo_describe.h). */
#include "rl/algo_describe.h"

#include <stdio.h>
#include <string.h>

#include "rl/config_fields.h"

static const char *observers(const struct rl_config *cfg) { return cfg->observers == 1 ? "observer" : "observers"; }

void rl_describe_episodes(const struct rl_config *c, char *shape, size_t shape_cap, char *update, size_t update_cap)
{
    snprintf(shape, shape_cap, "%d %s x 1 episode per update", c->observers, observers(c));
    snprintf(update, update_cap, "gamma %g", c->gamma);
}

void rl_describe_rollouts(const struct rl_config *c, char *shape, size_t shape_cap, char *update, size_t update_cap)
{
    snprintf(shape, shape_cap, "%d %s x %d env%s x %d steps", c->observers, observers(c), c->envs_per_observer,
             c->envs_per_observer == 1 ? "" : "s", c->steps_per_rollout);
    snprintf(update, update_cap, "gamma %g, lambda %g", c->gamma, c->gae_lambda);
    rl_describe_async_minibatches(c, update, update_cap);
}

void rl_describe_async_minibatches(const struct rl_config *c, char *update, size_t update_cap)
{
    if (!rl_mode_lags(c->mode)) return;
    int n = c->steps_per_rollout * c->envs_per_observer, k = rl_observer_minibatches(c);
    size_t len = strlen(update);
    if (len >= update_cap) return;
    int w = snprintf(update + len, update_cap - len, "; async: each observer's rollout in %d minibatch%s of %d samples",
                     k, k == 1 ? "" : "es", n / k);
    if (w < 0 || (size_t)w >= update_cap - len || rl_observer_minibatches_even(c)) return;
    len += (size_t)w;
    /* sync's update: minibatch i of every observer */
    double sync_rows = (double)c->observers * n / c->minibatches;
    snprintf(update + len, update_cap - len, " (sync's: %g; %.3gx the updates per sample)", sync_rows,
             sync_rows / (n / k));
}
