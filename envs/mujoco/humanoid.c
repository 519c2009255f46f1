/* Humanoid-v4: Gymnasium 0.29.1's humanoid_v4.py with its default
 * arguments (forward_reward_weight 1.25, ctrl_cost_weight 0.1 on data.ctrl,
 * no contact cost, healthy_reward 5, terminate_when_unhealthy,
 * healthy_z_range (1, 2) strict, reset_noise_scale 1e-2, x and y excluded).
 * The observation holds cinert, cvel and cfrc_ext of every body, the world
 * body included (v4's 376 values). */
#include "envs/mujoco/mj_env.h"

MJ_MODEL(humanoid);

#define FORWARD_REWARD_WEIGHT 1.25
#define CTRL_COST_WEIGHT 0.1
#define HEALTHY_REWARD 5.0
#define RESET_NOISE_SCALE 1e-2

enum {
    I_REWARD_LINVEL, I_REWARD_QUADCTRL, I_REWARD_ALIVE, I_X_POSITION, I_Y_POSITION,
    I_DISTANCE_FROM_ORIGIN, I_X_VELOCITY, I_Y_VELOCITY, I_FORWARD_REWARD, N_INFO
};
static const char *const info_names[N_INFO] = {
    "reward_linvel", "reward_quadctrl", "reward_alive", "x_position", "y_position",
    "distance_from_origin", "x_velocity", "y_velocity", "forward_reward"};

static int obs_dim(const mjModel *m)
{
    return (m->nq - 2) + m->nv + 10 * m->nbody + 6 * m->nbody + m->nv + 6 * m->nbody;
}

/* qpos[2:], qvel, cinert, cvel, qfrc_actuator, cfrc_ext (mjData as the last
 * step left it). */
static void observe(const struct env_mj *e, float *obs)
{
    const mjModel *m = e->m;
    const mjData *d = e->d;
    for (int k = 2; k < m->nq; k++)
        *obs++ = (float)d->qpos[k];
    for (int k = 0; k < m->nv; k++)
        *obs++ = (float)d->qvel[k];
    for (int k = 0; k < 10 * m->nbody; k++)
        *obs++ = (float)d->cinert[k];
    for (int k = 0; k < 6 * m->nbody; k++)
        *obs++ = (float)d->cvel[k];
    for (int k = 0; k < m->nv; k++)
        *obs++ = (float)d->qfrc_actuator[k];
    for (int k = 0; k < 6 * m->nbody; k++)
        *obs++ = (float)d->cfrc_ext[k];
}

/* mass_center: sum(body_mass * xipos, axis=0) / sum(body_mass), x and y. */
static void mass_center(const struct env_mj *e, double *x, double *y)
{
    const mjModel *m = e->m;
    double sx = 0.0, sy = 0.0, sm = 0.0;
    for (int b = 0; b < m->nbody; b++) {
        sx += m->body_mass[b] * e->d->xipos[3 * b];
        sy += m->body_mass[b] * e->d->xipos[3 * b + 1];
        sm += m->body_mass[b];
    }
    *x = sx / sm;
    *y = sy / sm;
}

static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    double x_before, y_before, x_after, y_after;
    mass_center(e, &x_before, &y_before);   /* stale mid-episode, as Gymnasium's */
    env_mj_do_simulation(e, action);
    mass_center(e, &x_after, &y_after);
    double x_velocity = (x_after - x_before) / e->dt;
    double y_velocity = (y_after - y_before) / e->dt;
    double ctrl_sq = 0.0;
    for (int k = 0; k < e->m->nu; k++)
        ctrl_sq += e->d->ctrl[k] * e->d->ctrl[k];
    double ctrl_cost = CTRL_COST_WEIGHT * ctrl_sq;
    double forward_reward = FORWARD_REWARD_WEIGHT * x_velocity;
    double healthy_reward = HEALTHY_REWARD;   /* paid when unhealthy too */
    *reward = (forward_reward + healthy_reward) - ctrl_cost;
    double z = e->d->qpos[2];
    *terminated = !(1.0 < z && z < 2.0);
    e->info[I_REWARD_LINVEL] = forward_reward;
    e->info[I_REWARD_QUADCTRL] = -ctrl_cost;
    e->info[I_REWARD_ALIVE] = healthy_reward;
    e->info[I_X_POSITION] = x_after;
    e->info[I_Y_POSITION] = y_after;
    e->info[I_DISTANCE_FROM_ORIGIN] = sqrt(x_after * x_after + y_after * y_after);
    e->info[I_X_VELOCITY] = x_velocity;
    e->info[I_Y_VELOCITY] = y_velocity;
    e->info[I_FORWARD_REWARD] = forward_reward;
}

const struct env_mj_def mj_humanoid_def = {
    .id = "Humanoid-v4",
    .xml_name = "humanoid.xml",
    .xml = mj_model_humanoid,
    .frame_skip = 5,
    .max_episode_steps = 1000,
    .reward_threshold = NAN,   /* none registered */
    .nu = 17,
    .obs_dim = obs_dim,
    .noise_scale = RESET_NOISE_SCALE,   /* qpos + U(-1e-2, 1e-2), then qvel + U(-1e-2, 1e-2). */
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .observe = observe,
    .step = step,
    .info_count = N_INFO,
    .info_names = info_names,
};
