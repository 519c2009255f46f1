/* Sync mode's update on the agent (docs/design.md §6 "Sync on-policy"):
 * one recorded forward of every observer's minibatch (policy_evaluate_batch),
 * each observer's rows sent as plain data, and the backward through that
 * one forward of the gradients the observers' losses gave them, which
 * came back with their replies (policy_batch_backward); with --overlap's
 * decoupled correction, the acting copy's answer for the same rows
 * (policy_evaluate_frozen_batch). */
#define _GNU_SOURCE
#include "agent/policy.h"
#include "agent/policy_batch.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "rl/rl.h"
#include "rpc/dist_autograd.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

struct policy_batch {
    struct policy *p;
    int n;
    struct rl_policy_out merged;    /* recorded: the graph back to the parameters */
    struct rl_policy_out *outs;     /* the caller's: the parts sent to observers */
};

/* x's rows [start, end) (the whole of x when end < 0), without graph. */
static struct tensor *part_of(struct tensor *x, int64_t start, int64_t end)
{
    return end < 0 ? tensor_detach(x) : tensor_slice(x, start, end);
}

/* The n observers' observations as one [rows, D] tensor, in observer
 * order (a new reference), or NULL with rpc_last_error(). */
static struct tensor *merged_obs(int n, struct tensor *const *obs)
{
    struct tensor *x = n == 1 ? tensor_retain(obs[0]) : tensor_cat(n, (struct tensor **)obs, 0);
    if (!x) rpc_set_error("evaluate: %s", tensor_last_error());
    return x;
}

/* Observer k's part of the merged answer into outs[k] (no graph), for the
 * n observers of obs; -1 with rpc_last_error() (outs then cleared). */
static int split_out(const struct rl_policy_out *merged, int n, struct tensor *const *obs, struct rl_policy_out *outs)
{
    int rc = 0;
    bool was = autograd_set_enabled(false);
    int64_t start = 0;
    for (int k = 0; k < n && rc == 0; k++) {
        int64_t r = obs[k]->shape[0];
        outs[k].a = part_of(merged->a, start, start + r);
        outs[k].log_std = merged->log_std ? part_of(merged->log_std, 0, -1) : NULL;
        outs[k].value = merged->value ? part_of(merged->value, start, start + r) : NULL;
        outs[k].version = merged->version;
        if (!outs[k].a || (merged->log_std && !outs[k].log_std) || (merged->value && !outs[k].value)) rc = -1;
        start += r;
    }
    autograd_set_enabled(was);
    if (rc == 0) return 0;
    for (int k = 0; k < n; k++) rl_policy_out_clear(&outs[k]);
    return rpc_set_error("evaluate: %s", tensor_last_error());
}

struct policy_batch *policy_evaluate_batch(struct policy *p, int n, struct tensor *const *obs,
                                           struct rl_policy_out *outs)
{
    struct tensor *x = merged_obs(n, obs);
    if (!x) return NULL;
    struct policy_batch *b = trib_xcalloc(1, sizeof *b);
    b->p = p;
    b->n = n;
    b->outs = outs;
    memset(outs, 0, (size_t)n * sizeof *outs);
    policy_lock_module(p);
    double t0 = trib_now_s();
    int rc = policy_forward(p, x, &b->merged);
    double dt = trib_now_s() - t0;
    policy_unlock_module(p);
    tensor_free(x);
    if (rc != 0) {
        rpc_set_error("evaluate: %s", tensor_last_error());
        free(b);
        return NULL;
    }
    if (split_out(&b->merged, n, obs, outs) != 0) {
        policy_batch_free(b);
        return NULL;
    }
    policy_count_forward(p, n, dt);
    return b;
}

int policy_evaluate_frozen_batch(struct policy *p, int n, struct tensor *const *obs, struct rl_policy_out *outs)
{
    memset(outs, 0, (size_t)n * sizeof *outs);
    struct tensor *x = merged_obs(n, obs);
    if (!x) return -1;
    struct rl_policy_out merged = { 0 };
    int rc = policy_forward_frozen(p, x, &merged);
    tensor_free(x);
    if (rc == 0) rc = split_out(&merged, n, obs, outs);
    rl_policy_out_clear(&merged);
    return rc;
}

/* *g moved to x's device (the wire brings host copies; the forward may
 * have run on a GPU), *g NULL when that fails; x NULL: left as it is. */
static void to_device_of(struct tensor **g, const struct tensor *x)
{
    if (!x || !*g || (*g)->device == x->device) return;
    struct tensor *moved = tensor_clone_to(*g, x->device);
    tensor_free(*g);
    *g = moved;
}

/* sum(x * g): its backward gives x the gradient g exactly. */
static struct tensor *dot(struct tensor *x, struct tensor *g)
{
    struct tensor *m = x && g ? tensor_mul(x, g) : NULL;
    struct tensor *s = m ? tensor_sum(m) : NULL;
    tensor_free(m);
    return s;
}

int policy_batch_backward(struct policy_batch *b, const struct rl_policy_grad *grads, int64_t ctx)
{
    struct tensor *ga[RL_MAX_OBSERVERS] = { 0 }, *gv[RL_MAX_OBSERVERS] = { 0 };
    struct tensor *g_a = NULL, *g_v = NULL, *g_ls = NULL, *root = NULL;
    int rc = -1, n = b->n;
    for (int k = 0; k < n; k++)   /* the caller checked them against outs[k]: a broken promise is a bug */
        CHECK(grads[k].a && (!b->merged.value) == (!grads[k].value) && (!b->merged.log_std) == (!grads[k].log_std));
    bool was = autograd_set_enabled(false);
    for (int k = 0; k < n; k++) {
        ga[k] = grads[k].a;
        gv[k] = grads[k].value;
        if (b->merged.log_std) {
            /* one log_std for every observer: their gradients summed in observer order */
            struct tensor *sum = g_ls ? tensor_add(g_ls, grads[k].log_std) : tensor_retain(grads[k].log_std);
            tensor_free(g_ls);
            g_ls = sum;
        }
    }
    g_a = n == 1 ? tensor_retain(ga[0]) : tensor_cat(n, ga, 0);
    if (b->merged.value) g_v = n == 1 ? tensor_retain(gv[0]) : tensor_cat(n, gv, 0);
    to_device_of(&g_a, b->merged.a);
    to_device_of(&g_v, b->merged.value);
    to_device_of(&g_ls, b->merged.log_std);
    autograd_set_enabled(was);
    if (g_a && (!b->merged.value || g_v) && (!b->merged.log_std || g_ls)) {
        root = dot(b->merged.a, g_a);
        struct tensor *parts[2] = { b->merged.value ? dot(b->merged.value, g_v) : NULL,
                                    b->merged.log_std ? dot(b->merged.log_std, g_ls) : NULL };
        for (int i = 0; i < 2 && root; i++) {
            if (!parts[i]) continue;
            struct tensor *s = tensor_add(root, parts[i]);
            tensor_free(root);
            root = s;
        }
        tensor_free(parts[0]);
        tensor_free(parts[1]);
    }
    if (!root) rpc_set_error("backward: %s", tensor_last_error());
    else {
        policy_lock_module(b->p);
        double t0 = trib_now_s();
        rc = dist_autograd_backward(ctx, 1, &root, false);
        double dt = trib_now_s() - t0;
        policy_unlock_module(b->p);
        policy_count_forward(b->p, 0, dt);
    }
    tensor_free(g_a);
    tensor_free(g_v);
    tensor_free(g_ls);
    tensor_free(root);
    return rc;
}

void policy_batch_free(struct policy_batch *b)
{
    if (!b) return;
    for (int k = 0; k < b->n; k++) rl_policy_out_clear(&b->outs[k]);
    rl_policy_out_clear(&b->merged);
    free(b);
}

