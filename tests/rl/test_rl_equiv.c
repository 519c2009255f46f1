/* Equivalence of the distributed update with a local one: tributary-train
 * runs one sync PPO update with 2 observers (real processes, RPC, dist
 * autograd, dist_optim; the agent evaluates both observers' minibatches in
 * one merged forward) and, through TRIB_DEBUG_DUMP, leaves the parameters
 * before and after it and the minibatch each observer used. This test
 * recomputes that update in one process with plain autograd and a local
 * Adam, and compares the parameters (abs 1e-6 + rel 1e-5). The compute
 * floor (trib-floor, the reference scripts/bench rl measures against) is
 * checked to do the same work: same minibatches, same first update. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "optim/optim.h"
#include "rl/losses.h"
#include "tensor/autograd.h"
#include "tensor/nn.h"
#include "tensor/ops.h"
#include "kit.h"

#define MAXA 16

struct arrays { int n; int64_t count[MAXA]; float *data[MAXA]; };

static void read_arrays(const char *dir, const char *name, struct arrays *a)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "missing %s", path);
    memset(a, 0, sizeof *a);
    int64_t c;
    while (a->n < MAXA && fread(&c, sizeof c, 1, f) == 1) {
        ck_assert(c >= 0 && c < (1 << 24));
        a->count[a->n] = c;
        a->data[a->n] = calloc((size_t)c + 1, sizeof(float));
        ck_assert((int64_t)fread(a->data[a->n], sizeof(float), (size_t)c, f) == c);
        a->n++;
    }
    fclose(f);
}

static void free_arrays(struct arrays *a)
{
    for (int i = 0; i < a->n; i++) free(a->data[i]);
}

static int run_prog(const char *prog, const char *dump_dir, const char *const *extra)
{
    const char *argv[40] = { prog, "--preset", "ppo", "--observers", "2", "--envs-per-observer", "4",
                             "--steps-per-rollout", "8", "--minibatches", "1", "--epochs", "1", "--max-updates", "1",
                             "--seed", "3", "--quiet", "--device", "cpu" };
    int n = 20;
    for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    setenv("TRIB_DEBUG_DUMP", dump_dir, 1);
    struct proc_group g;
    proc_group_init(&g);
    int i = proc_spawn(&g, argv, PROC_DISCARD, PROC_INHERIT);
    unsetenv("TRIB_DEBUG_DUMP");
    ck_assert_int_eq(i, 0);
    int rc = proc_wait(&g, 0, -1);
    proc_group_deinit(&g);
    return rc;
}

static int run_train(const char *dump_dir, const char *const *extra) { return run_prog(TRIB_TRAIN_BIN, dump_dir, extra); }

/* The policy tributary-train builds for CartPole with the ppo preset: a
 * 4-64-64-2 tanh actor and a 4-64-64-1 tanh critic, params in that order. */
static void compare_update(const char *dir, double max_grad_norm, enum optim_kind kind, double lr)
{
    struct arrays before, after, mb[2];
    read_arrays(dir, "params_before.bin", &before);
    read_arrays(dir, "params_after.bin", &after);
    read_arrays(dir, "minibatch_0.bin", &mb[0]);
    read_arrays(dir, "minibatch_1.bin", &mb[1]);
    uint64_t rng = 99;
    int as[] = { 4, 64, 64, 2 }, cs[] = { 4, 64, 64, 1 };
    struct nn_module *actor = nn_mlp_new(4, as, NN_TANH, 0.0f, &rng), *critic = nn_mlp_new(4, cs, NN_TANH, 0.0f, &rng);
    actor->training = critic->training = false;
    int np = actor->n_params + critic->n_params;
    ck_assert_int_eq(before.n, np);
    ck_assert_int_eq(after.n, np);
    struct tensor *params[16];
    for (int i = 0; i < np; i++) {
        params[i] = i < actor->n_params ? actor->params[i] : critic->params[i - actor->n_params];
        ck_assert_int_eq(params[i]->numel, before.count[i]);
        memcpy(tensor_data(params[i]), before.data[i], (size_t)before.count[i] * sizeof(float));
    }
    struct tensor *total = NULL;
    for (int k = 0; k < 2; k++) {
        struct arrays *m = &mb[k];
        ck_assert_int_eq(m->n, 7);
        int M = (int)m->count[3];
        ck_assert_int_eq(m->count[1], (int64_t)M * 4);
        int64_t os[2] = { M, 4 };
        struct tensor *obs = tensor_from_f32(2, os, m->data[1]);
        int64_t *a64 = calloc((size_t)M, sizeof *a64);
        for (int i = 0; i < M; i++) a64[i] = (int64_t)m->data[2][i];
        int64_t ms[1] = { M };
        struct tensor *acts = tensor_from_data(DTYPE_I64, 1, ms, a64);
        free(a64);
        struct tensor *logits = nn_forward1(actor, obs), *v = nn_forward1(critic, obs);
        ck_assert(logits && v);
        struct tensor *logp, *ent;
        ck_assert_int_eq(rl_dist_eval(RL_DIST_CATEGORICAL, logits, NULL, acts, &logp, &ent), 0);
        struct rl_ppo_hyper h = { .clip = 0.2, .ent_coef = 0.01, .vf_coef = 0.5, .clip_vloss = true, .norm_adv = true };
        struct tensor *loss = rl_ppo_loss(logp, ent, v, m->data[3], NULL, m->data[4], m->data[5], m->data[6], M, &h,
                                          0.5 /* each observer's share of the samples */, NULL);
        ck_assert_msg(loss, "%s", tensor_last_error());
        struct tensor *sum = total ? tensor_add(total, loss) : tensor_retain(loss);
        tensor_free(total);
        total = sum;
        tensor_free(loss);
        tensor_free(logp);
        tensor_free(ent);
        tensor_free(logits);
        tensor_free(v);
        tensor_free(obs);
        tensor_free(acts);
    }
    ck_assert_int_eq(tensor_backward(total, NULL, false), 0);
    tensor_free(total);
    struct tensor *grads[16];
    for (int i = 0; i < np; i++) {
        grads[i] = params[i]->grad;
        ck_assert_ptr_nonnull(grads[i]);
    }
    if (max_grad_norm > 0) ck_assert_int_eq(optim_clip_grad_norm(np, grads, max_grad_norm, NULL), 0);
    struct optim_hyper hy = optim_defaults(kind);
    hy.lr = lr;
    hy.eps = 1e-5;
    struct optim *opt = optim_new(kind, &hy, np, params);
    ck_assert_int_eq(optim_step(opt, grads), 0);
    int moved = 0;
    for (int i = 0; i < np; i++) {
        const float *p = tensor_data(params[i]);
        for (int64_t j = 0; j < after.count[i]; j++) {
            double ref = p[j], got = after.data[i][j];
            ck_assert_msg(fabs(got - ref) <= 1e-6 + 1e-5 * fabs(ref), "param %d[%lld]: distributed %.9g, local %.9g", i,
                          (long long)j, got, ref);
            moved += after.data[i][j] != before.data[i][j];
        }
    }
    ck_assert_msg(moved > 1000, "only %d parameters moved", moved);
    optim_free(opt);
    nn_module_free(actor);
    nn_module_free(critic);
    free_arrays(&before);
    free_arrays(&after);
    free_arrays(&mb[0]);
    free_arrays(&mb[1]);
}

static void clean_dir(const char *dir)
{
    const char *names[] = { "params_before.bin", "params_after.bin", "minibatch_0.bin", "minibatch_1.bin" };
    char path[512];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

START_TEST(test_one_sync_update_matches_local)
{
    char dir[] = "/tmp/test_rl_equiv_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    int rc = run_train(dir, NULL);
    ck_assert_msg(rc == 1, "tributary-train exit %d (expected 1: out of --max-updates)", rc);
    compare_update(dir, 0.5, OPTIM_ADAM, 2.5e-4);
    clean_dir(dir);
}
END_TEST

/* Without clipping and with plain SGD, so the gradient's scale shows (Adam
 * and the clip would hide a wrong one). */
START_TEST(test_one_sync_update_matches_local_unclipped)
{
    char dir[] = "/tmp/test_rl_equiv_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *extra[] = { "--max-grad-norm", "0", "--optimizer", "sgd", "--lr", "0.5", "--no-anneal-lr", NULL };
    int rc = run_train(dir, extra);
    ck_assert_msg(rc == 1, "tributary-train exit %d (expected 1: out of --max-updates)", rc);
    compare_update(dir, 0.0, OPTIM_SGD, 0.5);
    clean_dir(dir);
}
END_TEST

/* Arrays a and b equal within abs 1e-6 + rel 1e-5 (exact when exact). */
static void compare_files(const char *da, const char *db, const char *name, bool exact)
{
    struct arrays a, b;
    read_arrays(da, name, &a);
    read_arrays(db, name, &b);
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++) {
        ck_assert_int_eq(a.count[i], b.count[i]);
        for (int64_t j = 0; j < a.count[i]; j++) {
            double x = a.data[i][j], y = b.data[i][j];
            ck_assert_msg(exact ? x == y : fabs(x - y) <= 1e-6 + 1e-5 * fabs(y), "%s array %d[%lld]: distributed %.9g, floor %.9g",
                          name, i, (long long)j, x, y);
        }
    }
    free_arrays(&a);
    free_arrays(&b);
}

/* trib-floor with the same flags: the same minibatches (bit for bit: same
 * envs, RNGs, act forwards) and the same parameters after the update. */
START_TEST(test_floor_does_the_same_work)
{
    char d1[] = "/tmp/test_rl_equiv_XXXXXX", d2[] = "/tmp/test_rl_equiv_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(d1));
    ck_assert_ptr_nonnull(mkdtemp(d2));
    /* SGD without clipping, so a gradient of another scale shows */
    const char *extra[] = { "--max-grad-norm", "0", "--optimizer", "sgd", "--lr", "0.5", "--no-anneal-lr", NULL };
    ck_assert_int_eq(run_train(d1, extra), 1);
    int rc = run_prog(TRIB_FLOOR_BIN, d2, extra);
    ck_assert_msg(rc == 1, "trib-floor exit %d (expected 1: out of --max-updates)", rc);
    compare_files(d1, d2, "minibatch_0.bin", true);
    compare_files(d1, d2, "minibatch_1.bin", true);
    compare_files(d1, d2, "params_before.bin", true);
    compare_files(d1, d2, "params_after.bin", false);
    clean_dir(d1);
    clean_dir(d2);
}
END_TEST

/* trib-floor --mode async is the sync floor (its learners split each
 * rollout into --minibatches as sync does; an async observer's own split,
 * --minibatches / --observers, failed its second minibatch as out of range). */
START_TEST(test_floor_of_async_is_sync)
{
    char d1[] = "/tmp/test_rl_equiv_XXXXXX", d2[] = "/tmp/test_rl_equiv_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(d1));
    ck_assert_ptr_nonnull(mkdtemp(d2));
    const char *sync[] = { "--minibatches", "2", "--max-updates", "2", NULL };
    const char *async[] = { "--minibatches", "2", "--max-updates", "2", "--mode", "async", NULL };
    ck_assert_int_eq(run_prog(TRIB_FLOOR_BIN, d1, sync), 1);
    int rc = run_prog(TRIB_FLOOR_BIN, d2, async);
    ck_assert_msg(rc == 1, "trib-floor --mode async exit %d (expected 1: out of --max-updates)", rc);
    compare_files(d1, d2, "minibatch_0.bin", true);
    compare_files(d1, d2, "minibatch_1.bin", true);
    compare_files(d1, d2, "params_after.bin", true);
    clean_dir(d1);
    clean_dir(d2);
}
END_TEST

KIT_MAIN("rl_equiv",
         { "equiv", 120, .tests = { test_one_sync_update_matches_local, test_one_sync_update_matches_local_unclipped,
           test_floor_does_the_same_work, test_floor_of_async_is_sync } })
