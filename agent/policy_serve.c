/* The agent's policy as an RPC-served object: construction behind an RRef,
 * the evaluate method, and the batched act server (one thread merging
 * concurrent deferred calls into one forward, in lockstep or bounded in
 * time) with the rollout's callers it tracks. The module it serves
 * (forward, evaluate, the acting copy) is policy.c. */
#define _GNU_SOURCE
#include "agent/policy.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "agent/policy_internal.h"
#include "common/clock.h"
#include "envs/env.h"
#include "optim/dist_optim.h"
#include "rpc/dist_autograd.h"
#include "rl/messages.h"
#include "rl/norm.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "rl/rl.h"
#include "tensor/autograd.h"
#include "tensor/nn.h"
#include "tensor/ops.h"

static void collect_params(struct policy *p)
{
    int na = p->actor->n_params, nc = p->critic ? p->critic->n_params : 0;
    p->n_params = na + nc;
    p->params = trib_xcalloc((size_t)p->n_params, sizeof *p->params);
    for (int i = 0; i < na; i++) p->params[i] = p->actor->params[i];
    for (int i = 0; i < nc; i++) p->params[na + i] = p->critic->params[i];
}

/* ---- the act server --------------------------------------------------------------- */

static void fail_pending(struct policy_pending *pd, const char *why)
{
    rpc_request_fail(pd->req, "%s", why);
    rpc_request_finish_error(pd->req);
    tensor_free(pd->obs);
}

/* The lock an act forward takes: the copy's once frozen, else the module's. */
static pthread_mutex_t *act_lock(struct policy *p, bool frozen)
{
    return frozen ? &p->act_mu : &p->fwd_mu;
}

/* Runs one merged forward over n pending calls and answers each, with the
 * frozen copy when `frozen`; the caller holds act_lock(p, frozen) when
 * `locked` (the I/O thread's inline serve). */
static void serve_batch(struct policy *p, struct policy_pending *batch, int n, bool locked, bool frozen)
{
    struct tensor *xs[QUEUE_CAP];
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        xs[i] = batch[i].obs;
        rows += batch[i].obs->shape[0];
    }
    struct tensor *x = n == 1 ? tensor_retain(xs[0]) : tensor_cat(n, xs, 0);
    struct rl_policy_out o = { 0 };
    bool was = autograd_set_enabled(false);
    if (!locked) pthread_mutex_lock(act_lock(p, frozen));
    double t0 = trib_now_s();
    int rc = -1;
    if (x && !frozen) rc = policy_forward(p, x, &o);
    else if (x && (rc = rl_arch_forward(&p->shape, p->act_actor, p->act_critic, p->dev, x, &o)) == 0)
        o.version = p->act_version;
    double dt = trib_now_s() - t0;
    pthread_mutex_unlock(act_lock(p, frozen));
    autograd_set_enabled(was);
    tensor_free(x);
    char err[512];
    if (rc != 0) snprintf(err, sizeof err, "act: forward: %s", tensor_last_error());
    int64_t start = 0;
    for (int i = 0; i < n; i++) {
        int64_t r = batch[i].obs->shape[0], s0 = start;
        start += r;                     /* the next call's rows, whether or not this one is answered */
        if (rc != 0) {
            fail_pending(&batch[i], err);
            continue;
        }
        struct rl_policy_out part = { .log_std = o.log_std, .version = o.version };
        part.a = n == 1 ? tensor_retain(o.a) : tensor_slice(o.a, s0, s0 + r);
        part.value = !o.value ? NULL : n == 1 ? tensor_retain(o.value) : tensor_slice(o.value, s0, s0 + r);
        if (!part.a || (o.value && !part.value)) {
            tensor_free(part.a);
            tensor_free(part.value);
            snprintf(err, sizeof err, "act: %s", tensor_last_error());
            fail_pending(&batch[i], err);
            continue;
        }
        struct rpc_value v = rl_policy_out_pack(&part);
        tensor_free(part.a);
        tensor_free(part.value);
        rpc_request_complete(batch[i].req, &v);
        rpc_value_clear(&v);
        tensor_free(batch[i].obs);
    }
    rl_policy_out_clear(&o);
    pthread_mutex_lock(&p->mu);
    p->stats.act_forwards++;
    p->stats.act_rows += rows;
    p->stats.forward_s += dt;
    pthread_mutex_unlock(&p->mu);
}

static int by_caller(const void *x, const void *y)
{
    const struct policy_pending *a = x, *b = y;
    return (a->caller > b->caller) - (a->caller < b->caller);
}

/* Under p->mu: a caller's call joins the queue, or leaves it. */
static void count_queued(struct policy *p, int caller, int d)
{
    if (caller < 0 || caller >= MAX_CALLERS) return;
    if (d > 0 && p->q_count[caller]++ == 0) p->q_callers++;
    if (d < 0 && --p->q_count[caller] == 0) p->q_callers--;
}

/* Under p->mu: whether the queue holds the merge the serving thread waits
 * for: in lockstep a call of every sync caller still in the rollout (each
 * one's next: a double-buffered observer, cfg.double_buffer, has two in
 * flight), else as many calls as active callers; or the row bound. */
static bool batch_complete(const struct policy *p, bool lockstep)
{
    if (p->q_rows >= p->cfg.max_batch) return true;
    return lockstep ? p->q_callers >= p->sync_callers - p->sync_done : p->q_len >= p->n_active;
}

/* Waits, under p->mu, for the other active callers' calls, bounded in rows
 * and (but in lockstep) time. In lockstep (the mode's, policy_new) it waits
 * for all of them: observers step in lockstep there, and a merge of the
 * same calls in the same order keeps the run reproducible (how rows are
 * grouped changes sgemm's rounding); a lost observer is forgotten
 * (policy_forget_caller, policy_drop_sync_caller). */
static void wait_for_callers(struct policy *p, bool lockstep)
{
    double deadline = trib_now_s() + p->cfg.max_wait_us * 1e-6;
    while (!p->stopping && !batch_complete(p, lockstep)) {
        if (lockstep) {
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        double left = deadline - trib_now_s();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (int64_t)(left * 1e9);
        ts.tv_sec += ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
}

/* Takes the queued calls into batch, under p->mu, up to the row bound (at
 * least one); in lockstep only each caller's first queued call (a merge is
 * every observer's next call: the same calls whichever arrives first), the
 * others staying queued in order. A caller's last call ends its turn.
 * Returns how many. */
static int take_batch(struct policy *p, struct policy_pending *batch)
{
    struct policy_pending *kept = p->kept;
    int n = 0, rows = 0, nk = 0, len = p->q_len;
    bool taken[MAX_CALLERS] = { 0 }, full = false;
    for (int i = 0; i < len; i++) {
        struct policy_pending *pd = &p->q[(p->q_head + i) % QUEUE_CAP];
        int r = (int)pd->obs->shape[0];
        bool mine = pd->caller >= 0 && pd->caller < MAX_CALLERS;
        full = full || (n > 0 && rows + r > p->cfg.max_batch);
        if (full || (p->lockstep && mine && taken[pd->caller])) {
            kept[nk++] = *pd;
            continue;
        }
        if (mine) taken[pd->caller] = true;
        batch[n++] = *pd;
        rows += r;
        p->q_len--;
        p->q_rows -= r;
        count_queued(p, pd->caller, -1);
        if (pd->last) p->sync_done++;
        if (pd->last && pd->caller >= 0 && pd->caller < MAX_CALLERS) p->sync_in[pd->caller] = false;
        if (pd->last && pd->caller >= 0 && pd->caller < MAX_CALLERS && p->active[pd->caller]) {
            p->active[pd->caller] = false;
            p->n_active--;
        }
    }
    for (int i = 0; i < nk; i++) p->q[(p->q_head + n + i) % QUEUE_CAP] = kept[i];
    p->q_head = (p->q_head + n) % QUEUE_CAP;
    return n;
}

static void *serve_main(void *arg)
{
    struct policy *p = arg;
    struct policy_pending batch[QUEUE_CAP];
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->q_len == 0 && !p->stopping) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping) break;
        wait_for_callers(p, p->lockstep);
        if (p->stopping) break;
        int n = take_batch(p, batch);
        if (n == 0) continue;           /* the I/O thread served them (serve_inline) */
        bool frozen = p->frozen;
        pthread_mutex_unlock(&p->mu);
        if (p->lockstep) qsort(batch, (size_t)n, sizeof batch[0], by_caller);
        serve_batch(p, batch, n, false, frozen);
        pthread_mutex_lock(&p->mu);
    }
    while (p->q_len > 0) {
        struct policy_pending pd = p->q[p->q_head];
        p->q_head = (p->q_head + 1) % QUEUE_CAP;
        p->q_len--;
        count_queued(p, pd.caller, -1);
        pthread_mutex_unlock(&p->mu);
        fail_pending(&pd, "act: the agent is shutting down");
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Under p->mu, released: serves the queued calls on this (the I/O)
 * thread while they make the batch the serving thread would take at once
 * (every caller it would wait for is in, or the row bound is reached),
 * the batch is small and on the CPU, and no forward is running (fwd_mu is
 * free; never waited for: the I/O thread must not block). That saves two
 * thread hand-offs per act call (the serving thread's wake-up, and the
 * I/O thread's to send its replies); the batches and their order are the
 * ones the serving thread would have made. What is left queued (a batch
 * cut by the row bound leaves calls behind) is served again here, or
 * handed to the serving thread. */
static void serve_inline(struct policy *p)
{
    struct policy_pending batch[QUEUE_CAP];
    while (p->q_len > 0) {
        bool complete = batch_complete(p, p->lockstep);
        bool frozen = p->frozen;
        if (!complete || p->dev != DEVICE_CPU || p->q_rows > INLINE_ROWS ||
            pthread_mutex_trylock(act_lock(p, frozen)) != 0) {
            pthread_cond_signal(&p->cv);
            break;
        }
        int n = take_batch(p, batch);
        p->stats.inline_forwards++;
        pthread_mutex_unlock(&p->mu);
        if (p->lockstep) qsort(batch, (size_t)n, sizeof batch[0], by_caller);
        serve_batch(p, batch, n, true, frozen);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

static int m_act(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *result, void *u)
{
    struct policy *p = obj;
    struct policy_pending pd = { .req = req, .caller = rpc_request_caller_id(req), .t = trib_now_s() };
    if (rl_obs_unpack(args, p->shape.obs_dim, &pd.obs, &pd.last) != 0)
        return rpc_request_fail(req, "act: %s", rl_last_error());
    if (pd.obs->shape[0] > p->cfg.max_batch) {
        tensor_free(pd.obs);
        return rpc_request_fail(req, "act: %lld rows, more than --max-batch %d", (long long)pd.obs->shape[0],
                                p->cfg.max_batch);
    }
    pthread_mutex_lock(&p->mu);
    /* in lockstep only the rollout's callers act: one dropped (lost, or
     * silent past --step-timeout) would be counted as one of them */
    if (p->lockstep && !p->stopping && (pd.caller < 0 || pd.caller >= MAX_CALLERS || !p->sync_in[pd.caller])) {
        pthread_mutex_unlock(&p->mu);
        tensor_free(pd.obs);
        return rpc_request_fail(req, "act: %s is not one of this rollout's observers", rpc_request_caller(req));
    }
    if (p->stopping || p->q_len == QUEUE_CAP) {
        bool stopping = p->stopping;
        pthread_mutex_unlock(&p->mu);
        tensor_free(pd.obs);
        return rpc_request_fail(req, stopping ? "act: the agent is shutting down" : "act: busy (%d calls queued)",
                                QUEUE_CAP);
    }
    p->q[(p->q_head + p->q_len) % QUEUE_CAP] = pd;
    p->q_len++;
    p->q_rows += (int)pd.obs->shape[0];
    count_queued(p, pd.caller, +1);
    if (pd.caller >= 0 && pd.caller < MAX_CALLERS && !p->active[pd.caller]) {
        p->active[pd.caller] = true;
        p->n_active++;
    }
    p->stats.act_calls++;
    serve_inline(p);
    return RPC_DEFERRED;
}

static int m_evaluate(struct rpc_request *req, void *obj, const struct rpc_value *args, struct rpc_value *result,
                      void *u)
{
    struct policy *p = obj;
    struct tensor *obs = NULL;
    if (rl_obs_unpack(args, p->shape.obs_dim, &obs, NULL) != 0)
        return rpc_request_fail(req, "evaluate: %s", rl_last_error());
    struct rl_policy_out o;
    int rc = policy_evaluate(p, obs, &o, rpc_request_caller_id(req));
    tensor_free(obs);
    if (rc != 0) return rpc_request_fail(req, "%s", rpc_last_error());
    *result = rl_policy_out_pack(&o);
    rl_policy_out_clear(&o);
    return 0;
}

/* ---- construction ------------------------------------------------------------------- */

/* The RRef's object is the struct policy; policy_free frees it (after
 * rpc_shutdown), so the type's destructor has nothing to do. */
static void policy_destroy(void *obj) { (void)obj; }

/* ctor(config map, obs_dim, act_dim, gaussian, value_head) */
static void *policy_ctor(struct rpc_request *req, const struct rpc_value *args, void *u)
{
    if (args->kind != RPC_LIST || args->list.len != 5 || args->list.items[1].kind != RPC_INT ||
        args->list.items[2].kind != RPC_INT || args->list.items[3].kind != RPC_BOOL ||
        args->list.items[4].kind != RPC_BOOL) {
        rpc_request_fail(req, "expected (config, obs_dim, act_dim, gaussian, value_head)");
        return NULL;
    }
    struct policy *p = trib_xcalloc(1, sizeof *p);
    if (rl_config_from_value(&args->list.items[0], &p->cfg) != 0) {
        rpc_request_fail(req, "%s", rl_last_error());
        free(p);
        return NULL;
    }
    int64_t od = args->list.items[1].i, ad = args->list.items[2].i;
    if (od < 1 || od > 65536 || ad < 1 || ad > 65536) {
        rpc_request_fail(req, "obs_dim %lld or act_dim %lld out of 1..65536", (long long)od, (long long)ad);
        free(p);
        return NULL;
    }
    p->shape = rl_arch_for(&p->cfg, (int)od, !args->list.items[3].b, (int)ad);
    p->shape.value_head = args->list.items[4].b;
    p->dev = p->cfg.device == RL_DEVICE_CUDA ? DEVICE_CUDA : DEVICE_CPU;
    if (policy_arch_build(&p->shape, p->cfg.seed, &p->actor, &p->critic) != 0 || (p->dev != DEVICE_CPU && (nn_module_to(p->actor, p->dev) != 0 ||
                                                          (p->critic && nn_module_to(p->critic, p->dev) != 0)))) {
        rpc_request_fail(req, "policy: %s", tensor_last_error());
        nn_module_free(p->actor);
        nn_module_free(p->critic);
        free(p);
        return NULL;
    }
    collect_params(p);
    pthread_mutex_init(&p->fwd_mu, NULL);
    pthread_mutex_init(&p->act_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    return p;
}

void policy_register(void)
{
    static const struct rpc_type type = { .name = RL_POLICY_TYPE, .destroy = policy_destroy };
    rpc_register_ctor(RL_POLICY_CTOR, &type, policy_ctor, NULL);
    /* act only validates and queues: it runs on the I/O thread as the call arrives */
    rpc_register_method_ex(RL_POLICY_TYPE, RL_METHOD_ACT, m_act, NULL, RPC_FN_INLINE);
    rpc_register_method(RL_POLICY_TYPE, RL_METHOD_EVALUATE, m_evaluate, NULL);
}

struct policy *policy_new(const struct rl_config *cfg, const struct policy_arch *shape, bool lockstep)
{
    struct rpc_value args = rpc_list(5);
    args.list.items[0] = rl_config_to_value(cfg);
    args.list.items[1] = rpc_int(shape->obs_dim);
    args.list.items[2] = rpc_int(shape->act_dim);
    args.list.items[3] = rpc_bool(shape->gaussian);
    args.list.items[4] = rpc_bool(shape->value_head);
    struct rref *r = rpc_remote(rpc_self()->name, RL_POLICY_CTOR, &args, 0);
    rpc_value_clear(&args);
    if (!r) return NULL;
    struct policy *p = rref_local_object(r);
    if (!p) {
        rref_free(r);
        return NULL;
    }
    p->rref = r;
    p->lockstep = lockstep;
    p->param_rrefs = trib_xcalloc((size_t)p->n_params, sizeof *p->param_rrefs);
    for (int i = 0; i < p->n_params; i++) {
        struct rpc_value v = rpc_tensor(p->params[i]);
        p->param_rrefs[i] = rref_new_local_value(&v);
        if (!p->param_rrefs[i]) {
            policy_free(p);
            return NULL;
        }
    }
    if (pthread_create(&p->thread, NULL, serve_main, p) != 0) {
        rpc_set_error("policy: cannot start the serving thread");
        policy_free(p);
        return NULL;
    }
    p->thread_started = true;
    return p;
}

void policy_stop(struct policy *p)
{
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->thread_started) pthread_join(p->thread, NULL);
    p->thread_started = false;
}

void policy_free(struct policy *p)
{
    if (!p) return;
    policy_stop(p);
    for (int i = 0; p->param_rrefs && i < p->n_params; i++) rref_free(p->param_rrefs[i]);
    free(p->param_rrefs);
    free(p->params);
    struct rref *r = p->rref;
    nn_module_free(p->actor);
    nn_module_free(p->critic);
    nn_module_free(p->act_actor);
    nn_module_free(p->act_critic);
    pthread_mutex_destroy(&p->fwd_mu);
    pthread_mutex_destroy(&p->act_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    rref_free(r);
}

void policy_forget_caller(struct policy *p, int id)
{
    pthread_mutex_lock(&p->mu);
    if (id >= 0 && id < MAX_CALLERS && p->active[id]) {
        p->active[id] = false;
        p->n_active--;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

void policy_set_sync_callers(struct policy *p, const int *ids, int n)
{
    pthread_mutex_lock(&p->mu);
    memset(p->sync_in, 0, sizeof p->sync_in);
    p->sync_callers = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < MAX_CALLERS && !p->sync_in[ids[i]]) {
            p->sync_in[ids[i]] = true;
            p->sync_callers++;
        }
    p->sync_done = 0;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void policy_drop_sync_caller(struct policy *p, int id)
{
    pthread_mutex_lock(&p->mu);
    if (id >= 0 && id < MAX_CALLERS && p->sync_in[id]) {
        p->sync_in[id] = false;
        p->sync_callers--;
    }
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

int policy_sync_laggards(struct policy *p, double wait_s, int *ids, int cap)
{
    int n = 0;
    pthread_mutex_lock(&p->mu);
    if (p->lockstep && p->q_len > 0 && trib_now_s() - p->q[p->q_head].t >= wait_s) {
        bool queued[MAX_CALLERS] = { 0 };
        for (int i = 0; i < p->q_len; i++) {
            int c = p->q[(p->q_head + i) % QUEUE_CAP].caller;
            if (c >= 0 && c < MAX_CALLERS) queued[c] = true;
        }
        for (int c = 0; c < MAX_CALLERS && n < cap; c++)
            if (p->sync_in[c] && !queued[c]) ids[n++] = c;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}
