/* The runfiles folder's per-thread last-error text (runfiles.h). */
#include "runfiles/runfiles.h"

#include <stdarg.h>

#include "common/error.h"

TRIB_ERROR_MODULE(runfiles)
