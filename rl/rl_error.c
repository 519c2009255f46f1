/* The rl module's per-thread last-error text. */
#include <stdarg.h>
#include <stdio.h>

#include "common/error.h"
#include "rl/rl.h"

static _Thread_local struct trib_error last_error;

const char *rl_last_error(void) { return trib_error_get(&last_error); }

int rl_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    trib_error_vset(&last_error, fmt, ap);
    va_end(ap);
    return -1;
}
