/* Combining DDP with the RPC framework (the shape of PyTorch's tutorial
 * "Combining Distributed DataParallel with Distributed RPC Framework"):
 * four processes on loopback. "ps" holds an EmbeddingBag(100, 16, sum)
 * behind a RemoteModule; "trainer0" and "trainer1" each hold a Linear
 * 16 -> 8 wrapped in DDP over a two-rank Gloo process group of their own
 * (inside the world of four); "master" builds the remote module, starts
 * both trainers with its RRef, and checks what they return. Each trainer
 * trains for 100 iterations: the embedding bags come from the PS, the
 * Linear runs locally, a cross-entropy loss, a distributed-autograd
 * backward (the Linear's gradients averaged across the trainers by DDP,
 * the table's sent back to the PS) and one DistributedOptimizer (SGD) over
 * the RRefs of both the remote table and the local Linear.
 * Run: ./ddp_rpc [seed] (rpc_spawn: four processes on this machine). Exit 0 when the
 * loss fell on both trainers, the table on the PS changed, and the two
 * trainers' Linear weights ended bit-identical. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optim/dist_optim.h"
#include "pg/ddp.h"
#include "pg/process_group.h"
#include "rpc/dist_autograd.h"
#include "rpc/remote_module.h"
#include "rpc/rpc.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

enum { NUM_EMBEDDINGS = 100, EMBEDDING_DIM = 16, CLASSES = 8, ITERS = 100, BATCHES = 4, BAGS = 8 };
#define LR 0.05

static const char *const NAMES[] = {"master", "ps", "trainer0", "trainer1"};
static uint64_t seed = 1;

/* ---- the parameter server's module ------------------------------------------ */

/* embedding_bag(num, dim, seed): the remote module's constructor on the PS */
static struct nn_module *ctor_embedding_bag(struct rpc_request *req, const struct rpc_value *args)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || args->list.items[0].kind != RPC_INT ||
        args->list.items[1].kind != RPC_INT || args->list.items[2].kind != RPC_INT) {
        rpc_request_fail(req, "embedding_bag: expected (num, dim, seed)");
        return NULL;
    }
    uint64_t rng = (uint64_t)args->list.items[2].i;
    struct nn_module *m = nn_embedding_bag_new((int)args->list.items[0].i, (int)args->list.items[1].i,
                                               TENSOR_BAG_SUM, &rng);
    if (!m) rpc_request_fail(req, "embedding_bag: %s", tensor_last_error());
    return m;
}

/* ---- trainers ------------------------------------------------------------------ */

struct batch { struct tensor *indices, *offsets, *target; };

static uint64_t next_random(uint64_t *s)   /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Trainer r's fixed data: BATCHES batches of BAGS bags of 1..6 indices. */
static void make_batches(int r, struct batch *b)
{
    uint64_t rng = seed * 1000 + (uint64_t)r;
    for (int k = 0; k < BATCHES; k++) {
        int64_t idx[BAGS * 6], off[BAGS], tgt[BAGS], n = 0;
        for (int i = 0; i < BAGS; i++) {
            off[i] = n;
            int len = 1 + (int)(next_random(&rng) % 6);
            for (int j = 0; j < len; j++) idx[n++] = (int64_t)(next_random(&rng) % NUM_EMBEDDINGS);
            tgt[i] = (int64_t)(next_random(&rng) % CLASSES);
        }
        b[k].indices = tensor_from_data(DTYPE_I64, 1, &n, idx);
        b[k].offsets = tensor_from_data(DTYPE_I64, 1, (int64_t[]){BAGS}, off);
        b[k].target = tensor_from_data(DTYPE_I64, 1, (int64_t[]){BAGS}, tgt);
    }
}

/* One iteration in its own distributed-autograd context; the loss in *out. */
static int train_step(struct remote_module *emb, struct ddp *fc, struct dist_optim *opt, const struct batch *b,
                      float *out)
{
    int64_t ctx = dist_autograd_context_new();
    struct tensor *in[2] = {b->indices, b->offsets}, *emb_out[NN_MAX_IO], *logits[NN_MAX_IO];
    int n = 0, rc = remote_module_forward(emb, 2, in, &n, emb_out);
    if (rc == 0) {
        rc = ddp_forward(fc, 1, emb_out, &n, logits);
        tensor_free(emb_out[0]);
    }
    if (rc == 0) {
        struct tensor *loss = tensor_cross_entropy(logits[0], b->target);
        tensor_free(logits[0]);
        rc = loss ? 0 : -1;
        if (loss) *out = tensor_f32(loss)[0];
        if (rc == 0) rc = dist_autograd_backward(ctx, 1, &loss, false);
        if (rc == 0) rc = dist_optim_step(opt, ctx);
        tensor_free(loss);
    }
    dist_autograd_release(ctx);
    return rc;
}

/* ddp_rpc.run_trainer(emb RRef) on trainer r -> [losses f32 [ITERS], fc weight, fc bias] */
static int run_trainer(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->kind != RPC_LIST || args->list.len != 1 || args->list.items[0].kind != RPC_RREF)
        return rpc_request_fail(req, "expected (embedding RRef)");
    int r = strcmp(rpc_self()->name, "trainer0") == 0 ? 0 : 1;
    struct process_group *g = pg_new("trainers", 2, NAMES + 2, 0);
    if (!g) return rpc_request_fail(req, "%s", pg_last_error());
    uint64_t rng = seed * 7 + (uint64_t)r;   /* different on each trainer: DDP broadcasts trainer0's */
    struct nn_module *lin = nn_linear_new(EMBEDDING_DIM, CLASSES, true, &rng);
    struct ddp *fc = ddp_new(lin, g, 0);
    struct remote_module *emb = remote_module_from_rref(args->list.items[0].rref);
    struct rref *params[4];
    int np = fc ? remote_module_parameters(emb, params, 2) : -1;
    int rc = np < 0 ? rpc_request_fail(req, "%s", fc ? rpc_last_error() : pg_last_error()) : 0;
    struct dist_optim *opt = NULL;
    if (rc == 0) {
        for (int i = 0; i < lin->n_params; i++) {
            struct rpc_value v = rpc_tensor(lin->params[i]);
            params[np++] = rref_new_local_value(&v);
        }
        struct optim_hyper h = optim_defaults(OPTIM_SGD);
        h.lr = LR;
        opt = dist_optim_new(OPTIM_SGD, &h, np, params);
        if (!opt) rc = rpc_request_fail(req, "%s", rpc_last_error());
    }
    struct batch b[BATCHES];
    make_batches(r, b);
    int64_t iters = ITERS;
    struct tensor *losses = tensor_new(DTYPE_F32, DEVICE_CPU, 1, &iters);
    for (int it = 0; it < ITERS && rc == 0; it++)
        if (train_step(emb, fc, opt, &b[it % BATCHES], &tensor_f32(losses)[it]) != 0)
            rc = rpc_request_fail(req, "iteration %d: %s", it, rpc_last_error());
    if (rc == 0 && pg_barrier(g) != 0) rc = rpc_request_fail(req, "%s", pg_last_error());
    if (rc == 0) {
        *res = rpc_list(3);
        res->list.items[0] = rpc_tensor(losses);
        res->list.items[1] = rpc_tensor(lin->params[0]);
        res->list.items[2] = rpc_tensor(lin->params[1]);
    }
    tensor_free(losses);
    for (int k = 0; k < BATCHES; k++) {
        tensor_free(b[k].indices);
        tensor_free(b[k].offsets);
        tensor_free(b[k].target);
    }
    dist_optim_free(opt);
    for (int i = 0; i < np; i++) rref_free(params[i]);
    remote_module_free(emb);
    ddp_free(fc);
    nn_module_free(lin);
    pg_free(g);
    return rc;
}

/* ---- master ------------------------------------------------------------------------ */

/* A copy of the PS's embedding table. */
static struct tensor *fetch_table(struct remote_module *emb)
{
    struct rref *p;
    struct rpc_value v = rpc_nil();
    if (remote_module_parameters(emb, &p, 1) != 1) return NULL;
    struct tensor *t = NULL;
    if (rref_to_here(p, &v, 0) == 0 && v.kind == RPC_TENSOR) t = tensor_retain(v.tensor);
    rpc_value_clear(&v);
    rref_free(p);
    return t;
}

static double mean(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s / n;
}

static int run_master(void)
{
    struct rpc_value a = rpc_list(3);
    a.list.items[0] = rpc_int(NUM_EMBEDDINGS);
    a.list.items[1] = rpc_int(EMBEDDING_DIM);
    a.list.items[2] = rpc_int((int64_t)seed);
    struct remote_module *emb = remote_module_new("ps", "embedding_bag", &a, DEVICE_CPU);
    rpc_value_clear(&a);
    if (!emb) {
        fprintf(stderr, "master: %s\n", rpc_last_error());
        return 1;
    }
    struct tensor *before = fetch_table(emb);
    struct rpc_future *f[2];
    for (int r = 0; r < 2; r++) {
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_rref(remote_module_rref(emb));
        f[r] = rpc_async(NAMES[2 + r], "ddp_rpc.run_trainer", &args, -1);
        rpc_value_clear(&args);
    }
    struct rpc_value out[2] = {rpc_nil(), rpc_nil()};
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        if (rpc_future_wait(f[r], &out[r]) != 0) {
            fprintf(stderr, "master: %s: %s\n", NAMES[2 + r], rpc_last_error());
            ok = 0;
        }
        rpc_future_free(f[r]);
    }
    struct tensor *after = fetch_table(emb);
    if (ok && before && after) {
        for (int r = 0; r < 2; r++) {
            const float *l = tensor_f32(out[r].list.items[0].tensor);
            double first = mean(l, 10), last = mean(l + ITERS - 10, 10);
            printf("%s loss first10 %.4f last10 %.4f\n", NAMES[2 + r], first, last);
            ok &= last < first;
        }
        double delta = 0;
        for (int64_t i = 0; i < before->numel; i++) delta = fmax(delta, fabs(tensor_f32(after)[i] - tensor_f32(before)[i]));
        printf("ps embedding table max change %.6f\n", delta);
        ok &= delta > 0;
        int same = 1;
        for (int k = 1; k <= 2; k++) {
            struct tensor *x = out[0].list.items[k].tensor, *y = out[1].list.items[k].tensor;
            same &= tensor_nbytes(x) == tensor_nbytes(y) && !memcmp(tensor_data(x), tensor_data(y), tensor_nbytes(x));
        }
        printf("trainers' Linear weights bit-identical: %s\n", same ? "yes" : "no");
        ok &= same;
    } else {
        ok = 0;
    }
    tensor_free(before);
    tensor_free(after);
    rpc_value_clear(&out[0]);
    rpc_value_clear(&out[1]);
    remote_module_free(emb);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

/* ---- processes -------------------------------------------------------------------- */

static int worker(int rank, int world_size, const char *master, void *arg)
{
    dist_autograd_init();
    remote_module_init();
    remote_module_register("embedding_bag", ctor_embedding_bag);
    dist_optim_init();
    pg_init();
    ddp_init();
    rpc_register("ddp_rpc.run_trainer", run_trainer, NULL);
    struct rpc_opts o = {.name = NAMES[rank], .rank = rank, .world_size = world_size, .master = master};
    if (rpc_init(&o) != 0) {
        fprintf(stderr, "%s: rpc_init: %s\n", NAMES[rank], rpc_last_error());
        return 1;
    }
    int rc = rank == 0 ? run_master() : 0;
    rpc_shutdown(true);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc > 1) seed = strtoull(argv[1], NULL, 10);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (rpc_spawn(4, worker, NULL, 300) != 0) {
        fprintf(stderr, "ddp_rpc: %s\n", rpc_last_error());
        return 1;
    }
    return 0;
}
