/* trib-env: run any env (built-in id or plug-in .so) with random or scripted
 * actions and print episode statistics and steps/s; for checking a plug-in
 * before training on it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/argv.h"
#include "common/clock.h"
#include "envs/mujoco/mujoco_envs.h"
#include "envs/plugin.h"
#include "envs/vec_env.h"

static const char about[] =
    "usage: trib-env [options] ENV      (or --env ENV)\n"
    "Run ENV (a built-in id or a path to a plug-in .so exporting tributary_env_open\n"
    "or tributary_env) and print episode statistics and steps/s.\n"
    "Without --actions the actions are uniform random (box: within low/high,\n"
    "or [-1, 1] where a bound is infinite). Built-ins: CartPole-v1, Acrobot-v1,\n"
    "MountainCar-v0, Pendulum-v1 and, in a build with MuJoCo, the Gymnasium v4\n"
    "suite (HalfCheetah-v4, Hopper-v4, ...; see --list).\n\n";

#define MAX_ENV_ARGS 16

/* One --env-arg KEY=VALUE into args (split in place at the '='); keys are
 * letters, digits, '_', '-' and '.', as the trainer takes them. */
static int add_env_arg(char *kv, struct env_args *args, const char **keys, const char **values)
{
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv) return argv_set_error("--env-arg '%s': expected KEY=VALUE", kv);
    for (const char *c = kv; c < eq; c++)
        if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && !(*c >= '0' && *c <= '9') &&
            *c != '_' && *c != '-' && *c != '.')
            return argv_set_error("--env-arg '%s': a key is letters, digits, '_', '-' and '.'", kv);
    *eq = '\0';
    if (env_args_get(args, kv)) return argv_set_error("--env-arg %s is given twice", kv);
    if (args->n == MAX_ENV_ARGS) return argv_set_error("--env-arg: at most %d", MAX_ENV_ARGS);
    keys[args->n] = kv;
    values[args->n++] = eq + 1;
    return 0;
}

static int parse_long(const char *s, const char *what, long lo, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo) return argv_set_error("%s must be an integer >= %ld (got '%s')", what, lo, s);
    *out = v;
    return 0;
}

/* Parse numbers separated by commas/whitespace; returns the count or -1. */
static long parse_numbers(const char *text, double **out)
{
    long n = 0, cap = 16;
    double *v = malloc((size_t)cap * sizeof *v);
    const char *p = text;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        double x = strtod(p, &end);
        if (end == p) {
            fprintf(stderr, "trib-env: bad action '%.20s' (expected a number)\n", p);
            free(v);
            return -1;
        }
        if (n == cap)
            v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = x;
        p = end;
    }
    *out = v;
    return n;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "trib-env: cannot open actions file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    if (ferror(f)) {   /* a directory, an I/O error: not "no actions" */
        fprintf(stderr, "trib-env: cannot read actions file %s: %s\n", path, strerror(errno));
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* Print s as a JSON string: quotes, backslashes and control characters escaped
 * (a plug-in's id may hold any of them). */
static void print_json_string(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* x as a JSON number, or null when it is NaN or infinite (which JSON lacks). */
static const char *json_number(char buf[32], double x)
{
    if (!isfinite(x))
        return "null";
    snprintf(buf, 32, "%.17g", x);
    return buf;
}

/* The command line. */
struct args {
    long episodes, max_steps, num_envs, seed;
    const char *actions_arg, *actions_file, *env_name;
    bool json, list;
    const char *arg_keys[MAX_ENV_ARGS], *arg_values[MAX_ENV_ARGS];
    struct env_args env_args;
};

static int set_episodes(void *u, const char *v) { return parse_long(v, "--episodes", 1, &((struct args *)u)->episodes); }
static int set_steps(void *u, const char *v) { return parse_long(v, "--steps", 1, &((struct args *)u)->max_steps); }
static int set_seed(void *u, const char *v) { return parse_long(v, "--seed", 0, &((struct args *)u)->seed); }

static int set_num_envs(void *u, const char *v)
{
    if (parse_long(v, "--num-envs", 1, &((struct args *)u)->num_envs) != 0) return -1;
    if (((struct args *)u)->num_envs > 1 << 20) return argv_set_error("--num-envs is too large (max %d)", 1 << 20);
    return 0;
}

/* The most envs of a spec with create (each its own simulator: a MuJoCo
 * env's mjData is megabytes) one vec_env of trib-env holds: as many as an
 * observer may run (tributary-train --envs-per-observer). */
#define MAX_CREATED_ENVS 4096

/* --num-envs for this spec: 0, or -1 after saying why. */
static int check_num_envs(const struct args *a, const struct env_spec *spec)
{
    if (!spec->create || a->num_envs <= MAX_CREATED_ENVS) return 0;
    fprintf(stderr, "trib-env: --num-envs %ld is too large for %s, whose envs each hold their own resources "
                    "(max %d)\n", a->num_envs, spec->id, MAX_CREATED_ENVS);
    return -1;
}

static int set_actions(void *u, const char *v)
{
    ((struct args *)u)->actions_arg = v;
    return 0;
}

static int set_actions_file(void *u, const char *v)
{
    ((struct args *)u)->actions_file = v;
    return 0;
}

static int set_env(void *u, const char *v)
{
    struct args *a = u;
    if (a->env_name) return argv_set_error("expected exactly one ENV");
    a->env_name = v;
    return 0;
}

static int set_env_arg(void *u, const char *v)
{
    struct args *a = u;
    return add_env_arg((char *)v, &a->env_args, a->arg_keys, a->arg_values);
}

/* The command line into a. -1 to go on, else the exit status. */
static int parse(struct args *a, int argc, char **argv)
{
    const struct argv_opt opts[] = {
        { .name = "env", .arg = "ENV", .set = set_env, .user = a, .help = "the env, instead of the positional argument" },
        { .name = "env-arg", .arg = "KEY=VALUE", .set = set_env_arg, .user = a,
          .help = "an argument of a plug-in env, handed to its\ntributary_env_open (repeatable, keys unique)" },
        { .name = "episodes", .arg = "N", .short_name = 'e', .set = set_episodes, .user = a,
          .help = "stop after N finished episodes (default 10)" },
        { .name = "steps", .arg = "N", .short_name = 't', .set = set_steps, .user = a,
          .help = "stop after N env steps in all (default: no limit)" },
        { .name = "num-envs", .arg = "B", .short_name = 'n', .set = set_num_envs, .user = a,
          .help = "step B envs together in a vec_env (default 1; at most 1048576,\n"
                  "4096 of an env whose envs hold their own resources: MuJoCo's)" },
        { .name = "seed", .arg = "S", .short_name = 's', .set = set_seed, .user = a,
          .help = "RNG seed for resets and random actions (default 0)" },
        { .name = "actions", .arg = "LIST", .short_name = 'a', .set = set_actions, .user = a,
          .help = "scripted actions, comma/space separated, used in turn\nand cycled (a box action takes act.dim numbers)" },
        { .name = "actions-file", .arg = "F", .short_name = 'f', .set = set_actions_file, .user = a,
          .help = "the same, read from file F" },
        { .name = "json", .short_name = 'j', .set = argv_set_flag, .user = &a->json, .help = "print one JSON line instead of text" },
        { .name = "list", .short_name = 'l', .set = argv_set_flag, .user = &a->list, .help = "list the built-in envs and exit" },
        { .name = NULL, .set = set_env, .user = a },
    };
    a->env_args = (struct env_args){ 0, a->arg_keys, a->arg_values };
    int rc = argv_parse("trib-env", about, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (a->list) return -1;
    if (!a->env_name) {
        fprintf(stderr, "trib-env: expected exactly one ENV (see trib-env --help)\n");
        return 2;
    }
    if (a->actions_arg && a->actions_file) {
        fprintf(stderr, "trib-env: give --actions or --actions-file, not both (see trib-env --help)\n");
        return 2;
    }
    return -1;
}

/* Every built-in id; the MuJoCo suite's marked (and, in a build without
 * MuJoCo, listed as left out). */
static int list_envs(void)
{
    static const char *const mujoco_ids[MJ_SUITE_COUNT] = {MJ_SUITE_IDS};
    for (int i = 0; i < env_builtin_count(); i++) {
        bool mj = false;
        for (int k = 0; k < MJ_SUITE_COUNT; k++)
            mj |= strcmp(env_builtin_id(i), mujoco_ids[k]) == 0;
        printf("%s%s\n", env_builtin_id(i), mj ? "  (MuJoCo)" : "");
    }
    if (!env_mujoco_available())
        for (int k = 0; k < MJ_SUITE_COUNT; k++)
            printf("%s  (MuJoCo; not in this build)\n", mujoco_ids[k]);
    return 0;
}

/* The scripted actions (--actions, --actions-file) into *script, checked
 * against the env's action space: the count of actions (0: none given),
 * or -1 after printing why. */
static long load_script(const struct args *a, const struct env_spec *spec, double **script)
{
    const bool discrete = spec->act.kind == SPACE_DISCRETE;
    const int adim = discrete ? 1 : spec->act.dim;
    *script = NULL;
    if (!a->actions_arg && !a->actions_file) return 0;
    char *text = a->actions_file ? read_file(a->actions_file) : NULL;
    if (a->actions_file && !text) return -1;
    long n = parse_numbers(a->actions_file ? text : a->actions_arg, script);
    free(text);
    if (n < 0) return -1;
    if (n == 0 || n % adim) {
        fprintf(stderr, "trib-env: %ld scripted numbers do not make whole actions of %d\n", n, adim);
        return -1;
    }
    for (long k = 0; discrete && k < n; k++)
        if ((*script)[k] != floor((*script)[k]) || (*script)[k] < 0 || (*script)[k] >= spec->act.n) {
            fprintf(stderr, "trib-env: scripted action %g is not an integer in [0, %d)\n", (*script)[k], spec->act.n);
            return -1;
        }
    return n / adim;
}

/* The run's buffers and what it counts. */
struct run {
    const struct env_spec *spec;
    struct vec_env *v;
    size_t B;
    int adim;
    bool discrete;
    float *obs, *reward, *fact;
    bool *term, *trunc;
    int *iact;
    double *script;
    long nscript;
    struct vec_env_stats st;
    double secs;
};

static void run_free(struct run *r)
{
    free(r->obs), free(r->reward), free(r->term), free(r->trunc), free(r->iact), free(r->fact), free(r->script);
    vec_env_free(r->v);
}

static int run_new(struct run *r, const struct args *a, const struct env_spec *spec)
{
    r->spec = spec;
    r->discrete = spec->act.kind == SPACE_DISCRETE;
    r->adim = r->discrete ? 1 : spec->act.dim;
    r->nscript = load_script(a, spec, &r->script);
    if (r->nscript < 0) return -1;
    r->v = vec_env_new(spec, (int)a->num_envs, (uint64_t)a->seed, 0);
    if (!r->v) {
        fprintf(stderr, "trib-env: %s\n", env_last_error());
        return -1;
    }
    const size_t B = r->B = (size_t)a->num_envs, D = (size_t)spec->obs.dim;
    r->obs = malloc(B * D * sizeof *r->obs);
    r->reward = malloc(B * sizeof *r->reward);
    r->term = malloc(B), r->trunc = malloc(B);
    r->iact = malloc(B * sizeof *r->iact);
    r->fact = malloc(B * (size_t)r->adim * sizeof *r->fact);
    if (r->obs && r->reward && r->term && r->trunc && r->iact && r->fact) return 0;
    fprintf(stderr, "trib-env: out of memory for %ld envs of observation dim %d\n", a->num_envs, spec->obs.dim);
    return -1;
}

/* Step t's actions: scripted, else uniform random. */
static void pick_actions(struct run *r, long t, uint64_t *arng)
{
    const struct env_spec *spec = r->spec;
    for (size_t i = 0; i < r->B; i++)
        for (int k = 0; k < r->adim; k++) {
            double a;
            if (r->script) {
                a = r->script[(t % r->nscript) * r->adim + k];
            } else if (r->discrete) {
                a = (double)(env_rng_next(arng) % (uint64_t)spec->act.n);
            } else {
                double lo = spec->act.low[k], hi = spec->act.high[k];
                if (!isfinite(lo) || !isfinite(hi))
                    lo = -1.0, hi = 1.0;
                a = env_rng_uniform(arng, lo, hi);
            }
            if (r->discrete)
                r->iact[i] = (int)a;
            else
                r->fact[i * (size_t)r->adim + (size_t)k] = (float)a;
        }
}

static void run_steps(struct run *r, const struct args *a)
{
    uint64_t arng = env_rng_seed((uint64_t)a->seed, 0xAC710A5ull);
    vec_env_reset(r->v, r->obs);
    double t0 = trib_now_s();
    for (long t = 0;; t++) {
        vec_env_get_stats(r->v, &r->st);
        if ((long)r->st.episodes >= a->episodes || (a->max_steps > 0 && (long)r->st.steps >= a->max_steps))
            break;
        pick_actions(r, t, &arng);
        if (vec_env_step(r->v, r->discrete ? (const void *)r->iact : (const void *)r->fact, r->obs, r->reward,
                         r->term, r->trunc, NULL) < 0) {
            fprintf(stderr, "trib-env: %s\n", env_last_error());
            break;
        }
    }
    r->secs = trib_now_s() - t0;
    vec_env_get_stats(r->v, &r->st);
}

static void report(const struct run *r, const struct args *a)
{
    const struct vec_env_stats *st = &r->st;
    const struct env_spec *spec = r->spec;
    double sps = r->secs > 0 ? (double)st->steps / r->secs : 0.0;
    double mean_ret = st->episodes ? st->return_sum / (double)st->episodes : 0.0;
    double mean_len = st->episodes ? (double)st->length_sum / (double)st->episodes : 0.0;
    if (a->json) {
        printf("{\"env\":");
        print_json_string(spec->id);
        char b0[32], b1[32], b2[32];
        printf(",\"num_envs\":%ld,\"seed\":%ld,\"episodes\":%llu,\"steps\":%llu,"
               "\"return_mean\":%s,\"return_min\":%s,\"return_max\":%s,"
               "\"length_mean\":%.17g,\"length_min\":%d,\"length_max\":%d,"
               "\"steps_per_s\":%.6g}\n",
               a->num_envs, a->seed, (unsigned long long)st->episodes, (unsigned long long)st->steps,
               json_number(b0, mean_ret), json_number(b1, st->return_min), json_number(b2, st->return_max),
               mean_len, st->length_min, st->length_max, sps);
        return;
    }
    printf("env: %s (obs dim %d, actions ", spec->id, spec->obs.dim);
    if (r->discrete)
        printf("discrete(%d)", spec->act.n);
    else
        printf("box(%d)", spec->act.dim);
    printf(", max_episode_steps %d)\n", spec->max_episode_steps);
    printf("episodes: %llu   steps: %llu   envs: %ld   seed: %ld   actions: %s\n", (unsigned long long)st->episodes,
           (unsigned long long)st->steps, a->num_envs, a->seed, r->script ? "scripted" : "random");
    if (st->episodes) {
        printf("return: mean %.4f   min %.4f   max %.4f\n", mean_ret, st->return_min, st->return_max);
        printf("length: mean %.2f   min %d   max %d\n", mean_len, st->length_min, st->length_max);
    } else {
        printf("no episode finished\n");
    }
    printf("steps/s: %.4g\n", sps);
}

int main(int argc, char **argv)
{
    static struct args a = { .episodes = 10, .max_steps = -1, .num_envs = 1 };
    int rc = parse(&a, argc, argv);
    if (rc >= 0) return rc;
    if (a.list) return list_envs();
    struct env_plugin *plugin = NULL;
    const struct env_spec *spec = env_open_args(a.env_name, &a.env_args, &plugin);
    if (!spec) {
        fprintf(stderr, "trib-env: %s\n", env_last_error());
        return 1;
    }
    if (check_num_envs(&a, spec) != 0) {   /* bad usage, as a --num-envs past 1048576 */
        env_plugin_close(plugin);
        return 2;
    }
    struct run r = { 0 };
    rc = run_new(&r, &a, spec) == 0 ? 0 : 1;
    if (rc == 0) {
        run_steps(&r, &a);
        report(&r, &a);
    }
    run_free(&r);
    env_plugin_close(plugin);
    return rc;
}
