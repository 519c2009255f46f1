/* The MuJoCo v4 suite's shared base (mj_env.h): model loading, the spec
 * filled from the loaded model, and every spec function but each env's own
 * equations. Built with -ffp-contract=off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mujoco/mjxmacro.h>

#include "envs/mujoco/mj_env.h"
#include "envs/mujoco_sdk.h"

/* ---- the step ---- */

void mj_env_do_simulation(struct mj_env *e, const float *action)
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

/* mj_resetData (MuJoCo 2.2.2's _resetData, field for field) but for its
 * memset of the whole buffer: only the arrays save keeps (L->seg) are
 * cleared. The contacts and efc_* arrays (2/3 of a 3 MB buffer: efc_AR is
 * njmax^2 with the default njmax 500) keep stale rows past ncon = nefc = 0,
 * which the mj_forward after the noise rebuilds before anything reads them,
 * as load relies on. That memset was 2/3 of InvertedPendulum-v4's time
 * under random actions (an episode every ~6 steps). */
static void reset_data(const struct mj_loaded *L, mjData *d)
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

void mj_env_step_walker(struct mj_env *e, const float *action, double *reward, bool *terminated,
                        bool (*healthy)(const struct mj_env *e))
{
    double x_before = e->d->qpos[0];
    mj_env_do_simulation(e, action);
    double x_after = e->d->qpos[0];
    double x_velocity = (x_after - x_before) / e->dt;
    double ctrl_cost = 1e-3 * mj_env_sum_sq(action, e->m->nu);
    double forward_reward = 1.0 * x_velocity;
    double healthy_reward = 1.0;   /* paid when unhealthy too */
    *reward = (forward_reward + healthy_reward) - ctrl_cost;
    *terminated = !healthy(e);
    e->info[0] = x_after;
    e->info[1] = x_velocity;
}

/* np.clip(x, -c, c): NaN stays NaN. */
static inline double clip(double x, double c)
{
    return x < -c ? -c : x > c ? c : x;
}

/* The env's observation: its own, or the usual qpos[skip:], clip(qvel). */
static void observe(const struct mj_env_def *def, const struct mj_env *e, float *obs)
{
    if (def->observe) {
        def->observe(e, obs);
        return;
    }
    for (int k = def->obs_qpos_skip; k < e->m->nq; k++)
        *obs++ = (float)e->d->qpos[k];
    for (int k = 0; k < e->m->nv; k++)
        *obs++ = (float)(def->obs_qvel_clip > 0 ? clip(e->d->qvel[k], def->obs_qvel_clip) : e->d->qvel[k]);
}

/* The usual reset_model noise of def (mj_env_def.noise_scale, qvel_noise). */
static void reset_noise(const struct mj_env_def *def, struct mj_env *e, uint64_t *rng)
{
    const double s = def->noise_scale;
    for (int k = 0; k < e->m->nq; k++)
        e->d->qpos[k] += env_rng_uniform(rng, -s, s);
    for (int k = 0; k < e->m->nv; k++)
        e->d->qvel[k] += def->qvel_noise == MJ_QVEL_NORMAL ? s * env_rng_normal(rng) : env_rng_uniform(rng, -s, s);
}

static void mj_reset(void *state, uint64_t *rng, float *obs)
{
    struct mj_env *e = state;
    const struct mj_env_def *def = e->L->def;
    reset_data(e->L, e->d);
    if (def->reset_noise) def->reset_noise(e, rng);
    else reset_noise(def, e, rng);
    mj_forward(e->m, e->d);
    e->steps = 0;
    memset(e->info, 0, sizeof e->info);
    observe(def, e, obs);
}

static void mj_step_env(void *state, const void *action, float *obs, float *reward,
                        bool *terminated)
{
    struct mj_env *e = state;
    const struct mj_env_def *def = e->L->def;
    double r = 0.0;
    bool term = false;
    def->step(e, action, &r, &term);
    e->steps++;
    observe(def, e, obs);
    *reward = (float)r;
    *terminated = term;
}

/* ---- [qpos..., qvel...] ---- */

static int mj_get_state(const void *state, double *out, int cap)
{
    const struct mj_env *e = state;
    int nq = e->m->nq, nv = e->m->nv;
    for (int k = 0; k < nq && k < cap; k++)
        out[k] = e->d->qpos[k];
    for (int k = 0; k < nv && nq + k < cap; k++)
        out[nq + k] = e->d->qvel[k];
    return nq + nv;
}

static int mj_set_state(void *state, const double *in, int n)
{
    struct mj_env *e = state;
    int nq = e->m->nq, nv = e->m->nv;
    if (n != nq + nv)
        return -1;
    memcpy(e->d->qpos, in, (size_t)nq * sizeof(double));
    memcpy(e->d->qvel, in + nq, (size_t)nv * sizeof(double));
    mj_forward(e->m, e->d);
    return 0;
}

/* ---- create/destroy ---- */

static int mj_create(const struct env_spec *spec, void *state, char *err, size_t err_size)
{
    const struct mj_loaded *L = (const struct mj_loaded *)spec;
    struct mj_env *e = state;
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
    e->dt = L->dt;
    e->frame_skip = L->def->frame_skip;
    return 0;
}

static void mj_destroy(const struct env_spec *spec, void *state)
{
    (void)spec;
    struct mj_env *e = state;
    if (e->d) mj_deleteData(e->d);
    e->d = NULL;
}

/* ---- save/load: mjData's arrays (but contacts and efc_*) and scalars ---- */

#define MJ_SAVED_MAGIC 0x32564A4D42495254ull   /* "TRIBMJV2" */

struct mj_saved {
    uint64_t magic;
    uint64_t arrays;                /* bytes of arrays that follow */
    int32_t nq, nv, nu, pad_;
    double time, energy[2];
    int64_t steps;
    double info[MJ_MAX_INFO];
    /* then the arrays: d->buffer's ranges L->seg[], in order */
};

static void mj_save(const struct env_spec *spec, const void *state, void *out)
{
    const struct mj_loaded *L = (const struct mj_loaded *)spec;
    const struct mj_env *e = state;
    const mjData *d = e->d;
    struct mj_saved h;
    memset(&h, 0, sizeof h);
    h.magic = MJ_SAVED_MAGIC;
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

static int mj_load(const struct env_spec *spec, void *state, const void *in, char *err,
                   size_t err_size)
{
    const struct mj_loaded *L = (const struct mj_loaded *)spec;
    const mjModel *m = L->m;
    struct mj_env *e = state;
    mjData *d = e->d;
    struct mj_saved h;
    memcpy(&h, in, sizeof h);
    const char *p = (const char *)in + sizeof h;
    const char *id = L->def->id;
    if (h.magic != MJ_SAVED_MAGIC) {
        snprintf(err, err_size, "%s: saved state is not a MuJoCo env's (bad magic)", id);
        return -1;
    }
    if (h.arrays != L->saved_arrays || h.nq != m->nq || h.nv != m->nv || h.nu != m->nu) {
        snprintf(err, err_size,
                 "%s: saved state is of another model (%llu bytes, nq %d, nv %d, nu %d; this "
                 "model: %zu, %d, %d, %d)",
                 id, (unsigned long long)h.arrays, h.nq, h.nv, h.nu, L->saved_arrays, m->nq, m->nv,
                 m->nu);
        return -1;
    }
    if (!isfinite(h.time) || h.steps < 0) {
        snprintf(err, err_size, "%s: saved state has bad time %g or step count %lld", id, h.time,
                 (long long)h.steps);
        return -1;
    }
    for (int k = 0; k < m->nq + m->nv; k++) {
        bool pos = k < m->nq;
        double x;
        memcpy(&x, p + (pos ? L->qpos_at + 8 * (size_t)k : L->qvel_at + 8 * (size_t)(k - m->nq)),
               sizeof x);
        if (!isfinite(x)) {
            snprintf(err, err_size, "%s: saved %s[%d] is %g", id, pos ? "qpos" : "qvel",
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

/* The ranges of d->buffer that save writes (see struct mj_loaded), merged
 * where adjacent; NULL when out of memory. */
static struct mj_seg *saved_segments(const mjModel *m, const mjData *d, int *nseg,
                                     size_t *total, size_t *qpos_at, size_t *qvel_at)
{
    int n = 0;
#define X(type, name, nr, nc) n++;
    MJDATA_POINTERS
#undef X
    struct mj_seg *seg = malloc(sizeof *seg * (size_t)n);
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
                seg[k++] = (struct mj_seg){off, size};                                             \
            at += size;                                                                            \
        }                                                                                          \
    }
    MJDATA_POINTERS
#undef X
    *nseg = k;
    *total = at;
    return seg;
}

static void mj_info(const struct env_spec *spec, const void *state, double *out)
{
    const struct mj_env *e = state;
    memcpy(out, e->info, (size_t)spec->info_count * sizeof(double));
}

/* ---- the model, once per process ---- */

static mjModel *load_model(const struct mj_env_def *def, char *err, size_t err_size)
{
    env_mj_install();   /* before this process's first MuJoCo call */
    char msg[1000] = "";
    mjVFS *vfs = malloc(sizeof *vfs);   /* ~2 MB: not on the stack */
    if (!vfs) {
        snprintf(err, err_size, "%s: model: out of memory for the VFS", def->id);
        return NULL;
    }
    mj_defaultVFS(vfs);
    int rc = mj_makeEmptyFileVFS(vfs, def->model_file, *def->xml_size);
    int i = rc == 0 ? mj_findFileVFS(vfs, def->model_file) : -1;
    if (i < 0) {
        snprintf(err, err_size, "%s: model: cannot make %s in MuJoCo's VFS (%d)", def->id,
                 def->model_file, rc);
        mj_deleteVFS(vfs);
        free(vfs);
        return NULL;
    }
    memcpy(vfs->filedata[i], def->xml, (size_t)*def->xml_size);
    mjModel *m = mj_loadXML(def->model_file, vfs, msg, sizeof msg);
    mj_deleteVFS(vfs);
    free(vfs);
    if (!m) {
        snprintf(err, err_size, "%s: model: %s", def->id, msg[0] ? msg : "mj_loadXML failed");
        return NULL;
    }
    return m;
}

struct mj_loaded *mj_env_load(const struct mj_env_def *def, char *err, size_t err_size)
{
    mjModel *m = load_model(def, err, err_size);
    if (!m)
        return NULL;
    if (m->nu != def->nu) {
        snprintf(err, err_size, "%s: model has %d actuators, the env needs %d", def->id, m->nu,
                 def->nu);
        mj_deleteModel(m);
        return NULL;
    }
    struct mj_loaded *L = calloc(1, sizeof *L);
    int obs_dim = def->obs_dim ? def->obs_dim(m) : m->nq - def->obs_qpos_skip + m->nv;
    double *b = L ? malloc(sizeof(double) * (size_t)(2 * obs_dim + 2 * m->nu)) : NULL;
    char why[600] = "out of memory";
    mjData *probe = b ? env_mj_make_data(m, why, sizeof why) : NULL;
    if (!probe) {
        snprintf(err, err_size, "%s: %s for its spec", def->id, why);
        free(b);
        free(L);
        mj_deleteModel(m);
        return NULL;
    }
    L->seg = saved_segments(m, probe, &L->nseg, &L->saved_arrays, &L->qpos_at, &L->qvel_at);
    mj_deleteData(probe);
    if (!L->seg) {
        snprintf(err, err_size, "%s: out of memory for its spec", def->id);
        free(b);
        free(L);
        mj_deleteModel(m);
        return NULL;
    }
    for (int k = 0; k < MJ_MAX_BODIES; k++)
        L->body[k] = -1;
    for (int k = 0; def->bodies && def->bodies[k]; k++) {
        int id = mj_name2id(m, mjOBJ_BODY, def->bodies[k]);
        if (id < 0) {
            snprintf(err, err_size, "%s: model has no body '%s'", def->id, def->bodies[k]);
            free(L->seg);
            free(b);
            free(L);
            mj_deleteModel(m);
            return NULL;
        }
        L->body[k] = id;
    }
    /* Gymnasium: observation Box(-inf, inf); action Box from
     * actuator_ctrlrange cast to float32. */
    double *obs_low = b, *obs_high = b + obs_dim, *act_low = b + 2 * obs_dim,
           *act_high = act_low + m->nu;
    for (int k = 0; k < obs_dim; k++) {
        obs_low[k] = -INFINITY;
        obs_high[k] = INFINITY;
    }
    for (int k = 0; k < m->nu; k++) {
        act_low[k] = (float)m->actuator_ctrlrange[2 * k];
        act_high[k] = (float)m->actuator_ctrlrange[2 * k + 1];
    }
    L->def = def;
    L->m = m;
    L->dt = m->opt.timestep * def->frame_skip;
    L->bounds = b;
    L->spec = (struct env_spec){
        .id = def->id,
        .obs = {.kind = SPACE_BOX, .dim = obs_dim, .low = obs_low, .high = obs_high},
        .act = {.kind = SPACE_BOX, .dim = m->nu, .low = act_low, .high = act_high},
        .max_episode_steps = def->max_episode_steps,
        .reward_threshold = def->reward_threshold,
        .state_size = sizeof(struct mj_env),
        .reset = mj_reset,
        .step = mj_step_env,
        .get_state = mj_get_state,
        .set_state = mj_set_state,
        .abi_version = ENV_ABI_VERSION,
        .model = m,
        .create = mj_create,
        .destroy = mj_destroy,
        .saved_size = sizeof(struct mj_saved) + L->saved_arrays,
        .save = mj_save,
        .load = mj_load,
        .info_count = def->info_count,
        .info_names = def->info_names,
        .info = mj_info,
    };
    return L;
}
