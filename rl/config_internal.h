/* What the files of the run configuration share (config.c, config_parse.c,
 * config_json.c, config_wire.c, config_check.c): the table of fields made
 * from rl/config_fields.h, their values as text and the presets' rows. It
 * names nothing of rl/config.h (only struct rl_config, config_fields.h's),
 * so config.c, which defines most of it, uses it without a circle. Not
 * installed. */
#ifndef TRIB_RL_CONFIG_INTERNAL_H
#define TRIB_RL_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "rl/config_fields.h"

enum rl_kind { RL_K_INT, RL_K_I64, RL_K_U64, RL_K_DBL, RL_K_BOOL, RL_K_STR, RL_K_ENUM, RL_K_LIST, RL_K_ENVARGS };

/* One row of rl/config_fields.h. */
struct rl_field {
    const char *name;               /* the member, the JSON and wire key */
    enum rl_kind kind;
    size_t off, size;               /* where in struct rl_config, and its bytes */
    const char *(*choice)(int i);   /* ENUM: the name of value i, NULL past the last */
    unsigned flags;                 /* RLF_* */
    const char *example;            /* the test's value (rl/config_fields.h), NULL: none */
    const char *help;
};
extern const struct rl_field rl_fields[];
extern const int rl_n_fields;

/* One env's row of a preset family (zoo): "name=value" overrides over the
 * family's own set (NULL-terminated, "env=ID" among them), the source's
 * name for it ("Hopper-v3") and what the run is told at load, one line a
 * setting of the source that is not the same here (NULL-terminated). */
struct rl_preset_row {
    const char *env, *source;
    const char *set[24];
    const char *notes[4];
};

/* A preset: its name, one line about it, and its fields' values as
 * "name=value" overrides of rl_config_base's (NULL-terminated). */
struct rl_preset {
    const char *name, *about;
    const char *set[24];
    /* envs (NULL-terminated; NULL: only the preset's own) for which its
     * env fields (RLF_ENV) hold as set, where --env names one */
    const char *const *suite;
};
/* A family's rows (env NULL ends them; the first is the preset's own, and
 * --env picks one: rl_config_preset_env), or NULL: p is no family. */
const struct rl_preset_row *rl_preset_rows(const struct rl_preset *p);
/* The row of family p for env, or NULL (none, or p is no family). */
const struct rl_preset_row *rl_preset_row(const struct rl_preset *p, const char *env);
/* Sets *c to preset `name` on env: a family's row for env over its set
 * (-1 with rl_last_error() naming the rows when it has none), another
 * preset as rl_config_preset with env. 0, or -1. */
int rl_config_preset_env(struct rl_config *c, const char *name, const char *env);
/* Whether p's env fields hold for env (its own, or one of its suite). */
bool rl_preset_env_fits(const struct rl_preset *p, const char *env);
/* The preset named `name`, or NULL. */
const struct rl_preset *rl_preset_find(const char *name);

/* Sets *c to the defaults every preset starts from (no preset name). */
void rl_config_base(struct rl_config *c);

/* The field a key names: its name, with '-' for '_' (the flag's spelling),
 * or an alias (CleanRL's names). NULL when none. */
const struct rl_field *rl_field_find(const char *key);

/* The field's flag name without "--" (envs_per_observer: envs-per-observer),
 * and its alias in that spelling, or NULL. */
void rl_field_flag(const struct rl_field *f, char *out, size_t cap);
const char *rl_field_alias(const struct rl_field *f);

/* Sets f in c from its text (the command line's form: "64,64", "relu",
 * "true"; a BOOL also takes NULL for true; ENVARGS appends one
 * KEY=VALUE). 0, or -1 (ENVARGS: with rl_last_error()). */
int rl_field_set(struct rl_config *c, const struct rl_field *f, const char *v);

/* f's value in c as --help shows it. */
void rl_field_format(const struct rl_config *c, const struct rl_field *f, char *buf, size_t cap);

/* Applies a preset's rows to c. 0, or -1 with rl_last_error(). */
int rl_preset_apply(struct rl_config *c, const struct rl_preset *p);

/* Applies a JSON object of fields to c (config_json.c): keys are field
 * names ('-' or '_'), old names and aliases too; "preset" is skipped (it is
 * applied before); given[k] is set for every field k the object holds.
 * -1 with rl_last_error() naming `flag`, `path` and the key. */
struct cJSON;
int rl_config_apply_json(struct rl_config *c, const char *flag, const char *path, const struct cJSON *root,
                         bool *given);

/* Reads a JSON object from path (at most 1 MiB) into *root. 0, or -1 with
 * rl_last_error() naming `flag` and path. */
int rl_config_load_json(const char *path, struct cJSON **root, const char *flag);

#endif
