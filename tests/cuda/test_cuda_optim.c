/* The optimizers on CUDA parameters against the same steps on the CPU
 * (their update is composed of backend kernels, so one code path serves
 * both), gradient clipping on CUDA, state saved on one device and restored
 * on the other, and copy-on-write of CUDA parameters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "optim/optim.h"
#include "tensor/tensor.h"
#include "tests/cuda/cuda_test_util.h"

#define NPAR 3
static const int64_t par_shapes[NPAR][2] = {{7, 1}, {33, 5}, {1, 1}};

static struct tensor *rand_param(int i)
{
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, par_shapes[i]);
    for (int64_t j = 0; j < t->numel; j++) tensor_f32(t)[j] = rand_float(-1, 1);
    return t;
}

static struct tensor *cuda_rand_param(int i)
{
    struct tensor *c = rand_param(i), *g = tensor_clone_to(c, DEVICE_CUDA);
    tensor_free(c);
    return g;
}

static void compare_params(const char *what, int step, struct tensor **pc, struct tensor **pg)
{
    for (int i = 0; i < NPAR; i++) {
        float *h = trib_xmalloc(tensor_nbytes(pg[i]));
        tensor_copy_to_host(pg[i], h);
        char msg[128];
        snprintf(msg, sizeof msg, "%s step %d param %d", what, step, i);
        assert_close(msg, h, tensor_f32(pc[i]), (size_t)pc[i]->numel, 1e-6, 1e-5);
        free(h);
    }
}

/* Same random gradients on both devices; grads[1] is NULL on step 3. */
static void make_grads(int step, struct tensor **gc, struct tensor **gg)
{
    for (int i = 0; i < NPAR; i++) {
        gc[i] = gg[i] = NULL;
        if (step == 3 && i == 1) continue;
        gc[i] = rand_param(i);
        gg[i] = tensor_clone_to(gc[i], DEVICE_CUDA);
    }
}

static void free_grads(struct tensor **gc, struct tensor **gg)
{
    for (int i = 0; i < NPAR; i++) {
        tensor_free(gc[i]);
        tensor_free(gg[i]);
    }
}

static void check_kind(const char *name, enum optim_kind kind, const struct optim_hyper *h)
{
    struct tensor *pc[NPAR], *pg[NPAR];
    for (int i = 0; i < NPAR; i++) {
        pc[i] = rand_param(i);
        pg[i] = tensor_clone_to(pc[i], DEVICE_CUDA);
    }
    struct optim *oc = optim_new(kind, h, NPAR, pc), *og = optim_new(kind, h, NPAR, pg);
    ck_assert_msg(oc && og, "%s", optim_last_error());
    for (int step = 0; step < 15; step++) {
        struct tensor *gc[NPAR], *gg[NPAR];
        make_grads(step, gc, gg);
        double tc, tg;
        ck_assert_int_eq(optim_clip_grad_norm(NPAR, gc, 2.0, &tc), 0);
        ck_assert_int_eq(optim_clip_grad_norm(NPAR, gg, 2.0, &tg), 0);
        ck_assert_msg(fabs(tc - tg) <= 1e-5 * tc, "%s step %d: total norm cpu %g, cuda %g", name, step, tc, tg);
        optim_set_lr(oc, optim_lr_linear(h->lr, 1.0, 0.2, 10, step));
        optim_set_lr(og, optim_lr_linear(h->lr, 1.0, 0.2, 10, step));
        ck_assert_int_eq(optim_step(oc, gc), 0);
        ck_assert_int_eq(optim_step(og, gg), 0);
        compare_params(name, step, pc, pg);
        free_grads(gc, gg);
    }
    /* state saved on the GPU continues on the CPU (and the other way) */
    uint8_t *sg, *sc;
    size_t lg, lc;
    ck_assert_int_eq(optim_save(og, &sg, &lg), 0);
    ck_assert_int_eq(optim_save(oc, &sc, &lc), 0);
    ck_assert_uint_eq(lg, lc);
    ck_assert_msg(optim_load(oc, sg, lg) == 0, "%s", optim_last_error());
    ck_assert_msg(optim_load(og, sc, lc) == 0, "%s", optim_last_error());
    for (int step = 15; step < 20; step++) {
        struct tensor *gc[NPAR], *gg[NPAR];
        make_grads(step, gc, gg);
        ck_assert_int_eq(optim_step(oc, gc), 0);
        ck_assert_int_eq(optim_step(og, gg), 0);
        compare_params(name, step, pc, pg);
        free_grads(gc, gg);
    }
    free(sg);
    free(sc);
    optim_free(oc);
    optim_free(og);
    for (int i = 0; i < NPAR; i++) {
        tensor_free(pc[i]);
        tensor_free(pg[i]);
    }
}

START_TEST(test_optim_sgd)
{
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = 0.05;
    h.momentum = 0.9;
    h.nesterov = true;
    h.weight_decay = 0.01;
    check_kind("sgd nesterov", OPTIM_SGD, &h);
    h.nesterov = false;
    h.dampening = 0.3;
    check_kind("sgd dampening", OPTIM_SGD, &h);
}
END_TEST

START_TEST(test_optim_adam)
{
    struct optim_hyper h = optim_defaults(OPTIM_ADAM);
    h.lr = 0.01;
    h.amsgrad = true;
    h.weight_decay = 0.1;
    check_kind("adam amsgrad", OPTIM_ADAM, &h);
    h = optim_defaults(OPTIM_ADAMW);
    check_kind("adamw", OPTIM_ADAMW, &h);
}
END_TEST

START_TEST(test_optim_rmsprop)
{
    struct optim_hyper h = optim_defaults(OPTIM_RMSPROP);
    h.momentum = 0.5;
    h.centered = true;
    h.weight_decay = 0.01;
    check_kind("rmsprop centered momentum", OPTIM_RMSPROP, &h);
}
END_TEST

START_TEST(test_optim_cuda_cow)
{
    struct tensor *p = cuda_rand_param(1);
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = 0.5;
    struct optim *o = optim_new(OPTIM_SGD, &h, 1, &p);
    struct tensor *snap = tensor_snapshot(p);
    float *before = trib_xmalloc(tensor_nbytes(p)), *after = trib_xmalloc(tensor_nbytes(p));
    tensor_copy_to_host(p, before);
    struct tensor *g = cuda_rand_param(1);
    ck_assert_int_eq(optim_step(o, &g), 0);
    tensor_copy_to_host(snap, after);
    ck_assert_mem_eq(after, before, tensor_nbytes(p));
    tensor_copy_to_host(p, after);
    ck_assert_int_ne(memcmp(after, before, tensor_nbytes(p)), 0);
    /* params on two devices are refused */
    struct tensor *c = rand_param(0), *mixed[2] = {p, c};
    ck_assert_ptr_null(optim_new(OPTIM_SGD, &h, 2, mixed));
    ck_assert_str_eq(optim_last_error(), "optim_new: params[1] is on cpu but params[0] is on cuda");
    struct tensor *gc = rand_param(1);
    ck_assert_int_eq(optim_step(o, &gc), -1);
    ck_assert_str_eq(optim_last_error(), "optim_step: grads[0] is on cpu but the params are on cuda");
    free(before);
    free(after);
    tensor_free(snap);
    tensor_free(g);
    tensor_free(gc);
    tensor_free(c);
    optim_free(o);
    tensor_free(p);
}
END_TEST

void add_optim_tests(Suite *s)
{
    TCase *tc = tcase_create("optim");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_optim_sgd);
    tcase_add_test(tc, test_optim_adam);
    tcase_add_test(tc, test_optim_rmsprop);
    tcase_add_test(tc, test_optim_cuda_cow);
    suite_add_tcase(s, tc);
}
