/* Pendulum-v1, Gymnasium's classic_control/pendulum.py in float64 step for
 * step (angle_normalize as NumPy's floor modulo, torque and speed clipping).
 * Built with -ffp-contract=off; needs only libm. */
#include <math.h>
#include <string.h>

#include "envs/builtin.h"

#define MAX_SPEED 8.0
#define MAX_TORQUE 2.0
#define DT 0.05
#define G 10.0
#define M 1.0
#define L 1.0

struct pendulum {
    double s[2]; /* th, thdot */
};

static const double obs_low[3] = {-1.0, -1.0, -MAX_SPEED};
static const double obs_high[3] = {1.0, 1.0, MAX_SPEED};
static const double act_low[1] = {-MAX_TORQUE};
static const double act_high[1] = {MAX_TORQUE};

static inline void pendulum_obs(const double *s, float *obs)
{
    obs[0] = (float)cos(s[0]);
    obs[1] = (float)sin(s[0]);
    obs[2] = (float)s[1];
}

static void pendulum_reset(void *state, uint64_t *rng, float *obs)
{
    struct pendulum *c = state;
    c->s[0] = env_rng_uniform(rng, -M_PI, M_PI);
    c->s[1] = env_rng_uniform(rng, -1.0, 1.0);
    pendulum_obs(c->s, obs);
}

/* Python's float % (NumPy's remainder): the result takes the divisor's sign. */
static inline double py_mod(double a, double b)
{
    double m = fmod(a, b);
    if (m != 0) {
        if ((b < 0) != (m < 0))
            m += b;
    } else {
        m = copysign(0.0, b);
    }
    return m;
}

static inline double angle_normalize(double x)
{
    return py_mod(x + M_PI, 2 * M_PI) - M_PI;
}

static inline void pendulum_step1(struct pendulum *c, const float *action, float *obs,
                                  float *reward, bool *terminated)
{
    double th = c->s[0], thdot = c->s[1];
    /* The float32 action is widened first: Gymnasium's fixtures were made with
     * float64 action arrays, so clip, u**2 and the torque term are float64. */
    double u = action[0];
    u = u < -MAX_TORQUE ? -MAX_TORQUE : u;
    u = u > MAX_TORQUE ? MAX_TORQUE : u;
    double an = angle_normalize(th);
    double costs = an * an + 0.1 * (thdot * thdot) + 0.001 * (u * u);
    double newthdot = thdot + (3 * G / (2 * L) * sin(th) + 3.0 / (M * (L * L)) * u) * DT;
    newthdot = newthdot < -MAX_SPEED ? -MAX_SPEED : newthdot;
    newthdot = newthdot > MAX_SPEED ? MAX_SPEED : newthdot;
    double newth = th + newthdot * DT;
    c->s[0] = newth;
    c->s[1] = newthdot;
    *reward = (float)-costs;
    *terminated = false;
    pendulum_obs(c->s, obs);
}

static void pendulum_step(void *state, const void *action, float *obs, float *reward,
                          bool *terminated)
{
    pendulum_step1(state, action, obs, reward, terminated);
}

void env_pendulum_step_batch(void *states, const void *actions, float *obs, float *reward,
                             bool *terminated, int n)
{
    struct pendulum *c = states;
    const float *a = actions;
    for (int i = 0; i < n; i++)
        pendulum_step1(&c[i], a + i, obs + 3 * i, reward + i, terminated + i);
}

static int pendulum_get_state(const void *state, double *out, int cap)
{
    const struct pendulum *c = state;
    for (int k = 0; k < 2 && k < cap; k++)
        out[k] = c->s[k];
    return 2;
}

static int pendulum_set_state(void *state, const double *in, int n)
{
    struct pendulum *c = state;
    if (n != 2)
        return -1;
    memcpy(c->s, in, sizeof c->s);
    return 0;
}

const struct env_spec env_pendulum_spec = {
    .id = "Pendulum-v1",
    .obs = {.kind = SPACE_BOX, .dim = 3, .low = obs_low, .high = obs_high},
    .act = {.kind = SPACE_BOX, .dim = 1, .low = act_low, .high = act_high},
    .max_episode_steps = 200,
    .reward_threshold = NAN, /* Gymnasium registers none */
    .state_size = sizeof(struct pendulum),
    .reset = pendulum_reset,
    .step = pendulum_step,
    .get_state = pendulum_get_state,
    .set_state = pendulum_set_state,
};
