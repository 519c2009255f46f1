/* Hostile run files (issue 17), every one generated here: checkpoints whose
 * counters or version are out of range (refused by --resume with a message
 * naming the number, the run directory left exactly as it was), policy
 * files and checkpoints whose architecture is larger than the file or the
 * documented cap, a million empty tensors, --config files with trailing
 * bytes or over-long strings, and files that name a plug-in: tributary-eval
 * and --resume load one only when --env names it. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/mount.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/run_stats.h"
#include "common/proc.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "runfiles/ckpt.h"
#include "runfiles/crc32c.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"
#include "kit.h"

static char BASE[64];       /* a real run's logdir: its checkpoints are the templates */
static char MARK[96];       /* Every file under dir (one level of subdirectories) with its size, inode
 * and modification time, sorted: equal snapshots mean nothing was written. */
static char *snapshot(const char *dir)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char sub[2][600];
    snprintf(sub[0], sizeof sub[0], "%s", dir);
    snprintf(sub[1], sizeof sub[1], "%s/checkpoints", dir);
    for (int k = 0; k < 2; k++) {
        struct dirent **names;
        int n = scandir(sub[k], &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            char p[1500];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s", sub[k], names[i]->d_name);
            if (names[i]->d_name[0] != '.' && stat(p, &st) == 0)
                fprintf(f, "%s %lld %llu %lld.%09ld\n", p, (long long)st.st_size, (unsigned long long)st.st_ino,
                        (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
            free(names[i]);
        }
        if (n >= 0) free(names);
    }
    fclose(f);
    return buf;
}

/* ---- crafted checkpoints ------------------------------------------------------
 * Their counters section: agent/run_stats.h's struct run_stats_saved (its
 * size is checked against a real run's below). */

/* The base run's newest checkpoint (ckpt_free it). */
static struct ckpt *base_ckpt(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/checkpoints", BASE);
    struct ckpt *c = NULL;
    ck_assert_msg(ckpt_load_latest(dir, &c, NULL, 0) == 1, "%s", runfiles_last_error());
    return c;
}

/* A fresh logdir whose only checkpoint is the base one with section `name`
 * replaced by data (size bytes), written as ckpt-<step>.trib; its path
 * into ckpt_path. The logdir is returned (free it). */
static char *craft(const char *name, const void *data, size_t size, char *ckpt_path, size_t cap)
{
    char tmpl[] = "/tmp/test_rl_files_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    struct ckpt *c = base_ckpt();
    struct ckpt_section s[64];
    ck_assert_int_le(c->n_sections, 64);
    bool found = false;
    for (int i = 0; i < c->n_sections; i++) {
        s[i] = c->sections[i];
        if (strcmp(s[i].name, name) == 0) {
            s[i].data = data;
            s[i].size = size;
            found = true;
        }
    }
    ck_assert_msg(found, "no section %s", name);
    char dir[128];
    snprintf(dir, sizeof dir, "%s/checkpoints", tmpl);
    ck_assert_msg(ckpt_write(dir, c->step, s, c->n_sections, 0) == 0, "%s", runfiles_last_error());
    snprintf(ckpt_path, cap, "%s/ckpt-%012" PRId64 ".trib", dir, c->step);
    ckpt_free(c);
    return strdup(tmpl);
}

/* The base checkpoint's counters, to be altered. */
static struct run_stats_saved base_counters(void)
{
    struct ckpt *c = base_ckpt();
    size_t len = 0;
    const void *b = ckpt_get(c, "counters", &len);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(len, sizeof(struct run_stats_saved));
    struct run_stats_saved v;
    memcpy(&v, b, sizeof v);
    ckpt_free(c);
    return v;
}

/* --resume of a logdir holding one crafted checkpoint must fail with
 * `want` (after "checkpoint <path>: ") and leave the logdir as it was. */
static void resume_refused(const char *section, const void *data, size_t size, const char *want)
{
    char path[256];
    char *dir = craft(section, data, size, path, sizeof path);
    char *before = snapshot(dir);
    const char *args[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "3", "--resume", dir,
                           "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, 300);
    char msg[512];
    snprintf(msg, sizeof msg, "agent: checkpoint %s: %s\n", path, want);
    ck_assert_msg(rc == 1 && strstr(kit_err, msg), "exit %d, wanted '%s' in\n%s", rc, msg, kit_err);
    ck_assert_msg(strstr(kit_out, "resumed from") == NULL, "%s", kit_out);
    char *after = snapshot(dir);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    kit_rm_rf(dir);
    free(dir);
}

START_TEST(test_resume_counters_out_of_range)
{
    struct run_stats_saved v = base_counters();
    v.win.head = -1000;   /* was an index: UBSan "index -1000 out of bounds", heap corruption */
    resume_refused("counters", &v, sizeof v, "counters: return window head -1000 outside 0..99");
    v = base_counters();
    v.win.head = INT_MIN;   /* was SIGSEGV */
    resume_refused("counters", &v, sizeof v, "counters: return window head -2147483648 outside 0..99");
    v = base_counters();
    v.env_steps = INT64_MAX - 100;   /* was a signed overflow on the next report */
    resume_refused("counters", &v, sizeof v, "counters: env_steps 9223372036854775707 outside 0..9007199254740992");
    v = base_counters();
    v.updates = INT64_MIN;   /* made every later checkpoint fail */
    resume_refused("counters", &v, sizeof v, "counters: updates -9223372036854775808 outside 0..9007199254740992");
    int64_t version = INT64_MAX;   /* was a signed overflow at the next optimizer step */
    resume_refused("version", &version, sizeof version, "version 9223372036854775807 outside 0..9007199254740992");
}
END_TEST


/* A saved observer's state (observer/observer.c): its RNG, the
 * observation each of its B envs acts on next, then the vec_env
 * (envs/vec_env.c: this header, B states of `stride` bytes, B RNGs, B
 * episode lengths, B returns in progress, B last returns, ...). */
struct saved_vec_head {
    char magic[8];
    uint64_t n, state_size, stride;
    char id[64];
    uint8_t was_reset;
};

/* The base checkpoint's observer0 section (free it), B envs of CartPole
 * (4 observations): the vec_env's header at *vec. */
static unsigned char *base_observer_state(size_t *len, size_t *vec)
{
    struct ckpt *c = base_ckpt();
    const void *b = ckpt_get(c, "observer0", len);
    ck_assert_ptr_nonnull(b);
    unsigned char *s = malloc(*len);
    memcpy(s, b, *len);
    ckpt_free(c);
    *vec = sizeof(uint64_t) + 8 * 4 * sizeof(float);
    ck_assert_uint_gt(*len, *vec + sizeof(struct saved_vec_head));
    ck_assert(memcmp(s + *vec, "TRIBVEC1", 8) == 0);
    return s;
}

/* As resume_refused, for a section refused once the run has started (by
 * an observer): the checkpoints left as they were and no policy file. */
static void resume_refused_late(const char *section, const void *data, size_t size, const char *want)
{
    char path[256], dir_ck[300], pf[300];
    char *dir = craft(section, data, size, path, sizeof path);
    snprintf(dir_ck, sizeof dir_ck, "%s/checkpoints", dir);
    snprintf(pf, sizeof pf, "%s/policy.safetensors", dir);
    char *before = snapshot(dir_ck);
    const char *args[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "3", "--resume", dir,
                           "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, 300);
    char msg[700];
    snprintf(msg, sizeof msg, "agent: checkpoint %s: %s\n", path, want);
    ck_assert_msg(rc == 1 && strstr(kit_err, msg), "exit %d, wanted '%s' in\n%s", rc, msg, kit_err);
    ck_assert_msg(strstr(kit_out, "resumed from") == NULL, "%s", kit_out);
    char *after = snapshot(dir_ck);
    ck_assert_str_eq(before, after);
    ck_assert_msg(access(pf, F_OK) != 0, "a refused resume wrote %s", pf);
    free(before);
    free(after);
    kit_rm_rf(dir);
    free(dir);
}

/* A checkpoint refused after the run has started (its policy section does
 * not fit the architecture): no new checkpoint and no policy file (was: a
 * fresh ckpt-000000000000.trib). */
START_TEST(test_resume_refused_late_writes_nothing)
{
    struct ckpt *c = base_ckpt();
    size_t len = 0;
    const void *pol = ckpt_get(c, "policy", &len);
    ck_assert_ptr_nonnull(pol);
    void *shorter = malloc(len - 4);
    memcpy(shorter, pol, len - 4);
    ckpt_free(c);
    char want[256];
    snprintf(want, sizeof want, "policy: %zu bytes, this architecture needs %zu", len - 4, len);
    resume_refused_late("policy", shorter, len - 4, want);
    free(shorter);
}
END_TEST

/* A NaN or an infinity in an observer's saved state: the resumed run is
 * refused naming the checkpoint, the section, the env and the field, and
 * the logdir is left as it was (was: resumed, stepping on the NaN). */
START_TEST(test_resume_observer_state_not_finite)
{
    size_t len, vec;
    unsigned char *s = base_observer_state(&len, &vec);
    struct saved_vec_head h;
    memcpy(&h, s + vec, sizeof h);
    ck_assert_uint_eq(h.n, 8);
    unsigned char *states = s + vec + sizeof h;
    const char *pre = "observer0: setting up observer1: rpc: observer1: rl_setup: ";
    char want[512];
    /* CartPole's theta (its state's third double) of env 3 */
    double bad = NAN, keep;
    memcpy(&keep, states + 3 * h.stride + 2 * sizeof(double), sizeof keep);
    memcpy(states + 3 * h.stride + 2 * sizeof(double), &bad, sizeof bad);
    snprintf(want, sizeof want, "%sobserver state: vec_env_load: env 3 of CartPole-v1: state[2] (theta) is nan", pre);
    resume_refused_late("observer0", s, len, want);
    memcpy(states + 3 * h.stride + 2 * sizeof(double), &keep, sizeof keep);
    /* the return of env 5's episode in progress */
    unsigned char *ret = states + h.n * h.stride + h.n * (sizeof(uint64_t) + sizeof(int));
    bad = -INFINITY;
    memcpy(&keep, ret + 5 * sizeof(double), sizeof keep);
    memcpy(ret + 5 * sizeof(double), &bad, sizeof bad);
    snprintf(want, sizeof want,
             "%sobserver state: vec_env_load: env 5 of CartPole-v1: the return of its episode in progress is -inf", pre);
    resume_refused_late("observer0", s, len, want);
    memcpy(ret + 5 * sizeof(double), &keep, sizeof keep);
    /* observation[1] of env 6, the one its next step acts on */
    float inf = INFINITY;
    memcpy(s + sizeof(uint64_t) + (6 * 4 + 1) * sizeof(float), &inf, sizeof inf);
    snprintf(want, sizeof want, "%sobserver state: observation[1] of env 6 is inf", pre);
    resume_refused_late("observer0", s, len, want);
    free(s);
}
END_TEST

/* A checkpoint or a policy file whose parameters are not finite: refused
 * at load naming the tensor and the element (was: resumed, and every
 * observer then dropped as "(alive)"; tributary-eval ran it). */
START_TEST(test_policy_not_finite)
{
    struct ckpt *c = base_ckpt();
    size_t len = 0;
    const void *pol = ckpt_get(c, "policy", &len);
    ck_assert_ptr_nonnull(pol);
    unsigned char *nan_pol = malloc(len);
    memcpy(nan_pol, pol, len);
    ckpt_free(c);
    float nan = NAN;
    for (size_t off = sizeof(uint64_t); off + sizeof nan <= len; off += sizeof nan) memcpy(nan_pol + off, &nan, sizeof nan);
    resume_refused_late("policy", nan_pol, len, "policy: parameter actor.0.weight[0] is nan");
    /* tributary-eval of that checkpoint */
    char path[256], want[700];
    char *dir = craft("policy", nan_pol, len, path, sizeof path);
    const char *args[] = { path, "--episodes", "2", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, args, 300), 1);
    snprintf(want, sizeof want, "tributary-eval: %s: policy: parameter actor.0.weight[0] is nan\n", path);
    ck_assert_str_eq(kit_err, want);
    kit_rm_rf(dir);
    free(dir);
    free(nan_pol);
    /* a policy file with one infinity */
    char file[] = "/tmp/test_rl_files_inf_XXXXXX.safetensors";
    close(mkstemps(file, 12));
    struct policy_arch a = { .obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = { 8 } };
    struct nn_module *actor = NULL;
    ck_assert_int_eq(policy_arch_build(&a, 1, &actor, NULL), 0);
    ((float *)tensor_data(actor->params[3]))[1] = -INFINITY;
    ck_assert_int_eq(policy_file_save(file, &a, "CartPole-v1", NULL, actor->n_params, actor->params), 0);
    nn_module_free(actor);
    const char *eargs[] = { file, "--episodes", "2", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, eargs, 300), 1);
    snprintf(want, sizeof want, "tributary-eval: policy %s: parameter actor.2.bias[1] is -inf\n", file);
    ck_assert_str_eq(kit_err, want);
    unlink(file);
}
END_TEST

/* run_stats_load itself: every number of the counters is checked, and a
 * refusal changes nothing. */
START_TEST(test_counters_fields)
{
    struct rl_config cfg;
    ck_assert_int_eq(rl_config_preset(&cfg, "ppo-fast"), 0);
    struct run_stats *s = run_stats_new(&cfg, 10);
    const struct run_stats_saved good = base_counters();
    static const char *const want[] = {
        "counters: length window head 100 outside 0..99",
        "counters: return window count -1 outside 0..100",
        "counters: return window count 101 outside 0..100",
        "counters: return window holds 1024, this run keeps 100",
        "counters: return window value 0 is not finite",
        "counters: episodes -1 outside 0..9007199254740992",
        "counters: env_steps 9007199254740993 outside 0..9007199254740992",
        "counters: lag_n -9223372036854775808 outside 0..9007199254740992",
        "counters: lag_hist bin -5 outside 0..9007199254740992",
        "counters: observer env_steps 9223372036854775807 outside 0..9007199254740992",
        "counters: running reward is not finite",
        "counters: lag_sum -1 is not a finite non-negative sum",
        "counters: not valid saved counters (bad magic)",
    };
    for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) {
        struct run_stats_saved v = good;
        switch (i) {
        case 0: v.len_win.head = 100; break;
        case 1: v.win.n = -1; break;
        case 2: v.win.n = 101; break;
        case 3: v.win.cap = 1024; break;
        case 4: v.win.n = 1, v.win.buf[0] = 1.0 / 0.0; break;
        case 5: v.episodes = -1; break;
        case 6: v.env_steps = (INT64_C(1) << 53) + 1; break;
        case 7: v.lag_n = INT64_MIN; break;
        case 8: v.lag_hist[7] = -5; break;
        case 9: v.obs_steps[3] = INT64_MAX; break;
        case 10: v.running = 0.0 / 0.0; break;
        case 11: v.lag_sum = -1; break;
        default: v.magic ^= 1; break;
        }
        ck_assert_int_eq(run_stats_load(s, (const unsigned char *)&v, sizeof v), -1);
        ck_assert_str_eq(rl_last_error(), want[i]);
        ck_assert_int_eq(run_stats_env_steps(s), 0);   /* nothing of a refused load applies */
    }
    /* a bool byte other than 0 or 1 (UBSan: "not a valid value for type 'bool'") */
    unsigned char raw[sizeof good];
    memcpy(raw, &good, sizeof raw);
    raw[offsetof(struct run_stats_saved, have_running)] = 7;
    ck_assert_int_eq(run_stats_load(s, raw, sizeof raw), -1);
    ck_assert_str_eq(rl_last_error(), "counters: have_running byte 7 is not 0 or 1");
    ck_assert_int_eq(run_stats_load(s, (const unsigned char *)&good, sizeof good), 0);
    ck_assert_int_eq(run_stats_env_steps(s), good.env_steps);
    run_stats_free(s);
}
END_TEST

/* The summary of a run_stats told the mode's figures (run_stats_set_mode)
 * and the rest of cfg. */
static char *stats_summary(const struct rl_config *cfg, const struct run_stats_mode *mode)
{
    struct run_stats *s = run_stats_new(cfg, 10);
    if (mode) run_stats_set_mode(s, mode);
    struct rl_report r = { .steps = 8, .explained_var = NAN };
    rl_report_add(&r, 100, 8);
    run_stats_report(s, &r);
    run_stats_update(s, 2, NULL);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    ck_assert_ptr_nonnull(f);
    run_stats_summary(s, f, false, 0, 0, "budget");
    fclose(f);
    run_stats_free(s);
    return out;
}

/* The mode's figures are what the mode's table tells run_stats, whatever
 * cfg.mode says; "vtrace" is whether the run's estimator corrects. */
START_TEST(test_stats_mode_figures)
{
    struct rl_config cfg;
    ck_assert_int_eq(rl_config_preset(&cfg, "ppo-fast"), 0);
    cfg.running_reward = true;
    static const struct {
        enum rl_mode cfg_mode;
        bool told, lag, per_report, vtrace;
        const char *has, *lacks;
    } cases[] = {
        { RL_MODE_ASYNC, true, false, false, false, ",\"running_reward\":0,", "lag_mean" },
        { RL_MODE_ASYNC, false, false, false, true, ",\"running_reward\":0,", "vtrace" },
        { RL_MODE_SYNC, true, true, false, false, ",\"lag_mean\":2,\"lag_p95\":2,\"lag_max\":2,\"lag_hist\":[0,0,1],",
          "\"vtrace\":true" },
        { RL_MODE_SYNC, true, true, true, true, ",\"running_reward\":5,", "\"vtrace\":false" },
        { RL_MODE_SYNC, true, true, true, true, ",\"dropped_stale_samples\":0,\"vtrace\":true,", ",\"running_reward\":0," },
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        cfg.mode = cases[i].cfg_mode;
        cfg.vtrace = cases[i].vtrace;
        struct run_stats_mode m = { .policy_lag = cases[i].lag, .running_per_report = cases[i].per_report };
        char *sum = stats_summary(&cfg, cases[i].told ? &m : NULL);
        ck_assert_msg(strstr(sum, cases[i].has) != NULL, "case %d: no %s in %s", i, cases[i].has, sum);
        ck_assert_msg(strstr(sum, cases[i].lacks) == NULL, "case %d: %s in %s", i, cases[i].lacks, sum);
        free(sum);
    }
}
END_TEST

/* The checkpoint header's step, made negative (CRC made right again). */
START_TEST(test_ckpt_negative_step)
{
    char path[256];
    struct ckpt *c = base_ckpt();
    size_t len = 0;
    const void *v = ckpt_get(c, "version", &len);
    int64_t version;
    memcpy(&version, v, sizeof version);
    ckpt_free(c);
    char *dir = craft("version", &version, sizeof version, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *b = malloc((size_t)size);
    fseek(f, 0, SEEK_SET);
    ck_assert_int_eq(fread(b, 1, (size_t)size, f), size);
    int64_t step = -5;
    memcpy(b + 24, &step, 8);
    uint32_t crc = crc32c(b, (size_t)size - 4);
    memcpy(b + size - 4, &crc, 4);
    fseek(f, 0, SEEK_SET);
    ck_assert_int_eq(fwrite(b, 1, (size_t)size, f), size);
    fclose(f);
    free(b);
    ck_assert_ptr_null(ckpt_load(path));
    char want[400];
    snprintf(want, sizeof want, "ckpt_load: %s: bad header: negative step -5", path);
    ck_assert_str_eq(runfiles_last_error(), want);
    kit_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- architecture sizes ------------------------------------------------------- */

/* A policy file of one 1-float tensor whose metadata claims hidden. */
static void tiny_policy(const char *path, const char *hidden, const char *env, const char *dropout)
{
    int64_t shape[1] = { 1 };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    struct safetensors_entry e[] = { { "actor.0.weight", t } };
    struct safetensors_meta meta[] = {
        { "format", "tributary-policy-1" }, { "env", env }, { "obs_dim", "4" }, { "act_dim", "2" },
        { "head", "categorical" }, { "value_head", "false" }, { "hidden", hidden }, { "activation", "relu" },
        { "dropout", dropout }, { "init_log_std", "0" },
    };
    ck_assert_msg(safetensors_save(path, e, 1, meta, 10) == 0, "%s", runfiles_last_error());
    tensor_free(t);
}

START_TEST(test_policy_file_sizes)
{
    char path[] = "/tmp/test_rl_files_pol_XXXXXX.safetensors";
    close(mkstemps(path, 12));
    /* 4 -> 30000 -> 30000 -> 2: was 3.7 GB and 15 s before failing */
    tiny_policy(path, "30000,30000", "CartPole-v1", "0");
    const char *args[] = { path, "--env", "CartPole-v1", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, args, 300), 1);
    char want[512];
    snprintf(want, sizeof want, "tributary-eval: policy %s: the architecture has 900240002 parameters (3600960008 "
                                "bytes), the file holds 4 bytes of them\n", path);
    ck_assert_str_eq(kit_err, want);
    /* 65536 x 4: was over ASan's allocation limit */
    tiny_policy(path, "65536,65536,65536,65536", "CartPole-v1", "0");
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, args, 300), 1);
    snprintf(want, sizeof want, "tributary-eval: policy %s: the architecture has 12885557250 parameters (51542229000 "
                                "bytes), the file holds 4 bytes of them\n", path);
    ck_assert_str_eq(kit_err, want);
    /* a number with junk after it */
    tiny_policy(path, "8", "CartPole-v1", "0.5x");
    struct policy_arch got;
    char env[64];
    struct nn_module *actor = NULL;
    ck_assert_int_eq(policy_file_load(path, &got, env, sizeof env, &actor, NULL), -1);
    snprintf(want, sizeof want, "policy %s: bad dropout '0.5x'", path);
    ck_assert_str_eq(runfiles_last_error(), want);
    /* a file that holds every byte is still bounded by the cap */
    struct policy_arch a = { .obs_dim = 4, .act_dim = 2, .n_hidden = 2, .hidden = { 16384, 16384 } };
    ck_assert_int_eq(policy_arch_check(&a, "x", UINT64_MAX), -1);
    ck_assert_str_eq(runfiles_last_error(), "x: the architecture has 268566530 parameters (at most 134217728)");
    a.hidden[1] = 65537;
    ck_assert_int_eq(policy_arch_check(&a, "x", UINT64_MAX), -1);
    ck_assert_str_eq(runfiles_last_error(), "x: hidden size 65537 outside 1..65536");
    unlink(path);
}
END_TEST

/* The config of a checkpoint, rewritten with key set to a JSON value. */
static char *ckpt_with_config(const char *key, const char *json_value, char *path, size_t cap)
{
    struct ckpt *c = base_ckpt();
    size_t len = 0;
    const char *text = ckpt_get(c, "config", &len);
    char *cfg = strndup(text, len);
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    char *at = strstr(cfg, needle);
    ck_assert_ptr_nonnull(at);
    char *val = at + strlen(needle);
    char *end = val + (*val == '"' ? strcspn(val + 1, "\"") + 2 : *val == '[' ? strcspn(val, "]") + 1 : strcspn(val, ",}"));
    char *out = NULL;
    ck_assert_int_ge(asprintf(&out, "%.*s%s%s", (int)(val - cfg), cfg, json_value, end), 0);
    ckpt_free(c);
    free(cfg);
    char *dir = craft("config", out, strlen(out), path, cap);
    free(out);
    return dir;
}

START_TEST(test_checkpoint_arch_sizes)
{
    char path[256], want[768];
    /* a --hidden over the cap in a checkpoint's config: refused by the config check */
    char *dir = ckpt_with_config("hidden", "\"65536,65536,65536,65536\"", path, sizeof path);
    const char *args[] = { path, "--env", "CartPole-v1", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, args, 300), 1);
    snprintf(want, sizeof want, "tributary-eval: %s: --hidden: a policy of these layers has over 25770196992 "
                                "parameters (at most 134217728)\n", path);
    ck_assert_str_eq(kit_err, want);
    kit_rm_rf(dir);
    free(dir);
    /* under the cap but more than the policy section holds */
    dir = ckpt_with_config("hidden", "\"4096,4096\"", path, sizeof path);
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, args, 300), 1);
    snprintf(want, sizeof want, "tributary-eval: %s on CartPole-v1: the architecture has 33615875 parameters "
                                "(134463500 bytes), the file holds ", path);
    ck_assert_msg(strncmp(kit_err, want, strlen(want)) == 0, "%s", kit_err);
    kit_rm_rf(dir);
    free(dir);
}
END_TEST

/* n empty tensors (as the reference format allows) in one header,
 * written straight to the file (this process's peak memory stays low). */
static void empty_tensors(const char *path, int n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t hl = 0;
    fwrite(&hl, 8, 1, f);
    fputc('{', f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i);
    fputc('}', f);
    hl = (uint64_t)ftell(f) - 8;
    ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
    fwrite(&hl, 8, 1, f);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_many_empty_tensors)
{
    char path[] = "/tmp/test_rl_files_empty_XXXXXX";
    close(mkstemp(path));
    char want[512];
    /* 20000 entries parse (about 7 values each) but are more tensors than allowed */
    empty_tensors(path, 20000);
    ck_assert_ptr_null(safetensors_load(path));
    snprintf(want, sizeof want, "safetensors_load: %s: 20000 tensors (at most 16384)", path);
    ck_assert_str_eq(runfiles_last_error(), want);
    /* 1.2 million (72 MB): was 1.5 GB of JSON nodes, then the whole header
     * read into memory before its values were counted; now refused once
     * the values read pass the limit (37,450 entries, 2.3 MB in) */
    empty_tensors(path, 1200000);
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    ck_assert_ptr_null(safetensors_load(path));
    getrusage(RUSAGE_SELF, &r1);
    /* the header's first few MB (ASan's shadow beside them), not its 72 MB */
    ck_assert_msg(r1.ru_maxrss - r0.ru_maxrss < 24 * 1024, "maxrss grew by %ld KiB", r1.ru_maxrss - r0.ru_maxrss);
    snprintf(want, sizeof want, "safetensors_load: %s: header holds more than 262144 JSON values (at most 262144: "
                                "16384 tensors)", path);
    ck_assert_str_eq(runfiles_last_error(), want);
    /* the count goes on across the reader's 64 KiB chunks: an escaped quote
     * split by one (the backslash the first chunk's last byte) keeps the
     * string open, so the 300,000 commas after it are no values */
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    const char *pre = "{\"__metadata__\":{\"k\":\"";
    size_t fill = 65535 - strlen(pre), commas = 300000;
    uint64_t hl = strlen(pre) + fill + 2 + commas + 3;
    fwrite(&hl, 8, 1, f);
    fputs(pre, f);
    for (size_t i = 0; i < fill; i++) fputc('a', f);
    fputs("\\\"", f);
    for (size_t i = 0; i < commas; i++) fputc(',', f);
    fputs("\"}}", f);
    ck_assert_int_eq(fclose(f), 0);
    struct safetensors *st = safetensors_load(path);
    ck_assert_msg(st, "%s", runfiles_last_error());
    ck_assert_int_eq(st->n, 0);
    ck_assert_uint_eq(strlen(safetensors_meta_get(st, "k")), fill + 1 + commas);
    safetensors_free(st);
    unlink(path);
}
END_TEST

/* ---- --config ------------------------------------------------------------------- */

static void config_refused(const char *text, size_t n, const char *want_fmt)
{
    char path[] = "/tmp/test_rl_files_cfg_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    ck_assert(write(fd, text, n) == (ssize_t)n);
    close(fd);
    const char *args[] = { "--config", path, NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args, 300), 2);
    char want[700];
    snprintf(want, sizeof want, want_fmt, path);
    ck_assert_str_eq(kit_err, want);
    unlink(path);
}

START_TEST(test_config_file_refusals)
{
    /* was: the run tried to allocate ~48 GB */
    const char *big = "{\"hidden\": \"65536,65536,65536,65536\"}";
    config_refused(big, strlen(big), "tributary-train: --hidden: a policy of these layers has over 25770196992 "
                                     "parameters (at most 134217728) (see tributary-train --help)\n");
    /* was: accepted, the junk ignored */
    const char *junk = "{\"lr\": 0.001} junk";
    config_refused(junk, strlen(junk),
                   "tributary-train: --config %s: bytes after the JSON object (from byte 14, line 1, column 15) "
                   "(see tributary-train --help)\n");
    const char nul[] = "{\"lr\": 0.001}\0{\"lr\": 5}";
    config_refused(nul, sizeof nul - 1,
                   "tributary-train: --config %s: bytes after the JSON object (from byte 13, line 1, column 14) "
                   "(see tributary-train --help)\n");
    /* was: "must be a number or a string" */
    char text[6000];
    snprintf(text, sizeof text, "{\"env\": \"%0600d\"}", 0);
    config_refused(text, strlen(text), "tributary-train: --config %s: 'env' is too long (600 bytes, at most 511) "
                                       "(see tributary-train --help)\n");
    snprintf(text, sizeof text, "{\"logdir\": \"/tmp/%05000d\"}", 0);
    config_refused(text, strlen(text), "tributary-train: --config %s: 'logdir' is too long (5005 bytes, at most 511) "
                                       "(see tributary-train --help)\n");
    /* a NUL in a string (issue 33): was cut there without a word ("k=a\u0000b" read as "k=a", a logdir "/tmp/a") */
    const char *nul_value = "{\"lr\": 0.001, \"env_arg\": [\"k=a\\u0000b\"]}";
    config_refused(nul_value, strlen(nul_value),
                   "tributary-train: --config %s: the value of 'env_arg' holds \\u0000 (a NUL character), which no "
                   "setting can hold (see tributary-train --help)\n");
    const char *nul_logdir = "{\"logdir\": \"/tmp/a\\u0000b\"}";
    config_refused(nul_logdir, strlen(nul_logdir),
                   "tributary-train: --config %s: the value of 'logdir' holds \\u0000 (a NUL character), which no "
                   "setting can hold (see tributary-train --help)\n");
    const char *nul_key = "{\"lr\\u0000junk\": 0.5}";
    config_refused(nul_key, strlen(nul_key),
                   "tributary-train: --config %s: the key 'lr\\u0000junk' holds \\u0000 (a NUL character), which no "
                   "setting can hold (see tributary-train --help)\n");
    /* an escaped backslash before u0000 is text, not a NUL: the value is read whole (and refused as no size) */
    const char *not_nul = "{\"hidden\": \"a\\\\u0000\"}";
    config_refused(not_nul, strlen(not_nul), "tributary-train: --config %s: bad value 'a\\u0000' for 'hidden' (see "
                                             "tributary-train --help)\n");
}
END_TEST

/* A command-line string longer than its buffer: said so, with the limit, as
 * --config says it (was: "bad value '...' for --env"). */
START_TEST(test_cli_strings_too_long)
{
    char env[700], logdir[1300], want[256];
    snprintf(env, sizeof env, "/tmp/%0595d.so", 0);   /* 603 bytes */
    snprintf(logdir, sizeof logdir, "/tmp/%01200d", 0);   /* 1205 bytes */
    static const char *const progs[] = { TRIB_TRAIN_BIN, TRIB_AGENT_BIN };
    static const char *const names[] = { "tributary-train", "tributary-agent" };
    for (int k = 0; k < 2; k++) {
        const char *a1[] = { "--env", env, NULL };
        ck_assert_int_eq(kit_run(progs[k], a1, 300), 2);
        snprintf(want, sizeof want, "%s: --env is too long (603 bytes, at most 511) (see %s --help)\n", names[k],
                 names[k]);
        ck_assert_str_eq(kit_err, want);
        char eq[1400];
        snprintf(eq, sizeof eq, "--logdir=%s", logdir);
        const char *a2[] = { eq, NULL };
        ck_assert_int_eq(kit_run(progs[k], a2, 300), 2);
        snprintf(want, sizeof want, "%s: --logdir is too long (1205 bytes, at most 511) (see %s --help)\n", names[k],
                 names[k]);
        ck_assert_str_eq(kit_err, want);
    }
    const char *a3[] = { "--env", env, "policy.safetensors", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, a3, 300), 2);
    ck_assert_str_eq(kit_err, "tributary-eval: --env is too long (603 bytes, at most 511) (see tributary-eval --help)\n");
    /* the longest that fits is no usage error of its own: the plug-in is looked for */
    snprintf(env, sizeof env, "/tmp/%0503d.so", 0);   /* 511 bytes */
    const char *a4[] = { "--env", env, NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, a4, 300), 2);
    ck_assert_msg(strstr(kit_err, "tributary-train: --env: plugin /tmp/000") == kit_err, "%s", kit_err);
}
END_TEST

/* ---- flags that mean nothing (issue 24, N14) ----------------------------------- */

/* Values that passed every check yet meant nothing: an infinite target
 * ("solved" at once), loss coefficients that overflow every loss (every
 * observer dropped), a learning rate below any use (was "bad value"). Each
 * is refused with the reason and the accepted range, on the command line,
 * in --config and in a resumed run's config.json alike. */
static const struct { const char *flag, *value, *json, *why; } meaningless[] = {
    { "target", "-inf", "\"-inf\"", "--target (the mean return that counts as solved) must be a finite number, not -inf" },
    { "target", "inf", "\"inf\"", "--target (the mean return that counts as solved) must be a finite number, not inf" },
    { "ent-coef", "1e308", "1e308", "--ent-coef (the entropy bonus's weight in the loss) must be in [0, 10], not 1e+308" },
    { "ent-coef", "-0.5", "-0.5", "--ent-coef (the entropy bonus's weight in the loss) must be in [0, 10], not -0.5" },
    { "vf-coef", "-1e308", "-1e308", "--vf-coef (the value loss's weight in the loss) must be in [0, 10], not -1e+308" },
    { "vf-coef", "1e999", "\"1e999\"", "--vf-coef (the value loss's weight in the loss) must be in [0, 10], not inf" },
    { "lr", "1e-320", "1e-320", "--lr (the learning rate) must be in [1e-10, 1], not 9.99989e-321" },
    { "lr", "2", "2", "--lr (the learning rate) must be in [1e-10, 1], not 2" },
    { "max-grad-norm", "inf", "\"inf\"", "--max-grad-norm must be a finite number >= 0 (0: no clipping), not inf" },
    { "reward-scale", "1e300", "1e300", "--reward-scale must be in [1e-06, 1e+06] or [-1e+06, -1e-06], not 1e+300" },
};

START_TEST(test_flags_meaningless)
{
    static const char *const progs[] = { TRIB_TRAIN_BIN, TRIB_AGENT_BIN };
    static const char *const names[] = { "tributary-train", "tributary-agent" };
    char want[512], flag[64], text[256];
    for (int i = 0; i < (int)(sizeof meaningless / sizeof meaningless[0]); i++) {
        snprintf(flag, sizeof flag, "--%s", meaningless[i].flag);
        for (int k = 0; k < 2; k++) {
            const char *args[] = { flag, meaningless[i].value, NULL };
            ck_assert_msg(kit_run(progs[k], args, 300) == 2, "%s %s %s: not refused\n%s", names[k], flag, meaningless[i].value, kit_err);
            snprintf(want, sizeof want, "%s: %s (see %s --help)\n", names[k], meaningless[i].why, names[k]);
            ck_assert_str_eq(kit_err, want);
        }
        /* --config FILE */
        char path[] = "/tmp/test_rl_files_cfg_XXXXXX";
        int fd = mkstemp(path);
        ck_assert(fd >= 0);
        int n = snprintf(text, sizeof text, "{\"%s\": %s}", meaningless[i].flag, meaningless[i].json);
        ck_assert(write(fd, text, (size_t)n) == n);
        close(fd);
        const char *cargs[] = { "--config", path, NULL };
        ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, cargs, 300), 2);
        snprintf(want, sizeof want, "tributary-train: %s (see tributary-train --help)\n", meaningless[i].why);
        ck_assert_str_eq(kit_err, want);
        unlink(path);
        /* a resumed run's config.json */
        char dir[] = "/tmp/test_rl_files_cj_XXXXXX", cj[128];
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(cj, sizeof cj, "%s/config.json", dir);
        FILE *f = fopen(cj, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "{\"preset\": \"ppo-fast\", \"observers\": 1, \"%s\": %s}\n", meaningless[i].flag, meaningless[i].json);
        fclose(f);
        const char *rargs[] = { "--resume", dir, "--quiet", NULL };
        ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, rargs, 300), 2);
        ck_assert_str_eq(kit_err, want);
        kit_rm_rf(dir);
    }
    /* the edges are accepted: the parse goes on to the next check */
    const char *edge[] = { "--lr", "1", "--ent-coef", "10", "--vf-coef", "0", "--target", "-1e300", "--observers", "0", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, edge, 300), 2);
    ck_assert_str_eq(kit_err, "tributary-train: --observers must be in 1..64, not 0 (see tributary-train --help)\n");
}
END_TEST

/* A report's episodes out of their bounds reads as what is wrong (was
 * "episodes 100 is out of range 100..64"). */
START_TEST(test_report_episode_bounds)
{
    struct rl_report r = { .steps = 64, .min_return = 1, .explained_var = NAN };
    for (int i = 0; i < 100; i++) rl_report_add(&r, 1.0, 1);
    ck_assert_int_eq(r.n_returns, RL_REPORT_EPISODES < 100 ? RL_REPORT_EPISODES : 100);
    struct rpc_value v = rl_report_pack(&r);
    struct rl_report got;
    ck_assert_int_eq(rl_report_unpack(&v, &got), -1);
    char want[160];
    snprintf(want, sizeof want, "report: episodes 100 is more than its 64 steps (an episode takes at least one)");
    ck_assert_str_eq(rl_last_error(), want);
    rpc_value_clear(&v);
    r.steps = 1000;
    r.episodes = 3;   /* fewer than the returns it carries */
    v = rl_report_pack(&r);
    ck_assert_int_eq(rl_report_unpack(&v, &got), -1);
    snprintf(want, sizeof want, "report: episodes 3 is fewer than the %d returns it carries", r.n_returns);
    ck_assert_str_eq(rl_last_error(), want);
    rpc_value_clear(&v);
    r.episodes = 100;
    r.lengths[7] = 0;
    v = rl_report_pack(&r);
    ck_assert_int_eq(rl_report_unpack(&v, &got), -1);
    ck_assert_str_eq(rl_last_error(), "report: lengths[7] 0 is out of range 1..2147483647");
    rpc_value_clear(&v);
}
END_TEST

/* ---- files never name code ------------------------------------------------------- */

static bool marked(void) { return access(MARK, F_OK) == 0; }

START_TEST(test_eval_plugin_named_by_policy_file)
{
    unlink(MARK);
    char path[] = "/tmp/test_rl_files_evil_XXXXXX.safetensors";
    close(mkstemps(path, 12));
    /* a real 4-8-2 policy whose metadata names the plug-in */
    struct policy_arch a = { .obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = { 8 } };
    struct nn_module *actor = NULL;
    ck_assert_int_eq(policy_arch_build(&a, 1, &actor, NULL), 0);
    ck_assert_int_eq(policy_file_save(path, &a, "Evil-v0", EVIL_SO, actor->n_params, actor->params), 0);
    nn_module_free(actor);
    const char *plain[] = { path, "--episodes", "2", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, plain, 300), 1);
    char want[768];
    snprintf(want, sizeof want, "tributary-eval: %s was trained on the env '%s', which is not a built-in: a policy "
                                "file does not choose code to run; to load that plug-in, pass --env %s\n", path,
             EVIL_SO, EVIL_SO);
    ck_assert_str_eq(kit_err, want);
    ck_assert_msg(!marked(), "the plug-in named by the file was loaded");
    const char *builtin[] = { path, "--episodes", "2", "--env", "CartPole-v1", NULL };
    ck_assert_msg(kit_run(TRIB_EVAL_BIN, builtin, 300) == 0, "%s", kit_err);
    ck_assert_msg(!marked(), "the plug-in named by the file was loaded");
    /* named on the command line: loaded */
    const char *asked[] = { path, "--episodes", "2", "--env", EVIL_SO, NULL };
    ck_assert_msg(kit_run(TRIB_EVAL_BIN, asked, 300) == 0, "%s", kit_err);
    ck_assert_msg(marked(), "--env %s did not load it", EVIL_SO);
    ck_assert_ptr_nonnull(strstr(kit_out, "on Evil-v0, 2 episodes"));
    unlink(MARK);
    unlink(path);
}
END_TEST

START_TEST(test_eval_and_resume_plugin_named_by_checkpoint)
{
    unlink(MARK);
    char path[256], q[600];
    snprintf(q, sizeof q, "\"%s\"", EVIL_SO);
    char *dir = ckpt_with_config("env", q, path, sizeof path);
    /* was: loaded even with --env CartPole-v1 */
    const char *builtin[] = { path, "--episodes", "2", "--env", "CartPole-v1", NULL };
    ck_assert_msg(kit_run(TRIB_EVAL_BIN, builtin, 300) == 0, "%s", kit_err);
    ck_assert_msg(!marked(), "the plug-in named by the checkpoint was loaded");
    const char *plain[] = { path, "--episodes", "2", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, plain, 300), 1);
    ck_assert_msg(strstr(kit_err, "which is not a built-in: a policy file does not choose code to run") != NULL, "%s", kit_err);
    ck_assert_msg(!marked(), "the plug-in named by the checkpoint was loaded");
    /* --resume takes the env from the command line and refuses the mismatch */
    const char *resume[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "3", "--resume", dir,
                             "--env", "CartPole-v1", "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, resume, 300), 1);
    char want[900];
    snprintf(want, sizeof want, "was made with --env \"%s\", this run has \"CartPole-v1\"", EVIL_SO);
    ck_assert_msg(strstr(kit_err, want) != NULL, "%s", kit_err);
    ck_assert_msg(!marked(), "--resume loaded the plug-in named by the checkpoint");
    /* nor by the run's config.json: --resume DIR alone restores every flag
     * but a plug-in env, which the command line must name */
    char cj[400];
    snprintf(cj, sizeof cj, "%s/config.json", dir);
    FILE *f = fopen(cj, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"preset\": \"ppo-fast\", \"env\": \"%s\", \"observers\": 1, \"envs-per-observer\": 8}\n", EVIL_SO);
    fclose(f);
    const char *alone[] = { "--resume", dir, "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, alone, 300), 2);
    snprintf(want, sizeof want, "tributary-train: --resume: the run's env is the plug-in %s; name it with --env to "
                                "load it (see tributary-train --help)\n", EVIL_SO);
    ck_assert_str_eq(kit_err, want);
    ck_assert_msg(!marked(), "--resume loaded the plug-in named by config.json");
    kit_rm_rf(dir);
    free(dir);
}
END_TEST

/* ---- links and FIFOs among a run's files (issue 24, N12) ------------------------ */

/* --resume dir must be refused (exit 2, nothing started, within 60 s) with
 * "--resume DIR: <path>: <what>". */
static void resume_refused_file(const char *dir, const char *path, const char *what)
{
    const char *args[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "100", "--resume", dir,
                           "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, 60);
    char want[900];
    snprintf(want, sizeof want, "tributary-train: --resume %s: %s: %s (see tributary-train --help)\n", dir, path, what);
    ck_assert_msg(rc == 2, "exit %d (-1: it hung), wanted '%s'\n%s", rc, want, kit_err);
    ck_assert_str_eq(kit_err, want);
    ck_assert_msg(strstr(kit_out, "resumed from") == NULL, "%s", kit_out);
}

/* tributary-eval dir must be refused (exit 1, within 60 s) naming path. */
static void eval_refused_file(const char *dir, const char *path, const char *what)
{
    const char *args[] = { dir, "--episodes", "2", NULL };
    int rc = kit_run(TRIB_EVAL_BIN, args, 60);
    char want[900];
    snprintf(want, sizeof want, "tributary-eval: %s: %s\n", path, what);
    ck_assert_msg(rc == 1, "exit %d (-1: it hung), wanted '%s'\n%s", rc, want, kit_err);
    ck_assert_str_eq(kit_err, want);
}

#define LINKED "is a symbolic link: a run's files are never followed"
#define LINKED_DIR "is a symbolic link, not a directory: a run's files are never followed"
#define FIFO "is a FIFO, not a regular file"

START_TEST(test_run_files_links_and_fifos)
{
    char path[256], elsewhere[] = "/tmp/test_rl_files_else_XXXXXX", p[400], q[700];
    ck_assert_ptr_nonnull(mkdtemp(elsewhere));
    struct run_stats_saved v = base_counters();
    char *dir = craft("counters", &v, sizeof v, path, sizeof path);
    /* checkpoints/ a link to another directory holding checkpoints: was
     * resumed from there, new checkpoints written and old ones deleted there */
    snprintf(p, sizeof p, "%s/checkpoints", dir);
    snprintf(q, sizeof q, "%s/checkpoints", elsewhere);
    ck_assert_int_eq(rename(p, q), 0);
    ck_assert_int_eq(symlink(q, p), 0);
    char *before = snapshot(elsewhere);
    resume_refused_file(dir, p, LINKED_DIR);
    eval_refused_file(dir, p, LINKED_DIR);
    char *after = snapshot(elsewhere);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    /* a new run's --logdir holding such a link: refused as a run's (it was
     * taken for an empty directory and written through), and --overwrite
     * removes the link, not what it leads to */
    char fresh[] = "/tmp/test_rl_files_new_XXXXXX", fl[300];
    ck_assert_ptr_nonnull(mkdtemp(fresh));
    snprintf(fl, sizeof fl, "%s/checkpoints", fresh);
    ck_assert_int_eq(symlink(q, fl), 0);
    const char *fargs[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "2", "--logdir", fresh,
                            "--quiet", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, fargs, 60), 2);
    ck_assert_msg(strstr(kit_err, "already holds a run (checkpoints)") != NULL, "%s", kit_err);
    const char *oargs[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "2", "--logdir", fresh,
                            "--overwrite", "--quiet", NULL };
    before = snapshot(elsewhere);
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, oargs, 300) == 1, "%s", kit_err);
    after = snapshot(elsewhere);
    ck_assert_str_eq(before, after);
    struct stat st;
    ck_assert_int_eq(lstat(fl, &st), 0);
    ck_assert_msg(S_ISDIR(st.st_mode), "%s is not the run's own directory", fl);
    free(before);
    free(after);
    kit_rm_rf(fresh);
    /* back in place; then the newest checkpoint a FIFO, then a link */
    ck_assert_int_eq(unlink(p), 0);
    ck_assert_int_eq(rename(q, p), 0);
    snprintf(q, sizeof q, "%s/ckpt-000000999999.trib", p);
    ck_assert_int_eq(mkfifo(q, 0600), 0);
    resume_refused_file(dir, q, FIFO);
    eval_refused_file(dir, q, FIFO);
    unlink(q);
    ck_assert_int_eq(symlink(path, q), 0);
    resume_refused_file(dir, q, LINKED);
    eval_refused_file(dir, q, LINKED);
    unlink(q);
    /* config.json, metrics.csv and policy.safetensors */
    static const char *const names[] = { "config.json", "metrics.csv", "policy.safetensors" };
    for (int i = 0; i < 3; i++) {
        snprintf(q, sizeof q, "%s/%s", dir, names[i]);
        ck_assert_int_eq(mkfifo(q, 0600), 0);
        resume_refused_file(dir, q, FIFO);
        if (i == 2) eval_refused_file(dir, q, FIFO);
        unlink(q);
        snprintf(p, sizeof p, "%s/%s", elsewhere, names[i]);
        FILE *f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fputs(i == 0 ? "{\"observers\": 1, \"envs-per-observer\": 8}\n" : "x\n", f);
        fclose(f);
        ck_assert_int_eq(symlink(p, q), 0);
        resume_refused_file(dir, q, LINKED);
        unlink(q);
    }
    /* a FIFO named on the command line is refused, not waited on */
    snprintf(q, sizeof q, "%s/fifo.safetensors", elsewhere);
    ck_assert_int_eq(mkfifo(q, 0600), 0);
    const char *eargs[] = { q, "--env", "CartPole-v1", NULL };
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, eargs, 60), 1);
    char want[1000];
    snprintf(want, sizeof want, "safetensors_load: %s: " FIFO "\n", q);
    ck_assert_msg(strstr(kit_err, want), "%s", kit_err);
    snprintf(q, sizeof q, "%s/fifo.trib", elsewhere);
    ck_assert_int_eq(mkfifo(q, 0600), 0);
    ck_assert_int_eq(kit_run(TRIB_EVAL_BIN, eargs, 60), 1);
    snprintf(want, sizeof want, "tributary-eval: ckpt_load: %s: " FIFO "\n", q);
    ck_assert_str_eq(kit_err, want);
    kit_rm_rf(dir);
    free(dir);
    kit_rm_rf(elsewhere);
}
END_TEST

/* The periodic checkpoint writer, when checkpoints/ becomes a link to
 * another directory mid-run: each checkpoint fails, saying so; nothing is
 * written there and nothing there deleted (was: written there, and its
 * older ckpt-*.trib pruned). */
START_TEST(test_checkpoint_writer_refuses_link)
{
    char dir[] = "/tmp/test_rl_files_w_XXXXXX", other[] = "/tmp/test_rl_files_o_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(mkdtemp(other));
    rmdir(dir);   /* the run makes it */
    char ck[300], moved[300], decoy[400];
    snprintf(ck, sizeof ck, "%s/checkpoints", dir);
    snprintf(moved, sizeof moved, "%s/moved", dir);
    for (int i = 0; i < 5; i++) {   /* older checkpoints of another run: prune would delete them */
        snprintf(decoy, sizeof decoy, "%s/ckpt-%012d.trib", other, i);
        FILE *f = fopen(decoy, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    const char *argv[] = { TRIB_TRAIN_BIN, "--observers", "1", "--envs-per-observer", "8", "--max-updates", "100000",
                           "--checkpoint-every", "1", "--logdir", dir, "--quiet", NULL };
    struct proc_group g;
    proc_group_init(&g);
    ck_assert_int_eq(proc_spawn(&g, argv, PROC_CAPTURE, PROC_CAPTURE), 0);
    /* its first checkpoint, then checkpoints/ swapped for a link */
    struct ckpt *c = NULL;
    for (int i = 0; i < 6000 && ckpt_load_latest(ck, &c, NULL, 0) != 1; i++) usleep(10000);
    ck_assert_msg(c != NULL, "no first checkpoint in 60 s");
    ckpt_free(c);
    char *before = snapshot(other);
    /* in one step (the link made aside, then exchanged with the directory):
     * a checkpoint written between a rename and a symlink would fail for
     * the directory's absence first */
    ck_assert_int_eq(symlink(other, moved), 0);
    ck_assert_int_eq(renameat2(AT_FDCWD, moved, AT_FDCWD, ck, RENAME_EXCHANGE), 0);
    /* Not necessarily the first failure: a write under way at the exchange
     * (its temporary file made in the directory, its rename after) fails
     * for the file it made being gone ("No such file or directory"; seen
     * once in a clean-clone run at load 2); the next one names the link.
     * What matters is that none follows it (the snapshot below). */
    char want[600];
    snprintf(want, sizeof want, " in a row): ckpt_write: %s: " LINKED_DIR, ck);
    bool seen = false;
    for (int i = 0; i < 6000 && !seen; i++) {
        kit_err[proc_output(&g, 0, 2, kit_err, KIT_OUT_CAP - 1)] = '\0';
        seen = strstr(kit_err, want) != NULL;
        if (!seen) usleep(10000);
    }
    kill(g.p[0].pid, SIGKILL);
    proc_wait(&g, 0, 30);
    proc_group_deinit(&g);
    ck_assert_msg(seen, "no '%s' in 60 s:\n%s", want, kit_err);
    char *after = snapshot(other);
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    unlink(ck);
    kit_rm_rf(moved);
    kit_rm_rf(dir);
    kit_rm_rf(other);
}
END_TEST

/* ---- failed checkpoint writes ------------------------------------------------------ */

/* Resumes a copy of the base checkpoint in dir with a checkpoint after
 * every iteration (8 updates) whose writes all fail with errno_text: three
 * failures, each reported with its path and the checkpoint a resume would
 * use (the base one, kept), then the run stops with exit 1. */
static void resume_with_failing_writes(const char *dir, const char *errno_text)
{
    char ck[300], kept[400];
    snprintf(ck, sizeof ck, "%s/checkpoints", dir);
    struct ckpt *c = base_ckpt();
    snprintf(kept, sizeof kept, "%s/ckpt-%012" PRId64 ".trib", ck, c->step);
    int64_t step = c->step;
    ckpt_free(c);
    char *before = snapshot(ck);
    const char *args[] = { "--observers", "1", "--envs-per-observer", "8", "--max-updates", "1000",
                           "--checkpoint-every", "1", "--resume", dir, "--quiet", NULL };
    int rc = kit_run(TRIB_TRAIN_BIN, args, 300);
    ck_assert_msg(rc == 1, "exit %d\n%s", rc, kit_err);
    for (int k = 1; k <= 3; k++) {
        char want[1024];
        snprintf(want, sizeof want, "agent: checkpoint of update %" PRId64 " FAILED (%d in a row): ckpt_write: "
                 "%s/ckpt-%012" PRId64 ".trib: %s; a resume would use %s%s\n", step + 8 * k, k, ck, step + 8 * k,
                 errno_text, kept, k == 3 ? "; stopping the run" : "");
        ck_assert_msg(strstr(kit_err, want) != NULL, "no '%s' in\n%s", want, kit_err);
    }
    ck_assert_msg(strstr(kit_out, "\"stopped_by\":\"checkpoint-failures\"") != NULL, "%s", kit_out);
    char *after = snapshot(ck);
    ck_assert_str_eq(before, after);   /* the good one kept, no partial file left */
    free(before);
    free(after);
}

START_TEST(test_checkpoint_write_failures)
{
    /* a real write failure for anyone: files over RLIMIT_FSIZE fail with EFBIG */
    struct ckpt *c = base_ckpt();
    int64_t version = 0;
    size_t len = 0;
    memcpy(&version, ckpt_get(c, "version", &len), sizeof version);
    ckpt_free(c);
    char path[256];
    char *dir = craft("version", &version, sizeof version, path, sizeof path);
    signal(SIGXFSZ, SIG_IGN);   /* inherited: the write fails instead of killing the writer */
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    struct rlimit lim = { 32 << 10, old.rlim_max };
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    resume_with_failing_writes(dir, "File too large");
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    kit_rm_rf(dir);
    free(dir);
    /* a full file system, where one can be mounted (root): a 256 KiB tmpfs
     * holds the base checkpoint but no second one */
    char mnt[] = "/tmp/test_rl_files_full_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(mnt));
    if (geteuid() != 0 || mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0) {
        fprintf(stderr, "test_checkpoint_write_failures: no tmpfs (%s): the full-disk case is not run\n",
                geteuid() ? "not root" : strerror(errno));
        rmdir(mnt);
        return;
    }
    char sub[400], dst[500];
    snprintf(sub, sizeof sub, "%s/run", mnt);
    snprintf(dst, sizeof dst, "%s/checkpoints", sub);
    ck_assert_int_eq(ckpt_mkdirs(dst, "test"), 0);
    dir = craft("version", &version, sizeof version, path, sizeof path);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -p %s %s/", path, dst);
    ck_assert_int_eq(system(cmd), 0);
    kit_rm_rf(dir);
    free(dir);
    resume_with_failing_writes(sub, "No space left on device");
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
}
END_TEST

int main(void)
{
    /* the template checkpoints: a real two-update run */
    snprintf(BASE, sizeof BASE, "/tmp/test_rl_files_base_XXXXXX");
    if (!mkdtemp(BASE)) return 1;
    snprintf(MARK, sizeof MARK, "%s/evil-was-loaded", BASE);
    setenv("TRIB_EVIL_MARK", MARK, 1);
    const char *argv[] = { TRIB_TRAIN_BIN, "--observers", "1", "--envs-per-observer", "8", "--max-updates", "2",
                           "--logdir", BASE, "--quiet", NULL };
    struct proc_group g;
    proc_group_init(&g);
    if (proc_spawn(&g, argv, PROC_DISCARD, PROC_INHERIT) != 0) return 1;
    int rc = proc_wait(&g, 0, 300);
    proc_group_deinit(&g);
    if (rc != 1) {
        fprintf(stderr, "test_rl_files: the base run exited %d\n", rc);
        return 1;
    }
    rc = KIT_RUN("rl_files",
             { "files", 240, .tests = { test_resume_counters_out_of_range,
               test_resume_refused_late_writes_nothing, test_resume_observer_state_not_finite,
               test_counters_fields, test_stats_mode_figures, test_ckpt_negative_step, test_policy_file_sizes,
               test_checkpoint_arch_sizes, test_many_empty_tensors, test_config_file_refusals,
               test_cli_strings_too_long, test_flags_meaningless, test_report_episode_bounds,
               test_eval_plugin_named_by_policy_file, test_eval_and_resume_plugin_named_by_checkpoint,
               test_checkpoint_write_failures, test_run_files_links_and_fifos, test_policy_not_finite,
               test_checkpoint_writer_refuses_link } });
    kit_rm_rf(BASE);
    return rc;
}
