/* Distributed-autograd contexts that other workers' requests create are
 * bounded: at most a set number per creating worker (one more request
 * fails, naming the limit), and freed when released, when idle past the
 * timeout, and when their creator dies (issue 11: 200k requests naming new
 * context ids grew a worker to 1.5 GB). */
#define DH_HEARTBEAT_TIMEOUT_MS 1000
#include "dist_harness.h"
#include "kit.h"

/* t.limits(max_per_worker, idle_ms): sets this worker's bounds. */
static int fn_limits(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    dist_autograd_set_limits((int)args->list.items[0].i, (int)args->list.items[1].i);
    return 0;
}

/* t.make_ctx(to, n): n new contexts here, each used for one call to `to`,
 * none released. */
static int fn_make_ctx(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    int64_t saved = dist_autograd_current();
    for (int64_t i = 0; i < args->list.items[1].i; i++) {
        dist_autograd_context_new();
        struct rpc_value r;
        if (rpc_sync(args->list.items[0].str.ptr, "t.nctx", NULL, &r, 0) < 0) {
            dist_autograd_set_current(saved);
            return rpc_request_fail(req, "%s", rpc_last_error());
        }
    }
    dist_autograd_set_current(saved);
    return 0;
}

static void register_extra(void)
{
    rpc_register("t.limits", fn_limits, NULL);
    rpc_register("t.make_ctx", fn_make_ctx, NULL);
}

static void set_limits(const char *on, int max, int idle)
{
    struct rpc_value a = rpc_list(2), r;
    a.list.items[0] = rpc_int(max);
    a.list.items[1] = rpc_int(idle);
    ck_assert_int_eq(dh_query(on, "t.limits", a, &r), 0);
}

/* A call to w1 inside a new context of ours; 0 or -1. */
static int call_in_new_context(int64_t *ctx)
{
    *ctx = dist_autograd_context_new();
    struct rpc_value r;
    int rc = rpc_sync("w1", "t.nctx", NULL, &r, 0);
    dist_autograd_set_current(0);
    return rc;
}

static void wait_nctx(const char *on, int64_t want, double timeout_s)
{
    double t0 = trib_now_s();
    int64_t n;
    while ((n = dh_remote_nctx(on)) != want && trib_now_s() - t0 < timeout_s) usleep(20000);
    ck_assert_int_eq(n, want);
}

START_TEST(test_context_bounds)
{
    dh_extra_register = register_extra;
    dh_start(3, NULL, NULL);
    set_limits("w1", 50, -1);
    enum { MORE = 2000 };
    int64_t *mine = calloc(60 + MORE, sizeof *mine);
    int n = 0;
    for (int i = 0; i < 50; i++) ck_assert_msg(call_in_new_context(&mine[n++]) == 0, "%d: %s", i, rpc_last_error());
    ck_assert_int_eq(dh_remote_nctx("w1"), 50);
    /* one more is refused, and keeps being refused: w1 holds 50 */
    ck_assert_int_eq(call_in_new_context(&mine[n++]), -1);
    ck_assert_str_eq(rpc_last_error(),
                     "rpc: w1: t.nctx: too many distributed autograd contexts from w0 here (50; the limit is 50)");
    for (int i = 0; i < MORE; i++) ck_assert_int_eq(call_in_new_context(&mine[n++]), -1);
    ck_assert_int_eq(dh_remote_nctx("w1"), 50);
    /* releasing makes room */
    for (int i = 0; i < 10; i++) ck_assert_int_eq(dist_autograd_release(mine[i]), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 40);
    ck_assert_msg(call_in_new_context(&mine[n++]) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(dh_remote_nctx("w1"), 41);
    /* idle ones go after the timeout */
    set_limits("w1", 50, 300);
    wait_nctx("w1", 0, 30.0);
    for (int i = 10; i < n; i++) dist_autograd_release(mine[i]);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    free(mine);

    /* the contexts a worker made go when it dies */
    set_limits("w1", 50, -1);
    struct rpc_value a = rpc_list(2), r;
    a.list.items[0] = rpc_str("w1");
    a.list.items[1] = rpc_int(20);
    ck_assert_msg(dh_query("w2", "t.make_ctx", a, &r) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(dh_remote_nctx("w1"), 20);
    ck_assert_int_eq(kill(DH.h.p[1].pid, SIGKILL), 0);
    ck_assert_int_eq(proc_wait(&DH.h, 1, 10), 128 + SIGKILL);
    wait_nctx("w1", 0, 2.0 * DH_HEARTBEAT_TIMEOUT_MS / 1000.0 + 3.0);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_bounds",
         { "bounds", 120, .tests = { test_context_bounds } })
