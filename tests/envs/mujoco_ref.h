/* Shared by the conformance tests of InvertedPendulum-v4,
 * InvertedDoublePendulum-v4, Reacher-v4 and Swimmer-v4: a reference env in
 * the test (its own mjData on the spec's model, driven as Gymnasium 0.29.1's
 * MujocoEnv drives it: reset = mj_resetData, set the state, mj_forward;
 * step = ctrl, frame_skip x mj_step, mj_rnePostConstraint) run in lockstep
 * with the env under test, reached only through its spec. Each test file
 * writes its env's equations (observation, reward, termination, info) again,
 * the slow obvious way, in a struct mj_ref_ops. */
#ifndef TRIB_TESTS_ENVS_MUJOCO_REF_H
#define TRIB_TESTS_ENVS_MUJOCO_REF_H

#include <check.h>
#include <float.h>
#include <math.h>
#include <mujoco/mujoco.h>
#include <mujoco/mjxmacro.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"
#include "envs/mujoco/mj_env.h"
#include "envs/vec_env.h"

#define REF_MAX_OBS 32
#define REF_MAX_INFO 12
#define REF_MAX_STATE 64

/* One env's equations, Gymnasium's, from the reference's mjData. */
struct mj_ref_ops {
    int frame_skip;
    /* The observation from mjData as it stands. */
    void (*observe)(const mjModel *m, const mjData *d, double *obs);
    /* One env step: what it reads before, ref_simulate(), what it reads
     * after; writes reward, terminated and the info values. */
    void (*step)(const mjModel *m, mjData *d, int frame_skip, const float *action,
                 double *reward, bool *terminated, double *info);
};

static inline const struct env_spec *ref_spec(const char *id)
{
    const struct env_spec *s = env_lookup(id);
    ck_assert_msg(s != NULL, "env_lookup(%s): %s", id, env_last_error());
    ck_assert_int_eq(env_spec_check(s), 0);
    return s;
}

static inline void *ref_env_new(const struct env_spec *s)
{
    void *st = calloc(1, s->state_size);
    char err[256] = "";
    ck_assert(st != NULL);
    ck_assert_msg(s->create(s, st, err, sizeof err) == 0, "create: %s", err);
    return st;
}

static inline void ref_env_free(const struct env_spec *s, void *st)
{
    s->destroy(s, st);
    free(st);
}

/* Gymnasium's _step_mujoco_simulation. */
static inline void ref_simulate(const mjModel *m, mjData *d, const float *action, int frame_skip)
{
    for (int k = 0; k < m->nu; k++)
        d->ctrl[k] = (double)action[k];
    for (int i = 0; i < frame_skip; i++)
        mj_step(m, d);
    mj_rnePostConstraint(m, d);
}

/* Gymnasium's set_state: copy qpos, qvel; mj_forward. */
static inline void ref_set_state(const mjModel *m, mjData *d, const double *x)
{
    memcpy(d->qpos, x, sizeof(double) * (size_t)m->nq);
    memcpy(d->qvel, x + m->nq, sizeof(double) * (size_t)m->nv);
    mj_forward(m, d);
}

/* Gymnasium's reset, given the state reset_model drew. */
static inline void ref_reset_to(const mjModel *m, mjData *d, const double *x)
{
    mj_resetData(m, d);
    ref_set_state(m, d, x);
}

/* The float32 the env writes for a float64 value (1 ulp of float32 slack
 * for a value whose float64 differs in its last bits). */
static inline bool ref_f32_close(float got, double want)
{
    float w = (float)want;
    return got == w || fabsf(got - w) <= FLT_EPSILON * fabsf(w);
}

static inline bool ref_f64_close(double got, double want)
{
    return fabs(got - want) <= 1e-12 * (1.0 + fabs(want));
}

static inline void ref_check_obs(const float *got, const double *want, int n, const char *where,
                                 int step)
{
    for (int k = 0; k < n; k++)
        ck_assert_msg(ref_f32_close(got[k], want[k]), "%s step %d: obs[%d] = %.9g, want %.17g",
                      where, step, k, (double)got[k], want[k]);
}

/* A random action over [1.25 low, 1.25 high] (past the bounds on purpose:
 * Gymnasium does not clip, MuJoCo clamps ctrllimited actuators). */
static inline void ref_random_action(const struct env_spec *s, uint64_t *rng, float *a)
{
    for (int k = 0; k < s->act.dim; k++)
        a[k] = (float)env_rng_uniform(rng, 1.25 * s->act.low[k], 1.25 * s->act.high[k]);
}

/* Env and reference in lockstep over `steps` steps from resets drawn by the
 * env, with random actions; every `force_every` steps (0: never) both are
 * teacher-forced to a state from draw_state (set_state on both, as a test
 * of the whole step would). An episode ends on termination or after
 * `episode` steps, then both reset. Every observation, reward, termination
 * flag and info value must agree (float32 outputs to their rounding, info
 * to 1e-12). Returns the number of terminations seen. */
static inline int ref_lockstep(const struct env_spec *s, const struct mj_ref_ops *ops,
                               uint64_t seed, int steps, int episode, int force_every,
                               void (*draw_state)(uint64_t *rng, double *x))
{
    const mjModel *m = s->model;
    mjData *d = mj_makeData(m);
    void *env = ref_env_new(s);
    uint64_t env_rng = env_rng_seed(seed, 0), rng = env_rng_seed(seed, 1);
    float obs[REF_MAX_OBS], a[8], r;
    double want[REF_MAX_OBS], x[REF_MAX_STATE], info[REF_MAX_INFO], want_info[REF_MAX_INFO];
    bool term;
    int n = m->nq + m->nv, terminations = 0, t_ep = 0;
    ck_assert_int_le(s->obs.dim, REF_MAX_OBS);
    ck_assert_int_le(n, REF_MAX_STATE);
    ck_assert_int_le(s->info_count, REF_MAX_INFO);

    s->reset(env, &env_rng, obs);
    ck_assert_int_eq(s->get_state(env, x, REF_MAX_STATE), n);
    ref_reset_to(m, d, x);
    ops->observe(m, d, want);
    ref_check_obs(obs, want, s->obs.dim, "reset", 0);
    for (int t = 1; t <= steps; t++) {
        if (force_every && t % force_every == 0) {
            draw_state(&rng, x);
            ck_assert_int_eq(s->set_state(env, x, n), 0);
            ref_set_state(m, d, x);
        }
        ref_random_action(s, &rng, a);
        s->step(env, a, obs, &r, &term);
        double want_r;
        bool want_term;
        memset(want_info, 0, sizeof want_info);
        ops->step(m, d, ops->frame_skip, a, &want_r, &want_term, want_info);
        ops->observe(m, d, want);
        ref_check_obs(obs, want, s->obs.dim, "lockstep", t);
        ck_assert_msg(ref_f32_close(r, want_r), "step %d: reward %.9g, want %.17g", t, (double)r,
                      want_r);
        ck_assert_msg(term == want_term, "step %d: terminated %d, want %d", t, term, want_term);
        if (s->info_count) {
            s->info(s, env, info);
            for (int k = 0; k < s->info_count; k++)
                ck_assert_msg(ref_f64_close(info[k], want_info[k]), "step %d: info %s = %.17g, "
                              "want %.17g", t, s->info_names[k], info[k], want_info[k]);
        }
        double got_x[REF_MAX_STATE];
        ck_assert_int_eq(s->get_state(env, got_x, REF_MAX_STATE), n);
        for (int k = 0; k < n; k++)
            ck_assert_msg(got_x[k] == (k < m->nq ? d->qpos[k] : d->qvel[k - m->nq]),
                          "step %d: state[%d] differs from the reference's", t, k);
        terminations += term;
        if (term || ++t_ep == episode) {
            t_ep = 0;
            s->reset(env, &env_rng, obs);
            s->get_state(env, x, REF_MAX_STATE);
            ref_reset_to(m, d, x);
            ops->observe(m, d, want);
            ref_check_obs(obs, want, s->obs.dim, "reset", t);
        }
    }
    ref_env_free(s, env);
    mj_deleteData(d);
    return terminations;
}

/* The env's (observation, reward, terminated) after set_state(x) (on an env
 * reset just before, so its mjData holds nothing older) and one step of a. */
static inline void ref_env_step_from(const struct env_spec *s, const double *x, const float *a,
                                     float *obs, float *r, bool *term)
{
    void *env = ref_env_new(s);
    uint64_t rng = 1;
    s->reset(env, &rng, obs);
    ck_assert_int_eq(s->set_state(env, x, ((const mjModel *)s->model)->nq +
                                              ((const mjModel *)s->model)->nv), 0);
    s->step(env, a, obs, r, term);
    ref_env_free(s, env);
}

/* Save mid-episode, step N more; load into a second env, step the same N:
 * observations, rewards, flags, info and states equal bit for bit. When
 * at_limit is given, the env is set there (a state pressed against a joint
 * limit) and stepped twice just before the save and twice after it with
 * every action at its high bound, so that the constraint solver's warm
 * start (qacc_warmstart) is live across the save: a resume that lost it
 * would differ in the last bits. */
static inline void ref_check_save_load(const struct env_spec *s, uint64_t seed, int before,
                                       int after, const double *at_limit)
{
    const mjModel *m = s->model;
    void *a = ref_env_new(s), *b = ref_env_new(s);
    uint64_t env_rng = env_rng_seed(seed, 0), rng = env_rng_seed(seed, 1);
    float obs[REF_MAX_OBS], obs_b[REF_MAX_OBS], act[8], r, r_b;
    bool term, term_b;
    int n = m->nq + m->nv;
    s->reset(a, &env_rng, obs);
    uint64_t other = 99;
    s->reset(b, &other, obs_b);   /* b holds another episode before the load */
    for (int i = 0; i < 5; i++) {
        ref_random_action(s, &rng, act);
        s->step(b, act, obs_b, &r_b, &term_b);
    }
    for (int t = 0; t < before; t++) {
        ref_random_action(s, &rng, act);
        s->step(a, act, obs, &r, &term);
        if (term) s->reset(a, &env_rng, obs);
    }
    if (at_limit) {   /* pushed against it (every action at its high bound) */
        ck_assert_int_eq(s->set_state(a, at_limit, n), 0);
        for (int k = 0; k < s->act.dim; k++)
            act[k] = (float)s->act.high[k];
        for (int t = 0; t < 2; t++)
            s->step(a, act, obs, &r, &term);
    }
    void *saved = malloc(s->saved_size);
    ck_assert(saved != NULL);
    s->save(s, a, saved);
    uint64_t rng_at_save = rng;
    char err[256] = "";
    ck_assert_msg(s->load(s, b, saved, err, sizeof err) == 0, "load: %s", err);
    uint64_t rng_b = rng_at_save;
    for (int t = 0; t < after; t++) {
        ref_random_action(s, &rng, act);
        ref_random_action(s, &rng_b, act);
        for (int k = 0; at_limit && t < 2 && k < s->act.dim; k++)
            act[k] = (float)s->act.high[k];   /* still pressed against the limit */
        s->step(a, act, obs, &r, &term);
        s->step(b, act, obs_b, &r_b, &term_b);
        ck_assert_msg(memcmp(obs, obs_b, sizeof(float) * (size_t)s->obs.dim) == 0,
                      "after load, step %d: observations differ", t);
        ck_assert_msg(memcmp(&r, &r_b, sizeof r) == 0, "after load, step %d: rewards differ", t);
        ck_assert_int_eq(term, term_b);
        double xa[REF_MAX_STATE], xb[REF_MAX_STATE];
        s->get_state(a, xa, REF_MAX_STATE);
        s->get_state(b, xb, REF_MAX_STATE);
        ck_assert_msg(memcmp(xa, xb, sizeof(double) * (size_t)n) == 0,
                      "after load, step %d: states differ", t);
        if (s->info_count) {
            double ia[REF_MAX_INFO], ib[REF_MAX_INFO];
            s->info(s, a, ia);
            s->info(s, b, ib);
            ck_assert(memcmp(ia, ib, sizeof(double) * (size_t)s->info_count) == 0);
        }
        if (term) {
            uint64_t ra = 7, rb = 7;
            s->reset(a, &ra, obs);
            s->reset(b, &rb, obs_b);
        }
    }
    free(saved);
    ref_env_free(s, a);
    ref_env_free(s, b);
}

/* Mean, standard deviation, min and max of column k of n rows of stride w. */
struct ref_stats { double mean, std, min, max, kurtosis; };
static inline struct ref_stats ref_column_stats(const double *rows, int n, int w, int k)
{
    struct ref_stats st = {0, 0, INFINITY, -INFINITY, 0};
    for (int i = 0; i < n; i++) {
        double v = rows[(size_t)i * w + k];
        st.mean += v;
        st.min = fmin(st.min, v);
        st.max = fmax(st.max, v);
    }
    st.mean /= n;
    double m2 = 0, m4 = 0;
    for (int i = 0; i < n; i++) {
        double e = rows[(size_t)i * w + k] - st.mean;
        m2 += e * e;
        m4 += e * e * e * e;
    }
    m2 /= n;
    m4 /= n;
    st.std = sqrt(m2);
    st.kurtosis = m4 / (m2 * m2);
    return st;
}

/* n resets of one env from one stream: the states after each, rows of
 * nq + nv; each reset's observation is checked against ops->observe of a
 * reference reset to that state. Returns the rows (caller frees). */
static inline double *ref_reset_states(const struct env_spec *s, const struct mj_ref_ops *ops,
                                       uint64_t seed, int n_resets)
{
    const mjModel *m = s->model;
    int n = m->nq + m->nv;
    double *rows = malloc(sizeof(double) * (size_t)n * (size_t)n_resets);
    void *env = ref_env_new(s);
    mjData *d = mj_makeData(m);
    uint64_t rng = env_rng_seed(seed, 0), act_rng = env_rng_seed(seed, 1);
    float obs[REF_MAX_OBS], act[8], r;
    double want[REF_MAX_OBS];
    bool term;
    ck_assert(rows != NULL);
    for (int i = 0; i < n_resets; i++) {
        s->reset(env, &rng, obs);
        ck_assert_int_eq(s->get_state(env, rows + (size_t)i * n, n), n);
        if (i % 97 == 0) {
            ref_reset_to(m, d, rows + (size_t)i * n);
            ops->observe(m, d, want);
            ref_check_obs(obs, want, s->obs.dim, "reset", i);
            if (s->info_count) {
                double info[REF_MAX_INFO];
                s->info(s, env, info);
                for (int k = 0; k < s->info_count; k++)
                    ck_assert_msg(info[k] == 0.0, "info %s after reset is %g", s->info_names[k],
                                  info[k]);
            }
        }
        ref_random_action(s, &act_rng, act);   /* leave some history behind */
        s->step(env, act, obs, &r, &term);
    }
    mj_deleteData(d);
    ref_env_free(s, env);
    return rows;
}

/* Uniform(lo, hi) over n samples: inside [lo, hi), reaching within 1% of
 * each end, mean and std within 5 standard errors of (lo+hi)/2 and
 * (hi-lo)/sqrt(12), kurtosis near 1.8 (a normal's is 3). */
static inline void ref_assert_uniform(struct ref_stats st, int n, double lo, double hi,
                                      const char *what)
{
    double mean = (lo + hi) / 2, sd = (hi - lo) / sqrt(12.0);
    ck_assert_msg(st.min >= lo && st.max < hi, "%s: [%g, %g] outside [%g, %g)", what, st.min,
                  st.max, lo, hi);
    ck_assert_msg(st.min < lo + 0.01 * (hi - lo) && st.max > hi - 0.01 * (hi - lo),
                  "%s: [%g, %g] does not fill [%g, %g)", what, st.min, st.max, lo, hi);
    ck_assert_msg(fabs(st.mean - mean) < 5 * sd / sqrt(n), "%s: mean %g, want %g", what, st.mean,
                  mean);
    ck_assert_msg(fabs(st.std - sd) < 5 * sd * 0.45 / sqrt(n) + 1e-15, "%s: std %g, want %g",
                  what, st.std, sd);
    ck_assert_msg(fabs(st.kurtosis - 1.8) < 0.1, "%s: kurtosis %g, want 1.8 (uniform)", what,
                  st.kurtosis);
}

/* Normal(0, sd) over n samples: mean, std within 5 standard errors,
 * kurtosis near 3 (a uniform's is 1.8), and values past 2 sd both ways. */
static inline void ref_assert_normal(struct ref_stats st, int n, double sd, const char *what)
{
    ck_assert_msg(fabs(st.mean) < 5 * sd / sqrt(n), "%s: mean %g, want 0", what, st.mean);
    ck_assert_msg(fabs(st.std - sd) < 5 * sd / sqrt(2.0 * n), "%s: std %g, want %g", what,
                  st.std, sd);
    ck_assert_msg(fabs(st.kurtosis - 3.0) < 0.3, "%s: kurtosis %g, want 3 (normal)", what,
                  st.kurtosis);
    ck_assert_msg(st.min < -3 * sd && st.max > 3 * sd, "%s: [%g, %g] has no tail past 3 sd",
                  what, st.min, st.max);
}

/* One env step from set_state(x) with action a is exactly frame_skip
 * mj_steps of a reference (bit for bit), and not `other` mj_steps (by more
 * than 1e-6 somewhere in the state). */
static inline void ref_check_frame_skip(const struct env_spec *s, const double *x, const float *a,
                                        int frame_skip, int other)
{
    const mjModel *m = s->model;
    int n = m->nq + m->nv;
    double got[REF_MAX_STATE];
    float obs[REF_MAX_OBS], r;
    bool term;
    void *env = ref_env_new(s);
    uint64_t rng = 3;
    s->reset(env, &rng, obs);
    ck_assert_int_eq(s->set_state(env, x, n), 0);
    s->step(env, a, obs, &r, &term);
    s->get_state(env, got, REF_MAX_STATE);
    ref_env_free(s, env);
    int fss[2] = {frame_skip, other};
    for (int i = 0; i < 2; i++) {
        mjData *d = mj_makeData(m);
        ref_reset_to(m, d, x);
        ref_simulate(m, d, a, fss[i]);
        double diff = 0;
        for (int k = 0; k < n; k++)
            diff = fmax(diff, fabs((k < m->nq ? d->qpos[k] : d->qvel[k - m->nq]) - got[k]));
        if (i == 0)
            ck_assert_msg(diff == 0.0, "frame_skip %d: state differs by %g", fss[i], diff);
        else
            ck_assert_msg(diff > 1e-6, "frame_skip %d: state differs by only %g", fss[i], diff);
        mj_deleteData(d);
    }
}

/* The mass MuJoCo's compiler gives a capsule geom (radius r, half-length
 * h) at density rho. */
static inline double ref_capsule_mass(double rho, double r, double h)
{
    return rho * mjPI * (r * r * 2.0 * h + 4.0 / 3.0 * r * r * r);
}

/* Through vec_env (B = 2): no env terminates (with `hold`, every step of
 * every env starts from that state, set through vec_env_state: a pole held
 * upright), so each is truncated at exactly max_episode_steps, terminated
 * false, and reset at once (episode length 0 again, the statistics counting
 * B episodes of that length). Halfway, the vec_env is saved and loaded into
 * a second one that ran elsewhere, which then agrees with it bit for bit
 * (observations, final observations, rewards, flags) to the end. Both are
 * freed (ASan: no mjData left). */
static inline void ref_check_vec_env(const struct env_spec *s, const double *hold)
{
    enum { B = 2 };
    const mjModel *m = s->model;
    int L = s->max_episode_steps, D = s->obs.dim, A = s->act.dim, n = m->nq + m->nv;
    ck_assert_int_gt(L, 0);
    struct vec_env *v = vec_env_new(s, B, 3, 0), *w = vec_env_new(s, B, 4, 0);
    ck_assert_msg(v && w, "vec_env_new: %s", env_last_error());
    float obs[2][B * REF_MAX_OBS], fin[2][B * REF_MAX_OBS], act[B * 8], rew[2][B];
    bool term[2][B], trunc[2][B], loaded = false;
    uint64_t rng = 5;
    vec_env_reset(v, obs[0]);
    vec_env_reset(w, obs[1]);
    for (int t = 0; t < 7; t++) {
        for (int i = 0; i < B; i++) ref_random_action(s, &rng, act + i * A);
        ck_assert_int_eq(vec_env_step(w, act, obs[1], rew[1], term[1], trunc[1], fin[1]), 0);
    }
    for (int t = 1; t <= L + 1; t++) {
        for (int i = 0; i < B; i++) {
            ref_random_action(s, &rng, act + i * A);
            for (int k = 0; hold && k < 1 + loaded; k++)
                ck_assert_int_eq(s->set_state(vec_env_state(k ? w : v, i), hold, n), 0);
        }
        ck_assert_int_eq(vec_env_step(v, act, obs[0], rew[0], term[0], trunc[0], fin[0]), 0);
        for (int i = 0; i < B; i++) {
            ck_assert_msg(!term[0][i], "env %d terminated at step %d", i, t);
            ck_assert_msg(trunc[0][i] == (t == L), "env %d: truncated %d at step %d", i,
                          trunc[0][i], t);
        }
        if (t == L) {
            struct vec_env_stats st;
            vec_env_get_stats(v, &st);
            ck_assert_int_eq(st.episodes, B);
            ck_assert_int_eq(st.length_min, L);
            ck_assert_int_eq(st.length_max, L);
            for (int i = 0; i < B; i++) ck_assert_int_eq(vec_env_episode_length(v, i), 0);
        }
        if (loaded) {
            ck_assert_int_eq(vec_env_step(w, act, obs[1], rew[1], term[1], trunc[1], fin[1]), 0);
            ck_assert_msg(memcmp(obs[0], obs[1], sizeof(float) * (size_t)(B * D)) == 0,
                          "resumed vec_env: observations differ at step %d", t);
            ck_assert(memcmp(rew[0], rew[1], sizeof rew[0]) == 0);
            ck_assert(memcmp(term[0], term[1], sizeof term[0]) == 0);
            ck_assert(memcmp(trunc[0], trunc[1], sizeof trunc[0]) == 0);
            if (t == L)
                ck_assert(memcmp(fin[0], fin[1], sizeof(float) * (size_t)(B * D)) == 0);
        }
        if (t == L / 2) {
            unsigned char *buf;
            size_t len;
            ck_assert_int_eq(vec_env_save(v, &buf, &len), 0);
            ck_assert_msg(vec_env_load(w, buf, len) == 0, "vec_env_load: %s", env_last_error());
            free(buf);
            loaded = true;
        }
    }
    vec_env_free(v);
    vec_env_free(w);
}

/* The env's reset leaves its mjData as Gymnasium's does (mj_resetData, the
 * noise, mj_forward): after `steps` steps from `from` (against joint
 * limits, so that contacts or constraints, qacc_warmstart and the solver's
 * statistics hold values), every array of mjData but the contacts' and
 * efc_* rows past what mj_forward rebuilt, and every counter, equal bit for
 * bit those of a copy reset by mj_resetData itself to the same state. */
static inline void ref_check_reset_data(const struct env_spec *s, const double *from, int steps)
{
    const mjModel *m = s->model;
    int n = m->nq + m->nv;
    void *env = ref_env_new(s);
    mjData *d = ((struct env_mj *)env)->d;
    uint64_t rng = 17;
    float obs[REF_MAX_OBS], act[8], r;
    bool term;
    double x[REF_MAX_STATE];
    s->reset(env, &rng, obs);
    ck_assert_int_eq(s->set_state(env, from, n), 0);
    for (int t = 0; t < steps; t++) {
        for (int k = 0; k < s->act.dim; k++)
            act[k] = (float)s->act.high[k];
        s->step(env, act, obs, &r, &term);
    }
    mjData *ref = mj_copyData(NULL, m, d);
    s->reset(env, &rng, obs);
    s->get_state(env, x, REF_MAX_STATE);
    ref_reset_to(m, ref, x);
    ck_assert_int_eq(d->ne, ref->ne);
    ck_assert_int_eq(d->nf, ref->nf);
    ck_assert_int_eq(d->nefc, ref->nefc);
    ck_assert_int_eq(d->ncon, ref->ncon);
    ck_assert_int_eq(d->pstack, ref->pstack);
    ck_assert(d->time == ref->time && d->energy[0] == ref->energy[0] &&
              d->energy[1] == ref->energy[1]);
    ck_assert(memcmp(d->warning, ref->warning, sizeof d->warning) == 0);
    ck_assert(d->solver_iter == ref->solver_iter && d->solver_nnz == ref->solver_nnz);
    ck_assert(memcmp(d->solver, ref->solver, sizeof d->solver) == 0);
    MJDATA_POINTERS_PREAMBLE(m)
    (void)nv;
#define X(type, name, nr, nc)                                                                      \
    if (strncmp(#name, "efc_", 4) != 0 && strcmp(#name, "contact") != 0)                          \
        ck_assert_msg(memcmp(d->name, ref->name, sizeof(type) * (size_t)(m->nr) * (nc)) == 0,     \
                      "after reset, mjData.%s differs from mj_resetData's", #name);
    MJDATA_POINTERS
#undef X
    for (int i = 0; i < d->nefc; i++)
        ck_assert(d->efc_pos[i] == ref->efc_pos[i] && d->efc_force[i] == ref->efc_force[i]);
    mj_deleteData(ref);
    ref_env_free(s, env);
}

/* Create, reset and step an env through its spec, and destroy it, `cycles`
 * times (3 episodes of 20 random steps each): under ASan a leak of what
 * create or reset allocates shows. */
static void ref_check_lifecycle(const struct env_spec *s, int cycles)
{
    uint64_t rng = 4;
    float *obs = malloc((size_t)s->obs.dim * sizeof *obs), *a = malloc((size_t)s->act.dim * sizeof *a), r;
    bool term;
    ck_assert(obs && a);
    for (int i = 0; i < cycles; i++) {
        void *env = ref_env_new(s);
        for (int e = 0; e < 3; e++) {
            s->reset(env, &rng, obs);
            for (int t = 0; t < 20; t++) {
                ref_random_action(s, &rng, a);
                s->step(env, a, obs, &r, &term);
            }
        }
        ref_env_free(s, env);
    }
    free(obs);
    free(a);
}

#endif
