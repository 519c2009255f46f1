/* The rendezvous key-value store of process groups (Gloo's
 * rendezvous::Store, the NCCL unique id), served by each group's rank 0
 * over RPC: pg._store_join(group, [members]) -> nil, or 1 while the group
 * is not hosted here yet; pg._store_set(group, key, bytes);
 * pg._store_get(group, key) -> bytes or nil. Members poll join and get.
 * Every call is checked against the caller the RPC layer identified, and
 * against the key rules of pg_internal.h. This file owns the groups hosted
 * here and their keys. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/clock.h"
#include "pg/pg_internal.h"
#include "rpc/rpc.h"

#define NAME_CAP 64   /* as process_group.c's member names */

struct entry {
    struct entry *next;
    char *key;
    void *data;
    size_t n;
};

struct hosted {
    struct hosted *next;
    char *name;
    int n;
    char (*members)[NAME_CAP];
    struct entry *keys;
    int n_nccl;                 /* keys under a rule with max_keys */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hosted *groups;   /* under mu */

static struct hosted *find_group_locked(const char *name)
{
    for (struct hosted *h = groups; h; h = h->next)
        if (!strcmp(h->name, name)) return h;
    return NULL;
}

static struct entry *find_key_locked(const struct hosted *h, const char *key)
{
    for (struct entry *e = h->keys; e; e = e->next)
        if (!strcmp(e->key, key)) return e;
    return NULL;
}

static int member_rank(const struct hosted *h, const char *worker)
{
    for (int r = 0; r < h->n; r++)
        if (!strcmp(h->members[r], worker)) return r;
    return -1;
}

/* ---- the key rules: which rank writes a key, and how many bytes it holds ---- */

/* The decimal number after prefix in key (all of the rest), or -1. */
static long key_number(const char *key, const char *prefix)
{
    size_t p = strlen(prefix);
    if (strncmp(key, prefix, p)) return -1;
    const char *d = key + p;
    size_t len = strlen(d);
    if (len == 0 || len > 10 || (len > 1 && d[0] == '0') || strspn(d, "0123456789") != len) return -1;
    return strtol(d, NULL, 10);
}

struct key_rule {
    const char *prefix;                 /* the key is prefix + a decimal number */
    int (*owner)(const struct hosted *h, long number);   /* the rank that writes it, or -1: no rank */
    size_t (*bound)(const struct hosted *h);             /* bytes a value may hold */
    int max_keys;                       /* 0: one per rank */
};

static int owner_rank(const struct hosted *h, long number) { return number < h->n ? (int)number : -1; }
static int owner_root(const struct hosted *h, long number) { return 0; }
static size_t bound_addresses(const struct hosted *h) { return (size_t)h->n * PG_STORE_ADDR_BYTES; }
static size_t bound_host(const struct hosted *h) { return PG_STORE_HOST_BYTES; }
static size_t bound_nccl_id(const struct hosted *h) { return PG_NCCL_ID_BYTES; }

static const struct key_rule RULES[] = {
    {"", owner_rank, bound_addresses, 0},                     /* Gloo's "<r>": rank r's addresses */
    {"rank_", owner_rank, bound_host, 0},                     /* Gloo's "rank_<r>": rank r's host name */
    {"nccl_id.", owner_root, bound_nccl_id, PG_STORE_NCCL_KEYS},   /* the NCCL unique id of a communicator */
};

/* ---- handlers ---------------------------------------------------------------------- */

/* A string argument of at most max bytes, without a NUL inside. */
static bool str_arg(const struct rpc_value *args, size_t i, size_t max)
{
    if (args->list.len <= i || args->list.items[i].kind != RPC_STR) return false;
    const struct rpc_value *v = &args->list.items[i];
    return v->str.len <= max && strlen(v->str.ptr) == v->str.len;
}

#define GROUP_MAX 47   /* as pg_new's names */
#define KEY_MAX 63

/* The hosted group named by args[0] whose member the caller is (by the
 * worker the RPC layer identified for the connection); NULL after
 * rpc_request_fail. Under mu. */
static struct hosted *member_group_locked(struct rpc_request *req, const struct rpc_value *args, int *rank)
{
    const char *name = args->list.items[0].str.ptr;
    struct hosted *h = find_group_locked(name);
    if (!h) {
        rpc_request_fail(req, "group '%s' is not hosted here", name);
        return NULL;
    }
    struct rpc_worker_info wi;
    int id = rpc_request_caller_id(req);
    if (rpc_get_worker_info_by_id(id, &wi) != 0) {
        rpc_request_fail(req, "an unknown worker (id %d) is not a member of group '%s'", id, name);
        return NULL;
    }
    *rank = member_rank(h, wi.name);
    if (*rank < 0) {
        rpc_request_fail(req, "worker '%s' is not a member of group '%s'", wi.name, name);
        return NULL;
    }
    return h;
}

/* "[w0, w1]" from n names (cut with "..." past cap). */
static void format_list(char *out, size_t cap, int n, const char *(*name)(const void *, int), const void *src)
{
    size_t len = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? ", " : "", name(src, i));
    if (len + 2 < cap) {
        snprintf(out + len, cap - len, "]");
    } else if (cap > 5) {
        snprintf(out + cap - 5, 5, "...]");
    }
}

static const char *hosted_name(const void *src, int i) { return ((const struct hosted *)src)->members[i]; }
static const char *value_name(const void *src, int i)
{
    return ((const struct rpc_value *)src)->list.items[i].str.ptr;
}

/* join(group, [members]): nil once the group is hosted here with the same
 * members and the caller among them; 1 while it is not hosted yet (the
 * caller polls). */
static int fn_join(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 2 || !str_arg(args, 0, GROUP_MAX) ||
        args->list.items[1].kind != RPC_LIST)
        return rpc_request_fail(req, "expected (group, [members])");
    const struct rpc_value *list = &args->list.items[1];
    for (size_t i = 0; i < list->list.len; i++)
        if (!str_arg(list, i, NAME_CAP - 1)) return rpc_request_fail(req, "expected (group, [members])");
    pthread_mutex_lock(&mu);
    int rank, rc = 0;
    *result = rpc_nil();
    if (!find_group_locked(args->list.items[0].str.ptr)) {
        *result = rpc_int(1);
    } else {
        struct hosted *h = member_group_locked(req, args, &rank);
        bool same = h && (size_t)h->n == list->list.len;
        for (int i = 0; same && i < h->n; i++) same = !strcmp(h->members[i], list->list.items[i].str.ptr);
        if (!h) {
            rc = -1;
        } else if (!same) {
            char here[256], theirs[256];
            format_list(here, sizeof here, h->n, hosted_name, h);
            format_list(theirs, sizeof theirs, (int)list->list.len, value_name, list);
            rc = rpc_request_fail(req, "group '%s' lists %s here, the caller %s", h->name, here, theirs);
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* Whether the caller, rank `rank` of h, may write n bytes under key;
 * otherwise fails req. Under mu. */
static bool may_write_locked(struct rpc_request *req, const struct hosted *h, int rank, const char *key, size_t n,
                             const struct key_rule **rule_out)
{
    const struct key_rule *rule = NULL;
    long number = -1;
    for (size_t i = 0; i < sizeof RULES / sizeof *RULES && !rule; i++)
        if ((number = key_number(key, RULES[i].prefix)) >= 0) rule = &RULES[i];
    if (!rule) return rpc_request_fail(req, "group '%s': '%s' is not a rendezvous key", h->name, key), false;
    int owner = rule->owner(h, number);
    if (owner < 0)
        return rpc_request_fail(req, "group '%s': key '%s' names no rank of the group (%d members)", h->name, key,
                                h->n),
               false;
    if (owner != rank)
        return rpc_request_fail(req, "group '%s': key '%s' belongs to rank %d (worker '%s'), not to '%s'", h->name,
                                key, owner, h->members[owner], h->members[rank]),
               false;
    if (n > rule->bound(h))
        return rpc_request_fail(req, "group '%s': key '%s' has %zu bytes, over its bound of %zu", h->name, key, n,
                                rule->bound(h)),
               false;
    if (find_key_locked(h, key)) return rpc_request_fail(req, "group '%s': key '%s' is set already", h->name, key), false;
    if (rule->max_keys && h->n_nccl >= rule->max_keys)
        return rpc_request_fail(req, "group '%s': holds %d '%.*s' keys already, the bound", h->name, rule->max_keys,
                                (int)strlen(rule->prefix) - 1, rule->prefix),
               false;
    *rule_out = rule;
    return true;
}

static int fn_set(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || !str_arg(args, 0, GROUP_MAX) || !str_arg(args, 1, KEY_MAX) ||
        args->list.items[2].kind != RPC_BYTES)
        return rpc_request_fail(req, "expected (group, key, bytes)");
    const char *key = args->list.items[1].str.ptr;
    const struct rpc_value *v = &args->list.items[2];
    pthread_mutex_lock(&mu);
    int rank;
    const struct key_rule *rule = NULL;
    struct hosted *h = member_group_locked(req, args, &rank);
    if (!h || !may_write_locked(req, h, rank, key, v->str.len, &rule)) {
        pthread_mutex_unlock(&mu);
        return -1;
    }
    struct entry *e = trib_xcalloc(1, sizeof *e);
    e->key = strdup(key);
    CHECK(e->key);
    e->data = trib_xmalloc(v->str.len + 1);
    memcpy(e->data, v->str.ptr, v->str.len);
    e->n = v->str.len;
    e->next = h->keys;
    h->keys = e;
    h->n_nccl += rule->max_keys != 0;
    pthread_mutex_unlock(&mu);
    *result = rpc_nil();
    return 0;
}

static int fn_get(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 2 || !str_arg(args, 0, GROUP_MAX) || !str_arg(args, 1, KEY_MAX))
        return rpc_request_fail(req, "expected (group, key)");
    pthread_mutex_lock(&mu);
    int rank;
    struct hosted *h = member_group_locked(req, args, &rank);
    struct entry *e = h ? find_key_locked(h, args->list.items[1].str.ptr) : NULL;
    if (h) *result = e ? rpc_bytes(e->data, e->n) : rpc_nil();
    pthread_mutex_unlock(&mu);
    return h ? 0 : -1;
}

void pg_store_register(void)
{
    rpc_register_ex("pg._store_join", fn_join, NULL, RPC_FN_INLINE);
    rpc_register_ex("pg._store_set", fn_set, NULL, RPC_FN_INLINE);
    rpc_register_ex("pg._store_get", fn_get, NULL, RPC_FN_INLINE);
}

/* ---- hosting ----------------------------------------------------------------------- */

int pg_store_host(const char *group, int n, const char (*workers)[64], char *err, size_t cap)
{
    pthread_mutex_lock(&mu);
    if (find_group_locked(group)) {
        pthread_mutex_unlock(&mu);
        snprintf(err, cap, "a group of that name is alive here already");
        return -1;
    }
    struct hosted *h = trib_xcalloc(1, sizeof *h);
    h->name = strdup(group);
    CHECK(h->name);
    h->n = n;
    h->members = trib_xcalloc((size_t)n, sizeof *h->members);
    for (int i = 0; i < n; i++) snprintf(h->members[i], sizeof h->members[i], "%s", workers[i]);
    h->next = groups;
    groups = h;
    pthread_mutex_unlock(&mu);
    return 0;
}

void pg_store_unhost(const char *group)
{
    pthread_mutex_lock(&mu);
    struct hosted *h = NULL;
    for (struct hosted **pp = &groups; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->name, group)) {
            h = *pp;
            *pp = h->next;
            break;
        }
    pthread_mutex_unlock(&mu);
    if (!h) return;
    for (struct entry *e = h->keys, *next; e; e = next) {
        next = e->next;
        free(e->key);
        free(e->data);
        free(e);
    }
    free(h->members);
    free(h->name);
    free(h);
}

/* ---- the members' side ---------------------------------------------------------------- */

static void nap(int *sleep_ms)
{
    struct timespec ts = {0, (long)*sleep_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (*sleep_ms < 20) *sleep_ms *= 2;
}

int pg_store_join(const char *server, const char *group, int n, const char (*workers)[64], int timeout_ms,
                  char *err, size_t cap)
{
    int64_t deadline = trib_now_ms() + timeout_ms;
    int sleep_ms = 1;
    struct rpc_value args = rpc_list(2);
    args.list.items[0] = rpc_str(group);
    args.list.items[1] = rpc_list((size_t)n);
    for (int i = 0; i < n; i++) args.list.items[1].list.items[i] = rpc_str(workers[i]);
    int rc;
    for (;;) {
        struct rpc_value res = rpc_nil();
        rc = rpc_sync(server, "pg._store_join", &args, &res, timeout_ms);
        bool waiting = rc == 0 && res.kind == RPC_INT;
        rpc_value_clear(&res);
        if (rc != 0) {
            snprintf(err, cap, "%s", rpc_last_error());
            break;
        }
        if (!waiting) break;
        if (trib_now_ms() >= deadline) {
            snprintf(err, cap, "%s did not make group '%s' within %d ms", server, group, timeout_ms);
            rc = -1;
            break;
        }
        nap(&sleep_ms);
    }
    rpc_value_clear(&args);
    return rc;
}

int pg_store_set(const char *server, const char *group, const char *key, const void *data, size_t n, char *err,
                 size_t cap)
{
    struct rpc_value args = rpc_list(3), res = rpc_nil();
    args.list.items[0] = rpc_str(group);
    args.list.items[1] = rpc_str(key);
    args.list.items[2] = rpc_bytes(data, n);
    int rc = rpc_sync(server, "pg._store_set", &args, &res, 0);
    if (rc != 0) snprintf(err, cap, "%s", rpc_last_error());
    rpc_value_clear(&args);
    rpc_value_clear(&res);
    return rc;
}

int pg_store_get(const char *server, const char *group, const char *key, int timeout_ms, void **data, size_t *n,
                 char *err, size_t cap)
{
    int64_t deadline = trib_now_ms() + timeout_ms;
    int sleep_ms = 1;
    for (;;) {
        struct rpc_value args = rpc_list(2), res = rpc_nil();
        args.list.items[0] = rpc_str(group);
        args.list.items[1] = rpc_str(key);
        int rc = rpc_sync(server, "pg._store_get", &args, &res, timeout_ms);
        rpc_value_clear(&args);
        if (rc != 0) {
            snprintf(err, cap, "%s", rpc_last_error());
            return -1;
        }
        if (res.kind == RPC_BYTES) {
            *data = trib_xmalloc(res.str.len + 1);
            memcpy(*data, res.str.ptr, res.str.len);
            *n = res.str.len;
            rpc_value_clear(&res);
            return 0;
        }
        rpc_value_clear(&res);
        if (trib_now_ms() >= deadline) {
            snprintf(err, cap, "key '%s' did not appear on %s within %d ms", key, server, timeout_ms);
            return -1;
        }
        nap(&sleep_ms);
    }
}
