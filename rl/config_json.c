/* The run configuration as JSON: a run's config.json and a checkpoint's
 * config (rl_config_to_json), --config files and both of those read back
 * (rl_config_apply_json, rl_config_from_json). Keys are the fields' names
 * (rl/config_fields.h); '-' is read as '_', so the dashed config.json of
 * older builds ("envs-per-observer", "hidden": "64,64") still resumes. */
#define _GNU_SOURCE
#include "rl/config.h"
#include "rl/config_internal.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/text.h"
#include "rl/rl.h"

/* Whether a JSON string (its text between the quotes, raw) holds \u0000:
 * cJSON's strings end at their first NUL, so "a\u0000b" would be read as
 * "a" without a word. */
static bool holds_nul(const char *s, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < len && memcmp(s + i + 2, "0000", 4) == 0) return true;
        i++;                        /* the escaped character is not a backslash of its own */
    }
    return false;
}

/* In text[0..len), a JSON document cJSON accepted: the first string that
 * holds \u0000 (holds_nul). Returns 0 when there is none; 1 when it is a
 * value, with the top-level key it belongs to in key (escaped, common/text.h);
 * 2 when it is a key, with that key (raw, escaped) in key. */
static int find_nul(const char *text, size_t len, char *key, size_t cap)
{
    int depth = 0;
    key[0] = '\0';
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '{' || c == '[') depth++;
        else if (c == '}' || c == ']') depth--;
        if (c != '"') continue;
        size_t start = ++i;
        while (i < len && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
        if (i > len) i = len;
        size_t end = i, j = i + 1;
        while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) j++;
        bool is_key = j < len && text[j] == ':';
        if (is_key && depth == 1) text_escape(key, cap, text + start, end - start);
        if (holds_nul(text + start, end - start)) {
            if (is_key) text_escape(key, cap, text + start, end - start);
            return is_key ? 2 : 1;
        }
    }
    return 0;
}

/* Where text + at is: "line L, column C" (1-based; a column in bytes). */
static void line_column(const char *text, size_t at, char *out, size_t cap)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at; i++) {
        if (text[i] == '\n') line++, col = 1;
        else col++;
    }
    snprintf(out, cap, "line %zu, column %zu", line, col);
}

/* One JSON object in text[0..len), white space around it and nothing
 * else. 0 with *root set; -1 when it is not an object, with why (where
 * cJSON stopped when it is not JSON: "not valid JSON at line 3, column 1
 * (near '}')"); -2 with *at the offset of the first byte after it; -3 when
 * a string of it holds \u0000, with why ("'KEY' holds ..."); *root NULL
 * on failure. */
static int parse_object(const char *text, size_t len, cJSON **root, size_t *at, char *why, size_t cap)
{
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*root || !cJSON_IsObject(*root)) {
        bool parsed = *root != NULL;
        cJSON_Delete(*root);
        *root = NULL;
        if (parsed) {
            snprintf(why, cap, "not a JSON object (valid JSON, but another kind of value)");
            return -1;
        }
        /* cJSON's end on failure: where it stopped (its error position, at
         * or just past the byte it could not take), backed up over white
         * space and the end of the text to that byte */
        size_t pos = end && end >= text && end <= text + len ? (size_t)(end - text) : len, last = len;
        while (pos > 0 && (pos >= len || strchr(" \t\r\n", text[pos]))) pos--;
        while (last > 0 && strchr(" \t\r\n", text[last - 1])) last--;
        size_t before = pos;   /* the byte before it that is not white space */
        while (before > 0 && strchr(" \t\r\n", text[before - 1])) before--;
        char where[64], comma[64], near[TEXT_ESCAPED_CAP(12)];
        line_column(text, pos, where, sizeof where);
        text_escape(near, sizeof near, text + pos, len - pos < 12 ? len - pos : 12);
        if (before > 0 && text[before - 1] == ',' && pos < len && (text[pos] == '}' || text[pos] == ']')) {
            line_column(text, before - 1, comma, sizeof comma);
            snprintf(why, cap, "not a JSON object: invalid JSON at %s: a comma before '%c' (at %s; JSON has no "
                     "trailing commas)", where, text[pos], comma);
        } else if (pos + 1 >= last && !(pos < len && text[pos] == '}')) {
            snprintf(why, cap, "not a JSON object: the text ends at %s (near '%s') before the object does", where, near);
        } else {
            snprintf(why, cap, "not a JSON object: invalid JSON at %s (near '%s')", where, near);
        }
        return -1;
    }
    const char *p = end;
    while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p == text + len) {
        char key[TEXT_ESCAPED_CAP(64)];
        int nul = find_nul(text, len, key, sizeof key);
        if (nul == 0) return 0;
        snprintf(why, cap, "%s '%s' holds \\u0000 (a NUL character), which no setting can hold",
                 nul == 2 ? "the key" : "the value of", key);
        cJSON_Delete(*root);
        *root = NULL;
        return -3;
    }
    cJSON_Delete(*root);
    *root = NULL;
    *at = (size_t)(p - text);
    return -2;
}

int rl_config_load_json(const char *path, cJSON **root, const char *flag)
{
    *root = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return rl_set_error("%s %s: %s", flag, path, strerror(errno));
    size_t cap = 1u << 20;
    char *buf = malloc(cap + 1);
    size_t len = buf ? fread(buf, 1, cap + 1, f) : 0;
    fclose(f);
    if (!buf) return rl_set_error("%s %s: out of memory", flag, path);
    if (len > cap) {
        free(buf);
        return rl_set_error("%s %s: larger than 1 MiB", flag, path);
    }
    buf[len] = '\0';
    size_t at = 0;
    char why[400];
    int rc = parse_object(buf, len, root, &at, why, sizeof why);
    char where[64] = "";
    if (rc == -2) line_column(buf, at, where, sizeof where);
    free(buf);
    if (rc == -1) return rl_set_error("%s %s: %s", flag, path, why);
    if (rc == -2) return rl_set_error("%s %s: bytes after the JSON object (from byte %zu, %s)", flag, path, at, where);
    if (rc == -3) return rl_set_error("%s %s: %s", flag, path, why);
    return 0;
}

/* A list field from [64, 64] or (older files) "64,64": its text in val. */
static int list_text(const cJSON *it, char *val, size_t cap)
{
    if (cJSON_IsString(it)) {
        snprintf(val, cap, "%s", it->valuestring);
        return 0;
    }
    size_t n = 0;
    val[0] = '\0';
    for (const cJSON *e = it->child; e && n < cap; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble != (double)(int)e->valuedouble) return -1;
        n += (size_t)snprintf(val + n, cap - n, "%s%d", n ? "," : "", (int)e->valuedouble);
    }
    return cJSON_IsArray(it) ? 0 : -1;
}

/* The env's arguments: a list of "KEY=VALUE" strings, replacing the ones before. */
static int apply_env_args(struct rl_config *c, const char *flag, const char *path, const cJSON *it)
{
    c->env_arg[0] = '\0';
    if (!cJSON_IsArray(it)) return rl_set_error("%s %s: '%s' must be a list of \"KEY=VALUE\" strings", flag, path, it->string);
    for (cJSON *e = it->child; e; e = e->next)
        if (!cJSON_IsString(e)) return rl_set_error("%s %s: '%s' must be a list of \"KEY=VALUE\" strings", flag, path, it->string);
        else if (rl_config_add_env_arg(c, e->valuestring) != 0) return rl_set_error("%s %s: %s", flag, path, rl_last_error());
    return 0;
}

/* A scalar's text in val: a string as it is, a number as the command line
 * would write it. */
static int scalar_text(const struct rl_field *f, const char *flag, const char *path, const cJSON *it, char *val,
                       size_t cap)
{
    if (cJSON_IsString(it)) {
        size_t n = strlen(it->valuestring), max = f->kind == RL_K_STR ? f->size - 1 : cap - 1;
        if (n > max) return rl_set_error("--config %s: '%s' is too long (%zu bytes, at most %zu)", path, it->string, n, max);
        snprintf(val, cap, "%s", it->valuestring);
    } else if (cJSON_IsNumber(it)) {
        double d = it->valuedouble;
        if (d == (double)(int64_t)d && fabs(d) < 9e15) snprintf(val, cap, "%lld", (long long)d);
        else snprintf(val, cap, "%.17g", d);
    } else {
        return rl_set_error("%s %s: '%s' must be a number or a string", flag, path, it->string);
    }
    (void)flag;
    return 0;
}

/* One key of a JSON object into c. */
static int apply_one(struct rl_config *c, const struct rl_field *f, const char *flag, const char *path, const cJSON *it)
{
    char val[600];
    if (f->kind == RL_K_ENVARGS) return apply_env_args(c, flag, path, it);
    if (f->kind == RL_K_BOOL) {
        if (!cJSON_IsBool(it)) return rl_set_error("%s %s: '%s' must be true or false", flag, path, it->string);
        *(bool *)((char *)c + f->off) = cJSON_IsTrue(it);
        return 0;
    }
    if (f->kind == RL_K_LIST && cJSON_IsArray(it)) {
        if (list_text(it, val, sizeof val) != 0) return rl_set_error("%s %s: '%s' must be a list of sizes", flag, path, it->string);
    } else if (scalar_text(f, flag, path, it, val, sizeof val) != 0) {
        return -1;
    }
    if (rl_field_set(c, f, val) == 0) return 0;
    char choices[300] = "";
    if (f->choice) {
        size_t n = (size_t)snprintf(choices, sizeof choices, " (choices:");
        for (int i = 0; f->choice(i) && n < sizeof choices; i++)
            n += (size_t)snprintf(choices + n, sizeof choices - n, "%s %s", i ? "," : "", f->choice(i));
        if (n < sizeof choices) snprintf(choices + n, sizeof choices - n, ")");
    }
    return rl_set_error("%s %s: bad value '%s' for '%s'%s", flag, path, val, it->string, choices);
}

int rl_config_apply_json(struct rl_config *c, const char *flag, const char *path, const cJSON *root, bool *given)
{
    for (const cJSON *it = root->child; it; it = it->next) {
        if (!it->string || strlen(it->string) >= 64) return rl_set_error("%s %s: bad key", flag, path);
        if (strcmp(it->string, "preset") == 0) continue;   /* applied before the file */
        const struct rl_field *f = rl_field_find(it->string);
        if (!f || (f->flags & (RLF_CLI | RLF_NOJSON)))
            return rl_set_error("%s %s: unknown key '%s'", flag, path, it->string);
        if (apply_one(c, f, flag, path, it) != 0) return -1;
        if (given) given[f - rl_fields] = true;
    }
    return 0;
}

/* One field into o, as rl_config_apply_json reads it back. */
static void field_to_json(cJSON *o, const struct rl_config *c, const struct rl_field *f)
{
    const char *p = (const char *)c + f->off;
    switch (f->kind) {
    case RL_K_INT: cJSON_AddNumberToObject(o, f->name, *(const int *)p); break;
    case RL_K_I64: cJSON_AddNumberToObject(o, f->name, (double)*(const int64_t *)p); break;
    case RL_K_U64: cJSON_AddNumberToObject(o, f->name, (double)*(const uint64_t *)p); break;
    case RL_K_DBL:
        if (isfinite(*(const double *)p)) cJSON_AddNumberToObject(o, f->name, *(const double *)p);
        break;   /* NaN (an unset target) is left out: the default applies */
    case RL_K_BOOL: cJSON_AddBoolToObject(o, f->name, *(const bool *)p); break;
    case RL_K_STR: cJSON_AddStringToObject(o, f->name, p); break;
    case RL_K_ENUM: cJSON_AddStringToObject(o, f->name, f->choice(*(const int *)p)); break;
    case RL_K_LIST: {
        const struct rl_int_list *l = (const struct rl_int_list *)p;
        cJSON_AddItemToObject(o, f->name, cJSON_CreateIntArray(l->v, l->n));
        break;
    }
    case RL_K_ENVARGS: {
        struct rl_env_args ea;
        rl_config_env_args(c, &ea);
        cJSON *list = cJSON_AddArrayToObject(o, f->name);
        for (int k = 0; k < ea.args.n; k++) {
            char kv[sizeof c->env_arg];
            snprintf(kv, sizeof kv, "%s=%s", ea.keys[k], ea.values[k]);
            cJSON_AddItemToArray(list, cJSON_CreateString(kv));
        }
        break;
    }
    }
}

cJSON *rl_config_to_json(const struct rl_config *c)
{
    cJSON *o = cJSON_CreateObject();
    /* a run's config.json describes the run; which checkpoint it was
     * resumed from is not a setting a new run should inherit (RLF_NOJSON) */
    for (int i = 0; i < rl_n_fields; i++)
        if (!(rl_fields[i].flags & (RLF_CLI | RLF_NOJSON))) field_to_json(o, c, &rl_fields[i]);
    return o;
}

int rl_config_from_json(const char *text, size_t len, struct rl_config *cfg)
{
    cJSON *root = NULL;
    size_t at = 0;
    char why[400];
    int prc = parse_object(text, len, &root, &at, why, sizeof why);
    if (prc == -1) return rl_set_error("config: %s", why);
    if (prc == -2) return rl_set_error("config: bytes after the JSON object (from byte %zu)", at);
    if (prc == -3) return rl_set_error("config: %s", why);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "preset");
    int rc = rl_config_preset(cfg, cJSON_IsString(p) && p->valuestring[0] ? p->valuestring : "ppo-fast");
    if (rc == 0) rc = rl_config_apply_json(cfg, "config", "(saved)", root, NULL);
    cJSON_Delete(root);
    return rc == 0 ? rl_config_check(cfg) : -1;
}

cJSON *rl_config_json_of(const char *text, size_t len)
{
    struct rl_config c;
    return rl_config_from_json(text, len, &c) == 0 ? rl_config_to_json(&c) : NULL;
}
