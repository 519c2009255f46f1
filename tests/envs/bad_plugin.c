/* Deliberately broken or odd plug-ins for test_env_plugin, one per BAD_*
 * macro: no tributary_env symbol, a zero-size observation space, a NULL step
 * function, tributary_env() returning NULL, and two valid but odd specs:
 * observations of 2^25 floats, which no batch of 2^20 envs can hold
 * (BAD_WIDE_OBS), and an id that JSON must escape with NaN rewards (BAD_ODD_ID). */
#include <math.h>
#include <stddef.h>

#include "envs/env.h"

#ifdef BAD_WIDE_OBS
#define OBS_DIM (1 << 25)
static double wide_bounds[OBS_DIM]; /* zeros: low = high = 0 everywhere */
#define lo wide_bounds
#define hi wide_bounds
#else
#define OBS_DIM 2
static const double lo[2] = {-1, -1}, hi[2] = {1, 1};
#endif
static void reset(void *s, uint64_t *rng, float *obs) { obs[0] = obs[1] = 0; }
__attribute__((unused)) static void step(void *s, const void *a, float *obs, float *r, bool *t)
{
    obs[0] = obs[1] = 0;
#ifdef BAD_ODD_ID
    *r = NAN;
#else
    *r = 0;
#endif
    *t = false;
}

__attribute__((unused)) static const struct env_spec spec = {
#ifdef BAD_ODD_ID
    .id = "Odd \"quoted\"\\id\t-v0",
#else
    .id = "Bad-v0",
#endif
    .obs = {.kind = SPACE_BOX, .low = lo, .high = hi,
#ifdef BAD_ZERO_OBS
            .dim = 0},
#else
            .dim = OBS_DIM},
#endif
    .act = {.kind = SPACE_DISCRETE, .n = 2},
    .max_episode_steps = 10,
    .state_size = 8,
    .reset = reset,
#ifndef BAD_NULL_STEP
    .step = step,
#endif
};

#ifdef BAD_NO_SYMBOL
const struct env_spec *tributary_env_typo(void) { return &spec; }
#elif defined(BAD_RETURNS_NULL)
const struct env_spec *tributary_env(void) { return NULL; }
#else
const struct env_spec *tributary_env(void) { return &spec; }
#endif
