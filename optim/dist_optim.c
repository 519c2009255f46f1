/* DistributedOptimizer: an RRef-held local optimizer on each parameter
 * owner, stepped by RPC with that owner's gradients of a context. */
#include "optim/dist_optim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rpc/dist_autograd.h"

/* ---- owner side ----------------------------------------------------------- */

#define LOCAL_TYPE "dist_optim.local"     /* the rpc_type of an owner's local optimizer */

struct local_opt {
    struct optim *opt;
    int n;
    struct tensor **params;       /* borrowed from the optimizer's refs */
};

/* Steps on one owner are serialised across all its local optimizers (two
 * trainers' optimizers may share parameters), and each bumps the version. */
static pthread_mutex_t step_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int_fast64_t local_version;

int64_t dist_optim_local_version(void) { return atomic_load(&local_version); }

void dist_optim_set_local_version(int64_t v) { atomic_store(&local_version, v); }

static void local_destroy(void *p)
{
    struct local_opt *l = p;
    optim_free(l->opt);
    free(l->params);
    free(l);
}

static bool get_double(const struct rpc_value *map, const char *key, double *out)
{
    const struct rpc_value *v = rpc_map_get(map, key);
    if (!v) return false;
    if (v->kind == RPC_DOUBLE) *out = v->d;
    else if (v->kind == RPC_INT) *out = (double)v->i;
    else return false;
    return true;
}

static bool get_bool(const struct rpc_value *map, const char *key)
{
    const struct rpc_value *v = rpc_map_get(map, key);
    return v && v->kind == RPC_BOOL && v->b;
}

static struct rpc_value hyper_to_value(const struct optim_hyper *h)
{
    struct rpc_value m = rpc_map(11);
    size_t i = 0;
    rpc_map_set(&m, i++, "lr", rpc_double(h->lr));
    rpc_map_set(&m, i++, "momentum", rpc_double(h->momentum));
    rpc_map_set(&m, i++, "dampening", rpc_double(h->dampening));
    rpc_map_set(&m, i++, "nesterov", rpc_bool(h->nesterov));
    rpc_map_set(&m, i++, "weight_decay", rpc_double(h->weight_decay));
    rpc_map_set(&m, i++, "beta1", rpc_double(h->beta1));
    rpc_map_set(&m, i++, "beta2", rpc_double(h->beta2));
    rpc_map_set(&m, i++, "eps", rpc_double(h->eps));
    rpc_map_set(&m, i++, "amsgrad", rpc_bool(h->amsgrad));
    rpc_map_set(&m, i++, "alpha", rpc_double(h->alpha));
    rpc_map_set(&m, i++, "centered", rpc_bool(h->centered));
    return m;
}

static struct optim_hyper hyper_from_value(const struct rpc_value *m)
{
    struct optim_hyper h = {0};
    get_double(m, "lr", &h.lr);
    get_double(m, "momentum", &h.momentum);
    get_double(m, "dampening", &h.dampening);
    h.nesterov = get_bool(m, "nesterov");
    get_double(m, "weight_decay", &h.weight_decay);
    get_double(m, "beta1", &h.beta1);
    get_double(m, "beta2", &h.beta2);
    get_double(m, "eps", &h.eps);
    h.amsgrad = get_bool(m, "amsgrad");
    get_double(m, "alpha", &h.alpha);
    h.centered = get_bool(m, "centered");
    return h;
}

/* dist_optim._local(kind, hyper map, [param RRefs owned here]) */
static void *local_new(struct rpc_request *req, const struct rpc_value *args, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || args->list.items[0].kind != RPC_INT ||
        args->list.items[1].kind != RPC_MAP || args->list.items[2].kind != RPC_LIST) {
        rpc_request_fail(req, "expected (kind, hyper, [params])");
        return NULL;
    }
    const struct rpc_value *pl = &args->list.items[2];
    int n = (int)pl->list.len;
    struct tensor **params = trib_xcalloc((size_t)n + 1, sizeof *params);
    for (int i = 0; i < n; i++) {
        const struct rpc_value *v = &pl->list.items[i];
        const struct rpc_value *lv = v->kind == RPC_RREF ? rref_local_value(v->rref) : NULL;
        if (!lv || lv->kind != RPC_TENSOR) {
            rpc_request_fail(req, "parameter %d is not an RRef to a tensor owned here", i);
            free(params);
            return NULL;
        }
        params[i] = lv->tensor;
    }
    struct optim_hyper h = hyper_from_value(&args->list.items[1]);
    struct optim *opt = optim_new((enum optim_kind)args->list.items[0].i, &h, n, params);
    if (!opt) {
        rpc_request_fail(req, "%s", optim_last_error());
        free(params);
        return NULL;
    }
    struct local_opt *l = trib_xcalloc(1, sizeof *l);
    l->opt = opt;
    l->n = n;
    l->params = params;
    return l;
}

/* Clips (max_norm > 0) and applies this owner's gradients of ctx. Returns
 * the owner's version after the step, or -1 with optim_last_error(). */
static int64_t step_owned(struct local_opt *l, int64_t ctx, double max_norm)
{
    struct tensor **grads = trib_xcalloc((size_t)l->n, sizeof *grads);
    struct tensor **present = trib_xcalloc((size_t)l->n + 1, sizeof *present);
    int n_present = 0;
    for (int i = 0; i < l->n; i++) {
        grads[i] = dist_autograd_get_gradient(ctx, l->params[i]);
        if (grads[i]) present[n_present++] = grads[i];
    }
    pthread_mutex_lock(&step_mu);
    int rc = 0;
    if (max_norm > 0 && n_present > 0 && optim_clip_grad_norm(n_present, present, max_norm, NULL) != 0) rc = -1;
    free(present);
    if (rc == 0) rc = optim_step(l->opt, grads);
    int64_t version = rc == 0 ? atomic_fetch_add(&local_version, 1) + 1 : -1;
    pthread_mutex_unlock(&step_mu);
    for (int i = 0; i < l->n; i++) tensor_free(grads[i]);
    free(grads);
    return version;
}

/* step(ctx[, max_norm]) -> this owner's version after the step. With
 * max_norm > 0 the owner's gradients of ctx are first clipped to that global
 * norm (torch.nn.utils.clip_grad_norm_ over this owner's parameters). */
static int local_step(struct rpc_request *req, void *obj, const struct rpc_value *args,
                      struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len < 1 || args->list.len > 2 || args->list.items[0].kind != RPC_INT ||
        (args->list.len == 2 && args->list.items[1].kind != RPC_DOUBLE))
        return rpc_request_fail(req, "step: expected (ctx_id[, max_norm])");
    int64_t version = step_owned(obj, args->list.items[0].i, args->list.len == 2 ? args->list.items[1].d : 0.0);
    if (version < 0) return rpc_request_fail(req, "step: %s", optim_last_error());
    *result = rpc_int(version);
    return 0;
}

static int local_set_lr(struct rpc_request *req, void *obj, const struct rpc_value *args,
                        struct rpc_value *result, void *user)
{
    struct local_opt *l = obj;
    if (args->kind != RPC_LIST || args->list.len != 1 || args->list.items[0].kind != RPC_DOUBLE)
        return rpc_request_fail(req, "set_lr: expected (lr)");
    pthread_mutex_lock(&step_mu);
    optim_set_lr(l->opt, args->list.items[0].d);
    pthread_mutex_unlock(&step_mu);
    *result = rpc_nil();
    return 0;
}

static int fn_version(struct rpc_request *req, const struct rpc_value *args,
                      struct rpc_value *result, void *user)
{
    *result = rpc_int(dist_optim_local_version());
    return 0;
}

int dist_optim_init(void)
{
    static const struct rpc_type type = {.name = "dist_optim.local", .destroy = local_destroy};
    rpc_register_ctor("dist_optim._local", &type, local_new, NULL);
    rpc_register_method("dist_optim.local", "step", local_step, NULL);
    rpc_register_method("dist_optim.local", "set_lr", local_set_lr, NULL);
    rpc_register("dist_optim.version", fn_version, NULL);
    return 0;
}

/* ---- caller side --------------------------------------------------------- */

struct dist_optim {
    _Atomic double lr;         /* the lr last set on every owner: the run's one live copy */
    int n_owners;
    struct rref **locals;      /* one local optimizer per owner */
    int64_t *versions;
};

int dist_optim_num_owners(const struct dist_optim *o) { return o->n_owners; }
int64_t dist_optim_last_version(const struct dist_optim *o, int i) { return o->versions[i]; }

void dist_optim_free(struct dist_optim *o)
{
    if (!o) return;
    for (int i = 0; i < o->n_owners; i++) rref_free(o->locals[i]);
    free(o->locals);
    free(o->versions);
    free(o);
}

struct dist_optim *dist_optim_new(enum optim_kind kind, const struct optim_hyper *hyper,
                                  int n, struct rref **params)
{
    if (n < 1) {
        rpc_set_error("dist_optim_new: no parameters");
        return NULL;
    }
    struct dist_optim *o = trib_xcalloc(1, sizeof *o);
    atomic_store(&o->lr, hyper->lr);
    o->locals = trib_xcalloc((size_t)n, sizeof *o->locals);
    o->versions = trib_xcalloc((size_t)n, sizeof *o->versions);
    int *owners = trib_xcalloc((size_t)n, sizeof *owners);
    int n_owners = 0;
    for (int i = 0; i < n; i++) {
        int w = rref_owner(params[i]), j = 0;
        while (j < n_owners && owners[j] != w) j++;
        if (j == n_owners) owners[n_owners++] = w;
    }
    int rc = 0;
    for (int j = 0; j < n_owners && rc == 0; j++) {
        struct rpc_worker_info info;
        if (rpc_get_worker_info_by_id(owners[j], &info) != 0) { rc = -1; break; }
        int k = 0;
        for (int i = 0; i < n; i++) k += rref_owner(params[i]) == owners[j];
        struct rpc_value args = rpc_list(3);
        args.list.items[0] = rpc_int(kind);
        args.list.items[1] = hyper_to_value(hyper);
        args.list.items[2] = rpc_list((size_t)k);
        for (int i = 0, m = 0; i < n; i++)
            if (rref_owner(params[i]) == owners[j]) args.list.items[2].list.items[m++] = rpc_rref(params[i]);
        struct rref *r = rpc_remote(info.name, "dist_optim._local", &args, 0);
        rpc_value_clear(&args);
        if (!r) { rc = -1; break; }
        o->locals[o->n_owners++] = r;
        /* Surface a construction error now rather than at the first step. */
        struct rpc_value v = rpc_list(1);
        v.list.items[0] = rpc_double(hyper->lr);
        struct rpc_value res = rpc_nil();
        rc = rref_rpc_sync(r, "set_lr", &v, &res, 0);
        rpc_value_clear(&v);
        rpc_value_clear(&res);
    }
    free(owners);
    if (rc != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rpc_last_error());
        dist_optim_free(o);
        rpc_set_error("dist_optim_new: %s", msg);
        return NULL;
    }
    return o;
}

static int call_all(struct dist_optim *o, const char *method, const struct rpc_value *args, bool versions)
{
    struct rpc_future **fs = trib_xcalloc((size_t)o->n_owners, sizeof *fs);
    /* A step or set_lr on an optimizer this worker owns runs here, without a
     * round trip to itself. */
    bool local_step_ok[o->n_owners];
    int rc = 0;
    for (int i = 0; i < o->n_owners; i++) {
        local_step_ok[i] = false;
        if (strcmp(method, "set_lr") == 0 && rref_is_owner(o->locals[i])) {
            struct local_opt *l = rref_local_object(o->locals[i]);
            if (!l) {
                if (rc == 0) rpc_set_error("dist_optim_set_lr: %s", rpc_last_error());
                rc = -1;
            } else {
                pthread_mutex_lock(&step_mu);
                optim_set_lr(l->opt, args->list.items[0].d);
                pthread_mutex_unlock(&step_mu);
            }
            local_step_ok[i] = true;
            continue;
        }
        if (strcmp(method, "step") == 0 && rref_is_owner(o->locals[i])) {
            struct local_opt *l = rref_local_object(o->locals[i]);
            double max_norm = args->list.len == 2 ? args->list.items[1].d : 0.0;
            int64_t v = l ? step_owned(l, args->list.items[0].i, max_norm) : -1;
            if (v < 0) {
                if (rc == 0) rpc_set_error("dist_optim_step: %s: step: %s", rpc_self()->name,
                                           l ? optim_last_error() : rpc_last_error());
                rc = -1;
            } else {
                o->versions[i] = v;
            }
            local_step_ok[i] = true;
            continue;
        }
        fs[i] = rref_rpc_async(o->locals[i], method, args, 0);
    }
    for (int i = 0; i < o->n_owners; i++) {
        if (local_step_ok[i]) continue;
        struct rpc_value res = rpc_nil();
        if (rpc_future_wait(fs[i], &res) != 0) {
            if (rc == 0) rpc_set_error("dist_optim_%s: %s", method, rpc_future_error(fs[i]));
            rc = -1;
        } else if (versions && res.kind == RPC_INT) {
            o->versions[i] = res.i;
        }
        rpc_value_clear(&res);
        rpc_future_free(fs[i]);
    }
    free(fs);
    return rc;
}

int dist_optim_step(struct dist_optim *o, int64_t ctx)
{
    return dist_optim_step_clipped(o, ctx, 0.0);
}

int dist_optim_step_clipped(struct dist_optim *o, int64_t ctx, double max_norm)
{
    if (!(max_norm >= 0)) return rpc_set_error("dist_optim_step: max_norm must be >= 0");
    struct rpc_value args = rpc_list(max_norm > 0 ? 2 : 1);
    args.list.items[0] = rpc_int(ctx);
    if (max_norm > 0) args.list.items[1] = rpc_double(max_norm);
    int rc = call_all(o, "step", &args, true);
    rpc_value_clear(&args);
    return rc;
}

int dist_optim_set_lr(struct dist_optim *o, double lr)
{
    struct rpc_value args = rpc_list(1);
    args.list.items[0] = rpc_double(lr);
    int rc = call_all(o, "set_lr", &args, false);
    rpc_value_clear(&args);
    if (rc == 0) atomic_store(&o->lr, lr);
    return rc;
}

double dist_optim_lr(const struct dist_optim *o) { return atomic_load(&((struct dist_optim *)o)->lr); }

int dist_optim_get_version(const char *worker, int64_t *out)
{
    struct rpc_value res = rpc_nil();
    if (rpc_sync(worker, "dist_optim.version", NULL, &res, 0) != 0) return -1;
    int rc = res.kind == RPC_INT ? (*out = res.i, 0) : (rpc_set_error("dist_optim_get_version: malformed reply"), -1);
    rpc_value_clear(&res);
    return rc;
}

struct rref *dist_optim_local_rref(const struct dist_optim *o, int i) { return o->locals[i]; }

int dist_optim_local_save(struct rref *local, uint8_t **out, size_t *len)
{
    struct local_opt *l = rref_local_object_of(local, LOCAL_TYPE);
    if (!l) return -1;
    pthread_mutex_lock(&step_mu);
    int rc = optim_save(l->opt, out, len);
    pthread_mutex_unlock(&step_mu);
    return rc == 0 ? 0 : rpc_set_error("%s", optim_last_error());
}

int dist_optim_local_load(struct rref *local, const uint8_t *buf, size_t len)
{
    struct local_opt *l = rref_local_object_of(local, LOCAL_TYPE);
    if (!l) return -1;
    pthread_mutex_lock(&step_mu);
    int rc = optim_load(l->opt, buf, len);
    pthread_mutex_unlock(&step_mu);
    return rc == 0 ? 0 : rpc_set_error("%s", optim_last_error());
}

static struct local_opt *owned(struct dist_optim *o, int i)
{
    if (!rref_is_owner(o->locals[i])) {
        rpc_set_error("dist_optim: optimizer %d is owned by worker %d, not this one", i, rref_owner(o->locals[i]));
        return NULL;
    }
    return rref_local_object(o->locals[i]);
}

int dist_optim_save_owned(struct dist_optim *o, uint8_t **out, size_t *len)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    for (int i = 0; i < o->n_owners; i++) {
        struct local_opt *l = owned(o, i);
        uint8_t *b;
        size_t bl;
        if (!l || optim_save(l->opt, &b, &bl) != 0) {
            if (l) rpc_set_error("dist_optim_save_owned: %s", optim_last_error());
            free(buf);
            return -1;
        }
        buf = trib_xrealloc(buf, n + sizeof(uint64_t) + bl);
        uint64_t bl64 = bl;
        memcpy(buf + n, &bl64, sizeof bl64);
        memcpy(buf + n + sizeof bl64, b, bl);
        n += sizeof bl64 + bl;
        free(b);
    }
    *out = buf;
    *len = n;
    return 0;
}

int dist_optim_load_owned(struct dist_optim *o, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    for (int i = 0; i < o->n_owners; i++) {
        struct local_opt *l = owned(o, i);
        if (!l) return -1;
        uint64_t bl;
        if (len - off < sizeof bl) return rpc_set_error("dist_optim_load_owned: truncated at optimizer %d", i);
        memcpy(&bl, buf + off, sizeof bl);
        off += sizeof bl;
        if (bl > len - off) return rpc_set_error("dist_optim_load_owned: truncated at optimizer %d", i);
        pthread_mutex_lock(&step_mu);
        int rc = optim_load(l->opt, buf + off, (size_t)bl);
        pthread_mutex_unlock(&step_mu);
        if (rc != 0) return rpc_set_error("dist_optim_load_owned: %s", optim_last_error());
        off += bl;
    }
    if (off != len) return rpc_set_error("dist_optim_load_owned: %zu trailing bytes", len - off);
    return 0;
}
