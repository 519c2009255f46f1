/* Evaluation while training (--eval-every, issue 25): real tributary-train
 * runs whose agent evaluates its policy (greedy, envs seeded --seed + 1000)
 * every N env steps (at the end of the update whose steps cross a multiple
 * of N). Asserted: the evaluations' rows in metrics.csv (and
 * empty eval_return in the rows between them), their TensorBoard tags,
 * LOGDIR/policy_best.safetensors recording the best logged eval_return
 * and its update, tributary-eval on that file with the recorded seed and
 * episodes giving that return again, an async run's evaluations, a sync
 * run's training untouched by them (the same final policy, bit for bit),
 * a resumed run keeping its best file's record (unless no evaluation can
 * score what it records), the flags' errors, and a
 * MuJoCo env's named info in metrics.csv and TensorBoard. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "runfiles/safetensors.h"
#include "kit.h"

static void rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (unlink(path) != 0) rm_tree(path);
        }
    closedir(d);
    rmdir(dir);
}

/* metrics.csv's evaluations: the rows' eval_return (NaN where empty) and
 * updates, in order. */
struct evals {
    int rows, with, without;        /* rows; rows with an evaluation; rows without */
    double ret[512], updates[512], steps[512];   /* eval_return, updates, env_steps */
    double best;                    /* the largest eval_return logged (NaN: none) */
    double best_updates;            /* the updates of its row */
};

/* Field k of the CSV line s (its end at '\n'), copied into out. */
static void field(const char *s, int k, char *out, size_t cap)
{
    for (int i = 0; i < k && s; i++) {
        s = strpbrk(s, ",\n");
        s = s && *s == ',' ? s + 1 : NULL;
    }
    ck_assert_msg(s != NULL, "a row without field %d", k);
    size_t n = strcspn(s, ",\n");
    ck_assert(n < cap);
    memcpy(out, s, n);
    out[n] = '\0';
}

static int column(const char *header, const char *name)
{
    char f[64];
    for (int k = 0;; k++) {
        field(header, k, f, sizeof f);
        if (strcmp(f, name) == 0) return k;
    }
}

static void read_evals(const char *dir, struct evals *e)
{
    char *csv = kit_must_read_in(dir, "metrics.csv", NULL), f[64];
    memset(e, 0, sizeof *e);
    e->best = e->best_updates = NAN;
    int ce = column(csv, "eval_return"), cu = column(csv, "updates"), cs = column(csv, "env_steps");
    for (const char *line = strchr(csv, '\n') + 1; *line && e->rows < 512; line = strchr(line, '\n') + 1) {
        field(line, ce, f, sizeof f);
        e->ret[e->rows] = f[0] ? strtod(f, NULL) : NAN;
        field(line, cu, f, sizeof f);
        e->updates[e->rows] = strtod(f, NULL);
        field(line, cs, f, sizeof f);
        e->steps[e->rows] = strtod(f, NULL);
        if (isnan(e->ret[e->rows])) e->without++;
        else e->with++;
        if (!isnan(e->ret[e->rows]) && !(e->ret[e->rows] <= e->best)) {
            e->best = e->ret[e->rows];
            e->best_updates = e->updates[e->rows];
        }
        e->rows++;
    }
    free(csv);
}

/* A metadata value of dir/policy_best.safetensors (a copy in out). */
static void best_meta(const char *dir, const char *key, char *out, size_t cap)
{
    char path[600];
    snprintf(path, sizeof path, "%s/policy_best.safetensors", dir);
    struct safetensors *st = safetensors_load(path);
    ck_assert_msg(st != NULL, "%s", path);
    const char *v = safetensors_meta_get(st, key);
    ck_assert_msg(v != NULL, "%s has no metadata %s", path, key);
    snprintf(out, cap, "%s", v);
    safetensors_free(st);
}

/* The run's event file holds the tag (its records carry tags as text). */
static bool events_have(const char *dir, const char *tag)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    bool found = false;
    while (!found && (e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            size_t n;
            char *s = kit_must_read_in(dir, e->d_name, &n);
            found = memmem(s, n, tag, strlen(tag)) != NULL;
            free(s);
        }
    closedir(d);
    return found;
}

/* tributary-eval's mean return of path with the run's evaluation seed and episodes. */
static double eval_return_of(const char *path, const char *seed, const char *episodes)
{
    const char *args[] = { "--seed", seed, "--episodes", episodes, "--json", path, NULL };
    int rc = kit_run(TRIB_EVAL_BIN, args, -1);
    ck_assert_msg(rc == 0, "tributary-eval exit %d\n%s\n%s", rc, kit_out, kit_err);
    cJSON *j = cJSON_Parse(kit_out);
    ck_assert_msg(j != NULL, "not JSON: %s", kit_out);
    double r = cJSON_GetObjectItemCaseSensitive(j, "return_mean")->valuedouble;
    cJSON_Delete(j);
    return r;
}

/* The best file records the best logged evaluation, its update, the seed
 * and episodes, and tributary-eval reproduces its return from those. */
/* sync: the row's updates are the evaluation's; async: the evaluation ran
 * on a copy made at or before its row's updates. */
static void assert_best(const char *dir, const struct evals *e, bool sync)
{
    char ret[64], upd[32], seed[32], eps[16], path[600];
    best_meta(dir, "eval_return", ret, sizeof ret);
    best_meta(dir, "eval_update", upd, sizeof upd);
    best_meta(dir, "eval_seed", seed, sizeof seed);
    best_meta(dir, "eval_episodes", eps, sizeof eps);
    ck_assert_msg(strtod(ret, NULL) == e->best, "policy_best records %s, the best logged eval_return is %.17g", ret,
                  e->best);
    ck_assert_msg(sync ? strtod(upd, NULL) == e->best_updates : strtod(upd, NULL) <= e->best_updates,
                  "policy_best is of update %s, the best row's is %.0f", upd, e->best_updates);
    ck_assert_str_eq(seed, "1001");   /* --seed 1 + 1000 */
    ck_assert_str_eq(eps, "10");
    snprintf(path, sizeof path, "%s/policy_best.safetensors", dir);
    double again = eval_return_of(path, seed, eps);
    char a[32], b[32];   /* tributary-eval's JSON has %.6g */
    snprintf(a, sizeof a, "%.6g", e->best);
    snprintf(b, sizeof b, "%.6g", again);
    ck_assert_msg(strcmp(a, b) == 0, "tributary-eval gives %s, the run logged %s", b, a);
}

/* Sync on a MuJoCo env (Gaussian head): 2 x 8 envs x 16 steps make 256
 * env steps an iteration, so --eval-every 500 (env steps, issue 35: it
 * counted updates, and evaluated every other 8-update iteration at 16)
 * evaluates at the iterations whose steps cross a multiple of 500 (512,
 * 1024, 1536, ...) and the rows between (--log-every 1 ms: one each
 * iteration) have none. */
START_TEST(test_eval_sync_best)
{
    char dir[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--preset", "ppo-fast", "--env", "InvertedPendulum-v4", "--observers", "2",
                           "--envs-per-observer", "8", "--max-steps", "4000", "--eval-every", "500",
                           "--log-every", "0.001", "--logdir", dir, NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 1, "exit %d\n%s\n%s", rc, kit_out, kit_err);   /* the budget */
    ck_assert_msg(strstr(kit_out, "  eval: mean return of the greedy evaluation (--eval-every)") && strstr(kit_out, "  eval "),
                  "no eval on the progress lines:\n%s", kit_out);
    struct evals e;
    read_evals(dir, &e);
    ck_assert_msg(e.with >= 4 && e.without >= 1, "%d rows with an evaluation, %d without", e.with, e.without);
    for (int i = 0; i < e.rows; i++) {   /* where the steps crossed a multiple of 500, and only there */
        double prev = i ? e.steps[i - 1] : 0;
        bool crossed = floor(e.steps[i] / 500) > floor(prev / 500);
        ck_assert_msg(isnan(e.ret[i]) == !crossed, "row %d: env_steps %.0f (the row before: %.0f), eval_return %g", i,
                      e.steps[i], prev, e.ret[i]);
    }
    char steps[32];
    best_meta(dir, "eval_env_steps", steps, sizeof steps);
    bool of_a_row = false;
    for (int i = 0; i < e.rows; i++) of_a_row |= !isnan(e.ret[i]) && e.steps[i] == strtod(steps, NULL);
    ck_assert_msg(of_a_row && fmod(strtod(steps, NULL), 256) == 0, "policy_best's eval_env_steps %s", steps);
    ck_assert(events_have(dir, "charts/eval_return") && events_have(dir, "charts/eval_length"));
    char *jsonl = kit_must_read_in(dir, "metrics.jsonl", NULL);
    ck_assert_msg(strstr(jsonl, "\"eval_return\":null") && strstr(jsonl, "\"eval_length\":"), "%.600s", jsonl);
    free(jsonl);
    assert_best(dir, &e, true);
    rm_tree(dir);
}
END_TEST

/* Async: the agent evaluates on a thread of its own while the observers
 * update; the run still stops at its budget. */
START_TEST(test_eval_async)
{
    char dir[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--preset", "ppo-fast", "--mode", "async", "--observers", "2", "--envs-per-observer",
                           "8", "--max-updates", "64", "--eval-every", "256", "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 1, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    struct evals e;
    read_evals(dir, &e);
    ck_assert_msg(e.with >= 1, "no evaluation logged in %d rows", e.rows);
    assert_best(dir, &e, false);
    rm_tree(dir);
}
END_TEST

/* A MuJoCo env's named info (Hopper-v4: x_position, x_velocity) reaches
 * metrics.csv (info_<name>: the mean per step over the episodes that ended
 * in the row's interval) and TensorBoard (env/<name>); its evaluations too. */
START_TEST(test_env_info_mujoco)
{
    char dir[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--preset", "ppo-fast", "--env", "Hopper-v4", "--observers", "2", "--envs-per-observer",
                           "4", "--max-steps", "3000", "--eval-every", "512", "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 1, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    char *csv = kit_must_read_in(dir, "metrics.csv", NULL), f[64];
    const char *end = strchr(csv, '\n');
    const char *cols = ",info_x_position,info_x_velocity\n";
    ck_assert_msg((size_t)(end + 1 - csv) >= strlen(cols) && strncmp(end + 1 - strlen(cols), cols, strlen(cols)) == 0,
                  "header: %.*s", (int)(end - csv), csv);
    int cx = column(csv, "info_x_velocity"), with = 0;
    for (const char *line = end + 1; *line; line = strchr(line, '\n') + 1) {
        field(line, cx, f, sizeof f);
        with += f[0] != '\0' && isfinite(strtod(f, NULL));
    }
    ck_assert_msg(with >= 1, "no row has info_x_velocity:\n%.2000s", csv);
    free(csv);
    ck_assert(events_have(dir, "env/x_position") && events_have(dir, "env/x_velocity"));
    struct evals e;
    read_evals(dir, &e);
    ck_assert_msg(e.with >= 2, "%d evaluations logged", e.with);
    assert_best(dir, &e, true);
    rm_tree(dir);
}
END_TEST

/* A run that normalises its observations: its evaluations and the best
 * file apply the statistics the evaluation used (tributary-eval gives the
 * logged return again), and the final checkpoint evaluates as the final
 * policy file (both apply the run's statistics: a checkpoint's are in its
 * section 'norm'). */
START_TEST(test_eval_normalised)
{
    char dir[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--preset", "mujoco-fast", "--env", "Hopper-v4", "--envs-per-observer", "4",
                           "--steps-per-rollout", "64", "--max-steps", "6000", "--eval-every", "1024", "--logdir", dir,
                           "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 0, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    char mean[64];
    best_meta(dir, "obs_clip", mean, sizeof mean);
    ck_assert_str_eq(mean, "10");
    struct evals e;
    read_evals(dir, &e);
    ck_assert_msg(e.with >= 2, "%d evaluations logged", e.with);
    assert_best(dir, &e, true);
    char pol[600], ckdir[600], ck[900];
    snprintf(pol, sizeof pol, "%s/policy.safetensors", dir);
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", dir);
    DIR *d = opendir(ckdir);
    ck_assert_ptr_nonnull(d);
    struct dirent *de;
    ck[0] = '\0';
    while ((de = readdir(d)))   /* ckpt-<12 digits>.trib: the greatest name is the newest */
        if (strncmp(de->d_name, "ckpt-", 5) == 0 && (!ck[0] || strcmp(de->d_name, strrchr(ck, '/') + 1) > 0))
            snprintf(ck, sizeof ck, "%s/%s", ckdir, de->d_name);
    closedir(d);
    ck_assert_msg(ck[0], "no checkpoint in %s", ckdir);
    double from_file = eval_return_of(pol, "5", "4"), from_ckpt = eval_return_of(ck, "5", "4");
    ck_assert_msg(from_file == from_ckpt, "the final checkpoint evaluates to %.17g, the policy file to %.17g",
                  from_ckpt, from_file);
    rm_tree(dir);
}
END_TEST

/* The evaluations use envs, a sampling stream and a copy of the policy of
 * their own: a sync run trains as it does without them, bit for bit. */
START_TEST(test_eval_sync_unchanged)
{
    char d1[] = "/tmp/test_rl_eval_XXXXXX", d2[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(d1));
    ck_assert_ptr_nonnull(mkdtemp(d2));
    const char *a1[] = { "--preset", "ppo-fast", "--observers", "2", "--envs-per-observer", "8", "--max-updates",
                         "32", "--logdir", d1, "--quiet", NULL };
    const char *a2[] = { "--preset", "ppo-fast", "--observers", "2", "--envs-per-observer", "8", "--max-updates",
                         "32", "--eval-every", "1", "--logdir", d2, "--quiet", NULL };
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, a1, -1) == 1, "%s\n%s", kit_out, kit_err);
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, a2, -1) == 1, "%s\n%s", kit_out, kit_err);
    size_t n1, n2;
    char *p1 = kit_must_read_in(d1, "policy.safetensors", &n1), *p2 = kit_must_read_in(d2, "policy.safetensors", &n2);
    ck_assert_msg(n1 == n2 && memcmp(p1, p2, n1) == 0, "the final policies differ with --eval-every 1");
    char best[600];   /* no --eval-every: no best file */
    snprintf(best, sizeof best, "%s/policy_best.safetensors", d1);
    ck_assert_int_eq(access(best, F_OK), -1);
    free(p1);
    free(p2);
    rm_tree(d1);
    rm_tree(d2);
}
END_TEST

/* A first session into dir (ppo-fast, 2 x 8 envs, max_updates updates,
 * an evaluation every 256 env steps: every 8-update iteration), then its best file's eval_return rewritten in
 * place by fill (its len characters: the same length, so the header stays
 * valid). path gets the best file's path. */
static void first_session_best_rewritten(const char *dir, const char *max_updates, void (*fill)(char *v, size_t len),
                                         char *path, size_t cap)
{
    const char *first[] = { "--preset", "ppo-fast", "--observers", "2", "--envs-per-observer", "8", "--max-updates",
                            max_updates, "--eval-every", "256", "--logdir", dir, "--quiet", NULL };
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, first, -1) == 1, "%s\n%s", kit_out, kit_err);
    snprintf(path, cap, "%s/policy_best.safetensors", dir);
    size_t n;
    char *s = kit_must_read_in(dir, "policy_best.safetensors", &n);
    char *v = memmem(s, n, "\"eval_return\":\"", 15);
    ck_assert_ptr_nonnull(v);
    v += 15;
    fill(v, strcspn(v, "\""));
    FILE *f = fopen(path, "wb");
    ck_assert(f && fwrite(s, 1, n, f) == n && fclose(f) == 0);
    free(s);
}

/* All nines: a record no evaluation beats. */
static void fill_nines(char *v, size_t len) { memset(v, '9', len); }

/* A resumed run reads the best so far from its best file: a later
 * evaluation that does not beat it leaves the file alone. The file's
 * record is raised beyond reach (same length, so the header stays valid). */
START_TEST(test_eval_resume_keeps_best)
{
    char dir[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[600];
    first_session_best_rewritten(dir, "16", fill_nines, path, sizeof path);
    char before[64], after[64];
    best_meta(dir, "eval_return", before, sizeof before);
    const char *resume[] = { "--resume", dir, "--max-updates", "32", "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, resume, -1);
    ck_assert_msg(rc == 1 && strstr(kit_out, "tributary: resumed from "), "exit %d\n%s\n%s", rc, kit_out, kit_err);
    struct evals e;
    read_evals(dir, &e);
    ck_assert_msg(e.with >= 3, "%d evaluations logged over both sessions", e.with);
    best_meta(dir, "eval_return", after, sizeof after);
    ck_assert_str_eq(after, before);
    rm_tree(dir);
}
END_TEST

/* 1e308 behind leading zeros, or 9e99 where only 4 characters fit. */
static void fill_huge(char *v, size_t len)
{
    const char *huge = len >= 5 ? "1e308" : "9e99";
    ck_assert_msg(len >= 4, "eval_return '%.*s' is too short to rewrite", (int)len, v);
    memset(v, '0', len);
    memcpy(v + len - strlen(huge), huge, strlen(huge));
}

/* A best file that records what no evaluation of the env can score (issue
 * 33: eval_return 1e308 blocked every later best): the resumed run says so
 * and its next evaluation replaces it. CartPole's episodes are at most 500
 * steps of float rewards: |return| <= 500 x FLT_MAX. */
START_TEST(test_eval_resume_implausible_best)
{
    char dir[] = "/tmp/test_rl_eval_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[600];
    first_session_best_rewritten(dir, "8", fill_huge, path, sizeof path);
    char before[64], after[64];
    best_meta(dir, "eval_return", before, sizeof before);
    ck_assert_msg(strtod(before, NULL) >= 9e99, "%s", before);
    const char *resume[] = { "--resume", dir, "--max-updates", "16", "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, resume, -1);
    ck_assert_msg(rc == 1 && strstr(kit_out, "tributary: resumed from "), "exit %d\n%s\n%s", rc, kit_out, kit_err);
    char want[900];
    snprintf(want, sizeof want, "agent: %s: its eval_return %g is not an evaluation's (|return| <= %g: CartPole-v1's "
             "episodes of at most 500 steps of float rewards); the next evaluation replaces it\n", path,
             strtod(before, NULL), 500 * (double)FLT_MAX);
    ck_assert_msg(strstr(kit_err, want), "'%s' not on stderr:\n%s", want, kit_err);
    best_meta(dir, "eval_return", after, sizeof after);
    ck_assert_msg(strcmp(after, before) != 0 && fabs(strtod(after, NULL)) <= 500, "policy_best records %s after the "
                  "resumed run's evaluation (was %s)\n%s", after, before, kit_err);
    char upd[32];
    best_meta(dir, "eval_update", upd, sizeof upd);
    ck_assert_str_eq(upd, "16");
    rm_tree(dir);
}
END_TEST

START_TEST(test_eval_flag_errors)
{
    const char *a1[] = { "--eval-every", "-1", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a1, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --eval-every must be >= 0 (see tributary-train --help)\n");
    const char *a2[] = { "--eval-episodes", "0", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a2, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --eval-episodes must be in 1..100000, not 0 (see tributary-train --help)\n");
}
END_TEST

KIT_MAIN("rl_eval_train",
         { "eval_train", 300, .tests = { test_eval_flag_errors, test_eval_sync_best, test_eval_async,
           test_env_info_mujoco, test_eval_normalised, test_eval_sync_unchanged, test_eval_resume_keeps_best,
           test_eval_resume_implausible_best } })
