/* End-to-end tests of the RL programs: tributary-train (the agent with its
 * forked observers), tributary-agent + tributary-observer started apart, and
 * a plug-in env. Every program runs as a real process on loopback; learning
 * is judged by env-step budgets, never by wall-clock time. Cases are grouped by what they exercise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "envs/env.h"
#include "rl_harness.h"
#include "kit.h"

/* Runs tributary-train with args to its end; asserts the exit status, an
 * empty stderr, the first line and the summary's shape; returns the summary. */
static cJSON *train(const char *const *args, int want_rc)
{
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == want_rc, "exit %d, not %d\nstdout:\n%s\nstderr:\n%s", rc, want_rc, tail(p.out), tail(p.err));
    ck_assert_msg(p.err_nowait[0] == '\0', "stderr:\n%s", tail(p.err));
    ck_assert_msg(strncmp(p.out, "tributary: ", 11) == 0, "first line:\n%s", p.out);
    char *nl = strchr(p.out, '\n');
    size_t n1 = nl ? (size_t)(nl - p.out) : 0;   /* the target (or none) and the budget */
    ck_assert_msg(nl && (memmem(p.out, n1, "; target ", 9) || memmem(p.out, n1, "; no target; ", 13)) &&
                      memmem(p.out, n1, "; budget ", 9), "first line:\n%s", p.out);
    cJSON *j = summary(&p);
    check_summary_shape(j);
    rl_free(&p);
    return j;
}

/* ---- the observers a tributary-train forked ------------------------------------- */

struct child {
    pid_t pid;
    unsigned long long start;       /* start time in ticks: tells a reused pid apart */
};

/* Start time of pid from /proc/pid/stat, or 0 when it does not exist. */
static unsigned long long proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *s = strrchr(buf, ')');   /* the name may hold spaces */
    if (!s) return 0;
    unsigned long long v = 0;
    /* fields 3.. after the name; the start time is field 22 */
    for (int field = 3; field <= 22 && s; field++) {
        s = strchr(s + 1, ' ');
        if (s && field == 22) v = strtoull(s + 1, NULL, 10);
    }
    return v;
}

/* The children of the train process (its forked observers, in rank
 * order), at most cap. */
static int children_of(pid_t pid, struct child *out, int cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    int n = 0, c;
    while (n < cap && fscanf(f, "%d", &c) == 1) {
        out[n].pid = c;
        out[n].start = proc_start_time(c);
        n++;
    }
    fclose(f);
    return n;
}

/* Waits (30 s at most: an ASan observer's exit checks for leaks) until
 * every one of kids is gone. */
static void assert_gone(const struct child *kids, int n)
{
    double t0 = trib_now_s();
    for (int i = 0; i < n; i++) {
        while (kids[i].start != 0 && proc_start_time(kids[i].pid) == kids[i].start) {
            ck_assert_msg(trib_now_s() - t0 < 30, "observer pid %d is still there after the run ended", (int)kids[i].pid);
            usleep(20000);
        }
    }
}

/* ---- cli ------------------------------------------------------------------------- */

struct bad_usage {
    const char *args[6];
    const char *err;
};

static void check_bad_usage(const char *bin, const struct bad_usage *cases, int n)
{
    for (int i = 0; i < n; i++) {
        const char *arg0 = cases[i].args[0] ? cases[i].args[0] : "(no arguments)";
        struct rl_proc p;
        rl_start(&p, bin, cases[i].args, NULL);
        int rc = rl_wait(&p, 60);
        ck_assert_msg(rc == 2, "%s %s: exit %d, not 2\nstderr:\n%s", bin, arg0, rc, p.err);
        ck_assert_msg(strcmp(p.err, cases[i].err) == 0, "%s %s: stderr\n'%s'\nnot\n'%s'", bin, arg0, p.err,
                      cases[i].err);
        ck_assert_msg(p.out[0] == '\0', "%s %s: stdout:\n%s", bin, arg0, p.out);
        rl_free(&p);
    }
}

/* --help (and -h): usage on stdout, exit 0, nothing on stderr. */
static void check_help(const char *bin, const char *flag, const char *usage_line, const char *const *mentions)
{
    const char *args[] = { flag, NULL };
    struct rl_proc p;
    rl_start(&p, bin, args, NULL);
    int rc = rl_wait(&p, 60);
    ck_assert_msg(rc == 0, "%s %s: exit %d\nstderr:\n%s", bin, flag, rc, p.err);
    ck_assert_msg(strncmp(p.out, usage_line, strlen(usage_line)) == 0, "%s %s:\n%s", bin, flag, p.out);
    for (int i = 0; mentions[i]; i++)
        ck_assert_msg(strstr(p.out, mentions[i]) != NULL, "%s %s does not mention '%s':\n%s", bin, flag, mentions[i],
                      p.out);
    ck_assert_msg(p.err[0] == '\0', "%s %s: stderr:\n%s", bin, flag, p.err);
    rl_free(&p);
}

START_TEST(test_train_help)
{
    static const char *const mentions[] = { "--preset NAME", "ppo-fast", "pytorch-rl-example", "--mode NAME",
                                            "--env ID|PATH.so", "--observers N", "--envs-per-observer N",
                                            "--steps-per-rollout N", "--seed N", "--max-steps N", "--max-seconds X",
                                            "--target X", "--log-every X", "--heartbeat-timeout N", "--quiet",
                                            "--help", "Exit status: 0 solved", NULL };
    check_help(TRIB_TRAIN_BIN, "--help", "Usage: tributary-train [options]\n", mentions);
    check_help(TRIB_TRAIN_BIN, "-h", "Usage: tributary-train [options]\n", mentions);
    /* defaults and the presets' values; CleanRL's names */
    static const char *const values[] = {
        "(default 4; ppo 1, a2c 2, pendulum 2, mujoco 1, mujoco-fast 2, zoo 1)",
        "(default 0.005; ppo 0.00025, a2c 0.0007, pendulum 0.001, pytorch-rl-example 0.01, mujoco 0.0003, mujoco-fast 0.0003, "
        "zoo 2.0633e-05)",
        "(also --total-timesteps)", "(also --num-envs)", "(also --num-steps)", "(also --learning-rate)",
        "(also --num-minibatches)", "(also --update-epochs)", "(choices: sync, async)", NULL };
    check_help(TRIB_TRAIN_BIN, "--help", "Usage: tributary-train [options]\n", values);
}
END_TEST

/* CleanRL's flag names set the same fields as ours: the header line of a
 * run given them equals one given ours. */
START_TEST(test_cleanrl_aliases)
{
    const char *ours[] = { "--observers", "1", "--max-steps", "1", "--envs-per-observer", "8", "--steps-per-rollout",
                           "32", "--lr", "0.001", "--minibatches", "2", "--epochs", "2", "--clip", "0.1", "--device",
                           "cpu", "--quiet", NULL };
    const char *theirs[] = { "--observers", "1", "--total-timesteps", "1", "--num-envs", "8", "--num-steps", "32",
                             "--learning-rate", "0.001", "--num-minibatches", "2", "--update-epochs", "2",
                             "--clip-coef", "0.1", "--device", "cpu", "--quiet", NULL };
    struct rl_proc a, b;
    rl_start(&a, TRIB_TRAIN_BIN, ours, NULL);
    rl_start(&b, TRIB_TRAIN_BIN, theirs, NULL);
    ck_assert_int_eq(rl_wait(&a, RUN_TIMEOUT_S), 1);
    ck_assert_int_eq(rl_wait(&b, RUN_TIMEOUT_S), 1);
    char *fa = strndup(a.out, strcspn(a.out, "\n")), *fb = strndup(b.out, strcspn(b.out, "\n"));
    ck_assert_str_eq(fa, "tributary: sync ppo (preset ppo-fast) on CartPole-v1: 1 observer x 8 envs x 32 steps, "
                         "64-64 tanh, lr 0.001, gamma 0.99, lambda 0.95, 2 epochs x 2 minibatches, clip 0.1, policy "
                         "on cpu, seed 1; target 475; budget 1 env step");
    ck_assert_str_eq(fb, fa);
    free(fa);
    free(fb);
    rl_free(&a);
    rl_free(&b);
}
END_TEST

#define SEE(prog) " (see " prog " --help)\n"

START_TEST(test_train_bad_usage)
{
    static const struct bad_usage cases[] = {
        { { "--bogus", NULL }, "tributary-train: unknown option '--bogus'" SEE("tributary-train") },
        { { "extra", NULL }, "tributary-train: unexpected argument 'extra'" SEE("tributary-train") },
        { { "--preset", "nope", NULL },
          "tributary-train: unknown preset 'nope' (known: ppo-fast, ppo, a2c, pendulum, pytorch-rl-example, mujoco, mujoco-fast, zoo)"
          SEE("tributary-train") },
        { { "--observers", "0", NULL }, "tributary-train: --observers must be in 1..64, not 0" SEE("tributary-train") },
        { { "--observers=65", NULL }, "tributary-train: --observers must be in 1..64, not 65" SEE("tributary-train") },
        { { "--mode", "fast", NULL }, "tributary-train: bad value 'fast' for --mode (choices: sync, async)" SEE("tributary-train") },
        { { "--seed", "-1", NULL },
          "tributary-train: --seed takes an integer >= 0 (e.g. 1000000 or 1e6), not '-1'" SEE("tributary-train") },
        { { "--target", "nan", NULL }, "tributary-train: bad value 'nan' for --target" SEE("tributary-train") },
        { { "--max-steps", NULL }, "tributary-train: option '--max-steps' needs a value" SEE("tributary-train") },
        { { "--quiet=yes", NULL }, "tributary-train: option '--quiet' takes no value: --quiet turns it on, --no-quiet off"
          SEE("tributary-train") },
        { { "--heartbeat-timeout", "50", NULL },
          "tributary-train: --heartbeat-timeout must be in 100..3600000 ms" SEE("tributary-train") },
        { { "--log-every", "0", NULL }, "tributary-train: --log-every must be > 0 seconds" SEE("tributary-train") },
        { { "--max-steps", "-5", NULL },
          "tributary-train: --max-steps, --max-seconds and --max-updates must be >= 0" SEE("tributary-train") },
        { { "--minibatches", "3", NULL },
          "tributary-train: --minibatches (3) must divide --steps-per-rollout x --envs-per-observer (512)"
          SEE("tributary-train") },
        { { "--mode=async", "--observers=2", "--minibatches=9", "--steps-per-rollout=9", "--envs-per-observer=1", NULL },
          "tributary-train: --mode async: each observer splits its rollout (--steps-per-rollout x "
          "--envs-per-observer = 9 samples) into --minibatches / --observers = 4 minibatches, which must divide it"
          SEE("tributary-train") },
        { { "--vtrace", NULL },
          "tributary-train: --vtrace corrects the lag of a rollouts algorithm's updates: it needs --mode async and an "
          "--algo of the rollouts shape (a2c, ppo)"
          SEE("tributary-train") },
        { { "--max-policy-lag", "-1", NULL }, "tributary-train: --max-policy-lag must be >= 0" SEE("tributary-train") },
        { { "--algo", "reinforce", "--envs-per-observer", "2", NULL },
          "tributary-train: --algo reinforce runs one episode per observer: --envs-per-observer must be 1"
          SEE("tributary-train") },
    };
    check_bad_usage(TRIB_TRAIN_BIN, cases, (int)(sizeof cases / sizeof cases[0]));
}
END_TEST

START_TEST(test_agent_cli)
{
    static const char *const mentions[] = { "--master tcp://H:P", "MASTER_ADDR/MASTER_PORT", "--observers N",
                                            "--preset NAME", "--help", NULL };
    check_help(TRIB_AGENT_BIN, "--help", "Usage: tributary-agent [options]\n", mentions);
    /* --master's own message has no "(see --help)", unlike every other one */
    static const struct bad_usage cases[] = {
        { { "--bogus", NULL }, "tributary-agent: unknown option '--bogus'" SEE("tributary-agent") },
        { { "--master", NULL }, "tributary-agent: option '--master' needs a value" SEE("tributary-agent") },
        { { "--master", "foo", NULL }, "tributary-agent: --master must look like tcp://HOST:PORT, not 'foo'\n" },
        { { "--observers", "0", NULL }, "tributary-agent: --observers must be in 1..64, not 0" SEE("tributary-agent") },
    };
    check_bad_usage(TRIB_AGENT_BIN, cases, (int)(sizeof cases / sizeof cases[0]));
}
END_TEST

START_TEST(test_observer_cli)
{
    static const char *const mentions[] = { "--master tcp://H:P", "--rank R", "--world-size W",
                                            "--heartbeat-timeout MS", "--help", NULL };
    check_help(TRIB_OBSERVER_BIN, "--help", "Usage: tributary-observer [options]\n", mentions);
    static const struct bad_usage cases[] = {
        { { NULL }, "tributary-observer: give --rank (or RANK / SLURM_PROCID) in 1..N, not '(unset)'"
                    SEE("tributary-observer") },
        { { "--rank", "0", NULL },
          "tributary-observer: --rank must be an integer in 1..65535, not '0'" SEE("tributary-observer") },
        { { "--rank", NULL }, "tributary-observer: option '--rank' needs a value" SEE("tributary-observer") },
        { { "--bogus", NULL }, "tributary-observer: unknown option '--bogus'" SEE("tributary-observer") },
        { { "--rank", "1", "extra", NULL },
          "tributary-observer: unexpected argument 'extra': --rank takes one value" SEE("tributary-observer") },
        { { "--master", "foo", NULL },
          "tributary-observer: --master must look like tcp://HOST:PORT, not 'foo'" SEE("tributary-observer") },
        { { "--world-size", "1", NULL },
          "tributary-observer: --world-size must be an integer >= 2, not '1'" SEE("tributary-observer") },
        { { "--heartbeat-timeout", "5", NULL },
          "tributary-observer: --heartbeat-timeout must be in 100..3600000, not '5'" SEE("tributary-observer") },
    };
    check_bad_usage(TRIB_OBSERVER_BIN, cases, (int)(sizeof cases / sizeof cases[0]));
}
END_TEST

/* ---- learning ------------------------------------------------------------------ */

/* Sync PPO on CartPole-v1 reaches 400 (mean of the last 100 episodes)
 * within 150k env steps. The preset ppo-fast as it is (4 observers x 16
 * envs, 4 epochs) mostly does not for seed 1: 4 runs of 5 ended at the
 * budget with return_mean 163..341, one solved at 135k (sync runs vary,
 * see test_sync_reproducible_merged). Two observers of 16 envs with 8 epochs solve at 101,376
 * steps (seeds 2 and 3: 81,920 and 90,112).
 * --max-batch 16 keeps the agent from merging the two observers' act calls,
 * which makes the run the same every time; --lr pins the learning rate the
 * figures above were taken with (the preset's is tuned for speed). */
START_TEST(test_ppo_sync_learns)
{
    const char *args[] = { "--preset", "ppo-fast", "--seed", "1", "--max-steps", "150000", "--target", "400",
                           "--observers", "2", "--envs-per-observer", "16", "--steps-per-rollout", "32",
                           "--minibatches", "4", "--epochs", "8", "--max-batch", "16", "--device", "cpu", "--quiet",
                           "--lr", "2.5e-3", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 0, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    ck_assert_msg(p.err_nowait[0] == '\0', "stderr:\n%s", tail(p.err));
    char *first = strndup(p.out, strcspn(p.out, "\n"));
    ck_assert_str_eq(first, "tributary: sync ppo (preset ppo-fast) on CartPole-v1: 2 observers x 16 envs x 32 steps, "
                            "64-64 tanh, lr 0.0025, gamma 0.99, lambda 0.95, 8 epochs x 4 minibatches, clip 0.2, "
                            "policy on cpu, seed 1; target 400; budget 150000 env steps");
    free(first);
    /* --quiet: the first line and the summary only */
    ck_assert_int_eq(last_progress_steps(p.out), -1);
    cJSON *j = summary(&p);
    check_summary_shape(j);
    ck_assert_msg(jbool(j, "solved"), "not solved: %s", tail(p.out));
    ck_assert_str_eq(jstr(j, "stopped_by"), "solved");
    ck_assert_str_eq(jstr(j, "mode"), "sync");
    ck_assert_str_eq(jstr(j, "algo"), "ppo");
    ck_assert_str_eq(jstr(j, "env"), "CartPole-v1");
    ck_assert_int_eq((int)jnum(j, "observers"), 2);
    ck_assert_int_eq((int)jnum(j, "envs_per_observer"), 16);
    ck_assert_double_ge(jnum(j, "return_mean"), 400);
    ck_assert_double_le(jnum(j, "env_steps"), 150000 + 2 * 16 * 32);
    ck_assert_double_ge(jnum(j, "episodes"), 100);
    /* one rollout per 32 updates (8 epochs x 4 minibatches), all samples of
     * an update from the version the rollout started at */
    ck_assert_double_eq(jnum(j, "updates"), jnum(j, "env_steps") / (2 * 16 * 32) * 32);
    check_summary_shape(j);   /* no lag figures in sync mode */
    ck_assert_double_eq(jnum(j, "observers_lost"), 0);
    /* The agent's traffic: one act call (request + reply) per observer step
     * of 16 envs is 0.125 messages per env step; each of the 32 updates per
     * 1,024 env steps costs 4 more (a loss round trip with each observer):
     * about 0.25 in all here.
     * Each env step's observation (16 bytes) goes in and its logits (8 bytes)
     * come back. Nothing dropped. */
    double mps = jnum(j, "rpc_msgs_per_step"), bps = jnum(j, "rpc_bytes_per_step");
    ck_assert_msg(mps >= 0.125 && mps < 2, "rpc_msgs_per_step %g", mps);
    ck_assert_msg(bps >= 24 && bps < 2000, "rpc_bytes_per_step %g", bps);
    ck_assert_double_eq_tol(jnum(j, "rpc_msgs_sent") + jnum(j, "rpc_msgs_recv"), mps * jnum(j, "env_steps"), 1);
    ck_assert_double_eq(jnum(j, "rpc_dropped"), 0);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST

/* Async PPO, 4 observers x 16 envs x 32 steps, 4 minibatches: solved at
 * 80k..103k steps in 5 release runs and at 75k..141k in 9 ASan runs (mean
 * lag ~40 versions); one CI run under ASan with the other tests beside it
 * stood at 397.95 after 150k, so the budget is 300k, twice the worst seen.
 * (With ppo-fast's 32 x 16 and 2 minibatches, tuned for wall time, one run
 * ended at 388 at 150k.) */
START_TEST(test_ppo_async_learns)
{
    const char *args[] = { "--preset", "ppo-fast", "--mode", "async", "--seed", "1", "--max-steps", "300000",
                           "--envs-per-observer", "16", "--steps-per-rollout", "32", "--minibatches", "4",
                           "--target", "400", "--quiet", NULL };
    cJSON *j = train(args, 0);
    ck_assert(jbool(j, "solved"));
    ck_assert_str_eq(jstr(j, "stopped_by"), "solved");
    ck_assert_str_eq(jstr(j, "mode"), "async");
    ck_assert_str_eq(jstr(j, "algo"), "ppo");
    ck_assert_double_ge(jnum(j, "return_mean"), 400);
    /* each of the 4 observers may finish one rollout after the stop */
    ck_assert_double_le(jnum(j, "env_steps"), 300000 + 4 * 16 * 32);
    ck_assert_double_gt(jnum(j, "lag_mean"), 0);
    ck_assert_double_eq(jnum(j, "observers_lost"), 0);
    cJSON_Delete(j);
}
END_TEST

/* Async PPO with V-trace, 8 observers (mean lag ~50 versions): solved 400
 * at 185k..280k env steps in 5 release runs of seeds 1 and 2 (about 4-6 s
 * here) and at 169k..272k in 4 ASan runs two at a time; the budget is
 * 600k, twice the worst seen. */
START_TEST(test_ppo_async_vtrace_learns)
{
    const char *args[] = { "--mode", "async", "--observers", "8", "--vtrace", "--seed", "1", "--max-steps", "600000",
                           "--target", "400", "--quiet", NULL };
    cJSON *j = train(args, 0);
    ck_assert_str_eq(jstr(j, "stopped_by"), "solved");
    ck_assert_double_ge(jnum(j, "return_mean"), 400);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "vtrace")));
    ck_assert_double_gt(jnum(j, "lag_mean"), 1);
    cJSON_Delete(j);
}
END_TEST

/* --max-policy-lag K: no update applied with a lag above K; the others
 * are dropped and counted. */
START_TEST(test_max_policy_lag)
{
    const char *args[] = { "--mode", "async", "--observers", "4", "--max-policy-lag", "2", "--max-steps", "40000",
                           "--quiet", NULL };
    cJSON *j = train(args, 1);
    ck_assert_double_le(jnum(j, "lag_max"), 2);
    ck_assert_double_eq(jnum(j, "max_policy_lag"), 2);
    ck_assert_double_gt(jnum(j, "dropped_stale_updates"), 0);
    /* ppo-fast: 4 observers x 32 envs x 16 steps in 2 minibatches, 1024
     * samples a sync update, so each async observer's update is its whole
     * rollout of 512 (2 / 4 minibatches, at least 1) */
    ck_assert_double_eq(jnum(j, "dropped_stale_samples"), 512 * jnum(j, "dropped_stale_updates"));
    /* an observer whose update was dropped leaves the rest of that rollout
     * (as stale) for a new one: fewer update requests than 4 epochs x 1
     * minibatch per rollout of 512 steps (each observer may have one
     * rollout in flight at the end) */
    double rollouts = jnum(j, "env_steps") / 512, requests = jnum(j, "updates") + jnum(j, "dropped_stale_updates");
    ck_assert_msg(requests < 4 * rollouts, "%g update requests for %g rollouts", requests, rollouts);
    cJSON_Delete(j);
}
END_TEST

/* The rows of the minibatch an observer's first loss was computed on: the
 * fourth array (old log-probs, one per row) of TRIB_DEBUG_DUMP's
 * DIR/minibatch_0.bin (rl/debug_dump.h: per array an int64 count, then
 * that many floats). */
static long long dumped_rows(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/minibatch_0.bin", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "%s: not written", path);
    int64_t count = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(fread(&count, sizeof count, 1, f) == 1, "%s: array %d missing", path, i);
        if (i < 3) ck_assert_int_eq(fseek(f, (long)(count * (int64_t)sizeof(float)), SEEK_CUR), 0);
    }
    fclose(f);
    return (long long)count;
}

/* A run of 2 observers x 4 envs x 16 steps, 4 minibatches, 2 epochs, 40
 * rollouts in `mode`, its first minibatch dumped: *rows the rows of an
 * observer's first minibatch, *per_sample its updates per env step,
 * *first_line its first line (to free). */
static void modes_run(const char *mode, char **first_line, long long *rows, double *per_sample)
{
    char dir[] = "/tmp/trib-test-modes-XXXXXX", env[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(env, sizeof env, "TRIB_DEBUG_DUMP=%s", dir);
    const char *args[] = { "--preset", "ppo", "--mode", mode, "--observers", "2", "--envs-per-observer", "4",
                           "--steps-per-rollout", "16", "--minibatches", "4", "--epochs", "2", "--max-steps", "2560",
                           "--seed", "2", "--device", "cpu", "--quiet", NULL };
    const char *envs[] = { env, NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, envs);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 0 || rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    *first_line = strndup(p.out, strcspn(p.out, "\n"));
    cJSON *j = summary(&p);
    ck_assert_str_eq(jstr(j, "mode"), mode);
    ck_assert_double_ge(jnum(j, "env_steps"), 2560);
    *per_sample = jnum(j, "updates") / jnum(j, "env_steps");
    *rows = dumped_rows(dir);
    cJSON_Delete(j);
    rl_free(&p);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A minibatch is one size in samples in both modes (issue 35, point 3):
 * a sync update joins minibatch i of both observers (2 x 64 / 4 = 32
 * samples: 16 from each), an async update is one observer's alone, so
 * each observer splits its 64 samples into 4 / 2 = 2 minibatches of 32
 * (was 4 of 16, twice the updates per sample: 1/8 against sync's 1/16). */
START_TEST(test_minibatch_one_size_in_both_modes)
{
    long long sync_rows, async_rows;
    double sync_ups, async_ups;
    char *sync_first, *async_first;
    modes_run("sync", &sync_first, &sync_rows, &sync_ups);
    modes_run("async", &async_first, &async_rows, &async_ups);
    ck_assert_int_eq(sync_rows, 16);        /* an observer's share of a sync update of 32 */
    ck_assert_int_eq(async_rows, 2 * sync_rows);
    ck_assert_double_eq_tol(sync_ups, 1.0 / 16, 1e-12);   /* 2 epochs x 4 updates per 128 samples */
    /* async: 2 epochs x 2 updates per observer's rollout of 64; the rollouts
     * in flight at the stop (one per observer) may have counted their
     * samples without all their updates */
    ck_assert_msg(async_ups <= 1.0 / 16 + 1e-12 && async_ups >= 1.0 / 16 * 38 / 42,
                  "async made %g updates per env step, sync %g", async_ups, sync_ups);
    /* the first line says how an async observer's rollout splits */
    ck_assert_msg(strstr(sync_first, "2 epochs x 4 minibatches, clip 0.2, policy on cpu"), "%s", sync_first);
    ck_assert_msg(strstr(async_first, "2 epochs x 4 minibatches, clip 0.2; async: each observer's rollout in 2 "
                                      "minibatches of 32 samples, policy on cpu"), "%s", async_first);
    free(sync_first);
    free(async_first);
}
END_TEST

/* An observer stopped (SIGSTOP) while the other makes far more updates
 * than the default --max-policy-lag, then resumed: its stale update is
 * dropped, none applied with a lag over the limit (was: no limit by
 * default, so it was applied). ppo-fast with 2 observers and
 * --minibatches 8: an observer's rollout of 512 env steps is 4 epochs x 4
 * minibatches (its half of 8), 16 versions, and the default limit 32 x 2
 * x (4 x 8) = 2048, so 80,000 steps of the other (2500 versions) make
 * stale whatever observer2 holds. A stop that lands after its rollout's last update was applied and
 * before its next rollout's first act leaves it nothing stale (CI saw it
 * once: "no stale update dropped"): three stops, so that one at least
 * lands elsewhere. */
START_TEST(test_stopped_observer_stale_dropped)
{
    const char *args[] = { "--mode", "async", "--observers", "2", "--minibatches", "8", "--heartbeat-timeout", "300000",
                           "--max-steps", "0", "--target", "1000", "--log-every", "0.2", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    long long s0 = wait_progress(&p);
    struct child kids[2];
    ck_assert_int_eq(children_of(p.pid, kids, 2), 2);
    double t0 = trib_now_s();
    for (int stop = 0; stop < 3; stop++) {
        ck_assert_int_eq(kill(kids[1].pid, SIGSTOP), 0);
        for (long long s = s0; s < s0 + 80000;) {
            ck_assert_msg(rl_running(&p), "the run ended while observer2 was stopped");
            ck_assert_msg(trib_now_s() - t0 < RUN_TIMEOUT_S, "no 3 x 80,000 steps within %.0f s", RUN_TIMEOUT_S);
            usleep(50000);
            char *out = kit_must_read_fd(p.out_fd, NULL);
            s = last_progress_steps(out);
            free(out);
        }
        ck_assert_int_eq(kill(kids[1].pid, SIGCONT), 0);
        /* observer2's next update request is the stale one; a while of training after it */
        long long s1 = wait_progress(&p);
        for (s0 = s1; s0 < s1 + 5000;) {
            ck_assert_msg(rl_running(&p), "the run ended after observer2 was resumed");
            usleep(50000);
            char *out = kit_must_read_fd(p.out_fd, NULL);
            s0 = last_progress_steps(out);
            free(out);
        }
    }
    kill(p.pid, SIGINT);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 130, "exit %d\nstderr:\n%s", rc, tail(p.err));
    cJSON *j = summary(&p);
    ck_assert_double_eq(jnum(j, "max_policy_lag"), 2048);
    ck_assert_msg(jnum(j, "dropped_stale_updates") >= 1, "no stale update dropped\n%s", tail(p.out));
    ck_assert_double_le(jnum(j, "lag_max"), 2048);
    ck_assert_double_eq(jnum(j, "observers_lost"), 0);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST

/* REINFORCE as PyTorch's RPC RL example: a random CartPole policy returns
 * ~22; 30k steps give 150..235 (60k: ~340). */
START_TEST(test_reinforce_learns)
{
    const char *args[] = { "--preset", "pytorch-rl-example", "--max-steps", "30000", "--quiet", NULL };
    cJSON *j = train(args, 1);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_str_eq(jstr(j, "algo"), "reinforce");
    ck_assert_int_eq((int)jnum(j, "envs_per_observer"), 1);
    ck_assert_double_ge(jnum(j, "env_steps"), 30000);
    ck_assert_msg(jnum(j, "return_mean") > 100, "return_mean %g", jnum(j, "return_mean"));
    jnum(j, "running_reward");
    /* one episode per observer per update, all from the current version */
    ck_assert_double_eq(jnum(j, "episodes"), 4 * jnum(j, "updates"));
    cJSON_Delete(j);
}
END_TEST

/* REINFORCE is judged by the README's one rule (the mean return of the
 * last 100 episodes reaches --target), not by its running reward (an
 * average that starts at 10 and lags behind). Seed 1 solves 30 at its
 * first judgment here (100 episodes, 5,427 env steps, return 54.27) with a
 * running reward of 26.1. Another CPU (other SIMD kernels, other
 * rounding) takes another path: runs seen before sync REINFORCE became
 * reproducible had 14.6..30.5, so the running reward is reported, not
 * compared with the target. */
START_TEST(test_reinforce_solved_by_return)
{
    const char *args[] = { "--preset", "pytorch-rl-example", "--seed", "1", "--target", "30", "--max-steps", "50000",
                           "--quiet", NULL };
    cJSON *j = train(args, 0);
    ck_assert_str_eq(jstr(j, "stopped_by"), "solved");
    ck_assert_double_ge(jnum(j, "return_mean"), 30);
    ck_assert_double_eq(jnum(j, "target"), 30);
    ck_assert_double_eq(jnum(j, "episodes_judged"), 100);
    ck_assert_str_eq(jstr(j, "solved_when"), "return_mean of the last 100 episodes >= target");
    ck_assert_double_gt(jnum(j, "running_reward"), 0);
    cJSON_Delete(j);
}
END_TEST

/* The progress line: a legend first, then return, length, SPS and each
 * algorithm's learning signals as numbers (PPO: policy loss, value loss,
 * entropy, approx KL, clip fraction, explained variance; REINFORCE its
 * loss), no lag in sync mode, lag in async mode. */
static void check_progress(const char *const *args, const char *const *fields, const char *legend, bool lag)
{
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\n%s\n%s", rc, tail(p.out), tail(p.err));
    ck_assert_msg(strstr(p.out, legend) != NULL, "no legend '%s':\n%s", legend, tail(p.out));
    /* the last progress line: the one before the summary */
    char *end = strrchr(p.out, '{');
    ck_assert_ptr_nonnull(end);
    char *line = end - 1;
    while (line > p.out && line[-1] != '\n') line--;
    char *l = strndup(line, (size_t)(end - line));
    for (int i = 0; fields[i]; i++) {
        char key[32];
        snprintf(key, sizeof key, "  %s ", fields[i]);
        const char *at = strstr(l, key);
        ck_assert_msg(at != NULL, "no '%s' in '%s'", fields[i], l);
        char *num_end;
        strtod(at + strlen(key), &num_end);
        ck_assert_msg(num_end != at + strlen(key), "'%s' is not a number in '%s'", fields[i], l);
    }
    ck_assert_msg((strstr(l, "  lag ") != NULL) == lag, "lag %s in '%s'", lag ? "missing" : "shown", l);
    free(l);
    rl_free(&p);
}

START_TEST(test_progress_line)
{
    const char *ppo[] = { "--observers", "1", "--max-steps", "20000", "--log-every", "0.2", NULL };
    const char *const ppo_fields[] = { "steps", "sps", "ep", "return", "len", "pg", "vf", "ent", "kl", "clip", "ev",
                                       "upd/s", NULL };
    check_progress(ppo, ppo_fields, "pg (policy loss), vf (value loss), ent (entropy), kl (approx KL), clip (clip "
                   "fraction): means over the interval's updates; ev: explained variance", false);
    const char *rf[] = { "--preset", "pytorch-rl-example", "--mode", "async", "--observers", "2", "--max-steps",
                         "3000", "--log-every", "0.2", NULL };
    const char *const rf_fields[] = { "steps", "sps", "return", "len", "loss", "running", "upd/s", NULL };
    check_progress(rf, rf_fields, "loss (REINFORCE's policy loss): means over the interval's updates", true);
}
END_TEST

/* PPO with a Gaussian head on Pendulum-v1: -1345 after 8k steps, -621
 * after 60k (the preset solves -200 at ~92k). Episodes are exactly 200
 * steps, so their number is known. */
START_TEST(test_pendulum_improves)
{
    const char *small_args[] = { "--preset", "pendulum", "--max-steps", "8000", "--quiet", NULL };
    const char *big_args[] = { "--preset", "pendulum", "--max-steps", "60000", "--quiet", NULL };
    cJSON *small = train(small_args, 1), *big = train(big_args, 1);
    ck_assert_str_eq(jstr(big, "env"), "Pendulum-v1");
    ck_assert_str_eq(jstr(big, "algo"), "ppo");
    /* 2 observers x 4 envs x 256 steps a rollout: 8192 and 61440 steps */
    ck_assert_double_eq(jnum(small, "env_steps"), 8192);
    ck_assert_double_eq(jnum(big, "env_steps"), 61440);
    ck_assert_double_eq(jnum(small, "episodes"), 8 * (8192 / 8 / 200));
    ck_assert_double_eq(jnum(big, "episodes"), 8 * (61440 / 8 / 200));
    double r0 = jnum(small, "return_mean"), r1 = jnum(big, "return_mean");
    ck_assert_msg(r1 - r0 > 400 && r1 > -900, "return_mean %g after 8k steps, %g after 60k", r0, r1);
    cJSON_Delete(small);
    cJSON_Delete(big);
}
END_TEST

/* The same with --init orthogonal (CleanRL's layer_init): -1169 after 8k
 * steps, -670 after 60k (seed 1, the same every run); the first line says
 * the init. */
START_TEST(test_pendulum_orthogonal_improves)
{
    const char *small_args[] = { "--preset", "pendulum", "--init", "orthogonal", "--max-steps", "8000", "--quiet", NULL };
    const char *big_args[] = { "--preset", "pendulum", "--init", "orthogonal", "--max-steps", "60000", "--quiet", NULL };
    cJSON *small = train(small_args, 1);
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, big_args, NULL);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d (the target -200 is not met in 60k)\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out),
                  tail(p.err));
    ck_assert_msg(strstr(p.out, "64-64 tanh (orthogonal init), lr 0.001") != NULL, "first line: %s", p.out);
    cJSON *big = summary(&p);
    double r0 = jnum(small, "return_mean"), r1 = jnum(big, "return_mean");
    ck_assert_double_eq(jnum(big, "env_steps"), 61440);
    ck_assert_msg(r1 - r0 > 400 && r1 > -900, "return_mean %g after 8k steps, %g after 60k", r0, r1);
    cJSON_Delete(small);
    cJSON_Delete(big);
    rl_free(&p);
}
END_TEST

/* A2C (SB3's defaults): 222 after 40k steps (seeds 1..6: 205..265; it
 * oscillates later, 141 at 100k). */
START_TEST(test_a2c_learns)
{
    const char *args[] = { "--preset", "a2c", "--max-steps", "40000", "--quiet", NULL };
    cJSON *j = train(args, 1);
    ck_assert_str_eq(jstr(j, "algo"), "a2c");
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_double_eq(jnum(j, "env_steps"), 40000);
    /* one update per 2 observers x 8 envs x 5 steps */
    ck_assert_double_eq(jnum(j, "updates"), 40000 / 80);
    ck_assert_msg(jnum(j, "return_mean") > 100, "return_mean %g", jnum(j, "return_mean"));
    cJSON_Delete(j);
}
END_TEST

/* ---- plug-in envs ------------------------------------------------------------- */

/* PointReach-v0 (continuous, no reward threshold: never solved). Each of
 * the 8 envs runs 256 steps, past the 200-step time limit at least once. */
START_TEST(test_plugin_env)
{
    const char *args[] = { "--env", POINT_REACH_SO, "--observers", "2", "--envs-per-observer", "4",
                           "--steps-per-rollout", "64", "--max-steps", "2048", "--quiet", NULL };
    cJSON *j = train(args, 0);   /* no target: a run that spends its budget succeeds */
    ck_assert(!jbool(j, "solved"));
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_str_eq(jstr(j, "outcome"), "completed");
    ck_assert_str_eq(jstr(j, "env"), "PointReach-v0");   /* the env's id; where its code came from beside it */
    ck_assert_str_eq(jstr(j, "env_plugin"), POINT_REACH_SO);
    ck_assert_str_eq(jstr(j, "algo"), "ppo");
    ck_assert_double_ge(jnum(j, "env_steps"), 2048);
    ck_assert_double_ge(jnum(j, "episodes"), 8);
    ck_assert(isfinite(jnum(j, "return_mean")));
    cJSON_Delete(j);
}
END_TEST

/* The agent names what it cannot open; nothing on stdout. The lines after
 * the first are the train process reporting its observers (which never
 * got an endpoint) as "exited with status 99". */
static void check_bad_env(const char *env, const char *first_err_line)
{
    const char *args[] = { "--env", env, "--observers", "1", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    int rc = rl_wait(&p, 60);
    ck_assert_msg(rc == 2, "exit %d (an unknown --env is bad usage)\nstderr:\n%s", rc, p.err);
    char *first = strndup(p.err, strcspn(p.err, "\n"));
    ck_assert_str_eq(first, first_err_line);
    free(first);
    ck_assert_str_eq(p.out, "");
    rl_free(&p);
}

START_TEST(test_plugin_missing)
{
    check_bad_env("/nonexistent/libnope.so", "tributary-train: --env: plugin /nonexistent/libnope.so: cannot load: "
                                             "/nonexistent/libnope.so: cannot open shared object file: "
                                             "No such file or directory (see tributary-train --help)");
    ck_assert_ptr_null(env_lookup("Nope-v0"));   /* the envs module's own message, whatever is built in */
    char want[1024];
    snprintf(want, sizeof want, "tributary-train: --env: %s (see tributary-train --help)", env_last_error());
    ck_assert_ptr_nonnull(strstr(want, "unknown env id 'Nope-v0' (built-ins: CartPole-v1, Acrobot-v1, "
                                       "MountainCar-v0, Pendulum-v1"));
    check_bad_env("Nope-v0", want);
}
END_TEST

/* ---- faults -------------------------------------------------------------------- */

/* 3 observers; once training is under way observer2 is SIGKILLed. The run
 * goes on with the other two to its budget (--target 1000 is never met). */
static void check_observer_killed(const char *mode)
{
    enum { BUDGET = 60000 };
    /* Sync: observer2 dies at the start of a rollout (a progress line after
     * every iteration, each of 512 steps and one update), not in the middle
     * of an update's backward: that is the bug
     * test_bug_sync_observer_lost_in_backward (a kill at a random time of a
     * ppo-fast run hits it about 1 time in 6). */
    /* Async: observer2 dies at the first progress line, after 0.05 s of
     * training; a release build on a quiet box steps ~70k env steps/s here,
     * so a 0.25 s interval came at 17k steps, 30k on a box 1.8x faster. */
    const char *args[] = { "--observers", "3", "--heartbeat-timeout", "1500", "--max-steps", "60000", "--target",
                           "1000", "--mode", mode, "--log-every", "0.05", NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                           NULL, NULL };
    if (strcmp(mode, "sync") == 0) {
        const char *more[] = { "0.01", "--steps-per-rollout", "512", "--envs-per-observer", "8", "--epochs", "1",
                               "--minibatches", "1", NULL };
        memcpy(args + 11, more, sizeof more);
    }
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    long long steps_at_kill = wait_progress(&p);
    struct child kids[4];
    int n = children_of(p.pid, kids, 4);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(kill(kids[1].pid, SIGKILL), 0);
    ck_assert_msg(steps_at_kill < BUDGET / 2, "%lld steps before the kill: the budget is too small", steps_at_kill);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    cJSON *j = summary(&p);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "mode"), mode);
    ck_assert_msg(strcmp(jstr(j, "stopped_by"), "budget") == 0, "stopped by %s\nstderr:\n%s", jstr(j, "stopped_by"),
                  p.err);
    ck_assert_double_eq(jnum(j, "observers_lost"), 1);
    ck_assert_double_ge(jnum(j, "env_steps"), BUDGET);
    /* stderr: the agent's line, then the train process reaping observer2 */
    char reaped[128];
    snprintf(reaped, sizeof reaped, "tributary-train: observer2 (pid %d) was killed by signal 9\n", (int)kids[1].pid);
    const char *lost = strstr(p.err_nowait, "agent: lost observer2: ");
    ck_assert_msg(lost == p.err_nowait, "stderr does not start with the lost observer:\n%s", p.err);
    const char *eol = strchr(lost, '\n');
    ck_assert_msg(eol && memmem(lost, (size_t)(eol - lost), "; continuing with 2 observers", 29) &&
                      strcmp(eol + 1, reaped) == 0,
                  "stderr:\n%s", p.err);
    assert_gone(kids, n);
    cJSON_Delete(j);
    rl_free(&p);
}

START_TEST(test_observer_killed_sync) { check_observer_killed("sync"); }
END_TEST

START_TEST(test_observer_killed_async) { check_observer_killed("async"); }
END_TEST

/* A signal mid-run: the summary says who stopped it, the exit status is
 * 128 + the signal and no observer outlives the run. */
static void check_signal(const char *mode, int sig, const char *name)
{
    const char *args[] = { "--observers", "2", "--max-steps", "0", "--target", "1000", "--log-every", "0.25",
                           "--mode", mode, NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    wait_progress(&p);
    struct child kids[3];
    int n = children_of(p.pid, kids, 3);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(kill(p.pid, sig), 0);
    int rc = rl_wait(&p, 120);
    ck_assert_msg(rc == 128 + sig, "exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(p.out), tail(p.err));
    ck_assert_msg(p.err_nowait[0] == '\0', "stderr:\n%s", p.err);
    cJSON *j = summary(&p);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), name);
    ck_assert(!jbool(j, "solved"));
    ck_assert_str_eq(jstr(j, "mode"), mode);
    ck_assert_double_gt(jnum(j, "env_steps"), 0);
    ck_assert_double_eq(jnum(j, "observers_lost"), 0);
    assert_gone(kids, n);
    cJSON_Delete(j);
    rl_free(&p);
}

START_TEST(test_sigint_sync) { check_signal("sync", SIGINT, "SIGINT"); }
END_TEST

START_TEST(test_sigterm_async) { check_signal("async", SIGTERM, "SIGTERM"); }
END_TEST

/* Ctrl-C of tributary-agent while it waits for its observers: it stops
 * waiting at once, says so, prints the summary of a run that never
 * started and exits 130 (it used to wait out the 60 s rendezvous). */
START_TEST(test_sigint_while_waiting)
{
    char master[64];
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_port());
    const char *args[] = { "--observers", "2", "--master", master, NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    double t0 = trib_now_s();
    while (!err_has(&p, "listening on")) {
        ck_assert_msg(rl_running(&p) && trib_now_s() - t0 < 60, "no 'listening on' from tributary-agent");
        usleep(10000);
    }
    ck_assert_int_eq(kill(p.pid, SIGINT), 0);
    int rc = rl_wait(&p, 20);
    char want[256];
    snprintf(want, sizeof want,
             "tributary-agent: listening on %s\nagent: rpc_init: interrupted while waiting for the rendezvous "
             "(1 of 3 workers arrived)\n", master);
    ck_assert_msg(rc == 130, "exit %d\nstderr:\n%s", rc, p.err);
    ck_assert_str_eq(p.err_nowait, want);
    cJSON *j = summary(&p);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), "SIGINT");
    ck_assert(!jbool(j, "solved"));
    ck_assert_double_eq(jnum(j, "env_steps"), 0);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST

/* ---- waits that say what they wait for ------------------------------------------------ */

/* Waits until p's stderr holds what, at most within_s seconds. */
static void expect_err_within(struct rl_proc *p, const char *what, double within_s)
{
    double t0 = trib_now_s();
    while (!err_has(p, what)) {
        if (trib_now_s() - t0 > within_s || !rl_running(p)) {
            char *err = kit_must_read_fd(p->err_fd, NULL);
            ck_abort_msg("%s: no '%s' on stderr within %.0f s:\n%s", p->name, what, within_s, err);
        }
        usleep(20000);
    }
}

/* Whether err holds a notice "HEAD (N s so far)\n" with N >= min_s. */
static bool has_notice(const char *err, const char *head, int min_s)
{
    size_t hl = strlen(head);
    for (const char *at = strstr(err, head); at; at = strstr(at + 1, head)) {
        const char *q = at + hl;
        char *end;
        if (strncmp(q, " (", 2) != 0) continue;
        long n = strtol(q + 2, &end, 10);
        if (end != q + 2 && n >= min_s && strncmp(end, " s so far)\n", 11) == 0) return true;
    }
    return false;
}

/* Waits until p's stderr holds the notice "HEAD (N s so far)" with N >=
 * min_s, at most within_s seconds (generous: a loaded box starts a program
 * late; N, the program's own clock, says when it spoke). N is the wait's
 * age when the notice thread (which looks every 100 ms) printed it: min_s
 * on time, more on a box loaded enough to run that thread half a second
 * late, where "(3 s so far)" was asserted before. */
static void expect_notice_within(struct rl_proc *p, const char *head, int min_s, double within_s)
{
    double t0 = trib_now_s();
    for (;;) {
        bool running = rl_running(p);   /* before reading: all it said is in the file once it has exited */
        char *err = kit_must_read_fd(p->err_fd, NULL);
        bool found = has_notice(err, head, min_s);
        if (!found && (trib_now_s() - t0 > within_s || !running))
            ck_abort_msg("%s: no '%s (N s so far)' with N >= %d on stderr within %.0f s:\n%s", p->name, head, min_s,
                         within_s, err);
        free(err);
        if (found) return;
        usleep(20000);
    }
}

/* tributary-observer with no agent says, within a few seconds and again
 * every few, what it waits for; it defaults to the agent's default address
 * (tcp://127.0.0.1:29500); once the agent comes, it says it joined. */
/* Whether nothing listens on 127.0.0.1:port (a bind succeeds). */
static bool loopback_port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

START_TEST(test_observer_says_it_waits)
{
    struct rl_proc o;
    /* the default address is a fixed port: only when nothing (another run's
     * agent) listens there, so this observer can join nobody's run */
    if (loopback_port_free(29500)) {
        const char *env[] = { NULL };
        const char *dflt[] = { "--rank", "1", "--world-size", "2", NULL };
        rl_start(&o, TRIB_OBSERVER_BIN, dflt, env);
        expect_notice_within(&o, "observer1: waiting for the agent at tcp://127.0.0.1:29500 (the run starts once the "
                                 "agent and all its observers have joined)", 3, 15);
        rl_kill(&o);
        rl_free(&o);
    } else {
        fprintf(stderr, "test_observer_says_it_waits: 127.0.0.1:29500 is in use: the default-address case skipped\n");
    }
    char master[64];
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_port());
    const char *oargs[] = { "--rank", "1", "--world-size", "2", "--master", master, NULL };
    rl_start(&o, TRIB_OBSERVER_BIN, oargs, NULL);
    char want[256];
    snprintf(want, sizeof want, "observer1: waiting for the agent at %s (the run starts once the agent and all its "
                                "observers have joined)", master);
    expect_notice_within(&o, want, 8, 25);   /* the second notice */
    const char *aargs[] = { "--observers", "1", "--master", master, "--max-updates", "2", "--quiet", NULL };
    struct rl_proc a;
    rl_start(&a, TRIB_AGENT_BIN, aargs, NULL);
    snprintf(want, sizeof want, "observer1: joined the agent at %s as rank 1\n", master);
    expect_err_within(&o, want, 60);
    ck_assert_int_eq(rl_wait(&a, RUN_TIMEOUT_S), 1);
    ck_assert_int_eq(rl_wait(&o, 60), 0);
    rl_free(&a);
    rl_free(&o);
}
END_TEST

/* tributary-agent with no observers says what it waits for within a few
 * seconds (how to start them included) and honours --max-seconds while it
 * waits: it stops, saying so, with the summary of a run stopped by its
 * budget. */
START_TEST(test_agent_says_it_waits)
{
    char master[64];
    snprintf(master, sizeof master, "tcp://127.0.0.1:%d", free_port());
    /* the notice comes at 3 s; 6 s leave its thread 3 s to print it */
    const char *args[] = { "--observers", "2", "--master", master, "--max-seconds", "6", NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_AGENT_BIN, args, NULL);
    double t0 = trib_now_s();
    char what[256], want[512];
    snprintf(what, sizeof what, "2 observers to join at %s (tributary-observer --master %s --rank R --world-size 3)",
             master, master);
    snprintf(want, sizeof want, "agent: waiting for %s", what);
    expect_notice_within(&p, want, 3, 15);
    int rc = rl_wait(&p, 30);
    ck_assert_msg(rc == 1, "exit %d\n%s", rc, p.err);
    ck_assert_msg(trib_now_s() - t0 < 15, "stopped after %.1f s", trib_now_s() - t0);
    snprintf(want, sizeof want, "agent: --max-seconds 6 passed while waiting for %s; stopping\n", what);
    ck_assert_msg(strstr(p.err, want) != NULL, "stderr:\n%s", p.err);
    cJSON *j = summary(&p);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_double_eq(jnum(j, "env_steps"), 0);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST

/* ---- separate programs ------------------------------------------------------------ */

/* tributary-agent and two tributary-observer processes, configured by
 * MASTER_ADDR/MASTER_PORT (and RANK/WORLD_SIZE for the observers). */
START_TEST(test_separate_programs)
{
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", free_port());
    const char *agent_env[] = { "MASTER_ADDR=127.0.0.1", port, NULL };
    const char *obs_env[2][5] = { { "MASTER_ADDR=127.0.0.1", port, "RANK=1", "WORLD_SIZE=3", NULL },
                                  { "MASTER_ADDR=127.0.0.1", port, "RANK=2", "WORLD_SIZE=3", NULL } };
    const char *agent_args[] = { "--observers", "2", "--max-steps", "8192", "--quiet", NULL };
    const char *obs_args[] = { NULL };
    struct rl_proc agent, obs[2];
    rl_start(&agent, TRIB_AGENT_BIN, agent_args, agent_env);
    rl_start(&obs[0], TRIB_OBSERVER_BIN, obs_args, obs_env[0]);
    rl_start(&obs[1], TRIB_OBSERVER_BIN, obs_args, obs_env[1]);
    int rc = rl_wait(&agent, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent.out), tail(agent.err));
    ck_assert_msg(strncmp(agent.err_nowait, "tributary-agent: listening on tcp://127.0.0.1:", 46) == 0 &&
                      strchr(agent.err_nowait, '\n') == agent.err_nowait + strlen(agent.err_nowait) - 1,
                  "agent stderr:\n%s", agent.err);
    cJSON *j = summary(&agent);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), "budget");
    ck_assert_int_eq((int)jnum(j, "observers"), 2);
    ck_assert_double_ge(jnum(j, "env_steps"), 8192);
    ck_assert_double_eq(jnum(j, "observers_lost"), 0);
    for (int i = 0; i < 2; i++) {
        rc = rl_wait(&obs[i], 60);
        ck_assert_msg(rc == 0, "observer%d exit %d\nstderr:\n%s", i + 1, rc, obs[i].err);
        /* an observer says when it joined */
        char joined[128];
        snprintf(joined, sizeof joined, "observer%d: joined the agent at tcp://127.0.0.1:%s as rank %d\n", i + 1,
                 port + strlen("MASTER_PORT="), i + 1);
        ck_assert_str_eq(obs[i].err_nowait, joined);
        rl_free(&obs[i]);
    }
    cJSON_Delete(j);
    rl_free(&agent);
}
END_TEST

/* ---- reproducibility ------------------------------------------------------------ */

/* The summary without its timings, as text. */
static char *untimed(cJSON *j)
{
    cJSON_DeleteItemFromObjectCaseSensitive(j, "wall_s");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "sps");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "updates_per_s");
    cJSON_DeleteItemFromObjectCaseSensitive(j, "agent_busy_frac");
    /* heartbeats are timed */
    static const char *const traffic[] = { "rpc_msgs_sent", "rpc_msgs_recv", "rpc_bytes_sent", "rpc_bytes_recv",
                                           "rpc_msgs_per_step", "rpc_bytes_per_step" };
    for (size_t i = 0; i < sizeof traffic / sizeof *traffic; i++) cJSON_DeleteItemFromObjectCaseSensitive(j, traffic[i]);
    char *s = cJSON_PrintUnformatted(j);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* Two runs of args; their summaries must agree but for the timings. */
static void check_reproducible(const char *const *args, const char *bug)
{
    cJSON *a = train(args, 1), *b = train(args, 1);
    ck_assert_double_ge(jnum(a, "episodes"), 100);
    char *sa = untimed(a), *sb = untimed(b);
    ck_assert_msg(strcmp(sa, sb) == 0, "%stwo runs differ:\n%s\n%s", bug, sa, sb);
    free(sa);
    free(sb);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* Two observers whose act calls are never merged (--max-batch 16, their
 * calls' size): the same seed gives the same run. */
START_TEST(test_sync_reproducible_unmerged)
{
    const char *args[] = { "--preset", "ppo-fast", "--seed", "7", "--max-steps", "30000", "--observers", "2",
                           "--envs-per-observer", "16", "--max-batch", "16", "--quiet", NULL };
    check_reproducible(args, "");
}
END_TEST

/* Four observers whose act calls the agent merges, and whose gradients
 * reach the agent in any order: a sync run is still reproducible (the
 * merge waits for every observer and orders calls by worker; the agent
 * carries the observers' gradients in worker order). Before those fixes, 10 runs of
 * this gave 10 different summaries. */
START_TEST(test_sync_reproducible_merged)
{
    const char *args[] = { "--preset", "ppo-fast", "--seed", "7", "--max-steps", "40000", "--quiet", NULL };
    check_reproducible(args, "");
}
END_TEST

/* REINFORCE with dropout (PyTorch's example, 4 observers of one episode
 * each): every evaluate call's dropout mask comes from its caller's own
 * stream, so the order in which the observers' calls reach the agent does
 * not change the run. Before, the 4 observers drew masks from one state in
 * arrival order, and 3 runs of 4 differed. */
START_TEST(test_sync_reproducible_reinforce)
{
    const char *args[] = { "--preset", "pytorch-rl-example", "--seed", "1", "--max-steps", "8000", "--quiet", NULL };
    check_reproducible(args, "");
}
END_TEST

/* In sync mode an observer lost while the agent runs an update's backward
 * costs that update, not the run. Updates take nearly all the time here
 * (1-step rollouts, 50 epochs), so a kill lands in a backward a third to
 * half of the time; observers 2..8 are killed one after the other and the
 * run must outlive every loss (before the fix it failed by the 5th kill
 * in 7 runs of 8). */
START_TEST(test_sync_observer_lost_in_backward)
{
    const char *args[] = { "--observers", "8", "--heartbeat-timeout", "1000", "--max-steps", "0", "--target", "1000",
                           "--log-every", "0.25", "--steps-per-rollout", "1", "--epochs", "50", "--minibatches", "1",
                           NULL };
    struct rl_proc p;
    rl_start(&p, TRIB_TRAIN_BIN, args, NULL);
    wait_progress(&p);
    struct child kids[9];
    int n = children_of(p.pid, kids, 9);
    ck_assert_int_eq(n, 8);
    uint64_t rng = (uint64_t)getpid();
    for (int k = 1; k < n; k++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        usleep(200000 + (useconds_t)((rng >> 33) % 400000));
        /* the observers go first when the run fails and shuts down */
        if (!rl_running(&p) || kill(kids[k].pid, SIGKILL) != 0) break;
        char lost[64];
        snprintf(lost, sizeof lost, "agent: lost observer%d: ", k + 1);
        double t0 = trib_now_s();
        while (rl_running(&p) && !err_has(&p, lost)) {
            ck_assert_msg(trib_now_s() - t0 < 60, "observer%d's loss not reported within 60 s", k + 1);
            usleep(20000);
        }
    }
    if (rl_running(&p)) kill(p.pid, SIGINT);
    int rc = rl_wait(&p, RUN_TIMEOUT_S);
    cJSON *j = summary(&p);
    ck_assert_msg(rc == 130 && strcmp(jstr(j, "stopped_by"), "SIGINT") == 0,
                  "exit %d, stopped by %s\nstderr:\n%s",
                  rc, jstr(j, "stopped_by"), p.err);
    ck_assert_double_eq(jnum(j, "observers_lost"), 7);
    assert_gone(kids, n);
    cJSON_Delete(j);
    rl_free(&p);
}
END_TEST

/* ---- messages per update ------------------------------------------------------ */

/* A sync update is one round trip (docs/design.md §6): the agent sends each
 * observer its part of the evaluation, the observer answers with its loss's
 * gradients and its next minibatch: one message from each observer per
 * update, where the distributed-autograd backward made two (its reply and
 * the backward's _backprop call). Updates are nearly all the traffic here
 * (4-step rollouts of 4 envs, 50 epochs x 4 minibatches: 2 rollouts, 400
 * updates): everything else an observer sends the agent is bounded, so the
 * agent's received messages pin the count (the old update gave 1,642). */
START_TEST(test_sync_one_message_per_update)
{
    const char *args[] = { "--preset", "ppo-fast", "--seed", "1", "--observers", "2", "--envs-per-observer", "4",
                           "--steps-per-rollout", "4", "--minibatches", "4", "--epochs", "50", "--max-steps", "64",
                           "--quiet", NULL };
    double t0 = trib_now_s();
    cJSON *j = train(args, 1);
    double elapsed = trib_now_s() - t0;
    const int observers = 2, rollouts = 2, acts = 4 + 1;   /* act calls of a rollout: its steps and the bootstrap */
    ck_assert_double_eq(jnum(j, "env_steps"), rollouts * observers * 4 * 4);
    double updates = jnum(j, "updates"), recv = jnum(j, "rpc_msgs_recv");
    ck_assert_double_eq(updates, rollouts * 50 * 4);
    /* besides: each rollout's act calls and reply, the set-up's and the
     * shutdown's replies and the joins (a dozen at most), and one
     * heartbeat every 200 ms (the agent's heartbeat period) of the run */
    double others = observers * (rollouts * (acts + 1) + 12 + (elapsed / 0.2 + 2));
    ck_assert_msg(recv >= updates * observers && recv <= updates * observers + others,
                  "the agent received %.0f messages for %.0f updates of %d observers (%.2f an observer an update; "
                  "at most %.0f besides the updates')",
                  recv, updates, observers, recv / (updates * observers), others);
    cJSON_Delete(j);
}
END_TEST

KIT_MAIN("rl_train",
         { "cli", 120, .teardown = rl_kill_all, .tests = { test_train_help, test_train_bad_usage, test_cleanrl_aliases,
           test_agent_cli, test_observer_cli } },
         { "learning", 600, .teardown = rl_kill_all, .tests = { test_ppo_sync_learns, test_ppo_async_learns,
           test_reinforce_learns,
           test_reinforce_solved_by_return, test_ppo_async_vtrace_learns, test_max_policy_lag, test_progress_line,
           test_pendulum_improves, test_pendulum_orthogonal_improves, test_a2c_learns } },
         { "modes", 300, .teardown = rl_kill_all, .tests = { test_minibatch_one_size_in_both_modes } },
         { "plugin", 600, .teardown = rl_kill_all, .tests = { test_plugin_env, test_plugin_missing } },
         { "faults", 600, .teardown = rl_kill_all, .tests = { test_observer_killed_sync, test_observer_killed_async,
           test_sigint_sync, test_sigterm_async, test_sigint_while_waiting, test_stopped_observer_stale_dropped } },
         { "separate", 600, .teardown = rl_kill_all, .tests = { test_separate_programs, test_observer_says_it_waits,
           test_agent_says_it_waits } },
         { "reproducible", 600, .teardown = rl_kill_all, .tests = { test_sync_reproducible_unmerged,
           test_sync_reproducible_merged,
           test_sync_reproducible_reinforce, test_sync_observer_lost_in_backward } },
         { "messages", 300, .teardown = rl_kill_all, .tests = { test_sync_one_message_per_update } })
