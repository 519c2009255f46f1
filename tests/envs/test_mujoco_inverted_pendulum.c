/* InvertedPendulum-v4 against Gymnasium 0.29.1 (inverted_pendulum_v4.py,
 * assets/inverted_pendulum.xml, registration in envs/__init__.py): the
 * model's constants, the whole step against a reference written here from
 * mjData (mujoco_ref.h), termination on both sides of |angle| = 0.2, the
 * reset distribution, truncation, and an exact save/load resume. */
#include <check.h>
#include <math.h>
#include <mujoco/mujoco.h>
#include <stdio.h>
#include <stdlib.h>

#include "envs/env.h"
#include "mujoco_ref.h"
#include "kit.h"

#define ID "InvertedPendulum-v4"

/* ---- Gymnasium's InvertedPendulumEnv, again ---- */

static void ip_observe(const mjModel *m, const mjData *d, double *obs)
{
    for (int k = 0; k < m->nq; k++)
        obs[k] = d->qpos[k];
    for (int k = 0; k < m->nv; k++)
        obs[m->nq + k] = d->qvel[k];
}

static void ip_step(const mjModel *m, mjData *d, int frame_skip, const float *a, double *reward,
                    bool *terminated, double *info)
{
    (void)info;
    double ob[4];
    ref_simulate(m, d, a, frame_skip);
    ip_observe(m, d, ob);
    bool finite = true;
    for (int k = 0; k < 4; k++)
        finite = finite && isfinite(ob[k]);
    *reward = 1.0;
    *terminated = !finite || fabs(ob[1]) > 0.2;
}

static const struct mj_ref_ops ops = {.frame_skip = 2, .observe = ip_observe, .step = ip_step};

/* A state anywhere the pole may be while the episode runs, and a little past. */
static void draw_state(uint64_t *rng, double *x)
{
    x[0] = env_rng_uniform(rng, -0.95, 0.95);
    x[1] = env_rng_uniform(rng, -0.25, 0.25);
    x[2] = env_rng_uniform(rng, -2.0, 2.0);
    x[3] = env_rng_uniform(rng, -3.0, 3.0);
}

START_TEST(test_ip_constants)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    ck_assert_str_eq(s->id, ID);
    ck_assert_int_eq(s->abi_version, ENV_ABI_VERSION);
    ck_assert_int_eq(s->obs.kind, SPACE_BOX);
    ck_assert_int_eq(s->obs.dim, 4);
    for (int k = 0; k < 4; k++) {
        ck_assert(s->obs.low[k] == -INFINITY);
        ck_assert(s->obs.high[k] == INFINITY);
    }
    ck_assert_int_eq(s->act.kind, SPACE_BOX);
    ck_assert_int_eq(s->act.dim, 1);
    ck_assert(s->act.low[0] == -3.0 && s->act.high[0] == 3.0);
    ck_assert_int_eq(s->max_episode_steps, 1000);
    ck_assert(s->reward_threshold == 950.0);
    ck_assert_int_eq(s->info_count, 0);
    ck_assert(s->create && s->destroy && s->save && s->load);

    /* assets/inverted_pendulum.xml */
    ck_assert_int_eq(m->nq, 2);
    ck_assert_int_eq(m->nv, 2);
    ck_assert_int_eq(m->nu, 1);
    ck_assert_int_eq(m->na, 0);
    ck_assert_int_eq(m->nbody, 3);
    ck_assert_int_eq(m->ngeom, 3);
    ck_assert(m->opt.timestep == 0.02);
    ck_assert_int_eq(m->opt.integrator, mjINT_RK4);
    ck_assert(m->opt.gravity[0] == 0 && m->opt.gravity[1] == 0 && m->opt.gravity[2] == -9.81);
    ck_assert_int_eq(m->nstack, 3000);
    ck_assert_int_eq(mj_name2id(m, mjOBJ_JOINT, "slider"), 0);
    ck_assert_int_eq(mj_name2id(m, mjOBJ_JOINT, "hinge"), 1);
    ck_assert_int_eq(mj_name2id(m, mjOBJ_BODY, "cart"), 1);
    ck_assert_int_eq(mj_name2id(m, mjOBJ_BODY, "pole"), 2);
    ck_assert_int_eq(m->jnt_type[0], mjJNT_SLIDE);
    ck_assert_int_eq(m->jnt_type[1], mjJNT_HINGE);
    ck_assert(m->jnt_limited[0] && m->jnt_limited[1]);
    ck_assert(m->jnt_range[0] == -1.0 && m->jnt_range[1] == 1.0);
    ck_assert(fabs(m->jnt_range[2] + mjPI / 2) < 1e-15 && fabs(m->jnt_range[3] - mjPI / 2) < 1e-15);
    for (int k = 0; k < 2; k++) {
        ck_assert(m->dof_damping[k] == 1.0);
        ck_assert(m->dof_armature[k] == 0.0);
    }
    ck_assert(m->actuator_gear[0] == 100.0);
    ck_assert(m->actuator_ctrllimited[0]);
    ck_assert(m->actuator_ctrlrange[0] == -3.0 && m->actuator_ctrlrange[1] == 3.0);
    ck_assert_int_eq(m->actuator_trnid[0], 0);
    for (int g = 0; g < m->ngeom; g++)
        ck_assert_int_eq(m->geom_contype[g], 0);   /* nothing collides */
    ck_assert(fabs(m->body_mass[1] - ref_capsule_mass(1000, 0.1, 0.1)) < 1e-12);
    ck_assert(fabs(m->body_mass[2] - ref_capsule_mass(1000, 0.049, sqrt(0.6 * 0.6 + 0.001 * 0.001) / 2)) <
              1e-12);
}
END_TEST

/* frame_skip is 2: one env step is exactly two mj_steps (not one, not three). */
START_TEST(test_ip_frame_skip)
{
    const struct env_spec *s = ref_spec(ID);
    double x[4] = {0.1, 0.05, 0.3, -0.4};
    float a[1] = {1.5f};
    ref_check_frame_skip(s, x, a, 2, 1);
    ref_check_frame_skip(s, x, a, 2, 3);
}
END_TEST

START_TEST(test_ip_lockstep)
{
    const struct env_spec *s = ref_spec(ID);
    int terms = ref_lockstep(s, &ops, 11, 4000, 1000, 9, draw_state);
    ck_assert_int_gt(terms, 20);   /* random pushes topple it often */
}
END_TEST

/* The angle after the step, from a fresh reset to (x0, theta, 0, 0) with
 * no push. */
static double angle_after(const mjModel *m, mjData *d, double x0, double theta)
{
    double x[4] = {x0, theta, 0, 0};
    float a[1] = {0};
    ref_reset_to(m, d, x);
    ref_simulate(m, d, a, 2);
    return d->qpos[1];
}

/* Bisect theta0 between lo and hi for |angle after| crossing 0.2: the
 * adjacent pair that brackets it. */
static void bracket(const mjModel *m, mjData *d, double x0, double lo, double hi, double *in,
                    double *out)
{
    ck_assert(fabs(angle_after(m, d, x0, lo)) <= 0.2 && fabs(angle_after(m, d, x0, hi)) > 0.2);
    while (nextafter(lo, hi) != hi) {
        double mid = lo + (hi - lo) / 2;
        if (mid == lo || mid == hi) break;
        if (fabs(angle_after(m, d, x0, mid)) > 0.2)
            hi = mid;
        else
            lo = mid;
    }
    *in = lo;
    *out = hi;
}

/* Terminated when |angle| > 0.2, strictly: on both sides, the last angle
 * inside (exactly 0.2: the cart's position is varied until the bisection
 * lands on it) and the first outside. */
START_TEST(test_ip_termination_boundary)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    mjData *d = mj_makeData(m);
    for (int side = -1; side <= 1; side += 2) {
        double in = 0, out = 0, x0 = 0;
        bool exact = false;
        for (int i = 0; i < 200 && !exact; i++) {
            x0 = -0.5 + 0.005 * i;
            bracket(m, d, x0, side * 0.1, side * 0.2, &in, &out);
            exact = fabs(angle_after(m, d, x0, in)) == 0.2;
        }
        ck_assert_msg(exact, "no state found whose step ends at |angle| = 0.2 exactly");
        double a_in = angle_after(m, d, x0, in), a_out = angle_after(m, d, x0, out);
        ck_assert(fabs(a_out) > 0.2 && fabs(a_out) - 0.2 < 1e-15);
        float obs[4], r, a[1] = {0};
        bool term;
        double x_in[4] = {x0, in, 0, 0}, x_out[4] = {x0, out, 0, 0};
        ref_env_step_from(s, x_in, a, obs, &r, &term);
        ck_assert_msg(!term, "angle %.17g (on the bound) terminated", a_in);
        ck_assert(r == 1.0f);
        ref_env_step_from(s, x_out, a, obs, &r, &term);
        ck_assert_msg(term, "angle %.17g (outside) did not terminate", a_out);
        ck_assert(r == 1.0f);   /* paid on the terminating step too */
    }
    /* The cart's position is no termination: at the rail's end, pushed on. */
    double x_end[4] = {0.99, 0.0, 3.0, 0.0};
    float obs[4], r, a[1] = {3};
    bool term;
    ref_env_step_from(s, x_end, a, obs, &r, &term);
    ck_assert(!term);
    mj_deleteData(d);
}
END_TEST

START_TEST(test_ip_reset_noise)
{
    const struct env_spec *s = ref_spec(ID);
    enum { N = 20000 };
    double *rows = ref_reset_states(s, &ops, 5, N);
    const char *names[4] = {"qpos[0]", "qpos[1]", "qvel[0]", "qvel[1]"};
    for (int k = 0; k < 4; k++)
        ref_assert_uniform(ref_column_stats(rows, N, 4, k), N, -0.01, 0.01, names[k]);
    free(rows);
}
END_TEST

/* Truncated by vec_env at exactly step 1000, the pole held upright; resumed
 * mid-run bit for bit. */
START_TEST(test_ip_truncation)
{
    double upright[4] = {0, 0, 0, 0};
    ref_check_vec_env(ref_spec(ID), upright);
}
END_TEST

/* reset = mj_resetData, the noise, mj_forward: mjData as Gymnasium's, after
 * an episode pressed against a limit. */
START_TEST(test_ip_reset_data)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[4] = {1.0, 0.0, 0.5, 0.0};
    ref_check_reset_data(s, at_limit, 30);
}
END_TEST

START_TEST(test_ip_save_load)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[4] = {1.0, 0.0, 0.5, 0.0};   /* the cart against the rail's end */
    ref_check_save_load(s, 21, 30, 200, at_limit);
}
END_TEST

/* Many envs made, run and freed: ASan's leak check sees every mjData go. */
START_TEST(test_ip_lifecycle)
{
    ref_check_lifecycle(ref_spec(ID), 50);
}
END_TEST

KIT_MAIN("mujoco_inverted_pendulum",
         { "conformance", 300, .tests = { test_ip_constants, test_ip_frame_skip, test_ip_lockstep,
           test_ip_termination_boundary, test_ip_reset_noise, test_ip_truncation, test_ip_reset_data,
           test_ip_save_load, test_ip_lifecycle } })
