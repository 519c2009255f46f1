/* PointReach-v0, a worked plug-in env: a 1-D point mass pushed by a bounded
 * force must come to rest on a random target. Built as libpoint_reach.so, it
 * exports tributary_env() and is run with `trib-env ./libpoint_reach.so`. */
#include <math.h>
#include <string.h>

#include "envs/env.h"

#define DT 0.1
#define DRAG 0.5
#define WALL 2.0
#define MAX_FORCE 1.0
#define GOAL_TOL 0.05

struct point_reach {
    double pos, vel, target;
};

static const double obs_low[3] = {-WALL, -INFINITY, -2 * WALL};
static const double obs_high[3] = {WALL, INFINITY, 2 * WALL};
static const double act_low[1] = {-MAX_FORCE};
static const double act_high[1] = {MAX_FORCE};

static void observe(const struct point_reach *p, float *obs)
{
    obs[0] = (float)p->pos;
    obs[1] = (float)p->vel;
    obs[2] = (float)(p->target - p->pos);
}

static void pr_reset(void *state, uint64_t *rng, float *obs)
{
    struct point_reach *p = state;
    p->pos = env_rng_uniform(rng, -1.0, 1.0);
    p->vel = 0.0;
    p->target = env_rng_uniform(rng, -1.5, 1.5);
    observe(p, obs);
}

static void pr_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    struct point_reach *p = state;
    double f = ((const float *)action)[0];
    f = f < -MAX_FORCE ? -MAX_FORCE : f > MAX_FORCE ? MAX_FORCE : f; /* NaN stays NaN */
    if (f != f)
        f = 0.0;
    p->vel += DT * (f - DRAG * p->vel);
    p->pos += DT * p->vel;
    if (p->pos < -WALL || p->pos > WALL) {   /* inelastic walls */
        p->pos = p->pos < 0 ? -WALL : WALL;
        p->vel = 0.0;
    }
    double dist = fabs(p->target - p->pos);
    bool done = dist < GOAL_TOL && fabs(p->vel) < GOAL_TOL;
    *reward = (float)(-dist - 0.01 * f * f + (done ? 10.0 : 0.0));
    *terminated = done;
    observe(p, obs);
}

static int pr_get_state(const void *state, double *out, int cap)
{
    const struct point_reach *p = state;
    const double s[3] = {p->pos, p->vel, p->target};
    for (int k = 0; k < 3 && k < cap; k++)
        out[k] = s[k];
    return 3;
}

static int pr_set_state(void *state, const double *in, int n)
{
    struct point_reach *p = state;
    if (n != 3)
        return -1;
    p->pos = in[0], p->vel = in[1], p->target = in[2];
    return 0;
}

static const struct env_spec spec = {
    .id = "PointReach-v0",
    .obs = {.kind = SPACE_BOX, .dim = 3, .low = obs_low, .high = obs_high},
    .act = {.kind = SPACE_BOX, .dim = 1, .low = act_low, .high = act_high},
    .max_episode_steps = 200,
    .reward_threshold = NAN,
    .state_size = sizeof(struct point_reach),
    .reset = pr_reset,
    .step = pr_step,
    .get_state = pr_get_state,
    .set_state = pr_set_state,
};

__attribute__((visibility("default"))) const struct env_spec *tributary_env(void)
{
    return &spec;
}
