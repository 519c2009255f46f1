/* tributary-eval: loads a trained policy (.safetensors from --logdir, or a
 * checkpoint) and reports its mean return over N episodes, each env running
 * exactly one episode (so short episodes are not over-counted). */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "envs/plugin.h"
#include "envs/vec_env.h"
#include "rl/finite.h"
#include "rl/config.h"
#include "rl/rl.h"
#include "rl/sample.h"
#include "runfiles/ckpt.h"
#include "runfiles/metrics.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "tensor/autograd.h"
#include "tensor/ops.h"

#define PROG "tributary-eval"

static void usage(FILE *f)
{
    fprintf(f, "Usage: " PROG " [options] POLICY|LOGDIR\n"
               "Runs a trained policy for N episodes and prints the mean +- std of the episode\n"
               "return and length. POLICY is the policy.safetensors that tributary-train --logdir\n"
               "writes, or one of its checkpoints (LOGDIR/checkpoints/ckpt-*.trib), or the run's\n"
               "directory LOGDIR itself (its policy.safetensors, else its newest checkpoint).\n"
               "\n"
               "  --env ID|PATH.so   the env (default: the one the policy was trained on, when it is\n"
               "                     a built-in; a plug-in is loaded only when --env names it)\n"
               "  --env-arg K=V      an argument of a plug-in env (repeatable; default: a checkpoint's own)\n"
               "  --episodes N       episodes (default 10); each runs in its own env, in parallel\n"
               "  --sample           sample actions from the policy (default: greedy, the most\n"
               "                     likely action or the Gaussian's mean)\n"
               "  --seed S           seed of the envs and the sampling (default 1)\n"
               "  --json             print one JSON object instead of text\n"
               "  --help             this text\n"
               "\n"
               "Exit status: 0, 1 when the policy cannot be loaded or does not fit the env, 2 bad usage.\n");
}

static int bad(const char *what, const char *v)
{
    fprintf(stderr, PROG ": %s, not '%s' (see " PROG " --help)\n", what, v);
    return 2;
}

/* The env to run: --env when given; else the one the file records, when
 * it is a built-in id. A file never chooses a plug-in (code) to load: a
 * recorded path is shown, and loaded only when --env names it. Opens it
 * into spec and plugin; -1 with rl_last_error(). */
static int open_env(const char *path, const char *recorded, const char *env_arg, const struct rl_config *args,
                    const struct env_spec **spec, struct env_plugin **plugin)
{
    *plugin = NULL;
    if (!env_arg && !env_lookup(recorded))
        return rl_set_error("%s was trained on the env '%s', which is not a built-in: a policy file does not "
                            "choose code to run; to load that plug-in, pass --env %s", path, recorded, recorded);
    struct rl_env_args ea;
    rl_config_env_args(args, &ea);
    if (!(*spec = env_open_args(env_arg ? env_arg : recorded, &ea.args, plugin)))
        return rl_set_error("%s", env_last_error());
    return 0;
}

/* The actor of a checkpoint (ckpt-*.trib): the architecture from its
 * config and the env's spaces, the parameters from its "policy" section
 * (the dropout RNG, then the actor's parameters, then the critic's),
 * every size checked against the section before anything is built. */
static int load_checkpoint(const char *path, const char *env_arg, const struct rl_config *args, struct policy_arch *arch,
                           char *env, size_t cap, struct nn_module **actor, const struct env_spec **spec,
                           struct env_plugin **plugin)
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
    if (open_env(path, cfg.env, env_arg, args->env_args[0] ? args : &cfg, spec, plugin) != 0) goto out;
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
    rc = 0;
out:
    if (rc != 0) {
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

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "env", required_argument, NULL, 'e' }, { "episodes", required_argument, NULL, 'n' },
        { "sample", no_argument, NULL, 's' },    { "seed", required_argument, NULL, 'S' },
        { "json", no_argument, NULL, 'j' },      { "help", no_argument, NULL, 'h' },
        { "env-arg", required_argument, NULL, 'E' },
        { NULL, 0, NULL, 0 },
    };
    const char *env_arg = NULL;
    struct rl_config env_args = { 0 };   /* only its env_args: --env-arg */
    long episodes = 10;
    unsigned long long seed = 1;
    bool sample = false, json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (c) {
        case 'e': env_arg = optarg; break;
        case 'E':
            if (rl_config_add_env_arg(&env_args, optarg) != 0) {
                fprintf(stderr, PROG ": %s (see " PROG " --help)\n", rl_last_error());
                return 2;
            }
            break;
        case 'n':
            episodes = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || episodes < 1 || episodes > 100000)
                return bad("--episodes must be an integer in 1..100000", optarg);
            break;
        case 's': sample = true; break;
        case 'S':
            seed = strtoull(optarg, &end, 10);
            if (errno || end == optarg || *end || optarg[0] == '-') return bad("--seed must be a non-negative integer", optarg);
            break;
        case 'j': json = true; break;
        case 'h': usage(stdout); return 0;
        case ':': return bad("option needs a value", argv[optind - 1]);
        default: return bad("unknown option", argv[optind - 1]);
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, PROG ": give one POLICY file (see " PROG " --help)\n");
        return 2;
    }
    if (env_arg && strlen(env_arg) >= sizeof((struct rl_config *)0)->env) {   /* as tributary-train says it */
        fprintf(stderr, PROG ": --env is too long (%zu bytes, at most %zu) (see " PROG " --help)\n", strlen(env_arg),
                sizeof((struct rl_config *)0)->env - 1);
        return 2;
    }
    if (env_arg) {   /* an unknown --env is bad usage */
        struct env_plugin *probe = NULL;
        struct rl_env_args ea;
        rl_config_env_args(&env_args, &ea);
        if (!env_open_args(env_arg, &ea.args, &probe)) {
            fprintf(stderr, PROG ": --env: %s (see " PROG " --help)\n", env_last_error());
            return 2;
        }
        env_plugin_close(probe);
    }
    const char *path = argv[optind];
    char picked[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* a run directory: its final policy, else its newest checkpoint;
         * its files as what they are (no link followed, no FIFO waited on) */
        if (metrics_dir_check(path) != 0) {
            fprintf(stderr, PROG ": %s\n", runfiles_last_error());
            return 1;
        }
        if (pick_run_policy(path, picked, sizeof picked) != 0) {
            fprintf(stderr, PROG ": %s: a directory without policy.safetensors or checkpoints/ckpt-*.trib\n", path);
            return 1;
        }
        path = picked;
    }
    struct policy_arch arch;
    char trained_env[512];
    struct nn_module *actor = NULL;
    size_t plen = strlen(path);
    bool is_ckpt = plen > 5 && strcmp(path + plen - 5, ".trib") == 0;
    struct env_plugin *plugin = NULL;
    const struct env_spec *spec = NULL;
    int lrc = is_ckpt ? load_checkpoint(path, env_arg, &env_args, &arch, trained_env, sizeof trained_env, &actor, &spec,
                                        &plugin)
                      : policy_file_load(path, &arch, trained_env, sizeof trained_env, &actor, NULL);
    if (lrc != 0 && !is_ckpt) rl_set_error("%s", runfiles_last_error());
    if (lrc == 0 && !is_ckpt && open_env(path, trained_env, env_arg, &env_args, &spec, &plugin) != 0) {
        nn_module_free(actor);
        lrc = -1;
    }
    if (lrc != 0) {
        fprintf(stderr, PROG ": %s\n", rl_last_error());
        return 1;
    }
    actor->training = false;
    bool discrete = spec->act.kind == SPACE_DISCRETE;
    int A = discrete ? spec->act.n : spec->act.dim;
    if (spec->obs.dim != arch.obs_dim || discrete == arch.gaussian || A != arch.act_dim) {
        fprintf(stderr, PROG ": %s does not fit %s: the policy takes %d observations to %d %s actions, the env has %d "
                        "observations and %d %s actions\n", path, spec->id, arch.obs_dim, arch.act_dim,
                arch.gaussian ? "continuous" : "discrete", spec->obs.dim, A, discrete ? "discrete" : "continuous");
        nn_module_free(actor);
        env_plugin_close(plugin);
        return 1;
    }
    int B = (int)episodes, D = spec->obs.dim;
    struct vec_env *v = vec_env_new(spec, B, seed, 0);
    float *obs = calloc((size_t)B * D, sizeof *obs), *rew = calloc((size_t)B, sizeof *rew);
    float *act_f = calloc((size_t)B * A, sizeof *act_f);
    int *act_i = calloc((size_t)B, sizeof *act_i);
    bool *term = calloc((size_t)B, sizeof *term), *trunc = calloc((size_t)B, sizeof *trunc), *done = calloc((size_t)B, 1);
    double *ret = calloc((size_t)B, sizeof *ret);
    int *len = calloc((size_t)B, sizeof *len);
    if (!v || !obs || !rew || !act_f || !act_i || !term || !trunc || !done || !ret || !len) {
        fprintf(stderr, PROG ": out of memory for %d envs\n", B);
        return 1;
    }
    uint64_t rng = seed ^ 0x5eed5eedull;
    autograd_set_enabled(false);
    vec_env_reset(v, obs);
    int finished = 0, rc = 0;
    int64_t shape[2] = { B, D };
    while (finished < B) {
        struct tensor *x = tensor_from_f32(2, shape, obs);
        struct tensor *out[NN_MAX_IO] = { 0 };
        int n_out = 0;
        if (!x || nn_forward(actor, 1, &x, &n_out, out) != 0) {
            fprintf(stderr, PROG ": forward: %s\n", tensor_last_error());
            tensor_free(x);
            rc = 1;
            break;
        }
        tensor_free(x);
        if (discrete) {
            rl_sample_categorical(B, A, tensor_data(out[0]), &rng, !sample, act_i, NULL);
        } else {
            rl_sample_gaussian(B, A, tensor_data(out[0]), tensor_data(out[1]), &rng, !sample, act_f, NULL);
            for (int i = 0; i < B * A; i++)
                act_f[i] = (float)fmin(fmax(act_f[i], spec->act.low[i % A]), spec->act.high[i % A]);
        }
        for (int i = 0; i < n_out; i++) tensor_free(out[i]);
        if (vec_env_step(v, discrete ? (const void *)act_i : (const void *)act_f, obs, rew, term, trunc, NULL) != 0) {
            fprintf(stderr, PROG ": %s\n", env_last_error());
            rc = 1;
            break;
        }
        for (int b = 0; b < B; b++) {
            if (done[b]) continue;
            ret[b] += rew[b];
            len[b]++;
            if (term[b] || trunc[b]) {
                done[b] = true;
                finished++;
            }
        }
    }
    if (rc == 0) {
        double m = 0, s = 0, ml = 0, sl = 0;
        for (int b = 0; b < B; b++) {
            m += ret[b];
            ml += len[b];
        }
        m /= B;
        ml /= B;
        for (int b = 0; b < B; b++) {
            s += (ret[b] - m) * (ret[b] - m);
            sl += (len[b] - ml) * (len[b] - ml);
        }
        s = sqrt(s / B);
        sl = sqrt(sl / B);
        if (json) {
            printf("{\"policy\":");
            json_str(path);
            printf(",\"env\":");
            json_str(spec->id);
            printf(",\"episodes\":%d,\"actions\":\"%s\",\"return_mean\":%.6g,\"return_std\":%.6g,"
                   "\"length_mean\":%.6g,\"length_std\":%.6g}\n",
                   B, sample ? "sampled" : "greedy", m, s, ml, sl);
        } else {
            printf("%s on %s, %d episodes, %s actions: return %.2f +- %.2f, length %.1f +- %.1f\n", path, spec->id, B,
                   sample ? "sampled" : "greedy", m, s, ml, sl);
        }
    }
    free(obs); free(rew); free(act_f); free(act_i); free(term); free(trunc); free(done); free(ret); free(len);
    vec_env_free(v);
    env_plugin_close(plugin);
    nn_module_free(actor);
    return rc;
}
