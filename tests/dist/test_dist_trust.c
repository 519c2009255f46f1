/* Issue 24, N11: what a legitimate member of the world may do to another
 * worker's distributed-autograd contexts. w0 runs a forward through a
 * Linear(2,1) on w1 inside a context; w2, a member, acts as the attacker
 * through the public SDK (t.relay: it calls whatever it is told, with the
 * real ids handed to it, so the checks are tested, not the ids' luck):
 * - a worker that took no part in the context may neither release it nor
 *   send gradients into it, on any worker;
 * - a worker that took part may send gradients only into the send
 *   functions whose messages went to it;
 * the refusals name the problem, and the honest backward is unaffected
 * (the bias's gradient is exactly 1, where an injected 1000 made 1001). */
#include "dist_harness.h"
#include "kit.h"

/* t.relay(to, fn, args) -> "" or the error text of to.fn(args), called from
 * this worker within whatever context the request brought. */
static int fn_relay(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 3 || args->list.items[0].kind != RPC_STR || args->list.items[1].kind != RPC_STR ||
        args->list.items[2].kind != RPC_LIST)
        return rpc_request_fail(req, "expected (to, fn, args)");
    struct rpc_value out = rpc_nil();
    int rc = rpc_sync(args->list.items[0].str.ptr, args->list.items[1].str.ptr, &args->list.items[2], &out, 0);
    rpc_value_clear(&out);
    *res = rpc_str(rc == 0 ? "" : rpc_last_error());
    return 0;
}

static void register_relay(void) { rpc_register("t.relay", fn_relay, NULL); }

/* w2 calls to.fn(fargs) (consumed); in ctx when join (w2 then takes part),
 * else in none. The error text into out ("" if it succeeded). */
static void attack(const char *to, const char *fn, struct rpc_value fargs, bool join, char *out, size_t cap)
{
    struct rpc_value a = rpc_list(3), res = rpc_nil();
    a.list.items[0] = rpc_str(to);
    a.list.items[1] = rpc_str(fn);
    a.list.items[2] = fargs;
    int rc = join ? rpc_sync("w2", "t.relay", &a, &res, 0) : dh_query("w2", "t.relay", a, &res);
    if (join) rpc_value_clear(&a);
    ck_assert_msg(rc == 0, "t.relay: %s", rpc_last_error());
    ck_assert_int_eq(res.kind, RPC_STR);
    snprintf(out, cap, "%.*s", (int)res.str.len, res.str.ptr);
    rpc_value_clear(&res);
}

/* The recv function of a tensor that came from another worker: which
 * message of which context it came in (dist_autograd.c's private record,
 * mirrored here; its node's name is checked first). */
struct recv_record { int from; int64_t ctx_id, msg_id; };

static int64_t received_msg_id(const struct tensor *y, int64_t ctx, int from)
{
    ck_assert_ptr_nonnull(y->grad_fn);
    ck_assert_str_eq(y->grad_fn->name, "RecvRpcBackward");
    const struct recv_record *ri = y->grad_fn->ctx;
    ck_assert_int_eq(ri->from, from);
    ck_assert_int_eq(ri->ctx_id, ctx);
    return ri->msg_id;
}

static struct rpc_value backprop_args(int64_t ctx, int64_t msg, float value)
{
    int64_t shape[2] = { 1, 1 };
    struct tensor *g = tensor_from_f32(2, shape, &value);
    struct rpc_value a = rpc_list(3);
    a.list.items[0] = rpc_int(ctx);
    a.list.items[1] = rpc_int(msg);
    a.list.items[2] = rpc_list(1);
    a.list.items[2].list.items[0] = rpc_tensor(g);
    tensor_free(g);
    return a;
}

static struct rpc_value ctx_args(int64_t ctx)
{
    struct rpc_value a = rpc_list(1);
    a.list.items[0] = rpc_int(ctx);
    return a;
}

/* The honest backward of loss = sum(W x + b) and its gradients on w1:
 * db exactly 1, dW exactly x. */
static void honest_backward(int64_t ctx, struct tensor *loss, struct tensor *x)
{
    ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "backward: %s", rpc_last_error());
    struct rpc_value grads;
    dh_remote_grads("w1", ctx, &grads);
    ck_assert_int_eq(grads.list.len, 2);
    struct tensor *db = dh_grad_by_ndim(&grads, 1), *dw = dh_grad_by_ndim(&grads, 2);
    ck_assert_float_eq(tensor_f32(db)[0], 1.0f);
    ck_assert_float_eq(tensor_f32(dw)[0], tensor_f32(x)[0]);
    ck_assert_float_eq(tensor_f32(dw)[1], tensor_f32(x)[1]);
    rpc_value_clear(&grads);
}

START_TEST(test_foreign_release)
{
    dh_extra_register = register_relay;
    dh_start(3, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", 2, 1, 3, DEVICE_CPU);
    struct tensor *x = dh_random(1, 2, 1);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *y = dh_rforward(rm, x), *loss = tensor_sum(y);
    ck_assert_int_eq(dh_remote_nctx("w1"), 1);

    char err[1024], want[256];
    static const char *const victims[] = { "w1", "w0" };
    for (int v = 0; v < 2; v++) {
        attack(victims[v], "dist_autograd._release", ctx_args(ctx), false, err, sizeof err);
        snprintf(want, sizeof want, "rpc: %s: dist_autograd._release: no context %lld that w2 took part in",
                 victims[v], (long long)ctx);
        ck_assert_str_eq(err, want);
    }
    /* an unknown context is refused alike */
    attack("w1", "dist_autograd._release", ctx_args(ctx + 1), false, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: dist_autograd._release: no context %lld that w2 took part in",
             (long long)ctx + 1);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(dh_remote_nctx("w1"), 1);
    ck_assert_int_eq(dist_autograd_num_contexts(), 1);

    honest_backward(ctx, loss, x);
    ck_assert_int_eq(dist_autograd_release(ctx), 0);    /* a participant's release goes through */
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(x);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

START_TEST(test_foreign_gradients)
{
    dh_extra_register = register_relay;
    dh_start(3, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", 2, 1, 3, DEVICE_CPU);
    struct tensor *x = dh_random(1, 2, 1);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *y = dh_rforward(rm, x), *loss = tensor_sum(y);
    int64_t msg = received_msg_id(y, ctx, 1);      /* w1's send function, whose message came to w0 */

    char err[1024], want[256];
    /* w2 took no part: refused before the message is even looked at */
    attack("w1", "dist_autograd._backprop", backprop_args(ctx, msg, 1000.0f), false, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: dist_autograd._backprop: no context %lld that w2 took part in",
             (long long)ctx);
    ck_assert_str_eq(err, want);

    /* w2 takes part (w0 calls it within the context, and its call to w1
     * carries the context): still only w0 may answer w1's message */
    attack("w1", "dist_autograd._backprop", backprop_args(ctx, msg, 1000.0f), true, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: dist_autograd._backprop: message %lld of context %lld was not sent to w2",
             (long long)msg, (long long)ctx);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(dh_remote_nctx("w2"), 1);      /* it did take part */

    honest_backward(ctx, loss, x);
    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    ck_assert_int_eq(dh_remote_nctx("w2"), 0);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(x);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

/* Context and message ids keep the worker in the top 16 bits and are no
 * counter below it (N11's second layer): 64 contexts and the messages of
 * their forwards are nowhere within 1024 of each other. */
START_TEST(test_ids_unguessable)
{
    dh_start(2, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", 2, 1, 3, DEVICE_CPU);
    struct tensor *x = dh_random(1, 2, 1);
    enum { N = 64 };
    int64_t ids[2 * N];
    for (int i = 0; i < N; i++) {
        int64_t ctx = dist_autograd_context_new();
        struct tensor *y = dh_rforward(rm, x);
        ids[2 * i] = ctx;
        ids[2 * i + 1] = received_msg_id(y, ctx, 1);
        ck_assert_int_eq(ids[2 * i] >> 48, 0);
        ck_assert_int_eq(ids[2 * i + 1] >> 48, 1);
        ids[2 * i + 1] &= 0xffffffffffffLL;     /* compare w1's counter with w0's too */
        tensor_free(y);
        ck_assert_int_eq(dist_autograd_release(ctx), 0);
    }
    int near = 0;
    for (int i = 0; i < 2 * N; i++)
        for (int j = i + 1; j < 2 * N; j++) near += llabs(ids[i] - ids[j]) < 1024;
    ck_assert_msg(near == 0, "%d pairs of ids less than 1024 apart", near);
    tensor_free(x);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

/* A worker takes part in its own contexts: a module it serves to itself
 * (calls to self within a context) gets its gradients back from itself. */
START_TEST(test_self_takes_part)
{
    dh_start(2, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w0", 2, 1, 3, DEVICE_CPU);
    struct tensor *x = dh_random(1, 2, 1);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *y = dh_rforward(rm, x), *loss = tensor_sum(y);
    ck_assert_int_eq(received_msg_id(y, ctx, 0) >> 48, 0);
    ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "backward: %s", rpc_last_error());
    struct tensor *leaves[4], *grads[4];
    int n = dist_autograd_get_gradients(ctx, 4, leaves, grads);
    ck_assert_int_eq(n, 2);
    for (int i = 0; i < n; i++) {
        if (grads[i]->ndim == 1) ck_assert_float_eq(tensor_f32(grads[i])[0], 1.0f);
        tensor_free(leaves[i]);
        tensor_free(grads[i]);
    }
    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    tensor_free(loss);
    tensor_free(y);
    tensor_free(x);
    remote_module_free(rm);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_trust",
         { "trust", 120, .tests = { test_foreign_release, test_foreign_gradients, test_ids_unguessable,
           test_self_takes_part } })
