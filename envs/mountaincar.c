/* MountainCar-v0, Gymnasium's classic_control/mountain_car.py in float64 step
 * for step. Built with -ffp-contract=off; needs only libm. */
#include <math.h>
#include <string.h>

#include "envs/builtin.h"

#define MIN_POSITION (-1.2)
#define MAX_POSITION 0.6
#define MAX_SPEED 0.07
#define GOAL_POSITION 0.5
#define GOAL_VELOCITY 0.0
#define FORCE 0.001
#define GRAVITY 0.0025

struct mountaincar {
    double s[2]; /* position, velocity */
};

/* Gymnasium's bounds are float32 (so they hold the float32 observations). */
static const double obs_low[2] = {(float)MIN_POSITION, (float)-MAX_SPEED};
static const double obs_high[2] = {(float)MAX_POSITION, (float)MAX_SPEED};

static void mountaincar_reset(void *state, uint64_t *rng, float *obs)
{
    struct mountaincar *c = state;
    c->s[0] = env_rng_uniform(rng, -0.6, -0.4);
    c->s[1] = 0.0;
    obs[0] = (float)c->s[0];
    obs[1] = (float)c->s[1];
}

static inline double clip(double x, double lo, double hi)
{
    double t = x < lo ? lo : x;
    return t > hi ? hi : t;
}

static inline void mountaincar_step1(struct mountaincar *c, int action, float *obs,
                                     float *reward, bool *terminated)
{
    double position = c->s[0], velocity = c->s[1];
    velocity = velocity + ((action - 1) * FORCE + cos(3 * position) * (-GRAVITY));
    velocity = clip(velocity, -MAX_SPEED, MAX_SPEED);
    position = position + velocity;
    position = clip(position, MIN_POSITION, MAX_POSITION);
    if (position == MIN_POSITION && velocity < 0)
        velocity = 0;
    c->s[0] = position;
    c->s[1] = velocity;
    *terminated = position >= GOAL_POSITION && velocity >= GOAL_VELOCITY;
    *reward = -1.0f;
    obs[0] = (float)position;
    obs[1] = (float)velocity;
}

static void mountaincar_step(void *state, const void *action, float *obs, float *reward,
                             bool *terminated)
{
    mountaincar_step1(state, *(const int *)action, obs, reward, terminated);
}

void env_mountaincar_step_batch(void *states, const void *actions, float *obs, float *reward,
                                bool *terminated, int n)
{
    struct mountaincar *c = states;
    const int *a = actions;
    for (int i = 0; i < n; i++)
        mountaincar_step1(&c[i], a[i], obs + 2 * i, reward + i, terminated + i);
}

static int mountaincar_get_state(const void *state, double *out, int cap)
{
    const struct mountaincar *c = state;
    for (int k = 0; k < 2 && k < cap; k++)
        out[k] = c->s[k];
    return 2;
}

static int mountaincar_set_state(void *state, const double *in, int n)
{
    struct mountaincar *c = state;
    if (n != 2)
        return -1;
    memcpy(c->s, in, sizeof c->s);
    return 0;
}

const struct env_spec env_mountaincar_spec = {
    .id = "MountainCar-v0",
    .obs = {.kind = SPACE_BOX, .dim = 2, .low = obs_low, .high = obs_high},
    .act = {.kind = SPACE_DISCRETE, .n = 3},
    .max_episode_steps = 200,
    .reward_threshold = -110.0,
    .state_size = sizeof(struct mountaincar),
    .reset = mountaincar_reset,
    .step = mountaincar_step,
    .get_state = mountaincar_get_state,
    .set_state = mountaincar_set_state,
};
