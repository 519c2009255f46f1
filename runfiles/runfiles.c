/* The runfiles folder's per-thread last-error text (runfiles.h). */
#include "runfiles/runfiles.h"

#include <stdarg.h>

#include "common/error.h"

static _Thread_local struct trib_error last_error;

const char *runfiles_last_error(void) { return trib_error_get(&last_error); }

int runfiles_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    trib_error_vset(&last_error, fmt, ap);
    va_end(ap);
    return -1;
}
