/* End-to-end tests of what a peer or a plug-in can do to a run, and what
 * the run promises back (README "A lost observer" and "Security"):
 *  - forged: this test process joins a tributary-agent as its observer and
 *    sends rl_update calls with out-of-range numbers (version0 INT64_MIN,
 *    huge steps, a report that is no rollout's, a version from the future):
 *    each is refused with an exact message naming the field and the
 *    sender, the agent does not abort (ASan/UBSan builds too) and its
 *    summary counts only the one valid update; an update whose gradients
 *    are NaN is refused too (the policy is unchanged);
 *  - nonfinite: a plug-in whose observations or rewards turn NaN/Inf is
 *    refused at the observer, naming the env, the observer, the step and
 *    the value, with REINFORCE, A2C and PPO; the agent says it dropped
 *    that observer (not that it lost it), and what the run saves is
 *    finite;
 *  - async checkpoints: an async run writes a checkpoint every
 *    --checkpoint-every updates; after a kill -9 the newest resumes;
 *  - stuck steps: a plug-in whose step never returns makes its observer
 *    give up after --step-timeout (naming the env and itself) and the run
 *    goes on without it, sync and async; with no step limit, --max-seconds
 *    and the first SIGINT still end the run within the documented bound,
 *    with the summary and a final checkpoint; so does --max-seconds
 *    during a long sync iteration of quick updates;
 *  - sync: a sync agent serves no rl_update (a well-formed one is an
 *    unknown function there);
 *  - silent peer: an observer that never answers rl_shutdown holds the
 *    agent's exit up by at most the end-of-run call limit (3 s);
 *  - endless: an env whose episodes never end, evaluated (--eval-every):
 *    --max-seconds and SIGINT abandon the evaluation and end the run in
 *    bound, and tributary-eval cuts its episodes at the step cap;
 *  - gone: when every observer crashed or gave up, the agent ends at once
 *    as a failure saying how each went (never "(alive)"), sync and async,
 *    tributary-train and tributary-agent with observers of its own;
 *  - hostile members (issue 33): a sync member that takes its rollout and
 *    never acts is dropped after --step-timeout, naming why, and the honest
 *    observer trains on; what a member says (rl_gave_up, an error reply)
 *    reaches the agent's stderr escaped, so it forges no line; an observer
 *    killed during its set-up is dropped and the others train, sync and
 *    async; a plug-in whose unload crashes says so, naming it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <stdatomic.h>

#include "envs/env.h"
#include "rl/config.h"
#include "rl/messages.h"
#include "rl/rl.h"
#include "rl/finite.h"
#include "runfiles/policy_file.h"
#include "runfiles/runfiles.h"
#include "runfiles/safetensors.h"
#include "rpc/dist_autograd.h"
#include "rpc/rpc.h"
#include "tensor/ops.h"

#include "rl_harness.h"
#include "kit.h"

#define HB_MS "2000"                /* --heartbeat-timeout of every process here */
#define WAIT_S 60.0                 /* for one expected line, ASan and a loaded box included */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static char scratch[64];            /* a test's directory under /tmp, removed by the teardown */

static void teardown(void)
{
    rl_kill_all();
    if (scratch[0]) nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    scratch[0] = '\0';
}

/* ---- forged rl_update calls ------------------------------------------------------------ */

#define FORGE_T 32                  /* the agent's --steps-per-rollout and --envs-per-observer */
#define FORGE_B 4
#define N_FORGED 6

/* What this test's observer saw; filled on its handler thread, read by
 * the test after the agent has shut it down. */
static struct {
    struct rref *policy;
    atomic_bool shutdown;
    int rc[N_FORGED + 1];           /* rpc_sync of each forged update, then the valid one */
    char err[N_FORGED + 1][512];
    char fail[512];                 /* a step of the fake observer that failed */
    bool update_at_setup;           /* fake_setup sends one valid rl_update (into rc[0]), then fails */
    const char *setup_error;        /* fake_setup fails with this text */
} forge;

static void send_in_ctx(int i, struct rl_update_req *m, bool nan_grads);
static struct rl_report honest_report(void);

static int fake_setup(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rl_setup_msg m;
    if (rl_setup_unpack(args, &m) != 0) return rpc_request_fail(req, "%s", rl_last_error());
    forge.policy = rref_retain(m.policy);
    rl_setup_clear(&m);
    if (forge.setup_error) return rpc_request_fail(req, "%s", forge.setup_error);
    if (forge.update_at_setup) {
        struct rl_update_req u = { .has_report = true, .report = honest_report() };
        u.stats.policy_loss = 0.5;
        send_in_ctx(0, &u, false);
        rref_free(forge.policy);
        forge.policy = NULL;
        return rpc_request_fail(req, "this observer only sent an update");
    }
    *res = rpc_nil();
    return 0;
}

static int fake_shutdown(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_store(&forge.shutdown, true);
    *res = rpc_nil();
    return 0;
}

/* Starts tributary-agent with args (one observer) and joins it as its
 * observer1, serving rl_setup (fake_setup), rl_run_async and rl_shutdown
 * with the given handlers. */
static void join_as_observer(struct rl_proc *agent, const char *const *args, rpc_fn run_async, rpc_fn shutdown)
{
    rl_start(agent, TRIB_AGENT_BIN, args, NULL);
    char ep[128];
    rl_agent_endpoint(agent, ep, sizeof ep, WAIT_S);
    dist_autograd_init();
    rpc_register(RL_FN_SETUP, fake_setup, NULL);
    rpc_register(RL_FN_RUN_ASYNC, run_async, NULL);
    rpc_register(RL_FN_SHUTDOWN, shutdown, NULL);
    struct rpc_opts o = { .name = "observer1", .rank = 1, .world_size = 2, .master = ep, .default_timeout_ms = 60000,
                          .init_timeout_ms = 60000, .heartbeat_timeout_ms = 2000 };
    ck_assert_msg(rpc_init(&o) == 0, "rpc_init: %s", rpc_last_error());
}

/* One update with ctx's gradients as u says; its status and error. */
static void send_update(int i, const struct rl_update_req *u)
{
    struct rpc_value a = rl_update_req_pack(u), r = rpc_nil();
    forge.rc[i] = rpc_sync("agent", RL_FN_UPDATE, &a, &r, 0);
    snprintf(forge.err[i], sizeof forge.err[i], "%s", forge.rc[i] ? rpc_last_error() : "");
    rpc_value_clear(&a);
    rpc_value_clear(&r);
}

/* A rollout's report: T x B steps, one episode of return 10. */
static struct rl_report honest_report(void)
{
    struct rl_report r = { .steps = FORGE_T * FORGE_B };
    rl_report_add(&r, 10.0, 10);
    return r;
}

/* A policy forward on obs [1,4] of zeros in context ctx (new references
 * in *out), or false with forge.fail set. */
static bool forward(int64_t ctx, struct rl_policy_out *out)
{
    dist_autograd_set_current(ctx);
    int64_t shape[2] = { 1, 4 };
    struct tensor *obs = tensor_new(DTYPE_F32, DEVICE_CPU, 2, shape);
    memset(tensor_data(obs), 0, 4 * sizeof(float));
    struct rpc_value a = rl_obs_pack(obs, false), r = rpc_nil();
    bool ok = rref_rpc_sync(forge.policy, RL_METHOD_EVALUATE, &a, &r, 0) == 0 &&
              rl_policy_out_unpack(&r, 1, 2, false, true, out) == 0;
    if (!ok) snprintf(forge.fail, sizeof forge.fail, "evaluate: %s %s", rpc_last_error(), rl_last_error());
    rpc_value_clear(&a);
    rpc_value_clear(&r);
    tensor_free(obs);
    return ok;
}

/* A new context holding real gradients on the agent: the policy's forward
 * with graph, its output summed (nan_grads: sum(log(a - a)), whose gradient
 * with respect to a is inf - inf), the backward. */
static int64_t grad_ctx(bool nan_grads)
{
    int64_t ctx = dist_autograd_context_new();
    struct rl_policy_out out;
    if (!forward(ctx, &out)) return ctx;
    struct tensor *d = nan_grads ? tensor_sub(out.a, out.a) : NULL, *l = d ? tensor_log(d) : NULL;
    struct tensor *loss = tensor_sum(l ? l : out.a);
    if (dist_autograd_backward(ctx, 1, &loss, false) != 0)
        snprintf(forge.fail, sizeof forge.fail, "backward: %s", rpc_last_error());
    tensor_free(loss);
    tensor_free(l);
    tensor_free(d);
    rl_policy_out_clear(&out);
    return ctx;
}

/* One update as m says, in a fresh context (the agent frees its copy of
 * the context whether it takes the update or refuses it). */
static void send_in_ctx(int i, struct rl_update_req *m, bool nan_grads)
{
    m->ctx = grad_ctx(nan_grads);
    send_update(i, m);
    dist_autograd_release_local(m->ctx);
}

/* The agent's rl_run_async: the forged updates and one valid one;
 * returning ends this observer's loop. */
static int fake_run_async(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    struct rl_update_req m = { .version0 = INT64_MIN };
    send_in_ctx(0, &m, false);
    m = (struct rl_update_req){ .has_report = true, .report = honest_report() };
    m.report.steps = INT64_MAX;
    send_in_ctx(1, &m, false);
    m.report = honest_report();
    m.report.steps = 1000;
    send_in_ctx(2, &m, false);
    m.report = honest_report();
    m.version0 = m.report.version0 = 5;
    send_in_ctx(3, &m, false);
    m.version0 = m.report.version0 = 0;
    m.stats.policy_loss = NAN;
    send_in_ctx(4, &m, false);
    m.stats.policy_loss = 0.5;
    send_in_ctx(5, &m, true);
    send_in_ctx(6, &m, false);
    rref_free(forge.policy);
    forge.policy = NULL;
    *res = rpc_nil();
    return 0;
}

START_TEST(test_forged_update)
{
    struct rl_proc agent;
    char t[16], b[16];
    snprintf(t, sizeof t, "%d", FORGE_T);
    snprintf(b, sizeof b, "%d", FORGE_B);
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "1", "--mode", "async", "--heartbeat-timeout",
                           HB_MS, "--envs-per-observer", b, "--steps-per-rollout", t, "--minibatches", "1",
                           "--anneal-lr", "--max-steps", "100000", NULL };
    join_as_observer(&agent, args, fake_run_async, fake_shutdown);
    double t0 = trib_now_s();
    while (!atomic_load(&forge.shutdown) && trib_now_s() - t0 < RUN_TIMEOUT_S && rl_running(&agent)) usleep(10000);
    rpc_shutdown(true);
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    ck_assert_msg(forge.fail[0] == '\0', "%s", forge.fail);

    static const char *const want[N_FORGED] = {
        "version0 -9223372036854775808 is out of range 0..9007199254740992",
        "report: steps 9223372036854775807 is out of range 0..2147483647",
        "report: steps 1000 is not a rollout's (32 steps x 4 envs)",
        "version0 5 is newer than the policy's version 0",
        "stats: policy_loss nan is not finite",
        NULL,                       /* NaN gradients: which parameter comes first is the context's order */
    };
    for (int i = 0; i < N_FORGED; i++) {
        char exp[512], line[600];
        ck_assert_msg(forge.rc[i] != 0, "forged update %d was accepted\nagent stderr:\n%s", i, agent.err);
        if (!want[i]) {
            int idx = -1, at = -1, end = 0;
            sscanf(forge.err[i], "rpc: agent: rl_update: refused (from observer1): gradient %d [%d] is nan%n", &idx, &at,
                   &end);
            ck_assert_msg(idx >= 0 && at >= 0 && end == (int)strlen(forge.err[i]), "%s", forge.err[i]);
            continue;
        }
        snprintf(exp, sizeof exp, "rpc: agent: rl_update: refused (from observer1): %s", want[i]);
        ck_assert_str_eq(forge.err[i], exp);
        snprintf(line, sizeof line, "agent: refused rl_update from observer1: %s\n", want[i]);
        ck_assert_msg(strstr(agent.err, line), "'%s' not on the agent's stderr:\n%s", line, agent.err);
    }
    ck_assert_msg(forge.rc[N_FORGED] == 0, "the valid update failed: %s", forge.err[N_FORGED]);

    /* not an abort (134 / a sanitizer's report): the run ends as its only
     * observer's loop does, and counts the one valid update alone */
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    cJSON *j = summary(&agent);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), "observers stopped");
    ck_assert_int_eq((int)jnum(j, "env_steps"), FORGE_T * FORGE_B);
    ck_assert_int_eq((int)jnum(j, "episodes"), 1);
    ck_assert_int_eq((int)jnum(j, "updates"), 1);
    ck_assert(jnum(j, "lag_mean") == 0 && jnum(j, "lag_max") == 0);
    ck_assert(jnum(j, "sps") >= 0 && jnum(j, "wall_s") >= 0);
    cJSON_Delete(j);
    rl_free(&agent);
}
END_TEST

/* ---- non-finite values from an env --------------------------------------------------- */

/* A scratch directory for a run's --logdir. */
static const char *make_scratch(void)
{
    snprintf(scratch, sizeof scratch, "/tmp/trib_faults_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
    return scratch;
}

/* Every parameter of DIR/policy.safetensors is finite. */
static void assert_policy_finite(const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/policy.safetensors", dir);
    struct safetensors *st = safetensors_load(path);
    ck_assert_msg(st, "%s", runfiles_last_error());
    ck_assert_int_gt(st->n, 0);
    ck_assert_msg(rl_check_params(st->n, st->tensors, (const char *const *)st->names) == 0, "%s: %s", path,
                  rl_last_error());
    safetensors_free(st);
}

/* tributary-train --preset preset on Faulty-v0 (one observer) whose
 * TRIB_FAULT is fault from step 30: refused at the observer, with `what`
 * (the observer's message), in the call fn; the run fails (exit 1, summary
 * "failure"), and the policy it saves is finite. */
static void check_nonfinite(const char *preset, const char *mode, const char *fault, const char *fn, const char *what)
{
    const char *dir = make_scratch();
    const char *args[] = { "--preset", preset, "--mode", mode, "--env", FAULTY_SO, "--observers", "1", "--max-seconds",
                           "120", "--target", "1000", "--quiet", "--logdir", dir, "--heartbeat-timeout", HB_MS, NULL };
    char f[64];
    snprintf(f, sizeof f, "TRIB_FAULT=%s", fault);
    const char *env[] = { f, "TRIB_FAULT_AT=30", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, env);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    cJSON *j = summary(&p);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), "failure");
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 1);
    cJSON_Delete(j);
    char line[512];
    snprintf(line, sizeof line,
             "agent: dropping observer1 (alive): rpc: observer1: %s: env Faulty-v0 on observer1: "
             "step 30: %s; continuing with 0 observers\n",
             fn, what);
    ck_assert_msg(strstr(p.err, line), "'%s' not on stderr:\n%s", line, p.err);
    ck_assert_msg(!strstr(p.err, "lost observer1"), "stderr:\n%s", p.err);
    assert_policy_finite(dir);
    rl_free(&p);
}

/* preset, mode, fault, the call it fails, what the observer says */
static const char *const nonfinite_cases[][5] = {
    { "pytorch-rl-example", "sync", "nan-obs", "rl_episode", "observation[1] of env 0 is nan" },
    { "a2c", "sync", "inf-obs", "rl_rollout", "observation[1] of env 0 is inf" },
    { "ppo-fast", "sync", "nan-reward", "rl_rollout", "the reward of env 0 is nan" },
    { "ppo-fast", "async", "nan-obs", "rl_run_async", "observation[1] of env 0 is nan" },
};

START_TEST(test_nonfinite)
{
    const char *const *c = nonfinite_cases[_i];
    check_nonfinite(c[0], c[1], c[2], c[3], c[4]);
}
END_TEST

/* ---- a plug-in of sizes no policy can have ------------------------------------------------- */

/* Huge-v0 declares the sizes in env, then tributary-train (or
 * tributary-agent) with extra args must refuse it as bad usage before it
 * starts anything: stderr is exactly want (its %s the plug-in's path). */
static void huge_refused(const char *bin, const char *prog, const char *obs, const char *act, const char *hidden,
                         const char *want_fmt)
{
    char eo[64], ea[64];
    snprintf(eo, sizeof eo, "TRIB_HUGE_OBS=%s", obs);
    snprintf(ea, sizeof ea, "TRIB_HUGE_ACT=%s", act);
    const char *env[] = { eo, ea, NULL };
    const char *args[] = { "--env", HUGE_SO, "--observers", "1", "--hidden", hidden, "--quiet", NULL };
    struct rl_proc p;
    rl_start(&p, bin, args, env);
    int rc = rl_wait(&p, WAIT_S);
    char want[1024], tail_[256];
    snprintf(tail_, sizeof tail_, " (see %s --help)\n", prog);
    snprintf(want, sizeof want - strlen(tail_), want_fmt, prog, HUGE_SO);
    strcat(want, tail_);
    ck_assert_msg(rc == 2, "exit %d, stderr:\n%s", rc, p.err);
    ck_assert_str_eq(p.err, want);
    rl_free(&p);
}

/* was: an observation size past 65536 reached the policy's constructor on
 * the agent; a large action count with large hidden layers, an attempt to
 * allocate 279 million parameters (and the optimizer's copies) */
START_TEST(test_huge_plugin_dims)
{
    huge_refused(TRIB_TRAIN_BIN, "tributary-train", "100000", "2", "64",
                 "%s: --env %s: the env Huge-v0 has 100000 observation dims (at most 65536)");
    huge_refused(TRIB_AGENT_BIN, "tributary-agent", "4", "1000000", "64",
                 "%s: --env %s: the env Huge-v0 has 1000000 actions (at most 65536)");
    huge_refused(TRIB_TRAIN_BIN, "tributary-train", "4", "-5", "64",
                 "%s: --env: plugin %s: action space is discrete with n = -5 (need n > 0)");
    /* actor 5*4096 + 4097*4096 + 4097*60000, critic 5*4096 + 4097*4096 + 4097 */
    huge_refused(TRIB_TRAIN_BIN, "tributary-train", "4", "60000", "4096,4096",
                 "%s: --env %s: a policy of --hidden 4096,4096 for the env Huge-v0 (4 observation dims, 60000 "
                 "actions) has 279427681 parameters (at most 134217728)");
    /* the bounds themselves: REINFORCE (no critic), one hidden layer of
     * 2048, 2048 actions: (D + 1) * 2048 + 2049 * 2048 is 2^27 at D = 63486 */
    struct rl_config cfg;
    ck_assert_int_eq(rl_config_preset(&cfg, "pytorch-rl-example"), 0);
    cfg.hidden.n = 1;
    cfg.hidden.v[0] = 2048;
    struct env_spec spec = *env_lookup("CartPole-v1");
    spec.act.n = 2048;
    spec.obs.dim = 63486;
    struct policy_arch a;
    ck_assert_msg(rl_arch_for_env(&cfg, &spec, "x", &a) == 0, "%s", rl_last_error());
    ck_assert_int_eq(policy_arch_param_count(&a), RL_MAX_POLICY_PARAMS);
    spec.obs.dim = 63487;
    ck_assert_int_eq(rl_arch_for_env(&cfg, &spec, "x", &a), -1);
    ck_assert_str_eq(rl_last_error(), "x: a policy of --hidden 2048 for the env CartPole-v1 (63487 observation dims, "
                                      "2048 actions) has 134219776 parameters (at most 134217728)");
    cfg.hidden.v[0] = 8;
    spec.obs.dim = spec.act.n = 65536;
    ck_assert_msg(rl_arch_for_env(&cfg, &spec, "x", &a) == 0, "%s", rl_last_error());
    spec.act.n = 65537;
    ck_assert_int_eq(rl_arch_for_env(&cfg, &spec, "x", &a), -1);
    ck_assert_str_eq(rl_last_error(), "x: the env CartPole-v1 has 65537 actions (at most 65536)");
    spec.act.n = 2;
    spec.obs.dim = 65537;
    ck_assert_int_eq(rl_arch_for_env(&cfg, &spec, "x", &a), -1);
    ck_assert_str_eq(rl_last_error(), "x: the env CartPole-v1 has 65537 observation dims (at most 65536)");
    spec = *env_lookup("Pendulum-v1");
    spec.act.dim = 70000;
    ck_assert_int_eq(rl_arch_for_env(&cfg, &spec, "x", &a), -1);
    ck_assert_str_eq(rl_last_error(), "x: the env Pendulum-v1 has 70000 action dims (at most 65536)");
}
END_TEST

/* ---- async periodic checkpoints ----------------------------------------------------------- */

/* The update count of the newest checkpoint in DIR/checkpoints, or -1. */
static long long newest_checkpoint(const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/checkpoints", dir);
    DIR *d = opendir(path);
    if (!d) return -1;
    long long best = -1, u;
    struct dirent *e;
    int end;
    while ((e = readdir(d)))
        if (sscanf(e->d_name, "ckpt-%12lld.trib%n", &u, &end) == 1 && end == (int)strlen(e->d_name) && u > best)
            best = u;
    closedir(d);
    return best;
}

START_TEST(test_async_checkpoints_resume)
{
    const char *dir = make_scratch();
    const char *common[] = { "--mode", "async", "--observers", "2", "--envs-per-observer", "8", "--steps-per-rollout",
                             "16", "--target", "1000", "--quiet", "--heartbeat-timeout", HB_MS, NULL };
    const char *args[MAX_ARGS] = { "--logdir", dir, "--checkpoint-every", "10", "--max-seconds", "120" };
    int n = 6;
    for (int i = 0; common[i]; i++) args[n++] = common[i];
    args[n] = NULL;
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    /* two periodic checkpoints (none is written at the start), then kill -9 */
    double t0 = trib_now_s();
    long long first = -1, u;
    while ((u = newest_checkpoint(dir)) < 0 || first < 0 || u == first) {
        if (u >= 0 && first < 0) first = u;
        ck_assert_msg(rl_running(&p), "the run ended before two checkpoints");
        ck_assert_msg(trib_now_s() - t0 < WAIT_S, "no second checkpoint within %.0f s (first: %lld)", WAIT_S, first);
        usleep(20000);
    }
    rl_kill(&p);
    ck_assert_int_ge(first, 10);
    u = newest_checkpoint(dir);
    ck_assert_int_gt(u, first);
    rl_free(&p);

    char max_updates[32], resumed[256];
    snprintf(max_updates, sizeof max_updates, "%lld", u + 20);
    const char *args2[MAX_ARGS] = { "--resume", dir, "--max-updates", max_updates };
    n = 4;
    for (int i = 0; common[i]; i++) args2[n++] = common[i];
    args2[n] = NULL;
    rl_start(&p, TRIB_TRAIN_BIN, args2, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    snprintf(resumed, sizeof resumed, "tributary: resumed from %s/checkpoints/ckpt-%012lld.trib: ", dir, u);
    ck_assert_msg(strstr(p.out, resumed), "'%s' not in stdout:\n%s\nstderr:\n%s", resumed, tail(p.out), p.err);
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_ge((long long)jnum(j, "updates"), u + 20);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST

/* ---- env steps that never return ------------------------------------------------------------ */

/* One of two observers hangs in a step from its 30th on: it gives up after
 * --step-timeout 2, the agent counts it lost and trains on with the other
 * until --max-seconds. */
static void check_step_timeout(const char *mode)
{
    const char *dir = make_scratch();
    char once[96], once_env[128];
    snprintf(once, sizeof once, "%s/once", dir);
    snprintf(once_env, sizeof once_env, "TRIB_FAULT_ONCE=%s", once);
    const char *env[] = { "TRIB_FAULT=hang", "TRIB_FAULT_AT=30", once_env, NULL };
    const char *args[] = { "--env", FAULTY_SO, "--mode", mode, "--observers", "2", "--step-timeout", "2",
                           "--heartbeat-timeout", HB_MS, "--max-seconds", "8", "--quiet", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, env);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 1);
    double steps = jnum(j, "env_steps");
    cJSON_Delete(j);
    /* which observer hangs is whichever got there first */
    int k = 0;
    double secs = 0;
    const char *gave_up = strstr(p.err, ": env Faulty-v0: a step has run for ");
    ck_assert_msg(gave_up && gave_up - p.err >= 9, "stderr:\n%s", p.err);
    const char *line = gave_up;
    while (line > p.err && line[-1] != '\n') line--;
    int end = 0;
    sscanf(line, "observer%d: env Faulty-v0: a step has run for %lf s, longer than --step-timeout 2 s: giving up (exit 1)\n%n",
           &k, &secs, &end);
    ck_assert_msg(end > 0 && (k == 1 || k == 2) && secs >= 2 && secs < 10, "stderr:\n%s", p.err);
    char lost[64], reaped[80], told[160];
    snprintf(told, sizeof told, "agent: observer%d gave up: env Faulty-v0: a step has run for ", k);
    ck_assert_msg(strstr(p.err, told), "'%s' not on stderr:\n%s", told, p.err);
    snprintf(lost, sizeof lost, "agent: lost observer%d: ", k);
    ck_assert_msg(strstr(p.err, lost), "'%s' not on stderr:\n%s", lost, p.err);
    snprintf(reaped, sizeof reaped, "tributary-train: observer%d (pid ", k);
    ck_assert_msg(strstr(p.err, reaped) && strstr(p.err, ") exited with status 1\n"), "stderr:\n%s", p.err);
    /* the other observer trained on: far more steps than the 30 x 32 before the hang */
    ck_assert_msg(steps > 30 * 32 * 4, "%g env steps\nstderr:\n%s", steps, p.err);
    rl_free(&p);
}

START_TEST(test_step_timeout_sync) { check_step_timeout("sync"); }
END_TEST

START_TEST(test_step_timeout_async) { check_step_timeout("async"); }
END_TEST

/* Every observer hangs and nothing limits a step: --max-seconds 3 (or a
 * SIGINT) still ends the run, the calls in flight given up 5 s later, with
 * the summary, a final checkpoint and the policy, all within bound_s of
 * the stop. */
static void check_stuck_stop(const char *mode, bool sigint)
{
    const char *dir = make_scratch();
    const char *env[] = { "TRIB_FAULT=hang", "TRIB_FAULT_AT=30", NULL };
    const char *args[] = { "--env", FAULTY_SO, "--mode", mode, "--observers", "2", "--step-timeout", "0",
                           "--heartbeat-timeout", HB_MS, "--max-seconds", sigint ? "0" : "3", "--logdir", dir,
                           "--quiet", NULL };
    const double bound_s = 5 + 3 + 3 + 9;   /* grace, end calls, reaping; and slack for a loaded box */
    struct rl_proc p;
    double t0 = trib_now_s();
    rl_start(&p, TRIB_TRAIN_BIN, args, env);
    if (sigint) {
        usleep(3000000);
        ck_assert_msg(rl_running(&p), "the run ended before the SIGINT");
        t0 = trib_now_s();
        kill(p.pid, SIGINT);
    } else {
        t0 += 3;
    }
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    double took = trib_now_s() - t0;
    ck_assert_msg(rc == (sigint ? 130 : 1), "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    ck_assert_msg(took < bound_s, "ended %.1f s after the stop\nstderr:\n%s", took, p.err);
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), sigint ? "SIGINT" : "budget");
    cJSON_Delete(j);
    char line[160];
    snprintf(line, sizeof line, "agent: dropping observer1 (alive): its %s call still runs 5 s after the run was due to stop; ",
             strcmp(mode, "sync") == 0 ? RL_FN_ROLLOUT : RL_FN_RUN_ASYNC);
    ck_assert_msg(strstr(p.err, line), "'%s' not on stderr:\n%s", line, p.err);
    ck_assert_msg(newest_checkpoint(dir) >= 0, "no final checkpoint\nstderr:\n%s", p.err);
    assert_policy_finite(dir);
    rl_free(&p);
}

START_TEST(test_stuck_max_seconds_sync) { check_stuck_stop("sync", false); }
END_TEST

START_TEST(test_stuck_sigint_async) { check_stuck_stop("async", true); }
END_TEST

/* A sync iteration of quick updates that is long (1000 epochs of a large
 * minibatch through a 256-256 policy: tens of seconds in release) and
 * --max-seconds 1: no call runs long, yet the run ends within the stop's
 * grace, during its first iteration: the iteration ends before its next
 * update once the stop is 5 s overdue, saying so, and the run stops as a
 * budget stop does (exit 1, summary, final checkpoint). It ran the whole
 * iteration before. */
START_TEST(test_long_iteration_max_seconds_sync)
{
    const char *dir = make_scratch();
    const char *args[] = { "--preset", "ppo", "--observers", "1", "--envs-per-observer", "16", "--steps-per-rollout",
                           "256", "--minibatches", "1", "--epochs", "1000", "--hidden", "256,256", "--max-seconds", "1",
                           "--logdir", dir, "--quiet", NULL };
    const double bound_s = 1 + 5 + 3 + 9;   /* budget, grace, end calls; and slack for a loaded box */
    struct rl_proc p;
    double t0 = trib_now_s();
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    double took = trib_now_s() - t0;
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    ck_assert_msg(took < bound_s, "ended %.1f s after it started (--max-seconds 1)\nstderr:\n%s", took, p.err);
    const char *line = strstr(p.err, "agent: ending the iteration after ");
    ck_assert_msg(line, "no line ending the iteration on stderr:\n%s", p.err);
    int done = -1, end = 0;
    sscanf(line, "agent: ending the iteration after %d of its 1000 updates: the run has been due to stop for 5 s\n%n",
           &done, &end);
    ck_assert_msg(end > 0 && done >= 0 && done < 1000, "line: %s", line);
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_double_eq(jnum(j, "updates"), done);
    ck_assert_double_eq(jnum(j, "env_steps"), 16 * 256);
    cJSON_Delete(j);
    ck_assert_msg(newest_checkpoint(dir) >= 0, "no final checkpoint\nstderr:\n%s", p.err);
    assert_policy_finite(dir);
    rl_free(&p);
}
END_TEST

/* ---- a silent peer at shutdown -------------------------------------------------------------- */

static struct {
    _Atomic double called;          /* when the agent called rl_shutdown (trib_now_s) */
    atomic_bool release;            /* the agent is gone: the handler may return */
} silent;

static int quick_run_async(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    *res = rpc_nil();               /* the loop ends at once: the run ends ("observers stopped") */
    return 0;
}

/* Never answers while the agent lives. */
static int silent_shutdown(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_store(&silent.called, trib_now_s());
    for (int i = 0; i < 6000 && !atomic_load(&silent.release); i++) usleep(10000);
    *res = rpc_nil();
    return 0;
}

START_TEST(test_silent_peer_shutdown)
{
    struct rl_proc agent;
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "1", "--mode", "async", "--heartbeat-timeout",
                           HB_MS, "--quiet", NULL };
    join_as_observer(&agent, args, quick_run_async, silent_shutdown);
    int rc = rl_wait(&agent, 60);
    double exited = trib_now_s(), called = atomic_load(&silent.called);
    atomic_store(&silent.release, true);
    rpc_shutdown(false);
    rref_free(forge.policy);
    forge.policy = NULL;
    ck_assert_msg(called > 0, "rl_shutdown never called\nstderr:\n%s", agent.err);
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    /* the bound is 3 s; 5 s more for a loaded box and a sanitizer's exit
     * (it was 10 s, then a graceful shutdown that waited forever) */
    ck_assert_msg(exited - called < 8.0, "the agent exited %.1f s after calling rl_shutdown\nstderr:\n%s",
                  exited - called, agent.err);
    ck_assert_msg(strstr(agent.err, "agent: dropping observer1 (alive): rpc: timed out after 3000 ms calling "
                                    "observer1.rl_shutdown; continuing with 0 observers\n"),
                  "stderr:\n%s", agent.err);
    cJSON *j = summary(&agent);
    ck_assert_str_eq(jstr(j, "stopped_by"), "observers stopped");
    cJSON_Delete(j);
    rl_free(&agent);
}
END_TEST

/* A sync agent drives every update itself: it serves no rl_update (the
 * function is async mode's), so an observer cannot step its policy behind
 * the iterations' back, even with a well-formed update. */
START_TEST(test_sync_serves_no_update)
{
    struct rl_proc agent;
    char t[16], b[16];
    snprintf(t, sizeof t, "%d", FORGE_T);
    snprintf(b, sizeof b, "%d", FORGE_B);
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "1", "--mode", "sync", "--heartbeat-timeout",
                           HB_MS, "--envs-per-observer", b, "--steps-per-rollout", t, "--minibatches", "1", NULL };
    forge.update_at_setup = true;
    join_as_observer(&agent, args, quick_run_async, fake_shutdown);
    double t0 = trib_now_s();
    while (!atomic_load(&forge.shutdown) && trib_now_s() - t0 < RUN_TIMEOUT_S && rl_running(&agent)) usleep(10000);
    rpc_shutdown(true);
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    ck_assert_msg(forge.fail[0] == '\0', "%s", forge.fail);
    ck_assert_msg(forge.rc[0] != 0, "a sync agent took an rl_update\nagent stderr:\n%s", agent.err);
    ck_assert_str_eq(forge.err[0], "rpc: agent: unknown function 'rl_update'");
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    ck_assert_msg(strstr(agent.err, "agent: setting up observer1: rpc: observer1: rl_setup: this observer only sent an "
                                    "update\n"),
                  "stderr:\n%s", agent.err);
    cJSON *j = summary(&agent);
    ck_assert_int_eq((int)jnum(j, "updates"), 0);
    cJSON_Delete(j);
    rl_free(&agent);
}
END_TEST

/* ---- every observer gone (issue 24, N13) ---------------------------------------------- */

#define GONE_HB_MS "60000"          /* far above the bound the tests hold the agent to */
#define GONE_BOUND_S 40.0           /* the run ends well within --heartbeat-timeout and --max-seconds */

/* The agent's stderr after a run whose every observer went the same way:
 * each reported lost as it went (never "(alive)"), then the failure naming
 * how each went; a summary stopped_by "failure". */
static void check_all_gone(const struct rl_proc *agent, int rc, double took, const char *how)
{
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent->out), tail(agent->err));
    ck_assert_msg(took < GONE_BOUND_S, "ended %.1f s after it started (heartbeat timeout %s ms)\nstderr:\n%s", took,
                  GONE_HB_MS, agent->err);
    ck_assert_msg(!strstr(agent->err, "(alive)"), "an observer that is gone called alive:\n%s", agent->err);
    char want[600];
    for (int k = 1; k <= 2; k++) {
        snprintf(want, sizeof want, "agent: lost observer%d: it %s", k, how);
        ck_assert_msg(strstr(agent->err, want), "'%s' not on stderr:\n%s", want, agent->err);
    }
    snprintf(want, sizeof want, "agent: no observer is left: observer1 %s", how);
    const char *left = strstr(agent->err, want);
    ck_assert_msg(left, "'%s' not on stderr:\n%s", want, agent->err);
    snprintf(want, sizeof want, "; observer2 %s", how);
    ck_assert_msg(strstr(left, want), "'%s' not on the 'no observer is left' line:\n%s", want, agent->err);
    cJSON *j = summary(agent);
    ck_assert_str_eq(jstr(j, "stopped_by"), "failure");
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 2);
    cJSON_Delete(j);
}

/* tributary-train: both observers crash (SIGSEGV in the plug-in's step), or
 * both give up (a step past --step-timeout). Was: silent until the
 * heartbeat timeout or the budget + 5 s, then "dropping observerN (alive)"
 * and stopped_by "budget". */
static void check_train_gone(const char *mode, const char *fault, const char *how)
{
    char fenv[32];
    snprintf(fenv, sizeof fenv, "TRIB_FAULT=%s", fault);
    const char *env[] = { fenv, "TRIB_FAULT_AT=30", NULL };
    const char *args[] = { "--env", FAULTY_SO, "--mode", mode, "--observers", "2", "--step-timeout", "1",
                           "--heartbeat-timeout", GONE_HB_MS, "--max-seconds", "120", "--quiet", NULL };
    struct rl_proc p;
    double t0 = trib_now_s();
    rl_start(&p, TRIB_TRAIN_BIN, args, env);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    check_all_gone(&p, rc, trib_now_s() - t0, how);
    rl_free(&p);
}

START_TEST(test_all_crashed_sync) { check_train_gone("sync", "segv", "crashed (signal 11, SIGSEGV)"); }
END_TEST

START_TEST(test_all_crashed_async) { check_train_gone("async", "segv", "crashed (signal 11, SIGSEGV)"); }
END_TEST

START_TEST(test_all_gave_up_sync) { check_train_gone("sync", "hang", "gave up (env Faulty-v0: a step has run for "); }
END_TEST

START_TEST(test_all_gave_up_async) { check_train_gone("async", "hang", "gave up (env Faulty-v0: a step has run for "); }
END_TEST

/* tributary-agent and two tributary-observer processes of its own: their
 * crash is told by the observers themselves as they die (they die of it:
 * status 128 + 11). */
static void check_separate_crashed(const char *mode)
{
    const char *env[] = { "TRIB_FAULT=segv", "TRIB_FAULT_AT=30", NULL };
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "2", "--env", FAULTY_SO, "--mode", mode,
                           "--heartbeat-timeout", GONE_HB_MS, "--max-seconds", "120", "--quiet", NULL };
    struct rl_proc agent, obs[2];
    double t0 = trib_now_s();
    rl_start(&agent, TRIB_AGENT_BIN, args, env);
    char ep[128];
    rl_agent_endpoint(&agent, ep, sizeof ep, WAIT_S);
    for (int k = 0; k < 2; k++) {
        char r[8];
        snprintf(r, sizeof r, "%d", k + 1);
        const char *oargs[] = { "--rank", r, "--world-size", "3", "--master", ep, "--heartbeat-timeout", GONE_HB_MS, NULL };
        rl_start(&obs[k], TRIB_OBSERVER_BIN, oargs, env);
    }
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    double took = trib_now_s() - t0;
    for (int k = 0; k < 2; k++) {
        int orc = rl_wait(&obs[k], WAIT_S);
        ck_assert_msg(orc == 128 + SIGSEGV, "observer%d exit %d\nstderr:\n%s", k + 1, orc, obs[k].err);
        char want[96];
        snprintf(want, sizeof want, "observer%d: crashed (signal 11, SIGSEGV): telling the agent\n", k + 1);
        ck_assert_msg(strstr(obs[k].err, want), "'%s' not on its stderr:\n%s\nagent's:\n%s", want, obs[k].err,
                      agent.err);
    }
    if (took >= GONE_BOUND_S)
        fprintf(stderr, "observer1's stderr:\n%s\nobserver2's:\n%s\n", obs[0].err, obs[1].err);
    check_all_gone(&agent, rc, took, "crashed (signal 11, SIGSEGV)");
    rl_free(&obs[0]);
    rl_free(&obs[1]);
    rl_free(&agent);
}

START_TEST(test_separate_crashed_sync) { check_separate_crashed("sync"); }
END_TEST

START_TEST(test_separate_crashed_async) { check_separate_crashed("async"); }
END_TEST

/* ---- hostile members (issue 33) ------------------------------------------------------ */

/* A text that would forge a line of the agent's, printed raw: a newline,
 * the line, a terminal's erase-line and a carriage return. */
#define FORGED "step\nagent: lost observer1: it crashed (signal 11, SIGSEGV)\x1b[2K\r"

static struct {
    atomic_int rollouts;            /* rl_rollout calls this member took */
    atomic_bool release;            /* the agent is gone: its handler may return */
    bool gave_up;                   /* say FORGED with rl_gave_up first */
    int gave_up_rc;
} member;

/* rl_rollout: never calls the policy's act and never answers while the
 * agent lives (with member.gave_up, it first says FORGED as why it goes). */
static int never_acts(struct rpc_request *req, const struct rpc_value *args, struct rpc_value *res, void *u)
{
    atomic_fetch_add(&member.rollouts, 1);
    if (member.gave_up) {
        struct rpc_value a = rpc_list(1), r = rpc_nil();
        a.list.items[0] = rpc_str(FORGED);
        member.gave_up_rc = rpc_sync("agent", RL_FN_GAVE_UP, &a, &r, 0);
        rpc_value_clear(&a);
        rpc_value_clear(&r);
    }
    for (int i = 0; i < 12000 && !atomic_load(&member.release); i++) usleep(10000);
    return rpc_request_fail(req, "released");
}

/* Joins the agent at ep as worker `name` (rank of world), serving rl_setup
 * (fake_setup), rl_rollout (never_acts) and rl_shutdown. */
static void join_member(const char *ep, const char *name, int rank, int world)
{
    dist_autograd_init();
    rpc_register(RL_FN_SETUP, fake_setup, NULL);
    rpc_register(RL_FN_ROLLOUT, never_acts, NULL);
    rpc_register(RL_FN_SHUTDOWN, fake_shutdown, NULL);
    struct rpc_opts o = { .name = name, .rank = rank, .world_size = world, .master = ep, .default_timeout_ms = 60000,
                          .init_timeout_ms = 60000, .heartbeat_timeout_ms = 2000 };
    ck_assert_msg(rpc_init(&o) == 0, "rpc_init: %s", rpc_last_error());
}

/* Once the agent has told the member to shut down (or is gone): lets the
 * member's handler go and leaves, gracefully when the agent leaves so
 * (it gave up on no call) and waits for its members. */
static void leave_member(struct rl_proc *agent, bool graceful)
{
    double t0 = trib_now_s();
    while (!atomic_load(&forge.shutdown) && rl_running(agent) && trib_now_s() - t0 < RUN_TIMEOUT_S) usleep(10000);
    atomic_store(&member.release, true);
    rpc_shutdown(graceful);
    rref_free(forge.policy);
    forge.policy = NULL;
}

/* A sync member that takes its rollout and never acts: the merged act
 * calls of the honest observer wait for it --step-timeout (2 s) and the
 * grace (2 s), then it is dropped naming why, and the honest one trains to the budget. Was: no
 * step in 30 s, no timeout, never dropped. With --double-buffer (dbuf)
 * the honest observer has two calls queued, its halves': still one
 * observer's, so the member is still the one named. */
static void check_member_never_acts(const char *dbuf)
{
    struct rl_proc agent, obs;
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "2", "--mode", "sync", "--heartbeat-timeout",
                           HB_MS, "--step-timeout", "2", "--envs-per-observer", "4", "--steps-per-rollout", "32",
                           "--minibatches", "1", "--max-steps", "2048", "--max-seconds", "60", "--quiet", dbuf, NULL };
    rl_start(&agent, TRIB_AGENT_BIN, args, NULL);
    char ep[128];
    rl_agent_endpoint(&agent, ep, sizeof ep, WAIT_S);
    const char *oargs[] = { "--rank", "1", "--world-size", "3", "--master", ep, "--heartbeat-timeout", HB_MS, NULL };
    rl_start(&obs, TRIB_OBSERVER_BIN, oargs, NULL);
    join_member(ep, "observer2", 2, 3);
    leave_member(&agent, false);   /* the agent gave up on its rollout call: it does not wait */
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    int orc = rl_wait(&obs, WAIT_S);
    ck_assert_msg(atomic_load(&member.rollouts) >= 1, "the member was never asked for a rollout\nagent:\n%s", agent.err);
    const char *line = "agent: dropping observer2 (alive): it did not act within the step timeout (--step-timeout 2 s, "
                       "and 2 s more) while the others' act calls waited for it; continuing with 1 observer\n";
    ck_assert_msg(strstr(agent.err, line), "'%s' not on the agent's stderr:\n%s", line, agent.err);
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    cJSON *j = summary(&agent);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 1);
    ck_assert_msg(jnum(j, "env_steps") >= 2048 && jnum(j, "updates") > 0, "env_steps %g, updates %g\nstderr:\n%s",
                  jnum(j, "env_steps"), jnum(j, "updates"), agent.err);
    cJSON_Delete(j);
    ck_assert_msg(orc == 0, "the honest observer exit %d\nstderr:\n%s", orc, obs.err);
    rl_free(&obs);
    rl_free(&agent);
}

START_TEST(test_sync_member_never_acts) { check_member_never_acts(NULL); }
END_TEST

START_TEST(test_sync_member_never_acts_dbuf) { check_member_never_acts("--double-buffer"); }
END_TEST

/* No byte of a member's text reaches the agent's stderr raw: no forged
 * line, no terminal control. */
static void assert_not_forged(const struct rl_proc *agent)
{
    ck_assert_msg(strncmp(agent->err, "agent: lost observer1: it crashed", 33) != 0 &&
                      !strstr(agent->err, "\nagent: lost observer1: it crashed"),
                  "a forged line on the agent's stderr:\n%s", agent->err);
    for (const char *c = agent->err; *c; c++)
        ck_assert_msg(*c == '\n' || (*c >= 0x20 && *c < 0x7f), "byte 0x%02x on the agent's stderr:\n%s",
                      (unsigned char)*c, agent->err);
}

/* An observer's rl_gave_up text is its own: printed escaped, wherever the
 * agent says why it went. Was: the agent printed the forged line. */
START_TEST(test_gave_up_text_escaped)
{
    struct rl_proc agent;
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "1", "--mode", "sync", "--heartbeat-timeout",
                           GONE_HB_MS, "--envs-per-observer", "4", "--steps-per-rollout", "32", "--minibatches", "1",
                           "--max-seconds", "60", "--quiet", NULL };
    rl_start(&agent, TRIB_AGENT_BIN, args, NULL);
    char ep[128];
    rl_agent_endpoint(&agent, ep, sizeof ep, WAIT_S);
    member.gave_up = true;
    join_member(ep, "observer1", 1, 2);
    leave_member(&agent, true);
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    ck_assert_msg(member.gave_up_rc == 0, "rl_gave_up failed\nagent:\n%s", agent.err);
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    assert_not_forged(&agent);
    const char *esc = "step\\x0aagent: lost observer1: it crashed (signal 11, SIGSEGV)\\x1b[2K\\x0d";
    char want[3][400];
    snprintf(want[0], sizeof want[0], "agent: observer1 gave up: %s\n", esc);
    snprintf(want[1], sizeof want[1], "agent: lost observer1: it gave up (%s); continuing with 0 observers\n", esc);
    snprintf(want[2], sizeof want[2], "agent: no observer is left: observer1 gave up (%s)\n", esc);
    for (int i = 0; i < 3; i++) ck_assert_msg(strstr(agent.err, want[i]), "'%s' not on stderr:\n%s", want[i], agent.err);
    cJSON *j = summary(&agent);
    ck_assert_str_eq(jstr(j, "stopped_by"), "failure");
    cJSON_Delete(j);
    rl_free(&agent);
}
END_TEST

/* A member's error reply is its own text too: "setting up observer1:
 * ..." prints it escaped. */
START_TEST(test_error_reply_escaped)
{
    struct rl_proc agent;
    const char *args[] = { "--master", "tcp://127.0.0.1:0", "--observers", "1", "--mode", "sync", "--heartbeat-timeout",
                           HB_MS, "--quiet", NULL };
    forge.setup_error = "no\n" FORGED;
    rl_start(&agent, TRIB_AGENT_BIN, args, NULL);
    char ep[128];
    rl_agent_endpoint(&agent, ep, sizeof ep, WAIT_S);
    join_member(ep, "observer1", 1, 2);
    leave_member(&agent, true);
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    assert_not_forged(&agent);
    const char *want = "agent: setting up observer1: rpc: observer1: rl_setup: no\\x0astep\\x0aagent: lost observer1: it "
                       "crashed (signal 11, SIGSEGV)\\x1b[2K\\x0d\n";
    ck_assert_msg(strstr(agent.err, want), "'%s' not on stderr:\n%s", want, agent.err);
    rl_free(&agent);
}
END_TEST

/* tributary-train, 3 observers: one is killed (SIGKILL) in its set-up (its
 * first env reset): it is dropped as one lost later is, and the other two
 * train to the budget. Was: "setting up observerN: ..." and the run
 * stopped as a failure. */
static void check_killed_in_setup(const char *mode)
{
    const char *dir = make_scratch();
    char once_env[128];
    snprintf(once_env, sizeof once_env, "TRIB_FAULT_ONCE=%s/once", dir);
    const char *env[] = { "TRIB_FAULT=kill-reset", once_env, NULL };
    const char *args[] = { "--env", FAULTY_SO, "--mode", mode, "--observers", "3", "--heartbeat-timeout", HB_MS,
                           "--max-steps", "3000", "--max-seconds", "120", "--quiet", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, env);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_eq((int)jnum(j, "observers_lost"), 1);
    ck_assert_msg(jnum(j, "env_steps") >= 3000, "env_steps %g\nstderr:\n%s", jnum(j, "env_steps"), p.err);
    cJSON_Delete(j);
    const char *lost = strstr(p.err, "agent: lost observer");
    int k = 0, end = 0;
    ck_assert_msg(lost, "no observer lost on stderr:\n%s", p.err);
    sscanf(lost, "agent: lost observer%d: it was killed (signal 9, SIGKILL)%n", &k, &end);
    ck_assert_msg(end > 0 && k >= 1 && k <= 3, "stderr:\n%s", p.err);
    const char *nl = strchr(lost, '\n');
    ck_assert_msg(nl && memmem(lost, (size_t)(nl - lost), "; continuing with 2 observers", 29), "stderr:\n%s", p.err);
    ck_assert_msg(!strstr(p.err, "setting up observer"), "stderr:\n%s", p.err);
    rl_free(&p);
}

START_TEST(test_killed_in_setup_sync) { check_killed_in_setup("sync"); }
END_TEST

START_TEST(test_killed_in_setup_async) { check_killed_in_setup("async"); }
END_TEST

/* A plug-in whose unload crashes: tributary-train's (and tributary-eval's)
 * check of --env opens and unloads it before anything starts, and dies of
 * the crash saying so, naming the plug-in. Was: status 139, nothing on
 * stderr. */
START_TEST(test_plugin_unload_crash)
{
    const char *env[] = { "TRIB_FAULT=segv-unload", NULL };
    const char *train[] = { "--env", FAULTY_SO, "--max-steps", "100", "--quiet", NULL };
    const char *eval[] = { "--env", FAULTY_SO, "/nonexistent/policy.safetensors", NULL };
    const char *const *args[] = { train, eval };
    const char *bins[] = { TRIB_TRAIN_BIN, TRIB_EVAL_BIN }, *progs[] = { "tributary-train", "tributary-eval" };
    for (int i = 0; i < 2; i++) {
        struct rl_proc p;
        rl_start(&p, bins[i], args[i], env);
        int rc = rl_wait(&p, RUN_TIMEOUT_S);
        ck_assert_msg(rc == 128 + SIGSEGV, "%s exit %d\nstderr:\n%s", progs[i], rc, p.err);
        char want[700];
        snprintf(want, sizeof want, "%s: crashed (signal 11, SIGSEGV) while checking --env %s (its plug-in's entry point "
                                    "and unload run there)\n", progs[i], FAULTY_SO);
        ck_assert_msg(strncmp(p.err, want, strlen(want)) == 0, "stderr:\n%s\nwanted:\n%s", p.err, want);
        rl_free(&p);
    }
}

END_TEST

/* ---- evaluation of an env whose episodes never end ------------------------------------ */

/* Whether p's stdout has a progress line of an interval with updates
 * ("upd/s N", N > 0): an update has been made. */
static bool updated(const struct rl_proc *p)
{
    char *out = kit_must_read_fd(p->out_fd, NULL);
    bool r = false;
    for (const char *u = strstr(out, "upd/s "); u && !r; u = strstr(u + 1, "upd/s ")) r = atof(u + 6) > 0;
    free(out);
    return r;
}

/* Endless-v0's episodes never end (max_episode_steps 0) and an evaluation
 * of 1000 of them runs on (--eval-every 1): --max-seconds 5 (sync) or a
 * SIGINT (async, its evaluation on its own thread) abandons the
 * evaluation at once, saying so, and the run ends as such a stop does
 * (exit 1 or 130, the summary, the final policy), within bound_s of the
 * stop. Before, the evaluation ran each episode to its end, never: the run
 * outlived its budget and the signal. Then tributary-eval on the run's
 * policy: its episodes cut at AGENT_EVAL_MAX_STEPS (10000), in waves of
 * 64 envs. */
static void check_endless_eval(const char *mode, bool sigint)
{
    const char *dir = make_scratch();
    const char *args[] = { "--env", ENDLESS_SO, "--mode", mode, "--observers", "1", "--envs-per-observer", "4",
                           "--steps-per-rollout", "16", "--eval-every", "1", "--eval-episodes", "1000",
                           "--max-seconds", sigint ? "0" : "5", "--log-every", "0.2", "--heartbeat-timeout", HB_MS,
                           "--logdir", dir, NULL };
    const double bound_s = 3 + 9;   /* shutting the observers down; and slack for a loaded box */
    struct rl_proc p;
    double t0 = trib_now_s();
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    if (sigint) {
        while (!updated(&p)) {   /* then an evaluation runs: it starts after each update, and lasts */
            ck_assert_msg(rl_running(&p), "the run ended before its first update");
            ck_assert_msg(trib_now_s() - t0 < WAIT_S, "no update within %.0f s", WAIT_S);
            usleep(10000);
        }
        t0 = trib_now_s();
        kill(p.pid, SIGINT);
    } else {
        t0 += 5;
    }
    proc_wait(&rl_group, p.idx, 60);
    bool killed = rl_group.p[p.idx].status == -1;
    rl_collect(&p);
    ck_assert_msg(!killed, "the run did not end within 60 s of its %s (killed)\nstderr:\n%s",
                  sigint ? "SIGINT" : "--max-seconds", tail(p.err));
    int rc = p.status;
    double took = trib_now_s() - t0;
    ck_assert_msg(rc == (sigint ? 130 : 1), "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    ck_assert_msg(took < bound_s, "ended %.1f s after the stop\nstderr:\n%s", took, p.err);
    char line[128];
    snprintf(line, sizeof line, " abandoned: stopped by %s after ", sigint ? "SIGINT" : "--max-seconds 5");
    ck_assert_msg(strstr(p.err, "agent: evaluation at update ") && strstr(p.err, line), "'%s' not on stderr:\n%s",
                  line, p.err);
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "stopped_by"), sigint ? "SIGINT" : "budget");
    cJSON_Delete(j);
    assert_policy_finite(dir);
    rl_free(&p);

    /* tributary-eval: 65 episodes, two waves, each cut at 10000 steps */
    char policy[128], out[4096] = "", err[4096] = "";
    snprintf(policy, sizeof policy, "%s/policy.safetensors", dir);
    const char *eval[] = { TRIB_EVAL_BIN, "--env", ENDLESS_SO, "--episodes", sigint ? "65" : "2", "--json", policy,
                           NULL };
    ck_assert_int_eq(proc_run(eval, 120, out, sizeof out, err, sizeof err, &rc), 0);
    ck_assert_msg(rc == 0, "tributary-eval: exit %d (-1: did not end within 120 s)\nstderr:\n%s", rc, err);
    ck_assert_msg(strstr(out, "\"return_mean\":10000,\"return_std\":0,\"length_mean\":10000,\"length_std\":0}"),
                  "%s", out);
}

START_TEST(test_endless_eval_max_seconds_sync) { check_endless_eval("sync", false); }
END_TEST

START_TEST(test_endless_eval_sigint_async) { check_endless_eval("async", true); }
END_TEST

int main(void)
{
    return KIT_RUN("rl_faults",
             { "peers", 600, .teardown = teardown, .tests = { test_forged_update, test_silent_peer_shutdown,
               test_sync_serves_no_update } },
             { "nonfinite", 600, .teardown = teardown, .loop = { test_nonfinite, 0,
               (int)(sizeof nonfinite_cases / sizeof nonfinite_cases[0]) } },
             { "checkpoints", 600, .teardown = teardown, .tests = { test_async_checkpoints_resume,
               test_huge_plugin_dims } },
             { "stuck", 600, .teardown = teardown, .tests = { test_step_timeout_sync, test_step_timeout_async,
               test_stuck_max_seconds_sync, test_stuck_sigint_async, test_long_iteration_max_seconds_sync } },
             { "endless", 600, .teardown = teardown, .tests = { test_endless_eval_max_seconds_sync,
               test_endless_eval_sigint_async } },
             { "gone", 600, .teardown = teardown, .tests = { test_all_crashed_sync, test_all_crashed_async,
               test_all_gave_up_sync, test_all_gave_up_async, test_separate_crashed_sync,
               test_separate_crashed_async } },
             { "hostile", 600, .teardown = teardown, .tests = { test_sync_member_never_acts, test_sync_member_never_acts_dbuf,
               test_gave_up_text_escaped, test_error_reply_escaped, test_killed_in_setup_sync,
               test_killed_in_setup_async, test_plugin_unload_crash } });
}
