/* InvertedPendulum-v4: Gymnasium 0.29.1's inverted_pendulum_v4.py over the
 * MuJoCo env kit (envs/mujoco_env.h). frame_skip 2; observation [qpos, qvel]; reward 1
 * every step; terminated when the observation is not finite or
 * |qpos[1]| > 0.2 (the hinge angle after the step); no info. */
#include <math.h>

#include "envs/mujoco/mj_env.h"

MJ_MODEL(inverted_pendulum);

static void ip_step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    env_mj_do_simulation(e, action);
    const mjData *d = e->d;
    bool finite = true;
    for (int k = 0; k < e->m->nq; k++)
        finite = finite && isfinite(d->qpos[k]);
    for (int k = 0; k < e->m->nv; k++)
        finite = finite && isfinite(d->qvel[k]);
    *reward = 1.0;
    *terminated = !finite || fabs(d->qpos[1]) > 0.2;
}

const struct env_mj_def mj_inverted_pendulum_def = {
    .id = "InvertedPendulum-v4",
    .xml_name = "inverted_pendulum.xml",
    .xml = mj_model_inverted_pendulum,
    .frame_skip = 2,
    .max_episode_steps = 1000,
    .reward_threshold = 950.0,
    .nu = 1,
    .obs_qpos_skip = 0,   /* observation: qpos[0:], qvel */
    .noise_scale = 0.01,   /* qpos = init_qpos + U(-0.01, 0.01)^nq, then qvel = init_qvel + U(-0.01, 0.01)^nv. */
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .step = ip_step,
};
