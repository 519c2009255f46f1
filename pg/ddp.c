/* DistributedDataParallel (ddp.h): a registry of live wrappers, the
 * distributed-autograd hooks that follow a backward run's gradients as they
 * complete, and each wrapper's reduction: a bucket is flattened and handed
 * to the wrapper's communication thread as soon as its gradients are all
 * in (in bucket order, the same on every member), so its allreduce runs
 * while the engine computes the rest; the averages replace the run's
 * gradients before they join the context. This file owns the registry;
 * each wrapper owns its buckets and its communication thread. */
#include "pg/ddp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "pg/pg_internal.h"
#include "rpc/dist_autograd.h"
#include "rpc/rpc.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

struct bucket {
    int first, n;               /* params order[first .. first+n) */
    struct tensor *flat;        /* the flattened gradients while a reduction runs */
    int state;                  /* 0 idle, 1 posted, 2 done */
    int rc;
    char err[512];
};

struct ddp {
    struct ddp *next;           /* registry, under reg_mu */
    struct nn_module *m;
    struct process_group *g;
    int *order;                 /* param indices, reverse of the module's order */
    struct bucket *buckets;
    int n_buckets;
    int64_t reductions;         /* under reg_mu */
    /* the reduction of the backward run under way, on its engine's thread (under reg_mu) */
    int64_t active_ctx;         /* its context, 0 when none */
    int64_t clash_ctx;          /* a run of another context that reached the module meanwhile */
    struct tensor **ready;      /* by bucket-order position: gradients in so far (owned) */
    int next_post;              /* buckets posted so far */
    int64_t posted_early;       /* buckets posted before their run ended */
    /* communication thread: allreduces posted buckets in order */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;                  /* under mu */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ddp *live;

/* ---- the communication thread ------------------------------------------------ */

static void *comm_main(void *arg)
{
    struct ddp *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        struct bucket *b = NULL;
        for (int k = 0; k < d->n_buckets && !b; k++)
            if (d->buckets[k].state == 1) b = &d->buckets[k];
        if (!b) {
            if (d->stop) break;
            pthread_cond_wait(&d->cv, &d->mu);
            continue;
        }
        pthread_mutex_unlock(&d->mu);
        int rc = pg_allreduce(d->g, b->flat, PG_AVG);
        if (rc) snprintf(b->err, sizeof b->err, "%s", pg_last_error());
        pthread_mutex_lock(&d->mu);
        b->rc = rc;
        b->state = 2;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- reduction ------------------------------------------------------------------
 * On the thread running the backward's engine: leaf_ready keeps each
 * parameter's gradient as it completes and posts every bucket whose
 * gradients are all in, in bucket order (the same on every member); the
 * communication thread allreduces them meanwhile. run_end posts what is
 * left (zeros for a parameter without a gradient), waits, and makes the
 * averages the run's gradients. */

/* Bucket b's gradients as one flat f32 tensor. Autograd is off. */
static struct tensor *flatten(struct ddp *d, const struct bucket *b)
{
    struct tensor **parts = trib_xcalloc((size_t)b->n, sizeof *parts);
    for (int j = 0; j < b->n; j++) {
        struct tensor *p = d->m->params[d->order[b->first + j]], *gr = d->ready[b->first + j];
        struct tensor *z = gr ? NULL : tensor_new(DTYPE_F32, p->device, p->ndim, p->shape);
        CHECK(gr || z);
        parts[j] = tensor_reshape(gr ? gr : z, 1, &p->numel);
        CHECK(parts[j]);
        tensor_free(z);
    }
    struct tensor *flat = tensor_cat(b->n, parts, 0);
    CHECK(flat);
    for (int j = 0; j < b->n; j++) tensor_free(parts[j]);
    free(parts);
    return flat;
}

static void post(struct ddp *d, int k)
{
    bool was = autograd_set_enabled(false);
    struct tensor *flat = flatten(d, &d->buckets[k]);
    autograd_set_enabled(was);
    pthread_mutex_lock(&d->mu);
    d->buckets[k].flat = flat;
    d->buckets[k].state = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Posts the buckets, in order, whose gradients are all in (all: every one). */
static void post_ready(struct ddp *d, bool all)
{
    while (d->next_post < d->n_buckets) {
        const struct bucket *b = &d->buckets[d->next_post];
        for (int j = 0; !all && j < b->n; j++)
            if (!d->ready[b->first + j]) return;
        post(d, d->next_post++);
        d->posted_early += !all;
    }
}

/* Makes bucket b's averages the run's gradients. */
static void unflatten(struct ddp *d, struct dist_autograd_run *run, struct bucket *b)
{
    int64_t *sizes = trib_xcalloc((size_t)b->n, sizeof *sizes);
    struct tensor **pieces = trib_xcalloc((size_t)b->n, sizeof *pieces);
    for (int j = 0; j < b->n; j++) sizes[j] = d->m->params[d->order[b->first + j]]->numel;
    CHECK(tensor_split(b->flat, 0, b->n, sizes, pieces) == 0);
    for (int j = 0; j < b->n; j++) {
        struct tensor *p = d->m->params[d->order[b->first + j]];
        struct tensor *gr = tensor_reshape(pieces[j], p->ndim, p->shape);
        CHECK(gr);
        dist_autograd_run_set_gradient(run, p, gr);
        tensor_free(gr);
        tensor_free(pieces[j]);
    }
    free(pieces);
    free(sizes);
}

/* Ends d's reduction of this run: 0, or -1 with rpc_set_error (a member
 * gone: the group's error names it). */
static int finish(struct ddp *d, struct dist_autograd_run *run)
{
    post_ready(d, true);
    bool was = autograd_set_enabled(false);
    int rc = 0;
    for (int k = 0; k < d->n_buckets; k++) {
        struct bucket *b = &d->buckets[k];
        pthread_mutex_lock(&d->mu);
        while (b->state != 2) pthread_cond_wait(&d->cv, &d->mu);
        pthread_mutex_unlock(&d->mu);
        if (b->rc && rc == 0) rc = rpc_set_error("ddp: %s", b->err);
        if (rc == 0) unflatten(d, run, b);
        tensor_free(b->flat);
        b->flat = NULL;
        b->state = 0;
    }
    autograd_set_enabled(was);
    for (int j = 0; j < d->m->n_params; j++) {
        tensor_free(d->ready[j]);
        d->ready[j] = NULL;
    }
    d->next_post = 0;
    d->active_ctx = 0;
    d->reductions++;
    return rc;
}

/* The position of leaf in d's bucket order, or -1. */
static int position(const struct ddp *d, const struct tensor *leaf)
{
    for (int j = 0; j < d->m->n_params; j++)
        if (d->m->params[d->order[j]] == leaf) return j;
    return -1;
}

static void hook_leaf_ready(void *user, int64_t ctx, struct tensor *leaf, struct tensor *grad)
{
    pthread_mutex_lock(&reg_mu);
    for (struct ddp *d = live; d; d = d->next) {
        int j = position(d, leaf);
        if (j < 0) continue;
        if (d->active_ctx && d->active_ctx != ctx) {   /* the contract's one at a time, broken */
            d->clash_ctx = ctx;
            continue;
        }
        d->active_ctx = ctx;
        tensor_free(d->ready[j]);
        d->ready[j] = tensor_retain(grad);
        post_ready(d, false);
    }
    pthread_mutex_unlock(&reg_mu);
}

/* Every wrapper this run reached ends its reduction. The registry lock is
 * held throughout, so ddp_free waits for it. */
static int hook_run_end(void *user, int64_t ctx, struct dist_autograd_run *run)
{
    int rc = 0;
    pthread_mutex_lock(&reg_mu);
    for (struct ddp *d = live; d; d = d->next) {
        if (d->active_ctx == ctx && finish(d, run) != 0 && rc == 0) rc = -1;
        if (d->clash_ctx == ctx) {
            d->clash_ctx = 0;
            if (rc == 0)
                rc = rpc_set_error("ddp: a backward in context %lld reached the module while one in context %lld "
                                   "was under way (one at a time per process)", (long long)ctx,
                                   (long long)d->active_ctx);
        }
    }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

int ddp_init(void)
{
    static const struct dist_autograd_hooks h = {hook_leaf_ready, hook_run_end, NULL};
    dist_autograd_set_backward_hooks(&h);
    return 0;
}

/* ---- wrappers ---------------------------------------------------------------------- */

/* As torch's DDP (_verify_param_shape_across_processes): every member's
 * parameter count, then each parameter's dtype, shape and device class,
 * compared on every member alike. 0, or -1 with pg_last_error() naming
 * the parameter and both sides. */
static int compare_params(struct nn_module *m, struct process_group *g)
{
    const char *who = "ddp_new";
    int size = pg_size(g);
    char a[96], b[96], ta[128], tb[128];
    int64_t count = m->n_params, *counts = trib_xcalloc((size_t)size, sizeof *counts);
    int rc = pg_exchange(g, PG_OP_DDP_NEW, &count, 1, counts);
    for (int r = 1; rc == 0 && r < size; r++)
        if (counts[r] != counts[0]) {
            pg_member_format(g, 0, a, sizeof a);
            pg_member_format(g, r, b, sizeof b);
            rc = pg_set_error("%s: group '%s': %s has %lld parameters, %s has %lld", who, pg_name(g), a,
                              (long long)counts[0], b, (long long)counts[r]);
        }
    free(counts);
    if (rc != 0 || m->n_params == 0) return rc;
    int words = m->n_params * PG_TENSOR_WORDS;
    int64_t *mine = trib_xcalloc((size_t)words, sizeof *mine), *all = trib_xcalloc((size_t)words * size, sizeof *all);
    for (int i = 0; i < m->n_params; i++) pg_tensor_words(m->params[i], mine + i * PG_TENSOR_WORDS);
    rc = pg_exchange(g, PG_OP_DDP_NEW, mine, words, all);
    for (int i = 0; rc == 0 && i < m->n_params; i++)
        for (int r = 0; rc == 0 && r < size; r++) {
            const int64_t *p0 = all + i * PG_TENSOR_WORDS, *pr = all + ((size_t)r * words + i * PG_TENSOR_WORDS);
            pg_member_format(g, r, b, sizeof b);
            if (!pg_tensor_words_valid(pr))
                rc = pg_set_error("%s: group '%s': parameter %d: %s sent a malformed description", who, pg_name(g),
                                  i, b);
            else if (memcmp(p0, pr, PG_TENSOR_WORDS * sizeof *p0)) {
                pg_member_format(g, 0, a, sizeof a);
                pg_tensor_words_format(p0, ta, sizeof ta);
                pg_tensor_words_format(pr, tb, sizeof tb);
                rc = pg_set_error("%s: group '%s': parameter %d: %s has %s, %s has %s", who, pg_name(g), i, a, ta,
                                  b, tb);
            }
        }
    free(mine);
    free(all);
    return rc;
}

struct ddp *ddp_new(struct nn_module *m, struct process_group *g, size_t bucket_bytes)
{
    const char *who = "ddp_new";
    if (!m || !g) {
        pg_set_error("%s: a module and a group are required", who);
        return NULL;
    }
    if (!bucket_bytes) bucket_bytes = DDP_BUCKET_BYTES;
    for (int i = 0; i < m->n_params; i++) {
        struct tensor *p = m->params[i];
        if (p->dtype != DTYPE_F32) {
            pg_set_error("%s: parameter %d is %s (only f32 parameters have gradients)", who, i, dtype_name(p->dtype));
            return NULL;
        }
        if (p->device != m->params[0]->device) {
            pg_set_error("%s: parameters on two devices (%s and %s)", who, device_name(m->params[0]->device),
                         device_name(p->device));
            return NULL;
        }
    }
    if (compare_params(m, g) != 0) return NULL;
    for (int i = 0; i < m->n_params; i++)
        if (pg_broadcast(g, m->params[i], 0) != 0) return NULL;   /* pg_last_error names the member */
    struct ddp *d = trib_xcalloc(1, sizeof *d);
    d->m = m;
    d->g = g;
    d->order = trib_xcalloc((size_t)m->n_params + 1, sizeof *d->order);
    d->buckets = trib_xcalloc((size_t)m->n_params + 1, sizeof *d->buckets);
    d->ready = trib_xcalloc((size_t)m->n_params + 1, sizeof *d->ready);
    size_t filled = 0;
    for (int j = 0; j < m->n_params; j++) {
        d->order[j] = m->n_params - 1 - j;
        size_t bytes = tensor_nbytes(m->params[d->order[j]]);
        if (d->n_buckets == 0 || filled + bytes > bucket_bytes) {
            d->buckets[d->n_buckets++].first = j;
            filled = 0;
        }
        d->buckets[d->n_buckets - 1].n++;
        filled += bytes;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    CHECK(pthread_create(&d->thread, NULL, comm_main, d) == 0);
    pthread_mutex_lock(&reg_mu);
    d->next = live;
    live = d;
    pthread_mutex_unlock(&reg_mu);
    return d;
}

void ddp_free(struct ddp *d)
{
    if (!d) return;
    pthread_mutex_lock(&reg_mu);
    for (struct ddp **pp = &live; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    for (int j = 0; j < d->m->n_params; j++) tensor_free(d->ready[j]);
    free(d->ready);
    free(d->order);
    free(d->buckets);
    free(d);
}

int ddp_forward(struct ddp *d, int n_in, struct tensor **in, int *n_out, struct tensor **out)
{
    return nn_forward(d->m, n_in, in, n_out, out);
}

struct nn_module *ddp_module(struct ddp *d) { return d->m; }
int ddp_num_buckets(const struct ddp *d) { return d->n_buckets; }

int64_t ddp_num_early_buckets(const struct ddp *d)
{
    pthread_mutex_lock(&reg_mu);
    int64_t n = d->posted_early;
    pthread_mutex_unlock(&reg_mu);
    return n;
}

int64_t ddp_num_reductions(const struct ddp *d)
{
    pthread_mutex_lock(&reg_mu);
    int64_t n = d->reductions;
    pthread_mutex_unlock(&reg_mu);
    return n;
}
