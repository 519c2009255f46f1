/* A backward whose peer died: w1 owns the first layer and is killed (-9)
 * after the forward; the backward through w2 and back to w1 fails promptly
 * (within about twice the heartbeat timeout) with an error naming w1, and
 * the survivors shut down cleanly. A peer alive but too busy to answer
 * fails the backward after the default timeout instead. */
#define DH_HEARTBEAT_TIMEOUT_MS 1000
#include "dist_harness.h"
#include "kit.h"

/* twice the heartbeat timeout, plus slack for a loaded 2-core box */
#define PROMPT_S (2.0 * DH_HEARTBEAT_TIMEOUT_MS / 1000.0 + 1.5)

struct run { struct remote_module *rm1, *rm2; struct tensor *x, *loss; int64_t ctx; };

/* loss = sum(L2(tanh(L1(x)))) with L1 on w1 and L2 on w2, in a new context. */
static void forward(struct run *r)
{
    r->rm1 = dh_remote_linear("w1", 3, 4, 1, DEVICE_CPU);
    r->rm2 = dh_remote_linear("w2", 4, 2, 2, DEVICE_CPU);
    r->x = dh_random(2, 3, 1);
    tensor_set_requires_grad(r->x, true);
    r->ctx = dist_autograd_context_new();
    struct tensor *h = dh_rforward(r->rm1, r->x), *a = tensor_tanh(h), *y = dh_rforward(r->rm2, a);
    r->loss = tensor_sum(y);
    tensor_free(h);
    tensor_free(a);
    tensor_free(y);
}

static void kill_w1(void)
{
    ck_assert_int_eq(kill(DH.h.p[0].pid, SIGKILL), 0);
    ck_assert_int_eq(proc_wait(&DH.h, 0, 10), 128 + SIGKILL);
}

static void finish(struct run *r)
{
    /* release skips the dead worker and frees the survivors' copies */
    ck_assert_int_eq(dist_autograd_release(r->ctx), 0);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    ck_assert_int_eq(dh_remote_nctx("w2"), 0);
    /* the survivor still works */
    struct tensor *x = dh_random(1, 4, 3), *y = dh_rforward(r->rm2, x);
    ck_assert_int_eq(y->shape[1], 2);
    tensor_free(x);
    tensor_free(y);
    remote_module_free(r->rm1);
    remote_module_free(r->rm2);
    tensor_free(r->x);
    tensor_free(r->loss);
    double t0 = trib_now_s();
    dh_stop();
    double secs = trib_now_s() - t0;
    ck_assert_msg(secs < 10.0, "shutdown with a dead peer took %.2f s", secs);
}

static void assert_names_w1(const char *err)
{
    ck_assert_msg(strncmp(err, "dist_autograd_backward: ", 24) == 0, "got '%s'", err);
    ck_assert_msg(strstr(err, "w1") != NULL, "the error does not name w1: '%s'", err);
}

START_TEST(test_peer_dies_before_backward)
{
    dh_start(3, NULL, NULL);
    struct run r;
    forward(&r);
    /* an optimizer over both owners' parameters, built while w1 lives */
    struct rref *p[4];
    ck_assert_int_eq(remote_module_parameters(r.rm1, p, 2), 2);
    ck_assert_int_eq(remote_module_parameters(r.rm2, p + 2, 2), 2);
    struct optim_hyper h = optim_defaults(OPTIM_SGD);
    struct dist_optim *opt = dist_optim_new(OPTIM_SGD, &h, 4, p);
    ck_assert_msg(opt != NULL, "dist_optim_new: %s", rpc_last_error());
    kill_w1();
    double t0 = trib_now_s();
    int rc = dist_autograd_backward(r.ctx, 1, &r.loss, false);
    double secs = trib_now_s() - t0;
    ck_assert_int_eq(rc, -1);
    fprintf(stderr, "test_dist_dead_peer: failed after %.3f s: %s\n", secs, rpc_last_error());
    assert_names_w1(rpc_last_error());
    ck_assert_msg(secs < PROMPT_S, "the backward took %.2f s to fail", secs);
    /* stepping the dead owner fails too, naming it, and does not hang */
    t0 = trib_now_s();
    ck_assert_int_eq(dist_optim_step(opt, r.ctx), -1);
    secs = trib_now_s() - t0;
    ck_assert_msg(strncmp(rpc_last_error(), "dist_optim_step: ", 17) == 0 && strstr(rpc_last_error(), "w1"),
                  "got '%s'", rpc_last_error());
    ck_assert_msg(secs < PROMPT_S, "the step took %.2f s to fail", secs);
    dist_optim_free(opt);
    for (int i = 0; i < 4; i++) rref_free(p[i]);
    finish(&r);
}
END_TEST

/* The same once the death is known: the backward fails at once. */
START_TEST(test_peer_known_dead)
{
    dh_start(3, NULL, NULL);
    struct run r;
    forward(&r);
    kill_w1();
    struct rpc_event ev;
    bool seen = false;
    double t0 = trib_now_s();
    while (!seen && trib_now_s() - t0 < PROMPT_S) {
        if (rpc_next_event(&ev, 100) == 1 && ev.kind == RPC_EVENT_FAILED && strcmp(ev.name, "w1") == 0) seen = true;
    }
    ck_assert_msg(seen, "no failure event for w1 within %.1f s", PROMPT_S);
    t0 = trib_now_s();
    int rc = dist_autograd_backward(r.ctx, 1, &r.loss, false);
    double secs = trib_now_s() - t0;
    ck_assert_int_eq(rc, -1);
    fprintf(stderr, "test_dist_dead_peer: known dead, failed after %.3f s: %s\n", secs, rpc_last_error());
    assert_names_w1(rpc_last_error());
    ck_assert_msg(secs < 1.0, "the backward took %.2f s to fail", secs);
    /* a backward that never reaches w1 still works: a context of w2 only */
    int64_t ctx2 = dist_autograd_context_new();
    struct tensor *x = dh_random(2, 4, 5);
    tensor_set_requires_grad(x, true);
    struct tensor *y = dh_rforward(r.rm2, x), *l = tensor_sum(y);
    ck_assert_msg(dist_autograd_backward(ctx2, 1, &l, false) == 0, "w2-only backward: %s", rpc_last_error());
    struct tensor *gx = dist_autograd_get_gradient(ctx2, x);
    ck_assert_ptr_nonnull(gx);
    tensor_free(gx);
    ck_assert_int_eq(dist_autograd_release(ctx2), 0);
    dist_autograd_set_current(r.ctx);
    tensor_free(x);
    tensor_free(y);
    tensor_free(l);
    finish(&r);
}
END_TEST

/* A forward to a worker that died fails promptly, naming it. */
START_TEST(test_peer_dies_before_forward)
{
    dh_start(3, NULL, NULL);
    struct remote_module *rm1 = dh_remote_linear("w1", 3, 4, 1, DEVICE_CPU);
    struct tensor *x = dh_random(2, 3, 1), *out[NN_MAX_IO];
    tensor_set_requires_grad(x, true);
    int64_t ctx = dist_autograd_context_new();
    kill_w1();
    int n = 0;
    double t0 = trib_now_s();
    ck_assert_int_eq(remote_module_forward(rm1, 1, &x, &n, out), -1);
    double secs = trib_now_s() - t0;
    ck_assert_msg(strstr(rpc_last_error(), "w1") != NULL, "the error does not name w1: '%s'", rpc_last_error());
    ck_assert_msg(secs < PROMPT_S, "the forward took %.2f s to fail", secs);
    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    ck_assert_int_eq(dh_remote_nctx("w2"), 0);
    tensor_free(x);
    remote_module_free(rm1);
    dh_stop();
}
END_TEST

/* t.block(ms): holds a handler thread of its worker. */
static int fn_block(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    usleep((useconds_t)(args->list.items[0].i * 1000));
    *res = rpc_nil();
    return 0;
}

static void register_block(void) { rpc_register("t.block", fn_block, NULL); }

/* A live peer whose handlers are all busy (heartbeats still flow): the
 * backward and the release give up after the default timeout instead of
 * waiting for it, and name it; its copy of the context goes once it is
 * free again. */
START_TEST(test_peer_stuck_in_backward)
{
    enum { TIMEOUT_MS = 1500, BLOCK_MS = 6000, HANDLERS = 4 };
    dh_w0_timeout_ms = TIMEOUT_MS;
    dh_extra_register = register_block;
    dh_start(2, NULL, NULL);
    struct remote_module *rm1 = dh_remote_linear("w1", 3, 4, 1, DEVICE_CPU);
    struct tensor *x = dh_random(2, 3, 1);
    tensor_set_requires_grad(x, true);
    int64_t ctx = dist_autograd_context_new();
    struct tensor *y = dh_rforward(rm1, x), *loss = tensor_sum(y);
    dist_autograd_set_current(0);
    struct rpc_future *blocks[HANDLERS];
    for (int i = 0; i < HANDLERS; i++) {
        struct rpc_value a = rpc_list(1);
        a.list.items[0] = rpc_int(BLOCK_MS);
        blocks[i] = rpc_async("w1", "t.block", &a, -1);
        rpc_value_clear(&a);
    }
    usleep(200000);                     /* every handler of w1 is blocked */
    double t0 = trib_now_s();
    int rc = dist_autograd_backward(ctx, 1, &loss, false);
    double secs = trib_now_s() - t0;
    ck_assert_int_eq(rc, -1);
    char want[256];
    snprintf(want, sizeof want, "dist_autograd_backward: rpc: timed out after %d ms calling w1.dist_autograd._backprop",
             TIMEOUT_MS);
    ck_assert_str_eq(rpc_last_error(), want);
    ck_assert_msg(secs < BLOCK_MS / 1000.0 - 1.0, "the backward took %.2f s to fail", secs);
    t0 = trib_now_s();
    ck_assert_int_eq(dist_autograd_release(ctx), 0);
    secs = trib_now_s() - t0;
    ck_assert_msg(secs < BLOCK_MS / 1000.0 - 1.0, "the release took %.2f s", secs);
    ck_assert_int_eq(dist_autograd_num_contexts(), 0);
    for (int i = 0; i < HANDLERS; i++) {
        ck_assert_int_eq(rpc_future_wait(blocks[i], NULL), 0);
        rpc_future_free(blocks[i]);
    }
    /* w1 ran the queued release once free */
    t0 = trib_now_s();
    while (dh_remote_nctx("w1") != 0 && trib_now_s() - t0 < 30.0) usleep(20000);
    ck_assert_int_eq(dh_remote_nctx("w1"), 0);
    tensor_free(y);
    tensor_free(loss);
    tensor_free(x);
    remote_module_free(rm1);
    dh_stop();
}
END_TEST

KIT_MAIN("dist_dead_peer",
         { "dead_peer", 120, .tests = { test_peer_dies_before_backward, test_peer_known_dead,
           test_peer_dies_before_forward, test_peer_stuck_in_backward } })
