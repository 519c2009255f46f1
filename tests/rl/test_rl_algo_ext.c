/* An algorithm defined outside rl/ through the public table (rl/algo.h,
 * docs/extending.md): tests/rl/vpg_train.c registers "vpg" (vanilla policy
 * gradient with a learned baseline) and runs tributary-train's main. Each
 * run here is real: the agent and two forked observer processes on
 * loopback, sync and async. It must have trained: the updates counted in
 * its summary, its losses finite, its policy's parameters moved away from
 * the ones its seed starts with. And the plain tributary-train, whose
 * registry holds only the built-ins, refuses --algo vpg-ext.
 *
 * And an observer serves only its algorithm's functions: this process
 * plays the agent to a real tributary-observer; before set-up it serves
 * none of rl_rollout, rl_loss and rl_episode, and set up for REINFORCE (an
 * episodes algorithm) still neither rl_rollout nor rl_loss. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/proc.h"
#include "rl/config.h"
#include "rl/messages.h"
#include "runfiles/policy_file.h"
#include "rpc/rpc.h"
#include "tensor/nn.h"
#include "kit.h"

static int run(const char *bin, const char *mode, const char *logdir)
{
    const char *argv[] = { bin, "--preset", "a2c", "--algo", "vpg-ext", "--mode", mode, "--seed", "5", "--device", "cpu",
                           "--max-updates", "20", "--log-every", "0.000001", "--quiet", "--logdir", logdir, NULL };
    return kit_run(bin, argv + 1, -1);
}

/* The summary: stdout's last line. */
static cJSON *summary(void)
{
    char *last = kit_out, *nl;
    while ((nl = strchr(last, '\n')) && nl[1]) last = nl + 1;
    cJSON *j = cJSON_Parse(last);
    ck_assert_msg(j != NULL, "no summary in: %s", kit_out);
    return j;
}

/* Every policy_loss and value_loss in metrics.csv is finite; how many rows. */
static int finite_losses(const char *dir)
{
    char path[400], line[4096];
    snprintf(path, sizeof path, "%s/metrics.csv", dir);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "missing %s", path);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    int col[2] = { -1, -1 }, i = 0, rows = 0;
    for (char *p = line, *c; (c = strsep(&p, ",\n")); i++) {
        if (!strcmp(c, "policy_loss")) col[0] = i;
        if (!strcmp(c, "value_loss")) col[1] = i;
    }
    ck_assert(col[0] >= 0 && col[1] >= 0);
    while (fgets(line, sizeof line, f)) {
        i = 0;
        for (char *p = line, *c; (c = strsep(&p, ",\n")); i++)
            if ((i == col[0] || i == col[1]) && *c) ck_assert_msg(isfinite(strtod(c, NULL)), "loss %s", c);
        rows++;
    }
    fclose(f);
    return rows;
}

/* How many of the saved policy's parameters differ from the ones its seed builds. */
static int params_moved(const char *dir)
{
    char path[400], env[256];
    snprintf(path, sizeof path, "%s/policy.safetensors", dir);
    struct policy_arch arch;
    struct nn_module *actor, *critic, *a0, *c0;
    ck_assert_msg(policy_file_load(path, &arch, env, sizeof env, &actor, &critic) == 0, "%s", path);
    ck_assert(arch.value_head && critic);
    ck_assert_int_eq(policy_arch_build(&arch, 5, &a0, &c0), 0);
    int moved = 0;
    struct nn_module *now[2] = { actor, critic }, *then[2] = { a0, c0 };
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < now[m]->n_params; i++)
            moved += memcmp(tensor_data(now[m]->params[i]), tensor_data(then[m]->params[i]),
                            (size_t)now[m]->params[i]->numel * sizeof(float)) != 0;
    nn_module_free(actor);
    nn_module_free(critic);
    nn_module_free(a0);
    nn_module_free(c0);
    return moved;
}

static void trains(const char *mode)
{
    char dir[200];
    snprintf(dir, sizeof dir, "/tmp/test_rl_algo_ext_%d_XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    rmdir(dir);
    int rc = run(VPG_TRAIN_BIN, mode, dir);
    ck_assert_msg(rc == 1, "%s: exit %d (the update budget ends it: 1)\n%s\n%s", mode, rc, kit_out, kit_err);
    cJSON *s = summary();
    ck_assert_str_eq(cJSON_GetObjectItem(s, "algo")->valuestring, "vpg-ext");
    ck_assert_str_eq(cJSON_GetObjectItem(s, "stopped_by")->valuestring, "budget");
    ck_assert_int_ge((int)cJSON_GetObjectItem(s, "updates")->valuedouble, 20);
    cJSON_Delete(s);
    ck_assert_int_ge(finite_losses(dir), 1);
    ck_assert_int_gt(params_moved(dir), 0);
    ck_assert_int_eq(kit_rm_rf(dir), 0);
}

START_TEST(test_vpg_sync) { trains("sync"); }
END_TEST

START_TEST(test_vpg_async) { trains("async"); }
END_TEST

START_TEST(test_plain_train_refuses_vpg)
{
    int rc = run(TRIB_TRAIN_BIN, "sync", "/tmp/test_rl_algo_ext_never");
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(kit_err, "bad value 'vpg-ext' for --algo"), "%s", kit_err);
}
END_TEST

/* fn on observer1 fails as a function it does not serve. */
static void not_served(const char *fn)
{
    struct rpc_value none = rpc_list(0), r = rpc_nil();
    ck_assert_int_ne(rpc_sync("observer1", fn, &none, &r, 30000), 0);
    char want[128];
    snprintf(want, sizeof want, "rpc: observer1: unknown function '%s'", fn);
    ck_assert_msg(strstr(rpc_last_error(), want), "%s: %s", fn, rpc_last_error());
    rpc_value_clear(&none);
    rpc_value_clear(&r);
}

START_TEST(test_observer_serves_its_algorithm)
{
    char master[64], rank[] = "1", world[] = "2";
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", proc_free_port());
    const char *argv[] = { TRIB_OBSERVER_BIN, "--master", master, "--rank", rank, "--world-size", world, NULL };
    struct proc_group g;
    proc_group_init(&g);
    ck_assert_int_eq(proc_spawn(&g, argv, PROC_CAPTURE, PROC_CAPTURE), 0);
    struct rpc_opts o = { .name = "agent", .rank = 0, .world_size = 2, .master = master, .default_timeout_ms = 60000,
                          .init_timeout_ms = 60000, .heartbeat_timeout_ms = 5000 };
    ck_assert_msg(rpc_init(&o) == 0, "rpc_init: %s", rpc_last_error());
    not_served(RL_FN_ROLLOUT);
    not_served(RL_FN_LOSS);
    not_served(RL_FN_EPISODE);

    struct rl_config cfg;
    ck_assert_int_eq(rl_config_preset(&cfg, "pytorch-rl-example"), 0);
    struct rpc_value pv = rpc_int(0), r = rpc_nil();
    struct rl_setup_msg m = { .config = rl_config_to_value(&cfg), .policy = rref_new_local_value(&pv),
                              .state = rpc_nil() };
    struct rpc_value a = rl_setup_pack(&m);
    ck_assert_msg(rpc_sync("observer1", RL_FN_SETUP, &a, &r, 60000) == 0, "setup: %s", rpc_last_error());
    rpc_value_clear(&a);
    rpc_value_clear(&r);
    rl_setup_clear(&m);
    not_served(RL_FN_ROLLOUT);
    not_served(RL_FN_LOSS);

    struct rpc_value none = rpc_list(0);
    ck_assert_int_eq(rpc_sync("observer1", RL_FN_SHUTDOWN, &none, &r, 30000), 0);
    rpc_value_clear(&none);
    rpc_shutdown(true);
    ck_assert_int_eq(proc_wait(&g, 0, 30), 0);
    proc_group_deinit(&g);
}
END_TEST

KIT_MAIN("rl_algo_ext",
         { "ext", 300, .tests = { test_vpg_sync, test_vpg_async, test_plain_train_refuses_vpg,
           test_observer_serves_its_algorithm } })
