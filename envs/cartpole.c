/* CartPole-v1, Gymnasium's classic_control/cartpole.py in float64 step for
 * step (euler integrator, same constants and order of operations). Built with
 * -ffp-contract=off; needs only libm. */
#include <math.h>
#include <string.h>

#include "envs/builtin.h"

#define GRAVITY 9.8
#define MASSCART 1.0
#define MASSPOLE 0.1
#define TOTAL_MASS (MASSPOLE + MASSCART)
#define LENGTH 0.5
#define POLEMASS_LENGTH (MASSPOLE * LENGTH)
#define FORCE_MAG 10.0
#define TAU 0.02
#define THETA_THRESHOLD (12 * 2 * M_PI / 360)
#define X_THRESHOLD 2.4

struct cartpole {
    double s[4];                 /* x, x_dot, theta, theta_dot */
    int steps_beyond_terminated; /* -1 = None */
    int pad_;
};

/* Gymnasium's bounds are float32 (so they hold the float32 observations). */
static const double obs_high[4] = {(float)(X_THRESHOLD * 2), INFINITY,
                                   (float)(THETA_THRESHOLD * 2), INFINITY};
static const double obs_low[4] = {(float)-(X_THRESHOLD * 2), -INFINITY,
                                  (float)-(THETA_THRESHOLD * 2), -INFINITY};

static inline void cartpole_obs(const struct cartpole *c, float *obs)
{
    for (int k = 0; k < 4; k++)
        obs[k] = (float)c->s[k];
}

static void cartpole_reset(void *state, uint64_t *rng, float *obs)
{
    struct cartpole *c = state;
    for (int k = 0; k < 4; k++)
        c->s[k] = env_rng_uniform(rng, -0.05, 0.05);
    c->steps_beyond_terminated = -1;
    c->pad_ = 0;
    cartpole_obs(c, obs);
}

static inline void cartpole_step1(struct cartpole *c, int action, float *obs,
                                  float *reward, bool *terminated)
{
    double x = c->s[0], x_dot = c->s[1], theta = c->s[2], theta_dot = c->s[3];
    double force = action == 1 ? FORCE_MAG : -FORCE_MAG;
    double costheta = cos(theta);
    double sintheta = sin(theta);
    double temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
    double thetaacc = (GRAVITY * sintheta - costheta * temp) /
                      (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS));
    double xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
    x = x + TAU * x_dot;
    x_dot = x_dot + TAU * xacc;
    theta = theta + TAU * theta_dot;
    theta_dot = theta_dot + TAU * thetaacc;
    c->s[0] = x;
    c->s[1] = x_dot;
    c->s[2] = theta;
    c->s[3] = theta_dot;
    bool term = x < -X_THRESHOLD || x > X_THRESHOLD || theta < -THETA_THRESHOLD ||
                theta > THETA_THRESHOLD;
    float r;
    if (!term) {
        r = 1.0f;
    } else if (c->steps_beyond_terminated < 0) {
        c->steps_beyond_terminated = 0;
        r = 1.0f;
    } else {
        c->steps_beyond_terminated++;
        r = 0.0f;
    }
    *reward = r;
    *terminated = term;
    obs[0] = (float)x;
    obs[1] = (float)x_dot;
    obs[2] = (float)theta;
    obs[3] = (float)theta_dot;
}

static void cartpole_step(void *state, const void *action, float *obs, float *reward,
                          bool *terminated)
{
    cartpole_step1(state, *(const int *)action, obs, reward, terminated);
}

void env_cartpole_step_batch(void *states, const void *actions, float *obs, float *reward,
                             bool *terminated, int n)
{
    struct cartpole *c = states;
    const int *a = actions;
    for (int i = 0; i < n; i++)
        cartpole_step1(&c[i], a[i], obs + 4 * i, reward + i, terminated + i);
}

static int cartpole_get_state(const void *state, double *out, int cap)
{
    const struct cartpole *c = state;
    for (int k = 0; k < 4 && k < cap; k++)
        out[k] = c->s[k];
    return 4;
}

static int cartpole_set_state(void *state, const double *in, int n)
{
    struct cartpole *c = state;
    if (n != 4)
        return -1;
    memcpy(c->s, in, sizeof c->s);
    c->steps_beyond_terminated = -1;
    c->pad_ = 0;
    return 0;
}

const struct env_spec env_cartpole_spec = {
    .id = "CartPole-v1",
    .obs = {.kind = SPACE_BOX, .dim = 4, .low = obs_low, .high = obs_high},
    .act = {.kind = SPACE_DISCRETE, .n = 2},
    .max_episode_steps = 500,
    .reward_threshold = 475.0,
    .state_size = sizeof(struct cartpole),
    .reset = cartpole_reset,
    .step = cartpole_step,
    .get_state = cartpole_get_state,
    .set_state = cartpole_set_state,
};
