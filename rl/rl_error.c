/* The rl module's per-thread last-error text (common/error.h's one helper). */
#include <stdarg.h>

#include "common/error.h"
#include "rl/rl.h"

TRIB_ERROR_MODULE(rl)
