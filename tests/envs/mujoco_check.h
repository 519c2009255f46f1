/* Helpers for the MuJoCo v4 conformance tests (test_mujoco*.c): an env
 * opened through its spec, a reference step on a copy of its mjData made
 * with raw MuJoCo calls (the order Gymnasium's MujocoEnv makes them), the
 * save/load bit-identity check and reset-noise statistics. Header-only;
 * include after <check.h>. */
#ifndef TRIB_TESTS_ENVS_MUJOCO_CHECK_H
#define TRIB_TESTS_ENVS_MUJOCO_CHECK_H

#include <check.h>
#include <math.h>
#include <mujoco/mujoco.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"
#include "envs/mujoco/mj_env.h"

/* One env made through its spec, with its mjData at hand. */
struct mjc_env {
    const struct env_spec *spec;
    const mjModel *m;
    void *state;
    mjData *d;
    uint64_t rng;
    float *obs;
};

static inline struct mjc_env mjc_open(const char *id, uint64_t seed)
{
    struct mjc_env e;
    memset(&e, 0, sizeof e);
    e.spec = env_lookup(id);
    ck_assert_msg(e.spec != NULL, "env_lookup(%s): %s", id, env_last_error());
    ck_assert_int_eq(env_spec_check(e.spec), 0);
    ck_assert_int_eq(e.spec->abi_version, ENV_ABI_VERSION);
    e.m = e.spec->model;
    ck_assert_ptr_nonnull(e.m);
    e.state = calloc(1, e.spec->state_size);
    char err[256] = "";
    ck_assert_msg(e.spec->create(e.spec, e.state, err, sizeof err) == 0, "create: %s", err);
    e.d = ((struct env_mj *)e.state)->d;
    e.rng = env_rng_seed(seed, 0);
    e.obs = calloc((size_t)e.spec->obs.dim, sizeof(float));
    e.spec->reset(e.state, &e.rng, e.obs);
    return e;
}

static inline void mjc_close(struct mjc_env *e)
{
    e->spec->destroy(e->spec, e->state);
    free(e->state);
    free(e->obs);
    memset(e, 0, sizeof *e);
}

/* set_state([qpos, qvel]) */
static inline void mjc_set(struct mjc_env *e, const double *qpos, const double *qvel)
{
    int nq = e->m->nq, nv = e->m->nv;
    double *s = malloc(sizeof(double) * (size_t)(nq + nv));
    memcpy(s, qpos, sizeof(double) * (size_t)nq);
    memcpy(s + nq, qvel, sizeof(double) * (size_t)nv);
    ck_assert_int_eq(e->spec->set_state(e->state, s, nq + nv), 0);
    free(s);
}

/* A uniform draw in [lo, hi) from a test-local stream. */
static inline double mjc_uniform(uint64_t *rng, double lo, double hi)
{
    return env_rng_uniform(rng, lo, hi);
}

/* action[k] uniform in the spec's bounds (float32). */
static inline void mjc_random_action(const struct env_spec *s, uint64_t *rng, float *a)
{
    for (int k = 0; k < s->act.dim; k++)
        a[k] = (float)mjc_uniform(rng, s->act.low[k], s->act.high[k]);
}

/* The reference of one env step on its own mjData: `before` is a copy of
 * the env's mjData as it stands (what the step reads first), `after` the
 * same copy advanced as Gymnasium's do_simulation does (ctrl = action
 * widened, frame_skip x mj_step, mj_rnePostConstraint). Free both with
 * mj_deleteData. */
static inline void mjc_reference_step(const struct mjc_env *e, const float *action,
                                      int frame_skip, mjData **before, mjData **after)
{
    *before = mj_copyData(NULL, e->m, e->d);
    *after = mj_copyData(NULL, e->m, e->d);
    for (int k = 0; k < e->m->nu; k++)
        (*after)->ctrl[k] = (double)action[k];
    for (int i = 0; i < frame_skip; i++)
        mj_step(e->m, *after);
    mj_rnePostConstraint(e->m, *after);
}

/* sum of squares of a float32 action widened to float64. */
static inline double mjc_sum_sq(const float *a, int n)
{
    double s = 0.0;
    for (int k = 0; k < n; k++)
        s += (double)a[k] * (double)a[k];
    return s;
}

/* Gymnasium's get_body_com(name)[i]: xpos of the named body. */
static inline double mjc_body_com(const mjModel *m, const mjData *d, const char *name, int i)
{
    int b = mj_name2id(m, mjOBJ_BODY, name);
    ck_assert_int_ge(b, 0);
    return d->xpos[3 * b + i];
}

/* Save env a after it stepped; then step a and a second env b (created,
 * reset and stepped differently first, so its mjData holds other values)
 * loaded from the save with the same `steps` actions: every observation,
 * reward, termination, get_state and info must agree bit for bit. Done
 * at `rounds` save points (the two envs driven apart again in between), so
 * that some fall where contacts are active and the solver's warm start
 * (qacc_warmstart) decides the next step. */
static inline void mjc_step_random(struct mjc_env *e, uint64_t *rng, float *act, int n)
{
    float r;
    bool t;
    for (int i = 0; i < n; i++) {
        mjc_random_action(e->spec, rng, act);
        e->spec->step(e->state, act, e->obs, &r, &t);
        if (t) e->spec->reset(e->state, &e->rng, e->obs);
    }
}

static inline void mjc_check_save_load(const char *id, int warm, int steps, int rounds)
{
    struct mjc_env a = mjc_open(id, 11), b = mjc_open(id, 12);
    const struct env_spec *s = a.spec;
    int D = s->obs.dim, A = s->act.dim, N = s->get_state(a.state, NULL, 0);
    float *act = calloc((size_t)A, sizeof(float));
    uint64_t rng = 77;
    void *saved = malloc(s->saved_size);
    double *ga = malloc(sizeof(double) * (size_t)N), *gb = malloc(sizeof(double) * (size_t)N);
    double ia[ENV_MJ_MAX_INFO], ib[ENV_MJ_MAX_INFO];
    for (int round = 0; round < rounds; round++) {
        mjc_step_random(&a, &rng, act, warm + 7 * round);
        mjc_step_random(&b, &rng, act, warm + 3 * round);
        s->save(s, a.state, saved);
        char err[256] = "";
        ck_assert_msg(s->load(s, b.state, saved, err, sizeof err) == 0, "load: %s", err);
        ck_assert_int_eq(s->get_state(a.state, ga, N), N);
        ck_assert_int_eq(s->get_state(b.state, gb, N), N);
        ck_assert_mem_eq(ga, gb, sizeof(double) * (size_t)N);
        for (int i = 0; i < steps; i++) {
            mjc_random_action(s, &rng, act);
            float ra, rb;
            bool ta, tb;
            s->step(a.state, act, a.obs, &ra, &ta);
            s->step(b.state, act, b.obs, &rb, &tb);
            ck_assert_mem_eq(a.obs, b.obs, sizeof(float) * (size_t)D);
            ck_assert_mem_eq(&ra, &rb, sizeof ra);
            ck_assert_int_eq(ta, tb);
            s->get_state(a.state, ga, N);
            s->get_state(b.state, gb, N);
            ck_assert_msg(memcmp(ga, gb, sizeof(double) * (size_t)N) == 0,
                          "%s: state differs %d steps after load (round %d)", id, i + 1, round);
            s->info(s, a.state, ia);
            s->info(s, b.state, ib);
            ck_assert_mem_eq(ia, ib, sizeof(double) * (size_t)s->info_count);
            if (ta) break;   /* past a termination: the next round */
        }
    }
    free(ga), free(gb), free(saved), free(act);
    mjc_close(&a), mjc_close(&b);
}

/* Reset statistics of [qpos - qpos0, qvel] over n resets: per value its
 * mean, standard deviation and largest |deviation|. */
struct mjc_reset_stats {
    int n_values;
    double mean[256], std[256], maxabs[256];
};

static inline void mjc_reset_stats(const char *id, int n, struct mjc_reset_stats *st)
{
    struct mjc_env e = mjc_open(id, 5);
    int nq = e.m->nq, N = nq + e.m->nv;
    ck_assert_int_le(N, 256);
    double *g = malloc(sizeof(double) * (size_t)N), s1[256] = {0}, s2[256] = {0};
    st->n_values = N;
    for (int k = 0; k < N; k++)
        st->maxabs[k] = 0.0;
    for (int i = 0; i < n; i++) {
        e.spec->reset(e.state, &e.rng, e.obs);
        e.spec->get_state(e.state, g, N);
        for (int k = 0; k < N; k++) {
            double x = g[k] - (k < nq ? e.m->qpos0[k] : 0.0);
            s1[k] += x;
            s2[k] += x * x;
            if (fabs(x) > st->maxabs[k]) st->maxabs[k] = fabs(x);
        }
    }
    for (int k = 0; k < N; k++) {
        st->mean[k] = s1[k] / n;
        st->std[k] = sqrt(s2[k] / n - st->mean[k] * st->mean[k]);
    }
    free(g);
    mjc_close(&e);
}

/* Uniform(-scale, scale) noise: |mean| small, std scale/sqrt(3) within 6%,
 * never past scale. Normal(0, scale): std scale within 6% and tails past
 * scale (a uniform's std would be 42% lower and never pass scale). */
static inline void mjc_assert_uniform(const struct mjc_reset_stats *st, int from, int to,
                                      double scale, int n)
{
    for (int k = from; k < to; k++) {
        double sd = scale / sqrt(3.0);
        ck_assert_msg(fabs(st->mean[k]) < 5 * sd / sqrt(n), "value %d: mean %g", k, st->mean[k]);
        ck_assert_msg(fabs(st->std[k] / sd - 1) < 0.06, "value %d: std %g, want %g", k,
                      st->std[k], sd);
        ck_assert_msg(st->maxabs[k] <= scale, "value %d: |noise| %g > %g", k, st->maxabs[k],
                      scale);
    }
}

static inline void mjc_assert_normal(const struct mjc_reset_stats *st, int from, int to,
                                     double scale, int n)
{
    for (int k = from; k < to; k++) {
        ck_assert_msg(fabs(st->mean[k]) < 5 * scale / sqrt(n), "value %d: mean %g", k,
                      st->mean[k]);
        ck_assert_msg(fabs(st->std[k] / scale - 1) < 0.06, "value %d: std %g, want %g", k,
                      st->std[k], scale);
        ck_assert_msg(st->maxabs[k] > 2 * scale, "value %d: no tail (max %g)", k, st->maxabs[k]);
    }
}

#endif
