/* MjPendulum-v0, a plug-in that holds a simulator through the env contract
 * of ABI 2, written on the MuJoCo env kit (envs/mujoco_env.h): an inverted
 * pendulum on a cart in MuJoCo (shaped like Gymnasium's InvertedPendulum,
 * not a port of it). Built as libmj_pendulum.so, it exports
 * tributary_env_open and is run with
 *     trib-env ./libmj_pendulum.so [--env-arg model=PATH.xml]
 *
 * What is its own is below: the model (embedded, or --env-arg
 * model=PATH.xml), what it needs of a model (one actuator, two degrees of
 * freedom), its constants, and its step (reward 1, the end when the pole
 * leans beyond 0.2 rad, info "reward_upright" and "x_position"). The kit
 * does the rest: the model loaded without blocking (a FIFO is refused, not
 * waited on) with MuJoCo's errors as messages, never its "Press Enter" and
 * exit; the spec filled from it (observation [qpos..., qvel...], the
 * action's bounds from the actuator's ctrlrange); an mjData per env;
 * reset (qpos0 + U(-0.01, 0.01), qvel U(-0.01, 0.01)); get/set_state;
 * save/load of everything a later step reads (qacc_warmstart included, so
 * a resumed env steps bit for bit as the saved one); info; unload. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "envs/mujoco_env.h"

#define ENV_ID "MjPendulum-v0"
#define UPRIGHT 0.2           /* |pole angle| (rad) beyond which the episode ends */

/* The default model: a cart on a rail (slider, range +-1 m) carrying a pole
 * on a hinge (range +-90 deg), one motor on the slider (gear 100, ctrl in
 * [-3, 3]), RK4 at 0.02 s. */
static const char default_model[] =
    "<mujoco model=\"mj_pendulum\">\n"
    "  <compiler inertiafromgeom=\"true\"/>\n"
    "  <default>\n"
    "    <joint armature=\"0\" damping=\"1\" limited=\"true\"/>\n"
    "    <geom contype=\"0\" friction=\"1 0.1 0.1\"/>\n"
    "  </default>\n"
    "  <option gravity=\"0 0 -9.81\" integrator=\"RK4\" timestep=\"0.02\"/>\n"
    "  <worldbody>\n"
    "    <geom name=\"rail\" type=\"capsule\" quat=\"0.707 0 0.707 0\" size=\"0.02 1\"/>\n"
    "    <body name=\"cart\">\n"
    "      <joint name=\"slider\" type=\"slide\" axis=\"1 0 0\" range=\"-1 1\"/>\n"
    "      <geom name=\"cart\" type=\"capsule\" quat=\"0.707 0 0.707 0\" size=\"0.1 0.1\"/>\n"
    "      <body name=\"pole\">\n"
    "        <joint name=\"hinge\" type=\"hinge\" axis=\"0 1 0\" range=\"-90 90\"/>\n"
    "        <geom name=\"cpole\" type=\"capsule\" fromto=\"0 0 0 0.001 0 0.6\" size=\"0.049 0.3\"/>\n"
    "      </body>\n"
    "    </body>\n"
    "  </worldbody>\n"
    "  <actuator>\n"
    "    <motor name=\"slide\" joint=\"slider\" gear=\"100\" ctrllimited=\"true\" ctrlrange=\"-3 3\"/>\n"
    "  </actuator>\n"
    "</mujoco>\n";

/* reward 1 a step; the episode ends when the pole leans beyond UPRIGHT
 * or the state is not finite. */
static void step(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    const mjModel *m = e->m;
    const mjData *d = e->d;
    env_mj_do_simulation(e, action);   /* MuJoCo clamps the action to ctrlrange */
    bool upright = isfinite(d->qpos[1]) && fabs(d->qpos[1]) <= UPRIGHT;
    for (int k = 0; k < m->nq + m->nv && upright; k++)
        upright = isfinite(k < m->nq ? d->qpos[k] : d->qvel[k - m->nq]);
    e->info[0] = 1.0;
    e->info[1] = d->qpos[0];
    *reward = 1.0;
    *terminated = !upright;
}

/* qpos[0]: the cart, qpos[1]: the pole (the kit checks the actuators). */
static int check_model(const mjModel *m, const void *params, char *why, size_t why_size)
{
    (void)params;
    if (m->nq >= 2 && m->nv >= 2) return 0;
    snprintf(why, why_size, "has %d degrees of freedom, " ENV_ID " needs at least 2", m->nv < m->nq ? m->nv : m->nq);
    return -1;
}

static const char *const info_names[] = {"reward_upright", "x_position"};

static const struct env_mj_def pendulum = {
    .id = ENV_ID,
    .frame_skip = 2,            /* model steps per env step */
    .max_episode_steps = 1000,
    .reward_threshold = 950.0,
    .nu = 1,
    .xml = default_model,       /* without --env-arg model=PATH.xml */
    .xml_name = "mj_pendulum.xml",
    .noise_scale = 0.01,        /* qpos0 + U(-0.01, 0.01), then qvel U(-0.01, 0.01) */
    .qvel_noise = ENV_MJ_QVEL_UNIFORM,
    .step = step,
    .info_count = 2,
    .info_names = info_names,
    .check_model = check_model,
};

/* The entry point: the arguments, then the kit's load. */
__attribute__((visibility("default"))) const struct env_spec *
tributary_env_open(const struct env_args *args, char *err, size_t err_size)
{
    const char *path = NULL;
    for (int i = 0; args && i < args->n; i++) {
        if (strcmp(args->keys[i], "model") != 0) {
            snprintf(err, err_size, "unknown --env-arg '%s' (takes model=PATH)", args->keys[i]);
            return NULL;
        }
        path = args->values[i];
    }
    return env_mj_open(&pendulum, path, NULL, err, err_size);
}
