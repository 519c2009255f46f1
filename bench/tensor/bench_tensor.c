/* Tensor micro-benchmarks (scripts/bench tensor): an MLP 4->64->64->2 (ReLU)
 * forward+backward through nn/ops/autograd against the bare sgemm calls of
 * the same shapes, per batch size and device. One JSON line per figure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "tensor/autograd.h"
#include "tensor/backend.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

static double budget_s = 2.0;   /* per figure: both measurements together */

/* Runs each step repeatedly, alternating between the two in 10 slices so
 * that both see the same machine load (the box is shared), for budget_s in
 * all (after a short warm-up). Writes steps per second of each. */
static void rates(void (*step[2])(void *), void *arg[2], const struct tensor_backend *be, double out[2])
{
    long n[2] = {0, 0};
    double spent[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 3; i++) step[k](arg[k]);
        be->synchronize();
    }
    for (int slice = 0; slice < 20; slice++) {
        int k = slice & 1;
        double t0 = trib_now_s(), t;
        do {
            step[k](arg[k]);
            be->synchronize();
            n[k]++;
            t = trib_now_s();
        } while (t - t0 < budget_s / 20);
        spent[k] += t - t0;
    }
    for (int k = 0; k < 2; k++) out[k] = (double)n[k] / spent[k];
}

/* ---- MLP through the library ----------------------------------------------------- */

struct mlp_run {
    struct nn_module *m;
    struct tensor *x;
};

static void mlp_step(void *arg)
{
    struct mlp_run *r = arg;
    for (int i = 0; i < r->m->n_params; i++) tensor_zero_grad(r->m->params[i]);
    struct tensor *y = nn_forward1(r->m, r->x);
    struct tensor *loss = tensor_sum(y);
    if (!y || !loss || tensor_backward(loss, NULL, false) < 0) {
        fprintf(stderr, "bench_tensor: %s\n", tensor_last_error());
        exit(1);
    }
    tensor_free(loss);
    tensor_free(y);
}

/* ---- the bare gemms of the same shapes --------------------------------------------- */

enum { IN = 4, H = 64, OUT = 2 };

struct gemm_run {
    const struct tensor_backend *be;
    int64_t B;
    float *x, *w1, *w2, *w3, *h1, *h2, *y, *g2, *g1, *gw1, *gw2, *gw3;
};

static void gemm_step(void *arg)
{
    struct gemm_run *r = arg;
    const struct tensor_backend *be = r->be;
    int64_t B = r->B;
    /* forward: y = x w^T per layer */
    be->sgemm(0, 1, B, H, IN, 1.0f, r->x, IN, r->w1, IN, 0.0f, r->h1, H);
    be->sgemm(0, 1, B, H, H, 1.0f, r->h1, H, r->w2, H, 0.0f, r->h2, H);
    be->sgemm(0, 1, B, OUT, H, 1.0f, r->h2, H, r->w3, H, 0.0f, r->y, OUT);
    /* backward: gw = g^T x for every layer, gx = g w for the hidden ones */
    be->sgemm(1, 0, OUT, H, B, 1.0f, r->y, OUT, r->h2, H, 0.0f, r->gw3, H);
    be->sgemm(0, 0, B, H, OUT, 1.0f, r->y, OUT, r->w3, H, 0.0f, r->g2, H);
    be->sgemm(1, 0, H, H, B, 1.0f, r->g2, H, r->h1, H, 0.0f, r->gw2, H);
    be->sgemm(0, 0, B, H, H, 1.0f, r->g2, H, r->w2, H, 0.0f, r->g1, H);
    be->sgemm(1, 0, H, IN, B, 1.0f, r->g1, H, r->x, IN, 0.0f, r->gw1, IN);
}

static float *dev_buf(const struct tensor_backend *be, size_t n, uint64_t seed)
{
    float *p = be->alloc(n * sizeof(float));
    be->rand_uniform(p, n, seed);
    return p;
}

static void bench_mlp(enum device dev, int64_t B)
{
    const struct tensor_backend *be = tensor_backend_for(dev);
    uint64_t rng = 1234;
    struct mlp_run mr = {nn_mlp_new(4, (int[]){IN, H, H, OUT}, NN_RELU, 0.0f, &rng), NULL};
    if (nn_module_to(mr.m, dev) < 0) {
        fprintf(stderr, "bench_tensor: %s\n", tensor_last_error());
        exit(1);
    }
    mr.x = tensor_new(DTYPE_F32, dev, 2, (int64_t[]){B, IN});
    be->rand_uniform(tensor_f32(mr.x), (size_t)(B * IN), 99);

    struct gemm_run g = {.be = be, .B = B};
    float **bufs[] = {&g.x, &g.w1, &g.w2, &g.w3, &g.h1, &g.h2, &g.y, &g.g2, &g.g1, &g.gw1, &g.gw2, &g.gw3};
    size_t sizes[] = {(size_t)B * IN, H * IN, H * H, OUT * H, B * H, B * H, B * OUT, B * H, B * H, H * IN, H * H, OUT * H};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) *bufs[i] = dev_buf(be, sizes[i], i + 1);
    void (*steps[2])(void *) = {mlp_step, gemm_step};
    void *args[2] = {&mr, &g};
    double r[2];
    rates(steps, args, be, r);
    double x = r[0] * (double)B, y = r[1] * (double)B;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) be->free(*bufs[i]);

    printf("{\"bench\":\"mlp\",\"device\":\"%s\",\"batch\":%lld,\"samples_per_s\":%.1f,\"sgemm_samples_per_s\":%.1f,"
           "\"ratio\":%.3f}\n",
           device_name(dev), (long long)B, x, y, x / y);
    fflush(stdout);
    tensor_free(mr.x);
    nn_module_free(mr.m);
}

int main(int argc, char **argv)
{
    int64_t only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
            budget_s = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            only = atoll(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_tensor [--budget SECONDS_PER_FIGURE] [--batch B]\n");
            return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
        }
    }
    int64_t batches[] = {1, 256, 4096};
    int nb = 3;
    if (only > 0) {
        batches[0] = only;
        nb = 1;
    }
    for (int i = 0; i < nb; i++) bench_mlp(DEVICE_CPU, batches[i]);
    if (tensor_cuda_available())
        for (int i = 0; i < nb; i++) bench_mlp(DEVICE_CUDA, batches[i]);
    return 0;
}
