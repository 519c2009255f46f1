/* MjPendulum-v0, a plug-in that holds a simulator through the env contract
 * of ABI 2: an inverted pendulum on a cart in MuJoCo (shaped like
 * Gymnasium's InvertedPendulum, not a port of it). Built as
 * libmj_pendulum.so, it exports tributary_env_open and is run with
 *     trib-env ./libmj_pendulum.so [--env-arg model=PATH.xml]
 *
 * The contract, as this file meets it:
 *   load (tributary_env_open, once per process): the MJCF model (embedded
 *     below, or --env-arg model=PATH.xml) compiled into one mjModel; the
 *     spec is filled from it (observation [qpos..., qvel...], the action's
 *     bounds from the actuator's ctrlrange); errors name the model.
 *   MuJoCo's errors: envs/mujoco_sdk.h's handlers from the entry point on
 *     (released at unload), so an error is a message, never MuJoCo's
 *     "Press Enter" and exit; model=PATH must be a regular file (a FIFO
 *     is refused, not waited on).
 *   create/destroy: one mjData per env (env_mj_make_data / mj_deleteData).
 *   reset/step: on the thread that steps the vec_env; no allocation.
 *   save/load: everything a later step reads (time, qpos, qvel, act,
 *     qacc_warmstart, which the constraint solver starts from when the cart
 *     or the pole is at its limit, ctrl, applied forces, mocap, userdata)
 *     and the info of the last step, so a resumed env steps bit for bit as
 *     the one saved. Everything else in mjData a step recomputes first.
 *   get/set_state: [qpos..., qvel...] as float64; set_state copies both and
 *     calls mj_forward, nothing else (Gymnasium's MujocoEnv.set_state).
 *   info: "reward_upright" and "x_position" of the last step.
 *   unload: frees the model and the spec. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mujoco.h>

#include "envs/env.h"
#include "envs/mujoco_sdk.h"

#define ENV_ID "MjPendulum-v0"
#define FRAME_SKIP 2          /* model steps per env step */
#define UPRIGHT 0.2           /* |pole angle| (rad) beyond which the episode ends */
#define RESET_NOISE 0.01      /* initial qpos/qvel: model's + U(-0.01, 0.01) */

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

/* What the entry point loads once per process (spec->model). */
struct mjp_model {
    mjModel *m;
    double *obs_low, *obs_high;     /* nq + nv each: unbounded */
    double act_low[1], act_high[1];
};

/* One env's state block: its mjData (from create) and the last step's info. */
struct mjp_env {
    const mjModel *m;
    mjData *d;
    double info[2];                 /* reward_upright, x_position */
};

static const char *const info_names[2] = {"reward_upright", "x_position"};

static void observe(const struct mjp_env *e, float *obs)
{
    const mjModel *m = e->m;
    for (int k = 0; k < m->nq; k++) obs[k] = (float)e->d->qpos[k];
    for (int k = 0; k < m->nv; k++) obs[m->nq + k] = (float)e->d->qvel[k];
}

static int mjp_create(const struct env_spec *spec, void *state, char *err, size_t cap)
{
    const struct mjp_model *pm = spec->model;
    struct mjp_env *e = state;
    e->m = pm->m;
    char why[600];
    e->d = env_mj_make_data(pm->m, why, sizeof why);   /* MuJoCo's error as a message, never its exit */
    if (!e->d) {
        snprintf(err, cap, "mj_makeData: %s", why);
        return -1;
    }
    return 0;
}

static void mjp_destroy(const struct env_spec *spec, void *state)
{
    struct mjp_env *e = state;
    mj_deleteData(e->d);
    e->d = NULL;
}

static void mjp_reset(void *state, uint64_t *rng, float *obs)
{
    struct mjp_env *e = state;
    const mjModel *m = e->m;
    mjData *d = e->d;
    mj_resetData(m, d);
    for (int k = 0; k < m->nq; k++)
        d->qpos[k] = m->qpos0[k] + env_rng_uniform(rng, -RESET_NOISE, RESET_NOISE);
    for (int k = 0; k < m->nv; k++) d->qvel[k] = env_rng_uniform(rng, -RESET_NOISE, RESET_NOISE);
    mj_forward(m, d);
    e->info[0] = e->info[1] = 0.0;
    observe(e, obs);
}

static void mjp_step(void *state, const void *action, float *obs, float *reward, bool *terminated)
{
    struct mjp_env *e = state;
    const mjModel *m = e->m;
    mjData *d = e->d;
    d->ctrl[0] = ((const float *)action)[0];   /* MuJoCo clamps to ctrlrange */
    for (int k = 0; k < FRAME_SKIP; k++) mj_step(m, d);
    bool upright = isfinite(d->qpos[1]) && fabs(d->qpos[1]) <= UPRIGHT;
    for (int k = 0; k < m->nq + m->nv && upright; k++)
        upright = isfinite(k < m->nq ? d->qpos[k] : d->qvel[k - m->nq]);
    e->info[0] = 1.0;
    e->info[1] = d->qpos[0];
    *reward = 1.0f;
    *terminated = !upright;
    observe(e, obs);
}

static int mjp_get_state(const void *state, double *out, int cap)
{
    const struct mjp_env *e = state;
    const mjModel *m = e->m;
    for (int k = 0; k < m->nq && k < cap; k++) out[k] = e->d->qpos[k];
    for (int k = 0; k < m->nv && m->nq + k < cap; k++) out[m->nq + k] = e->d->qvel[k];
    return m->nq + m->nv;
}

static int mjp_set_state(void *state, const double *in, int n)
{
    struct mjp_env *e = state;
    const mjModel *m = e->m;
    if (n != m->nq + m->nv) return -1;
    memcpy(e->d->qpos, in, (size_t)m->nq * sizeof *in);
    memcpy(e->d->qvel, in + m->nq, (size_t)m->nv * sizeof *in);
    mj_forward(m, e->d);
    return 0;
}

/* The saved form: float64 arrays in this order (the table is the format). */
enum { S_TIME, S_QPOS, S_QVEL, S_ACT, S_WARM, S_CTRL, S_QFRC, S_XFRC, S_MPOS, S_MQUAT, S_USER, S_INFO, S_N };
static const char *const saved_names[S_N] = {"time", "qpos", "qvel", "act", "qacc_warmstart", "ctrl",
                                             "qfrc_applied", "xfrc_applied", "mocap_pos",
                                             "mocap_quat", "userdata", "info"};

/* The array `which` of d (or of e for the info) and its length. */
static mjtNum *saved_array(const mjModel *m, mjData *d, struct mjp_env *e, int which, int *n)
{
    switch (which) {
    case S_TIME: *n = 1; return &d->time;
    case S_QPOS: *n = m->nq; return d->qpos;
    case S_QVEL: *n = m->nv; return d->qvel;
    case S_ACT: *n = m->na; return d->act;
    case S_WARM: *n = m->nv; return d->qacc_warmstart;
    case S_CTRL: *n = m->nu; return d->ctrl;
    case S_QFRC: *n = m->nv; return d->qfrc_applied;
    case S_XFRC: *n = 6 * m->nbody; return d->xfrc_applied;
    case S_MPOS: *n = 3 * m->nmocap; return d->mocap_pos;
    case S_MQUAT: *n = 4 * m->nmocap; return d->mocap_quat;
    case S_USER: *n = m->nuserdata; return d->userdata;
    default: *n = 2; return e->info;
    }
}

static size_t saved_doubles(const mjModel *m)
{
    return 1 + (size_t)m->nq + 3 * (size_t)m->nv + (size_t)m->na + (size_t)m->nu + 6 * (size_t)m->nbody +
           7 * (size_t)m->nmocap + (size_t)m->nuserdata + 2;
}

static void mjp_save(const struct env_spec *spec, const void *state, void *out)
{
    struct mjp_env *e = (struct mjp_env *)state;   /* only read */
    double *o = out;
    for (int w = 0; w < S_N; w++) {
        int n;
        const mjtNum *a = saved_array(e->m, e->d, e, w, &n);
        memcpy(o, a, (size_t)n * sizeof *o);
        o += n;
    }
}

static int mjp_load(const struct env_spec *spec, void *state, const void *in, char *err, size_t cap)
{
    struct mjp_env *e = state;
    const unsigned char *bytes = in;
    size_t at = 0;
    for (int w = 0; w < S_N; w++) {   /* check everything before changing anything */
        int n;
        saved_array(e->m, e->d, e, w, &n);
        for (int k = 0; k < n; k++) {
            double v;
            memcpy(&v, bytes + (at + (size_t)k) * sizeof v, sizeof v);
            if (!isfinite(v)) {
                snprintf(err, cap, "saved %s[%d] is %g", saved_names[w], k, v);
                return -1;
            }
        }
        at += (size_t)n;
    }
    at = 0;
    for (int w = 0; w < S_N; w++) {
        int n;
        mjtNum *a = saved_array(e->m, e->d, e, w, &n);
        memcpy(a, bytes + at * sizeof(double), (size_t)n * sizeof *a);
        at += (size_t)n;
    }
    return 0;
}

static void mjp_info(const struct env_spec *spec, const void *state, double *out)
{
    const struct mjp_env *e = state;
    out[0] = e->info[0];
    out[1] = e->info[1];
}

static void free_model(struct mjp_model *pm)
{
    if (!pm) return;
    mj_deleteModel(pm->m);
    free(pm->obs_low);
    free(pm->obs_high);
    free(pm);
}

static void mjp_unload(struct env_spec *spec)
{
    free_model(spec->model);
    free(spec);
    env_mj_release();   /* MuJoCo keeps no handler of this file once it is unloaded */
}

/* The model from path (a regular file: env_mj_load_xml never waits on a
 * FIFO), or the embedded one when path is NULL (through MuJoCo's virtual
 * file system). NULL with the message in err. */
static mjModel *load_model(const char *path, char *err, int cap)
{
    if (path) return env_mj_load_xml(path, err, (size_t)cap);
    mjVFS *vfs = malloc(sizeof *vfs);
    if (!vfs) {
        snprintf(err, (size_t)cap, "out of memory");
        return NULL;
    }
    mj_defaultVFS(vfs);
    mjModel *m = NULL;
    const char *name = "mj_pendulum.xml";
    if (mj_makeEmptyFileVFS(vfs, name, (int)sizeof default_model - 1) == 0) {
        memcpy(vfs->filedata[mj_findFileVFS(vfs, name)], default_model, sizeof default_model - 1);
        m = mj_loadXML(name, vfs, err, cap);
    } else {
        snprintf(err, (size_t)cap, "cannot make the embedded model's file");
    }
    mj_deleteVFS(vfs);
    free(vfs);
    return m;
}

static const struct env_spec *open_spec(const struct env_args *args, char *err, size_t err_size)
{
    const char *path = NULL;
    for (int i = 0; i < args->n; i++) {
        if (strcmp(args->keys[i], "model") == 0) {
            path = args->values[i];
        } else {
            snprintf(err, err_size, "unknown --env-arg '%s' (takes model=PATH)", args->keys[i]);
            return NULL;
        }
    }
    const char *shown = path ? path : "(embedded)";
    char mjerr[1000] = "";
    mjModel *m = load_model(path, mjerr, (int)sizeof mjerr);
    if (!m) {   /* MuJoCo's message on one line: its line breaks as spaces, none at the end */
        for (char *c = mjerr; *c; c++)
            if (*c == '\n') *c = ' ';
        for (size_t n = strlen(mjerr); n > 0 && mjerr[n - 1] == ' ';) mjerr[--n] = '\0';
        snprintf(err, err_size, "model %s: %s", shown, mjerr[0] ? mjerr : "mj_loadXML failed");
        return NULL;
    }
    const char *why = NULL;
    int have = 0, need = 0;
    if (m->nu != 1)
        why = "actuators", have = m->nu, need = 1;
    else if (m->nq < 2 || m->nv < 2)   /* qpos[0]: the cart, qpos[1]: the pole */
        why = "degrees of freedom", have = m->nv < m->nq ? m->nv : m->nq, need = 2;
    if (why) {
        snprintf(err, err_size, "model %s has %d %s, " ENV_ID " needs %s%d", shown, have, why,
                 need == 1 ? "" : "at least ", need);
        mj_deleteModel(m);
        return NULL;
    }

    struct mjp_model *pm = calloc(1, sizeof *pm);
    struct env_spec *spec = calloc(1, sizeof *spec);
    const int od = m->nq + m->nv;
    if (pm) {
        pm->m = m;
        pm->obs_low = malloc((size_t)od * sizeof *pm->obs_low);
        pm->obs_high = malloc((size_t)od * sizeof *pm->obs_high);
    } else {
        mj_deleteModel(m);
    }
    if (!pm || !spec || !pm->obs_low || !pm->obs_high) {
        free_model(pm);
        free(spec);
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    for (int k = 0; k < od; k++) pm->obs_low[k] = -INFINITY, pm->obs_high[k] = INFINITY;
    bool limited = m->actuator_ctrllimited[0];
    pm->act_low[0] = limited ? m->actuator_ctrlrange[0] : -INFINITY;
    pm->act_high[0] = limited ? m->actuator_ctrlrange[1] : INFINITY;
    *spec = (struct env_spec){
        .id = ENV_ID,
        .obs = {.kind = SPACE_BOX, .dim = od, .low = pm->obs_low, .high = pm->obs_high},
        .act = {.kind = SPACE_BOX, .dim = 1, .low = pm->act_low, .high = pm->act_high},
        .max_episode_steps = 1000,
        .reward_threshold = 950.0,
        .state_size = sizeof(struct mjp_env),
        .reset = mjp_reset,
        .step = mjp_step,
        .get_state = mjp_get_state,
        .set_state = mjp_set_state,
        .abi_version = ENV_ABI_VERSION,
        .model = pm,
        .create = mjp_create,
        .destroy = mjp_destroy,
        .saved_size = saved_doubles(m) * sizeof(double),
        .save = mjp_save,
        .load = mjp_load,
        .info_count = 2,
        .info_names = info_names,
        .info = mjp_info,
        .unload = mjp_unload,
    };
    return spec;
}

/* The entry point: MuJoCo's errors made messages (envs/mujoco_sdk.h) from
 * here on, until unload; a failed open leaves no handler of this file. */
__attribute__((visibility("default"))) const struct env_spec *
tributary_env_open(const struct env_args *args, char *err, size_t err_size)
{
    env_mj_install();
    const struct env_spec *spec = open_spec(args, err, err_size);
    if (!spec) env_mj_release();
    return spec;
}
