/* What a run leaves in --logdir, read back: metrics.csv / metrics.jsonl
 * (one row per interval, the documented columns), the TensorBoard event
 * file (record by record, CRCs checked, values equal to the CSV's),
 * config.json (which --config reads back to the same run), and
 * policy.safetensors (loaded by policy_file_load and by tributary-eval). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include "common/proc.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "runfiles/tfevents.h"
#include "tensor/nn.h"
#include "kit.h"

static const char *const columns =
    "env_steps,wall_s,sps,episodes,return_mean,return_min,return_max,length_mean,running_reward,policy_loss,"
    "value_loss,entropy,approx_kl,clipfrac,explained_variance,lr,version,lag_mean,lag_max,updates,updates_per_s,"
    "eval_return,eval_length,"
    "sps_observer1,sps_observer2";

/* Every scalar of the run's event file in dir (there must be one), in
 * the file's order; their count (the caller frees *sc). */
static int run_scalars(const char *dir, struct tfevents_scalar **sc)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char events[600] = "";
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) snprintf(events, sizeof events, "%s/%s", dir, e->d_name);
    closedir(d);
    ck_assert_msg(events[0], "no event file in %s", dir);
    int n = 0;
    ck_assert_msg(tfevents_read_scalars(events, sc, &n) == 0, "%s", runfiles_last_error());
    return n;
}

START_TEST(test_logdir_files)
{
    char dir[] = "/tmp/test_rl_logdir_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--preset", "ppo-fast", "--observers", "2", "--envs-per-observer", "8",
                           "--max-steps", "12000", "--log-every", "0.05", "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 1, "exit %d\n%s\n%s", rc, kit_out, kit_err);
    /* CSV: the header, then rows whose env_steps grow */
    char *csv = kit_must_read_in(dir, "metrics.csv", NULL);
    ck_assert_msg(strncmp(csv, columns, strlen(columns)) == 0 && csv[strlen(columns)] == '\n', "header: %.400s", csv);
    int rows = 0;
    double last_steps = -1, csv_return = NAN, csv_steps = 0;
    for (char *line = strchr(csv, '\n') + 1; *line; line = strchr(line, '\n') + 1) {
        double steps = strtod(line, NULL);
        ck_assert(steps >= last_steps);
        last_steps = steps;
        /* column 5 is return_mean */
        const char *p = line;
        for (int i = 0; i < 4; i++) p = strchr(p, ',') + 1;
        if (*p != ',') {
            csv_return = strtod(p, NULL);
            csv_steps = steps;
        }
        rows++;
    }
    /* a row per 0.05 s (after the iteration that ends it) and the last: a
     * release build on a quiet box runs the 12k steps in ~0.5 s */
    ck_assert_msg(rows >= 2, "%d rows", rows);
    ck_assert_msg(last_steps >= 12000, "last row at %g steps", last_steps);
    /* JSONL: the same rows, the same keys, nulls for what does not apply */
    char *jsonl = kit_must_read_in(dir, "metrics.jsonl", NULL);
    int jrows = 0;
    for (char *line = jsonl; *line; jrows++) {
        char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        cJSON *o = cJSON_Parse(line);
        ck_assert_msg(o != NULL, "bad JSON line %s", line);
        ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "env_steps")));
        ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "running_reward")));
        ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "sps_observer2")));
        /* sync mode: no policy lag */
        ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "lag_mean")) && cJSON_IsNull(cJSON_GetObjectItem(o, "lag_max")));
        ck_assert_int_eq(cJSON_GetArraySize(o), 25);   /* the 23 fixed columns and 2 observers' */
        cJSON_Delete(o);
        line = nl + 1;
    }
    ck_assert_int_eq(jrows, rows);
    /* the event file: every record's CRCs, and return_mean equal to the CSV's */
    struct tfevents_scalar *sc = NULL;
    int n = run_scalars(dir, &sc);
    int found = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(sc[i].tag, "charts/episodic_return_mean100") == 0 && sc[i].step == (int64_t)csv_steps) {
            ck_assert_float_eq_tol(sc[i].value, (float)csv_return, 1e-4f * fabsf((float)csv_return) + 1e-6f);
            found++;
        }
    ck_assert_msg(found == 1, "charts/episodic_return_mean100 at step %g found %d times among %d scalars", csv_steps,
                  found, n);
    /* tags grouped as CleanRL's: charts/ and losses/ */
    static const char *const want_tags[] = { "charts/SPS", "charts/episodic_length_mean100", "charts/learning_rate",
                                             "losses/policy_loss", "losses/value_loss", "losses/entropy",
                                             "losses/approx_kl", "losses/clipfrac", "losses/explained_variance",
                                             "observers/sps_observer2", NULL };
    for (int t = 0; want_tags[t]; t++) {
        int k = 0;
        while (k < n && strcmp(sc[k].tag, want_tags[t]) != 0) k++;
        ck_assert_msg(k < n, "no scalar tagged %s", want_tags[t]);
    }
    for (int k = 0; k < n; k++)
        ck_assert_msg(strncmp(sc[k].tag, "charts/", 7) == 0 || strncmp(sc[k].tag, "losses/", 7) == 0 ||
                          strncmp(sc[k].tag, "observers/", 10) == 0, "ungrouped tag %s", sc[k].tag);
    tfevents_scalars_free(sc, n);
    /* config.json is a --config file that gives the same run */
    char cfgpath[600];
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)(strchr(kit_out, '\n') - kit_out), kit_out);
    char *budget = strstr(first, "; budget ");   /* the one flag the --config run changes */
    ck_assert_ptr_nonnull(budget);
    *budget = '\0';
    const char *args2[] = { "--config", cfgpath, "--max-steps", "10", "--logdir", "", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args2, -1), 1);
    ck_assert_msg(strncmp(kit_out, first, strlen(first)) == 0, "--config run:\n%s\nfirst run:\n%s", kit_out, first);
    /* the policy: loads, and evaluates */
    char pol[600];
    snprintf(pol, sizeof pol, "%s/policy.safetensors", dir);
    struct policy_arch a;
    char env[64];
    struct nn_module *actor = NULL, *critic = NULL;
    ck_assert_msg(policy_file_load(pol, &a, env, sizeof env, &actor, &critic) == 0, "%s", runfiles_last_error());
    ck_assert_str_eq(env, "CartPole-v1");
    ck_assert(a.obs_dim == 4 && a.act_dim == 2 && !a.gaussian && a.value_head && a.n_hidden == 2 && a.tanh);
    ck_assert_int_eq(actor->n_params, 6);
    ck_assert_int_eq(critic->n_params, 6);
    nn_module_free(actor);
    nn_module_free(critic);
    const char *eargs[] = { pol, "--episodes", "5", "--json", NULL };
    rc = kit_run(TRIB_EVAL_BIN, eargs, -1);
    ck_assert_msg(rc == 0, "eval exit %d: %s", rc, kit_err);
    cJSON *o = cJSON_Parse(kit_out);
    ck_assert_msg(o != NULL, "%s", kit_out);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "episodes")->valueint, 5);
    double ret = cJSON_GetObjectItem(o, "return_mean")->valuedouble;
    ck_assert(ret >= 8);
    cJSON_Delete(o);
    /* the run's directory evaluates its policy.safetensors */
    const char *dargs[] = { dir, "--episodes", "5", "--json", NULL };
    rc = kit_run(TRIB_EVAL_BIN, dargs, -1);
    ck_assert_msg(rc == 0, "eval of %s: exit %d: %s", dir, rc, kit_err);
    o = cJSON_Parse(kit_out);
    ck_assert_ptr_nonnull(o);
    ck_assert_double_eq(cJSON_GetObjectItem(o, "return_mean")->valuedouble, ret);
    cJSON_Delete(o);
    /* an unknown --env is bad usage */
    const char *bargs[] = { pol, "--env", "Nope-v0", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, bargs, -1), 2);
    /* the run's last checkpoint evaluates to the same */
    char ckdir[700], ck[1024] = "";
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", dir);
    DIR *cd = opendir(ckdir);
    ck_assert_ptr_nonnull(cd);
    struct dirent *ce;
    while ((ce = readdir(cd)))
        if (strncmp(ce->d_name, "ckpt-", 5) == 0) snprintf(ck, sizeof ck, "%s/%s", ckdir, ce->d_name);
    closedir(cd);
    const char *cargs[] = { ck, "--episodes", "5", "--json", NULL };
    rc = kit_run(TRIB_EVAL_BIN, cargs, -1);
    ck_assert_msg(rc == 0, "eval of %s: exit %d: %s", ck, rc, kit_err);
    o = cJSON_Parse(kit_out);
    ck_assert_ptr_nonnull(o);
    ck_assert_double_eq(cJSON_GetObjectItem(o, "return_mean")->valuedouble, ret);
    cJSON_Delete(o);
    free(csv);
    free(jsonl);
    kit_rm_rf(dir);
}
END_TEST

START_TEST(test_eval_errors)
{
    const char *a1[] = { "/nonexistent/policy.safetensors", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, a1, -1), 1);
    ck_assert_msg(strstr(kit_err, "/nonexistent/policy.safetensors") != NULL, "%s", kit_err);
    const char *a2[] = { "--episodes", "0", "x", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, a2, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-eval: --episodes must be an integer in 1..100000, not '0' (see tributary-eval --help)\n");
    const char *a3[] = { NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, a3, -1), 2);
    const char *a4[] = { "--help", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, a4, -1), 0);
    ck_assert_ptr_nonnull(strstr(kit_out, "Usage: tributary-eval"));
}
END_TEST

START_TEST(test_config_file_errors)
{
    char path[] = "/tmp/test_rl_cfg_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    const char *bad = "{\"lr\": 0.001, \"bogus_key\": 1}";
    ck_assert(write(fd, bad, strlen(bad)) == (ssize_t)strlen(bad));
    close(fd);
    const char *args[] = { "--config", path, NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args, -1), 2);
    char want[256];
    snprintf(want, sizeof want, "tributary-train: --config %s: unknown key 'bogus_key' (see tributary-train --help)\n", path);
    ck_assert_str_eq(kit_err, want);
    unlink(path);
}
END_TEST

static int files_equal(const char *a, const char *b)
{
    char *x = kit_must_read_in(a, "policy.safetensors", NULL), *y = kit_must_read_in(b, "policy.safetensors", NULL);
    int eq = strcmp(x, y) == 0;   /* the header, as text, must match too */
    FILE *f = fopen(a, "r");
    (void)f;
    free(x);
    free(y);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/policy.safetensors", a);
    snprintf(pb, sizeof pb, "%s/policy.safetensors", b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    ck_assert(fa && fb);
    int ca, cb;
    long n = 0;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
        n++;
    } while (ca == cb && ca != EOF);
    fclose(fa);
    fclose(fb);
    return eq && ca == cb && n > 1000;
}

/* A sync run is bit-reproducible for a seed (4 observers whose calls
 * interleave differently each time), and a run resumed from a checkpoint
 * ends bit-identical to an uninterrupted one, whether resumed with --resume
 * DIR alone (its flags restored from DIR/config.json, the budget extended)
 * or with every flag given again. */
START_TEST(test_reproducible_and_resume)
{
    char d1[] = "/tmp/test_rl_rep1_XXXXXX", d2[] = "/tmp/test_rl_rep2_XXXXXX", d3[] = "/tmp/test_rl_rep3_XXXXXX";
    char d4[] = "/tmp/test_rl_rep4_XXXXXX";
    ck_assert(mkdtemp(d1) && mkdtemp(d2) && mkdtemp(d3) && mkdtemp(d4));
    const char *a1[] = { "--observers", "4", "--envs-per-observer", "8", "--seed", "11", "--max-updates", "48",
                         "--logdir", d1, "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a1, -1), 1);
    a1[9] = d2;
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a1, -1), 1);
    ck_assert_msg(files_equal(d1, d2), "two runs of one seed differ");
    const char *a3[] = { "--observers", "4", "--envs-per-observer", "8", "--seed", "11", "--max-updates", "24",
                         "--logdir", d3, "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a3, -1), 1);
    ck_assert_msg(!files_equal(d1, d3), "24 and 48 updates left the same policy");
    a3[9] = d4;
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a3, -1), 1);
    /* with every flag again */
    const char *a4[] = { "--observers", "4", "--envs-per-observer", "8", "--seed", "11", "--max-updates", "48",
                         "--resume", d4, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a4, -1);
    ck_assert_msg(rc == 1, "resume exit %d: %s", rc, kit_err);
    ck_assert_msg(files_equal(d1, d4), "the run resumed with every flag differs from the uninterrupted one");
    /* with none but the budget: the flags come from d3/config.json */
    const char *a4b[] = { "--resume", d3, "--max-updates", "48", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a4b, -1);
    ck_assert_msg(rc == 1, "resume exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_out, "tributary: resumed from ") && strstr(kit_out, "ckpt-000000000024.trib: "), "%s", kit_out);
    ck_assert_msg(files_equal(d1, d3), "the run resumed with --resume alone differs from the uninterrupted one");
    /* a run that is already at its budget says so */
    const char *a4c[] = { "--resume", d4, NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a4c, -1);
    ck_assert_msg(rc == 1, "resume exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_err, "agent: the resumed run has already reached --max-updates 48 (at 48 updates); give a "
                              "larger one to train on\n"), "%s", kit_err);
    /* metrics were appended: rows from both halves, one header */
    char *csv = kit_must_read_in(d3, "metrics.csv", NULL);
    ck_assert_int_eq(strstr(csv + 1, "env_steps,") == NULL, 1);
    free(csv);

    /* the newest checkpoint truncated: the older one is used, with a warning naming it */
    char path[700];
    snprintf(path, sizeof path, "%s/checkpoints/ckpt-000000000048.trib", d3);
    ck_assert_int_eq(truncate(path, 100), 0);
    const char *a5[] = { "--observers", "4", "--envs-per-observer", "8", "--seed", "11", "--max-updates", "32",
                         "--resume", d3, "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a5, -1);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, kit_err);
    ck_assert_msg(strstr(kit_err, "ckpt-000000000048.trib") != NULL, "no warning about the truncated file:\n%s", kit_err);
    ck_assert_msg(strstr(kit_out, "ckpt-000000000024.trib: 1536 env steps, 24 updates") != NULL, "%s", kit_out);
    /* an incompatible configuration is refused, naming the flag */
    const char *a6[] = { "--observers", "2", "--envs-per-observer", "8", "--resume", d3, "--quiet", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a6, -1);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(kit_err, "was made with --observers 4, this run has 2") != NULL, "%s", kit_err);
    /* nothing to resume */
    const char *a7[] = { "--resume", "/nonexistent-logdir", "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a7, -1), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --resume /nonexistent-logdir: no run to resume there (no config.json or "
                          "checkpoints in /nonexistent-logdir) (see tributary-train --help)\n");
    kit_rm_rf(d1);
    kit_rm_rf(d2);
    kit_rm_rf(d3);
    kit_rm_rf(d4);
}
END_TEST

/* REINFORCE's metrics rows carry its real policy loss (they carried 0),
 * and nulls for the figures it has not (value loss, entropy, KL, clip
 * fraction, explained variance). */
START_TEST(test_reinforce_metrics)
{
    char dir[] = "/tmp/test_rl_rfm_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--preset", "pytorch-rl-example", "--observers", "2", "--max-steps", "3000",
                           "--log-every", "0.1", "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, kit_err);
    char *jsonl = kit_must_read_in(dir, "metrics.jsonl", NULL);
    int rows = 0, nonzero = 0;
    for (char *line = jsonl; *line; rows++) {
        char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        cJSON *o = cJSON_Parse(line);
        ck_assert_ptr_nonnull(o);
        const cJSON *pl = cJSON_GetObjectItem(o, "policy_loss");
        if (cJSON_IsNumber(pl) && pl->valuedouble != 0) nonzero++;
        static const char *const none[] = { "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance",
                                            "lag_mean", NULL };
        for (int i = 0; none[i]; i++)
            ck_assert_msg(cJSON_IsNull(cJSON_GetObjectItem(o, none[i])), "%s in a REINFORCE row: %s", none[i], line);
        cJSON_Delete(o);
        line = nl + 1;
    }
    ck_assert_msg(rows >= 2 && nonzero == rows, "%d of %d rows with a non-zero policy loss", nonzero, rows);
    free(jsonl);
    kit_rm_rf(dir);
}
END_TEST

/* One run per directory: a --logdir that holds a run is refused (status
 * 2, naming the choices) before anything starts; --overwrite replaces the
 * old run's files (its checkpoints gone, not mixed with the new ones); a
 * directory with only other files is taken. */
START_TEST(test_logdir_refused)
{
    char dir[] = "/tmp/test_rl_refuse_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char other[600];
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    FILE *f = fopen(other, "w");
    ck_assert_ptr_nonnull(f);
    fputs("mine\n", f);
    fclose(f);
    const char *a1[] = { "--observers", "1", "--envs-per-observer", "8", "--epochs", "1", "--minibatches", "1",
                         "--max-updates", "6", "--logdir", dir,
                         "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, a1, -1);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, kit_err);
    rc = kit_run(TRIB_TRAIN_BIN, a1, -1);
    ck_assert_int_eq(rc, 2);
    char want[1024];
    snprintf(want, sizeof want,
             "tributary-train: --logdir %s already holds a run (config.json); continue it with --resume %s, write "
             "this run to a new directory, or pass --overwrite to replace it (see tributary-train --help)\n",
             dir, dir);
    ck_assert_str_eq(kit_err, want);
    ck_assert_str_eq(kit_out, "");
    /* --overwrite: the old run's checkpoint (6 updates) is gone, the user's file kept */
    const char *a2[] = { "--observers", "1", "--envs-per-observer", "8", "--epochs", "1", "--minibatches", "1",
                         "--max-updates", "3", "--logdir", dir,
                         "--quiet", "--overwrite", NULL };
    rc = kit_run(TRIB_TRAIN_BIN, a2, -1);
    ck_assert_msg(rc == 1, "exit %d: %s", rc, kit_err);
    char ck[700];
    snprintf(ck, sizeof ck, "%s/checkpoints/ckpt-000000000006.trib", dir);
    ck_assert_msg(access(ck, F_OK) != 0, "the old run's checkpoint is still there");
    snprintf(ck, sizeof ck, "%s/checkpoints/ckpt-000000000003.trib", dir);
    ck_assert_msg(access(ck, F_OK) == 0, "no checkpoint of the new run");
    ck_assert_int_eq(access(other, F_OK), 0);
    /* --overwrite and --resume of the same directory contradict each other */
    const char *a3[] = { "--resume", dir, "--overwrite", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a3, -1), 2);
    snprintf(want, sizeof want,
             "tributary-train: --overwrite starts a new run; it does not go with --resume %s (see tributary-train "
             "--help)\n", dir);
    ck_assert_str_eq(kit_err, want);
    unlink(other);
    kit_rm_rf(dir);
}
END_TEST

/* An independent reading of policy.safetensors (8-byte length, JSON
 * header, raw f32 data) and a plain float64 forward of the actor on fixed
 * inputs, against the nn modules' forward (the agent's code). */
START_TEST(test_export_independent_reader)
{
    char dir[] = "/tmp/test_rl_export_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[] = { "--observers", "1", "--envs-per-observer", "4", "--max-updates", "8", "--logdir", dir,
                           "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args, -1), 1);
    char path[700];
    snprintf(path, sizeof path, "%s/policy.safetensors", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static unsigned char b[1 << 20];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];   /* little-endian */
    ck_assert(hl % 8 == 0 && 8 + hl <= n);
    char *hjson = strndup((char *)b + 8, hl);
    cJSON *h = cJSON_Parse(hjson);
    ck_assert_ptr_nonnull(h);
    const unsigned char *data = b + 8 + hl;
    size_t data_len = n - 8 - hl, covered = 0;
    /* W0 [64,4] b0 [64] W1 [64,64] b1 [64] W2 [2,64] b2 [2] */
    const char *names[6] = { "actor.0.weight", "actor.0.bias", "actor.2.weight", "actor.2.bias", "actor.4.weight",
                             "actor.4.bias" };
    const float *w[6];
    for (int i = 0; i < 6; i++) {
        cJSON *e = cJSON_GetObjectItem(h, names[i]);
        ck_assert_msg(e != NULL, "no %s", names[i]);
        ck_assert_str_eq(cJSON_GetObjectItem(e, "dtype")->valuestring, "F32");
        cJSON *sh = cJSON_GetObjectItem(e, "shape"), *off = cJSON_GetObjectItem(e, "data_offsets");
        size_t numel = 1;
        for (int k = 0; k < cJSON_GetArraySize(sh); k++) numel *= (size_t)cJSON_GetArrayItem(sh, k)->valueint;
        size_t s0 = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, s1 = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        ck_assert(s1 - s0 == numel * 4 && s1 <= data_len);
        w[i] = (const float *)(data + s0);
        covered += s1 - s0;
    }
    for (cJSON *e = h->child; e; e = e->next)
        if (strncmp(e->string, "critic.", 7) == 0) {
            cJSON *off = cJSON_GetObjectItem(e, "data_offsets");
            covered += (size_t)cJSON_GetArrayItem(off, 1)->valuedouble - (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        }
    ck_assert_uint_eq(covered, data_len);   /* every byte belongs to a tensor */
    struct policy_arch a;
    char env[64];
    struct nn_module *actor;
    ck_assert_int_eq(policy_file_load(path, &a, env, sizeof env, &actor, NULL), 0);
    const float inputs[3][4] = { { 0.01f, -0.2f, 0.03f, 0.4f }, { -1.0f, 0.5f, 0.1f, -0.3f }, { 0, 0, 0, 0 } };
    int64_t shape[2] = { 3, 4 };
    struct tensor *x = tensor_from_f32(2, shape, &inputs[0][0]);
    struct tensor *y = nn_forward1(actor, x);
    ck_assert_ptr_nonnull(y);
    for (int r = 0; r < 3; r++) {
        double h1[64], h2[64];
        for (int j = 0; j < 64; j++) {
            double acc = w[1][j];
            for (int k = 0; k < 4; k++) acc += (double)w[0][j * 4 + k] * inputs[r][k];
            h1[j] = tanh(acc);
        }
        for (int j = 0; j < 64; j++) {
            double acc = w[3][j];
            for (int k = 0; k < 64; k++) acc += (double)w[2][j * 64 + k] * h1[k];
            h2[j] = tanh(acc);
        }
        for (int j = 0; j < 2; j++) {
            double acc = w[5][j];
            for (int k = 0; k < 64; k++) acc += (double)w[4][j * 64 + k] * h2[k];
            float got = ((const float *)tensor_data(y))[r * 2 + j];
            ck_assert_msg(fabs(got - acc) <= 1e-5 + 1e-5 * fabs(acc), "row %d logit %d: %g vs %g", r, j, got, acc);
        }
    }
    tensor_free(x);
    tensor_free(y);
    nn_module_free(actor);
    cJSON_Delete(h);
    free(hjson);
    kit_rm_rf(dir);
}
END_TEST

/* kill -9 while checkpoints are being written (one per update) leaves one
 * that loads; a bit-flipped newest checkpoint is refused with a message and
 * the previous one used. */
START_TEST(test_checkpoint_kill_and_bitflip)
{
    char dir[] = "/tmp/test_rl_kill_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *argv[] = { TRIB_TRAIN_BIN, "--observers", "2", "--envs-per-observer", "8", "--checkpoint-every", "1",
                           "--max-steps", "100000000", "--logdir", dir, "--quiet", NULL };
    for (int round = 0; round < 3; round++) {
        struct proc_group g;
        proc_group_init(&g);
        ck_assert_int_eq(proc_spawn(&g, argv, PROC_DISCARD, PROC_DISCARD), 0);
        /* wait until checkpoints appear, then kill at an arbitrary moment */
        char ck[700];
        snprintf(ck, sizeof ck, "%s/checkpoints", dir);
        for (int i = 0; i < 600; i++) {
            DIR *d = opendir(ck);
            int files = 0;
            struct dirent *e;
            while (d && (e = readdir(d)))
                files += strncmp(e->d_name, "ckpt-", 5) == 0;
            if (d) closedir(d);
            if (files >= 2) break;
            usleep(50000);
        }
        usleep(1000 * (37 * round + 11));
        proc_group_deinit(&g);   /* SIGKILL; the observers die with it (PDEATHSIG) */
        const char *resume[] = { "--observers", "2", "--envs-per-observer", "8", "--max-updates", "1", "--resume", dir,
                                 "--quiet", NULL };
        int rc = kit_run(TRIB_TRAIN_BIN, resume, -1);
        ck_assert_msg(rc == 1 && strstr(kit_out, "tributary: resumed from "), "round %d: exit %d\n%s\n%s", round, rc, kit_out, kit_err);
    }
    /* flip one bit in the middle of the newest checkpoint */
    char ck[700], newest[1024] = "";
    snprintf(ck, sizeof ck, "%s/checkpoints", dir);
    DIR *d = opendir(ck);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "ckpt-", 5) == 0 && strstr(e->d_name, ".trib") && !strstr(e->d_name, ".tmp") &&
            strcmp(e->d_name, strrchr(newest, '/') ? strrchr(newest, '/') + 1 : "") > 0)
            snprintf(newest, sizeof newest, "%s/%s", ck, e->d_name);
    closedir(d);
    ck_assert(newest[0]);
    FILE *f = fopen(newest, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size / 2, SEEK_SET);
    int c = fgetc(f);
    fseek(f, size / 2, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    const char *resume[] = { "--observers", "2", "--envs-per-observer", "8", "--max-updates", "1", "--resume", dir,
                             "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, resume, -1);
    ck_assert_msg(rc == 1 && strstr(kit_out, "tributary: resumed from "), "exit %d\n%s\n%s", rc, kit_out, kit_err);
    ck_assert_msg(strstr(kit_err, strrchr(newest, '/') + 1) != NULL, "the flipped file is not named:\n%s", kit_err);
    ck_assert_msg(strstr(kit_out, strrchr(newest, '/') + 1) == NULL, "the flipped file was resumed:\n%s", kit_out);
    kit_rm_rf(dir);
}
END_TEST

/* CleanRL's meaning of charts/episodic_return and charts/episodic_length: a
 * point per finished episode, at the env step it finished (here: when its
 * report arrived, so inside its interval's env steps), its own return and
 * length; the mean of the last 100 under charts/episodic_return_mean100.
 * Checked against metrics.jsonl: each interval's new episodes are its
 * points (count and steps), and the last row's return_mean and length_mean
 * are the means of the last 100 points. */
START_TEST(test_episode_tags)
{
    char dir[] = "/tmp/test_rl_episodes_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    /* 8 envs x 16 steps a report: never more than RL_REPORT_EPISODES episodes in one */
    const char *args[] = { "--preset", "ppo-fast", "--observers", "2", "--envs-per-observer", "8", "--max-steps",
                           "20000", "--log-every", "0.05", "--logdir", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 0 || rc == 1, "exit %d\n%s\n%s", rc, kit_out, kit_err);   /* the budget (target or not) */
    char *jsonl = kit_must_read_in(dir, "metrics.jsonl", NULL);
    enum { ROWS = 4096 };
    static double steps[ROWS], episodes[ROWS];
    int rows = 0;
    double return_mean = NAN, length_mean = NAN;
    for (char *line = jsonl; *line && rows < ROWS; rows++) {
        char *nl = strchr(line, '\n');
        ck_assert_ptr_nonnull(nl);
        *nl = '\0';
        cJSON *o = cJSON_Parse(line);
        ck_assert_msg(o != NULL, "bad JSON line %s", line);
        steps[rows] = cJSON_GetObjectItem(o, "env_steps")->valuedouble;
        episodes[rows] = cJSON_GetObjectItem(o, "episodes")->valuedouble;
        return_mean = cJSON_GetObjectItem(o, "return_mean")->valuedouble;
        length_mean = cJSON_GetObjectItem(o, "length_mean")->valuedouble;
        cJSON_Delete(o);
        line = nl + 1;
    }
    ck_assert_msg(rows >= 2 && episodes[rows - 1] >= 100, "%d rows, %g episodes", rows, episodes[rows - 1]);
    struct tfevents_scalar *sc = NULL;
    int n = run_scalars(dir, &sc);
    /* the points, in the file's order: returns and lengths pair up */
    double *ret = calloc((size_t)n, sizeof *ret), *len = calloc((size_t)n, sizeof *len);
    int64_t *at = calloc((size_t)n, sizeof *at);
    int nr = 0, nl = 0, mean100 = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(sc[i].tag, "charts/episodic_return") == 0) {
            at[nr] = sc[i].step;
            ret[nr++] = sc[i].value;
        } else if (strcmp(sc[i].tag, "charts/episodic_length") == 0) {
            ck_assert_msg(nl < nr && sc[i].step == at[nl], "length %d without its return", nl);
            len[nl++] = sc[i].value;
        } else if (strcmp(sc[i].tag, "charts/episodic_return_mean100") == 0) mean100++;
    }
    ck_assert_msg(nr == (int)episodes[rows - 1] && nl == nr, "%d returns and %d lengths logged, %g episodes finished",
                  nr, nl, episodes[rows - 1]);
    ck_assert_msg(mean100 >= rows - 1, "%d charts/episodic_return_mean100 points for %d rows", mean100, rows);
    /* row k's new episodes are the points in (steps[k-1], steps[k]] */
    int p = 0;
    for (int k = 0; k < rows; k++) {
        int c = 0;
        while (p < nr && at[p] <= (int64_t)steps[k]) {
            ck_assert_msg(k == 0 || at[p] > (int64_t)steps[k - 1], "point %d at step %lld before row %d's %g", p,
                          (long long)at[p], k, steps[k - 1]);
            p++;
            c++;
        }
        ck_assert_msg(c == (int)(episodes[k] - (k ? episodes[k - 1] : 0)), "row %d (%g steps): %d points, %g episodes",
                      k, steps[k], c, episodes[k] - (k ? episodes[k - 1] : 0));
    }
    /* CartPole pays 1 a step: each episode's return is its length, a whole number in 1..500 */
    double rs = 0, ls = 0;
    for (int i = 0; i < nr; i++) {
        ck_assert_msg(ret[i] == len[i] && ret[i] >= 1 && ret[i] <= 500 && ret[i] == floor(ret[i]),
                      "episode %d: return %g, length %g", i, ret[i], len[i]);
        if (i >= nr - 100) {
            rs += ret[i];
            ls += len[i];
        }
    }
    ck_assert_msg(fabs(rs / 100 - return_mean) < 1e-6 * return_mean && fabs(ls / 100 - length_mean) < 1e-6 * length_mean,
                  "the last 100 points' means %g, %g; the last row's %g, %g", rs / 100, ls / 100, return_mean,
                  length_mean);
    free(ret);
    free(len);
    free(at);
    tfevents_scalars_free(sc, n);
    free(jsonl);
    kit_rm_rf(dir);
}
END_TEST

KIT_MAIN("rl_outputs",
         { "outputs", 240, .tests = { test_logdir_files, test_eval_errors, test_config_file_errors,
           test_reproducible_and_resume, test_logdir_refused, test_reinforce_metrics, test_export_independent_reader,
           test_checkpoint_kill_and_bitflip } },
         { "episodes", 120, .tests = { test_episode_tags } })
