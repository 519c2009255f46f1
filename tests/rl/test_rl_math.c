/* The RL arithmetic (rl/rl_math.h) and losses (rl/losses.h) against an
 * independent PyTorch implementation: fixtures/rl_fixtures.json (written by
 * scripts/gen_rl_fixtures.py with torch) holds inputs, values and torch's
 * gradients, replayed here without torch. Plus the window, permutations,
 * the loss-weight contract and exact messages for bad input.
 * Built a second time with RL_TEST_CUDA (test_rl_math_cuda, TRIB_CUDA
 * builds): the tensor tests then run with every tensor on the GPU, and the
 * program skips (exit 77) without a CUDA device. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim.h"
#include "rl/losses.h"
#include "rl/rl.h"
#include "rl/rl_math.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "kit.h"

#ifndef RL_FIXTURE
#error "RL_FIXTURE must name the fixture file"
#endif

#define MAXV 64        /* elements of the largest fixture array */
#define ATOL 1e-5      /* f32 losses and gradients: abs + rel * |ref| */
#define RTOL 1e-5

static cJSON *fixtures;
#ifdef RL_TEST_CUDA
static const enum device test_dev = DEVICE_CUDA;
#else
static const enum device test_dev = DEVICE_CPU;
#endif

/* t moved to the device under test (consumes t). */
static struct tensor *to_dev(struct tensor *t)
{
    ck_assert_ptr_nonnull(t);
    if (test_dev == DEVICE_CPU) return t;
    struct tensor *d = tensor_clone_to(t, test_dev);
    ck_assert_msg(d != NULL, "%s", tensor_last_error());
    tensor_free(t);
    return d;
}

/* A scalar tensor's value, from any device. */
static float scalar_of(const struct tensor *t)
{
    float v;
    ck_assert_int_eq(t->numel, 1);
    tensor_copy_to_host(t, &v);
    return v;
}

static void load_fixtures(void)
{
    if (fixtures) return;
    char *text = kit_must_read(RL_FIXTURE, NULL);
    fixtures = cJSON_Parse(text);
    free(text);
    ck_assert_msg(fixtures != NULL, "bad JSON in %s", RL_FIXTURE);
}

static const cJSON *section(const char *name)
{
    load_fixtures();
    const cJSON *s = cJSON_GetObjectItem(fixtures, name);
    ck_assert_msg(cJSON_IsArray(s) && cJSON_GetArraySize(s) > 0, "no fixture section %s", name);
    return s;
}

static const cJSON *item(const cJSON *c, const char *key)
{
    const cJSON *v = cJSON_GetObjectItem(c, key);
    ck_assert_msg(v != NULL, "fixture case lacks %s", key);
    return v;
}

static const char *case_name(const cJSON *c) { return item(c, "name")->valuestring; }
static double num(const cJSON *c, const char *key) { return item(c, key)->valuedouble; }
static int inum(const cJSON *c, const char *key) { return item(c, key)->valueint; }
static bool flag(const cJSON *c, const char *key) { return cJSON_IsTrue(item(c, key)); }

/* The n numbers of c[key] into out. */
static void floats(const cJSON *c, const char *key, float *out, int n)
{
    const cJSON *arr = item(c, key);
    ck_assert_int_le(n, MAXV);
    ck_assert_int_eq(cJSON_GetArraySize(arr), n);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) out[i++] = (float)v->valuedouble;
}

static void bools(const cJSON *c, const char *key, bool *out, int n)
{
    const cJSON *arr = item(c, key);
    ck_assert_int_eq(cJSON_GetArraySize(arr), n);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) out[i++] = cJSON_IsTrue(v);
}

static struct rl_ppo_hyper hyper_of(const cJSON *c)
{
    const cJSON *h = item(c, "hyper");
    return (struct rl_ppo_hyper){.clip = num(h, "clip"), .ent_coef = num(h, "ent_coef"), .vf_coef = num(h, "vf_coef"),
                                 .clip_vloss = flag(h, "clip_vloss"), .norm_adv = flag(h, "norm_adv")};
}

static bool close_to(double got, double want, double atol, double rtol)
{
    return fabs(got - want) <= atol + rtol * fabs(want);
}

static void assert_scalar(const char *cname, const char *what, double got, double want)
{
    ck_assert_msg(close_to(got, want, ATOL, RTOL), "%s %s: got %.9g, want %.9g", cname, what, got, want);
}

static void assert_floats(const char *cname, const char *what, const float *got, const cJSON *c, const char *key,
                          int n, double atol, double rtol)
{
    float want[MAXV];
    floats(c, key, want, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(close_to(got[i], want[i], atol, rtol), "%s %s[%d]: got %.9g, want %.9g", cname, what, i,
                      (double)got[i], (double)want[i]);
}

/* A tensor's values (CPU) against c[key]. */
static void assert_tensor(const char *cname, const char *what, const struct tensor *t, const cJSON *c,
                          const char *key)
{
    ck_assert_msg(t != NULL, "%s %s: no tensor", cname, what);
    ck_assert_int_eq(t->device, test_dev);
    float got[MAXV];
    ck_assert_int_le(t->numel, MAXV);
    tensor_copy_to_host(t, got);
    assert_floats(cname, what, got, c, key, (int)t->numel, ATOL, RTOL);
}

static void assert_grad(const char *cname, const struct tensor *leaf, const cJSON *c, const char *key)
{
    ck_assert_msg(leaf->grad != NULL, "%s: no gradient for %s", cname, key);
    assert_tensor(cname, key, leaf->grad, c, key);
}

/* c[key] as an f32 tensor of the given shape, optionally a grad leaf. */
static struct tensor *tensor_of(const cJSON *c, const char *key, int ndim, const int64_t *shape, bool grad)
{
    float buf[MAXV];
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    floats(c, key, buf, (int)numel);
    struct tensor *t = to_dev(tensor_from_f32(ndim, shape, buf));
    tensor_set_requires_grad(t, grad);
    return t;
}

static struct tensor *actions_i64(const cJSON *c, int64_t n, bool column)
{
    int64_t buf[MAXV];
    const cJSON *arr = item(c, "actions");
    ck_assert_int_eq(cJSON_GetArraySize(arr), n);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) buf[i++] = (int64_t)v->valuedouble;
    int64_t shape[2] = {n, 1};
    return to_dev(tensor_from_data(DTYPE_I64, column ? 2 : 1, shape, buf));
}

static void backward(struct tensor *loss)
{
    ck_assert_msg(tensor_backward(loss, NULL, false) == 0, "%s", tensor_last_error());
}

/* ---- returns and normalisation ------------------------------------------------------------ */

START_TEST(test_discounted_returns)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("returns")) {
        int n = cJSON_GetArraySize(item(c, "rewards"));
        float r[MAXV], out[MAXV];
        floats(c, "rewards", r, n);
        rl_discounted_returns(n, r, num(c, "gamma"), out);
        assert_floats(case_name(c), "returns", out, c, "returns", n, 1e-6, 1e-6);
        rl_discounted_returns(n, r, num(c, "gamma"), r);   /* in place */
        assert_floats(case_name(c), "returns in place", r, c, "returns", n, 1e-6, 1e-6);
    }
    float untouched = 7.0f;
    rl_discounted_returns(0, NULL, 0.99, &untouched);
    ck_assert_float_eq(untouched, 7.0f);
}
END_TEST

START_TEST(test_normalize)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("normalize")) {
        int n = cJSON_GetArraySize(item(c, "x"));
        float x[MAXV];
        floats(c, "x", x, n);
        rl_normalize(n, x, num(c, "eps"));
        assert_floats(case_name(c), "normalized", x, c, "out", n, 1e-6, 1e-6);
    }
}
END_TEST

START_TEST(test_normalize_single)
{
    /* torch's std of one element is nan; ours is 0, so the element becomes 0 */
    float x[1] = {3.5f};
    rl_normalize(1, x, 1e-8);
    ck_assert_float_eq(x[0], 0.0f);
    rl_normalize(0, x, 1e-8);
    ck_assert_float_eq(x[0], 0.0f);
}
END_TEST

/* ---- GAE ----------------------------------------------------------------------------------- */

struct gae_in {
    int T, B;
    double gamma, lambda;
    float rewards[MAXV], values[MAXV], final_values[MAXV], next_values[MAXV];
    bool terminated[MAXV], truncated[MAXV], has_final;
};

static void gae_load(const cJSON *c, struct gae_in *g)
{
    g->T = inum(c, "T");
    g->B = inum(c, "B");
    g->gamma = num(c, "gamma");
    g->lambda = num(c, "lambda");
    int n = g->T * g->B;
    floats(c, "rewards", g->rewards, n);
    floats(c, "values", g->values, n);
    floats(c, "next_values", g->next_values, g->B);
    bools(c, "terminated", g->terminated, n);
    bools(c, "truncated", g->truncated, n);
    g->has_final = !cJSON_IsNull(item(c, "final_values"));
    if (g->has_final) floats(c, "final_values", g->final_values, n);
}

static void gae_run(const struct gae_in *g, float *adv, float *ret)
{
    rl_gae(g->T, g->B, g->gamma, g->lambda, g->rewards, g->values, g->terminated, g->truncated,
           g->has_final ? g->final_values : NULL, g->next_values, adv, ret);
}

START_TEST(test_gae_fixtures)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("gae")) {
        struct gae_in g;
        gae_load(c, &g);
        float adv[MAXV], ret[MAXV];
        gae_run(&g, adv, ret);
        assert_floats(case_name(c), "advantages", adv, c, "advantages", g.T * g.B, 1e-6, 1e-6);
        assert_floats(case_name(c), "returns", ret, c, "returns", g.T * g.B, 1e-6, 1e-6);
    }
}
END_TEST

/* ---- V-trace ------------------------------------------------------------------------------- */

struct vt_in {
    struct gae_in g;
    double rho_bar, c_bar;
    float blogp[MAXV], tlogp[MAXV];
};

static void vt_load(const cJSON *c, struct vt_in *v)
{
    v->g.lambda = 1.0;
    v->g.T = inum(c, "T");
    v->g.B = inum(c, "B");
    v->g.gamma = num(c, "gamma");
    int n = v->g.T * v->g.B;
    floats(c, "rewards", v->g.rewards, n);
    floats(c, "values", v->g.values, n);
    floats(c, "next_values", v->g.next_values, v->g.B);
    floats(c, "final_values", v->g.final_values, n);
    v->g.has_final = true;
    bools(c, "terminated", v->g.terminated, n);
    bools(c, "truncated", v->g.truncated, n);
    floats(c, "behaviour_logp", v->blogp, n);
    floats(c, "target_logp", v->tlogp, n);
    v->rho_bar = num(c, "rho_bar");
    v->c_bar = num(c, "c_bar");
}

/* Against the PyTorch fixtures (IMPALA's explicit sum; scripts/gen_rl_fixtures.py):
 * on-policy cases (equal policies, bars >= 1) and off-policy ones (clipped
 * and unclipped ratios, every kind of episode end). */
START_TEST(test_vtrace_fixtures)
{
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, section("vtrace")) {
        struct vt_in v;
        vt_load(c, &v);
        float adv[MAXV], vs[MAXV];
        rl_vtrace(v.g.T, v.g.B, v.g.gamma, v.rho_bar, v.c_bar, v.g.rewards, v.g.values, v.blogp, v.tlogp,
                  v.g.terminated, v.g.truncated, v.g.final_values, v.g.next_values, adv, vs);
        assert_floats(case_name(c), "advantages", adv, c, "advantages", v.g.T * v.g.B, 1e-5, 1e-5);
        assert_floats(case_name(c), "vs", vs, c, "vs", v.g.T * v.g.B, 1e-5, 1e-5);
        n_cases++;
    }
    ck_assert_int_ge(n_cases, 6);
}
END_TEST

/* On-policy (behaviour = target, rho_bar = c_bar = 1) V-trace is the
 * n-step return: rl_gae with lambda = 1, targets and advantages alike. */
START_TEST(test_vtrace_on_policy_is_nstep)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("vtrace")) {
        struct vt_in v;
        vt_load(c, &v);
        int n = v.g.T * v.g.B;
        float adv[MAXV], vs[MAXV], gadv[MAXV], gret[MAXV];
        rl_vtrace(v.g.T, v.g.B, v.g.gamma, 1.0, 1.0, v.g.rewards, v.g.values, v.blogp, v.blogp, v.g.terminated,
                  v.g.truncated, v.g.final_values, v.g.next_values, adv, vs);
        gae_run(&v.g, gadv, gret);
        for (int i = 0; i < n; i++) {
            ck_assert_msg(fabsf(vs[i] - gret[i]) <= 1e-5f + 1e-5f * fabsf(gret[i]), "%s: vs[%d] %g, n-step %g",
                          case_name(c), i, vs[i], gret[i]);
            ck_assert_msg(fabsf(adv[i] - gadv[i]) <= 1e-5f + 1e-5f * fabsf(gadv[i]), "%s: adv[%d] %g, n-step %g",
                          case_name(c), i, adv[i], gadv[i]);
        }
    }
}
END_TEST

START_TEST(test_gae_bootstrap_sources)
{
    /* final_values matter exactly where truncated && !terminated; next_values
     * only where the last step did not finish */
    struct gae_in g;
    const cJSON *c;
    cJSON_ArrayForEach(c, section("gae")) if (strcmp(case_name(c), "mixed_lambda095") == 0) break;
    ck_assert_ptr_nonnull(c);
    gae_load(c, &g);
    float adv0[MAXV], ret0[MAXV], adv1[MAXV], ret1[MAXV];
    gae_run(&g, adv0, ret0);
    int n = g.T * g.B;
    for (int i = 0; i < n; i++) {
        struct gae_in h = g;
        h.final_values[i] += 10.0f;
        gae_run(&h, adv1, ret1);
        bool used = g.truncated[i] && !g.terminated[i];
        ck_assert_msg((memcmp(adv0, adv1, sizeof(float) * (size_t)n) != 0) == used,
                      "final_values[%d] (term %d, trunc %d) %s", i, g.terminated[i], g.truncated[i],
                      used ? "ignored" : "used");
    }
    for (int b = 0; b < g.B; b++) {
        struct gae_in h = g;
        h.next_values[b] += 10.0f;
        gae_run(&h, adv1, ret1);
        int last = (g.T - 1) * g.B + b;
        bool used = !g.terminated[last] && !g.truncated[last];
        ck_assert_msg((memcmp(adv0, adv1, sizeof(float) * (size_t)n) != 0) == used, "next_values[%d] %s", b,
                      used ? "ignored" : "used");
    }
}
END_TEST

START_TEST(test_gae_lambda1_is_discounted_return)
{
    /* one env, no done: A + V = sum gamma^k r_{t+k} + gamma^(T-t) V(s_T) */
    enum { T = 5 };
    float r[T] = {1.0f, -0.5f, 2.0f, 0.25f, 1.5f}, v[T] = {0.3f, -1.0f, 0.7f, 0.1f, 2.0f}, nv = 0.9f;
    bool no[T] = {false};
    float adv[T], ret[T];
    rl_gae(T, 1, 0.9, 1.0, r, v, no, no, NULL, &nv, adv, ret);
    for (int t = 0; t < T; t++) {
        double want = 0.0, disc = 1.0;
        for (int k = t; k < T; k++, disc *= 0.9) want += disc * r[k];
        want += disc * nv;
        ck_assert_msg(close_to(ret[t], want, 1e-6, 1e-6), "t %d: %g vs %g", t, (double)ret[t], want);
    }
}
END_TEST

/* ---- window and permutation ------------------------------------------------------------------- */

START_TEST(test_window)
{
    struct rl_window w;
    rl_window_init(&w, 5);
    ck_assert_double_eq(rl_window_mean(&w), 0.0);
    double xs[3000];
    for (int i = 0; i < 3000; i++) {
        xs[i] = (i % 7) * 1.5 - 3.0 + i * 1e-3;
        rl_window_push(&w, xs[i]);
        int k = i + 1 < 5 ? i + 1 : 5;
        double want = 0.0;
        for (int j = i + 1 - k; j <= i; j++) want += xs[j];
        want /= k;
        ck_assert_msg(fabs(rl_window_mean(&w) - want) <= 1e-12, "push %d: %.17g vs %.17g", i, rl_window_mean(&w),
                      want);
    }
    rl_window_init(&w, RL_WINDOW_MAX);
    for (int i = 0; i < 2 * RL_WINDOW_MAX + 3; i++) rl_window_push(&w, i < RL_WINDOW_MAX + 3 ? 1e9 : 2.0);
    ck_assert_double_eq(rl_window_mean(&w), 2.0);   /* the big values left without residue */
    rl_window_init(&w, 1);
    rl_window_push(&w, 4.0);
    rl_window_push(&w, -2.0);
    ck_assert_double_eq(rl_window_mean(&w), -2.0);
}
END_TEST

/* Explained variance, against values worked by hand: a perfect fit 1, the
 * targets' mean 0, a shuffle of y = 1..4 (residuals -1,1,-1,1: variance 1
 * of y's 1.25) 0.2, constant targets NaN. */
START_TEST(test_explained_variance)
{
    const float y[4] = { 1, 2, 3, 4 }, mean[4] = { 2.5f, 2.5f, 2.5f, 2.5f }, shuf[4] = { 2, 1, 4, 3 };
    ck_assert_double_eq(rl_explained_variance(y, y, 4), 1.0);
    ck_assert_double_eq(rl_explained_variance(mean, y, 4), 0.0);
    ck_assert_double_eq_tol(rl_explained_variance(shuf, y, 4), 0.2, 1e-12);
    ck_assert(isnan(rl_explained_variance(y, mean, 4)));
    ck_assert(isnan(rl_explained_variance(y, y, 0)));
}
END_TEST

START_TEST(test_permutation)
{
    enum { N = 257 };
    int a[N], b[N], seen[N];
    uint64_t r1 = 42, r2 = 42, r3 = 43;
    rl_permutation(N, &r1, a);
    rl_permutation(N, &r2, b);
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_uint_eq(r1, r2);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
        ck_assert(a[i] >= 0 && a[i] < N);
        ck_assert_int_eq(seen[a[i]]++, 0);
    }
    rl_permutation(N, &r3, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
    rl_permutation(N, &r1, b);   /* the state advanced: a new permutation */
    ck_assert(memcmp(a, b, sizeof a) != 0);
    int one = -1;
    rl_permutation(1, &r1, &one);
    ck_assert_int_eq(one, 0);
    rl_permutation(0, &r1, NULL);
}
END_TEST

/* The run's one lr schedule (agent_maybe_anneal, the floor: optim's
 * optim_lr_linear from lr to 0 over max_steps env steps) stays in [0, lr]
 * whatever env steps a peer or a file made the run count (issue 17: a
 * negative count raised the lr), and is CleanRL's lr * (1 - steps / max)
 * to the bit. */
START_TEST(test_annealed_lr)
{
#define ANNEAL(lr, s, m) optim_lr_linear(lr, 1.0, 0.0, m, s)
    ck_assert(ANNEAL(1e-3, 0, 1000) == 1e-3);
    ck_assert(fabs(ANNEAL(1e-3, 250, 1000) - 0.75e-3) < 1e-15);
    ck_assert(ANNEAL(1e-3, 1000, 1000) == 0.0);
    ck_assert(ANNEAL(1e-3, INT64_MAX, 1000) == 0.0);
    ck_assert(ANNEAL(1e-3, -1, 1000) == 1e-3);
    ck_assert(ANNEAL(1e-3, INT64_MIN, 1000) == 1e-3);
    for (int64_t s = 0; s <= 2048; s += 7)   /* CleanRL: frac = 1 - (update - 1) / num_updates; lr = frac * lr */
        ck_assert(ANNEAL(2.5e-4, s, 2048) == 2.5e-4 * (1.0 - (double)s / 2048.0));
#undef ANNEAL
}
END_TEST

START_TEST(test_permutation_uniform)
{
    /* all 24 orders of 4 elements, each ~1/24: chi-square with 23 dof well
     * under its 0.1% tail (49.7) */
    enum { DRAWS = 48000 };
    int count[24] = {0}, p[4];
    uint64_t rng = 7;
    for (int d = 0; d < DRAWS; d++) {
        rl_permutation(4, &rng, p);
        /* Lehmer code -> 0..23 */
        int code = 0;
        for (int i = 0; i < 4; i++) {
            int smaller = 0;
            for (int j = i + 1; j < 4; j++) smaller += p[j] < p[i];
            code = code * (4 - i) + smaller;
        }
        count[code]++;
    }
    double chi2 = 0.0, e = DRAWS / 24.0;
    for (int k = 0; k < 24; k++) chi2 += (count[k] - e) * (count[k] - e) / e;
    ck_assert_msg(chi2 < 49.7, "chi-square %g", chi2);
}
END_TEST

/* ---- distributions ----------------------------------------------------------------------------- */

/* sum(logp * coef_logp) + sum(entropy * coef_ent): a backward seed that
 * differs per row. */
static struct tensor *coef_loss(const cJSON *c, struct tensor *logp, struct tensor *ent, int64_t n)
{
    struct tensor *cl = tensor_of(c, "coef_logp", 1, &n, false), *ce = tensor_of(c, "coef_ent", 1, &n, false);
    struct tensor *a = tensor_mul(logp, cl), *b = tensor_mul(ent, ce);
    struct tensor *sa = tensor_sum(a), *sb = tensor_sum(b);
    struct tensor *loss = tensor_add(sa, sb);
    struct tensor *tmp[] = {cl, ce, a, b, sa, sb};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) tensor_free(tmp[i]);
    ck_assert_ptr_nonnull(loss);
    return loss;
}

static void check_dist_case(const cJSON *c, bool column_actions)
{
    const char *cname = case_name(c);
    bool cat = strcmp(item(c, "kind")->valuestring, "categorical") == 0;
    int64_t n = inum(c, "N"), k = inum(c, "K"), shape[2] = {n, k};
    struct tensor *a = tensor_of(c, "a", 2, shape, true), *log_std = NULL, *actions;
    if (cat) {
        actions = actions_i64(c, n, column_actions);
    } else {
        const cJSON *ls = item(c, "log_std_shape");
        int nd = cJSON_GetArraySize(ls);
        int64_t lshape[2] = {(int64_t)cJSON_GetArrayItem(ls, 0)->valuedouble, nd > 1 ? k : 0};
        log_std = tensor_of(c, "log_std", nd, lshape, true);
        actions = tensor_of(c, "actions", 2, shape, false);
    }
    struct tensor *logp = NULL, *ent = NULL;
    ck_assert_msg(rl_dist_eval(cat ? RL_DIST_CATEGORICAL : RL_DIST_GAUSSIAN, a, log_std, actions, &logp, &ent) == 0,
                  "%s: %s", cname, rl_last_error());
    ck_assert_int_eq(logp->ndim, 1);
    ck_assert_int_eq(logp->shape[0], n);
    ck_assert_int_eq(ent->ndim, 1);
    ck_assert_int_eq(ent->shape[0], n);
    assert_tensor(cname, "logp", logp, c, "logp");
    assert_tensor(cname, "entropy", ent, c, "entropy");
    struct tensor *loss = coef_loss(c, logp, ent, n);
    backward(loss);
    assert_grad(cname, a, c, "grad_a");
    if (log_std) assert_grad(cname, log_std, c, "grad_log_std");
    tensor_free(loss);
    tensor_free(logp);
    tensor_free(ent);
    tensor_free(a);
    tensor_free(log_std);
    tensor_free(actions);
}

START_TEST(test_dist_fixtures)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("dist")) check_dist_case(c, false);
}
END_TEST

START_TEST(test_dist_column_actions)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("dist")) if (strcmp(item(c, "kind")->valuestring, "categorical") == 0)
        check_dist_case(c, true);
}
END_TEST

/* ---- PPO ---------------------------------------------------------------------------------------- */

/* The policy-side tensors of one PPO fixture case: leaves and what
 * rl_ppo_loss takes. */
struct ppo_in {
    const cJSON *c;
    int n;
    struct rl_ppo_hyper h;
    struct tensor *logp, *ent, *values;          /* what the loss takes */
    struct tensor *logits, *mean, *log_std;      /* leaves behind logp/ent, by mode */
    float old_logp[MAXV], adv[MAXV], returns[MAXV], old_values[MAXV];
};

static void ppo_load(const cJSON *c, struct ppo_in *p)
{
    memset(p, 0, sizeof *p);
    p->c = c;
    p->n = inum(c, "n");
    p->h = hyper_of(c);
    int64_t n = p->n, col[2] = {n, 1};
    const char *mode = item(c, "mode")->valuestring;
    if (strcmp(mode, "leaf") == 0) {
        p->logp = tensor_of(c, "new_logp", 1, &n, true);
        p->ent = tensor_of(c, "entropy", 1, &n, true);
    } else if (strcmp(mode, "categorical") == 0) {
        int64_t shape[2] = {n, inum(c, "C")};
        p->logits = tensor_of(c, "logits", 2, shape, true);
        struct tensor *act = actions_i64(c, n, false);
        ck_assert_msg(rl_dist_eval(RL_DIST_CATEGORICAL, p->logits, NULL, act, &p->logp, &p->ent) == 0, "%s",
                      rl_last_error());
        tensor_free(act);
    } else {
        int64_t d = inum(c, "D"), shape[2] = {n, d};
        p->mean = tensor_of(c, "mean", 2, shape, true);
        p->log_std = tensor_of(c, "log_std", 1, &d, true);
        struct tensor *act = tensor_of(c, "actions", 2, shape, false);
        ck_assert_msg(rl_dist_eval(RL_DIST_GAUSSIAN, p->mean, p->log_std, act, &p->logp, &p->ent) == 0, "%s",
                      rl_last_error());
        tensor_free(act);
    }
    bool column = flag(c, "values_col");
    p->values = tensor_of(c, "new_values", column ? 2 : 1, column ? col : &n, true);
    floats(c, "old_logp", p->old_logp, p->n);
    floats(c, "adv", p->adv, p->n);
    floats(c, "returns", p->returns, p->n);
    floats(c, "old_values", p->old_values, p->n);
}

static void ppo_free(struct ppo_in *p)
{
    struct tensor *all[] = {p->logp, p->ent, p->values, p->logits, p->mean, p->log_std};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tensor_free(all[i]);
}

static void assert_stats(const char *cname, const struct rl_loss_stats *st, const cJSON *c, bool ppo)
{
    const cJSON *want = item(c, "stats");
    assert_scalar(cname, "policy_loss", st->policy_loss, num(want, "policy_loss"));
    assert_scalar(cname, "value_loss", st->value_loss, num(want, "value_loss"));
    assert_scalar(cname, "entropy", st->entropy, num(want, "entropy"));
    if (ppo) {
        assert_scalar(cname, "approx_kl", st->approx_kl, num(want, "approx_kl"));
        assert_scalar(cname, "clipfrac", st->clipfrac, num(want, "clipfrac"));
    } else {
        ck_assert_double_eq(st->approx_kl, 0.0);
        ck_assert_double_eq(st->clipfrac, 0.0);
    }
}

START_TEST(test_ppo_fixtures)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("ppo")) {
        const char *cname = case_name(c);
        struct ppo_in p;
        ppo_load(c, &p);
        assert_tensor(cname, "new_logp", p.logp, c, "new_logp");
        assert_tensor(cname, "entropy", p.ent, c, "entropy");
        struct rl_loss_stats st;
        memset(&st, 0xff, sizeof st);
        struct tensor *loss = rl_ppo_loss(p.logp, p.ent, p.values, p.old_logp, NULL, p.adv, p.returns, p.old_values, p.n,
                                          &p.h, num(c, "weight"), &st);
        ck_assert_msg(loss != NULL, "%s: %s", cname, rl_last_error());
        ck_assert_int_eq(loss->ndim, 0);
        assert_scalar(cname, "loss", scalar_of(loss), num(c, "loss"));
        assert_stats(cname, &st, c, true);
        backward(loss);
        assert_grad(cname, p.values, c, "grad_new_values");
        if (p.logits) assert_grad(cname, p.logits, c, "grad_logits");
        if (p.mean) {
            assert_grad(cname, p.mean, c, "grad_mean");
            assert_grad(cname, p.log_std, c, "grad_log_std");
        }
        if (!p.logits && !p.mean) {
            assert_grad(cname, p.logp, c, "grad_new_logp");
            assert_grad(cname, p.ent, c, "grad_entropy");
        }
        tensor_free(loss);
        ppo_free(&p);
    }
}
END_TEST

START_TEST(test_ppo_weights_split_the_batch)
{
    /* the agent's sum of observers' weight_k * loss_k equals the loss over
     * all samples (advantages unnormalised: normalising is per minibatch) */
    const cJSON *c;
    cJSON_ArrayForEach(c, section("ppo")) if (strcmp(case_name(c), "raw_clipv_weighted") == 0) break;
    ck_assert_ptr_nonnull(c);
    struct ppo_in p;
    ppo_load(c, &p);
    int n = p.n, k = 3;
    struct tensor *whole = rl_ppo_loss(p.logp, p.ent, p.values, p.old_logp, NULL, p.adv, p.returns, p.old_values, n, &p.h,
                                       1.0, NULL);
    ck_assert_ptr_nonnull(whole);
    struct tensor *lp[2], *en[2], *va[2];
    for (int s = 0; s < 2; s++) {
        int64_t lo = s ? k : 0, hi = s ? n : k;
        lp[s] = tensor_slice(p.logp, lo, hi);
        en[s] = tensor_slice(p.ent, lo, hi);
        va[s] = tensor_slice(p.values, lo, hi);
    }
    struct tensor *a = rl_ppo_loss(lp[0], en[0], va[0], p.old_logp, NULL, p.adv, p.returns, p.old_values, k, &p.h,
                                   (double)k / n, NULL);
    struct tensor *b = rl_ppo_loss(lp[1], en[1], va[1], p.old_logp + k, NULL, p.adv + k, p.returns + k, p.old_values + k,
                                   n - k, &p.h, (double)(n - k) / n, NULL);
    ck_assert_msg(a && b, "%s", rl_last_error());
    assert_scalar("split", "loss", (double)scalar_of(a) + scalar_of(b), scalar_of(whole));
    struct tensor *sum = tensor_add(a, b);
    backward(sum);
    float split_grad[MAXV], whole_grad[MAXV];
    tensor_copy_to_host(p.logp->grad, split_grad);
    tensor_zero_grad(p.logp);
    backward(whole);
    tensor_copy_to_host(p.logp->grad, whole_grad);
    for (int i = 0; i < n; i++)
        ck_assert_msg(close_to(split_grad[i], whole_grad[i], ATOL, RTOL), "grad %d: %g vs %g", i,
                      (double)split_grad[i], (double)whole_grad[i]);
    struct tensor *tmp[] = {whole, a, b, sum, lp[0], lp[1], en[0], en[1], va[0], va[1]};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) tensor_free(tmp[i]);
    ppo_free(&p);
}
END_TEST

START_TEST(test_ppo_constants_off_graph)
{
    /* no input requires grad: nothing the loss made from the float arrays
     * may either, and the float arrays stay as they were */
    float logp_v[2] = {-0.5f, -1.0f}, ent_v[2] = {0.7f, 0.6f}, val_v[2] = {0.1f, 0.2f};
    float old[2] = {-0.4f, -1.2f}, adv[2] = {1.0f, -2.0f}, ret[2] = {0.5f, 0.0f}, oldv[2] = {0.0f, 0.3f};
    float adv_copy[2];
    memcpy(adv_copy, adv, sizeof adv);
    int64_t n = 2;
    struct tensor *lp = to_dev(tensor_from_f32(1, &n, logp_v)), *en = to_dev(tensor_from_f32(1, &n, ent_v)),
                  *va = to_dev(tensor_from_f32(1, &n, val_v));
    struct rl_ppo_hyper h = {.clip = 0.2, .ent_coef = 0.01, .vf_coef = 0.5, .clip_vloss = true, .norm_adv = true};
    struct tensor *loss = rl_ppo_loss(lp, en, va, old, NULL, adv, ret, oldv, 2, &h, 1.0, NULL);
    ck_assert_ptr_nonnull(loss);
    ck_assert(!loss->requires_grad);
    ck_assert_int_eq(loss->device, test_dev);
    ck_assert_ptr_null(loss->grad_fn);
    ck_assert_mem_eq(adv, adv_copy, sizeof adv);
    tensor_free(loss);
    /* old_values may be NULL without clip_vloss */
    h.clip_vloss = false;
    loss = rl_ppo_loss(lp, en, va, old, NULL, adv, ret, NULL, 2, &h, 1.0, NULL);
    ck_assert_msg(loss != NULL, "%s", rl_last_error());
    tensor_free(loss);
    tensor_free(lp);
    tensor_free(en);
    tensor_free(va);
}
END_TEST

/* ---- decoupled PPO (a proximal policy: rl_ppo_loss's prox_logp) ---------------------------- */

/* prox_logp == old_logp is the loss without one, bit for bit: the loss, its
 * statistics and every leaf's gradient, on every PPO fixture case. */
START_TEST(test_ppo_prox_is_old_same_bytes)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("ppo")) {
        const char *cname = case_name(c);
        struct ppo_in p[2];
        struct rl_loss_stats st[2];
        float loss_v[2], grads[2][4][MAXV];
        memset(grads, 0, sizeof grads);
        for (int run = 0; run < 2; run++) {
            ppo_load(c, &p[run]);
            float prox[MAXV];
            memcpy(prox, p[run].old_logp, sizeof prox);   /* a copy: equal values, another array */
            struct tensor *loss = rl_ppo_loss(p[run].logp, p[run].ent, p[run].values, p[run].old_logp,
                                              run ? prox : NULL, p[run].adv, p[run].returns, p[run].old_values,
                                              p[run].n, &p[run].h, num(c, "weight"), &st[run]);
            ck_assert_msg(loss != NULL, "%s: %s", cname, rl_last_error());
            loss_v[run] = scalar_of(loss);
            backward(loss);
            struct tensor *leaves[4] = { p[run].values, p[run].logits ? p[run].logits : p[run].mean,
                                         p[run].log_std, p[run].logits || p[run].mean ? NULL : p[run].logp };
            for (int i = 0; i < 4; i++)
                if (leaves[i]) tensor_copy_to_host(leaves[i]->grad, grads[run][i]);
            tensor_free(loss);
        }
        ck_assert_msg(memcmp(&loss_v[0], &loss_v[1], sizeof loss_v[0]) == 0, "%s: loss %.9g, with prox == old %.9g",
                      cname, (double)loss_v[0], (double)loss_v[1]);
        ck_assert_msg(memcmp(&st[0], &st[1], sizeof st[0]) == 0, "%s: statistics differ with prox == old", cname);
        ck_assert_msg(memcmp(grads[0], grads[1], sizeof grads[0]) == 0, "%s: gradients differ with prox == old", cname);
        ppo_free(&p[0]);
        ppo_free(&p[1]);
    }
}
END_TEST

/* Decoupled PPO written out in float64 plain loops (rl/losses.h's
 * formula): the reference the f32 loss and its gradient are checked
 * against. x = new_logp | entropy | values, n each. */
struct prox_case {
    int n;
    const double *old, *prox, *adv, *ret, *oldv;
    double clip, ent_coef, vf_coef, weight;
};

static double prox_ref(const struct prox_case *k, const double *x, double *kl, double *clipfrac)
{
    int n = k->n;
    const double *lp = x, *ent = x + n, *v = x + 2 * n;
    double mean = 0, var = 0, pg = 0, vl = 0, em = 0;
    for (int i = 0; i < n; i++) mean += k->adv[i] / n;
    for (int i = 0; i < n; i++) var += (k->adv[i] - mean) * (k->adv[i] - mean) / (n - 1);
    *kl = *clipfrac = 0;
    for (int i = 0; i < n; i++) {
        double a = (k->adv[i] - mean) / (sqrt(var) + 1e-8), w = exp(k->prox[i] - k->old[i]);
        double r = exp(lp[i] - k->prox[i]), rc = fmin(fmax(r, 1 - k->clip), 1 + k->clip);
        pg += fmax(-a * w * r, -a * w * rc) / n;
        *kl += ((r - 1) - (lp[i] - k->prox[i])) / n;
        *clipfrac += (fabs(r - 1) > k->clip) / (double)n;
        double d = v[i] - k->ret[i], dc = k->oldv[i] + fmin(fmax(v[i] - k->oldv[i], -k->clip), k->clip) - k->ret[i];
        vl += 0.5 * fmax(d * d, dc * dc) / n;
        em += ent[i] / n;
    }
    return k->weight * (pg - k->ent_coef * em + k->vf_coef * vl);
}

/* The loss with a proximal policy (samples whose ratio to it lies inside
 * the clip and outside on both sides, advantages of both signs, weights
 * pi_prox / pi_behav on both sides of 1) against the float64 reference:
 * its value and statistics, and its gradient for new_logp, entropy and
 * values against central differences of the reference. Without prox the
 * loss is another number (the weights and the clip's centre matter). */
START_TEST(test_ppo_prox_finite_differences)
{
    enum { N = 8 };
    static const double old[N] = { -0.60, -1.10, -0.10, -2.20, -1.30, -1.25, -0.40, -1.45 };
    static const double prox[N] = { -0.55, -1.00, -0.30, -2.40, -0.85, -1.20, -0.72, -1.40 };
    static const double adv[N] = { 1.0, -0.5, 0.3, 2.0, -1.5, 0.8, -0.2, -1.0 };
    static const double ret[N] = { 0.5, 0.2, 0.1, 1.5, -0.3, 0.2, 0.6, -0.5 };
    static const double oldv[N] = { 0.0, 0.9, -0.1, 0.5, 0.35, -0.45, 0.2, 0.3 };
    /* new_logp (ratios to prox 1.05, 0.82, 1, 1.49, 0.95, 0.74, 1.02, 1.35), entropy, values */
    double x[3 * N] = { -0.50, -1.20, -0.30, -2.00, -0.90, -1.50, -0.70, -1.10,
                        0.9, 1.1, 0.7, 1.3, 0.8, 1.0, 1.2, 0.6,
                        0.1, 0.5, -0.2, 1.0, 0.3, -0.4, 0.7, 0.0 };
    const struct prox_case k = { N, old, prox, adv, ret, oldv, 0.2, 0.01, 0.5, 0.5 };
    float f_old[N], f_prox[N], f_adv[N], f_ret[N], f_oldv[N], f_x[3 * N];
    for (int i = 0; i < N; i++) {
        f_old[i] = (float)old[i], f_prox[i] = (float)prox[i], f_adv[i] = (float)adv[i];
        f_ret[i] = (float)ret[i], f_oldv[i] = (float)oldv[i];
    }
    for (int i = 0; i < 3 * N; i++) {
        f_x[i] = (float)x[i];
        x[i] = f_x[i];   /* the reference at the f32 inputs the loss sees */
    }
    int64_t n = N;
    struct tensor *leaf[3];
    for (int j = 0; j < 3; j++) {
        leaf[j] = to_dev(tensor_from_f32(1, &n, f_x + j * N));
        tensor_set_requires_grad(leaf[j], true);
    }
    struct rl_ppo_hyper h = { .clip = 0.2, .ent_coef = 0.01, .vf_coef = 0.5, .clip_vloss = true, .norm_adv = true };
    struct rl_loss_stats st;
    struct tensor *loss = rl_ppo_loss(leaf[0], leaf[1], leaf[2], f_old, f_prox, f_adv, f_ret, f_oldv, N, &h, 0.5, &st);
    ck_assert_msg(loss != NULL, "%s", rl_last_error());
    double kl, clipfrac, want = prox_ref(&k, x, &kl, &clipfrac);
    assert_scalar("prox", "loss", scalar_of(loss), want);
    assert_scalar("prox", "approx_kl", st.approx_kl, kl);
    ck_assert_double_eq(st.clipfrac, 3.0 / N);   /* 1.49, 0.74 and 1.35 lie outside [0.8, 1.2] */
    ck_assert_double_eq(clipfrac, 3.0 / N);
    backward(loss);
    for (int j = 0; j < 3; j++) {
        float g[N];
        tensor_copy_to_host(leaf[j]->grad, g);
        for (int i = 0; i < N; i++) {
            double e = 1e-4, keep = x[j * N + i], d0, d1;
            x[j * N + i] = keep + e;
            double up = prox_ref(&k, x, &d0, &d1);
            x[j * N + i] = keep - e;
            double down = prox_ref(&k, x, &d0, &d1);
            x[j * N + i] = keep;
            double fd = (up - down) / (2 * e);
            ck_assert_msg(close_to(g[i], fd, 1e-5, 1e-4), "input %d of leaf %d: gradient %.9g, central difference %.9g",
                          i, j, (double)g[i], fd);
        }
    }
    struct tensor *plain = rl_ppo_loss(leaf[0], leaf[1], leaf[2], f_old, NULL, f_adv, f_ret, f_oldv, N, &h, 0.5, NULL);
    ck_assert_ptr_nonnull(plain);
    ck_assert_msg(fabs(scalar_of(plain) - scalar_of(loss)) > 1e-3, "the loss without prox is the loss with it: %.9g",
                  (double)scalar_of(loss));
    tensor_free(plain);
    tensor_free(loss);
    for (int j = 0; j < 3; j++) tensor_free(leaf[j]);
}
END_TEST

/* ---- A2C and REINFORCE ---------------------------------------------------------------------------- */

START_TEST(test_a2c_fixtures)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("a2c")) {
        const char *cname = case_name(c);
        int64_t n = inum(c, "n");
        struct rl_ppo_hyper h = hyper_of(c);
        struct tensor *lp = tensor_of(c, "logp", 1, &n, true), *en = tensor_of(c, "entropy", 1, &n, true),
                      *va = tensor_of(c, "values", 1, &n, true);
        float adv[MAXV], ret[MAXV];
        floats(c, "adv", adv, (int)n);
        floats(c, "returns", ret, (int)n);
        struct rl_loss_stats st;
        memset(&st, 0xff, sizeof st);
        struct tensor *loss = rl_a2c_loss(lp, en, va, adv, ret, (int)n, &h, num(c, "weight"), &st);
        ck_assert_msg(loss != NULL, "%s: %s", cname, rl_last_error());
        assert_scalar(cname, "loss", scalar_of(loss), num(c, "loss"));
        assert_stats(cname, &st, c, false);
        backward(loss);
        assert_grad(cname, lp, c, "grad_logp");
        assert_grad(cname, en, c, "grad_entropy");
        assert_grad(cname, va, c, "grad_values");
        tensor_free(loss);
        tensor_free(lp);
        tensor_free(en);
        tensor_free(va);
    }
}
END_TEST

START_TEST(test_reinforce_fixtures)
{
    const cJSON *c;
    cJSON_ArrayForEach(c, section("reinforce")) {
        const char *cname = case_name(c);
        int64_t n = inum(c, "n"), col[2] = {n, 1};
        struct tensor *lp = flag(c, "col") ? tensor_of(c, "logp", 2, col, true) : tensor_of(c, "logp", 1, &n, true);
        float rewards[MAXV];
        floats(c, "rewards", rewards, (int)n);
        struct tensor *loss = rl_reinforce_loss(lp, rewards, (int)n, num(c, "gamma"));
        ck_assert_msg(loss != NULL, "%s: %s", cname, rl_last_error());
        assert_scalar(cname, "loss", scalar_of(loss), num(c, "loss"));
        backward(loss);
        assert_grad(cname, lp, c, "grad_logp");
        tensor_free(loss);
        tensor_free(lp);
    }
}
END_TEST

START_TEST(test_reinforce_single_step)
{
    /* torch gives nan (std of one return); our normalised weight is 0 */
    int64_t one = 1;
    float v = -0.7f, r = 1.0f;
    struct tensor *lp = to_dev(tensor_from_f32(1, &one, &v));
    tensor_set_requires_grad(lp, true);
    struct tensor *loss = rl_reinforce_loss(lp, &r, 1, 0.99);
    ck_assert_ptr_nonnull(loss);
    ck_assert_float_eq(scalar_of(loss), 0.0f);
    backward(loss);
    ck_assert_float_eq(scalar_of(lp->grad), 0.0f);
    tensor_free(loss);
    tensor_free(lp);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------------------- */

#define ASSERT_FAILS(call, msg)                                 \
    do {                                                        \
        struct tensor *r_ = (call);                             \
        ck_assert_ptr_null(r_);                                 \
        ck_assert_str_eq(rl_last_error(), msg);                 \
    } while (0)

START_TEST(test_loss_errors)
{
    int64_t n4 = 4, n5 = 5, n42[2] = {4, 2};
    float z[5] = {0}, bad[4] = {0, 0, 0, INFINITY};
    struct tensor *lp = tensor_from_f32(1, &n4, z), *en = tensor_from_f32(1, &n4, z), *va = tensor_from_f32(1, &n4, z);
    struct tensor *five = tensor_from_f32(1, &n5, z), *wide = tensor_new(DTYPE_F32, DEVICE_CPU, 2, n42);
    struct tensor *ints = tensor_new(DTYPE_I64, DEVICE_CPU, 1, &n4);
    struct rl_ppo_hyper h = {.clip = 0.2, .ent_coef = 0.01, .vf_coef = 0.5, .clip_vloss = true};

    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, z, z, 0, &h, 1, NULL), "rl_ppo_loss: n = 0 (need at least 1 sample)");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, z, z, 4, NULL, 1, NULL), "rl_ppo_loss: hyperparameters are NULL");
    ASSERT_FAILS(rl_ppo_loss(NULL, en, va, z, NULL, z, z, z, 4, &h, 1, NULL), "rl_ppo_loss: new_logp is NULL");
    ASSERT_FAILS(rl_ppo_loss(ints, en, va, z, NULL, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: new_logp has dtype i64 (expected f32)");
    ASSERT_FAILS(rl_ppo_loss(lp, five, va, z, NULL, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: entropy has shape [5] (expected [4] or [4,1])");
    ASSERT_FAILS(rl_ppo_loss(lp, en, wide, z, NULL, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: new_values has shape [4,2] (expected [4] or [4,1])");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, bad, z, z, 4, &h, 1, NULL), "rl_ppo_loss: adv[3] is not finite (inf)");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, bad, NULL, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: old_logp[3] is not finite (inf)");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, bad, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: prox_logp[3] is not finite (inf)");
    float far[4] = { 0, 0, 100, 0 }, below[4] = { 0, 0, -1, 0 };
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, below, far, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: the importance weight of sample 2, exp(prox_logp - old_logp) = exp(101), is not finite");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, NULL, z, 4, &h, 1, NULL), "rl_ppo_loss: returns is NULL");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, z, NULL, 4, &h, 1, NULL), "rl_ppo_loss: old_values is NULL");
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, z, z, 4, &h, INFINITY, NULL),
                 "rl_ppo_loss: weight is not finite (inf)");
    h.clip = -0.1;
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: clip -0.1 must be finite and >= 0");
    h.clip = 0.2;
    h.vf_coef = NAN;
    ASSERT_FAILS(rl_ppo_loss(lp, en, va, z, NULL, z, z, z, 4, &h, 1, NULL), "rl_ppo_loss: vf_coef is not finite (nan)");
    h.vf_coef = 0.5;

    ASSERT_FAILS(rl_a2c_loss(NULL, en, va, z, z, 4, &h, 1, NULL), "rl_a2c_loss: logp is NULL");
    ASSERT_FAILS(rl_a2c_loss(lp, en, five, z, z, 4, &h, 1, NULL),
                 "rl_a2c_loss: values has shape [5] (expected [4] or [4,1])");
    ASSERT_FAILS(rl_a2c_loss(lp, en, va, NULL, z, 4, &h, 1, NULL), "rl_a2c_loss: adv is NULL");
    ASSERT_FAILS(rl_a2c_loss(lp, en, va, z, z, -3, &h, 1, NULL), "rl_a2c_loss: n = -3 (need at least 1 sample)");

    ASSERT_FAILS(rl_reinforce_loss(five, z, 4, 0.99), "rl_reinforce_loss: logp has shape [5] (expected [4] or [4,1])");
    ASSERT_FAILS(rl_reinforce_loss(lp, bad, 4, 0.99), "rl_reinforce_loss: rewards[3] is not finite (inf)");
    ASSERT_FAILS(rl_reinforce_loss(lp, z, 4, NAN), "rl_reinforce_loss: gamma is not finite (nan)");
    ASSERT_FAILS(rl_reinforce_loss(lp, z, 0, 0.99), "rl_reinforce_loss: n = 0 (need at least 1 sample)");

    struct tensor *tmp[] = {lp, en, va, five, wide, ints};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) tensor_free(tmp[i]);
}
END_TEST

#define ASSERT_DIST_FAILS(kind, a, ls, act, msg)                                  \
    do {                                                                          \
        struct tensor *lp_ = (struct tensor *)&sentinel, *en_ = lp_;              \
        ck_assert_int_eq(rl_dist_eval(kind, a, ls, act, &lp_, &en_), -1);        \
        ck_assert_str_eq(rl_last_error(), msg);                                   \
        ck_assert(lp_ == (struct tensor *)&sentinel && en_ == lp_);               \
    } while (0)

START_TEST(test_dist_errors)
{
    static int sentinel;
    int64_t s53[2] = {5, 3}, s52[2] = {5, 2}, n5 = 5, n2 = 2, n3 = 3;
    float z[15] = {0};
    int64_t idx[5] = {0, 1, 2, 3, 1};
    struct tensor *logits = tensor_from_f32(2, s53, z), *flat = tensor_from_f32(1, &n3, z);
    struct tensor *acts = tensor_from_data(DTYPE_I64, 1, &n5, idx), *facts = tensor_from_f32(1, &n5, z);
    struct tensor *acts52 = tensor_new(DTYPE_I64, DEVICE_CPU, 2, s52), *ls3 = tensor_from_f32(1, &n3, z),
                  *ls2 = tensor_from_f32(1, &n2, z), *gacts = tensor_from_f32(2, s53, z),
                  *gacts52 = tensor_from_f32(2, s52, z), *ilogits = tensor_new(DTYPE_I64, DEVICE_CPU, 2, s53);

    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, logits, NULL, acts,
                      "rl_dist_eval: tensor_gather: index 3 is out of range for size 3");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, NULL, NULL, acts, "rl_dist_eval: a is NULL");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, logits, NULL, NULL, "rl_dist_eval: actions is NULL");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, ilogits, NULL, acts, "rl_dist_eval: a has dtype i64 (expected f32)");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, flat, NULL, acts,
                      "rl_dist_eval: a has shape [3] (expected [N,C] logits or [N,D] means, N, C, D >= 1)");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, logits, ls3, acts, "rl_dist_eval: a categorical takes no log_std");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, logits, NULL, facts,
                      "rl_dist_eval: actions have dtype f32 (expected i64 for a categorical)");
    ASSERT_DIST_FAILS(RL_DIST_CATEGORICAL, logits, NULL, acts52,
                      "rl_dist_eval: actions have shape [5,2] (expected [5] or [5,1])");
    ASSERT_DIST_FAILS(RL_DIST_GAUSSIAN, logits, NULL, gacts, "rl_dist_eval: a Gaussian needs log_std");
    ASSERT_DIST_FAILS(RL_DIST_GAUSSIAN, logits, ls2, gacts,
                      "rl_dist_eval: log_std has shape [2] (expected [3] or [5,3])");
    ASSERT_DIST_FAILS(RL_DIST_GAUSSIAN, logits, ls3, gacts52,
                      "rl_dist_eval: actions have shape [5,2] (expected [5,3])");
    ASSERT_DIST_FAILS(RL_DIST_GAUSSIAN, logits, ls3, acts,
                      "rl_dist_eval: actions have dtype i64 (expected f32 for a Gaussian)");
    ASSERT_DIST_FAILS((enum rl_dist)7, logits, NULL, acts, "rl_dist_eval: invalid distribution kind 7");
    struct tensor *lp;
    ck_assert_int_eq(rl_dist_eval(RL_DIST_CATEGORICAL, logits, NULL, acts, &lp, NULL), -1);
    ck_assert_str_eq(rl_last_error(), "rl_dist_eval: logp or entropy output is NULL");

    struct tensor *tmp[] = {logits, flat, acts, facts, acts52, ls3, ls2, gacts, gacts52, ilogits};
    for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) tensor_free(tmp[i]);
}
END_TEST

#ifdef RL_TEST_CUDA
START_TEST(test_device_mismatch)
{
    int64_t n4 = 4;
    float z[4] = {0};
    struct tensor *gpu = to_dev(tensor_from_f32(1, &n4, z)), *cpu = tensor_from_f32(1, &n4, z);
    struct rl_ppo_hyper h = {.clip = 0.2, .ent_coef = 0.01, .vf_coef = 0.5};
    ASSERT_FAILS(rl_ppo_loss(gpu, cpu, gpu, z, NULL, z, z, z, 4, &h, 1, NULL),
                 "rl_ppo_loss: device mismatch: new_logp on cuda, entropy on cpu");
    ASSERT_FAILS(rl_a2c_loss(gpu, gpu, cpu, z, z, 4, &h, 1, NULL),
                 "rl_a2c_loss: device mismatch: logp on cuda, values on cpu");
    tensor_free(gpu);
    tensor_free(cpu);
}
END_TEST

#endif

static Suite *rl_math_suite(void)
{
    Suite *s = suite_create(test_dev == DEVICE_CPU ? "rl_math" : "rl_math_cuda");
    TCase *tc = tcase_create("returns");
    tcase_add_test(tc, test_discounted_returns);
    tcase_add_test(tc, test_normalize);
    tcase_add_test(tc, test_normalize_single);
    suite_add_tcase(s, tc);
    tc = tcase_create("gae");
    tcase_add_test(tc, test_gae_fixtures);
    tcase_add_test(tc, test_gae_bootstrap_sources);
    tcase_add_test(tc, test_gae_lambda1_is_discounted_return);
    tcase_add_test(tc, test_vtrace_fixtures);
    tcase_add_test(tc, test_vtrace_on_policy_is_nstep);
    suite_add_tcase(s, tc);
    tc = tcase_create("window_and_permutation");
    tcase_add_test(tc, test_window);
    tcase_add_test(tc, test_explained_variance);
    tcase_add_test(tc, test_permutation);
    tcase_add_test(tc, test_permutation_uniform);
    tcase_add_test(tc, test_annealed_lr);
    suite_add_tcase(s, tc);
    tc = tcase_create("distributions");
    tcase_add_test(tc, test_dist_fixtures);
    tcase_add_test(tc, test_dist_column_actions);
    suite_add_tcase(s, tc);
    tc = tcase_create("losses");
    tcase_add_test(tc, test_ppo_fixtures);
    tcase_add_test(tc, test_ppo_weights_split_the_batch);
    tcase_add_test(tc, test_ppo_constants_off_graph);
    tcase_add_test(tc, test_ppo_prox_is_old_same_bytes);
    tcase_add_test(tc, test_ppo_prox_finite_differences);
    tcase_add_test(tc, test_a2c_fixtures);
    tcase_add_test(tc, test_reinforce_fixtures);
    tcase_add_test(tc, test_reinforce_single_step);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_loss_errors);
    tcase_add_test(tc, test_dist_errors);
#ifdef RL_TEST_CUDA
    tcase_add_test(tc, test_device_mismatch);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rl_math_suite());
#ifdef RL_TEST_CUDA
    if (!tensor_cuda_available()) {
        printf("test_rl_math_cuda: no CUDA device, skipping\n");
        srunner_free(sr);
        return 77;
    }
    srunner_set_fork_status(sr, CK_NOFORK);   /* a CUDA context does not survive fork() */
#endif
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    cJSON_Delete(fixtures);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
