/* The agent's policy module: its forward, the graph-recording evaluate
 * (per-caller dropout streams), the acting copy policy_freeze and what the
 * policy's other files reach. The RPC-served object (construction behind an
 * RRef, the act server) is policy_serve.c; sync mode's batched update
 * policy_batch.c, the files and bytes a policy becomes policy_store.c:
 * they reach the policy through the functions policy.h gives them. */
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

/* ---- the module ---------------------------------------------------------------- */

int policy_forward(struct policy *p, struct tensor *obs, struct rl_policy_out *o)
{
    if (rl_arch_forward(&p->shape, p->actor, p->critic, p->dev, obs, o) != 0) return -1;
    o->version = dist_optim_local_version();
    return 0;
}

/* splitmix64's finaliser */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void policy_dropout_epoch(struct policy *p)
{
    pthread_mutex_lock(&p->fwd_mu);
    p->actor->rng = mix64(p->actor->rng + 0x9E3779B97F4A7C15ull);
    memset(p->drop_seq, 0, sizeof p->drop_seq);
    pthread_mutex_unlock(&p->fwd_mu);
}

int policy_evaluate(struct policy *p, struct tensor *obs, struct rl_policy_out *out, int caller)
{
    if (obs->shape[1] != p->shape.obs_dim)
        return rpc_set_error("evaluate: observations of %lld values, the policy takes %d", (long long)obs->shape[1],
                             p->shape.obs_dim);
    pthread_mutex_lock(&p->fwd_mu);
    double t0 = trib_now_s();
    uint64_t base = p->actor->rng;
    bool own_stream = caller >= 0 && caller < (int)(sizeof p->drop_seq / sizeof p->drop_seq[0]);   /* MAX_CALLERS */
    if (own_stream)
        p->actor->rng = mix64(base ^ mix64((uint64_t)caller << 40 ^ p->drop_seq[caller]++));
    int rc = policy_forward(p, obs, out);
    if (own_stream) p->actor->rng = base;
    double dt = trib_now_s() - t0;
    pthread_mutex_unlock(&p->fwd_mu);
    if (rc != 0) return rpc_set_error("evaluate: %s", tensor_last_error());
    pthread_mutex_lock(&p->mu);
    p->stats.evaluate_calls++;
    p->stats.forward_s += dt;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

struct rref *policy_rref(struct policy *p) { return p->rref; }

struct rref **policy_param_rrefs(struct policy *p, int *n)
{
    *n = p->n_params;
    return p->param_rrefs;
}

int policy_params(struct policy *p, struct tensor ***params)
{
    *params = p->params;
    return p->n_params;
}

int policy_freeze(struct policy *p)
{
    pthread_mutex_lock(&p->act_mu);
    int rc = 0;
    if (!p->act_actor) {
        struct nn_module *a = NULL, *c = NULL;
        if (policy_arch_build(&p->shape, 0, &a, p->critic ? &c : NULL) != 0 ||
            (p->dev != DEVICE_CPU && (nn_module_to(a, p->dev) != 0 || (c && nn_module_to(c, p->dev) != 0)))) {
            nn_module_free(a);
            nn_module_free(c);
            pthread_mutex_unlock(&p->act_mu);
            return rpc_set_error("policy: the acting copy: %s", tensor_last_error());
        }
        p->act_actor = a;
        p->act_critic = c;
        CHECK(a->n_params + (c ? c->n_params : 0) == p->n_params);   /* one architecture */
    }
    pthread_mutex_lock(&p->fwd_mu);
    int na = p->act_actor->n_params;
    for (int i = 0; i < p->n_params && rc == 0; i++) {
        struct tensor *dst = i < na ? p->act_actor->params[i] : p->act_critic->params[i - na];
        struct tensor *snap = tensor_snapshot(p->params[i]);
        void *host = snap ? malloc(tensor_nbytes(snap)) : NULL;
        if (!host) rc = rpc_set_error("policy: the acting copy: out of memory");
        else {
            tensor_copy_to_host(snap, host);
            if (tensor_write_from_host(dst, host, tensor_nbytes(snap)) != 0)
                rc = rpc_set_error("policy: the acting copy: %s", tensor_last_error());
        }
        free(host);
        tensor_free(snap);
    }
    /* dropout: the copy draws its masks from the live module's state, which
     * moves on, so that the next rollout's masks are new ones */
    p->act_actor->training = p->actor->training;
    p->act_actor->rng = p->actor->rng;
    p->prox_rng = mix64(p->actor->rng ^ 0xD1B54A32D192ED03ull);
    p->actor->rng = mix64(p->actor->rng + 0x9E3779B97F4A7C15ull);
    p->act_version = dist_optim_local_version();
    pthread_mutex_unlock(&p->fwd_mu);
    pthread_mutex_unlock(&p->act_mu);
    if (rc != 0) return -1;
    pthread_mutex_lock(&p->mu);
    p->frozen = true;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int policy_forward_frozen(struct policy *p, struct tensor *obs, struct rl_policy_out *out)
{
    pthread_mutex_lock(&p->act_mu);
    if (!p->act_actor) {
        pthread_mutex_unlock(&p->act_mu);
        return rpc_set_error("policy: no acting copy to evaluate (policy_freeze was not called)");
    }
    bool was = autograd_set_enabled(false);
    uint64_t act_rng = p->act_actor->rng;   /* the act calls' stream, left where it was */
    p->act_actor->rng = p->prox_rng;
    double t0 = trib_now_s();
    int rc = rl_arch_forward(&p->shape, p->act_actor, p->act_critic, p->dev, obs, out);
    double dt = trib_now_s() - t0;
    p->prox_rng = p->act_actor->rng;
    p->act_actor->rng = act_rng;
    out->version = p->act_version;
    autograd_set_enabled(was);
    pthread_mutex_unlock(&p->act_mu);
    if (rc != 0) return rpc_set_error("policy: the acting copy's forward: %s", tensor_last_error());
    policy_count_forward(p, 0, dt);
    return 0;
}

void policy_get_stats(struct policy *p, struct policy_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}

/* ---- what the policy's other files reach (policy_batch.c, policy_store.c) ---- */

void policy_lock_module(struct policy *p) { pthread_mutex_lock(&p->fwd_mu); }
void policy_unlock_module(struct policy *p) { pthread_mutex_unlock(&p->fwd_mu); }

void policy_count_forward(struct policy *p, int64_t evaluate_calls, double seconds)
{
    pthread_mutex_lock(&p->mu);
    p->stats.evaluate_calls += evaluate_calls;
    p->stats.forward_s += seconds;
    pthread_mutex_unlock(&p->mu);
}

const struct policy_arch *policy_shape(const struct policy *p) { return &p->shape; }
struct nn_module *policy_actor(struct policy *p) { return p->actor; }
const char *policy_env_name(const struct policy *p) { return p->cfg.env; }
const char *policy_env_args(const struct policy *p) { return p->cfg.env_arg; }
