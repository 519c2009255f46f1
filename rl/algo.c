/* The algorithm registry (algo.h). The built-ins come first, in their
 * RL_ALGO_* order: rows of rl/config_fields.h's RL_BUILTIN_ALGOS. */
#include "rl/algo.h"

#include <stdio.h>
#include <string.h>

#include "rl/config_fields.h"
#include "rl/rl.h"

#define MAX_ALGOS 32

#define BUILTIN_ROW(id, name) [RL_ALGO_##id] = &rl_algo_##name,
static const struct rl_algo *registry[MAX_ALGOS] = { RL_BUILTIN_ALGOS(BUILTIN_ROW) };
#undef BUILTIN_ROW
static int n_registered = RL_ALGO_BUILTIN_COUNT;
_Static_assert(RL_ALGO_BUILTIN_COUNT <= MAX_ALGOS, "room for the built-ins");

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

const char *rl_algo_names_of_shape(enum rl_shape shape, char *out, size_t cap)
{
    size_t n = 0;
    if (cap) out[0] = '\0';
    for (int i = 0; i < n_registered && n < cap; i++)
        if (registry[i]->shape == shape)
            n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", registry[i]->name);
    return out;
}

int rl_algo_drive(const struct rl_algo *a, const struct rl_drivers *d)
{
    int (*fn)(void *) = d->drive[a->shape];
    return fn ? fn(d->ctx) : rl_set_error("algorithm %s: this program cannot drive its shape", a->name);
}
