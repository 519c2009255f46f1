/* common/watchdog.h on a real thread: no limit is no watchdog; a call
 * armed past the limit makes it fire once, with the seconds counted from
 * the last arm (a disarmed call is forgotten). */
#include <check.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/watchdog.h"
#include "kit.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int fired;
static double fired_s;
static void *fired_user;

static void fire(void *user, double seconds)
{
    pthread_mutex_lock(&mu);
    fired++;
    fired_s = seconds;
    fired_user = user;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
}

/* Waits (at most 30 s) for the watchdog to fire; its seconds. */
static double wait_fired(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    pthread_mutex_lock(&mu);
    while (!fired && pthread_cond_timedwait(&cv, &mu, &until) == 0) {}
    int n = fired;
    double s = fired_s;
    pthread_mutex_unlock(&mu);
    ck_assert_msg(n == 1, "the watchdog did not fire within 30 s");
    ck_assert_ptr_eq(fired_user, &fired);
    return s;
}

START_TEST(test_no_limit)
{
    ck_assert_ptr_null(watchdog_new(0, fire, &fired));
    ck_assert_ptr_null(watchdog_new(-1, fire, &fired));
    watchdog_arm(NULL);
    watchdog_disarm(NULL);
    watchdog_free(NULL);
}
END_TEST

START_TEST(test_fires_past_the_limit)
{
    struct watchdog *w = watchdog_new(0.05, fire, &fired);
    ck_assert_ptr_nonnull(w);
    double t0 = trib_now_s();
    watchdog_arm(w);
    double s = wait_fired();
    ck_assert_msg(s > 0.05 && s <= trib_now_s() - t0, "fired after %g s", s);
    watchdog_free(w);
    ck_assert_int_eq(fired, 1);
}
END_TEST

/* A call disarmed in time is forgotten: armed again two seconds later (40
 * limits), the watchdog counts from then, not from the first arm. */
START_TEST(test_disarm_forgets)
{
    struct watchdog *w = watchdog_new(0.05, fire, &fired);
    watchdog_arm(w);
    watchdog_disarm(w);
    struct timespec gap = { 2, 0 };
    nanosleep(&gap, NULL);
    pthread_mutex_lock(&mu);
    ck_assert_int_eq(fired, 0);
    pthread_mutex_unlock(&mu);
    watchdog_arm(w);
    double s = wait_fired();
    ck_assert_msg(s > 0.05 && s < 2, "fired after %g s: counted from the first arm", s);
    watchdog_free(w);
}
END_TEST

KIT_MAIN("watchdog",
         { "watchdog", 0, .tests = { test_no_limit, test_fires_past_the_limit, test_disarm_forgets } })
