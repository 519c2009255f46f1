/* Distributed autograd's contexts (rpc/README.md "Distributed autograd"):
 * the registry of contexts, who took part in each here (what releases and
 * gradients are checked against), their send functions and the gradients
 * that accumulate in them. dist_autograd.c calls into it; it calls nothing
 * there. */
#include "rpc/dist_context.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rpc/rpc.h"
#include "tensor/ops.h"

/* ---- registry ------------------------------------------------------------
 * A hash map from id to context (under reg_mu). Contexts other workers'
 * requests create are bounded per creator and freed when released, when
 * their creator or originating worker leaves or dies, or when idle. */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dist_ctx **buckets;
static size_t nbuckets;                 /* a power of two, or 0 */
static int n_reg;
static int created_by[MAX_WORKERS];     /* live contexts each worker's requests created */

void dist_ctx_free(struct dist_ctx *c)
{
    if (!c || atomic_fetch_sub(&c->refcount, 1) != 1) return;
    for (int i = 0; i < c->n_sends; i++) ag_node_free(c->sends[i].node);
    for (int i = 0; i < c->n_grads; i++) {
        tensor_free(c->grads[i].leaf);
        tensor_free(c->grads[i].grad);
        for (int j = 0; j < c->grads[i].n_parts; j++) tensor_free(c->grads[i].parts[j].g);
        free(c->grads[i].parts);
    }
    free(c->sends);
    free(c->grads);
    free(c->workers);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static size_t bucket_of(int64_t id, size_t n)
{
    uint64_t x = (uint64_t)id;              /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(x ^ (x >> 31)) & (n - 1);
}

/* Under reg_mu. */
static struct dist_ctx *find_locked(int64_t id)
{
    if (!nbuckets) return NULL;
    for (struct dist_ctx *c = buckets[bucket_of(id, nbuckets)]; c; c = c->hnext)
        if (c->id == id) return c;
    return NULL;
}

/* Under reg_mu: doubles the table when it is fuller than one per bucket. */
static void grow_locked(void)
{
    if (nbuckets && (size_t)n_reg < nbuckets) return;
    size_t n = nbuckets ? 2 * nbuckets : 64;
    struct dist_ctx **nb = trib_xcalloc(n, sizeof *nb);
    for (size_t b = 0; b < nbuckets; b++)
        for (struct dist_ctx *c = buckets[b], *next; c; c = next) {
            next = c->hnext;
            size_t k = bucket_of(c->id, n);
            c->hnext = nb[k];
            nb[k] = c;
        }
    free(buckets);
    buckets = nb;
    nbuckets = n;
}

/* Under reg_mu: unlinks c; the caller owns the registry's reference. */
static void unlink_locked(struct dist_ctx *c)
{
    for (struct dist_ctx **pp = &buckets[bucket_of(c->id, nbuckets)]; *pp; pp = &(*pp)->hnext)
        if (*pp == c) {
            *pp = c->hnext;
            n_reg--;
            if (c->creator >= 0 && c->creator < MAX_WORKERS) created_by[c->creator]--;
            return;
        }
    CHECK(!"context not in the registry");
}

/* The context `id`, retained, or NULL. */
struct dist_ctx *dist_ctx_get(int64_t id)
{
    pthread_mutex_lock(&reg_mu);
    struct dist_ctx *c = find_locked(id);
    if (c) {
        atomic_fetch_add(&c->refcount, 1);
        atomic_store(&c->last_used, trib_now_ms());
    }
    pthread_mutex_unlock(&reg_mu);
    return c;
}

/* Whether worker w sent to or received from c here (takes c->mu). This
 * worker always did (calls to itself are not in c->workers). */
static bool took_part(struct dist_ctx *c, int w)
{
    bool yes = w == rpc_self_id();
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_workers && !yes; i++) yes = c->workers[i] == w;
    pthread_mutex_unlock(&c->mu);
    return yes;
}

/* The context `id`, retained, if worker w took part in it here; else NULL
 * (and an unknown context is not told apart). */
struct dist_ctx *dist_ctx_get_participant(int64_t id, int w)
{
    pthread_mutex_lock(&reg_mu);
    struct dist_ctx *c = find_locked(id);
    if (c && took_part(c, w)) {
        atomic_fetch_add(&c->refcount, 1);
        atomic_store(&c->last_used, trib_now_ms());
    } else {
        c = NULL;
    }
    pthread_mutex_unlock(&reg_mu);
    return c;
}

/* The context `id`, retained, made if missing: by this worker (creator -1)
 * or for a request from worker `creator`, who may have at most `limit` of
 * them here. NULL with err past that limit. */
struct dist_ctx *dist_ctx_get_or_make(int64_t id, int creator, int limit, char *err, size_t cap)
{
    pthread_mutex_lock(&reg_mu);
    struct dist_ctx *c = find_locked(id);
    if (!c) {
        if (creator >= MAX_WORKERS) creator = -1;
        if (creator >= 0 && created_by[creator] >= limit) {
            int n = created_by[creator];
            pthread_mutex_unlock(&reg_mu);
            char name[64];
            rpc_peer_name(creator, name, sizeof name);
            snprintf(err, cap, "too many distributed autograd contexts from %s here (%d; the limit is %d)", name, n,
                     limit);
            return NULL;
        }
        c = trib_xcalloc(1, sizeof *c);
        c->id = id;
        c->creator = creator;
        atomic_init(&c->refcount, 1);           /* the registry's */
        pthread_mutex_init(&c->mu, NULL);
        grow_locked();
        size_t b = bucket_of(id, nbuckets);
        c->hnext = buckets[b];
        buckets[b] = c;
        n_reg++;
        if (creator >= 0) created_by[creator]++;
    }
    atomic_fetch_add(&c->refcount, 1);
    atomic_store(&c->last_used, trib_now_ms());
    pthread_mutex_unlock(&reg_mu);
    return c;
}

/* Removes id from the registry; returns the registry's reference or NULL. */
struct dist_ctx *dist_ctx_remove(int64_t id)
{
    pthread_mutex_lock(&reg_mu);
    struct dist_ctx *c = find_locked(id);
    if (c) unlink_locked(c);
    pthread_mutex_unlock(&reg_mu);
    return c;
}

/* As dist_ctx_remove, only if worker w took part in it here (NULL otherwise). */
struct dist_ctx *dist_ctx_remove_participant(int64_t id, int w)
{
    pthread_mutex_lock(&reg_mu);
    struct dist_ctx *c = find_locked(id);
    if (c && took_part(c, w)) unlink_locked(c);
    else c = NULL;
    pthread_mutex_unlock(&reg_mu);
    return c;
}

/* Frees every context other workers made here that pred selects. */
static void ctx_drop_where(bool (*pred)(const struct dist_ctx *, int64_t), int64_t arg)
{
    struct dist_ctx *dead = NULL;
    pthread_mutex_lock(&reg_mu);
    for (size_t b = 0; b < nbuckets; b++)
        for (struct dist_ctx *c = buckets[b], *next; c; c = next) {
            next = c->hnext;
            if (c->creator < 0 || !pred(c, arg)) continue;
            unlink_locked(c);
            c->hnext = dead;
            dead = c;
        }
    pthread_mutex_unlock(&reg_mu);
    while (dead) {
        struct dist_ctx *next = dead->hnext;
        dist_ctx_free(dead);
        dead = next;
    }
}

static bool made_by(const struct dist_ctx *c, int64_t worker)
{
    return c->creator == worker || ((c->id >> 48) & 0xffff) == worker;
}

static bool idle_since(const struct dist_ctx *c, int64_t cutoff) { return atomic_load(&c->last_used) < cutoff; }

void dist_ctx_add_worker(struct dist_ctx *c, int w)
{
    if (w < 0 || w == rpc_self_id()) return;
    pthread_mutex_lock(&c->mu);
    bool seen = false;
    for (int i = 0; i < c->n_workers; i++) seen |= c->workers[i] == w;
    if (!seen) {
        if (c->n_workers == c->cap_workers) {
            c->cap_workers = c->cap_workers ? 2 * c->cap_workers : 4;
            c->workers = trib_xrealloc(c->workers, (size_t)c->cap_workers * sizeof *c->workers);
        }
        c->workers[c->n_workers++] = w;
    }
    pthread_mutex_unlock(&c->mu);
}

int dist_autograd_num_contexts(void)
{
    pthread_mutex_lock(&reg_mu);
    int n = n_reg;
    pthread_mutex_unlock(&reg_mu);
    return n;
}

/* ---- gradients ----------------------------------------------------------- */

struct tensor *dist_autograd_run_gradient(const struct dist_autograd_run *run, const struct tensor *leaf)
{
    for (int i = 0; i < run->n; i++)
        if (run->leaves[i] == leaf) return run->grads[i];
    return NULL;
}

void dist_autograd_run_set_gradient(struct dist_autograd_run *run, struct tensor *leaf, struct tensor *g)
{
    for (int i = 0; i < run->n; i++)
        if (run->leaves[i] == leaf) {
            tensor_free(run->grads[i]);
            run->grads[i] = tensor_retain(g);
            return;
        }
    if (run->n == run->cap) {
        run->cap = run->cap ? 2 * run->cap : 8;
        run->leaves = trib_xrealloc(run->leaves, (size_t)run->cap * sizeof *run->leaves);
        run->grads = trib_xrealloc(run->grads, (size_t)run->cap * sizeof *run->grads);
    }
    run->leaves[run->n] = tensor_retain(leaf);
    run->grads[run->n++] = tensor_retain(g);
}

void dist_run_clear(struct dist_autograd_run *run)
{
    for (int i = 0; i < run->n; i++) {
        tensor_free(run->leaves[i]);
        tensor_free(run->grads[i]);
    }
    free(run->leaves);
    free(run->grads);
}

/* The gradient entry of leaf in c, made if missing (caller holds c->mu). */
static struct grad_entry *entry_locked(struct dist_ctx *c, struct tensor *leaf)
{
    int i = 0;
    while (i < c->n_grads && c->grads[i].leaf != leaf) i++;
    if (i == c->n_grads) {
        if (c->n_grads == c->cap_grads) {
            c->cap_grads = c->cap_grads ? 2 * c->cap_grads : 8;
            c->grads = trib_xrealloc(c->grads, (size_t)c->cap_grads * sizeof *c->grads);
        }
        c->grads[i] = (struct grad_entry){ .leaf = tensor_retain(leaf) };
        c->n_grads++;
    }
    return &c->grads[i];
}

/* Adds the run's gradients to its context as parts of key run->key. */
void dist_run_deliver(struct dist_autograd_run *run)
{
    struct dist_ctx *c = run->c;
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < run->n; k++) {
        struct grad_entry *e = entry_locked(c, run->leaves[k]);
        if (e->n_parts == e->cap_parts) {
            e->cap_parts = e->cap_parts ? 2 * e->cap_parts : 4;
            e->parts = trib_xrealloc(e->parts, (size_t)e->cap_parts * sizeof *e->parts);
        }
        /* insertion keeps the parts sorted by key, arrival order among equal keys */
        int j = e->n_parts++;
        while (j > 0 && e->parts[j - 1].key > run->key) {
            e->parts[j] = e->parts[j - 1];
            j--;
        }
        e->parts[j] = (struct grad_part){ run->key, tensor_retain(run->grads[k]) };
        tensor_free(e->grad);
        e->grad = NULL;
    }
    pthread_mutex_unlock(&c->mu);
}

/* The entry's sum (caller holds c->mu): computed once after new parts. */
static struct tensor *entry_grad(struct grad_entry *e)
{
    if (!e->grad && e->n_parts > 0) {
        bool was = autograd_set_enabled(false);
        struct tensor *sum = tensor_retain(e->parts[0].g);
        for (int j = 1; j < e->n_parts; j++) {
            struct tensor *s2 = tensor_add(sum, e->parts[j].g);
            CHECK(s2 != NULL);
            tensor_free(sum);
            sum = s2;
        }
        autograd_set_enabled(was);
        /* a private tensor: callers may scale it in place (gradient clipping) */
        e->grad = e->n_parts == 1 ? tensor_detach(sum) : tensor_retain(sum);
        tensor_free(sum);
    }
    return e->grad;
}

struct tensor *dist_autograd_get_gradient(int64_t ctx, struct tensor *t)
{
    struct dist_ctx *c = dist_ctx_get(ctx);
    if (!c) return NULL;
    struct tensor *g = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_grads; i++)
        if (c->grads[i].leaf == t) g = tensor_retain(entry_grad(&c->grads[i]));
    pthread_mutex_unlock(&c->mu);
    dist_ctx_free(c);
    return g;
}

int dist_autograd_get_gradients(int64_t ctx, int cap, struct tensor **leaves, struct tensor **grads)
{
    struct dist_ctx *c = dist_ctx_get(ctx);
    if (!c) {
        rpc_set_error("dist_autograd_get_gradients: unknown context %lld", (long long)ctx);
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    int n = c->n_grads < cap ? c->n_grads : cap;
    for (int i = 0; i < n; i++) {
        leaves[i] = tensor_retain(c->grads[i].leaf);
        grads[i] = tensor_retain(entry_grad(&c->grads[i]));
    }
    pthread_mutex_unlock(&c->mu);
    dist_ctx_free(c);
    return n;
}

/* ---- the core's hooks ---------------------------------------------------- */

/* I/O thread: a worker left or died; what it made here goes. */
void dist_ctx_peer_gone(int worker, void *user) { ctx_drop_where(made_by, worker); }

/* I/O thread, every heartbeat: frees contexts idle past idle ms (checked
 * at most every quarter of it, and at least every second). */
void dist_ctx_expire(int64_t now, int idle)
{
    static int64_t last;
    if (idle < 0 || now - last < (idle / 4 < 1000 ? idle / 4 : 1000)) return;
    last = now;
    ctx_drop_where(idle_since, now - idle);
}
