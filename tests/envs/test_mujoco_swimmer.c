/* Swimmer-v4 against Gymnasium 0.29.1 (swimmer_v4.py with its default
 * arguments, assets/swimmer.xml, registration in envs/__init__.py): the
 * model's constants (fluid, no contacts), the whole step against a
 * reference written here from mjData (mujoco_ref.h), the eight info
 * values, the reset distribution and an exact save/load resume. */
#include <check.h>
#include <math.h>
#include <mujoco/mujoco.h>
#include <stdio.h>
#include <stdlib.h>

#include "envs/env.h"
#include "mujoco_ref.h"
#include "kit.h"

#define ID "Swimmer-v4"

/* ---- Gymnasium's SwimmerEnv (forward_reward_weight 1, ctrl_cost_weight
 * 1e-4, reset_noise_scale 0.1, positions excluded), again ---- */

static void swimmer_observe(const mjModel *m, const mjData *d, double *obs)
{
    int i = 0;
    for (int k = 2; k < m->nq; k++)
        obs[i++] = d->qpos[k];
    for (int k = 0; k < m->nv; k++)
        obs[i++] = d->qvel[k];
}

static void swimmer_step(const mjModel *m, mjData *d, int frame_skip, const float *a,
                         double *reward, bool *terminated, double *info)
{
    double before[2] = {d->qpos[0], d->qpos[1]};
    ref_simulate(m, d, a, frame_skip);
    double after[2] = {d->qpos[0], d->qpos[1]};
    double dt = m->opt.timestep * frame_skip;
    double x_velocity = (after[0] - before[0]) / dt, y_velocity = (after[1] - before[1]) / dt;
    double forward_reward = 1.0 * x_velocity;
    double ctrl_cost = 1e-4 * (pow((double)a[0], 2) + pow((double)a[1], 2));
    *reward = forward_reward - ctrl_cost;
    *terminated = false;
    info[0] = forward_reward;                   /* reward_fwd */
    info[1] = -ctrl_cost;                       /* reward_ctrl */
    info[2] = after[0];                         /* x_position */
    info[3] = after[1];                         /* y_position */
    info[4] = hypot(after[0], after[1]);        /* distance_from_origin */
    info[5] = x_velocity;
    info[6] = y_velocity;
    info[7] = forward_reward;
}

static const struct mj_ref_ops ops = {
    .frame_skip = 4, .observe = swimmer_observe, .step = swimmer_step};

static void draw_state(uint64_t *rng, double *x)
{
    x[0] = env_rng_uniform(rng, -3.0, 3.0);
    x[1] = env_rng_uniform(rng, -3.0, 3.0);
    x[2] = env_rng_uniform(rng, -mjPI, mjPI);
    x[3] = env_rng_uniform(rng, -1.7, 1.7);   /* the joint limits are +-100 deg = 1.745 */
    x[4] = env_rng_uniform(rng, -1.7, 1.7);
    for (int k = 5; k < 10; k++)
        x[k] = env_rng_uniform(rng, -2.0, 2.0);
}

START_TEST(test_swimmer_constants)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    static const char *const info[8] = {"reward_fwd", "reward_ctrl", "x_position", "y_position",
                                        "distance_from_origin", "x_velocity", "y_velocity",
                                        "forward_reward"};
    ck_assert_str_eq(s->id, ID);
    ck_assert_int_eq(s->abi_version, ENV_ABI_VERSION);
    ck_assert_int_eq(s->obs.dim, 8);
    for (int k = 0; k < 8; k++)
        ck_assert(s->obs.low[k] == -INFINITY && s->obs.high[k] == INFINITY);
    ck_assert_int_eq(s->act.dim, 2);
    for (int k = 0; k < 2; k++)
        ck_assert(s->act.low[k] == -1.0 && s->act.high[k] == 1.0);
    ck_assert_int_eq(s->max_episode_steps, 1000);
    ck_assert(s->reward_threshold == 360.0);
    ck_assert_int_eq(s->info_count, 8);
    for (int k = 0; k < 8; k++)
        ck_assert_str_eq(s->info_names[k], info[k]);

    /* assets/swimmer.xml */
    ck_assert_int_eq(m->nq, 5);
    ck_assert_int_eq(m->nv, 5);
    ck_assert_int_eq(m->nu, 2);
    ck_assert_int_eq(m->nbody, 4);
    ck_assert_int_eq(m->ngeom, 4);
    ck_assert(m->opt.timestep == 0.01);
    ck_assert_int_eq(m->opt.integrator, mjINT_RK4);
    ck_assert(m->opt.density == 4000.0 && m->opt.viscosity == 0.1);
    ck_assert_int_eq(m->opt.collision, mjCOL_PAIR);   /* collision="predefined" */
    ck_assert_int_eq(m->npair, 0);                    /* ... and none: no contact ever */
    ck_assert(m->opt.gravity[2] == -9.81);
    const char *joints[5] = {"slider1", "slider2", "free_body_rot", "motor1_rot", "motor2_rot"};
    const int types[5] = {mjJNT_SLIDE, mjJNT_SLIDE, mjJNT_HINGE, mjJNT_HINGE, mjJNT_HINGE};
    for (int j = 0; j < 5; j++) {
        ck_assert_int_eq(mj_name2id(m, mjOBJ_JOINT, joints[j]), j);
        ck_assert_int_eq(m->jnt_type[j], types[j]);
        ck_assert(m->dof_armature[j] == 0.1);
        ck_assert(m->dof_damping[j] == 0.0);
        ck_assert_int_eq(m->jnt_limited[j], j >= 3);
    }
    for (int j = 3; j < 5; j++)
        ck_assert(fabs(m->jnt_range[2 * j] + 100 * mjPI / 180) < 1e-15 &&
                  fabs(m->jnt_range[2 * j + 1] - 100 * mjPI / 180) < 1e-15);
    for (int k = 0; k < 2; k++) {
        ck_assert(m->actuator_gear[6 * k] == 150.0);
        ck_assert(m->actuator_ctrllimited[k]);
        ck_assert(m->actuator_ctrlrange[2 * k] == -1.0 && m->actuator_ctrlrange[2 * k + 1] == 1.0);
        ck_assert_int_eq(m->actuator_trnid[2 * k], 3 + k);
    }
    const char *bodies[3] = {"torso", "mid", "back"};
    for (int b = 1; b <= 3; b++) {
        ck_assert_int_eq(mj_name2id(m, mjOBJ_BODY, bodies[b - 1]), b);
        ck_assert(fabs(m->body_mass[b] - ref_capsule_mass(1000, 0.1, 0.5)) < 1e-12);
        ck_assert_int_eq(m->geom_condim[b], 1);
        ck_assert_int_eq(m->geom_contype[b], 1);
        ck_assert_int_eq(m->geom_conaffinity[b], 1);
    }
    ck_assert_int_eq(m->geom_condim[0], 3);   /* the floor */
}
END_TEST

START_TEST(test_swimmer_frame_skip)
{
    const struct env_spec *s = ref_spec(ID);
    double x[10] = {0.1, -0.1, 0.2, 0.3, -0.4, 0.5, 0.1, -0.3, 0.7, -0.2};
    float a[2] = {0.8f, -0.6f};
    ref_check_frame_skip(s, x, a, 4, 3);
    ref_check_frame_skip(s, x, a, 4, 5);
}
END_TEST

START_TEST(test_swimmer_lockstep)
{
    const struct env_spec *s = ref_spec(ID);
    int terms = ref_lockstep(s, &ops, 14, 3000, 1000, 13, draw_state);
    ck_assert_int_eq(terms, 0);   /* never terminated */
}
END_TEST

/* The info values in terms of the state before and after one step; no
 * contact forms in a long run (collision="predefined", no pairs). */
START_TEST(test_swimmer_info)
{
    const struct env_spec *s = ref_spec(ID);
    const mjModel *m = s->model;
    double x[10] = {1.0, -2.0, 0.2, 0.3, -0.4, 0.5, 0.1, -0.3, 0.7, -0.2}, after[10], info[8];
    float a[2] = {0.5f, 1.5f}, obs[8], r;
    bool term;
    void *env = ref_env_new(s);
    uint64_t rng = 9;
    s->reset(env, &rng, obs);
    s->info(s, env, info);
    for (int k = 0; k < 8; k++)
        ck_assert(info[k] == 0.0);
    ck_assert_int_eq(s->set_state(env, x, 10), 0);
    s->step(env, a, obs, &r, &term);
    s->get_state(env, after, 10);
    s->info(s, env, info);
    double xv = (after[0] - 1.0) / 0.04, yv = (after[1] + 2.0) / 0.04;
    ck_assert(ref_f64_close(info[0], xv));
    ck_assert(info[1] == -1e-4 * (0.25 + 2.25));   /* the action unclipped */
    ck_assert(info[2] == after[0] && info[3] == after[1]);
    ck_assert(ref_f64_close(info[4], sqrt(after[0] * after[0] + after[1] * after[1])));
    ck_assert(ref_f64_close(info[5], xv) && ref_f64_close(info[6], yv));
    ck_assert(info[7] == info[0]);
    ck_assert(ref_f32_close(r, xv - 1e-4 * 2.5));
    ck_assert(!term);
    for (int k = 0; k < 8; k++)
        ck_assert(ref_f32_close(obs[k], after[2 + k]));
    ref_env_free(s, env);

    mjData *d = mj_makeData(m);
    uint64_t arng = 3;
    ref_reset_to(m, d, x);
    for (int t = 0; t < 500; t++) {
        float act[2];
        ref_random_action(s, &arng, act);
        ref_simulate(m, d, act, 4);
        ck_assert_int_eq(d->ncon, 0);
    }
    mj_deleteData(d);
}
END_TEST

START_TEST(test_swimmer_reset_noise)
{
    const struct env_spec *s = ref_spec(ID);
    enum { N = 20000 };
    double *rows = ref_reset_states(s, &ops, 8, N);
    for (int k = 0; k < 10; k++) {
        char name[16];
        snprintf(name, sizeof name, "%s[%d]", k < 5 ? "qpos" : "qvel", k % 5);
        ref_assert_uniform(ref_column_stats(rows, N, 10, k), N, -0.1, 0.1, name);
    }
    free(rows);
}
END_TEST

/* Truncated by vec_env at exactly step 1000 (never terminated); resumed
 * mid-run bit for bit. */
START_TEST(test_swimmer_truncation)
{
    ref_check_vec_env(ref_spec(ID), NULL);
}
END_TEST

/* reset = mj_resetData, the noise, mj_forward: mjData as Gymnasium's, after
 * an episode pressed against a limit. */
START_TEST(test_swimmer_reset_data)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[10] = {0, 0, 0, 1.745, 1.745, 0, 0, 0, 1.0, 1.0};
    ref_check_reset_data(s, at_limit, 30);
}
END_TEST

START_TEST(test_swimmer_save_load)
{
    const struct env_spec *s = ref_spec(ID);
    double at_limit[10] = {0, 0, 0, 1.745, 1.745, 0, 0, 0, 1.0, 1.0};   /* both rotors at 100 deg */
    ref_check_save_load(s, 24, 30, 200, at_limit);
}
END_TEST

START_TEST(test_swimmer_lifecycle)
{
    ref_check_lifecycle(ref_spec(ID), 50);
}
END_TEST

KIT_MAIN("mujoco_swimmer",
         { "conformance", 300, .tests = { test_swimmer_constants, test_swimmer_frame_skip, test_swimmer_lockstep,
           test_swimmer_info, test_swimmer_reset_noise, test_swimmer_truncation, test_swimmer_reset_data,
           test_swimmer_save_load, test_swimmer_lifecycle } })
