/* Acrobot-v1, Gymnasium's classic_control/acrobot.py in float64 step for step:
 * the "book" dynamics integrated by its rk4 over [0, dt], then wrap/bound.
 * Built with -ffp-contract=off; needs only libm. */
#include <math.h>
#include <string.h>

#include "envs/builtin.h"

#define DT 0.2
#define LINK_LENGTH_1 1.0
#define LINK_MASS_1 1.0
#define LINK_MASS_2 1.0
#define LINK_COM_POS_1 0.5
#define LINK_COM_POS_2 0.5
#define LINK_MOI 1.0
#define MAX_VEL_1 (4 * M_PI)
#define MAX_VEL_2 (9 * M_PI)
#define G 9.8

struct acrobot {
    double s[4]; /* theta1, theta2, dtheta1, dtheta2 */
};

static const double avail_torque[3] = {-1.0, 0.0, 1.0};
/* Gymnasium's bounds are float32 (so they hold the float32 observations). */
static const double obs_high[6] = {1.0, 1.0, 1.0, 1.0, (float)MAX_VEL_1, (float)MAX_VEL_2};
static const double obs_low[6] = {-1.0, -1.0, -1.0, -1.0, (float)-MAX_VEL_1, (float)-MAX_VEL_2};

static inline void acrobot_obs(const double *s, float *obs)
{
    obs[0] = (float)cos(s[0]);
    obs[1] = (float)sin(s[0]);
    obs[2] = (float)cos(s[1]);
    obs[3] = (float)sin(s[1]);
    obs[4] = (float)s[2];
    obs[5] = (float)s[3];
}

static void acrobot_reset(void *state, uint64_t *rng, float *obs)
{
    struct acrobot *c = state;
    /* Gymnasium draws float64 and stores the state as float32. */
    for (int k = 0; k < 4; k++)
        c->s[k] = (double)(float)env_rng_uniform(rng, -0.1, 0.1);
    acrobot_obs(c->s, obs);
}

/* _dsdt for the "book" dynamics; a is the torque, y the 4 state values. */
static inline void acrobot_dsdt(const double *y, double a, double *dy)
{
    const double m1 = LINK_MASS_1, m2 = LINK_MASS_2, l1 = LINK_LENGTH_1;
    const double lc1 = LINK_COM_POS_1, lc2 = LINK_COM_POS_2, I1 = LINK_MOI, I2 = LINK_MOI;
    const double g = G;
    double theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
    double cos2 = cos(theta2), sin2 = sin(theta2);
    double d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cos2) + I1 + I2;
    double d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cos2) + I2;
    double phi2 = m2 * lc2 * g * cos(theta1 + theta2 - M_PI / 2.0);
    double phi1 = -m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin2 -
                  2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2 +
                  (m1 * lc1 + m2 * l1) * g * cos(theta1 - M_PI / 2) + phi2;
    double ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin2 - phi2) /
                      (m2 * (lc2 * lc2) + I2 - (d2 * d2) / d1);
    double ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1;
    dy[1] = dtheta2;
    dy[2] = ddtheta1;
    dy[3] = ddtheta2;
}

static inline double wrap(double x, double m, double M)
{
    double diff = M - m;
    /* Gymnasium loops forever on an infinite angle and for ages on a huge one
     * (only reachable through set_state): answer NaN / a modulo instead. */
    if (__builtin_expect(!(fabs(x) <= 1e6), 0)) {
        if (isnan(x) || isinf(x))
            return NAN;
        x = m + fmod(x - m, diff);
        return x < m ? x + diff : x;
    }
    while (x > M)
        x = x - diff;
    while (x < m)
        x = x + diff;
    return x;
}

static inline double bound(double x, double m, double M)
{
    /* Python's min(max(x, m), M) */
    double t = m > x ? m : x;
    return M < t ? M : t;
}

static inline void acrobot_step1(struct acrobot *c, int action, float *obs, float *reward,
                                 bool *terminated)
{
    double torque = avail_torque[action];
    /* rk4 over t = [0, dt]; the torque rides along as a 5th, constant value. */
    const double dt = DT - 0;
    const double dt2 = dt / 2.0;
    const double dt6 = dt / 6.0;
    double y0[4], y[4], k1[4], k2[4], k3[4], k4[4];
    memcpy(y0, c->s, sizeof y0);
    acrobot_dsdt(y0, torque, k1);
    for (int k = 0; k < 4; k++)
        y[k] = y0[k] + dt2 * k1[k];
    acrobot_dsdt(y, torque, k2);
    for (int k = 0; k < 4; k++)
        y[k] = y0[k] + dt2 * k2[k];
    acrobot_dsdt(y, torque, k3);
    for (int k = 0; k < 4; k++)
        y[k] = y0[k] + dt * k3[k];
    acrobot_dsdt(y, torque, k4);
    double ns[4];
    for (int k = 0; k < 4; k++)
        ns[k] = y0[k] + dt6 * (k1[k] + 2 * k2[k] + 2 * k3[k] + k4[k]);
    ns[0] = wrap(ns[0], -M_PI, M_PI);
    ns[1] = wrap(ns[1], -M_PI, M_PI);
    ns[2] = bound(ns[2], -MAX_VEL_1, MAX_VEL_1);
    ns[3] = bound(ns[3], -MAX_VEL_2, MAX_VEL_2);
    memcpy(c->s, ns, sizeof ns);
    bool term = -cos(ns[0]) - cos(ns[1] + ns[0]) > 1.0;
    *reward = term ? 0.0f : -1.0f;
    *terminated = term;
    acrobot_obs(ns, obs);
}

static void acrobot_step(void *state, const void *action, float *obs, float *reward,
                         bool *terminated)
{
    acrobot_step1(state, *(const int *)action, obs, reward, terminated);
}

void env_acrobot_step_batch(void *states, const void *actions, float *obs, float *reward,
                            bool *terminated, int n)
{
    struct acrobot *c = states;
    const int *a = actions;
    for (int i = 0; i < n; i++)
        acrobot_step1(&c[i], a[i], obs + 6 * i, reward + i, terminated + i);
}

static int acrobot_get_state(const void *state, double *out, int cap)
{
    const struct acrobot *c = state;
    for (int k = 0; k < 4 && k < cap; k++)
        out[k] = c->s[k];
    return 4;
}

static int acrobot_set_state(void *state, const double *in, int n)
{
    struct acrobot *c = state;
    if (n != 4)
        return -1;
    memcpy(c->s, in, sizeof c->s);
    return 0;
}

const struct env_spec env_acrobot_spec = {
    .id = "Acrobot-v1",
    .obs = {.kind = SPACE_BOX, .dim = 6, .low = obs_low, .high = obs_high},
    .act = {.kind = SPACE_DISCRETE, .n = 3},
    .max_episode_steps = 500,
    .reward_threshold = -100.0,
    .state_size = sizeof(struct acrobot),
    .reset = acrobot_reset,
    .step = acrobot_step,
    .get_state = acrobot_get_state,
    .set_state = acrobot_set_state,
};
