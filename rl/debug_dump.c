/* TRIB_DEBUG_DUMP files (see debug_dump.h). */
#include "rl/debug_dump.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl/rl.h"

const char *rl_debug_dump_dir(void)
{
    const char *d = getenv("TRIB_DEBUG_DUMP");
    return d && *d ? d : NULL;
}

int rl_debug_dump(const char *dir, const char *name, int n, const float *const *arrays, const int64_t *counts)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return rl_set_error("debug dump %s: %s", path, strerror(errno));
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        ok = fwrite(&counts[i], sizeof counts[i], 1, f) == 1 &&
             (counts[i] == 0 || fwrite(arrays[i], sizeof(float), (size_t)counts[i], f) == (size_t)counts[i]);
    }
    if (fclose(f) != 0) ok = false;
    return ok ? 0 : rl_set_error("debug dump %s: write failed", path);
}
