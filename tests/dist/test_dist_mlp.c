/* Distributed autograd through a 3-layer MLP split one Linear per worker
 * (w1, w2, w3) with tanh and the loss on w0: parameter and input gradients
 * match the same MLP run locally; retained graphs; nested hops; release;
 * the API's error messages. */
#include "dist_harness.h"
#include "kit.h"

#include <pthread.h>

enum { IN = 5, H1 = 8, H2 = 6, OUT = 3, BATCH = 4 };

struct mlp_run {
    struct nn_module *local[3];          /* the reference layers */
    struct remote_module *remote[3];     /* the same layers on w1..w3 */
    struct tensor *x_local, *x_remote, *target;
};

static int64_t layer_seed(int seed, int k) { return (int64_t)seed * 100 + k + 1; }

static void mlp_build(struct mlp_run *r, int seed)
{
    static const int sizes[4] = { IN, H1, H2, OUT };
    for (int k = 0; k < 3; k++) {
        uint64_t rng = (uint64_t)layer_seed(seed, k);
        r->local[k] = nn_linear_new(sizes[k], sizes[k + 1], true, &rng);
        ck_assert_ptr_nonnull(r->local[k]);
        r->remote[k] = dh_remote_linear(DH_NAMES[k + 1], sizes[k], sizes[k + 1], layer_seed(seed, k), DEVICE_CPU);
    }
    r->x_local = dh_random(BATCH, IN, (uint32_t)seed);
    r->x_remote = dh_random(BATCH, IN, (uint32_t)seed);
    tensor_set_requires_grad(r->x_local, true);
    tensor_set_requires_grad(r->x_remote, true);
    r->target = dh_random(BATCH, OUT, (uint32_t)seed + 1000u);
}

static void mlp_free(struct mlp_run *r)
{
    for (int k = 0; k < 3; k++) {
        nn_module_free(r->local[k]);
        remote_module_free(r->remote[k]);
    }
    tensor_free(r->x_local);
    tensor_free(r->x_remote);
    tensor_free(r->target);
}

/* loss = mse(L3(tanh(L2(tanh(L1(x))))), target), locally. */
static struct tensor *local_loss(struct mlp_run *r)
{
    struct tensor *h = tensor_retain(r->x_local);
    for (int k = 0; k < 3; k++) {
        struct tensor *y = nn_forward1(r->local[k], h);
        ck_assert_ptr_nonnull(y);
        tensor_free(h);
        if (k < 2) {
            h = tensor_tanh(y);
            tensor_free(y);
        } else {
            h = y;
        }
    }
    struct tensor *loss = tensor_mse(h, r->target);
    tensor_free(h);
    return loss;
}

/* The same through the remote layers (hop 2 through forward_async when
 * async), inside the thread's current context. */
static struct tensor *remote_loss(struct mlp_run *r, bool async)
{
    struct tensor *h = tensor_retain(r->x_remote);
    for (int k = 0; k < 3; k++) {
        struct tensor *y;
        if (async && k == 1) {
            struct rpc_future *f = remote_module_forward_async(r->remote[k], 1, &h);
            struct tensor *out[NN_MAX_IO] = { 0 };
            int n = 0;
            ck_assert_msg(remote_module_forward_wait(f, &n, out) == 0, "forward_wait: %s", rpc_last_error());
            rpc_future_free(f);
            ck_assert_int_eq(n, 1);
            y = out[0];
        } else {
            y = dh_rforward(r->remote[k], h);
        }
        ck_assert(y->requires_grad);
        tensor_free(h);
        if (k < 2) {
            h = tensor_tanh(y);
            tensor_free(y);
        } else {
            h = y;
        }
    }
    struct tensor *loss = tensor_mse(h, r->target);
    tensor_free(h);
    return loss;
}

/* Every owner holds exactly the weight and bias gradients of its layer in
 * ctx, equal to scale x the local reference's. */
static void check_owner_grads(struct mlp_run *r, int64_t ctx, float scale)
{
    for (int k = 0; k < 3; k++) {
        struct rpc_value g = rpc_nil();
        dh_remote_grads(DH_NAMES[k + 1], ctx, &g);
        ck_assert_int_eq(g.list.len, 2);
        char what[64];
        snprintf(what, sizeof what, "%s weight grad", DH_NAMES[k + 1]);
        dh_assert_close_scaled(dh_grad_by_ndim(&g, 2), dh_param_by_ndim(r->local[k], 2)->grad, scale, 1e-5, 1e-6, what);
        snprintf(what, sizeof what, "%s bias grad", DH_NAMES[k + 1]);
        dh_assert_close_scaled(dh_grad_by_ndim(&g, 1), dh_param_by_ndim(r->local[k], 1)->grad, scale, 1e-5, 1e-6, what);
        rpc_value_clear(&g);
    }
    struct tensor *gx = dist_autograd_get_gradient(ctx, r->x_remote);
    dh_assert_close_scaled(gx, r->x_local->grad, scale, 1e-5, 1e-6, "w0 input grad");
    tensor_free(gx);
    ck_assert_msg(r->x_remote->grad == NULL, "a distributed backward wrote ->grad");
}

static void check_no_contexts(void)
{
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    for (int k = 1; k < 4; k++) ck_assert_int_eq(dh_remote_nctx(DH_NAMES[k]), 0);
}

START_TEST(test_mlp_matches_local)
{
    dh_start(4, NULL, NULL);
    for (int seed = 1; seed <= 3; seed++) {
        struct mlp_run r;
        mlp_build(&r, seed);
        struct tensor *ll = local_loss(&r);
        ck_assert_int_eq(tensor_backward(ll, NULL, false), 0);

        int64_t ctx = dist_autograd_context_new();
        ck_assert_int_gt(ctx, 0);
        ck_assert_int_eq(dist_autograd_current(), ctx);
        ck_assert_int_eq((uint64_t)ctx >> 48, 0);          /* w0's id in the top 16 bits */
        struct tensor *rl = remote_loss(&r, seed == 2);
        dh_assert_close(rl, ll, "loss");
        ck_assert_msg(dist_autograd_backward(ctx, 1, &rl, false) == 0, "backward: %s", rpc_last_error());
        check_owner_grads(&r, ctx, 1.0f);

        /* the parameter RRefs name exactly the leaves the context holds, and
         * the owners' ->grad stays untouched */
        for (int k = 0; k < 3; k++) {
            struct rref *p[4];
            ck_assert_int_eq(remote_module_parameters(r.remote[k], p, 4), 2);
            for (int i = 0; i < 2; i++) {
                ck_assert_int_eq(rref_owner(p[i]), k + 1);
                struct rpc_value a = rpc_list(2), res = rpc_nil();
                a.list.items[0] = rpc_int(ctx);
                a.list.items[1] = rpc_rref(p[i]);
                ck_assert_msg(dh_query(DH_NAMES[k + 1], "t.pgrad", a, &res) == 0, "t.pgrad: %s", rpc_last_error());
                ck_assert_int_eq(res.list.items[0].kind, RPC_TENSOR);
                ck_assert_msg(res.list.items[1].b, "%s: param %d ->grad was written", DH_NAMES[k + 1], i);
                dh_assert_close(res.list.items[0].tensor, r.local[k]->params[i]->grad, "param RRef grad");
                rpc_value_clear(&res);
                rref_free(p[i]);
            }
        }

        ck_assert_int_eq(dist_autograd_release(ctx), 0);
        ck_assert_int_eq(dist_autograd_current(), 0);
        check_no_contexts();
        tensor_free(rl);
        tensor_free(ll);
        mlp_free(&r);
    }
    dh_stop();
}
END_TEST

START_TEST(test_mlp_retain_graph_twice)
{
    dh_start(4, NULL, NULL);
    struct mlp_run r;
    mlp_build(&r, 7);
    struct tensor *ll = local_loss(&r);
    ck_assert_int_eq(tensor_backward(ll, NULL, false), 0);

    int64_t ctx = dist_autograd_context_new();
    struct tensor *rl = remote_loss(&r, true);
    ck_assert_msg(dist_autograd_backward(ctx, 1, &rl, true) == 0, "backward 1: %s", rpc_last_error());
    check_owner_grads(&r, ctx, 1.0f);
    ck_assert_msg(dist_autograd_backward(ctx, 1, &rl, true) == 0, "backward 2: %s", rpc_last_error());
    check_owner_grads(&r, ctx, 2.0f);

    /* a second context over the same modules is independent */
    int64_t ctx2 = dist_autograd_context_new();
    ck_assert_int_ne(ctx2, ctx);
    struct tensor *rl2 = remote_loss(&r, false);
    ck_assert_msg(dist_autograd_backward(ctx2, 1, &rl2, false) == 0, "backward ctx2: %s", rpc_last_error());
    check_owner_grads(&r, ctx2, 1.0f);
    check_owner_grads(&r, ctx, 2.0f);

    /* two roots in one call: the gradients add up */
    struct tensor *roots[2] = { rl2, rl2 };
    ck_assert_msg(dist_autograd_backward(ctx2, 2, roots, false) == 0, "backward 2 roots: %s", rpc_last_error());
    check_owner_grads(&r, ctx2, 3.0f);

    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    ck_assert_int_eq(dist_autograd_release(ctx2), 0);
    check_no_contexts();
    ck_assert_int_eq(dist_autograd_release(ctx), -1);
    char want[128];
    snprintf(want, sizeof want, "dist_autograd_release: unknown context %lld", (long long)ctx);
    ck_assert_str_eq(rpc_last_error(), want);
    struct tensor *lv[2], *gv[2];
    ck_assert_int_eq(dist_autograd_get_gradients(ctx, 2, lv, gv), -1);
    snprintf(want, sizeof want, "dist_autograd_get_gradients: unknown context %lld", (long long)ctx);
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert_ptr_null(dist_autograd_get_gradient(ctx, r.x_remote));
    tensor_free(rl);
    tensor_free(rl2);
    tensor_free(ll);
    mlp_free(&r);
    dh_stop();
}
END_TEST

/* ---- nested hops: w0 -> w1 (handler) -> w2's module -> w1 tanh -> w0 -------- */

static struct remote_module *chain_rm;   /* on w1: a Linear on w2 */

/* t.chain(x, seed) on w1: tanh(Linear_w2(x)), within the caller's context. */
static int fn_chain(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 2 || args->list.items[0].kind != RPC_TENSOR) return rpc_request_fail(req, "expected (x, seed)");
    if (!chain_rm) {
        struct rpc_value a = dh_linear_args(IN, H1, args->list.items[1].i);
        chain_rm = remote_module_new("w2", "linear", &a, DEVICE_CPU);
        rpc_value_clear(&a);
        if (!chain_rm) return rpc_request_fail(req, "%s", rpc_last_error());
    }
    struct tensor *x = args->list.items[0].tensor, *out[NN_MAX_IO] = { 0 };
    int n = 0;
    if (remote_module_forward(chain_rm, 1, &x, &n, out) != 0) return rpc_request_fail(req, "%s", rpc_last_error());
    struct tensor *y = tensor_tanh(out[0]);
    tensor_free(out[0]);
    *res = rpc_tensor(y);
    tensor_free(y);
    return 0;
}

static int fn_chain_free(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    remote_module_free(chain_rm);
    chain_rm = NULL;
    return 0;
}

static void register_chain(void)
{
    rpc_register("t.chain", fn_chain, NULL);
    rpc_register("t.chain_free", fn_chain_free, NULL);
}

START_TEST(test_nested_hops)
{
    dh_extra_register = register_chain;
    dh_start(3, NULL, NULL);
    uint64_t rng = 4242;
    struct nn_module *lin = nn_linear_new(IN, H1, true, &rng);
    struct tensor *xl = dh_random(BATCH, IN, 9), *xr = dh_random(BATCH, IN, 9);
    tensor_set_requires_grad(xl, true);
    tensor_set_requires_grad(xr, true);
    struct tensor *yl = nn_forward1(lin, xl), *al = tensor_tanh(yl), *sq = tensor_square(al), *ll = tensor_sum(sq);
    ck_assert_int_eq(tensor_backward(ll, NULL, false), 0);

    for (int rep = 0; rep < 2; rep++) {
        int64_t ctx = dist_autograd_context_new();
        struct rpc_value a = rpc_list(2), res = rpc_nil();
        a.list.items[0] = rpc_tensor(xr);
        a.list.items[1] = rpc_int(4242);
        ck_assert_msg(rpc_sync("w1", "t.chain", &a, &res, 0) == 0, "t.chain: %s", rpc_last_error());
        rpc_value_clear(&a);
        ck_assert_int_eq(res.kind, RPC_TENSOR);
        ck_assert(res.tensor->requires_grad);
        struct tensor *sq2 = tensor_square(res.tensor), *rl = tensor_sum(sq2);
        dh_assert_close(rl, ll, "nested loss");
        ck_assert_msg(dist_autograd_backward(ctx, 1, &rl, false) == 0, "backward: %s", rpc_last_error());

        struct rpc_value g = rpc_nil();
        dh_remote_grads("w2", ctx, &g);
        ck_assert_int_eq(g.list.len, 2);
        dh_assert_close(dh_grad_by_ndim(&g, 2), dh_param_by_ndim(lin, 2)->grad, "nested weight grad");
        dh_assert_close(dh_grad_by_ndim(&g, 1), dh_param_by_ndim(lin, 1)->grad, "nested bias grad");
        rpc_value_clear(&g);
        dh_remote_grads("w1", ctx, &g);                 /* w1 has no leaves */
        ck_assert_int_eq(g.list.len, 0);
        rpc_value_clear(&g);
        struct tensor *gx = dist_autograd_get_gradient(ctx, xr);
        dh_assert_close(gx, xl->grad, "nested input grad");
        tensor_free(gx);

        /* w2 was reached only through w1: release still reaches it */
        ck_assert_int_eq(dist_autograd_release(ctx), 0);
        ck_assert_int_eq(dist_autograd_num_contexts(), 0);
        ck_assert_int_eq(dh_remote_nctx("w1"), 0);
        ck_assert_int_eq(dh_remote_nctx("w2"), 0);
        tensor_free(sq2);
        tensor_free(rl);
        rpc_value_clear(&res);
    }
    struct rpc_value none = rpc_nil();
    ck_assert_int_eq(dh_query("w1", "t.chain_free", rpc_list(0), &none), 0);
    tensor_free(yl);
    tensor_free(al);
    tensor_free(sq);
    tensor_free(ll);
    tensor_free(xl);
    tensor_free(xr);
    nn_module_free(lin);
    dh_stop();
}
END_TEST

/* ---- concurrent contexts on one process's threads -------------------------- */

enum { THREADS = 4, ITERS = 25 };

struct worker_arg { struct remote_module *rm; int k; char err[256]; };

/* loss = c * sum(L(x)) with c = k + 1, so the owner's gradients of this
 * thread's context must be dW[o,i] = c * sum_b x[b,i] and db[o] = c * B. */
static void *conc_worker(void *p)
{
    struct worker_arg *w = p;
    float c = (float)(w->k + 1);
    for (int it = 0; it < ITERS && !w->err[0]; it++) {
        int64_t ctx = dist_autograd_context_new();
        struct tensor *x = dh_random(BATCH, IN, (uint32_t)(w->k * 1000 + it)), *out[NN_MAX_IO] = { 0 };
        int n = 0;
        if (remote_module_forward(w->rm, 1, &x, &n, out) != 0) {
            snprintf(w->err, sizeof w->err, "forward: %s", rpc_last_error());
        } else {
            struct tensor *s = tensor_sum(out[0]), *loss = tensor_mul_scalar(s, c);
            if (dist_autograd_current() != ctx)
                snprintf(w->err, sizeof w->err, "current context changed to %lld", (long long)dist_autograd_current());
            else if (dist_autograd_backward(ctx, 1, &loss, false) != 0)
                snprintf(w->err, sizeof w->err, "backward: %s", rpc_last_error());
            struct rpc_value g = rpc_nil(), a = rpc_list(1);
            a.list.items[0] = rpc_int(ctx);
            if (!w->err[0] && dh_query("w1", "t.grads", a, &g) != 0)
                snprintf(w->err, sizeof w->err, "t.grads: %s", rpc_last_error());
            else if (!w->err[0] && g.list.len != 2)
                snprintf(w->err, sizeof w->err, "context %lld holds %zu gradients", (long long)ctx, g.list.len);
            for (size_t j = 0; !w->err[0] && j < 2; j++) {
                const struct tensor *gt = g.list.items[j].tensor;
                for (int64_t e = 0; e < gt->numel && !w->err[0]; e++) {
                    double want = c * BATCH;
                    if (gt->ndim == 2) {
                        want = 0;
                        for (int b = 0; b < BATCH; b++) want += c * tensor_f32(x)[b * IN + e % IN];
                    }
                    if (fabs(tensor_f32(gt)[e] - want) > 1e-4 + 1e-5 * fabs(want))
                        snprintf(w->err, sizeof w->err, "thread %d it %d: grad %.6g, expected %.6g", w->k, it,
                                 tensor_f32(gt)[e], want);
                }
            }
            rpc_value_clear(&g);
            tensor_free(s);
            tensor_free(loss);
        }
        if (dist_autograd_release(ctx) != 0 && !w->err[0])
            snprintf(w->err, sizeof w->err, "release: %s", rpc_last_error());
        for (int i = 0; i < NN_MAX_IO; i++) tensor_free(out[i]);
        tensor_free(x);
    }
    return NULL;
}

/* One module on w1 applied HOPS times, with tanh on w0 between hops: the
 * backward ping-pongs HOPS times between the two workers, more than their
 * handler pools hold threads (4), so a _backprop that held its thread while
 * waiting downstream would deadlock. Gradients match the local run. */
#define HOPS 12
START_TEST(test_deep_ping_pong)
{
    dh_start(2, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", 6, 6, 5, DEVICE_CPU);
    uint64_t rng = 5;
    struct nn_module *local = nn_linear_new(6, 6, true, &rng);
    struct tensor *x = dh_random(3, 6, 1);
    struct tensor *h_remote = tensor_retain(x), *h_local = tensor_retain(x);
    int64_t ctx = dist_autograd_context_new();
    for (int k = 0; k < HOPS; k++) {
        struct tensor *y = dh_rforward(rm, h_remote), *yl = nn_forward1(local, h_local);
        tensor_free(h_remote);
        tensor_free(h_local);
        h_remote = tensor_tanh(y);
        h_local = tensor_tanh(yl);
        tensor_free(y);
        tensor_free(yl);
    }
    struct tensor *loss = tensor_sum(h_remote), *loss_local = tensor_sum(h_local);
    double t0 = trib_now_s();
    ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "backward: %s", rpc_last_error());
    ck_assert_msg(trib_now_s() - t0 < 10.0, "backward took %.1f s", trib_now_s() - t0);
    ck_assert_int_eq(tensor_backward(loss_local, NULL, false), 0);
    struct rpc_value g = rpc_nil();
    dh_remote_grads("w1", ctx, &g);
    dh_assert_close(dh_grad_by_ndim(&g, 2), local->params[0]->grad, "deep ping-pong weight grad");
    dh_assert_close(dh_grad_by_ndim(&g, 1), local->params[1]->grad, "deep ping-pong bias grad");
    rpc_value_clear(&g);
    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    tensor_free(loss);
    tensor_free(loss_local);
    tensor_free(h_remote);
    tensor_free(h_local);
    tensor_free(x);
    nn_module_free(local);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

START_TEST(test_concurrent_threads)
{
    dh_start(2, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", IN, OUT, 3, DEVICE_CPU);
    pthread_t th[THREADS];
    struct worker_arg wa[THREADS];
    for (int k = 0; k < THREADS; k++) {
        wa[k] = (struct worker_arg){ .rm = rm, .k = k };
        pthread_create(&th[k], NULL, conc_worker, &wa[k]);
    }
    for (int k = 0; k < THREADS; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < THREADS; k++) ck_assert_msg(wa[k].err[0] == 0, "%s", wa[k].err);
    ck_assert_int_eq(dist_autograd_current(), 0);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

/* ---- errors --------------------------------------------------------------- */

START_TEST(test_context_before_init)
{
    dh_register_all();
    ck_assert_int_eq(dist_autograd_context_new(), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_autograd_context_new: RPC is not initialised");
}
END_TEST

START_TEST(test_errors)
{
    dh_start(2, NULL, NULL);
    struct tensor *s = tensor_scalar_f32(1.0f);
    ck_assert_int_eq(dist_autograd_backward(999, 1, &s, false), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_autograd_backward: unknown context 999");

    struct remote_module *rm = dh_remote_linear("w1", 3, 2, 5, DEVICE_CPU);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *x = dh_random(4, 3, 1);
    tensor_set_requires_grad(x, true);
    struct tensor *y = dh_rforward(rm, x);
    ck_assert_int_eq(dist_autograd_backward(ctx, 1, &y, false), -1);
    ck_assert_str_eq(rpc_last_error(), "dist_autograd_backward: root 0 has 8 elements, expected a scalar");
    /* nothing was accumulated by the refused call */
    struct rpc_value g = rpc_nil();
    dh_remote_grads("w1", ctx, &g);
    ck_assert_int_eq(g.list.len, 0);
    rpc_value_clear(&g);
    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);

    struct rpc_value a = dh_linear_args(3, 2, 1);
    ck_assert_ptr_null(remote_module_new("w1", "nope", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: remote_module._new: unknown module constructor 'nope'");
    ck_assert_ptr_null(remote_module_new("nobody", "linear", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'nobody'");
    rpc_value_clear(&a);
    a = rpc_list(1);
    a.list.items[0] = rpc_int(0);
    ck_assert_ptr_null(remote_module_new("w1", "linear", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: remote_module._new: linear: expected (in > 0, out > 0[, bias[, seed]])");
    rpc_value_clear(&a);
    /* sizes past int are refused, not truncated (2^32 + 3 would build 3) */
    a = dh_linear_args(3, 2, 1);
    a.list.items[0] = rpc_int((1ll << 32) + 3);
    ck_assert_ptr_null(remote_module_new("w1", "linear", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: remote_module._new: linear: size 4294967299 exceeds 2147483647");
    rpc_value_clear(&a);
    /* parameters too large to make are an error on the owner, which lives on */
    a = dh_linear_args(1 << 30, 1 << 30, 1);
    ck_assert_ptr_null(remote_module_new("w1", "linear", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: remote_module._new: linear: nn_linear_new: cannot allocate the "
                                       "parameters: tensor_new: shape is too large");
    rpc_value_clear(&a);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    a = rpc_list(1);
    a.list.items[0] = rpc_list(2);
    a.list.items[0].list.items[0] = rpc_int(3);
    a.list.items[0].list.items[1] = rpc_int((1ll << 32) + 2);
    ck_assert_ptr_null(remote_module_new("w1", "mlp", &a, DEVICE_CPU));
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: remote_module._new: mlp: size 1 exceeds 2147483647");
    rpc_value_clear(&a);

    /* a forward with a wrong shape names the module's error */
    struct tensor *bad = dh_random(4, 5, 2), *out[NN_MAX_IO];
    int n = 0;
    ck_assert_int_eq(remote_module_forward(rm, 1, &bad, &n, out), -1);
    ck_assert_msg(strncmp(rpc_last_error(), "rpc: w1: ", 9) == 0 && strstr(rpc_last_error(), "forward: "),
                  "got '%s'", rpc_last_error());

    /* dist_optim: no parameters, an RRef to an object, a bad hyper-parameter */
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    ck_assert_ptr_null(dist_optim_new(OPTIM_SGD, &h, 0, NULL));
    ck_assert_str_eq(rpc_last_error(), "dist_optim_new: no parameters");
    struct rref *mr = remote_module_rref(rm);
    ck_assert_ptr_null(dist_optim_new(OPTIM_SGD, &h, 1, &mr));
    ck_assert_str_eq(rpc_last_error(),
                     "dist_optim_new: rpc: w1: dist_optim._local: parameter 0 is not an RRef to a tensor owned here");
    struct rref *p[4];
    ck_assert_int_eq(remote_module_parameters(rm, p, 4), 2);
    h.lr = -1;
    struct tensor *dummy = dh_random(1, 1, 1);
    ck_assert_ptr_null(optim_new(OPTIM_SGD, &h, 1, &dummy));
    char want[600];
    snprintf(want, sizeof want, "dist_optim_new: rpc: w1: dist_optim._local: %s", optim_last_error());
    ck_assert_ptr_null(dist_optim_new(OPTIM_SGD, &h, 2, p));
    ck_assert_str_eq(rpc_last_error(), want);
    tensor_free(dummy);

    /* a step for a context without gradients on the owner changes nothing */
    h.lr = 0.5;
    struct dist_optim *o = dist_optim_new(OPTIM_SGD, &h, 2, p);
    ck_assert_msg(o != NULL, "dist_optim_new: %s", rpc_last_error());
    struct rpc_value before = rpc_nil(), after = rpc_nil();
    ck_assert_int_eq(rref_to_here(p[0], &before, 0), 0);
    int64_t empty = dist_autograd_context_new();
    ck_assert_int_eq(dist_optim_step(o, empty), 0);
    ck_assert_int_eq(rref_to_here(p[0], &after, 0), 0);
    ck_assert_int_eq(after.kind, RPC_TENSOR);
    ck_assert(rpc_value_equal(&before, &after));
    ck_assert_int_eq(dist_autograd_release(empty), 0);
    rpc_value_clear(&before);
    rpc_value_clear(&after);
    dist_optim_free(o);
    rref_free(p[0]);
    rref_free(p[1]);

    tensor_free(bad);
    tensor_free(x);
    tensor_free(y);
    tensor_free(s);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_mlp",
         { "mlp", 120, .tests = { test_mlp_matches_local, test_mlp_retain_graph_twice, test_nested_hops,
           test_concurrent_threads, test_deep_ping_pong } },
         { "errors", 120, .tests = { test_context_before_init, test_errors } })
