/* The hybrid pattern of PyTorch's "Combining DDP with RPC" tutorial, without
 * DDP: an embedding table on a parameter server (w1) through a custom
 * remote_module constructor, a dense Linear layer on the trainer (w0), and
 * one dist_optim over both the remote table and the local dense parameters. */
#include "dist_harness.h"
#include "kit.h"

enum { NUM = 10, DIM = 4, CLASSES = 3, BATCH = 8, STEPS = 200 };

/* ---- the "embedding" module: forward(int64 idx [B]) = one_hot(idx) @ table */

struct embedding {
    struct nn_module m;
    int num, dim;
    struct tensor *param[1];
};

static int emb_forward(struct nn_module *m, int n_in, struct tensor **in, int *n_out, struct tensor **out)
{
    struct embedding *e = (struct embedding *)m;
    if (n_in != 1 || in[0]->dtype != DTYPE_I64 || in[0]->ndim != 1) {
        tensor_error("embedding: expected one int64 [B] tensor of indices");
        return -1;
    }
    int64_t b = in[0]->shape[0], shape[2] = { b, e->num };
    struct tensor *idx = in[0]->device == DEVICE_CPU ? tensor_retain(in[0]) : tensor_clone_to(in[0], DEVICE_CPU);
    struct tensor *oh = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    const int64_t *id = tensor_data(idx);
    for (int64_t i = 0; i < b; i++) {
        if (id[i] < 0 || id[i] >= e->num) {
            tensor_error("embedding: index %lld out of range for %d rows", (long long)id[i], e->num);
            tensor_free(idx);
            tensor_free(oh);
            return -1;
        }
        tensor_f32(oh)[i * e->num + id[i]] = 1.0f;
    }
    tensor_free(idx);
    struct tensor *table = e->m.params[0];
    if (table->device != DEVICE_CPU) {
        struct tensor *d = tensor_clone_to(oh, table->device);
        tensor_free(oh);
        oh = d;
    }
    out[0] = tensor_matmul(oh, table);
    tensor_free(oh);
    if (!out[0]) return -1;
    *n_out = 1;
    return 0;
}

static void emb_free(struct nn_module *m)
{
    struct embedding *e = (struct embedding *)m;
    tensor_free(e->m.params[0]);
    free(e);
}

static const struct nn_module_ops EMB_OPS = { "embedding", emb_forward, emb_free };

/* N(0,1)-ish table from an LCG seed, requires grad. */
static struct nn_module *embedding_new(int num, int dim, uint32_t seed)
{
    struct embedding *e = calloc(1, sizeof *e);
    e->m.ops = &EMB_OPS;
    e->m.n_params = 1;
    e->m.params = e->param;
    e->num = num;
    e->dim = dim;
    e->param[0] = dh_random(num, dim, seed);
    tensor_set_requires_grad(e->param[0], true);
    return &e->m;
}

/* remote_module constructor: (num, dim, seed) */
static struct nn_module *ctor_embedding(struct rpc_request *req, const struct rpc_value *args)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || args->list.items[0].kind != RPC_INT ||
        args->list.items[1].kind != RPC_INT || args->list.items[2].kind != RPC_INT ||
        args->list.items[0].i < 1 || args->list.items[1].i < 1) {
        rpc_request_fail(req, "embedding: expected (num > 0, dim > 0, seed)");
        return NULL;
    }
    return embedding_new((int)args->list.items[0].i, (int)args->list.items[1].i, (uint32_t)args->list.items[2].i);
}

static void register_embedding(void) { remote_module_register("embedding", ctor_embedding); }

/* ---- the model ------------------------------------------------------------ */

static struct tensor *batch_indices(int step)
{
    int64_t shape[1] = { BATCH };
    struct tensor *t = tensor_new(DTYPE_I64, DEVICE_CPU, 1, shape);
    for (int i = 0; i < BATCH; i++) ((int64_t *)tensor_data(t))[i] = (step * 5 + i * 3) % NUM;
    return t;
}

/* class of index i: i % CLASSES, as int64 [B,1] for gather */
static struct tensor *batch_labels(const struct tensor *idx)
{
    int64_t shape[2] = { BATCH, 1 };
    struct tensor *t = tensor_new(DTYPE_I64, DEVICE_CPU, 2, shape);
    for (int i = 0; i < BATCH; i++) ((int64_t *)tensor_data(t))[i] = ((const int64_t *)tensor_data(idx))[i] % CLASSES;
    return t;
}

/* cross entropy: -mean(gather(log_softmax(dense(emb)), labels)) */
static struct tensor *ce_loss(struct nn_module *dense, struct tensor *emb, struct tensor *labels)
{
    struct tensor *logits = nn_forward1(dense, emb);
    ck_assert_ptr_nonnull(logits);
    struct tensor *lp = tensor_log_softmax(logits), *picked = tensor_gather(lp, labels);
    ck_assert_ptr_nonnull(picked);
    struct tensor *m = tensor_mean(picked), *loss = tensor_neg(m);
    tensor_free(logits);
    tensor_free(lp);
    tensor_free(picked);
    tensor_free(m);
    return loss;
}

static struct tensor *remote_emb(struct remote_module *rm, struct tensor *idx)
{
    struct tensor *out[NN_MAX_IO] = { 0 };
    int n = 0;
    ck_assert_msg(remote_module_forward(rm, 1, &idx, &n, out) == 0, "embedding forward: %s", rpc_last_error());
    ck_assert_int_eq(n, 1);
    ck_assert(out[0]->requires_grad);
    return out[0];
}

START_TEST(test_hybrid_embedding_dense)
{
    dh_extra_register = register_embedding;
    dh_start(2, NULL, NULL);
    struct rpc_value a = rpc_list(3);
    a.list.items[0] = rpc_int(NUM);
    a.list.items[1] = rpc_int(DIM);
    a.list.items[2] = rpc_int(77);
    struct remote_module *rm = remote_module_new("w1", "embedding", &a, DEVICE_CPU);
    ck_assert_msg(rm != NULL, "remote_module_new(embedding): %s", rpc_last_error());
    rpc_value_clear(&a);
    a = rpc_list(3);
    a.list.items[0] = rpc_int(0);
    a.list.items[1] = rpc_int(DIM);
    a.list.items[2] = rpc_int(1);
    ck_assert_ptr_null(remote_module_new("w1", "embedding", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: remote_module._new: embedding: expected (num > 0, dim > 0, seed)");
    rpc_value_clear(&a);

    uint64_t rng = 5, rng_ref = 5;
    struct nn_module *dense = nn_linear_new(DIM, CLASSES, true, &rng);
    /* local references: the same table and the same dense layer */
    struct nn_module *emb_ref = embedding_new(NUM, DIM, 77), *dense_ref = nn_linear_new(DIM, CLASSES, true, &rng_ref);

    struct rref *params[4];
    ck_assert_int_eq(remote_module_parameters(rm, params, 1), 1);
    ck_assert_int_eq(rref_owner(params[0]), 1);
    for (int i = 0; i < dense->n_params; i++) {
        struct rpc_value v = rpc_tensor(dense->params[i]);
        params[1 + i] = rref_new_local_value(&v);
        ck_assert_ptr_nonnull(params[1 + i]);
        ck_assert(rref_is_owner(params[1 + i]));
    }
    struct optim_hyper h = optim_defaults(OPTIM_ADAM);
    h.lr = 0.05;
    struct dist_optim *opt = dist_optim_new(OPTIM_ADAM, &h, 1 + dense->n_params, params);
    ck_assert_msg(opt != NULL, "dist_optim_new: %s", rpc_last_error());
    ck_assert_int_eq(dist_optim_num_owners(opt), 2);

    double first = -1, last = -1;
    for (int step = 0; step < STEPS; step++) {
        int64_t ctx = dist_autograd_context_new();
        struct tensor *idx = batch_indices(step), *labels = batch_labels(idx);
        struct tensor *emb = remote_emb(rm, idx);
        struct tensor *loss = ce_loss(dense, emb, labels);
        ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "backward: %s", rpc_last_error());
        if (step == 0) {
            /* gradients against the same model run locally */
            struct tensor *emb_l = nn_forward1(emb_ref, idx), *loss_l = ce_loss(dense_ref, emb_l, labels);
            dh_assert_close(loss, loss_l, "loss");
            ck_assert_int_eq(tensor_backward(loss_l, NULL, false), 0);
            struct rpc_value g = rpc_nil();
            dh_remote_grads("w1", ctx, &g);
            ck_assert_int_eq(g.list.len, 1);
            dh_assert_close(g.list.items[0].tensor, emb_ref->params[0]->grad, "table grad");
            /* rows not in the batch get exact zeros */
            const float *gt = tensor_f32(g.list.items[0].tensor);
            for (int r = 0; r < NUM; r++) {
                bool used = false;
                for (int i = 0; i < BATCH; i++) used |= ((int64_t *)tensor_data(idx))[i] == r;
                for (int d = 0; d < DIM && !used; d++) ck_assert_float_eq(gt[r * DIM + d], 0.0f);
            }
            rpc_value_clear(&g);
            for (int i = 0; i < dense->n_params; i++) {
                struct tensor *gd = dist_autograd_get_gradient(ctx, dense->params[i]);
                dh_assert_close(gd, dense_ref->params[i]->grad, "dense grad");
                tensor_free(gd);
                ck_assert_msg(dense->params[i]->grad == NULL, "a distributed backward wrote ->grad");
            }
            tensor_free(emb_l);
            tensor_free(loss_l);
            first = tensor_f32(loss)[0];
        }
        ck_assert_msg(dist_optim_step(opt, ctx) == 0, "step: %s", rpc_last_error());
        last = tensor_f32(loss)[0];
        ck_assert_int_eq(dist_autograd_release(ctx), 0);
        tensor_free(idx);
        tensor_free(labels);
        tensor_free(emb);
        tensor_free(loss);
    }
    /* both owners stepped every time */
    ck_assert_int_eq(dist_optim_local_version(), STEPS);
    int64_t v = 0;
    ck_assert_int_eq(dist_optim_get_version("w1", &v), 0);
    ck_assert_int_eq(v, STEPS);
    /* the local dense parameters moved through the distributed optimizer */
    ck_assert_msg(fabsf(tensor_f32(dense->params[0])[0] - tensor_f32(dense_ref->params[0])[0]) > 1e-3,
                  "the local dense weight did not change");
    fprintf(stderr, "test_dist_hybrid: loss %.4f -> %.4f over %d steps\n", first, last, STEPS);
    ck_assert_msg(first > 0.5 && last < 0.05, "loss %g -> %g", first, last);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);

    dist_optim_free(opt);
    for (int i = 0; i < 1 + dense->n_params; i++) rref_free(params[i]);
    nn_module_free(dense);
    nn_module_free(dense_ref);
    nn_module_free(emb_ref);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_hybrid",
         { "hybrid", 180, .tests = { test_hybrid_embedding_dense } })
