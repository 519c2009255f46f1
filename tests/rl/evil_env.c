/* A plug-in env for test_rl_files that leaves a trace when it is loaded:
 * its constructor creates the file named by $TRIB_EVIL_MARK. A file that
 * names it must not get it loaded unless --env names it too. The env is
 * CartPole-shaped (4 observations, 2 actions) and ends after 10 steps. */
#include <stdio.h>
#include <stdlib.h>

#include "envs/env.h"

__attribute__((constructor)) static void mark(void)
{
    const char *p = getenv("TRIB_EVIL_MARK");
    FILE *f = p ? fopen(p, "w") : NULL;
    if (f) fclose(f);
}

struct evil { int t; };

static const double lo[4] = { -1, -1, -1, -1 }, hi[4] = { 1, 1, 1, 1 };

static void ev_reset(void *state, uint64_t *rng, float *obs)
{
    (void)rng;
    ((struct evil *)state)->t = 0;
    for (int i = 0; i < 4; i++) obs[i] = 0;
}

static void ev_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    (void)action;
    struct evil *e = state;
    e->t++;
    for (int i = 0; i < 4; i++) obs[i] = 0;
    *reward = 1;
    *terminated = e->t >= 10;
}

static const struct env_spec spec = {
    .id = "Evil-v0",
    .obs = { .kind = SPACE_BOX, .dim = 4, .low = lo, .high = hi },
    .act = { .kind = SPACE_DISCRETE, .n = 2 },
    .max_episode_steps = 100,
    .reward_threshold = 10,
    .state_size = sizeof(struct evil),
    .reset = ev_reset,
    .step = ev_step,
};

const struct env_spec *tributary_env(void);
const struct env_spec *tributary_env(void) { return &spec; }
