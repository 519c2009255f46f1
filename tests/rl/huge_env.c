/* Huge-v0, a plug-in env for test_rl_faults that declares whatever sizes
 * the environment says, read when tributary_env() is called:
 *   TRIB_HUGE_OBS   observation dims (default 4, at most 100000)
 *   TRIB_HUGE_ACT   discrete actions (default 2)
 * A run must refuse sizes its policy cannot have before it allocates for
 * them, naming the plug-in, the size and the limit. It steps like a
 * trivial task (zeros, reward 1, episodes of 10 steps), if ever run. */
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"

#define MAX_OBS 100000

static double bounds[MAX_OBS];      /* zeros: low = high = 0 */

struct huge { int t; int obs_dim; };

static int obs_dim = 4;

static void h_reset(void *state, uint64_t *rng, float *obs)
{
    (void)rng;
    ((struct huge *)state)->t = 0;
    memset(obs, 0, (size_t)obs_dim * sizeof *obs);
}

static void h_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    (void)action;
    struct huge *h = state;
    h->t++;
    memset(obs, 0, (size_t)obs_dim * sizeof *obs);
    *reward = 1;
    *terminated = h->t >= 10;
}

static struct env_spec spec = {
    .id = "Huge-v0",
    .obs = { .kind = SPACE_BOX, .dim = 4, .low = bounds, .high = bounds },
    .act = { .kind = SPACE_DISCRETE, .n = 2 },
    .max_episode_steps = 10,
    .reward_threshold = 1000,
    .state_size = sizeof(struct huge),
    .reset = h_reset,
    .step = h_step,
};

__attribute__((visibility("default"))) const struct env_spec *tributary_env(void)
{
    const char *o = getenv("TRIB_HUGE_OBS"), *a = getenv("TRIB_HUGE_ACT");
    if (o) obs_dim = atoi(o) > MAX_OBS ? MAX_OBS : atoi(o);
    spec.obs.dim = obs_dim;
    if (a) spec.act.n = atoi(a);
    return &spec;
}
