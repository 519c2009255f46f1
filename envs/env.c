/* The envs module's thread-local last error, shared by every file of envs/,
 * and the spec checks (env_spec_check). The built-ins are builtins.c's. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "envs/builtin.h"

TRIB_ERROR_MODULE(env)

static int check_box(const struct env_space *sp, const char *what)
{
    if (sp->dim <= 0) {
        env_set_error("%s space has zero size (dim = %d)", what, sp->dim);
        return -1;
    }
    if (!sp->low || !sp->high) {
        env_set_error("%s space has no low/high bounds", what);
        return -1;
    }
    for (int k = 0; k < sp->dim; k++)
        if (!(sp->low[k] <= sp->high[k])) {
            env_set_error("%s space: low[%d] = %g is not <= high[%d] = %g", what, k, sp->low[k],
                          k, sp->high[k]);
            return -1;
        }
    return 0;
}

/* The fields of ABI 2: all optional, but those that go together must. */
static int check_abi2(const struct env_spec *spec)
{
    if (spec->abi_version == 0) {   /* ABI 1: nothing below may be set */
        if (spec->create || spec->save || spec->load || spec->info_count || spec->unload) {
            env_set_error("abi_version is 0 but ABI 2 fields are set (set abi_version = "
                          "ENV_ABI_VERSION, %d)", ENV_ABI_VERSION);
            return -1;
        }
        return 0;
    }
    if (spec->abi_version != ENV_ABI_VERSION) {
        env_set_error("built for env ABI %d; this Tributary loads ABI 1 and %d", spec->abi_version,
                      ENV_ABI_VERSION);
        return -1;
    }
    if ((spec->save != NULL) != (spec->load != NULL)) {
        env_set_error("save and load go together (it has %s only)", spec->save ? "save" : "load");
        return -1;
    }
    if (spec->save && spec->saved_size == 0) {
        env_set_error("saved_size is 0 but save is set");
        return -1;
    }
    if (spec->save && spec->saved_size > ENV_SAVED_MAX) {
        env_set_error("saved_size is %zu bytes (at most %zu per env)", spec->saved_size, ENV_SAVED_MAX);
        return -1;
    }
    if (spec->create && !spec->save) {
        env_set_error("create is set without save and load: a state block that holds what "
                      "create made cannot be saved as raw bytes");
        return -1;
    }
    if (spec->destroy && !spec->create) {
        env_set_error("destroy is set without create");
        return -1;
    }
    if (spec->info_count < 0 || spec->info_count > ENV_INFO_MAX) {
        env_set_error("info_count is %d (0..%d)", spec->info_count, ENV_INFO_MAX);
        return -1;
    }
    if (spec->info_count > 0) {
        if (!spec->info || !spec->info_names) {
            env_set_error("info_count is %d but info%s is NULL", spec->info_count,
                          spec->info ? "_names" : "");
            return -1;
        }
        for (int k = 0; k < spec->info_count; k++)
            if (!spec->info_names[k] || !*spec->info_names[k]) {
                env_set_error("info_names[%d] is empty", k);
                return -1;
            }
    }
    return 0;
}

int env_spec_check(const struct env_spec *spec)
{
    if (!spec) {
        env_set_error("spec is NULL");
        return -1;
    }
    if (!spec->id || !*spec->id) {
        env_set_error("id is empty");
        return -1;
    }
    if (spec->state_size == 0) {
        env_set_error("state_size is 0");
        return -1;
    }
    if (spec->obs.kind != SPACE_BOX) {
        env_set_error("observation space must be a box (a float32 vector)");
        return -1;
    }
    if (check_box(&spec->obs, "observation") < 0)
        return -1;
    if (spec->act.kind == SPACE_DISCRETE) {
        if (spec->act.n <= 0) {
            env_set_error("action space is discrete with n = %d (need n > 0)", spec->act.n);
            return -1;
        }
    } else if (spec->act.kind == SPACE_BOX) {
        if (check_box(&spec->act, "action") < 0)
            return -1;
    } else {
        env_set_error("action space has unknown kind %d", (int)spec->act.kind);
        return -1;
    }
    if (!spec->reset) {
        env_set_error("reset function is NULL");
        return -1;
    }
    if (!spec->step) {
        env_set_error("step function is NULL");
        return -1;
    }
    if (spec->max_episode_steps < 0) {
        env_set_error("max_episode_steps is negative (%d)", spec->max_episode_steps);
        return -1;
    }
    return check_abi2(spec);
}
