/* InvertedDoublePendulum-v4: Gymnasium 0.29.1's
 * inverted_double_pendulum_v4.py over the MuJoCo env kit (envs/mujoco_env.h).
 *
 * frame_skip 5 (what the env passes to MujocoEnv; the model's custom
 * numeric says 2 and is not read). Observation: qpos[0], sin(qpos[1:]),
 * cos(qpos[1:]), clip(qvel, -10, 10), clip(qfrc_constraint, -10, 10).
 * Reward, from mjData as the last mj_step left it (no mj_forward):
 * 10 - (0.01 x^2 + (y - 2)^2) - (1e-3 v1^2 + 5e-3 v2^2), with (x, _, y) =
 * site_xpos[0] (the pole's tip) and v1, v2 = qvel[1], qvel[2] unclipped.
 * Terminated when y <= 1. No info. */
#include <math.h>

#include "envs/mujoco/mj_env.h"

MJ_MODEL(inverted_double_pendulum);

static int idp_obs_dim(const mjModel *m)
{
    return 1 + 2 * (m->nq - 1) + 2 * m->nv;
}

static double clip10(double x)
{
    return x < -10.0 ? -10.0 : x > 10.0 ? 10.0 : x;   /* np.clip(x, -10, 10) */
}

static void idp_observe(const struct env_mj *e, float *obs)
{
    const mjData *d = e->d;
    int nq = e->m->nq, nv = e->m->nv, i = 0;
    obs[i++] = (float)d->qpos[0];
    for (int k = 1; k < nq; k++)
        obs[i++] = (float)sin(d->qpos[k]);
    for (int k = 1; k < nq; k++)
        obs[i++] = (float)cos(d->qpos[k]);
    for (int k = 0; k < nv; k++)
        obs[i++] = (float)clip10(d->qvel[k]);
    for (int k = 0; k < nv; k++)
        obs[i++] = (float)clip10(d->qfrc_constraint[k]);
}

static void idp_step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    env_mj_do_simulation(e, action);
    const mjData *d = e->d;
    double x = d->site_xpos[0], y = d->site_xpos[2];
    double dist_penalty = 0.01 * (x * x) + (y - 2) * (y - 2);
    double v1 = d->qvel[1], v2 = d->qvel[2];
    double vel_penalty = 1e-3 * (v1 * v1) + 5e-3 * (v2 * v2);
    double alive_bonus = 10;
    *reward = alive_bonus - dist_penalty - vel_penalty;
    *terminated = y <= 1;
}

const struct env_mj_def mj_inverted_double_pendulum_def = {
    .id = "InvertedDoublePendulum-v4",
    .xml_name = "inverted_double_pendulum.xml",
    .xml = mj_model_inverted_double_pendulum,
    .frame_skip = 5,
    .max_episode_steps = 1000,
    .reward_threshold = 9100.0,
    .nu = 1,
    .obs_dim = idp_obs_dim,
    .noise_scale = 0.1,   /* qpos = init_qpos + U(-0.1, 0.1)^nq, qvel = init_qvel + 0.1 N(0, 1)^nv. */
    .qvel_noise = ENV_MJ_QVEL_NORMAL,
    .observe = idp_observe,
    .step = idp_step,
};
