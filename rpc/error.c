/* The RPC layer's error text: one per thread, set by every function that
 * fails with -1/NULL (docs/conventions.md "Errors"; common/error.h's one
 * helper). The bottom of the layer: it calls nothing in rpc/. */
#include <stdarg.h>

#include "common/error.h"
#include "rpc/rpc.h"

TRIB_ERROR_MODULE(rpc)
