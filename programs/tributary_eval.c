/* tributary-eval: loads a trained policy (.safetensors from --logdir, or a
 * checkpoint) and reports its mean return over N episodes, each env running
 * exactly one episode (so short episodes are not over-counted). */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/evaluate.h"
#include "common/argv.h"
#include "common/check.h"
#include "envs/plugin.h"
#include "runfiles/ckpt.h"
#include "common/crash_note.h"
#include "rl/finite.h"
#include "rl/norm.h"
#include "rl/config.h"
#include "runfiles/metrics.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "rl/rl.h"
#include "tensor/ops.h"

#define PROG "tributary-eval"
#define TRIB_STR_(x) #x
#define TRIB_STR(x) TRIB_STR_(x)

static const char about[] =
    "Usage: " PROG " [options] POLICY|LOGDIR\n"
    "Runs a trained policy for N episodes and prints the mean +- std of the episode\n"
    "return and length. POLICY is the policy.safetensors that tributary-train --logdir\n"
    "writes, or one of its checkpoints (LOGDIR/checkpoints/ckpt-*.trib), or the run's\n"
    "directory LOGDIR itself (its policy.safetensors, else its newest checkpoint).\n"
    "The observation statistics a policy file records (a run that normalised its\n"
    "observations) are applied, frozen; continuous actions are clipped to the env's box.\n"
    "LOGDIR/policy_best.safetensors (tributary-train --eval-every's best policy) records\n"
    "its evaluation: with --seed and --episodes set to its metadata's eval_seed and\n"
    "eval_episodes, this prints its eval_return again.\n"    "A plug-in env is loaded only when --env names it (the file records its\n"
    "absolute path and shows it); it is opened with the --env-arg arguments the\n"
    "file records (a run's own), unless --env-arg is given.\n"
    "Episodes run " TRIB_STR(AGENT_EVAL_MAX_ENVS) " envs at a time at most (episode i's env seeded as env i of\n"
    "all of them). An episode ends at the env's max_episode_steps; an env that\n"
    "declares none (0) has its episodes cut at " TRIB_STR(AGENT_EVAL_MAX_STEPS) " steps.\n"
    "Exit status: 0, 1 when the policy cannot be loaded or does not fit the env, 2 bad usage.\n\n";

/* The command line. */
struct eval_args {
    const char *env, *path;
    struct rl_config env_args;      /* only its env_arg: --env-arg */
    long episodes;
    unsigned long long seed;
    bool sample, json;
};

static int set_env(void *u, const char *v)
{
    if (strlen(v) >= sizeof((struct rl_config *)0)->env)   /* as tributary-train says it */
        return argv_set_error("--env is too long (%zu bytes, at most %zu)", strlen(v), sizeof((struct rl_config *)0)->env - 1);
    ((struct eval_args *)u)->env = v;
    return 0;
}

static int set_env_arg(void *u, const char *v)
{
    return rl_config_add_env_arg(&((struct eval_args *)u)->env_args, v) == 0 ? 0 : argv_set_error("%s", rl_last_error());
}

static int set_episodes(void *u, const char *v)
{
    if (argv_long("episodes", v, 1, 100000, &((struct eval_args *)u)->episodes) == 0) return 0;
    return argv_set_error("--episodes must be an integer in 1..100000, not '%s'", v);
}

static int set_seed(void *u, const char *v)
{
    char *end = NULL;
    errno = 0;
    ((struct eval_args *)u)->seed = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') return argv_set_error("--seed must be a non-negative integer, not '%s'", v);
    return 0;
}

static int set_path(void *u, const char *v)
{
    struct eval_args *a = u;
    if (a->path) return argv_set_error("give one POLICY file");
    a->path = v;
    return 0;
}

/* The env to run: --env when given; else the one the file records, when
 * it is a built-in id. A file never chooses a plug-in (code) to load: a
 * recorded path is shown, and loaded only when --env names it. Its
 * arguments: the command line's --env-arg when given, else the ones the
 * file records (saved: a run's env_arg lines; none for a built-in).
 * Opens it into spec and plugin; -1 with rl_last_error(). */
static int open_env(const char *path, const char *recorded, const char *env_arg, const struct rl_config *cli,
                    const char *saved, const struct env_spec **spec, struct env_plugin **plugin)
{
    *plugin = NULL;
    if (!env_arg && !env_lookup(recorded))
        return rl_set_error("%s was trained on the env '%s', which is not a built-in: a policy file does not "
                            "choose code to run; to load that plug-in, pass --env %s", path, recorded, recorded);
    const char *name = env_arg ? env_arg : recorded;
    static struct rl_config own;   /* the file's arguments, each checked as --env-arg checks one */
    own.env_arg[0] = '\0';
    bool from_file = !cli->env_arg[0] && saved && saved[0] && !env_lookup(name);
    for (const char *line = saved; from_file && *line;) {
        char kv[sizeof own.env_arg];
        size_t n = strcspn(line, "\n");
        snprintf(kv, sizeof kv, "%.*s", (int)n, line);
        if (rl_config_add_env_arg(&own, kv) != 0)
            return rl_set_error("%s: the env arguments it records: %s", path, rl_last_error());
        line += n + (line[n] == '\n');
    }
    struct rl_env_args ea;
    rl_config_env_args(from_file ? &own : cli, &ea);
    if ((*spec = env_open_args(name, &ea.args, plugin))) return 0;
    if (!from_file) return rl_set_error("%s", env_last_error());
    char shown[sizeof own.env_arg];
    snprintf(shown, sizeof shown, "%s", own.env_arg);
    for (char *c = shown; *c; c++)
        if (*c == '\n') *c = ' ';
    return rl_set_error("%s (opened with the arguments %s records: %s; a relative path in one is taken from the "
                        "current directory; --env-arg replaces them)", env_last_error(), path, shown);
}

/* The actor of a checkpoint (ckpt-*.trib): the architecture from its
 * config and the env's spaces, the parameters from its "policy" section
 * (the dropout RNG, then the actor's parameters, then the critic's),
 * every size checked against the section before anything is built. */
/* The observation statistics a checkpoint of a normalising run holds
 * (section "norm", rl/norm.h's bytes), as a policy file records them, into
 * *out (its own arrays; none when the run did not normalise its
 * observations). 0, or -1 with rl_last_error(). */
static int checkpoint_norm(const char *path, struct ckpt *c, const struct rl_config *cfg, int obs_dim,
                           struct policy_norm *out)
{
    if (!cfg->norm_obs && !cfg->norm_reward) return 0;
    size_t len = 0;
    const void *b = ckpt_get(c, "norm", &len);
    if (!b) return rl_set_error("%s: a run that normalised, but no section 'norm'", path);
    struct rl_norm_stats s;
    if (rl_norm_stats_init(&s, cfg->norm_obs ? obs_dim : 0, cfg->norm_reward, cfg->clip_obs, cfg->clip_reward) != 0)
        return -1;
    int rc = rl_norm_stats_load(&s, b, len);
    if (rc != 0) rl_set_error("%s: %s", path, rl_last_error());
    if (rc == 0 && s.obs.dim > 0) {   /* the view, with arrays of its own (policy_extras_free frees them) */
        size_t bytes = (size_t)s.obs.dim * sizeof(double);
        *out = rl_norm_stats_view(&s);
        out->mean = memcpy(trib_xmalloc(bytes), s.obs.mean, bytes);
        out->var = memcpy(trib_xmalloc(bytes), s.obs.var, bytes);
    }
    rl_norm_stats_free(&s);
    return rc;
}

static int load_checkpoint(const char *path, const char *env_arg, const struct rl_config *args, struct policy_arch *arch,
                           char *env, size_t cap, struct nn_module **actor, const struct env_spec **spec,
                           struct env_plugin **plugin, struct policy_norm *norm)
{
    *plugin = NULL;
    struct ckpt *c = ckpt_load(path);
    if (!c) return rl_set_error("%s", runfiles_last_error());
    struct rl_config cfg;
    size_t len = 0, plen = 0;
    const char *text = ckpt_get(c, "config", &len);
    const unsigned char *pol = text ? ckpt_get(c, "policy", &plen) : NULL;
    int rc = -1;
    if (!pol || rl_config_from_json(text, len, &cfg) != 0) {
        rl_set_error("%s: %s", path, pol ? rl_last_error() : runfiles_last_error());
        goto out;
    }
    snprintf(env, cap, "%s", cfg.env);
    /* the env's arguments: the command line's, else the run's */
    if (open_env(path, cfg.env, env_arg, args, cfg.env_arg, spec, plugin) != 0) goto out;
    char what[600];
    snprintf(what, sizeof what, "%s on %s", path, (*spec)->id);
    if (rl_arch_for_env(&cfg, *spec, what, arch) != 0) goto out;
    if (policy_arch_check(arch, what, plen < sizeof(uint64_t) ? 0 : plen - sizeof(uint64_t)) != 0) {
        rl_set_error("%s", runfiles_last_error());
        goto out;
    }
    size_t need = sizeof(uint64_t) + (size_t)policy_arch_param_count(arch) * sizeof(float);
    if (plen != need) {
        rl_set_error("%s: the policy section has %zu bytes, the architecture on %s needs %zu", path, plen,
                     (*spec)->id, need);
        goto out;
    }
    if (policy_arch_build(arch, 0, actor, NULL) != 0) {
        rl_set_error("%s: %s", path, tensor_last_error());
        goto out;
    }
    const unsigned char *q = pol + sizeof(uint64_t);
    for (int i = 0; i < (*actor)->n_params; i++) {
        size_t bytes = (size_t)(*actor)->params[i]->numel * sizeof(float);
        memcpy(tensor_data((*actor)->params[i]), q, bytes);
        q += bytes;
    }
    char names[2 * (RL_MAX_HIDDEN + 1) * 2 + 1][64];
    policy_arch_param_names(arch, (int)(sizeof names / sizeof names[0]), names);
    const char *np[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) np[i] = names[i];
    if (rl_check_params((*actor)->n_params, (*actor)->params, np) != 0) {   /* a policy that is not finite */
        rl_set_error("%s: policy: %s", path, rl_last_error());
        nn_module_free(*actor);
        *actor = NULL;
        goto out;
    }
    rc = checkpoint_norm(path, c, &cfg, (*spec)->obs.dim, norm);
out:
    if (rc != 0) {
        nn_module_free(*actor);
        *actor = NULL;
        env_plugin_close(*plugin);
        *plugin = NULL;
    }
    ckpt_free(c);
    return rc;
}

/* DIR/policy.safetensors when the run wrote one, else the newest
 * DIR/checkpoints/ckpt-*.trib (their names sort by update). 0 or -1. */
static int pick_run_policy(const char *dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s/policy.safetensors", dir);
    struct stat st;
    if (lstat(out, &st) == 0) return 0;   /* checked by metrics_dir_check */
    char sub[3000], best[512] = "";
    snprintf(sub, sizeof sub, "%s/checkpoints", dir);
    DIR *d = opendir(sub);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "ckpt-", 5) == 0 && n > 5 && strcmp(e->d_name + n - 5, ".trib") == 0 &&
            strcmp(e->d_name, best) > 0 && n < sizeof best)
            snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    if (!best[0]) return -1;
    snprintf(out, cap, "%s/%s", sub, best);
    return 0;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* The command line into a. -1 to go on, else the exit status. */
static int parse(struct eval_args *a, int argc, char **argv)
{
    const struct argv_opt opts[] = {
        { .name = "env", .arg = "ID|PATH.so", .set = set_env, .user = a,
          .help = "the env (default: the one the policy was trained on, when it is\n"
                  "a built-in; a plug-in is loaded only when --env names it)" },
        { .name = "env-arg", .arg = "K=V", .set = set_env_arg, .user = a,
          .help = "an argument of a plug-in env (repeatable; default: the ones the\n"
                  "policy file or checkpoint records, the run's own; a relative path\n"
                  "in one is the plug-in's to resolve, from the current directory)" },
        { .name = "episodes", .arg = "N", .set = set_episodes, .user = a,
          .help = "episodes (default 10); each runs in its own env, " TRIB_STR(AGENT_EVAL_MAX_ENVS) " at once" },
        { .name = "sample", .set = argv_set_flag, .user = &a->sample,
          .help = "sample actions from the policy (default: greedy, the most\nlikely action or the Gaussian's mean)" },
        { .name = "seed", .arg = "S", .set = set_seed, .user = a, .help = "seed of the envs and the sampling (default 1)" },
        { .name = "json", .set = argv_set_flag, .user = &a->json, .help = "print one JSON object instead of text" },
        { .name = NULL, .set = set_path, .user = a },
    };
    int rc = argv_parse(PROG, about, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (!a->path) {
        fprintf(stderr, PROG ": give one POLICY file (see " PROG " --help)\n");
        return 2;
    }
    struct stat st;
    size_t elen = a->env ? strlen(a->env) : 0;
    bool plugin_path = a->env && (strchr(a->env, '/') || (elen > 3 && strcmp(a->env + elen - 3, ".so") == 0)) &&
                       !env_lookup(a->env);
    /* a plug-in without --env-arg may need the arguments the file records
     * to load at all (model=PATH.xml): it must be there, and an entry
     * point that refuses to load without them is opened again, with them,
     * once the file is read (load) */
    bool deferrable = plugin_path && !a->env_args.env_arg[0];
    errno = 0;
    if (deferrable && !(stat(a->env, &st) == 0 && S_ISREG(st.st_mode))) {
        fprintf(stderr, PROG ": --env: plugin %s: %s (see " PROG " --help)\n", a->env,
                errno ? strerror(errno) : "not a regular file");
        return 2;
    }
    if (a->env) {   /* an unknown --env is bad usage */
        struct env_plugin *probe = NULL;
        struct rl_env_args ea;
        rl_config_env_args(&a->env_args, &ea);
        /* a plug-in's code runs here: a crash in it says so, naming it */
        crash_note_begin(PROG, "checking --env %s (its plug-in's entry point and unload run there)", a->env);
        if (!env_open_args(a->env, &ea.args, &probe)) {
            crash_note_end();
            if (deferrable) return -1;
            fprintf(stderr, PROG ": --env: %s (see " PROG " --help)\n", env_last_error());
            return 2;
        }
        env_plugin_close(probe);
        crash_note_end();
    }
    return -1;
}

/* What eval loads: the actor, its architecture, what the file records
 * beside them (its statistics, applied frozen; its action space), the env. */
struct loaded {
    struct policy_arch arch;
    struct nn_module *actor;
    struct policy_extras extras;
    struct env_plugin *plugin;
    const struct env_spec *spec;
    char path[4096];
};

/* a->path, a run directory's policy or checkpoint in its stead, into l->path. 0, or -1 after printing why. */
static int resolve_path(const struct eval_args *a, struct loaded *l)
{
    struct stat st;
    snprintf(l->path, sizeof l->path, "%s", a->path);
    if (stat(a->path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    /* a run directory: its final policy, else its newest checkpoint;
     * its files as what they are (no link followed, no FIFO waited on) */
    if (metrics_dir_check(a->path) != 0) {
        fprintf(stderr, PROG ": %s\n", runfiles_last_error());
        return -1;
    }
    if (pick_run_policy(a->path, l->path, sizeof l->path) != 0) {
        fprintf(stderr, PROG ": %s: a directory without policy.safetensors or checkpoints/ckpt-*.trib\n", a->path);
        return -1;
    }
    return 0;
}

/* The action bounds the file records (when it records them) are the env's:
 * the policy learnt with its actions clipped to them, and eval clips to
 * the env's. 0, or -1 after printing why. */
static int bounds_fit(const struct loaded *l)
{
    const struct env_space *f = &l->extras.act, *e = &l->spec->act;
    for (int i = 0; l->extras.has_act && f->kind == SPACE_BOX && i < f->dim; i++)
        if (f->low[i] != e->low[i] || f->high[i] != e->high[i]) {
            fprintf(stderr, PROG ": %s does not fit %s: the policy's actions were clipped to [%g, %g] at dim %d, the "
                            "env's box is [%g, %g]\n", l->path, l->spec->id, f->low[i], f->high[i], i, e->low[i],
                    e->high[i]);
            return -1;
        }
    return 0;
}

/* The policy and its env, checked to fit each other. 0, or -1 after printing why. */
static int load(const struct eval_args *a, struct loaded *l)
{
    if (resolve_path(a, l) != 0) return -1;
    char trained_env[512];
    const char *path = l->path;
    size_t plen = strlen(path);
    bool is_ckpt = plen > 5 && strcmp(path + plen - 5, ".trib") == 0;
    /* a plug-in's entry point runs here (with the file's arguments): a crash in it says so */
    if (a->env) crash_note_begin(PROG, "opening --env %s (its plug-in's entry point runs there)", a->env);
    int lrc = is_ckpt ? load_checkpoint(path, a->env, &a->env_args, &l->arch, trained_env, sizeof trained_env,
                                        &l->actor, &l->spec, &l->plugin, &l->extras.norm)
                      : policy_file_read(path, &l->arch, trained_env, sizeof trained_env, &l->actor, NULL,
                                         &l->extras);
    if (lrc != 0 && !is_ckpt) rl_set_error("%s", runfiles_last_error());
    if (lrc == 0 && !is_ckpt &&
        open_env(path, trained_env, a->env, &a->env_args, l->extras.env_args, &l->spec, &l->plugin) != 0) {
        nn_module_free(l->actor);
        l->actor = NULL;
        lrc = -1;
    }
    if (a->env) crash_note_end();
    if (lrc != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return -1;
    }
    l->actor->training = false;
    const struct env_spec *spec = l->spec;
    bool discrete = spec->act.kind == SPACE_DISCRETE;
    int A = discrete ? spec->act.n : spec->act.dim;
    if (spec->obs.dim == l->arch.obs_dim && discrete != l->arch.gaussian && A == l->arch.act_dim)
        return bounds_fit(l);
    fprintf(stderr, PROG ": %s does not fit %s: the policy takes %d observations to %d %s actions, the env has %d "
                    "observations and %d %s actions\n", path, spec->id, l->arch.obs_dim, l->arch.act_dim,
            l->arch.gaussian ? "continuous" : "discrete", spec->obs.dim, A, discrete ? "discrete" : "continuous");
    return -1;
}

static void report(const struct agent_eval_result *r, const struct loaded *l, const struct eval_args *a)
{
    int B = r->episodes;
    double m = r->return_mean, s = r->return_std, ml = r->length_mean, sl = r->length_std;
    const char *how = a->sample ? "sampled" : "greedy";
    if (!a->json) {
        printf("%s on %s, %d episodes, %s actions: return %.2f +- %.2f, length %.1f +- %.1f\n", l->path, l->spec->id,
               B, how, m, s, ml, sl);
        return;
    }
    printf("{\"policy\":");
    json_str(l->path);
    printf(",\"env\":");
    json_str(l->spec->id);
    printf(",\"episodes\":%d,\"actions\":\"%s\",\"return_mean\":%.6g,\"return_std\":%.6g,"
           "\"length_mean\":%.6g,\"length_std\":%.6g}\n", B, how, m, s, ml, sl);
}

/* The loaded actor's forward, the file's observation statistics applied
 * first (frozen, as the file records them: policy_norm_apply). */
static int file_forward(void *user, struct tensor *obs, struct rl_policy_out *out)
{
    const struct loaded *l = user;
    policy_norm_apply(&l->extras.norm, tensor_data(obs), (int)obs->shape[0]);
    return agent_eval_actor_forward(l->actor, obs, out);
}

int main(int argc, char **argv)
{
    static struct eval_args a = { .episodes = 10, .seed = 1 };
    static struct loaded l;
    struct agent_eval_result r;
    int rc = parse(&a, argc, argv);
    if (rc >= 0) return rc;
    rc = load(&a, &l);
    if (rc == 0) {
        struct agent_eval_opts o = { .spec = l.spec, .forward = file_forward, .user = &l,
                                     .episodes = (int)a.episodes, .seed = a.seed, .sample = a.sample };
        rc = agent_evaluate(&o, &r);
        if (rc != 0) fprintf(stderr, PROG ": %s\n", rl_last_error());
    }
    rc = rc == 0 ? 0 : 1;
    if (rc == 0) report(&r, &l, &a);
    env_plugin_close(l.plugin);
    nn_module_free(l.actor);
    policy_extras_free(&l.extras);
    return rc;
}
