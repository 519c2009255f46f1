/* What the MuJoCo v4 suite shares beyond the kit (envs/mujoco_env.h): the
 * walkers' step. Built with -ffp-contract=off. */
#include "envs/mujoco/mj_env.h"

void mj_env_step_walker(struct env_mj *e, const float *action, double *reward, bool *terminated,
                        bool (*healthy)(const struct env_mj *e))
{
    double x_before = e->d->qpos[0];
    env_mj_do_simulation(e, action);
    double x_after = e->d->qpos[0];
    double x_velocity = (x_after - x_before) / e->dt;
    double ctrl_cost = 1e-3 * env_mj_sum_sq(action, e->m->nu);
    double forward_reward = 1.0 * x_velocity;
    double healthy_reward = 1.0;   /* paid when unhealthy too */
    *reward = (forward_reward + healthy_reward) - ctrl_cost;
    *terminated = !healthy(e);
    e->info[0] = x_after;
    e->info[1] = x_velocity;
}
