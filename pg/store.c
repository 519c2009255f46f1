/* The rendezvous key-value store of process groups (Gloo's
 * rendezvous::Store, the NCCL unique id), served by each group's rank 0
 * over RPC: pg._store_set(group, key, bytes) and pg._store_get(group, key)
 * -> bytes or nil. Members poll get until a key appears. This file owns the
 * keys held here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/clock.h"
#include "pg/pg_internal.h"
#include "rpc/rpc.h"

struct entry {
    struct entry *next;
    char *group, *key;
    void *data;
    size_t n;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries;   /* under mu */

static struct entry *find_locked(const char *group, const char *key)
{
    for (struct entry *e = entries; e; e = e->next)
        if (!strcmp(e->group, group) && !strcmp(e->key, key)) return e;
    return NULL;
}

static bool str_arg(const struct rpc_value *args, size_t i)
{
    return args->list.len > i && args->list.items[i].kind == RPC_STR;
}

static int fn_set(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 3 || !str_arg(args, 0) || !str_arg(args, 1) ||
        args->list.items[2].kind != RPC_BYTES)
        return rpc_request_fail(req, "expected (group, key, bytes)");
    const struct rpc_value *v = &args->list.items[2];
    pthread_mutex_lock(&mu);
    struct entry *e = find_locked(args->list.items[0].str.ptr, args->list.items[1].str.ptr);
    if (!e) {
        e = trib_xcalloc(1, sizeof *e);
        e->group = strdup(args->list.items[0].str.ptr);
        e->key = strdup(args->list.items[1].str.ptr);
        CHECK(e->group && e->key);
        e->next = entries;
        entries = e;
    }
    free(e->data);
    e->data = trib_xmalloc(v->str.len + 1);
    memcpy(e->data, v->str.ptr, v->str.len);
    e->n = v->str.len;
    pthread_mutex_unlock(&mu);
    *result = rpc_nil();
    return 0;
}

static int fn_get(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *result, void *user)
{
    if (args->kind != RPC_LIST || args->list.len != 2 || !str_arg(args, 0) || !str_arg(args, 1))
        return rpc_request_fail(req, "expected (group, key)");
    pthread_mutex_lock(&mu);
    struct entry *e = find_locked(args->list.items[0].str.ptr, args->list.items[1].str.ptr);
    *result = e ? rpc_bytes(e->data, e->n) : rpc_nil();
    pthread_mutex_unlock(&mu);
    return 0;
}

void pg_store_register(void)
{
    rpc_register_ex("pg._store_set", fn_set, NULL, RPC_FN_INLINE);
    rpc_register_ex("pg._store_get", fn_get, NULL, RPC_FN_INLINE);
}

void pg_store_drop(const char *group)
{
    pthread_mutex_lock(&mu);
    for (struct entry **pp = &entries; *pp;) {
        struct entry *e = *pp;
        if (strcmp(e->group, group)) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        free(e->group);
        free(e->key);
        free(e->data);
        free(e);
    }
    pthread_mutex_unlock(&mu);
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
        struct timespec ts = {0, (long)sleep_ms * 1000000L};
        nanosleep(&ts, NULL);
        if (sleep_ms < 20) sleep_ms *= 2;
    }
}
