/* RPC benchmark, over tcp://, ipc:// and shared-memory links (each forced): rpc_sync
 * round trips against a bare libzmq DEALER/ROUTER round trip of the same
 * payload over the same transport between two processes in the same run,
 * pipelined rpc_async throughput (rounds of 1024 calls, and a sliding
 * window of 1024 in flight), and an RRef method call (rref_rpc_sync)
 * against a plain rpc_sync. Then the shared-memory link's floor
 * (rpc/shm.h, issue 32): a bare ping-pong of one frame through its rings
 * and wake-ups between two processes, no RPC ("shm_pingpong"). Prints JSON
 * lines, each naming its transport. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/proc.h"
#include "rpc/rpc.h"
#include "rpc/shm.h"

static const int64_t SIZES[] = { 16, 65536, 1048576 };

static int iters_for(int64_t n) { return n <= 16 ? 21000 : n <= 65536 ? 3500 : 700; }

/* ---- bare zmq ---------------------------------------------------------------- */

static void zmq_server(int wfd, const char *bind_ep)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(s, bind_ep) != 0) _exit(2);
    char ep[128] = { 0 };
    size_t len = sizeof ep;
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len);
    if (write(wfd, ep, sizeof ep) != (ssize_t)sizeof ep) _exit(3);
    close(wfd);
    zmq_msg_t id, body;
    for (;;) {
        zmq_msg_init(&id);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0) break;
        if (zmq_msg_size(&body) == 0) break;          /* stop */
        zmq_msg_send(&id, s, ZMQ_SNDMORE);
        zmq_msg_send(&body, s, 0);
    }
    if (strncmp(ep, "ipc://", 6) == 0) unlink(ep + 6);
    zmq_close(s);
    zmq_ctx_term(ctx);
    _exit(0);
}

struct zclient { pid_t pid; void *ctx, *s; };

static void zmq_start(struct zclient *z, const char *bind_ep)
{
    int p[2];
    if (pipe(p) != 0) abort();
    z->pid = fork();
    if (z->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[0]);
        zmq_server(p[1], bind_ep);
    }
    close(p[1]);
    char ep[128];
    if (read(p[0], ep, sizeof ep) != (ssize_t)sizeof ep) abort();
    close(p[0]);
    z->ctx = zmq_ctx_new();
    z->s = zmq_socket(z->ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(z->s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(z->s, ep);
}

static double zmq_round_trips(struct zclient *z, const char *buf, int64_t n, int iters)
{
    zmq_msg_t m;
    double t0 = trib_now_s();
    for (int i = 0; i < iters; i++) {
        zmq_send(z->s, buf, (size_t)n, 0);
        zmq_msg_init(&m);
        zmq_msg_recv(&m, z->s, 0);
        zmq_msg_close(&m);
    }
    return (trib_now_s() - t0) / iters * 1e6;
}

static void zmq_stop(struct zclient *z)
{
    zmq_send(z->s, "", 0, 0);
    zmq_close(z->s);
    zmq_ctx_term(z->ctx);
    waitpid(z->pid, NULL, 0);
}

/* ---- rpc ---------------------------------------------------------------------- */

static int fn_echo(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    if (args->list.len != 1) return rpc_request_fail(req, "expected 1 argument");
    *res = rpc_value_copy(&args->list.items[0]);
    return 0;
}

/* An RRef's object for rref_rpc_sync: its method "echo" echoes. */
static int echo_obj;
static void *ctor_echo(struct rpc_request *req, const struct rpc_value *args, void *u) { return &echo_obj; }
static void echo_destroy(void *obj) { (void)obj; }
static const struct rpc_type ECHO_TYPE = { "Echo", echo_destroy, NULL };
static int m_echo(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    return fn_echo(req, args, res, u);
}

struct world_opts { int spin_us; enum rpc_transport transport; const char *only; };

/* Whether part `what` (sync, async, rref) is to be measured. */
static bool part(const struct world_opts *w, const char *what) { return !w->only || strcmp(w->only, what) == 0; }

/* The callee: echoes until the caller shuts down. */
static int callee(int idx, const char *master, void *arg)
{
    const struct world_opts *w = arg;
    struct rpc_opts o = { .name = "callee", .rank = 1, .world_size = 2, .master = master, .spin_us = w->spin_us,
                          .transport = w->transport };
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "callee: %s\n", rpc_last_error());
        return 1;
    }
    rpc_shutdown(true);
    return 0;
}

static struct rpc_value payload(int64_t n)
{
    int64_t shape[1] = { n };
    struct tensor *t = tensor_new(DTYPE_U8, DEVICE_CPU, 1, shape);
    struct rpc_value l = rpc_list(1);
    l.list.items[0] = rpc_tensor(t);
    tensor_free(t);
    return l;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(void)
{
    fprintf(stderr, "bench_rpc: %s\n", rpc_last_error());
    exit(1);
}

static double rpc_round_trips(const struct rpc_value *args, int iters)
{
    struct rpc_value res;
    double t0 = trib_now_s();
    for (int i = 0; i < iters; i++) {
        if (rpc_sync("callee", "echo", args, &res, 0) < 0) fail();
        rpc_value_clear(&res);
    }
    return (trib_now_s() - t0) / iters * 1e6;
}

static double rref_round_trips(struct rref *r, const struct rpc_value *args, int iters)
{
    struct rpc_value res;
    double t0 = trib_now_s();
    for (int i = 0; i < iters; i++) {
        if (rref_rpc_sync(r, "echo", args, &res, 0) < 0) fail();
        rpc_value_clear(&res);
    }
    return (trib_now_s() - t0) / iters * 1e6;
}

/* Every figure over one transport (the caller's process is a child of
 * main's, so each transport gets a fresh agent). */
static int bench_transport(const struct world_opts *w)
{
    const char *tname = w->transport == RPC_TRANSPORT_IPC ? "ipc" : w->transport == RPC_TRANSPORT_SHM ? "shm" : "tcp";
    char zep[128];
    /* shm's bare reference is libzmq over ipc, what it replaces */
    if (w->transport != RPC_TRANSPORT_TCP) snprintf(zep, sizeof zep, "ipc:///tmp/trib-bench-zmq-%d", (int)getpid());
    else snprintf(zep, sizeof zep, "tcp://127.0.0.1:*");
    struct zclient z;
    zmq_start(&z, zep);

    struct proc_group callees;
    proc_group_init(&callees);
    if (proc_fork(&callees, callee, (void *)w, 0) < 0) abort();
    struct rpc_opts o = { .name = "caller", .rank = 0, .world_size = 2, .master = "tcp://127.0.0.1:0",
                          .on_listening = proc_hand_out_all, .listening_user = &callees, .spin_us = w->spin_us,
                          .transport = w->transport };
    if (rpc_init(&o) < 0) {
        fprintf(stderr, "bench_rpc: %s\n", rpc_last_error());
        proc_group_deinit(&callees);
        return 1;
    }
    struct rpc_worker_info wi;
    if (rpc_get_worker_info("callee", &wi) < 0) fail();
    /* Alternate rounds of bare zmq and rpc so both see the same machine
     * load; report the median round of each. */
    enum { ROUNDS_SYNC = 7 };
    for (int k = 0; k < 3 && part(w, "sync"); k++) {
        int64_t n = SIZES[k];
        struct rpc_value args = payload(n);
        char *buf = calloc(1, (size_t)n);
        int iters = iters_for(n) / ROUNDS_SYNC;
        zmq_round_trips(&z, buf, n, iters / 5 + 5);
        rpc_round_trips(&args, iters / 5 + 5);
        double zr[ROUNDS_SYNC], rr[ROUNDS_SYNC];
        for (int r = 0; r < ROUNDS_SYNC; r++) {
            zr[r] = zmq_round_trips(&z, buf, n, iters);
            rr[r] = rpc_round_trips(&args, iters);
        }
        qsort(zr, ROUNDS_SYNC, sizeof zr[0], cmp_double);
        qsort(rr, ROUNDS_SYNC, sizeof rr[0], cmp_double);
        printf("{\"bench\":\"rpc_sync\",\"transport\":\"%s\",\"via\":\"%s\",\"payload_bytes\":%lld,"
               "\"us\":%.2f,\"zmq_us\":%.2f,\"ratio\":%.2f}\n",
               tname, wi.via, (long long)n, rr[ROUNDS_SYNC / 2], zr[ROUNDS_SYNC / 2], rr[ROUNDS_SYNC / 2] / zr[ROUNDS_SYNC / 2]);
        fflush(stdout);
        free(buf);
        rpc_value_clear(&args);
    }
    zmq_stop(&z);
    if (part(w, "async")) {
        /* 16-byte calls, WINDOW in flight, two ways: in rounds (WINDOW calls,
         * then wait for them all: the pipeline drains at each round's end),
         * and through a sliding window (a new call as soon as the oldest is
         * answered). Each is measured in CHUNKS chunks of ROUNDS * WINDOW
         * calls, alternating; the median chunk is reported. */
        struct rpc_value args = payload(16);
        enum { WINDOW = 1024, ROUNDS = 100, CHUNKS = 5 };
        static struct rpc_future *fs[WINDOW];
        for (int r = 0; r < 5; r++) {                   /* warm up */
            for (int i = 0; i < WINDOW; i++) fs[i] = rpc_async("callee", "echo", &args, 0);
            rpc_future_wait_all(fs, WINDOW);
            for (int i = 0; i < WINDOW; i++) rpc_future_free(fs[i]);
        }
        int failed = 0;
        double rounds[CHUNKS], sliding[CHUNKS];
        for (int k = 0; k < CHUNKS; k++) {
            double t0 = trib_now_s();
            for (int r = 0; r < ROUNDS; r++) {
                for (int i = 0; i < WINDOW; i++) fs[i] = rpc_async("callee", "echo", &args, 0);
                if (rpc_future_wait_all(fs, WINDOW) < 0) failed++;
                for (int i = 0; i < WINDOW; i++) rpc_future_free(fs[i]);
            }
            rounds[k] = WINDOW * ROUNDS / (trib_now_s() - t0);
            for (int i = 0; i < WINDOW; i++) fs[i] = rpc_async("callee", "echo", &args, 0);
            t0 = trib_now_s();
            for (long c = 0; c < (long)WINDOW * ROUNDS; c++) {
                int i = (int)(c % WINDOW);
                if (rpc_future_wait(fs[i], NULL) < 0) failed++;
                rpc_future_free(fs[i]);
                fs[i] = rpc_async("callee", "echo", &args, 0);
            }
            sliding[k] = WINDOW * ROUNDS / (trib_now_s() - t0);
            if (rpc_future_wait_all(fs, WINDOW) < 0) failed++;
            for (int i = 0; i < WINDOW; i++) rpc_future_free(fs[i]);
        }
        if (failed) {
            fprintf(stderr, "bench_rpc: %d pipelined calls or rounds failed: %s\n", failed, rpc_last_error());
            return 1;
        }
        qsort(rounds, CHUNKS, sizeof rounds[0], cmp_double);
        qsort(sliding, CHUNKS, sizeof sliding[0], cmp_double);
        printf("{\"bench\":\"rpc_async\",\"transport\":\"%s\",\"payload_bytes\":16,\"window\":%d,\"mode\":\"rounds\","
               "\"calls_per_s\":%.0f}\n", tname, WINDOW, rounds[CHUNKS / 2]);
        printf("{\"bench\":\"rpc_async\",\"transport\":\"%s\",\"payload_bytes\":16,\"window\":%d,\"mode\":\"sliding\","
               "\"calls_per_s\":%.0f}\n", tname, WINDOW, sliding[CHUNKS / 2]);
        fflush(stdout);
        rpc_value_clear(&args);
    }
    if (part(w, "rref")) {
        /* an RRef method call against the plain call it rides on */
        struct rpc_value args = payload(16);
        struct rref *r = rpc_remote("callee", "echo_obj", NULL, 0);
        if (!r) fail();
        struct rpc_value res;
        if (rref_rpc_sync(r, "echo", &args, &res, 0) < 0) fail();   /* waits for the object */
        rpc_value_clear(&res);
        int iters = iters_for(16) / ROUNDS_SYNC;
        rref_round_trips(r, &args, iters / 5 + 5);
        rpc_round_trips(&args, iters / 5 + 5);
        double fr[ROUNDS_SYNC], pr[ROUNDS_SYNC];
        for (int k = 0; k < ROUNDS_SYNC; k++) {
            fr[k] = rref_round_trips(r, &args, iters);
            pr[k] = rpc_round_trips(&args, iters);
        }
        qsort(fr, ROUNDS_SYNC, sizeof fr[0], cmp_double);
        qsort(pr, ROUNDS_SYNC, sizeof pr[0], cmp_double);
        printf("{\"bench\":\"rref_rpc_sync\",\"transport\":\"%s\",\"payload_bytes\":16,\"us\":%.2f,"
               "\"rpc_sync_us\":%.2f,\"ratio\":%.2f}\n",
               tname, fr[ROUNDS_SYNC / 2], pr[ROUNDS_SYNC / 2], fr[ROUNDS_SYNC / 2] / pr[ROUNDS_SYNC / 2]);
        fflush(stdout);
        rref_free(r);
        rpc_value_clear(&args);
    }
    rpc_shutdown(true);
    proc_wait(&callees, 0, -1);
    proc_group_deinit(&callees);
    return 0;
}

/* ---- the shared-memory link's floor ------------------------------------------- */

static const int64_t SHM_SIZES[] = { 16, 4096, 65536, 1048576 };

static void shm_echo(int sock)
{
    struct shm_link l;
    char err[256];
    if (shm_link_take(sock, 30000, &l, err, sizeof err) < 0) _exit(2);
    static zmq_msg_t f[SHM_MAX_FRAMES];
    for (;;) {
        int n = shm_link_recv(&l, f, SHM_MAX_FRAMES, 30000);
        if (n <= 0) _exit(3);
        bool bye = zmq_msg_size(&f[0]) == 0;
        if (!bye && shm_link_send(&l, f, n, 30000, err, sizeof err) < 0) _exit(4);
        for (int i = 0; i < n; i++) zmq_msg_close(&f[i]);
        if (bye) break;
    }
    shm_link_close(&l);
    _exit(0);
}

/* Mean round trip of iters ping-pongs of one n-byte frame, in us. */
static double shm_round_trips(struct shm_link *l, int64_t n, int iters)
{
    zmq_msg_t f, in[SHM_MAX_FRAMES];
    char err[256];
    int64_t t0 = trib_now_ns();
    for (int i = 0; i < iters; i++) {
        zmq_msg_init_size(&f, (size_t)n);
        if (shm_link_send(l, &f, 1, 30000, err, sizeof err) < 0) {
            fprintf(stderr, "bench_rpc: shm: %s\n", err);
            exit(1);
        }
        zmq_msg_close(&f);
        int got = shm_link_recv(l, in, SHM_MAX_FRAMES, 30000);
        if (got != 1) {
            fprintf(stderr, "bench_rpc: shm: no echo: %s\n", l->why);
            exit(1);
        }
        zmq_msg_close(&in[0]);
    }
    return (double)(trib_now_ns() - t0) / 1e3 / iters;
}

static int bench_shm_pingpong(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        close(sv[0]);
        shm_echo(sv[1]);
    }
    close(sv[1]);
    struct shm_link l;
    char err[256];
    if (shm_link_offer(sv[0], 0, NULL, 0, &l, err, sizeof err) < 0) {
        fprintf(stderr, "bench_rpc: %s\n", err);
        return 1;
    }
    enum { ROUNDS = 7 };
    for (int k = 0; k < 4; k++) {
        int64_t n = SHM_SIZES[k];
        int iters = iters_for(n) / ROUNDS;
        shm_round_trips(&l, n, iters / 5 + 5);
        double r[ROUNDS];
        for (int i = 0; i < ROUNDS; i++) r[i] = shm_round_trips(&l, n, iters);
        qsort(r, ROUNDS, sizeof r[0], cmp_double);
        printf("{\"bench\":\"shm_pingpong\",\"transport\":\"shm\",\"payload_bytes\":%lld,\"us\":%.2f}\n",
               (long long)n, r[ROUNDS / 2]);
        fflush(stdout);
    }
    zmq_msg_t bye;
    zmq_msg_init_size(&bye, 0);
    shm_link_send(&l, &bye, 1, 30000, err, sizeof err);
    zmq_msg_close(&bye);
    int st;
    waitpid(pid, &st, 0);
    shm_link_close(&l);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* usage: bench_rpc [spin_us [tcp|ipc|shm [sync|async|rref]]]   (rpc_opts.spin_us,
 * 0: the default; the transport to measure, all by default (shm: calls
 * over shared-memory links, then the bare ping-pong of one link); the one part to measure, all by
 * default: for profiling one) */
int main(int argc, char **argv)
{
    int spin_us = argc > 1 ? atoi(argv[1]) : 0;
    const char *only = argc > 2 && strcmp(argv[2], "both") != 0 ? argv[2] : NULL;
    rpc_register_ex("echo", fn_echo, NULL, RPC_FN_INLINE);
    rpc_register_ctor("echo_obj", &ECHO_TYPE, ctor_echo, NULL);
    rpc_register_method_ex("Echo", "echo", m_echo, NULL, RPC_FN_INLINE);
    static const enum rpc_transport ts[] = { RPC_TRANSPORT_TCP, RPC_TRANSPORT_IPC, RPC_TRANSPORT_SHM };
    static const char *const names[] = { "tcp", "ipc", "shm" };
    int rc = 0;
    for (int k = 0; k < 3; k++) {
        if (only && strcmp(only, names[k]) != 0) continue;
        struct world_opts w = { spin_us, ts[k], argc > 3 ? argv[3] : NULL };
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) abort();
        if (pid == 0) _exit(bench_transport(&w));
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
    }
    if (!only || strcmp(only, "shm") == 0)
        if (bench_shm_pingpong() != 0) rc = 1;
    return rc;
}
