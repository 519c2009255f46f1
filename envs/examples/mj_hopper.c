/* MjHopper-v0: a new robot on the MuJoCo env kit (envs/mujoco_env.h), here
 * Gymnasium's Hopper-v4 with its constructor's arguments as --env-args.
 * With the defaults it steps as the built-in Hopper-v4, bit for bit
 * (tests/envs/test_mujoco_kit.c); the kit does the rest of the contract
 * (the model loaded without blocking, MuJoCo's errors as messages, the
 * spec, an mjData per env, reset, save/load, info, unload). Built as
 * libmj_hopper.so and run with
 *     trib-env --env-arg model=hopper.xml [--env-arg ctrl_cost_weight=0.01 ...] ./libmj_hopper.so
 * (hopper.xml: Gymnasium's, or envs/mujoco/models/hopper.xml). Compiled
 * with -ffp-contract=off, as Gymnasium's float64 has no fused
 * multiply-adds. docs/sdk.md "A MuJoCo plug-in" walks through this file. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/mujoco_env.h"

/* The arguments: hopper_v4.py's keyword arguments of the same names. */
struct hopper_args {
    double forward_reward_weight;   /* 1 */
    double ctrl_cost_weight;        /* 1e-3 */
    double healthy_reward;          /* 1, paid when unhealthy too */
    double healthy_z_min;           /* healthy_z_range (0.7, inf) */
    double healthy_angle;           /* healthy_angle_range (-0.2, 0.2) */
};

static const struct hopper_args defaults = {1.0, 1e-3, 1.0, 0.7, 0.2};

/* --env-arg KEY=VALUE, besides model=PATH: one row each. */
static const struct {
    const char *key;
    size_t at;
} arg_table[] = {
    {"forward_reward_weight", offsetof(struct hopper_args, forward_reward_weight)},
    {"ctrl_cost_weight", offsetof(struct hopper_args, ctrl_cost_weight)},
    {"healthy_reward", offsetof(struct hopper_args, healthy_reward)},
    {"healthy_z_min", offsetof(struct hopper_args, healthy_z_min)},
    {"healthy_angle", offsetof(struct hopper_args, healthy_angle)},
};
#define N_ARGS (sizeof arg_table / sizeof arg_table[0])

/* Healthy: every qpos[2:] and qvel in (-100, 100), z above healthy_z_min,
 * the torso's angle within +-healthy_angle (all strict, as Gymnasium). */
static bool is_healthy(const struct env_mj *e)
{
    const struct hopper_args *p = e->params;
    const double *qpos = e->d->qpos, *qvel = e->d->qvel;
    for (int k = 2; k < e->m->nq; k++)
        if (!(-100.0 < qpos[k] && qpos[k] < 100.0)) return false;
    for (int k = 0; k < e->m->nv; k++)
        if (!(-100.0 < qvel[k] && qvel[k] < 100.0)) return false;
    double z = qpos[1], angle = qpos[2];
    return p->healthy_z_min < z && z < INFINITY && -p->healthy_angle < angle && angle < p->healthy_angle;
}

/* hopper_v4.py's step: reward, termination and info; the kit observes. */
static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    const struct hopper_args *p = e->params;
    double x_before = e->d->qpos[0];
    env_mj_do_simulation(e, action);
    double x_after = e->d->qpos[0];
    double x_velocity = (x_after - x_before) / e->dt;
    double ctrl_cost = p->ctrl_cost_weight * env_mj_sum_sq(action, e->m->nu);
    double forward_reward = p->forward_reward_weight * x_velocity;
    *reward = (forward_reward + p->healthy_reward) - ctrl_cost;
    *terminated = !is_healthy(e);
    e->info[0] = x_after;
    e->info[1] = x_velocity;
}

static const char *const info_names[] = {"x_position", "x_velocity"};

/* The row: Hopper-v4's constants; the observation qpos[1:] and qvel
 * clipped to +-10, the reset noise qpos + U(-5e-3, 5e-3) then
 * qvel + U(-5e-3, 5e-3), are the kit's usual ones. */
static const struct env_mj_def hopper = {
    .id = "MjHopper-v0",
    .frame_skip = 4,
    .max_episode_steps = 1000,
    .reward_threshold = 3800.0,
    .nu = 3,
    .obs_qpos_skip = 1,
    .obs_qvel_clip = 10.0,
    .noise_scale = 5e-3,
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .step = step,
    .info_count = 2,
    .info_names = info_names,
};

/* The arguments into *p; 0, or -1 with the message in err. */
static int parse_args(const struct env_args *args, struct hopper_args *p, const char **model, char *err,
                      size_t err_size)
{
    *p = defaults;
    *model = NULL;
    for (int i = 0; args && i < args->n; i++) {
        const char *key = args->keys[i], *value = args->values[i];
        if (strcmp(key, "model") == 0) {
            *model = value;
            continue;
        }
        size_t k = 0;
        while (k < N_ARGS && strcmp(key, arg_table[k].key) != 0) k++;
        if (k == N_ARGS) {
            snprintf(err, err_size, "unknown --env-arg '%s' (takes model=PATH.xml, forward_reward_weight, "
                     "ctrl_cost_weight, healthy_reward, healthy_z_min, healthy_angle)", key);
            return -1;
        }
        char *end;
        double x = strtod(value, &end);
        if (end == value || *end || !isfinite(x)) {
            snprintf(err, err_size, "--env-arg %s=%s: not a finite number", key, value);
            return -1;
        }
        memcpy((char *)p + arg_table[k].at, &x, sizeof x);
    }
    if (!*model) {
        snprintf(err, err_size, "needs --env-arg model=PATH.xml (Gymnasium's hopper.xml)");
        return -1;
    }
    return 0;
}

__attribute__((visibility("default"))) const struct env_spec *
tributary_env_open(const struct env_args *args, char *err, size_t err_size)
{
    struct hopper_args *p = malloc(sizeof *p);
    const char *model;
    if (!p) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    if (parse_args(args, p, &model, err, err_size) != 0) {
        free(p);
        return NULL;
    }
    return env_mj_open(&hopper, model, p, err, err_size);   /* p is the spec's from here */
}
