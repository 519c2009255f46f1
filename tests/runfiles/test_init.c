/* --init orthogonal (runfiles/policy_file.h's policy_arch_build with
 * a->orthogonal, tensor/nn.h's nn_init_orthogonal): each weight is
 * orthogonal with CleanRL's gain for its layer (W W^T = gain^2 I for a
 * wide one, W^T W for a tall one), biases are 0, the log-std is the
 * config's, the draws follow the seed; and the singular values equal
 * those of torch's orthogonal_ in CleanRL's own Agent for the same shapes
 * (tests/runfiles/fixtures/init_fixture.txt, made once by
 * scripts/gen_init_fixtures.py with Debian's python3-torch). The singular
 * values here come from LAPACK's dgesvd, which OpenBLAS exports. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runfiles/policy_file.h"
#include "tensor/nn.h"
#include "tensor/tensor.h"
#include "kit.h"

void dgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, double *a, const int *lda, double *s,
             double *u, const int *ldu, double *vt, const int *ldvt, double *work, const int *lwork, int *info);

/* w's singular values (descending) into s[min(rows, cols)]. */
static void singular_values(const struct tensor *w, double *s)
{
    int m = (int)w->shape[0], n = (int)w->shape[1], lwork = 8 * (m + n) + 64, info = 0, one = 1;
    double *a = malloc((size_t)m * (size_t)n * sizeof *a), *work = malloc((size_t)lwork * sizeof *work), dummy = 0;
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(work);
    const float *p = tensor_f32((struct tensor *)w);
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) a[(size_t)c * (size_t)m + (size_t)r] = p[(size_t)r * (size_t)n + (size_t)c];
    dgesvd_("N", "N", &m, &n, a, &m, s, &dummy, &one, &dummy, &one, work, &lwork, &info);
    ck_assert_int_eq(info, 0);
    free(a);
    free(work);
}

/* max |(W W^T or W^T W) - gain^2 I| over the smaller Gram matrix. */
static double gram_error(const struct tensor *w, double gain)
{
    int rows = (int)w->shape[0], cols = (int)w->shape[1];
    const float *p = tensor_f32((struct tensor *)w);
    bool wide = rows <= cols;
    int k = wide ? rows : cols, len = wide ? cols : rows;
    double worst = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            double dot = 0;
            for (int t = 0; t < len; t++) {
                double x = wide ? p[(size_t)i * (size_t)cols + (size_t)t] : p[(size_t)t * (size_t)cols + (size_t)i];
                double y = wide ? p[(size_t)j * (size_t)cols + (size_t)t] : p[(size_t)t * (size_t)cols + (size_t)j];
                dot += x * y;
            }
            double e = fabs(dot - (i == j ? gain * gain : 0.0));
            if (e > worst) worst = e;
        }
    return worst;
}

static struct tensor *matrix(int rows, int cols)
{
    struct tensor *w = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){ rows, cols });
    ck_assert_ptr_nonnull(w);
    return w;
}

START_TEST(test_orthogonal_shapes_and_gains)
{
    static const struct { int rows, cols; double gain; } cases[] = {
        { 5, 9, 1.0 }, { 9, 5, 1.0 }, { 7, 7, 2.5 }, { 64, 11, 1.4142135623730951 }, { 3, 64, 0.01 },
        { 1, 64, 1.0 }, { 64, 1, 1.0 }, { 1, 1, 3.0 }, { 256, 376, 1.4142135623730951 },
    };
    uint64_t rng = 42;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct tensor *w = matrix(cases[c].rows, cases[c].cols);
        ck_assert_int_eq(nn_init_orthogonal(w, (float)cases[c].gain, &rng), 0);
        double e = gram_error(w, cases[c].gain);
        ck_assert_msg(e < 1e-5 * (1 + cases[c].gain * cases[c].gain), "%dx%d gain %g: Gram matrix off by %g",
                      cases[c].rows, cases[c].cols, cases[c].gain, e);
        /* and not a trivial one: a Gaussian's Q has no column of a unit vector */
        const float *p = tensor_f32(w);
        int zeros = 0;
        for (int64_t i = 0; i < w->numel; i++) zeros += p[i] == 0.0f;
        ck_assert_int_eq(zeros, 0);
        tensor_free(w);
    }
}
END_TEST

START_TEST(test_orthogonal_follows_the_seed)
{
    struct tensor *a = matrix(16, 8), *b = matrix(16, 8), *c = matrix(16, 8);
    uint64_t r1 = 7, r2 = 7, r3 = 8;
    ck_assert_int_eq(nn_init_orthogonal(a, 1.0f, &r1), 0);
    ck_assert_int_eq(nn_init_orthogonal(b, 1.0f, &r2), 0);
    ck_assert_int_eq(nn_init_orthogonal(c, 1.0f, &r3), 0);
    ck_assert_int_eq(memcmp(tensor_f32(a), tensor_f32(b), 16 * 8 * sizeof(float)), 0);
    ck_assert_int_ne(memcmp(tensor_f32(a), tensor_f32(c), 16 * 8 * sizeof(float)), 0);
    ck_assert_uint_eq(r1, r2);   /* the state moved on */
    ck_assert_uint_ne(r1, 7);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
}
END_TEST

START_TEST(test_orthogonal_refusals)
{
    uint64_t rng = 1;
    struct tensor *v = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){ 4 });
    ck_assert_int_eq(nn_init_orthogonal(v, 1.0f, &rng), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_init_orthogonal: the weight must be a CPU f32 [out,in] matrix");
    ck_assert_int_eq(nn_init_orthogonal(NULL, 1.0f, &rng), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_init_orthogonal: the weight is NULL");
    tensor_free(v);
    struct nn_module *bag = nn_embedding_bag_new(4, 3, TENSOR_BAG_SUM, &rng);
    ck_assert_ptr_nonnull(bag);
    ck_assert_int_eq(nn_module_init_orthogonal(bag, 1.0f, 1.0f, &rng), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_module_init_orthogonal: a embedding_bag module has no linear layers");
    nn_module_free(bag);
}
END_TEST

/* One line of the fixture. */
struct ref {
    char name[96];
    int rows, cols;
    double bias, sv[64];
};

static int read_fixture(struct ref *refs, int cap)
{
    FILE *f = fopen(INIT_FIXTURE, "r");
    ck_assert_msg(f != NULL, "cannot open %s", INIT_FIXTURE);
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        ck_assert_int_lt(n, cap);
        struct ref *r = &refs[n++];
        char bias[32];
        int used = 0;
        ck_assert_int_eq(sscanf(line, "%95s %d %d %31s%n", r->name, &r->rows, &r->cols, bias, &used), 4);
        r->bias = strcmp(bias, "-") == 0 ? NAN : strtod(bias, NULL);
        int k = r->rows < r->cols ? r->rows : r->cols;
        const char *p = line + used;
        for (int i = 0; i < k; i++) {
            char *end = NULL;
            r->sv[i] = strtod(p, &end);
            ck_assert_msg(end != p, "%s: %d singular values, expected %d", r->name, i, k);
            p = end;
        }
    }
    fclose(f);
    return n;
}

static const struct ref *find_ref(const struct ref *refs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(refs[i].name, name) == 0) return &refs[i];
    ck_abort_msg("the fixture has no %s", name);
    return NULL;
}

static void check_like_torch(const struct tensor *w, const struct ref *r, const char *what)
{
    ck_assert_msg(w->shape[0] == r->rows && w->shape[1] == r->cols, "%s: %lldx%lld, torch's %dx%d", what,
                  (long long)w->shape[0], (long long)w->shape[1], r->rows, r->cols);
    double s[64];
    singular_values(w, s);
    for (int i = 0; i < (r->rows < r->cols ? r->rows : r->cols); i++)
        ck_assert_msg(fabs(s[i] - r->sv[i]) <= 2e-6 * (r->sv[0] > 1e-3 ? r->sv[0] : 1e-3) * 10,
                      "%s: singular value %d is %.9g, torch's %.9g", what, i, s[i], r->sv[i]);
}

/* CleanRL's Agent (ppo_continuous_action.py on Hopper's shapes, ppo.py on
 * CartPole's) against policy_arch_build's nets with orthogonal set. */
START_TEST(test_arch_matches_cleanrl)
{
    struct ref refs[32];
    int n = read_fixture(refs, 32);
    static const struct { const char *tag; struct policy_arch a; } nets[] = {
        { "hopper", { .obs_dim = 11, .act_dim = 3, .gaussian = true, .value_head = true, .n_hidden = 2,
                      .hidden = { 64, 64 }, .tanh = true, .init_log_std = -0.5, .orthogonal = true } },
        { "cartpole", { .obs_dim = 4, .act_dim = 2, .gaussian = false, .value_head = true, .n_hidden = 2,
                        .hidden = { 64, 64 }, .tanh = true, .orthogonal = true } },
    };
    for (size_t k = 0; k < sizeof nets / sizeof nets[0]; k++) {
        struct nn_module *actor = NULL, *critic = NULL;
        ck_assert_int_eq(policy_arch_build(&nets[k].a, 3, &actor, &critic), 0);
        char names[POLICY_MAX_TENSORS][64];
        int np = policy_arch_param_names(&nets[k].a, POLICY_MAX_TENSORS, names);
        ck_assert_int_eq(np, actor->n_params + critic->n_params);
        for (int i = 0; i < np; i++) {
            struct tensor *t = i < actor->n_params ? actor->params[i] : critic->params[i - actor->n_params];
            char full[128];
            snprintf(full, sizeof full, "%s.%s", nets[k].tag, names[i]);
            size_t len = strlen(names[i]);
            if (strcmp(names[i], "actor_logstd") == 0) {
                for (int j = 0; j < t->numel; j++) ck_assert_float_eq(tensor_f32(t)[j], -0.5f);
            } else if (len > 5 && strcmp(names[i] + len - 5, ".bias") == 0) {
                for (int j = 0; j < t->numel; j++) ck_assert_msg(tensor_f32(t)[j] == 0.0f, "%s is not 0", full);
            } else {
                const struct ref *r = find_ref(refs, n, full);
                ck_assert_double_eq(r->bias, 0.0);   /* CleanRL's layer_init: bias 0 too */
                check_like_torch(t, r, full);
            }
        }
        nn_module_free(actor);
        nn_module_free(critic);
    }
}
END_TEST

/* The bare orthogonal_ rows of the fixture, shape for shape. */
START_TEST(test_orthogonal_matches_torch)
{
    struct ref refs[32];
    int n = read_fixture(refs, 32), seen = 0;
    uint64_t rng = 5;
    for (int i = 0; i < n; i++) {
        if (strncmp(refs[i].name, "orthogonal.", 11) != 0) continue;
        struct tensor *w = matrix(refs[i].rows, refs[i].cols);
        ck_assert_int_eq(nn_init_orthogonal(w, (float)refs[i].sv[0], &rng), 0);   /* gain: all of them equal it */
        check_like_torch(w, &refs[i], refs[i].name);
        tensor_free(w);
        seen++;
    }
    ck_assert_int_eq(seen, 5);
}
END_TEST

/* Every parameter of two builds byte for byte equal (same: true) or every
 * weight different (same: false). */
static void compare_builds(struct nn_module *a, struct nn_module *b, bool same, const char *what)
{
    ck_assert_int_eq(a->n_params, b->n_params);
    for (int i = 0; i < a->n_params; i++) {
        const struct tensor *x = a->params[i], *y = b->params[i];
        ck_assert_int_eq(x->numel, y->numel);
        bool eq = memcmp(tensor_f32((struct tensor *)x), tensor_f32((struct tensor *)y),
                         (size_t)x->numel * sizeof(float)) == 0;
        if (same) ck_assert_msg(eq, "%s: parameter %d differs", what, i);
        else if (x->ndim == 2) ck_assert_msg(!eq, "%s: weight %d is the same", what, i);
    }
}

/* The layers of policy_arch_build's orthogonal Hopper nets (11 -> 64 -> 64,
 * heads 64 -> 3 and 64 -> 1) with CleanRL's gains, their Gram matrices
 * gain^2 I; biases 0, the log-std the config's 0; the seed reproduces
 * them and another seed does not. */
START_TEST(test_arch_orthogonal_follows_the_seed)
{
    struct policy_arch a = { .obs_dim = 11, .act_dim = 3, .gaussian = true, .value_head = true, .n_hidden = 2,
                             .hidden = { 64, 64 }, .tanh = true, .orthogonal = true };
    struct nn_module *actor[3], *critic[3];
    const uint64_t seeds[3] = { 3, 3, 4 };
    for (int k = 0; k < 3; k++) ck_assert_int_eq(policy_arch_build(&a, seeds[k], &actor[k], &critic[k]), 0);
    char names[POLICY_MAX_TENSORS][64];
    int np = policy_arch_param_names(&a, POLICY_MAX_TENSORS, names), weights = 0;
    for (int i = 0; i < np; i++) {
        const struct tensor *t = i < actor[0]->n_params ? actor[0]->params[i] : critic[0]->params[i - actor[0]->n_params];
        const float *p = tensor_f32((struct tensor *)t);
        if (t->ndim != 2) {   /* a bias or the log-std: all 0 */
            for (int j = 0; j < t->numel; j++) ck_assert_msg(p[j] == 0.0f, "%s[%d] = %g", names[i], j, p[j]);
            continue;
        }
        bool head = strcmp(names[i], "actor.4.weight") == 0, value = strcmp(names[i], "critic.4.weight") == 0;
        double gain = head ? 0.01 : value ? 1.0 : sqrt(2.0);
        ck_assert_int_eq(t->shape[0], head ? 3 : value ? 1 : 64);
        ck_assert_int_eq(t->shape[1], strstr(names[i], ".0.") ? 11 : 64);
        double e = gram_error(t, gain);
        ck_assert_msg(e < 1e-5 * (1 + gain * gain), "%s: Gram matrix off gain^2 I (gain %g) by %g", names[i], gain, e);
        weights++;
    }
    ck_assert_int_eq(weights, 6);
    compare_builds(actor[0], actor[1], true, "seed 3 twice, actor");
    compare_builds(critic[0], critic[1], true, "seed 3 twice, critic");
    compare_builds(actor[0], actor[2], false, "seeds 3 and 4, actor");
    compare_builds(critic[0], critic[2], false, "seeds 3 and 4, critic");
    for (int k = 0; k < 3; k++) {
        nn_module_free(actor[k]);
        nn_module_free(critic[k]);
    }
}
END_TEST

/* --init pytorch is the construction alone, byte for byte: the nets
 * nn_policy_new and nn_mlp_new draw from the seed, as policy_arch_build
 * made them before the row (actor first, then the critic from the same
 * RNG state), for a Gaussian and a categorical net. */
START_TEST(test_arch_pytorch_is_the_construction)
{
    for (int g = 0; g < 2; g++) {
        struct policy_arch a = { .obs_dim = 11, .act_dim = 3, .gaussian = g == 1, .value_head = true, .n_hidden = 2,
                                 .hidden = { 64, 32 }, .tanh = true };
        struct nn_module *actor = NULL, *critic = NULL;
        ck_assert_int_eq(policy_arch_build(&a, 12345, &actor, &critic), 0);
        uint64_t rng = 12345;
        int sizes[] = { 11, 64, 32, 3 };
        struct nn_policy_config pc = { .obs_dim = 11, .act_dim = 3, .n_hidden = 2, .hidden = { 64, 32 },
                                       .act = NN_TANH, .head = NN_HEAD_GAUSSIAN };
        struct nn_module *want_actor = g ? nn_policy_new(&pc, &rng) : nn_mlp_new(4, sizes, NN_TANH, 0.0f, &rng);
        sizes[3] = 1;
        struct nn_module *want_critic = nn_mlp_new(4, sizes, NN_TANH, 0.0f, &rng);
        ck_assert_ptr_nonnull(want_actor);
        ck_assert_ptr_nonnull(want_critic);
        compare_builds(actor, want_actor, true, g ? "pytorch Gaussian actor" : "pytorch categorical actor");
        compare_builds(critic, want_critic, true, "pytorch critic");
        nn_module_free(actor);
        nn_module_free(critic);
        nn_module_free(want_actor);
        nn_module_free(want_critic);
    }
}
END_TEST

/* Without orthogonal, the nets are PyTorch's default as before: biases
 * drawn (not 0), and the two inits differ from the same seed. */
START_TEST(test_arch_default_unchanged)
{
    struct policy_arch a = { .obs_dim = 11, .act_dim = 3, .gaussian = true, .value_head = true, .n_hidden = 2,
                             .hidden = { 64, 64 }, .tanh = true };
    struct nn_module *p_actor = NULL, *p_critic = NULL, *o_actor = NULL, *o_critic = NULL;
    ck_assert_int_eq(policy_arch_build(&a, 3, &p_actor, &p_critic), 0);
    a.orthogonal = true;
    ck_assert_int_eq(policy_arch_build(&a, 3, &o_actor, &o_critic), 0);
    const struct tensor *pb = p_actor->params[1], *pw = p_actor->params[0], *ow = o_actor->params[0];
    int nonzero = 0;
    for (int j = 0; j < pb->numel; j++) nonzero += tensor_f32((struct tensor *)pb)[j] != 0.0f;
    ck_assert_int_gt(nonzero, 0);
    float bound = 1.0f / sqrtf(11.0f);
    for (int j = 0; j < pw->numel; j++) ck_assert(fabsf(tensor_f32((struct tensor *)pw)[j]) <= bound);
    ck_assert(gram_error(pw, sqrt(2.0)) > 0.1);
    ck_assert(gram_error(ow, sqrt(2.0)) < 1e-4);
    nn_module_free(p_actor);
    nn_module_free(p_critic);
    nn_module_free(o_actor);
    nn_module_free(o_critic);
}
END_TEST

int main(void)
{
    return KIT_RUN("init", { "orthogonal", 0, .tests = { test_orthogonal_shapes_and_gains,
                             test_orthogonal_follows_the_seed, test_orthogonal_refusals, test_orthogonal_matches_torch,
                             test_arch_matches_cleanrl, test_arch_default_unchanged,
                             test_arch_orthogonal_follows_the_seed, test_arch_pytorch_is_the_construction } });
}
