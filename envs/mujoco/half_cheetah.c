/* HalfCheetah-v4: Gymnasium 0.29.1's half_cheetah_v4.py with its default
 * arguments (forward_reward_weight 1, ctrl_cost_weight 0.1,
 * reset_noise_scale 0.1, current x excluded from the observation). */
#include "envs/mujoco/mj_env.h"

MJ_MODEL(half_cheetah);

#define FORWARD_REWARD_WEIGHT 1.0
#define CTRL_COST_WEIGHT 0.1
#define RESET_NOISE_SCALE 0.1

enum { I_X_POSITION, I_X_VELOCITY, I_REWARD_RUN, I_REWARD_CTRL, N_INFO };
static const char *const info_names[N_INFO] = {"x_position", "x_velocity", "reward_run",
                                               "reward_ctrl"};

static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    double x_before = e->d->qpos[0];
    env_mj_do_simulation(e, action);
    double x_after = e->d->qpos[0];
    double x_velocity = (x_after - x_before) / e->dt;
    double ctrl_cost = CTRL_COST_WEIGHT * env_mj_sum_sq(action, e->m->nu);
    double forward_reward = FORWARD_REWARD_WEIGHT * x_velocity;
    *reward = forward_reward - ctrl_cost;
    *terminated = false;
    e->info[I_X_POSITION] = x_after;
    e->info[I_X_VELOCITY] = x_velocity;
    e->info[I_REWARD_RUN] = forward_reward;
    e->info[I_REWARD_CTRL] = -ctrl_cost;
}

const struct env_mj_def mj_half_cheetah_def = {
    .id = "HalfCheetah-v4",
    .xml_name = "half_cheetah.xml",
    .xml = mj_model_half_cheetah,
    .frame_skip = 5,
    .max_episode_steps = 1000,
    .reward_threshold = 4800.0,
    .nu = 6,
    .obs_qpos_skip = 1,   /* observation: qpos[1:], qvel */
    .noise_scale = RESET_NOISE_SCALE,   /* qpos + U(-0.1, 0.1) per coordinate, then qvel + 0.1 N(0, 1). */
    .qvel_noise = ENV_MJ_QVEL_NORMAL,
    .step = step,
    .info_count = N_INFO,
    .info_names = info_names,
};
