/* The RL messages (see messages.h) as schema tables (message_schema.h),
 * packed and unpacked by the one generic pair below; each public
 * pack/unpack/clear is its table applied to its struct. */
#include "rl/messages.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rl/algo_shape.h"
#include "rl/config.h"
#include "rl/message_schema.h"
#include "rl/rl.h"

/* ---- the generic packer and unpacker ------------------------------------------ */

#define AT(m, off, T) ((T *)(void *)((char *)(m) + (off)))
#define AT_C(m, off, T) ((T const *)(const void *)((const char *)(m) + (off)))

static const char *prefix_of(const struct rl_msg_schema *s, const struct rl_field *f)
{
    return f && (f->flags & RL_FF_BARE) ? "" : s->name;
}
#define PFX(s, f) prefix_of(s, f), *prefix_of(s, f) ? ": " : ""

static int64_t int_get(const struct rl_field *f, const void *m)
{
    return f->size == sizeof(int) ? *AT_C(m, f->off, int) : *AT_C(m, f->off, int64_t);
}

static bool present(const struct rl_field *f, const void *m)
{
    if (f->kind == RL_FK_TENSOR) return *AT_C(m, f->off, struct tensor *) != NULL;
    if (f->flags & (RL_FF_BY_FLAG | RL_FF_NIL_OK)) return *AT_C(m, f->present_off, bool);
    return true;
}

static struct rpc_value field_pack(const struct rl_field *f, const void *m)
{
    switch (f->kind) {
    case RL_FK_INT: return rpc_int(int_get(f, m));
    case RL_FK_BOOL: return rpc_bool(*AT_C(m, f->off, bool));
    case RL_FK_DOUBLE: return rpc_double(*AT_C(m, f->off, double));
    case RL_FK_VALUE: {
        const struct rpc_value *v = f->flags & RL_FF_BORROW ? *AT_C(m, f->off, const struct rpc_value *)
                                                            : AT_C(m, f->off, struct rpc_value);
        return v && (f->kinds & (1u << v->kind)) ? rpc_value_copy(v) : rpc_nil();
    }
    case RL_FK_RREF: return rpc_rref(*AT_C(m, f->off, struct rref *));
    case RL_FK_TENSOR: return present(f, m) ? rpc_tensor(*AT_C(m, f->off, struct tensor *)) : rpc_nil();
    case RL_FK_ARRAY: return rpc_bytes(AT_C(m, f->off, char), (size_t)*AT_C(m, f->count_off, int) * f->elem_size);
    case RL_FK_NESTED: return present(f, m) ? rl_msg_pack(f->nested, AT_C(m, f->off, char)) : rpc_nil();
    }
    return rpc_nil();
}

struct rpc_value rl_msg_pack(const struct rl_msg_schema *s, const void *m)
{
    if (s->wire == RL_WIRE_BLOB) return rpc_bytes(m, s->size);
    struct rpc_value v = rpc_list((size_t)s->n_fields);
    for (int i = 0; i < s->n_fields; i++) v.list.items[i] = field_pack(&s->fields[i], m);
    return v;
}

/* The kind an item must have to pass the list check (-1: checked later, by the field). */
static int list_kind(const struct rl_field *f)
{
    switch (f->kind) {
    case RL_FK_INT: return RPC_INT;
    case RL_FK_BOOL: return RPC_BOOL;
    case RL_FK_DOUBLE: return RPC_DOUBLE;
    case RL_FK_RREF: return RPC_RREF;
    case RL_FK_ARRAY: return RPC_BYTES;
    case RL_FK_TENSOR: return f->flags & RL_FF_LIST_KIND ? RPC_TENSOR : -1;
    default: return -1;
    }
}

static int shape_error(const struct rl_msg_schema *s)
{
    char list[512];
    size_t n = 0;
    list[0] = '\0';
    for (int i = 0; i < s->n_fields && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", s->fields[i].desc);
    return rl_set_error("%s%sexpected (%s)", PFX(s, NULL), list);
}

static int64_t dim_of(enum rl_dim d, const struct rl_msg_expect *x)
{
    switch (d) {
    case RL_DIM_ROWS: return x ? x->rows : -1;
    case RL_DIM_OBS: return x ? x->obs_dim : -1;
    case RL_DIM_ACT: return x ? x->act_dim : -1;
    default: return -1;
    }
}

static int tensor_refusal(const struct rl_msg_schema *s, const struct rl_field *f, const struct rpc_value *v,
                        const struct rl_msg_expect *x)
{
    char want[96] = "", got[160] = "nil";
    size_t n = 0;
    bool any_n = false;
    for (int d = 0; d < 2 && f->dims[d] != RL_DIM_NONE; d++) {
        int64_t k = dim_of(f->dims[d], x);
        any_n |= k < 0;
        n += (size_t)(k < 0 ? snprintf(want + n, sizeof want - n, "%sN", d ? "," : "")
                            : snprintf(want + n, sizeof want - n, "%s%lld", d ? "," : "", (long long)k));
    }
    if (v->kind == RPC_TENSOR) {
        const struct tensor *t = v->tensor;
        size_t g = (size_t)snprintf(got, sizeof got, "%s [", dtype_name(t->dtype));
        for (int d = 0; d < t->ndim && g < sizeof got; d++)
            g += (size_t)snprintf(got + g, sizeof got - g, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        if (g < sizeof got) snprintf(got + g, sizeof got - g, "]%s", t->device == DEVICE_CPU ? "" : " not on the CPU");
    } else if (v->kind != RPC_NIL) {
        snprintf(got, sizeof got, "a value of kind %d", (int)v->kind);
    }
    if (f->flags & RL_FF_SCALAR) return rl_set_error("%s%s%s must be one f32, not %s", PFX(s, f), f->name, got);
    return rl_set_error("%s%s%s must be f32 [%s]%s, not %s", PFX(s, f), f->name, want, any_n ? " with N >= 1" : "",
                        got);
}

static bool tensor_fits(const struct rl_field *f, const struct tensor *t, const struct rl_msg_expect *x)
{
    if (t->dtype != DTYPE_F32) return false;
    if (f->flags & RL_FF_SCALAR) return t->numel == 1;
    if ((f->flags & RL_FF_CPU) && t->device != DEVICE_CPU) return false;
    int nd = 0;
    while (nd < 2 && f->dims[nd] != RL_DIM_NONE) nd++;
    if (t->ndim != nd) return false;
    for (int d = 0; d < nd; d++) {
        int64_t k = dim_of(f->dims[d], x);
        if (k >= 0 ? t->shape[d] != k : t->shape[d] < 1) return false;
    }
    return nd != 2 || t->shape[0] >= 1;
}

/* 0, or -1 naming t's first element that is not finite (t: f32 on the
 * CPU, as RL_FF_FINITE tensors are flagged RL_FF_CPU). */
static int tensor_nonfinite(const struct rl_msg_schema *s, const struct rl_field *f, const struct tensor *t)
{
    const float *x = tensor_data(t);
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(x[i]))   /* NaN printed without its sign */
            return rl_set_error("%s%s%s[%lld] %g is not finite", PFX(s, f), f->name, (long long)i,
                                isnan(x[i]) ? fabs(x[i]) : x[i]);
    return 0;
}

static int range_error(const struct rl_msg_schema *s, const struct rl_field *f, int64_t x)
{
    return rl_set_error("%s%s%s %lld is out of range %lld..%lld", PFX(s, f), f->name, (long long)x, (long long)f->lo,
                        (long long)f->hi);
}

static int array_unpack(const struct rl_msg_schema *s, const struct rl_field *f, const struct rpc_value *v, void *m)
{
    size_t len = v->str.len, count = len / f->elem_size;
    int *n = AT(m, f->count_off, int);
    const char *what = f->elem_size == sizeof(double) ? "doubles" : "ints";
    if (f->flags & RL_FF_COUNT_SET) {
        if (len != (size_t)*n * f->elem_size)
            return rl_set_error("%s%sbad %s size (%zu bytes, not the %d %s of the count before it)", PFX(s, f), f->name,
                                len, *n, what);
    } else {
        if (len % f->elem_size || count > (size_t)f->max_count)
            return rl_set_error("%s%sbad %s size (%zu bytes, at most %d %s)", PFX(s, f), f->name, len, f->max_count,
                                what);
        *n = (int)count;
    }
    char *dst = AT(m, f->off, char);
    memcpy(dst, v->str.ptr, len);
    for (size_t i = 0; i < count; i++) {
        if (f->flags & RL_FF_FINITE) {
            double d = ((const double *)(const void *)dst)[i];
            if (!isfinite(d)) return rl_set_error("%s%s%s[%zu] %g is not finite", PFX(s, f), f->name, i, d);
        }
        if (f->flags & RL_FF_RANGE) {
            int k = ((const int *)(const void *)dst)[i];
            if (k < f->lo || k > f->hi)
                return rl_set_error("%s%s%s[%zu] %d is out of range %lld..%lld", PFX(s, f), f->name, i, k,
                                    (long long)f->lo, (long long)f->hi);
        }
    }
    return 0;
}

static int field_unpack(const struct rl_msg_schema *s, const struct rl_field *f, const struct rpc_value *v,
                        const struct rl_msg_expect *x, void *m)
{
    switch (f->kind) {
    case RL_FK_INT:
        if ((f->flags & RL_FF_RANGE) && (v->i < f->lo || v->i > f->hi)) return range_error(s, f, v->i);
        if (f->size == sizeof(int)) *AT(m, f->off, int) = (int)v->i;
        else *AT(m, f->off, int64_t) = v->i;
        return 0;
    case RL_FK_BOOL: *AT(m, f->off, bool) = v->b; return 0;
    case RL_FK_DOUBLE:
        *AT(m, f->off, double) = v->d;
        if ((f->flags & RL_FF_FINITE) && !isfinite(v->d))
            return rl_set_error("%s%s%s %g is not finite", PFX(s, f), f->name, v->d);
        return 0;
    case RL_FK_VALUE:
        if (f->flags & RL_FF_BORROW) *AT(m, f->off, const struct rpc_value *) = v;
        else *AT(m, f->off, struct rpc_value) = rpc_value_copy(v);
        return 0;
    case RL_FK_RREF: *AT(m, f->off, struct rref *) = rref_retain(v->rref); return 0;
    case RL_FK_TENSOR: {
        bool wanted = f->when == RL_WHEN_ALWAYS || (f->when == RL_WHEN_GAUSSIAN ? x && x->gaussian : x && x->value_head);
        if (!wanted) return v->kind == RPC_NIL ? 0 : rl_set_error("%s%sunexpected %s", PFX(s, f), f->name);
        if (v->kind == RPC_NIL && (f->flags & RL_FF_NIL_OK)) return 0;
        if (v->kind != RPC_TENSOR || !tensor_fits(f, v->tensor, x)) return tensor_refusal(s, f, v, x);
        if ((f->flags & RL_FF_FINITE) && tensor_nonfinite(s, f, v->tensor) != 0) return -1;
        *AT(m, f->off, struct tensor *) = tensor_retain(v->tensor);
        return 0;
    }
    case RL_FK_ARRAY: return array_unpack(s, f, v, m);
    case RL_FK_NESTED:
        if ((f->flags & RL_FF_BY_FLAG) && !*AT(m, f->present_off, bool)) return 0;
        if ((f->flags & RL_FF_NIL_OK) && v->kind == RPC_NIL) return 0;
        if (rl_msg_unpack(f->nested, v, x, AT(m, f->off, char)) != 0) return -1;
        if (f->flags & RL_FF_NIL_OK) *AT(m, f->present_off, bool) = true;
        return 0;
    }
    return rl_set_error("%s%s%s: unknown field kind %d", PFX(s, f), f->name, (int)f->kind);
}

static bool list_fits(const struct rl_msg_schema *s, const struct rpc_value *v)
{
    if (!v || v->kind != RPC_LIST || v->list.len != (size_t)s->n_fields) return false;
    for (int i = 0; i < s->n_fields; i++) {
        const struct rl_field *f = &s->fields[i];
        enum rpc_kind got = v->list.items[i].kind;
        if (f->kind == RL_FK_VALUE ? !(f->kinds & (1u << got)) : list_kind(f) >= 0 && (int)got != list_kind(f))
            return false;
    }
    return true;
}

int rl_msg_unpack(const struct rl_msg_schema *s, const struct rpc_value *v, const struct rl_msg_expect *x, void *m)
{
    memset(m, 0, s->size);
    if (s->wire == RL_WIRE_BLOB) {
        if (!v || v->kind != RPC_BYTES || v->str.len != s->size)
            return rl_set_error("%s%sexpected %zu bytes", PFX(s, NULL), s->size);
        memcpy(m, v->str.ptr, s->size);
    } else if (!list_fits(s, v)) {
        return shape_error(s);
    }
    for (int i = 0; i < s->n_fields; i++) {
        const struct rl_field *f = &s->fields[i];
        int rc = 0;
        if (s->wire == RL_WIRE_BLOB) {
            double d = *AT(m, f->off, double);   /* a blob holds doubles (RL_FK_DOUBLE) */
            if ((f->flags & RL_FF_FINITE) && !isfinite(d))
                rc = rl_set_error("%s%s%s %g is not finite", PFX(s, f), f->name, d);
        } else {
            rc = field_unpack(s, f, &v->list.items[i], x, m);
        }
        if (rc == 0 && f->check) rc = f->check(s, f, m);
        if (rc != 0) goto fail;
    }
    if (s->check && s->check(s, m) != 0) goto fail;
    return 0;
fail:
    rl_msg_clear(s, m);
    memset(m, 0, s->size);
    return -1;
}

void rl_msg_clear(const struct rl_msg_schema *s, void *m)
{
    for (int i = 0; i < s->n_fields; i++) {
        const struct rl_field *f = &s->fields[i];
        switch (f->kind) {
        case RL_FK_VALUE:
            if (!(f->flags & RL_FF_BORROW)) rpc_value_clear(AT(m, f->off, struct rpc_value));
            break;
        case RL_FK_RREF:
            rref_free(*AT(m, f->off, struct rref *));
            *AT(m, f->off, struct rref *) = NULL;
            break;
        case RL_FK_TENSOR:
            tensor_free(*AT(m, f->off, struct tensor *));
            *AT(m, f->off, struct tensor *) = NULL;
            break;
        case RL_FK_NESTED:
            rl_msg_clear(f->nested, AT(m, f->off, char));
            if (f->flags & RL_FF_NIL_OK) *AT(m, f->present_off, bool) = false;
            break;
        default: break;
        }
    }
}

/* ---- the tables ------------------------------------------------------------------ */

#define OFF(T, m) offsetof(struct T, m)
#define INT_F(T, m, nm, fl, l, h)                                                                                    \
    { .name = nm, .desc = nm, .kind = RL_FK_INT, .off = OFF(T, m), .size = sizeof(((struct T *)0)->m),               \
      .flags = (fl), .lo = (l), .hi = (h) }
#define NORM_F(T, m)                                                                                                 \
    { .name = "norm", .desc = "norm map or nil", .kind = RL_FK_VALUE, .off = OFF(T, m),                              \
      .kinds = 1u << RPC_MAP | 1u << RPC_NIL }
#define STATS_F(T, m) { .name = "stats", .desc = "stats", .kind = RL_FK_NESTED, .off = OFF(T, m), .nested = &stats_schema }

static const struct rl_field stats_fields[] = {
#define STAT(m) { .name = #m, .desc = #m, .kind = RL_FK_DOUBLE, .off = OFF(rl_update_stats, m), .flags = RL_FF_FINITE }
    STAT(policy_loss), STAT(value_loss), STAT(entropy), STAT(approx_kl), STAT(clipfrac),
#undef STAT
};
static const struct rl_msg_schema stats_schema = { "stats", RL_WIRE_BLOB, sizeof(struct rl_update_stats), 5, stats_fields,
                                                   NULL };

/* Two bounds of different kinds, each saying which it is, and a finite
 * min_return once there was an episode. */
static int report_check(const struct rl_msg_schema *s, const void *msg)
{
    (void)s;
    const struct rl_report *r = msg;
    if (r->episodes < r->n_returns)
        return rl_set_error("report: episodes %lld is fewer than the %d returns it carries", (long long)r->episodes,
                            r->n_returns);
    if (r->episodes > r->steps)
        return rl_set_error("report: episodes %lld is more than its %lld steps (an episode takes at least one)",
                            (long long)r->episodes, (long long)r->steps);
    if (r->episodes > 0 && !isfinite(r->min_return)) return rl_set_error("report: min_return %g is not finite", r->min_return);
    return 0;
}

static const struct rl_field report_fields[] = {
    INT_F(rl_report, steps, "steps", RL_FF_RANGE, 0, RL_MSG_MAX_STEPS),
    INT_F(rl_report, version0, "version0", RL_FF_RANGE, 0, RL_MSG_MAX_VERSION),
    INT_F(rl_report, episodes, "episodes", 0, 0, 0),
    { .name = "returns", .desc = "returns", .kind = RL_FK_ARRAY, .off = OFF(rl_report, returns),
      .count_off = OFF(rl_report, n_returns), .elem_size = sizeof(double), .max_count = RL_REPORT_EPISODES,
      .flags = RL_FF_FINITE },
    { .name = "lengths", .desc = "lengths", .kind = RL_FK_ARRAY, .off = OFF(rl_report, lengths),
      .count_off = OFF(rl_report, n_returns), .elem_size = sizeof(int), .flags = RL_FF_COUNT_SET | RL_FF_RANGE,
      .lo = 1, .hi = RL_MSG_MAX_STEPS },
    { .name = "min_return", .desc = "min", .kind = RL_FK_DOUBLE, .off = OFF(rl_report, min_return) },
    { .name = "explained_var", .desc = "explained_var", .kind = RL_FK_DOUBLE, .off = OFF(rl_report, explained_var) },
    { .name = "info sums", .desc = "info sums", .kind = RL_FK_ARRAY, .off = OFF(rl_report, info_sum),
      .count_off = OFF(rl_report, n_info), .elem_size = sizeof(double), .max_count = ENV_INFO_MAX,
      .flags = RL_FF_FINITE },
    INT_F(rl_report, info_steps, "info steps", RL_FF_RANGE, 0, RL_MSG_MAX_VERSION),
};
static const struct rl_msg_schema report_schema = { "report", RL_WIRE_LIST, sizeof(struct rl_report), 9, report_fields,
                                                    report_check };

static const struct rl_field policy_out_fields[] = {
    { .name = "a", .desc = "a", .kind = RL_FK_TENSOR, .off = OFF(rl_policy_out, a), .flags = RL_FF_LIST_KIND | RL_FF_CPU,
      .dims = { RL_DIM_ROWS, RL_DIM_ACT } },
    { .name = "log_std", .desc = "log_std", .kind = RL_FK_TENSOR, .off = OFF(rl_policy_out, log_std),
      .dims = { RL_DIM_ACT }, .when = RL_WHEN_GAUSSIAN },
    { .name = "value", .desc = "value", .kind = RL_FK_TENSOR, .off = OFF(rl_policy_out, value), .dims = { RL_DIM_ROWS },
      .when = RL_WHEN_VALUE_HEAD },
    INT_F(rl_policy_out, version, "version", RL_FF_RANGE, 0, RL_MSG_MAX_VERSION),
};
static const struct rl_msg_schema policy_out_schema = { "policy output", RL_WIRE_LIST, sizeof(struct rl_policy_out), 4,
                                                        policy_out_fields, NULL };
/* the same for the proximal policy's answer in a loss request, its errors named so */
static const struct rl_msg_schema prox_out_schema = { "proximal policy output", RL_WIRE_LIST, sizeof(struct rl_policy_out),
                                                      4, policy_out_fields, NULL };

static const struct rl_field setup_fields[] = {
    { .name = "config", .desc = "config map", .kind = RL_FK_VALUE, .off = OFF(rl_setup_msg, config), .kinds = 1u << RPC_MAP },
    { .name = "policy", .desc = "policy RRef", .kind = RL_FK_RREF, .off = OFF(rl_setup_msg, policy) },
    INT_F(rl_setup_msg, index, "index", RL_FF_RANGE, 0, RL_MAX_OBSERVERS - 1),
    { .name = "state", .desc = "state bytes or nil", .kind = RL_FK_VALUE, .off = OFF(rl_setup_msg, state),
      .kinds = 1u << RPC_BYTES | 1u << RPC_NIL },
    INT_F(rl_setup_msg, generation, "generation", RL_FF_RANGE, 0, (1 << 30) - 1),
    NORM_F(rl_setup_msg, norm),
};
static const struct rl_msg_schema setup_schema = { "setup", RL_WIRE_LIST, sizeof(struct rl_setup_msg), 6, setup_fields,
                                                   NULL };

/* act/evaluate's arguments (rl_obs_pack's) and rollout's. */
struct rl_obs_msg { struct tensor *obs; bool last; };
static const struct rl_field obs_fields[] = {
    { .name = "obs", .desc = "obs tensor", .kind = RL_FK_TENSOR, .off = OFF(rl_obs_msg, obs),
      .flags = RL_FF_LIST_KIND | RL_FF_CPU, .dims = { RL_DIM_N, RL_DIM_OBS } },
    { .name = "last", .desc = "last", .kind = RL_FK_BOOL, .off = OFF(rl_obs_msg, last) },
};
static const struct rl_msg_schema obs_schema = { "", RL_WIRE_LIST, sizeof(struct rl_obs_msg), 2, obs_fields, NULL };

struct rl_rollout_req { const struct rpc_value *norm; };
static const struct rl_field rollout_req_fields[] = {
    { .name = "norm", .desc = "norm map or nil", .kind = RL_FK_VALUE, .off = OFF(rl_rollout_req, norm),
      .kinds = 1u << RPC_MAP | 1u << RPC_NIL, .flags = RL_FF_BORROW },
};
static const struct rl_msg_schema rollout_req_schema = { "rollout", RL_WIRE_LIST, sizeof(struct rl_rollout_req), 1,
                                                         rollout_req_fields, NULL };

#define NEXT_OBS(T, m, d, fl)                                                                                        \
    { .name = "the next minibatch's observations", .desc = d, .kind = RL_FK_TENSOR, .off = OFF(T, m),                \
      .flags = RL_FF_CPU | (fl), .dims = { RL_DIM_ROWS, RL_DIM_OBS } }
static const struct rl_field rollout_reply_fields[] = {
    { .name = "report", .desc = "report", .kind = RL_FK_NESTED, .off = OFF(rl_rollout_reply, report),
      .nested = &report_schema },
    NEXT_OBS(rl_rollout_reply, obs, "obs", 0),
    NORM_F(rl_rollout_reply, norm),
};
static const struct rl_msg_schema rollout_reply_schema = { "rollout reply", RL_WIRE_LIST, sizeof(struct rl_rollout_reply),
                                                           3, rollout_reply_fields, NULL };

static int weight_check(const struct rl_msg_schema *s, const struct rl_field *f, const void *msg)
{
    double w = *AT_C(msg, f->off, double);
    return w > 0 && w <= 1 ? 0 : rl_set_error("%s%s%s %g is out of range (0, 1]", PFX(s, f), f->name, w);
}

static const struct rl_field loss_req_fields[] = {
    INT_F(rl_loss_req, epoch, "epoch", RL_FF_RANGE, 0, 1000000),
    INT_F(rl_loss_req, minibatch, "minibatch", RL_FF_RANGE, 0, 1000000),
    { .name = "weight", .desc = "weight", .kind = RL_FK_DOUBLE, .off = OFF(rl_loss_req, weight), .check = weight_check },
    { .name = "policy output", .desc = "policy output", .kind = RL_FK_NESTED, .off = OFF(rl_loss_req, out),
      .nested = &policy_out_schema },
    { .name = "proximal policy output", .desc = "prox output or nil", .kind = RL_FK_NESTED, .off = OFF(rl_loss_req, prox),
      .flags = RL_FF_NIL_OK, .present_off = OFF(rl_loss_req, has_prox), .nested = &prox_out_schema },
};
static const struct rl_msg_schema loss_req_schema = { "loss", RL_WIRE_LIST, sizeof(struct rl_loss_req), 5, loss_req_fields,
                                                      NULL };

/* d(loss)/d(policy output): hostile input the agent carries into its
 * parameters' gradients, so shaped as the output it was sent and finite. */
#define GRAD_F(m) .name = #m, .desc = #m, .kind = RL_FK_TENSOR, .off = OFF(rl_policy_grad, m), .flags = RL_FF_CPU | RL_FF_FINITE
static const struct rl_field policy_grad_fields[] = {
    { GRAD_F(a), .dims = { RL_DIM_ROWS, RL_DIM_ACT } },
    { GRAD_F(log_std), .dims = { RL_DIM_ACT }, .when = RL_WHEN_GAUSSIAN },
    { GRAD_F(value), .dims = { RL_DIM_ROWS }, .when = RL_WHEN_VALUE_HEAD },
};
#undef GRAD_F
static const struct rl_msg_schema policy_grad_schema = { "gradient", RL_WIRE_LIST, sizeof(struct rl_policy_grad), 3,
                                                         policy_grad_fields, NULL };

static const struct rl_field minibatch_reply_fields[] = {
    STATS_F(rl_minibatch_reply, stats),
    NEXT_OBS(rl_minibatch_reply, obs, "obs or nil", RL_FF_NIL_OK),
    { .name = "gradient", .desc = "gradient", .kind = RL_FK_NESTED, .off = OFF(rl_minibatch_reply, grad),
      .nested = &policy_grad_schema },
};
static const struct rl_msg_schema minibatch_reply_schema = { "loss reply", RL_WIRE_LIST, sizeof(struct rl_minibatch_reply),
                                                             3, minibatch_reply_fields, NULL };

static const struct rl_field loss_reply_fields[] = {
    { .name = "the loss", .desc = "loss", .kind = RL_FK_TENSOR, .off = OFF(rl_loss_reply, loss),
      .flags = RL_FF_LIST_KIND | RL_FF_SCALAR },
    STATS_F(rl_loss_reply, stats),
    { .name = "report", .desc = "report", .kind = RL_FK_NESTED, .off = OFF(rl_loss_reply, report), .nested = &report_schema },
};
static const struct rl_msg_schema loss_reply_schema = { "loss reply", RL_WIRE_LIST, sizeof(struct rl_loss_reply), 3,
                                                        loss_reply_fields, NULL };

static const struct rl_field update_req_fields[] = {
    INT_F(rl_update_req, ctx, "ctx", RL_FF_RANGE | RL_FF_BARE, 1, INT64_MAX),
    INT_F(rl_update_req, version0, "version0", RL_FF_RANGE | RL_FF_BARE, 0, RL_MSG_MAX_VERSION),
    { .name = "has_report", .desc = "has_report", .kind = RL_FK_BOOL, .off = OFF(rl_update_req, has_report) },
    { .name = "report", .desc = "report", .kind = RL_FK_NESTED, .off = OFF(rl_update_req, report),
      .flags = RL_FF_BY_FLAG, .present_off = OFF(rl_update_req, has_report), .nested = &report_schema },
    STATS_F(rl_update_req, stats),
    { .name = "the next observations", .desc = "next obs", .kind = RL_FK_TENSOR, .off = OFF(rl_update_req, next_obs),
      .flags = RL_FF_NIL_OK | RL_FF_CPU, .dims = { RL_DIM_N, RL_DIM_OBS } },
    NORM_F(rl_update_req, norm),
};
static const struct rl_msg_schema update_req_schema = { "update", RL_WIRE_LIST, sizeof(struct rl_update_req), 7,
                                                        update_req_fields, NULL };

static const struct rl_field update_reply_fields[] = {
    { .name = "stop", .desc = "stop", .kind = RL_FK_BOOL, .off = OFF(rl_update_reply, stop) },
    { .name = "policy output", .desc = "policy output or nil", .kind = RL_FK_NESTED, .off = OFF(rl_update_reply, out),
      .flags = RL_FF_NIL_OK, .present_off = OFF(rl_update_reply, has_out), .nested = &policy_out_schema },
    { .name = "stale", .desc = "stale", .kind = RL_FK_BOOL, .off = OFF(rl_update_reply, stale) },
    NORM_F(rl_update_reply, norm),
};
static const struct rl_msg_schema update_reply_schema = { "update reply", RL_WIRE_LIST, sizeof(struct rl_update_reply), 4,
                                                          update_reply_fields, NULL };

const struct rl_msg_schema *const rl_msg_schemas[] = {
    &setup_schema,    &obs_schema,      &policy_out_schema, &report_schema,     &rollout_req_schema,  &rollout_reply_schema,
    &loss_req_schema, &stats_schema,    &policy_grad_schema, &minibatch_reply_schema, &loss_reply_schema, &update_req_schema,
    &update_reply_schema, &prox_out_schema, NULL,
};

/* ---- the messages' functions: their tables applied ----------------------------- */

struct rpc_value rl_setup_pack(const struct rl_setup_msg *m) { return rl_msg_pack(&setup_schema, m); }
int rl_setup_unpack(const struct rpc_value *a, struct rl_setup_msg *m) { return rl_msg_unpack(&setup_schema, a, NULL, m); }
void rl_setup_clear(struct rl_setup_msg *m) { rl_msg_clear(&setup_schema, m); }

struct rpc_value rl_obs_pack(struct tensor *obs, bool last)
{
    struct rl_obs_msg m = { obs, last };
    return rl_msg_pack(&obs_schema, &m);
}

int rl_obs_unpack(const struct rpc_value *a, int obs_dim, struct tensor **obs, bool *last)
{
    struct rl_obs_msg m;
    struct rl_msg_expect x = { .rows = -1, .obs_dim = obs_dim };
    *obs = NULL;
    if (rl_msg_unpack(&obs_schema, a, &x, &m) != 0) return -1;
    *obs = m.obs;
    if (last) *last = m.last;
    return 0;
}

static struct rl_msg_expect out_expect(int rows, int act_dim, bool gaussian, bool value_head)
{
    struct rl_msg_expect x = { .rows = rows, .act_dim = act_dim, .gaussian = gaussian, .value_head = value_head };
    return x;
}

struct rpc_value rl_policy_out_pack(const struct rl_policy_out *o) { return rl_msg_pack(&policy_out_schema, o); }
int rl_policy_out_unpack(const struct rpc_value *v, int rows, int act_dim, bool gaussian, bool value_head,
                         struct rl_policy_out *o)
{
    struct rl_msg_expect x = out_expect(rows, act_dim, gaussian, value_head);
    return rl_msg_unpack(&policy_out_schema, v, &x, o);
}
void rl_policy_out_clear(struct rl_policy_out *o)
{
    rl_msg_clear(&policy_out_schema, o);
    memset(o, 0, sizeof *o);
}

struct rpc_value rl_report_pack(const struct rl_report *r) { return rl_msg_pack(&report_schema, r); }
int rl_report_unpack(const struct rpc_value *v, struct rl_report *r) { return rl_msg_unpack(&report_schema, v, NULL, r); }

struct rpc_value rl_loss_req_pack(const struct rl_loss_req *m) { return rl_msg_pack(&loss_req_schema, m); }
int rl_loss_req_unpack(const struct rpc_value *a, int rows, int act_dim, bool gaussian, bool value_head,
                       struct rl_loss_req *m)
{
    struct rl_msg_expect x = out_expect(rows, act_dim, gaussian, value_head);
    return rl_msg_unpack(&loss_req_schema, a, &x, m);
}
void rl_loss_req_clear(struct rl_loss_req *m) { rl_msg_clear(&loss_req_schema, m); }

struct rpc_value rl_rollout_reply_pack(const struct rl_rollout_reply *m) { return rl_msg_pack(&rollout_reply_schema, m); }
int rl_rollout_reply_unpack(const struct rpc_value *v, int rows, int obs_dim, struct rl_rollout_reply *m)
{
    struct rl_msg_expect x = { .rows = rows, .obs_dim = obs_dim };
    return rl_msg_unpack(&rollout_reply_schema, v, &x, m);
}
void rl_rollout_reply_clear(struct rl_rollout_reply *m) { rl_msg_clear(&rollout_reply_schema, m); }

struct rpc_value rl_rollout_req_pack(const struct rpc_value *norm)
{
    struct rl_rollout_req m = { norm };
    return rl_msg_pack(&rollout_req_schema, &m);
}
int rl_rollout_req_unpack(const struct rpc_value *args, const struct rpc_value **norm)
{
    struct rl_rollout_req m;
    if (rl_msg_unpack(&rollout_req_schema, args, NULL, &m) != 0) return -1;
    *norm = m.norm;
    return 0;
}

struct rpc_value rl_minibatch_reply_pack(const struct rl_minibatch_reply *m)
{
    return rl_msg_pack(&minibatch_reply_schema, m);
}
int rl_minibatch_reply_unpack(const struct rpc_value *v, int rows, int obs_dim, int act_dim, bool gaussian,
                              bool value_head, struct rl_minibatch_reply *m)
{
    struct rl_msg_expect x = { .rows = rows, .obs_dim = obs_dim, .act_dim = act_dim, .gaussian = gaussian,
                               .value_head = value_head };
    return rl_msg_unpack(&minibatch_reply_schema, v, &x, m);
}
void rl_minibatch_reply_clear(struct rl_minibatch_reply *m) { rl_msg_clear(&minibatch_reply_schema, m); }

struct rpc_value rl_loss_reply_pack(const struct rl_loss_reply *m) { return rl_msg_pack(&loss_reply_schema, m); }
int rl_loss_reply_unpack(const struct rpc_value *v, struct rl_loss_reply *m)
{
    return rl_msg_unpack(&loss_reply_schema, v, NULL, m);
}
void rl_loss_reply_clear(struct rl_loss_reply *m) { rl_msg_clear(&loss_reply_schema, m); }

struct rpc_value rl_update_req_pack(const struct rl_update_req *m) { return rl_msg_pack(&update_req_schema, m); }
int rl_update_req_unpack(const struct rpc_value *a, int obs_dim, struct rl_update_req *m)
{
    struct rl_msg_expect x = { .rows = -1, .obs_dim = obs_dim };
    return rl_msg_unpack(&update_req_schema, a, &x, m);
}
void rl_update_req_clear(struct rl_update_req *m) { rl_msg_clear(&update_req_schema, m); }

struct rpc_value rl_update_reply_pack(const struct rl_update_reply *m) { return rl_msg_pack(&update_reply_schema, m); }
int rl_update_reply_unpack(const struct rpc_value *v, int rows, int act_dim, bool gaussian, bool value_head,
                           struct rl_update_reply *m)
{
    struct rl_msg_expect x = out_expect(rows, act_dim, gaussian, value_head);
    return rl_msg_unpack(&update_reply_schema, v, &x, m);
}
void rl_update_reply_clear(struct rl_update_reply *m) { rl_msg_clear(&update_reply_schema, m); }

/* ---- reports and updates beside the wire ------------------------------------------ */

void rl_report_add(struct rl_report *r, double ret, int len)
{
    if (r->episodes == 0 || ret < r->min_return) r->min_return = ret;
    r->episodes++;
    if (r->n_returns == RL_REPORT_EPISODES) {
        memmove(r->returns, r->returns + 1, (RL_REPORT_EPISODES - 1) * sizeof r->returns[0]);
        memmove(r->lengths, r->lengths + 1, (RL_REPORT_EPISODES - 1) * sizeof r->lengths[0]);
        r->n_returns--;
    }
    r->returns[r->n_returns] = ret;
    r->lengths[r->n_returns++] = len;
}

int rl_report_fits(const struct rl_report *r, const struct rl_config *cfg, int max_episode_steps, int64_t version_now)
{
    const struct rl_algo *a = rl_algo_of(cfg);
    if (!a) return rl_set_error("report: unknown algorithm %d", cfg->algo);
    if (rl_algo_report_steps_fit(a, cfg, max_episode_steps, r->steps) != 0) return -1;
    if (r->version0 > version_now)
        return rl_set_error("report: version0 %lld is newer than the policy's version %lld", (long long)r->version0,
                            (long long)version_now);
    return 0;
}

int rl_update_req_fits(const struct rl_update_req *m, const struct rl_config *cfg, int max_episode_steps,
                       int64_t version_now)
{
    if (m->version0 > version_now)
        return rl_set_error("version0 %lld is newer than the policy's version %lld", (long long)m->version0,
                            (long long)version_now);
    return m->has_report ? rl_report_fits(&m->report, cfg, max_episode_steps, version_now) : 0;
}
