/* The shared free list of common/freelist.h. */
#include "common/freelist.h"

#include <stdlib.h>
#include <string.h>

#include "common/check.h"

void *trib_fl_get_raw(struct trib_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *p = fl->head;
    if (!p) p = atomic_exchange(&fl->returned, NULL);
    if (p) {
        fl->head = *(void **)p;
        atomic_fetch_sub(&fl->n, 1);
    }
    pthread_mutex_unlock(&fl->mu);
    if (!p) p = fl->align ? aligned_alloc(fl->align, fl->size) : malloc(fl->size);
    return p;
}

void *trib_fl_get(struct trib_freelist *fl)
{
    void *p = trib_fl_get_raw(fl);
    CHECK_ALLOC(p);
    memset(p, 0, fl->size);
    return p;
}

void trib_fl_put(struct trib_freelist *fl, void *p)
{
    if (!p) return;
    if (atomic_fetch_add(&fl->n, 1) >= fl->max) {
        atomic_fetch_sub(&fl->n, 1);
        free(p);
        return;
    }
    void *old = atomic_load(&fl->returned);
    do *(void **)p = old;
    while (!atomic_compare_exchange_weak(&fl->returned, &old, p));
}

static void free_chain(void *p)
{
    while (p) {
        void *next = *(void **)p;
        free(p);
        p = next;
    }
}

void trib_fl_drain(struct trib_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *p = fl->head;
    fl->head = NULL;
    pthread_mutex_unlock(&fl->mu);
    free_chain(p);
    free_chain(atomic_exchange(&fl->returned, NULL));
    atomic_store(&fl->n, 0);
}
