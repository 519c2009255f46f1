/* The wire form of the run configuration: the map the agent sends to its
 * observers (rl_config_to_value), one key per field of rl/config_fields.h
 * under its name, and reading it back, checked as the command line is
 * (rl_config_from_value). Numbers and switches travel as themselves, an
 * enum as its choice's name (an algorithm is looked up in the observer's own
 * registry, whatever order it was registered in), a list and a string as
 * text. */
#define _GNU_SOURCE
#include "rl/config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rl/config_internal.h"
#include "rl/rl.h"

static bool on_wire(const struct rl_field *f) { return !(f->flags & RLF_CLI); }

static struct rpc_value field_value(const struct rl_config *c, const struct rl_field *f)
{
    const char *p = (const char *)c + f->off;
    char buf[64];
    switch (f->kind) {
    case RL_K_INT: return rpc_int(*(const int *)p);
    case RL_K_I64: return rpc_int(*(const int64_t *)p);
    case RL_K_U64: return rpc_int((int64_t) * (const uint64_t *)p);
    case RL_K_DBL: return rpc_double(*(const double *)p);
    case RL_K_BOOL: return rpc_bool(*(const bool *)p);
    case RL_K_ENUM:
    case RL_K_LIST: rl_field_format(c, f, buf, sizeof buf); return rpc_str(buf);
    case RL_K_STR:
    case RL_K_ENVARGS: break;
    }
    return rpc_str(p);
}

struct rpc_value rl_config_to_value(const struct rl_config *c)
{
    size_t n = 0;
    for (int i = 0; i < rl_n_fields; i++) n += on_wire(&rl_fields[i]);
    struct rpc_value m = rpc_map(n);
    for (int i = 0, k = 0; i < rl_n_fields; i++)
        if (on_wire(&rl_fields[i])) rpc_map_set(&m, (size_t)k++, rl_fields[i].name, field_value(c, &rl_fields[i]));
    return m;
}

static bool kind_ok(enum rl_kind k, enum rpc_kind x)
{
    switch (k) {
    case RL_K_DBL: return x == RPC_DOUBLE;
    case RL_K_BOOL: return x == RPC_BOOL;
    case RL_K_STR:
    case RL_K_ENUM:
    case RL_K_LIST:
    case RL_K_ENVARGS: return x == RPC_STR;
    default: return x == RPC_INT;
    }
}

/* One field from its wire value. 0, or -1 with rl_last_error(). */
static int field_from(struct rl_config *c, const struct rl_field *f, const struct rpc_value *x)
{
    char *p = (char *)c + f->off;
    if (!x) return rl_set_error("config: missing '%s'", f->name);
    if (!kind_ok(f->kind, x->kind)) return rl_set_error("config: '%s' has the wrong type (%s)", f->name, rpc_kind_name(x->kind));
    if (f->kind == RL_K_INT && (x->i < -2147483647LL || x->i > 2147483647LL))
        return rl_set_error("config: '%s' out of range", f->name);
    switch (f->kind) {
    case RL_K_INT: *(int *)p = (int)x->i; return 0;
    case RL_K_I64: *(int64_t *)p = x->i; return 0;
    case RL_K_U64: *(uint64_t *)p = (uint64_t)x->i; return 0;
    case RL_K_DBL: *(double *)p = x->d; return 0;
    case RL_K_BOOL: *(bool *)p = x->b; return 0;
    case RL_K_ENUM:
    case RL_K_LIST: {
        char text[64];
        if (x->str.len >= sizeof text) return rl_set_error("config: '%s' too long", f->name);
        memcpy(text, x->str.ptr, x->str.len);
        text[x->str.len] = '\0';
        if (rl_field_set(c, f, text) == 0) return 0;
        char choices[300] = "";
        for (size_t i = 0, n = 0; f->kind == RL_K_ENUM && f->choice((int)i) && n < sizeof choices; i++)
            n += (size_t)snprintf(choices + n, sizeof choices - n, "%s%s", i ? ", " : " (choices: ", f->choice((int)i));
        return rl_set_error("config: bad value '%s' for '%s'%s%s", text, f->name, choices, choices[0] ? ")" : "");
    }
    case RL_K_STR:
    case RL_K_ENVARGS: break;
    }
    if (x->str.len >= f->size) return rl_set_error("config: '%s' too long", f->name);
    memcpy(p, x->str.ptr, x->str.len + 1);
    return 0;
}

int rl_config_from_value(const struct rpc_value *v, struct rl_config *out)
{
    if (!v || v->kind != RPC_MAP) return rl_set_error("config: expected a map");
    struct rl_config c;
    rl_config_base(&c);
    for (int i = 0; i < rl_n_fields; i++)
        if (on_wire(&rl_fields[i]) && field_from(&c, &rl_fields[i], rpc_map_get(v, rl_fields[i].name)) != 0) return -1;
    if (rl_config_check(&c) != 0) return rl_set_error("config: %s", rl_last_error());
    *out = c;
    return 0;
}
