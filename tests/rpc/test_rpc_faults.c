/* Check runner of rpc/ (one of four; the world they share: rpc_world.h).
 * Failures of the world itself: a peer killed, members that join late, leave
 * or rejoin under their rank, a worker that waits for its rendezvous, a
 * dead worker's pings, forks and ids, a response that fails its call, ipc
 * refused, a dead worker's address taken by a stranger, a frame over the
 * bound refused with the connection kept. */
#include "rpc_world.h"

START_TEST(test_kill9_peer)
{
    hb_timeout_ms = 1000;
    start_world(3);
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(30000);
    struct rpc_future *fs[5];
    for (int i = 0; i < 5; i++) fs[i] = rpc_async("w1", "slow", &args, 60000);
    rpc_value_clear(&args);
    usleep(100000);
    kill(H.p[0].pid, SIGKILL);
    double t0 = trib_now_s();
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(rpc_future_wait(fs[i], NULL), -1);
        ck_assert_str_eq(rpc_last_error(), "rpc: lost w1 (no heartbeat for 1000 ms) calling w1.slow");
        rpc_future_free(fs[i]);
    }
    /* Promptly: a second after w1's last ping, give or take a loaded box's
     * delays; their own ends (the reply, the call timeout) are 30 and 60 s
     * away. */
    double dt = trib_now_s() - t0;
    ck_assert_msg(dt < 10.0, "pending calls failed after %.3f s (heartbeat timeout 1 s)", dt);
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 1000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w1");
    /* the others carry on */
    args = rpc_list(1);
    args.list.items[0] = rpc_str("still here");
    ck_assert_int_eq(rpc_sync("w2", "echo", &args, &res, 0), 0);
    ck_assert_str_eq(res.str.ptr, "still here");
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    ck_assert_int_eq(rpc_sync("w1", "echo", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: unknown worker 'w1' calling w1.echo");
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 0, 10), 128 + SIGKILL);
    ck_assert_int_eq(proc_wait(&H, 1, 30), 0);
}
END_TEST

/* Receives requests on fw's router until one calls fn (without tensors);
 * leaves its envelope and header in in[0..1] and returns its request id. */
static uint64_t fake_recv_call(struct fake_worker *fw, const char *fn, zmq_msg_t in[2])
{
    uint64_t req_id = 0;
    while (!req_id) {                   /* skip the directory sent first */
        zmq_pollitem_t it = { .socket = fw->router, .events = ZMQ_POLLIN };
        ck_assert_int_eq(zmq_poll(&it, 1, 5000), 1);
        for (int i = 0; i < 2; i++) {
            zmq_msg_init(&in[i]);
            ck_assert_int_ge(zmq_msg_recv(&in[i], fw->router, 0), 0);
        }
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        ck_assert_int_eq(msgpack_unpack_next(&u, zmq_msg_data(&in[1]), zmq_msg_size(&in[1]), NULL),
                         MSGPACK_UNPACK_SUCCESS);
        const msgpack_object *f = &u.data.via.array.ptr[4];
        if (f->type == MSGPACK_OBJECT_STR && f->via.str.size == strlen(fn) && memcmp(f->via.str.ptr, fn, strlen(fn)) == 0)
            req_id = u.data.via.array.ptr[2].via.u64;
        msgpack_unpacked_destroy(&u);
        if (!req_id) for (int i = 0; i < 2; i++) zmq_msg_close(&in[i]);
    }
    return req_id;
}

/* A heartbeat from fw (worker `id`), so the master keeps it alive. */
static void fake_ping(struct fake_worker *fw, int id)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 4, 0, id, NULL, 0);
    msgpack_pack_nil(&pk);
    zmq_send(fw->dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
}

/* ---- membership ------------------------------------------------------------ */

static int late_child(int idx, const char *master, void *arg)
{
    register_all();
    struct rpc_opts o = { .name = "late", .rank = RPC_RANK_DYNAMIC, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms };
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "late: %s\n", rpc_last_error());
        return 10;
    }
    int id = rpc_self()->id;
    while (!atomic_load(&leave_now)) usleep(2000);
    rpc_shutdown(true);
    return id == 2 ? 0 : 11;
}

START_TEST(test_membership)
{
    static int w = 2;
    register_all();
    struct proc_group late;
    h_spawn(&H, 1, serve_child, &w);
    h_spawn(&late, 1, late_child, NULL);
    struct rpc_opts o = opts_for(0, 2, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &H;
    ck_assert_msg(rpc_init(&o) == 0, "%s", rpc_last_error());
    usleep(50000);
    proc_hand_out(&late, -1, rpc_master_endpoint());
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_str_eq(ev.name, "late");
    ck_assert_int_eq(ev.id, 2);
    struct rpc_value res;
    /* the late worker answers, and the static worker can call it too */
    check_reachable("late", "hi late", 0);
    ck_assert_int_eq(rpc_sync("late", "leave", NULL, &res, 0), 0);
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_LEAVE);
    ck_assert_str_eq(ev.name, "late");
    ck_assert_int_eq(proc_wait(&late, 0, 10), 0);
    /* the other worker heard of both */
    double t0 = trib_now_s();
    for (;;) {
        ck_assert_int_eq(rpc_sync("w1", "events", NULL, &res, 0), 0);
        bool done = strcmp(res.str.ptr, "join:late,leave:late,") == 0;
        if (done || trib_now_s() - t0 > 5) {
            ck_assert_str_eq(res.str.ptr, "join:late,leave:late,");
            rpc_value_clear(&res);
            break;
        }
        rpc_value_clear(&res);
        usleep(10000);
    }
    ck_assert_int_eq(rpc_get_worker_info("late", &(struct rpc_worker_info){ 0 }), -1);
    assert_nothing_dropped("w1");
    stop_world();
}
END_TEST

/* A dynamic worker that left with a call of ours unanswered keeps its id
 * while its reply may still come (a heartbeat timeout): a worker joining
 * meanwhile gets another id, and the late reply still completes the call. */
START_TEST(test_left_worker_id_not_reused_while_draining)
{
    /* a silent fake worker is dropped; 3 s, not 1: fakeA never pings, so
     * its leave, and its late reply after the leave, must each come within
     * the timeout of its last message, several round trips through w0 */
    hb_timeout_ms = 3000;
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a, b;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_int_eq(ev.id, 2);
    /* a call to fakeA, which it receives and holds */
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(42);
    struct rpc_future *f = rpc_async("fakeA", "echo", &args, -1);
    rpc_value_clear(&args);
    zmq_msg_t in[2];
    uint64_t req_id = fake_recv_call(&a, "echo", in);
    /* fakeA leaves (as worker 2), then fakeB joins at once */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 0, 2, "__leave", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 2);
    zmq_send(a.dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_LEAVE);
    ck_assert_str_eq(ev.name, "fakeA");
    fake_join(zctx, &b, "fakeB");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_str_eq(ev.name, "fakeB");
    ck_assert_int_eq(ev.id, 3);
    /* fakeA's late reply still lands */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 2, req_id, 2, NULL, 0);
    msgpack_pack_int(&pk, 42);
    zmq_msg_send(&in[0], a.router, ZMQ_SNDMORE);
    zmq_send(a.router, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    zmq_msg_close(&in[0]);
    zmq_msg_close(&in[1]);
    ck_assert_msg(rpc_future_wait(f, &res) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 42);
    rpc_future_free(f);
    fake_close(&a);
    fake_close(&b);
    zmq_ctx_term(zctx);
    /* fakeB, silent, is dropped after the heartbeat timeout */
    ck_assert_int_eq(rpc_next_event(&ev, 30000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "fakeB");
    stop_world();
}
END_TEST

/* A child's fork registration that overtakes its creator's __remote (they
 * travel on different connections) waits at the owner for the creation and
 * then counts as a user: the owner keeps the value until that fork, too, is
 * deleted (G1). */
START_TEST(test_fork_before_remote)
{
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    uint64_t id = (2ull << 48) | 77, fork0 = (2ull << 48) | 78, fork1 = (5ull << 48) | 79;
    bool ok = false;
    /* the fork first: no answer while the RRef does not exist */
    fake_rref_msg(&a, 2, 11, "__rref_fork", id, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 300, &ok), 0);
    ck_assert_int_eq(rref_owned_count(), 0);
    /* then the creation: the fork is answered (success), then the creation */
    fake_rref_msg(&a, 2, 12, "__remote", id, fork0, "echo");
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 11);
    ck_assert(ok);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 12);
    ck_assert(ok);
    ck_assert_int_eq(rref_owned_count(), 1);
    /* the creator's user goes: the early child still holds the value */
    fake_rref_msg(&a, 2, 13, "__rref_del", id, fork0, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 13);
    ck_assert_int_eq(rref_owned_count(), 1);
    fake_rref_msg(&a, 2, 14, "__rref_del", id, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 14);
    ck_assert_int_eq(rref_owned_count(), 0);
    /* a fork for an RRef whose creator is not a live worker fails at once */
    fake_rref_msg(&a, 2, 15, "__rref_fork", (7ull << 48) | 1, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 15);
    ck_assert(!ok);
    fake_close(&a);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A worker that dies holding forks: the owner drops exactly its forks
 * (an RRef only it used is freed; one another live worker holds stays). */
START_TEST(test_forks_of_dead_worker_released)
{
    hb_timeout_ms = 3000;      /* the fake worker never pings: declared dead after 3 s */
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    /* fakeA creates an RRef here and registers a second fork of it */
    uint64_t id = (2ull << 48) | 77, fork0 = (2ull << 48) | 78, fork1 = (2ull << 48) | 79;
    bool ok = false;
    fake_rref_msg(&a, 2, 11, "__remote", id, fork0, "echo");
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 11);
    ck_assert(ok);
    fake_rref_msg(&a, 2, 12, "__rref_fork", id, fork1, NULL);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 12);
    ck_assert(ok);
    /* w1 holds a fork of another RRef owned here */
    struct rpc_value v = rpc_int(5), args = rpc_list(1), res;
    struct rref *r = rref_new_local_value(&v);
    args.list.items[0] = rpc_rref(r);
    ck_assert_msg(rpc_sync("w1", "hold", &args, &res, 5000) == 0, "%s", rpc_last_error());
    rpc_value_clear(&args);
    rref_free(r);
    ck_assert_int_eq(rref_owned_count(), 2);
    /* fakeA goes silent and is declared dead: its two forks go with it */
    fake_close(&a);
    ck_assert_int_eq(rpc_next_event(&ev, 15000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_int_eq(ev.id, 2);
    ck_assert_int_eq(rref_owned_count(), 1);
    /* w1's fork is untouched until w1 lets go */
    ck_assert_int_eq(rpc_sync("w1", "drop", NULL, &res, 5000), 0);
    for (double t0 = trib_now_s(); rref_owned_count() > 0 && trib_now_s() - t0 < 30;) usleep(10000);
    ck_assert_int_eq(rref_owned_count(), 0);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

START_TEST(test_bad_response_fails_call)
{
    hb_timeout_ms = 1000;      /* a silent fake worker is dropped */
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    static const char *const want[] = {
        "rpc: bad response from worker 2: header announces 1 tensor frames, message has 0",
        "rpc: bad response from worker 2: truncated msgpack",
        "rpc: bad response from worker 2: bad message type",
        "rpc: bad response from worker 2: sender 1 is not the worker called",
        NULL,
    };
    for (int k = 0; k < 5; k++) {
        fake_ping(&a, 2);
        struct rpc_value args = rpc_list(1);
        args.list.items[0] = rpc_int(k);
        struct rpc_future *f = rpc_async("fakeA", "echo", &args, -1);
        rpc_value_clear(&args);
        zmq_msg_t in[2];
        uint64_t req_id = fake_recv_call(&a, "echo", in);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (k == 0) {               /* a tensor frame announced, none sent */
            pack_hdr_as(&pk, 2, req_id, 2, NULL, 1);
            msgpack_pack_nil(&pk);
        } else if (k == 1) {        /* a string claiming 4 GiB */
            pack_hdr_as(&pk, 2, req_id, 2, NULL, 0);
            msgpack_sbuffer_write(&sb, "\xdb\xff\xff\xff\xff", 5);
        } else if (k == 2) {        /* an unknown message type */
            pack_hdr_as(&pk, 9, req_id, 2, NULL, 0);
            msgpack_pack_nil(&pk);
        } else {                    /* claiming to be from w1; from a dynamic worker
                                       that has not learned its id yet: accepted */
            pack_hdr_as(&pk, 2, req_id, k == 3 ? 1 : RPC_UNASSIGNED_ID, NULL, 0);
            msgpack_pack_int(&pk, 3);
        }
        zmq_msg_send(&in[0], a.router, ZMQ_SNDMORE);
        zmq_send(a.router, sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
        zmq_msg_close(&in[0]);
        zmq_msg_close(&in[1]);
        double t0 = trib_now_s();
        while (!rpc_future_done(f) && trib_now_s() - t0 < 30) usleep(1000);
        ck_assert_msg(rpc_future_done(f), "case %d: the call is still pending", k);
        if (want[k]) {
            ck_assert_str_eq(rpc_future_error(f), want[k]);
        } else {
            struct rpc_value v;
            ck_assert_msg(rpc_future_wait(f, &v) == 0, "case %d: %s", k, rpc_last_error());
            ck_assert_int_eq(v.i, 3);
        }
        rpc_future_free(f);
    }
    fake_close(&a);
    zmq_ctx_term(zctx);
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    stop_world();
}
END_TEST

/* A worker forced to ipc:// cannot join a rank 0 that listens on tcp://
 * only: its rpc_init fails at once, naming the endpoint. */
static int ipc_only_child(int idx, const char *master, void *arg)
{
    register_all();
    struct rpc_opts o = opts_for(1, 2, master);
    o.transport = RPC_TRANSPORT_IPC;
    if (rpc_init(&o) == 0) {
        rpc_shutdown(false);
        return 11;
    }
    char want[400];
    snprintf(want, sizeof want, "rpc_init: rpc: cannot reach %s by ipc:// (forced): no socket at its twin "
             "(not on this host, not started yet, or it does not listen on ipc)", master);
    if (strcmp(rpc_last_error(), want) != 0) {
        fprintf(stderr, "ipc child: '%s', not '%s'\n", rpc_last_error(), want);
        return 12;
    }
    return 0;
}

START_TEST(test_transport_forced_ipc_refused)
{
    register_all();
    struct proc_group c;
    h_spawn(&c, 1, ipc_only_child, NULL);      /* before this process is a worker */
    transport = RPC_TRANSPORT_TCP;
    struct rpc_opts o = opts_for(0, 1, "tcp://127.0.0.1:0");   /* the child fails before any hello */
    ck_assert_msg(rpc_init(&o) == 0, "%s", rpc_last_error());
    ck_assert_str_eq(rpc_self()->via, rpc_self()->endpoint);
    proc_hand_out(&c, 0, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&c, 0, 30), 0);
    proc_group_deinit(&c);
    rpc_shutdown(true);
}
END_TEST

/* What a child of test_static_rank_rejoins tries: join as (rank, world,
 * name); want: the end of the error rpc_init must fail with, or NULL if it
 * must be admitted (it then serves until the world shuts down). */
struct join_try { int rank, world; const char *name, *want; };

static int join_child(int idx, const char *master, void *arg)
{
    const struct join_try *t = (const struct join_try *)arg + idx;
    register_all();
    struct rpc_opts o = opts_for(1, t->world, master);
    o.name = t->name;
    o.rank = t->rank;
    int rc = rpc_init(&o);
    if (!t->want) {
        if (rc < 0) {
            fprintf(stderr, "%s: %s\n", t->name, rpc_last_error());
            return 10;
        }
        rpc_shutdown(true);
        return 0;
    }
    if (rc == 0) {
        rpc_shutdown(false);
        return 11;
    }
    const char *e = rpc_last_error();
    size_t le = strlen(e), lw = strlen(t->want);
    if (le < lw || strcmp(e + le - lw, t->want) != 0) {
        fprintf(stderr, "%s: '%s', not ending in '%s'\n", t->name, e, t->want);
        return 12;
    }
    return 0;
}

/* A static worker killed and started again under its rank (and name) is
 * admitted once rank 0 has declared the old one dead: rank 0 and the other
 * worker both reach the new one. Refused: a live worker's rank (with its
 * name or another), a rank outside the world, another world size, and any
 * hello after rpc_refuse_joins. */
START_TEST(test_static_rank_rejoins)
{
    hb_timeout_ms = 1000;
    static int w = 3;
    static const struct join_try tries[] = {
        { 1, 3, "w1", "rpc: w0: __hello: rank 1 is taken by live worker w1" },
        { 3, 4, "w3", "rpc: w0: __hello: rank 3 out of range 1..2" },
        { 2, 4, "w2", "rpc: w0: __hello: world size 4 does not match the master's 3" },
        { 2, 3, "w2", NULL },
        { 2, 3, "x2", "rpc: w0: __hello: rank 2 is taken by live worker w2" },
        { RPC_RANK_DYNAMIC, 0, "late", "rpc: w0: __hello: the run is over" },
    };
    enum { N_TRIES = sizeof tries / sizeof tries[0] };
    register_all();
    struct proc_group J;
    h_spawn(&H, 2, serve_child, &w);
    h_spawn(&J, N_TRIES, join_child, (void *)tries);
    struct rpc_opts o = opts_for(0, 3, "tcp://127.0.0.1:0");
    o.on_listening = proc_hand_out_all;
    o.listening_user = &H;
    if (rpc_init(&o) < 0) {
        proc_reap_all(&H, 10);
        proc_reap_all(&J, 10);
        ck_abort_msg("rpc_init: %s", rpc_last_error());
    }
    for (int i = 0; i < 3; i++) {
        proc_hand_out(&J, i, rpc_master_endpoint());
        ck_assert_msg(proc_wait(&J, i, 30) == 0, "try %d", i);
    }
    ck_assert_int_eq(kill(H.p[1].pid, SIGKILL), 0);
    ck_assert_int_eq(proc_wait(&H, 1, 10), 128 + SIGKILL);
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w2");
    proc_hand_out(&J, 3, rpc_master_endpoint());
    ck_assert_int_eq(rpc_next_event(&ev, 10000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_JOIN);
    ck_assert_int_eq(ev.id, 2);
    ck_assert_str_eq(ev.name, "w2");
    struct rpc_value res;
    /* the other worker reaches the new w2 too (and verifies its connection) */
    check_reachable("w2", "hi again", 5000);
    ck_assert_int_eq(rpc_sync("w1", "events", NULL, &res, 0), 0);
    ck_assert_msg(strlen(res.str.ptr) >= 8 && strcmp(res.str.ptr + strlen(res.str.ptr) - 8, "join:w2,") == 0,
                  "w1's events: %s", res.str.ptr);
    rpc_value_clear(&res);
    proc_hand_out(&J, 4, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&J, 4, 30), 0);
    rpc_refuse_joins("the run is over");
    proc_hand_out(&J, 5, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&J, 5, 30), 0);
    assert_nothing_dropped("w1");
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 0, 30), 0);   /* H's w2 was killed above */
    ck_assert_int_eq(proc_wait(&J, 3, 30), 0);
    proc_group_deinit(&J);
}
END_TEST

/* A worker started well before its rendezvous (several heartbeat timeouts)
 * waits for it, up to its init timeout, rather than declaring it dead. */
START_TEST(test_worker_waits_for_rendezvous)
{
    hb_timeout_ms = 500;
    static int w = 2;
    char master[64];
    int port = proc_free_port();
    ck_assert_int_gt(port, 0);
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", port);
    register_all();
    h_spawn(&H, 1, serve_child, &w);
    proc_hand_out(&H, -1, master);
    usleep(1500000);
    struct rpc_opts o = opts_for(0, 2, master);
    int rc = rpc_init(&o);
    if (rc < 0) {
        proc_reap_all(&H, 10);
        ck_abort_msg("rpc_init: %s", rpc_last_error());
    }
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_int(2);
    args.list.items[1] = rpc_int(3);
    ck_assert_msg(rpc_sync("w1", "add", &args, &res, 5000) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 5);
    rpc_value_clear(&args);
    stop_world();
}
END_TEST

/* Pings in the name of a killed worker do not keep it alive. */
START_TEST(test_ping_for_dead_worker)
{
    hb_timeout_ms = 1000;
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    kill(H.p[0].pid, SIGKILL);
    double t0 = trib_now_s();
    struct rpc_event ev;
    int got = 0;
    while (!got && trib_now_s() - t0 < 30) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_hdr_as(&pk, 4, 0, 1, NULL, 0);
        msgpack_pack_nil(&pk);
        zmq_send(s, sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
        got = rpc_next_event(&ev, 50);
    }
    ck_assert_msg(got, "w1 was not declared dead while a stranger pinged in its name");
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w1");
    /* its pings now count as bad */
    for (int i = 0; i < 5; i++) {
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_hdr_as(&pk, 4, 0, 1, NULL, 0);
        msgpack_pack_nil(&pk);
        zmq_send(s, sb.data, sb.size, 0);
        msgpack_sbuffer_destroy(&sb);
    }
    struct rpc_stats st;
    for (t0 = trib_now_s(); trib_now_s() - t0 < 30; usleep(10000)) {
        rpc_get_stats(&st);
        if (st.dropped_unverified >= 5) break;
    }
    ck_assert_int_ge(st.dropped_unverified, 5);
    zmq_close(s);
    zmq_ctx_term(zctx);
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 0, 10), 128 + SIGKILL);
}
END_TEST

/* A process that binds a dead worker's address (its TCP port, or the ipc://
 * twin named after it) hears nothing in the dead worker's name: a dealer on
 * this host does not reconnect once its worker has gone, so neither the
 * call queued for it nor a heartbeat reaches whoever took the address (CI
 * saw rank 0's call to a killed worker answered by another test's rank 0
 * that had bound the freed port; the answer was dropped as "a response in
 * the name of worker 0"). The call fails at once: nothing is connected to
 * send it to. */
START_TEST(test_dead_workers_address_taken_by_stranger)
{
    hb_timeout_ms = 2000;
    start_world(2);
    struct rpc_worker_info info;
    ck_assert_int_eq(rpc_get_worker_info("w1", &info), 0);
    check_reachable("w1", "before", 0);
    kill(H.p[0].pid, SIGKILL);
    ck_assert_int_eq(proc_wait(&H, 0, 10), 128 + SIGKILL);
    /* the stranger takes both of w1's addresses at once */
    void *zctx = zmq_ctx_new();
    void *s = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_msg(zmq_bind(s, info.endpoint) == 0, "bind %s: %s", info.endpoint, zmq_strerror(zmq_errno()));
    if (strncmp(info.via, "ipc://", 6) == 0) {
        unlink(info.via + 6);
        ck_assert_msg(zmq_bind(s, info.via) == 0, "bind %s: %s", info.via, zmq_strerror(zmq_errno()));
    }
    struct rpc_value args = rpc_list(1);
    args.list.items[0] = rpc_str("for w1 only");
    struct rpc_future *f = rpc_async("w1", "echo", &args, 60000);
    rpc_value_clear(&args);
    struct rpc_event ev;
    int heard = 0, got = 0;
    double t0 = trib_now_s();
    while (!got && trib_now_s() - t0 < 30) {
        zmq_pollitem_t it = { s, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 20) > 0) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            while (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) >= 0)
                if (!zmq_msg_more(&m)) heard++;
            zmq_msg_close(&m);
        }
        got = rpc_next_event(&ev, 0);
    }
    ck_assert_msg(got, "w1 was not declared lost");
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w1");
    ck_assert_msg(heard == 0, "the process at w1's old address (%s, %s) heard %d message(s) meant for w1", info.endpoint,
                  info.via, heard);
    ck_assert_int_eq(rpc_future_wait(f, NULL), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: cannot send to w1 (its connection has closed: the process is gone; or "
                                       "100000 messages wait unsent) calling w1.echo");
    rpc_future_free(f);
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.dropped_malformed, 0);
    zmq_close(s);
    zmq_ctx_term(zctx);
    rpc_shutdown(true);
}
END_TEST

/* A worker on this host that dies is declared lost by the first send that
 * finds its connection closed (a call or a heartbeat), long before its
 * heartbeat timeout, and before that call fails: whoever the failure wakes
 * finds the worker gone, not alive (an agent says "lost observer2", not
 * "dropping observer2 (alive)": test_launch_lost). A call sent before
 * libzmq has seen the connection close waits out its own timeout. */
START_TEST(test_dead_local_worker_lost_at_first_send)
{
    hb_timeout_ms = 60000;
    start_world(2);
    check_reachable("w1", "before", 0);
    kill(H.p[0].pid, SIGKILL);
    ck_assert_int_eq(proc_wait(&H, 0, 10), 128 + SIGKILL);
    double t0 = trib_now_s();
    for (bool lost = false; !lost;) {
        ck_assert_msg(trib_now_s() - t0 < 20, "w1 was not declared lost 20 s after it died (heartbeat timeout 60 s)");
        struct rpc_value args = rpc_list(1), res;
        args.list.items[0] = rpc_int(1);
        int rc = rpc_sync("w1", "echo", &args, &res, 200);
        rpc_value_clear(&args);
        ck_assert_int_eq(rc, -1);
        char err[512];
        snprintf(err, sizeof err, "%s", rpc_last_error());
        lost = strstr(err, "its connection has closed") || strstr(err, "is not reachable") ||
               strstr(err, "unknown worker");
        struct rpc_worker_info info;
        if (lost) ck_assert_msg(rpc_get_worker_info("w1", &info) != 0, "a call failed (%s) while w1 was held alive", err);
        else ck_assert_msg(strstr(err, "timed out"), "%s", err);
    }
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_FAILED);
    ck_assert_str_eq(ev.name, "w1");
    rpc_shutdown(true);
}
END_TEST

/* A message with a frame over max_frame_bytes is refused where it is built,
 * naming the sizes: sent, the receiver's ZMQ_MAXMSGSIZE would drop the
 * connection, and a dealer on this host does not reconnect (the next call
 * would fail "its connection has closed" though the worker lives). Both
 * ways: a request too big, and an answer too big (the caller gets the error
 * instead). The connection serves the next call. */
START_TEST(test_frame_over_max_refused_connection_kept)
{
    max_frame_bytes = 4096;
    start_world(2);
    check_reachable("w1", "before", 0);
    char blob[8192] = { 0 };
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_bytes(blob, sizeof blob);
    ck_assert_int_eq(rpc_sync("w1", "echo", &args, &res, 0), -1);
    ck_assert_msg(strstr(rpc_last_error(), "is over max_frame_bytes 4096: the receiver would drop the connection"),
                  "%s", rpc_last_error());
    rpc_value_clear(&args);
    check_reachable("w1", "after a request too big", 0);
    args = rpc_list(1);
    args.list.items[0] = rpc_int(8192);
    ck_assert_int_eq(rpc_sync("w1", "big", &args, &res, 0), -1);
    ck_assert_msg(strstr(rpc_last_error(), "rpc: w1: big: its answer: rpc: a message of ") &&
                      strstr(rpc_last_error(), "is over max_frame_bytes 4096: the receiver would drop the connection"),
                  "%s", rpc_last_error());
    args.list.items[0] = rpc_int(1000);
    ck_assert_msg(rpc_sync("w1", "big", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq((int)res.str.len, 1000);
    rpc_value_clear(&res);
    rpc_value_clear(&args);
    check_reachable("w1", "after an answer too big", 0);
    stop_world();
}
END_TEST

KIT_MAIN("rpc",
         { "failures", 120, .tests = { test_kill9_peer,
                                            test_membership,
                                            test_left_worker_id_not_reused_while_draining,
                                            test_bad_response_fails_call,
                                            test_fork_before_remote,
                                            test_forks_of_dead_worker_released,
                                            test_transport_forced_ipc_refused,
                                            test_static_rank_rejoins,
                                            test_worker_waits_for_rendezvous,
                                            test_ping_for_dead_worker,
                                            test_dead_workers_address_taken_by_stranger,
                                            test_dead_local_worker_lost_at_first_send,
                                            test_frame_over_max_refused_connection_kept } })
