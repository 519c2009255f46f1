/* End-to-end tests of observers coming and going in a running job:
 * tributary-agent and separate tributary-observer processes on loopback
 * (the agent on a port of its own choosing, read from its "listening on"
 * line). A killed observer restarted under its rank rejoins and contributes
 * again, in sync and async mode (normalising too: its first delta counts
 * its set-up's resets again); a rank a live observer holds, or one
 * outside the world, is refused; the agent's death makes every observer
 * exit within the heartbeat timeout. */
#define _GNU_SOURCE
#include <fcntl.h>

#include "rl_harness.h"
#include "kit.h"

#define HB_MS "2000"                /* --heartbeat-timeout of every process here */
#define HB_S 2.0
#define WAIT_S 60.0                 /* for one expected line, ASan and a loaded box included */

/* ---- a job of separate programs ------------------------------------------------------ */

static char logdir[64];             static void teardown(void)
{
    rl_kill_all();
    if (logdir[0]) kit_rm_rf(logdir);
    logdir[0] = '\0';
}

static void wait_err(struct rl_proc *p, const char *what) { rl_wait_err(p, what, WAIT_S); }

/* Starts tributary-agent for 2 observers on a free port of its choosing
 * (its endpoint into ep), with args after the common ones: never solved
 * (--target 1000), no step budget (the test stops it with SIGTERM). */
static void start_agent(struct rl_proc *agent, char *ep, size_t cap, const char *const *extra)
{
    const char *args[MAX_ARGS + 1] = { "--master", "tcp://127.0.0.1:0", "--observers", "2", "--heartbeat-timeout",
                                       HB_MS, "--max-steps", "0", "--target", "1000", "--log-every", "0.2",
                                       "--envs-per-observer", "4", "--steps-per-rollout", "32", NULL };
    int n = 0;
    while (args[n]) n++;
    for (int i = 0; extra && extra[i]; i++) {
        ck_assert_int_lt(n, MAX_ARGS);
        args[n++] = extra[i];
    }
    args[n] = NULL;
    rl_start(agent, TRIB_AGENT_BIN, args, NULL);
    rl_agent_endpoint(agent, ep, cap, WAIT_S);
}

/* Starts tributary-observer --rank rank --world-size world --master ep
 * (plus extra flags, NULL-terminated, or NULL). */
static void start_observer(struct rl_proc *p, const char *ep, int rank, int world, const char *const *extra)
{
    char r[16], w[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(w, sizeof w, "%d", world);
    const char *args[16] = { "--rank", r, "--world-size", w, "--master", ep, "--heartbeat-timeout", HB_MS, NULL };
    int n = 8;
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    rl_start(p, TRIB_OBSERVER_BIN, args, NULL);
}

/* SIGTERMs the agent (a graceful stop: summary, observers shut down) and
 * returns its summary; exit status 143. */
static cJSON *stop_agent(struct rl_proc *agent)
{
    ck_assert_int_eq(kill(agent->pid, SIGTERM), 0);
    int rc = rl_wait(agent, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 143, "agent exit %d\nstdout:\n%s\nstderr:\n%s", rc, tail(agent->out), tail(agent->err));
    cJSON *j = summary(agent);
    check_summary_shape(j);
    ck_assert_str_eq(jstr(j, "stopped_by"), "SIGTERM");
    return j;
}

/* An observer that served to the end: exit 0, nothing on stderr but
 * that it joined. */
static void assert_clean_exit(struct rl_proc *p, const char *who)
{
    int rc = rl_wait(p, 60);
    ck_assert_msg(rc == 0, "%s exit %d\nstderr:\n%s", who, rc, p->err);
    ck_assert_msg(after_joined(p->err_nowait)[0] == '\0', "%s stderr:\n%s", who, p->err);
    rl_free(p);
}

/* The complete lines of metrics.jsonl so far. */
static int metrics_rows(cJSON **rows, int cap)
{
    char path[128];
    snprintf(path, sizeof path, "%s/metrics.jsonl", logdir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char *s = kit_must_read_fd(fd, NULL);
    close(fd);
    int n = 0;
    for (char *line = s, *nl; n < cap && (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = '\0';
        rows[n] = cJSON_Parse(line);
        ck_assert_msg(cJSON_IsObject(rows[n]), "metrics.jsonl row %d: '%s'", n + 1, line);
        n++;
    }
    free(s);
    return n;
}

#define MAX_ROWS 4096

/* Waits for a metrics row after the first `after` with sps_observer<k> > 0
 * (fails after WAIT_S). */
static void wait_observer_steps(int k, int after)
{
    char key[32];
    snprintf(key, sizeof key, "sps_observer%d", k);
    static cJSON *rows[MAX_ROWS];
    double t0 = trib_now_s();
    for (;;) {
        int n = metrics_rows(rows, MAX_ROWS);
        bool seen = false;
        for (int i = 0; i < n; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(rows[i], key);
            if (i >= after && cJSON_IsNumber(v) && v->valuedouble > 0) seen = true;
            cJSON_Delete(rows[i]);
        }
        if (seen) return;
        ck_assert_msg(trib_now_s() - t0 < WAIT_S, "no metrics row with %s > 0 after row %d within %.0f s", key, after,
                      WAIT_S);
        usleep(20000);
    }
}

static int count_metrics_rows(void)
{
    static cJSON *rows[MAX_ROWS];
    int n = metrics_rows(rows, MAX_ROWS);
    for (int i = 0; i < n; i++) cJSON_Delete(rows[i]);
    return n;
}

/* ---- rejoining ------------------------------------------------------------------------ */

/* Two observers; once training is under way observer2 is SIGKILLed. When
 * the agent has reported it lost, a new tributary-observer for rank 2 is
 * started: the agent reports it rejoined, and a metrics row written after
 * that counts env steps of observer2's slot (the old process is dead, so
 * they are the new one's). The run then stops (SIGTERM) with both
 * observers exiting cleanly. In sync mode a newcomer under the rank free
 * but a live observer's name is refused first. norm: the run normalises
 * observations and rewards, so the rejoined observer's first delta counts
 * its set-up's reset observations again, as the agent expects (issue 33
 * F1: a count that is not its report's would drop it, saying so). */
static void check_rejoin(const char *mode, bool norm)
{
    snprintf(logdir, sizeof logdir, "/tmp/test_rl_rejoin_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(logdir));
    const char *extra[] = { "--mode", mode, "--logdir", logdir, norm ? "--norm-obs" : NULL, "--norm-reward", NULL };
    struct rl_proc agent, obs1, obs2, again;
    char ep[128];
    start_agent(&agent, ep, sizeof ep, extra);
    start_observer(&obs1, ep, 1, 3, NULL);
    start_observer(&obs2, ep, 2, 3, NULL);
    wait_progress(&agent);
    ck_assert_int_eq(kill(obs2.pid, SIGKILL), 0);
    ck_assert_int_eq(rl_wait(&obs2, 10), 128 + SIGKILL);
    rl_free(&obs2);
    wait_err(&agent, "agent: lost observer2: ");
    if (strcmp(mode, "sync") == 0) {
        const char *as_obs1[] = { "--name", "observer1", NULL };
        start_observer(&again, ep, 2, 3, as_obs1);
        int rc = rl_wait(&again, 30);
        char want[512];
        snprintf(want, sizeof want,
                 "observer1: rpc_init: rendezvous with %s failed: rpc: agent: __hello: worker name 'observer1' is "
                 "taken\n", ep);
        ck_assert_msg(rc == 1, "exit %d\nstderr:\n%s", rc, again.err);
        ck_assert_str_eq(again.err_nowait, want);
        rl_free(&again);
    }
    start_observer(&again, ep, 2, 3, NULL);
    wait_err(&agent, "agent: observer2 rejoined (rank 2); training with 2 observers\n");
    wait_observer_steps(2, count_metrics_rows());
    cJSON *j = stop_agent(&agent);
    ck_assert_str_eq(jstr(j, "mode"), mode);
    ck_assert_double_eq(jnum(j, "observers_lost"), 1);
    ck_assert_double_eq(jnum(j, "observers_rejoined"), 1);
    /* stderr: listening, the loss and the rejoin, nothing else (in sync mode
     * the final checkpoint got every observer's state) */
    const char *lost = strstr(agent.err_nowait, "\nagent: lost observer2: ");
    ck_assert_msg(lost != NULL, "agent stderr:\n%s", agent.err);
    const char *eol = strchr(lost + 1, '\n');
    ck_assert_msg(eol && memmem(lost, (size_t)(eol - lost), "; continuing with 1 observer", 28) &&
                      strcmp(eol + 1, "agent: observer2 rejoined (rank 2); training with 2 observers\n") == 0,
                  "agent stderr:\n%s", agent.err);
    assert_clean_exit(&obs1, "observer1");
    assert_clean_exit(&again, "the new observer2");
    cJSON_Delete(j);
    rl_free(&agent);
}

START_TEST(test_rejoin_sync) { check_rejoin("sync", false); }
END_TEST

START_TEST(test_rejoin_async) { check_rejoin("async", false); }
END_TEST

START_TEST(test_rejoin_norm_sync) { check_rejoin("sync", true); }
END_TEST

START_TEST(test_rejoin_norm_async) { check_rejoin("async", true); }
END_TEST

/* Newcomers asking for a live observer's rank (under its name or another),
 * for a rank outside the world, or with another world size, exit 1 naming
 * why; the run goes on untouched. */
START_TEST(test_rejoin_refused)
{
    struct rl_proc agent, obs1, obs2, bad;
    char ep[128];
    start_agent(&agent, ep, sizeof ep, NULL);
    start_observer(&obs1, ep, 1, 3, NULL);
    start_observer(&obs2, ep, 2, 3, NULL);
    wait_progress(&agent);
    static const char *const other_name[] = { "--name", "other", NULL };
    struct {
        int rank, world;
        const char *const *extra;
        const char *who, *why;
    } cases[] = {
        { 2, 3, NULL, "observer2", "rank 2 is taken by live worker observer2" },
        { 2, 3, other_name, "other", "rank 2 is taken by live worker observer2" },
        { 3, 4, NULL, "observer3", "rank 3 out of range 1..2" },
        { 1, 4, NULL, "observer1", "world size 4 does not match the master's 3" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        start_observer(&bad, ep, cases[i].rank, cases[i].world, cases[i].extra);
        int rc = rl_wait(&bad, 30);
        char want[512];
        snprintf(want, sizeof want, "%s: rpc_init: rendezvous with %s failed: rpc: agent: __hello: %s\n", cases[i].who,
                 ep, cases[i].why);
        ck_assert_msg(rc == 1, "case %zu: exit %d\nstderr:\n%s", i, rc, bad.err);
        ck_assert_str_eq(bad.err_nowait, want);
        ck_assert_str_eq(bad.out, "");
        rl_free(&bad);
    }
    /* outside the world by its own account: refused before it says hello */
    start_observer(&bad, ep, 3, 3, NULL);
    ck_assert_int_eq(rl_wait(&bad, 30), 1);
    ck_assert_str_eq(bad.err_nowait, "observer3: rpc_init: rank 3 out of range for world size 3\n");
    rl_free(&bad);
    cJSON *j = stop_agent(&agent);
    ck_assert_double_eq(jnum(j, "observers_lost"), 0);
    ck_assert_double_eq(jnum(j, "observers_rejoined"), 0);
    ck_assert_msg(strchr(agent.err_nowait, '\n') == agent.err_nowait + strlen(agent.err_nowait) - 1, "agent stderr:\n%s",
                  agent.err);
    assert_clean_exit(&obs1, "observer1");
    assert_clean_exit(&obs2, "observer2");
    cJSON_Delete(j);
    rl_free(&agent);
}
END_TEST

/* ---- the agent's death ------------------------------------------------------------------ */

/* The agent SIGKILLed mid-run: every observer exits 1 within the heartbeat
 * timeout (plus a margin for a loaded box) saying it lost the agent. */
static void check_agent_death(const char *mode)
{
    const char *extra[] = { "--mode", mode, NULL };
    struct rl_proc agent, obs[2];
    char ep[128];
    start_agent(&agent, ep, sizeof ep, extra);
    start_observer(&obs[0], ep, 1, 3, NULL);
    start_observer(&obs[1], ep, 2, 3, NULL);
    wait_progress(&agent);
    ck_assert_int_eq(kill(agent.pid, SIGKILL), 0);
    double t0 = trib_now_s();
    ck_assert_int_eq(rl_wait(&agent, 10), 128 + SIGKILL);
    for (int i = 0; i < 2; i++) {
        int rc = rl_wait(&obs[i], HB_S + 8);
        double dt = trib_now_s() - t0;
        char want[128];
        snprintf(want, sizeof want, "observer%d: lost the agent (no heartbeat within " HB_MS " ms): exiting\n", i + 1);
        ck_assert_msg(rc == 1, "%s: observer%d exit %d\nstderr:\n%s", mode, i + 1, rc, obs[i].err);
        ck_assert_str_eq(after_joined(obs[i].err_nowait), want);
        ck_assert_msg(dt < HB_S + 5, "%s: observer%d exited %.1f s after the agent's death", mode, i + 1, dt);
        rl_free(&obs[i]);
    }
    rl_free(&agent);
}

START_TEST(test_agent_death_sync) { check_agent_death("sync"); }
END_TEST

START_TEST(test_agent_death_async) { check_agent_death("async"); }
END_TEST

KIT_MAIN("rl_rejoin",
         { "rejoin", 300, .teardown = teardown, .tests = { test_rejoin_sync, test_rejoin_async, test_rejoin_norm_sync,
           test_rejoin_norm_async, test_rejoin_refused } },
         { "agent_death", 300, .teardown = teardown, .tests = { test_agent_death_sync, test_agent_death_async } })
