/* DistributedDataParallel (ddp.h): a registry of live wrappers, the
 * distributed-autograd run hook that finds the wrappers a backward run
 * reached, and each wrapper's reduction: buckets flattened on the calling
 * thread while a communication thread allreduces the previous ones (in
 * bucket order, the same on every member), then written back into the
 * context. This file owns the registry; each wrapper owns its buckets and
 * its communication thread. */
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

/* ---- reduction ------------------------------------------------------------------ */

/* Bucket b's gradients in ctx as one flat f32 tensor (zeros for a
 * parameter with none). Autograd is off. */
static struct tensor *flatten(struct ddp *d, int64_t ctx, const struct bucket *b)
{
    struct tensor **parts = trib_xcalloc((size_t)b->n, sizeof *parts);
    for (int j = 0; j < b->n; j++) {
        struct tensor *p = d->m->params[d->order[b->first + j]];
        struct tensor *gr = dist_autograd_get_gradient(ctx, p);
        if (!gr) gr = tensor_new(DTYPE_F32, p->device, p->ndim, p->shape);
        CHECK(gr);
        parts[j] = tensor_reshape(gr, 1, &p->numel);
        CHECK(parts[j]);
        tensor_free(gr);
    }
    struct tensor *flat = tensor_cat(b->n, parts, 0);
    CHECK(flat);
    for (int j = 0; j < b->n; j++) tensor_free(parts[j]);
    free(parts);
    return flat;
}

/* Writes bucket b's averaged gradients back into ctx. */
static int unflatten(struct ddp *d, int64_t ctx, struct bucket *b)
{
    int64_t *sizes = trib_xcalloc((size_t)b->n, sizeof *sizes);
    struct tensor **pieces = trib_xcalloc((size_t)b->n, sizeof *pieces);
    for (int j = 0; j < b->n; j++) sizes[j] = d->m->params[d->order[b->first + j]]->numel;
    CHECK(tensor_split(b->flat, 0, b->n, sizes, pieces) == 0);
    int rc = 0;
    for (int j = 0; j < b->n; j++) {
        struct tensor *p = d->m->params[d->order[b->first + j]];
        struct tensor *gr = tensor_reshape(pieces[j], p->ndim, p->shape);
        CHECK(gr);
        if (rc == 0 && dist_autograd_set_gradient(ctx, p, gr) != 0) rc = -1;
        tensor_free(gr);
        tensor_free(pieces[j]);
    }
    free(pieces);
    free(sizes);
    return rc;
}

/* Averages d's gradients in ctx across its group. 0, or -1 with
 * rpc_set_error (a member gone: the group's error names it). */
static int reduce(struct ddp *d, int64_t ctx)
{
    bool was = autograd_set_enabled(false);
    for (int k = 0; k < d->n_buckets; k++) {
        struct tensor *flat = flatten(d, ctx, &d->buckets[k]);
        pthread_mutex_lock(&d->mu);
        d->buckets[k].flat = flat;
        d->buckets[k].state = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
    int rc = 0;
    for (int k = 0; k < d->n_buckets; k++) {
        struct bucket *b = &d->buckets[k];
        pthread_mutex_lock(&d->mu);
        while (b->state != 2) pthread_cond_wait(&d->cv, &d->mu);
        pthread_mutex_unlock(&d->mu);
        if (b->rc && rc == 0) rc = rpc_set_error("ddp: %s", b->err);
        if (rc == 0 && unflatten(d, ctx, b) != 0) rc = -1;
        tensor_free(b->flat);
        b->flat = NULL;
        b->state = 0;
    }
    autograd_set_enabled(was);
    return rc;
}

static bool reached(const struct ddp *d, int n, struct tensor *const *leaves)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d->m->n_params; j++)
            if (leaves[i] == d->m->params[j]) return true;
    return false;
}

/* The run hook: reduces every wrapper whose parameters the run reached.
 * The registry lock is held throughout, so ddp_free waits for it. */
static int run_hook(void *user, int64_t ctx, int n, struct tensor *const *leaves)
{
    int rc = 0;
    pthread_mutex_lock(&reg_mu);
    for (struct ddp *d = live; d && rc == 0; d = d->next)
        if (reached(d, n, leaves)) {
            rc = reduce(d, ctx);
            d->reductions++;
        }
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

int ddp_init(void)
{
    dist_autograd_set_run_hook(run_hook, NULL);
    return 0;
}

/* ---- wrappers ---------------------------------------------------------------------- */

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
    for (int i = 0; i < m->n_params; i++)
        if (pg_broadcast(g, m->params[i], 0) != 0) return NULL;   /* pg_last_error names the member */
    struct ddp *d = trib_xcalloc(1, sizeof *d);
    d->m = m;
    d->g = g;
    d->order = trib_xcalloc((size_t)m->n_params + 1, sizeof *d->order);
    d->buckets = trib_xcalloc((size_t)m->n_params + 1, sizeof *d->buckets);
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

int64_t ddp_num_reductions(const struct ddp *d)
{
    pthread_mutex_lock(&reg_mu);
    int64_t n = d->reductions;
    pthread_mutex_unlock(&reg_mu);
    return n;
}
