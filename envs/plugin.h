/* Plug-in envs: a user's shared object exporting either entry point
 *     const struct env_spec *tributary_env_open(const struct env_args *args,
 *                                               char *err, size_t err_size);
 *     const struct env_spec *tributary_env(void);          (ABI 1, no arguments)
 * is opened with dlopen, its spec validated, and kept loaded until closed.
 * tributary_env_open is the load, once per open: it reads its arguments
 * (`--env-arg key=value`), loads what it needs (a model file), and returns a
 * spec of ABI 2 (abi_version = ENV_ABI_VERSION), which it may have filled at
 * load time (sizes and bounds from the model), or NULL with a message in err
 * ("model /x/hopper.xml: XML Error: ..."), shown to the user. A spec of
 * ABI 2 must come from tributary_env_open: of what tributary_env returns,
 * only the fields of ABI 1 are read. */
#ifndef TRIB_ENVS_PLUGIN_H
#define TRIB_ENVS_PLUGIN_H

#include "envs/env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The entry points, the first one found is used. */
#define ENV_PLUGIN_OPEN_SYMBOL "tributary_env_open"
#define ENV_PLUGIN_SYMBOL "tributary_env"
typedef const struct env_spec *(*env_plugin_open_fn)(const struct env_args *args, char *err,
                                                     size_t err_size);
typedef const struct env_spec *(*env_plugin_entry_fn)(void);

struct env_plugin;

/* Load the plug-in at path (a path without '/' is taken relative to the
 * current directory, not searched for) with its arguments (NULL: none).
 * Returns NULL with env_last_error() saying "plugin PATH: ..." when the file
 * cannot be loaded, lacks both symbols, its entry point fails (with the
 * plug-in's own message), its spec is of another ABI ("built for env ABI 3;
 * this Tributary loads ABI 1 and 2") or fails env_spec_check, or when
 * arguments are given to a plug-in of ABI 1. Not thread-safe against
 * concurrent loads of plug-ins that run constructors. */
struct env_plugin *env_plugin_open_args(const char *path, const struct env_args *args);
/* env_plugin_open_args(path, NULL). */
struct env_plugin *env_plugin_open(const char *path);

/* The plug-in's validated spec; valid until env_plugin_close. */
const struct env_spec *env_plugin_spec(const struct env_plugin *p);

/* Unload (accepts NULL): the spec's unload, then dlclose. Every vec_env
 * using the spec must be freed first. */
void env_plugin_close(struct env_plugin *p);

/* A built-in id, or a plug-in path when `name` contains '/' or ends in
 * ".so". On a plug-in *plugin receives the handle to close later (NULL for
 * a built-in). Returns NULL with env_last_error() set. */
const struct env_spec *env_open(const char *name, struct env_plugin **plugin);

/* env_open with the env's own arguments: a plug-in gets them at load; a
 * built-in takes none, and refuses any ("CartPole-v1 takes no --env-arg
 * (got 'foo')"). */
const struct env_spec *env_open_args(const char *name, const struct env_args *args,
                                     struct env_plugin **plugin);

#ifdef __cplusplus
}
#endif
#endif
