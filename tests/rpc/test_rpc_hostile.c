/* Check runner of rpc/ (one of four; the world they share: rpc_world.h).
 * Hostile input: malformed frames, spoofed joins and leaves, hello
 * refusals, a stranger's refusal, CURVE, garbage cut off, forged forks
 * and the bound on one caller's pending requests. */
#include "rpc_world.h"

#define NO_REPLY_WAIT_MS 300

/* Sends frames that must get no reply: *out is "" unless one came within
 * NO_REPLY_WAIT_MS. */
static void raw_send_unanswered(void *sock, zmq_msg_t *frames, int n, char *out, size_t cap)
{
    raw_call_wait(sock, frames, n, out, cap, NO_REPLY_WAIT_MS);
}

static void tensor_desc(msgpack_packer *pk, int dtype, int ndim, const int64_t *shape, uint64_t nbytes)
{
    unsigned char d[48] = { 0 };
    d[0] = (unsigned char)dtype;
    d[1] = (unsigned char)ndim;
    for (int i = 0; i < 8; i++) d[8 + i] = (unsigned char)(nbytes >> (8 * i));
    for (int k = 0; k < ndim; k++)
        for (int i = 0; i < 8; i++) d[16 + 8 * k + i] = (unsigned char)((uint64_t)shape[k] >> (8 * i));
    msgpack_pack_ext_with_body(pk, d, 16 + 8 * (size_t)ndim, 1);
}

static void assert_alive(void)
{
    struct rpc_value args = rpc_list(1), res;
    args.list.items[0] = rpc_int(7);
    ck_assert_msg(rpc_sync("w1", "echo", &args, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 7);
    rpc_value_clear(&args);
}

START_TEST(test_bad_input)
{
    start_world(2);
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(s, w1.endpoint), 0);
    char err[1024];
    zmq_msg_t f[3];
    msgpack_sbuffer sb;
    msgpack_packer pk;

    /* garbage header: dropped */
    frame_from(&f[0], "\xc1garbage", 8);
    raw_send_unanswered(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "");
    assert_alive();

    /* an array header claiming 2^32-1 elements in 20 bytes: dropped, no allocation */
    unsigned char big[20] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    frame_from(&f[0], big, sizeof big);
    raw_send_unanswered(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "");
    assert_alive();

    /* ...and the same claim inside the arguments of a well-formed header:
     * answered by request id */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 5, "echo", 0);
    msgpack_sbuffer_write(&sb, (const char *)big, 5);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: msgpack container count exceeds message size");
    /* a string claiming 4 GiB */
    unsigned char bigstr[5] = { 0xdb, 0xff, 0xff, 0xff, 0xff };
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 12, "echo", 0);
    msgpack_sbuffer_write(&sb, (const char *)bigstr, sizeof bigstr);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: truncated msgpack");
    assert_alive();
    /* 2^21 one-byte values (2 MiB that would cost ~100 MiB to decode):
     * refused by count, answered */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 13, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 1u << 21);
    for (int i = 0; i < (1 << 21); i++) msgpack_pack_nil(&pk);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);     /* 2 MiB */
    ck_assert_str_eq(err, "rpc: w1: bad message: more than 1048576 msgpack values in one message");
    assert_alive();

    /* wrong frame count */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 6, "echo", 1);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_nil(&pk);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: header announces 1 tensor frames, message has 0");
    assert_alive();

    /* unknown function: a stranger is told nothing about it (issue 24,
     * N16): refused as for any function, once w0 has disowned it */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 9, "nosuch", 0);
    msgpack_pack_array(&pk, 0);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");

    /* arguments are decoded only for a verified sender: this connection
     * claims to be w0, which disowns it */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 14, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 1);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");
    assert_alive();

    /* Lying arguments from a verified worker: a fake one that said hello
     * to w0 (so w0 knows its connection) calls w0. */
    void *zctx = zmq_ctx_new();
    struct fake_worker fw;
    fake_join(zctx, &fw, "fakeA");
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);

    /* a shape that disagrees with its frame */
    int64_t shape[2] = { 2, 3 };
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 7, 2, "echo", 1);
    msgpack_pack_array(&pk, 1);
    tensor_desc(&pk, 0, 2, shape, 24);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    frame_from(&f[1], "12345678", 8);
    raw_call(fw.dealer, f, 2, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: tensor 0 shape [2,3] f32 needs 24 bytes, descriptor says 24, frame has 8");

    /* a bad dtype */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 8, 2, "echo", 1);
    msgpack_pack_array(&pk, 1);
    tensor_desc(&pk, 99, 1, shape, 8);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    frame_from(&f[1], "12345678", 8);
    raw_call(fw.dealer, f, 2, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: tensor dtype 99 unknown");

    /* unknown RRef id owned by w0, handed on by the fake (its parent) */
    unsigned char rd[24] = { 0, 0, 2, 0, 0, 0, 0, 0, 0x34, 0x12 };
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 10, 2, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, 2);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(fw.dealer, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: unknown RRef 0x1234");

    /* ...and one that names another parent than its sender */
    rd[2] = 1;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 11, 2, "echo", 0);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, 2);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(fw.dealer, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: bad message: RRef 0x1234: parent 1 is not the sender 2");
    fake_close(&fw);
    zmq_ctx_term(zctx);

    /* a header that is not the expected array, with deep nesting */
    unsigned char deep[64];
    memset(deep, 0x91, sizeof deep);
    frame_from(&f[0], deep, sizeof deep);
    raw_send_unanswered(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "");
    assert_alive();

    /* arguments whose innermost (empty) array is the 33rd open container,
     * the header's included: more than msgpack-c unpacks; answered, not
     * dropped */
    unsigned char nest[WIRE_MAX_DEPTH];
    memset(nest, 0x91, sizeof nest);
    nest[sizeof nest - 1] = 0x90;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 13, "echo", 0);
    msgpack_sbuffer_write(&sb, (const char *)nest, sizeof nest);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w1: bad message: msgpack nested too deep");
    assert_alive();

    /* a hello to the rendezvous with an endpoint nobody can connect to */
    void *s0 = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(s0, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(s0, rpc_master_endpoint()), 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 11, "__hello", 0);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_str_with_body(&pk, "evil", 4);
    msgpack_pack_int(&pk, RPC_RANK_DYNAMIC);
    msgpack_pack_str_with_body(&pk, "bogus://x", 9);
    frame_from(&f[0], sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call(s0, f, 1, err, sizeof err);
    ck_assert_str_eq(err, "rpc: w0: __hello: cannot connect to endpoint 'bogus://x'");
    ck_assert_int_eq(rpc_get_worker_info("evil", &w1), -1);
    zmq_close(s0);

    zmq_close(s);
    zmq_ctx_term(ctx);
    stop_world();
}
END_TEST

/* A dynamic worker that a rank 0 without allow_dynamic must refuse. */
static int late_refused_child(int idx, const char *master, void *arg)
{
    register_all();
    struct rpc_opts o = { .name = "late", .rank = RPC_RANK_DYNAMIC, .master = master,
                          .heartbeat_ms = 100, .heartbeat_timeout_ms = hb_timeout_ms, .init_timeout_ms = 10000 };
    if (rpc_init(&o) == 0) {
        rpc_shutdown(false);
        return 11;
    }
    const char *want = "rpc: w0: __hello: rank -2 out of range 1..1";
    const char *e = rpc_last_error();
    size_t le = strlen(e), lw = strlen(want);
    if (le < lw || strcmp(e + le - lw, want) != 0) {
        fprintf(stderr, "late: '%s', not ending in '%s'\n", e, want);
        return 12;
    }
    return 0;
}

/* Sends request fn(args...) as worker `sender` and returns the reply's error
 * text ("" if none within wait_ms, "(unparsable reply)" for a success).
 * args: a msgpack array already packed into *body. */
static void spoof_call(void *sock, uint64_t req_id, int sender, const char *fn, const msgpack_sbuffer *body,
                       char *err, size_t cap, int wait_ms)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, req_id, sender, fn, 0);
    msgpack_sbuffer_write(&sb, body->data, body->size);
    zmq_msg_t f;
    frame_from(&f, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    raw_call_wait(sock, &f, 1, err, cap, wait_ms);
}

static void stats_of(const char *who, int64_t out[5])
{
    struct rpc_value r;
    ck_assert_msg(rpc_sync(who, "stats", NULL, &r, 0) == 0, "%s", rpc_last_error());
    for (int i = 0; i < 5; i++) out[i] = r.list.items[i].i;
    rpc_value_clear(&r);
}

/* A __leave in the name of w1 from a stranger's connection is refused:
 * w1 disowns it. So is one from a verified worker in another's name. */
START_TEST(test_spoofed_leave)
{
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 1);
    char err[512];
    spoof_call(s, 5, 1, "__leave", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: refused: w1 disowns this connection");
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 200), 0);
    assert_alive();
    /* the connection is known to be no w1's now: refused at once (well
     * within the 10 s a request from an unverified connection is held) */
    spoof_call(s, 6, 1, "__leave", &body, err, sizeof err, 5000);
    ck_assert_str_eq(err, "rpc: w0: refused: w1 disowns this connection");

    /* a worker that said hello (fakeA, id 2) speaking in w1's name */
    struct fake_worker fw;
    fake_join(zctx, &fw, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    spoof_call(fw.dealer, 7, 1, "__leave", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: refused: this connection is fakeA's, not w1's");
    spoof_call(fw.dealer, 8, 1, "echo", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: refused: this connection is fakeA's, not w1's");
    /* ...and in its own name, it may leave */
    msgpack_sbuffer_clear(&body);
    msgpack_pack_array(&pk, 1);
    msgpack_pack_int(&pk, 2);
    spoof_call(fw.dealer, 9, 2, "__leave", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "(unparsable reply)");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.kind, RPC_EVENT_LEAVE);
    ck_assert_str_eq(ev.name, "fakeA");
    msgpack_sbuffer_destroy(&body);
    assert_alive();
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.dropped_spoofed, 4);
    ck_assert_int_eq(st.held_messages, 0);
    fake_close(&fw);
    zmq_close(s);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A __join sent to a non-master worker in rank 0's name neither adds a
 * worker nor re-points its master. */
START_TEST(test_spoofed_join)
{
    start_world(2);
    assert_alive();         /* after w0's directory, on the same connection */
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *zctx = zmq_ctx_new();
    void *trap = zmq_socket(zctx, ZMQ_ROUTER);          /* where the stranger wants w1's calls */
    int zero = 0;
    zmq_setsockopt(trap, ZMQ_LINGER, &zero, sizeof zero);
    ck_assert_int_eq(zmq_bind(trap, "tcp://127.0.0.1:*"), 0);
    char trap_ep[128];
    size_t len = sizeof trap_ep;
    zmq_getsockopt(trap, ZMQ_LAST_ENDPOINT, trap_ep, &len);
    void *s = stranger(zctx, w1.endpoint);
    char err[512];
    for (int k = 0; k < 2; k++) {
        msgpack_sbuffer body;
        msgpack_packer pk;
        msgpack_sbuffer_init(&body);
        msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 1);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_int(&pk, k == 0 ? 0 : 5);
        msgpack_pack_str_with_body(&pk, k == 0 ? "w0" : "evil", k == 0 ? 2 : 4);
        msgpack_pack_str_with_body(&pk, trap_ep, strlen(trap_ep));
        msgpack_pack_false(&pk);
        spoof_call(s, 20 + (uint64_t)k, 0, "__join", &body, err, sizeof err, REPLY_WAIT_MS);
        ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");
        msgpack_sbuffer_destroy(&body);
    }
    /* w1 still reaches the real w0, and heard of nobody */
    struct rpc_value args = rpc_list(2), res;
    args.list.items[0] = rpc_str("w0");
    args.list.items[1] = rpc_int(1);
    ck_assert_msg(rpc_sync("w1", "chain", &args, &res, 3000) == 0, "%s", rpc_last_error());
    ck_assert_int_eq(res.i, 1002);
    rpc_value_clear(&args);
    ck_assert_int_eq(rpc_sync("w1", "events", NULL, &res, 0), 0);
    ck_assert_str_eq(res.str.ptr, "");
    rpc_value_clear(&res);
    int64_t st[5];
    stats_of("w1", st);
    ck_assert_int_eq(st[0], 2);
    zmq_close(s);
    zmq_close(trap);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A hello cannot take a live worker's name, rank or endpoint, nor make a
 * connection that already is a worker a second one. */
START_TEST(test_hello_refusals)
{
    start_world(2);
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    static const char long_name[] = "n123456789012345678901234567890123456789012345678901234567890123";
    /* world 0: no world size sent (a 3-item hello) */
    struct { const char *name; int rank; const char *ep; int world; const char *want; } cases[] = {
        { "w1", RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: worker name 'w1' is taken" },
        { "x1", 1, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: rank 1 is taken by live worker w1" },
        { "x2", RPC_RANK_DYNAMIC, w1.endpoint, 0, NULL },
        /* the rules of a static rank hold for a dynamic one */
        { "x3", RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 5, "rpc: w0: __hello: world size 5 does not match the master's 2" },
        { "", RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: a worker name must be 1..63 bytes" },
        { long_name, RPC_RANK_DYNAMIC, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: a worker name must be 1..63 bytes" },
        { "", 1, "tcp://127.0.0.1:1", 0, "rpc: w0: __hello: a worker name must be 1..63 bytes" },
    };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    ck_assert_int_eq(strlen(long_name), 64);
    char err[512], want[512];
    snprintf(want, sizeof want, "rpc: w0: __hello: endpoint '%s' is worker 1's (w1)", w1.endpoint);
    cases[2].want = want;
    for (int k = 0; k < N_CASES; k++) {
        msgpack_sbuffer body;
        msgpack_packer pk;
        msgpack_sbuffer_init(&body);
        msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, cases[k].world ? 4 : 3);
        msgpack_pack_str_with_body(&pk, cases[k].name, strlen(cases[k].name));
        msgpack_pack_int(&pk, cases[k].rank);
        msgpack_pack_str_with_body(&pk, cases[k].ep, strlen(cases[k].ep));
        if (cases[k].world) msgpack_pack_int(&pk, cases[k].world);
        spoof_call(s, 30 + (uint64_t)k, RPC_UNASSIGNED_ID, "__hello", &body, err, sizeof err, REPLY_WAIT_MS);
        ck_assert_msg(strcmp(err, cases[k].want) == 0, "case %d: '%s', not '%s'", k, err, cases[k].want);
        msgpack_sbuffer_destroy(&body);
    }
    ck_assert_int_eq(rpc_get_workers((struct rpc_worker_info[4]){ 0 }, 4), 2);
    /* a worker saying hello again on its connection */
    struct fake_worker fw;
    fake_join(zctx, &fw, "fakeA");
    struct rpc_event ev;
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    msgpack_sbuffer body;
    msgpack_packer pk;
    msgpack_sbuffer_init(&body);
    msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_str_with_body(&pk, "fakeB", 5);
    msgpack_pack_int(&pk, RPC_RANK_DYNAMIC);
    msgpack_pack_str_with_body(&pk, "tcp://127.0.0.1:2", 17);
    spoof_call(fw.dealer, 40, RPC_UNASSIGNED_ID, "__hello", &body, err, sizeof err, REPLY_WAIT_MS);
    ck_assert_str_eq(err, "rpc: w0: __hello: this connection is already worker 2 (fakeA)");
    msgpack_sbuffer_destroy(&body);
    ck_assert_int_eq(rpc_get_worker_info("fakeB", &w1), -1);
    ck_assert_int_eq(rpc_get_worker_info("x2", &w1), -1);
    fake_close(&fw);
    zmq_close(s);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* Without opts.allow_dynamic (the RL programs' default) only the declared
 * world joins: a dynamic rank, or any other rank outside 1..N, is refused
 * with the same message as a static rank outside the world, and nobody
 * joins. */
START_TEST(test_hello_declared_world_only)
{
    allow_dynamic = false;
    struct proc_group late;
    h_spawn(&late, 1, late_refused_child, NULL);    /* before this process is a worker */
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    static const int64_t ranks[] = { RPC_RANK_DYNAMIC, RPC_RANK_ENV, -3, 0, 2, INT64_MIN, INT64_MAX };
    char err[512], want[512], ep[64];
    for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
        msgpack_sbuffer body;
        msgpack_packer pk;
        msgpack_sbuffer_init(&body);
        msgpack_packer_init(&pk, &body, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_str_with_body(&pk, "stranger", 8);
        msgpack_pack_int64(&pk, ranks[k]);
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%zu", k + 1);
        msgpack_pack_str_with_body(&pk, ep, strlen(ep));
        msgpack_pack_int(&pk, 0);          /* what a dynamic worker sends */
        spoof_call(s, 50 + (uint64_t)k, RPC_UNASSIGNED_ID, "__hello", &body, err, sizeof err, REPLY_WAIT_MS);
        snprintf(want, sizeof want, "rpc: w0: __hello: rank %lld out of range 1..1", (long long)ranks[k]);
        ck_assert_str_eq(err, want);
        msgpack_sbuffer_destroy(&body);
    }
    ck_assert_int_eq(rpc_get_worker_info("stranger", &(struct rpc_worker_info){ 0 }), -1);
    ck_assert_int_eq(rpc_get_workers((struct rpc_worker_info[4]){ 0 }, 4), 2);
    zmq_close(s);
    zmq_ctx_term(zctx);
    /* a real dynamic worker's rpc_init fails the same way */
    proc_hand_out(&late, -1, rpc_master_endpoint());
    ck_assert_int_eq(proc_wait(&late, 0, 30), 0);
    proc_group_deinit(&late);
    assert_nothing_dropped("w1");
    stop_world();
}
END_TEST

/* A connection that sends more than 1000 bad messages is cut off; the
 * others are served as before. */
START_TEST(test_garbage_cut_off)
{
    start_world(2);
    void *zctx = zmq_ctx_new();
    void *s = stranger(zctx, rpc_master_endpoint());
    for (int i = 0; i < 1100; i++) zmq_send(s, "\xc1garbage", 8, 0);
    struct rpc_stats st;
    double t0 = trib_now_s();
    do {
        usleep(10000);
        rpc_get_stats(&st);
    } while (st.connections_cut == 0 && trib_now_s() - t0 < 30);
    usleep(100000);
    rpc_get_stats(&st);
    /* What it had sent on when cut is dropped or lost; what it still had
     * queued arrives on its next connection (libzmq reconnects). */
    ck_assert_int_eq(st.connections_cut, 1);
    ck_assert_int_ge(st.dropped_malformed, 1001);
    ck_assert_int_le(st.dropped_malformed + st.dropped_cut, 1100);
    assert_alive();
    zmq_close(s);
    zmq_ctx_term(zctx);
    stop_world();
}
END_TEST

/* A member that breaks its shared-memory links (TRIB_RPC_TRANSPORT=shm,
 * issue 32) by writing out-of-bounds positions into its halves is dropped
 * with the reason, and the other members' calls go on. */
static bool shm_carried(void *arg)
{
    echo_check(arg, rpc_str("over shared memory"));
    struct rpc_stats st;
    rpc_get_stats(&st);
    return st.shm_msgs_sent > 0 && st.shm_msgs_recv > 0;
}

static bool w1_dropped(void *arg)
{
    (void)arg;
    struct rpc_worker_info wi;
    return rpc_get_worker_info("w1", &wi) < 0;
}

START_TEST(test_shm_link_broken)
{
    transport = RPC_TRANSPORT_SHM;
    start_world(3);
    ck_assert_msg(kit_wait_until(shm_carried, "w1", 30), "no call to w1 went through a shared-memory link in 30 s");
    struct rpc_value res;
    ck_assert_msg(rpc_sync("w1", "shm_scribble", NULL, &res, 0) == 0, "%s", rpc_last_error());
    ck_assert_int_ge(res.i, 1);
    ck_assert_msg(kit_wait_until(w1_dropped, NULL, 30), "w1 was not dropped within 30 s of breaking its links");
    echo_check("w2", rpc_str("unaffected"));
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&H, 1, 30), 0);
    proc_group_deinit(&H);
}
END_TEST

/* ---- bounded remote-created state ---------------------------------------- */

/* A fork registration for an RRef that is never created waits at most the
 * default timeout, and neither it nor one forwarded by a receiver of a
 * forged RRef descriptor holds a graceful shutdown up (issue 11: 238 s). */
START_TEST(test_forged_fork)
{
    w0_timeout_ms = 1500;
    start_world(2);
    void *zctx = zmq_ctx_new();
    struct fake_worker a;
    struct rpc_event ev;
    fake_join(zctx, &a, "fakeA");
    ck_assert_int_eq(rpc_next_event(&ev, 5000), 1);
    ck_assert_int_eq(ev.id, 2);
    /* creator w1 is alive: the fork waits for a creation that never comes */
    uint64_t id = (1ull << 48) | 5;
    bool ok = true;
    double sent = trib_now_s();
    fake_rref_msg(&a, 2, 11, "__rref_fork", id, (2ull << 48) | 6, NULL);
    ck_assert_int_eq(fake_reply(&a, REPLY_WAIT_MS, &ok), 11);
    ck_assert(!ok);
    /* refused when it expired (the 1.5 s default timeout), never before */
    ck_assert_msg(trib_now_s() - sent >= 1.4, "the fork was refused %.2f s after it was sent (timeout 1.5 s)",
                  trib_now_s() - sent);
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.forks_expired, 1);

    /* w1 is shutting down already (its serve loop): a fork forwarded to it
     * for a forged RRef (owner w1, creator w0, parent fakeA) is refused */
    unsigned char rd[24] = { 1, 0, 2, 0, 0, 0, 0, 0, 0x77, 0x07 };
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr_as(&pk, 1, 12, 2, "add", 0);
    msgpack_pack_array(&pk, 2);
    msgpack_pack_ext_with_body(&pk, rd, sizeof rd, 2);
    msgpack_pack_int(&pk, 1);
    zmq_send(a.dealer, sb.data, sb.size, 0);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(fake_reply(&a, 5000, &ok), 12);
    ck_assert(!ok);
    /* and one more waiting here when the shutdown starts */
    sent = trib_now_s();
    fake_rref_msg(&a, 2, 13, "__rref_fork", id + 1, (2ull << 48) | 7, NULL);
    uint64_t early = fake_reply(&a, 300, &ok);
    /* no answer while it waits (a box that took 1.5 s to look has seen it expire) */
    ck_assert_msg(early == 0 || (early == 13 && !ok && trib_now_s() - sent >= 1.4), "reply %llu after %.2f s",
                  (unsigned long long)early, trib_now_s() - sent);
    double t0 = trib_now_s();
    stop_world();
    double secs = trib_now_s() - t0;
    ck_assert_msg(secs < 5.0, "graceful shutdown took %.2f s", secs);
    fake_close(&a);
    zmq_ctx_term(zctx);
}
END_TEST

/* One caller's requests received and not yet answered are bounded, in
 * number and in bytes. The ones that wait are parked at the gate until the
 * next one has been refused. */
START_TEST(test_pending_bound)
{
    max_pending = 8;
    max_pending_bytes = 64 << 10;
    gate_close();
    start_world(2);
    struct rpc_future *fs[9];
    for (int i = 0; i < 8; i++) fs[i] = rpc_async("w1", "park_gated", NULL, 0);
    struct rpc_value zero = rpc_list(1);
    zero.list.items[0] = rpc_int(0);
    fs[8] = rpc_async("w1", "park", &zero, 0);
    rpc_value_clear(&zero);
    ck_assert_int_eq(rpc_future_wait(fs[8], NULL), -1);
    const char *want = "rpc: w1: busy: w0 has 8 requests (";
    ck_assert_msg(strncmp(rpc_last_error(), want, strlen(want)) == 0, "got '%s'", rpc_last_error());
    ck_assert_msg(strstr(rpc_last_error(), "the limit is 8 requests, 65536 bytes") != NULL, "got '%s'", rpc_last_error());
    gate_open();
    for (int i = 0; i < 8; i++) ck_assert_msg(rpc_future_wait(fs[i], NULL) == 0, "%s", rpc_last_error());
    for (int i = 0; i < 9; i++) rpc_future_free(fs[i]);
    /* w1 let each request go before it queued the reply: it holds none of
     * ours but the asking one */
    ck_assert_int_eq(call_int("w1", "requests_of_caller"), 1);
    /* bytes: a 40 KiB request waits; a second one would pass 64 KiB */
    gate_close();
    for (int i = 0; i < 2; i++) {
        static char blob[40 << 10];
        struct rpc_value args = rpc_list(2);
        args.list.items[0] = rpc_int(0);
        args.list.items[1] = rpc_bytes(blob, sizeof blob);
        fs[i] = rpc_async("w1", i == 0 ? "park_gated" : "park", &args, 0);
        rpc_value_clear(&args);
    }
    ck_assert_int_eq(rpc_future_wait(fs[1], NULL), -1);
    ck_assert_msg(strncmp(rpc_last_error(), "rpc: w1: busy: w0 has 1 requests (", 34) == 0, "got '%s'", rpc_last_error());
    gate_open();
    ck_assert_msg(rpc_future_wait(fs[0], NULL) == 0, "%s", rpc_last_error());
    rpc_future_free(fs[0]);
    rpc_future_free(fs[1]);
    assert_alive();
    stop_world();
}
END_TEST

/* A raw dealer (CURVE client if pub/sec given) calls "nosuch" on w1;
 * returns the error text, or "" when nothing came back (within
 * REPLY_WAIT_MS if answered, else NO_REPLY_WAIT_MS). */
static void raw_probe(void *ctx, const char *ep, const char *pub, const char *sec, bool answered, char *err,
                      size_t cap)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (pub) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, curve_pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    ck_assert_int_eq(zmq_connect(s, ep), 0);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    pack_hdr(&pk, 3, "nosuch", 0);
    msgpack_pack_array(&pk, 0);
    zmq_msg_t f;
    frame_from(&f, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    if (answered) raw_call(s, &f, 1, err, cap);
    else raw_send_unanswered(s, &f, 1, err, cap);
    zmq_close(s);
}

START_TEST(test_curve)
{
    ck_assert_int_eq(zmq_curve_keypair(curve_pub, curve_sec), 0);
    struct rpc_opts bad = { .name = "x", .rank = 0, .world_size = 1, .master = "tcp://127.0.0.1:0",
                            .curve = true, .curve_public_key = "short", .curve_secret_key = curve_sec };
    ck_assert_int_eq(rpc_init(&bad), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc_init: curve needs a Z85 public and secret key (40 characters each)");

    use_curve = true;
    start_world(2);
    assert_alive();
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    void *ctx = zmq_ctx_new();
    char err[1024], opub[41], osec[41];
    raw_probe(ctx, w1.endpoint, NULL, NULL, false, err, sizeof err);          /* plain text */
    ck_assert_str_eq(err, "");
    ck_assert_int_eq(zmq_curve_keypair(opub, osec), 0);
    raw_probe(ctx, w1.endpoint, opub, osec, false, err, sizeof err);          /* key not allowed */
    ck_assert_str_eq(err, "");
    raw_probe(ctx, w1.endpoint, curve_pub, curve_sec, true, err, sizeof err); /* the cluster key */
    ck_assert_str_eq(err, "rpc: w1: refused: w0 disowns this connection");   /* gets through CURVE, is nobody's */
    /* refusals are counted here too (each probe's connection at least once) */
    struct rpc_stats st;
    rpc_get_stats(&st);
    ck_assert_int_eq(st.refused_auth, 0);
    raw_probe(ctx, rpc_master_endpoint(), NULL, NULL, false, err, sizeof err);
    raw_probe(ctx, rpc_master_endpoint(), opub, osec, false, err, sizeof err);
    double t0 = trib_now_s();
    do {
        usleep(10000);
        rpc_get_stats(&st);
    } while (st.refused_auth < 2 && trib_now_s() - t0 < 30);
    ck_assert_int_ge(st.refused_auth, 2);
    ck_assert_int_eq(st.handshakes_failed, 0);
    zmq_ctx_term(ctx);
    assert_alive();
    stop_world();
    use_curve = false;
}
END_TEST

/* N16 (issue 24): a connection that is nobody's (it claims to be w0, which
 * disowns it) gets the same refusal whatever function it names, known or
 * not: it cannot learn which functions exist. Before: "unknown function". */
START_TEST(test_stranger_same_refusal)
{
    start_world(2);
    struct rpc_worker_info w1;
    ck_assert_int_eq(rpc_get_worker_info("w1", &w1), 0);
    /* w1 has the directory (it reaches w0 by name), so its refusals name
     * w0 rather than the rendezvous it first knew */
    char err[1024];
    double t0 = trib_now_s();
    do {
        struct rpc_value one = rpc_list(1);
        one.list.items[0] = rpc_int(1);
        relay("w1", "w0", "echo", one, err, sizeof err);
    } while (err[0] && trib_now_s() - t0 < 30 && usleep(5000) == 0);
    ck_assert_str_eq(err, "");
    void *ctx = zmq_ctx_new();
    static const char *const fns[] = { "nosuch", "echo", "__rref_del", "dist_autograd._release", "nosuch" };
    for (size_t k = 0; k < sizeof fns / sizeof *fns; k++) {
        void *s = zmq_socket(ctx, ZMQ_DEALER);      /* a fresh connection each */
        int zero = 0;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        ck_assert_int_eq(zmq_connect(s, w1.endpoint), 0);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        pack_hdr(&pk, 40 + k, fns[k], 0);
        msgpack_pack_array(&pk, 1);
        msgpack_pack_int(&pk, 1);
        zmq_msg_t f;
        frame_from(&f, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        raw_call(s, &f, 1, err, sizeof err);
        ck_assert_msg(strcmp(err, "rpc: w1: refused: w0 disowns this connection") == 0, "%s: %s", fns[k], err);
        zmq_close(s);
    }
    zmq_ctx_term(ctx);
    /* a member still learns that a function does not exist */
    struct rpc_value res = rpc_nil();
    ck_assert_int_eq(rpc_sync("w1", "nosuch", NULL, &res, 0), -1);
    ck_assert_str_eq(rpc_last_error(), "rpc: w1: unknown function 'nosuch'");
    stop_world();
}
END_TEST

KIT_MAIN("rpc",
         { "failures", 120, .tests = { test_bad_input,
                                            test_curve,
                                            test_spoofed_leave,
                                            test_spoofed_join,
                                            test_hello_refusals,
                                            test_hello_declared_world_only,
                                            test_garbage_cut_off,
                                            test_shm_link_broken,
                                            test_forged_fork,
                                            test_pending_bound,
                                            test_stranger_same_refusal } })
