/* Context lifecycle at volume: 10,000 contexts created, used (a tiny forward
 * through a remote module and a backward) and released; every worker's RSS
 * returns near its post-warm-up baseline and no context is left anywhere.
 * Once over the default transport, once with the shared-memory links
 * forced (issue 32: the traffic counted through them, and the rings' pages
 * in the same RSS bound). */
#include "dist_harness.h"
#include "kit.h"

#if defined(__SANITIZE_ADDRESS__)
/* ASan's allocator settles slower (size-class caches, stack depot): a
 * generous bound. Without it the growth is tens of KiB. */
#define RSS_SLACK (16 << 20)
/* A small quarantine, so freed memory is reused and RSS measures leaks, not
 * ASan's 256 MiB of deferred frees. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "quarantine_size_mb=4"; }
#else
#define RSS_SLACK (4 << 20)
#endif

enum { WARMUP = 2000, CONTEXTS = 10000 };

static void one_context(struct remote_module *rm, struct tensor *x, int i)
{
    int64_t ctx = dist_autograd_context_new();
    ck_assert_int_gt(ctx, 0);
    struct tensor *y = dh_rforward(rm, x), *loss = tensor_sum(y);
    ck_assert_msg(dist_autograd_backward(ctx, 1, &loss, false) == 0, "backward %d: %s", i, rpc_last_error());
    ck_assert_msg(dist_autograd_release(ctx) == 0, "release %d: %s", i, rpc_last_error());
    tensor_free(loss);
    tensor_free(y);
}

static void many_contexts(enum rpc_transport transport)
{
    dh_transport = transport;
    dh_start(2, NULL, NULL);
    struct remote_module *rm = dh_remote_linear("w1", 2, 1, 3, DEVICE_CPU);
    struct tensor *x = dh_random(1, 2, 1);

    for (int i = 0; i < WARMUP; i++) one_context(rm, x, i);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    int64_t rss0 = dh_rss_bytes(), rss1 = dh_remote_rss("w1");
    ck_assert_int_gt(rss0, 0);
    ck_assert_int_gt(rss1, 0);

    double t0 = trib_now_s();
    for (int i = 0; i < CONTEXTS; i++) one_context(rm, x, i);
    double secs = trib_now_s() - t0;

    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    int64_t g0 = dh_rss_bytes() - rss0, g1 = dh_remote_rss("w1") - rss1;
    fprintf(stderr, "test_dist_contexts: %d contexts in %.2f s (%.0f us each); RSS growth w0 %lld KiB, w1 %lld KiB\n",
            CONTEXTS, secs, secs * 1e6 / CONTEXTS, (long long)(g0 >> 10), (long long)(g1 >> 10));
    ck_assert_msg(g0 < RSS_SLACK, "w0 RSS grew by %lld bytes over %d contexts", (long long)g0, CONTEXTS);
    ck_assert_msg(g1 < RSS_SLACK, "w1 RSS grew by %lld bytes over %d contexts", (long long)g1, CONTEXTS);
    if (transport == RPC_TRANSPORT_SHM) {
        struct rpc_stats st;
        rpc_get_stats(&st);
        ck_assert_msg(st.shm_msgs_sent >= CONTEXTS && st.shm_msgs_recv >= CONTEXTS,
                      "shm forced, but only %llu messages went out and %llu came in through shared-memory links",
                      (unsigned long long)st.shm_msgs_sent, (unsigned long long)st.shm_msgs_recv);
    }

    tensor_free(x);
    remote_module_free(rm);
    dh_stop();
}

START_TEST(test_many_contexts) { many_contexts(RPC_TRANSPORT_AUTO); }
END_TEST

/* Before each writer started again at its ring's start when it found the
 * ring empty (rpc/shm.c), each process's RSS grew by 4.7 MiB here (the
 * pages of the rings, 16 MiB per link, touched as traffic went round). */
START_TEST(test_many_contexts_shm) { many_contexts(RPC_TRANSPORT_SHM); }
END_TEST

KIT_MAIN("dist_contexts",
         { "contexts", 240, .tests = { test_many_contexts } },
         { "contexts_shm", 240, .tests = { test_many_contexts_shm } })
