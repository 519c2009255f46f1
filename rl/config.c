/* The run configuration's fields (rl/config_fields.h made into a table of
 * descriptors), their values as text both ways, the defaults and the
 * presets as data rows. The command line is config_parse.c, JSON
 * config_json.c, the wire form config_wire.c, the checks config_check.c,
 * --env-arg config_env_args.c. It reads the algorithm registry (rl/algo.h:
 * --algo's choices, a run's description), so it sits above the registry and
 * the algorithms' files, which read only the struct (rl/config_fields.h). */
#define _GNU_SOURCE
#include "rl/config.h"
#include "rl/algo.h"
#include "rl/config_internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/argv.h"
#include "optim/optim.h"
#include "rl/rl.h"


const char *rl_mode_name(enum rl_mode m) { return rl_mode_choice((int)m); }

/* The enum fields' choices that are not an RL_ENUM list's (rl/config_fields.h):
 * the name of value i, NULL past the last. */
static const char *choice_algo(int i) { return rl_algo_name(i); }
static const char *choice_optimizer(int i)
{
    return i >= 0 && i < OPTIM_KIND_COUNT ? optim_kind_name((enum optim_kind)i) : NULL;
}

#define RL_FIELD_ROW(n, kind, ctype, dim, dflt, choices, fl, ex, h)                                              \
    { #n, RL_K_##kind, offsetof(struct rl_config, n), sizeof(((struct rl_config *)0)->n), choices, fl, ex, h },
const struct rl_field rl_fields[] = { RL_CONFIG_FIELDS(RL_FIELD_ROW) };
#undef RL_FIELD_ROW
const int rl_n_fields = (int)(sizeof rl_fields / sizeof rl_fields[0]);
_Static_assert(sizeof rl_fields / sizeof rl_fields[0] == RL_N_FIELDS, "a descriptor per row");

void rl_config_base(struct rl_config *c)
{
#define RL_FIELD_INIT(n, kind, ctype, dim, dflt, choices, fl, ex, h) .n = dflt,
    *c = (struct rl_config){ RL_CONFIG_FIELDS(RL_FIELD_INIT) };
#undef RL_FIELD_INIT
}

/* Old and other names of fields: CleanRL's flags (one observer being its
 * one process) and the names config.json files of older builds used. */
static const struct { const char *alias, *name; } aliases[] = {
    { "total_timesteps", "max_steps" }, { "num_envs", "envs_per_observer" }, { "num_steps", "steps_per_rollout" },
    { "learning_rate", "lr" },          { "num_minibatches", "minibatches" }, { "update_epochs", "epochs" },
    { "clip_coef", "clip" },            { "env_id", "env" },                  { NULL, NULL },
};

const char *rl_field_alias(const struct rl_field *f)
{
    for (int a = 0; aliases[a].alias; a++)
        if (strcmp(aliases[a].name, f->name) == 0) return aliases[a].alias;
    return NULL;
}

const struct rl_field *rl_field_find(const char *key)
{
    char name[64];
    if (strlen(key) >= sizeof name) return NULL;
    snprintf(name, sizeof name, "%s", key);
    for (char *p = name; *p; p++)
        if (*p == '-') *p = '_';
    for (int a = 0; aliases[a].alias; a++)
        if (strcmp(aliases[a].alias, name) == 0) snprintf(name, sizeof name, "%s", aliases[a].name);
    for (int k = 0; k < rl_n_fields; k++)
        if (strcmp(rl_fields[k].name, name) == 0) return &rl_fields[k];
    return NULL;
}

void rl_field_flag(const struct rl_field *f, char *out, size_t cap)
{
    snprintf(out, cap, "%s", f->name);
    for (char *p = out; *p; p++)
        if (*p == '_') *p = '-';
}

/* ---- values as text: the command line's, --config's and --help's form ---- */

static int set_int(void *p, const struct rl_field *f, const char *v)
{
    char *end = NULL;
    errno = 0;
    if (f->kind == RL_K_U64) {
        unsigned long long x = v[0] == '-' ? 0 : strtoull(v, &end, 10);
        long long e = 0;
        if (v[0] != '-' && !errno && end != v && !*end) *(uint64_t *)p = x;
        else if (v[0] != '-' && argv_integer(v, &e) == 0 && e >= 0) *(uint64_t *)p = (uint64_t)e;   /* 1e6 */
        else return -1;
        return 0;
    }
    long long x = 0;
    if (argv_integer(v, &x) != 0) return -1;   /* 1000000 or 1e6 */
    if (f->kind == RL_K_I64) *(int64_t *)p = x;
    else if (x < -2147483647LL || x > 2147483647LL) return -1;
    else *(int *)p = (int)x;
    return 0;
}

static int set_double(double *p, const char *v)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    /* out of double's range (1e999, 1e-320): the value as read (an
     * infinity, a subnormal), for rl_config_check to refuse saying why */
    if ((errno && errno != ERANGE) || end == v || *end || isnan(x)) return -1;
    *p = x;
    return 0;
}

static int set_enum(int *p, const struct rl_field *f, const char *v)
{
    for (int i = 0; f->choice(i); i++)
        if (strcmp(f->choice(i), v) == 0) {
            *p = i;
            return 0;
        }
    return -1;
}

static int set_list(struct rl_int_list *l, const char *v)
{
    struct rl_int_list out = { 0 };
    for (const char *s = v; *s;) {
        char *end = NULL;
        if (out.n == RL_MAX_HIDDEN) return -1;
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > RL_MAX_DIM || (*end && *end != ',')) return -1;
        out.v[out.n++] = (int)x;
        s = *end ? end + 1 : end;
    }
    if (out.n == 0) return -1;
    *l = out;
    return 0;
}

static int set_bool(bool *p, const char *v)
{
    if (!v || strcmp(v, "true") == 0) *p = true;
    else if (strcmp(v, "false") == 0) *p = false;
    else return -1;
    return 0;
}

int rl_field_set(struct rl_config *c, const struct rl_field *f, const char *v)
{
    char *p = (char *)c + f->off;
    switch (f->kind) {
    case RL_K_INT:
    case RL_K_I64:
    case RL_K_U64: return set_int(p, f, v);
    case RL_K_DBL: return set_double((double *)p, v);
    case RL_K_BOOL: return set_bool((bool *)p, v);
    case RL_K_ENUM: return set_enum((int *)p, f, v);
    case RL_K_LIST: return set_list((struct rl_int_list *)p, v);
    case RL_K_ENVARGS: return rl_config_add_env_arg(c, v);
    case RL_K_STR:
        if (strlen(v) >= f->size || (!v[0] && f->off == offsetof(struct rl_config, env))) return -1;
        snprintf(p, f->size, "%s", v);
        return 0;
    }
    return -1;
}

static void format_list(const struct rl_int_list *l, const char *sep, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int k = 0; k < l->n && n < cap; k++) n += (size_t)snprintf(buf + n, cap - n, "%s%d", k ? sep : "", l->v[k]);
}

void rl_field_format(const struct rl_config *c, const struct rl_field *f, char *buf, size_t cap)
{
    const char *p = (const char *)c + f->off;
    switch (f->kind) {
    case RL_K_INT: snprintf(buf, cap, "%d", *(const int *)p); break;
    case RL_K_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); break;
    case RL_K_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case RL_K_DBL:
        if (isnan(*(const double *)p)) snprintf(buf, cap, "the env's threshold");
        else snprintf(buf, cap, "%g", *(const double *)p);
        break;
    case RL_K_BOOL: snprintf(buf, cap, "%s", *(const bool *)p ? "on" : "off"); break;
    case RL_K_ENUM: {
        const char *name = f->choice(*(const int *)p);
        snprintf(buf, cap, "%s", name ? name : "?");
        break;
    }
    case RL_K_LIST: format_list((const struct rl_int_list *)p, ",", buf, cap); break;
    case RL_K_STR:
    case RL_K_ENVARGS:
        snprintf(buf, cap, "%s", p[0] ? p : "none");
        for (char *q = buf; *q; q++)
            if (*q == '\n') *q = ' ';
        break;
    }
}

/* ---- the presets: rows of field=value over rl_config_base ----------------- */

const char *const rl_preset_names[] = { "ppo-fast", "ppo", "a2c", "pendulum", "pytorch-rl-example", "mujoco", "mujoco-fast",
                                        "zoo", NULL };

/* Gymnasium's MuJoCo v4 suite (envs/mujoco/): the mujoco presets' budget
 * (1M steps, no target) holds for each of them, as CleanRL runs them. */
static const char *const mujoco_suite[] = { "Ant-v4",     "HalfCheetah-v4", "Hopper-v4",
                                            "Humanoid-v4", "InvertedDoublePendulum-v4", "InvertedPendulum-v4",
                                            "Reacher-v4", "Swimmer-v4",     "Walker2d-v4", NULL };

/* CleanRL ppo_continuous_action.py's defaults (one observer = its one
 * process); the rest are the base defaults it shares: gae_lambda 0.95,
 * clip 0.2, vf_coef 0.5, max_grad_norm 0.5, lr annealed, norm_adv,
 * clip_vloss, hidden 64,64 tanh, init_log_std 0. */
#define MUJOCO_ROWS                                                                                                \
    "env=Hopper-v4", "lr=3e-4", "gamma=0.99", "epochs=10", "ent_coef=0", "norm_obs=true", "norm_reward=true",      \
        "max_steps=1000000", "stop_at_target=false"

/* RL Baselines3 Zoo's tuned PPO settings for the MuJoCo suite, one row per
 * env: hyperparams/ppo.yml of github.com/DLR-RM/rl-baselines3-zoo at commit
 * 00128b5d46d497b772f3bd891ae9f520919e8971 (its "-v3" rows, Reacher's
 * "-v2"; Ant and Swimmer are its untuned &mujoco-defaults rows, the
 * commented-out 1e7-step Ant row left out). Each row writes out every
 * setting of its yml entry, SB3's PPO defaults where the entry has none
 * (n_envs 1 in the zoo, n_steps 2048, batch_size 64, n_epochs 10, gamma
 * 0.99, gae_lambda 0.95, learning_rate 3e-4, clip_range 0.2, ent_coef 0,
 * vf_coef 0.5, max_grad_norm 0.5; MlpPolicy: 64,64 Tanh, log_std_init 0,
 * ortho_init True). What each setting is here:
 *   n_envs x n_steps     observers=1 x envs_per_observer=n_envs x
 *                        steps_per_rollout=n_steps (ZOO_ROWS: one process)
 *   batch_size           minibatches = n_envs x n_steps / batch_size; 1 where
 *                        batch_size exceeds the rollout (SB3's RolloutBuffer
 *                        then yields the rollout whole; the run says so)
 *   n_epochs             epochs
 *   gamma, gae_lambda    gamma, gae_lambda (VecNormalize's discount too: the
 *                        zoo hands it gamma, as rl/norm.c takes --gamma)
 *   learning_rate        lr, constant (anneal_lr=false: no row has lin_)
 *   clip_range           clip, constant (no row has lin_); clip_range_vf
 *                        None: clip_vloss=false
 *   ent_coef, vf_coef, max_grad_norm   the same names
 *   normalize: true      norm_obs, norm_reward (VecNormalize: clip_obs and
 *                        clip_reward 10, eps 1e-8, as the base's)
 *   n_timesteps          max_steps (no target: stop_at_target=false)
 *   net_arch pi=[256, 256], vf=[256, 256]   hidden=256,256 (the actor and
 *                        the critic are separate nets here as there)
 *   activation_fn        activation (nn.ReLU: relu; SB3's default Tanh)
 *   log_std_init         init_log_std
 *   ortho_init           init (True, SB3's default: orthogonal, its gains
 *                        CleanRL's; False: pytorch)
 * SB3's remaining defaults are the base's: Adam with eps 1e-5, advantages
 * normalised per minibatch, bootstrapped at truncation. No row uses gSDE or
 * a schedule. The notes are what the run prints at load. */
#define ZOO_ROWS                                                                                                   \
    "observers=1", "envs_per_observer=1", "norm_obs=true", "norm_reward=true", "anneal_lr=false",              \
        "clip_vloss=false", "stop_at_target=false"
#define ZOO_TUNED_NET "hidden=256,256", "activation=relu", "init_log_std=-2", "init=pytorch"   /* ortho_init=False */
#define ZOO_SB3_NET "hidden=64,64", "activation=tanh", "init_log_std=0", "init=orthogonal"      /* MlpPolicy's */
static const struct rl_preset_row zoo_rows[] = {
    { "HalfCheetah-v4", "HalfCheetah-v3",
      { "env=HalfCheetah-v4", "steps_per_rollout=512", "minibatches=8", "epochs=20", "gamma=0.98", "gae_lambda=0.92",
        "lr=2.0633e-05", "clip=0.1", "ent_coef=0.000401762", "vf_coef=0.58096", "max_grad_norm=0.8",
        "max_steps=1000000", ZOO_TUNED_NET, NULL }, { NULL } },
    { "Hopper-v4", "Hopper-v3",
      { "env=Hopper-v4", "steps_per_rollout=512", "minibatches=16", "epochs=5", "gamma=0.999", "gae_lambda=0.99",
        "lr=9.80828e-05", "clip=0.2", "ent_coef=0.00229519", "vf_coef=0.835671", "max_grad_norm=0.7",
        "max_steps=1000000", ZOO_TUNED_NET, NULL }, { NULL } },
    { "Walker2d-v4", "Walker2d-v3",
      { "env=Walker2d-v4", "steps_per_rollout=512", "minibatches=16", "epochs=20", "gamma=0.99", "gae_lambda=0.95",
        "lr=5.05041e-05", "clip=0.1", "ent_coef=0.000585045", "vf_coef=0.871923", "max_grad_norm=1",
        "max_steps=1000000", ZOO_SB3_NET, NULL }, { NULL } },
    { "Ant-v4", "Ant-v3",
      { "env=Ant-v4", "steps_per_rollout=2048", "minibatches=32", "epochs=10", "gamma=0.99", "gae_lambda=0.95",
        "lr=3e-4", "clip=0.2", "ent_coef=0", "vf_coef=0.5", "max_grad_norm=0.5", "max_steps=1000000", ZOO_SB3_NET,
        NULL },
      { "Ant-v3 also observed 84 contact forces and charged a contact cost (both 0 under mujoco-py >= 2.0, as "
        "Gymnasium's docs say); Ant-v4 here leaves both out (use_contact_forces=False, its default)", NULL } },
    { "Swimmer-v4", "Swimmer-v3",
      { "env=Swimmer-v4", "steps_per_rollout=2048", "minibatches=32", "epochs=10", "gamma=0.9999", "gae_lambda=0.95",
        "lr=3e-4", "clip=0.2", "ent_coef=0", "vf_coef=0.5", "max_grad_norm=0.5", "max_steps=1000000", ZOO_SB3_NET,
        NULL }, { NULL } },
    { "Humanoid-v4", "Humanoid-v3",
      { "env=Humanoid-v4", "steps_per_rollout=512", "minibatches=2", "epochs=5", "gamma=0.95", "gae_lambda=0.9",
        "lr=3.56987e-05", "clip=0.3", "ent_coef=0.00238306", "vf_coef=0.431892", "max_grad_norm=2",
        "max_steps=10000000", ZOO_TUNED_NET, NULL }, { NULL } },
    { "InvertedPendulum-v4", "InvertedPendulum-v3",
      { "env=InvertedPendulum-v4", "steps_per_rollout=32", "minibatches=1", "epochs=5", "gamma=0.999",
        "gae_lambda=0.9", "lr=0.000222425", "clip=0.4", "ent_coef=1.37976e-07", "vf_coef=0.19816",
        "max_grad_norm=0.3", "max_steps=1000000", ZOO_SB3_NET, NULL },
      { "batch_size 64 exceeds the rollout (1 env x 32 steps): SB3 takes the rollout whole, so --minibatches 1",
        NULL } },
    { "InvertedDoublePendulum-v4", "InvertedDoublePendulum-v3",
      { "env=InvertedDoublePendulum-v4", "steps_per_rollout=128", "minibatches=1", "epochs=10", "gamma=0.98",
        "gae_lambda=0.8", "lr=0.000155454", "clip=0.4", "ent_coef=1.05057e-06", "vf_coef=0.695929",
        "max_grad_norm=0.5", "max_steps=1000000", ZOO_SB3_NET, NULL },
      { "batch_size 512 exceeds the rollout (1 env x 128 steps): SB3 takes the rollout whole, so --minibatches 1",
        NULL } },
    { "Reacher-v4", "Reacher-v2",
      { "env=Reacher-v4", "steps_per_rollout=512", "minibatches=16", "epochs=5", "gamma=0.9", "gae_lambda=1.0",
        "lr=0.000104019", "clip=0.3", "ent_coef=7.52585e-08", "vf_coef=0.950368", "max_grad_norm=0.9",
        "max_steps=1000000", ZOO_SB3_NET, NULL }, { NULL } },
    { NULL, NULL, { NULL }, { NULL } },
};

static const struct rl_preset presets[] = {
    /* CleanRL ppo.py's defaults for CartPole-v1 (one observer = its one process) */
    { "ppo", "CleanRL ppo.py on CartPole-v1 (4 envs x 128 steps)", { NULL }, NULL },
    /* 2048 samples per rollout in 8 updates: per-update RPC latency, not
     * arithmetic, is the cost, so fewer, larger minibatches. lr 5e-3
     * (from 2.5e-3) solves in ~1.5x fewer steps: median time to solve
     * 2.75 s sync and 1.9 s async over 5 seeds, where 1e-2 is faster in
     * sync (2.4 s) but slower in async (3.3 s: its policy lag) and 4
     * minibatches is faster in sync (2.5 s) but not in async (2.35 s) */
    { "ppo-fast", "PPO, 4 observers x 32 envs x 16 steps (the demo)",
      { "observers=4", "envs_per_observer=32", "steps_per_rollout=16", "lr=5e-3", "epochs=4", "minibatches=2", NULL }, NULL },
    /* Stable-Baselines3's A2C defaults: 5-step returns, RMSprop */
    { "a2c", "A2C, 5-step returns, RMSprop (SB3 defaults)",
      { "algo=a2c", "observers=2", "envs_per_observer=8", "steps_per_rollout=5", "optimizer=rmsprop", "lr=7e-4",
        "gae_lambda=1.0", "anneal_lr=false", "minibatches=1", "epochs=1", "ent_coef=0.0", "norm_adv=false",
        "clip_vloss=false", NULL }, NULL },
    { "pendulum", "PPO with a Gaussian head on Pendulum-v1",
      { "observers=2", "envs_per_observer=4", "steps_per_rollout=256", "env=Pendulum-v1", "lr=1e-3", "gamma=0.9",
        "minibatches=8", "epochs=10", "ent_coef=0.0", "reward_scale=0.1", "max_steps=200000", "target=-200", NULL }, NULL },
    /* examples/distributed/rpc/rl: REINFORCE, one env per observer,
     * Linear 4-128, dropout 0.6, ReLU, Linear 128-2, Adam 1e-2, gamma 0.99 */
    { "pytorch-rl-example", "REINFORCE as PyTorch's RPC RL example",
      { "algo=reinforce", "observers=4", "envs_per_observer=1", "hidden=128", "activation=relu", "dropout=0.6",
        "opt_eps=1e-8", "lr=1e-2", "anneal_lr=false", "ent_coef=0", "max_grad_norm=0", "max_steps=2000000",
        "running_reward=true", NULL }, NULL },
    { "mujoco", "CleanRL ppo_continuous_action.py (1 observer x 1 env x 2048 steps, normalised)",
      { MUJOCO_ROWS, "observers=1", "envs_per_observer=1", "steps_per_rollout=2048", "minibatches=32", NULL },
      mujoco_suite },
    /* chosen from 1M-step Hopper-v4 runs on a 2-core box (closing note of
     * issue 25): the rollout of `mujoco` (2048 samples) over 16 envs, so
     * the two cores step physics at once, in minibatches of 256 (8 per
     * epoch, 39k updates in 1M steps, against 156k for `mujoco`'s 64):
     * 2 minibatches of 1024 with 5 epochs learnt too slowly (1333 at 1M),
     * 32 cost 4x the updates for a lower return (1319 against 2237).
     * No overlap by default: with --overlap, Hopper-v4 at 1M gave 1542,
     * 1746 and 1298 (seeds 1-3) against 2237, 2291 and 2679 without: one
     * rollout of lag is 80 versions here (docs/design.md §6 "Overlap") */
    { "mujoco-fast", "mujoco with 2 observers x 8 envs x 128 steps, minibatches of 256",
      { MUJOCO_ROWS, "observers=2", "envs_per_observer=8", "steps_per_rollout=128", "minibatches=8", NULL },
      mujoco_suite },
    { "zoo", "RL Baselines3 Zoo's tuned PPO (hyperparams/ppo.yml), one row per env: --env picks it",
      { ZOO_ROWS, NULL }, NULL },
};

/* The families: presets with a row per env. */
static const struct { const char *preset; const struct rl_preset_row *rows; } families[] = { { "zoo", zoo_rows } };

const struct rl_preset_row *rl_preset_rows(const struct rl_preset *p)
{
    for (size_t i = 0; p && i < sizeof families / sizeof families[0]; i++)
        if (strcmp(families[i].preset, p->name) == 0) return families[i].rows;
    return NULL;
}

const struct rl_preset *rl_preset_find(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

bool rl_preset_env_fits(const struct rl_preset *p, const char *env)
{
    for (int i = 0; p && p->suite && p->suite[i]; i++)
        if (strcmp(p->suite[i], env) == 0) return true;
    return false;
}

const struct rl_preset_row *rl_preset_row(const struct rl_preset *p, const char *env)
{
    const struct rl_preset_row *rows = rl_preset_rows(p);
    for (int i = 0; rows && rows[i].env; i++)
        if (strcmp(rows[i].env, env) == 0) return &rows[i];
    return NULL;
}

static int apply_set(struct rl_config *c, const char *name, const char *const *set)
{
    for (int i = 0; set[i]; i++) {
        char key[64];
        const char *eq = strchr(set[i], '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - set[i]), set[i]);
        const struct rl_field *f = rl_field_find(key);
        if (!f || rl_field_set(c, f, eq + 1) != 0) return rl_set_error("preset %s: bad row '%s'", name, set[i]);
    }
    return 0;
}

int rl_preset_apply(struct rl_config *c, const struct rl_preset *p)
{
    if (apply_set(c, p->name, p->set) != 0) return -1;
    return rl_preset_rows(p) ? apply_set(c, p->name, rl_preset_rows(p)[0].set) : 0;
}

int rl_config_preset(struct rl_config *c, const char *name)
{
    rl_config_base(c);
    const struct rl_preset *p = rl_preset_find(name);
    if (!p)
        return rl_set_error("unknown preset '%s' (known: ppo-fast, ppo, a2c, pendulum, pytorch-rl-example, mujoco, "
                            "mujoco-fast, zoo)", name);
    if (rl_preset_apply(c, p) != 0) return -1;
    snprintf(c->preset, sizeof c->preset, "%s", name);
    return 0;
}

int rl_config_preset_env(struct rl_config *c, const char *name, const char *env)
{
    if (rl_config_preset(c, name) != 0) return -1;
    const struct rl_preset *p = rl_preset_find(name);
    const struct rl_preset_row *rows = rl_preset_rows(p);
    if (!rows) {
        if (strlen(env) >= sizeof c->env) return rl_set_error("--env %s: too long", env);
        snprintf(c->env, sizeof c->env, "%s", env);
        return 0;
    }
    const struct rl_preset_row *row = rl_preset_row(p, env);
    if (!row) {
        char known[512];
        size_t n = 0;
        known[0] = '\0';
        for (int i = 0; rows[i].env && n < sizeof known; i++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", rows[i].env);
        return rl_set_error("--preset %s has no row for --env %s (its rows: %s)", name, env, known);
    }
    rl_config_base(c);
    if (apply_set(c, name, p->set) != 0 || apply_set(c, name, row->set) != 0) return -1;
    snprintf(c->preset, sizeof c->preset, "%s", name);
    return 0;
}

void rl_config_describe(const struct rl_config *c, char *out, size_t cap)
{
    char hid[64], shape[128], update[256];
    format_list(&c->hidden, "-", hid, sizeof hid);
    rl_algo_get(c->algo)->describe(c, shape, sizeof shape, update, sizeof update);
    snprintf(out, cap, "%s %s (preset %s) on %s: %s, %s %s%s, lr %g, %s, policy on %s, seed %llu",
             rl_mode_name(c->mode), rl_algo_name(c->algo), c->preset[0] ? c->preset : "-", c->env, shape, hid,
             rl_activation_choice(c->activation), c->init == RL_INIT_ORTHOGONAL ? " (orthogonal init)" : "", c->lr,
             update, rl_device_choice(c->device), (unsigned long long)c->seed);
}
