/* InvertedDoublePendulum-v4 against Gymnasium 0.29.1
 * (inverted_double_pendulum_v4.py, assets/inverted_double_pendulum.xml,
 * registration in envs/__init__.py): the model's constants, frame_skip 5
 * (not the model's custom numeric 2), the whole step against a reference
 * written here from mjData (mujoco_ref.h), the reward's unclipped
 * velocities and its site_xpos as the last mj_step left it, termination on
 * both sides of y = 1, the reset distribution and an exact save/load. */
#include <check.h>
#include <math.h>
#include <mujoco/mujoco.h>
#include <stdio.h>
#include <stdlib.h>

#include "envs/env.h"
#include "mujoco_ref.h"
#include "kit.h"

#define ID "InvertedDoublePendulum-v4"

/* ---- Gymnasium's InvertedDoublePendulumEnv, again ---- */

static double clip(double x, double lo, double hi)
{
    return fmin(fmax(x, lo), hi);
}

static void idp_observe(const mjModel *m, const mjData *d, double *obs)
{
    (void)m;
    obs[0] = d->qpos[0];
    obs[1] = sin(d->qpos[1]);
    obs[2] = sin(d->qpos[2]);
    obs[3] = cos(d->qpos[1]);
    obs[4] = cos(d->qpos[2]);
    for (int k = 0; k < 3; k++) {
        obs[5 + k] = clip(d->qvel[k], -10, 10);
        obs[8 + k] = clip(d->qfrc_constraint[k], -10, 10);
    }
}

/* The reward from the tip's position and the velocities given. */
static double idp_reward(const double *tip, double v1, double v2)
{
    double x = tip[0], y = tip[2];
    double dist_penalty = 0.01 * pow(x, 2) + pow(y - 2, 2);
    double vel_penalty = 1e-3 * pow(v1, 2) + 5e-3 * pow(v2, 2);
    return 10 - dist_penalty - vel_penalty;
}

static void idp_step(const mjModel *m, mjData *d, int frame_skip, const float *a, double *reward,
                     bool *terminated, double *info)
{
    (void)info;
    ref_simulate(m, d, a, frame_skip);
    *reward = idp_reward(d->site_xpos, d->qvel[1], d->qvel[2]);
    *terminated = d->site_xpos[2] <= 1;
}

static const struct mj_ref_ops ops = {.frame_skip = 5, .observe = idp_observe, .step = idp_step};

/* States around upright, the cart anywhere on the rail (the limit's margin
 * included), velocities past the observation's clip at 10. */
static void draw_state(uint64_t *rng, double *x)
{
    x[0] = env_rng_uniform(rng, -1.0, 1.0);
    x[1] = env_rng_uniform(rng, -0.4, 0.4);
    x[2] = env_rng_uniform(rng, -0.4, 0.4);
    for (int k = 3; k < 6; k++)
        x[k] = env_rng_uniform(rng, -15.0, 15.0);
}

START_TEST(test_idp_constants)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    ck_assert_str_eq(s->id, ID);
    ck_assert_int_eq(s->abi_version, ENV_ABI_VERSION);
    ck_assert_int_eq(s->obs.dim, 11);
    for (int k = 0; k < 11; k++)
        ck_assert(s->obs.low[k] == -INFINITY && s->obs.high[k] == INFINITY);
    ck_assert_int_eq(s->act.kind, SPACE_BOX);
    ck_assert_int_eq(s->act.dim, 1);
    ck_assert(s->act.low[0] == -1.0 && s->act.high[0] == 1.0);
    ck_assert_int_eq(s->max_episode_steps, 1000);
    ck_assert(s->reward_threshold == 9100.0);
    ck_assert_int_eq(s->info_count, 0);

    /* assets/inverted_double_pendulum.xml */
    ck_assert_int_eq(m->nq, 3);
    ck_assert_int_eq(m->nv, 3);
    ck_assert_int_eq(m->nu, 1);
    ck_assert_int_eq(m->nbody, 4);
    ck_assert_int_eq(m->ngeom, 5);
    ck_assert(m->opt.timestep == 0.01);
    ck_assert_int_eq(m->opt.integrator, mjINT_RK4);
    ck_assert(m->opt.gravity[0] == 1e-5 && m->opt.gravity[1] == 0 && m->opt.gravity[2] == -9.81);
    ck_assert_int_eq(m->nstack, 3000);
    const char *joints[3] = {"slider", "hinge", "hinge2"};
    for (int j = 0; j < 3; j++) {
        ck_assert_int_eq(mj_name2id(m, mjOBJ_JOINT, joints[j]), j);
        ck_assert(m->dof_damping[j] == 0.05);
        ck_assert(m->dof_armature[j] == 0.0);
    }
    ck_assert_int_eq(m->jnt_type[0], mjJNT_SLIDE);
    ck_assert(m->jnt_limited[0] && !m->jnt_limited[1] && !m->jnt_limited[2]);
    ck_assert(m->jnt_range[0] == -1.0 && m->jnt_range[1] == 1.0);
    ck_assert(m->jnt_margin[0] == 0.01);
    ck_assert_int_eq(m->nsite, 1);
    ck_assert_int_eq(mj_name2id(m, mjOBJ_SITE, "tip"), 0);   /* the env reads site_xpos[0] */
    ck_assert_int_eq(m->site_bodyid[0], mj_name2id(m, mjOBJ_BODY, "pole2"));
    ck_assert(m->site_pos[0] == 0 && m->site_pos[1] == 0 && m->site_pos[2] == 0.6);
    ck_assert(m->actuator_gear[0] == 500.0);
    ck_assert(m->actuator_ctrllimited[0]);
    ck_assert(m->actuator_ctrlrange[0] == -1.0 && m->actuator_ctrlrange[1] == 1.0);
    for (int g = 0; g < m->ngeom; g++)
        ck_assert_int_eq(m->geom_contype[g], 0);
    ck_assert(fabs(m->body_mass[1] - ref_capsule_mass(1000, 0.1, 0.1)) < 1e-12);
    ck_assert(fabs(m->body_mass[2] - ref_capsule_mass(1000, 0.045, 0.3)) < 1e-12);
    ck_assert(fabs(m->body_mass[3] - ref_capsule_mass(1000, 0.045, 0.3)) < 1e-12);
    /* The model's own frame_skip numeric is there, and says 2 ... */
    int fs = mj_name2id(m, mjOBJ_NUMERIC, "frame_skip");
    ck_assert_int_ge(fs, 0);
    ck_assert(m->numeric_data[m->numeric_adr[fs]] == 2.0);
}
END_TEST

/* ... but the env steps 5 (Gymnasium's InvertedDoublePendulumEnv passes 5). */
START_TEST(test_idp_frame_skip)
{
    const struct env_spec *s = ref_spec(ID);
    double x[6] = {0.1, 0.05, -0.03, 0.3, -0.4, 0.2};
    float a[1] = {0.7f};
    ref_check_frame_skip(s, x, a, 5, 2);
    ref_check_frame_skip(s, x, a, 5, 4);
    ref_check_frame_skip(s, x, a, 5, 6);
}
END_TEST

START_TEST(test_idp_lockstep)
{
    const struct env_spec *s = ref_spec(ID);
    int terms = ref_lockstep(s, &ops, 12, 4000, 1000, 7, draw_state);
    ck_assert_int_gt(terms, 20);
}
END_TEST

/* The reward reads qvel unclipped and site_xpos as the last mj_step left it
 * (no mj_forward): both alternatives differ from it by far more than a
 * float32's rounding. */
START_TEST(test_idp_reward_reads)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    double x[6] = {0.2, 0.1, -0.2, 1.0, 20.0, 0.0};   /* qvel[1:3] end near 13, 11 */
    float a[1] = {0.5f}, obs[11], r;
    bool term;
    ref_env_step_from(s, x, a, obs, &r, &term);
    mjData *d = mj_makeData(m);
    ref_reset_to(m, d, x);
    ref_simulate(m, d, a, 5);
    double want = idp_reward(d->site_xpos, d->qvel[1], d->qvel[2]);
    ck_assert_msg(fabs(d->qvel[1]) > 10 || fabs(d->qvel[2]) > 10, "no velocity to clip");
    double clipped = idp_reward(d->site_xpos, clip(d->qvel[1], -10, 10), clip(d->qvel[2], -10, 10));
    double tip[3] = {d->site_xpos[0], d->site_xpos[1], d->site_xpos[2]};
    mjData *f = mj_makeData(m);
    mj_copyData(f, m, d);
    mj_forward(m, f);
    double fresh = idp_reward(f->site_xpos, d->qvel[1], d->qvel[2]);
    ck_assert(tip[2] != f->site_xpos[2]);
    ck_assert_msg(ref_f32_close(r, want), "reward %.9g, want %.17g", (double)r, want);
    ck_assert_msg(fabs(clipped - want) > 0.01, "clipped %g vs %g", clipped, want);
    ck_assert_msg(fabs(fresh - want) > 1e-4, "fresh %g vs %g", fresh, want);
    ck_assert(fabs(r - clipped) > 0.005 && fabs(r - fresh) > 5e-5);
    /* the observation clips them */
    for (int k = 0; k < 3; k++)
        ck_assert(obs[5 + k] == (float)clip(d->qvel[k], -10, 10));
    mj_deleteData(f);
    mj_deleteData(d);
}
END_TEST

/* The tip's height after a step from a fresh reset to (0, theta, 0), the
 * cart moving at v0, the poles at rest, no push. */
static double height_after(const mjModel *m, mjData *d, double v0, double theta)
{
    double x[6] = {0, theta, 0, v0, 0, 0};
    float a[1] = {0};
    ref_reset_to(m, d, x);
    ref_simulate(m, d, a, 5);
    return d->site_xpos[2];
}

/* Terminated when y <= 1: on both sides, the last pole angle whose step
 * ends above 1 and the first that ends on it (exactly 1: the cart's
 * speed is varied until the bisection lands on it). */
START_TEST(test_idp_termination_boundary)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    mjData *d = mj_makeData(m);
    for (int side = -1; side <= 1; side += 2) {
        double in = 0, out = 0, v0 = 0;
        bool exact = false;
        for (int i = 0; i < 200 && !exact; i++) {
            v0 = 0.001 * i;
            in = side * 0.3;
            out = side * 0.8;
            ck_assert(height_after(m, d, v0, in) > 1 && height_after(m, d, v0, out) <= 1);
            for (int k = 0; k < 200 && nextafter(in, out) != out; k++) {
                double mid = in + (out - in) / 2;
                if (height_after(m, d, v0, mid) <= 1)
                    out = mid;
                else
                    in = mid;
            }
            exact = height_after(m, d, v0, out) == 1.0;
        }
        ck_assert_msg(exact, "no state found whose step ends at y = 1 exactly");
        double y_in = height_after(m, d, v0, in), y_out = height_after(m, d, v0, out);
        ck_assert(y_in > 1 && y_in - 1 < 1e-15);
        float obs[11], r, a[1] = {0};
        bool term;
        double x_in[6] = {0, in, 0, v0, 0, 0}, x_out[6] = {0, out, 0, v0, 0, 0};
        ref_env_step_from(s, x_in, a, obs, &r, &term);
        ck_assert_msg(!term, "y %.17g (above 1) terminated", y_in);
        ref_env_step_from(s, x_out, a, obs, &r, &term);
        ck_assert_msg(term, "y %.17g (on 1) did not terminate", y_out);
        /* the terminating step is paid its alive bonus */
        height_after(m, d, v0, out);
        ck_assert(ref_f32_close(r, idp_reward(d->site_xpos, d->qvel[1], d->qvel[2])));
        ck_assert(r > 8.0f);
    }
    mj_deleteData(d);
}
END_TEST

START_TEST(test_idp_reset_noise)
{
    const struct env_spec *s = ref_spec(ID);
    enum { N = 20000 };
    double *rows = ref_reset_states(s, &ops, 6, N);
    const char *names[6] = {"qpos[0]", "qpos[1]", "qpos[2]", "qvel[0]", "qvel[1]", "qvel[2]"};
    for (int k = 0; k < 3; k++)
        ref_assert_uniform(ref_column_stats(rows, N, 6, k), N, -0.1, 0.1, names[k]);
    for (int k = 3; k < 6; k++)
        ref_assert_normal(ref_column_stats(rows, N, 6, k), N, 0.1, names[k]);
    free(rows);
}
END_TEST

/* Truncated by vec_env at exactly step 1000, the poles held upright;
 * resumed mid-run bit for bit. */
START_TEST(test_idp_truncation)
{
    double upright[6] = {0, 0, 0, 0, 0, 0};
    ref_check_vec_env(ref_spec(ID), upright);
}
END_TEST

/* reset = mj_resetData, the noise, mj_forward: mjData as Gymnasium's, after
 * an episode pressed against a limit. */
START_TEST(test_idp_reset_data)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[6] = {1.0, 0.0, 0.0, 1.0, 0.0, 0.0};
    ref_check_reset_data(s, at_limit, 30);
}
END_TEST

START_TEST(test_idp_save_load)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[6] = {1.0, 0.0, 0.0, 1.0, 0.0, 0.0};   /* the cart at the rail's end */
    ref_check_save_load(s, 22, 30, 200, at_limit);
}
END_TEST

START_TEST(test_idp_lifecycle)
{
    ref_check_lifecycle(ref_spec(ID), 50);
}
END_TEST

KIT_MAIN("mujoco_inverted_double_pendulum",
         { "conformance", 300, .tests = { test_idp_constants, test_idp_frame_skip, test_idp_lockstep,
           test_idp_reward_reads, test_idp_termination_boundary, test_idp_reset_noise, test_idp_truncation,
           test_idp_reset_data, test_idp_save_load, test_idp_lifecycle } })
