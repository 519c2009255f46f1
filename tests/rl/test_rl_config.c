/* The run configuration's one schema (rl/config_fields.h): every field
 * round-trips command line -> struct -> JSON -> struct -> wire -> struct
 * identically; unknown keys are refused by name; an enum's error and help
 * list its choices; --help lists every field once with its default; a
 * preset's env-specific fields follow --env; old dashed config.json keys
 * still read. And common/argv's parser on its own. The programs run as
 * real processes (tributary-train) where the command line is the subject. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/argv.h"
#include "common/proc.h"
#include "envs/env.h"
#include "optim/optim.h"
#include "rl/algo.h"
#include "rl/config.h"
#include "rl/config_internal.h"
#include "rl/rl.h"
#include "kit.h"

/* A config whose every field differs from every preset's, set from the
 * command line's text: each field's example (rl/config_fields.h), in the
 * table's order (--preset first), made once by every_field_init. */
static const char *every_field[2 * RL_N_FIELDS + 1];

static void every_field_init(void)
{
    int n = 0;
    static char bools[RL_N_FIELDS][64];
    for (int k = 0; k < rl_n_fields; k++) {
        const struct rl_field *f = &rl_fields[k];
        if (!f->example) continue;
        if (f->kind == RL_K_BOOL) {
            ck_assert_msg(!strcmp(f->example, "true") || !strcmp(f->example, "false"), "%s's example", f->name);
            snprintf(bools[k], sizeof bools[k], "--%s", strcmp(f->example, "true") == 0 ? "" : "no-");
            rl_field_flag(f, bools[k] + strlen(bools[k]), sizeof bools[k] - strlen(bools[k]));
            every_field[n++] = bools[k];
            continue;
        }
        static char flags[RL_N_FIELDS][64];
        flags[k][0] = flags[k][1] = '-';
        rl_field_flag(f, flags[k] + 2, sizeof flags[k] - 2);
        every_field[n++] = flags[k];
        every_field[n++] = f->example;
    }
    every_field[n] = NULL;
    ck_assert_str_eq(every_field[0], "--preset");
}

/* The fields every_field sets: all but resume and overwrite (the layers'). */
static void set_from_text(struct rl_config *c)
{
    every_field_init();
    ck_assert_int_eq(rl_config_preset(c, every_field[1]), 0);
    for (int i = 2; every_field[i]; i++) {
        const struct rl_field *f = rl_field_find(every_field[i] + 2);
        if (!f && strncmp(every_field[i], "--no-", 5) == 0) {
            f = rl_field_find(every_field[i] + 5);
            ck_assert_ptr_nonnull(f);
            ck_assert_int_eq(rl_field_set(c, f, "false"), 0);
            continue;
        }
        ck_assert_msg(f != NULL, "%s", every_field[i]);
        const char *v = f->kind == RL_K_BOOL ? NULL : every_field[++i];
        ck_assert_msg(rl_field_set(c, f, v) == 0, "%s %s: %s", every_field[i - (v != NULL)], v ? v : "", rl_last_error());
    }
    ck_assert_int_eq(rl_config_check(c), 0);
}

/* Every field of a and b alike (byte for byte where they are numbers). */
static void same(const struct rl_config *a, const struct rl_config *b, const char *how)
{
    for (int k = 0; k < rl_n_fields; k++) {
        const struct rl_field *f = &rl_fields[k];
        if (f->flags & (RLF_CLI | RLF_NOJSON)) continue;
        char x[1200], y[1200];
        rl_field_format(a, f, x, sizeof x);
        rl_field_format(b, f, y, sizeof y);
        ck_assert_msg(strcmp(x, y) == 0, "%s: %s is %s, then %s", how, f->name, x, y);
        if (f->kind != RL_K_STR && f->kind != RL_K_ENVARGS && f->kind != RL_K_LIST)
            ck_assert_msg(memcmp((const char *)a + f->off, (const char *)b + f->off, f->size) == 0, "%s: %s's bytes", how, f->name);
    }
}

START_TEST(test_round_trip)
{
    struct rl_config cli, from_json, from_wire;
    set_from_text(&cli);
    /* every field set differs from the default preset's value */
    struct rl_config base;
    ck_assert_int_eq(rl_config_preset(&base, "ppo-fast"), 0);
    for (int k = 0; k < rl_n_fields; k++) {
        const struct rl_field *f = &rl_fields[k];
        if (f->flags & (RLF_CLI | RLF_NOJSON) || f->off == offsetof(struct rl_config, device)) continue;
        ck_assert_msg(f->example != NULL, "%s has no example (rl/config_fields.h)", f->name);
        char x[1200], y[1200];
        rl_field_format(&cli, f, x, sizeof x);
        rl_field_format(&base, f, y, sizeof y);
        ck_assert_msg(strcmp(x, y) != 0, "%s's example %s is the default preset's value", f->name, x);
    }
    cJSON *j = rl_config_to_json(&cli);
    char *text = cJSON_PrintUnformatted(j);
    ck_assert_int_eq(rl_config_from_json(text, strlen(text), &from_json), 0);
    same(&cli, &from_json, "JSON");
    /* one key per field (but the layers' own), each under its name */
    for (int k = 0; k < rl_n_fields; k++)
        ck_assert_msg(!cJSON_GetObjectItemCaseSensitive(j, rl_fields[k].name) == !!(rl_fields[k].flags & (RLF_CLI | RLF_NOJSON)),
                      "%s in config.json", rl_fields[k].name);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "hidden")), 3);
    free(text);
    cJSON_Delete(j);
    struct rpc_value v = rl_config_to_value(&from_json);
    ck_assert_int_eq(rl_config_from_value(&v, &from_wire), 0);
    rpc_value_clear(&v);
    same(&cli, &from_wire, "wire");
}
END_TEST

/* The same through the program: the command line's config.json, read back by --config. */
START_TEST(test_cli_config_json)
{
    char dir[] = "/tmp/test_rl_config_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[2 * RL_N_FIELDS + 16];
    int n = 0;
    every_field_init();
    for (int i = 0; every_field[i]; i++)   /* but --env-arg: Pendulum-v1 takes none */
        if (strcmp(every_field[i], "--env-arg") == 0) i++;
        else if (strcmp(every_field[i], "--logdir") == 0) args[n++] = every_field[i++], args[n++] = dir;
        else args[n++] = every_field[i];
    args[n++] = "--max-steps";   /* a short run of one update */
    args[n++] = "48";
    args[n++] = "--mode";
    args[n++] = "sync";
    args[n++] = "--no-vtrace";
    args[n] = NULL;
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, kit_err);   /* --stop-at-target false: no target, its budget spent */
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = NULL;
    ck_assert_msg(rl_config_load_json(path, &root, "test") == 0, "%s", rl_last_error());
    char *text = cJSON_PrintUnformatted(root);
    struct rl_config want, got;
    set_from_text(&want);
    want.max_steps = 48, want.mode = RL_MODE_SYNC, want.vtrace = false, want.env_arg[0] = '\0';
    snprintf(want.logdir, sizeof want.logdir, "%s", dir);
    ck_assert_msg(rl_config_from_json(text, strlen(text), &got) == 0, "%s", rl_last_error());
    same(&want, &got, "config.json");
    ck_assert_ptr_nonnull(strstr(text, "\"envs_per_observer\":6"));
    ck_assert_ptr_nonnull(strstr(text, "\"hidden\":[16,8,4]"));
    ck_assert_ptr_nonnull(strstr(text, "\"activation\":\"relu\""));
    free(text);
    cJSON_Delete(root);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
}
END_TEST

/* Old config.json keys (today's main wrote them dashed, "hidden" as text)
 * read as the new ones; CleanRL's names too; an unknown key by name. */
START_TEST(test_old_keys)
{
    const char *old = "{\"preset\":\"ppo\",\"envs-per-observer\":8,\"hidden\":\"32,16\",\"max-batch\":512,"
                      "\"log-every\":0.5,\"heartbeat-timeout\":3000,\"step-timeout\":7,\"anneal-lr\":false,"
                      "\"device\":\"cpu\",\"activation\":\"relu\",\"env-arg\":[],\"num-minibatches\":2}";
    struct rl_config c;
    ck_assert_msg(rl_config_from_json(old, strlen(old), &c) == 0, "%s", rl_last_error());
    ck_assert_int_eq(c.envs_per_observer, 8);
    ck_assert_int_eq(c.hidden.n, 2);
    ck_assert_int_eq(c.hidden.v[0], 32);
    ck_assert_int_eq(c.hidden.v[1], 16);
    ck_assert_int_eq(c.max_batch, 512);
    ck_assert(c.log_every == 0.5 && c.step_timeout == 7 && c.heartbeat_timeout == 3000 && !c.anneal_lr);
    ck_assert(c.activation == RL_ACT_RELU && c.device == RL_DEVICE_CPU && c.minibatches == 2);
    const char *bad = "{\"envs_per_observer\":8,\"bogus_key\":1}";
    ck_assert_int_eq(rl_config_from_json(bad, strlen(bad), &c), -1);
    ck_assert_str_eq(rl_last_error(), "config (saved): unknown key 'bogus_key'");
    const char *mode = "{\"mode\":\"asynch\"}";
    ck_assert_int_eq(rl_config_from_json(mode, strlen(mode), &c), -1);
    ck_assert_str_eq(rl_last_error(), "config (saved): bad value 'asynch' for 'mode' (choices: sync, async)");
    const char *cli_only = "{\"overwrite\":true}";
    ck_assert_int_eq(rl_config_from_json(cli_only, strlen(cli_only), &c), -1);
    ck_assert_str_eq(rl_last_error(), "config (saved): unknown key 'overwrite'");
}
END_TEST

/* A wire map that names no choice is refused, naming the choices (an enum
 * travels as its choice's name; one past the last is written "?"). */
START_TEST(test_wire_enum_range)
{
    struct rl_config c, back;
    ck_assert_int_eq(rl_config_preset(&c, "ppo-fast"), 0);
    c.mode = (enum rl_mode)2;
    struct rpc_value v = rl_config_to_value(&c);
    ck_assert_int_eq(rl_config_from_value(&v, &back), -1);
    ck_assert_str_eq(rl_last_error(), "config: bad value '?' for 'mode' (choices: sync, async)");
    rpc_value_clear(&v);
}
END_TEST

/* Every enum field (the table's, so a new one is covered by its row): a
 * bad value is refused naming all its choices, as its choices function
 * lists them; --mode's and --algo's words are pinned here too. */
START_TEST(test_enum_errors_list_choices)
{
    int enums = 0;
    for (int k = 0; k < rl_n_fields; k++) {
        const struct rl_field *f = &rl_fields[k];
        if (f->kind != RL_K_ENUM) continue;
        char flag[64], choices[512] = "", want[1024];
        rl_field_flag(f, flag, sizeof flag);
        size_t n = 0;
        for (int i = 0; f->choice(i); i++) n += (size_t)snprintf(choices + n, sizeof choices - n, "%s%s", i ? ", " : "", f->choice(i));
        ck_assert_msg(n > 0 && n < sizeof choices, "%s's choices", f->name);
        snprintf(want, sizeof want, "tributary-train: bad value 'nothing' for --%s (choices: %s) (see tributary-train --help)\n",
                 flag, choices);
        char opt[80];
        snprintf(opt, sizeof opt, "--%s", flag);
        const char *args[] = { opt, "nothing", NULL };
        ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args, -1), 2);
        ck_assert_str_eq(kit_err, want);
        ck_assert_str_eq(kit_out, "");
        enums++;
    }
    ck_assert_int_ge(enums, 5);
    /* the words pinned: the lists' first rows, which a new row (at the end) keeps */
    static const char *const pinned[][3] = { { "--mode", "asynch", "sync, async" }, { "--algo", "dqn", "reinforce, a2c, ppo" },
                                              { "--init", "foo", "pytorch, orthogonal" } };
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) {
        const char *args[] = { pinned[i][0], pinned[i][1], NULL };
        char want[256];
        int n = snprintf(want, sizeof want, "tributary-train: bad value '%s' for %s (choices: %s", pinned[i][1], pinned[i][0], pinned[i][2]);
        ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args, -1), 2);
        ck_assert_msg(strncmp(kit_err, want, (size_t)n) == 0, "%s", kit_err);
    }
}
END_TEST

/* The lists are the enums: each built-in algorithm's table is its row's
 * (name and number), each mode's name its row's, and the counts agree. */
START_TEST(test_lists_are_the_tables)
{
#define ALGO_ROW(id, name) ck_assert_str_eq(rl_algo_name(RL_ALGO_##id), #name);
    RL_BUILTIN_ALGOS(ALGO_ROW)
#undef ALGO_ROW
    ck_assert_ptr_nonnull(rl_algo_name(RL_ALGO_BUILTIN_COUNT - 1));
    ck_assert_ptr_null(rl_algo_name(RL_ALGO_BUILTIN_COUNT));
#define MODE_ROW(P, id, name, lags) ck_assert_str_eq(rl_mode_name(P##_##id), #name); ck_assert(rl_mode_lags(P##_##id) == lags);
    RL_MODES(MODE_ROW, RL_MODE)
#undef MODE_ROW
    ck_assert_ptr_null(rl_mode_name(RL_MODE_COUNT));
    ck_assert_int_eq(rl_n_fields, RL_N_FIELDS);
}
END_TEST

/* --help: every field's flag once, with its default (or the help's own). */
START_TEST(test_help_lists_every_field)
{
    const char *args[] = { "--help", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, args, -1), 0);
    for (int k = 0; k < rl_n_fields; k++) {
        char flag[64], entry[80];
        rl_field_flag(&rl_fields[k], flag + 2, sizeof flag - 2);
        flag[0] = flag[1] = '-';
        snprintf(entry, sizeof entry, "\n      %s ", flag);
        const char *at = strstr(kit_out, entry);
        if (!at) {
            snprintf(entry, sizeof entry, "\n      %s\n", flag);
            at = strstr(kit_out, entry);
        }
        ck_assert_msg(at != NULL, "--help lacks %s", flag);
        ck_assert_msg(!strstr(at + 1, entry), "--help lists %s twice", flag);
        const char *next = strstr(at + 1, "\n      --");
        size_t len = next ? (size_t)(next - at) : strlen(at);
        char body[2000];
        snprintf(body, sizeof body, "%.*s", (int)(len < sizeof body ? len : sizeof body - 1), at);
        bool own = rl_fields[k].flags & (RLF_OWN_DEFAULT | RLF_CLI) ||
                   rl_fields[k].off == offsetof(struct rl_config, resume) ||
                   rl_fields[k].off == offsetof(struct rl_config, preset);
        ck_assert_msg(own || strstr(body, "(default "), "%s without its default: %s", flag, body);
    }
    ck_assert_ptr_nonnull(strstr(kit_out, "(default 4; ppo 1, a2c 2, pendulum 2, mujoco 1, mujoco-fast 2, zoo 1)"));   /* --observers, presets' values */
    ck_assert_ptr_nonnull(strstr(kit_out, "(choices: sync, async)"));
    ck_assert_ptr_nonnull(strstr(kit_out, "(also --num-envs)"));
    ck_assert_ptr_nonnull(strstr(kit_out, "pytorch-rl-example  REINFORCE as PyTorch's RPC RL example"));
}
END_TEST

/* The target a run stops at: its config.json's (absent: the env's own).
 * want: its exit status (0 without a target: its budget spent). */
static bool run_target(const char *const *extra, int want, double *target, int64_t *max_steps)
{
    char dir[] = "/tmp/test_rl_config_env_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *args[40] = { "--max-updates", "1", "--observers", "1", "--envs-per-observer", "2",
                             "--steps-per-rollout", "8", "--minibatches", "1", "--quiet", "--logdir", dir };
    int n = 13;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    int rc = kit_run(TRIB_TRAIN_BIN, args, -1);
    ck_assert_msg(rc == want, "exit %d, not %d: %s", rc, want, kit_err);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *root = NULL;
    ck_assert_msg(rl_config_load_json(path, &root, "test") == 0, "%s", rl_last_error());
    const cJSON *t = cJSON_GetObjectItem(root, "target");
    *target = t ? t->valuedouble : NAN;
    *max_steps = (int64_t)cJSON_GetObjectItem(root, "max_steps")->valuedouble;
    cJSON_Delete(root);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
    return t != NULL;
}

/* The user's case: --preset pendulum --env my.so kept Pendulum's target
 * -200 (and its 200k steps). A preset's env fields follow the env unless
 * given; on the preset's own env they stay. */
START_TEST(test_preset_env_follow)
{
    double target;
    int64_t steps;
    const char *own[] = { "--preset", "pendulum", NULL };
    ck_assert(run_target(own, 1, &target, &steps));
    ck_assert(target == -200 && steps == 200000);
    const char *other[] = { "--preset", "pendulum", "--env", POINT_REACH_SO, NULL };
    ck_assert_msg(!run_target(other, 0, &target, &steps), "--env %s kept the target %g", POINT_REACH_SO, target);
    ck_assert_int_eq(steps, 500000);
    /* a plug-in under a preset with a suite (mujoco: one's own robot) is
     * one of it: the suite's budget holds (it got 500k), and the run says
     * so on its first line (issue 35) */
    const char *suite[] = { "--preset", "mujoco-fast", "--env", POINT_REACH_SO, NULL };
    ck_assert_msg(!run_target(suite, 0, &target, &steps), "mujoco-fast on a plug-in has the target %g", target);
    ck_assert_msg(steps == 1000000, "mujoco-fast on a plug-in: --max-steps %lld", (long long)steps);
    ck_assert_msg(strstr(kit_out, "; no target; budget 1000000 env steps or 1 update\n"), "%s", kit_out);
    const char *given[] = { "--preset", "pendulum", "--env", POINT_REACH_SO, "--target", "-150", "--max-steps", "9000", NULL };
    ck_assert(run_target(given, 1, &target, &steps));
    ck_assert(target == -150 && steps == 9000);
    /* --env in a --config file counts as given too */
    char file[] = "/tmp/test_rl_config_cfg_XXXXXX";
    int fd = mkstemp(file);
    ck_assert_int_ge(fd, 0);
    char text[600];
    int len = snprintf(text, sizeof text, "{\"preset\": \"pendulum\", \"env\": \"%s\"}", POINT_REACH_SO);
    ck_assert_int_eq(write(fd, text, (size_t)len), len);
    close(fd);
    const char *cfg[] = { "--config", file, NULL };
    bool has = run_target(cfg, 0, &target, &steps);
    unlink(file);
    ck_assert_msg(!has, "--config's env kept the target %g", target);
}
END_TEST

/* ---- the zoo's rows -------------------------------------------------------------- */

/* rl-baselines3-zoo's hyperparams/ppo.yml (commit 00128b5d46d4), its MuJoCo
 * rows in the yml's own terms, SB3's PPO defaults filled in where a row has
 * none; -1: "not in the row" for n_envs (the zoo's default 1). tuned: the
 * row's policy_kwargs (log_std_init -2, ortho_init False, nn.ReLU,
 * pi=vf=[256, 256]); otherwise MlpPolicy's (64,64 Tanh, 0, ortho_init True). */
static const struct zoo_yml {
    const char *env;
    int n_envs, n_steps, batch_size, n_epochs;
    double gamma, gae_lambda, learning_rate, clip_range, ent_coef, vf_coef, max_grad_norm, n_timesteps;
    bool tuned;
} zoo_yml[] = {
    { "HalfCheetah-v4", 1, 512, 64, 20, 0.98, 0.92, 2.0633e-05, 0.1, 0.000401762, 0.58096, 0.8, 1e6, true },
    { "Hopper-v4", 1, 512, 32, 5, 0.999, 0.99, 9.80828e-05, 0.2, 0.00229519, 0.835671, 0.7, 1e6, true },
    { "Walker2d-v4", 1, 512, 32, 20, 0.99, 0.95, 5.05041e-05, 0.1, 0.000585045, 0.871923, 1, 1e6, false },
    { "Ant-v4", -1, 2048, 64, 10, 0.99, 0.95, 3e-4, 0.2, 0.0, 0.5, 0.5, 1e6, false },
    { "Swimmer-v4", -1, 2048, 64, 10, 0.9999, 0.95, 3e-4, 0.2, 0.0, 0.5, 0.5, 1e6, false },
    { "Humanoid-v4", 1, 512, 256, 5, 0.95, 0.9, 3.56987e-05, 0.3, 0.00238306, 0.431892, 2, 1e7, true },
    { "InvertedPendulum-v4", 1, 32, 64, 5, 0.999, 0.9, 0.000222425, 0.4, 1.37976e-07, 0.19816, 0.3, 1e6, false },
    { "InvertedDoublePendulum-v4", 1, 128, 512, 10, 0.98, 0.8, 0.000155454, 0.4, 1.05057e-06, 0.695929, 0.5, 1e6,
      false },
    { "Reacher-v4", 1, 512, 32, 5, 0.9, 1.0, 0.000104019, 0.3, 7.52585e-08, 0.950368, 0.9, 1e6, false },
};

/* Each row of --preset zoo is its yml entry, mapped as rl/config.c says;
 * every env of the family has a row and the first is the preset's own. */
START_TEST(test_zoo_rows)
{
    const struct rl_preset *p = rl_preset_find("zoo");
    ck_assert_ptr_nonnull(p);
    const struct rl_preset_row *rows = rl_preset_rows(p);
    ck_assert_ptr_nonnull(rows);
    int n = 0;
    while (rows[n].env) n++;
    ck_assert_int_eq(n, (int)(sizeof zoo_yml / sizeof zoo_yml[0]));
    struct rl_config own, first;
    ck_assert_int_eq(rl_config_preset(&own, "zoo"), 0);
    for (size_t i = 0; i < sizeof zoo_yml / sizeof zoo_yml[0]; i++) {
        const struct zoo_yml *y = &zoo_yml[i];
        struct rl_config c;
        ck_assert_msg(rl_config_preset_env(&c, "zoo", y->env) == 0, "%s: %s", y->env, rl_last_error());
        ck_assert_msg(rl_config_check(&c) == 0, "%s: %s", y->env, rl_last_error());
        if (i == 0) first = c;
        ck_assert_str_eq(c.env, y->env);
        ck_assert_str_eq(c.preset, "zoo");
        int envs = y->n_envs < 0 ? 1 : y->n_envs, rollout = envs * y->n_steps;
        ck_assert_int_eq(c.observers, 1);
        ck_assert_int_eq(c.envs_per_observer, envs);
        ck_assert_int_eq(c.steps_per_rollout, y->n_steps);
        ck_assert_int_eq(c.minibatches, y->batch_size >= rollout ? 1 : rollout / y->batch_size);
        ck_assert_int_eq(c.epochs, y->n_epochs);
        ck_assert_double_eq(c.gamma, y->gamma);
        ck_assert_double_eq(c.gae_lambda, y->gae_lambda);
        ck_assert_double_eq(c.lr, y->learning_rate);
        ck_assert(!c.anneal_lr);   /* constant: no lin_ in these rows */
        ck_assert_double_eq(c.clip, y->clip_range);
        ck_assert(!c.clip_vloss);   /* clip_range_vf None */
        ck_assert_double_eq(c.ent_coef, y->ent_coef);
        ck_assert_double_eq(c.vf_coef, y->vf_coef);
        ck_assert_double_eq(c.max_grad_norm, y->max_grad_norm);
        ck_assert_int_eq(c.max_steps, (int64_t)y->n_timesteps);
        ck_assert(c.norm_obs && c.norm_reward && c.clip_obs == 10 && c.clip_reward == 10);   /* normalize: true */
        ck_assert(!c.stop_at_target);
        ck_assert(c.norm_adv && c.opt_eps == 1e-5 && c.optimizer == OPTIM_ADAM && c.algo == RL_ALGO_PPO);
        ck_assert_int_eq(c.hidden.n, 2);
        ck_assert_int_eq(c.hidden.v[0], y->tuned ? 256 : 64);
        ck_assert_int_eq(c.hidden.v[1], y->tuned ? 256 : 64);
        ck_assert_int_eq(c.activation, y->tuned ? RL_ACT_RELU : RL_ACT_TANH);
        ck_assert_double_eq(c.init_log_std, y->tuned ? -2.0 : 0.0);
        ck_assert_int_eq(c.init, y->tuned ? RL_INIT_PYTORCH : RL_INIT_ORTHOGONAL);
    }
    same(&own, &first, "zoo and zoo on its first row");
    struct rl_config c;
    ck_assert_int_eq(rl_config_preset_env(&c, "zoo", "CartPole-v1"), -1);
    ck_assert_str_eq(rl_last_error(), "--preset zoo has no row for --env CartPole-v1 (its rows: HalfCheetah-v4, "
                                      "Hopper-v4, Walker2d-v4, Ant-v4, Swimmer-v4, Humanoid-v4, InvertedPendulum-v4, "
                                      "InvertedDoublePendulum-v4, Reacher-v4)");
}
END_TEST

/* The command line: --env picks the row (a flag given wins over it), the
 * run prints the row's source and its notes at load, an env without a row
 * is refused, --help lists the rows. */
START_TEST(test_zoo_cli)
{
    const char *help[] = { "--help", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, help, -1), 0);
    ck_assert_msg(strstr(kit_out, "rows (--env): HalfCheetah-v4 (the default), Hopper-v4, Walker2d-v4, Ant-v4,\n") &&
                      strstr(kit_out, "InvertedDoublePendulum-v4,\n") && strstr(kit_out, "Reacher-v4\n"),
                  "%s", kit_out);
    const char *cartpole[] = { "--preset", "zoo", "--env", "CartPole-v1", NULL };
    ck_assert_int_eq(kit_run(TRIB_TRAIN_BIN, cartpole, -1), 2);
    ck_assert_msg(strstr(kit_err, "tributary-train: --preset zoo has no row for --env CartPole-v1 (its rows: "), "%s",
                  kit_err);
    if (!env_mujoco_available()) {
        fprintf(stderr, "test_zoo_cli: the runs skipped: built without MuJoCo\n");
        return;
    }
    const char *ip[] = { "--preset", "zoo", "--env", "InvertedPendulum-v4", "--max-updates", "1", "--quiet", NULL };
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, ip, -1) == 0, "%s", kit_err);
    ck_assert_str_eq(kit_err, "tributary-train: --preset zoo on InvertedPendulum-v4: rl-baselines3-zoo's "
                              "InvertedPendulum-v3 row\n"
                              "tributary-train: --preset zoo on InvertedPendulum-v4: batch_size 64 exceeds the rollout "
                              "(1 env x 32 steps): SB3 takes the rollout whole, so --minibatches 1\n");
    ck_assert_msg(strstr(kit_out, "on InvertedPendulum-v4: 1 observer x 1 env x 32 steps, 64-64 tanh (orthogonal init), "
                                  "lr 0.000222425, gamma 0.999, lambda 0.9, 5 epochs x 1 minibatch, clip 0.4"),
                  "%s", kit_out);
    const char *hop[] = { "--preset", "zoo", "--env", "Hopper-v4", "--lr", "1e-3", "--max-updates", "1", "--quiet", NULL };
    ck_assert_msg(kit_run(TRIB_TRAIN_BIN, hop, -1) == 0, "%s", kit_err);
    ck_assert_str_eq(kit_err, "tributary-train: --preset zoo on Hopper-v4: rl-baselines3-zoo's Hopper-v3 row\n");
    ck_assert_msg(strstr(kit_out, "on Hopper-v4: 1 observer x 1 env x 512 steps, 256-256 relu, lr 0.001, gamma 0.999, "
                                  "lambda 0.99, 5 epochs x 16 minibatches, clip 0.2"),
                  "%s", kit_out);
}
END_TEST

/* ---- common/argv on its own ---------------------------------------------------- */

static long n_seen;
static const char *last;
static int set_n(void *u, const char *v)
{
    (void)u;
    return argv_long("num", v, 1, 9, &n_seen);
}
static int set_s(void *u, const char *v)
{
    *(const char **)u = v ? v : "on";
    return 0;
}
static const char *color(int i)
{
    static const char *const c[] = { "red", "blue" };
    return i >= 0 && i < 2 ? c[i] : NULL;
}
static int set_color(void *u, const char *v)
{
    (void)u;
    return color(0) && (strcmp(v, "red") == 0 || strcmp(v, "blue") == 0) ? 0 : -1;
}

START_TEST(test_argv_forms)
{
    const char *sw = NULL, *pos = NULL;
    struct argv_opt opts[] = {
        { .name = "num", .arg = "N", .short_name = 'n', .set = set_n, .help = "a number" },
        { .name = "flag", .set = set_s, .user = &sw, .negatable = true, .help = "a switch" },
        { .name = "color", .arg = "C", .set = set_color, .choice = color, .help = "a color", .alias = "colour" },
        { .name = NULL, .set = set_s, .user = &pos },
    };
    char *a1[] = { "p", "--num=3", "--no-flag", "--colour", "red", "file", NULL };
    ck_assert_int_eq(argv_parse("p", NULL, opts, 4, 6, a1), 0);
    ck_assert_int_eq(n_seen, 3);
    ck_assert_str_eq(sw, "false");
    ck_assert_str_eq(pos, "file");
    char *a2[] = { "p", "-n", "4", "--flag", NULL };
    ck_assert_int_eq(argv_parse("p", NULL, opts, 4, 4, a2), 0);
    ck_assert_int_eq(n_seen, 4);
    ck_assert_str_eq(sw, "on");
    (void)last;
}
END_TEST

/* argv's errors, on stderr (a child, so they can be read). */
START_TEST(test_argv_errors)
{
    struct argv_opt opts[] = {
        { .name = "num", .arg = "N", .set = set_n, .help = "a number" },
        { .name = "color", .arg = "C", .set = set_color, .choice = color, .help = "a color" },
    };
    static char *cases[][4] = {
        { "p", "--num", "12", NULL }, { "p", "--color", "green", NULL }, { "p", "--num", NULL },
        { "p", "--bogus", NULL }, { "p", "stray", NULL },
    };
    static const char *want[] = {
        "p: --num must be an integer in 1..9, not '12' (see p --help)\n",
        "p: bad value 'green' for --color (choices: red, blue) (see p --help)\n",
        "p: option '--num' needs a value (see p --help)\n",
        "p: unknown option '--bogus' (see p --help)\n",
        "p: unexpected argument 'stray' (see p --help)\n",
    };
    for (int i = 0; i < 5; i++) {
        fflush(stderr);
        FILE *tmp = tmpfile();
        ck_assert_ptr_nonnull(tmp);
        int saved = dup(2);
        dup2(fileno(tmp), 2);
        int argc = 0;
        while (cases[i][argc]) argc++;
        int rc = argv_parse("p", NULL, opts, 2, argc, cases[i]);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char buf[400] = "";
        rewind(tmp);
        size_t n = fread(buf, 1, sizeof buf - 1, tmp);
        buf[n] = '\0';
        fclose(tmp);
        ck_assert_int_eq(rc, 2);
        ck_assert_str_eq(buf, want[i]);
    }
}
END_TEST

/* ---- the command line's messages for what CleanRL users write (issue 35) ---- */

/* An integer field takes 1e6 and 2.5e5 (CleanRL's --total-timesteps 1e6):
 * was "bad value '1e6'". */
START_TEST(test_cli_integer_exponent)
{
    struct rl_config c;
    char *a[] = { "p", "--total-timesteps", "1e6", "--max-updates", "2.5e5", "--seed", "3E2", "--observers", "2e0",
                  NULL };
    ck_assert_int_eq(rl_config_parse(&c, "p", "", 9, a, NULL, 0), -1);
    ck_assert_int_eq(c.max_steps, 1000000);
    ck_assert_int_eq(c.max_updates, 250000);
    ck_assert_int_eq(c.seed, 300);
    ck_assert_int_eq(c.observers, 2);
    long n = 0;   /* the programs' own integer options (common/argv) too */
    ck_assert_int_eq(argv_long("episodes", "1e2", 1, 1000, &n), 0);
    ck_assert_int_eq(n, 100);
    ck_assert_int_eq(argv_long("episodes", "1.5", 1, 1000, &n), -1);
    ck_assert_str_eq(argv_last_error(), "--episodes must be an integer in 1..1000, not '1.5'");
    long long x = 0;
    static const char *const refused[] = { "1.5", "1e-3", "0x10", "1e", "e6", "1e6x", "1e300", "nan", "inf", "" };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        ck_assert_msg(argv_integer(refused[i], &x) == -1, "'%s' read as %lld", refused[i], x);
}
END_TEST

/* Each message as tributary-train prints it. */
START_TEST(test_cli_messages)
{
    static const struct {
        const char *args[5], *want;
    } cases[] = {
        /* was: "unexpected argument '256'" */
        { { "--hidden", "256", "256", NULL },
          "tributary-train: unexpected argument '256': --hidden takes one comma-separated value, e.g. --hidden "
          "256,256 (see tributary-train --help)\n" },
        /* was: "unexpected argument 'false'" */
        { { "--norm-obs", "false", NULL },
          "tributary-train: unexpected argument 'false': --norm-obs is a switch and takes no value: --norm-obs turns "
          "it on, --no-norm-obs off (see tributary-train --help)\n" },
        { { "--norm-obs=false", NULL },
          "tributary-train: option '--norm-obs' takes no value: --norm-obs turns it on, --no-norm-obs off (see "
          "tributary-train --help)\n" },
        { { "--lr", "1e-3", "3e-4", NULL },
          "tributary-train: unexpected argument '3e-4': --lr takes one value (see tributary-train --help)\n" },
        /* was: "bad value '1.5' for --max-steps" */
        { { "--total-timesteps", "1.5", NULL },
          "tributary-train: --max-steps takes an integer (e.g. 1000000 or 1e6), not '1.5' (see tributary-train "
          "--help)\n" },
        { { "--max-steps", "1e-3", NULL },
          "tributary-train: --max-steps takes an integer (e.g. 1000000 or 1e6), not '1e-3' (see tributary-train "
          "--help)\n" },
        { { "--observers", "1e12", NULL },
          "tributary-train: --observers takes an integer of at most 2147483647 (e.g. 1000000 or 1e6), not '1e12' (see "
          "tributary-train --help)\n" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = kit_run(TRIB_TRAIN_BIN, cases[i].args, 60);
        ck_assert_msg(rc == 2, "%s: exit %d\n%s", cases[i].args[0], rc, kit_err);
        ck_assert_str_eq(kit_err, cases[i].want);
    }
}
END_TEST

/* --config's JSON errors say where (line and column): was "not a JSON
 * object" alone. */
START_TEST(test_config_json_position)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        { "{\"lr\": 0.001,\n \"epochs\": 3,\n}\n",
          "not a JSON object: invalid JSON at line 3, column 1: a comma before '}' (at line 2, column 13; JSON has no "
          "trailing commas)" },
        { "{\"hidden\": [64, 64,], \"lr\": 1}",
          "not a JSON object: invalid JSON at line 1, column 20: a comma before ']' (at line 1, column 19; JSON has "
          "no trailing commas)" },
        { "{\n  \"lr\": 0.001\n  \"epochs\": 3\n}", "not a JSON object: invalid JSON at line 3, column 3 (near "
                                                      "'\"epochs\": 3\\x0a')" },
        { "{\"lr\": 0.001", "not a JSON object: the text ends at line 1, column 12 (near '1') before the object does" },
        { "[1, 2]", "not a JSON object (valid JSON, but another kind of value)" },
    };
    char path[] = "/tmp/test_rl_config_json_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        ck_assert(f && fputs(cases[i].text, f) >= 0 && fclose(f) == 0);
        cJSON *root = NULL;
        ck_assert_int_eq(rl_config_load_json(path, &root, "--config"), -1);
        char want[600];
        snprintf(want, sizeof want, "--config %s: %s", path, cases[i].want);
        ck_assert_str_eq(rl_last_error(), want);
    }
    unlink(path);
}
END_TEST

KIT_MAIN("rl_config",
         { "schema", 300, .tests = { test_round_trip, test_cli_config_json, test_old_keys, test_wire_enum_range,
           test_enum_errors_list_choices, test_lists_are_the_tables, test_help_lists_every_field,
           test_preset_env_follow, test_zoo_rows, test_zoo_cli, test_argv_forms, test_argv_errors, test_cli_integer_exponent, test_cli_messages,
           test_config_json_position } })
