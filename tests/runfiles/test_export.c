/* The policy file as an export (runfiles/policy_file.h): what PyTorch
 * computes from it is what Tributary computes. The committed fixture
 * (tests/runfiles/fixtures/export: a Hopper-v4-shaped Gaussian policy with
 * observation statistics, written by this program's --write from a fixed
 * seed) was read by the README's own PyTorch snippet (executed by
 * scripts/gen_export_fixtures.py, python3-torch alone) over a set of
 * observations; here the same file goes through the reader, the frozen
 * normalisation, the actor and the clip to its bounds, and the actions
 * must equal torch's. Also: the writer round-trips the statistics and the
 * action space, a file without them loads as before, and every malformed
 * statistic or bound is refused with its exact message, by the reader and
 * by the writer; tributary-eval (the program) applies the statistics and
 * refuses malformed ones. Files in a mkdtemp directory under /tmp.
 *
 *   test_export --write DIR   writes DIR/policy.safetensors (the fixture) */
#define _GNU_SOURCE
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "envs/env.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"
#include "kit.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/trib-export-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) { kit_rm_rf(dir); }

/* dir/name (tests/kit: 8 rotating buffers). */
static const char *P(const char *name) { return kit_path(dir, name); }

#define ASSERT_ERR(fmt, ...)                                                  \
    do {                                                                      \
        char want_[1024];                                                     \
        snprintf(want_, sizeof want_, fmt, __VA_ARGS__);                      \
        ck_assert_str_eq(runfiles_last_error(), want_);                       \
    } while (0)

/* ---- the fixture --------------------------------------------------------- */

#define OBS 11
#define ACT 3

/* Hopper-v4's shape: 11 observations, 3 action dims in [-1, 1]. */
static const struct policy_arch FIX_ARCH = { .obs_dim = OBS, .act_dim = ACT, .gaussian = true, .value_head = true,
                                             .n_hidden = 2, .hidden = { 64, 64 }, .tanh = true };

/* The fixture's statistics: means and variances of every size, count as a
 * run's would be. */
static void fixture_norm(struct policy_norm *n, double *mean, double *var)
{
    for (int i = 0; i < OBS; i++) {
        mean[i] = 0.25 * (i - 5) + 0.125;
        var[i] = 0.01 + 0.3 * i * i / OBS;
    }
    *n = (struct policy_norm){ .dim = OBS, .count = 20480.0001, .clip = 10, .eps = 1e-8, .mean = mean, .var = var };
}

/* Writes the fixture's policy to path with the statistics norm: the nets
 * from seed 7, the actor's last layer times 4 (so some greedy actions
 * leave the box and are clipped), Hopper-v4's action space. 0, or -1 with
 * runfiles_last_error(). */
static int write_policy(const char *path, const struct policy_norm *norm)
{
    struct nn_module *actor = NULL, *critic = NULL;
    if (policy_arch_build(&FIX_ARCH, 7, &actor, &critic) != 0)
        return runfiles_set_error("build: %s", tensor_last_error());
    struct tensor *params[POLICY_MAX_TENSORS];
    int n = 0;
    for (int i = 0; i < actor->n_params; i++) params[n++] = actor->params[i];
    for (int i = 0; i < critic->n_params; i++) params[n++] = critic->params[i];
    for (int k = 4; k <= 5; k++) {   /* actor.4.weight, actor.4.bias */
        float *w = tensor_data(params[k]);
        for (int64_t i = 0; i < params[k]->numel; i++) w[i] *= 4;
    }
    static const double low[ACT] = { -1, -1, -1 }, high[ACT] = { 1, 1, 1 };
    struct env_space act = { .kind = SPACE_BOX, .dim = ACT, .low = low, .high = high };
    struct policy_info info = { .env_id = "Hopper-v4", .act = &act, .norm = norm };
    int rc = policy_file_write(path, &FIX_ARCH, &info, n, params);
    nn_module_free(actor);
    nn_module_free(critic);
    return rc;
}

/* The fixture: the policy above with the statistics of fixture_norm. */
static int write_fixture(const char *path)
{
    double mean[OBS], var[OBS];
    struct policy_norm norm;
    fixture_norm(&norm, mean, var);
    return write_policy(path, &norm);
}

/* The committed file is the one the writer makes today (regenerate both
 * with scripts/gen_export_fixtures.py when the format changes). */
START_TEST(test_export_fixture_current)
{
    ck_assert_msg(write_fixture(P("p.safetensors")) == 0, "%s", runfiles_last_error());
    size_t a, b;
    char *got = kit_must_read(P("p.safetensors"), &a), *want = kit_must_read(EXPORT_DIR "/policy.safetensors", &b);
    ck_assert_uint_eq(a, b);
    ck_assert_msg(memcmp(got, want, a) == 0, "the writer no longer makes " EXPORT_DIR "/policy.safetensors");
    free(got);
    free(want);
}
END_TEST

/* The greedy actions of rows observations, computed as tributary-eval
 * does: the frozen normalisation, the actor's mean, clipped to the box. */
static void greedy_actions(const struct nn_module *actor, const struct policy_extras *x, float *obs, int rows,
                           float *act)
{
    policy_norm_apply(&x->norm, obs, rows);
    int64_t shape[2] = { rows, OBS };
    struct tensor *in = tensor_from_f32(2, shape, obs), *out[NN_MAX_IO] = { 0 };
    int n_out = 0;
    autograd_set_enabled(false);
    ck_assert_msg(nn_forward((struct nn_module *)actor, 1, &in, &n_out, out) == 0, "%s", tensor_last_error());
    const float *mu = tensor_data(out[0]);
    for (int i = 0; i < rows * ACT; i++)
        act[i] = (float)fmin(fmax(mu[i], x->act.low[i % ACT]), x->act.high[i % ACT]);
    tensor_free(in);
    for (int i = 0; i < n_out; i++) tensor_free(out[i]);
}

/* A JSON array of rows arrays of `cols` numbers into out. */
static int json_rows(const cJSON *a, int cols, float *out, int cap)
{
    int r = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, a)
    {
        ck_assert_int_lt(r, cap);
        ck_assert_int_eq(cJSON_GetArraySize(row), cols);
        int c = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, row) out[r * cols + c++] = (float)v->valuedouble;
        r++;
    }
    return r;
}

START_TEST(test_export_matches_torch)
{
    size_t len;
    char *text = kit_must_read(EXPORT_DIR "/actions.json", &len);
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    enum { CAP = 256 };
    static float obs[CAP * OBS], want[CAP * ACT], got[CAP * ACT];
    int rows = json_rows(cJSON_GetObjectItem(j, "obs"), OBS, obs, CAP);
    ck_assert_int_eq(json_rows(cJSON_GetObjectItem(j, "actions"), ACT, want, CAP), rows);
    ck_assert_int_ge(rows, 16);
    struct policy_arch a;
    char env[64];
    struct nn_module *actor;
    struct policy_extras x;
    ck_assert_msg(policy_file_read(EXPORT_DIR "/policy.safetensors", &a, env, sizeof env, &actor, NULL, &x) == 0, "%s",
                  runfiles_last_error());
    ck_assert_str_eq(env, "Hopper-v4");
    ck_assert(x.has_act && x.act.kind == SPACE_BOX && x.norm.dim == OBS);
    greedy_actions(actor, &x, obs, rows, got);
    int clipped = 0;
    for (int i = 0; i < rows * ACT; i++) {
        ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f, "row %d dim %d: tributary %.9g, torch %.9g", i / ACT, i % ACT,
                      got[i], want[i]);
        clipped += fabsf(want[i]) == 1.0f;
    }
    /* the fixture's observations leave the box and the clip, both ways */
    ck_assert_msg(clipped > 0 && clipped < rows * ACT, "%d of %d actions at the bounds", clipped, rows * ACT);
    nn_module_free(actor);
    policy_extras_free(&x);
    cJSON_Delete(j);
    free(text);
}
END_TEST

/* ---- the writer and the reader ------------------------------------------- */

START_TEST(test_export_roundtrip)
{
    ck_assert_msg(write_fixture(P("p.safetensors")) == 0, "%s", runfiles_last_error());
    struct policy_arch a;
    char env[64];
    struct nn_module *actor, *critic;
    struct policy_extras x;
    ck_assert_msg(policy_file_read(P("p.safetensors"), &a, env, sizeof env, &actor, &critic, &x) == 0, "%s",
                  runfiles_last_error());
    double mean[OBS], var[OBS];
    struct policy_norm n;
    fixture_norm(&n, mean, var);
    ck_assert(x.has_act && x.act.kind == SPACE_BOX && x.act.dim == ACT);
    for (int i = 0; i < ACT; i++) ck_assert(x.act.low[i] == -1 && x.act.high[i] == 1);
    ck_assert_int_eq(x.norm.dim, OBS);
    ck_assert(x.norm.count == n.count && x.norm.clip == 10 && x.norm.eps == 1e-8);
    ck_assert(memcmp(x.norm.mean, mean, sizeof mean) == 0 && memcmp(x.norm.var, var, sizeof var) == 0);
    ck_assert_ptr_nonnull(critic);
    nn_module_free(actor);
    nn_module_free(critic);
    policy_extras_free(&x);
    /* unbounded dims, a categorical policy's discrete space, more metadata */
    static const double lo[2] = { -INFINITY, -0.1 }, hi[2] = { INFINITY, 0.30000000000000004 };
    struct env_space box = { .kind = SPACE_BOX, .dim = 2, .low = lo, .high = hi };
    struct policy_arch g = { .obs_dim = 4, .act_dim = 2, .gaussian = true, .n_hidden = 1, .hidden = { 8 } };
    ck_assert_int_eq(policy_arch_build(&g, 1, &actor, NULL), 0);
    struct safetensors_meta more[] = { { "eval_return", "123.5" } };
    struct policy_info info = { .env_id = "X-v0", .act = &box, .n_meta = 1, .meta = more };
    ck_assert_msg(policy_file_write(P("g"), &g, &info, actor->n_params, actor->params) == 0, "%s", runfiles_last_error());
    nn_module_free(actor);
    ck_assert_int_eq(policy_file_read(P("g"), &a, env, sizeof env, &actor, NULL, &x), 0);
    ck_assert(x.has_act && x.act.low[0] == -INFINITY && x.act.high[0] == INFINITY && x.act.low[1] == -0.1 &&
              x.act.high[1] == 0.30000000000000004 && x.norm.dim == 0);
    struct safetensors *st = safetensors_load(P("g"));
    ck_assert_str_eq(safetensors_meta_get(st, "act_low"), "-inf,-0.10000000000000001");
    ck_assert_str_eq(safetensors_meta_get(st, "eval_return"), "123.5");
    ck_assert_ptr_null(safetensors_meta_get(st, "obs_clip"));
    ck_assert_int_eq(st->n, actor->n_params);   /* no statistics: no tensor of them */
    safetensors_free(st);
    nn_module_free(actor);
    policy_extras_free(&x);
    struct policy_arch c = { .obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = { 8 } };
    ck_assert_int_eq(policy_arch_build(&c, 1, &actor, NULL), 0);
    struct env_space disc = { .kind = SPACE_DISCRETE, .n = 2 };
    info = (struct policy_info){ .env_id = "CartPole-v1", .act = &disc };
    ck_assert_int_eq(policy_file_write(P("c"), &c, &info, actor->n_params, actor->params), 0);
    nn_module_free(actor);
    ck_assert_int_eq(policy_file_read(P("c"), &a, env, sizeof env, &actor, NULL, &x), 0);
    ck_assert(x.has_act && x.act.kind == SPACE_DISCRETE && x.act.n == 2 && !x.act.low && x.norm.dim == 0);
    nn_module_free(actor);
    policy_extras_free(&x);
}
END_TEST

/* A file of the old form (the env alone): no action space, no statistics. */
START_TEST(test_export_old_file)
{
    struct policy_arch a, c = { .obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = { 8 } };
    char env[64];
    struct nn_module *actor;
    struct policy_extras x;
    ck_assert_int_eq(policy_arch_build(&c, 1, &actor, NULL), 0);
    ck_assert_int_eq(policy_file_save(P("old"), &c, "CartPole-v1", NULL, actor->n_params, actor->params), 0);
    nn_module_free(actor);
    memset(&x, 0xff, sizeof x);
    ck_assert_int_eq(policy_file_read(P("old"), &a, env, sizeof env, &actor, NULL, &x), 0);
    ck_assert(!x.has_act && x.norm.dim == 0 && !x.norm.mean && !x.act.low);
    float o[4] = { 1, 2, 3, 4 };
    policy_norm_apply(&x.norm, o, 1);   /* none: the observation as it is */
    ck_assert(o[0] == 1 && o[3] == 4);
    nn_module_free(actor);
    policy_extras_free(&x);
}
END_TEST

/* The normalisation itself: (x - mean) / sqrt(var + eps) in double, clipped. */
START_TEST(test_export_norm_apply)
{
    double mean[2] = { 1, -2 }, var[2] = { 4, 0 };
    struct policy_norm n = { .dim = 2, .count = 3, .clip = 5, .eps = 1e-8, .mean = mean, .var = var };
    float o[6] = { 3, -2, 1, 1, -100, -2.00000001f };
    policy_norm_apply(&n, o, 3);
    ck_assert(o[0] == (float)(2 / sqrt(4 + 1e-8)) && o[1] == 0);
    ck_assert(o[2] == 0 && o[3] == 5);      /* 3 / 1e-4: clipped */
    ck_assert(o[4] == -5 && o[5] == (float)(((double)-2.00000001f + 2) / sqrt(1e-8)));
}
END_TEST

/* The fixture rewritten into path with tensor `name` changed by `edit`
 * (NULL: dropped) and metadata `key` set to `value` (NULL value: dropped;
 * a key the file lacks: added). */
typedef struct tensor *(*edit_fn)(const struct tensor *t);

static void crafted(const char *path, const char *name, edit_fn edit, const char *key, const char *value)
{
    ck_assert_msg(write_fixture(path) == 0, "%s", runfiles_last_error());
    struct safetensors *st = safetensors_load(path);
    ck_assert_ptr_nonnull(st);
    struct safetensors_entry e[32];
    struct tensor *own[32] = { 0 };
    int n = 0;
    for (int i = 0; i < st->n; i++) {
        bool hit = name && strcmp(st->names[i], name) == 0;
        if (hit && !edit) continue;
        own[n] = hit ? edit(st->tensors[i]) : NULL;
        e[n] = (struct safetensors_entry){ st->names[i], own[n] ? own[n] : st->tensors[i] };
        n++;
    }
    struct safetensors_meta m[32];
    int nm = 0;
    bool seen = false;
    for (int i = 0; i < st->n_meta; i++) {
        bool hit = key && strcmp(key, st->meta[i].key) == 0;
        seen |= hit;
        if (!hit || value) m[nm++] = (struct safetensors_meta){ st->meta[i].key, hit ? value : st->meta[i].value };
    }
    if (key && !seen) m[nm++] = (struct safetensors_meta){ key, value };
    ck_assert_msg(safetensors_save(path, e, n, m, nm) == 0, "%s", runfiles_last_error());
    for (int i = 0; i < n; i++) tensor_free(own[i]);
    safetensors_free(st);
}

static struct tensor *f64_with(const struct tensor *t, int64_t at, double v)
{
    struct tensor *c = tensor_clone_to(t, DEVICE_CPU);
    ((double *)tensor_data(c))[at] = v;
    return c;
}
static struct tensor *nan_at_2(const struct tensor *t) { return f64_with(t, 2, NAN); }
static struct tensor *minus_half_at_1(const struct tensor *t) { return f64_with(t, 1, -0.5); }
static struct tensor *minus_one(const struct tensor *t) { return f64_with(t, 0, -1); }
static struct tensor *inf_at_0(const struct tensor *t) { return f64_with(t, 0, INFINITY); }
/* issue 33 F1's finite extremes: beyond the bounds every set of statistics keeps */
static struct tensor *huge_count(const struct tensor *t) { return f64_with(t, 0, 1.7e308); }
static struct tensor *huge_at_0(const struct tensor *t) { return f64_with(t, 0, 1e300); }
static struct tensor *huge_var_at_1(const struct tensor *t) { return f64_with(t, 1, 1e308); }
static struct tensor *short_by_one(const struct tensor *t)
{
    int64_t d = t->shape[0] - 1;
    struct tensor *c = tensor_new(DTYPE_F64, DEVICE_CPU, 1, &d);
    memcpy(tensor_data(c), tensor_data(t), (size_t)d * sizeof(double));
    return c;
}
static struct tensor *as_f32(const struct tensor *t)
{
    struct tensor *c = tensor_new(DTYPE_F32, DEVICE_CPU, t->ndim, t->shape);
    for (int64_t i = 0; i < t->numel; i++) ((float *)tensor_data(c))[i] = (float)((const double *)tensor_data(t))[i];
    return c;
}
static struct tensor *as_vector(const struct tensor *t)
{
    int64_t d = 1;
    struct tensor *c = tensor_new(DTYPE_F64, DEVICE_CPU, 1, &d);
    memcpy(tensor_data(c), tensor_data(t), sizeof(double));
    return c;
}

START_TEST(test_export_refusals)
{
    static const struct {
        const char *name;
        edit_fn edit;
        const char *key, *value, *why;
    } cases[] = {
        { "obs_norm.mean", short_by_one, NULL, NULL, "'obs_norm.mean' is f64 [10], expected f64 [11]" },
        { "obs_norm.var", as_f32, NULL, NULL, "'obs_norm.var' is f32 [11], expected f64 [11]" },
        { "obs_norm.count", as_vector, NULL, NULL, "'obs_norm.count' is f64 [1], expected f64 []" },
        { "obs_norm.mean", nan_at_2, NULL, NULL, "obs_norm.mean[2] is nan" },
        { "obs_norm.mean", inf_at_0, NULL, NULL, "obs_norm.mean[0] is inf" },
        { "obs_norm.var", minus_half_at_1, NULL, NULL, "obs_norm.var[1] is -0.5 (a variance is finite and >= 0)" },
        { "obs_norm.var", nan_at_2, NULL, NULL, "obs_norm.var[2] is nan (a variance is finite and >= 0)" },
        { "obs_norm.count", minus_one, NULL, NULL, "obs_norm.count is -1 (a count is finite and >= 0)" },
        { "obs_norm.count", huge_count, NULL, NULL, "obs_norm.count is 1.7e+308, more than 2^53" },
        { "obs_norm.mean", huge_at_0, NULL, NULL, "obs_norm.mean[0] 1e+300 and var[0] 0.01: mean^2 + var is more than 1.87883e+109" },
        { "obs_norm.var", huge_var_at_1, NULL, NULL, "obs_norm.mean[1] -0.875 and var[1] 1e+308: mean^2 + var is more than 1.87883e+109" },
        { "obs_norm.var", NULL, NULL, NULL, "observation statistics incomplete: no tensor 'obs_norm.var'" },
        { NULL, NULL, "obs_eps", NULL, "observation statistics incomplete: no metadata 'obs_eps'" },
        { NULL, NULL, "obs_clip", "ten", "metadata 'obs_clip' is 'ten', not a number" },
        { NULL, NULL, "obs_clip", "0", "obs_clip is 0, not a positive number" },
        { NULL, NULL, "obs_eps", "-1e-8", "obs_eps is -1e-08, not a positive number" },
        { NULL, NULL, "act_kind", "beta", "metadata 'act_kind' is 'beta', not 'box' or 'discrete'" },
        { NULL, NULL, "act_kind", "discrete", "a discrete action space does not fit the gaussian head" },
        { NULL, NULL, "act_low", "-1,-1", "metadata 'act_low' is not 3 comma-separated numbers" },
        { NULL, NULL, "act_high", "1,1,1,", "metadata 'act_high' is not 3 comma-separated numbers" },
        { NULL, NULL, "act_high", NULL, "metadata 'act_high' is not 3 comma-separated numbers" },
        { NULL, NULL, "act_low", "-1,nan,-1", "action bounds [nan, 1] at dim 1 (NaN, or low > high)" },
        { NULL, NULL, "act_low", "-1,-1,2", "action bounds [2, 1] at dim 2 (NaN, or low > high)" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = P("bad.safetensors");
        crafted(path, cases[i].name, cases[i].edit, cases[i].key, cases[i].value);
        struct policy_arch a;
        char env[64];
        struct nn_module *actor = (void *)1, *critic = (void *)1;
        struct policy_extras x = { .norm.dim = 7 };
        ck_assert_int_eq(policy_file_read(path, &a, env, sizeof env, &actor, &critic, &x), -1);
        ASSERT_ERR("policy %s: %s", path, cases[i].why);
        ck_assert_ptr_null(actor);
        ck_assert_ptr_null(critic);
        ck_assert_int_eq(x.norm.dim, 7);   /* untouched */
        /* refused without the extras asked for too */
        ck_assert_int_eq(policy_file_load(path, &a, env, sizeof env, &actor, NULL), -1);
        ASSERT_ERR("policy %s: %s", path, cases[i].why);
    }
}
END_TEST

/* The writer refuses what the reader would. */
START_TEST(test_export_write_refusals)
{
    struct policy_arch arch = FIX_ARCH;
    arch.value_head = false;   /* the actor's parameters alone */
    struct nn_module *actor;
    ck_assert_int_eq(policy_arch_build(&arch, 7, &actor, NULL), 0);
    double mean[OBS], var[OBS];
    struct policy_norm n;
    fixture_norm(&n, mean, var);
    static const double low[ACT] = { -1, -1, -1 }, high[ACT] = { 1, 1, 1 };
    struct env_space act = { .kind = SPACE_BOX, .dim = ACT, .low = low, .high = high };
    struct policy_info info = { .env_id = "Hopper-v4", .act = &act, .norm = &n };
    const char *path = P("w.safetensors");
    n.dim = 4;
    ck_assert_int_eq(policy_file_write(path, &arch, &info, actor->n_params, actor->params), -1);
    ASSERT_ERR("policy %s: the statistics have 4 dims, the policy takes 11 observations", path);
    n.dim = OBS;
    var[3] = -1;
    ck_assert_int_eq(policy_file_write(path, &arch, &info, actor->n_params, actor->params), -1);
    ASSERT_ERR("policy %s: obs_norm.var[3] is -1 (a variance is finite and >= 0)", path);
    var[3] = 1;
    act.dim = 2;
    ck_assert_int_eq(policy_file_write(path, &arch, &info, actor->n_params, actor->params), -1);
    ASSERT_ERR("policy %s: the action space has 2 dims, the policy 3", path);
    ck_assert_int_eq(access(path, F_OK), -1);   /* nothing written */
    nn_module_free(actor);
}
END_TEST

/* ---- tributary-eval ------------------------------------------------------ */

static char OUT[4096], ERR[4096];

/* tributary-eval FILE --episodes 3 --json; its exit status (OUT, ERR). */
static int run_eval(const char *file)
{
    const char *argv[] = { TRIB_EVAL_BIN, file, "--episodes", "3", "--json", NULL };
    int status = -1;
    ck_assert_msg(proc_run(argv, 120, OUT, sizeof OUT, ERR, sizeof ERR, &status) == 0, "%s", strerror(errno));
    return status;
}

/* The return tributary-eval printed, as it printed it. */
static void eval_return(char *out, size_t cap)
{
    const char *r = strstr(OUT, "\"return_mean\":");
    ck_assert_msg(r != NULL, "%s", OUT);
    snprintf(out, cap, "%.*s", (int)strcspn(r, ","), r);
}

/* tributary-eval applies the file's statistics: the fixture on Hopper-v4
 * acts otherwise than its nets without them, and statistics that change
 * nothing (mean 0, var 1, a negligible eps, no clip) give exactly the
 * return of the file without statistics. */
START_TEST(test_eval_applies_statistics)
{
    char with[64], none[64], identity[64];
    ck_assert_msg(write_fixture(P("with")) == 0, "%s", runfiles_last_error());
    ck_assert_msg(run_eval(P("with")) == 0, "%s", ERR);
    eval_return(with, sizeof with);
    ck_assert_msg(write_policy(P("none"), NULL) == 0, "%s", runfiles_last_error());
    ck_assert_msg(run_eval(P("none")) == 0, "%s", ERR);
    eval_return(none, sizeof none);
    double zero[OBS] = { 0 }, one[OBS];
    for (int i = 0; i < OBS; i++) one[i] = 1;
    struct policy_norm id = { .dim = OBS, .count = 1, .clip = 1e300, .eps = 1e-300, .mean = zero, .var = one };
    ck_assert_msg(write_policy(P("identity"), &id) == 0, "%s", runfiles_last_error());
    ck_assert_msg(run_eval(P("identity")) == 0, "%s", ERR);
    eval_return(identity, sizeof identity);
    ck_assert_str_eq(identity, none);
    ck_assert_msg(strcmp(with, none) != 0, "the statistics changed nothing: %s", with);
}
END_TEST

/* A file with malformed statistics, or bounds that are not the env's, is
 * refused before any episode, saying why. */
START_TEST(test_eval_refusals)
{
    char want[1024];
    crafted(P("bad"), "obs_norm.var", minus_half_at_1, NULL, NULL);
    ck_assert_int_eq(run_eval(P("bad")), 1);
    snprintf(want, sizeof want, "tributary-eval: policy %s: obs_norm.var[1] is -0.5 (a variance is finite and >= 0)\n",
             P("bad"));
    ck_assert_str_eq(ERR, want);
    ck_assert_str_eq(OUT, "");
    crafted(P("bad"), "obs_norm.mean", short_by_one, NULL, NULL);
    ck_assert_int_eq(run_eval(P("bad")), 1);
    snprintf(want, sizeof want, "tributary-eval: policy %s: 'obs_norm.mean' is f64 [10], expected f64 [11]\n", P("bad"));
    ck_assert_str_eq(ERR, want);
    crafted(P("bad"), NULL, NULL, "act_low", "-2,-1,-1");
    ck_assert_int_eq(run_eval(P("bad")), 1);
    snprintf(want, sizeof want, "tributary-eval: %s does not fit Hopper-v4: the policy's actions were clipped to "
                                "[-2, 1] at dim 0, the env's box is [-1, 1]\n", P("bad"));
    ck_assert_str_eq(ERR, want);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write") == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/policy.safetensors", argv[2]);
        if (write_fixture(path) != 0) {
            fprintf(stderr, "test_export: %s\n", runfiles_last_error());
            return 1;
        }
        printf("%s\n", path);
        return 0;
    }
    return KIT_RUN("export",
             { "export", 0, .setup = setup, .teardown = teardown, .tests = { test_export_fixture_current,
               test_export_matches_torch, test_export_roundtrip, test_export_old_file, test_export_norm_apply,
               test_export_refusals, test_export_write_refusals } },
             { "tributary-eval", 0, .setup = setup, .teardown = teardown,
               .tests = { test_eval_applies_statistics, test_eval_refusals } });
}
