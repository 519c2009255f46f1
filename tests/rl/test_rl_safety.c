/* The safety net of the RL layer's redesign (issue 26): for each algorithm
 * x mode, a short fixed-seed run of tributary-train, pinned by what the tree
 * before the redesign computed (tests/rl/fixtures/safety/: made by
 * `test_rl_safety --write DIR` on that tree). A sync run is bit-reproducible,
 * so its policy's parameters (a hash of every tensor's bytes) and its first
 * progress rows (the columns that do not depend on time) must come out the
 * same, bit for bit. An async run is not reproducible: it must end as asked
 * with progress rows (learning is the learning tests' business).
 *
 * Besides, an old run directory (config.json and a checkpoint written by that
 * tree, tests/rl/fixtures/safety/old_run) must still resume, and its resumed
 * sync run must end with the parameters the old tree's straight run had. */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/proc.h"
#include "kit.h"

#define MAX_ROWS 3                  /* progress rows pinned per run */

/* The columns of metrics.csv that a sync run computes without the clock. */
static const char *const pinned_cols[] = {
    "env_steps", "episodes", "return_mean", "return_min", "return_max", "length_mean", "running_reward",
    "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "lr", "version",
    "updates", NULL,
};

struct safety_run {
    const char *name;
    bool sync;                      /* bit-reproducible: pinned exactly */
    const char *args[24];
};

#define COMMON "--seed", "3", "--device", "cpu", "--log-every", "0.000001", "--quiet"
static const struct safety_run runs[] = {
    { "reinforce-sync", true, { "--preset", "pytorch-rl-example", "--mode", "sync", "--observers", "2",
                                "--max-updates", "12", COMMON, NULL } },
    { "reinforce-async", false, { "--preset", "pytorch-rl-example", "--mode", "async", "--observers", "2",
                                  "--max-updates", "12", COMMON, NULL } },
    { "a2c-sync", true, { "--preset", "a2c", "--mode", "sync", "--max-updates", "30", COMMON, NULL } },
    { "a2c-async", false, { "--preset", "a2c", "--mode", "async", "--max-updates", "30", COMMON, NULL } },
    { "ppo-sync", true, { "--preset", "ppo-fast", "--mode", "sync", "--observers", "2", "--envs-per-observer",
                          "8", "--hidden", "32,32", "--max-updates", "24", COMMON, NULL } },
    { "ppo-async", false, { "--preset", "ppo-fast", "--mode", "async", "--observers", "2", "--envs-per-observer",
                            "8", "--hidden", "32,32", "--max-updates", "24", COMMON, NULL } },
    { "ppo-gaussian-sync", true, { "--preset", "pendulum", "--mode", "sync", "--steps-per-rollout", "64",
                                   "--minibatches", "2", "--epochs", "2", "--max-updates", "16", COMMON, NULL } },
    { "ppo-vtrace-async", false, { "--preset", "ppo-fast", "--mode", "async", "--vtrace", "--observers", "2",
                                   "--envs-per-observer", "8", "--max-updates", "24", COMMON, NULL } },
    { "a2c-vtrace-async", false, { "--preset", "a2c", "--mode", "async", "--vtrace", "--max-updates", "30",
                                   COMMON, NULL } },
};
#define N_RUNS (int)(sizeof runs / sizeof runs[0])

static int run(const char *const *args, const char *logdir, const char *resume)
{
    const char *argv[48] = { TRIB_TRAIN_BIN };
    int n = 1;
    for (; args[n - 1]; n++) argv[n] = args[n - 1];
    if (resume) {
        argv[n++] = "--resume";
        argv[n++] = resume;
    } else {
        argv[n++] = "--logdir";
        argv[n++] = logdir;
    }
    argv[n] = NULL;
    return kit_run(TRIB_TRAIN_BIN, argv + 1, -1);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* FNV-1a 64 over every tensor of a safetensors file in name order: its
 * name, dtype, shape and bytes (read by the format's definition here, not
 * by the code under test). As 16 hex digits. */
static void params_hash(const char *file, char out[17])
{
    size_t len;
    char *buf = kit_must_read(file, &len);
    ck_assert_uint_ge(len, 8);
    uint64_t hlen = 0;
    memcpy(&hlen, buf, 8);
    ck_assert_uint_le(8 + hlen, len);
    cJSON *h = cJSON_ParseWithLength(buf + 8, (size_t)hlen);
    ck_assert_ptr_nonnull(h);
    cJSON *ts[256];
    int n = 0;
    for (cJSON *t = h->child; t; t = t->next)
        if (strcmp(t->string, "__metadata__")) {
            ck_assert_int_lt(n, 256);
            ts[n++] = t;
        }
    qsort(ts, (size_t)n, sizeof ts[0], by_name);
    uint64_t x = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        x = fnv1a(x, ts[i]->string, strlen(ts[i]->string) + 1);
        const char *dt = cJSON_GetObjectItem(ts[i], "dtype")->valuestring;
        x = fnv1a(x, dt, strlen(dt) + 1);
        cJSON *d;
        cJSON_ArrayForEach(d, cJSON_GetObjectItem(ts[i], "shape"))
        {
            int64_t v = (int64_t)d->valuedouble;
            x = fnv1a(x, &v, sizeof v);
        }
        cJSON *off = cJSON_GetObjectItem(ts[i], "data_offsets");
        size_t a = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, b = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        ck_assert_uint_le(8 + hlen + b, len);
        x = fnv1a(x, buf + 8 + hlen + a, b - a);
    }
    cJSON_Delete(h);
    free(buf);
    snprintf(out, 17, "%016llx", (unsigned long long)x);
}

/* The pinned columns of metrics.csv's first MAX_ROWS rows, as written. */
static cJSON *pinned_rows(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    char *csv = kit_must_read(path, NULL);
    char *save = NULL, *line = strtok_r(csv, "\n", &save);
    ck_assert_ptr_nonnull(line);
    char *cols[64];
    int nc = 0;
    for (char *p = line, *c; nc < 64 && (c = strsep(&p, ","));) cols[nc++] = c;
    cJSON *rows = cJSON_CreateArray();
    for (int r = 0; r < MAX_ROWS && (line = strtok_r(NULL, "\n", &save)); r++) {
        cJSON *row = cJSON_CreateObject();
        int i = 0;
        for (char *p = line, *c; i < nc && (c = strsep(&p, ",")); i++)
            for (int k = 0; pinned_cols[k]; k++)
                if (!strcmp(cols[i], pinned_cols[k])) cJSON_AddStringToObject(row, cols[i], c);
        cJSON_AddItemToArray(rows, row);
    }
    free(csv);
    return rows;
}

/* Runs runs[i] into a fresh directory; its hash and rows. */
static cJSON *do_run(int i, char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/test_rl_safety_%d_XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    rmdir(dir);                     /* the run makes it */
    int rc = run(runs[i].args, dir, NULL);
    ck_assert_msg(rc == 1, "%s: exit %d (the update budget ends it: 1)\n%s\n%s", runs[i].name, rc, kit_out, kit_err);
    ck_assert_msg(strstr(kit_out, "\"stopped_by\":\"budget\""), "%s: %s", runs[i].name, kit_out);
    char file[700], hash[17];
    snprintf(file, sizeof file, "%s/policy.safetensors", dir);
    params_hash(file, hash);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "params_fnv1a64", hash);
    cJSON_AddItemToObject(o, "rows", pinned_rows(dir));
    return o;
}

static cJSON *fixture(const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.json", SAFETY_DIR, name);
    char *text = kit_must_read(path, NULL);
    cJSON *j = cJSON_Parse(text);
    ck_assert_msg(j != NULL, "%s does not parse", path);
    free(text);
    return j;
}

START_TEST(test_pinned)
{
    const struct safety_run *r = &runs[_i];
    char dir[200];
    cJSON *got = do_run(_i, dir, sizeof dir);
    cJSON *want = fixture(r->name);
    cJSON *rows = cJSON_GetObjectItem(got, "rows");
    ck_assert_msg(cJSON_GetArraySize(rows) > 0, "%s: no progress rows", r->name);
    if (r->sync) {
        const char *gh = cJSON_GetObjectItem(got, "params_fnv1a64")->valuestring;
        const char *wh = cJSON_GetObjectItem(want, "params_fnv1a64")->valuestring;
        ck_assert_msg(!strcmp(gh, wh), "%s: parameters' hash %s, the tree before the redesign %s", r->name, gh, wh);
        cJSON *wrows = cJSON_GetObjectItem(want, "rows");
        ck_assert_int_eq(cJSON_GetArraySize(rows), cJSON_GetArraySize(wrows));
        for (int k = 0; k < cJSON_GetArraySize(wrows); k++) {
            cJSON *w = cJSON_GetArrayItem(wrows, k), *g = cJSON_GetArrayItem(rows, k), *c;
            cJSON_ArrayForEach(c, w)
            {
                cJSON *gc = cJSON_GetObjectItem(g, c->string);
                ck_assert_msg(gc && !strcmp(gc->valuestring, c->valuestring), "%s row %d %s: %s, before %s", r->name,
                              k + 1, c->string, gc ? gc->valuestring : "(missing)", c->valuestring);
            }
        }
    }
    cJSON_Delete(got);
    cJSON_Delete(want);
    kit_rm_rf(dir);
}
END_TEST

static void copy_tree(const char *from, const char *to)
{
    ck_assert_int_eq(mkdir(to, 0755), 0);
    DIR *d = opendir(from);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", from, e->d_name);
        snprintf(b, sizeof b, "%s/%s", to, e->d_name);
        struct stat st;
        ck_assert_int_eq(stat(a, &st), 0);
        if (S_ISDIR(st.st_mode)) {
            copy_tree(a, b);
            continue;
        }
        size_t len;
        char *buf = kit_must_read(a, &len);
        FILE *f = fopen(b, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fwrite(buf, 1, len, f), len);
        fclose(f);
        free(buf);
    }
    closedir(d);
}

/* The old tree's run directory after 8 updates of ppo-sync (checkpointed),
 * resumed to 24: the parameters of the old tree's straight 24-update run. */
START_TEST(test_old_run_resumes)
{
    char dir[200];
    snprintf(dir, sizeof dir, "/tmp/test_rl_safety_old_%d_XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char run_dir[300];
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    copy_tree(SAFETY_DIR "/old_run", run_dir);
    const char *args[] = { "--max-updates", "24", NULL };
    int rc = run(args, NULL, run_dir);
    ck_assert_msg(rc == 1, "resume: exit %d\n%s\n%s", rc, kit_out, kit_err);
    char file[400], hash[17];
    snprintf(file, sizeof file, "%s/policy.safetensors", run_dir);
    params_hash(file, hash);
    cJSON *want = fixture("ppo-sync");
    const char *wh = cJSON_GetObjectItem(want, "params_fnv1a64")->valuestring;
    ck_assert_msg(!strcmp(hash, wh), "resumed old run: parameters' hash %s, the old tree's straight run %s", hash, wh);
    cJSON_Delete(want);
    kit_rm_rf(dir);
}
END_TEST

/* test_rl_safety --write DIR: the fixtures, from the tree this was built in
 * (Check's assertions work only inside a test, so writing is one too). */
static const char *write_dir;

START_TEST(test_write_fixtures)
{
    const char *out = write_dir;
    for (int i = 0; i < N_RUNS; i++) {
        char dir[200], path[600];
        cJSON *o = do_run(i, dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s.json", out, runs[i].name);
        char *text = cJSON_Print(o);
        FILE *f = fopen(path, "w");
        ck_assert_msg(f && fprintf(f, "%s\n", text) >= 0 && fclose(f) == 0, "writing %s", path);
        free(text);
        cJSON_Delete(o);
        kit_rm_rf(dir);
        printf("%s\n", path);
    }
    /* the old run: ppo-sync stopped at 8 updates, checkpointed */
    char run_dir[600];
    snprintf(run_dir, sizeof run_dir, "%s/old_run", out);
    kit_rm_rf(run_dir);
    const char *args[32];
    int n = 0;
    for (const char *const *a = runs[4].args; *a; a++) {
        args[n++] = !strcmp(*a, "24") ? "8" : *a;
    }
    args[n] = NULL;
    int rc = run(args, run_dir, NULL);
    ck_assert_msg(rc == 1, "old run: exit %d\n%s", rc, kit_err);
    char p[1024];
    snprintf(p, sizeof p, "%s/policy.safetensors", run_dir);
    unlink(p);
    const char *gone[] = { "metrics.csv", "metrics.jsonl" };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", run_dir, gone[i]);
        unlink(p);
    }
    DIR *d = opendir(run_dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents", 19)) {
            snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    printf("%s\n", run_dir);
}
END_TEST

int main(int argc, char **argv)
{
    Suite *s = suite_create("rl_safety");
    TCase *tc = tcase_create("pinned");
    tcase_set_timeout(tc, 600);
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        write_dir = argv[2];
        tcase_add_test(tc, test_write_fixtures);
    } else {
        tcase_add_loop_test(tc, test_pinned, 0, N_RUNS);
        tcase_add_test(tc, test_old_run_resumes);
    }
    suite_add_tcase(s, tc);
    return kit_run_suite(s);
}
