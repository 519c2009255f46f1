/* common/freelist.h: blocks come back zeroed (trib_fl_get) and aligned,
 * the cache keeps at most `max`, drain frees them all (ASan's leak check
 * sees a block lost), and under a producer/consumer pipeline of real
 * threads no block is ever held by two owners at once. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/freelist.h"
#include "kit.h"

START_TEST(test_zeroed_and_reused)
{
    static struct trib_freelist fl = TRIB_FREELIST_INIT(96, 0, 8);
    unsigned char *a = trib_fl_get(&fl);
    for (int i = 0; i < 96; i++) ck_assert_int_eq(a[i], 0);
    memset(a, 0xab, 96);
    trib_fl_put(&fl, a);
    ck_assert_int_eq(atomic_load(&fl.n), 1);
    unsigned char *b = trib_fl_get(&fl);
    ck_assert_ptr_eq(a, b);                     /* the cached block, */
    for (int i = 0; i < 96; i++) ck_assert_int_eq(b[i], 0);   /* zeroed again */
    ck_assert_int_eq(atomic_load(&fl.n), 0);
    trib_fl_put(&fl, b);
    trib_fl_put(&fl, NULL);                     /* ignored */
    ck_assert_int_eq(atomic_load(&fl.n), 1);
    trib_fl_drain(&fl);
    ck_assert_int_eq(atomic_load(&fl.n), 0);
}
END_TEST

START_TEST(test_bounded_and_aligned)
{
    static struct trib_freelist fl = TRIB_FREELIST_INIT(192, 64, 4);
    void *p[10];
    for (int i = 0; i < 10; i++) {
        p[i] = trib_fl_get_raw(&fl);
        ck_assert_ptr_nonnull(p[i]);
        ck_assert_uint_eq((uintptr_t)p[i] % 64, 0);
    }
    for (int i = 0; i < 10; i++) trib_fl_put(&fl, p[i]);
    ck_assert_int_eq(atomic_load(&fl.n), 4);    /* six went back to free() */
    /* the four kept ones come out again, then fresh ones */
    void *q[6];
    int kept = 0;
    for (int i = 0; i < 6; i++) {
        q[i] = trib_fl_get_raw(&fl);
        for (int j = 0; j < 4; j++) kept += q[i] == p[j];
        ck_assert_uint_eq((uintptr_t)q[i] % 64, 0);
    }
    ck_assert_int_eq(kept, 4);
    ck_assert_int_eq(atomic_load(&fl.n), 0);
    for (int i = 0; i < 6; i++) trib_fl_put(&fl, q[i]);
    trib_fl_drain(&fl);
}
END_TEST

/* A pipeline: the producer gets blocks, stamps them with its serial and
 * hands them over a ring; the consumer checks the stamp is whole (nobody
 * else wrote the block meanwhile) and puts them back. Two producers share
 * the getter side, so the lock and the exchange of returned blocks both
 * run against concurrent puts. */
#define RING 256
#define PER_PRODUCER 200000
#define BLOCK 64

struct ring {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    void *slot[RING];
    int head, tail, n, done;
};

static struct trib_freelist pipe_fl = TRIB_FREELIST_INIT(BLOCK, 0, 1024);
static struct ring ring = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
static atomic_int torn;

static void *producer(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    for (uint64_t i = 0; i < PER_PRODUCER; i++) {
        uint64_t *b = trib_fl_get_raw(&pipe_fl);
        for (int w = 0; w < BLOCK / 8; w++) b[w] = id << 32 | i;
        pthread_mutex_lock(&ring.mu);
        while (ring.n == RING) pthread_cond_wait(&ring.cv, &ring.mu);
        ring.slot[ring.tail] = b;
        ring.tail = (ring.tail + 1) % RING;
        ring.n++;
        pthread_cond_broadcast(&ring.cv);
        pthread_mutex_unlock(&ring.mu);
    }
    pthread_mutex_lock(&ring.mu);
    ring.done++;
    pthread_cond_broadcast(&ring.cv);
    pthread_mutex_unlock(&ring.mu);
    return NULL;
}

static void *consumer(void *arg)
{
    long *count = arg;
    for (;;) {
        pthread_mutex_lock(&ring.mu);
        while (ring.n == 0 && ring.done < 2) pthread_cond_wait(&ring.cv, &ring.mu);
        if (ring.n == 0) {
            pthread_mutex_unlock(&ring.mu);
            return NULL;
        }
        uint64_t *b = ring.slot[ring.head];
        ring.head = (ring.head + 1) % RING;
        ring.n--;
        pthread_cond_broadcast(&ring.cv);
        pthread_mutex_unlock(&ring.mu);
        for (int w = 1; w < BLOCK / 8; w++)
            if (b[w] != b[0]) atomic_fetch_add(&torn, 1);
        memset(b, 0xee, BLOCK);                 /* a reuse that skipped us would show */
        trib_fl_put(&pipe_fl, b);
        (*count)++;
    }
}

START_TEST(test_pipeline_threads)
{
    pthread_t p1, p2, c;
    long consumed = 0;
    ck_assert_int_eq(pthread_create(&c, NULL, consumer, &consumed), 0);
    ck_assert_int_eq(pthread_create(&p1, NULL, producer, (void *)1), 0);
    ck_assert_int_eq(pthread_create(&p2, NULL, producer, (void *)2), 0);
    pthread_join(p1, NULL);
    pthread_join(p2, NULL);
    pthread_join(c, NULL);
    ck_assert_int_eq(consumed, 2 * PER_PRODUCER);
    ck_assert_int_eq(atomic_load(&torn), 0);
    ck_assert_int_le(atomic_load(&pipe_fl.n), 1024);
    trib_fl_drain(&pipe_fl);
    ck_assert_int_eq(atomic_load(&pipe_fl.n), 0);
}
END_TEST

KIT_MAIN("freelist",
         { "freelist", 120, .tests = { test_zeroed_and_reused, test_bounded_and_aligned, test_pipeline_threads } })
