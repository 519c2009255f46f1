/* bench_dist: the cost of forward+backward through one remote hop (an MLP
 * as a remote_module on a second process, loss on the first, distributed
 * backward and context release) against the same MLP run locally
 * (tensor_backward). One JSON line per batch size:
 *   {"bench":"dist_fwd_bwd","batch":B,"remote_us":X,"local_us":Y,"ratio":X/Y} */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/proc.h"
#include "optim/dist_optim.h"
#include "rpc/dist_autograd.h"
#include "rpc/remote_module.h"
#include "rpc/rpc.h"
#include "tensor/autograd.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

static const int SIZES[4] = { 32, 128, 128, 8 };
enum { SEED = 7 };
#define FIGURE_S 1.0

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_dist: %s: %s\n", what, msg);
    exit(1);
}

static struct rpc_opts opts(int rank, const char *master)
{
    struct rpc_opts o = { .name = rank ? "w1" : "w0", .rank = rank, .world_size = 2, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = 10000 };
    return o;
}

/* w1: serves the remote MLP until w0 shuts down. */
static int serve(int idx, const char *master, void *arg)
{
    struct rpc_opts o = opts(1, master);
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "bench_dist: w1: %s\n", rpc_last_error());
        return 10;
    }
    rpc_shutdown(true);
    return 0;
}

static struct tensor *input(int64_t batch)
{
    int64_t shape[2] = { batch, SIZES[0] };
    struct tensor *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    uint32_t s = 1;
    for (int64_t i = 0; i < x->numel; i++) {
        s = s * 1664525u + 1013904223u;
        tensor_f32(x)[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return x;
}

/* loss = mean(y^2) */
static struct tensor *loss_of(struct tensor *y)
{
    struct tensor *sq = tensor_square(y), *l = tensor_mean(sq);
    tensor_free(sq);
    return l;
}

static void remote_iter(struct remote_module *rm, struct tensor *x)
{
    int64_t ctx = dist_autograd_context_new();
    struct tensor *out[NN_MAX_IO];
    int n = 0;
    if (remote_module_forward(rm, 1, &x, &n, out) != 0) die("forward", rpc_last_error());
    struct tensor *l = loss_of(out[0]);
    if (dist_autograd_backward(ctx, 1, &l, false) != 0) die("backward", rpc_last_error());
    if (dist_autograd_release(ctx) != 0) die("release", rpc_last_error());
    tensor_free(l);
    for (int i = 0; i < n; i++) tensor_free(out[i]);
}

static void local_iter(struct nn_module *m, struct tensor *x)
{
    struct tensor *y = nn_forward1(m, x), *l = loss_of(y);
    if (tensor_backward(l, NULL, false) != 0) die("tensor_backward", tensor_last_error());
    for (int i = 0; i < m->n_params; i++) tensor_zero_grad(m->params[i]);
    tensor_free(l);
    tensor_free(y);
}

/* Mean microseconds per call of fn over about FIGURE_S seconds after warm-up. */
#define TIME_US(call)                                                   \
    ({                                                                  \
        for (int w_ = 0; w_ < 3; w_++) call;                            \
        long it_ = 0;                                                   \
        double t0_ = trib_now_s(), el_ = 0;                                  \
        do {                                                            \
            call;                                                       \
            it_++;                                                      \
            el_ = trib_now_s() - t0_;                                        \
        } while (el_ < FIGURE_S || it_ < 5);                            \
        el_ * 1e6 / (double)it_;                                        \
    })

int main(int argc, char **argv)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: bench_dist\n  forward+backward through one remote hop vs locally, batch 1 and 4096;\n"
               "  one JSON line per batch size\n");
        return 0;
    }
    dist_autograd_init();
    remote_module_init();
    dist_optim_init();
    struct proc_group w1;
    proc_group_init(&w1);
    if (proc_fork(&w1, serve, NULL, 0) < 0) die("fork", "failed");
    struct rpc_opts o = opts(0, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &w1;
    if (rpc_init(&o) < 0) {
        proc_group_deinit(&w1);
        die("rpc_init", rpc_last_error());
    }

    struct rpc_value a = rpc_list(4);
    a.list.items[0] = rpc_list(4);
    for (int i = 0; i < 4; i++) a.list.items[0].list.items[i] = rpc_int(SIZES[i]);
    a.list.items[1] = rpc_str("tanh");
    a.list.items[2] = rpc_double(0.0);
    a.list.items[3] = rpc_int(SEED);
    struct remote_module *rm = remote_module_new("w1", "mlp", &a, DEVICE_CPU);
    rpc_value_clear(&a);
    if (!rm) die("remote_module_new", rpc_last_error());
    uint64_t rng = SEED;
    struct nn_module *local = nn_mlp_new(4, SIZES, NN_TANH, 0.0f, &rng);

    static const int64_t batches[2] = { 1, 4096 };
    for (int b = 0; b < 2; b++) {
        struct tensor *x = input(batches[b]);
        double remote_us = TIME_US(remote_iter(rm, x));
        double local_us = TIME_US(local_iter(local, x));
        printf("{\"bench\":\"dist_fwd_bwd\",\"batch\":%lld,\"mlp\":\"%d-%d-%d-%d\",\"remote_us\":%.1f,"
               "\"local_us\":%.1f,\"ratio\":%.2f}\n",
               (long long)batches[b], SIZES[0], SIZES[1], SIZES[2], SIZES[3], remote_us, local_us,
               remote_us / local_us);
        fflush(stdout);
        tensor_free(x);
    }
    nn_module_free(local);
    remote_module_free(rm);
    rpc_shutdown(true);
    return proc_wait(&w1, 0, -1) == 0 ? 0 : 1;
}
