/* Plug-in loader: dlopen a user's .so, find tributary_env, check the spec it
 * returns and say precisely what is wrong when it is not usable. */
#include "envs/plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/builtin.h"

struct env_plugin {
    void *handle;
    const struct env_spec *spec;
};

struct env_plugin *env_plugin_open(const char *path)
{
    if (!path || !*path) {
        env_set_error("plugin: empty path");
        return NULL;
    }
    char local[4096];
    const char *open_path = path;
    if (!strchr(path, '/')) {
        snprintf(local, sizeof local, "./%s", path);
        open_path = local;
    }
    dlerror();
    void *h = dlopen(open_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        env_set_error("plugin %s: cannot load: %s", path, e ? e : "unknown dlopen error");
        return NULL;
    }
    dlerror();
    void *sym = dlsym(h, ENV_PLUGIN_SYMBOL);
    if (!sym) {
        env_set_error("plugin %s: missing symbol " ENV_PLUGIN_SYMBOL, path);
        dlclose(h);
        return NULL;
    }
    env_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);   /* object pointer to function pointer */
    const struct env_spec *spec = entry();
    if (!spec) {
        env_set_error("plugin %s: " ENV_PLUGIN_SYMBOL "() returned NULL", path);
        dlclose(h);
        return NULL;
    }
    if (env_spec_check(spec) < 0) {
        char why[400];
        snprintf(why, sizeof why, "%s", env_last_error());
        env_set_error("plugin %s: %s", path, why);
        dlclose(h);
        return NULL;
    }
    struct env_plugin *p = malloc(sizeof *p);
    if (!p)
        abort();
    p->handle = h;
    p->spec = spec;
    return p;
}

const struct env_spec *env_plugin_spec(const struct env_plugin *p)
{
    return p->spec;
}

void env_plugin_close(struct env_plugin *p)
{
    if (!p)
        return;
    dlclose(p->handle);
    free(p);
}

const struct env_spec *env_open(const char *name, struct env_plugin **plugin)
{
    *plugin = NULL;
    if (!name || !*name) {
        env_set_error("env name is empty");
        return NULL;
    }
    size_t len = strlen(name);
    bool is_path = strchr(name, '/') || (len > 3 && strcmp(name + len - 3, ".so") == 0);
    if (!is_path)
        return env_lookup(name);
    struct env_plugin *p = env_plugin_open(name);
    if (!p)
        return NULL;
    *plugin = p;
    return p->spec;
}
