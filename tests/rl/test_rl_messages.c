/* The RL messages' schema tables (rl/message_schema.h), walked: every
 * message of rl_msg_schemas is filled from its table, packed, unpacked and
 * compared field by field, and each field's absence, wrong kind, wrong
 * shape or dtype, out-of-range or non-finite value (a double, an array's
 * element, a tensor's element), and unwanted presence
 * is refused by an error naming it. Nothing here names a message's fields:
 * a new message or field in the tables is covered with no edit. The one
 * exception, on purpose: the pinned wire signatures of today's messages
 * (positions and kinds), which a table edit must not change silently. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/message_schema.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "rpc/rpc.h"

#define AT(m, off, T) ((T *)(void *)((char *)(m) + (off)))

static const struct rl_msg_expect X = { .rows = 3, .obs_dim = 4, .act_dim = 2, .gaussian = true, .value_head = true };
static struct rref *g_rref;
static struct rpc_value g_borrowed;    /* what a borrowed value field points at */

static int64_t dim_val(enum rl_dim d)
{
    switch (d) {
    case RL_DIM_ROWS: return X.rows;
    case RL_DIM_OBS: return X.obs_dim;
    case RL_DIM_ACT: return X.act_dim;
    default: return 5;
    }
}

static struct tensor *make_tensor(const struct rl_field *f, int seed, bool wrong_shape, bool wrong_dtype)
{
    int64_t shape[2] = { 1, 1 };
    int nd = 0;
    if (f->flags & RL_FF_SCALAR) nd = 1;
    else
        while (nd < 2 && f->dims[nd] != RL_DIM_NONE) shape[nd] = dim_val(f->dims[nd]), nd++;
    if (wrong_shape) {
        if (f->flags & RL_FF_SCALAR) shape[0] = 2;
        else shape[nd - 1] += 3;
    }
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    if (wrong_dtype) {
        int64_t *v = calloc((size_t)n, sizeof *v);
        struct tensor *t = tensor_from_data(DTYPE_I64, nd, shape, v);
        free(v);
        return t;
    }
    float *v = calloc((size_t)n, sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(seed + i) * 0.25f;
    struct tensor *t = tensor_from_f32(nd, shape, v);
    free(v);
    return t;
}

static int64_t clamp(int64_t v, const struct rl_field *f)
{
    if (!(f->flags & RL_FF_RANGE)) return v;
    return v < f->lo ? f->lo : v > f->hi ? f->hi : v;
}

/* Every field given a value its checks accept, distinct by position. */
static void fill(const struct rl_msg_schema *s, void *m)
{
    memset(m, 0, s->size);
    for (int i = 0; i < s->n_fields; i++) {
        const struct rl_field *f = &s->fields[i];
        switch (f->kind) {
        case RL_FK_INT:
            if (f->size == sizeof(int)) *AT(m, f->off, int) = (int)clamp(100 - i, f);
            else *AT(m, f->off, int64_t) = clamp(100 - i, f);
            break;
        case RL_FK_BOOL: *AT(m, f->off, bool) = true; break;
        case RL_FK_DOUBLE: *AT(m, f->off, double) = 0.5 / (i + 1); break;
        case RL_FK_VALUE:
            if (f->flags & RL_FF_BORROW) {
                *AT(m, f->off, const struct rpc_value *) = &g_borrowed;
            } else if (f->kinds & (1u << RPC_MAP)) {
                struct rpc_value v = rpc_map(1);
                rpc_map_set(&v, 0, "k", rpc_int(i));
                *AT(m, f->off, struct rpc_value) = v;
            } else {
                ck_assert_msg(f->kinds & (1u << RPC_BYTES), "%s: a value field of kinds %#x", f->name, f->kinds);
                *AT(m, f->off, struct rpc_value) = rpc_bytes("xyz", 3);
            }
            break;
        case RL_FK_RREF: *AT(m, f->off, struct rref *) = rref_retain(g_rref); break;
        case RL_FK_TENSOR: *AT(m, f->off, struct tensor *) = make_tensor(f, i, false, false); break;
        case RL_FK_ARRAY: {
            int *n = AT(m, f->count_off, int);
            if (!(f->flags & RL_FF_COUNT_SET)) *n = f->max_count < 3 ? f->max_count : 3;
            for (int k = 0; k < *n; k++) {
                if (f->elem_size == sizeof(double)) AT(m, f->off, double)[k] = 1.5 * (k + i);
                else AT(m, f->off, int)[k] = (int)clamp(k + 1 + i, f);
            }
            break;
        }
        case RL_FK_NESTED:
            fill(f->nested, AT(m, f->off, char));
            if (f->flags & RL_FF_NIL_OK) *AT(m, f->present_off, bool) = true;
            break;
        }
    }
}

static void expect_equal(const struct rl_msg_schema *s, void *a, void *b)
{
    for (int i = 0; i < s->n_fields; i++) {
        const struct rl_field *f = &s->fields[i];
        const char *n = f->name;
        switch (f->kind) {
        case RL_FK_INT:
            if (f->size == sizeof(int)) ck_assert_msg(*AT(a, f->off, int) == *AT(b, f->off, int), "%s: %s", s->name, n);
            else ck_assert_msg(*AT(a, f->off, int64_t) == *AT(b, f->off, int64_t), "%s: %s", s->name, n);
            break;
        case RL_FK_BOOL: ck_assert_msg(*AT(a, f->off, bool) == *AT(b, f->off, bool), "%s: %s", s->name, n); break;
        case RL_FK_DOUBLE:
            ck_assert_msg(memcmp(AT(a, f->off, double), AT(b, f->off, double), sizeof(double)) == 0, "%s: %s", s->name, n);
            break;
        case RL_FK_VALUE: {
            const struct rpc_value *va = f->flags & RL_FF_BORROW ? *AT(a, f->off, const struct rpc_value *)
                                                                 : AT(a, f->off, struct rpc_value);
            const struct rpc_value *vb = f->flags & RL_FF_BORROW ? *AT(b, f->off, const struct rpc_value *)
                                                                 : AT(b, f->off, struct rpc_value);
            ck_assert_msg(va && vb && rpc_value_equal(va, vb), "%s: %s", s->name, n);
            break;
        }
        case RL_FK_RREF: ck_assert_msg(*AT(a, f->off, struct rref *) == *AT(b, f->off, struct rref *), "%s: %s", s->name, n); break;
        case RL_FK_TENSOR: {
            struct tensor *ta = *AT(a, f->off, struct tensor *), *tb = *AT(b, f->off, struct tensor *);
            ck_assert_msg((ta == NULL) == (tb == NULL), "%s: %s present", s->name, n);
            if (!ta) break;
            ck_assert_msg(ta->dtype == tb->dtype && ta->ndim == tb->ndim && ta->numel == tb->numel, "%s: %s", s->name, n);
            for (int d = 0; d < ta->ndim; d++) ck_assert_int_eq(ta->shape[d], tb->shape[d]);
            ck_assert_msg(memcmp(tensor_f32(ta), tensor_f32(tb), (size_t)ta->numel * sizeof(float)) == 0, "%s: %s data",
                          s->name, n);
            break;
        }
        case RL_FK_ARRAY: {
            int na = *AT(a, f->count_off, int), nb = *AT(b, f->count_off, int);
            ck_assert_msg(na == nb, "%s: %s count %d, %d", s->name, n, na, nb);
            ck_assert_msg(memcmp(AT(a, f->off, char), AT(b, f->off, char), (size_t)na * f->elem_size) == 0, "%s: %s",
                          s->name, n);
            break;
        }
        case RL_FK_NESTED:
            if (f->flags & RL_FF_NIL_OK)
                ck_assert_msg(*AT(a, f->present_off, bool) == *AT(b, f->present_off, bool), "%s: %s present", s->name, n);
            expect_equal(f->nested, AT(a, f->off, char), AT(b, f->off, char));
            break;
        }
    }
}

/* The packed wire's shape: kinds by position, nested lists in brackets. */
static void signature(const struct rpc_value *v, char *out, size_t cap)
{
    static const char code[] = "0BIDSYTRLM";   /* by enum rpc_kind */
    size_t n = strlen(out);
    if (n + 2 >= cap) return;
    if (v->kind != RPC_LIST) {
        out[n] = code[v->kind];
        out[n + 1] = '\0';
        return;
    }
    out[n] = '[';
    out[n + 1] = '\0';
    for (size_t i = 0; i < v->list.len; i++) signature(&v->list.items[i], out, cap);
    n = strlen(out);
    if (n + 1 < cap) out[n] = ']', out[n + 1] = '\0';
}

static struct rpc_value packed_full(const struct rl_msg_schema *s, void **m)
{
    *m = calloc(1, s->size);
    fill(s, *m);
    return rl_msg_pack(s, *m);
}

/* A refusal whose error names the field. */
static void refused(const struct rl_msg_schema *s, const struct rl_field *f, const struct rpc_value *v,
                    const struct rl_msg_expect *x, const char *why, const char *says)
{
    void *got = calloc(1, s->size);
    ck_assert_msg(rl_msg_unpack(s, v, x, got) == -1, "%s: %s: %s was accepted", s->name, f->name, why);
    const char *e = rl_last_error();
    bool named = strstr(e, f->name) || strstr(e, f->desc) || (f->nested && strstr(e, f->nested->name));
    ck_assert_msg(named, "%s: %s: %s: the error does not name it: %s", s->name, f->name, why, e);
    if (says) ck_assert_msg(strstr(e, says), "%s: %s: %s: '%s' not in: %s", s->name, f->name, why, says, e);
    /* refused: nothing held, all zero */
    static const char zero[sizeof(struct rl_report) + 256];
    ck_assert_msg(s->size <= sizeof zero && memcmp(got, zero, s->size) == 0, "%s: a refused unpack left data", s->name);
    free(got);
}

START_TEST(test_messages_round_trip_and_refusals)
{
    struct rpc_opts o = { .name = "msgs", .rank = 0, .world_size = 1, .master = "tcp://127.0.0.1:0" };
    ck_assert_msg(rpc_init(&o) == 0, "rpc_init: %s", rpc_last_error());
    struct rpc_value held = rpc_int(1);
    g_rref = rref_new_local_value(&held);
    ck_assert_ptr_nonnull(g_rref);
    g_borrowed = rpc_map(0);
    int n_schemas = 0, n_fields = 0;
    for (const struct rl_msg_schema *const *sp = rl_msg_schemas; *sp; sp++, n_schemas++) {
        const struct rl_msg_schema *s = *sp;
        void *m, *got = calloc(1, s->size);
        struct rpc_value v = packed_full(s, &m);
        ck_assert_msg(rl_msg_unpack(s, &v, &X, got) == 0, "%s: %s", s->name, rl_last_error());
        expect_equal(s, m, got);
        /* packing the unpacked gives the same wire */
        struct rpc_value again = rl_msg_pack(s, got);
        ck_assert_msg(rpc_value_equal(&v, &again), "%s: repacked differs", s->name);
        rpc_value_clear(&again);
        rl_msg_clear(s, got);
        if (s->wire == RL_WIRE_BLOB) {
            struct rpc_value shortv = rpc_bytes(m, s->size - 1);
            ck_assert_int_eq(rl_msg_unpack(s, &shortv, &X, got), -1);
            char want[96];
            snprintf(want, sizeof want, "%s: expected %zu bytes", s->name, s->size);
            ck_assert_str_eq(rl_last_error(), want);
            rpc_value_clear(&shortv);
        }
        for (int i = 0; i < s->n_fields; i++, n_fields++) {
            const struct rl_field *f = &s->fields[i];
            char why[160];
            if (s->wire == RL_WIRE_BLOB) {
                if (!(f->flags & RL_FF_FINITE)) continue;
                double keep = *AT(m, f->off, double);
                *AT(m, f->off, double) = NAN;
                struct rpc_value b = rl_msg_pack(s, m);
                refused(s, f, &b, &X, "nan", "is not finite");
                rpc_value_clear(&b);
                *AT(m, f->off, double) = keep;
                continue;
            }
            /* absent: the list one shorter, this item gone */
            struct rpc_value w = rpc_list((size_t)s->n_fields - 1);
            for (int k = 0, j = 0; k < s->n_fields; k++)
                if (k != i) w.list.items[j++] = rpc_value_copy(&v.list.items[k]);
            refused(s, f, &w, &X, "absent", "expected (");
            rpc_value_clear(&w);
            /* each mutation of item i in a copy of the full wire */
#define MUTATE(val, whyfmt, says, x)                                                                                \
    do {                                                                                                             \
        struct rpc_value c = rpc_value_copy(&v);                                                                     \
        rpc_value_clear(&c.list.items[i]);                                                                           \
        c.list.items[i] = (val);                                                                                     \
        refused(s, f, &c, (x), whyfmt, says);                                                                        \
        rpc_value_clear(&c);                                                                                         \
    } while (0)
            MUTATE(rpc_str("wrong kind"), "a string", NULL, &X);
            if (f->kind == RL_FK_TENSOR) {
                struct tensor *t = make_tensor(f, 0, true, false);
                MUTATE(rpc_tensor(t), "a wrong shape", "must be", &X);
                tensor_free(t);
                t = make_tensor(f, 0, false, true);
                MUTATE(rpc_tensor(t), "a wrong dtype", "must be", &X);
                if (f->when != RL_WHEN_ALWAYS) {
                    struct rl_msg_expect off = X;
                    if (f->when == RL_WHEN_GAUSSIAN) off.gaussian = false;
                    else off.value_head = false;
                    /* the field present where the run has none: a copy with only this item changed */
                    struct rpc_value c = rpc_value_copy(&v);
                    refused(s, f, &c, &off, "unwanted", "unexpected");
                    rpc_value_clear(&c);
                }
                tensor_free(t);
                if (f->flags & RL_FF_FINITE) {   /* one element not finite, named with its index */
                    for (int k = 0; k < 2; k++) {
                        t = make_tensor(f, 0, false, false);
                        float *x = tensor_f32(t);
                        int64_t at = t->numel - 1;
                        x[at] = k ? -INFINITY : NAN;
                        snprintf(why, sizeof why, "%s[%lld] %s is not finite", f->name, (long long)at, k ? "-inf" : "nan");
                        MUTATE(rpc_tensor(t), why, why, &X);
                        tensor_free(t);
                    }
                }
                if (!(f->flags & RL_FF_NIL_OK))
                    MUTATE(rpc_nil(), "nil", f->flags & RL_FF_LIST_KIND ? "expected (" : "must be", &X);
            }
            if (f->kind == RL_FK_INT && (f->flags & RL_FF_RANGE)) {
                if (f->hi < INT64_MAX) MUTATE(rpc_int(f->hi + 1), "above its range", "out of range", &X);
                if (f->lo > INT64_MIN) MUTATE(rpc_int(f->lo - 1), "below its range", "out of range", &X);
            }
            if (f->kind == RL_FK_DOUBLE && (f->flags & RL_FF_FINITE)) MUTATE(rpc_double(NAN), "nan", "not finite", &X);
            if (f->kind == RL_FK_DOUBLE && f->check) MUTATE(rpc_double(-1e300), "a value its check refuses", NULL, &X);
            if (f->kind == RL_FK_ARRAY) {
                const struct rpc_value *it = &v.list.items[i];
                ck_assert_msg(it->str.len >= f->elem_size, "%s: %s filled empty", s->name, f->name);
                MUTATE(rpc_bytes(it->str.ptr, it->str.len - 1), "a ragged size", "size", &X);
                char *bad = malloc(it->str.len);
                memcpy(bad, it->str.ptr, it->str.len);
                if (f->flags & RL_FF_FINITE) {
                    double nan = NAN;
                    memcpy(bad + f->elem_size, &nan, sizeof nan);
                    snprintf(why, sizeof why, "%s[1] nan", f->name);
                    MUTATE(rpc_bytes(bad, it->str.len), why, why, &X);
                }
                if (f->flags & RL_FF_RANGE) {
                    int lo = (int)f->lo - 1;
                    memcpy(bad + f->elem_size, &lo, sizeof lo);
                    snprintf(why, sizeof why, "%s[1] %d", f->name, lo);
                    MUTATE(rpc_bytes(bad, it->str.len), why, why, &X);
                }
                free(bad);
            }
            if (f->kind == RL_FK_NESTED && (f->flags & (RL_FF_NIL_OK | RL_FF_BY_FLAG))) {
                /* absent where allowed: accepted, and read back absent */
                void *sparse = calloc(1, s->size);
                fill(s, sparse);
                rl_msg_clear(f->nested, AT(sparse, f->off, char));
                memset(AT(sparse, f->off, char), 0, f->nested->size);
                *AT(sparse, f->present_off, bool) = false;
                struct rpc_value sv = rl_msg_pack(s, sparse);
                ck_assert_msg(sv.list.items[i].kind == RPC_NIL, "%s: %s absent is not nil", s->name, f->name);
                ck_assert_msg(rl_msg_unpack(s, &sv, &X, got) == 0, "%s: %s absent: %s", s->name, f->name, rl_last_error());
                expect_equal(s, sparse, got);
                rl_msg_clear(s, got);
                rpc_value_clear(&sv);
                rl_msg_clear(s, sparse);
                free(sparse);
            }
#undef MUTATE
        }
        rpc_value_clear(&v);
        rl_msg_clear(s, m);
        free(m);
        free(got);
    }
    ck_assert_int_ge(n_schemas, 12);
    ck_assert_int_ge(n_fields, 40);
    rpc_value_clear(&g_borrowed);
    rref_free(g_rref);
    rpc_shutdown(false);
}
END_TEST

/* Today's wire, pinned: positions and kinds of every message as packed
 * from a full struct (B bool, I int, D double, Y bytes, T tensor, R RRef,
 * M map, [..] a list). A table edit that moves or re-kinds a field breaks
 * old peers and the fuzz corpora; it must change this on purpose. */
START_TEST(test_messages_wire_pinned)
{
    static const struct { const char *name, *sig; } pin[] = {
        { "setup", "[MRIYIM]" },
        { "", "[TB]" },
        { "policy output", "[TTTI]" },
        { "report", "[IIIYYDDYI]" },
        { "rollout", "[M]" },
        { "rollout reply", "[[IIIYYDDYI]TM]" },
        { "loss", "[IID[TTTI][TTTI]]" },
        { "stats", "Y" },
        { "gradient", "[TTT]" },
        { "loss reply", "[YT[TTT]]" },
        { "loss reply", "[TY[IIIYYDDYI]]" },
        { "update", "[IIB[IIIYYDDYI]YTM]" },
        { "update reply", "[B[TTTI]BM]" },
        { "proximal policy output", "[TTTI]" },
    };
    struct rpc_opts o = { .name = "msgs", .rank = 0, .world_size = 1, .master = "tcp://127.0.0.1:0" };
    ck_assert_msg(rpc_init(&o) == 0, "rpc_init: %s", rpc_last_error());
    struct rpc_value held = rpc_int(1);
    g_rref = rref_new_local_value(&held);
    g_borrowed = rpc_map(0);
    size_t n = 0;
    for (const struct rl_msg_schema *const *sp = rl_msg_schemas; *sp; sp++, n++) {
        ck_assert_msg(n < sizeof pin / sizeof pin[0], "a message without a pinned wire: '%s'", (*sp)->name);
        void *m;
        struct rpc_value v = packed_full(*sp, &m);
        char sig[128] = "";
        signature(&v, sig, sizeof sig);
        ck_assert_str_eq((*sp)->name, pin[n].name);
        ck_assert_msg(strcmp(sig, pin[n].sig) == 0, "'%s': wire %s, pinned %s", (*sp)->name, sig, pin[n].sig);
        rpc_value_clear(&v);
        rl_msg_clear(*sp, m);
        free(m);
    }
    ck_assert_uint_eq(n, sizeof pin / sizeof pin[0]);
    rpc_value_clear(&g_borrowed);
    rref_free(g_rref);
    rpc_shutdown(false);
}
END_TEST

/* The public functions keep the texts the agent's logs and the tests
 * print (test_rl_faults, test_rl_files): a few, as the wire brings them. */
START_TEST(test_messages_texts)
{
    struct rl_update_req u = { .ctx = 5, .version0 = -1 };
    struct rpc_value v = rl_update_req_pack(&u), a;
    struct rl_update_req got;
    ck_assert_int_eq(rl_update_req_unpack(&v, 4, &got), -1);
    ck_assert_str_eq(rl_last_error(), "version0 -1 is out of range 0..9007199254740992");
    rpc_value_clear(&v);
    u.version0 = 0;
    u.stats.policy_loss = NAN;
    v = rl_update_req_pack(&u);
    ck_assert_int_eq(rl_update_req_unpack(&v, 4, &got), -1);
    ck_assert_str_eq(rl_last_error(), "stats: policy_loss nan is not finite");
    rpc_value_clear(&v);
    a = rpc_list(1);
    ck_assert_int_eq(rl_update_req_unpack(&a, 4, &got), -1);
    ck_assert_str_eq(rl_last_error(),
                     "update: expected (ctx, version0, has_report, report, stats, next obs, norm map or nil)");
    ck_assert_int_eq(rl_report_unpack(&a, &got.report), -1);
    ck_assert_str_eq(rl_last_error(), "report: expected (steps, version0, episodes, returns, lengths, min, explained_var, "
                                      "info sums, info steps)");
    rpc_value_clear(&a);
    int64_t shape[2] = { 2, 3 };
    struct tensor *t = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    v = rl_obs_pack(t, true);
    struct tensor *obs = NULL;
    ck_assert_int_eq(rl_obs_unpack(&v, 4, &obs, NULL), -1);
    ck_assert_str_eq(rl_last_error(), "obs must be f32 [N,4] with N >= 1, not f32 [2,3]");
    ck_assert_ptr_null(obs);
    bool last = false;
    ck_assert_int_eq(rl_obs_unpack(&v, 3, &obs, &last), 0);
    ck_assert(last && obs == t);
    tensor_free(obs);
    rpc_value_clear(&v);
    tensor_free(t);
    /* a sync loss reply's gradient (d(loss)/d(policy output)): checked
     * against the rows and dims the agent sent, and finite */
    float ga[6] = { 1, 2, 3, 4, 5, 6 }, gv[3] = { 0.5f, -0.5f, NAN }, gl[2] = { 1, 1 };
    int64_t s_a[2] = { 3, 2 }, s_v[1] = { 3 }, s_l[1] = { 2 };
    struct rl_minibatch_reply r = { .grad = { tensor_from_f32(2, s_a, ga), tensor_from_f32(1, s_l, gl),
                                              tensor_from_f32(1, s_v, gv) } }, rg;
    v = rl_minibatch_reply_pack(&r);
    ck_assert_int_eq(rl_minibatch_reply_unpack(&v, 3, 4, 2, true, true, &rg), -1);
    ck_assert_str_eq(rl_last_error(), "gradient: value[2] nan is not finite");
    ck_assert_ptr_null(rg.grad.a);
    ck_assert_int_eq(rl_minibatch_reply_unpack(&v, 3, 4, 3, true, true, &rg), -1);
    ck_assert_str_eq(rl_last_error(), "gradient: a must be f32 [3,3], not f32 [3,2]");
    ck_assert_int_eq(rl_minibatch_reply_unpack(&v, 4, 4, 2, true, true, &rg), -1);
    ck_assert_str_eq(rl_last_error(), "gradient: a must be f32 [4,2], not f32 [3,2]");
    ck_assert_int_eq(rl_minibatch_reply_unpack(&v, 3, 4, 2, false, true, &rg), -1);
    ck_assert_str_eq(rl_last_error(), "gradient: unexpected log_std");
    rpc_value_clear(&v);
    tensor_f32(r.grad.value)[2] = 0.25f;
    v = rl_minibatch_reply_pack(&r);
    ck_assert_int_eq(rl_minibatch_reply_unpack(&v, 3, 4, 2, true, true, &rg), 0);
    ck_assert(rg.obs == NULL && rg.grad.a == r.grad.a && rg.grad.log_std == r.grad.log_std &&
              rg.grad.value == r.grad.value);
    rl_minibatch_reply_clear(&rg);
    rpc_value_clear(&v);
    v = rpc_list(2);
    ck_assert_int_eq(rl_minibatch_reply_unpack(&v, 3, 4, 2, true, true, &rg), -1);
    ck_assert_str_eq(rl_last_error(), "loss reply: expected (stats, obs or nil, gradient)");
    rpc_value_clear(&v);
    tensor_free(r.grad.a);
    tensor_free(r.grad.log_std);
    tensor_free(r.grad.value);
    /* a loss request's proximal policy output (sync --overlap's decoupled
     * correction): absent (nil) or checked as the policy output is, its
     * errors naming it */
    float oa[6] = { 0 }, ov[3] = { 0 }, pa[15] = { 0 };
    int64_t s_p[2] = { 3, 5 };
    struct rl_loss_req q = { .epoch = 1, .minibatch = 0, .weight = 0.5,
                             .out = { tensor_from_f32(2, s_a, oa), NULL, tensor_from_f32(1, s_v, ov), 7 } }, qg;
    v = rl_loss_req_pack(&q);
    ck_assert_int_eq(rl_loss_req_unpack(&v, 3, 2, false, true, &qg), 0);
    ck_assert(!qg.has_prox && qg.prox.a == NULL && qg.out.a == q.out.a);
    rl_loss_req_clear(&qg);
    rpc_value_clear(&v);
    q.has_prox = true;
    q.prox = (struct rl_policy_out){ tensor_from_f32(2, s_p, pa), NULL, tensor_from_f32(1, s_v, ov), 6 };
    v = rl_loss_req_pack(&q);
    ck_assert_int_eq(rl_loss_req_unpack(&v, 3, 2, false, true, &qg), -1);
    ck_assert_str_eq(rl_last_error(), "proximal policy output: a must be f32 [3,2], not f32 [3,5]");
    ck_assert(!qg.has_prox && qg.out.a == NULL);
    rpc_value_clear(&v);
    tensor_free(q.prox.a);
    q.prox.a = tensor_from_f32(2, s_a, oa);
    v = rl_loss_req_pack(&q);
    ck_assert_int_eq(rl_loss_req_unpack(&v, 3, 2, false, true, &qg), 0);
    ck_assert(qg.has_prox && qg.prox.a == q.prox.a && qg.prox.value == q.prox.value && qg.prox.version == 6);
    rl_loss_req_clear(&qg);
    ck_assert(!qg.has_prox && qg.prox.a == NULL);
    rpc_value_clear(&v);
    v = rpc_list(4);
    ck_assert_int_eq(rl_loss_req_unpack(&v, 3, 2, false, true, &qg), -1);
    ck_assert_str_eq(rl_last_error(), "loss: expected (epoch, minibatch, weight, policy output, prox output or nil)");
    rpc_value_clear(&v);
    rl_policy_out_clear(&q.out);
    rl_policy_out_clear(&q.prox);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rl_messages");
    TCase *tc = tcase_create("messages");
    tcase_add_test(tc, test_messages_round_trip_and_refusals);
    tcase_add_test(tc, test_messages_wire_pinned);
    tcase_add_test(tc, test_messages_texts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
