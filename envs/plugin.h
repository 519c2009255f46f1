/* Plug-in envs: a user's shared object exporting
 *     const struct env_spec *tributary_env(void);
 * is opened with dlopen, its spec validated, and kept loaded until closed. */
#ifndef TRIB_ENVS_PLUGIN_H
#define TRIB_ENVS_PLUGIN_H

#include "envs/env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The symbol every plug-in exports. */
#define ENV_PLUGIN_SYMBOL "tributary_env"
typedef const struct env_spec *(*env_plugin_entry_fn)(void);

struct env_plugin;

/* Load the plug-in at path (a path without '/' is taken relative to the
 * current directory, not searched for). Returns NULL with env_last_error()
 * saying "plugin PATH: ..." when the file cannot be loaded, lacks the
 * symbol, returns NULL, or its spec fails env_spec_check. Not thread-safe
 * against concurrent loads of plug-ins that run constructors. */
struct env_plugin *env_plugin_open(const char *path);

/* The plug-in's validated spec; valid until env_plugin_close. */
const struct env_spec *env_plugin_spec(const struct env_plugin *p);

/* Unload (accepts NULL). Every vec_env using the spec must be freed first. */
void env_plugin_close(struct env_plugin *p);

/* A built-in id, or a plug-in path when `name` contains '/' or ends in
 * ".so". On a plug-in *plugin receives the handle to close later (NULL for
 * a built-in). Returns NULL with env_last_error() set. */
const struct env_spec *env_open(const char *name, struct env_plugin **plugin);

#ifdef __cplusplus
}
#endif
#endif
