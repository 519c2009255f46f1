/* The rl module's per-thread last-error text. */
#include <stdarg.h>
#include <stdio.h>

#include "rl/rl.h"

static _Thread_local char last_error[512];

const char *rl_last_error(void) { return last_error; }

int rl_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}
