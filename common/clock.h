/* The monotonic clock in seconds, for timeouts, rates and progress. Header
 * only, below every layer, like check.h. */
#ifndef TRIB_COMMON_CLOCK_H
#define TRIB_COMMON_CLOCK_H

#include <time.h>

static inline double trib_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
