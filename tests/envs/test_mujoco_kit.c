/* The MuJoCo env kit (envs/mujoco_env.h, issue 35 point 12): a plug-in
 * written on it, MjHopper-v0 (envs/examples/mj_hopper.c, built here as a
 * module with the project's flags), opened through the plug-in loader with
 * --env-arg model=<the built-in's hopper.xml> steps as the built-in
 * Hopper-v4, bit for bit: the same spec, and over 600 steps of 4 envs from
 * the same seed under the same random actions (dozens of episodes, so
 * terminations and autoresets) the same observations, rewards,
 * terminations, truncations, states and info, including after a resume of
 * the plug-in's vec_env from its save halfway; trib-env prints the same
 * episode statistics for both. Its --env-args reach its equations (a
 * control cost of 0 pays back exactly 1e-3 * sum(a^2); a healthy z above
 * the hopper ends every episode at once); its errors name the argument or
 * the model; and its unload leaves MuJoCo's error handler as it found it. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mujoco/mujoco.h>

#include "common/proc.h"
#include "envs/plugin.h"
#include "envs/vec_env.h"
#include "kit.h"

#define MAX_ARGS 4
static const char *keys[MAX_ARGS], *values[MAX_ARGS];

/* model=HOPPER_XML plus up to three more key, value pairs. */
static struct env_args hopper_args(const char *k1, const char *v1, const char *k2, const char *v2)
{
    int n = 0;
    keys[n] = "model", values[n++] = HOPPER_XML;
    if (k1) keys[n] = k1, values[n++] = v1;
    if (k2) keys[n] = k2, values[n++] = v2;
    return (struct env_args){ n, keys, values };
}

static const struct env_spec *open_kit(const struct env_args *a, struct env_plugin **pl)
{
    const struct env_spec *s = env_open_args(MJ_HOPPER_SO, a, pl);
    ck_assert_msg(s != NULL, "%s", env_last_error());
    ck_assert_ptr_nonnull(*pl);
    return s;
}

static const struct env_spec *builtin_hopper(void)
{
    const struct env_spec *s = env_lookup("Hopper-v4");
    ck_assert_msg(s != NULL, "%s", env_last_error());
    return s;
}

/* The plug-in's spec is the built-in's but for its id. */
static void same_spec(const struct env_spec *k, const struct env_spec *b)
{
    ck_assert_str_eq(k->id, "MjHopper-v0");
    ck_assert_int_eq(k->abi_version, ENV_ABI_VERSION);
    ck_assert_int_eq(k->obs.kind, b->obs.kind);
    ck_assert_int_eq(k->obs.dim, b->obs.dim);
    ck_assert_int_eq(k->obs.dim, 11);
    ck_assert_int_eq(k->act.dim, b->act.dim);
    ck_assert_mem_eq(k->obs.low, b->obs.low, sizeof(double) * (size_t)b->obs.dim);
    ck_assert_mem_eq(k->obs.high, b->obs.high, sizeof(double) * (size_t)b->obs.dim);
    ck_assert_mem_eq(k->act.low, b->act.low, sizeof(double) * (size_t)b->act.dim);
    ck_assert_mem_eq(k->act.high, b->act.high, sizeof(double) * (size_t)b->act.dim);
    ck_assert_int_eq(k->max_episode_steps, b->max_episode_steps);
    ck_assert_double_eq(k->reward_threshold, b->reward_threshold);
    ck_assert_uint_eq(k->state_size, b->state_size);
    ck_assert_uint_eq(k->saved_size, b->saved_size);
    ck_assert_int_eq(k->info_count, b->info_count);
    for (int i = 0; i < b->info_count; i++) ck_assert_str_eq(k->info_names[i], b->info_names[i]);
    const mjModel *mk = k->model, *mb = b->model;
    ck_assert_int_eq(mk->nq, mb->nq);
    ck_assert_int_eq(mk->nv, mb->nv);
    ck_assert_double_eq(mk->opt.timestep, mb->opt.timestep);
}

enum { B = 4, D = 11, A = 3, STEPS = 600, RESUME_AT = 300 };

struct run {
    struct vec_env *v;
    float obs[B * D], fin[B * D], rew[B];
    bool term[B], trunc[B];
};

/* The step of both, then everything compared bit for bit. */
static void step_both(const struct env_spec *ks, struct run *k, const struct env_spec *bs, struct run *b,
                      const float *act, int t)
{
    ck_assert_int_eq(vec_env_step(k->v, act, k->obs, k->rew, k->term, k->trunc, k->fin), 0);
    ck_assert_int_eq(vec_env_step(b->v, act, b->obs, b->rew, b->term, b->trunc, b->fin), 0);
    ck_assert_msg(memcmp(k->obs, b->obs, sizeof k->obs) == 0, "step %d: observations differ", t);
    ck_assert_msg(memcmp(k->rew, b->rew, sizeof k->rew) == 0, "step %d: rewards differ (%.9g, %.9g)", t,
                  (double)k->rew[0], (double)b->rew[0]);
    ck_assert_msg(memcmp(k->term, b->term, sizeof k->term) == 0, "step %d: terminations differ", t);
    ck_assert_msg(memcmp(k->trunc, b->trunc, sizeof k->trunc) == 0, "step %d: truncations differ", t);
    for (int i = 0; i < B; i++) {
        double x[D + 1], y[D + 1], ix[2], iy[2];
        if (k->term[i] || k->trunc[i])   /* final_obs: the rows of the envs that finished */
            ck_assert_msg(memcmp(k->fin + i * D, b->fin + i * D, sizeof(float) * D) == 0,
                          "step %d: env %d's final observation differs", t, i);
        ck_assert_int_eq(ks->get_state(vec_env_state(k->v, i), x, D + 1), 12);
        ck_assert_int_eq(bs->get_state(vec_env_state(b->v, i), y, D + 1), 12);
        ck_assert_msg(memcmp(x, y, sizeof x) == 0, "step %d: env %d's state differs", t, i);
        ks->info(ks, vec_env_state(k->v, i), ix);
        bs->info(bs, vec_env_state(b->v, i), iy);
        ck_assert_msg(memcmp(ix, iy, sizeof ix) == 0, "step %d: env %d's info differs", t, i);
    }
}

START_TEST(kit_hopper_is_hopper_v4)
{
    struct env_args a = hopper_args(NULL, NULL, NULL, NULL);
    struct env_plugin *pl;
    const struct env_spec *ks = open_kit(&a, &pl), *bs = builtin_hopper();
    same_spec(ks, bs);
    static struct run k, b, w;
    k.v = vec_env_new(ks, B, 11, 0);
    b.v = vec_env_new(bs, B, 11, 0);
    ck_assert_msg(k.v && b.v, "%s", env_last_error());
    vec_env_reset(k.v, k.obs);
    vec_env_reset(b.v, b.obs);
    ck_assert_msg(memcmp(k.obs, b.obs, sizeof k.obs) == 0, "first observations differ");
    uint64_t rng = env_rng_seed(5, 0);
    float act[B * A];
    struct run *kk = &k;
    for (int t = 0; t < STEPS; t++) {
        if (t == RESUME_AT) {   /* the plug-in's envs resumed into a fresh vec_env: the rest goes on from there */
            unsigned char *saved;
            size_t len;
            ck_assert_int_eq(vec_env_save(k.v, &saved, &len), 0);
            w.v = vec_env_new(ks, B, 99, 0);
            ck_assert_ptr_nonnull(w.v);
            ck_assert_msg(vec_env_load(w.v, saved, len) == 0, "%s", env_last_error());
            free(saved);
            kk = &w;
        }
        for (int j = 0; j < B * A; j++) act[j] = (float)env_rng_uniform(&rng, -1.0, 1.0);
        step_both(ks, kk, bs, &b, act, t);
    }
    struct vec_env_stats sk, sb;
    vec_env_get_stats(kk->v, &sk);
    vec_env_get_stats(b.v, &sb);
    ck_assert_uint_ge(sb.episodes, 20);   /* random actions topple it: terminations, autoresets */
    ck_assert_uint_eq(sk.episodes, sb.episodes);
    ck_assert_uint_eq(sk.length_sum, sb.length_sum);
    ck_assert_double_eq(sk.return_sum, sb.return_sum);
    double ik[2], ib[2];
    vec_env_info_sums(kk->v, ik);
    vec_env_info_sums(b.v, ib);
    ck_assert_mem_eq(ik, ib, sizeof ik);
    vec_env_free(k.v);
    vec_env_free(w.v);
    vec_env_free(b.v);
    env_plugin_close(pl);
}
END_TEST

/* trib-env (random actions, seed 3) says the same of both but the name. */
START_TEST(kit_hopper_in_trib_env)
{
    char *ok = NULL, *ob = NULL;
    const char *argk[] = { TRIB_ENV_TOOL, "--json", "-e", "30", "-n", "3", "-s", "3", "--env-arg",
                           "model=" HOPPER_XML, MJ_HOPPER_SO, NULL };
    const char *argb[] = { TRIB_ENV_TOOL, "--json", "-e", "30", "-n", "3", "-s", "3", "Hopper-v4", NULL };
    static char out[1 << 14], err[1 << 14];
    int rc = 0;
    ck_assert_int_eq(proc_run(argk, 60, out, sizeof out, err, sizeof err, &rc), 0);
    ck_assert_msg(rc == 0, "trib-env on the plug-in: exit %d\n%s%s", rc, out, err);
    ok = strdup(out);
    ck_assert_int_eq(proc_run(argb, 60, out, sizeof out, err, sizeof err, &rc), 0);
    ck_assert_msg(rc == 0, "trib-env Hopper-v4: exit %d\n%s%s", rc, out, err);
    ob = strdup(out);
    /* {"env":"MjHopper-v0",...} against {"env":"Hopper-v4",...}: the same after the id, but steps/s */
    const char *rk = strstr(ok, "\"num_envs\""), *rb = strstr(ob, "\"num_envs\"");
    ck_assert_msg(strncmp(ok, "{\"env\":\"MjHopper-v0\",", 21) == 0 && rk && rb, "%s\n%s", ok, ob);
    const char *ek = strstr(rk, "\"steps_per_s\""), *eb = strstr(rb, "\"steps_per_s\"");
    size_t nk = ek ? (size_t)(ek - rk) : strlen(rk), nb = eb ? (size_t)(eb - rb) : strlen(rb);
    ck_assert_msg(nk == nb && memcmp(rk, rb, nk) == 0, "trib-env differs:\n%s%s", ok, ob);
    ck_assert_ptr_nonnull(strstr(rk, "\"episodes\":30"));
    free(ok);
    free(ob);
}
END_TEST

/* The --env-args reach the equations. */
START_TEST(kit_hopper_args)
{
    struct env_plugin *pl;
    const struct env_spec *bs = builtin_hopper();
    struct env_args a = hopper_args("ctrl_cost_weight", "0", "forward_reward_weight", "1.0");
    const struct env_spec *ks = open_kit(&a, &pl);
    struct run k, b;
    k.v = vec_env_new(ks, B, 4, 0);
    b.v = vec_env_new(bs, B, 4, 0);
    ck_assert_msg(k.v && b.v, "%s", env_last_error());
    vec_env_reset(k.v, k.obs);
    vec_env_reset(b.v, b.obs);
    float act[B * A];
    for (int j = 0; j < B * A; j++) act[j] = 0.25f * (float)(j % 4) - 0.4f;
    ck_assert_int_eq(vec_env_step(k.v, act, k.obs, k.rew, k.term, k.trunc, NULL), 0);
    ck_assert_int_eq(vec_env_step(b.v, act, b.obs, b.rew, b.term, b.trunc, NULL), 0);
    ck_assert_mem_eq(k.obs, b.obs, sizeof k.obs);   /* the same dynamics */
    for (int i = 0; i < B; i++) {
        double cost = 0;
        for (int j = 0; j < A; j++) cost += (double)act[i * A + j] * (double)act[i * A + j];
        ck_assert_msg(fabs((double)k.rew[i] - ((double)b.rew[i] + 1e-3 * cost)) < 1e-6,
                      "env %d: reward %.9g without the control cost, %.9g with it (cost %.9g)", i,
                      (double)k.rew[i], (double)b.rew[i], 1e-3 * cost);
        ck_assert((double)k.rew[i] > (double)b.rew[i]);
    }
    vec_env_free(k.v);
    env_plugin_close(pl);

    a = hopper_args("healthy_z_min", "5", NULL, NULL);   /* the hopper stands 1.25 high: unhealthy at once */
    ks = open_kit(&a, &pl);
    k.v = vec_env_new(ks, B, 4, 0);
    vec_env_reset(k.v, k.obs);
    ck_assert_int_eq(vec_env_step(k.v, act, k.obs, k.rew, k.term, k.trunc, NULL), 0);
    ck_assert_int_eq(vec_env_step(b.v, act, b.obs, b.rew, b.term, b.trunc, NULL), 0);
    for (int i = 0; i < B; i++) {
        ck_assert_msg(k.term[i], "env %d not terminated with healthy_z_min 5", i);
        ck_assert(!b.term[i]);
    }
    vec_env_free(k.v);
    vec_env_free(b.v);
    env_plugin_close(pl);
}
END_TEST

static void expect_error(const struct env_args *a, const char *why)
{
    struct env_plugin *pl = (struct env_plugin *)1;
    ck_assert_ptr_null(env_open_args(MJ_HOPPER_SO, a, &pl));
    ck_assert_ptr_null(pl);
    char want[2048];
    snprintf(want, sizeof want, "plugin %s: %s", MJ_HOPPER_SO, why);
    ck_assert_str_eq(env_last_error(), want);
}

/* Errors by name; the unload (and a failed open) leaves MuJoCo's error
 * handler as it was (a handler of an unloaded plug-in would be called
 * into unmapped code). */
START_TEST(kit_hopper_errors)
{
    char tmp[128], fifo[256], one[256], why[1024];
    kit_must_scratch(tmp, sizeof tmp, "test_mujoco_kit_");
    void (*before)(const char *) = mju_user_error;
    struct env_args none = { 0, NULL, NULL };
    expect_error(&none, "needs --env-arg model=PATH.xml (Gymnasium's hopper.xml)");
    struct env_args a = hopper_args("ctrl_cost", "1", NULL, NULL);
    expect_error(&a, "unknown --env-arg 'ctrl_cost' (takes model=PATH.xml, forward_reward_weight, "
                     "ctrl_cost_weight, healthy_reward, healthy_z_min, healthy_angle)");
    a = hopper_args("healthy_angle", "0.2x", NULL, NULL);
    expect_error(&a, "--env-arg healthy_angle=0.2x: not a finite number");
    a = hopper_args("healthy_reward", "nan", NULL, NULL);
    expect_error(&a, "--env-arg healthy_reward=nan: not a finite number");
    snprintf(fifo, sizeof fifo, "%s/hopper.xml", tmp);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    a = hopper_args(NULL, NULL, NULL, NULL);
    values[0] = fifo;
    snprintf(why, sizeof why, "model %s: not a regular file (a FIFO)", fifo);
    expect_error(&a, why);   /* refused at once: the test's 60 s would end a wait on the FIFO */
    snprintf(one, sizeof one, "%s/one.xml", tmp);
    FILE *f = fopen(one, "w");
    ck_assert_ptr_nonnull(f);
    fputs("<mujoco><worldbody><body><joint name='j' type='slide'/><geom size='0.1'/></body></worldbody>"
          "<actuator><motor joint='j'/></actuator></mujoco>\n", f);
    ck_assert_int_eq(fclose(f), 0);
    values[0] = one;
    snprintf(why, sizeof why, "model %s has 1 actuators, MjHopper-v0 needs 3", one);
    expect_error(&a, why);
    ck_assert_msg(mju_user_error == before, "a failed open left its MuJoCo error handler installed");
    a = hopper_args(NULL, NULL, NULL, NULL);
    struct env_plugin *pl;
    open_kit(&a, &pl);
    ck_assert_msg(mju_user_error != before, "the plug-in's open installed no MuJoCo error handler");
    env_plugin_close(pl);
    ck_assert_msg(mju_user_error == before, "the plug-in's unload left its MuJoCo error handler installed");
    ck_assert_int_eq(kit_rm_rf(tmp), 0);
}
END_TEST

KIT_MAIN("mujoco_kit",
         { "kit", 120, .tests = { kit_hopper_is_hopper_v4, kit_hopper_in_trib_env, kit_hopper_args,
           kit_hopper_errors } })
