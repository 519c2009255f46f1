/* A bounded free list of fixed-size blocks shared by threads, so that a
 * steady state (messages, requests, futures, small tensors) reuses memory
 * instead of calling malloc (docs/conventions.md "Memory and hot paths").
 *
 * Made for one thread that frees what another allocated, the shape of a
 * pipeline (a caller builds a message, the I/O thread frees it once sent;
 * the I/O thread builds a reply's tensor, the caller frees it): puts push
 * onto `returned` with a compare-and-swap, never a lock; getters, under
 * `mu`, pop from `head` and, when it is empty, take the whole returned
 * stack at once with an exchange (so no ABA). A thread that only puts
 * never waits for one that only gets, and glibc's arena lock, which a
 * cross-thread free() takes, is out of the path.
 *
 * Each list is owned by the file that defines it. */
#ifndef TRIB_COMMON_FREELIST_H
#define TRIB_COMMON_FREELIST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

struct trib_freelist {
    pthread_mutex_t mu;
    void *head;                     /* under mu */
    _Atomic(void *) returned;       /* any thread: pushed by trib_fl_put */
    atomic_int n;                   /* blocks in both stacks (bounds the cache; approximate) */
    size_t size;                    /* bytes per block */
    size_t align;                   /* 0: malloc's; else a power of two dividing size */
    int max;                        /* blocks kept at most; more are freed */
};
#define TRIB_FREELIST_INIT(sz, al, mx) { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, (sz), (al), (mx) }

/* A block of fl->size bytes, zeroed; aborts when memory is exhausted. */
void *trib_fl_get(struct trib_freelist *fl);
/* The same, its contents undefined; NULL when memory is exhausted. */
void *trib_fl_get_raw(struct trib_freelist *fl);
/* Gives p (from this list, or NULL) back. Any thread. */
void trib_fl_put(struct trib_freelist *fl, void *p);
/* Frees every cached block (at shutdown, with no get or put running). */
void trib_fl_drain(struct trib_freelist *fl);

#endif
