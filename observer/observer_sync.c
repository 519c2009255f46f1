/* Sync mode's side on the observer (docs/design.md §6 "Sync on-policy";
 * observer/state.h's observer_mode_sync): the agent drives, and this
 * observer serves its calls: a rollout (the report and minibatch 0's
 * observations back), each minibatch's loss and its gradients for the
 * agent's evaluation (a local backward), or an episodes algorithm's
 * episode. With overlap (cfg.overlap) a rollout runs while the previous
 * rollout's loss calls are served. */
#define _GNU_SOURCE
#include "observer/state.h"

#include "common/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/debug_dump.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

/* The minibatch after (epoch, mb), gathered; false after the last. */
static bool next_minibatch(const struct observer *o, int *epoch, int *mb)
{
    if (++*mb == o->cfg.minibatches) {
        *mb = 0;
        ++*epoch;
    }
    return *epoch < o->cfg.epochs;
}

/* Sync: observer_rollout() -> (report, observations of minibatch 0 of epoch 0). */
static int fn_rollout(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    const struct rpc_value *set;
    if (rl_rollout_req_unpack(args, &set) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    pthread_mutex_lock(&o->mu);
    int rc = !o->ready ? rl_set_error("not set up") : observer_norm_adopt(o, set, "rollout");
    if (rc == 0) rc = observer_rollout(o);
    if (rc == 0) rc = rl_learner_minibatch(&o->ln, 0, 0);
    if (rc == 0) {
        struct rl_rollout_reply rep = { .report = o->ln.report, .obs = o->ln.mb_obs, .norm = observer_norm_take_delta(o) };
        *res = rl_rollout_reply_pack(&rep);
        rpc_value_clear(&rep.norm);
    }
    pthread_mutex_unlock(&o->mu);
    return rc == 0 ? 0 : rpc_request_fail(req, "%s", rl_last_error());
}

/* Leaf t's gradient from the backward just run, or zeros like t (a loss
 * that does not reach it): a new reference, or NULL with rl_last_error(). */
static struct tensor *grad_of(struct tensor *t)
{
    if (!t) return NULL;
    if (t->grad) return tensor_retain(t->grad);
    struct tensor *g = tensor_new(DTYPE_F32, DEVICE_CPU, t->ndim, t->shape);
    if (!g) rl_set_error("gradient: %s", tensor_last_error());
    return g;
}

/* The loss of the current minibatch from the agent's evaluation out (its
 * tensors made leaves here; prox, the proximal policy's answer or NULL,
 * stays constant), a local backward, and d(loss)/d(out) into *g.
 * Statistics into *st. 0 or -1. */
static int loss_gradient(struct observer *o, struct rl_policy_out *out, const struct rl_policy_out *prox, double weight,
                         struct rl_update_stats *st, struct rl_policy_grad *g)
{
    struct tensor *leaves[3] = { out->a, out->log_std, out->value };
    for (int i = 0; i < 3; i++)
        if (leaves[i]) tensor_set_requires_grad(leaves[i], true);
    struct tensor *loss = observer_learner_loss(o, out, prox, weight, st);
    int rc = !loss ? -1 : tensor_backward(loss, NULL, false) != 0 ? rl_set_error("backward: %s", tensor_last_error()) : 0;
    tensor_free(loss);
    if (rc != 0) return -1;
    g->a = grad_of(out->a);
    g->log_std = grad_of(out->log_std);
    g->value = grad_of(out->value);
    return !g->a || (out->log_std && !g->log_std) || (out->value && !g->value) ? -1 : 0;
}

/* Sync with overlap (cfg.overlap; docs/design.md §6 "Overlap"): the same
 * call, but the rollout runs under roll_mu only, so that fn_loss (under mu)
 * serves the previous rollout's minibatches meanwhile. The rollout just
 * collected is handed over to slot (its number % 2), under mu: the agent
 * asks for rollout j only after every loss call of rollout j-2 was
 * answered, so that slot is free. */
static int fn_rollout_overlap(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    const struct rpc_value *set;
    if (rl_rollout_req_unpack(args, &set) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    pthread_mutex_lock(&o->roll_mu);
    pthread_mutex_lock(&o->mu);
    int rc = !o->ready ? rl_set_error("not set up") : 0;
    int64_t j = o->rollouts_done;
    /* every rollout before j-1 has been learnt from, or never will be */
    if (o->next_learn < j - 1) o->next_learn = j - 1;
    pthread_mutex_unlock(&o->mu);
    if (rc == 0) rc = observer_norm_adopt(o, set, "rollout");
    if (rc == 0) rc = observer_rollout(o);
    struct tensor *first = NULL;
    if (rc == 0) {
        int slot = (int)(j % 2);
        pthread_mutex_lock(&o->mu);
        rc = rl_learner_hand_over(&o->ln, slot);
        if (rc == 0) {
            o->slot_seq[slot] = j;
            o->rollouts_done = j + 1;
            first = rl_learner_first_obs(&o->ln, slot);
            if (!first) rc = -1;
        }
        pthread_mutex_unlock(&o->mu);
    }
    if (rc == 0) {
        struct rl_rollout_reply rep = { .report = o->ln.report, .obs = first, .norm = observer_norm_take_delta(o) };
        *res = rl_rollout_reply_pack(&rep);
        rpc_value_clear(&rep.norm);
    }
    tensor_free(first);
    pthread_mutex_unlock(&o->roll_mu);
    return rc == 0 ? 0 : rpc_request_fail(req, "%s", rl_last_error());
}

/* Overlap, under mu, before fn_loss looks at the minibatch: a loss call
 * m for minibatch 0 of epoch 0 starts the next rollout's updates, which
 * come from its slot (its first minibatch gathered again, as it was sent
 * in the rollout's reply). 0, or -1 with rl_last_error(). */
static int learn_turn(struct observer *o, const struct rl_loss_req *m)
{
    if (m->epoch != 0 || m->minibatch != 0) return 0;
    int64_t j = o->next_learn;
    int slot = (int)(j % 2);
    if (o->slot_seq[slot] != j)
        return rl_set_error("loss: rollout %lld has not been collected (a loss call before its rollout)", (long long)j);
    o->ln.learn_slot = slot;
    o->next_learn = j + 1;
    return rl_learner_minibatch(&o->ln, 0, 0);
}

/* Sync: loss(epoch, mb, weight, the agent's evaluation of the minibatch
 * this observer sent last[, the proximal policy's]), outside any context: the loss, a local
 * backward, and its gradients for the evaluation sent back with the next
 * minibatch's observations (one round trip an update). */
static int fn_loss(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    int64_t ctx = dist_autograd_current();
    if (ctx != 0) {   /* the copy its arrival made goes at once */
        dist_autograd_release_local(ctx);
        return rpc_request_fail(req, "loss: called inside a distributed-autograd context: this observer answers with "
                                     "its loss's gradients instead (one round trip an update)");
    }
    pthread_mutex_lock(&o->mu);
    struct rl_loss_req m = { 0 };
    struct rl_minibatch_reply rep = { 0 };
    int rc = 0;
    if (!o->ready) rc = rl_set_error("not set up");
    /* with overlap the request says which rollout it is for, so it is read
     * first (a minibatch's rows: the slot's minibatches are sync's) */
    else if (o->ln.overlap && (rl_loss_req_unpack(args, o->ln.ro.T * o->B / o->cfg.minibatches, o->A, !o->discrete,
                                                  o->value_head, &m) != 0 || learn_turn(o, &m) != 0))
        rc = -1;
    else if (!o->ln.mb_obs) rc = rl_set_error("loss: no minibatch is waiting (no rollout since the last update)");
    else if (!o->ln.overlap && rl_loss_req_unpack(args, o->ln.mb_rows, o->A, !o->discrete, o->value_head, &m) != 0)
        rc = -1;
    else if (m.epoch != o->ln.mb_epoch || m.minibatch != o->ln.mb_index)
        rc = rl_set_error("loss: minibatch %d of epoch %d asked, %d of epoch %d was sent", m.minibatch, m.epoch,
                          o->ln.mb_index, o->ln.mb_epoch);
    if (rc == 0) {
        if (rl_debug_dump_dir() && !o->dumped) observer_dump_minibatch(o, m.weight);
        rc = loss_gradient(o, &m.out, m.has_prox ? &m.prox : NULL, m.weight, &rep.stats, &rep.grad);
    }
    int e = m.epoch, mb = m.minibatch;
    if (rc == 0 && next_minibatch(o, &e, &mb)) {
        if (rl_learner_minibatch(&o->ln, e, mb) != 0) rc = -1;
        else rep.obs = o->ln.mb_obs;
    }
    if (rc == 0) *res = rl_minibatch_reply_pack(&rep);
    pthread_mutex_unlock(&o->mu);
    tensor_free(rep.grad.a);   /* rep.obs is the learner's */
    tensor_free(rep.grad.log_std);
    tensor_free(rep.grad.value);
    rl_loss_req_clear(&m);
    return rc == 0 ? 0 : rpc_request_fail(req, "%s", rl_last_error());
}

static int fn_episode(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct observer *o = u;
    if (args->list.len != 0) return rpc_request_fail(req, "expected no arguments");
    if (dist_autograd_current() == 0) return rpc_request_fail(req, "episode: must be called inside a context");
    pthread_mutex_lock(&o->mu);
    struct rl_loss_reply rep = { 0 };
    rep.loss = !o->ready ? (rl_set_error("not set up"), NULL) : observer_episode(o);
    if (rep.loss) {
        rep.report = o->ln.report;
        rep.stats.policy_loss = *(const float *)tensor_data(rep.loss);   /* the episode's own loss */
        *res = rl_loss_reply_pack(&rep);
    }
    pthread_mutex_unlock(&o->mu);
    if (!rep.loss) return rpc_request_fail(req, "%s", rl_last_error());
    tensor_free(rep.loss);
    return 0;
}

/* The functions the agent calls for each shape: a rollouts algorithm's
 * rollout and minibatch losses, an episodes algorithm's episode (the
 * observer serves only its algorithm's: an agent calling another one is
 * told there is no such function). */
static int serve_rollouts(void *u)
{
    struct observer *o = u;
    /* with overlap the rollout and the previous rollout's losses run at once */
    o->ln.overlap = o->cfg.overlap && o->cfg.mode == RL_MODE_SYNC;
    o->rollouts_done = o->next_learn = 0;
    o->slot_seq[0] = o->slot_seq[1] = -1;
    rpc_register(RL_FN_ROLLOUT, o->ln.overlap ? fn_rollout_overlap : fn_rollout, o);
    rpc_register(RL_FN_LOSS, fn_loss, o);
    return 0;
}

static int serve_episodes(void *u)
{
    struct observer *o = u;
    rpc_register(RL_FN_EPISODE, fn_episode, o);
    return 0;
}

static int serve(struct observer *o)
{
    return rl_algo_drive(o->algo, &(struct rl_drivers){ .drive = { [RL_SHAPE_EPISODES] = serve_episodes,
                                                                    [RL_SHAPE_ROLLOUTS] = serve_rollouts },
                                                         .ctx = o });
}

const struct observer_mode observer_mode_sync = { .serve = serve };
