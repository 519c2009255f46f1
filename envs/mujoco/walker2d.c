/* Walker2d-v4: Gymnasium 0.29.1's walker2d_v4.py with its default arguments
 * (forward_reward_weight 1, ctrl_cost_weight 1e-3, healthy_reward 1,
 * terminate_when_unhealthy, healthy_z_range (0.8, 2.0), healthy_angle_range
 * (-1, 1), both strict; no state range; reset_noise_scale 5e-3; x
 * excluded). */
#include "envs/mujoco/mj_env.h"

MJ_MODEL(walker2d);

#define RESET_NOISE_SCALE 5e-3

enum { N_INFO = 2 };
static const char *const info_names[N_INFO] = MJ_WALKER_INFO_NAMES;

static bool is_healthy(const struct env_mj *e)
{
    double z = e->d->qpos[1], angle = e->d->qpos[2];
    return 0.8 < z && z < 2.0 && -1.0 < angle && angle < 1.0;
}

static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    mj_env_step_walker(e, action, reward, terminated, is_healthy);
}

const struct env_mj_def mj_walker2d_def = {
    .id = "Walker2d-v4",
    .xml_name = "walker2d.xml",
    .xml = mj_model_walker2d,
    .frame_skip = 4,
    .max_episode_steps = 1000,
    .reward_threshold = NAN,   /* none registered */
    .nu = 6,
    .obs_qpos_skip = 1,   /* observation: qpos[1:], qvel clipped to +-10 */
    .obs_qvel_clip = 10.0,
    .noise_scale = RESET_NOISE_SCALE,   /* qpos + U(-5e-3, 5e-3), then qvel + U(-5e-3, 5e-3). */
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .step = step,
    .info_count = N_INFO,
    .info_names = info_names,
};
