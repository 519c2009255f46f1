/* The algorithm registry (algo.h). The built-ins come first, in their
 * RL_ALGO_* order (rl/config_fields.h's enum rl_algo_builtin). */
#include "rl/algo.h"

#include <stdio.h>
#include <string.h>

#include "rl/config_fields.h"
#include "rl/rl.h"

#define MAX_ALGOS 32

static const struct rl_algo *registry[MAX_ALGOS] = {
    [RL_ALGO_REINFORCE] = &rl_algo_reinforce,
    [RL_ALGO_A2C] = &rl_algo_a2c,
    [RL_ALGO_PPO] = &rl_algo_ppo,
};
static int n_registered = RL_ALGO_PPO + 1;

const struct rl_algo *rl_algo_get(int i) { return i >= 0 && i < n_registered ? registry[i] : NULL; }

const char *rl_algo_name(int i)
{
    const struct rl_algo *a = rl_algo_get(i);
    return a ? a->name : NULL;
}

int rl_algo_find(const char *name)
{
    char names[512] = "";
    size_t n = 0;
    for (int i = 0; i < n_registered; i++) {
        if (strcmp(registry[i]->name, name) == 0) return i;
        if (n < sizeof names) n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", registry[i]->name);
    }
    return rl_set_error("unknown algorithm '%s' (one of: %s)", name, names);
}

/* What each shape needs of a table. */
static int complete(const struct rl_algo *a)
{
    if (!a->name || !a->name[0] || !a->title) return rl_set_error("algorithm: no name");
    if (a->shape < 0 || a->shape >= RL_SHAPE_COUNT) return rl_set_error("algorithm %s: unknown shape", a->name);
    if (a->shape == RL_SHAPE_EPISODES && !a->ep_loss) return rl_set_error("algorithm %s: no episode loss", a->name);
    if (a->shape == RL_SHAPE_ROLLOUTS && (!a->mb_loss || !a->estimator))
        return rl_set_error("algorithm %s: a rollouts algorithm needs a minibatch loss and an estimator", a->name);
    if (!a->describe) return rl_set_error("algorithm %s: no describe", a->name);
    return 0;
}

int rl_algo_register(const struct rl_algo *a)
{
    if (!a) return rl_set_error("algorithm: NULL");
    if (complete(a) != 0) return -1;
    for (int i = 0; i < n_registered; i++)
        if (strcmp(registry[i]->name, a->name) == 0) return rl_set_error("algorithm %s: already registered", a->name);
    if (n_registered == MAX_ALGOS) return rl_set_error("algorithm %s: the registry is full (%d)", a->name, MAX_ALGOS);
    registry[n_registered] = a;
    return n_registered++;
}

int rl_algo_drive(const struct rl_algo *a, const struct rl_drivers *d)
{
    int (*fn)(void *) = d->drive[a->shape];
    return fn ? fn(d->ctx) : rl_set_error("algorithm %s: this program cannot drive its shape", a->name);
}
