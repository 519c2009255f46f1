/* The one monotonic clock, for timeouts, rates and progress, and the
 * absolute deadline pthread_cond_timedwait wants. Header only, below every
 * layer, like check.h. */
#ifndef TRIB_COMMON_CLOCK_H
#define TRIB_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC (an arbitrary origin: differences only). */
static inline int64_t trib_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t trib_now_us(void) { return trib_now_ns() / 1000; }
static inline int64_t trib_now_ms(void) { return trib_now_ns() / 1000000; }
static inline double trib_now_s(void) { return (double)trib_now_ns() * 1e-9; }

/* The CLOCK_REALTIME time ms milliseconds from now (a negative ms counts as
 * 0), for pthread_cond_timedwait on a condition variable with the default
 * clock. */
static inline struct timespec trib_deadline_ts(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (ms > 0 ? ms : 0) % 1000 * 1000000;
    ts.tv_sec += (ms > 0 ? ms : 0) / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    return ts;
}

#endif
