/* Endless-v0, a plug-in env for test_rl_faults whose episodes never end:
 * max_episode_steps 0 (which the contract allows) and never terminated.
 * 4 observations (zeros but a step counter's sign), 2 actions, reward 1 a
 * step. An evaluation of it must still end: at its step cap, or at once
 * when the run is stopped. */
#include <string.h>

#include "envs/env.h"

static const double lo[4] = { -1, -1, -1, -1 }, hi[4] = { 1, 1, 1, 1 };

struct endless { long t; };

static void e_reset(void *state, uint64_t *rng, float *obs)
{
    (void)rng;
    ((struct endless *)state)->t = 0;
    memset(obs, 0, 4 * sizeof *obs);
}

static void e_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    struct endless *e = state;
    memset(obs, 0, 4 * sizeof *obs);
    obs[0] = (e->t++ & 1) ? 1.0f : -1.0f;
    obs[1] = *(const int *)action ? 1.0f : 0.0f;
    *reward = 1;
    *terminated = false;
}

static const struct env_spec spec = {
    .id = "Endless-v0",
    .obs = { .kind = SPACE_BOX, .dim = 4, .low = lo, .high = hi },
    .act = { .kind = SPACE_DISCRETE, .n = 2 },
    .max_episode_steps = 0,
    .reward_threshold = 1e18,
    .state_size = sizeof(struct endless),
    .reset = e_reset,
    .step = e_step,
};

__attribute__((visibility("default"))) const struct env_spec *tributary_env(void) { return &spec; }
