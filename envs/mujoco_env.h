/* The MuJoCo env kit: an env over an MJCF model, written as one row (a
 * `struct env_mj_def`: its constants and its own equations, i.e. reward,
 * termination, observation and, where it differs from the usual, the reset
 * noise); the kit does the rest of the env contract of ABI 2 (envs/env.h):
 * the model loaded without blocking (a path, or MJCF text compiled into
 * the env), MuJoCo's errors as messages (envs/mujoco_sdk.h), the spec
 * filled from the model, one mjData per env (create/destroy), reset,
 * get/set_state, save/load of everything a later step reads (the warm
 * start included: a resumed env steps bit for bit as the saved one), the
 * step's named info, and unload.
 *
 * Header-only, so a plug-in links only libmujoco (its host has Tributary);
 * installed beside env.h and mujoco_sdk.h when Tributary was built with
 * MuJoCo. C (C11 or later; a C++ plug-in keeps its row in a C file). The built-in v4 suite (envs/mujoco/: Hopper-v4, ...) is written
 * with the same rows and this same code, so a plug-in written on the kit
 * steps as a built-in does. See docs/sdk.md "A MuJoCo plug-in"
 * (envs/examples/mj_hopper.c walks through one) and docs/design.md §3.
 *
 * Order of calls, as Gymnasium 0.29.1's MujocoEnv:
 *   reset: mj_resetData (its equal, without clearing the constraint rows);
 *          the reset noise (noise_scale/qvel_noise, or the env's reset_noise)
 *          added to d->qpos and d->qvel, which hold qpos0 and 0; mj_forward;
 *          def->observe.
 *   step:  def->step reads what it needs before (mjData as the last step
 *          left it: stale mid-episode, fresh after reset/set_state), calls
 *          env_mj_do_simulation (ctrl = action; frame_skip x mj_step; one
 *          mj_rnePostConstraint), computes reward, termination and
 *          e->info; then the kit calls def->observe.
 *   set_state: copy qpos, qvel; mj_forward (nothing else).
 * For Gymnasium's numbers bit for bit, compile the equations with
 * -ffp-contract=off (Gymnasium's float64 has no fused multiply-adds). */
#ifndef TRIB_ENVS_MUJOCO_ENV_H
#define TRIB_ENVS_MUJOCO_ENV_H

#include <math.h>
#include <mujoco/mjxmacro.h>
#include <stdarg.h>
#include <mujoco/mujoco.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"
#include "envs/mujoco_sdk.h"

#define ENV_MJ_MAX_INFO 12   /* info values per env */
#define ENV_MJ_MAX_BODIES 4  /* bodies an env looks up by name */

struct env_mj;

/* One env: its row. Everything but id, frame_skip and step has a default
 * (0 or NULL). */
struct env_mj_def {
    const char *id;                 /* "Hopper-v4" */
    int frame_skip;                 /* model steps per env step */
    int max_episode_steps;          /* truncation (0: none) */
    double reward_threshold;        /* NAN where there is none */
    int nu;                         /* actuators the env is written for (0: any) */
    /* The model when no path is given: MJCF text (NUL-terminated), loaded
     * as the file xml_name through MuJoCo's VFS. */
    const char *xml;
    const char *xml_name;           /* "hopper.xml" (NULL: "model.xml") */
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
    enum { ENV_MJ_QVEL_UNIFORM, ENV_MJ_QVEL_NORMAL } qvel_noise;
    void (*reset_noise)(struct env_mj *e, uint64_t *rng);   /* NULL: the above */
    /* Write obs_dim floats from mjData as it stands (float32 casts). */
    void (*observe)(const struct env_mj *e, float *obs);   /* NULL: the above */
    /* One env step around env_mj_do_simulation: reward, termination and
     * e->info[0 .. info_count). No allocation, no blocking. */
    void (*step)(struct env_mj *e, const float *action, double *reward, bool *terminated);
    int info_count;                 /* at most ENV_MJ_MAX_INFO */
    const char *const *info_names;
    /* Bodies the env reads by name (NULL-terminated, at most
     * ENV_MJ_MAX_BODIES); their ids are in e->body[] in this order. */
    const char *const *bodies;
    /* More checks of the model (NULL: none): 0, or -1 with why, which
     * continues "model PATH " ("has 1 joint, MyEnv-v0 needs 2"). */
    int (*check_model)(const mjModel *m, const void *params, char *why, size_t why_size);
};

/* What one load made: the spec (first: the spec's address is this one's)
 * and what the envs share. */
struct env_mj_loaded {
    struct env_spec spec;
    const struct env_mj_def *def;
    mjModel *m;
    void *params;                   /* the env's arguments (env_mj_open), freed at unload */
    double dt;                      /* timestep * frame_skip, as Gymnasium's dt */
    int body[ENV_MJ_MAX_BODIES];
    bool release_handlers;          /* env_mj_open's: unload releases this copy's handlers */
    /* What save writes of mjData's buffer: every array but the contacts
     * and the efc_* constraint arrays (sized by njmax/nconmax, rebuilt by
     * the next mj_step's mj_forward before anything reads them). */
    int nseg;
    struct env_mj_seg { size_t off, size; } *seg;   /* byte ranges of d->buffer */
    size_t saved_arrays;            /* sum of seg[].size */
    size_t qpos_at, qvel_at;        /* where qpos, qvel lie in the saved arrays */
    double *bounds;                 /* obs low, obs high, act low, act high */
};

/* The state block of every env of the kit (spec->state_size = its size);
 * what def's functions read and write. */
struct env_mj {
    const struct env_mj_loaded *L;  /* set by create, kept by load */
    const mjModel *m;
    mjData *d;
    int64_t steps;                  /* env steps since the last reset */
    const int *body;                /* L->body */
    const void *params;             /* L->params: the env's arguments */
    double dt;                      /* L->dt */
    int frame_skip;                 /* L->def->frame_skip */
    int pad_;
    double info[ENV_MJ_MAX_INFO];   /* the last step's info values */
};

/* ctrl = action (float32 widened, not clipped: MuJoCo clamps ctrllimited
 * actuators itself), frame_skip x mj_step, then mj_rnePostConstraint once
 * (Gymnasium's _step_mujoco_simulation: cfrc_ext and the like current). */
static inline void env_mj_do_simulation(struct env_mj *e, const float *action)
{
    int frame_skip = e->frame_skip;
    const mjModel *m = e->m;
    mjData *d = e->d;
    for (int k = 0; k < m->nu; k++)
        d->ctrl[k] = (mjtNum)action[k];
    for (int i = 0; i < frame_skip; i++)
        mj_step(m, d);
    mj_rnePostConstraint(m, d);
}

/* sum of action[k]^2 over n values, in float64 (the action widened first,
 * as Gymnasium sees a float64 action array). */
static inline double env_mj_sum_sq(const float *a, int n)
{
    double s = 0.0;
    for (int k = 0; k < n; k++) {
        double x = (double)a[k];
        s += x * x;
    }
    return s;
}

/* ---- the spec's functions ---- */

/* mj_resetData (MuJoCo 2.2.2's _resetData, field for field) but for its
 * memset of the whole buffer: only the arrays save keeps (L->seg) are
 * cleared. The contacts and efc_* arrays (2/3 of a 3 MB buffer: efc_AR is
 * njmax^2 with the default njmax 500) keep stale rows past ncon = nefc = 0,
 * which the mj_forward after the noise rebuilds before anything reads them,
 * as load relies on. That memset was 2/3 of InvertedPendulum-v4's time
 * under random actions (an episode every ~6 steps). */
static inline void env_mj_reset_data_(const struct env_mj_loaded *L, mjData *d)
{
    const mjModel *m = L->m;
    d->pstack = 0;
    d->maxuse_stack = d->maxuse_con = d->maxuse_efc = 0;
    memset(d->warning, 0, sizeof d->warning);
    memset(d->timer, 0, sizeof d->timer);
    memset(d->solver, 0, sizeof d->solver);
    d->solver_iter = 0;
    d->solver_nnz = 0;
    d->solver_fwdinv[0] = d->solver_fwdinv[1] = 0;
    d->ne = d->nf = d->nefc = d->ncon = 0;
    d->time = 0;
    d->energy[0] = d->energy[1] = 0;
    for (int i = 0; i < L->nseg; i++)
        memset((char *)d->buffer + L->seg[i].off, 0, L->seg[i].size);
    memcpy(d->qpos, m->qpos0, sizeof(mjtNum) * (size_t)m->nq);
    for (int i = 0; i < m->nbody; i++) {
        int id = m->body_mocapid[i];
        if (id >= 0) {
            mju_copy3(d->mocap_pos + 3 * id, m->body_pos + 3 * i);
            mju_copy4(d->mocap_quat + 4 * id, m->body_quat + 4 * i);
        }
    }
}

/* np.clip(x, -c, c): NaN stays NaN. */
static inline double env_mj_clip_(double x, double c)
{
    return x < -c ? -c : x > c ? c : x;
}

/* The env's observation: its own, or the usual qpos[skip:], clip(qvel). */
static inline void env_mj_observe_(const struct env_mj_def *def, const struct env_mj *e, float *obs)
{
    if (def->observe) {
        def->observe(e, obs);
        return;
    }
    for (int k = def->obs_qpos_skip; k < e->m->nq; k++)
        *obs++ = (float)e->d->qpos[k];
    for (int k = 0; k < e->m->nv; k++)
        *obs++ = (float)(def->obs_qvel_clip > 0 ? env_mj_clip_(e->d->qvel[k], def->obs_qvel_clip)
                                                : e->d->qvel[k]);
}

/* The usual reset_model noise of def (noise_scale, qvel_noise). */
static inline void env_mj_reset_noise_(const struct env_mj_def *def, struct env_mj *e, uint64_t *rng)
{
    const double s = def->noise_scale;
    for (int k = 0; k < e->m->nq; k++)
        e->d->qpos[k] += env_rng_uniform(rng, -s, s);
    for (int k = 0; k < e->m->nv; k++)
        e->d->qvel[k] += def->qvel_noise == ENV_MJ_QVEL_NORMAL ? s * env_rng_normal(rng)
                                                              : env_rng_uniform(rng, -s, s);
}

static inline void env_mj_reset_(void *state, uint64_t *rng, float *obs)
{
    struct env_mj *e = (struct env_mj *)state;
    const struct env_mj_def *def = e->L->def;
    env_mj_reset_data_(e->L, e->d);
    if (def->reset_noise) def->reset_noise(e, rng);
    else env_mj_reset_noise_(def, e, rng);
    mj_forward(e->m, e->d);
    e->steps = 0;
    memset(e->info, 0, sizeof e->info);
    env_mj_observe_(def, e, obs);
}

static inline void env_mj_step_(void *state, const void *action, float *obs, float *reward,
                                bool *terminated)
{
    struct env_mj *e = (struct env_mj *)state;
    const struct env_mj_def *def = e->L->def;
    double r = 0.0;
    bool term = false;
    def->step(e, (const float *)action, &r, &term);
    e->steps++;
    env_mj_observe_(def, e, obs);
    *reward = (float)r;
    *terminated = term;
}

/* [qpos..., qvel...] */
static inline int env_mj_get_state_(const void *state, double *out, int cap)
{
    const struct env_mj *e = (const struct env_mj *)state;
    int nq = e->m->nq, nv = e->m->nv;
    for (int k = 0; k < nq && k < cap; k++)
        out[k] = e->d->qpos[k];
    for (int k = 0; k < nv && nq + k < cap; k++)
        out[nq + k] = e->d->qvel[k];
    return nq + nv;
}

static inline int env_mj_set_state_(void *state, const double *in, int n)
{
    struct env_mj *e = (struct env_mj *)state;
    int nq = e->m->nq, nv = e->m->nv;
    if (n != nq + nv)
        return -1;
    memcpy(e->d->qpos, in, (size_t)nq * sizeof(double));
    memcpy(e->d->qvel, in + nq, (size_t)nv * sizeof(double));
    mj_forward(e->m, e->d);
    return 0;
}

static inline int env_mj_create_(const struct env_spec *spec, void *state, char *err, size_t err_size)
{
    const struct env_mj_loaded *L = (const struct env_mj_loaded *)spec;
    struct env_mj *e = (struct env_mj *)state;
    char why[600];
    mjData *d = env_mj_make_data(L->m, why, sizeof why);   /* MuJoCo's error as ours, never its exit */
    if (!d) {
        snprintf(err, err_size, "mj_makeData: %s", why);
        return -1;
    }
    memset(e, 0, sizeof *e);
    e->L = L;
    e->m = L->m;
    e->d = d;
    e->body = L->body;
    e->params = L->params;
    e->dt = L->dt;
    e->frame_skip = L->def->frame_skip;
    return 0;
}

static inline void env_mj_destroy_(const struct env_spec *spec, void *state)
{
    (void)spec;
    struct env_mj *e = (struct env_mj *)state;
    if (e->d) mj_deleteData(e->d);
    e->d = NULL;
}

/* save/load: mjData's arrays (but contacts and efc_*) and scalars. */
#define ENV_MJ_SAVED_MAGIC 0x32564A4D42495254ull   /* "TRIBMJV2" */

struct env_mj_saved_ {
    uint64_t magic;
    uint64_t arrays;                /* bytes of arrays that follow */
    int32_t nq, nv, nu, pad_;
    double time, energy[2];
    int64_t steps;
    double info[ENV_MJ_MAX_INFO];
    /* then the arrays: d->buffer's ranges L->seg[], in order */
};

static inline void env_mj_save_(const struct env_spec *spec, const void *state, void *out)
{
    const struct env_mj_loaded *L = (const struct env_mj_loaded *)spec;
    const struct env_mj *e = (const struct env_mj *)state;
    const mjData *d = e->d;
    struct env_mj_saved_ h;
    memset(&h, 0, sizeof h);
    h.magic = ENV_MJ_SAVED_MAGIC;
    h.arrays = L->saved_arrays;
    h.nq = L->m->nq;
    h.nv = L->m->nv;
    h.nu = L->m->nu;
    h.time = d->time;
    h.energy[0] = d->energy[0];
    h.energy[1] = d->energy[1];
    h.steps = e->steps;
    memcpy(h.info, e->info, sizeof h.info);
    memcpy(out, &h, sizeof h);
    char *p = (char *)out + sizeof h;
    for (int i = 0; i < L->nseg; i++) {
        memcpy(p, (const char *)d->buffer + L->seg[i].off, L->seg[i].size);
        p += L->seg[i].size;
    }
}

/* Refuses (by name, changing nothing) another model's state, a bad time or
 * step count, a non-finite qpos or qvel. */
static inline int env_mj_load_(const struct env_spec *spec, void *state, const void *in, char *err,
                               size_t err_size)
{
    const struct env_mj_loaded *L = (const struct env_mj_loaded *)spec;
    const mjModel *m = L->m;
    struct env_mj *e = (struct env_mj *)state;
    mjData *d = e->d;
    struct env_mj_saved_ h;
    memcpy(&h, in, sizeof h);
    const char *p = (const char *)in + sizeof h;
    if (h.magic != ENV_MJ_SAVED_MAGIC) {
        snprintf(err, err_size, "saved state is not a MuJoCo env's (bad magic)");
        return -1;
    }
    if (h.arrays != L->saved_arrays || h.nq != m->nq || h.nv != m->nv || h.nu != m->nu) {
        snprintf(err, err_size,
                 "saved state is of another model (%llu bytes, nq %d, nv %d, nu %d; this "
                 "model: %zu, %d, %d, %d)",
                 (unsigned long long)h.arrays, h.nq, h.nv, h.nu, L->saved_arrays, m->nq, m->nv,
                 m->nu);
        return -1;
    }
    if (!isfinite(h.time) || h.steps < 0) {
        snprintf(err, err_size, "saved state has bad time %g or step count %lld", h.time,
                 (long long)h.steps);
        return -1;
    }
    for (int k = 0; k < m->nq + m->nv; k++) {
        bool pos = k < m->nq;
        double x;
        memcpy(&x, p + (pos ? L->qpos_at + 8 * (size_t)k : L->qvel_at + 8 * (size_t)(k - m->nq)),
               sizeof x);
        if (!isfinite(x)) {
            snprintf(err, err_size, "saved %s[%d] is %g", pos ? "qpos" : "qvel",
                     pos ? k : k - m->nq, x);
            return -1;
        }
    }
    for (int i = 0; i < L->nseg; i++) {
        memcpy((char *)d->buffer + L->seg[i].off, p, L->seg[i].size);
        p += L->seg[i].size;
    }
    /* No contacts or constraints are held: the next mj_step finds them. */
    d->ne = d->nf = d->nefc = d->ncon = 0;
    d->time = h.time;
    d->energy[0] = h.energy[0];
    d->energy[1] = h.energy[1];
    e->steps = h.steps;
    memcpy(e->info, h.info, sizeof e->info);
    return 0;
}

static inline void env_mj_info_(const struct env_spec *spec, const void *state, double *out)
{
    const struct env_mj *e = (const struct env_mj *)state;
    memcpy(out, e->info, (size_t)spec->info_count * sizeof(double));
}

/* Frees what a load made (its model, params, spec); releases this copy's
 * MuJoCo handlers when env_mj_open made it. */
static inline void env_mj_unload_(struct env_spec *spec)
{
    struct env_mj_loaded *L = (struct env_mj_loaded *)spec;
    bool release = L->release_handlers;
    mj_deleteModel(L->m);
    free(L->params);
    free(L->seg);
    free(L->bounds);
    free(L);
    if (release) env_mj_release();   /* MuJoCo keeps no handler of an unloaded plug-in */
}

/* ---- the load ---- */

/* An error message into err (cut to fit: a long path is the user's). */
__attribute__((format(printf, 3, 4))) static inline void env_mj_say_(char *err, size_t err_size,
                                                                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

/* The ranges of d->buffer that save writes (see struct env_mj_loaded),
 * merged where adjacent; NULL when out of memory. */
static inline struct env_mj_seg *env_mj_saved_segments_(const mjModel *m, const mjData *d, int *nseg,
                                                        size_t *total, size_t *qpos_at,
                                                        size_t *qvel_at)
{
    int n = 0;
#define X(type, name, nr, nc) n++;
    MJDATA_POINTERS
#undef X
    struct env_mj_seg *seg = (struct env_mj_seg *)malloc(sizeof *seg * (size_t)n);
    if (!seg) return NULL;
    MJDATA_POINTERS_PREAMBLE(m)
    (void)nv;
    (void)njmax;
    int k = 0;
    size_t at = 0;
#define X(type, name, nr, nc)                                                                      \
    if (strncmp(#name, "efc_", 4) != 0 && strcmp(#name, "contact") != 0) {                      \
        size_t off = (size_t)((const char *)d->name - (const char *)d->buffer);                   \
        size_t size = sizeof(type) * (size_t)(m->nr) * (size_t)(nc);                             \
        if (strcmp(#name, "qpos") == 0) *qpos_at = at;                                             \
        if (strcmp(#name, "qvel") == 0) *qvel_at = at;                                             \
        if (size > 0) {                                                                            \
            if (k > 0 && seg[k - 1].off + seg[k - 1].size == off)                                  \
                seg[k - 1].size += size;                                                           \
            else                                                                                   \
                seg[k++] = (struct env_mj_seg){off, size};                                         \
            at += size;                                                                            \
        }                                                                                          \
    }
    MJDATA_POINTERS
#undef X
    *nseg = k;
    *total = at;
    return seg;
}

/* The env of def over the model at path (a regular file: env_mj_load_xml;
 * NULL: def->xml), its arguments params (a malloc'd block or NULL, owned
 * from this call on: e->params in def's functions, freed at unload or
 * here on failure). Loads the model (installing this copy's MuJoCo
 * handlers), checks it (actuators, bodies, def->check_model) and fills the
 * spec from it: observation Box(-inf, inf) of the usual size or
 * def->obs_dim, action Box from each actuator's ctrlrange (float32; +-inf
 * where not ctrllimited), spec->model = the mjModel. The spec lives until
 * its unload (the built-ins: the process). NULL with err naming the model
 * ("model /x/h.xml: XML Error ...", "model /x/h.xml has 2 actuators,
 * MyHopper-v0 needs 3"; for def->xml: "Hopper-v4: model: ...",
 * "Hopper-v4: model has 2 actuators, the env needs 3"). The handlers stay
 * installed: a plug-in calls env_mj_open instead. */
static inline const struct env_spec *env_mj_make_spec(const struct env_mj_def *def, const char *path,
                                                      void *params, char *err, size_t err_size)
{
    char where[1100], why[1000] = "";
    if (path) snprintf(where, sizeof where, "model %s", path);
    else snprintf(where, sizeof where, "%s: model", def->id);
    const char *who = path ? def->id : "the env";
    mjModel *m = path ? env_mj_load_xml(path, why, sizeof why)
                      : def->xml ? env_mj_load_string(def->xml_name ? def->xml_name : "model.xml",
                                                      def->xml, why, sizeof why)
                                 : NULL;
    if (!m) {
        env_mj_say_(err, err_size, "%s: %s", where, why[0] ? why : "no model (no path and no def->xml)");
        free(params);
        return NULL;
    }
    struct env_mj_loaded *L = NULL;
    double *b = NULL;
    mjData *probe = NULL;
    int obs_dim = def->obs_dim ? def->obs_dim(m) : m->nq - def->obs_qpos_skip + m->nv;
    if (def->nu > 0 && m->nu != def->nu) {
        env_mj_say_(err, err_size, "%s has %d actuators, %s needs %d", where, m->nu, who, def->nu);
        goto fail;
    }
    /* the row itself: the first thing wrong with it, by name */
    const char *bad = !def->step                                  ? "has no step"
                      : (def->obs_dim == NULL) != (def->observe == NULL) ? "gives one of obs_dim and observe"
                      : def->frame_skip < 1                       ? "has frame_skip < 1"
                      : def->info_count < 0 || def->info_count > ENV_MJ_MAX_INFO
                          ? "has info_count outside 0..ENV_MJ_MAX_INFO"
                      : def->info_count > 0 && !def->info_names   ? "has info_count but no info_names"
                      : def->obs_qpos_skip < 0 || def->obs_qpos_skip > m->nq ? "skips more qpos than the model has"
                      : obs_dim < 1                               ? "observes nothing"
                                                                  : NULL;
    if (bad) {
        env_mj_say_(err, err_size, "%s: the row of %s %s", where, def->id, bad);
        goto fail;
    }
    if (def->check_model && def->check_model(m, params, why, sizeof why) != 0) {
        env_mj_say_(err, err_size, "%s %s", where, why);
        goto fail;
    }
    L = (struct env_mj_loaded *)calloc(1, sizeof *L);
    b = L ? (double *)malloc(sizeof(double) * (size_t)(2 * obs_dim + 2 * m->nu + 1)) : NULL;
    snprintf(why, sizeof why, "out of memory");
    probe = b ? env_mj_make_data(m, why, sizeof why) : NULL;
    if (probe) L->seg = env_mj_saved_segments_(m, probe, &L->nseg, &L->saved_arrays, &L->qpos_at, &L->qvel_at);
    if (probe) mj_deleteData(probe);
    if (!probe || !L->seg) {
        env_mj_say_(err, err_size, "%s: %s for its spec", def->id, probe ? "out of memory" : why);
        goto fail;
    }
    for (int k = 0; k < ENV_MJ_MAX_BODIES; k++)
        L->body[k] = -1;
    for (int k = 0; def->bodies && def->bodies[k]; k++) {
        int id = k < ENV_MJ_MAX_BODIES ? mj_name2id(m, mjOBJ_BODY, def->bodies[k]) : -1;
        if (id < 0) {
            if (k < ENV_MJ_MAX_BODIES)
                env_mj_say_(err, err_size, "%s has no body '%s'", where, def->bodies[k]);
            else
                env_mj_say_(err, err_size, "%s: %s reads more than %d bodies", where, def->id, ENV_MJ_MAX_BODIES);
            goto fail;
        }
        L->body[k] = id;
    }
    {
        /* Gymnasium: observation Box(-inf, inf); action Box from
         * actuator_ctrlrange cast to float32. */
        double *obs_low = b, *obs_high = b + obs_dim, *act_low = b + 2 * obs_dim,
               *act_high = act_low + m->nu;
        for (int k = 0; k < obs_dim; k++) {
            obs_low[k] = -INFINITY;
            obs_high[k] = INFINITY;
        }
        for (int k = 0; k < m->nu; k++) {
            bool limited = m->actuator_ctrllimited[k];
            act_low[k] = limited ? (float)m->actuator_ctrlrange[2 * k] : -INFINITY;
            act_high[k] = limited ? (float)m->actuator_ctrlrange[2 * k + 1] : INFINITY;
        }
        L->def = def;
        L->m = m;
        L->params = params;
        L->dt = m->opt.timestep * def->frame_skip;
        L->bounds = b;
        L->spec = (struct env_spec){
            .id = def->id,
            .obs = {.kind = SPACE_BOX, .dim = obs_dim, .low = obs_low, .high = obs_high},
            .act = {.kind = SPACE_BOX, .dim = m->nu, .low = act_low, .high = act_high},
            .max_episode_steps = def->max_episode_steps,
            .reward_threshold = def->reward_threshold,
            .state_size = sizeof(struct env_mj),
            .reset = env_mj_reset_,
            .step = env_mj_step_,
            .get_state = env_mj_get_state_,
            .set_state = env_mj_set_state_,
            .abi_version = ENV_ABI_VERSION,
            .model = m,
            .create = env_mj_create_,
            .destroy = env_mj_destroy_,
            .saved_size = sizeof(struct env_mj_saved_) + L->saved_arrays,
            .save = env_mj_save_,
            .load = env_mj_load_,
            .info_count = def->info_count,
            .info_names = def->info_names,
            .info = env_mj_info_,
            .unload = env_mj_unload_,
        };
    }
    return &L->spec;
fail:
    if (L) free(L->seg);
    free(L);
    free(b);
    free(params);
    mj_deleteModel(m);
    return NULL;
}

/* A plug-in's whole load, for its entry point tributary_env_open:
 * env_mj_make_spec, with this copy's MuJoCo handlers released on failure
 * and at the spec's unload (so MuJoCo never calls into an unloaded
 * plug-in). */
static inline const struct env_spec *env_mj_open(const struct env_mj_def *def, const char *path,
                                                 void *params, char *err, size_t err_size)
{
    env_mj_install();
    const struct env_spec *spec = env_mj_make_spec(def, path, params, err, err_size);
    if (!spec) {
        env_mj_release();
        return NULL;
    }
    ((struct env_mj_loaded *)spec)->release_handlers = true;
    return spec;
}

#endif
