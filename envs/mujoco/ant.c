/* Ant-v4: Gymnasium 0.29.1's ant_v4.py with its default arguments
 * (ctrl_cost_weight 0.5, use_contact_forces False: no contact cost and no
 * cfrc_ext in the observation; healthy_reward 1, terminate_when_unhealthy,
 * healthy_z_range [0.2, 1.0] inclusive and every qpos/qvel finite;
 * reset_noise_scale 0.1; x, y excluded). */
#include "envs/mujoco/mj_env.h"

MJ_MODEL(ant);

#define CTRL_COST_WEIGHT 0.5
#define HEALTHY_REWARD 1.0
#define RESET_NOISE_SCALE 0.1

enum {
    I_REWARD_FORWARD, I_REWARD_CTRL, I_REWARD_SURVIVE, I_X_POSITION, I_Y_POSITION,
    I_DISTANCE_FROM_ORIGIN, I_X_VELOCITY, I_Y_VELOCITY, I_FORWARD_REWARD, N_INFO
};
static const char *const info_names[N_INFO] = {
    "reward_forward", "reward_ctrl", "reward_survive", "x_position", "y_position",
    "distance_from_origin", "x_velocity", "y_velocity", "forward_reward"};
static const char *const bodies[] = {"torso", NULL};

static int obs_dim(const mjModel *m)
{
    return m->nq - 2 + m->nv;
}

/* qpos[2:], qvel. */
static void observe(const struct env_mj *e, float *obs)
{
    for (int k = 2; k < e->m->nq; k++)
        *obs++ = (float)e->d->qpos[k];
    for (int k = 0; k < e->m->nv; k++)
        *obs++ = (float)e->d->qvel[k];
}

static bool is_healthy(const struct env_mj *e)
{
    for (int k = 0; k < e->m->nq; k++)
        if (!isfinite(e->d->qpos[k])) return false;
    for (int k = 0; k < e->m->nv; k++)
        if (!isfinite(e->d->qvel[k])) return false;
    double z = e->d->qpos[2];
    return 0.2 <= z && z <= 1.0;
}

static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    /* get_body_com("torso"): xpos as mjData holds it (stale mid-episode). */
    const double *torso = e->d->xpos + 3 * e->body[0];
    double x_before = torso[0], y_before = torso[1];
    env_mj_do_simulation(e, action);
    double x_after = torso[0], y_after = torso[1];
    double x_velocity = (x_after - x_before) / e->dt;
    double y_velocity = (y_after - y_before) / e->dt;
    double forward_reward = x_velocity;
    double healthy_reward = HEALTHY_REWARD;   /* paid when unhealthy too */
    double ctrl_cost = CTRL_COST_WEIGHT * env_mj_sum_sq(action, e->m->nu);
    *terminated = !is_healthy(e);
    *reward = (forward_reward + healthy_reward) - ctrl_cost;
    e->info[I_REWARD_FORWARD] = forward_reward;
    e->info[I_REWARD_CTRL] = -ctrl_cost;
    e->info[I_REWARD_SURVIVE] = healthy_reward;
    e->info[I_X_POSITION] = x_after;
    e->info[I_Y_POSITION] = y_after;
    e->info[I_DISTANCE_FROM_ORIGIN] = sqrt(x_after * x_after + y_after * y_after);
    e->info[I_X_VELOCITY] = x_velocity;
    e->info[I_Y_VELOCITY] = y_velocity;
    e->info[I_FORWARD_REWARD] = forward_reward;
}

const struct env_mj_def mj_ant_def = {
    .id = "Ant-v4",
    .xml_name = "ant.xml",
    .xml = mj_model_ant,
    .frame_skip = 5,
    .max_episode_steps = 1000,
    .reward_threshold = 6000.0,
    .nu = 8,
    .obs_dim = obs_dim,
    .noise_scale = RESET_NOISE_SCALE,   /* qpos + U(-0.1, 0.1), then qvel + 0.1 N(0, 1). */
    .qvel_noise = ENV_MJ_QVEL_NORMAL,
    .observe = observe,
    .step = step,
    .info_count = N_INFO,
    .info_names = info_names,
    .bodies = bodies,
};
