/* Helpers of the RL programs' end-to-end tests (test_rl_train,
 * test_rl_rejoin, test_rl_keys): start real programs with their output in
 * unlinked files, wait for them with a time limit, reap whatever a test
 * leaves, and read the JSON summary the agent prints last. The processes
 * themselves are common/proc's (one group per test process); this adds
 * what the tests assert on: the whole output as strings, and a failed
 * test instead of an error code. One includer per binary. */
#ifndef TRIB_TESTS_RL_HARNESS_H
#define TRIB_TESTS_RL_HARNESS_H

#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/proc.h"
#include "kit.h"

extern char **environ;

/* ---- processes ----------------------------------------------------------------- */

#define MAX_ARGS 48
#define RUN_TIMEOUT_S 300.0         /* any one run, ASan included; a hang fails the test */

/* One started program. */
struct rl_proc {
    const char *name;               /* the binary's path, for messages */
    int idx;                        /* its slot in rl_group */
    pid_t pid;                      /* 0 once reaped */
    int status;                     /* exit status, or 128 + signal */
    int out_fd, err_fd;             /* its stdout and stderr: unlinked files, read from offset 0; -1 once reaped */
    char *out, *err;                /* the whole stdout/stderr once rl_wait returns */
    char *err_nowait;               /* err without the lines of waits that lasted (drop_waits) */
};

/* Every program this test process started. In CK_FORK mode each test
 * starts with it empty (the forked copy of an empty group); rl_kill_all,
 * the fixtures' teardown, kills and reaps what a test left and empties it.
 * Check also kills the test's process group when a test ends, so a failed
 * assertion leaves nothing behind either. */
static struct proc_group rl_group;


/* The end of s (at most 2500 characters), for failure messages. */
static inline const char *tail(const char *s)
{
    size_t n = strlen(s);
    return n > 2500 ? s + n - 2500 : s;
}

/* Inherited variables a test must not depend on. */
static inline bool scrubbed(const char *kv)
{
    static const char *const keys[] = { "MASTER_ADDR=", "MASTER_PORT=", "RANK=", "WORLD_SIZE=", "SLURM_PROCID=",
                                        "SLURM_NTASKS=", NULL };
    for (int i = 0; keys[i]; i++)
        if (strncmp(kv, keys[i], strlen(keys[i])) == 0) return true;
    return false;
}

/* Starts bin with args (NULL-terminated, without argv[0]) and the
 * environment minus the rendezvous variables plus env (NULL-terminated
 * "K=V", or NULL); stdin is /dev/null, stdout and stderr go to files. */
static inline void rl_start(struct rl_proc *p, const char *bin, const char *const *args, const char *const *env)
{
    memset(p, 0, sizeof *p);
    p->name = bin;
    const char *argv[MAX_ARGS + 2] = { bin };
    int n = 0;
    while (args[n]) {
        ck_assert_int_lt(n, MAX_ARGS);
        argv[n + 1] = args[n];
        n++;
    }
    int ne = 0;
    while (environ[ne]) ne++;
    for (int i = 0; env && env[i]; i++) ne++;
    const char **envp = calloc((size_t)ne + 1, sizeof *envp);
    ck_assert_ptr_nonnull(envp);
    int k = 0;
    for (int i = 0; environ[i]; i++)
        if (!scrubbed(environ[i])) envp[k++] = environ[i];
    for (int i = 0; env && env[i]; i++) envp[k++] = env[i];

    p->idx = proc_spawn_env(&rl_group, argv, envp, PROC_DISCARD, PROC_CAPTURE, PROC_CAPTURE);
    int e = errno;
    free(envp);
    ck_assert_msg(p->idx >= 0, "starting %s: %s%s", bin, strerror(e),
                  e == EAGAIN ? " (more than PROC_MAX programs in one test)" : "");
    p->pid = rl_group.p[p->idx].pid;
    p->out_fd = rl_group.p[p->idx].out_fd;
    p->err_fd = rl_group.p[p->idx].err_fd;
}

/* s (a program's stderr) without the lines a wait prints once it has
 * lasted a few seconds (common/notice: "WHO: waiting for WHAT (N s so far)"):
 * the agent's for its observers and its first update, an observer's for
 * its agent. A loaded box (ASan, other tests beside this one) makes a
 * rendezvous or a first update that long, so a test that asserts what
 * else a program said compares this. A fresh string. */
static inline char *drop_waits(const char *s)
{
    static const char so_far[] = " s so far)";
    char *r = malloc(strlen(s) + 1);
    ck_assert_ptr_nonnull(r);
    size_t n = 0;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) + 1 : strlen(s);
        size_t body = nl ? len - 1 : len;
        const char *colon = memchr(s, ':', body);
        bool wait = colon && colon > s && body - (size_t)(colon - s) > 14 && strncmp(colon, ": waiting for ", 14) == 0 &&
                    body >= sizeof so_far - 1 && memcmp(s + body - (sizeof so_far - 1), so_far, sizeof so_far - 1) == 0;
        if (!wait) {
            memcpy(r + n, s, len);
            n += len;
        }
        s += len;
    }
    r[n] = '\0';
    return r;
}

/* After proc_wait: the status and the whole output into p, and the
 * output files closed. */
static inline void rl_collect(struct rl_proc *p)
{
    struct proc *c = &rl_group.p[p->idx];
    p->pid = 0;
    p->status = c->status;
    free(p->out);
    free(p->err);
    free(p->err_nowait);
    p->out = kit_must_read_fd(c->out_fd, NULL);
    p->err = kit_must_read_fd(c->err_fd, NULL);
    p->err_nowait = drop_waits(p->err);
    close(c->out_fd);
    close(c->err_fd);
    c->out_fd = c->err_fd = p->out_fd = p->err_fd = -1;
}

/* SIGKILLs p (a tributary-train takes its observers along: they die with
 * their parent) and reaps it. */
static inline void rl_kill(struct rl_proc *p)
{
    if (p->pid <= 0) return;
    kill(p->pid, SIGKILL);
    proc_wait(&rl_group, p->idx, -1);
    rl_collect(p);
}

/* Waits for p to exit (at most timeout_s, then kills it and fails the
 * test); returns its status and fills p->out and p->err. */
static inline int rl_wait(struct rl_proc *p, double timeout_s)
{
    proc_wait(&rl_group, p->idx, timeout_s);
    bool killed = rl_group.p[p->idx].status == -1;
    rl_collect(p);
    ck_assert_msg(!killed, "%s did not finish within %.0f s (killed)\nstdout:\n%s\nstderr:\n%s", p->name, timeout_s,
                  tail(p->out), tail(p->err));
    return p->status;
}

/* Whether p still runs (without reaping it). */
static inline bool rl_running(struct rl_proc *p)
{
    siginfo_t si = { 0 };
    return p->pid > 0 && waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

/* The fixtures' teardown: kills and reaps what a test left running. */
static inline void rl_kill_all(void)
{
    proc_group_deinit(&rl_group);
    proc_group_init(&rl_group);
}

static inline void rl_free(struct rl_proc *p)
{
    free(p->out);
    free(p->err);
    free(p->err_nowait);
    p->out = p->err = p->err_nowait = NULL;
}

/* ---- output -------------------------------------------------------------------- */

/* The last line of out (without its newline) into a fresh string. */
static inline char *last_line(const char *out)
{
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '\n') n--;
    size_t b = n;
    while (b > 0 && out[b - 1] != '\n') b--;
    return strndup(out + b, n - b);
}

/* The JSON summary, which must be the last line of p's stdout. */
static inline cJSON *summary(const struct rl_proc *p)
{
    char *line = last_line(p->out);
    cJSON *j = cJSON_Parse(line);
    ck_assert_msg(cJSON_IsObject(j), "the last line of stdout is not a JSON object: '%s'\nstdout:\n%s", line,
                  tail(p->out));
    free(line);
    return j;
}

static inline double jnum(const cJSON *j, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsNumber(x), "summary: '%s' is missing or not a number", key);
    return x->valuedouble;
}

static inline const char *jstr(const cJSON *j, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsString(x), "summary: '%s' is missing or not a string", key);
    return x->valuestring;
}

static inline bool jbool(const cJSON *j, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsBool(x), "summary: '%s' is missing or not a boolean", key);
    return cJSON_IsTrue(x);
}

/* Every key the summary always has, with the right type. */
static inline void check_summary_shape(const cJSON *j)
{
    static const char *const nums[] = { "observers", "envs_per_observer", "env_steps", "wall_s", "sps", "updates",
                                        "episodes", "updates_per_s", "observers_lost", "observers_rejoined", NULL };
    static const char *const strs[] = { "stopped_by", "mode", "algo", "env", NULL };
    static const char *const lags[] = { "lag_mean", "lag_p95", "lag_max", "lag_hist", NULL };
    jbool(j, "solved");
    for (int i = 0; nums[i]; i++) jnum(j, nums[i]);
    for (int i = 0; strs[i]; i++) jstr(j, strs[i]);
    ck_assert_str_eq(jstr(j, "solved_when"), "return_mean of the last 100 episodes >= target");
    /* policy lag is an async figure: a sync summary has none */
    bool async = strcmp(jstr(j, "mode"), "async") == 0;
    for (int i = 0; lags[i]; i++)
        ck_assert_msg((cJSON_GetObjectItemCaseSensitive(j, lags[i]) != NULL) == async, "summary of a %s run %s '%s'",
                      jstr(j, "mode"), async ? "without" : "with", lags[i]);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "return_mean");
    ck_assert_msg(cJSON_IsNumber(r) || cJSON_IsNull(r), "summary: return_mean is neither a number nor null");
}

/* The env steps of the last progress line in out, or -1 without one. */
static inline long long last_progress_steps(const char *out)
{
    long long steps = -1;
    for (const char *s = strstr(out, "s  steps "); s; s = strstr(s + 1, "s  steps ")) steps = atoll(s + 9);
    return steps;
}

/* Waits until p has printed a progress line with env steps counted (fails
 * if it exits first); returns them. */
static inline long long wait_progress(struct rl_proc *p)
{
    double t0 = trib_now_s();
    for (;;) {
        char *out = kit_must_read_fd(p->out_fd, NULL);
        long long steps = last_progress_steps(out);
        free(out);
        if (steps > 0) return steps;
        if (!rl_running(p)) {
            rl_wait(p, 1);
            ck_abort_msg("%s exited (%d) before any progress line\nstdout:\n%s\nstderr:\n%s", p->name, p->status,
                         tail(p->out), tail(p->err));
        }
        if (trib_now_s() - t0 > RUN_TIMEOUT_S) {
            rl_kill(p);
            ck_abort_msg("no progress line within %.0f s", RUN_TIMEOUT_S);
        }
        usleep(5000);
    }
}

/* A tributary-observer's stderr after its first line, which must say it
 * joined ("observerN: joined the agent at tcp://...:P as rank N"). */
static inline const char *after_joined(const char *err)
{
    const char *nl = strchr(err, '\n');
    ck_assert_msg(nl && strstr(err, ": joined the agent at tcp://") && strstr(err, ": joined the agent at tcp://") < nl &&
                      memmem(err, (size_t)(nl - err), " as rank ", 9),
                  "stderr does not begin with the observer's 'joined' line:\n%s", err);
    return nl + 1;
}

/* Whether p's stderr file holds `what` yet. */
static inline bool err_has(const struct rl_proc *p, const char *what)
{
    char *err = kit_must_read_fd(p->err_fd, NULL);
    bool r = strstr(err, what) != NULL;
    free(err);
    return r;
}

/* Waits until `what` is in p's stderr (fails after timeout_s, or if p
 * exits first). */
static inline void rl_wait_err(struct rl_proc *p, const char *what, double timeout_s)
{
    double t0 = trib_now_s();
    while (!err_has(p, what)) {
        if (!rl_running(p)) {
            rl_wait(p, 1);
            ck_abort_msg("%s exited (%d) before printing '%s'\nstdout:\n%s\nstderr:\n%s", p->name, p->status, what,
                         tail(p->out), tail(p->err));
        }
        ck_assert_msg(trib_now_s() - t0 < timeout_s, "'%s' not on %s's stderr within %.0f s", what, p->name, timeout_s);
        usleep(10000);
    }
}

/* The endpoint of a tributary-agent started on port 0 (its first stderr
 * line, "tributary-agent: listening on ENDPOINT") into ep. */
static inline void rl_agent_endpoint(struct rl_proc *agent, char *ep, size_t cap, double timeout_s)
{
    static const char pre[] = "tributary-agent: listening on ";
    rl_wait_err(agent, "\n", timeout_s);
    char *err = kit_must_read_fd(agent->err_fd, NULL);
    ck_assert_msg(strncmp(err, pre, strlen(pre)) == 0, "agent stderr:\n%s", err);
    size_t len = strcspn(err + strlen(pre), "\n");
    ck_assert_int_lt(len, cap);
    memcpy(ep, err + strlen(pre), len);
    ep[len] = '\0';
    free(err);
}

/* A free TCP port on 127.0.0.1 (free when this returns). */
static inline int free_port(void)
{
    int port = proc_free_port();
    ck_assert_msg(port > 0, "no free port: %s", strerror(errno));
    return port;
}

/* The progress rows of out (the lines with "steps"), without the columns
 * the clock makes (the time, sps, upd/s), one per line. */
static inline char *rl_progress_rows(const char *out)
{
    size_t cap = strlen(out) + 1, n = 0;
    char *r = calloc(cap, 1), *copy = strdup(out);
    ck_assert(r && copy);
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *from = strstr(line, "steps ");
        if (!from || line[0] != ' ') continue;
        char *save2 = NULL;
        bool skip = false;
        for (char *tok = strtok_r(from, " ", &save2); tok; tok = strtok_r(NULL, " ", &save2)) {
            if (skip) {
                skip = false;
                continue;
            }
            if (!strcmp(tok, "sps") || !strcmp(tok, "upd/s")) {
                skip = true;
                continue;
            }
            n += (size_t)snprintf(r + n, cap - n, "%s ", tok);
        }
        n += (size_t)snprintf(r + n, cap - n, "\n");
    }
    free(copy);
    return r;
}

/* Starts bin with args, --logdir DIR/name and env, and waits for it: it
 * must exit `want` (the failure names `name`). *p keeps its output
 * (rl_free it). */
static inline void rl_run_logdir(struct rl_proc *p, const char *bin, const char *dir, const char *name,
                                 const char *const *args, const char *const *env, int want)
{
    char logdir[256];
    snprintf(logdir, sizeof logdir, "%s/%s", dir, name);
    const char *argv[MAX_ARGS] = { 0 };
    int n = 0;
    while (args[n]) {
        argv[n] = args[n];
        n++;
    }
    argv[n++] = "--logdir";
    argv[n++] = logdir;
    rl_start(p, bin, argv, env);
    int rc = rl_wait(p, RUN_TIMEOUT_S);
    ck_assert_msg(rc == want, "%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", name, rc, want, tail(p->out),
                  tail(p->err));
}

/* trib-floor's (floor_bin) progress rows are the distributed run's
 * (train_bin) with args, row for row (losses, KL, returns, the lag when overlapped): the same updates.
 * dir (NULL: none): the run gets --logdir DIR/run (its checkpoints, with
 * --checkpoint-every) and the floor --logdir DIR/floor, which it never
 * writes (it keeps the run's checkpoint boundaries, where an overlapped
 * run drains). */
static inline void rl_check_floor_same_in(const char *train_bin, const char *floor_bin, const char *const *args,
                                          const char *dir, bool overlapped)
{
    const char *argv[MAX_ARGS] = { 0 };
    char logdir[2][256];
    int n = 0;
    for (; args[n]; n++) argv[n] = strcmp(args[n], "--quiet") ? args[n] : "--no-quiet";
    if (dir) {
        snprintf(logdir[0], sizeof logdir[0], "%s/run", dir);
        snprintf(logdir[1], sizeof logdir[1], "%s/floor", dir);
        argv[n++] = "--logdir";
        argv[n++] = logdir[0];
    }
    argv[n] = NULL;
    struct rl_proc run, floor;
    rl_start(&run, train_bin, argv, NULL);
    int rc = rl_wait(&run, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "exit %d\nstderr:\n%s", rc, tail(run.err));
    if (dir) argv[n - 1] = logdir[1];
    rl_start(&floor, floor_bin, argv, NULL);
    rc = rl_wait(&floor, RUN_TIMEOUT_S);
    ck_assert_msg(rc == 1, "trib-floor: exit %d\nstderr:\n%s", rc, tail(floor.err));
    char *a = rl_progress_rows(run.out), *b = rl_progress_rows(floor.out);
    int rows = 0;
    for (const char *c = a; *c; c++) rows += *c == '\n';
    ck_assert_msg(rows >= 8, "%d progress rows:\n%s", rows, run.out);
    ck_assert_msg((strstr(a, " lag ") != NULL) == overlapped, "lag column:\n%s", a);
    ck_assert_msg(strcmp(a, b) == 0, "the floor's rows differ from the run's:\nrun:\n%s\nfloor:\n%s", a, b);
    cJSON *ja = summary(&run), *jb = summary(&floor);
    ck_assert_msg(jnum(ja, "return_mean") == jnum(jb, "return_mean"), "summaries differ:\n%s\n%s", run.out, floor.out);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    free(b);
    rl_free(&run);
    rl_free(&floor);
}

static inline void rl_check_floor_same(const char *train_bin, const char *floor_bin, const char *const *args,
                                       bool overlapped)
{
    rl_check_floor_same_in(train_bin, floor_bin, args, NULL, overlapped);
}

#endif
