/* The trainer's command line (rl_config_parse): one common/argv option per
 * field of rl/config_fields.h, plus --config and the program's own, in
 * layers: the preset, a resumed run's config.json, --config, the command
 * line; then a preset's env-specific fields follow the env, and the
 * defaults worked out from the rest (device, max_policy_lag). */
#define _GNU_SOURCE
#include "rl/config.h"
#include "rl/config_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/argv.h"
#include "common/check.h"
#include "common/crash_note.h"
#include "envs/env.h"
#include "envs/plugin.h"
#include "runfiles/metrics.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "rl/rl.h"
#include "tensor/tensor.h"

/* The fields are the table's rows (RL_N_FIELDS, rl/config_fields.h); a
 * program adds at most RL_MAX_EXTRA_OPTS flags of its own (rl/config.h). */
#define MAX_FIELDS RL_N_FIELDS
#define MAX_OPTS (MAX_FIELDS + 1 + RL_MAX_EXTRA_OPTS)   /* --config, the fields, the program's own */

struct parse;

/* An option's setter context: the parse and the field (NULL: --config). */
struct slot {
    struct parse *ps;
    const struct rl_field *f;
};

struct parse {
    struct rl_config *cfg;
    int phase;                      /* 0: the layers' flags only (--preset, --config, --resume, --overwrite); 1: the rest */
    const char *preset, *config_file, *resume_dir;
    bool overwrite, cli_env_arg;
    bool given[MAX_FIELDS];         /* in a file or on the command line */
    bool cli[MAX_FIELDS];           /* on the command line */
    struct slot slots[MAX_FIELDS + 1];
    struct argv_opt opts[MAX_OPTS];
    int n_opts;
    char names[MAX_FIELDS][48], aliases[MAX_FIELDS][48], notes[MAX_FIELDS][400], preset_help[2048], about[4096];
};

static int noop(void *user, const char *v)
{
    (void)user;
    (void)v;
    return 0;
}

/* The layers' own flags, read in phase 0 (their value is only noted). */
static int set_layer_flag(struct parse *ps, const struct rl_field *f, const char *v)
{
    if (!f) ps->config_file = v;
    else if (f->off == offsetof(struct rl_config, preset)) ps->preset = v;
    else if (f->off == offsetof(struct rl_config, resume)) ps->resume_dir = v;
    else ps->overwrite = true;
    return 0;
}

static bool is_layer_flag(const struct rl_field *f)
{
    return !f || f->off == offsetof(struct rl_config, preset) || f->off == offsetof(struct rl_config, resume) ||
           f->off == offsetof(struct rl_config, overwrite);
}

static int set_field(void *user, const char *v)
{
    struct slot *s = user;
    struct parse *ps = s->ps;
    const struct rl_field *f = s->f;
    if (is_layer_flag(f)) return ps->phase == 0 ? set_layer_flag(ps, f, v) : 0;
    if (ps->phase == 0) return 0;
    char flag[48];
    rl_field_flag(f, flag, sizeof flag);
    if (f->kind == RL_K_STR && strlen(v) >= f->size)   /* as --config says it */
        return argv_set_error("--%s is too long (%zu bytes, at most %zu)", flag, strlen(v), f->size - 1);
    /* the command line's --env-arg list replaces the one of a file */
    if (f->kind == RL_K_ENVARGS && !ps->cli_env_arg) ps->cfg->env_arg[0] = '\0';
    if (f->kind == RL_K_ENVARGS) ps->cli_env_arg = true;
    if (rl_field_set(ps->cfg, f, v) != 0) {
        if (f->kind == RL_K_ENVARGS) return argv_set_error("%s", rl_last_error());
        if (f->kind == RL_K_INT || f->kind == RL_K_I64 || f->kind == RL_K_U64)   /* 1.5, 1e-3, 1e12 for an int */
            return argv_set_error("--%s takes an integer%s (e.g. 1000000 or 1e6), not '%s'", flag,
                                  f->kind == RL_K_INT ? " of at most 2147483647" : f->kind == RL_K_U64 ? " >= 0" : "", v);
        return -1;
    }
    ps->given[f - rl_fields] = ps->cli[f - rl_fields] = true;
    return 0;
}

/* --help's note of field k: its default (preset ppo-fast's) and the presets that differ. */
static void field_note(struct parse *ps, int k, const struct rl_config *pre, int np)
{
    const struct rl_field *f = &rl_fields[k];
    char dflt[160], v[160];
    char *line = ps->notes[k];
    size_t cap = sizeof ps->notes[k];
    rl_field_format(&pre[0], f, dflt, sizeof dflt);
    size_t n = (size_t)snprintf(line, cap, "default %s", dflt);
    for (int p = 1, first = 1; p < np && n < cap; p++) {
        rl_field_format(&pre[p], f, v, sizeof v);
        if (strcmp(v, dflt) == 0) continue;
        n += (size_t)snprintf(line + n, cap - n, "%s%s %s", first ? "; " : ", ", rl_preset_names[p], v);
        first = 0;
    }
}

/* --preset's help: the presets' rows. */
static void preset_help(struct parse *ps)
{
    size_t n = (size_t)snprintf(ps->preset_help, sizeof ps->preset_help, "start from a preset:");
    for (int p = 0; rl_preset_names[p] && n < sizeof ps->preset_help; p++) {
        const struct rl_preset *pr = rl_preset_find(rl_preset_names[p]);
        const struct rl_preset_row *rows = rl_preset_rows(pr);
        n += (size_t)snprintf(ps->preset_help + n, sizeof ps->preset_help - n, "\n%-19s %s", rl_preset_names[p],
                              pr->about);
        /* a family's rows, the first its default env */
        for (int r = 0; rows && rows[r].env && n < sizeof ps->preset_help; r++)
            n += (size_t)snprintf(ps->preset_help + n, sizeof ps->preset_help - n, "%s%s%s",
                                  r == 0 ? "\n                    rows (--env): " : r % 4 == 0 ? ",\n                    " : ", ",
                                  rows[r].env, r == 0 ? " (the default)" : "");
    }
}

static void add_field_opt(struct parse *ps, int k, const struct rl_config *pre, int np)
{
    static const char *const metavar[] = { [RL_K_INT] = "N", [RL_K_I64] = "N", [RL_K_U64] = "N", [RL_K_DBL] = "X",
                                           [RL_K_STR] = "S", [RL_K_ENUM] = "NAME", [RL_K_LIST] = "N,N,..",
                                           [RL_K_ENVARGS] = "KEY=VALUE" };
    const struct rl_field *f = &rl_fields[k];
    bool sw = f->kind == RL_K_BOOL;
    rl_field_flag(f, ps->names[k], sizeof ps->names[k]);
    const char *alias = rl_field_alias(f);
    for (size_t i = 0; alias && alias[i] && i + 1 < sizeof ps->aliases[k]; i++)   /* CleanRL's, dashed */
        ps->aliases[k][i] = alias[i] == '_' ? '-' : alias[i];
    ps->slots[k] = (struct slot){ ps, f };
    if (!(f->flags & (RLF_OWN_DEFAULT | RLF_CLI)) && f->off != offsetof(struct rl_config, resume) &&
        f->off != offsetof(struct rl_config, preset))
        field_note(ps, k, pre, np);
    bool is_preset = f->off == offsetof(struct rl_config, preset);
    if (is_preset) preset_help(ps);
    const char *arg = sw ? NULL : metavar[f->kind];
    if (f->kind == RL_K_STR) arg = is_preset ? "NAME" : f->off == offsetof(struct rl_config, env) ? "ID|PATH.so" : "DIR";
    ps->opts[ps->n_opts++] = (struct argv_opt){
        .name = ps->names[k], .arg = arg, .help = is_preset ? ps->preset_help : f->help,
        .set = set_field, .user = &ps->slots[k], .negatable = sw && !(f->flags & RLF_CLI), .choice = f->choice,
        .alias = alias ? ps->aliases[k] : NULL, .note = ps->notes[k][0] ? ps->notes[k] : NULL };
}

/* ps->opts: --config, every field, then the program's own. */
static void build_opts(struct parse *ps, const struct argv_opt *extra, int n_extra)
{
    int np = 0;
    while (rl_preset_names[np]) np++;
    struct rl_config *pre = calloc((size_t)np, sizeof *pre);
    CHECK(pre != NULL);
    for (int p = 0; p < np; p++) CHECK(rl_config_preset(&pre[p], rl_preset_names[p]) == 0);
    ps->slots[MAX_FIELDS] = (struct slot){ ps, NULL };
    ps->opts[ps->n_opts++] = (struct argv_opt){
        .name = "config", .arg = "FILE", .set = set_field, .user = &ps->slots[MAX_FIELDS],
        .help = "a JSON object of these fields (keys as the flags, '_' or '-', e.g.\n"
                "{\"preset\": \"ppo\", \"lr\": 0.001, \"anneal_lr\": false}); flags on the\n"
                "command line override it; unknown keys are errors" };
    for (int k = 0; k < rl_n_fields; k++) add_field_opt(ps, k, pre, np);
    free(pre);
    CHECK(n_extra >= 0 && n_extra <= RL_MAX_EXTRA_OPTS);   /* the program's table, not input */
    for (int k = 0; k < n_extra; k++) ps->opts[ps->n_opts++] = extra[k];
}

static int usage_error(const char *prog, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see %s --help)\n", prog);
    return 2;
}

/* The resumed run's config.json into *saved (NULL when the run has none). 0, or 2 after printing why. */
static int load_saved(const char *prog, const char *dir, cJSON **saved)
{
    char path[1024], what[300];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!dir[0] || metrics_dir_holds_run(dir, what, sizeof what) != 1)
        return usage_error(prog, "--resume %s: no run to resume there (no config.json or checkpoints in %s)", dir,
                           dir[0] ? dir : "''");
    /* its files are read as what they are: no link followed, no FIFO
     * waited on (runfiles/runfile.h) */
    if (metrics_dir_check(dir) != 0) return usage_error(prog, "--resume %s: %s", dir, runfiles_last_error());
    /* a run directory without config.json (made by hand, or by an
     * older build): the command line describes the run */
    if (access(path, F_OK) == 0 && rl_config_load_json(path, saved, "--resume") != 0)
        return usage_error(prog, "%s%s", rl_last_error(), "");
    return 0;
}

static bool is_builtin_env(const char *id)
{
    for (int i = 0; i < env_builtin_count(); i++)
        if (strcmp(env_builtin_id(i), id) == 0) return true;
    return false;
}

/* The preset, the resumed run's config.json, --config. 0, or 2 after printing why. */
static int apply_layers(const char *prog, struct parse *ps, cJSON *saved, cJSON *file, bool *saved_plugin)
{
    const cJSON *layers[2] = { saved, file };
    const char *paths[2] = { ps->resume_dir, ps->config_file };
    const char *preset = ps->preset;
    for (int l = 0; l < 2; l++) {
        const cJSON *p = layers[l] ? cJSON_GetObjectItemCaseSensitive(layers[l], "preset") : NULL;
        if (p && !cJSON_IsString(p)) return usage_error(prog, "%s: 'preset' must be a string%s", paths[l], "");
        if (p && p->valuestring[0] && !ps->preset) preset = p->valuestring;
    }
    int rc = rl_config_preset(ps->cfg, preset ? preset : "ppo-fast");
    if (rc == 0 && saved) rc = rl_config_apply_json(ps->cfg, "--resume", ps->resume_dir, saved, ps->given);
    *saved_plugin = saved && rc == 0 && !is_builtin_env(ps->cfg->env);
    if (rc == 0 && file) rc = rl_config_apply_json(ps->cfg, "--config", ps->config_file, file, ps->given);
    return rc == 0 ? 0 : usage_error(prog, "%s%s", rl_last_error(), "");
}

/* The layers from files: 0, or 2 after printing why. */
static int load_layers(const char *prog, struct parse *ps, bool *saved_plugin)
{
    cJSON *saved = NULL, *file = NULL;
    if (ps->resume_dir && load_saved(prog, ps->resume_dir, &saved) != 0) return 2;
    if (ps->config_file && rl_config_load_json(ps->config_file, &file, "--config") != 0) {
        cJSON_Delete(saved);
        return usage_error(prog, "%s%s", rl_last_error(), "");
    }
    int rc = apply_layers(prog, ps, saved, file, saved_plugin);
    cJSON_Delete(saved);
    cJSON_Delete(file);
    return rc;
}

/* A preset's env-specific fields (RLF_ENV) follow the env: where the run's
 * env is neither the preset's nor one of its suite, those not given take
 * their defaults (target: the env's own threshold). A plug-in under a
 * preset with a suite (mujoco: a robot of one's own) is taken as one of
 * it: its budget holds. */
static void follow_env(struct parse *ps)
{
    struct rl_config pre, base;
    if (rl_preset_rows(rl_preset_find(ps->cfg->preset))) return;   /* follow_row's */
    if (rl_config_preset(&pre, ps->cfg->preset) != 0 || strcmp(pre.env, ps->cfg->env) == 0) return;
    const struct rl_preset *p = rl_preset_find(ps->cfg->preset);
    if (rl_preset_env_fits(p, ps->cfg->env) || (p->suite && !is_builtin_env(ps->cfg->env))) return;
    rl_config_base(&base);
    for (int k = 0; k < rl_n_fields; k++)
        if ((rl_fields[k].flags & RLF_ENV) && !ps->given[k])
            memcpy((char *)ps->cfg + rl_fields[k].off, (const char *)&base + rl_fields[k].off, rl_fields[k].size);
}

/* A preset family's (zoo's) row follows the env: every field not given in
 * a file or on the command line takes the row's value for the run's env;
 * an env the family has no row for is refused. Then the row's notes (the
 * source's settings that are not the same here) are printed. 0, or 2 after
 * printing why. */
static int follow_row(const char *prog, struct parse *ps)
{
    const struct rl_preset *p = rl_preset_find(ps->cfg->preset);
    if (!rl_preset_rows(p)) return 0;
    struct rl_config row;
    if (rl_config_preset_env(&row, p->name, ps->cfg->env) != 0) return usage_error(prog, "%s%s", rl_last_error(), "");
    for (int k = 0; k < rl_n_fields; k++)
        if (!ps->given[k])
            memcpy((char *)ps->cfg + rl_fields[k].off, (const char *)&row + rl_fields[k].off, rl_fields[k].size);
    const struct rl_preset_row *r = rl_preset_row(p, ps->cfg->env);
    fprintf(stderr, "%s: --preset %s on %s: rl-baselines3-zoo's %s row\n", prog, p->name, r->env, r->source);
    for (int i = 0; r->notes[i]; i++) fprintf(stderr, "%s: --preset %s on %s: %s\n", prog, p->name, r->env, r->notes[i]);
    return 0;
}

/* Whether a and b name the same directory (the same path when either is
 * missing). */
static bool same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    if (realpath(a, ra) && realpath(b, rb)) return strcmp(ra, rb) == 0;
    return strcmp(a, b) == 0;
}

/* --logdir: a directory that holds another run is refused (two runs'
 * metrics, event files and checkpoints would mix), unless --overwrite
 * clears it first. 0, or 2 after printing why. */
static int claim_logdir(struct rl_config *cfg, const char *prog)
{
    if (!cfg->logdir[0]) return 0;
    bool resuming_here = cfg->resume[0] && same_dir(cfg->logdir, cfg->resume);
    if (resuming_here && cfg->overwrite)
        return usage_error(prog, "--overwrite starts a new run; it does not go with --resume %s%s", cfg->resume, "");
    if (resuming_here) return 0;
    char what[300];
    int h = metrics_dir_holds_run(cfg->logdir, what, sizeof what);
    if (h < 0) return usage_error(prog, "--logdir %s: %s", cfg->logdir, runfiles_last_error());
    if (h == 0) return 0;
    if (!cfg->overwrite) {
        fprintf(stderr,
                "%s: --logdir %s already holds a run (%s); continue it with --resume %s, write this run to a new "
                "directory, or pass --overwrite to replace it (see %s --help)\n",
                prog, cfg->logdir, what, cfg->logdir, prog);
        return 2;
    }
    if (metrics_dir_clear(cfg->logdir) != 0) return usage_error(prog, "--overwrite: %s%s", runfiles_last_error(), "");
    return 0;
}

#define FIELD_INDEX(member) (rl_field_find(#member) - rl_fields)

/* A plug-in's path (env_open_args' form: a '/' or a name ending in .so)
 * made absolute (realpath), so config.json, the checkpoints, the policy
 * files and the hints printed name one file from any directory. A path
 * that does not resolve is left as typed, for the open to refuse. 0, or
 * -1 with rl_last_error() when the absolute path does not fit. */
static int absolute_plugin(struct rl_config *cfg)
{
    size_t len = strlen(cfg->env);
    bool is_path = strchr(cfg->env, '/') || (len > 3 && strcmp(cfg->env + len - 3, ".so") == 0);
    char abs[PATH_MAX];
    if (!is_path || env_lookup(cfg->env) || !realpath(cfg->env, abs)) return 0;
    if (strlen(abs) >= sizeof cfg->env)
        return rl_set_error("--env %s: its absolute path %s is too long (%zu bytes, at most %zu)", cfg->env, abs,
                            strlen(abs), sizeof cfg->env - 1);
    snprintf(cfg->env, sizeof cfg->env, "%s", abs);
    return 0;
}

/* After every layer: --resume, the defaults worked out from the rest, the
 * checks, the env opened once. -1 to go on, or 2 after printing why. */
static int finish(const char *prog, struct parse *ps)
{
    struct rl_config *cfg = ps->cfg;
    if (ps->resume_dir) {
        if (strlen(ps->resume_dir) >= sizeof cfg->resume)
            return usage_error(prog, "--resume %s: path too long%s", ps->resume_dir, "");
        snprintf(cfg->resume, sizeof cfg->resume, "%s", ps->resume_dir);
        if (!ps->cli[FIELD_INDEX(logdir)]) snprintf(cfg->logdir, sizeof cfg->logdir, "%s", ps->resume_dir);
    }
    cfg->overwrite = ps->overwrite;
    if (!ps->given[FIELD_INDEX(device)]) cfg->device = tensor_cuda_available() ? RL_DEVICE_CUDA : RL_DEVICE_CPU;
    if (!ps->given[FIELD_INDEX(max_policy_lag)]) cfg->max_policy_lag = rl_default_max_policy_lag(cfg);
    if (rl_config_check(cfg) != 0) return usage_error(prog, "%s%s", rl_last_error(), "");
    if (absolute_plugin(cfg) != 0) return usage_error(prog, "%s%s", rl_last_error(), "");
    /* an env that does not exist is bad usage, found before anything starts;
     * a plug-in's code runs here (its entry point, its unload): a crash in
     * it says so, naming it, rather than ending the program without a word */
    crash_note_begin(prog, "checking --env %s (its plug-in's entry point and unload run there)", cfg->env);
    struct env_plugin *plugin = NULL;
    const struct env_spec *spec = rl_config_open_env(cfg, &plugin);
    if (!spec) {
        crash_note_end();
        return usage_error(prog, "--env: %s%s", rl_last_error(), "");
    }
    /* and one whose sizes the policy cannot have (a plug-in declares its own) */
    struct policy_arch arch;
    char what[600];
    snprintf(what, sizeof what, "--env %s", cfg->env);
    int arc = rl_arch_for_env(cfg, spec, what, &arch);
    env_plugin_close(plugin);
    crash_note_end();
    if (arc != 0) return usage_error(prog, "%s%s", rl_last_error(), "");
    return claim_logdir(cfg, prog) == 0 ? -1 : 2;
}

/* The command line over the layers, then what follows from it. */
static int parse_run(struct parse *ps, const char *prog, int argc, char **argv, int n_extra)
{
    bool saved_plugin = false;
    struct argv_opt phase0[MAX_OPTS];
    memcpy(phase0, ps->opts, sizeof phase0);
    for (int k = ps->n_opts - n_extra; k < ps->n_opts; k++) phase0[k].set = noop;   /* the program's own: phase 1 */
    int rc = argv_parse(prog, ps->about, phase0, ps->n_opts, argc, argv);
    if (rc == 1) return 0;
    if (rc == 2) return 2;
    if (load_layers(prog, ps, &saved_plugin) != 0) return 2;
    ps->phase = 1;
    if (argv_parse(prog, NULL, ps->opts, ps->n_opts, argc, argv) != 0) return 2;
    /* a run directory does not choose code to run: a plug-in env is loaded
     * only when the command line names it */
    if (saved_plugin && !ps->cli[FIELD_INDEX(env)])
        return usage_error(prog, "--resume: the run's env is the plug-in %s; name it with --env to load it%s", ps->cfg->env, "");
    if (ps->cli[FIELD_INDEX(env)] || (ps->config_file && ps->given[FIELD_INDEX(env)])) follow_env(ps);
    if (follow_row(prog, ps) != 0) return 2;
    return finish(prog, ps);
}

int rl_config_parse(struct rl_config *cfg, const char *prog, const char *about, int argc, char **argv,
                    const struct argv_opt *extra, int n_extra)
{
    struct parse *ps = calloc(1, sizeof *ps);
    if (!ps) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 2;
    }
    ps->cfg = cfg;
    rl_config_base(cfg);
    snprintf(ps->about, sizeof ps->about, "%s\nOptions of the run (the agent hands them to every observer):\n", about);
    build_opts(ps, extra, n_extra);
    int rc = parse_run(ps, prog, argc, argv, n_extra);
    free(ps);
    return rc;
}

void rl_config_usage(FILE *f)
{
    struct parse *ps = calloc(1, sizeof *ps);
    if (!ps) return;
    build_opts(ps, NULL, 0);
    argv_usage(f, ps->opts, ps->n_opts);
    free(ps);
}
