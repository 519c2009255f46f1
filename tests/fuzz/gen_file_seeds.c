/* Writes the file readers' seed corpora (fuzz_ckpt, fuzz_safetensors):
 * valid files made by the real writers, and the crafted ones of issue 17
 * (tests/rl/test_rl_files.c makes the same). Run by hand when a format
 * changes:
 *   fuzz_gen_file_seeds tests/fuzz/corpus/fuzz_ckpt tests/fuzz/corpus/fuzz_safetensors */
#define _GNU_SOURCE
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "agent/run_stats.h"
#include "rl/rl_math.h"
#include "runfiles/ckpt.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"
#include "tensor/nn.h"
#include "kit.h"

static char tmp[] = "/tmp/fuzz_gen_file_seeds_XXXXXX";

static void die(const char *what)
{
    fprintf(stderr, "gen_file_seeds: %s: %s\n", what, runfiles_last_error());
    exit(1);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    unsigned char *b = (unsigned char *)kit_read_file(path, n);
    if (!b) die(path);
    return b;
}

/* dir/name := [mode byte] + data */
static void seed(const char *dir, const char *name, int mode, const void *data, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) die(path);
    if (mode >= 0) fputc(mode, f);
    fwrite(data, 1, n, f);
    fclose(f);
}

/* A checkpoint of a ppo-fast run with these counters (agent/run_stats.h's
 * struct run_stats_saved) and version. */
static void ckpt_seed(const char *dir, const char *name, const struct run_stats_saved *v, int64_t version, int mode)
{
    struct rl_config cfg;
    rl_config_preset(&cfg, "ppo-fast");
    cJSON *j = rl_config_to_json(&cfg);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    unsigned char policy[8 + 4 * 16] = { 0 }, optim[16] = "TRIBOPT";
    struct ckpt_section s[] = {
        { "config", text, strlen(text) }, { "policy", policy, sizeof policy }, { "optimizer", optim, sizeof optim },
        { "counters", v, sizeof *v }, { "version", &version, sizeof version },
    };
    char d[256];
    snprintf(d, sizeof d, "%s/ck", tmp);
    if (ckpt_write(d, 8, s, 5, 0) != 0) die("ckpt_write");
    char p[300];
    snprintf(p, sizeof p, "%s/ckpt-000000000008.trib", d);
    size_t n;
    unsigned char *b = slurp(p, &n);
    seed(dir, name, mode, b, n);
    free(b);
    unlink(p);
    free(text);
}

static void ckpt_seeds(const char *dir)
{
    struct rl_config cfg;
    rl_config_preset(&cfg, "ppo-fast");
    struct run_stats *s = run_stats_new(&cfg, 500);
    struct rl_report r = { .steps = 128, .episodes = 3, .n_returns = 3, .returns = { 10, 20, 30 },
                           .lengths = { 10, 20, 30 } };
    run_stats_report(s, &r);
    run_stats_update(s, 1, NULL);
    unsigned char *b;
    size_t n;
    run_stats_save(s, &b, &n);
    run_stats_free(s);
    if (n != sizeof(struct run_stats_saved)) die("saved counters changed size");
    struct run_stats_saved good, v;
    memcpy(&good, b, sizeof good);
    free(b);
    ckpt_seed(dir, "valid", &good, 8, 1);
    ckpt_seed(dir, "valid-raw", &good, 8, 0);
    v = good, v.win.head = -1000;
    ckpt_seed(dir, "head-negative", &v, 8, 1);
    v = good, v.win.head = INT_MIN;
    ckpt_seed(dir, "head-int-min", &v, 8, 1);
    v = good, v.env_steps = INT64_MAX - 100;
    ckpt_seed(dir, "env-steps-near-max", &v, 8, 1);
    v = good, v.updates = INT64_MIN;
    ckpt_seed(dir, "updates-int64-min", &v, 8, 1);
    v = good, v.win.n = 1000;
    ckpt_seed(dir, "window-count-over", &v, 8, 1);
    ckpt_seed(dir, "version-int64-max", &good, INT64_MAX, 1);
    /* a truncated file and one with a section past its end */
    unsigned char small[40] = "TRIBCKPT\1\0\0\0\1\0\0\0";
    uint64_t fs = 40;
    memcpy(small + 16, &fs, 8);
    small[32] = 3;
    seed(dir, "section-past-end", 1, small, sizeof small);
    seed(dir, "truncated", 0, small, 20);
}

static void policy_seed(const char *dir, const char *name, const char *hidden)
{
    char p[300];
    snprintf(p, sizeof p, "%s/p.safetensors", tmp);
    int64_t shape[1] = { 1 };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    struct safetensors_entry e[] = { { "actor.0.weight", t } };
    struct safetensors_meta meta[] = {
        { "format", "tributary-policy-1" }, { "env", "CartPole-v1" }, { "obs_dim", "4" }, { "act_dim", "2" },
        { "head", "categorical" }, { "value_head", "false" }, { "hidden", hidden }, { "activation", "relu" },
        { "dropout", "0" }, { "init_log_std", "0" },
    };
    if (safetensors_save(p, e, 1, meta, 10) != 0) die("safetensors_save");
    tensor_free(t);
    size_t n;
    unsigned char *b = slurp(p, &n);
    seed(dir, name, -1, b, n);
    free(b);
    unlink(p);
}

static void raw_header(const char *dir, const char *name, const char *h, size_t data)
{
    size_t hl = strlen(h);
    unsigned char *b = calloc(1, 8 + hl + data);
    uint64_t l = hl;
    memcpy(b, &l, 8);
    memcpy(b + 8, h, hl);
    seed(dir, name, -1, b, 8 + hl + data);
    free(b);
}

static void safetensors_seeds(const char *dir)
{
    char p[300];
    snprintf(p, sizeof p, "%s/p.safetensors", tmp);
    struct policy_arch a = { .obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = { 8 }, .value_head = true };
    struct nn_module *actor = NULL, *critic = NULL;
    if (policy_arch_build(&a, 1, &actor, &critic) != 0) die("policy_arch_build");
    struct tensor *params[16];
    int n = 0;
    for (int i = 0; i < actor->n_params; i++) params[n++] = actor->params[i];
    for (int i = 0; i < critic->n_params; i++) params[n++] = critic->params[i];
    if (policy_file_save(p, &a, "CartPole-v1", NULL, n, params) != 0) die("policy_file_save");
    nn_module_free(actor);
    nn_module_free(critic);
    size_t len;
    unsigned char *b = slurp(p, &len);
    seed(dir, "policy-4-8-2-critic", -1, b, len);
    free(b);
    unlink(p);
    policy_seed(dir, "hidden-30000x2", "30000,30000");
    policy_seed(dir, "hidden-65536x4", "65536,65536,65536,65536");
    policy_seed(dir, "hidden-garbage", "8,x");
    char *h = NULL;
    size_t hl = 0;
    FILE *m = open_memstream(&h, &hl);
    fputc('{', m);
    for (int i = 0; i < 200; i++)
        fprintf(m, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i);
    fputc('}', m);
    fclose(m);
    raw_header(dir, "empty-tensors", h, 0);
    free(h);
    raw_header(dir, "trailing-junk", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4);
    raw_header(dir, "overlap", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                               "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3);
    raw_header(dir, "deep", "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s CKPT_DIR SAFETENSORS_DIR\n", argv[0]);
        return 2;
    }
    if (!mkdtemp(tmp)) die("mkdtemp");
    ckpt_seeds(argv[1]);
    safetensors_seeds(argv[2]);
    char d[300];
    snprintf(d, sizeof d, "%s/ck", tmp);
    rmdir(d);
    rmdir(tmp);
    return 0;
}
