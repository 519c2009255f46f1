/* The notice thread of a wait (contract in notice.h). */
#include "common/notice.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/clock.h"

struct notice {
    pthread_t thread;
    char prefix[64], what[512];
    double t0, first_s;
    bool (*done)(void *);
    void *done_arg;
    atomic_bool stop;
};

static void *notice_thread(void *arg)
{
    struct notice *n = arg;
    double next = n->first_s;
    while (!atomic_load(&n->stop)) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        if (n->done && n->done(n->done_arg)) break;
        double t = trib_now_s() - n->t0;
        if (t >= next && !atomic_load(&n->stop)) {
            fprintf(stderr, "%s: waiting for %s (%.0f s so far)\n", n->prefix, n->what, t);
            next += NOTICE_EVERY_S;
        }
    }
    return NULL;
}

struct notice *notice_start(const char *prefix, const char *what, double first_s, bool (*done)(void *),
                             void *done_arg)
{
    struct notice *n = trib_xcalloc(1, sizeof *n);
    snprintf(n->prefix, sizeof n->prefix, "%s", prefix);
    snprintf(n->what, sizeof n->what, "%s", what);
    n->t0 = trib_now_s();
    n->first_s = first_s;
    n->done = done;
    n->done_arg = done_arg;
    CHECK(pthread_create(&n->thread, NULL, notice_thread, n) == 0);
    return n;
}

void notice_stop(struct notice *n)
{
    if (!n) return;
    atomic_store(&n->stop, true);
    pthread_join(n->thread, NULL);
    free(n);
}
