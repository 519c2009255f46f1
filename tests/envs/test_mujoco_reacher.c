/* Reacher-v4 against Gymnasium 0.29.1 (reacher_v4.py, assets/reacher.xml,
 * registration in envs/__init__.py): the model's constants, the whole step
 * against a reference written here from mjData (mujoco_ref.h), the reward
 * read before the step and the observation after it from mjData as it
 * stands (no mj_forward), the reset distribution (the goal in the disk),
 * info, and an exact save/load resume. */
#include <check.h>
#include <math.h>
#include <mujoco/mujoco.h>
#include <stdio.h>
#include <stdlib.h>

#include "envs/env.h"
#include "mujoco_ref.h"
#include "kit.h"

#define ID "Reacher-v4"

/* ---- Gymnasium's ReacherEnv, again ---- */

/* get_body_com("fingertip") - get_body_com("target"): xpos as it stands. */
static void tip_minus_target(const mjModel *m, const mjData *d, double *vec)
{
    int tip = mj_name2id(m, mjOBJ_BODY, "fingertip"), target = mj_name2id(m, mjOBJ_BODY, "target");
    for (int k = 0; k < 3; k++)
        vec[k] = d->xpos[3 * tip + k] - d->xpos[3 * target + k];
}

static void reacher_observe(const mjModel *m, const mjData *d, double *obs)
{
    obs[0] = cos(d->qpos[0]);
    obs[1] = cos(d->qpos[1]);
    obs[2] = sin(d->qpos[0]);
    obs[3] = sin(d->qpos[1]);
    obs[4] = d->qpos[2];
    obs[5] = d->qpos[3];
    obs[6] = d->qvel[0];
    obs[7] = d->qvel[1];
    tip_minus_target(m, d, obs + 8);
}

static double norm3(const double *v)
{
    return sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
}

static void reacher_step(const mjModel *m, mjData *d, int frame_skip, const float *a,
                         double *reward, bool *terminated, double *info)
{
    double vec[3];
    tip_minus_target(m, d, vec);
    double reward_dist = -norm3(vec);
    double reward_ctrl = -((double)a[0] * (double)a[0] + (double)a[1] * (double)a[1]);
    *reward = reward_dist + reward_ctrl;
    ref_simulate(m, d, a, frame_skip);
    *terminated = false;
    info[0] = reward_dist;
    info[1] = reward_ctrl;
}

static const struct mj_ref_ops ops = {
    .frame_skip = 2, .observe = reacher_observe, .step = reacher_step};

/* Any arm pose and speed, the target anywhere in its box, moving or not. */
static void draw_state(uint64_t *rng, double *x)
{
    x[0] = env_rng_uniform(rng, -mjPI, mjPI);
    x[1] = env_rng_uniform(rng, -2.9, 2.9);
    x[2] = env_rng_uniform(rng, -0.2, 0.2);
    x[3] = env_rng_uniform(rng, -0.2, 0.2);
    x[4] = env_rng_uniform(rng, -8.0, 8.0);
    x[5] = env_rng_uniform(rng, -8.0, 8.0);
    x[6] = env_rng_uniform(rng, -0.5, 0.5);
    x[7] = env_rng_uniform(rng, -0.5, 0.5);
}

static double sphere_mass(double r)
{
    return 1000.0 * 4.0 / 3.0 * mjPI * r * r * r;
}

START_TEST(test_reacher_constants)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    ck_assert_str_eq(s->id, ID);
    ck_assert_int_eq(s->abi_version, ENV_ABI_VERSION);
    ck_assert_int_eq(s->obs.dim, 11);
    for (int k = 0; k < 11; k++)
        ck_assert(s->obs.low[k] == -INFINITY && s->obs.high[k] == INFINITY);
    ck_assert_int_eq(s->act.dim, 2);
    for (int k = 0; k < 2; k++)
        ck_assert(s->act.low[k] == -1.0 && s->act.high[k] == 1.0);
    ck_assert_int_eq(s->max_episode_steps, 50);
    ck_assert(s->reward_threshold == -3.75);
    ck_assert_int_eq(s->info_count, 2);
    ck_assert_str_eq(s->info_names[0], "reward_dist");
    ck_assert_str_eq(s->info_names[1], "reward_ctrl");

    /* assets/reacher.xml */
    ck_assert_int_eq(m->nq, 4);
    ck_assert_int_eq(m->nv, 4);
    ck_assert_int_eq(m->nu, 2);
    ck_assert_int_eq(m->nbody, 5);
    ck_assert_int_eq(m->ngeom, 10);
    ck_assert(m->opt.timestep == 0.01);
    ck_assert_int_eq(m->opt.integrator, mjINT_RK4);
    ck_assert(m->opt.gravity[0] == 0 && m->opt.gravity[1] == 0 && m->opt.gravity[2] == -9.81);
    const char *joints[4] = {"joint0", "joint1", "target_x", "target_y"};
    for (int j = 0; j < 4; j++)
        ck_assert_int_eq(mj_name2id(m, mjOBJ_JOINT, joints[j]), j);
    ck_assert(!m->jnt_limited[0]);
    ck_assert(m->jnt_limited[1] && m->jnt_range[2] == -3.0 && m->jnt_range[3] == 3.0);
    for (int j = 0; j < 2; j++) {
        ck_assert_int_eq(m->jnt_type[j], mjJNT_HINGE);
        ck_assert(m->dof_armature[j] == 1.0 && m->dof_damping[j] == 1.0);
    }
    for (int j = 2; j < 4; j++) {
        ck_assert_int_eq(m->jnt_type[j], mjJNT_SLIDE);
        ck_assert(m->jnt_limited[j]);
        ck_assert(m->jnt_range[2 * j] == -0.27 && m->jnt_range[2 * j + 1] == 0.27);
        ck_assert(m->dof_armature[j] == 0.0 && m->dof_damping[j] == 0.0);
        ck_assert(m->jnt_stiffness[j] == 0.0);
    }
    ck_assert(m->qpos0[0] == 0 && m->qpos0[1] == 0 && m->qpos0[2] == 0.1 && m->qpos0[3] == -0.1);
    for (int k = 0; k < 2; k++) {
        ck_assert(m->actuator_gear[6 * k] == 200.0);
        ck_assert(m->actuator_ctrllimited[k]);
        ck_assert(m->actuator_ctrlrange[2 * k] == -1.0 && m->actuator_ctrlrange[2 * k + 1] == 1.0);
        ck_assert_int_eq(m->actuator_trnid[2 * k], k);
    }
    for (int g = 0; g < m->ngeom; g++)
        ck_assert_int_eq(m->geom_contype[g], 0);   /* nothing collides */
    int b0 = mj_name2id(m, mjOBJ_BODY, "body0"), b1 = mj_name2id(m, mjOBJ_BODY, "body1");
    int tip = mj_name2id(m, mjOBJ_BODY, "fingertip"), target = mj_name2id(m, mjOBJ_BODY, "target");
    ck_assert(b0 == 1 && b1 == 2 && tip == 3 && target == 4);
    ck_assert(fabs(m->body_mass[b0] - ref_capsule_mass(1000, 0.01, 0.05)) < 1e-15);
    ck_assert(fabs(m->body_mass[b1] - ref_capsule_mass(1000, 0.01, 0.05)) < 1e-15);
    ck_assert(fabs(m->body_mass[tip] - sphere_mass(0.01)) < 1e-15);
    ck_assert(fabs(m->body_mass[target] - sphere_mass(0.009)) < 1e-15);
    ck_assert(m->body_pos[3 * tip] == 0.11);
}
END_TEST

START_TEST(test_reacher_frame_skip)
{
    const struct env_spec *s = ref_spec(ID);
    double x[8] = {0.3, -0.5, 0.1, 0.05, 1.0, -2.0, 0, 0};
    float a[2] = {0.7f, -0.4f};
    ref_check_frame_skip(s, x, a, 2, 1);
    ref_check_frame_skip(s, x, a, 2, 3);
}
END_TEST

START_TEST(test_reacher_lockstep)
{
    const struct env_spec *s = ref_spec(ID);
    int terms = ref_lockstep(s, &ops, 13, 3000, 50, 11, draw_state);
    ck_assert_int_eq(terms, 0);   /* never terminated */
}
END_TEST

/* What is read before the step (the reward) and after it (the observation)
 * is mjData as it stands: the last mj_step's kinematics, not a fresh
 * mj_forward of the new qpos. Fresh values would differ by far more than
 * the float32 rounding. */
START_TEST(test_reacher_stale_reads)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    double x[8] = {0.3, -0.5, 0.1, 0.05, 6.0, -7.0, 0, 0};
    float a[2] = {0.9f, -0.8f}, obs[11], r;
    bool term;
    void *env = ref_env_new(s);
    uint64_t rng = 8;
    s->reset(env, &rng, obs);
    ck_assert_int_eq(s->set_state(env, x, 8), 0);
    mjData *d = mj_makeData(m), *f = mj_makeData(m);
    ref_reset_to(m, d, x);

    /* first step: fresh after set_state */
    double want_r, info[2], want_info[2], want[11];
    bool want_term;
    s->step(env, a, obs, &r, &term);
    reacher_step(m, d, 2, a, &want_r, &want_term, want_info);
    s->info(s, env, info);
    ck_assert(ref_f64_close(info[0], want_info[0]) && ref_f64_close(info[1], want_info[1]));

    /* its observation: xpos as mj_step left it */
    reacher_observe(m, d, want);
    ref_check_obs(obs, want, 11, "stale", 1);
    mj_copyData(f, m, d);
    mj_forward(m, f);
    double fresh[11];
    reacher_observe(m, f, fresh);
    double dobs = 0;
    for (int k = 8; k < 11; k++)
        dobs = fmax(dobs, fabs(fresh[k] - want[k]));
    /* (RK4 leaves the kinematics of its last stage, close to the new
     * state: here ~1e-6 apart, still 100 float32 ulps) */
    ck_assert_msg(dobs > 5e-7, "fresh and stale tip-target differ by only %g", dobs);
    for (int k = 8; k < 10; k++)
        if (fabs(fresh[k] - want[k]) > 2e-7) ck_assert(!ref_f32_close(obs[k], fresh[k]));

    /* second step: its reward reads the stale xpos */
    s->step(env, a, obs, &r, &term);
    double fresh_vec[3];
    tip_minus_target(m, f, fresh_vec);
    reacher_step(m, d, 2, a, &want_r, &want_term, want_info);
    s->info(s, env, info);
    ck_assert_msg(ref_f64_close(info[0], want_info[0]), "reward_dist %.17g, want %.17g", info[0],
                  want_info[0]);
    ck_assert_msg(fabs(info[0] + norm3(fresh_vec)) > 5e-7, "fresh reward_dist %.17g too close",
                  -norm3(fresh_vec));
    ck_assert(ref_f32_close(r, want_r));
    /* reward_ctrl is the action's, unclipped and unweighted */
    ck_assert(info[1] == -((double)a[0] * a[0] + (double)a[1] * a[1]));
    float big[2] = {2.0f, -3.0f};
    s->step(env, big, obs, &r, &term);
    s->info(s, env, info);
    ck_assert(info[1] == -13.0);
    mj_deleteData(f);
    mj_deleteData(d);
    ref_env_free(s, env);
}
END_TEST

START_TEST(test_reacher_reset_noise)
{
    const struct env_spec *s = ref_spec(ID);
    enum { N = 20000 };
    double *rows = ref_reset_states(s, &ops, 7, N);
    ref_assert_uniform(ref_column_stats(rows, N, 8, 0), N, -0.1, 0.1, "qpos[0]");
    ref_assert_uniform(ref_column_stats(rows, N, 8, 1), N, -0.1, 0.1, "qpos[1]");
    ref_assert_uniform(ref_column_stats(rows, N, 8, 4), N, -0.005, 0.005, "qvel[0]");
    ref_assert_uniform(ref_column_stats(rows, N, 8, 5), N, -0.005, 0.005, "qvel[1]");
    /* The goal: uniform in the open disk of radius 0.2 (rejection from the
     * square): E[r^2] = 0.02, each coordinate's std 0.1, E[r] = 2/15
     * (a square's goal would reach 0.28, its E[r^2] be 0.0267). */
    double max_r = 0, sum_r2 = 0, sum_r = 0;
    for (int i = 0; i < N; i++) {
        double gx = rows[8 * i + 2], gy = rows[8 * i + 3], r = sqrt(gx * gx + gy * gy);
        ck_assert_msg(r < 0.2, "goal (%g, %g) outside the disk", gx, gy);
        ck_assert(rows[8 * i + 6] == 0.0 && rows[8 * i + 7] == 0.0);   /* the target at rest */
        max_r = fmax(max_r, r);
        sum_r2 += r * r;
        sum_r += r;
    }
    ck_assert(max_r > 0.199);
    ck_assert_msg(fabs(sum_r2 / N - 0.02) < 5 * 0.0115 / sqrt(N), "E[r^2] %g", sum_r2 / N);
    ck_assert_msg(fabs(sum_r / N - 2.0 / 15) < 5 * 0.0472 / sqrt(N), "E[r] %g", sum_r / N);
    for (int k = 2; k < 4; k++) {
        struct ref_stats st = ref_column_stats(rows, N, 8, k);
        ck_assert_msg(fabs(st.mean) < 5 * 0.1 / sqrt(N), "goal mean %g", st.mean);
        ck_assert_msg(fabs(st.std - 0.1) < 0.003, "goal std %g", st.std);
    }
    free(rows);
}
END_TEST

/* Truncated by vec_env at exactly step 50 (never terminated); resumed
 * mid-run bit for bit. */
START_TEST(test_reacher_truncation)
{
    ref_check_vec_env(ref_spec(ID), NULL);
}
END_TEST

/* reset = mj_resetData, the noise, mj_forward: mjData as Gymnasium's, after
 * an episode pressed against a limit. */
START_TEST(test_reacher_reset_data)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[8] = {0.3, 3.0, 0.1, 0.05, 0.0, 1.0, 0, 0};
    ref_check_reset_data(s, at_limit, 30);
}
END_TEST

START_TEST(test_reacher_save_load)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[8] = {0.3, 3.0, 0.1, 0.05, 0.0, 1.0, 0, 0};   /* joint1 at its 3 rad limit */
    ref_check_save_load(s, 23, 20, 100, at_limit);
}
END_TEST

START_TEST(test_reacher_lifecycle)
{
    ref_check_lifecycle(ref_spec(ID), 50);
}
END_TEST

KIT_MAIN("mujoco_reacher",
         { "conformance", 300, .tests = { test_reacher_constants, test_reacher_frame_skip, test_reacher_lockstep,
           test_reacher_stale_reads, test_reacher_reset_noise, test_reacher_truncation, test_reacher_reset_data,
           test_reacher_save_load, test_reacher_lifecycle } })
