/* Built-in envs against Gymnasium's own trajectories (tests/envs/fixtures/):
 * teacher-forced over every step, free-running for 50 steps, plus the specs,
 * lookup errors, get/set_state and the reset distributions. */
#include <check.h>
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/env.h"
#include "kit.h"

static const char *const ids[] = {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1"};

static cJSON *load_fixture(const char *id)
{
    const char *src = getenv("TRIB_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/envs/fixtures/%s.json", src ? src : TRIB_SOURCE_DIR_DEF,
             id);
    char *buf = kit_must_read(path, NULL);
    cJSON *root = cJSON_Parse(buf);
    free(buf);
    ck_assert_msg(root != NULL, "fixture %s is not JSON", path);
    ck_assert_str_eq(cJSON_GetObjectItem(root, "env")->valuestring, id);
    return root;
}

static int read_doubles(const cJSON *arr, double *out, int cap)
{
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr)
    {
        ck_assert(n < cap);
        out[n++] = x->valuedouble;
    }
    return n;
}

/* One fixture action as the env takes it: int, or float[dim]. */
struct action { int i; float f[4]; };
static const void *read_action(const struct env_spec *spec, const cJSON *a, struct action *buf)
{
    if (spec->act.kind == SPACE_DISCRETE) {
        buf->i = a->valueint;
        return &buf->i;
    }
    double d[4];
    int n = read_doubles(a, d, 4);
    ck_assert_int_eq(n, spec->act.dim);
    for (int k = 0; k < n; k++)
        buf->f[k] = (float)d[k];
    return buf->f;
}

static bool close_rel(double a, double b, double rel, double abs_floor)
{
    return fabs(a - b) <= rel * fabs(b) + abs_floor;
}

/* Same float32 up to the rounding of a float64 that differs in its last bits. */
static bool obs_close(float a, double fixture)
{
    float b = (float)fixture;
    return a == b || fabsf(a - b) <= FLT_EPSILON * fabsf(b) || fabsf(a - b) < 1e-37f;
}

static void *new_state(const struct env_spec *spec)
{
    void *s = calloc(1, spec->state_size);
    uint64_t rng = env_rng_seed(1, 0);
    float obs[16];
    spec->reset(s, &rng, obs);
    return s;
}

START_TEST(teacher_forced)
{
    const char *id = ids[_i];
    const struct env_spec *spec = env_lookup(id);
    ck_assert_ptr_nonnull(spec);
    cJSON *root = load_fixture(id);
    void *st = new_state(spec);
    int ns = spec->get_state(st, NULL, 0);
    int checked = 0, cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases"))
    {
        double prev[8], want[8], got[8], obs_want[16];
        ck_assert_int_eq(read_doubles(cJSON_GetObjectItem(c, "state0"), prev, 8), ns);
        const cJSON *actions = cJSON_GetObjectItem(c, "actions");
        int T = cJSON_GetArraySize(actions);
        ck_assert_int_gt(T, 0);
        for (int t = 0; t < T; t++) {
            struct action ab;
            const void *a = read_action(spec, cJSON_GetArrayItem(actions, t), &ab);
            ck_assert_int_eq(spec->set_state(st, prev, ns), 0);
            float obs[16], reward;
            bool term;
            spec->step(st, a, obs, &reward, &term);
            ck_assert_int_eq(spec->get_state(st, got, 8), ns);
            read_doubles(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "states"), t), want, 8);
            for (int k = 0; k < ns; k++)
                ck_assert_msg(close_rel(got[k], want[k], 1e-9, 1e-300),
                              "%s case %d step %d state[%d]: got %.17g want %.17g", id, cases, t,
                              k, got[k], want[k]);
            int nobs = read_doubles(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "obs"), t),
                                    obs_want, 16);
            ck_assert_int_eq(nobs, spec->obs.dim);
            for (int k = 0; k < nobs; k++)
                ck_assert_msg(obs_close(obs[k], obs_want[k]),
                              "%s case %d step %d obs[%d]: got %.9g want %.9g", id, cases, t, k,
                              obs[k], obs_want[k]);
            double rw = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "rewards"), t)->valuedouble;
            ck_assert_msg(reward == (float)rw, "%s case %d step %d reward: got %.9g want %.17g",
                          id, cases, t, reward, rw);
            bool tw = cJSON_IsTrue(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "terminated"), t));
            ck_assert_msg(term == tw, "%s case %d step %d terminated: got %d want %d", id, cases,
                          t, term, tw);
            memcpy(prev, want, sizeof prev);
            checked++;
        }
        cases++;
    }
    ck_assert_int_ge(cases, 16);
    ck_assert_int_ge(checked, 16 * 100);
    free(st);
    cJSON_Delete(root);
}
END_TEST

START_TEST(free_running)
{
    const char *id = ids[_i];
    const struct env_spec *spec = env_lookup(id);
    cJSON *root = load_fixture(id);
    void *st = new_state(spec);
    int ns = spec->get_state(st, NULL, 0);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases"))
    {
        double s0[8], want[8], got[8];
        read_doubles(cJSON_GetObjectItem(c, "state0"), s0, 8);
        ck_assert_int_eq(spec->set_state(st, s0, ns), 0);
        const cJSON *actions = cJSON_GetObjectItem(c, "actions");
        int T = cJSON_GetArraySize(actions);
        for (int t = 0; t < T && t < 50; t++) {
            struct action ab;
            float obs[16], reward;
            bool term;
            spec->step(st, read_action(spec, cJSON_GetArrayItem(actions, t), &ab), obs, &reward,
                       &term);
            spec->get_state(st, got, 8);
            read_doubles(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "states"), t), want, 8);
            for (int k = 0; k < ns; k++)
                ck_assert_msg(close_rel(got[k], want[k], 1e-6, 1e-12),
                              "%s free-running step %d state[%d]: got %.17g want %.17g", id, t, k,
                              got[k], want[k]);
        }
    }
    free(st);
    cJSON_Delete(root);
}
END_TEST

START_TEST(specs)
{
    static const int obs_dim[] = {4, 6, 2, 3}, max_steps[] = {500, 500, 200, 200};
    static const int n_act[] = {2, 3, 3, 0};
    ck_assert_int_eq(env_builtin_count(), 4 + 9 * env_mujoco_available());
    for (int i = 0; i < 4; i++) {
        const struct env_spec *s = env_lookup(ids[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_ptr_eq(s, env_builtin(i));
        ck_assert_str_eq(s->id, ids[i]);
        ck_assert_int_eq(s->obs.kind, SPACE_BOX);
        ck_assert_int_eq(s->obs.dim, obs_dim[i]);
        ck_assert_int_eq(s->max_episode_steps, max_steps[i]);
        ck_assert_int_eq(env_spec_check(s), 0);
        if (n_act[i]) {
            ck_assert_int_eq(s->act.kind, SPACE_DISCRETE);
            ck_assert_int_eq(s->act.n, n_act[i]);
        } else {
            ck_assert_int_eq(s->act.kind, SPACE_BOX);
            ck_assert_int_eq(s->act.dim, 1);
            ck_assert(s->act.low[0] == -2.0 && s->act.high[0] == 2.0);
        }
    }
    ck_assert(env_lookup("CartPole-v1")->reward_threshold == 475.0);
    ck_assert(env_lookup("Acrobot-v1")->reward_threshold == -100.0);
    ck_assert(env_lookup("MountainCar-v0")->reward_threshold == -110.0);
    ck_assert(isnan(env_lookup("Pendulum-v1")->reward_threshold));
    ck_assert(env_lookup("Acrobot-v1")->obs.high[5] == (float)(9 * M_PI)); /* float32, as Gymnasium's */
}
END_TEST

START_TEST(lookup_errors)
{
    ck_assert_ptr_null(env_lookup("CartPole-v0"));
    char want[1024];
    int off = snprintf(want, sizeof want, "unknown env id 'CartPole-v0' (built-ins: ");
    for (int i = 0; i < env_builtin_count(); i++)
        off += snprintf(want + off, sizeof want - (size_t)off, "%s%s", i ? ", " : "", env_builtin_id(i));
    snprintf(want + off, sizeof want - (size_t)off, "; or the path of a plug-in .so)");
    ck_assert_str_eq(env_last_error(), want);
    ck_assert(strncmp(want, "unknown env id 'CartPole-v0' (built-ins: CartPole-v1, Acrobot-v1, "
                            "MountainCar-v0, Pendulum-v1", 90) == 0);
    ck_assert_ptr_null(env_lookup("cartpole-V1"));
    ck_assert_str_eq(env_last_error(), "unknown env id 'cartpole-V1' (did you mean CartPole-v1?)");
    ck_assert_ptr_null(env_builtin_id(env_builtin_count()));
    if (!env_mujoco_available()) {
        ck_assert_ptr_null(env_lookup("Hopper-v4"));
        ck_assert_str_eq(env_last_error(), "env 'Hopper-v4' is one of the MuJoCo v4 envs, and this "
                         "Tributary was built without MuJoCo (Debian: apt-get install libmujoco-dev, then rebuild)");
    }
    ck_assert_ptr_null(env_lookup(""));
    ck_assert_str_eq(env_last_error(), "env id is empty");
    ck_assert_ptr_null(env_lookup(NULL));
    ck_assert_ptr_null(env_builtin(env_builtin_count()));
    char range[64];   /* 4 classic envs, and the MuJoCo suite's 9 where built */
    int nb = env_mujoco_available() ? 13 : 4;
    ck_assert_int_eq(env_builtin_count(), nb);
    snprintf(range, sizeof range, "built-in env index %d out of range [0, %d)", nb, nb);
    ck_assert_str_eq(env_last_error(), range);
    const struct env_spec *s = env_lookup("MountainCar-v0");
    void *st = new_state(s);
    double three[3] = {0, 0, 0};
    ck_assert_int_eq(s->set_state(st, three, 3), -1);
    free(st);
}
END_TEST

/* Resets follow Gymnasium's ranges, the observation is the float32 state,
 * and one RNG stream gives one sequence. */
START_TEST(reset_ranges)
{
    for (int i = 0; i < 4; i++) {
        const struct env_spec *s = env_lookup(ids[i]);
        void *st = calloc(1, s->state_size);
        uint64_t rng = env_rng_seed(42, (uint64_t)i), rng2 = rng;
        double lo[4], hi[4], mn[4], mx[4], d[4];
        switch (i) {
        case 0: for (int k = 0; k < 4; k++) lo[k] = -0.05, hi[k] = 0.05; break;
        case 1: for (int k = 0; k < 4; k++) lo[k] = -0.1, hi[k] = 0.1; break;
        case 2: lo[0] = -0.6, hi[0] = -0.4, lo[1] = hi[1] = 0.0; break;
        default: lo[0] = -M_PI, hi[0] = M_PI, lo[1] = -1.0, hi[1] = 1.0; break;
        }
        int ns = s->get_state(st, NULL, 0);
        for (int k = 0; k < ns; k++)
            mn[k] = INFINITY, mx[k] = -INFINITY;
        for (int r = 0; r < 2000; r++) {
            float obs[8];
            s->reset(st, &rng, obs);
            s->get_state(st, d, 4);
            for (int k = 0; k < ns; k++) {
                ck_assert(d[k] >= lo[k] && d[k] <= hi[k]);
                mn[k] = fmin(mn[k], d[k]);
                mx[k] = fmax(mx[k], d[k]);
            }
            if (i == 1)
                for (int k = 0; k < 4; k++)
                    ck_assert(d[k] == (double)(float)d[k]); /* Acrobot's float32 draw */
            if (i == 0 || i == 2)
                for (int k = 0; k < ns; k++)
                    ck_assert(obs[k] == (float)d[k]);
            if (i == 3)
                ck_assert(obs[0] == (float)cos(d[0]) && obs[1] == (float)sin(d[0]));
        }
        for (int k = 0; k < ns; k++) /* covers the range, not just part of it */
            if (hi[k] > lo[k])
                ck_assert(mn[k] < lo[k] + 0.02 * (hi[k] - lo[k]) &&
                          mx[k] > hi[k] - 0.02 * (hi[k] - lo[k]));
        float o1[8], o2[8];
        s->reset(st, &rng2, o1);
        uint64_t again = env_rng_seed(42, (uint64_t)i);
        s->reset(st, &again, o2);
        ck_assert_mem_eq(o1, o2, sizeof(float) * (size_t)s->obs.dim);
        free(st);
    }
}
END_TEST

/* Gymnasium's CartPole gives reward 1 on the step that terminates and 0 on
 * steps taken after it; set_state starts afresh. */
START_TEST(cartpole_beyond_terminated)
{
    const struct env_spec *s = env_lookup("CartPole-v1");
    void *st = new_state(s);
    const double fallen[4] = {0.0, 0.0, 0.2, 1.0};
    ck_assert_int_eq(s->set_state(st, fallen, 4), 0);
    float obs[4], r;
    bool term;
    int a = 1;
    s->step(st, &a, obs, &r, &term);
    ck_assert(term && r == 1.0f);
    s->step(st, &a, obs, &r, &term);
    ck_assert(term && r == 0.0f);
    s->step(st, &a, obs, &r, &term);
    ck_assert(term && r == 0.0f);
    ck_assert_int_eq(s->set_state(st, fallen, 4), 0);
    s->step(st, &a, obs, &r, &term);
    ck_assert(term && r == 1.0f);
    free(st);
}
END_TEST

/* States no dynamics reach (set by hand) neither hang nor crash Acrobot's wrap. */
START_TEST(acrobot_extreme_states)
{
    const struct env_spec *s = env_lookup("Acrobot-v1");
    void *st = new_state(s);
    const double cases[3][4] = {{INFINITY, 0, 0, 0}, {1e300, -1e300, 0, 0}, {NAN, 0, 0, 0}};
    for (int c = 0; c < 3; c++) {
        ck_assert_int_eq(s->set_state(st, cases[c], 4), 0);
        float obs[6], r;
        bool term;
        int a = 2;
        s->step(st, &a, obs, &r, &term);
        double d[4];
        s->get_state(st, d, 4);
        ck_assert(isnan(d[0]) || (d[0] >= -M_PI && d[0] <= M_PI));
    }
    const double big[4] = {1e7, 0, 0, 0};
    ck_assert_int_eq(s->set_state(st, big, 4), 0);
    float obs[6], r;
    bool term;
    int a = 1;
    s->step(st, &a, obs, &r, &term);
    double d[4];
    s->get_state(st, d, 4);
    ck_assert(d[0] >= -M_PI && d[0] <= M_PI);
    free(st);
}
END_TEST

static void assert_in_box(const struct env_spec *s, const float *obs, const char *where)
{
    for (int k = 0; k < s->obs.dim; k++)
        ck_assert_msg(obs[k] >= s->obs.low[k] && obs[k] <= s->obs.high[k],
                      "%s %s: obs[%d] = %.9g is outside [%.17g, %.17g]", s->id, where, k,
                      (double)obs[k], s->obs.low[k], s->obs.high[k]);
}

/* Observations lie in the declared box, as Gymnasium's float32 bounds hold
 * its float32 observations: at MountainCar's walls and speed limit and at
 * Acrobot's velocity bounds (set by hand), and along random rollouts. */
START_TEST(obs_in_bounds)
{
    const struct env_spec *s = env_lookup("MountainCar-v0");
    void *st = new_state(s);
    const double mc[3][2] = {{-1.19, -0.07}, {-0.5, 0.07}, {0.55, 0.07}};
    const int mc_act[3] = {0, 2, 2};
    float obs[8], r;
    bool term;
    for (int c = 0; c < 3; c++) {
        ck_assert_int_eq(s->set_state(st, mc[c], 2), 0);
        s->step(st, &mc_act[c], obs, &r, &term);
        assert_in_box(s, obs, "at a limit");
    }
    free(st);
    s = env_lookup("Acrobot-v1");
    st = new_state(s);
    const double fast[4] = {0, 0, 100, -100};
    ck_assert_int_eq(s->set_state(st, fast, 4), 0);
    int a = 1;
    s->step(st, &a, obs, &r, &term);
    ck_assert(fabs(obs[4]) == (float)(4 * M_PI) && fabs(obs[5]) == (float)(9 * M_PI));
    assert_in_box(s, obs, "at the velocity bounds");
    free(st);
    for (int i = 0; i < 4; i++) {
        s = env_lookup(ids[i]);
        st = new_state(s);
        uint64_t rng = env_rng_seed(9, (uint64_t)i);
        for (int t = 0; t < 20000; t++) {
            struct action ab;
            if (s->act.kind == SPACE_DISCRETE)
                ab.i = (int)(env_rng_next(&rng) % (uint64_t)s->act.n);
            else
                ab.f[0] = (float)env_rng_uniform(&rng, -2, 2);
            s->step(st, s->act.kind == SPACE_DISCRETE ? (const void *)&ab.i : ab.f, obs, &r,
                    &term);
            assert_in_box(s, obs, "after a step");
            if (term || t % 200 == 199) {
                s->reset(st, &rng, obs);
                assert_in_box(s, obs, "after a reset");
            }
        }
        free(st);
    }
}
END_TEST

static Suite *envs_suite(void)
{
    Suite *s = suite_create("envs");
    TCase *tc = tcase_create("gymnasium");
    tcase_add_loop_test(tc, teacher_forced, 0, 4);
    tcase_add_loop_test(tc, free_running, 0, 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("api");
    tcase_add_test(tc, specs);
    tcase_add_test(tc, lookup_errors);
    tcase_add_test(tc, reset_ranges);
    tcase_add_test(tc, cartpole_beyond_terminated);
    tcase_add_test(tc, acrobot_extreme_states);
    tcase_add_test(tc, obs_in_bounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return kit_run_suite(envs_suite());
}
