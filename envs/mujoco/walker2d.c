/* Walker2d-v4: Gymnasium 0.29.1's walker2d_v4.py with its default arguments
 * (forward_reward_weight 1, ctrl_cost_weight 1e-3, healthy_reward 1,
 * terminate_when_unhealthy, healthy_z_range (0.8, 2.0), healthy_angle_range
 * (-1, 1), both strict; no state range; reset_noise_scale 5e-3; x
 * excluded). */
#include "envs/mujoco/mj_env.h"

MJ_MODEL(walker2d);

#define CTRL_COST_WEIGHT 1e-3
#define HEALTHY_REWARD 1.0
#define RESET_NOISE_SCALE 5e-3

enum { I_X_POSITION, I_X_VELOCITY, N_INFO };
static const char *const info_names[N_INFO] = {"x_position", "x_velocity"};

static bool is_healthy(const struct mj_env *e)
{
    double z = e->d->qpos[1], angle = e->d->qpos[2];
    return 0.8 < z && z < 2.0 && -1.0 < angle && angle < 1.0;
}

static void step(struct mj_env *e, const float *action, double *reward, bool *terminated)
{
    double x_before = e->d->qpos[0];
    mj_env_do_simulation(e, action);
    double x_after = e->d->qpos[0];
    double x_velocity = (x_after - x_before) / e->dt;
    double ctrl_cost = CTRL_COST_WEIGHT * mj_env_sum_sq(action, e->m->nu);
    double forward_reward = 1.0 * x_velocity;
    double healthy_reward = HEALTHY_REWARD;   /* paid when unhealthy too */
    *reward = (forward_reward + healthy_reward) - ctrl_cost;
    *terminated = !is_healthy(e);
    e->info[I_X_POSITION] = x_after;
    e->info[I_X_VELOCITY] = x_velocity;
}

const struct mj_env_def mj_walker2d_def = {
    .id = "Walker2d-v4",
    .model_file = "walker2d.xml",
    .xml = mj_model_walker2d,
    .xml_size = &mj_model_walker2d_size,
    .frame_skip = 4,
    .max_episode_steps = 1000,
    .reward_threshold = NAN,   /* none registered */
    .nu = 6,
    .obs_qpos_skip = 1,   /* observation: qpos[1:], qvel clipped to +-10 */
    .obs_qvel_clip = 10.0,
    .noise_scale = RESET_NOISE_SCALE,   /* qpos + U(-5e-3, 5e-3), then qvel + U(-5e-3, 5e-3). */
    .qvel_noise = MJ_QVEL_UNIFORM,
    .step = step,
    .info_count = N_INFO,
    .info_names = info_names,
};
