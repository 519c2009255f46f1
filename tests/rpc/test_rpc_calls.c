/* Check runner of rpc/ (one of four; the world they share: rpc_world.h).
 * Calls between real worker processes on loopback: values, nested and
 * deferred calls, concurrency, errors and timeouts, futures, the transports
 * rpc chooses, autograd hooks, init's errors and cancel, a graceful
 * shutdown. */
#include "rpc_world.h"

/* ---- tests ------------------------------------------------------------------ */

START_TEST(test_echo_values)
{
    start_world(2);
    struct rpc_worker_info info;
    ck_assert_int_eq(rpc_get_worker_info("w1", &info), 0);
    ck_assert_int_eq(info.id, 1);
    ck_assert_int_eq(rpc_get_worker_info_by_id(1, &info), 0);
    ck_assert_str_eq(info.name, "w1");
    ck_assert_int_eq(rpc_get_worker_info("nobody", &info), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'nobody'");

    echo_check("w1", rpc_nil());
    echo_check("w1", rpc_bool(true));
    echo_check("w1", rpc_bool(false));
    echo_check("w1", rpc_int(INT64_MIN));
    echo_check("w1", rpc_int(INT64_MAX));
    echo_check("w1", rpc_int(-1));
    echo_check("w1", rpc_double(-0.0));
    echo_check("w1", rpc_double(1e-310));
    echo_check("w1", rpc_str(""));
    echo_check("w1", rpc_str("héllo wörld"));
    echo_check("w1", rpc_bytes("\0\1\2\377", 4));
    echo_check("w1", rpc_bytes("", 0));
    int64_t n[] = { 0, 1, 1048576 };
    for (int i = 0; i < 3; i++) {
        struct tensor *t = random_f32(n[i], 7u + (unsigned)i);
        echo_check("w1", rpc_tensor(t));
        tensor_free(t);
    }
    int64_t shape[3] = { 2, 3, 4 };
    struct tensor *ti = tensor_new(DTYPE_I64, DEVICE_CPU, 3, shape);
    for (int i = 0; i < 24; i++) ((int64_t *)tensor_data(ti))[i] = (int64_t)i * -123456789;
    tensor_set_requires_grad(ti, true);
    struct tensor *ts = tensor_scalar_f32(3.5f);
    /* requires_grad crosses the wire */
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_tensor(ti);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), 0);
    ck_assert(res.kind == RPC_TENSOR && res.tensor->requires_grad && res.tensor->ndim == 3);
    ck_assert(rpc_value_equal(&res, &args.list.items[0]));
    rpc_value_clear(&res);
    rpc_value_clear(&args);

    struct rpc_value l = rpc_list(4);
    l.list.items[0] = rpc_int(1);
    l.list.items[1] = rpc_tensor(ti);
    l.list.items[2] = rpc_list(2);
    l.list.items[2].list.items[0] = rpc_tensor(ts);
    l.list.items[2].list.items[1] = rpc_str("x");
    l.list.items[3] = rpc_map(2);
    rpc_map_set(&l.list.items[3], 0, "a", rpc_double(2.5));
    rpc_map_set(&l.list.items[3], 1, "b", rpc_list(0));
    echo_check("w1", l);
    tensor_free(ti);
    tensor_free(ts);

    /* calling ourselves works too */
    echo_check("w0", rpc_str("self"));

    /* Traffic counters: 10 echoes of a 4 MiB tensor are 10 messages and
     * at least 40 MiB each way, plus the heartbeats: a ping each way per
     * 100 ms (heartbeat_ms), however long a loaded box takes. */
    struct rpc_stats before, after;
    double t0 = trib_now_s();
    rpc_get_stats(&before);
    struct tensor *big = random_f32(1 << 20, 99u);
    for (int i = 0; i < 10; i++) {
        struct rpc_value a = rpc_list(1), r;
        a.list.items[0] = rpc_tensor(big);
        ck_assert_int_eq(rpc_sync("w1", "echo", &a, &r, 0), 0);
        rpc_value_clear(&r);
        rpc_value_clear(&a);
    }
    tensor_free(big);
    rpc_get_stats(&after);
    double secs = trib_now_s() - t0;
    uint64_t sent = after.msgs_sent - before.msgs_sent, recv = after.msgs_recv - before.msgs_recv;
    uint64_t most = 10 + (uint64_t)(secs / 0.1) + 5;
    ck_assert_msg(sent >= 10 && sent <= most, "sent %llu messages in %.2f s", (unsigned long long)sent, secs);
    ck_assert_msg(recv >= 10 && recv <= most, "received %llu messages in %.2f s", (unsigned long long)recv, secs);
    ck_assert_uint_ge(after.bytes_sent - before.bytes_sent, 10ull * 4 * 1048576);
    ck_assert_uint_lt(after.bytes_sent - before.bytes_sent, 10ull * 4 * 1048576 + 100000);
    ck_assert_uint_ge(after.bytes_recv - before.bytes_recv, 10ull * 4 * 1048576);
    /* A 4 MiB echo to ourselves goes through our own sockets both ways: the
     * request and the reply are each sent and received here. */
    big = random_f32(1 << 20, 98u);
    rpc_get_stats(&before);
    echo_check("w0", rpc_tensor(big));
    rpc_get_stats(&after);
    tensor_free(big);
    ck_assert_uint_ge(after.bytes_sent - before.bytes_sent, 2ull * 4 * 1048576);
    ck_assert_uint_lt(after.bytes_sent - before.bytes_sent, 2ull * 4 * 1048576 + 100000);
    ck_assert_uint_ge(after.bytes_recv - before.bytes_recv, 2ull * 4 * 1048576);
    ck_assert_uint_ge(after.msgs_sent - before.msgs_sent, 2);
    stop_world();
}
END_TEST

struct caller_arg { int calls; int ok; };

static void *caller_thread(void *arg)
{
    struct caller_arg *a = arg;
    for (int i = 0; i < a->calls; i++) {
        struct rpc_value r;
        if (rpc_sync("w1", "count", NULL, &r, 0) == 0 && r.kind == RPC_INT) a->ok++;
        rpc_value_clear(&r);
    }
    return NULL;
}

START_TEST(test_nested_deferred_concurrent)
{
    start_world(3);
    /* A -> B -> C */
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_str("w2");
    args.list.items[1] = rpc_int(41);
    ck_assert_msg(rpc_sync("w1", "chain", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 1042);
    rpc_value_clear(&args);

    /* deferred reply completed from another thread */
    args = rpc_list(1);
    args.list.items[0] = rpc_int(21);
    struct rpc_future *fs[8];
    for (int i = 0; i < 8; i++) fs[i] = rpc_async("w2", "deferred", &args, 0);
    ck_assert_int_eq(rpc_future_wait_all(fs, 8), 0);
    for (int i = 0; i < 8; i++) {
        ck_assert(rpc_future_done(fs[i]));
        ck_assert_int_eq(rpc_future_wait(fs[i], &res), 0);
        ck_assert_int_eq(res.i, 42);
        rpc_future_free(fs[i]);
    }
    rpc_value_clear(&args);

    /* four requests answered together by one thread (deferred, batched) */
    struct rpc_future *bf[4];
    for (int i = 0; i < 4; i++) {
        args = rpc_list(1);
        args.list.items[0] = rpc_int(10 + i);
        bf[i] = rpc_async("w1", "batched", &args, 0);
        rpc_value_clear(&args);
    }
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(rpc_future_wait(bf[i], &res) == 0, "%s", rpc_last_error());
        ck_assert_int_eq(res.list.items[0].i, 10 + 11 + 12 + 13);
        ck_assert_int_eq(res.list.items[1].i, 10 + i);
        rpc_value_clear(&res);
        rpc_future_free(bf[i]);
    }

    /* 64 concurrent callers to one worker */
    pthread_t th[64];
    struct caller_arg ca[64];
    for (int i = 0; i < 64; i++) {
        ca[i] = (struct caller_arg){ 20, 0 };
        pthread_create(&th[i], NULL, caller_thread, &ca[i]);
    }
    for (int i = 0; i < 64; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(ca[i].ok, 20);
    }
    ck_assert_int_eq(rpc_sync("w1", "count", NULL, &res, 0), 0);
    ck_assert_int_eq(res.i, 64 * 20 + 1);
    assert_nothing_dropped("w2");
    stop_world();
}
END_TEST

static atomic_int then_called;

static void then_cb(struct rpc_future *f, void *u) { if (!rpc_future_error(f)) atomic_fetch_add(&then_called, 1); }

/* rpc_future_wait_any: the lowest done index, NULL entries skipped, a
 * failed future counts as done, a timeout names itself, and more futures
 * than fit on its stack (40) work the same. */
START_TEST(test_future_wait_any)
{
    gate_close();
    start_world(2);
    struct rpc_future *fs[40] = { 0 };
    ck_assert_int_eq(rpc_future_wait_any(fs, 0, 10), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_future_wait_any: no future to wait on");
    ck_assert_int_eq(rpc_future_wait_any(fs, 3, -1), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_future_wait_any: no future to wait on");
    struct rpc_value add = rpc_list(2), res;
    add.list.items[0] = rpc_int(2);
    add.list.items[1] = rpc_int(3);
    /* replies that come only once the gate opens */
    for (int i = 1; i < 39; i++) fs[i] = rpc_async("w1", "park_gated", NULL, 0);
    double t0 = trib_now_s();
    ck_assert_int_eq(rpc_future_wait_any(fs, 39, 100), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: no future done within 100 ms");
    ck_assert_msg(trib_now_s() - t0 >= 0.095, "returned after %.3f s", trib_now_s() - t0);
    ck_assert_int_eq(rpc_future_wait_any(fs, 39, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: no future done within 0 ms");
    fs[39] = rpc_async("w1", "add", &add, 0);
    ck_assert_int_eq(rpc_future_wait_any(fs, 40, 20000), 39);
    ck_assert(!rpc_future_done(fs[1]));
    ck_assert_int_eq(rpc_future_wait(fs[39], &res), 0);
    ck_assert_int_eq(res.i, 5);
    rpc_value_clear(&res);
    /* the parked ones wake it when their replies come */
    gate_open();
    int k = rpc_future_wait_any(fs, 39, 20000);
    ck_assert_msg(k >= 1 && k < 39, "%d: %s", k, rpc_last_error());
    ck_assert_ptr_null(rpc_future_error(fs[k]));
    ck_assert_int_eq(rpc_future_wait_all(fs + 1, 39), 0);
    /* a failed future is done */
    fs[0] = rpc_async("nobody", "add", &add, 0);
    ck_assert_int_eq(rpc_future_wait_any(fs, 1, -1), 0);
    ck_assert_str_eq(rpc_future_error(fs[0]), "rpc: unknown worker 'nobody' calling nobody.add");
    for (int i = 0; i < 40; i++) rpc_future_free(fs[i]);
    rpc_value_clear(&add);
    stop_world();
}
END_TEST

START_TEST(test_errors_and_timeouts)
{
    gate_close();
    start_world(2);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(1);
    ck_assert_int_eq(rpc_sync("w1", "add", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: add: expected 2 arguments");
    ck_assert_int_eq(rpc_sync("w1", "nosuch", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: unknown function 'nosuch'");
    ck_assert_int_eq(rpc_sync("w9", "add", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'w9' calling w9.add");
    rpc_value_clear(&args);

    /* a call answered only once the gate opens (30 s at most): its 100 ms
     * timeout ends it */
    double t0 = trib_now_s();
    ck_assert_int_eq(rpc_sync("w1", "gated", NULL, &res, 100), -1);
    double dt = trib_now_s() - t0;
    ck_assert_str_eq(rpc_last_error(), "rpc: timed out after 100 ms calling w1.gated");
    ck_assert_msg(dt >= 0.095 && dt < GATE_CAP_S / 3, "timeout took %.3f s", dt);
    gate_open();
    /* the late reply is dropped; the worker keeps serving */
    args = rpc_list(1);
    args.list.items[0] = rpc_int(600);
    struct rpc_future *f = rpc_async("w1", "slow", &args, 0);
    rpc_future_then(f, then_cb, NULL);
    ck_assert_int_eq(rpc_future_wait(f, NULL), 0);
    rpc_future_free(f);
    ck_assert_int_eq(atomic_load(&then_called), 1);
    rpc_value_clear(&args);
    args = rpc_list(2);
    args.list.items[0] = rpc_int(2);
    args.list.items[1] = rpc_int(3);
    ck_assert_int_eq(rpc_sync("w1", "add", &args, &res, 0), 0);
    ck_assert_int_eq(res.i, 5);
    rpc_value_clear(&args);
    /* Internal calls to worker ids that cannot exist (a header's sender may
     * be -1, and a recv function calls its sender back) fail at once. */
    int bad[] = { -1, -2, 1 << 20 };
    for (int i = 0; i < 3; i++) {
        f = rpc_async_id(bad[i], "add", NULL, -1);
        t0 = trib_now_s();
        while (!rpc_future_done(f) && trib_now_s() - t0 < 30) usleep(1000);
        ck_assert_msg(rpc_future_done(f), "a call to worker %d is still pending", bad[i]);
        char want[128];
        snprintf(want, sizeof want, "rpc: worker %d is not reachable calling add", bad[i]);
        ck_assert_str_eq(rpc_future_error(f), want);
        rpc_future_free(f);
    }
    stop_world();
}
END_TEST

/* While a call waits for its answer, the I/O thread sleeps until the next
 * heartbeat or the call's deadline: about two wake-ups per heartbeat (its
 * own ping, the peer's), not a 5 ms tick (20 per 100 ms heartbeat). */
START_TEST(test_io_sleeps_while_a_call_waits)
{
    gate_close();
    start_world(2);
    struct rpc_future *f = rpc_async("w1", "gated", NULL, 0);
    struct rpc_stats before, after;
    rpc_get_stats(&before);
    double t0 = trib_now_s();
    do {
        usleep(1000);
        rpc_get_stats(&after);
    } while (after.msgs_recv - before.msgs_recv < 10 && trib_now_s() - t0 < GATE_CAP_S / 2);
    ck_assert_msg(!rpc_future_done(f), "the gated call was answered");
    uint64_t pings = after.msgs_recv - before.msgs_recv, woke = after.io_wakeups - before.io_wakeups;
    ck_assert_uint_ge(pings, 10);
    ck_assert_msg(woke <= 3 * pings + 10, "the I/O thread woke %llu times for %llu heartbeats",
                  (unsigned long long)woke, (unsigned long long)pings);
    gate_open();
    ck_assert_int_eq(rpc_future_wait(f, NULL), 0);
    rpc_future_free(f);
    stop_world();
}
END_TEST

/* ---- transports --------------------------------------------------------------- */

/* Connected Unix-domain sockets on path (accepted ones carry their
 * listener's path in /proc/net/unix): the connections made through an
 * ipc:// twin. */
static int unix_conns(const char *ipc_ep)
{
    if (strncmp(ipc_ep, "ipc://", 6) != 0) return 0;
    FILE *f = fopen("/proc/net/unix", "r");
    ck_assert_ptr_nonnull(f);
    char line[512], path[400];
    unsigned st;
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%*s %*s %*s %*s %*s %x %*s %399s", &st, path) == 2 && st == 3 && strcmp(path, ipc_ep + 6) == 0) n++;
    fclose(f);
    return n;
}

/* What w1 reaches `name` through. */
static void via_from_w1(const char *name, char *out, size_t cap)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_str(name);
    ck_assert_msg(rpc_sync("w1", "via", &args, &res, 0) == 0, "%s", rpc_last_error());
    snprintf(out, cap, "%s", res.str.ptr);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
}

/* The transport every process of a 3-worker world uses: ipc:// twins on
 * this host by default and when forced, tcp:// when forced (by
 * TRIB_RPC_TRANSPORT or rpc_opts.transport); calls work either way, and
 * the Unix-domain connections on the twins exist exactly when ipc is used. */
static void check_world_transport(bool want_ipc)
{
    struct rpc_worker_info wi[3];
    char via[160];
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(rpc_get_worker_info(NAMES[k], &wi[k]), 0);
        ck_assert_msg(strncmp(wi[k].endpoint, "tcp://127.0.0.1:", 16) == 0, "%s", wi[k].endpoint);
        ck_assert_msg(strncmp(wi[k].via, want_ipc ? "ipc:///tmp/trib-rpc-" : "tcp://", 6) == 0 &&
                      (!want_ipc || strstr(wi[k].via, "-127.0.0.1-")), "%s: via %s", NAMES[k], wi[k].via);
        if (!want_ipc) ck_assert_str_eq(wi[k].via, wi[k].endpoint);
        via_from_w1(NAMES[k], via, sizeof via);
        ck_assert_str_eq(via, wi[k].via);          /* one twin per worker, whoever looks */
    }
    echo_check("w1", rpc_str("over the twin"));
    echo_check("w2", rpc_str("over the twin"));
    check_reachable("w2", "w1 to w2", 0);
    for (int k = 1; k < 3; k++) {
        int n = unix_conns(wi[k].via);
        if (want_ipc) ck_assert_msg(n >= 1, "%s: %d connections on %s", NAMES[k], n, wi[k].via);
        else ck_assert_int_eq(n, 0);
        /* and no twin is left lying around when tcp is forced */
        char twin[200];
        snprintf(twin, sizeof twin, "/tmp/trib-rpc-%u/", (unsigned)getuid());
        DIR *d = opendir(twin);
        if (!want_ipc && d) {
            const char *port = strrchr(wi[k].endpoint, ':');
            struct dirent *e;
            while ((e = readdir(d))) {
                const char *dash = strrchr(e->d_name, '-');
                ck_assert_msg(!dash || strcmp(dash + 1, port + 1) != 0, "a twin %s with tcp forced", e->d_name);
            }
        }
        if (d) closedir(d);
    }
}

START_TEST(test_transport_auto_ipc)
{
    unsetenv("TRIB_RPC_TRANSPORT");
    start_world(3);
    check_world_transport(true);
    stop_world();
}
END_TEST

START_TEST(test_transport_forced_tcp_env)
{
    setenv("TRIB_RPC_TRANSPORT", "tcp", 1);      /* the children inherit it */
    start_world(3);
    check_world_transport(false);
    stop_world();
}
END_TEST

START_TEST(test_transport_forced_ipc_opt)
{
    setenv("TRIB_RPC_TRANSPORT", "tcp", 1);      /* the option wins over the variable */
    transport = RPC_TRANSPORT_IPC;
    start_world(3);
    check_world_transport(true);
    stop_world();
}
END_TEST

/* Forced shm (issue 32): calls go through shared-memory links once set
 * up under each ipc:// connection (rpc_stats counts them apart), both ways
 * and between workers, tensors included; nothing is left in /dev/shm. */
static bool shm_carried(void *arg)
{
    (void)arg;
    echo_check("w1", rpc_str("over shared memory"));
    struct rpc_stats st;
    rpc_get_stats(&st);
    return st.shm_msgs_sent > 0 && st.shm_msgs_recv > 0;
}

START_TEST(test_transport_forced_shm)
{
    unsetenv("TRIB_RPC_TRANSPORT");
    transport = RPC_TRANSPORT_SHM;
    start_world(3);
    check_world_transport(true);
    ck_assert_msg(kit_wait_until(shm_carried, NULL, 30), "no call went through a shared-memory link in 30 s");
    struct rpc_stats before, after;
    rpc_get_stats(&before);
    for (int k = 0; k < 20; k++) {
        struct tensor *t = random_f32(100000, (unsigned)k);
        echo_check("w1", rpc_tensor(t));
        tensor_free(t);
        echo_check("w2", rpc_int(k));
    }
    /* bigger than a link's ring (8 MiB): it goes over the socket, once what
     * was sent into the link before it has been read, then the link again */
    struct tensor *big = random_f32(3 << 20, 5);
    for (int k = 0; k < 3; k++) {
        echo_check("w1", rpc_tensor(big));
        echo_check("w1", rpc_int(k));
    }
    tensor_free(big);
    check_reachable("w2", "w1 to w2", 0);
    rpc_get_stats(&after);
    /* the calls above went through the links (heartbeats stay on the sockets) */
    ck_assert_uint_ge(after.shm_msgs_sent - before.shm_msgs_sent, 20);
    ck_assert_uint_ge(after.shm_bytes_recv - before.shm_bytes_recv, 20 * 400000);
    ck_assert_uint_le(after.shm_msgs_sent, after.msgs_sent);
    stop_world();
    DIR *d = opendir("/dev/shm");
    if (d) {
        for (struct dirent *e; (e = readdir(d));) ck_assert_msg(!strstr(e->d_name, "trib"), "/dev/shm/%s left", e->d_name);
        closedir(d);
    }
}
END_TEST

/* Rank 0's rendezvous wait ends, with its own error, once its cancel flag
 * is raised (what a signal handler does; tributary-agent's test raises it
 * with a real SIGINT mid-wait), not at init_timeout_ms. */
static volatile sig_atomic_t cancel_flag;

START_TEST(test_init_cancelled)
{
    struct rpc_opts o = { .name = "master", .rank = 0, .world_size = 3, .master = "tcp://127.0.0.1:0",
                          .init_timeout_ms = 60000, .cancel = &cancel_flag };
    cancel_flag = 1;
    int64_t t0 = trib_now_ms();
    ck_assert_int_eq(rpc_init(&o), -1);
    int64_t took = trib_now_ms() - t0;
    ck_assert_str_eq(rpc_last_error(), "rpc_init: interrupted while waiting for the rendezvous (1 of 3 workers arrived)");
    ck_assert_msg(took < 30000, "rpc_init returned after %lld ms", (long long)took);
    /* the agent is gone: a new one starts */
    cancel_flag = 0;
    o.world_size = 1;
    ck_assert_msg(rpc_init(&o) == 0, "%s", rpc_last_error());
    rpc_shutdown(false);
}
END_TEST

START_TEST(test_init_errors)
{
    struct rpc_opts o = { .name = "x", .rank = 3, .world_size = 2, .master = "tcp://127.0.0.1:0" };
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: rank 3 out of range for world size 2");
    o.rank = 0;
    o.name = NULL;
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: a worker name (1..63 bytes) is required");
    o.name = "x";
    o.rank = 1;
    o.master = "bogus://127.0.0.1:1";
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: rpc: cannot connect to 'bogus://127.0.0.1:1': Protocol not supported");
    o.master = "tcp://127.0.0.1:1";      /* nobody there */
    o.init_timeout_ms = 300;
    ck_assert_int_eq(rpc_init(&o), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: rendezvous with tcp://127.0.0.1:1 failed: rpc: timed out after 300 ms calling (rendezvous).__hello");
    /* environment variables, torchrun style */
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "0", 1);
    struct rpc_opts e = { .name = "solo", .rank = RPC_RANK_ENV };
    register_all();         /* hooks before rpc_init: the I/O thread reads them */
    ck_assert_msg(rpc_init(&e) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(rpc_self()->id, 0);
    ck_assert(strncmp(rpc_master_endpoint(), "tcp://127.0.0.1:", 16) == 0);
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_int(2);
    args.list.items[1] = rpc_int(2);
    ck_assert_int_eq(rpc_sync("solo", "add", &args, &res, 0), 0);
    ck_assert_int_eq(res.i, 4);
    rpc_value_clear(&args);
    rpc_shutdown(true);
    /* Slurm's names */
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    ck_assert_msg(rpc_init(&e) == 0, "%s", rpc_last_error());
    rpc_shutdown(false);
}
END_TEST

START_TEST(test_autograd_hooks)
{
    start_world(2);
    int64_t shape[1] = { 3 };
    struct tensor *plain = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    struct tensor *g = tensor_new(DTYPE_F32, DEVICE_CPU, 1, shape);
    tensor_set_requires_grad(g, true);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_list(2);                   /* nested tensors are seen too */
    args.list.items[0].list.items[0] = rpc_tensor(plain);
    args.list.items[0].list.items[1] = rpc_tensor(g);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), 0);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    /* no tensor requiring grad: no ids */
    args = rpc_list(1);
    args.list.items[0] = rpc_tensor(plain);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), 0);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    ck_assert_int_eq(rpc_sync("w1", "hook_log", NULL, &res, 0), 0);
    ck_assert_str_eq(res.str.ptr, "req from 0 ctx 42 msg 7 n 2 grad 1;");
    rpc_value_clear(&res);
    pthread_mutex_lock(&hook_mu);
    ck_assert_str_eq(hook_log, "resp from 1 ctx 42 msg 8 n 2 grad 1;");
    pthread_mutex_unlock(&hook_mu);
    tensor_free(plain);
    tensor_free(g);
    stop_world();
}
END_TEST

START_TEST(test_graceful_shutdown_waits)
{
    start_world(2);
    /* a value nested too deep is refused at the sender */
    struct rpc_value deep = rpc_list(1), *cur = &deep.list.items[0];
    for (int i = 0; i < 40; i++) {
        *cur = rpc_list(1);
        cur = &cur->list.items[0];
    }
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = deep;
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: value nested deeper than 32");
    rpc_value_clear(&args);
    /* arguments must be a list */
    struct rpc_value notlist = rpc_int(3);
    ck_assert_int_eq(rpc_sync("w1", "echo", &notlist, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: arguments to echo must be a list, not int");

    args = rpc_list(1);
    args.list.items[0] = rpc_int(300);
    double t0 = trib_now_s();
    struct rpc_future *f = rpc_async("w1", "slow", &args, 0);
    rpc_value_clear(&args);
    rpc_shutdown(true);                  /* waits for the call in flight */
    ck_assert(trib_now_s() - t0 >= 0.29);
    ck_assert(rpc_future_done(f));
    ck_assert_msg(rpc_future_wait(f, NULL) == 0, "%s", rpc_last_error());
    rpc_future_free(f);
    for (int i = 0; i < H.n; i++) ck_assert_int_eq(proc_wait(&H, i, 30), 0);
    /* after shutdown, calls fail cleanly */
    ck_assert_int_eq(rpc_sync("w1", "echo", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'w1' calling w1.echo");
}
END_TEST

KIT_MAIN("rpc",
         { "calls", 120, .tests = { test_init_errors,
                                            test_init_cancelled,
                                            test_echo_values,
                                            test_nested_deferred_concurrent,
                                            test_errors_and_timeouts,
                                            test_io_sleeps_while_a_call_waits,
                                            test_future_wait_any,
                                            test_transport_auto_ipc,
                                            test_transport_forced_tcp_env,
                                            test_transport_forced_ipc_opt,
                                            test_transport_forced_shm,
                                            test_autograd_hooks,
                                            test_graceful_shutdown_waits } })
