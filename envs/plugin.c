/* Plug-in loader: dlopen a user's .so, call its entry point (tributary_env_open
 * with the env's arguments, or tributary_env of ABI 1), check the spec it
 * returns and say precisely what is wrong when it is not usable. */
#include "envs/plugin.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envs/builtin.h"

struct env_plugin {
    void *handle;
    const struct env_spec *spec;   /* &abi1 for a plug-in of ABI 1 */
    struct env_spec abi1;          /* its ABI-1 fields, the rest zero */
};

/* Refuse, unload what the entry point loaded, close: NULL. */
static struct env_plugin *fail(void *h, const struct env_spec *loaded, const char *path,
                               const char *why)
{
    char msg[600];
    snprintf(msg, sizeof msg, "%s", why);
    if (loaded && loaded->abi_version == ENV_ABI_VERSION && loaded->unload)
        loaded->unload((struct env_spec *)loaded);
    dlclose(h);
    env_set_error("plugin %s: %s", path, msg);
    return NULL;
}

/* The spec from the ABI-2 entry point, or NULL with *why set. */
static const struct env_spec *open_abi2(void *sym, const struct env_args *args, char *why,
                                        size_t cap)
{
    env_plugin_open_fn fn;
    memcpy(&fn, &sym, sizeof fn);   /* object pointer to function pointer */
    char err[512] = "";
    static const struct env_args none = { 0, NULL, NULL };
    const struct env_spec *spec = fn(args ? args : &none, err, sizeof err);
    err[sizeof err - 1] = '\0';
    if (!spec)
        snprintf(why, cap, "%s", err[0] ? err : ENV_PLUGIN_OPEN_SYMBOL "() failed without a message");
    return spec;
}

struct env_plugin *env_plugin_open_args(const char *path, const struct env_args *args)
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
    struct env_plugin *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    char why[512];
    const struct env_spec *spec = NULL, *loaded = NULL;   /* loaded: to unload on failure */
    void *sym = dlsym(h, ENV_PLUGIN_OPEN_SYMBOL);
    if (sym) {
        if (!(spec = loaded = open_abi2(sym, args, why, sizeof why)))
            goto bad;
        if (spec->abi_version != ENV_ABI_VERSION) {
            snprintf(why, sizeof why, "built for env ABI %d; this Tributary loads ABI 1 "
                     "(" ENV_PLUGIN_SYMBOL ") and %d (" ENV_PLUGIN_OPEN_SYMBOL ")",
                     spec->abi_version, ENV_ABI_VERSION);
            loaded = NULL;   /* its unload is not of our ABI */
            goto bad;
        }
    } else if ((sym = dlsym(h, ENV_PLUGIN_SYMBOL))) {
        if (args && args->n > 0) {
            snprintf(why, sizeof why, "takes no --env-arg (got '%s'): it exports only "
                     ENV_PLUGIN_SYMBOL " (ABI 1); a plug-in that takes arguments exports "
                     ENV_PLUGIN_OPEN_SYMBOL, args->keys[0]);
            goto bad;
        }
        env_plugin_entry_fn entry;
        memcpy(&entry, &sym, sizeof entry);
        const struct env_spec *s1 = entry();
        if (!s1) {
            snprintf(why, sizeof why, ENV_PLUGIN_SYMBOL "() returned NULL");
            goto bad;
        }
        /* only the fields of ABI 1 exist in what it returned */
        memcpy(&p->abi1, s1, offsetof(struct env_spec, abi_version));
        spec = &p->abi1;
    } else {
        snprintf(why, sizeof why, "missing symbol " ENV_PLUGIN_OPEN_SYMBOL " (or " ENV_PLUGIN_SYMBOL ")");
        goto bad;
    }
    if (env_spec_check(spec) < 0) {
        snprintf(why, sizeof why, "%s", env_last_error());
        goto bad;
    }
    p->handle = h;
    p->spec = spec;
    return p;
bad:
    free(p);
    return fail(h, loaded, path, why);
}

struct env_plugin *env_plugin_open(const char *path)
{
    return env_plugin_open_args(path, NULL);
}

const struct env_spec *env_plugin_spec(const struct env_plugin *p)
{
    return p->spec;
}

void env_plugin_close(struct env_plugin *p)
{
    if (!p)
        return;
    if (p->spec != &p->abi1 && p->spec->unload)
        p->spec->unload((struct env_spec *)p->spec);
    dlclose(p->handle);
    free(p);
}

const struct env_spec *env_open_args(const char *name, const struct env_args *args,
                                     struct env_plugin **plugin)
{
    *plugin = NULL;
    if (!name || !*name) {
        env_set_error("env name is empty");
        return NULL;
    }
    size_t len = strlen(name);
    bool is_path = strchr(name, '/') || (len > 3 && strcmp(name + len - 3, ".so") == 0);
    if (!is_path) {
        const struct env_spec *spec = env_lookup(name);
        if (spec && args && args->n > 0) {
            env_set_error("%s takes no --env-arg (got '%s')", name, args->keys[0]);
            return NULL;
        }
        return spec;
    }
    struct env_plugin *p = env_plugin_open_args(name, args);
    if (!p)
        return NULL;
    *plugin = p;
    return p->spec;
}

const struct env_spec *env_open(const char *name, struct env_plugin **plugin)
{
    return env_open_args(name, NULL, plugin);
}
