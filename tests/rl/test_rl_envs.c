/* The env contract of ABI 2 in the RL programs, end to end: a plug-in that
 * owns memory per env and takes --env-arg (tests/envs/sim_plugin.c, Sim-v0)
 * trained by tributary-train with its observers (the arguments reach every
 * process over the wire), its id and named info in the summary, metrics and
 * policy file, its errors as the user sees them, a resumed run that makes
 * the very parameters of an uninterrupted one, and tributary-eval; with
 * MuJoCo, the same resume on Hopper-v4, and a resume of the example MuJoCo
 * plug-in whose model path has become a FIFO refused at once. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proc.h"
#include "envs/env.h"
#include "runfiles/ckpt.h"
#include "runfiles/runfiles.h"
#include "kit.h"

static bool same_policy(const char *a, const char *b)
{
    size_t na, nb;
    char *x = kit_must_read_in(a, "policy.safetensors", &na), *y = kit_must_read_in(b, "policy.safetensors", &nb);
    bool eq = na == nb && na > 200 && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

#define SIM_ARGS(logdir, updates)                                                                      \
    "--env", SIM_PLUGIN_SO, "--env-arg", "dim=4", "--mode", "sync", "--observers", "2", "--envs-per-observer", "4", \
        "--steps-per-rollout", "16", "--minibatches", "2", "--epochs", "2", "--seed", "5", "--max-updates", updates, \
        "--log-every", "0.01", "--logdir", logdir, "--quiet"

/* Sim-v0 with dim=4: the agent's policy and every observer's envs have 4
 * observation dims only if the argument reached each of them. */
START_TEST(test_plugin_args_id_info)
{
    char d[] = "/tmp/test_rl_envs_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(d));
    const char *a[] = { SIM_ARGS(d, "12"), NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a, -1);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    /* the summary names the env by id, and where its code came from */
    char want[700];
    snprintf(want, sizeof want, "\"env\":\"Sim-v0\",\"env_plugin\":\"%s\"", SIM_PLUGIN_SO);
    ck_assert_msg(strstr(kit_out, want), "no %s in\n%s", want, kit_out);
    /* config.json keeps the arguments */
    char *cfg = kit_must_read_in(d, "config.json", NULL);
    ck_assert_msg(strstr(cfg, "\"env_arg\":\t[\"dim=4\"]") || strstr(cfg, "\"env_arg\":[\"dim=4\"]"), "%s", cfg);
    free(cfg);
    /* metrics.csv: the info columns after the per-observer ones, with finite means */
    char *csv = kit_must_read_in(d, "metrics.csv", NULL);
    char *nl = strchr(csv, '\n');
    ck_assert_ptr_nonnull(nl);
    *nl = '\0';
    ck_assert_msg(strstr(csv, ",sps_observer1,sps_observer2,info_x0,info_action") == csv + strlen(csv) -
                                                                                         strlen(",sps_observer1,sps_observer2,info_x0,info_action"),
                  "header %s", csv);
    int finite_rows = 0;
    for (char *line = nl + 1; *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        char *last = strrchr(line, ','), *before = last;
        while (before > line && before[-1] != ',') before--;
        if (last && last[1] && before[0] != ',') {
            double x0 = strtod(before, NULL), act = strtod(last + 1, NULL);
            ck_assert(isfinite(x0) && isfinite(act) && fabs(act) <= 1.0);
            finite_rows++;
        }
        if (!end) break;
        line = end + 1;
    }
    ck_assert_msg(finite_rows >= 1, "no row with info means");
    free(csv);
    /* the policy file's metadata: the id, and the plug-in's path */
    size_t n;
    char *pol = kit_must_read_in(d, "policy.safetensors", &n);
    ck_assert_msg(memmem(pol, n, "\"env\":\"Sim-v0\"", 14) != NULL, "policy metadata: %.300s", pol + 8);
    snprintf(want, sizeof want, "\"env_plugin\":\"%s\"", SIM_PLUGIN_SO);
    ck_assert_msg(memmem(pol, n, want, strlen(want)) != NULL, "policy metadata: %.300s", pol + 8);
    free(pol);
    /* tributary-eval: the file names the plug-in but does not load it ... */
    const char *e1[] = { d, "--episodes", "3", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, e1, -1), 1);
    ck_assert_msg(strstr(kit_err, "a policy file does not choose code to run; to load that plug-in, pass --env "), "%s", kit_err);
    /* ... and runs it when named, with its arguments */
    const char *e2[] = { d, "--env", SIM_PLUGIN_SO, "--env-arg", "dim=4", "--episodes", "3", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e2, -1);
    ck_assert_msg(rc == 0, "eval exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, " on Sim-v0, 3 episodes, greedy actions: return "), "%s", kit_out);
    /* 100 episodes hold 64 envs at most (waves: a simulator's envs are
     * heavy), so a plug-in that can make only 64 still runs them all; it
     * made all 100 at once before (env 64: "out of simulator slots") */
    const char *e4[] = { d, "--env", SIM_PLUGIN_SO, "--env-arg", "dim=4", "--env-arg", "create_fail_at=64",
                         "--episodes", "100", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e4, -1);
    ck_assert_msg(rc == 0, "eval exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, " on Sim-v0, 100 episodes, greedy actions: return "), "%s", kit_out);
    /* without them, the ones the policy file records (issue 35: was the
     * plug-in's default, 3 dims, which the policy does not fit) ... */
    const char *e5[] = { d, "--env", SIM_PLUGIN_SO, "--episodes", "3", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e5, -1);
    ck_assert_msg(rc == 0, "eval exit %d: %s", rc, kit_err);
    /* ... and with others the env has 3 dims, which the policy does not fit */
    const char *e3[] = { d, "--env", SIM_PLUGIN_SO, "--env-arg", "dim=3", "--episodes", "3", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, e3, -1), 1);
    ck_assert_msg(strstr(kit_err, "the policy takes 4 observations to 1 continuous actions, the env has 3 observations"),
                  "%s", kit_err);
    ck_assert_int_eq(kit_rm_rf(d), 0);
}
END_TEST

/* The newest checkpoint of the run in dir (ckpt-<update>.trib: the
 * greatest name), into out. */
static void newest_checkpoint(const char *dir, char *out, size_t cap)
{
    char sub[600];
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    DIR *d = opendir(sub);
    ck_assert_msg(d != NULL, "no %s", sub);
    struct dirent *e;
    out[0] = '\0';
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "ckpt-", 5) == 0 && (!out[0] || strcmp(e->d_name, strrchr(out, '/') + 1) > 0))
            snprintf(out, cap, "%s/%s", sub, e->d_name);
    closedir(d);
    ck_assert_msg(out[0], "no checkpoint in %s", sub);
}

/* The checkpoint at path rewritten as a run before issue 35 wrote it: its
 * config's env the plug-in's path as typed (typed), not absolute (abs). */
static void as_typed(const char *path, const char *abs, const char *typed)
{
    struct ckpt *c = ckpt_load(path);
    ck_assert_msg(c != NULL, "%s", runfiles_last_error());
    struct ckpt_section sec[64];
    ck_assert_int_le(c->n_sections, 64);
    char *cfg = NULL, from[PATH_MAX + 4], to[PATH_MAX + 4];
    snprintf(from, sizeof from, "\"%s\"", abs);
    snprintf(to, sizeof to, "\"%s\"", typed);
    for (int i = 0; i < c->n_sections; i++) {
        sec[i] = c->sections[i];
        if (strcmp(sec[i].name, "config") != 0) continue;
        char *text = strndup(sec[i].data, sec[i].size), *at = strstr(text, from);
        ck_assert_msg(at != NULL, "no %s in the checkpoint's config: %s", from, text);
        ck_assert_int_ge(asprintf(&cfg, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from)), 0);
        free(text);
        sec[i].data = cfg;
        sec[i].size = strlen(cfg);
    }
    ck_assert_ptr_nonnull(cfg);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    ck_assert_msg(ckpt_write(dir, c->step, sec, c->n_sections, 0) == 0, "%s", runfiles_last_error());
    ckpt_free(c);
    free(cfg);
}

/* A run that ended (its budget: exit 0, or 1 where a run without a target
 * still says it missed one) and wrote its policy. */
static void trained(int rc, const char *logdir)
{
    ck_assert_msg(rc == 0 || rc == 1, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    char *p = kit_must_read_in(logdir, "policy.safetensors", NULL);
    free(p);
}

/* Issue 35 (2, 9): a plug-in named by a relative path (./libsim_plugin.so)
 * with an argument (dim=4) is recorded by its absolute path (config.json,
 * the policy file), and the policy file records its arguments, so from
 * another directory the run evaluates with --env PATH alone (the path the
 * hint prints): its policy file (was: no arguments recorded, Sim-v0 opened
 * with 3 dims, "does not fit") and its checkpoint, and resumes (was:
 * refused, the checkpoint's env "./libsim_plugin.so" not the one named);
 * and an older run's checkpoint, whose env is "./libsim_plugin.so",
 * resumes from the plug-in's directory with --env ./libsim_plugin.so,
 * which is now recorded absolute (the same file). */
START_TEST(test_plugin_recorded_for_elsewhere)
{
    char d[256], logdir[300], abs_so[PATH_MAX], so_dir[PATH_MAX], rel[300], want[PATH_MAX + 200], ck[1024];
    kit_must_scratch(d, sizeof d, "test_rl_envs_where_");
    snprintf(logdir, sizeof logdir, "%s/run", d);
    ck_assert_ptr_nonnull(realpath(SIM_PLUGIN_SO, abs_so));
    snprintf(so_dir, sizeof so_dir, "%s", abs_so);
    *strrchr(so_dir, '/') = '\0';
    snprintf(rel, sizeof rel, "./%s", strrchr(abs_so, '/') + 1);
    char cwd[PATH_MAX];
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(so_dir), 0);   /* the run starts where the plug-in is: --env ./libsim_plugin.so */
    const char *a[] = { "--env", rel, "--env-arg", "dim=4", "--mode", "sync", "--observers", "1",
                        "--envs-per-observer", "4", "--steps-per-rollout", "16", "--minibatches", "2", "--epochs", "1",
                        "--max-updates", "4", "--logdir", logdir, "--quiet", NULL };
    trained(kit_run(TRIB_TRAIN_BIN, a, -1), logdir);
    ck_assert_int_eq(chdir(d), 0);   /* elsewhere from here on */
    char *cfg = kit_must_read_in(logdir, "config.json", NULL);
    snprintf(want, sizeof want, "\"env\":\t\"%s\"", abs_so);
    char want2[PATH_MAX + 200];
    snprintf(want2, sizeof want2, "\"env\":\"%s\"", abs_so);
    ck_assert_msg(strstr(cfg, want) || strstr(cfg, want2), "config.json does not record %s:\n%s", abs_so, cfg);
    free(cfg);
    size_t n;
    char *pol = kit_must_read_in(logdir, "policy.safetensors", &n);
    snprintf(want, sizeof want, "\"env_plugin\":\"%s\"", abs_so);
    ck_assert_msg(memmem(pol, n, want, strlen(want)), "policy metadata: %.600s", pol + 8);
    ck_assert_msg(memmem(pol, n, "\"env_args\":\"dim=4\"", 18), "policy metadata: %.600s", pol + 8);
    free(pol);
    /* the hint names the absolute path, and that path works from here */
    const char *e0[] = { "run", "--episodes", "2", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, e0, -1), 1);
    snprintf(want, sizeof want, "to load that plug-in, pass --env %s\n", abs_so);
    ck_assert_msg(strstr(kit_err, want), "%s", kit_err);
    const char *e1[] = { "run", "--env", abs_so, "--episodes", "3", NULL };
    int rc = kit_run(TRIB_EVAL_BIN, e1, -1);
    ck_assert_msg(rc == 0, "eval of the policy file: exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, "run/policy.safetensors on Sim-v0, 3 episodes"), "%s", kit_out);
    newest_checkpoint(logdir, ck, sizeof ck);
    const char *e2[] = { ck, "--env", abs_so, "--episodes", "3", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e2, -1);
    ck_assert_msg(rc == 0, "eval of %s: exit %d: %s", ck, rc, kit_err);
    ck_assert_msg(strstr(kit_out, " on Sim-v0, 3 episodes"), "%s", kit_out);
    /* --env-arg still replaces what the file records */
    const char *e3[] = { "run", "--env", abs_so, "--env-arg", "dim=3", "--episodes", "3", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, e3, -1), 1);
    ck_assert_msg(strstr(kit_err, "the policy takes 4 observations to 1 continuous actions, the env has 3"), "%s",
                  kit_err);
    const char *r[] = { "--resume", "run", "--env", abs_so, "--max-updates", "6", "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, r, -1);
    ck_assert_msg((rc == 0 || rc == 1) && strstr(kit_out, "tributary: resumed from "), "resume: exit %d\n%s\n%s", rc,
                  kit_out, kit_err);
    /* a checkpoint of an older run, which recorded the path as typed,
     * resumes where that path means the same file (its directory) */
    newest_checkpoint(logdir, ck, sizeof ck);
    as_typed(ck, abs_so, rel);
    ck_assert_int_eq(chdir(so_dir), 0);
    const char *r2[] = { "--resume", logdir, "--env", rel, "--max-updates", "8", "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, r2, -1);
    ck_assert_msg((rc == 0 || rc == 1) && strstr(kit_out, "tributary: resumed from "), "resume of an older run: exit "
                  "%d\n%s\n%s", rc, kit_out, kit_err);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_int_eq(kit_rm_rf(d), 0);
}
END_TEST

/* Issue 35 (2): a plug-in that cannot load without its argument (Sim-v0
 * built to need model=PATH, as a simulator needs its model): its
 * checkpoint and policy file evaluate from another directory with --env
 * alone (was: exit 2, "needs --env-arg model=PATH": tributary-eval opened
 * the plug-in with the command line's arguments before it read the
 * checkpoint, and a policy file recorded none). A relative model path is
 * the plug-in's to open, from the current directory: evaluated elsewhere,
 * the error names the arguments the file records and what to do. */
START_TEST(test_plugin_needing_args_eval_elsewhere)
{
    char d[256], model[320], abs_arg[400], run[320], run_rel[320], ck[1024], cwd[PATH_MAX], want[2600];
    kit_must_scratch(d, sizeof d, "test_rl_envs_model_");
    snprintf(model, sizeof model, "%s/sim.model", d);
    snprintf(abs_arg, sizeof abs_arg, "model=%s", model);
    snprintf(run, sizeof run, "%s/run", d);
    snprintf(run_rel, sizeof run_rel, "%s/run_rel", d);
    FILE *f = fopen(model, "w");
    ck_assert(f && fputs("4\n", f) >= 0 && fclose(f) == 0);
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(d), 0);
    const char *args[2][22] = {
        { "--env", SIM_MODEL_PLUGIN_SO, "--env-arg", abs_arg, "--mode", "sync", "--observers", "1",
          "--envs-per-observer", "4", "--steps-per-rollout", "16", "--minibatches", "2", "--epochs", "1",
          "--max-updates", "2", "--logdir", run, "--quiet", NULL },
        { "--env", SIM_MODEL_PLUGIN_SO, "--env-arg", "model=sim.model", "--mode", "sync", "--observers", "1",
          "--envs-per-observer", "4", "--steps-per-rollout", "16", "--minibatches", "2", "--epochs", "1",
          "--max-updates", "2", "--logdir", run_rel, "--quiet", NULL },
    };
    trained(kit_run(TRIB_TRAIN_BIN, args[0], -1), run);
    trained(kit_run(TRIB_TRAIN_BIN, args[1], -1), run_rel);
    ck_assert_int_eq(chdir("/"), 0);   /* elsewhere */
    newest_checkpoint(run, ck, sizeof ck);
    const char *e1[] = { ck, "--env", SIM_MODEL_PLUGIN_SO, "--episodes", "3", NULL };
    int rc = kit_run(TRIB_EVAL_BIN, e1, -1);
    ck_assert_msg(rc == 0, "eval of the checkpoint: exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, " on Sim-v0, 3 episodes"), "%s", kit_out);
    const char *e2[] = { run, "--env", SIM_MODEL_PLUGIN_SO, "--episodes", "3", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e2, -1);
    ck_assert_msg(rc == 0, "eval of the policy file: exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, "/run/policy.safetensors on Sim-v0, 3 episodes"), "%s", kit_out);
    /* the relative model path, from elsewhere: not found, said so */
    newest_checkpoint(run_rel, ck, sizeof ck);
    const char *e3[] = { run_rel, "--env", SIM_MODEL_PLUGIN_SO, "--episodes", "3", NULL };
    const char *e4[] = { ck, "--env", SIM_MODEL_PLUGIN_SO, "--episodes", "3", NULL };
    const char *const *rel[] = { e3, e4 };
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, rel[i], -1), 1);
        snprintf(want, sizeof want, "tributary-eval: plugin %s: model sim.model: No such file or directory (opened "
                 "with the arguments %s%s records: model=sim.model; a relative path in one is taken from the current "
                 "directory; --env-arg replaces them)\n", SIM_MODEL_PLUGIN_SO, i ? ck : run_rel,
                 i ? "" : "/policy.safetensors");
        ck_assert_str_eq(kit_err, want);
    }
    const char *e5[] = { run_rel, "--env", SIM_MODEL_PLUGIN_SO, "--env-arg", abs_arg, "--episodes", "3", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e5, -1);
    ck_assert_msg(rc == 0, "eval with --env-arg: exit %d: %s", rc, kit_err);
    /* a plug-in that is not there is still bad usage */
    const char *e6[] = { run, "--env", "/nonexistent/libnone.so", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, e6, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-eval: --env: plugin /nonexistent/libnone.so: No such file or directory (see "
                              "tributary-eval --help)\n");
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_int_eq(kit_rm_rf(d), 0);
}
END_TEST

START_TEST(test_plugin_errors)
{
    const char *a1[] = { "--env", SIM_PLUGIN_SO, "--env-arg", "fail=load", "--observers", "1", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a1, -1), 2);
    char want[800];
    snprintf(want, sizeof want, "tributary-train: --env: plugin %s: model sim.xml: cannot parse (fail=load) (see "
                                "tributary-train --help)\n", SIM_PLUGIN_SO);
    ck_assert_str_eq(kit_err, want);
    const char *a2[] = { "--env", SIM_PLUGIN_SO, "--env-arg", "dim", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a2, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --env-arg 'dim': expected KEY=VALUE (see tributary-train --help)\n");
    const char *a3[] = { "--env", SIM_PLUGIN_SO, "--env-arg", "dim=4", "--env-arg", "dim=5", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a3, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --env-arg dim is given twice (see tributary-train --help)\n");
    const char *a4[] = { "--env", "CartPole-v1", "--env-arg", "dim=4", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a4, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --env: CartPole-v1 takes no --env-arg (got 'dim') (see tributary-train "
                          "--help)\n");
    const char *a5[] = { "--env", SIM_PLUGIN_SO, "--env-arg", "bad key=1", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a5, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --env-arg 'bad key=1': a key is letters, digits, '_', '-' and '.' (see "
                          "tributary-train --help)\n");
}
END_TEST

/* A sync run resumed from its checkpoint makes the parameters of the run
 * that was never stopped: every env's saved state (through the spec's
 * save/load) is what it was. */
/* want: the runs' exit status (0: the env has no target; 1: missed). */
static void check_resume_exact(const char *const *args, int n_args, const char *updates_half, const char *updates_all,
                               int want)
{
    char d1[] = "/tmp/test_rl_envs_r1_XXXXXX", d2[] = "/tmp/test_rl_envs_r2_XXXXXX";
    ck_assert(mkdtemp(d1) && mkdtemp(d2));
    const char *a[48];
    int k = 0;
    for (int i = 0; i < n_args; i++) a[k++] = args[i];
    a[k++] = "--max-updates", a[k++] = updates_all, a[k++] = "--logdir", a[k++] = d1, a[k++] = "--quiet";
    a[k] = NULL;
    int rc = kit_run(TRIB_TRAIN_BIN, a, -1);
    ck_assert_msg(rc == want, "exit %d: %s", rc, kit_err);
    a[n_args + 1] = updates_half;
    a[n_args + 3] = d2;
    rc = kit_run(TRIB_TRAIN_BIN, a, -1);
    ck_assert_msg(rc == want, "exit %d: %s", rc, kit_err);
    ck_assert_msg(!same_policy(d1, d2), "half the updates left the same policy");
    a[n_args + 1] = updates_all;
    a[n_args + 2] = "--resume";
    rc = kit_run(TRIB_TRAIN_BIN, a, -1);
    ck_assert_msg(rc == want, "resume exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, "tributary: resumed from "), "%s", kit_out);
    ck_assert_msg(same_policy(d1, d2), "the resumed run differs from the uninterrupted one");
    ck_assert_int_eq(kit_rm_rf(d1), 0);
    ck_assert_int_eq(kit_rm_rf(d2), 0);
}

START_TEST(test_plugin_resume_exact)
{
    const char *args[] = { "--env", SIM_PLUGIN_SO, "--env-arg", "dim=4", "--mode", "sync", "--observers", "2",
                           "--envs-per-observer", "4", "--steps-per-rollout", "16", "--minibatches", "2",
                           "--epochs", "2", "--seed", "7" };
    check_resume_exact(args, (int)(sizeof args / sizeof args[0]), "6", "12", 0);
}
END_TEST

/* With both normalisations (issue 25): the agent's statistics and every
 * observer's discounted returns cross the checkpoint too. */
START_TEST(test_norm_resume_exact)
{
    const char *args[] = { "--env", "Pendulum-v1", "--mode", "sync", "--observers", "2", "--envs-per-observer", "4",
                           "--steps-per-rollout", "64", "--minibatches", "4", "--epochs", "2", "--seed", "11",
                           "--hidden", "32,32", "--norm-obs", "--norm-reward" };
    check_resume_exact(args, (int)(sizeof args / sizeof args[0]), "8", "16", 0);
}
END_TEST

START_TEST(test_mujoco_resume_exact)
{
    if (!env_mujoco_available()) {
        fprintf(stderr, "test_mujoco_resume_exact: skipped: built without MuJoCo\n");
        return;
    }
    /* contacts, resets and the solver's warm start all cross the checkpoint */
    const char *args[] = { "--env", "Hopper-v4", "--mode", "sync", "--observers", "2", "--envs-per-observer", "4",
                           "--steps-per-rollout", "64", "--minibatches", "4", "--epochs", "2", "--seed", "3",
                           "--hidden", "32,32" };
    check_resume_exact(args, (int)(sizeof args / sizeof args[0]), "5", "10", 1);
}
END_TEST

#ifdef MJ_PENDULUM_SO
/* A small cart-pole MJCF model (the example plug-in's kind) at path. */
static void write_cart_pole_xml(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("<mujoco><option timestep=\"0.02\" integrator=\"RK4\"/><worldbody><body name=\"cart\">"
          "<joint name=\"slider\" type=\"slide\" axis=\"1 0 0\" range=\"-1 1\" limited=\"true\"/>"
          "<geom type=\"box\" size=\"0.1 0.1 0.1\" mass=\"1\"/><body name=\"pole\">"
          "<joint name=\"hinge\" type=\"hinge\" axis=\"0 1 0\"/>"
          "<geom type=\"capsule\" fromto=\"0 0 0 0 0 0.6\" size=\"0.05\" mass=\"0.1\"/></body></body></worldbody>"
          "<actuator><motor joint=\"slider\" gear=\"100\" ctrlrange=\"-3 3\" ctrllimited=\"true\"/></actuator>"
          "</mujoco>\n", f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A resumed run of the example MuJoCo plug-in whose config.json names a
 * model path that is now a FIFO (no writer): --resume refuses it at once,
 * naming it (envs/mujoco_sdk.h's env_mj_load_xml). Before, mj_loadXML
 * opened the FIFO and waited for a writer until Ctrl-C. */
START_TEST(test_mujoco_resume_fifo_model)
{
    char d[] = "/tmp/test_rl_envs_fifo_XXXXXX";
    ck_assert(mkdtemp(d));
    char model[128], arg[160];
    snprintf(model, sizeof model, "%s/pendulum.xml", d);
    snprintf(arg, sizeof arg, "model=%s", model);
    write_cart_pole_xml(model);
    char logdir[128];
    snprintf(logdir, sizeof logdir, "%s/run", d);
    const char *a[] = { "--env", MJ_PENDULUM_SO, "--env-arg", arg, "--observers", "1", "--envs-per-observer", "2",
                        "--steps-per-rollout", "16", "--max-updates", "1", "--logdir", logdir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a, 120);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, kit_err);
    ck_assert_int_eq(unlink(model), 0);
    ck_assert_int_eq(mkfifo(model, 0600), 0);
    const char *r[] = { "--resume", logdir, "--env", MJ_PENDULUM_SO, "--max-updates", "16", "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, r, 60);
    ck_assert_msg(rc != -1, "--resume waited on the FIFO %s for 60 s (killed)", model);
    char want[512];
    snprintf(want, sizeof want, "tributary-train: --env: plugin %s: model %s: not a regular file (a FIFO) (see "
                                "tributary-train --help)\n", MJ_PENDULUM_SO, model);
    ck_assert_msg(rc == 2, "exit %d: %s", rc, kit_err);
    ck_assert_str_eq(kit_err, want);
    ck_assert_int_eq(kit_rm_rf(d), 0);
}
END_TEST
#endif

#ifdef MJ_PENDULUM_SO
/* Issue 35 (2) with the example MuJoCo plug-in (model=PATH.xml; without
 * one it loads a model of its own): trained on an absolute model path, its
 * checkpoint and its policy file evaluate from another directory with
 * --env alone, on that model; trained on a relative one, the policy file
 * opens the plug-in with it (was: with no arguments, so another model, its
 * own, without a word), which from elsewhere is not found: the error says
 * which arguments were used and what to do, and --env-arg replaces them. */
START_TEST(test_mujoco_plugin_eval_elsewhere)
{
    char d[256], model[320], arg[400], logdir[320], rel_logdir[320], ck[1024], cwd[PATH_MAX];
    kit_must_scratch(d, sizeof d, "test_rl_envs_mjwhere_");
    snprintf(model, sizeof model, "%s/pendulum.xml", d);
    snprintf(arg, sizeof arg, "model=%s", model);
    write_cart_pole_xml(model);
    snprintf(logdir, sizeof logdir, "%s/run", d);
    snprintf(rel_logdir, sizeof rel_logdir, "%s/run_rel", d);
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    ck_assert_int_eq(chdir(d), 0);
    const char *a[] = { "--env", MJ_PENDULUM_SO, "--env-arg", arg, "--observers", "1", "--envs-per-observer", "2",
                        "--steps-per-rollout", "16", "--max-updates", "1", "--logdir", logdir, "--quiet", NULL };
    trained(kit_run(TRIB_TRAIN_BIN, a, 120), logdir);
    const char *b[] = { "--env", MJ_PENDULUM_SO, "--env-arg", "model=pendulum.xml", "--observers", "1",
                        "--envs-per-observer", "2", "--steps-per-rollout", "16", "--max-updates", "1", "--logdir",
                        rel_logdir, "--quiet", NULL };
    trained(kit_run(TRIB_TRAIN_BIN, b, 120), rel_logdir);
    ck_assert_int_eq(chdir("/"), 0);   /* elsewhere */
    newest_checkpoint(logdir, ck, sizeof ck);
    const char *e1[] = { ck, "--env", MJ_PENDULUM_SO, "--episodes", "2", NULL };
    int rc = kit_run(TRIB_EVAL_BIN, e1, 120);
    ck_assert_msg(rc == 0, "eval of the checkpoint: exit %d: %s", rc, kit_err);
    const char *e2[] = { logdir, "--env", MJ_PENDULUM_SO, "--episodes", "2", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e2, 120);
    ck_assert_msg(rc == 0, "eval of the policy file: exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, "/run/policy.safetensors on "), "%s", kit_out);
    const char *e3[] = { rel_logdir, "--env", MJ_PENDULUM_SO, "--episodes", "2", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e3, 120);
    ck_assert_msg(rc == 1 && strstr(kit_err, "pendulum.xml") &&
                      strstr(kit_err, "records: model=pendulum.xml; a relative path in one is taken from the current "
                                      "directory; --env-arg replaces them)\n"),
                  "exit %d: %s", rc, kit_err);
    char abs_arg[400];   /* which --env-arg replaces */
    snprintf(abs_arg, sizeof abs_arg, "model=%s", model);
    const char *e4[] = { rel_logdir, "--env", MJ_PENDULUM_SO, "--env-arg", abs_arg, "--episodes", "2", NULL };
    rc = kit_run(TRIB_EVAL_BIN, e4, 120);
    ck_assert_msg(rc == 0, "eval with --env-arg: exit %d: %s", rc, kit_err);
    ck_assert_int_eq(chdir(cwd), 0);
    ck_assert_int_eq(kit_rm_rf(d), 0);
}
END_TEST
#endif

static Suite *rl_envs_suite(void)
{
    Suite *s = suite_create("rl_envs");
    TCase *tc = tcase_create("plugin");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_plugin_args_id_info);
    tcase_add_test(tc, test_plugin_errors);
    tcase_add_test(tc, test_plugin_recorded_for_elsewhere);
    tcase_add_test(tc, test_plugin_needing_args_eval_elsewhere);
    tcase_add_test(tc, test_plugin_resume_exact);
    tcase_add_test(tc, test_norm_resume_exact);
    suite_add_tcase(s, tc);
    tc = tcase_create("mujoco");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_mujoco_resume_exact);
    suite_add_tcase(s, tc);
#ifdef MJ_PENDULUM_SO
    tc = tcase_create("mujoco_plugin");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_mujoco_resume_fifo_model);
    tcase_add_test(tc, test_mujoco_plugin_eval_elsewhere);
    suite_add_tcase(s, tc);
#endif
    return s;
}

int main(void)
{
    return kit_run_suite(rl_envs_suite());
}
