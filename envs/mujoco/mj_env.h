/* Private to envs/: what every MuJoCo v4 env shares. An env is one row,
 * a `struct mj_env_def` (its model, constants and its own equations: reset
 * noise, observation, reward and termination); the base (mj_env.c) does
 * the rest: loading the model from the XML compiled into the library,
 * filling the spec from it, create/destroy, get/set_state, save/load of
 * the whole mjData, the simulation step and info.
 *
 * Order of calls, as Gymnasium 0.29.1's MujocoEnv:
 *   reset: mj_resetData (its equal, without clearing the constraint rows);
 *          the reset noise (noise_scale/qvel_noise, or the env's reset_noise)
 *          added to d->qpos and d->qvel, which hold qpos0 and 0; mj_forward;
 *          def->observe.
 *   step:  def->step reads what it needs before (mjData as the last step
 *          left it: stale mid-episode, fresh after reset/set_state), calls
 *          mj_env_do_simulation (ctrl = action; frame_skip x mj_step; one
 *          mj_rnePostConstraint), computes reward, termination and info;
 *          then the base calls def->observe.
 *   set_state: copy qpos, qvel; mj_forward (nothing else). */
#ifndef TRIB_ENVS_MUJOCO_MJ_ENV_H
#define TRIB_ENVS_MUJOCO_MJ_ENV_H

#include <math.h>
#include <mujoco/mujoco.h>
#include <stdbool.h>
#include <stdint.h>

#include "envs/env.h"

#define MJ_MAX_INFO 12   /* info values per env */
#define MJ_MAX_BODIES 4  /* bodies an env looks up by name */

struct mj_env;

/* One env: a row of the suite's table (registry.c). */
struct mj_env_def {
    const char *id;                 /* "Hopper-v4" */
    const char *model_file;         /* "hopper.xml": Gymnasium's asset name */
    const char *xml;                /* the model, compiled in (mj_model_<name>) */
    const int *xml_size;            /* its length in bytes */
    int frame_skip;
    int max_episode_steps;          /* Gymnasium's registration */
    double reward_threshold;        /* NAN where Gymnasium registers none */
    int nu;                         /* actuators the env is written for */
    /* The observation: most envs' is data, qpos[obs_qpos_skip:] then qvel
     * clipped to +-obs_qvel_clip (0: not clipped); an env that observes
     * more gives its own obs_dim and observe (both, or neither). */
    int obs_qpos_skip;
    double obs_qvel_clip;
    int (*obs_dim)(const mjModel *m);
    /* Gymnasium's reset_model noise, drawn in its order, added to d->qpos
     * (holding qpos0) and d->qvel (holding 0): most envs' is data, qpos +
     * U(-s, s) then qvel + U(-s, s) or s * N(0, 1) (s = noise_scale); an env
     * whose reset does more (Reacher's goal) gives its own reset_noise. */
    double noise_scale;
    enum { MJ_QVEL_UNIFORM, MJ_QVEL_NORMAL } qvel_noise;
    void (*reset_noise)(struct mj_env *e, uint64_t *rng);   /* NULL: the above */
    /* Write obs_dim floats from mjData as it stands (float32 casts). */
    void (*observe)(const struct mj_env *e, float *obs);   /* NULL: the above */
    /* One env step around mj_env_do_simulation: reward, termination and
     * e->info[0 .. info_count). */
    void (*step)(struct mj_env *e, const float *action, double *reward, bool *terminated);
    int info_count;
    const char *const *info_names;
    /* Bodies the env reads by name (NULL-terminated, at most
     * MJ_MAX_BODIES); their ids are in e->body[] in this order. */
    const char *const *bodies;
};

/* What the registry made once per process for one env. */
struct mj_loaded {
    struct env_spec spec;           /* first: the spec's address is this one's */
    const struct mj_env_def *def;
    mjModel *m;
    double dt;                      /* timestep * frame_skip, as Gymnasium's dt */
    int body[MJ_MAX_BODIES];
    /* What save writes of mjData's buffer: every array but the contacts
     * and the efc_* constraint arrays (sized by njmax/nconmax, rebuilt by
     * the next mj_step's mj_forward before anything reads them). */
    int nseg;
    struct mj_seg { size_t off, size; } *seg;   /* byte ranges of d->buffer */
    size_t saved_arrays;            /* sum of seg[].size */
    size_t qpos_at, qvel_at;        /* where qpos, qvel lie in the saved arrays */
    double *bounds;                 /* obs low, obs high, act low, act high */
};

/* The state block of every MuJoCo env (spec->state_size = its size). */
struct mj_env {
    const struct mj_loaded *L;      /* set by create, kept by load */
    const mjModel *m;
    mjData *d;
    int64_t steps;                  /* env steps since the last reset */
    const int *body;                /* L->body */
    double dt;                      /* L->dt */
    int frame_skip;                 /* L->def->frame_skip */
    int pad_;
    double info[MJ_MAX_INFO];       /* the last step's info values */
};

/* ctrl = action (float32 widened, not clipped: MuJoCo clamps ctrllimited
 * actuators itself), frame_skip x mj_step, then mj_rnePostConstraint once
 * (Gymnasium's _step_mujoco_simulation). */
void mj_env_do_simulation(struct mj_env *e, const float *action);

/* Hopper-v4's and Walker2d-v4's step, the same equations with the same
 * defaults in hopper_v4.py and walker2d_v4.py: forward reward x velocity
 * (weight 1), healthy reward 1 (paid when unhealthy too), control cost
 * 1e-3 * sum(action^2), terminated when not healthy(e) after the step;
 * info [x_position, x_velocity] (MJ_WALKER_INFO_NAMES). */
#define MJ_WALKER_INFO_NAMES {"x_position", "x_velocity"}
void mj_env_step_walker(struct mj_env *e, const float *action, double *reward, bool *terminated,
                        bool (*healthy)(const struct mj_env *e));

/* The env's spec, its model loaded from def->xml through MuJoCo's VFS and
 * checked (actuator count, bodies). NULL with the message in err ("Hopper-v4:
 * model: ...", "Hopper-v4: model has 2 actuators, the env needs 3"). The
 * result lives until the process ends. */
struct mj_loaded *mj_env_load(const struct mj_env_def *def, char *err, size_t err_size);

/* sum of action[k]^2 over n values, in float64 (the action widened first,
 * as Gymnasium sees a float64 action array). */
static inline double mj_env_sum_sq(const float *a, int n)
{
    double s = 0.0;
    for (int k = 0; k < n; k++) {
        double x = (double)a[k];
        s += x * x;
    }
    return s;
}

/* The embedded models (generated by envs/mujoco/CMakeLists.txt). */
#define MJ_MODEL(name)                                                                             \
    extern const char mj_model_##name[];                                                           \
    extern const int mj_model_##name##_size

#endif
