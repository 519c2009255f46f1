/* Private to agent/policy.c and agent/policy_serve.c: the policy object
 * both work on (policy.c the module, its forward, evaluate and acting copy;
 * policy_serve.c its RPC construction and the act server) and the act
 * queue's entries. Everything else reaches the policy through policy.h. */
#ifndef TRIB_AGENT_POLICY_INTERNAL_H
#define TRIB_AGENT_POLICY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/policy.h"
#include "tensor/nn.h"

#define QUEUE_CAP 1024
#define MAX_CALLERS 1024            /* worker ids tracked for merging */
#define INLINE_ROWS 256             /* a complete batch of up to this many rows is served on the I/O thread */

struct policy_pending {
    struct rpc_request *req;
    struct tensor *obs;
    int caller;
    bool last;
    double t;                       /* when it was queued (trib_now_s) */
};

struct policy {
    struct rl_config cfg;
    struct policy_arch shape;
    struct nn_module *actor;        /* obs -> logits or mean (+ log_std) */
    struct nn_module *critic;       /* obs -> value [N,1]; NULL without a value head */
    struct tensor **params;         /* actor's then critic's (borrowed) */
    int n_params;
    enum device dev;
    pthread_mutex_t fwd_mu;         /* one forward at a time: dropout's RNG, the module */
    uint64_t drop_seq[MAX_CALLERS]; /* under fwd_mu: evaluate forwards per caller since the epoch */
    struct rref *rref;              /* owner RRef holding this object */
    struct rref **param_rrefs;
    /* the act server */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started, stopping;
    struct policy_pending q[QUEUE_CAP];
    int q_head, q_len, q_rows;
    int q_count[MAX_CALLERS];       /* queued calls per caller */
    int q_callers;                  /* callers with a call queued */
    struct policy_pending kept[QUEUE_CAP]; /* take_batch's scratch (under mu) */
    bool active[MAX_CALLERS];       /* callers between their first act and their `last` one */
    int n_active;
    bool lockstep;                  /* policy_new's: merged act calls wait for every sync caller */
    int sync_callers;               /* lockstep: observers every merged forward waits for, */
    int sync_done;                  /* less those whose `last` call of the rollout was served */
    bool sync_in[MAX_CALLERS];      /* lockstep: the rollout's callers whose `last` call is not served yet */
    struct policy_stats stats;
    /* sync mode's overlap (policy_freeze): once frozen, act calls are
     * answered by this copy of the parameters, so that they never wait on
     * an update nor see one half applied */
    bool frozen;                    /* under mu: act forwards use the copy */
    pthread_mutex_t act_mu;         /* the copy: one act forward, or a freeze, at a time */
    struct nn_module *act_actor, *act_critic;
    int64_t act_version;            /* the optimizer's version the copy was taken at */
    uint64_t prox_rng;              /* under act_mu: the copy's dropout stream for policy_forward_frozen */
};

#endif
