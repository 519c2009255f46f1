/* Check runner of rpc/ (one of four; the world they share: rpc_world.h).
 * RRefs between real processes: lifecycles, a delete during a call, a
 * method table changed, a slow to_value, a non-holder and unguessable ids. */
#include "rpc_world.h"

static void wait_int(const char *to, const char *fn, int64_t want)
{
    double t0 = trib_now_s();
    int64_t got;
    while ((got = call_int(to, fn)) != want && trib_now_s() - t0 < 30) usleep(5000);
    ck_assert_msg(got == want, "%s.%s = %lld, want %lld", to, fn, (long long)got, (long long)want);
}

START_TEST(test_rref_lifecycle)
{
    gate_close();
    start_world(3);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(5);
    struct rref *r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert(!rref_is_owner(r));
    ck_assert_int_eq(rref_owner(r), 1);
    ck_assert_uint_eq(rref_id(r) >> 48, 0);         /* created by worker 0 */
    args.list.items[0] = rpc_int(3);
    ck_assert_msg(rref_rpc_sync(r, "add", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 8);
    ck_assert_int_eq(rref_to_here(r, &res, 0), 0);
    ck_assert_int_eq(res.i, 8);
    ck_assert(rref_confirmed_by_owner(r));
    ck_assert_ptr_null(rref_local_object(r));
    ck_assert_str_eq(rpc_last_error(), "rref_local_object: this worker is not the owner");
    ck_assert_int_eq(call_int("w1", "owned"), 1);

    /* user -> user fork across three workers (G2), then the first user goes */
    struct rpc_value a = rpc_list(1);
    a.list.items[0] = rpc_rref(r);
    ck_assert_int_eq(rpc_sync("w2", "hold", &a, &res, 0), 0);
    ck_assert(res.kind == RPC_BOOL && !res.b);
    rpc_value_clear(&a);
    rref_free(r);
    usleep(100000);
    ck_assert_int_eq(call_int("w1", "destroyed"), 0);
    ck_assert_int_eq(call_int("w1", "owned"), 1);
    ck_assert_int_eq(rpc_sync("w2", "use_held", NULL, &res, 0), 0);
    ck_assert_int_eq(res.i, 9);
    ck_assert_int_eq(rpc_sync("w2", "drop", NULL, &res, 0), 0);
    wait_int("w1", "destroyed", 1);
    wait_int("w1", "owned", 0);

    /* an RRef passed back to its owner resolves locally */
    args.list.items[0] = rpc_int(77);
    r = rpc_remote("w1", "counter", &args, 0);
    a = rpc_list(1);
    a.list.items[0] = rpc_rref(r);
    ck_assert_int_eq(rpc_sync("w1", "local", &a, &res, 0), 0);
    ck_assert(res.list.items[0].b);
    ck_assert_int_eq(res.list.items[1].i, 77);
    rpc_value_clear(&res);
    rpc_value_clear(&a);
    rref_free(r);
    wait_int("w1", "destroyed", 2);
    wait_int("w1", "owned", 0);

    /* an RRef returned as a result: w2 creates it on w1, hands it to us */
    a = rpc_list(1);
    a.list.items[0] = rpc_str("w1");
    ck_assert_int_eq(rpc_sync("w2", "make_remote", &a, &res, 0), 0);
    rpc_value_clear(&a);
    ck_assert_int_eq(res.kind, RPC_RREF);
    struct rpc_value v;
    ck_assert_msg(rref_to_here(res.rref, &v, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(v.i, 100);
    rpc_value_clear(&res);
    wait_int("w1", "destroyed", 3);
    wait_int("w1", "owned", 0);

    /* remote over a plain function holds its value */
    args.list.items[0] = rpc_str("kept");
    r = rpc_remote("w2", "echo", &args, 0);
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);
    ck_assert_str_eq(v.str.ptr, "kept");
    rpc_value_clear(&v);
    rref_free(r);
    wait_int("w2", "owned", 0);

    /* a constructor error surfaces on use */
    rpc_value_clear(&args.list.items[0]);
    args.list.items[0] = rpc_str("not an int");
    r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_int_eq(rref_to_here(r, &v, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: counter: expected an int");
    rref_free(r);
    wait_int("w1", "owned", 0);

    /* owner-local RRef */
    rpc_value_clear(&args.list.items[0]);
    args.list.items[0] = rpc_int(11);
    r = rpc_remote("w0", "counter", &args, 0);
    ck_assert(rref_is_owner(r));
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);
    ck_assert_int_eq(v.i, 11);
    ck_assert_ptr_nonnull(rref_local_object(r));
    ck_assert_ptr_null(rref_local_value(r));
    ck_assert_str_eq(rpc_last_error(), "rref_local_value: the RRef holds an object of type Counter");
    ck_assert_int_eq(rref_owned_count(), 1);
    rref_free(r);
    ck_assert_int_eq(rref_owned_count(), 0);

    /* an owner-local to_here honours its timeout while the construction
     * waits for a handler thread (all 4 of ours wait at the gate) */
    struct rpc_future *busy[4];
    for (int i = 0; i < 4; i++) busy[i] = rpc_async("w0", "gated", NULL, 0);
    gate_await(4);
    rpc_value_clear(&args.list.items[0]);
    args.list.items[0] = rpc_int(12);
    r = rpc_remote("w0", "counter", &args, 0);
    double t0 = trib_now_s();
    ck_assert_int_eq(rref_to_here(r, &v, 100), -1);
    double dt = trib_now_s() - t0;
    char want[128];
    snprintf(want, sizeof want, "rpc: timed out after 100 ms waiting for RRef %#llx to be built",
             (unsigned long long)rref_id(r));
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert_msg(dt < GATE_CAP_S / 3, "to_here took %.3f s", dt);
    gate_open();
    ck_assert_int_eq(rref_to_here(r, &v, 0), 0);       /* built once a thread is free */
    ck_assert_int_eq(v.i, 12);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(rpc_future_wait(busy[i], NULL), 0);
        rpc_future_free(busy[i]);
    }
    rref_free(r);
    ck_assert_int_eq(rref_owned_count(), 0);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

/* A user deleted right after a method call it made: the owner serves the
 * call, keeping the object until it returns, then destroys it (G1). */
/* A method call through an RRef made before its type's method table
 * changed runs what is registered now: a replaced method's new code, a
 * method added since. An inline method answers while every handler thread
 * of the owner is busy; an unknown one fails by name. */
START_TEST(test_rref_method_table_changed)
{
    gate_close();
    start_world(2);
    struct rpc_value a = rpc_list(1), res;
    a.list.items[0] = rpc_int(10);
    struct rref *r = rpc_remote("w1", "counter", &a, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(rref_rpc_sync(r, "add", &a, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 20);
    ck_assert_int_eq(rref_rpc_sync(r, "peek", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: __rref_call: type Counter has no method 'peek'");
    ck_assert_int_eq(rpc_sync("w1", "swap_methods", NULL, &res, 0), 0);
    ck_assert_msg(rref_rpc_sync(r, "add", &a, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 10);                    /* the new add subtracts */
    ck_assert_msg(rref_rpc_sync(r, "peek", NULL, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 10);
    /* every handler thread of w1 held at the gate (4, the default): an
     * inline method still answers, a pooled one waits */
    struct rpc_future *busy[4];
    for (int i = 0; i < 4; i++) busy[i] = rpc_async("w1", "gated", NULL, 0);
    gate_await(4);
    struct rpc_value zero = rpc_list(1);
    zero.list.items[0] = rpc_int(0);
    struct rpc_future *pooled = rref_rpc_async(r, "slow_get", &zero, 0);
    rpc_value_clear(&zero);
    ck_assert_msg(rref_rpc_sync(r, "peek", NULL, &res, 10000) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 10);
    ck_assert(!rpc_future_done(pooled));
    gate_open();
    ck_assert_int_eq(rpc_future_wait_all(busy, 4), 0);
    for (int i = 0; i < 4; i++) rpc_future_free(busy[i]);
    ck_assert_msg(rpc_future_wait(pooled, NULL) == 0, "%s", rpc_last_error());
    rpc_future_free(pooled);
    rpc_value_clear(&a);
    rref_free(r);
    stop_world();
}
END_TEST

START_TEST(test_rref_del_during_call)
{
    start_world(2);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(5);
    struct rref *r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(rref_to_here(r, &res, 0), 0);
    ck_assert_int_eq(res.i, 5);
    args.list.items[0] = rpc_int(300);
    /* the delete follows the call on the wire, before or while it runs */
    struct rpc_future *f = rref_rpc_async(r, "slow_get", &args, 0);
    rref_free(r);
    ck_assert_msg(rpc_future_wait(f, &res) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 5);
    rpc_future_free(f);
    wait_int("w1", "destroyed", 1);
    wait_int("w1", "owned", 0);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

static void *to_here_thread(void *arg)
{
    struct rpc_value v;
    intptr_t rc = rref_to_here(arg, &v, 0) == 0 && v.i == 5 ? 0 : 1;
    return (void *)rc;
}

/* A slow to_value on the owner does not stall its I/O thread: RRef
 * operations that run there (a method call arriving, a delete) go on. The
 * to_value runs until the method call has returned (the gate): were the
 * call stuck behind it, it would wait out the gate's 30 s. */
START_TEST(test_rref_slow_to_value)
{
    gate_close();
    start_world(2);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(1);
    struct rref *slow = rpc_remote("w1", "slowval", NULL, 0), *c = rpc_remote("w1", "counter", &args, 0);
    ck_assert_int_eq(rref_rpc_sync(c, "add", &args, &res, 0), 0);     /* both built */
    pthread_t t;
    pthread_create(&t, NULL, to_here_thread, slow);
    gate_await(1);                      /* w1 is in SlowVal's to_value */
    double t0 = trib_now_s();
    int rc = rref_rpc_sync(c, "add", &args, &res, 0);
    double dt = trib_now_s() - t0;
    gate_open();
    ck_assert_msg(rc == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 3);
    ck_assert_msg(dt < GATE_CAP_S / 3, "a method call waited %.3f s for another RRef's to_value", dt);
    void *trc;
    pthread_join(t, &trc);
    ck_assert_ptr_null(trc);
    rref_free(slow);
    rref_free(c);
    wait_int("w1", "owned", 0);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

/* N11 (issue 24): a member that holds no fork of an RRef can neither
 * delete one nor use the RRef. w0 holds an RRef owned by w1; w2, a
 * legitimate member that was handed the RRef's id and w0's fork id, asks
 * w1 to call a method on it, fetch it and delete w0's fork. The owner
 * knows the fork was given to w0 and refuses each; w0's RRef keeps
 * working, untouched, and its own delete still frees the object. Before:
 * w2's call changed the object, and its delete freed it so that w0's
 * to_here failed with "unknown RRef". */
START_TEST(test_rref_non_holder)
{
    start_world(3);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(5);
    struct rref *r = rpc_remote("w1", "counter", &args, 0);
    ck_assert_msg(r != NULL, "%s", rpc_last_error());
    rpc_value_clear(&args);
    ck_assert_int_eq(call_int("w1", "owned"), 1);
    char err[1024], want[256];
    struct rpc_value cargs = rpc_list(3);
    cargs.list.items[0] = rpc_int((int64_t)rref_id(r));
    cargs.list.items[1] = rpc_str("add");
    cargs.list.items[2] = rpc_list(1);
    cargs.list.items[2].list.items[0] = rpc_int(1000);
    relay("w2", "w1", "__rref_call", cargs, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: __rref_call: w2 holds no fork of RRef %#llx", (unsigned long long)rref_id(r));
    ck_assert_str_eq(err, want);
    struct rpc_value fargs = rpc_list(1);
    fargs.list.items[0] = rpc_int((int64_t)rref_id(r));
    relay("w2", "w1", "__rref_fetch", fargs, err, sizeof err);
    snprintf(want, sizeof want, "rpc: w1: __rref_fetch: w2 holds no fork of RRef %#llx", (unsigned long long)rref_id(r));
    ck_assert_str_eq(err, want);
    snprintf(want, sizeof want, "rpc: w1: __rref_del: w2 holds no fork %#llx of RRef %#llx",
             (unsigned long long)r->fork_id, (unsigned long long)rref_id(r));
    for (int i = 0; i < 2; i++) {          /* a second try finds nothing freed either */
        relay("w2", "w1", "__rref_del", rref_two_ints(rref_id(r), r->fork_id), err, sizeof err);
        ck_assert_str_eq(err, want);
    }
    ck_assert_int_eq(call_int("w1", "owned"), 1);
    ck_assert_int_eq(call_int("w1", "destroyed"), 0);
    args = rpc_list(1);
    args.list.items[0] = rpc_int(2);
    ck_assert_msg(rref_rpc_sync(r, "add", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 7);
    rpc_value_clear(&args);
    /* the owner's own fork table: w0 (the holder) deletes as before */
    rref_free(r);
    wait_int("w1", "destroyed", 1);
    wait_int("w1", "owned", 0);
    stop_world();
}
END_TEST

/* Ids are not guessable (issue 24, N11's second layer): RRef and fork ids
 * keep the creator in the top 16 bits, and the rest of consecutive ones
 * is no counter. */
START_TEST(test_rref_ids_unguessable)
{
    start_world(2);
    enum { N = 32 };
    uint64_t ids[N], forks[N];
    struct rref *rs[N];
    for (int i = 0; i < N; i++) {
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_int(i);
        rs[i] = rpc_remote("w1", "counter", &args, 0);
        ck_assert_msg(rs[i] != NULL, "%s", rpc_last_error());
        rpc_value_clear(&args);
        ids[i] = rref_id(rs[i]);
        forks[i] = rs[i]->fork_id;
    }
    uint64_t all[2 * N];
    for (int i = 0; i < N; i++) {
        ck_assert_uint_eq(ids[i] >> 48, 0);
        ck_assert_uint_eq(forks[i] >> 48, 0);
        all[2 * i] = ids[i];
        all[2 * i + 1] = forks[i];
    }
    int near = 0;           /* a counter puts all 64 within 64 of each other */
    for (int i = 0; i < 2 * N; i++)
        for (int j = i + 1; j < 2 * N; j++) {
            ck_assert_uint_ne(all[i], all[j]);
            near += (all[i] > all[j] ? all[i] - all[j] : all[j] - all[i]) < 1024;
        }
    ck_assert_msg(near == 0, "%d pairs of ids less than 1024 apart", near);
    for (int i = 0; i < N; i++) rref_free(rs[i]);
    wait_int("w1", "owned", 0);
    stop_world();
}
END_TEST

KIT_MAIN("rpc",
         { "rrefs", 120, .tests = { test_rref_lifecycle,
                                            test_rref_del_during_call,
                                            test_rref_method_table_changed,
                                            test_rref_slow_to_value,
                                            test_rref_non_holder,
                                            test_rref_ids_unguessable } })
