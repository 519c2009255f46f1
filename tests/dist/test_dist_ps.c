/* Parameter-server pattern: w1 owns a Linear model through remote_module;
 * two trainers (w2, w3) concurrently open contexts, run forward on the PS,
 * compute an MSE loss locally, backward and step their own dist_optim. Each
 * context holds exactly its own gradients, versions increase, and the
 * regression converges. */
#include <stdatomic.h>

#include "dist_harness.h"
#include "kit.h"

enum { IN = 4, OUT = 2, BATCH = 16, STEPS = 150 };

/* The regression target: t = x W*^T + b*. */
static const float W_TRUE[OUT][IN] = { { 0.9f, -1.2f, 0.4f, 0.7f }, { -0.3f, 0.8f, 1.1f, -0.6f } };
static const float B_TRUE[OUT] = { 0.25f, -0.5f };

static struct tensor *target_of(const struct tensor *x)
{
    int64_t shape[2] = { x->shape[0], OUT };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    const float *xd = tensor_f32(x);
    float *td = tensor_f32(t);
    for (int64_t b = 0; b < x->shape[0]; b++)
        for (int o = 0; o < OUT; o++) {
            float s = B_TRUE[o];
            for (int i = 0; i < IN; i++) s += W_TRUE[o][i] * xd[b * IN + i];
            td[b * OUT + o] = s;
        }
    return t;
}

/* forward through a handle over the module's RRef (as a trainer that was
 * handed the module by another worker does). */
static int rref_forward(struct rref *m, struct tensor *x, struct tensor **y)
{
    struct remote_module *rm = remote_module_from_rref(m);
    struct tensor *out[NN_MAX_IO] = {0};
    int n_out = 0;
    int rc = remote_module_forward(rm, 1, &x, &n_out, out);
    remote_module_free(rm);
    if (rc == 0 && n_out != 1) {
        for (int i = 0; i < n_out; i++) tensor_free(out[i]);
        return -2;
    }
    if (rc == 0) *y = out[0];
    return rc;
}

/* Compares the PS's gradients of ctx with dW = gy^T x, db = sum_b gy, where
 * gy = dLoss/dy = 2 (y - t) / (B * OUT). Returns NULL or a message. */
static const char *check_ps_grads(int64_t ctx, const struct tensor *x, const struct tensor *y,
                                  const struct tensor *t, char *msg, size_t cap)
{
    struct rpc_value g = rpc_nil(), a = rpc_list(1);
    a.list.items[0] = rpc_int(ctx);
    if (dh_query("w1", "t.grads", a, &g) != 0) {
        snprintf(msg, cap, "t.grads: %s", rpc_last_error());
        return msg;
    }
    const struct tensor *gw = NULL, *gb = NULL;
    for (size_t i = 0; g.kind == RPC_LIST && i < g.list.len; i++) {
        if (g.list.items[i].kind != RPC_TENSOR) continue;
        if (g.list.items[i].tensor->ndim == 2) gw = g.list.items[i].tensor;
        if (g.list.items[i].tensor->ndim == 1) gb = g.list.items[i].tensor;
    }
    const char *err = NULL;
    if (g.kind != RPC_LIST || g.list.len != 2 || !gw || !gb) {
        snprintf(msg, cap, "context %lld holds %zu gradients on w1, expected weight and bias", (long long)ctx,
                 g.kind == RPC_LIST ? g.list.len : 0);
        err = msg;
    }
    const float *xd = tensor_f32(x), *yd = tensor_f32(y), *td = tensor_f32(t);
    for (int o = 0; o < OUT && !err; o++) {
        double db = 0;
        for (int b = 0; b < BATCH; b++) db += 2.0 * (yd[b * OUT + o] - td[b * OUT + o]) / (BATCH * OUT);
        double got = tensor_f32(gb)[o];
        if (fabs(got - db) > 1e-6 + 1e-4 * fabs(db)) {
            snprintf(msg, cap, "ctx %lld: db[%d] %.9g, expected %.9g", (long long)ctx, o, got, db);
            err = msg;
        }
        for (int i = 0; i < IN && !err; i++) {
            double dw = 0;
            for (int b = 0; b < BATCH; b++)
                dw += 2.0 * (yd[b * OUT + o] - td[b * OUT + o]) / (BATCH * OUT) * xd[b * IN + i];
            got = tensor_f32(gw)[o * IN + i];
            if (fabs(got - dw) > 1e-6 + 1e-4 * fabs(dw)) {
                snprintf(msg, cap, "ctx %lld: dW[%d,%d] %.9g, expected %.9g", (long long)ctx, o, i, got, dw);
                err = msg;
            }
        }
    }
    rpc_value_clear(&g);
    return err;
}

/* The trainers' start barrier, kept on w0: t.arrive() counts a trainer in,
 * t.arrived() says how many are. */
static atomic_int arrived;

static int fn_arrive(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(atomic_fetch_add(&arrived, 1) + 1);
    return 0;
}

static int fn_arrived(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_int(atomic_load(&arrived));
    return 0;
}

/* Returns once both trainers have arrived (NULL), or a message after 60 s. */
static const char *start_barrier(char *msg, size_t cap)
{
    struct rpc_value r = rpc_nil();
    if (rpc_sync("w0", "t.arrive", NULL, &r, 0) != 0) {
        snprintf(msg, cap, "t.arrive: %s", rpc_last_error());
        return msg;
    }
    for (double t0 = trib_now_s(); r.kind == RPC_INT && r.i < 2; usleep(1000)) {
        if (trib_now_s() - t0 > 60) {
            snprintf(msg, cap, "the other trainer did not start within 60 s");
            return msg;
        }
        rpc_value_clear(&r);
        if (rpc_sync("w0", "t.arrived", NULL, &r, 0) != 0) {
            snprintf(msg, cap, "t.arrived: %s", rpc_last_error());
            return msg;
        }
    }
    rpc_value_clear(&r);
    return NULL;
}

/* t.train(module RRef, [param RRefs], seed) on a trainer: STEPS iterations;
 * returns [last loss, first version, last version, steps whose version did
 * not increase, start time, end time (CLOCK_MONOTONIC, shared by the
 * processes of one host)]. */
static int fn_train(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 3 || args->list.items[0].kind != RPC_RREF || args->list.items[1].kind != RPC_LIST)
        return rpc_request_fail(req, "expected (module, [params], seed)");
    struct rref *mod = args->list.items[0].rref;
    const struct rpc_value *pl = &args->list.items[1];
    struct rref *params[8];
    int np = (int)pl->list.len;
    for (int i = 0; i < np; i++) params[i] = pl->list.items[i].rref;
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    h.lr = 0.3;
    struct dist_optim *opt = dist_optim_new(OPTIM_SGD, &h, np, params);
    if (!opt) return rpc_request_fail(req, "dist_optim_new: %s", rpc_last_error());
    char msg[512];
    const char *err = NULL;
    double last_loss = -1;
    int64_t first_version = -1, prev = -1, not_increasing = 0;
    uint32_t seed = (uint32_t)args->list.items[2].i;
    double t_start = trib_now_s();
    if (dist_optim_num_owners(opt) != 1) {
        snprintf(msg, sizeof msg, "dist_optim_num_owners %d, expected 1", dist_optim_num_owners(opt));
        err = msg;
    }
    /* Nothing else makes the two trainers' steps overlap: a trainer whose
     * call was scheduled late could start after the other had taken all
     * its steps. */
    if (!err) err = start_barrier(msg, sizeof msg);
    for (int it = 0; it < STEPS && !err; it++) {
        int64_t ctx = dist_autograd_context_new();
        struct tensor *x = dh_random(BATCH, IN, seed * 7919u + (uint32_t)it), *t = target_of(x), *y = NULL;
        int rc = rref_forward(mod, x, &y);
        if (rc != 0) {
            snprintf(msg, sizeof msg, "forward: %s", rc == -2 ? "malformed result" : rpc_last_error());
            err = msg;
        }
        struct tensor *loss = err ? NULL : tensor_mse(y, t);
        if (!err && dist_autograd_backward(ctx, 1, &loss, false) != 0) {
            snprintf(msg, sizeof msg, "backward: %s", rpc_last_error());
            err = msg;
        }
        if (!err) err = check_ps_grads(ctx, x, y, t, msg, sizeof msg);
        if (!err && dist_optim_step(opt, ctx) != 0) {
            snprintf(msg, sizeof msg, "step: %s", rpc_last_error());
            err = msg;
        }
        if (!err) {
            int64_t v = dist_optim_last_version(opt, 0);
            if (first_version < 0) first_version = v;
            if (v <= prev) not_increasing++;
            prev = v;
            last_loss = tensor_f32(loss)[0];
        }
        if (dist_autograd_release(ctx) != 0 && !err) {
            snprintf(msg, sizeof msg, "release: %s", rpc_last_error());
            err = msg;
        }
        tensor_free(loss);
        tensor_free(x);
        tensor_free(t);
        tensor_free(y);
    }
    dist_optim_free(opt);
    if (err) return rpc_request_fail(req, "%s", err);
    *res = rpc_list(6);
    res->list.items[0] = rpc_double(last_loss);
    res->list.items[1] = rpc_int(first_version);
    res->list.items[2] = rpc_int(prev);
    res->list.items[3] = rpc_int(not_increasing);
    res->list.items[4] = rpc_double(t_start);
    res->list.items[5] = rpc_double(trib_now_s());
    return 0;
}

static void register_train(void)
{
    rpc_register("t.train", fn_train, NULL);
    rpc_register("t.arrive", fn_arrive, NULL);
    rpc_register("t.arrived", fn_arrived, NULL);
}

static double eval_loss(struct rref *mod)
{
    struct tensor *x = dh_random(64, IN, 99999), *t = target_of(x), *y = NULL;
    ck_assert_msg(rref_forward(mod, x, &y) == 0, "eval forward: %s", rpc_last_error());
    ck_assert_int_eq(y->shape[0], 64);
    struct tensor *l = tensor_mse(y, t);
    double v = tensor_f32(l)[0];
    tensor_free(l);
    tensor_free(x);
    tensor_free(t);
    tensor_free(y);
    return v;
}

START_TEST(test_parameter_server)
{
    dh_extra_register = register_train;
    dh_start(4, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", IN, OUT, 31, DEVICE_CPU);
    struct rref *mod = remote_module_rref(rm);
    struct rref *params[4];
    ck_assert_int_eq(remote_module_parameters(rm, params, 4), 2);
    double loss0 = eval_loss(mod);
    ck_assert_msg(loss0 > 0.1, "initial loss %g", loss0);
    int64_t v0 = -1;
    ck_assert_int_eq(dist_optim_get_version("w1", &v0), 0);
    ck_assert_int_eq(v0, 0);

    struct rpc_future *f[2];
    for (int k = 0; k < 2; k++) {
        struct rpc_value a = rpc_list(3);
        a.list.items[0] = rpc_rref(mod);
        a.list.items[1] = rpc_list(2);
        a.list.items[1].list.items[0] = rpc_rref(params[0]);
        a.list.items[1].list.items[1] = rpc_rref(params[1]);
        a.list.items[2] = rpc_int(k + 1);
        f[k] = rpc_async(DH_NAMES[k + 2], "t.train", &a, 120000);
        rpc_value_clear(&a);
    }
    double start[2], end[2];
    for (int k = 0; k < 2; k++) {
        struct rpc_value res = rpc_nil();
        int rc = rpc_future_wait(f[k], &res);
        ck_assert_msg(rc == 0, "trainer %s: %s", DH_NAMES[k + 2], rpc_last_error());
        ck_assert_int_eq(res.kind, RPC_LIST);
        ck_assert_msg(res.list.items[0].d < 1e-3, "%s: last loss %g", DH_NAMES[k + 2], res.list.items[0].d);
        ck_assert_int_ge(res.list.items[1].i, 1);
        ck_assert_int_le(res.list.items[2].i, 2 * STEPS);
        ck_assert_int_ge(res.list.items[2].i - res.list.items[1].i, STEPS - 1);
        ck_assert_msg(res.list.items[3].i == 0, "%s: %lld steps without a version increase", DH_NAMES[k + 2],
                      (long long)res.list.items[3].i);
        start[k] = res.list.items[4].d;
        end[k] = res.list.items[5].d;
        rpc_value_clear(&res);
        rpc_future_free(f[k]);
    }
    /* the two trainers ran at the same time (the start barrier's doing) */
    ck_assert_msg(fmax(start[0], start[1]) < fmin(end[0], end[1]), "trainers did not overlap: [%f,%f] [%f,%f]",
                  start[0], end[0], start[1], end[1]);
    int64_t v = -1;
    ck_assert_int_eq(dist_optim_get_version("w1", &v), 0);
    ck_assert_int_eq(v, 2 * STEPS);
    double loss1 = eval_loss(mod);
    ck_assert_msg(loss1 < 1e-4, "final loss %g (initial %g)", loss1, loss0);
    for (int k = 0; k < 4; k++) ck_assert_int_eq(dh_remote_nctx(DH_NAMES[k]), 0);
    rref_free(params[0]);
    rref_free(params[1]);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_ps",
         { "ps", 180, .tests = { test_parameter_server } })
