/* The watchdog thread (see watchdog.h): it wakes every tenth of the limit
 * (at most every 100 ms) and compares the armed call's start with now. */
#include "common/watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "common/check.h"

struct watchdog {
    double limit_s;
    void (*fire)(void *user, double seconds);
    void *user;
    _Atomic int64_t armed_ns;       /* CLOCK_MONOTONIC start of the armed call; 0: none */
    pthread_t thread;
    pthread_mutex_t mu;             /* guards stop, for the condition variable */
    pthread_cond_t cv;
    bool stop;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *watch(void *arg)
{
    struct watchdog *w = arg;
    double tick = w->limit_s / 10 < 0.1 ? w->limit_s / 10 : 0.1;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t until = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + (int64_t)(tick * 1e9);
        ts.tv_sec = until / 1000000000;
        ts.tv_nsec = until % 1000000000;
        int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        if (w->stop) break;
        if (rc != 0 && rc != ETIMEDOUT) continue;
        int64_t t = atomic_load(&w->armed_ns);
        double s = t ? (double)(now_ns() - t) / 1e9 : 0;
        if (t && s > w->limit_s) {
            pthread_mutex_unlock(&w->mu);
            w->fire(w->user, s);
            return NULL;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

struct watchdog *watchdog_new(double limit_s, void (*fire)(void *user, double seconds), void *user)
{
    if (!(limit_s > 0)) return NULL;
    struct watchdog *w = trib_xcalloc(1, sizeof *w);
    w->limit_s = limit_s;
    w->fire = fire;
    w->user = user;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    CHECK(pthread_create(&w->thread, NULL, watch, w) == 0);
    return w;
}

void watchdog_arm(struct watchdog *w)
{
    if (w) atomic_store_explicit(&w->armed_ns, now_ns(), memory_order_relaxed);
}

void watchdog_disarm(struct watchdog *w)
{
    if (w) atomic_store_explicit(&w->armed_ns, 0, memory_order_relaxed);
}

void watchdog_free(struct watchdog *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
