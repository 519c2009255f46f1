/* A bounded free list of fixed-size blocks shared by threads, so that
 * steady-state messages, requests and futures reuse memory instead of
 * calling malloc (docs/conventions.md "Memory and hot paths"). */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rpc/base.h"

void *rpc_fl_get(struct rpc_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *p = fl->head;
    if (p) {
        fl->head = *(void **)p;
        fl->n--;
    }
    pthread_mutex_unlock(&fl->mu);
    if (!p) p = trib_xmalloc(fl->size);
    memset(p, 0, fl->size);
    return p;
}

void rpc_fl_put(struct rpc_freelist *fl, void *p)
{
    pthread_mutex_lock(&fl->mu);
    if (fl->n < RPC_FREELIST_MAX) {
        *(void **)p = fl->head;
        fl->head = p;
        fl->n++;
        p = NULL;
    }
    pthread_mutex_unlock(&fl->mu);
    free(p);
}

void rpc_fl_drain(struct rpc_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *p = fl->head;
    fl->head = NULL;
    fl->n = 0;
    pthread_mutex_unlock(&fl->mu);
    while (p) {
        void *next = *(void **)p;
        free(p);
        p = next;
    }
}
