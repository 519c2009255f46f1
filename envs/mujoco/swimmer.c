/* Swimmer-v4: Gymnasium 0.29.1's swimmer_v4.py with its default arguments
 * (forward_reward_weight 1, ctrl_cost_weight 1e-4, reset_noise_scale 0.1,
 * exclude_current_positions_from_observation True) over the shared base
 * (the MuJoCo env kit, envs/mujoco_env.h).
 *
 * frame_skip 4. Reward: (x after - x before) / dt - 1e-4 sum(action^2),
 * with x = qpos[0] and dt = timestep * frame_skip. Observation: qpos[2:],
 * qvel. Never terminated; truncated at 1000 steps. Info, in Gymnasium's
 * order: reward_fwd, reward_ctrl, x_position, y_position,
 * distance_from_origin, x_velocity, y_velocity, forward_reward. */
#include <math.h>

#include "envs/mujoco/mj_env.h"

MJ_MODEL(swimmer);

static void swimmer_step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    const mjData *d = e->d;
    double x_before = d->qpos[0], y_before = d->qpos[1];
    env_mj_do_simulation(e, action);
    double x_after = d->qpos[0], y_after = d->qpos[1];
    double x_velocity = (x_after - x_before) / e->dt;
    double y_velocity = (y_after - y_before) / e->dt;
    double forward_reward = 1.0 * x_velocity;
    double ctrl_cost = 1e-4 * env_mj_sum_sq(action, e->m->nu);
    *reward = forward_reward - ctrl_cost;
    *terminated = false;
    double *info = e->info;
    info[0] = forward_reward;                                    /* reward_fwd */
    info[1] = -ctrl_cost;                                        /* reward_ctrl */
    info[2] = x_after;                                           /* x_position */
    info[3] = y_after;                                           /* y_position */
    info[4] = sqrt(x_after * x_after + y_after * y_after);       /* distance_from_origin */
    info[5] = x_velocity;
    info[6] = y_velocity;
    info[7] = forward_reward;
}

static const char *const swimmer_info[] = {
    "reward_fwd", "reward_ctrl", "x_position", "y_position",
    "distance_from_origin", "x_velocity", "y_velocity", "forward_reward",
};

const struct env_mj_def mj_swimmer_def = {
    .id = "Swimmer-v4",
    .xml_name = "swimmer.xml",
    .xml = mj_model_swimmer,
    .frame_skip = 4,
    .max_episode_steps = 1000,
    .reward_threshold = 360.0,
    .nu = 2,
    .obs_qpos_skip = 2,   /* observation: qpos[2:], qvel */
    .noise_scale = 0.1,   /* qpos = init_qpos + U(-0.1, 0.1)^nq, then qvel = init_qvel + U(-0.1, 0.1)^nv. */
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .step = swimmer_step,
    .info_count = 8,
    .info_names = swimmer_info,
};
