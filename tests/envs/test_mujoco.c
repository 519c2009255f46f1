/* Conformance of the MuJoCo v4 locomotion envs (HalfCheetah, Hopper,
 * Walker2d, Ant, Humanoid) with Gymnasium 0.29.1's *_v4.py: the model's
 * constants, the observation layout after set_state, every reward term,
 * termination and info recomputed here from mjData (a reference step made
 * with raw MuJoCo calls on a copy of the env's mjData, fresh after
 * set_state and stale mid-episode), termination around the health bounds,
 * reset-noise statistics, save/load giving bit-identical continued
 * trajectories, and the base's errors by name. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/vec_env.h"
#include "tests/envs/mujoco_check.h"
#include "kit.h"

/* ---- the references: Gymnasium's formulas over mjData ---- */

struct ref {
    double reward;
    bool terminated;
    double info[ENV_MJ_MAX_INFO];
};

static bool all_finite(const mjModel *m, const mjData *d)
{
    for (int k = 0; k < m->nq; k++)
        if (!isfinite(d->qpos[k])) return false;
    for (int k = 0; k < m->nv; k++)
        if (!isfinite(d->qvel[k])) return false;
    return true;
}

static double clip(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* obs = qpos[skip:], qvel (clipped to +-10 when clip_vel). */
static int obs_pos_vel(const mjModel *m, const mjData *d, int skip, bool clip_vel, double *o)
{
    int n = 0;
    for (int k = skip; k < m->nq; k++)
        o[n++] = d->qpos[k];
    for (int k = 0; k < m->nv; k++)
        o[n++] = clip_vel ? clip(d->qvel[k], -10, 10) : d->qvel[k];
    return n;
}

static void obs_cheetah(const mjModel *m, const mjData *d, double *o) { obs_pos_vel(m, d, 1, false, o); }
static void obs_hopper(const mjModel *m, const mjData *d, double *o) { obs_pos_vel(m, d, 1, true, o); }
static void obs_ant(const mjModel *m, const mjData *d, double *o) { obs_pos_vel(m, d, 2, false, o); }
static void obs_humanoid(const mjModel *m, const mjData *d, double *o)
{
    int n = obs_pos_vel(m, d, 2, false, o);
    for (int k = 0; k < 10 * m->nbody; k++) o[n++] = d->cinert[k];
    for (int k = 0; k < 6 * m->nbody; k++) o[n++] = d->cvel[k];
    for (int k = 0; k < m->nv; k++) o[n++] = d->qfrc_actuator[k];
    for (int k = 0; k < 6 * m->nbody; k++) o[n++] = d->cfrc_ext[k];
}

static void ref_cheetah(const mjModel *m, const mjData *b, const mjData *a, const float *act,
                        struct ref *r)
{
    double dt = 0.01 * 5;
    double xv = (a->qpos[0] - b->qpos[0]) / dt;
    double ctrl = 0.1 * mjc_sum_sq(act, m->nu);
    r->reward = 1.0 * xv - ctrl;
    r->terminated = false;
    double info[] = {a->qpos[0], xv, xv, -ctrl};
    memcpy(r->info, info, sizeof info);
}

static bool healthy_hopper(const mjModel *m, const mjData *d)
{
    for (int k = 2; k < m->nq; k++)
        if (!(-100 < d->qpos[k] && d->qpos[k] < 100)) return false;
    for (int k = 0; k < m->nv; k++)
        if (!(-100 < d->qvel[k] && d->qvel[k] < 100)) return false;
    return 0.7 < d->qpos[1] && -0.2 < d->qpos[2] && d->qpos[2] < 0.2;
}

static void ref_hopper(const mjModel *m, const mjData *b, const mjData *a, const float *act,
                       struct ref *r)
{
    double xv = (a->qpos[0] - b->qpos[0]) / (0.002 * 4);
    r->reward = (xv + 1.0) - 1e-3 * mjc_sum_sq(act, m->nu);
    r->terminated = !healthy_hopper(m, a);
    double info[] = {a->qpos[0], xv};
    memcpy(r->info, info, sizeof info);
}

static void ref_walker(const mjModel *m, const mjData *b, const mjData *a, const float *act,
                       struct ref *r)
{
    double xv = (a->qpos[0] - b->qpos[0]) / (0.002 * 4);
    r->reward = (xv + 1.0) - 1e-3 * mjc_sum_sq(act, m->nu);
    double z = a->qpos[1], ang = a->qpos[2];
    r->terminated = !(0.8 < z && z < 2.0 && -1.0 < ang && ang < 1.0);
    double info[] = {a->qpos[0], xv};
    memcpy(r->info, info, sizeof info);
}

static void ref_ant(const mjModel *m, const mjData *b, const mjData *a, const float *act,
                    struct ref *r)
{
    double x0 = mjc_body_com(m, b, "torso", 0), y0 = mjc_body_com(m, b, "torso", 1);
    double x1 = mjc_body_com(m, a, "torso", 0), y1 = mjc_body_com(m, a, "torso", 1);
    double dt = 0.01 * 5, xv = (x1 - x0) / dt, yv = (y1 - y0) / dt;
    double ctrl = 0.5 * mjc_sum_sq(act, m->nu);
    r->reward = (xv + 1.0) - ctrl;
    r->terminated = !(all_finite(m, a) && 0.2 <= a->qpos[2] && a->qpos[2] <= 1.0);
    double info[] = {xv, -ctrl, 1.0, x1, y1, sqrt(x1 * x1 + y1 * y1), xv, yv, xv};
    memcpy(r->info, info, sizeof info);
}

static void mass_center(const mjModel *m, const mjData *d, double *x, double *y)
{
    double sx = 0, sy = 0, sm = 0;
    for (int i = 0; i < m->nbody; i++) {
        sx += m->body_mass[i] * d->xipos[3 * i];
        sy += m->body_mass[i] * d->xipos[3 * i + 1];
        sm += m->body_mass[i];
    }
    *x = sx / sm, *y = sy / sm;
}

static void ref_humanoid(const mjModel *m, const mjData *b, const mjData *a, const float *act,
                         struct ref *r)
{
    (void)act;
    double x0, y0, x1, y1;
    mass_center(m, b, &x0, &y0);
    mass_center(m, a, &x1, &y1);
    double dt = 0.003 * 5, xv = (x1 - x0) / dt, yv = (y1 - y0) / dt;
    double sq = 0;
    for (int k = 0; k < m->nu; k++)
        sq += a->ctrl[k] * a->ctrl[k];   /* data.ctrl */
    double ctrl = 0.1 * sq;
    r->reward = (1.25 * xv + 5.0) - ctrl;
    r->terminated = !(1.0 < a->qpos[2] && a->qpos[2] < 2.0);
    double info[] = {1.25 * xv, -ctrl, 5.0, x1, y1, sqrt(x1 * x1 + y1 * y1), xv, yv, 1.25 * xv};
    memcpy(r->info, info, sizeof info);
}

/* ---- the table: what Gymnasium v0.29.1 says of each env ---- */

struct env_case {
    const char *id;
    int nq, nv, nu, nbody, frame_skip, obs_dim;
    double timestep;
    int integrator, solver, iterations;
    double reward_threshold;        /* NAN: none */
    double gear[17], ctrl_lo, ctrl_hi;
    int info_count;
    const char *info_names[9];
    bool qvel_normal;               /* qvel noise N(0, s) (else U(-s, s)) */
    double noise;
    void (*obs)(const mjModel *, const mjData *, double *);
    void (*ref)(const mjModel *, const mjData *, const mjData *, const float *, struct ref *);
    int z;                          /* qpos index of the height; -1: none */
    double z_lo, z_hi;              /* its health bounds (0, 0: none) */
    int quat;                       /* qpos index of the free joint's quaternion; -1: none */
    /* health bounds bisected in termination_at_bounds: qpos index, bound,
     * and whether it is an upper one (up to 3; index -1 ends) */
    struct { int k; double b; bool upper; } bounds[3];
};

static const struct env_case cases[] = {
    {"HalfCheetah-v4", 9, 9, 6, 8, 5, 17, 0.01, mjINT_EULER, mjSOL_NEWTON, 100, 4800.0,
     {120, 90, 60, 120, 60, 30}, -1, 1, 4, {"x_position", "x_velocity", "reward_run", "reward_ctrl"},
     true, 0.1, obs_cheetah, ref_cheetah, -1, 0, 0, -1, {{-1, 0, 0}}},
    {"Hopper-v4", 6, 6, 3, 5, 4, 11, 0.002, mjINT_RK4, mjSOL_NEWTON, 100, 3800.0, {200, 200, 200},
     -1, 1, 2, {"x_position", "x_velocity"}, false, 5e-3, obs_hopper, ref_hopper, 1, 0.7, INFINITY, -1,
     {{2, 0.2, true}, {2, -0.2, false}, {-1, 0, 0}}},
    {"Walker2d-v4", 9, 9, 6, 8, 4, 17, 0.002, mjINT_RK4, mjSOL_NEWTON, 100, NAN,
     {100, 100, 100, 100, 100, 100}, -1, 1, 2, {"x_position", "x_velocity"}, false, 5e-3,
     obs_hopper, ref_walker, 1, 0.8, 2.0, -1,
     {{1, 2.0, true}, {2, 1.0, true}, {2, -1.0, false}}},
    {"Ant-v4", 15, 14, 8, 14, 5, 27, 0.01, mjINT_RK4, mjSOL_NEWTON, 100, 6000.0,
     {150, 150, 150, 150, 150, 150, 150, 150}, -1, 1, 9,
     {"reward_forward", "reward_ctrl", "reward_survive", "x_position", "y_position",
      "distance_from_origin", "x_velocity", "y_velocity", "forward_reward"},
     true, 0.1, obs_ant, ref_ant, 2, 0.2, 1.0, 3, {{2, 1.0, true}, {-1, 0, 0}}},
    {"Humanoid-v4", 24, 23, 17, 14, 5, 376, 0.003, mjINT_RK4, mjSOL_PGS, 50, NAN,
     {100, 100, 100, 100, 100, 300, 200, 100, 100, 300, 200, 25, 25, 25, 25, 25, 25}, -0.4, 0.4, 9,
     {"reward_linvel", "reward_quadctrl", "reward_alive", "x_position", "y_position",
      "distance_from_origin", "x_velocity", "y_velocity", "forward_reward"},
     false, 1e-2, obs_humanoid, ref_humanoid, 2, 1.0, 2.0, 3,
     {{2, 2.0, true}, {-1, 0, 0}}},
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- tests ---- */

START_TEST(model_constants)
{
    const struct env_case *c = &cases[_i];
    struct mjc_env e = mjc_open(c->id, 1);
    const struct env_spec *s = e.spec;
    const mjModel *m = e.m;
    ck_assert_str_eq(s->id, c->id);
    ck_assert_int_eq(m->nq, c->nq);
    ck_assert_int_eq(m->nv, c->nv);
    ck_assert_int_eq(m->nu, c->nu);
    ck_assert_int_eq(m->nbody, c->nbody);
    ck_assert_double_eq(m->opt.timestep, c->timestep);
    ck_assert_int_eq(m->opt.integrator, c->integrator);
    ck_assert_int_eq(m->opt.solver, c->solver);
    ck_assert_int_eq(m->opt.iterations, c->iterations);
    ck_assert_double_eq(m->opt.gravity[2], -9.81);
    ck_assert_int_eq(((struct env_mj *)e.state)->frame_skip, c->frame_skip);
    ck_assert_double_eq(((struct env_mj *)e.state)->dt, c->timestep * c->frame_skip);
    ck_assert_int_eq(s->obs.dim, c->obs_dim);
    ck_assert_int_eq(s->act.kind, SPACE_BOX);
    ck_assert_int_eq(s->act.dim, c->nu);
    for (int k = 0; k < c->nu; k++) {
        ck_assert_double_eq(m->actuator_gear[6 * k], c->gear[k]);
        ck_assert_double_eq(s->act.low[k], (float)c->ctrl_lo);
        ck_assert_double_eq(s->act.high[k], (float)c->ctrl_hi);
        ck_assert_int_eq(m->actuator_ctrllimited[k], 1);
    }
    for (int k = 0; k < c->obs_dim; k++) {
        ck_assert(s->obs.low[k] == -INFINITY);
        ck_assert(s->obs.high[k] == INFINITY);
    }
    ck_assert_int_eq(s->max_episode_steps, 1000);
    if (isnan(c->reward_threshold))
        ck_assert(isnan(s->reward_threshold));
    else
        ck_assert_double_eq(s->reward_threshold, c->reward_threshold);
    ck_assert_int_eq(s->info_count, c->info_count);
    for (int k = 0; k < c->info_count; k++)
        ck_assert_str_eq(s->info_names[k], c->info_names[k]);
    ck_assert_int_eq(s->get_state(e.state, NULL, 0), c->nq + c->nv);
    double x[64] = {0};
    ck_assert_int_eq(s->set_state(e.state, x, c->nq + c->nv - 1), -1);
    ck_assert_ptr_eq(env_lookup(c->id), s);   /* loaded once */
    mjc_close(&e);
}
END_TEST

/* A state near qpos0: positions +-0.2, velocities +-1 (scaled by `v`). */
static void random_state(const mjModel *m, uint64_t *rng, double v, double *qpos, double *qvel)
{
    for (int k = 0; k < m->nq; k++)
        qpos[k] = m->qpos0[k] + mjc_uniform(rng, -0.2, 0.2);
    for (int k = 0; k < m->nv; k++)
        qvel[k] = v * mjc_uniform(rng, -1, 1);
}

static void assert_obs(const struct env_case *c, const mjModel *m, const mjData *d,
                       const float *obs)
{
    double *o = calloc((size_t)c->obs_dim, sizeof(double));
    c->obs(m, d, o);
    for (int k = 0; k < c->obs_dim; k++)
        ck_assert_msg(obs[k] == (float)o[k], "%s: obs[%d] = %.9g, want %.9g", c->id, k, obs[k],
                      (float)o[k]);
    free(o);
}

/* After set_state the env's mjData holds exactly [qpos, qvel] and what
 * mj_forward derives from them; the reset observation is the layout of
 * mjData as reset leaves it. */
START_TEST(set_state_and_obs_layout)
{
    const struct env_case *c = &cases[_i];
    struct mjc_env e = mjc_open(c->id, 2);
    assert_obs(c, e.m, e.d, e.obs);
    uint64_t rng = 3;
    double qpos[32], qvel[32], g[64];
    for (int i = 0; i < 20; i++) {
        random_state(e.m, &rng, 3.0, qpos, qvel);
        qvel[0] = i % 2 ? 15.0 : -15.0;   /* past the +-10 clip */
        double qpos_in[32];
        memcpy(qpos_in, qpos, sizeof qpos_in);
        mjc_set(&e, qpos, qvel);
        ck_assert_int_eq(e.spec->get_state(e.state, g, 64), c->nq + c->nv);
        /* mj_forward normalises a free joint's quaternion in qpos (as in
         * Gymnasium, whose set_state also ends in mj_forward) */
        if (c->quat >= 0) {
            double *q = qpos + c->quat, n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
            for (int k = 0; k < 4; k++) ck_assert_double_eq_tol(g[c->quat + k], q[k] / n, 1e-15);
            memcpy(qpos + c->quat, g + c->quat, 4 * sizeof(double));
        }
        ck_assert_mem_eq(g, qpos, sizeof(double) * (size_t)c->nq);
        ck_assert_mem_eq(g + c->nq, qvel, sizeof(double) * (size_t)c->nv);
        /* the same as a fresh mjData given the state and mj_forward */
        mjData *f = mj_makeData(e.m);
        memcpy(f->qpos, qpos_in, sizeof(double) * (size_t)c->nq);
        memcpy(f->qvel, qvel, sizeof(double) * (size_t)c->nv);
        mj_forward(e.m, f);
        ck_assert_mem_eq(f->xpos, e.d->xpos, sizeof(double) * 3 * (size_t)c->nbody);
        ck_assert_mem_eq(f->xipos, e.d->xipos, sizeof(double) * 3 * (size_t)c->nbody);
        mj_deleteData(f);
    }
    mjc_close(&e);
}
END_TEST

/* Each step against the reference on a copy of the env's mjData: after a
 * set_state (fresh mjData) and then on through the episode (stale mjData,
 * which the step reads first), with random actions, some past the control
 * range. The new state is bit for bit the reference's; reward, info and
 * termination are Gymnasium's formulas over it. */
START_TEST(step_matches_reference)
{
    const struct env_case *c = &cases[_i];
    struct mjc_env e = mjc_open(c->id, 4);
    const struct env_spec *s = e.spec;
    uint64_t rng = 5;
    double qpos[32], qvel[32], info[ENV_MJ_MAX_INFO];
    float act[17];
    int checked = 0, terminations = 0;
    for (int ep = 0; ep < 12; ep++) {
        random_state(e.m, &rng, 1.0, qpos, qvel);
        mjc_set(&e, qpos, qvel);
        for (int t = 0; t < 40; t++) {
            mjc_random_action(s, &rng, act);
            if (t % 7 == 3) act[0] = (float)(2.5 * c->ctrl_hi);   /* MuJoCo clamps */
            mjData *before, *after;
            mjc_reference_step(&e, act, c->frame_skip, &before, &after);
            struct ref r;
            c->ref(e.m, before, after, act, &r);
            float reward;
            bool term;
            s->step(e.state, act, e.obs, &reward, &term);
            ck_assert_mem_eq(e.d->qpos, after->qpos, sizeof(double) * (size_t)c->nq);
            ck_assert_mem_eq(e.d->qvel, after->qvel, sizeof(double) * (size_t)c->nv);
            ck_assert_msg(fabs((double)reward - r.reward) <= 1e-6 * fmax(1, fabs(r.reward)),
                          "%s: reward %.9g, want %.17g", c->id, reward, r.reward);
            ck_assert_msg(reward == (float)r.reward, "%s: reward %.9g, want (float)%.17g", c->id,
                          reward, r.reward);
            ck_assert_int_eq(term, r.terminated);
            s->info(s, e.state, info);
            for (int k = 0; k < c->info_count; k++)
                ck_assert_msg(fabs(info[k] - r.info[k]) <= 1e-12 * fmax(1, fabs(r.info[k])),
                              "%s: info %s = %.17g, want %.17g", c->id, c->info_names[k], info[k],
                              r.info[k]);
            assert_obs(c, e.m, after, e.obs);
            mj_deleteData(before);
            mj_deleteData(after);
            checked++;
            if (term) {
                terminations++;
                break;
            }
        }
    }
    ck_assert_int_gt(checked, 100);
    if (c->z >= 0) ck_assert_int_gt(terminations, 0);
    mjc_close(&e);
}
END_TEST

/* Termination at the health bounds: for each bound, the starting value
 * of its qpos entry is bisected until, after one step, it lies within 1e-9
 * of the bound, on both sides; at every trial the env's verdict is the
 * reference's (strict bounds; Ant's inclusive), and the last two trials,
 * one each side, get opposite verdicts. (The lower height bounds are only
 * met with the legs in the floor, where other terms fail too: those are
 * covered by step_matches_reference's terminations.) */
static bool trial(struct mjc_env *e, const struct env_case *c, int k, double x0, double *x1)
{
    double qpos[32], qvel[32];
    float act[17] = {0}, reward;
    bool term;
    for (int j = 0; j < e->m->nq; j++) qpos[j] = e->m->qpos0[j];
    for (int j = 0; j < e->m->nv; j++) qvel[j] = 0;
    qpos[k] = x0;
    mjc_set(e, qpos, qvel);
    mjData *before, *after;
    mjc_reference_step(e, act, c->frame_skip, &before, &after);
    struct ref r;
    c->ref(e->m, before, after, act, &r);
    e->spec->step(e->state, act, e->obs, &reward, &term);
    ck_assert_int_eq(term, r.terminated);
    *x1 = after->qpos[k];
    mj_deleteData(before), mj_deleteData(after);
    return term;
}

START_TEST(termination_at_bounds)
{
    const struct env_case *c = &cases[_i];
    struct mjc_env e = mjc_open(c->id, 6);
    for (int bi = 0; bi < 3 && c->bounds[bi].k >= 0; bi++) {
        int k = c->bounds[bi].k;
        double b = c->bounds[bi].b, lo = b - 0.1, hi = b + 0.1, x1;
        trial(&e, c, k, lo, &x1);
        ck_assert_msg(x1 < b, "%s: qpos[%d] %g -> %g", c->id, k, lo, x1);
        trial(&e, c, k, hi, &x1);
        ck_assert_msg(x1 > b, "%s: qpos[%d] %g -> %g", c->id, k, hi, x1);
        for (int it = 0; it < 80; it++) {
            double mid = 0.5 * (lo + hi);
            trial(&e, c, k, mid, &x1);
            if (x1 < b) lo = mid;
            else hi = mid;
        }
        double xlo, xhi;
        bool tlo = trial(&e, c, k, lo, &xlo), thi = trial(&e, c, k, hi, &xhi);
        ck_assert_msg(xlo < b && b - xlo < 1e-9 && xhi >= b && xhi - b < 1e-9,
                      "%s: bound %g bracketed by %.17g, %.17g", c->id, b, xlo, xhi);
        /* past an upper bound (or below a lower one): terminated; at the
         * bound itself (the bisection lands on it): terminated where the
         * bounds are strict, healthy where inclusive (Ant) */
        bool inclusive = strcmp(c->id, "Ant-v4") == 0;
        bool want_hi = xhi == b ? !inclusive : c->bounds[bi].upper;
        ck_assert_msg(tlo == !c->bounds[bi].upper && thi == want_hi,
                      "%s: qpos[%d] at %.17g: terminated %d, at %.17g: %d", c->id, k, xlo, tlo,
                      xhi, thi);
    }
    mjc_close(&e);
}
END_TEST

/* Hopper's health covers qpos[2:] and every qvel, strictly inside
 * (-100, 100), unclipped (the observation clips at 10). */
START_TEST(hopper_state_range)
{
    struct mjc_env e = mjc_open("Hopper-v4", 8);
    double qpos[6], qvel[6], g[12];
    float act[3] = {0};
    for (int k = 0; k < 6; k++) qpos[k] = e.m->qpos0[k], qvel[k] = 0;
    float reward;
    bool term;
    /* a joint velocity of 99 stays healthy whatever the clip does ... */
    qvel[5] = 60;
    mjc_set(&e, qpos, qvel);
    e.spec->step(e.state, act, e.obs, &reward, &term);
    e.spec->get_state(e.state, g, 12);
    ck_assert(fabs(g[6 + 5]) < 100);
    ck_assert(!term);
    ck_assert_float_eq(e.obs[5 + 5], 10.0f);   /* clipped in the observation */
    /* ... one past 100 after the step terminates, with the healthy reward paid */
    qvel[5] = 400;
    mjc_set(&e, qpos, qvel);
    e.spec->step(e.state, act, e.obs, &reward, &term);
    e.spec->get_state(e.state, g, 12);
    ck_assert(fabs(g[6 + 5]) >= 100);
    ck_assert(term);
    double info[2];
    e.spec->info(e.spec, e.state, info);
    ck_assert_double_eq_tol((double)reward, info[1] + 1.0, 1e-4);
    mjc_close(&e);
}
END_TEST

START_TEST(reset_noise_statistics)
{
    const struct env_case *c = &cases[_i];
    const int n = 4000;
    static struct mjc_reset_stats st;
    mjc_reset_stats(c->id, n, &st);
    ck_assert_int_eq(st.n_values, c->nq + c->nv);
    if (c->quat >= 0) {
        /* the free joint's quaternion: (qpos0 + noise) normalised by mj_forward */
        mjc_assert_uniform(&st, 0, c->quat, c->noise, n);
        mjc_assert_uniform(&st, c->quat + 4, c->nq, c->noise, n);
        for (int k = c->quat + 1; k < c->quat + 4; k++)   /* ~ noise / |q| */
            ck_assert_msg(fabs(st.std[k] / (c->noise / sqrt(3.0)) - 1) < 0.08, "std %g", st.std[k]);
    } else {
        mjc_assert_uniform(&st, 0, c->nq, c->noise, n);
    }
    if (c->qvel_normal)
        mjc_assert_normal(&st, c->nq, c->nq + c->nv, c->noise, n);
    else
        mjc_assert_uniform(&st, c->nq, c->nq + c->nv, c->noise, n);
    /* reset reports zeros as info and starts a fresh episode */
    struct mjc_env e = mjc_open(c->id, 9);
    double info[ENV_MJ_MAX_INFO];
    e.spec->info(e.spec, e.state, info);
    for (int k = 0; k < c->info_count; k++) ck_assert_double_eq(info[k], 0.0);
    mjc_close(&e);
}
END_TEST

START_TEST(save_load_bit_identical)
{
    mjc_check_save_load(cases[_i].id, 40, 60, 8);
}
END_TEST

/* load refuses what is not this env's saved state, naming it, and leaves
 * the env as it was. */
START_TEST(load_errors)
{
    const struct env_case *c = &cases[_i];
    struct mjc_env e = mjc_open(c->id, 10);
    const struct env_spec *s = e.spec;
    char *buf = malloc(s->saved_size), err[256], msg[256];
    double g0[64], g1[64];
    s->save(s, e.state, buf);
    s->get_state(e.state, g0, 64);
    double nan = NAN;
    /* qpos[1] lies 8 bytes into the arrays, which follow the header */
    size_t head = s->saved_size - ((struct env_mj_loaded *)s)->saved_arrays;
    memcpy(buf + head + ((struct env_mj_loaded *)s)->qpos_at + 8, &nan, 8);
    ck_assert_int_eq(s->load(s, e.state, buf, err, sizeof err), -1);
    snprintf(msg, sizeof msg, "saved qpos[1] is nan");
    ck_assert_str_eq(err, msg);
    buf[0] ^= 1;
    ck_assert_int_eq(s->load(s, e.state, buf, err, sizeof err), -1);
    snprintf(msg, sizeof msg, "saved state is not a MuJoCo env's (bad magic)");
    ck_assert_str_eq(err, msg);
    s->get_state(e.state, g1, 64);
    ck_assert_mem_eq(g0, g1, sizeof(double) * (size_t)(c->nq + c->nv));
    free(buf);
    mjc_close(&e);
}
END_TEST

/* The kit's errors by name: a model that does not parse, one with the
 * wrong number of actuators, one without a body the env reads, a row that
 * is not whole; a whole one loads and unloads. */
MJ_MODEL(hopper);
static int dim1(const mjModel *m) { (void)m; return 1; }
static void observe1(const struct env_mj *e, float *obs) { obs[0] = (float)e->d->qpos[0]; }
static void step0(struct env_mj *e, const float *action, double *reward, bool *terminated)
{
    env_mj_do_simulation(e, action);
    *reward = 0;
    *terminated = false;
}
START_TEST(load_errors_by_name)
{
    static const char bad_xml[] = "<mujoco><worldbody><body name='a'></worldbody></mujoco>";
    static const char *const nose[] = {"nose", NULL};
    char err[512];
    struct env_mj_def def = {.id = "Test-v4", .xml_name = "test.xml", .xml = bad_xml,
                             .frame_skip = 1, .nu = 3, .obs_dim = dim1, .observe = observe1, .step = step0};
    ck_assert_ptr_null(env_mj_make_spec(&def, NULL, NULL, err, sizeof err));
    ck_assert_msg(strncmp(err, "Test-v4: model: ", 16) == 0 && strlen(err) > 20, "%s", err);
    def.xml = mj_model_hopper;
    def.nu = 2;
    ck_assert_ptr_null(env_mj_make_spec(&def, NULL, NULL, err, sizeof err));
    ck_assert_str_eq(err, "Test-v4: model has 3 actuators, the env needs 2");
    def.nu = 3;
    def.bodies = nose;
    ck_assert_ptr_null(env_mj_make_spec(&def, NULL, NULL, err, sizeof err));
    ck_assert_str_eq(err, "Test-v4: model has no body 'nose'");
    /* a row that is not whole, by what it lacks */
    def.bodies = NULL;
    def.observe = NULL;
    ck_assert_ptr_null(env_mj_make_spec(&def, NULL, NULL, err, sizeof err));
    ck_assert_str_eq(err, "Test-v4: model: the row of Test-v4 gives one of obs_dim and observe");
    def.observe = observe1;
    def.step = NULL;
    ck_assert_ptr_null(env_mj_make_spec(&def, NULL, NULL, err, sizeof err));
    ck_assert_str_eq(err, "Test-v4: model: the row of Test-v4 has no step");
    def.step = step0;
    const struct env_spec *s = env_mj_make_spec(&def, NULL, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    ck_assert_int_eq(s->obs.dim, 1);
    s->unload((struct env_spec *)s);   /* the model and the spec freed (ASan's leak check) */
}
END_TEST

/* Through vec_env: HalfCheetah never terminates, so every env is
 * truncated at exactly step 1000 (terminated false), reset at once. */
START_TEST(truncation_at_1000)
{
    const struct env_spec *s = env_lookup("HalfCheetah-v4");
    const int B = 2;
    struct vec_env *v = vec_env_new(s, B, 3, 0);
    ck_assert_ptr_nonnull(v);
    float *obs = malloc(sizeof(float) * B * 17), *fin = malloc(sizeof(float) * B * 17);
    float act[2 * 6] = {0}, reward[2];
    bool term[2], trunc[2];
    vec_env_reset(v, obs);
    for (int t = 1; t <= 1001; t++) {
        for (int k = 0; k < B * 6; k++) act[k] = (float)sin(0.1 * t + k);
        ck_assert_int_eq(vec_env_step(v, act, obs, reward, term, trunc, fin), 0);
        for (int i = 0; i < B; i++) {
            ck_assert(!term[i]);
            ck_assert_int_eq(trunc[i], t == 1000);
        }
        if (t == 1000) {
            for (int i = 0; i < B; i++) ck_assert_int_eq(vec_env_episode_length(v, i), 0);
            struct vec_env_stats st;
            vec_env_get_stats(v, &st);
            ck_assert_int_eq(st.episodes, 2);
            ck_assert_int_eq(st.length_min, 1000);
            ck_assert_int_eq(st.length_max, 1000);
            double sums[4];
            vec_env_info_sums(v, sums);
            ck_assert(sums[1] != 0.0 && sums[3] < 0.0);   /* x_velocity, reward_ctrl */
        }
    }
    vec_env_free(v);
    free(obs), free(fin);
}
END_TEST

/* A vec_env of each env, with autoreset, saved mid-run and loaded into a
 * second one that ran elsewhere: the next steps agree bit for bit (what
 * resume of a MuJoCo run rests on); all freed (ASan's leak check). */
START_TEST(vec_env_resume_bit_identical)
{
    const struct env_case *c = &cases[_i];
    const struct env_spec *s = env_lookup(c->id);
    const int B = 3, D = c->obs_dim, A = c->nu;
    struct vec_env *a = vec_env_new(s, B, 1, 0), *b = vec_env_new(s, B, 2, 0);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    float *oa = malloc(sizeof(float) * (size_t)(B * D)), *ob = malloc(sizeof(float) * (size_t)(B * D));
    float *act = malloc(sizeof(float) * (size_t)(B * A)), ra[3], rb[3];
    bool ta[3], tb[3], ua[3], ub[3];
    uint64_t rng = 21;
    vec_env_reset(a, oa);
    vec_env_reset(b, ob);
    for (int t = 0; t < 120; t++) {
        for (int k = 0; k < B; k++) mjc_random_action(s, &rng, act + k * A);
        vec_env_step(a, act, oa, ra, ta, ua, NULL);
        for (int k = 0; k < B; k++) mjc_random_action(s, &rng, act + k * A);
        vec_env_step(b, act, ob, rb, tb, ub, NULL);
    }
    unsigned char *buf;
    size_t len;
    ck_assert_int_eq(vec_env_save(a, &buf, &len), 0);
    ck_assert_msg(vec_env_load(b, buf, len) == 0, "%s", env_last_error());
    free(buf);
    for (int t = 0; t < 150; t++) {
        for (int k = 0; k < B; k++) mjc_random_action(s, &rng, act + k * A);
        vec_env_step(a, act, oa, ra, ta, ua, NULL);
        vec_env_step(b, act, ob, rb, tb, ub, NULL);
        ck_assert_mem_eq(oa, ob, sizeof(float) * (size_t)(B * D));
        ck_assert_mem_eq(ra, rb, sizeof ra);
        ck_assert_mem_eq(ta, tb, sizeof ta);
        ck_assert_mem_eq(ua, ub, sizeof ua);
    }
    struct vec_env_stats sa, sb;
    vec_env_get_stats(a, &sa);
    vec_env_get_stats(b, &sb);
    ck_assert_mem_eq(&sa, &sb, sizeof sa);
    vec_env_free(a);
    vec_env_free(b);
    free(oa), free(ob), free(act);
}
END_TEST

static Suite *mujoco_suite(void)
{
    Suite *s = suite_create("mujoco_v4");
    TCase *tc = tcase_create("locomotion");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, model_constants, 0, N_CASES);
    tcase_add_loop_test(tc, set_state_and_obs_layout, 0, N_CASES);
    tcase_add_loop_test(tc, step_matches_reference, 0, N_CASES);
    tcase_add_loop_test(tc, termination_at_bounds, 0, N_CASES);
    tcase_add_test(tc, hopper_state_range);
    tcase_add_loop_test(tc, reset_noise_statistics, 0, N_CASES);
    tcase_add_loop_test(tc, save_load_bit_identical, 0, N_CASES);
    tcase_add_loop_test(tc, load_errors, 0, N_CASES);
    tcase_add_test(tc, load_errors_by_name);
    suite_add_tcase(s, tc);
    TCase *tv = tcase_create("vec_env");
    tcase_set_timeout(tv, 600);
    tcase_add_test(tv, truncation_at_1000);
    tcase_add_loop_test(tv, vec_env_resume_bit_identical, 0, N_CASES);
    suite_add_tcase(s, tv);
    return s;
}

int main(void)
{
    return kit_run_suite(mujoco_suite());
}
