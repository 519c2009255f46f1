/* The run's description per shape (algo_describe.h). */
#include "rl/algo_describe.h"

#include <stdio.h>

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
}
