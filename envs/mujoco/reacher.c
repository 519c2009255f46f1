/* Reacher-v4: Gymnasium 0.29.1's reacher_v4.py over the shared base
 * (the MuJoCo env kit, envs/mujoco_env.h).
 *
 * frame_skip 2. The whole reward is computed before the step, from mjData
 * as it stands then (the previous step's, or fresh after reset/set_state):
 * -|xpos[fingertip] - xpos[target]| - sum(action^2). The observation after
 * the step, from mjData as the last mj_step left it (no mj_forward):
 * cos(qpos[0:2]), sin(qpos[0:2]), qpos[2:] (the target), qvel[0:2],
 * xpos[fingertip] - xpos[target]. Never terminated (v4 returns False
 * always); truncated at 50 steps. Info: reward_dist, reward_ctrl. */
#include <math.h>

#include "envs/mujoco/mj_env.h"

MJ_MODEL(reacher);

enum { FINGERTIP, TARGET };   /* e->body[] */

static int reacher_obs_dim(const mjModel *m)
{
    return 2 + 2 + (m->nq - 2) + 2 + 3;
}

/* qpos = U(-0.1, 0.1)^nq + init_qpos; then the goal, drawn as U(-0.2, 0.2)^2
 * until its norm is < 0.2, replaces qpos[-2:]; qvel = init_qvel +
 * U(-0.005, 0.005)^nv with qvel[-2:] = 0. */
static void reacher_reset_noise(struct env_mj *e, uint64_t *rng)
{
    mjData *d = e->d;
    int nq = e->m->nq, nv = e->m->nv;
    for (int k = 0; k < nq; k++)
        d->qpos[k] += env_rng_uniform(rng, -0.1, 0.1);
    double g0, g1;
    do {
        g0 = env_rng_uniform(rng, -0.2, 0.2);
        g1 = env_rng_uniform(rng, -0.2, 0.2);
    } while (!(sqrt(g0 * g0 + g1 * g1) < 0.2));
    d->qpos[nq - 2] = g0;
    d->qpos[nq - 1] = g1;
    for (int k = 0; k < nv; k++)
        d->qvel[k] += env_rng_uniform(rng, -0.005, 0.005);
    d->qvel[nv - 2] = 0.0;
    d->qvel[nv - 1] = 0.0;
}

static void reacher_observe(const struct env_mj *e, float *obs)
{
    const mjData *d = e->d;
    const double *tip = d->xpos + 3 * e->body[FINGERTIP], *target = d->xpos + 3 * e->body[TARGET];
    int i = 0;
    obs[i++] = (float)cos(d->qpos[0]);
    obs[i++] = (float)cos(d->qpos[1]);
    obs[i++] = (float)sin(d->qpos[0]);
    obs[i++] = (float)sin(d->qpos[1]);
    for (int k = 2; k < e->m->nq; k++)
        obs[i++] = (float)d->qpos[k];
    obs[i++] = (float)d->qvel[0];
    obs[i++] = (float)d->qvel[1];
    for (int k = 0; k < 3; k++)
        obs[i++] = (float)(tip[k] - target[k]);
}

static void reacher_step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    const mjData *d = e->d;
    const double *tip = d->xpos + 3 * e->body[FINGERTIP], *target = d->xpos + 3 * e->body[TARGET];
    double v0 = tip[0] - target[0], v1 = tip[1] - target[1], v2 = tip[2] - target[2];
    double reward_dist = -sqrt(v0 * v0 + v1 * v1 + v2 * v2);
    double reward_ctrl = -env_mj_sum_sq(action, e->m->nu);
    *reward = reward_dist + reward_ctrl;
    env_mj_do_simulation(e, action);
    *terminated = false;
    e->info[0] = reward_dist;
    e->info[1] = reward_ctrl;
}

static const char *const reacher_info[] = {"reward_dist", "reward_ctrl"};
static const char *const reacher_bodies[] = {"fingertip", "target", NULL};

const struct env_mj_def mj_reacher_def = {
    .id = "Reacher-v4",
    .xml_name = "reacher.xml",
    .xml = mj_model_reacher,
    .frame_skip = 2,
    .max_episode_steps = 50,
    .reward_threshold = -3.75,
    .nu = 2,
    .obs_dim = reacher_obs_dim,
    .reset_noise = reacher_reset_noise,
    .observe = reacher_observe,
    .step = reacher_step,
    .info_count = 2,
    .info_names = reacher_info,
    .bodies = reacher_bodies,
};
