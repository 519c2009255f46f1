/* A hostile member for test_rl_norm: joins a tributary-agent as one of
 * its observers and, instead of its envs' statistics, sends a finite
 * normalisation delta made to poison the run's set (issue 33 F1):
 *
 *   norm_member MASTER RANK WORLD KIND
 *   KIND count: obs.count 1.7e308; mean: ret.mean 1e300, ret.var 0;
 *        var: obs.var 1e308, obs.count 1e6; rows: ret.count 1e6 (values
 *        an honest observer could send, the count not its report's).
 *
 * Everything else it sends is what an honest observer's first report
 * carries: T x B steps, the delta's other counts T x B + B observations
 * (the set-up's resets) and T x B returns. Sync: its rl_rollout answers at
 * once with the delta. Async: its rl_run_async sends one rl_update with
 * the delta (in a context the agent knows: one forward of the policy) and
 * prints the agent's answer ("refused: <error>" or "accepted"), then one
 * more update with no report and no delta, gradients only, as a member
 * that goes on would ("then refused: <error>" or "then accepted"), then
 * keeps the loop until rl_shutdown, as a member that does not give up would.
 *
 *   KIND nan-gradient, wide-gradient (sync): a member whose statistics are
 *        honest (zero rows, its report's counts) and whose rollout acts as
 *        an honest one's does (T act calls of B zero rows, then the
 *        bootstrap's), but whose rl_loss answer carries a gradient for the
 *        policy's output a with a[0] NaN, or one column too many.
 *
 * Exits 0 after rl_shutdown, 1 if none comes within 120 s. */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "rl/config.h"
#include "rl/messages.h"
#include "rl/norm.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"
#include "rpc/rpc.h"
#include "tensor/tensor.h"

#define WAIT_S 120.0

static struct {
    const char *kind;
    struct rl_config cfg;
    int obs_dim;
    struct rref *policy;
    atomic_bool shutdown;
} m;

/* The delta as `kind` makes it, in wire form. */
static struct rpc_value crafted(void)
{
    struct rl_norm_stats d;
    int steps = m.cfg.steps_per_rollout * m.cfg.envs_per_observer;
    if (rl_norm_stats_init(&d, m.cfg.norm_obs ? m.obs_dim : 0, m.cfg.norm_reward, m.cfg.clip_obs, m.cfg.clip_reward) != 0)
        abort();
    d.obs.count = steps + m.cfg.envs_per_observer;
    d.ret.count = steps;
    if (strcmp(m.kind, "count") == 0) d.obs.count = 1.7e308;
    else if (strcmp(m.kind, "mean") == 0) d.ret.mean[0] = 1e300, d.ret.var[0] = 0;
    else if (strcmp(m.kind, "var") == 0) d.obs.var[0] = 1e308, d.obs.count = 1e6;
    else if (strcmp(m.kind, "rows") == 0) d.ret.count = 1e6;
    struct rpc_value v = rl_norm_stats_pack(&d);
    rl_norm_stats_free(&d);
    return v;
}

static struct rl_report report(void)
{
    struct rl_report r = { .steps = (int64_t)m.cfg.steps_per_rollout * m.cfg.envs_per_observer };
    rl_report_add(&r, -100.0, m.cfg.steps_per_rollout);
    return r;
}

static int fn_setup(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    struct rl_setup_msg s;
    if (rl_setup_unpack(args, &s) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    const struct rpc_value *obs = s.norm.kind == RPC_MAP ? rpc_map_get(&s.norm, "obs") : NULL;
    const struct rpc_value *mean = obs ? rpc_map_get(obs, "mean") : NULL;
    int rc = rl_config_from_value(&s.config, &m.cfg);
    if (rc == 0 && !(mean && mean->kind == RPC_BYTES)) rc = rl_set_error("this member needs a run with --norm-obs");
    if (rc == 0) {
        m.obs_dim = (int)(mean->str.len / sizeof(double));
        m.policy = rref_retain(s.policy);
    }
    rl_setup_clear(&s);
    if (rc != 0) return rpc_request_fail(req, "%s", rl_last_error());
    *res = rpc_nil();
    return 0;
}

static bool gradient_kind(void) { return strstr(m.kind, "-gradient") != NULL; }

/* A zero f32 tensor of shape [d0] (d1 < 0) or [d0, d1]. */
static struct tensor *zeros(int64_t d0, int64_t d1)
{
    int64_t shape[2] = { d0, d1 };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, d1 < 0 ? 1 : 2, shape);
    if (!t) abort();
    return t;
}

/* A rollout's act calls as an honest observer makes them (the agent's
 * lockstep waits for them): T of B zero rows, then the bootstrap's. */
static int act_rollout(void)
{
    int B = m.cfg.envs_per_observer;
    struct tensor *obs = zeros(B, m.obs_dim);
    int rc = 0;
    for (int t = 0; t <= m.cfg.steps_per_rollout && rc == 0; t++) {
        struct rpc_value a = rl_obs_pack(obs, t == m.cfg.steps_per_rollout), r = rpc_nil();
        rc = rref_rpc_sync(m.policy, RL_METHOD_ACT, &a, &r, 0);
        rpc_value_clear(&a);
        rpc_value_clear(&r);
    }
    tensor_free(obs);
    return rc;
}

/* Sync: the report, zero observations for minibatch 0, the delta. */
static int fn_rollout(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)args, (void)u;
    if (gradient_kind() && act_rollout() != 0) return rpc_request_fail(req, "act: %s", rpc_last_error());
    int64_t shape[2] = { (int64_t)m.cfg.steps_per_rollout * m.cfg.envs_per_observer / m.cfg.minibatches, m.obs_dim };
    struct rl_rollout_reply rep = { .report = report(), .obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape),
                                    .norm = crafted() };
    if (!rep.obs) return rpc_request_fail(req, "out of memory");
    memset(tensor_data(rep.obs), 0, (size_t)shape[0] * (size_t)shape[1] * sizeof(float));
    *res = rl_rollout_reply_pack(&rep);
    tensor_free(rep.obs);
    rpc_value_clear(&rep.norm);
    return 0;
}

/* Sync (the gradient kinds): loss(epoch, minibatch, weight, policy output)
 * -> (stats, the next minibatch's zero observations or nil after the
 * last, a gradient shaped after the output, but for the kind's flaw). */
static int fn_loss(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)u;
    /* [epoch, minibatch, weight, out, prox or nil] (rl/messages.h) */
    if (args->kind != RPC_LIST || args->list.len != 5 || args->list.items[3].kind != RPC_LIST ||
        args->list.items[3].list.len != 4 || args->list.items[3].list.items[0].kind != RPC_TENSOR)
        return rpc_request_fail(req, "norm_member: not a loss call it knows");
    const struct rpc_value *out = args->list.items[3].list.items;
    int64_t rows = out[0].tensor->shape[0], A = out[0].tensor->shape[1];
    bool last = args->list.items[0].i == m.cfg.epochs - 1 && args->list.items[1].i == m.cfg.minibatches - 1;
    struct rl_minibatch_reply rep = { .obs = last ? NULL : zeros(rows, m.obs_dim) };
    rep.grad.a = zeros(rows, strcmp(m.kind, "wide-gradient") == 0 ? A + 1 : A);
    if (strcmp(m.kind, "nan-gradient") == 0) ((float *)tensor_data(rep.grad.a))[0] = NAN;
    if (out[1].kind == RPC_TENSOR) rep.grad.log_std = zeros(A, -1);
    if (out[2].kind == RPC_TENSOR) rep.grad.value = zeros(rows, -1);
    *res = rl_minibatch_reply_pack(&rep);
    rl_minibatch_reply_clear(&rep);
    return 0;
}

/* One forward of the policy in a new context (so the agent knows it),
 * then an update in it: with the report and the delta, or (bare) neither.
 * Prints the agent's answer after `said`. */
static void send_update(bool bare, const char *said)
{
    int64_t ctx = dist_autograd_context_new();
    dist_autograd_set_current(ctx);
    int64_t shape[2] = { 1, m.obs_dim };
    struct tensor *obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    memset(tensor_data(obs), 0, (size_t)m.obs_dim * sizeof(float));
    struct rpc_value a = rl_obs_pack(obs, false), r = rpc_nil();
    int rc = rref_rpc_sync(m.policy, RL_METHOD_EVALUATE, &a, &r, 0);
    rpc_value_clear(&a);
    rpc_value_clear(&r);
    tensor_free(obs);
    if (rc != 0) printf("evaluate failed: %s\n", rpc_last_error());
    struct rl_update_req up = { .ctx = ctx };
    if (!bare) up.has_report = true, up.report = report(), up.norm = crafted();
    up.stats.policy_loss = 0.5;
    a = rl_update_req_pack(&up);
    rpc_value_clear(&up.norm);
    if (rc == 0 && rpc_sync("agent", RL_FN_UPDATE, &a, &r, 0) != 0) printf("%srefused: %s\n", said, rpc_last_error());
    else if (rc == 0) printf("%saccepted\n", said);
    fflush(stdout);
    rpc_value_clear(&a);
    rpc_value_clear(&r);
    dist_autograd_release_local(ctx);
}

/* Async: the update with the crafted delta, then a bare one. */
static int fn_run_async(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)req, (void)args, (void)u;
    send_update(false, "");
    send_update(true, "then ");
    double t0 = trib_now_s();
    while (!atomic_load(&m.shutdown) && trib_now_s() - t0 < WAIT_S) usleep(10000);
    *res = rpc_nil();
    return 0;
}

static int fn_shutdown(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    (void)req, (void)args, (void)u;
    atomic_store(&m.shutdown, true);
    *res = rpc_nil();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: norm_member MASTER RANK WORLD count|mean|var|rows|nan-gradient|wide-gradient\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    m.kind = argv[4];
    char name[32];
    snprintf(name, sizeof name, "observer%s", argv[2]);
    dist_autograd_init();
    rpc_register(RL_FN_SETUP, fn_setup, NULL);
    rpc_register(RL_FN_ROLLOUT, fn_rollout, NULL);
    rpc_register(RL_FN_LOSS, fn_loss, NULL);
    rpc_register(RL_FN_RUN_ASYNC, fn_run_async, NULL);
    rpc_register(RL_FN_SHUTDOWN, fn_shutdown, NULL);
    struct rpc_opts o = { .name = name, .rank = atoi(argv[2]), .world_size = atoi(argv[3]), .master = argv[1],
                          .default_timeout_ms = 60000, .init_timeout_ms = 60000, .heartbeat_ms = 200,
                          .heartbeat_timeout_ms = 2000 };
    if (rpc_init(&o) != 0) {
        fprintf(stderr, "norm_member: rpc_init: %s\n", rpc_last_error());
        return 1;
    }
    double t0 = trib_now_s();
    while (!atomic_load(&m.shutdown) && trib_now_s() - t0 < WAIT_S) usleep(10000);
    bool ok = atomic_load(&m.shutdown);
    rref_free(m.policy);
    rpc_shutdown(false);
    return ok ? 0 : 1;
}
