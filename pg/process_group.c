/* Process groups (process_group.h): membership by worker names, rendezvous
 * through the RPC store (store.c), collectives on Gloo for CPU tensors
 * (gloo_shim.cc) and NCCL for CUDA tensors (nccl.c), errors that name a
 * member the RPC layer knows gone. */
#include "pg/process_group.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/error.h"
#include "pg/gloo_shim.h"
#include "pg/pg_internal.h"
#include "rpc/rpc.h"

#define PG_NAME_MAX 48

/* A collective's descriptor, allgathered before its data (agree()). */
#define DESC_MAGIC 0x50474431   /* "PGD1" */
enum { D_MAGIC, D_OP, D_ARG, D_HAS_TENSOR, D_TENSOR, DESC_WORDS = D_TENSOR + PG_TENSOR_WORDS };

struct process_group {
    char name[PG_NAME_MAX];
    int rank, size, timeout_ms;
    char (*workers)[64];        /* group rank -> worker name */
    struct gloo_ctx *gloo;
    pthread_mutex_t mu;         /* serialises collectives; guards the fields below */
    uint32_t tag;               /* Gloo tag of the next collective */
    struct pg_nccl *nccl;       /* made at the first CUDA collective */
    int64_t *descs;             /* every member's descriptor of the collective under way */
    char broken[384];           /* the failure that broke the group, "" while healthy */
};

/* ---- errors --------------------------------------------------------------- */

TRIB_ERROR_MODULE(pg)

/* ---- store callbacks for Gloo ---------------------------------------------- */

static int store_set(void *user, const char *key, const void *data, size_t n, char *err, size_t cap)
{
    struct process_group *g = user;
    return pg_store_set(g->workers[0], g->name, key, data, n, err, cap);
}

static int store_get(void *user, const char *key, int timeout_ms, void **data, size_t *n, char *err, size_t cap)
{
    struct process_group *g = user;
    return pg_store_get(g->workers[0], g->name, key, timeout_ms, data, n, err, cap);
}

static const struct gloo_store_ops STORE_OPS = {store_set, store_get};

/* ---- membership -------------------------------------------------------------- */

int pg_init(void)
{
    pg_store_register();
    return 0;
}

/* The host part of this worker's RPC endpoint ("tcp://HOST:PORT"): where
 * the other members reach it; loopback for other transports. */
static void self_host(char *out, size_t cap)
{
    const char *ep = rpc_self()->endpoint;
    snprintf(out, cap, "127.0.0.1");
    if (strncmp(ep, "tcp://", 6)) return;
    const char *h = ep + 6, *colon = strrchr(h, ':');
    if (!colon || colon == h || (size_t)(colon - h) >= cap) return;
    if (*h == '[') return;     /* IPv6: keep loopback */
    snprintf(out, cap, "%.*s", (int)(colon - h), h);
}

/* After a failed collective: the members the RPC layer declares gone within
 * wait_ms, written as "rank 1 (worker 'w2')". Returns how many. */
static int gone_members(struct process_group *g, int wait_ms, char *out, size_t cap)
{
    int64_t deadline = trib_now_ms() + wait_ms;
    out[0] = 0;
    for (;;) {
        int k = 0;
        size_t len = 0;
        for (int r = 0; r < g->size; r++) {
            struct rpc_worker_info wi;
            if (r == g->rank || rpc_get_worker_info(g->workers[r], &wi) == 0) continue;
            len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%srank %d (worker '%s')", k ? ", " : "", r,
                                    g->workers[r]);
            if (len >= cap) len = cap - 1;
            k++;
        }
        if (k || trib_now_ms() >= deadline) return k;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Records a collective's failure (the group is broken from now on) and sets
 * the thread's error. Caller holds g->mu. */
static int collective_failed(struct process_group *g, const char *who, const char *why)
{
    char gone[256];
    /* a killed member breaks the connections at once, while the RPC layer
     * declares it dead only after its heartbeat timeout: wait a little */
    int k = gone_members(g, g->timeout_ms < 10000 ? g->timeout_ms : 10000, gone, sizeof gone);
    if (k)
        snprintf(g->broken, sizeof g->broken, "%s %s gone (%s)", gone, k > 1 ? "are" : "is", why);
    else
        snprintf(g->broken, sizeof g->broken, "%s", why);
    return pg_set_error("%s: group '%s': %s", who, g->name, g->broken);
}

static int barrier_on_new(struct process_group *g, char *err, size_t cap);

struct process_group *pg_new(const char *name, int n, const char *const *workers, int timeout_ms)
{
    const char *who = "pg_new";
    if (!name || !*name || strlen(name) >= PG_NAME_MAX) {
        pg_set_error("%s: the group name must be 1..%d bytes", who, PG_NAME_MAX - 1);
        return NULL;
    }
    if (n < 1 || !workers) {
        pg_set_error("%s: group '%s': needs at least one worker, got %d", who, name, n);
        return NULL;
    }
    if (!rpc_self() || !rpc_self()->name[0]) {
        pg_set_error("%s: group '%s': RPC is not initialised", who, name);
        return NULL;
    }
    int rank = -1;
    for (int i = 0; i < n; i++) {
        struct rpc_worker_info wi;
        if (!workers[i] || rpc_get_worker_info(workers[i], &wi) < 0) {
            pg_set_error("%s: group '%s': unknown worker '%s'", who, name, workers[i] ? workers[i] : "(null)");
            return NULL;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(workers[i], workers[j])) {
                pg_set_error("%s: group '%s': worker '%s' is listed twice", who, name, workers[i]);
                return NULL;
            }
        if (!strcmp(workers[i], rpc_self()->name)) rank = i;
    }
    if (rank < 0) {
        pg_set_error("%s: group '%s': this worker ('%s') is not a member", who, name, rpc_self()->name);
        return NULL;
    }
    struct process_group *g = trib_xcalloc(1, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->rank = rank;
    g->size = n;
    g->timeout_ms = timeout_ms > 0 ? timeout_ms : PG_DEFAULT_TIMEOUT_MS;
    g->workers = trib_xcalloc((size_t)n, sizeof *g->workers);
    for (int i = 0; i < n; i++) snprintf(g->workers[i], sizeof g->workers[i], "%s", workers[i]);
    g->descs = trib_xcalloc((size_t)n * DESC_WORDS, sizeof *g->descs);
    pthread_mutex_init(&g->mu, NULL);
    char host[128], err[384] = "";
    self_host(host, sizeof host);
    /* rank 0 hosts the group's keys, for its members only; the others wait
     * for that and check that rank 0 lists the same members */
    int rc = rank == 0 ? pg_store_host(name, n, (const char(*)[64])g->workers, err, sizeof err)
                       : pg_store_join(g->workers[0], name, n, (const char(*)[64])g->workers, g->timeout_ms, err,
                                       sizeof err);
    if (rc != 0) {
        pg_set_error("%s: group '%s': %s", who, name, err);
        if (rank == 0) g->rank = -1;   /* not ours to unhost */
        pg_free(g);
        return NULL;
    }
    g->gloo = gloo_ctx_new(rank, n, host, &STORE_OPS, g, g->timeout_ms, err, sizeof err);
    /* every member is connected once the barrier passes */
    if (!g->gloo || barrier_on_new(g, err, sizeof err) != 0) {
        char gone[256];
        int k = gone_members(g, 0, gone, sizeof gone);
        pg_set_error("%s: group '%s': %s%s%s", who, name, k ? gone : "", k ? " gone: " : "", err);
        pg_free(g);
        return NULL;
    }
    return g;
}

void pg_free(struct process_group *g)
{
    if (!g) return;
    if (g->nccl) pg_nccl_free(g->nccl);
    gloo_ctx_free(g->gloo);
    if (g->rank == 0) pg_store_unhost(g->name);
    pthread_mutex_destroy(&g->mu);
    free(g->descs);
    free(g->workers);
    free(g);
}

int pg_rank(const struct process_group *g) { return g->rank; }
int pg_size(const struct process_group *g) { return g->size; }
const char *pg_name(const struct process_group *g) { return g->name; }
const char *pg_worker(const struct process_group *g, int r) { return r >= 0 && r < g->size ? g->workers[r] : NULL; }

/* ---- agreement: what every member passed, compared before data moves ---- */


static const char *const REDUCTIONS[] = {"sum", "avg"};

/* Per collective: its name, and what its argument is (NULL: none). */
static const struct op_info {
    const char *name;
    const char *arg_what;
    const char *const *arg_names;   /* by value, or NULL: printed as a number */
    int n_arg_names;
} OPS[PG_OP_END] = {
    [PG_OP_ALLREDUCE] = {"pg_allreduce", "reduction", REDUCTIONS, 2},
    [PG_OP_BROADCAST] = {"pg_broadcast", "root", NULL, 0},
    [PG_OP_ALLGATHER] = {"pg_allgather", NULL, NULL, 0},
    [PG_OP_BARRIER] = {"pg_barrier", NULL, NULL, 0},
    [PG_OP_DDP_NEW] = {"ddp_new", "words", NULL, 0},
};

void pg_tensor_words(const struct tensor *t, int64_t *w)
{
    memset(w, 0, PG_TENSOR_WORDS * sizeof *w);
    w[0] = t->dtype;
    w[1] = t->device;
    w[2] = t->ndim;
    for (int i = 0; i < t->ndim && i < TENSOR_MAX_DIMS; i++) w[3 + i] = t->shape[i];
}

bool pg_tensor_words_valid(const int64_t *w)
{
    if (w[0] < 0 || w[0] >= DTYPE_COUNT || (w[1] != DEVICE_CPU && w[1] != DEVICE_CUDA) || w[2] < 0 ||
        w[2] > TENSOR_MAX_DIMS)
        return false;
    for (int i = 0; i < TENSOR_MAX_DIMS; i++)
        if (i < w[2] ? w[3 + i] < 0 : w[3 + i] != 0) return false;
    return true;
}

void pg_tensor_words_format(const int64_t *w, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "%s[", dtype_name((enum dtype)w[0]));
    for (int i = 0; i < w[2] && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%lld", i ? "," : "", (long long)w[3 + i]);
    if (len < cap) snprintf(out + len, cap - len, "]%s", w[1] == DEVICE_CUDA ? " on cuda" : "");
}

void pg_member_format(const struct process_group *g, int r, char *out, size_t cap)
{
    snprintf(out, cap, "rank %d (worker '%s')", r, g->workers[r]);
}

static bool desc_valid(const int64_t *d)
{
    if (d[D_MAGIC] != DESC_MAGIC || d[D_OP] <= 0 || d[D_OP] >= PG_OP_END) return false;
    return d[D_HAS_TENSOR] == 0 || (d[D_HAS_TENSOR] == 1 && pg_tensor_words_valid(d + D_TENSOR));
}

static void arg_format(const int64_t *d, char *out, size_t cap)
{
    const struct op_info *o = &OPS[d[D_OP]];
    if (o->arg_names && d[D_ARG] >= 0 && d[D_ARG] < o->n_arg_names)
        snprintf(out, cap, "%s %s", o->arg_what, o->arg_names[d[D_ARG]]);
    else
        snprintf(out, cap, "%s %lld", o->arg_what ? o->arg_what : "argument", (long long)d[D_ARG]);
}

/* Sets the error for members 0 and r, whose descriptors a and b differ
 * (both valid); returns -1. */
static int mismatch(const struct process_group *g, const char *who, int r, const int64_t *a, const int64_t *b)
{
    char ma[96], mb[96], xa[128], xb[128];
    pg_member_format(g, 0, ma, sizeof ma);
    pg_member_format(g, r, mb, sizeof mb);
    if (a[D_OP] != b[D_OP])
        return pg_set_error("%s: group '%s': %s is in %s, %s is in %s", who, g->name, ma, OPS[a[D_OP]].name, mb,
                            OPS[b[D_OP]].name);
    if (a[D_ARG] != b[D_ARG]) {
        arg_format(a, xa, sizeof xa);
        arg_format(b, xb, sizeof xb);
    } else {
        pg_tensor_words_format(a + D_TENSOR, xa, sizeof xa);
        pg_tensor_words_format(b + D_TENSOR, xb, sizeof xb);
    }
    return pg_set_error("%s: group '%s': %s has %s, %s has %s", who, g->name, ma, xa, mb, xb);
}

/* Allgathers desc (DESC_WORDS) from every member and compares them (each
 * member, from the same words, comes to the same answer). Caller holds
 * g->mu. 0 with *data_tag the tag for the collective's data; -1 with err
 * when the exchange itself failed (the caller breaks the group); -2 with
 * pg_last_error() when the members disagree (the group stays usable). */
static int agree(struct process_group *g, const char *who, int64_t *desc, uint32_t *data_tag, char *err, size_t cap)
{
    desc[D_MAGIC] = DESC_MAGIC;
    uint32_t tag = g->tag;
    g->tag += 2;
    *data_tag = tag + 1;
    if (g->size == 1) return 0;
    int64_t *all = g->descs;
    int rc = gloo_allgather(g->gloo, desc, all, DESC_WORDS * sizeof *all, tag, err, cap);
    for (int r = 0; rc == 0 && r < g->size; r++) {
        const int64_t *d = all + (size_t)r * DESC_WORDS;
        if (!desc_valid(d)) {
            char m[96];
            pg_member_format(g, r, m, sizeof m);
            pg_set_error("%s: group '%s': %s sent a malformed descriptor", who, g->name, m);
            rc = -2;
        }
    }
    for (int r = 1; rc == 0 && r < g->size; r++)
        if (memcmp(all, all + (size_t)r * DESC_WORDS, DESC_WORDS * sizeof *all)) {
            mismatch(g, who, r, all, all + (size_t)r * DESC_WORDS);
            rc = -2;
        }
    return rc;
}

/* The descriptor of a collective op (arg) on t (NULL: none). */
static void describe(int64_t *desc, enum pg_op op, int64_t arg, const struct tensor *t)
{
    memset(desc, 0, DESC_WORDS * sizeof *desc);
    desc[D_OP] = op;
    desc[D_ARG] = arg;
    desc[D_HAS_TENSOR] = t != NULL;
    if (t) pg_tensor_words(t, desc + D_TENSOR);
}

/* pg_new's barrier: an agreement on nothing. 0, or -1 with err. */
static int barrier_on_new(struct process_group *g, char *err, size_t cap)
{
    int64_t desc[DESC_WORDS];
    uint32_t tag;
    describe(desc, PG_OP_BARRIER, 0, NULL);
    int rc = agree(g, "pg_new", desc, &tag, err, cap);
    if (rc == -2) snprintf(err, cap, "%s", pg_last_error());
    return rc ? -1 : 0;
}

/* ---- collectives --------------------------------------------------------------- */

/* Locks g for a collective; -1 (unlocked) if the group is broken. */
static int enter(struct process_group *g, const char *who)
{
    pthread_mutex_lock(&g->mu);
    if (!g->broken[0]) return 0;
    pg_set_error("%s: group '%s' is broken by an earlier failure: %s", who, g->name, g->broken);
    pthread_mutex_unlock(&g->mu);
    return -1;
}

/* Enters g and agrees with every member on op (arg) over t: 0 with g->mu
 * held and *tag for the data, or -1 (unlocked) with pg_last_error(). */
static int enter_agreed(struct process_group *g, const char *who, enum pg_op op, int64_t arg, const struct tensor *t,
                        uint32_t *tag)
{
    if (enter(g, who) < 0) return -1;
    int64_t desc[DESC_WORDS];
    char err[384] = "";
    describe(desc, op, arg, t);
    int rc = agree(g, who, desc, tag, err, sizeof err);
    if (rc == -1) collective_failed(g, who, err);
    if (rc) pthread_mutex_unlock(&g->mu);
    return rc ? -1 : 0;
}

int pg_exchange(struct process_group *g, enum pg_op op, const int64_t *mine, int nwords, int64_t *all)
{
    const char *who = OPS[op].name;
    uint32_t tag;
    if (enter_agreed(g, who, op, nwords, NULL, &tag) < 0) return -1;
    char err[384] = "";
    int rc = 0;
    if (g->size == 1)
        memcpy(all, mine, (size_t)nwords * sizeof *all);
    else if (gloo_allgather(g->gloo, mine, all, (size_t)nwords * sizeof *all, tag, err, sizeof err) != 0)
        rc = collective_failed(g, who, err);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The NCCL communicator, made at the first CUDA collective (a collective
 * itself: rank 0 hands out the unique id through the store, under the
 * collective's data tag). Under g->mu. */
static int nccl_ready(struct process_group *g, const char *who, uint32_t tag)
{
    if (g->nccl) return 0;
    if (!pg_has_nccl()) return pg_set_error("%s: group '%s': cuda tensors need NCCL, which this build lacks", who, g->name);
    char err[384] = "", key[32];
    unsigned char id[PG_NCCL_ID_BYTES];
    snprintf(key, sizeof key, "nccl_id.%u", tag);
    if (g->rank == 0) {
        if (pg_nccl_unique_id(id, err, sizeof err) != 0 ||
            pg_store_set(g->workers[0], g->name, key, id, sizeof id, err, sizeof err) != 0)
            return collective_failed(g, who, err);
    } else {
        void *data = NULL;
        size_t n = 0;
        if (pg_store_get(g->workers[0], g->name, key, g->timeout_ms, &data, &n, err, sizeof err) != 0)
            return collective_failed(g, who, err);
        bool ok = n == sizeof id;
        if (ok) memcpy(id, data, sizeof id);
        free(data);
        if (!ok) return collective_failed(g, who, "the NCCL unique id has the wrong size");
    }
    g->nccl = pg_nccl_new(id, g->rank, g->size, g->timeout_ms, err, sizeof err);
    return g->nccl ? 0 : collective_failed(g, who, err);
}

static void divide(struct tensor *t, void *data, int n)
{
    if (t->dtype == DTYPE_F32) {
        float *p = data;
        for (int64_t i = 0; i < t->numel; i++) p[i] /= (float)n;
    } else {
        double *p = data;
        for (int64_t i = 0; i < t->numel; i++) p[i] /= (double)n;
    }
}

int pg_allreduce(struct process_group *g, struct tensor *t, enum pg_reduce op)
{
    const char *who = "pg_allreduce";
    if (op != PG_SUM && op != PG_AVG) return pg_set_error("%s: group '%s': unknown reduction %d", who, g->name, (int)op);
    if (op == PG_AVG && t->dtype != DTYPE_F32 && t->dtype != DTYPE_F64)
        return pg_set_error("%s: group '%s': an average needs a floating dtype, not %s", who, g->name, dtype_name(t->dtype));
    uint32_t tag;
    if (enter_agreed(g, who, PG_OP_ALLREDUCE, op, t, &tag) < 0) return -1;
    char err[384] = "";
    int rc = 0;
    if (t->device == DEVICE_CUDA) {
        rc = nccl_ready(g, who, tag);
        if (rc == 0 && t->numel &&
            pg_nccl_allreduce(g->nccl, tensor_mutable_data(t), (size_t)t->numel, t->dtype, op == PG_AVG, err,
                              sizeof err) != 0)
            rc = collective_failed(g, who, err);
    } else {
        void *data = tensor_mutable_data(t);
        if (gloo_allreduce_sum(g->gloo, data, (size_t)t->numel, t->dtype, tag, err, sizeof err) != 0)
            rc = collective_failed(g, who, err);
        else if (op == PG_AVG)
            divide(t, data, g->size);
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

int pg_broadcast(struct process_group *g, struct tensor *t, int root)
{
    const char *who = "pg_broadcast";
    if (root < 0 || root >= g->size)
        return pg_set_error("%s: group '%s': root %d is outside 0..%d", who, g->name, root, g->size - 1);
    uint32_t tag;
    if (enter_agreed(g, who, PG_OP_BROADCAST, root, t, &tag) < 0) return -1;
    char err[384] = "";
    int rc = 0;
    if (t->device == DEVICE_CUDA) {
        rc = nccl_ready(g, who, tag);
        if (rc == 0 && t->numel &&
            pg_nccl_broadcast(g->nccl, tensor_mutable_data(t), tensor_nbytes(t), root, err, sizeof err) != 0)
            rc = collective_failed(g, who, err);
    } else if (gloo_broadcast(g->gloo, tensor_mutable_data(t), tensor_nbytes(t), root, tag, err, sizeof err) != 0) {
        rc = collective_failed(g, who, err);
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

/* The agreement is the barrier: no member leaves an allgather before every
 * member has entered it. */
int pg_barrier(struct process_group *g)
{
    uint32_t tag;
    if (enter_agreed(g, "pg_barrier", PG_OP_BARRIER, 0, NULL, &tag) < 0) return -1;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int pg_allgather(struct process_group *g, struct tensor *in, struct tensor *out)
{
    const char *who = "pg_allgather";
    if (in->device != DEVICE_CPU || out->device != DEVICE_CPU)
        return pg_set_error("%s: group '%s': cpu tensors only", who, g->name);
    if (in->dtype != out->dtype || out->numel != in->numel * g->size)
        return pg_set_error("%s: group '%s': out must be %s with %lld elements, got %s with %lld", who, g->name,
                    dtype_name(in->dtype), (long long)(in->numel * g->size), dtype_name(out->dtype),
                    (long long)out->numel);
    uint32_t tag;
    if (enter_agreed(g, who, PG_OP_ALLGATHER, 0, in, &tag) < 0) return -1;
    char err[384] = "";
    struct tensor *sin = tensor_snapshot(in);
    int rc = 0;
    if (gloo_allgather(g->gloo, tensor_data(sin), tensor_mutable_data(out), tensor_nbytes(in), tag, err,
                       sizeof err) != 0)
        rc = collective_failed(g, who, err);
    tensor_free(sin);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

#ifndef TRIB_WITH_NCCL
bool pg_has_nccl(void) { return false; }
int pg_nccl_unique_id(void *id, char *err, size_t cap) { return snprintf(err, cap, "no NCCL"), -1; }
struct pg_nccl *pg_nccl_new(const void *id, int rank, int size, int timeout_ms, char *err, size_t cap)
{
    snprintf(err, cap, "no NCCL");
    return NULL;
}
void pg_nccl_free(struct pg_nccl *c) { (void)c; }
int pg_nccl_allreduce(struct pg_nccl *c, void *buf, size_t n, enum dtype dt, bool avg, char *err, size_t cap)
{
    return snprintf(err, cap, "no NCCL"), -1;
}
int pg_nccl_broadcast(struct pg_nccl *c, void *buf, size_t nbytes, int root, char *err, size_t cap)
{
    return snprintf(err, cap, "no NCCL"), -1;
}
#endif
