/* The RPC layer's error text: one per thread, set by every function that
 * fails with -1/NULL (docs/conventions.md "Errors"). The bottom of the layer:
 * it calls nothing in rpc/. */
#include <stdarg.h>

#include "common/error.h"
#include "rpc/rpc.h"

/* Owned here: this thread's last error. */
static _Thread_local struct trib_error last_error;

const char *rpc_last_error(void) { return trib_error_get(&last_error); }

int rpc_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    trib_error_vset(&last_error, fmt, ap);
    va_end(ap);
    return -1;
}
