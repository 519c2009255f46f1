/* Checkpoint sections of the agent and their compatibility check. */
#define _GNU_SOURCE
#include "agent/checkpoint.h"
#include "agent/policy_store.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "rl/rl.h"
#include "runfiles/runfiles.h"

static void dir_of(const char *logdir, char *out, size_t cap) { snprintf(out, cap, "%s/checkpoints", logdir); }

int agent_ckpt_write(const char *logdir, int64_t updates, const struct agent_ckpt_in *in)
{
    char dir[1024];
    dir_of(logdir, dir, sizeof dir);
    struct ckpt_section sec[8 + RL_MAX_OBSERVERS];
    char names[RL_MAX_OBSERVERS][32];
    int n = 0;
    cJSON *cj = rl_config_to_json(in->cfg);
    char *cfg = cJSON_PrintUnformatted(cj);
    cJSON_Delete(cj);
    sec[n++] = (struct ckpt_section){ "config", cfg, strlen(cfg) };
    unsigned char *params = NULL, *optim = NULL, *stats = NULL;
    size_t plen = 0, olen = 0, slen = 0;
    policy_save_state(in->policy, &params, &plen);
    sec[n++] = (struct ckpt_section){ "policy", params, plen };
    int rc = dist_optim_save_owned(in->opt, &optim, &olen);
    if (rc != 0) rl_set_error("checkpoint: %s", rpc_last_error());
    sec[n++] = (struct ckpt_section){ "optimizer", optim, olen };
    run_stats_save(in->stats, &stats, &slen);
    sec[n++] = (struct ckpt_section){ "counters", stats, slen };
    int64_t version = dist_optim_local_version();
    sec[n++] = (struct ckpt_section){ "version", &version, sizeof version };
    if (in->norm) sec[n++] = (struct ckpt_section){ "norm", in->norm, in->norm_len };
    unsigned char lr_from[16];
    memcpy(lr_from, &in->lr_from.steps, 8);
    memcpy(lr_from + 8, &in->lr_from.frac, 8);
    sec[n++] = (struct ckpt_section){ "lr_schedule", lr_from, sizeof lr_from };
    for (int k = 0; k < in->n_observers && k < RL_MAX_OBSERVERS; k++) {
        if (in->obs_state[k].kind != RPC_BYTES) continue;
        snprintf(names[k], sizeof names[k], "observer%d", k);
        sec[n++] = (struct ckpt_section){ names[k], in->obs_state[k].str.ptr, in->obs_state[k].str.len };
    }
    if (rc == 0 && ckpt_write(dir, updates, sec, n, AGENT_CKPT_KEEP) != 0)
        rc = rl_set_error("%s", runfiles_last_error());
    free(cfg);
    free(params);
    free(optim);
    free(stats);
    return rc;
}

int agent_ckpt_save(const char *logdir, int64_t updates, const struct agent_ckpt_in *in, int *failed_in_row)
{
    if (agent_ckpt_write(logdir, updates, in) == 0) {
        *failed_in_row = 0;
        return 0;
    }
    ++*failed_in_row;
    char why[1024], dir[1024], uses[1200];
    snprintf(why, sizeof why, "%s", rl_last_error());
    dir_of(logdir, dir, sizeof dir);
    struct ckpt *c = NULL;
    if (ckpt_load_latest(dir, &c, NULL, 0) == 1) snprintf(uses, sizeof uses, "a resume would use %s", c->path);
    else snprintf(uses, sizeof uses, "a resume finds no valid checkpoint in %s", dir);
    ckpt_free(c);
    return rl_set_error("checkpoint of update %lld FAILED (%d in a row): %s; %s%s", (long long)updates, *failed_in_row,
                        why, uses, *failed_in_row >= AGENT_CKPT_MAX_FAILURES ? "; stopping the run" : "");
}

/* The keys of --config that must match for a checkpoint to be resumed. */
static const char *const must_match[] = { "env", "algo", "mode", "observers", "envs_per_observer",
                                          "steps_per_rollout", "hidden", "activation", "dropout", NULL };

/* Normalisation (--norm-obs, --norm-reward) must match too: the saved
 * statistics and observers' states are made for it. A checkpoint of a
 * build before these fields reads them as its preset's (off). 0, or -1
 * with rl_last_error(). */
static int check_norm(const struct ckpt *c, const char *logdir, const struct rl_config *cfg)
{
    size_t len = 0;
    const char *text = ckpt_get(c, "config", &len);
    struct rl_config was;
    if (!text || rl_config_from_json(text, len, &was) != 0)
        return rl_set_error("--resume %s: checkpoint %s: its config: %s", logdir, c->path, rl_last_error());
    const char *flag = was.norm_obs != cfg->norm_obs ? "norm-obs" : was.norm_reward != cfg->norm_reward ? "norm-reward" : NULL;
    bool w = was.norm_obs != cfg->norm_obs ? was.norm_obs : was.norm_reward;
    if (flag)
        return rl_set_error("--resume %s: checkpoint %s was made with --%s %s, this run has %s", logdir, c->path, flag,
                            w ? "true" : "false", w ? "false" : "true");
    return 0;
}

const void *agent_ckpt_norm(const struct ckpt *c, size_t *len)
{
    const void *b = ckpt_get(c, "norm", len);
    if (!b) rl_set_error("checkpoint %s: no normalisation statistics (section norm)", c->path);
    return b;
}

/* The saved policy version, checked: 0..RUN_STATS_MAX_COUNT. */
static int saved_version(const struct ckpt *c, int64_t *out)
{
    size_t len;
    const void *b = ckpt_get(c, "version", &len);
    if (!b || len != sizeof(int64_t)) return rl_set_error("checkpoint %s: no version", c->path);
    int64_t v;
    memcpy(&v, b, sizeof v);
    if (v < 0 || v > RUN_STATS_MAX_COUNT)
        return rl_set_error("checkpoint %s: version %lld outside 0..%lld", c->path, (long long)v,
                            (long long)RUN_STATS_MAX_COUNT);
    *out = v;
    return 0;
}

int agent_ckpt_lr_schedule(const struct ckpt *c, struct agent_lr_from *from, int64_t *max_steps, bool *anneal,
                           double *lr)
{
    size_t len = 0;
    const char *text = ckpt_get(c, "config", &len);
    struct rl_config was;
    if (!text || rl_config_from_json(text, len, &was) != 0)
        return rl_set_error("checkpoint %s: its config: %s", c->path, text ? rl_last_error() : "missing");
    *max_steps = was.max_steps;
    *anneal = was.anneal_lr;
    *lr = was.lr;
    *from = (struct agent_lr_from){ 0, 1.0 };
    bool has = false;
    for (int i = 0; i < c->n_sections; i++) has |= strcmp(c->sections[i].name, "lr_schedule") == 0;
    if (!has) return 0;   /* an older build's: its anneal started at the run's start */
    const unsigned char *b = ckpt_get(c, "lr_schedule", &len);
    if (!b || len != 16) return rl_set_error("checkpoint %s: lr_schedule is %zu bytes, not 16", c->path, len);
    memcpy(&from->steps, b, 8);
    memcpy(&from->frac, b + 8, 8);
    if (from->steps < 0 || from->steps > RUN_STATS_MAX_COUNT)
        return rl_set_error("checkpoint %s: lr_schedule: env step %lld outside 0..%lld", c->path,
                            (long long)from->steps, (long long)RUN_STATS_MAX_COUNT);
    if (!(from->frac >= 0 && from->frac <= 1))
        return rl_set_error("checkpoint %s: lr_schedule: fraction %g of --lr outside 0..1", c->path, from->frac);
    return 0;
}

/* The counters and the version checked before the run touches anything
 * (its logdir, its observers): a refused resume leaves every file as it
 * was. */
static int check_numbers(const struct ckpt *c, const struct rl_config *cfg)
{
    size_t len;
    const void *b = ckpt_get(c, "counters", &len);
    if (!b) return rl_set_error("checkpoint %s: %s", c->path, runfiles_last_error());
    struct run_stats *scratch = run_stats_new(cfg, NAN);
    int rc = run_stats_load(scratch, b, len);
    run_stats_free(scratch);
    if (rc != 0) return rl_set_error("checkpoint %s: %s", c->path, rl_last_error());
    int64_t v, max_steps;
    struct agent_lr_from from;
    bool anneal;
    double lr;
    if (agent_ckpt_lr_schedule(c, &from, &max_steps, &anneal, &lr) != 0) return -1;
    return saved_version(c, &v);
}

/* A run before issue 35 recorded its plug-in's path as typed
 * ("./libmy.so"), now recorded absolute: the same file is the same env. */
static bool same_plugin(const char *key, const cJSON *saved, const cJSON *now)
{
    char a[PATH_MAX], b[PATH_MAX];
    return strcmp(key, "env") == 0 && cJSON_IsString(saved) && cJSON_IsString(now) &&
           strchr(saved->valuestring, '/') && realpath(saved->valuestring, a) && realpath(now->valuestring, b) &&
           strcmp(a, b) == 0;
}

struct ckpt *agent_ckpt_open(const char *logdir, const struct rl_config *cfg)
{
    char dir[1024], warn[2048] = "";
    dir_of(logdir, dir, sizeof dir);
    struct ckpt *c = NULL;
    int r = ckpt_load_latest(dir, &c, warn, sizeof warn);
    if (warn[0]) fprintf(stderr, "agent: %s\n", warn);
    if (r == 0) {
        rl_set_error("--resume %s: no checkpoint in %s", logdir, dir);
        return NULL;
    }
    if (r < 0) {
        rl_set_error("%s", runfiles_last_error());
        return NULL;
    }
    size_t len = 0;
    const char *text = ckpt_get(c, "config", &len);
    cJSON *saved = text ? rl_config_json_of(text, len) : NULL, *now = rl_config_to_json(cfg);
    const char *bad = saved ? NULL : "config";
    for (int i = 0; !bad && must_match[i]; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved, must_match[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, must_match[i]);
        if (!a || !b || !(cJSON_Compare(a, b, true) || same_plugin(must_match[i], a, b))) bad = must_match[i];
    }
    char *was = bad && saved ? cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(saved, bad)) : NULL;
    char *is = bad ? cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(now, bad)) : NULL;
    char flag[64] = "";
    for (size_t i = 0; bad && bad[i] && i + 1 < sizeof flag; i++) flag[i] = bad[i] == '_' ? '-' : bad[i];
    if (bad)
        rl_set_error("--resume %s: checkpoint %s was made with --%s %s, this run has %s", logdir, c->path, flag,
                     was ? was : "(unreadable config)", is ? is : "?");
    free(was);
    free(is);
    cJSON_Delete(saved);
    cJSON_Delete(now);
    if (bad || check_norm(c, logdir, cfg) != 0 || check_numbers(c, cfg) != 0) {
        ckpt_free(c);
        return NULL;
    }
    return c;
}

int agent_ckpt_restore(const struct ckpt *c, struct policy *p, struct dist_optim *opt, struct run_stats *stats)
{
    size_t len;
    const void *b = ckpt_get(c, "policy", &len);
    if (!b) return rl_set_error("checkpoint %s: %s", c->path, runfiles_last_error());
    if (policy_load_state(p, b, len) != 0) return rl_set_error("checkpoint %s: %s", c->path, rl_last_error());
    b = ckpt_get(c, "optimizer", &len);
    if (!b) return rl_set_error("checkpoint %s: %s", c->path, runfiles_last_error());
    if (dist_optim_load_owned(opt, b, len) != 0) return rl_set_error("checkpoint %s: %s", c->path, rpc_last_error());
    b = ckpt_get(c, "counters", &len);
    if (!b) return rl_set_error("checkpoint %s: %s", c->path, runfiles_last_error());
    if (run_stats_load(stats, b, len) != 0) return rl_set_error("checkpoint %s: %s", c->path, rl_last_error());
    int64_t v = 0;
    if (saved_version(c, &v) != 0) return -1;
    dist_optim_set_local_version(v);
    return 0;
}

const void *agent_ckpt_observer_state(const struct ckpt *c, int k, size_t *len)
{
    char name[32];
    snprintf(name, sizeof name, "observer%d", k);
    for (int i = 0; i < c->n_sections; i++)
        if (strcmp(c->sections[i].name, name) == 0) {
            *len = c->sections[i].size;
            return c->sections[i].data;
        }
    return NULL;
}
