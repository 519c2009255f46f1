/* The run configuration: presets, a table-driven command line, --config
 * JSON and config.json. The checks are in config_check.c, --env-arg in
 * config_env_args.c, the wire form in config_wire.c. */
#define _GNU_SOURCE
#include "rl/config.h"
#include "rl/config_internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <limits.h>
#include <unistd.h>

#include "common/check.h"
#include "envs/env.h"
#include "envs/plugin.h"
#include "optim/optim.h"
#include "rl/rl.h"
#include "runfiles/metrics.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"

const char *const rl_preset_names[] = { "ppo-fast", "ppo", "a2c", "pendulum", "pytorch-rl-example", NULL };

const char *rl_algo_name(enum rl_algo a)
{
    return a == RL_ALGO_REINFORCE ? "reinforce" : a == RL_ALGO_A2C ? "a2c" : "ppo";
}

const char *rl_mode_name(enum rl_mode m) { return m == RL_MODE_ASYNC ? "async" : "sync"; }

void rl_config_base(struct rl_config *c)
{
    *c = (struct rl_config){ .algo = RL_ALGO_PPO, .mode = RL_MODE_SYNC, .observers = 1, .envs_per_observer = 4,
                             .steps_per_rollout = 128, .seed = 1, .n_hidden = 2, .hidden = { 64, 64 },
                             .tanh = true, .init_log_std = 0.0, .optimizer = OPTIM_ADAM, .opt_eps = 1e-5,
                             .lr = 2.5e-4, .gamma = 0.99, .gae_lambda = 0.95, .anneal_lr = true,
                             .minibatches = 4, .epochs = 4, .clip = 0.2, .ent_coef = 0.01, .vf_coef = 0.5,
                             .max_grad_norm = 0.5, .norm_adv = true, .clip_vloss = true, .reward_scale = 1.0,
                             .rho_bar = 1.0, .c_bar = 1.0,
                             .max_batch_rows = 4096, .max_wait_us = 2000, .max_steps = 500000,
                             .target = NAN, .log_every_s = 2.0, .heartbeat_timeout_ms = 15000,
                             .step_timeout_s = RL_DEFAULT_STEP_TIMEOUT_S };
    snprintf(c->env, sizeof c->env, "CartPole-v1");
}

int rl_config_preset(struct rl_config *c, const char *name)
{
    rl_config_base(c);
    if (strcmp(name, "ppo") == 0) {
        /* CleanRL ppo.py's defaults for CartPole-v1 (one observer = its one process) */
    } else if (strcmp(name, "ppo-fast") == 0) {
        /* 2048 samples per rollout in 8 updates: per-update RPC latency, not
         * arithmetic, is the cost, so fewer, larger minibatches. lr 5e-3
         * (from 2.5e-3) solves in ~1.5x fewer steps: median time to solve
         * 2.75 s sync and 1.9 s async over 5 seeds, where 1e-2 is faster in
         * sync (2.4 s) but slower in async (3.3 s: its policy lag) and 4
         * minibatches is faster in sync (2.5 s) but not in async (2.35 s) */
        c->observers = 4;
        c->envs_per_observer = 32;
        c->steps_per_rollout = 16;
        c->lr = 5e-3;
        c->epochs = 4;
        c->minibatches = 2;
    } else if (strcmp(name, "a2c") == 0) {
        /* Stable-Baselines3's A2C defaults: 5-step returns, RMSprop */
        c->algo = RL_ALGO_A2C;
        c->observers = 2;
        c->envs_per_observer = 8;
        c->steps_per_rollout = 5;
        c->optimizer = OPTIM_RMSPROP;
        c->lr = 7e-4;
        c->gae_lambda = 1.0;
        c->anneal_lr = false;
        c->minibatches = 1;
        c->epochs = 1;
        c->ent_coef = 0.0;
        c->norm_adv = false;
        c->clip_vloss = false;
    } else if (strcmp(name, "pendulum") == 0) {
        c->observers = 2;
        c->envs_per_observer = 4;
        c->steps_per_rollout = 256;
        snprintf(c->env, sizeof c->env, "Pendulum-v1");
        c->lr = 1e-3;
        c->gamma = 0.9;
        c->minibatches = 8;
        c->epochs = 10;
        c->ent_coef = 0.0;
        c->reward_scale = 0.1;
        c->max_steps = 200000;
        c->target = -200;
    } else if (strcmp(name, "pytorch-rl-example") == 0) {
        /* examples/distributed/rpc/rl: REINFORCE, one env per observer,
         * Linear 4-128, dropout 0.6, ReLU, Linear 128-2, Adam 1e-2, gamma 0.99 */
        c->algo = RL_ALGO_REINFORCE;
        c->observers = 4;
        c->envs_per_observer = 1;
        c->n_hidden = 1;
        c->hidden[0] = 128;
        c->tanh = false;
        c->dropout = 0.6;
        c->opt_eps = 1e-8;
        c->lr = 1e-2;
        c->anneal_lr = false;
        c->ent_coef = 0;
        c->max_grad_norm = 0;
        c->max_steps = 2000000;
        c->running_reward = true;
    } else {
        return rl_set_error("unknown preset '%s' (known: ppo-fast, ppo, a2c, pendulum, pytorch-rl-example)", name);
    }
    snprintf(c->preset, sizeof c->preset, "%s", name);
    return 0;
}

/* ---- the command line ------------------------------------------------------ */

enum opt_type { T_INT, T_I64, T_U64, T_DBL, T_BOOL, T_STR, T_ALGO, T_MODE, T_HIDDEN, T_ACT, T_DEVICE, T_OPTIM, T_ENVARG };

struct flag {
    const char *name;
    enum opt_type type;
    size_t off;
    const char *help;
};

#define F(n, t, field, h) { n, t, offsetof(struct rl_config, field), h }
static const struct flag flags[] = {
    F("algo", T_ALGO, algo, "reinforce | a2c | ppo"),
    F("mode", T_MODE, mode, "sync (the agent drives; one update over every observer's samples,\n"
                            "all from one policy version) | async (each observer updates on its own)"),
    F("env", T_STR, env, "a built-in id (CartPole-v1, Acrobot-v1, MountainCar-v0, Pendulum-v1, and\n"
                         "with MuJoCo the v4 suite: Hopper-v4, ...; trib-env --list names them)\n"
                         "or the path of a plug-in .so (envs/README.md)"),
    F("env-arg", T_ENVARG, env_args, "KEY=VALUE: an argument of a plug-in env (repeatable), handed to its\n"
                                     "entry point on the agent and on every observer, and saved with the run"),
    F("observers", T_INT, observers, "observer processes (1..64)"),
    F("envs-per-observer", T_INT, envs_per_observer, "B: envs each observer steps in one vec_env"),
    F("steps-per-rollout", T_INT, steps_per_rollout, "T: steps of each env per update (A2C: n of n-step)"),
    F("seed", T_U64, seed, "seed of the policy's initialisation, the envs and sampling"),
    F("hidden", T_HIDDEN, hidden, "hidden layer sizes, e.g. 64,64"),
    F("activation", T_ACT, tanh, "tanh | relu"),
    F("dropout", T_DBL, dropout, "dropout after each hidden layer (REINFORCE preset: 0.6)"),
    F("device", T_DEVICE, cuda, "cpu | cuda: where the agent keeps the policy (default: cuda when a\n"
                                "GPU is present and the binary has the CUDA backend)"),
    F("optimizer", T_OPTIM, optimizer, "adam | adamw | rmsprop | sgd"),
    F("lr", T_DBL, lr, "learning rate, in [1e-10, 1]"),
    F("anneal-lr", T_BOOL, anneal_lr, "decay the lr linearly to 0 over --max-steps (--no-anneal-lr)"),
    F("gamma", T_DBL, gamma, "discount"),
    F("gae-lambda", T_DBL, gae_lambda, "GAE lambda (1: n-step returns)"),
    F("minibatches", T_INT, minibatches, "minibatches per epoch (each observer splits its samples)"),
    F("epochs", T_INT, epochs, "epochs over each rollout (PPO)"),
    F("clip", T_DBL, clip, "PPO clip range (ratio and value)"),
    F("ent-coef", T_DBL, ent_coef, "entropy bonus coefficient, in [0, 10]"),
    F("vf-coef", T_DBL, vf_coef, "value loss coefficient, in [0, 10]"),
    F("max-grad-norm", T_DBL, max_grad_norm, "global gradient-norm clip (0: none)"),
    F("norm-adv", T_BOOL, norm_adv, "normalise advantages per minibatch (--no-norm-adv)"),
    F("clip-vloss", T_BOOL, clip_vloss, "clip the value loss as CleanRL (--no-clip-vloss)"),
    F("reward-scale", T_DBL, reward_scale, "rewards are multiplied by this for learning"),
    F("max-policy-lag", T_INT, max_policy_lag, "async: drop (and count) an update whose samples are more than this\n"
                                               "many policy versions behind (0: no limit; default: 32 x observers\n"
                                               "x epochs x minibatches, REINFORCE 32 x observers, at least 1000)"),
    F("vtrace", T_BOOL, vtrace, "async PPO/A2C: V-trace-corrected advantages and value targets\n"
                                "(IMPALA) from the policy at the update, not the one that acted"),
    F("rho-bar", T_DBL, rho_bar, "V-trace: truncation of the importance weights of the advantages"),
    F("c-bar", T_DBL, c_bar, "V-trace: truncation of the traces"),
    F("max-batch", T_INT, max_batch_rows, "the agent merges concurrent act calls up to this many rows"),
    F("max-wait-us", T_INT, max_wait_us, "... waiting at most this long for more calls"),
    F("max-steps", T_I64, max_steps, "stop (exit 1) after this many env steps of the whole run (0: no limit)"),
    F("max-seconds", T_DBL, max_seconds, "stop (exit 1) after this many seconds of this process, the wait for\n"
                                         "the observers included (0: no limit; a resumed run gets this many more)"),
    F("max-updates", T_I64, max_updates, "stop (exit 1) after this many optimizer updates (0: no limit)"),
    F("target", T_DBL, target, "solved (exit 0) when the mean return of the last 100 episodes\n"
                               "reaches this, for every algorithm (REINFORCE's running reward is\n"
                               "reported, not judged; default: the env's reward threshold)"),
    F("log-every", T_DBL, log_every_s, "seconds between progress lines"),
    F("heartbeat-timeout", T_INT, heartbeat_timeout_ms, "ms of silence after which a peer is dead"),
    F("step-timeout", T_DBL, step_timeout_s, "seconds an env step (or reset) may run on an observer before it gives\n"
                                             "up: it says so and exits, and the agent counts it lost (0: no limit)"),
    F("quiet", T_BOOL, quiet, "no progress lines (the summary line is still printed)"),
    F("logdir", T_STR, logdir, "write metrics.csv, metrics.jsonl, config.json, TensorBoard events\n"
                               "and, at the end, policy.safetensors into this directory (one run per\n"
                               "directory: one that holds a run is refused; see --resume, --overwrite)"),
    F("checkpoint-every", T_I64, checkpoint_every, "with --logdir: a checkpoint every N updates into LOGDIR/checkpoints\n"
                                                   "(the newest 3 kept; one is always written at the end, Ctrl-C too)"),
    F("resume", T_STR, resume, "continue the run whose --logdir is DIR from its newest valid checkpoint,\n"
                               "with every flag of that run (DIR/config.json); flags given here override\n"
                               "them (e.g. a larger --max-steps), but not the env, algorithm, mode,\n"
                               "observers, envs, steps per rollout or architecture"),
};
#undef F
#define N_FLAGS ((int)(sizeof flags / sizeof flags[0]))

/* CleanRL's names for flags that mean the same here (one observer being
 * CleanRL's one process). */
static const struct { const char *alias, *name; } aliases[] = {
    { "total-timesteps", "max-steps" }, { "num-envs", "envs-per-observer" }, { "num-steps", "steps-per-rollout" },
    { "learning-rate", "lr" },           { "num-minibatches", "minibatches" }, { "update-epochs", "epochs" },
    { "clip-coef", "clip" },             { "env-id", "env" },                  { NULL, NULL },
};

/* A flag's value in c, as the command line would give it. */
static void format_flag(const struct rl_config *c, const struct flag *fl, char *buf, size_t cap)
{
    const char *p = (const char *)c + fl->off;
    switch (fl->type) {
    case T_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case T_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); break;
    case T_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case T_DBL:
        if (isnan(*(const double *)p)) snprintf(buf, cap, "the env's threshold");
        else snprintf(buf, cap, "%g", *(const double *)p);
        break;
    case T_BOOL: snprintf(buf, cap, "%s", *(const bool *)p ? "on" : "off"); break;
    case T_STR: snprintf(buf, cap, "%s", p[0] ? p : "none"); break;
    case T_ENVARG: {
        snprintf(buf, cap, "%s", p[0] ? p : "none");
        for (char *q = buf; *q; q++)
            if (*q == '\n') *q = ' ';
        break;
    }
    case T_ALGO: snprintf(buf, cap, "%s", rl_algo_name(c->algo)); break;
    case T_MODE: snprintf(buf, cap, "%s", rl_mode_name(c->mode)); break;
    case T_ACT: snprintf(buf, cap, "%s", c->tanh ? "tanh" : "relu"); break;
    case T_DEVICE: snprintf(buf, cap, "%s", c->cuda ? "cuda" : "cpu"); break;
    case T_OPTIM: snprintf(buf, cap, "%s", optim_kind_name((enum optim_kind)c->optimizer)); break;
    case T_HIDDEN: {
        size_t n = 0;
        buf[0] = '\0';
        for (int k = 0; k < c->n_hidden && n < cap; k++) n += (size_t)snprintf(buf + n, cap - n, "%s%d", k ? "," : "", c->hidden[k]);
        break;
    }
    }
}

void rl_config_usage(FILE *f)
{
    fprintf(f, "  --overwrite            with --logdir DIR holding another run: remove that run's files\n"
               "                         (metrics, config.json, event files, checkpoints, policy) first\n");
    fprintf(f, "  --config FILE          a JSON object of these flags (keys without --, e.g.\n"
               "                         {\"preset\": \"ppo\", \"lr\": 0.001, \"anneal-lr\": false});\n"
               "                         flags on the command line override it; unknown keys are errors\n"
               "  --preset NAME          start from a preset (default ppo-fast):\n"
               "                         ppo-fast  PPO, 4 observers x 32 envs x 16 steps (the demo)\n"
               "                         ppo       CleanRL ppo.py on CartPole-v1 (4 envs x 128 steps)\n"
               "                         a2c       A2C, 5-step returns, RMSprop (SB3 defaults)\n"
               "                         pendulum  PPO with a Gaussian head on Pendulum-v1\n"
               "                         pytorch-rl-example  REINFORCE as PyTorch's RPC RL example\n");
    struct rl_config pre[8];
    int np = 0;
    for (; rl_preset_names[np] && np < 8; np++) CHECK(rl_config_preset(&pre[np], rl_preset_names[np]) == 0);
    for (int i = 0; i < N_FLAGS; i++) {
        char lhs[64];
        bool arg = flags[i].type != T_BOOL;
        snprintf(lhs, sizeof lhs, "--%s%s", flags[i].name, arg ? " X" : "");
        fprintf(f, "  %-22s ", lhs);
        for (const char *p = flags[i].help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n') fprintf(f, "  %-22s ", "");
        }
        /* the default (preset ppo-fast's) and the presets that differ */
        char dflt[160], v[160], line[600];
        format_flag(&pre[0], &flags[i], dflt, sizeof dflt);
        size_t n = (size_t)snprintf(line, sizeof line, "default %s", dflt);
        bool first = true;
        for (int k = 1; k < np && n < sizeof line; k++) {
            format_flag(&pre[k], &flags[i], v, sizeof v);
            if (strcmp(v, dflt) == 0) continue;
            n += (size_t)snprintf(line + n, sizeof line - n, "%s%s %s", first ? "; " : ", ", rl_preset_names[k], v);
            first = false;
        }
        if (flags[i].off == offsetof(struct rl_config, cuda) || flags[i].off == offsetof(struct rl_config, max_policy_lag))
            snprintf(line, sizeof line, "default as above");
        fprintf(f, "\n  %-22s (%s)", "", line);
        for (int a = 0; aliases[a].alias; a++)
            if (strcmp(aliases[a].name, flags[i].name) == 0) fprintf(f, "\n  %-22s (also --%s, CleanRL's name)", "", aliases[a].alias);
        fputc('\n', f);
    }
}

static int set_flag(struct rl_config *c, const struct flag *fl, const char *v, bool negated)
{
    char *p = (char *)c + fl->off;
    char *end = NULL;
    errno = 0;
    switch (fl->type) {
    case T_INT: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < -2147483647L || x > 2147483647L) return -1;
        *(int *)p = (int)x;
        return 0;
    }
    case T_I64: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) return -1;
        *(int64_t *)p = x;
        return 0;
    }
    case T_U64: {
        if (v[0] == '-') return -1;
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end) return -1;
        *(uint64_t *)p = x;
        return 0;
    }
    case T_DBL: {
        double x = strtod(v, &end);
        /* out of double's range (1e999, 1e-320): the value as read (an
         * infinity, a subnormal), for rl_config_check to refuse saying why */
        if ((errno && errno != ERANGE) || end == v || *end || isnan(x)) return -1;
        *(double *)p = x;
        return 0;
    }
    case T_BOOL:
        *(bool *)p = !negated;
        return 0;
    case T_STR:
        if (strlen(v) >= sizeof c->env || (!v[0] && fl->off == offsetof(struct rl_config, env))) return -1;
        snprintf(p, sizeof c->env, "%s", v);
        return 0;
    case T_ENVARG:
        return rl_config_add_env_arg(c, v);
    case T_ALGO:
        if (strcmp(v, "reinforce") == 0) c->algo = RL_ALGO_REINFORCE;
        else if (strcmp(v, "a2c") == 0) c->algo = RL_ALGO_A2C;
        else if (strcmp(v, "ppo") == 0) c->algo = RL_ALGO_PPO;
        else return -1;
        return 0;
    case T_MODE:
        if (strcmp(v, "sync") == 0) c->mode = RL_MODE_SYNC;
        else if (strcmp(v, "async") == 0) c->mode = RL_MODE_ASYNC;
        else return -1;
        return 0;
    case T_ACT:
        if (strcmp(v, "tanh") == 0) c->tanh = true;
        else if (strcmp(v, "relu") == 0) c->tanh = false;
        else return -1;
        return 0;
    case T_DEVICE:
        if (strcmp(v, "cuda") == 0) c->cuda = true;
        else if (strcmp(v, "cpu") == 0) c->cuda = false;
        else return -1;
        return 0;
    case T_OPTIM:
        if (strcmp(v, "adam") == 0) c->optimizer = OPTIM_ADAM;
        else if (strcmp(v, "adamw") == 0) c->optimizer = OPTIM_ADAMW;
        else if (strcmp(v, "rmsprop") == 0) c->optimizer = OPTIM_RMSPROP;
        else if (strcmp(v, "sgd") == 0) c->optimizer = OPTIM_SGD;
        else return -1;
        return 0;
    case T_HIDDEN: {
        int n = 0;
        const char *s = v;
        while (*s) {
            if (n == RL_MAX_HIDDEN) return -1;
            long x = strtol(s, &end, 10);
            if (end == s || x < 1 || x > RL_MAX_DIM || (*end && *end != ',')) return -1;
            c->hidden[n++] = (int)x;
            s = *end ? end + 1 : end;
        }
        if (n == 0) return -1;
        c->n_hidden = n;
        return 0;
    }
    }
    return -1;
}

static const struct flag *find_flag(const char *name, bool *negated)
{
    *negated = false;
    for (int a = 0; aliases[a].alias; a++)
        if (strcmp(aliases[a].alias, name) == 0) name = aliases[a].name;
    for (int k = 0; k < N_FLAGS; k++)
        if (strcmp(flags[k].name, name) == 0) return &flags[k];
    if (strncmp(name, "no-", 3) == 0)
        for (int k = 0; k < N_FLAGS; k++)
            if (flags[k].type == T_BOOL && strcmp(flags[k].name, name + 3) == 0) {
                *negated = true;
                return &flags[k];
            }
    return NULL;
}

/* One JSON object in text[0..len), white space around it and nothing
 * else. 0 with *root set; -1 when it is not an object; -2 with *at the
 * offset of the first byte after it; *root NULL on failure. */
static int parse_object(const char *text, size_t len, cJSON **root, size_t *at)
{
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*root || !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return -1;
    }
    const char *p = end;
    while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p == text + len) return 0;
    cJSON_Delete(*root);
    *root = NULL;
    *at = (size_t)(p - text);
    return -2;
}

/* Reads a JSON object from path into *root. 0, or -1 with rl_last_error(). */
static int load_json(const char *path, cJSON **root, const char *flag)
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
    int rc = parse_object(buf, len, root, &at);
    free(buf);
    if (rc == -1) return rl_set_error("%s %s: not a JSON object", flag, path);
    if (rc == -2) return rl_set_error("%s %s: bytes after the JSON object (from byte %zu)", flag, path, at);
    return 0;
}

/* Applies a JSON object of flags ({"lr": 0.001, "mode": "async",
 * "anneal-lr": false, "hidden": "64,64"}); keys are the flags' names
 * without "--" ("_" may stand for "-"); "preset" is applied before. -1
 * with rl_last_error() naming the file and the key. */
static int apply_config(struct rl_config *c, const char *flag, const char *path, const cJSON *root)
{
    int rc = 0;
    for (cJSON *it = root->child; it && rc == 0; it = it->next) {
        char name[64];
        if (!it->string || strlen(it->string) >= sizeof name) {
            rc = rl_set_error("%s %s: bad key", flag, path);
            break;
        }
        snprintf(name, sizeof name, "%s", it->string);
        for (char *p = name; *p; p++)
            if (*p == '_') *p = '-';
        if (strcmp(name, "preset") == 0) continue;   /* applied before the file */
        bool negated;
        const struct flag *fl = find_flag(name, &negated);
        if (!fl || negated) {
            rc = rl_set_error("%s %s: unknown key '%s'", flag, path, it->string);
            break;
        }
        char val[600];
        if (fl->type == T_ENVARG) {   /* a list: ["key=value", ...], replacing the one before */
            c->env_args[0] = '\0';
            if (!cJSON_IsArray(it)) rc = rl_set_error("%s %s: '%s' must be a list of \"KEY=VALUE\" strings", flag, path, it->string);
            for (cJSON *e = it->child; e && rc == 0; e = e->next)
                if (!cJSON_IsString(e)) rc = rl_set_error("%s %s: '%s' must be a list of \"KEY=VALUE\" strings", flag, path, it->string);
                else if (rl_config_add_env_arg(c, e->valuestring) != 0) rc = rl_set_error("%s %s: %s", flag, path, rl_last_error());
            continue;
        }
        if (fl->type == T_BOOL) {
            if (!cJSON_IsBool(it)) rc = rl_set_error("%s %s: '%s' must be true or false", flag, path, it->string);
            else *(bool *)((char *)c + fl->off) = cJSON_IsTrue(it);
            continue;
        }
        if (cJSON_IsString(it)) {
            size_t n = strlen(it->valuestring), max = fl->type == T_STR ? sizeof c->env - 1 : sizeof val - 1;
            if (n > max) {
                rc = rl_set_error("--config %s: '%s' is too long (%zu bytes, at most %zu)", path, it->string, n, max);
                break;
            }
            snprintf(val, sizeof val, "%s", it->valuestring);
        } else if (cJSON_IsNumber(it)) {
            double d = it->valuedouble;
            if (d == (double)(int64_t)d && fabs(d) < 9e15) snprintf(val, sizeof val, "%lld", (long long)d);
            else snprintf(val, sizeof val, "%.17g", d);
        } else {
            rc = rl_set_error("%s %s: '%s' must be a number or a string", flag, path, it->string);
            break;
        }
        if (set_flag(c, fl, val, false) != 0) rc = rl_set_error("%s %s: bad value '%s' for '%s'", flag, path, val, it->string);
    }
    return rc;
}

cJSON *rl_config_to_json(const struct rl_config *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "preset", c->preset);
    for (int i = 0; i < N_FLAGS; i++) {
        const struct flag *fl = &flags[i];
        const char *p = (const char *)c + fl->off;
        char buf[128];
        /* a run's config.json describes the run; which checkpoint it was
         * resumed from is not a setting a new run should inherit */
        if (fl->off == offsetof(struct rl_config, resume)) continue;
        switch (fl->type) {
        case T_INT: cJSON_AddNumberToObject(o, fl->name, *(const int *)p); break;
        case T_I64: cJSON_AddNumberToObject(o, fl->name, (double)*(const int64_t *)p); break;
        case T_U64: cJSON_AddNumberToObject(o, fl->name, (double)*(const uint64_t *)p); break;
        case T_DBL:
            if (isfinite(*(const double *)p)) cJSON_AddNumberToObject(o, fl->name, *(const double *)p);
            break;   /* NaN (an unset --target) is left out: the default applies */
        case T_BOOL: cJSON_AddBoolToObject(o, fl->name, *(const bool *)p); break;
        case T_STR: cJSON_AddStringToObject(o, fl->name, p); break;
        case T_ENVARG: {
            struct rl_env_args ea;
            rl_config_env_args(c, &ea);
            cJSON *list = cJSON_AddArrayToObject(o, fl->name);
            for (int k = 0; k < ea.args.n; k++) {
                char kv[sizeof c->env_args];
                snprintf(kv, sizeof kv, "%s=%s", ea.keys[k], ea.values[k]);
                cJSON_AddItemToArray(list, cJSON_CreateString(kv));
            }
            break;
        }
        case T_ALGO: cJSON_AddStringToObject(o, fl->name, rl_algo_name(c->algo)); break;
        case T_MODE: cJSON_AddStringToObject(o, fl->name, rl_mode_name(c->mode)); break;
        case T_ACT: cJSON_AddStringToObject(o, fl->name, c->tanh ? "tanh" : "relu"); break;
        case T_DEVICE: cJSON_AddStringToObject(o, fl->name, c->cuda ? "cuda" : "cpu"); break;
        case T_OPTIM: cJSON_AddStringToObject(o, fl->name, optim_kind_name((enum optim_kind)c->optimizer)); break;
        case T_HIDDEN: {
            size_t n = 0;
            buf[0] = '\0';
            for (int k = 0; k < c->n_hidden && n < sizeof buf; k++)
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%d", k ? "," : "", c->hidden[k]);
            cJSON_AddStringToObject(o, fl->name, buf);
            break;
        }
        }
    }
    return o;
}

int rl_config_from_json(const char *text, size_t len, struct rl_config *cfg)
{
    cJSON *root = NULL;
    size_t at = 0;
    int prc = parse_object(text, len, &root, &at);
    if (prc == -1) return rl_set_error("config: not a JSON object");
    if (prc == -2) return rl_set_error("config: bytes after the JSON object (from byte %zu)", at);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "preset");
    int rc = rl_config_preset(cfg, cJSON_IsString(p) && p->valuestring[0] ? p->valuestring : "ppo-fast");
    if (rc == 0) rc = apply_config(cfg, "config", "(saved)", root);
    cJSON_Delete(root);
    return rc == 0 ? rl_config_check(cfg) : -1;
}

static int usage_error(const char *prog, const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see %s --help)\n", prog);
    return 2;
}

static bool is_builtin_env(const char *id)
{
    for (int i = 0; i < env_builtin_count(); i++)
        if (strcmp(env_builtin_id(i), id) == 0) return true;
    return false;
}

/* Whether a and b name the same directory (the same path when either is
 * missing). */
static bool same_dir(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    if (realpath(a, ra) && realpath(b, rb)) return strcmp(ra, rb) == 0;
    return strcmp(a, b) == 0;
}

/* The value of --name VALUE or --name=VALUE at argv[i], or NULL. */
static const char *prescan(int argc, char **argv, int i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[i], name, n) != 0) return NULL;
    if (argv[i][n] == '=') return argv[i] + n + 1;
    if (argv[i][n] == '\0' && i + 1 < argc) return argv[i + 1];
    return NULL;
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

int rl_config_parse(struct rl_config *cfg, const char *prog, const char *about, int argc, char **argv,
                    const struct rl_opt *extra, int n_extra)
{
    const char *preset = NULL, *config_file = NULL, *resume_dir = NULL, *v;
    bool device_given = false, logdir_given = false, env_given = false, overwrite = false, env_args_given = false;
    bool lag_given = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s", about);
            printf("\nOptions of the run (the agent hands them to every observer):\n");
            rl_config_usage(stdout);
            for (int k = 0; k < n_extra; k++) printf("%s", extra[k].help);
            printf("  --help                 this text\n");
            return 0;
        }
        if ((v = prescan(argc, argv, i, "--preset"))) preset = v;
        else if ((v = prescan(argc, argv, i, "--config"))) config_file = v;
        else if ((v = prescan(argc, argv, i, "--resume"))) resume_dir = v;
        else if (strcmp(argv[i], "--overwrite") == 0) overwrite = true;
    }
    /* the layers, first to last: the preset, the resumed run's config.json,
     * --config, the command line */
    cJSON *saved = NULL, *file = NULL;
    if (resume_dir) {
        char path[1024], what[300];
        snprintf(path, sizeof path, "%s/config.json", resume_dir);
        if (!resume_dir[0] || metrics_dir_holds_run(resume_dir, what, sizeof what) != 1)
            return usage_error(prog, "--resume %s: no run to resume there (no config.json or checkpoints in %s)",
                               resume_dir, resume_dir[0] ? resume_dir : "''");
        /* its files are read as what they are: no link followed, no FIFO
         * waited on (runfiles/runfile.h) */
        if (metrics_dir_check(resume_dir) != 0)
            return usage_error(prog, "--resume %s: %s", resume_dir, runfiles_last_error());
        /* a run directory without config.json (made by hand, or by an
         * older build): the command line describes the run */
        if (access(path, F_OK) == 0 && load_json(path, &saved, "--resume") != 0)
            return usage_error(prog, "%s%s", rl_last_error(), "");
    }
    if (config_file && load_json(config_file, &file, "--config") != 0) {
        cJSON_Delete(saved);
        return usage_error(prog, "%s%s", rl_last_error(), "");
    }
    const cJSON *layers[2] = { saved, file };
    const char *layer_paths[2] = { resume_dir, config_file };
    for (int l = 0; l < 2; l++) {
        if (!layers[l]) continue;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(layers[l], "preset");
        if (p && !cJSON_IsString(p)) {
            cJSON_Delete(saved);
            cJSON_Delete(file);
            return usage_error(prog, "%s: 'preset' must be a string%s", layer_paths[l], "");
        }
        bool flag_preset = false;
        for (int i = 1; i < argc; i++)
            if (strncmp(argv[i], "--preset", 8) == 0) flag_preset = true;
        if (p && p->valuestring[0] && !flag_preset) preset = p->valuestring;
        if (cJSON_GetObjectItemCaseSensitive(layers[l], "device")) device_given = true;
        if (cJSON_GetObjectItemCaseSensitive(layers[l], "max-policy-lag") ||
            cJSON_GetObjectItemCaseSensitive(layers[l], "max_policy_lag"))
            lag_given = true;
    }
    int prc = rl_config_preset(cfg, preset ? preset : "ppo-fast");
    if (prc == 0 && saved) prc = apply_config(cfg, "--resume", resume_dir, saved);
    bool saved_plugin = saved && prc == 0 && !is_builtin_env(cfg->env);
    if (prc == 0 && file) prc = apply_config(cfg, "--config", config_file, file);
    cJSON_Delete(saved);
    cJSON_Delete(file);
    if (prc != 0) return usage_error(prog, "%s%s", rl_last_error(), "");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) return usage_error(prog, "unexpected argument '%s'%s", a, "");
        char name[64];
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name) return usage_error(prog, "unknown option '%s'%s", a, "");
        memcpy(name, a + 2, len);
        name[len] = '\0';
        const char *val = eq ? eq + 1 : NULL;
        if (strcmp(name, "preset") == 0 || strcmp(name, "config") == 0 || strcmp(name, "resume") == 0) {
            if (!val) i++;
            continue;
        }
        if (strcmp(name, "overwrite") == 0) {
            if (val) return usage_error(prog, "option '--%s' takes no value%s", name, "");
            continue;
        }
        bool negated;
        const struct flag *fl = find_flag(name, &negated);
        if (fl) {
            if (fl->type == T_BOOL) {
                if (val) return usage_error(prog, "option '--%s' takes no value%s", name, "");
            } else if (!val) {
                if (i + 1 >= argc) return usage_error(prog, "option '--%s' needs a value%s", name, "");
                val = argv[++i];
            }
            if (fl->type == T_STR && val && strlen(val) >= sizeof cfg->env) {   /* as --config says it */
                char msg[128];
                snprintf(msg, sizeof msg, "--%s is too long (%zu bytes, at most %zu)", name, strlen(val),
                         sizeof cfg->env - 1);
                return usage_error(prog, "%s%s", msg, "");
            }
            /* the command line's --env-arg list replaces the one of a file */
            if (fl->type == T_ENVARG && !env_args_given) cfg->env_args[0] = '\0';
            if (fl->type == T_ENVARG) env_args_given = true;
            if (set_flag(cfg, fl, val ? val : "", negated) != 0)
                return fl->type == T_ENVARG ? usage_error(prog, "%s%s", rl_last_error(), "")
                                            : usage_error(prog, "bad value '%s' for --%s", val, name);
            if (fl->type == T_DEVICE) device_given = true;
            if (fl->off == offsetof(struct rl_config, max_policy_lag)) lag_given = true;
            if (fl->off == offsetof(struct rl_config, logdir)) logdir_given = true;
            if (fl->off == offsetof(struct rl_config, env)) env_given = true;
            continue;
        }
        const struct rl_opt *ex = NULL;
        for (int k = 0; k < n_extra && !ex; k++)
            if (strcmp(extra[k].name, name) == 0) ex = &extra[k];
        if (!ex) return usage_error(prog, "unknown option '%s'%s", a, "");
        if (ex->has_arg && !val) {
            if (i + 1 >= argc) return usage_error(prog, "option '--%s' needs a value%s", name, "");
            val = argv[++i];
        } else if (!ex->has_arg && val) {
            return usage_error(prog, "option '--%s' takes no value%s", name, "");
        }
        if (ex->set(ex->user, val) != 0) return 2;
    }
    /* a run directory does not choose code to run: a plug-in env is loaded
     * only when the command line names it */
    if (saved_plugin && !env_given)
        return usage_error(prog, "--resume: the run's env is the plug-in %s; name it with --env to load it%s", cfg->env, "");
    if (resume_dir) {
        if (strlen(resume_dir) >= sizeof cfg->resume) return usage_error(prog, "--resume %s: path too long%s", resume_dir, "");
        snprintf(cfg->resume, sizeof cfg->resume, "%s", resume_dir);
        if (!logdir_given) snprintf(cfg->logdir, sizeof cfg->logdir, "%s", resume_dir);
    }
    cfg->overwrite = overwrite;
    if (!device_given) cfg->cuda = tensor_cuda_available();
    if (!lag_given) cfg->max_policy_lag = rl_default_max_policy_lag(cfg);
    if (rl_config_check(cfg) != 0) return usage_error(prog, "%s%s", rl_last_error(), "");
    /* an env that does not exist is bad usage, found before anything starts */
    struct env_plugin *plugin = NULL;
    const struct env_spec *spec = rl_config_open_env(cfg, &plugin);
    if (!spec) return usage_error(prog, "--env: %s%s", rl_last_error(), "");
    /* and one whose sizes the policy cannot have (a plug-in declares its own) */
    struct policy_arch arch;
    char what[600];
    snprintf(what, sizeof what, "--env %s", cfg->env);
    int arc = rl_arch_for_env(cfg, spec, what, &arch);
    env_plugin_close(plugin);
    if (arc != 0) return usage_error(prog, "%s%s", rl_last_error(), "");
    return claim_logdir(cfg, prog) == 0 ? -1 : 2;
}

void rl_config_describe(const struct rl_config *c, char *out, size_t cap)
{
    char hid[64] = "", shape[128], update[128];
    size_t n = 0;
    for (int i = 0; i < c->n_hidden && n < sizeof hid; i++)
        n += (size_t)snprintf(hid + n, sizeof hid - n, "%s%d", i ? "-" : "", c->hidden[i]);
    const char *obs = c->observers == 1 ? "observer" : "observers";
    if (c->algo == RL_ALGO_REINFORCE) {
        /* what applies to REINFORCE: one whole episode per observer per update */
        snprintf(shape, sizeof shape, "%d %s x 1 episode per update", c->observers, obs);
        snprintf(update, sizeof update, "gamma %g", c->gamma);
    } else {
        snprintf(shape, sizeof shape, "%d %s x %d env%s x %d steps", c->observers, obs, c->envs_per_observer,
                 c->envs_per_observer == 1 ? "" : "s", c->steps_per_rollout);
        if (c->algo == RL_ALGO_PPO)
            snprintf(update, sizeof update, "gamma %g, lambda %g, %d epoch%s x %d minibatch%s, clip %g", c->gamma,
                     c->gae_lambda, c->epochs, c->epochs == 1 ? "" : "s", c->minibatches,
                     c->minibatches == 1 ? "" : "es", c->clip);
        else
            snprintf(update, sizeof update, "gamma %g, lambda %g", c->gamma, c->gae_lambda);
    }
    snprintf(out, cap, "%s %s (preset %s) on %s: %s, %s %s, lr %g, %s, policy on %s, seed %llu", rl_mode_name(c->mode),
             rl_algo_name(c->algo), c->preset[0] ? c->preset : "-", c->env, shape, hid, c->tanh ? "tanh" : "relu",
             c->lr, update, c->cuda ? "cuda" : "cpu", (unsigned long long)c->seed);
}
