/* Hopper-v4: Gymnasium 0.29.1's hopper_v4.py with its default arguments
 * (forward_reward_weight 1, ctrl_cost_weight 1e-3, healthy_reward 1,
 * terminate_when_unhealthy, healthy_state_range (-100, 100) over qpos[2:]
 * and all of qvel, healthy_z_range (0.7, inf), healthy_angle_range
 * (-0.2, 0.2), all strict; reset_noise_scale 5e-3; x excluded). */
#include "envs/mujoco/mj_env.h"

MJ_MODEL(hopper);

#define RESET_NOISE_SCALE 5e-3

enum { N_INFO = 2 };
static const char *const info_names[N_INFO] = MJ_WALKER_INFO_NAMES;

static bool is_healthy(const struct env_mj *e)
{
    const double *qpos = e->d->qpos, *qvel = e->d->qvel;
    for (int k = 2; k < e->m->nq; k++)
        if (!(-100.0 < qpos[k] && qpos[k] < 100.0)) return false;
    for (int k = 0; k < e->m->nv; k++)
        if (!(-100.0 < qvel[k] && qvel[k] < 100.0)) return false;
    double z = qpos[1], angle = qpos[2];
    return 0.7 < z && z < INFINITY && -0.2 < angle && angle < 0.2;
}

static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    mj_env_step_walker(e, action, reward, terminated, is_healthy);
}

const struct env_mj_def mj_hopper_def = {
    .id = "Hopper-v4",
    .xml_name = "hopper.xml",
    .xml = mj_model_hopper,
    .frame_skip = 4,
    .max_episode_steps = 1000,
    .reward_threshold = 3800.0,
    .nu = 3,
    .obs_qpos_skip = 1,   /* observation: qpos[1:], qvel clipped to +-10 */
    .obs_qvel_clip = 10.0,
    .noise_scale = RESET_NOISE_SCALE,   /* qpos + U(-5e-3, 5e-3), then qvel + U(-5e-3, 5e-3). */
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .step = step,
    .info_count = N_INFO,
    .info_names = info_names,
};
