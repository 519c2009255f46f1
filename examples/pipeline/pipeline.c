/* Model parallelism over RPC (the shape of PyTorch's tutorial "Distributed
 * Pipeline Parallelism Using RPC"): an MLP split in two shards, stage0 on
 * "worker1/cpu" and stage1 on "worker2/cpu" (or cuda:0 with --device cuda),
 * driven by "master". Each batch is cut into micro-batches that are in
 * flight together (rpc_async): stage1 works on micro-batch i while stage0
 * works on i+1. Distributed autograd runs the backward through both shards, and one
 * distributed optimizer (Adam) steps both. A distributed checkpoint saves
 * both shards and the optimizer's state where they live; --resume goes on
 * from it, bit-identical to a run that was never interrupted (CPU).
 *
 *   pipeline [--iters N] [--micro M] [--ckpt DIR [--save-at K]] [--resume DIR]
 *            [--device cpu|cuda] [--check-grads] [--bench]
 *
 * --check-grads compares one batch's gradients with the unsplit model's
 * (the same MLP run in one process); --bench times a batch's forward and
 * backward pipelined (M micro-batches) and unpipelined (one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tributary.h"

enum { IN = 16, HID = 128, OUT = 4, MAX_MICRO = 64, SEED0 = 7, SEED1 = 8 };

struct opts {
    int iters, micro, batch, save_at, hid;
    const char *ckpt, *resume, *device;
    bool check_grads, bench;
};
static struct opts O = { .iters = 30, .micro = 4, .batch = 64, .save_at = -1, .hid = HID, .device = "cpu" };

/* ---- data: deterministic per iteration ------------------------------------------- */

static float uniform(uint64_t *s)   /* xorshift64*, [-1, 1) */
{
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (float)((*s * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

/* x [B,IN] uniform, t [B,OUT] = sin of fixed sums of x: what the MLP learns. */
static void batch_of(int iter, struct tensor **x, struct tensor **t)
{
    int64_t xs[2] = { O.batch, IN }, ts[2] = { O.batch, OUT };
    *x = tensor_new(DTYPE_F32, DEVICE_CPU, 2, xs);
    *t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, ts);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(iter + 1) * 0xbf58476d1ce4e5b9ull;
    float *xd = tensor_f32(*x), *td = tensor_f32(*t);
    for (int b = 0; b < O.batch; b++) {
        for (int i = 0; i < IN; i++) xd[b * IN + i] = uniform(&s);
        for (int o = 0; o < OUT; o++) {
            float z = 0;
            for (int i = o; i < IN; i += OUT) z += xd[b * IN + i];
            td[b * OUT + o] = sinf(z);
        }
    }
}

/* ---- the split model ----------------------------------------------------------------- */

static struct rpc_value mlp_args(int a, int b, int c, int seed)
{
    struct rpc_value v = rpc_list(4), sizes = rpc_list(3);
    sizes.list.items[0] = rpc_int(a);
    sizes.list.items[1] = rpc_int(b);
    sizes.list.items[2] = rpc_int(c);
    v.list.items[0] = sizes;
    v.list.items[1] = rpc_str("tanh");
    v.list.items[2] = rpc_double(0.0);
    v.list.items[3] = rpc_int(seed);
    return v;
}

struct model {
    struct remote_module *stage[2];
    struct dist_optim *opt;
};

static int model_new(struct model *m)
{
    char where[2][64];
    snprintf(where[0], sizeof where[0], "worker1/%s", strcmp(O.device, "cuda") == 0 ? "cuda:0" : "cpu");
    snprintf(where[1], sizeof where[1], "worker2/%s", strcmp(O.device, "cuda") == 0 ? "cuda:0" : "cpu");
    struct rpc_value a0 = mlp_args(IN, O.hid, O.hid, SEED0), a1 = mlp_args(O.hid, O.hid, OUT, SEED1);
    m->stage[0] = remote_module_new_at(where[0], "mlp", &a0);
    m->stage[1] = m->stage[0] ? remote_module_new_at(where[1], "mlp", &a1) : NULL;
    rpc_value_clear(&a0);
    rpc_value_clear(&a1);
    if (!m->stage[1]) return -1;
    struct rref *p[8];
    int n0 = remote_module_parameters(m->stage[0], p, 4);
    int n1 = n0 < 0 ? -1 : remote_module_parameters(m->stage[1], p + n0, 4);
    if (n1 < 0) return -1;
    struct optim_hyper h = optim_defaults(OPTIM_ADAM);
    h.lr = 3e-3;
    m->opt = dist_optim_new(OPTIM_ADAM, &h, n0 + n1, p);
    for (int i = 0; i < n0 + n1; i++) rref_free(p[i]);
    return m->opt ? 0 : -1;
}

static void model_free(struct model *m)
{
    dist_optim_free(m->opt);
    remote_module_free(m->stage[0]);
    remote_module_free(m->stage[1]);
}

/* Forward of x through both shards in `micro` micro-batches, as a pipeline
 * of two stages: at tick k stage0 runs micro-batch k while stage1 runs
 * micro-batch k-1, both requests in flight together (rpc_async). Each stage
 * gets one micro-batch at a time, in order, as a pipeline stage does; that
 * also keeps its replies in order, which is what makes distributed
 * autograd's sums, and so a whole run, bit-reproducible. The outputs,
 * concatenated in order, in *y; inside a distributed-autograd context
 * everything is recorded. 0 or -1 with rpc_last_error(). */
static int pipeline_forward(struct model *m, struct tensor *x, int micro, struct tensor **y)
{
    struct tensor *xs[MAX_MICRO], *hs[MAX_MICRO] = { 0 }, *ys[MAX_MICRO] = { 0 };
    int64_t rows = x->shape[0] / micro, sizes[MAX_MICRO];
    for (int i = 0; i < micro; i++) sizes[i] = i < micro - 1 ? rows : x->shape[0] - rows * (micro - 1);
    if (tensor_split(x, 0, micro, sizes, xs) != 0) return rpc_set_error("split: %s", tensor_last_error());
    int rc = 0, n;
    for (int k = 0; k <= micro && rc == 0; k++) {
        struct rpc_future *f0 = k < micro ? remote_module_forward_async(m->stage[0], 1, &xs[k]) : NULL;
        struct rpc_future *f1 = k > 0 ? remote_module_forward_async(m->stage[1], 1, &hs[k - 1]) : NULL;
        struct tensor *out[NN_MAX_IO];
        if (f0 && remote_module_forward_wait(f0, &n, out) == 0) hs[k] = out[0];
        else if (f0) rc = -1;
        if (f1 && remote_module_forward_wait(f1, &n, out) == 0) ys[k - 1] = out[0];
        else if (f1) rc = -1;
        rpc_future_free(f0);
        rpc_future_free(f1);
    }
    *y = rc == 0 ? tensor_cat(micro, ys, 0) : NULL;
    for (int i = 0; i < micro; i++) {
        tensor_free(xs[i]);
        tensor_free(hs[i]);
        tensor_free(ys[i]);
    }
    return rc;
}

/* One training step on batch `iter`: forward, loss, distributed backward,
 * optimizer step. Returns the loss, or NAN with rpc_last_error(). */
static float train_step(struct model *m, int iter, int micro, bool step)
{
    struct tensor *x, *t, *y = NULL, *loss = NULL;
    batch_of(iter, &x, &t);
    int64_t ctx = dist_autograd_context_new();
    float v = NAN;
    if (pipeline_forward(m, x, micro, &y) == 0 && (loss = tensor_mse(y, t)) &&
        dist_autograd_backward(ctx, 1, &loss, false) == 0 && (!step || dist_optim_step(m->opt, ctx) == 0))
        v = tensor_f32(loss)[0];
    else if (!loss && y)
        rpc_set_error("loss: %s", tensor_last_error());
    dist_autograd_release(ctx);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(x);
    tensor_free(t);
    return v;
}

/* FNV-1a 64 of every parameter of both shards, in order. */
static int params_hash(struct model *m, uint64_t *h)
{
    *h = 0xcbf29ce484222325ull;
    for (int s = 0; s < 2; s++) {
        struct rref *p[4];
        int n = remote_module_parameters(m->stage[s], p, 4);
        for (int i = 0; i < n; i++) {
            struct rpc_value v = rpc_nil();
            if (rref_to_here(p[i], &v, 0) != 0) return -1;
            const unsigned char *d = tensor_data(v.tensor);
            for (size_t k = 0; k < tensor_nbytes(v.tensor); k++) *h = (*h ^ d[k]) * 0x100000001b3ull;
            rpc_value_clear(&v);
            rref_free(p[i]);
        }
        if (n < 0) return -1;
    }
    return 0;
}

static struct dist_ckpt_module *ckpt_mods(struct model *m, struct dist_ckpt_module mods[2])
{
    mods[0] = (struct dist_ckpt_module){ "stage0", m->stage[0] };
    mods[1] = (struct dist_ckpt_module){ "stage1", m->stage[1] };
    return mods;
}

static int train(struct model *m)
{
    struct dist_ckpt_module mods[2];
    int start = 0;
    if (O.resume) {
        int64_t step;
        if (dist_ckpt_load(O.resume, 2, ckpt_mods(m, mods), m->opt, &step) != 0) return -1;
        start = (int)step + 1;
        printf("resumed from %s after iteration %d\n", O.resume, start - 1);
    }
    for (int it = start; it < O.iters; it++) {
        float loss = train_step(m, it, O.micro, true);
        if (isnan(loss)) return -1;
        if (it % 5 == 0 || it == O.iters - 1) printf("iter %3d loss %.6f\n", it, loss);
        if (O.ckpt && (it == O.save_at || (O.save_at < 0 && it == O.iters - 1))) {
            if (dist_ckpt_save(O.ckpt, 2, ckpt_mods(m, mods), m->opt, it) != 0) return -1;
            printf("checkpoint after iteration %d in %s\n", it, O.ckpt);
        }
    }
    uint64_t h;
    if (params_hash(m, &h) != 0) return -1;
    printf("final parameters fnv1a %016llx\n", (unsigned long long)h);
    return 0;
}

/* ---- --check-grads: the unsplit model's gradients ------------------------------- */

/* pipe.grads(ctx, module RRef) -> the module's parameter gradients of ctx
 * on its owner, in parameter order, on the CPU. */
static int fn_grads(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    if (args->list.len != 2 || args->list.items[0].kind != RPC_INT || args->list.items[1].kind != RPC_RREF)
        return rpc_request_fail(req, "expected (ctx, module)");
    struct nn_module *mod = remote_module_local(args->list.items[1].rref);
    if (!mod) return rpc_request_fail(req, "%s", rpc_last_error());
    *res = rpc_list((size_t)mod->n_params);
    for (int i = 0; i < mod->n_params; i++) {
        struct tensor *g = dist_autograd_get_gradient(args->list.items[0].i, mod->params[i]);
        struct tensor *c = g ? tensor_clone_to(g, DEVICE_CPU) : NULL;
        if (c) res->list.items[i] = rpc_tensor(c);
        tensor_free(c);
        tensor_free(g);
    }
    return 0;
}

static int check_grads(struct model *m)
{
    /* The unsplit model: the same two MLPs, built here from the same seeds. */
    uint64_t r0 = SEED0, r1 = SEED1;
    int s0[3] = { IN, O.hid, O.hid }, s1[3] = { O.hid, O.hid, OUT };
    struct nn_module *l0 = nn_mlp_new(3, s0, NN_TANH, 0, &r0), *l1 = nn_mlp_new(3, s1, NN_TANH, 0, &r1);
    struct tensor *x, *t;
    batch_of(0, &x, &t);
    struct tensor *h = nn_forward1(l0, x), *y = nn_forward1(l1, h), *loss = tensor_mse(y, t);
    int rc = tensor_backward(loss, NULL, false);

    /* The split model, pipelined, in a context that is kept to read its gradients. */
    int64_t ctx = dist_autograd_context_new();
    struct tensor *yp = NULL, *lp = NULL;
    if (rc == 0) rc = pipeline_forward(m, x, O.micro, &yp);
    if (rc == 0 && !(lp = tensor_mse(yp, t))) rc = rpc_set_error("%s", tensor_last_error());
    if (rc == 0) rc = dist_autograd_backward(ctx, 1, &lp, false);
    double worst = 0;
    int count = 0;
    struct nn_module *local[2] = { l0, l1 };
    for (int s = 0; s < 2 && rc == 0; s++) {
        struct rpc_value a = rpc_list(2), g = rpc_nil();
        a.list.items[0] = rpc_int(ctx);
        a.list.items[1] = rpc_rref(remote_module_rref(m->stage[s]));
        dist_autograd_set_current(0);   /* a query, not part of the context */
        rc = rpc_sync(s == 0 ? "worker1" : "worker2", "pipe.grads", &a, &g, 0);
        dist_autograd_set_current(ctx);
        for (int i = 0; rc == 0 && i < local[s]->n_params; i++) {
            const struct tensor *want = local[s]->params[i]->grad;
            const struct rpc_value *got = &g.list.items[i];
            if (got->kind != RPC_TENSOR || !want || got->tensor->numel != want->numel) {
                rc = rpc_set_error("stage%d parameter %d: no gradient", s, i);
                break;
            }
            /* relative to the tensor's scale: max |a - b| over max |b| */
            double diff = 0, scale = 0;
            for (int64_t k = 0; k < want->numel; k++) {
                double a_ = tensor_f32(got->tensor)[k], b_ = tensor_f32(want)[k];
                diff = fmax(diff, fabs(a_ - b_));
                scale = fmax(scale, fabs(b_));
            }
            worst = fmax(worst, scale > 0 ? diff / scale : diff);
            count++;
        }
        rpc_value_clear(&a);
        rpc_value_clear(&g);
    }
    if (rc == 0)
        printf("gradients vs the unsplit model: max rel diff %.3g over %d tensors (loss %.7f vs %.7f)\n", worst,
               count, tensor_f32(lp)[0], tensor_f32(loss)[0]);
    dist_autograd_release(ctx);
    tensor_free(lp);
    tensor_free(yp);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(h);
    tensor_free(x);
    tensor_free(t);
    nn_module_free(l0);
    nn_module_free(l1);
    return rc;
}

/* ---- --bench ----------------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int bench(struct model *m)
{
    enum { RUNS = 5 };
    double best[2] = { 1e30, 1e30 };
    for (int r = 0; r < RUNS; r++)
        for (int k = 0; k < 2; k++) {   /* forward + backward, no step: the same batch every time */
            double t0 = now_ms();
            if (isnan(train_step(m, 0, k == 0 ? 1 : O.micro, false))) return -1;
            double dt = now_ms() - t0;
            if (dt < best[k]) best[k] = dt;
        }
    printf("forward+backward of a batch of %d (hidden %d): unpipelined %.2f ms, pipelined (%d micro-batches) "
           "%.2f ms, speed-up %.2fx (best of %d)\n", O.batch, O.hid, best[0], O.micro, best[1], best[0] / best[1], RUNS);
    return 0;
}

/* ---- processes --------------------------------------------------------------------------- */

static int run_master(void)
{
    struct model m = { 0 };
    int rc = model_new(&m);
    if (rc == 0) rc = O.check_grads ? check_grads(&m) : O.bench ? bench(&m) : train(&m);
    if (rc != 0) fprintf(stderr, "pipeline: %s\n", rpc_last_error());
    model_free(&m);
    return rc == 0 ? 0 : 1;
}

static int worker(int rank, int world_size, const char *master, void *arg)
{
    (void)arg;
    dist_autograd_init();
    remote_module_init();
    dist_optim_init();
    dist_ckpt_init();
    /* The owners write and read their shards only in directories they
     * allow (any member may call them): the ones on the command line. */
    if ((O.ckpt && dist_ckpt_add_root(O.ckpt) != 0) || (O.resume && dist_ckpt_add_root(O.resume) != 0)) {
        fprintf(stderr, "pipeline: %s\n", rpc_last_error());
        return 1;
    }
    rpc_register("pipe.grads", fn_grads, NULL);
    const char *names[3] = { "master", "worker1", "worker2" };
    struct rpc_opts o = { .name = names[rank], .rank = rank, .world_size = world_size, .master = master };
    if (rpc_init(&o) != 0) {
        fprintf(stderr, "%s: rpc_init: %s\n", names[rank], rpc_last_error());
        return 1;
    }
    int rc = rank == 0 ? run_master() : 0;
    rpc_shutdown(true);
    return rc;
}

static int usage(const char *bad)
{
    fprintf(stderr, "pipeline: bad argument '%s'\nusage: pipeline [--iters N] [--micro M] [--batch B] [--hidden H] "
                    "[--ckpt DIR [--save-at K]] [--resume DIR] [--device cpu|cuda] [--check-grads] [--bench]\n", bad);
    return 2;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--check-grads") == 0) O.check_grads = true;
        else if (strcmp(a, "--bench") == 0) O.bench = true;
        else if (!v) return usage(a);
        else if (strcmp(a, "--iters") == 0) O.iters = atoi(v), i++;
        else if (strcmp(a, "--micro") == 0) O.micro = atoi(v), i++;
        else if (strcmp(a, "--batch") == 0) O.batch = atoi(v), i++;
        else if (strcmp(a, "--hidden") == 0) O.hid = atoi(v), i++;
        else if (strcmp(a, "--save-at") == 0) O.save_at = atoi(v), i++;
        else if (strcmp(a, "--ckpt") == 0) O.ckpt = v, i++;
        else if (strcmp(a, "--resume") == 0) O.resume = v, i++;
        else if (strcmp(a, "--device") == 0) O.device = v, i++;
        else return usage(a);
    }
    if (O.micro < 1 || O.micro > MAX_MICRO || O.batch < O.micro || O.hid < 1 || O.iters < 0 ||
        (strcmp(O.device, "cpu") != 0 && strcmp(O.device, "cuda") != 0))
        return usage("(a value out of range)");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rpc_spawn(3, worker, NULL, 600) != 0) {
        fprintf(stderr, "pipeline: %s\n", rpc_last_error());
        return 1;
    }
    return 0;
}
