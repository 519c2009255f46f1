/* nn modules and the distributions: PyTorch-style init, MLP/policy forward
 * against hand-composed ops, gradients reaching every parameter, dropout
 * statistics and determinism, categorical sampling frequencies and the
 * Gaussian log-prob/entropy against their closed forms. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/nn.h"
#include "tensor/ops.h"
#include "kit.h"

static struct tensor *filled(int ndim, const int64_t *shape, float (*f)(int64_t))
{
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, ndim, shape);
    for (int64_t i = 0; i < t->numel; i++) tensor_f32(t)[i] = f(i);
    return t;
}

static float ones(int64_t i) { (void)i; return 1.0f; }
static float wave(int64_t i) { return sinf((float)i * 0.7f); }

/* ---- init and forward ------------------------------------------------------------------- */

START_TEST(test_linear_init)
{
    uint64_t rng = 42, rng2 = 42;
    struct nn_module *a = nn_linear_new(16, 8, true, &rng), *b = nn_linear_new(16, 8, true, &rng2);
    ck_assert_str_eq(a->ops->kind, "linear");
    ck_assert_int_eq(a->n_params, 2);
    ck_assert_int_eq(a->params[0]->shape[0], 8);
    ck_assert_int_eq(a->params[0]->shape[1], 16);
    ck_assert_int_eq(a->params[1]->shape[0], 8);
    ck_assert(a->params[0]->requires_grad && a->params[1]->requires_grad);
    float bound = 1.0f / sqrtf(16.0f), mx = 0;
    for (int p = 0; p < 2; p++)
        for (int64_t i = 0; i < a->params[p]->numel; i++) {
            float v = tensor_f32(a->params[p])[i];
            ck_assert(fabsf(v) <= bound);
            mx = fmaxf(mx, fabsf(v));
            ck_assert_float_eq(v, tensor_f32(b->params[p])[i]);   /* same seed, same init */
        }
    ck_assert(mx > 0.8f * bound);   /* really spread over the range */
    ck_assert_uint_eq(rng, rng2);
    uint64_t rng3 = 43;
    struct nn_module *c = nn_linear_new(16, 8, false, &rng3);
    ck_assert_int_eq(c->n_params, 1);
    ck_assert(tensor_f32(c->params[0])[0] != tensor_f32(a->params[0])[0]);
    nn_module_free(a);
    nn_module_free(b);
    nn_module_free(c);
    nn_module_free(NULL);
}
END_TEST

/* Sizes may come from a peer (RemoteModule): parameters too large to make
 * are an error, not an abort. */
START_TEST(test_too_large_is_an_error)
{
    uint64_t rng = 1;
    ck_assert_ptr_null(nn_linear_new(1 << 30, 1 << 30, true, &rng));
    ck_assert_str_eq(tensor_last_error(), "nn_linear_new: cannot allocate the parameters: tensor_new: shape is too large");
    int sizes[3] = {1 << 30, 1 << 30, 4};     /* the first layer is already too large */
    ck_assert_ptr_null(nn_mlp_new(3, sizes, NN_RELU, 0.0f, &rng));
    ck_assert_str_eq(tensor_last_error(), "nn_mlp_new: cannot allocate the parameters: tensor_new: shape is too large");
    struct nn_policy_config cfg = {.obs_dim = 1 << 30, .act_dim = 2, .n_hidden = 1, .hidden = {1 << 30},
                                   .head = NN_HEAD_GAUSSIAN, .value_head = true};
    ck_assert_ptr_null(nn_policy_new(&cfg, &rng));
    ck_assert_str_eq(tensor_last_error(), "nn_policy_new: cannot allocate the parameters: tensor_new: shape is too large");
    /* a sane module still builds afterwards */
    struct nn_module *m = nn_linear_new(3, 2, true, &rng);
    ck_assert_ptr_nonnull(m);
    nn_module_free(m);
}
END_TEST

START_TEST(test_mlp_matches_ops)
{
    uint64_t rng = 7;
    struct nn_module *m = nn_mlp_new(4, (int[]){3, 5, 4, 2}, NN_TANH, 0.0f, &rng);
    ck_assert_int_eq(m->n_params, 6);
    struct tensor *x = filled(2, (int64_t[]){6, 3}, wave);
    struct tensor *y = nn_forward1(m, x);
    ck_assert_ptr_nonnull(y);
    ck_assert_int_eq(y->shape[0], 6);
    ck_assert_int_eq(y->shape[1], 2);
    /* the same by hand */
    struct tensor *h = tensor_retain(x);
    for (int l = 0; l < 3; l++) {
        struct tensor *z = tensor_linear(h, m->params[2 * l], m->params[2 * l + 1]);
        tensor_free(h);
        h = l < 2 ? tensor_tanh(z) : tensor_retain(z);
        tensor_free(z);
    }
    for (int i = 0; i < 12; i++) ck_assert_float_eq_tol(tensor_f32(y)[i], tensor_f32(h)[i], 1e-6f);
    /* gradients reach every parameter */
    struct tensor *loss = tensor_sum(y);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    for (int p = 0; p < m->n_params; p++) {
        ck_assert_ptr_nonnull(m->params[p]->grad);
        ck_assert(tensor_same_shape(m->params[p]->grad, m->params[p]));
    }
    ck_assert_ptr_null(x->grad);
    /* bad input */
    struct tensor *bad = filled(2, (int64_t[]){2, 4}, ones);
    ck_assert_ptr_null(nn_forward1(m, bad));
    ck_assert_str_eq(tensor_last_error(), "nn_mlp: expected input [...,3], got [2,4]");
    ck_assert_ptr_null(nn_mlp_new(1, (int[]){3}, NN_RELU, 0.0f, &rng));
    ck_assert_str_eq(tensor_last_error(), "nn_mlp_new: need 2..9 sizes, got 1");
    tensor_free(bad);
    tensor_free(loss);
    tensor_free(h);
    tensor_free(y);
    tensor_free(x);
    nn_module_free(m);
}
END_TEST

START_TEST(test_module_to_without_gpu)
{
    if (tensor_cuda_available()) {
        fprintf(stderr, "a CUDA device is present: the no-device message cannot be tested\n");
        return;
    }
    uint64_t rng = 1;
    struct nn_module *m = nn_linear_new(2, 2, true, &rng);
    ck_assert_int_eq(nn_module_to(m, DEVICE_CUDA), -1);
#ifdef TRIB_WITH_CUDA
    ck_assert_str_eq(tensor_last_error(), "nn_module_to: no cuda device is available");
#else
    ck_assert_str_eq(tensor_last_error(), "nn_module_to: the cuda backend is not built");
#endif
    ck_assert_int_eq(nn_module_to(m, DEVICE_CPU), 0);
    ck_assert_int_eq(m->params[0]->device, DEVICE_CPU);
    nn_module_free(m);
}
END_TEST

START_TEST(test_policy_heads)
{
    uint64_t rng = 3;
    struct nn_policy_config cat = {.obs_dim = 4, .act_dim = 2, .n_hidden = 1, .hidden = {8}, .act = NN_RELU,
                                   .head = NN_HEAD_CATEGORICAL, .value_head = true};
    struct nn_module *p = nn_policy_new(&cat, &rng);
    ck_assert_str_eq(p->ops->kind, "policy");
    ck_assert_int_eq(p->n_params, 6);
    struct tensor *obs = filled(2, (int64_t[]){5, 4}, wave), *out[NN_MAX_IO];
    int n = 0;
    ck_assert_int_eq(nn_forward(p, 1, &obs, &n, out), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(out[0]->ndim, 2);
    ck_assert_int_eq(out[0]->shape[1], 2);
    ck_assert_int_eq(out[1]->ndim, 1);
    ck_assert_int_eq(out[1]->shape[0], 5);
    /* A2C-style loss through both heads reaches every parameter */
    struct tensor *lp = tensor_log_softmax(out[0]);
    struct tensor *idx = tensor_from_data(DTYPE_I64, 2, (int64_t[]){5, 1}, (int64_t[]){0, 1, 1, 0, 1});
    struct tensor *taken = tensor_gather(lp, idx);
    struct tensor *pl = tensor_sum(taken);
    struct tensor *vsum = tensor_sum(out[1]);
    struct tensor *l1 = tensor_add(pl, vsum);
    ck_assert_int_eq(tensor_backward(l1, NULL, false), 0);
    for (int i = 0; i < p->n_params; i++) ck_assert_ptr_nonnull(p->params[i]->grad);
    struct tensor *all[] = {lp, idx, taken, pl, vsum, l1, out[0], out[1]};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
    nn_module_free(p);

    struct nn_policy_config gauss = {.obs_dim = 4, .act_dim = 3, .n_hidden = 2, .hidden = {8, 8}, .act = NN_TANH,
                                     .head = NN_HEAD_GAUSSIAN, .value_head = false, .init_log_std = -0.5f};
    p = nn_policy_new(&gauss, &rng);
    ck_assert_int_eq(p->n_params, 7);
    ck_assert_int_eq(nn_forward(p, 1, &obs, &n, out), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(out[0]->shape[1], 3);
    ck_assert_int_eq(out[1]->ndim, 1);
    for (int i = 0; i < 3; i++) ck_assert_float_eq(tensor_f32(out[1])[i], -0.5f);
    ck_assert(out[1]->requires_grad);
    tensor_free(out[0]);
    tensor_free(out[1]);
    nn_module_free(p);
    tensor_free(obs);
}
END_TEST

/* ---- dropout -------------------------------------------------------------------------- */

START_TEST(test_dropout_statistics)
{
    enum { N = 100000 };
    struct tensor *x = filled(1, (int64_t[]){N}, ones);
    uint64_t r1 = 9, r2 = 9, r3 = 10;
    struct tensor *a = tensor_dropout(x, 0.3f, true, &r1), *b = tensor_dropout(x, 0.3f, true, &r2);
    struct tensor *c = tensor_dropout(x, 0.3f, true, &r3);
    int zeros = 0, diff = 0;
    double sum = 0;
    for (int i = 0; i < N; i++) {
        float v = tensor_f32(a)[i];
        ck_assert(v == 0.0f || v == 1.0f / 0.7f);
        zeros += v == 0.0f;
        sum += v;
        ck_assert_float_eq(v, tensor_f32(b)[i]);   /* same seed, same mask */
        diff += v != tensor_f32(c)[i];
    }
    ck_assert_double_eq_tol((double)zeros / N, 0.3, 0.01);
    ck_assert_double_eq_tol(sum / N, 1.0, 0.02);
    ck_assert_int_gt(diff, N / 4);
    ck_assert_uint_eq(r1, r2);
    /* eval mode and p = 0 are the identity */
    struct tensor *e = tensor_dropout(x, 0.3f, false, &r1), *z = tensor_dropout(x, 0.0f, true, &r1);
    ck_assert_ptr_eq(e, x);
    ck_assert_ptr_eq(z, x);
    tensor_free(e);
    tensor_free(z);
    tensor_free(a);
    tensor_free(b);
    tensor_free(c);
    tensor_free(x);
}
END_TEST

START_TEST(test_mlp_dropout_train_eval)
{
    uint64_t rng = 5;
    struct nn_module *m = nn_mlp_new(2, (int[]){4, 128}, NN_RELU, 0.6f, &rng);
    /* dropout applies only after activations: a 1-layer MLP has none */
    struct nn_module *m2 = nn_mlp_new(3, (int[]){4, 64, 1}, NN_RELU, 0.6f, &rng);
    struct tensor *x = filled(2, (int64_t[]){1, 4}, wave);
    struct tensor *t1 = nn_forward1(m2, x), *t2 = nn_forward1(m2, x);
    ck_assert(tensor_f32(t1)[0] != tensor_f32(t2)[0]);   /* a new mask per call */
    m2->training = false;
    struct tensor *e1 = nn_forward1(m2, x), *e2 = nn_forward1(m2, x);
    ck_assert_float_eq(tensor_f32(e1)[0], tensor_f32(e2)[0]);
    struct tensor *all[] = {x, t1, t2, e1, e2};
    for (int i = 0; i < 5; i++) tensor_free(all[i]);
    nn_module_free(m);
    nn_module_free(m2);
}
END_TEST

/* ---- distributions ---------------------------------------------------------------------- */

START_TEST(test_categorical_frequencies)
{
    enum { R = 40000, C = 4 };
    const float logits[C] = {0.5f, -1.0f, 1.5f, 0.0f};
    struct tensor *l = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){R, C});
    for (int r = 0; r < R; r++) memcpy(tensor_f32(l) + r * C, logits, sizeof logits);
    uint64_t rng = 11, rng2 = 11;
    struct tensor *s = tensor_categorical_sample(l, &rng), *s2 = tensor_categorical_sample(l, &rng2);
    ck_assert_int_eq(s->dtype, DTYPE_I64);
    ck_assert_int_eq(s->ndim, 1);
    ck_assert_int_eq(s->shape[0], R);
    int count[C] = {0};
    const int64_t *a = tensor_data(s);
    for (int r = 0; r < R; r++) {
        ck_assert(a[r] >= 0 && a[r] < C);
        count[a[r]]++;
        ck_assert_int_eq(a[r], ((const int64_t *)tensor_data(s2))[r]);
    }
    double z = 0;
    for (int j = 0; j < C; j++) z += exp(logits[j]);
    for (int j = 0; j < C; j++) ck_assert_double_eq_tol((double)count[j] / R, exp(logits[j]) / z, 0.01);
    /* one row of logits gives a scalar action */
    struct tensor *one = tensor_from_f32(1, (int64_t[]){C}, logits);
    struct tensor *sc = tensor_categorical_sample(one, &rng);
    ck_assert_int_eq(sc->ndim, 0);
    tensor_free(sc);
    tensor_free(one);
    tensor_free(s);
    tensor_free(s2);
    tensor_free(l);
}
END_TEST

START_TEST(test_gaussian_closed_forms)
{
    const float mu[] = {0.5f, -1.0f, 2.0f, 0.0f}, ls[] = {-0.3f, 0.4f}, xv[] = {0.1f, 0.2f, 1.5f, -0.7f};
    struct tensor *mean = tensor_from_f32(2, (int64_t[]){2, 2}, mu), *log_std = tensor_from_f32(1, (int64_t[]){2}, ls);
    struct tensor *x = tensor_from_f32(2, (int64_t[]){2, 2}, xv);
    struct tensor *lp = tensor_gaussian_log_prob(mean, log_std, x), *ent = tensor_gaussian_entropy(log_std);
    ck_assert_int_eq(lp->ndim, 1);
    ck_assert_int_eq(ent->ndim, 0);
    for (int r = 0; r < 2; r++) {
        double want = 0;
        for (int d = 0; d < 2; d++) {
            double sd = exp(ls[d]), z = (xv[r * 2 + d] - mu[r * 2 + d]) / sd;
            want += log(exp(-0.5 * z * z) / (sd * sqrt(2 * M_PI)));
        }
        ck_assert_double_eq_tol(tensor_f32(lp)[r], want, 1e-5);
    }
    double went = 0;
    for (int d = 0; d < 2; d++) went += 0.5 * log(2 * M_PI * M_E * exp(2.0 * ls[d]));
    ck_assert_double_eq_tol(tensor_f32(ent)[0], went, 1e-5);
    /* samples: mean and std per dim */
    enum { R = 20000 };
    struct tensor *bm = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){R, 2});
    for (int r = 0; r < R; r++) {
        tensor_f32(bm)[2 * r] = 1.0f;
        tensor_f32(bm)[2 * r + 1] = -2.0f;
    }
    uint64_t rng = 5;
    struct tensor *smp = tensor_gaussian_sample(bm, log_std, &rng);
    ck_assert(!smp->requires_grad);
    double s[2] = {0}, ss[2] = {0};
    for (int r = 0; r < R; r++)
        for (int d = 0; d < 2; d++) {
            double v = tensor_f32(smp)[2 * r + d];
            s[d] += v;
            ss[d] += v * v;
        }
    const double want_mean[2] = {1.0, -2.0};
    for (int d = 0; d < 2; d++) {
        double m = s[d] / R, sd = sqrt(ss[d] / R - m * m);
        ck_assert_double_eq_tol(m, want_mean[d], 0.03);
        ck_assert_double_eq_tol(sd, exp(ls[d]), 0.03);
    }
    struct tensor *wrong = tensor_from_f32(1, (int64_t[]){3}, (float[]){0, 0, 0});
    ck_assert_ptr_null(tensor_gaussian_log_prob(mean, wrong, x));
    ck_assert_str_eq(tensor_last_error(), "tensor_gaussian_log_prob: shape mismatch: [2,2] and [3]");
    struct tensor *all[] = {mean, log_std, x, lp, ent, bm, smp, wrong};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
}
END_TEST

/* PyTorch's EmbeddingBag doc example shape: indices [1,2,4,5,4,3,2,9],
 * offsets [0,4]; a table whose row r is (r, 10r) makes the bags' sums and
 * means plain arithmetic. Bad indices and offsets are refused by name. */
START_TEST(test_embedding_bag_module)
{
    uint64_t rng = 3;
    struct nn_module *m = nn_embedding_bag_new(10, 2, TENSOR_BAG_MEAN, &rng);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(m->n_params, 1);
    ck_assert_int_eq(m->params[0]->shape[0], 10);
    ck_assert_int_eq(m->params[0]->shape[1], 2);
    ck_assert(m->params[0]->requires_grad);
    float *w = tensor_mutable_data(m->params[0]);
    for (int r = 0; r < 10; r++) {
        w[2 * r] = (float)r;
        w[2 * r + 1] = 10.0f * (float)r;
    }
    struct tensor *idx = tensor_from_data(DTYPE_I64, 1, (int64_t[]){8}, (int64_t[]){1, 2, 4, 5, 4, 3, 2, 9});
    struct tensor *off = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){0, 4});
    struct tensor *in[2] = {idx, off}, *out[NN_MAX_IO];
    int n = 0;
    ck_assert_int_eq(nn_forward(m, 2, in, &n, out), 0);
    ck_assert_int_eq(n, 1);
    const float want[4] = {3.0f, 30.0f, 4.5f, 45.0f};   /* (1+2+4+5)/4, (4+3+2+9)/4 */
    for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(tensor_f32(out[0])[i], want[i], 1e-6f);
    struct tensor *loss = tensor_sum(out[0]);
    ck_assert_int_eq(tensor_backward(loss, NULL, false), 0);
    /* row 4 is in both bags (1/4 each), row 2 too, row 9 only in the second */
    const float *g = tensor_f32(m->params[0]->grad);
    ck_assert_float_eq_tol(g[2 * 4], 0.5f, 1e-7f);
    ck_assert_float_eq_tol(g[2 * 2 + 1], 0.5f, 1e-7f);
    ck_assert_float_eq_tol(g[2 * 9], 0.25f, 1e-7f);
    ck_assert(g[0] == 0.0f);
    tensor_free(loss);
    tensor_free(out[0]);

    struct tensor *bad_idx = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){1, 10});
    ck_assert_ptr_null(tensor_embedding_bag(m->params[0], bad_idx, off, TENSOR_BAG_SUM));
    ck_assert_str_eq(tensor_last_error(), "tensor_embedding_bag: index 10 is out of range for 10 embeddings");
    struct tensor *bad_off = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){1, 4});
    ck_assert_ptr_null(tensor_embedding_bag(m->params[0], idx, bad_off, TENSOR_BAG_SUM));
    ck_assert_str_eq(tensor_last_error(), "tensor_embedding_bag: offsets[0] is 1 (the first bag must start at 0)");
    struct tensor *past = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){0, 9});
    ck_assert_ptr_null(tensor_embedding_bag(m->params[0], idx, past, TENSOR_BAG_SUM));
    ck_assert_str_eq(tensor_last_error(),
                     "tensor_embedding_bag: offsets[1] = 9 is out of order or past the 8 indices");
    struct tensor *f_idx = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){2});
    ck_assert_ptr_null(tensor_embedding_bag(m->params[0], f_idx, off, TENSOR_BAG_SUM));
    ck_assert_str_eq(tensor_last_error(), "tensor_embedding_bag: indices dtype f32 (expected i64)");
    ck_assert_int_eq(nn_forward(m, 1, in, &n, out), -1);
    ck_assert_str_eq(tensor_last_error(), "nn_embedding_bag: expected 2 inputs (indices, offsets), got 1");
    ck_assert_ptr_null(nn_embedding_bag_new(0, 3, TENSOR_BAG_SUM, &rng));
    ck_assert_str_eq(tensor_last_error(), "nn_embedding_bag_new: sizes must be positive, got 0 x 3");
    struct tensor *all[] = {idx, off, bad_idx, bad_off, past, f_idx};
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
    nn_module_free(m);
}
END_TEST

/* Cross-entropy of uniform logits is log C whatever the targets; bad
 * targets are refused by name. */
START_TEST(test_cross_entropy_values_and_errors)
{
    struct tensor *logits = tensor_new(DTYPE_F32, DEVICE_CPU, 2, (int64_t[]){3, 4});
    struct tensor *t = tensor_from_data(DTYPE_I64, 1, (int64_t[]){3}, (int64_t[]){0, 3, 1});
    struct tensor *loss = tensor_cross_entropy(logits, t);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(loss->ndim, 0);
    ck_assert_float_eq_tol(tensor_f32(loss)[0], logf(4.0f), 1e-6f);
    struct tensor *bad = tensor_from_data(DTYPE_I64, 1, (int64_t[]){3}, (int64_t[]){0, 4, 1});
    ck_assert_ptr_null(tensor_cross_entropy(logits, bad));
    ck_assert_str_eq(tensor_last_error(), "tensor_cross_entropy: target 4 is out of range for 4 classes");
    struct tensor *short_t = tensor_from_data(DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){0, 1});
    ck_assert_ptr_null(tensor_cross_entropy(logits, short_t));
    ck_assert_str_eq(tensor_last_error(), "tensor_cross_entropy: shape mismatch: logits [3,4] and target [2]");
    struct tensor *flat = tensor_new(DTYPE_F32, DEVICE_CPU, 1, (int64_t[]){4});
    ck_assert_ptr_null(tensor_cross_entropy(flat, t));
    ck_assert_str_eq(tensor_last_error(), "tensor_cross_entropy: logits must be [R,C] with R, C >= 1, got [4]");
    struct tensor *all[] = {logits, t, loss, bad, short_t, flat};
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
}
END_TEST

KIT_MAIN("tensor_nn",
         { "modules", 0, .tests = { test_linear_init, test_too_large_is_an_error, test_mlp_matches_ops,
           test_module_to_without_gpu, test_policy_heads, test_mlp_dropout_train_eval, test_embedding_bag_module,
           test_cross_entropy_values_and_errors } },
         { "distributions", 0, .tests = { test_dropout_statistics, test_categorical_frequencies,
           test_gaussian_closed_forms } })
