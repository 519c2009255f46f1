/* Async mode's side on the observer (docs/design.md §6 "Async
 * on-policy"; observer/state.h's observer_mode_async): the agent's
 * rl_run_async starts this observer's own loop, which acts, learns and
 * sends its updates (rl_update) until the agent says stop. */
#define _GNU_SOURCE
#include "observer/state.h"

#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/debug_dump.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"
#include "tensor/ops.h"

/* rl_update of the pending update u (its context's backward done), with
 * next_obs (NULL: none) for the agent to evaluate in the thread's current
 * context: rep->out then holds its answer (rows of next_obs). The agent
 * frees its copy of u->ctx before answering; this one goes after. */
static int send_update(struct observer *o, struct rl_update_req *u, struct tensor *next_obs,
                       struct rl_update_reply *rep)
{
    u->next_obs = next_obs;
    struct rpc_value a = rl_update_req_pack(u), r = rpc_nil();
    u->next_obs = NULL;
    rpc_value_clear(&u->norm);
    int rc = 0;
    if (rpc_sync("agent", RL_FN_UPDATE, &a, &r, 0) != 0) rc = rl_set_error("update: %s", rpc_last_error());
    else if (rl_update_reply_unpack(&r, next_obs ? (int)next_obs->shape[0] : 0, o->A, !o->discrete, o->value_head,
                                    rep) != 0)
        rc = -1;
    else {
        if (rep->norm.kind == RPC_MAP && observer_norm_adopt(o, &rep->norm, "update reply") != 0) rc = -1;
        else if (next_obs && !rep->stop && !rep->stale && !rep->has_out)
            rc = rl_set_error("update: the agent did not evaluate the next minibatch");
        rpc_value_clear(&rep->norm);   /* adopted here: the callers take only stop, stale and out */
    }
    rpc_value_clear(&a);
    rpc_value_clear(&r);
    dist_autograd_release_local(u->ctx);
    return rc;
}

/* The backward of loss in its context (the current one), then the update
 * it becomes: *u, to be sent with the next evaluation. */
static int backward_into(struct observer *o, struct tensor *loss, int64_t ctx, bool first, struct rl_update_req *u)
{
    int rc = loss ? 0 : -1;
    if (rc == 0 && dist_autograd_backward(ctx, 1, &loss, false) != 0) rc = rl_set_error("backward: %s", rpc_last_error());
    tensor_free(loss);
    if (rc != 0) {
        dist_autograd_release_local(ctx);
        return -1;
    }
    u->ctx = ctx;
    u->version0 = o->ln.report.version0;
    u->has_report = first;
    u->report = o->ln.report;
    if (first) u->norm = observer_norm_take_delta(o);   /* what its envs added to the statistics, with the report */
    return 0;
}

/* An estimator with a correction (--vtrace: V-trace): the policy as it is
 * now answers for the whole rollout and the observation after it (in calls of at most --max-batch rows, no graph),
 * and the rollout's advantages and returns become V-trace's for it. */
static int target_correct(struct observer *o)
{
    struct rl_learner *l = &o->ln;
    int T = l->ro.T, B = l->B, D = o->D, A = o->A, rows = (T + 1) * B;
    int chunk = o->cfg.max_batch / B * B;
    float *a = malloc((size_t)rows * A * sizeof(float)), *v = malloc((size_t)rows * sizeof(float));
    float *log_std = calloc((size_t)A, sizeof(float));
    int rc = a && v && log_std ? 0 : rl_set_error("vtrace: out of memory");
    for (int start = 0; rc == 0 && start < rows; start += chunk) {
        int n = rows - start < chunk ? rows - start : chunk;
        int64_t shape[2] = { n, D };
        struct tensor *obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
        if (!obs) {
            rc = rl_set_error("vtrace: %s", tensor_last_error());
            break;
        }
        float *dst = tensor_data(obs);
        for (int r = 0; r < n; r++) {
            int row = start + r;
            const float *src = row < T * B ? l->ro.obs + (size_t)row * D : l->cur_obs + (size_t)(row - T * B) * D;
            memcpy(dst + (size_t)r * D, src, (size_t)D * sizeof(float));
        }
        struct rl_policy_out out;
        rc = observer_call_policy(o, RL_METHOD_ACT, obs, false, &out);
        tensor_free(obs);
        if (rc != 0) break;
        memcpy(a + (size_t)start * A, tensor_data(out.a), (size_t)n * A * sizeof(float));
        memcpy(v + start, tensor_data(out.value), (size_t)n * sizeof(float));
        if (out.log_std) memcpy(log_std, tensor_data(out.log_std), (size_t)A * sizeof(float));
        rl_policy_out_clear(&out);
    }
    if (rc == 0) rl_learner_correct(l, a, log_std, v, v + (size_t)T * B);
    free(a);
    free(v);
    free(log_std);
    return rc;
}

/* A rollout's updates (PPO/A2C): epochs x rl_observer_minibatches
 * (--minibatches / --observers: an update has as many samples as a sync
 * one, which joins every observer's share), each in a context of its own: minibatch
 * i's update goes to the agent with minibatch i+1's observations, which
 * the agent evaluates right after its step (one round trip for both); the
 * first minibatch is evaluated through the policy's RRef, the last update
 * goes alone. Writes *stop. */
static int async_updates(struct observer *o, bool *stop)
{
    struct rl_update_req u = { 0 };
    bool pending = false;
    if (o->ln.est->correct && target_correct(o) != 0) return -1;
    bool stale = false;
    const int per_epoch = rl_observer_minibatches(&o->cfg);
    for (int e = 0; e < o->cfg.epochs && !*stop; e++)
        for (int mb = 0; mb < per_epoch && !*stop; mb++) {
            int64_t ctx = dist_autograd_context_new();
            if (ctx < 0) return rl_set_error("context: %s", rpc_last_error());
            struct rl_policy_out out = { 0 };
            int rc = rl_learner_minibatch(&o->ln, e, mb);
            if (rc == 0 && rl_debug_dump_dir() && !o->dumped) observer_dump_minibatch(o, 1.0);
            if (rc == 0 && pending) {
                struct rl_update_reply rep;
                rc = send_update(o, &u, o->ln.mb_obs, &rep);
                pending = false;
                if (rc == 0) {
                    *stop = rep.stop;
                    stale = rep.stale;
                    out = rep.out;      /* moved */
                    rep.has_out = false;
                }
            } else if (rc == 0) {
                rc = observer_call_policy(o, RL_METHOD_EVALUATE, o->ln.mb_obs, false, &out);
            }
            /* dropped as too stale (--max-policy-lag): so is the rest of
             * this rollout; a new one follows */
            if (rc != 0 || *stop || stale) {
                rl_policy_out_clear(&out);
                dist_autograd_release_local(ctx);
                return rc;
            }
            struct rl_update_stats st;
            struct tensor *loss = observer_learner_loss(o, &out, NULL, 1.0, &st);
            rl_policy_out_clear(&out);
            u = (struct rl_update_req){ .stats = st };
            if (backward_into(o, loss, ctx, e == 0 && mb == 0, &u) != 0) return -1;
            pending = true;
        }
    if (!pending) return 0;
    struct rl_update_reply rep;
    int rc = send_update(o, &u, NULL, &rep);
    if (rc == 0) *stop = rep.stop;
    return rc;
}

/* An episodes algorithm: an episode in a fresh context, its backward, the update. */
static int async_episode(struct observer *o, bool *stop)
{
    int64_t ctx = dist_autograd_context_new();
    if (ctx < 0) return rl_set_error("context: %s", rpc_last_error());
    struct rl_update_req u = { 0 };
    struct tensor *loss = observer_episode(o);
    if (loss) u.stats.policy_loss = *(const float *)tensor_data(loss);   /* the episode's own loss */
    if (backward_into(o, loss, ctx, true, &u) != 0) return -1;
    struct rl_update_reply rep;
    int rc = send_update(o, &u, NULL, &rep);
    if (rc == 0) *stop = rep.stop;
    return rc;
}

/* The async loop's iteration per shape (rl_algo_drive). */
struct async_it {
    struct observer *o;
    bool stop;
};

static int async_episode_it(void *u)
{
    struct async_it *it = u;
    return async_episode(it->o, &it->stop);
}

static int async_rollout_it(void *u)
{
    struct async_it *it = u;
    return observer_rollout(it->o) != 0 ? -1 : async_updates(it->o, &it->stop);
}

static int async_loop(struct observer *o)
{
    struct async_it it = { .o = o };
    const struct rl_drivers d = { .drive = { [RL_SHAPE_EPISODES] = async_episode_it,
                                             [RL_SHAPE_ROLLOUTS] = async_rollout_it },
                                  .ctx = &it };
    while (!it.stop && !atomic_load(&o->shutdown))
        if (rl_algo_drive(o->algo, &d) != 0) return -1;
    return 0;
}

static int fn_run_async(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    if (args->list.len != 0) return rpc_request_fail(req, "expected no arguments");
    pthread_mutex_lock(&o->mu);
    int rc = o->ready ? async_loop(o) : rl_set_error("not set up");
    pthread_mutex_unlock(&o->mu);
    if (rc != 0) return rpc_request_fail(req, "%s", rl_last_error());
    *res = rpc_nil();
    return 0;
}

static int serve(struct observer *o)
{
    rpc_register(RL_FN_RUN_ASYNC, fn_run_async, o);
    return 0;
}

const struct observer_mode observer_mode_async = { .serve = serve };
