/* The tagged value type of RPC arguments and results (its wire form is
 * wire.c's). RRefs are held and compared through the RRef hooks. */
#include <stdio.h>
#include <string.h>

#include "common/check.h"
#include "rpc/base.h"

struct rref;   /* held by pointer only, through the hooks (rrefs.h defines it) */

/* Owned here: the RRef hooks (set once before any RRef exists, then read-only). */
static struct rpc_rref_hooks rpc_rref_hooks;

const struct rpc_rref_hooks *rref_hooks(void) { return &rpc_rref_hooks; }
void rpc_set_rref_hooks(const struct rpc_rref_hooks *h) { rpc_rref_hooks = h ? *h : (struct rpc_rref_hooks){ 0 }; }

/* ---- values ------------------------------------------------------------- */

char *rpc_dup_bytes(const void *p, size_t n)
{
    char *s = trib_xmalloc(n + 1);
    if (n) memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

struct rpc_value rpc_str(const char *s)
{
    size_t n = strlen(s);
    struct rpc_value v = { .kind = RPC_STR };
    v.str.ptr = rpc_dup_bytes(s, n);
    v.str.len = n;
    return v;
}

struct rpc_value rpc_bytes(const void *p, size_t n)
{
    struct rpc_value v = { .kind = RPC_BYTES };
    v.str.ptr = rpc_dup_bytes(p, n);
    v.str.len = n;
    return v;
}

struct rpc_value rpc_tensor(struct tensor *t)
{
    struct rpc_value v = { .kind = RPC_TENSOR, .tensor = tensor_retain(t) };
    return v;
}

struct rpc_value rpc_rref(struct rref *r)
{
    struct rpc_value v = { .kind = RPC_RREF, .rref = rref_hooks()->retain(r) };
    return v;
}

struct rpc_value rpc_list(size_t n)
{
    struct rpc_value v = { .kind = RPC_LIST };
    v.list.items = trib_xcalloc(n ? n : 1, sizeof(struct rpc_value));
    v.list.len = n;
    return v;
}

struct rpc_value rpc_map(size_t n)
{
    struct rpc_value v = { .kind = RPC_MAP };
    v.map.items = trib_xcalloc(n ? n : 1, sizeof(struct rpc_kv));
    v.map.len = n;
    return v;
}

void rpc_map_set(struct rpc_value *map, size_t i, const char *key, struct rpc_value val)
{
    CHECK(map->kind == RPC_MAP && i < map->map.len);
    free(map->map.items[i].key);
    rpc_value_clear(&map->map.items[i].val);
    map->map.items[i].key = rpc_dup_bytes(key, strlen(key));
    map->map.items[i].val = val;
}

const struct rpc_value *rpc_map_get(const struct rpc_value *v, const char *key)
{
    if (!v || v->kind != RPC_MAP) return NULL;
    for (size_t i = 0; i < v->map.len; i++)
        if (v->map.items[i].key && strcmp(v->map.items[i].key, key) == 0) return &v->map.items[i].val;
    return NULL;
}

void rpc_value_clear(struct rpc_value *v)
{
    if (!v) return;
    switch (v->kind) {
    case RPC_STR: case RPC_BYTES: free(v->str.ptr); break;
    case RPC_TENSOR: tensor_free(v->tensor); break;
    case RPC_RREF: rref_hooks()->release(v->rref); break;
    case RPC_LIST:
        for (size_t i = 0; i < v->list.len; i++) rpc_value_clear(&v->list.items[i]);
        free(v->list.items);
        break;
    case RPC_MAP:
        for (size_t i = 0; i < v->map.len; i++) {
            free(v->map.items[i].key);
            rpc_value_clear(&v->map.items[i].val);
        }
        free(v->map.items);
        break;
    default: break;
    }
    v->kind = RPC_NIL;
}

struct rpc_value rpc_value_copy(const struct rpc_value *v)
{
    struct rpc_value c = *v;
    switch (v->kind) {
    case RPC_STR: case RPC_BYTES: c.str.ptr = rpc_dup_bytes(v->str.ptr, v->str.len); break;
    case RPC_TENSOR: tensor_retain(v->tensor); break;
    case RPC_RREF: rref_hooks()->retain(v->rref); break;
    case RPC_LIST:
        c = rpc_list(v->list.len);
        for (size_t i = 0; i < v->list.len; i++) c.list.items[i] = rpc_value_copy(&v->list.items[i]);
        break;
    case RPC_MAP:
        c = rpc_map(v->map.len);
        for (size_t i = 0; i < v->map.len; i++) {
            c.map.items[i].key = v->map.items[i].key ? rpc_dup_bytes(v->map.items[i].key, strlen(v->map.items[i].key)) : NULL;
            c.map.items[i].val = rpc_value_copy(&v->map.items[i].val);
        }
        break;
    default: break;
    }
    return c;
}

bool rpc_value_equal(const struct rpc_value *a, const struct rpc_value *b)
{
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case RPC_NIL: return true;
    case RPC_BOOL: return a->b == b->b;
    case RPC_INT: return a->i == b->i;
    case RPC_DOUBLE: return memcmp(&a->d, &b->d, sizeof a->d) == 0;
    case RPC_STR: case RPC_BYTES:
        return a->str.len == b->str.len && memcmp(a->str.ptr, b->str.ptr, a->str.len) == 0;
    case RPC_TENSOR:
        return tensor_same_shape(a->tensor, b->tensor) &&
               memcmp(tensor_data(a->tensor), tensor_data(b->tensor), tensor_nbytes(a->tensor)) == 0;
    case RPC_RREF: return rref_hooks()->id(a->rref) == rref_hooks()->id(b->rref);
    case RPC_LIST:
        if (a->list.len != b->list.len) return false;
        for (size_t i = 0; i < a->list.len; i++)
            if (!rpc_value_equal(&a->list.items[i], &b->list.items[i])) return false;
        return true;
    case RPC_MAP:
        if (a->map.len != b->map.len) return false;
        for (size_t i = 0; i < a->map.len; i++) {
            if (strcmp(a->map.items[i].key ? a->map.items[i].key : "",
                       b->map.items[i].key ? b->map.items[i].key : "") != 0) return false;
            if (!rpc_value_equal(&a->map.items[i].val, &b->map.items[i].val)) return false;
        }
        return true;
    }
    return false;
}

const char *rpc_kind_name(enum rpc_kind k)
{
    static const char *names[] = { "nil", "bool", "int", "double", "str", "bytes",
                                   "tensor", "rref", "list", "map" };
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}
