/* Plug-ins: broken .so files get specific errors; the worked example in
 * envs/examples builds out of tree against a real `cmake --install` prefix
 * (CMake package and pkg-config) and runs; trib-env reports on any env. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "envs/plugin.h"
#include "envs/vec_env.h"
#include "kit.h"

static const char *src_dir(void)
{
    const char *s = getenv("TRIB_SOURCE_DIR");
    return s ? s : TRIB_SOURCE_DIR_DEF;
}
static const char *bin_dir(void)
{
    const char *s = getenv("TRIB_BINARY_DIR");
    return s ? s : TRIB_BINARY_DIR_DEF;
}

/* Run a shell command, its stdout+stderr into *out (caller frees); returns
 * the exit status, or -1 if it did not exit normally. */
static int run(char **out, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[8300];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect_error(const char *path, const char *why)
{
    ck_assert_ptr_null(env_plugin_open(path));
    char want[4096];
    snprintf(want, sizeof want, "plugin %s: %s", path, why);
    ck_assert_str_eq(env_last_error(), want);
}

START_TEST(bad_plugins)
{
    expect_error(BAD_NO_SYMBOL_SO, "missing symbol tributary_env_open (or tributary_env)");
    expect_error(BAD_ZERO_OBS_SO, "observation space has zero size (dim = 0)");
    expect_error(BAD_NULL_STEP_SO, "step function is NULL");
    expect_error(BAD_RETURNS_NULL_SO, "tributary_env() returned NULL");
    expect_error("/nonexistent/libnope.so",
                 "cannot load: /nonexistent/libnope.so: cannot open shared object file: No such "
                 "file or directory");
    struct env_plugin *pl = (struct env_plugin *)1;
    ck_assert_ptr_null(env_open("libnope.so", &pl));
    ck_assert_ptr_null(pl);
    ck_assert_str_eq(env_last_error(), "plugin libnope.so: cannot load: ./libnope.so: cannot open "
                                       "shared object file: No such file or directory");
    ck_assert_ptr_eq(env_open("Pendulum-v1", &pl), env_lookup("Pendulum-v1"));
    ck_assert_ptr_null(pl);
    ck_assert_ptr_null(env_open("Pendulum-v9", &pl));
    ck_assert(strncmp(env_last_error(), "unknown env id 'Pendulum-v9'", 28) == 0);
}
END_TEST

/* The spec checks behind the loader, one defect at a time. */
START_TEST(spec_checks)
{
    static const double lo[1] = {1}, hi[1] = {0};
    struct env_spec base = *env_lookup("CartPole-v1"), s;
#define CASE(stmt, msg)                                                                        \
    do {                                                                                       \
        s = base;                                                                              \
        stmt;                                                                                  \
        ck_assert_int_eq(env_spec_check(&s), -1);                                              \
        ck_assert_str_eq(env_last_error(), msg);                                               \
    } while (0)
    CASE(s.id = "", "id is empty");
    CASE(s.id = NULL, "id is empty");
    CASE(s.state_size = 0, "state_size is 0");
    CASE(s.obs.kind = SPACE_DISCRETE, "observation space must be a box (a float32 vector)");
    CASE(s.obs.dim = 0, "observation space has zero size (dim = 0)");
    CASE(s.obs.low = NULL, "observation space has no low/high bounds");
    CASE((s.obs.dim = 1, s.obs.low = lo, s.obs.high = hi),
         "observation space: low[0] = 1 is not <= high[0] = 0");
    CASE(s.act.n = 0, "action space is discrete with n = 0 (need n > 0)");
    CASE((s.act.kind = SPACE_BOX, s.act.dim = 0), "action space has zero size (dim = 0)");
    CASE((s.act.kind = SPACE_BOX, s.act.dim = 1), "action space has no low/high bounds");
    CASE(s.reset = NULL, "reset function is NULL");
    CASE(s.step = NULL, "step function is NULL");
    CASE(s.max_episode_steps = -3, "max_episode_steps is negative (-3)");
    ck_assert_int_eq(env_spec_check(NULL), -1);
    ck_assert_str_eq(env_last_error(), "spec is NULL");
    ck_assert_int_eq(env_spec_check(&base), 0);
#undef CASE
}
END_TEST

START_TEST(tool)
{
    char *out;
    ck_assert_int_eq(run(&out, "'%s' --help", TRIB_ENV_TOOL), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: trib-env [options] ENV"));
    free(out);
    ck_assert_int_eq(run(&out, "'%s' NoSuchEnv-v0", TRIB_ENV_TOOL), 1);
    ck_assert_ptr_null(env_lookup("NoSuchEnv-v0"));
    char want_unknown[1024];
    snprintf(want_unknown, sizeof want_unknown, "trib-env: %s\n", env_last_error());
    ck_assert_str_eq(out, want_unknown);
    ck_assert_ptr_nonnull(strstr(out, "(built-ins: CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1"));
    free(out);
    ck_assert_int_eq(run(&out, "'%s' '%s'", TRIB_ENV_TOOL, BAD_NULL_STEP_SO), 1);
    char want[4096];
    snprintf(want, sizeof want, "trib-env: plugin %s: step function is NULL\n", BAD_NULL_STEP_SO);
    ck_assert_str_eq(out, want);
    free(out);
    /* A valid plug-in whose batched observations cannot be allocated: an
     * error, not a crash (sanitizer allocators told to return NULL too). */
    ck_assert_int_eq(run(&out, "ASAN_OPTIONS=\"$ASAN_OPTIONS:allocator_may_return_null=1\" "
                               "TSAN_OPTIONS=\"$TSAN_OPTIONS:allocator_may_return_null=1\" "
                               "'%s' -n 1048576 '%s'", TRIB_ENV_TOOL, BAD_WIDE_OBS_SO), 1);
    const char *msg = strstr(out, "trib-env: ");   /* after a sanitizer's warning, if any */
    ck_assert_ptr_nonnull(msg);
    ck_assert(msg == out || strncmp(out, "==", 2) == 0);
    ck_assert_str_eq(msg, "trib-env: out of memory for 1048576 envs of observation dim 33554432\n");
    free(out);
    /* --env-arg KEY=VALUE (repeatable) reaches the plug-in's entry point: the
     * spec Sim-v0 fills at load has the observation size it was given */
    ck_assert_int_eq(run(&out, "'%s' -e 2 --env-arg dim=7 --env-arg create_fail_at=-1 '%s'",
                         TRIB_ENV_TOOL, SIM_PLUGIN_SO), 0);
    const char *want_sim = "env: Sim-v0 (obs dim 7, actions box(1), max_episode_steps 5)\n";
    ck_assert_msg(strncmp(out, want_sim, strlen(want_sim)) == 0, "%s", out);
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --env-arg dim=0 '%s'", TRIB_ENV_TOOL, SIM_PLUGIN_SO), 1);
    snprintf(want, sizeof want, "trib-env: plugin %s: bad --env-arg dim=0 (takes dim=1..64, "
             "fail=load, create_fail_at=K, abi=N)\n", SIM_PLUGIN_SO);
    ck_assert_str_eq(out, want);
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --env-arg dim=3 CartPole-v1", TRIB_ENV_TOOL), 1);
    ck_assert_str_eq(out, "trib-env: CartPole-v1 takes no --env-arg (got 'dim')\n");
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --env-arg dim '%s'", TRIB_ENV_TOOL, SIM_PLUGIN_SO), 2);
    ck_assert_str_eq(out, "trib-env: --env-arg 'dim': expected KEY=VALUE (see trib-env --help)\n");
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --env-arg 'd m=1' '%s'", TRIB_ENV_TOOL, SIM_PLUGIN_SO), 2);
    ck_assert_str_eq(out, "trib-env: --env-arg 'd m=1': a key is letters, digits, '_', '-' and '.' (see trib-env --help)\n");
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --env-arg dim=3 --env-arg dim=4 '%s'", TRIB_ENV_TOOL, SIM_PLUGIN_SO), 2);
    ck_assert_str_eq(out, "trib-env: --env-arg dim is given twice (see trib-env --help)\n");
    free(out);
    /* --json stays JSON whatever a plug-in gives: its id escaped (quotes,
     * backslashes, controls), NaN returns as null. */
    ck_assert_int_eq(run(&out, "'%s' --json -e 1 '%s'", TRIB_ENV_TOOL, BAD_ODD_ID_SO), 0);
    const char *want_json = "{\"env\":\"Odd \\\"quoted\\\"\\\\id\\u0009-v0\",\"num_envs\":1,"
                            "\"seed\":0,\"episodes\":1,\"steps\":10,\"return_mean\":null,"
                            "\"return_min\":null,\"return_max\":null,\"length_mean\":10,";
    ck_assert_msg(strncmp(out, want_json, strlen(want_json)) == 0, "%s", out);
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --actions-file / CartPole-v1", TRIB_ENV_TOOL), 1);
    ck_assert_str_eq(out, "trib-env: cannot read actions file /: Is a directory\n");
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --episodes 0 CartPole-v1", TRIB_ENV_TOOL), 2);
    ck_assert_str_eq(out, "trib-env: --episodes must be an integer >= 1 (got '0') (see trib-env --help)\n");
    free(out);
    ck_assert_int_eq(run(&out, "'%s' --actions 0,2 CartPole-v1", TRIB_ENV_TOOL), 1);
    ck_assert_str_eq(out, "trib-env: scripted action 2 is not an integer in [0, 2)\n");
    free(out);
    /* Always pushing right ends every CartPole episode within a few dozen
     * steps, and the same seed gives the same episodes. */
    char *again;
    ck_assert_int_eq(run(&out, "'%s' --json --seed 3 --episodes 5 --actions 1 CartPole-v1",
                         TRIB_ENV_TOOL), 0);
    ck_assert_int_eq(run(&again, "'%s' --json --seed 3 --episodes 5 -a 1 CartPole-v1",
                         TRIB_ENV_TOOL), 0);
    char *sps = strstr(out, "\"steps_per_s\"");
    ck_assert_ptr_nonnull(sps);
    ck_assert(strncmp(out, again, (size_t)(sps - out)) == 0);
    free(again);
    char file[] = "/tmp/trib-env-actions-XXXXXX";
    int fd = mkstemp(file);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "1\n1, 1\n", 8), 8);
    close(fd);
    ck_assert_int_eq(run(&again, "'%s' --json --seed 3 --episodes 5 --actions-file '%s' CartPole-v1",
                         TRIB_ENV_TOOL, file), 0);
    unlink(file);
    ck_assert(strncmp(out, again, (size_t)(sps - out)) == 0);
    ck_assert_ptr_nonnull(strstr(out, "{\"env\":\"CartPole-v1\",\"num_envs\":1,\"seed\":3,"
                                      "\"episodes\":5,"));
    int lmax = -1;
    const char *p = strstr(out, "\"length_max\":");
    ck_assert_ptr_nonnull(p);
    sscanf(p, "\"length_max\":%d", &lmax);
    ck_assert(lmax > 5 && lmax < 60);
    free(out);
    free(again);
    /* Pendulum with random actions over 4 envs: every episode is 200 steps. */
    ck_assert_int_eq(run(&out, "'%s' CartPole-v1 Pendulum-v1", TRIB_ENV_TOOL), 2);
    ck_assert_str_eq(out, "trib-env: expected exactly one ENV (see trib-env --help)\n");
    free(out);
    ck_assert_int_eq(run(&out, "'%s' -n 4 -e 8 --env Pendulum-v1", TRIB_ENV_TOOL), 0);
    ck_assert_ptr_nonnull(strstr(out, "episodes: 8   steps: 1600   envs: 4"));
    ck_assert_ptr_nonnull(strstr(out, "length: mean 200.00   min 200   max 200"));
    free(out);
}
END_TEST

/* An env_args of key, value pairs: ARGS("dim", "5", "abi", "2") (at most 8). */
#define ARGS_N(...) ((int)(sizeof((const char *[]){ __VA_ARGS__ }) / sizeof(char *) / 2))
#define ARGS(...)                                                                              \
    ((struct env_args){ .n = ARGS_N(__VA_ARGS__),                                              \
                        .keys = keys_of((const char *[]){ __VA_ARGS__ }, ARGS_N(__VA_ARGS__), kbuf), \
                        .values = values_of((const char *[]){ __VA_ARGS__ }, ARGS_N(__VA_ARGS__), vbuf) })
static const char *kbuf[8], *vbuf[8];
static const char *const *keys_of(const char **kv, int n, const char **out)
{
    for (int i = 0; i < 8 && i < n; i++) out[i] = kv[2 * i];
    return out;
}
static const char *const *values_of(const char **kv, int n, const char **out)
{
    for (int i = 0; i < 8 && i < n; i++) out[i] = kv[2 * i + 1];
    return out;
}

#ifdef TRIB_WITH_MUJOCO
#include <mujoco/mujoco.h>

/* A model for MjPendulum-v0's model=PATH: a pole of two links (so the spec
 * it fills differs from the embedded model's: obs dim 6), and joint ranges
 * so narrow that the limits' constraints are active on most steps, where
 * the solver starts from qacc_warmstart: a resume that lost it would not be
 * bit-exact. */
static const char stiff_xml[] =
    "<mujoco model=\"stiff\">\n"
    "  <option timestep=\"0.02\" integrator=\"RK4\"/>\n"
    "  <default><joint damping=\"1\" limited=\"true\"/><geom contype=\"0\"/></default>\n"
    "  <worldbody>\n"
    "    <body name=\"cart\">\n"
    "      <joint name=\"slider\" type=\"slide\" axis=\"1 0 0\" range=\"-0.1 0.1\"/>\n"
    "      <geom type=\"capsule\" quat=\"0.707 0 0.707 0\" size=\"0.1 0.1\"/>\n"
    "      <body name=\"pole\">\n"
    "        <joint name=\"hinge\" type=\"hinge\" axis=\"0 1 0\" range=\"-10 10\"/>\n"
    "        <geom type=\"capsule\" fromto=\"0 0 0 0.001 0 0.6\" size=\"0.049 0.3\"/>\n"
    "        <body name=\"tip\" pos=\"0 0 0.6\">\n"
    "          <joint name=\"hinge2\" type=\"hinge\" axis=\"0 1 0\" range=\"-5 5\"/>\n"
    "          <geom type=\"capsule\" fromto=\"0 0 0 0 0 0.3\" size=\"0.03\"/>\n"
    "        </body>\n"
    "      </body>\n"
    "    </body>\n"
    "  </worldbody>\n"
    "  <actuator>%s<motor joint=\"slider\" gear=\"100\" ctrllimited=\"true\" ctrlrange=\"-2 2\"/></actuator>\n"
    "</mujoco>\n";

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

static void expect_mj_error(const char *so, const struct env_args *args, const char *why)
{
    struct env_plugin *pl = (struct env_plugin *)1;
    ck_assert_ptr_null(env_open_args(so, args, &pl));
    ck_assert_ptr_null(pl);
    char want[8192];
    snprintf(want, sizeof want, "plugin %s: %s", so, why);
    ck_assert_str_eq(env_last_error(), want);
}

/* MjPendulum-v0 (envs/examples/mj_pendulum.c) as built out of tree in
 * tmp/build: its spec from the embedded model and from model=PATH, every
 * load error by name, a lifecycle of per-env mjData (new, reset, autoreset,
 * save, load, free: ASan's leak check sees what is left), a resume that is
 * bit-exact at every step, get/set_state, and trib-env with --env-arg. */
static void check_mj_pendulum(const char *tmp)
{
    char so[1024], stiff[1024], two[1024], bad[1024], why[4096], xml[4096];
    snprintf(so, sizeof so, "%s/build/libmj_pendulum.so", tmp);
    ck_assert_msg(access(so, R_OK) == 0, "MuJoCo found, but envs/examples made no libmj_pendulum.so");
    snprintf(stiff, sizeof stiff, "%s/stiff.xml", tmp);
    snprintf(two, sizeof two, "%s/two.xml", tmp);
    snprintf(bad, sizeof bad, "%s/bad.xml", tmp);
    snprintf(xml, sizeof xml, stiff_xml, "");
    write_text(stiff, xml);
    snprintf(xml, sizeof xml, stiff_xml, "<motor name=\"m2\" joint=\"hinge\" gear=\"1\"/>");
    write_text(two, xml);
    write_text(bad, "<mujoco><worldbody><body></worldbody></mujoco>\n");

    /* the errors of the entry point, by name */
    struct env_args a = ARGS("foo", "1");
    expect_mj_error(so, &a, "unknown --env-arg 'foo' (takes model=PATH)");
    a = ARGS("model", two);
    snprintf(why, sizeof why, "model %s has 2 actuators, MjPendulum-v0 needs 1", two);
    expect_mj_error(so, &a, why);
    char mjerr[1000] = "";   /* MuJoCo's own message, on one line */
    ck_assert_ptr_null(mj_loadXML(bad, NULL, mjerr, sizeof mjerr));
    for (char *c = mjerr; *c; c++)
        if (*c == '\n') *c = ' ';
    for (size_t n = strlen(mjerr); n > 0 && mjerr[n - 1] == ' ';) mjerr[--n] = '\0';
    ck_assert_ptr_nonnull(strstr(mjerr, "XML_ERROR_MISMATCHED_ELEMENT"));
    a = ARGS("model", bad);
    snprintf(why, sizeof why, "model %s: %s", bad, mjerr);
    expect_mj_error(so, &a, why);
    /* a model path that is a FIFO: refused at once, not waited on (envs/mujoco_sdk.h) */
    char fifo[1024];
    snprintf(fifo, sizeof fifo, "%s/fifo.xml", tmp);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    a = ARGS("model", fifo);
    snprintf(why, sizeof why, "model %s: not a regular file (a FIFO)", fifo);
    expect_mj_error(so, &a, why);

    /* the embedded model: dims and bounds from it */
    struct env_plugin *pl;
    const struct env_spec *spec = env_open_args(so, NULL, &pl);
    ck_assert_msg(spec != NULL, "%s", env_last_error());
    ck_assert_str_eq(spec->id, "MjPendulum-v0");
    ck_assert_int_eq(spec->abi_version, ENV_ABI_VERSION);
    ck_assert_int_eq(spec->obs.dim, 4);   /* [qpos (2), qvel (2)] */
    ck_assert_int_eq(spec->act.dim, 1);
    ck_assert(spec->act.low[0] == -3.0 && spec->act.high[0] == 3.0);
    ck_assert_int_eq(spec->info_count, 2);
    ck_assert_str_eq(spec->info_names[0], "reward_upright");
    ck_assert_str_eq(spec->info_names[1], "x_position");
    enum { B = 4, D = 6 };
    struct vec_env *v = vec_env_new(spec, B, 1, 0);
    ck_assert_ptr_nonnull(v);
    float obs[B * D], act[B], rew[B];
    bool term[B], trunc[B];
    vec_env_reset(v, obs);
    uint64_t rng = 3;
    for (int t = 0; t < 300; t++) {   /* random pushes topple it: autoresets */
        for (int i = 0; i < B; i++) act[i] = (float)env_rng_uniform(&rng, -3, 3);
        ck_assert_int_eq(vec_env_step(v, act, obs, rew, term, trunc, NULL), 0);
    }
    struct vec_env_stats st;
    vec_env_get_stats(v, &st);
    ck_assert_uint_ge(st.episodes, 20);
    double sums[2];
    vec_env_info_sums(v, sums);
    ck_assert_double_eq(sums[0], (double)st.length_sum);   /* reward_upright: 1 a step */
    /* get/set_state: [qpos, qvel], then mj_forward */
    double in[4] = {0.25, -0.05, 0.5, 1.5}, got[4];
    ck_assert_int_eq(spec->set_state(vec_env_state(v, 2), in, 4), 0);
    ck_assert_int_eq(spec->get_state(vec_env_state(v, 2), got, 4), 4);
    ck_assert_mem_eq(in, got, sizeof in);
    ck_assert_int_eq(spec->set_state(vec_env_state(v, 2), in, 3), -1);
    /* a saved state the plug-in's load refuses names the env and the value */
    unsigned char *saved;
    size_t len;
    ck_assert_int_eq(vec_env_save(v, &saved, &len), 0);
    double nan = NAN;
    unsigned char *at = memmem(saved, len, &in[1], sizeof in[1]);   /* env 2's qpos[1] */
    ck_assert_ptr_nonnull(at);
    memcpy(at, &nan, sizeof nan);
    ck_assert_int_eq(vec_env_load(v, saved, len), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_load: env 2 of MjPendulum-v0: saved qpos[1] is nan");
    free(saved);
    vec_env_free(v);
    env_plugin_close(pl);

    /* model=PATH: the spec is the model's (three joints: obs dim 6, ctrl in
     * [-2, 2]), and a resume is bit-exact at every step: w is loaded from
     * v's save before each step, then both take the same actions */
    a = ARGS("model", stiff);
    spec = env_open_args(so, &a, &pl);
    ck_assert_msg(spec != NULL, "%s", env_last_error());
    ck_assert_int_eq(spec->obs.dim, D);
    ck_assert(spec->act.low[0] == -2.0 && spec->act.high[0] == 2.0);
    v = vec_env_new(spec, B, 7, 0);
    struct vec_env *w = vec_env_new(spec, B, 8, 0);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(w);
    float obs2[B * D], rew2[B];
    bool term2[B], trunc2[B];
    vec_env_reset(v, obs);
    vec_env_reset(w, obs2);
    for (int t = 0; t < 400; t++) {
        ck_assert_int_eq(vec_env_save(v, &saved, &len), 0);
        ck_assert_msg(vec_env_load(w, saved, len) == 0, "%s", env_last_error());
        free(saved);
        for (int i = 0; i < B; i++) act[i] = (float)env_rng_uniform(&rng, -2, 2);
        ck_assert_int_eq(vec_env_step(v, act, obs, rew, term, trunc, NULL), 0);
        ck_assert_int_eq(vec_env_step(w, act, obs2, rew2, term2, trunc2, NULL), 0);
        ck_assert_msg(memcmp(obs, obs2, sizeof obs) == 0, "step %d: resumed obs differ", t);
        ck_assert_mem_eq(rew, rew2, sizeof rew);
        ck_assert_mem_eq(term, term2, sizeof term);
        ck_assert_mem_eq(trunc, trunc2, sizeof trunc);
        for (int i = 0; i < B; i++) {
            double x[D], y[D];
            ck_assert_int_eq(spec->get_state(vec_env_state(v, i), x, D), D);
            ck_assert_int_eq(spec->get_state(vec_env_state(w, i), y, D), D);
            ck_assert_msg(memcmp(x, y, sizeof x) == 0, "step %d: env %d's resumed state differs", t, i);
        }
    }
    vec_env_get_stats(v, &st);
    ck_assert_uint_ge(st.episodes, 10);
    double s1[2], s2[2];
    vec_env_info_sums(v, s1);
    vec_env_info_sums(w, s2);
    ck_assert_mem_eq(s1, s2, sizeof s1);
    vec_env_free(v);
    vec_env_free(w);
    env_plugin_close(pl);

    /* the installed trib-env: --env-arg model=PATH, and its errors */
    char *out;
    int rc = run(&out, "'%s/prefix/bin/trib-env' --json -e 3 --env-arg 'model=%s' '%s'", tmp, stiff, so);
    ck_assert_msg(rc == 0, "%s", out);
    const char *want_json = "{\"env\":\"MjPendulum-v0\",\"num_envs\":1,\"seed\":0,\"episodes\":3,";
    ck_assert_msg(strncmp(out, want_json, strlen(want_json)) == 0, "%s", out);
    free(out);
    rc = run(&out, "'%s/prefix/bin/trib-env' -e 3 --env-arg 'model=%s' '%s'", tmp, stiff, so);
    ck_assert_msg(rc == 0 && strstr(out, "env: MjPendulum-v0 (obs dim 6, actions box(1), max_episode_steps 1000)\n"),
                  "%s", out);
    free(out);
    rc = run(&out, "'%s/prefix/bin/trib-env' --env-arg 'model=%s' '%s'", tmp, two, so);
    ck_assert_int_eq(rc, 1);
    snprintf(why, sizeof why, "trib-env: plugin %s: model %s has 2 actuators, MjPendulum-v0 needs 1\n", so, two);
    ck_assert_str_eq(out, why);
    free(out);

    /* pkg-config's tributary-envs (headers only, no CUDA) builds it too */
    rc = run(&out, "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' && export PKG_CONFIG_PATH && "
                   "'%s' -shared -fPIC -std=gnu11 $(pkg-config --cflags tributary-envs) "
                   "'%s/envs/examples/mj_pendulum.c' -o '%s/libmjpc.so' -lmujoco -lm",
             tmp, C_COMPILER_PATH, src_dir(), tmp);
    ck_assert_msg(rc == 0, "pkg-config build of mj_pendulum.c failed:\n%s", out);
    free(out);
    snprintf(so, sizeof so, "%s/libmjpc.so", tmp);
    pl = env_plugin_open(so);
    ck_assert_msg(pl != NULL, "%s", env_last_error());
    ck_assert_str_eq(env_plugin_spec(pl)->id, "MjPendulum-v0");
    env_plugin_close(pl);
}
#endif

START_TEST(example_out_of_tree)
{
    char tmp[] = "/tmp/trib-env-install-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    char *out;
    int rc = run(&out, "'%s' --install '%s' --prefix '%s/prefix'", CMAKE_COMMAND_PATH, bin_dir(),
                 tmp);
    ck_assert_msg(rc == 0, "cmake --install failed:\n%s", out);
    free(out);
    const char *installed[] = {"include/tributary/envs/env.h", "include/tributary/envs/vec_env.h",
                               "include/tributary/envs/plugin.h", "lib/libtrib_envs.a",
                               "lib/pkgconfig/tributary.pc", "lib/cmake/Tributary/tributary-config.cmake",
                               "bin/trib-env"};
    for (size_t i = 0; i < sizeof installed / sizeof *installed; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/prefix/%s", tmp, installed[i]);
        ck_assert_msg(access(path, R_OK) == 0, "not installed: %s", installed[i]);
    }
    rc = run(&out, "'%s' -S '%s/envs/examples' -B '%s/build' -DCMAKE_PREFIX_PATH='%s/prefix' "
                   "-DCMAKE_C_COMPILER='%s' -DCMAKE_BUILD_TYPE=Release && '%s' --build '%s/build'",
             CMAKE_COMMAND_PATH, src_dir(), tmp, tmp, C_COMPILER_PATH, CMAKE_COMMAND_PATH, tmp);
    ck_assert_msg(rc == 0, "out-of-tree build of envs/examples failed:\n%s", out);
    free(out);

    char so[4096];
    snprintf(so, sizeof so, "%s/build/libpoint_reach.so", tmp);
    struct env_plugin *p = env_plugin_open(so);
    ck_assert_msg(p != NULL, "%s", env_last_error());
    const struct env_spec *spec = env_plugin_spec(p);
    ck_assert_str_eq(spec->id, "PointReach-v0");
    ck_assert_int_eq(spec->obs.dim, 3);
    ck_assert_int_eq(spec->act.kind, SPACE_BOX);
    struct vec_env *v = vec_env_new(spec, 8, 5, 0);
    float obs[24], act[8], reward[8];
    bool term[8], trunc[8];
    vec_env_reset(v, obs);
    uint64_t rng = 3;
    for (int t = 0; t < 450; t++) {
        for (int i = 0; i < 8; i++)
            act[i] = (float)env_rng_uniform(&rng, -1, 1);
        ck_assert_int_eq(vec_env_step(v, act, obs, reward, term, trunc, NULL), 0);
        for (int i = 0; i < 8; i++)
            ck_assert(obs[3 * i] >= -2.0f && obs[3 * i] <= 2.0f && reward[i] <= 10.0f);
    }
    struct vec_env_stats st;
    vec_env_get_stats(v, &st);
    ck_assert_uint_ge(st.episodes, 16);   /* random pushing rarely settles: truncations */
    vec_env_free(v);
    env_plugin_close(p);

    /* the host program linked against the installed archive, a controller that reaches */
    rc = run(&out, "'%s/build/point_reach_run' '%s'", tmp, so);
    ck_assert_msg(rc == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "{\"env\":\"PointReach-v0\",\"episodes\":"));
    double len_mean = 0;
    sscanf(strstr(out, "\"length_mean\":"), "\"length_mean\":%lf", &len_mean);
    ck_assert_msg(len_mean > 0 && len_mean < 200, "controller never reached: %s", out);
    free(out);

    /* the installed trib-env on the plug-in */
    rc = run(&out, "'%s/prefix/bin/trib-env' --json -e 4 '%s'", tmp, so);
    ck_assert_msg(rc == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "{\"env\":\"PointReach-v0\",\"num_envs\":1,\"seed\":0,"
                                      "\"episodes\":4,"));
    free(out);

    /* pkg-config: build the same plug-in with plain cc and load it */
    rc = run(&out, "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' && export PKG_CONFIG_PATH && "
                   "'%s' -shared -fPIC -std=gnu11 $(pkg-config --cflags tributary) "
                   "'%s/envs/examples/point_reach.c' -o '%s/libpc.so' -lm && "
                   "pkg-config --libs tributary",
             tmp, C_COMPILER_PATH, src_dir(), tmp);
    ck_assert_msg(rc == 0, "pkg-config build failed:\n%s", out);
    ck_assert_msg(strstr(out, "-ltributary") != NULL, "pkg-config --libs: %s", out);
    free(out);
    snprintf(so, sizeof so, "%s/libpc.so", tmp);
    p = env_plugin_open(so);
    ck_assert_msg(p != NULL, "%s", env_last_error());
    ck_assert_str_eq(env_plugin_spec(p)->id, "PointReach-v0");
    env_plugin_close(p);
#ifdef TRIB_WITH_MUJOCO
    check_mj_pendulum(tmp);
#endif
    kit_rm_rf(tmp);
    ck_assert_int_ne(access(tmp, F_OK), 0);
}
END_TEST

/* ---- ABI 2: a plug-in that loads a model and owns memory per env ---------- */

/* sim_live() of the loaded Sim-v0: its envs created and not destroyed. */
static int sim_live(void)
{
    void *h = dlopen(SIM_PLUGIN_SO, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    int (*fn)(void);
    void *sym = dlsym(h, "sim_live");
    ck_assert_ptr_nonnull(sym);
    memcpy(&fn, &sym, sizeof fn);
    int n = fn();
    dlclose(h);
    return n;
}

static void expect_open_error(const struct env_args *args, const char *why)
{
    struct env_plugin *pl = (struct env_plugin *)1;
    ck_assert_ptr_null(env_open_args(SIM_PLUGIN_SO, args, &pl));
    ck_assert_ptr_null(pl);
    char want[1024];
    snprintf(want, sizeof want, "plugin %s: %s", SIM_PLUGIN_SO, why);
    ck_assert_str_eq(env_last_error(), want);
}

START_TEST(abi2_load_errors)
{
    struct env_args a = ARGS("fail", "load");
    expect_open_error(&a, "model sim.xml: cannot parse (fail=load)");
    a = ARGS("dim", "0");
    expect_open_error(&a, "bad --env-arg dim=0 (takes dim=1..64, fail=load, create_fail_at=K, abi=N)");
    a = ARGS("abi", "3");
    expect_open_error(&a, "built for env ABI 3; this Tributary loads ABI 1 (tributary_env) and 2 "
                          "(tributary_env_open)");
    /* a saved form no checkpoint can hold: 2^63 wrapped saved_size * n,
     * 2^40 aborted the observer in malloc at its first checkpoint */
    a = ARGS("saved_size", "9223372036854775808");
    expect_open_error(&a, "saved_size is 9223372036854775808 bytes (at most 268435456 per env)");
    a = ARGS("saved_size", "1099511627776");
    expect_open_error(&a, "saved_size is 1099511627776 bytes (at most 268435456 per env)");
    /* arguments to a plug-in of ABI 1, and to a built-in */
    struct env_plugin *pl = NULL;
    a = ARGS("dim", "4");
    ck_assert_ptr_null(env_open_args(BAD_ODD_ID_SO, &a, &pl));
    char want[1024];
    snprintf(want, sizeof want, "plugin %s: takes no --env-arg (got 'dim'): it exports only tributary_env "
             "(ABI 1); a plug-in that takes arguments exports tributary_env_open", BAD_ODD_ID_SO);
    ck_assert_str_eq(env_last_error(), want);
    ck_assert_ptr_null(env_open_args("CartPole-v1", &a, &pl));
    ck_assert_str_eq(env_last_error(), "CartPole-v1 takes no --env-arg (got 'dim')");
    ck_assert_ptr_nonnull(env_open_args("CartPole-v1", NULL, &pl));
    ck_assert_ptr_null(pl);
}
END_TEST

START_TEST(abi2_lifecycle)
{
    struct env_args a = ARGS("dim", "5");
    struct env_plugin *pl;
    const struct env_spec *spec = env_open_args(SIM_PLUGIN_SO, &a, &pl);
    ck_assert_msg(spec != NULL, "%s", env_last_error());
    ck_assert_int_eq(spec->obs.dim, 5);   /* known only once loaded */
    ck_assert_int_eq(spec->abi_version, ENV_ABI_VERSION);
    enum { B = 4, T = 23 };
    struct vec_env *v = vec_env_new(spec, B, 7, 0), *w = vec_env_new(spec, B, 99, 0);
    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(sim_live(), 2 * B);
    float obs[B * 5], obs2[B * 5], rew[B], rew2[B], act[B];
    bool term[B], trunc[B];
    vec_env_reset(v, obs);
    vec_env_reset(w, obs2);
    double want_act = 0, run_act[B] = { 0 }, x0_env1 = 0;
    unsigned char *saved = NULL;
    size_t len = 0;
    for (int t = 0; t < T; t++) {
        if (t == 9) {
            ck_assert_int_eq(vec_env_save(v, &saved, &len), 0);
            spec->get_state(vec_env_state(v, 1), &x0_env1, 1);
        }
        for (int i = 0; i < B; i++) act[i] = (float)(0.01 * ((t * 7 + i * 3) % 11) - 0.04);
        ck_assert_int_eq(vec_env_step(v, act, obs, rew, term, trunc, NULL), 0);
        /* the reference: the actions summed over the steps of finished episodes */
        for (int i = 0; i < B; i++) {
            run_act[i] += act[i];
            if (term[i] || trunc[i]) want_act += run_act[i], run_act[i] = 0;
        }
    }
    double sums[2];
    vec_env_info_sums(v, sums);
    ck_assert_msg(want_act != 0, "want_act %g sums %g %g", want_act, sums[0], sums[1]);
    ck_assert_double_eq_tol(sums[1], want_act, 1e-12);
    /* resume: w takes v's state at step 9 and then the same actions */
    ck_assert_int_eq(vec_env_load(w, saved, len), 0);
    struct vec_env *ref = vec_env_new(spec, B, 7, 0);
    vec_env_reset(ref, obs2);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < B; i++) act[i] = (float)(0.01 * ((t * 7 + i * 3) % 11) - 0.04);
        if (t >= 9) ck_assert_int_eq(vec_env_step(w, act, obs2, rew2, term, trunc, NULL), 0);
        ck_assert_int_eq(vec_env_step(ref, act, obs, rew, term, trunc, NULL), 0);
        if (t >= 9) {
            ck_assert_mem_eq(obs, obs2, sizeof obs);
            ck_assert_mem_eq(rew, rew2, sizeof rew);
        }
    }
    double s_ref[2], s_w[2];
    vec_env_info_sums(ref, s_ref);
    vec_env_info_sums(w, s_w);
    ck_assert_mem_eq(s_ref, s_w, sizeof s_ref);
    /* a saved state the spec's load refuses changes nothing, and names the env */
    double nan = NAN;
    unsigned char *bad = malloc(len);
    memcpy(bad, saved, len);
    unsigned char *at = memmem(bad, len, &x0_env1, sizeof x0_env1);   /* env 1's saved x[0] */
    ck_assert_ptr_nonnull(at);
    memcpy(at, &nan, sizeof nan);
    ck_assert_int_eq(vec_env_load(w, bad, len), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_load: env 1 of Sim-v0: saved value 0 is nan");
    /* the info sums are the saved form's last doubles: 4 envs' running sums, then the totals */
    memcpy(bad, saved, len);
    memcpy(bad + len - sizeof nan, &nan, sizeof nan);
    ck_assert_int_eq(vec_env_load(w, bad, len), -1);
    ck_assert_str_eq(env_last_error(), "vec_env_load: Sim-v0's info sums: value 9 is nan");
    ck_assert_int_eq(sim_live(), 3 * B);   /* the scratch env is gone */
    free(bad);
    free(saved);
    vec_env_free(v);
    vec_env_free(w);
    vec_env_free(ref);
    ck_assert_int_eq(sim_live(), 0);
    env_plugin_close(pl);
}
END_TEST

START_TEST(abi2_create_fails)
{
    struct env_args a = ARGS("create_fail_at", "2");
    struct env_plugin *pl;
    const struct env_spec *spec = env_open_args(SIM_PLUGIN_SO, &a, &pl);
    ck_assert_ptr_nonnull(spec);
    ck_assert_ptr_null(vec_env_new(spec, 4, 1, 0));
    ck_assert_str_eq(env_last_error(), "vec_env_new: env 2 of Sim-v0: out of simulator slots");
    ck_assert_int_eq(sim_live(), 0);   /* the two made before it were destroyed */
    env_plugin_close(pl);
}
END_TEST

/* The fields of ABI 2 that go together. */
START_TEST(abi2_spec_checks)
{
    struct env_args a = ARGS("dim", "2");
    struct env_plugin *pl;
    const struct env_spec *good = env_open_args(SIM_PLUGIN_SO, &a, &pl);
    ck_assert_ptr_nonnull(good);
    struct env_spec s;
#define CASE(stmt, msg)                                                                        \
    do {                                                                                       \
        s = *good;                                                                             \
        stmt;                                                                                  \
        ck_assert_int_eq(env_spec_check(&s), -1);                                              \
        ck_assert_str_eq(env_last_error(), msg);                                               \
    } while (0)
    CASE(s.abi_version = 7, "built for env ABI 7; this Tributary loads ABI 1 and 2");
    CASE(s.abi_version = 0, "abi_version is 0 but ABI 2 fields are set (set abi_version = ENV_ABI_VERSION, 2)");
    CASE(s.load = NULL, "save and load go together (it has save only)");
    CASE(s.saved_size = 0, "saved_size is 0 but save is set");
    CASE((s.save = NULL, s.load = NULL), "create is set without save and load: a state block that holds "
                                         "what create made cannot be saved as raw bytes");
    CASE(s.create = NULL, "destroy is set without create");
    CASE(s.info_count = 17, "info_count is 17 (0..16)");
    CASE(s.info = NULL, "info_count is 2 but info is NULL");
    CASE(s.info_names = NULL, "info_count is 2 but info_names is NULL");
#undef CASE
    ck_assert_int_eq(env_spec_check(good), 0);
    env_plugin_close(pl);
}
END_TEST

KIT_MAIN("env_plugin",
         { "loader", 0, .tests = { bad_plugins, spec_checks } },
         { "abi2", 0, .tests = { abi2_load_errors, abi2_lifecycle, abi2_create_fails, abi2_spec_checks } },
         { "tool", 0, .tests = { tool } },
         { "install", 300, .tests = { example_out_of_tree } })
