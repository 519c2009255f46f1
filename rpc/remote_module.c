/* RemoteModule over RRefs: the owner keeps the nn module as an RRef object
 * of type "remote_module"; forward and parameters are RRef methods, so the
 * distributed-autograd hooks record them like any other RPC. */
#include "rpc/remote_module.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rpc/placement.h"
#include "rpc/membership.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

struct rm_obj {
    struct nn_module *m;
    enum device dev;
    pthread_mutex_t mu;       /* dropout RNG state of the module */
};

struct remote_module { struct rref *rref; };

struct ctor_reg { struct ctor_reg *next; char *name; remote_module_ctor ctor; };
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ctor_reg *ctors;

void remote_module_register(const char *name, remote_module_ctor ctor)
{
    struct ctor_reg *r = trib_xcalloc(1, sizeof *r);
    r->name = strdup(name);
    CHECK_ALLOC(r->name);
    r->ctor = ctor;
    pthread_mutex_lock(&reg_mu);
    r->next = ctors;
    ctors = r;
    pthread_mutex_unlock(&reg_mu);
}

static remote_module_ctor find_ctor(const char *name)
{
    pthread_mutex_lock(&reg_mu);
    struct ctor_reg *r = ctors;
    while (r && strcmp(r->name, name) != 0) r = r->next;
    pthread_mutex_unlock(&reg_mu);
    return r ? r->ctor : NULL;
}

/* ---- built-in constructors ---------------------------------------------- */

static bool arg_int(const struct rpc_value *args, size_t i, int64_t *out)
{
    if (args->kind != RPC_LIST || i >= args->list.len || args->list.items[i].kind != RPC_INT) return false;
    *out = args->list.items[i].i;
    return true;
}

static uint64_t seed_of(const struct rpc_value *args, size_t i)
{
    int64_t s = 0;
    return arg_int(args, i, &s) ? (uint64_t)s : 0x5eed;
}

/* linear(in, out[, bias[, seed]]) */
static struct nn_module *ctor_linear(struct rpc_request *req, const struct rpc_value *args)
{
    int64_t in, out;
    if (!arg_int(args, 0, &in) || !arg_int(args, 1, &out) || in < 1 || out < 1) {
        rpc_request_fail(req, "linear: expected (in > 0, out > 0[, bias[, seed]])");
        return NULL;
    }
    if (in > INT_MAX || out > INT_MAX) {
        rpc_request_fail(req, "linear: size %lld exceeds %d", (long long)(in > INT_MAX ? in : out), INT_MAX);
        return NULL;
    }
    bool bias = !(args->list.len > 2 && args->list.items[2].kind == RPC_BOOL && !args->list.items[2].b);
    uint64_t rng = seed_of(args, 3);
    struct nn_module *m = nn_linear_new((int)in, (int)out, bias, &rng);
    if (!m) rpc_request_fail(req, "linear: %s", tensor_last_error());
    return m;
}

/* mlp([sizes...][, "relu"|"tanh"[, dropout[, seed]]]) */
static struct nn_module *ctor_mlp(struct rpc_request *req, const struct rpc_value *args)
{
    if (args->kind != RPC_LIST || args->list.len < 1 || args->list.items[0].kind != RPC_LIST ||
        args->list.items[0].list.len < 2 || args->list.items[0].list.len > 16) {
        rpc_request_fail(req, "mlp: expected ([sizes] of 2..16 ints[, activation[, dropout[, seed]]])");
        return NULL;
    }
    const struct rpc_value *sz = &args->list.items[0];
    int sizes[16];
    for (size_t i = 0; i < sz->list.len; i++) {
        if (sz->list.items[i].kind != RPC_INT || sz->list.items[i].i < 1) {
            rpc_request_fail(req, "mlp: size %zu is not a positive int", i);
            return NULL;
        }
        if (sz->list.items[i].i > INT_MAX) {
            rpc_request_fail(req, "mlp: size %zu exceeds %d", i, INT_MAX);
            return NULL;
        }
        sizes[i] = (int)sz->list.items[i].i;
    }
    enum nn_activation act = NN_RELU;
    if (args->list.len > 1 && args->list.items[1].kind == RPC_STR) {
        if (strcmp(args->list.items[1].str.ptr, "tanh") == 0) act = NN_TANH;
        else if (strcmp(args->list.items[1].str.ptr, "relu") != 0) {
            rpc_request_fail(req, "mlp: unknown activation '%s'", args->list.items[1].str.ptr);
            return NULL;
        }
    }
    double p = args->list.len > 2 && args->list.items[2].kind == RPC_DOUBLE ? args->list.items[2].d : 0.0;
    uint64_t rng = seed_of(args, 3);
    struct nn_module *m = nn_mlp_new((int)sz->list.len, sizes, act, (float)p, &rng);
    if (!m) rpc_request_fail(req, "mlp: %s", tensor_last_error());
    return m;
}

/* ---- the owner's object -------------------------------------------------- */

static void rm_destroy(void *p)
{
    struct rm_obj *o = p;
    nn_module_free(o->m);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

/* remote_module._new(ctor name, args, device) */
static void *rm_new(struct rpc_request *req, const struct rpc_value *args, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || args->list.items[0].kind != RPC_STR ||
        args->list.items[2].kind != RPC_INT) {
        rpc_request_fail(req, "expected (constructor, args, device)");
        return NULL;
    }
    const char *name = args->list.items[0].str.ptr;
    remote_module_ctor ctor = find_ctor(name);
    if (!ctor) {
        rpc_request_fail(req, "unknown module constructor '%s'", name);
        return NULL;
    }
    enum device dev = args->list.items[2].i == DEVICE_CUDA ? DEVICE_CUDA : DEVICE_CPU;
    struct nn_module *m = ctor(req, &args->list.items[1]);
    if (!m) return NULL;
    if (dev != DEVICE_CPU && nn_module_to(m, dev) != 0) {
        rpc_request_fail(req, "%s: %s", name, tensor_last_error());
        nn_module_free(m);
        return NULL;
    }
    struct rm_obj *o = trib_xcalloc(1, sizeof *o);
    o->m = m;
    o->dev = dev;
    pthread_mutex_init(&o->mu, NULL);
    return o;
}

/* forward(tensors...) -> [tensors...]: inputs move to the module's device,
 * outputs come back on the CPU, both recorded so gradients follow. */
static int rm_forward(struct rpc_request *req, void *obj, const struct rpc_value *args,
                      struct rpc_value *result, void *user)
{
    struct rm_obj *o = obj;
    if (args->kind != RPC_LIST || args->list.len < 1 || args->list.len > NN_MAX_IO)
        return rpc_request_fail(req, "forward: expected 1..%d tensors", NN_MAX_IO);
    struct tensor *in[NN_MAX_IO] = {0}, *out[NN_MAX_IO] = {0};
    int n_in = (int)args->list.len, n_out = 0, rc = 0;
    for (int i = 0; i < n_in && rc == 0; i++) {
        if (args->list.items[i].kind != RPC_TENSOR) {
            rc = rpc_request_fail(req, "forward: argument %d is a %s, not a tensor", i,
                                  rpc_kind_name(args->list.items[i].kind));
        } else if (!(in[i] = tensor_to(args->list.items[i].tensor, o->dev))) {
            rc = rpc_request_fail(req, "forward: %s", tensor_last_error());
        }
    }
    if (rc == 0) {
        pthread_mutex_lock(&o->mu);
        int frc = nn_forward(o->m, n_in, in, &n_out, out);
        pthread_mutex_unlock(&o->mu);
        if (frc != 0) rc = rpc_request_fail(req, "forward: %s", tensor_last_error());
    }
    if (rc == 0) {
        *result = rpc_list((size_t)n_out);
        for (int i = 0; i < n_out; i++) {
            struct tensor *c = out[i]->device == DEVICE_CPU ? tensor_retain(out[i]) : tensor_to(out[i], DEVICE_CPU);
            CHECK(c != NULL);
            result->list.items[i] = rpc_tensor(c);
            tensor_free(c);
        }
    }
    for (int i = 0; i < NN_MAX_IO; i++) {
        tensor_free(in[i]);
        tensor_free(out[i]);
    }
    return rc;
}

/* parameters() -> [RRef...] owned here, each holding one parameter tensor. */
static int rm_parameters(struct rpc_request *req, void *obj, const struct rpc_value *args,
                         struct rpc_value *result, void *user)
{
    struct rm_obj *o = obj;
    *result = rpc_list((size_t)o->m->n_params);
    for (int i = 0; i < o->m->n_params; i++) {
        struct rpc_value v = rpc_tensor(o->m->params[i]);
        struct rref *r = rref_new_local_value(&v);
        result->list.items[i] = rpc_rref(r);
        rref_free(r);
    }
    return 0;
}

static int rm_num_params(struct rpc_request *req, void *obj, const struct rpc_value *args,
                         struct rpc_value *result, void *user)
{
    *result = rpc_int(((struct rm_obj *)obj)->m->n_params);
    return 0;
}

int remote_module_init(void)
{
    static const struct rpc_type type = {.name = "remote_module", .destroy = rm_destroy};
    remote_module_register("linear", ctor_linear);
    remote_module_register("mlp", ctor_mlp);
    rpc_register_ctor("remote_module._new", &type, rm_new, NULL);
    rpc_register_method("remote_module", "forward", rm_forward, NULL);
    rpc_register_method("remote_module", "parameters", rm_parameters, NULL);
    rpc_register_method("remote_module", "num_params", rm_num_params, NULL);
    rpc_placement_register();   /* the owner side of remote devices (placement.h) */
    return 0;
}

/* ---- the user's handle --------------------------------------------------- */

struct remote_module *remote_module_new(const char *on, const char *ctor,
                                        const struct rpc_value *args, enum device dev)
{
    struct rpc_value a = rpc_list(3);
    a.list.items[0] = rpc_str(ctor);
    a.list.items[1] = args ? rpc_value_copy(args) : rpc_list(0);
    a.list.items[2] = rpc_int(dev);
    struct rref *r = rpc_remote(on, "remote_module._new", &a, 0);
    rpc_value_clear(&a);
    if (!r) return NULL;
    struct rpc_value n = rpc_nil();
    if (rref_rpc_sync(r, "num_params", NULL, &n, 0) != 0) {   /* surfaces construction errors */
        rref_free(r);
        return NULL;
    }
    rpc_value_clear(&n);
    struct remote_module *rm = trib_xcalloc(1, sizeof *rm);
    rm->rref = r;
    return rm;
}

struct remote_module *remote_module_new_at(const char *placement, const char *ctor,
                                           const struct rpc_value *args)
{
    struct placement p;
    if (placement_resolve(placement, &p) != 0) return NULL;
    return remote_module_new(p.worker, ctor, args, p.device);
}

void remote_module_free(struct remote_module *rm)
{
    if (!rm) return;
    rref_free(rm->rref);
    free(rm);
}

struct rref *remote_module_rref(struct remote_module *rm) { return rm->rref; }

struct nn_module *remote_module_local(struct rref *r)
{
    struct rm_obj *o = rref_local_object_of(r, "remote_module");
    return o ? o->m : NULL;
}

struct remote_module *remote_module_from_rref(struct rref *r)
{
    struct remote_module *rm = trib_xcalloc(1, sizeof *rm);
    rm->rref = rref_retain(r);
    return rm;
}

static struct rpc_value tensor_list(int n, struct tensor **ts)
{
    struct rpc_value v = rpc_list((size_t)n);
    for (int i = 0; i < n; i++) v.list.items[i] = rpc_tensor(ts[i]);
    return v;
}

/* Moves the tensors of a forward result into out[]. */
static int take_outputs(struct rpc_value *res, int *n_out, struct tensor **out)
{
    if (res->kind != RPC_LIST || res->list.len > NN_MAX_IO) {
        rpc_set_error("remote_module_forward: malformed result (%s)", rpc_kind_name(res->kind));
        return -1;
    }
    for (size_t i = 0; i < res->list.len; i++)
        if (res->list.items[i].kind != RPC_TENSOR) {
            rpc_set_error("remote_module_forward: result %zu is not a tensor", i);
            return -1;
        }
    *n_out = (int)res->list.len;
    for (int i = 0; i < *n_out; i++) out[i] = tensor_retain(res->list.items[i].tensor);
    return 0;
}

int remote_module_forward(struct remote_module *rm, int n_in, struct tensor **in,
                          int *n_out, struct tensor **out)
{
    struct rpc_value args = tensor_list(n_in, in), res = rpc_nil();
    int rc = rref_rpc_sync(rm->rref, "forward", &args, &res, 0);
    rpc_value_clear(&args);
    if (rc == 0) rc = take_outputs(&res, n_out, out);
    rpc_value_clear(&res);
    return rc;
}

struct rpc_future *remote_module_forward_async(struct remote_module *rm, int n_in, struct tensor **in)
{
    struct rpc_value args = tensor_list(n_in, in);
    struct rpc_future *f = rref_rpc_async(rm->rref, "forward", &args, 0);
    rpc_value_clear(&args);
    return f;
}

int remote_module_forward_wait(struct rpc_future *f, int *n_out, struct tensor **out)
{
    struct rpc_value res = rpc_nil();
    int rc = rpc_future_wait(f, &res);
    if (rc == 0) rc = take_outputs(&res, n_out, out);
    rpc_value_clear(&res);
    return rc;
}

int remote_module_parameters(struct remote_module *rm, struct rref **out, int cap)
{
    struct rpc_value res = rpc_nil();
    if (rref_rpc_sync(rm->rref, "parameters", NULL, &res, 0) != 0) return -1;
    int n = 0;
    if (res.kind != RPC_LIST) {
        rpc_set_error("remote_module_parameters: malformed result");
        rpc_value_clear(&res);
        return -1;
    }
    for (size_t i = 0; i < res.list.len && n < cap; i++)
        if (res.list.items[i].kind == RPC_RREF) out[n++] = rref_retain(res.list.items[i].rref);
    rpc_value_clear(&res);
    return n;
}
