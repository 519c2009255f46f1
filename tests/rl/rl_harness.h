/* Helpers of the RL programs' end-to-end tests (test_rl_train,
 * test_rl_rejoin): start real processes with their output in unlinked
 * files, wait for them with a time limit, reap whatever a test leaves, and
 * read the JSON summary the agent prints last. One includer per binary. */
#ifndef TRIB_TESTS_RL_HARNESS_H
#define TRIB_TESTS_RL_HARNESS_H

#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- processes ----------------------------------------------------------------- */

#define MAX_ARGS 48
#define MAX_PROCS 8
#define RUN_TIMEOUT_S 300.0         /* any one run, ASan included; a hang fails the test */

struct proc {
    const char *name;               /* the binary's path, for messages */
    pid_t pid;                      /* 0 once reaped */
    int status;                     /* exit status, or 128 + signal */
    int out_fd, err_fd;             /* its stdout and stderr: unlinked files, read from offset 0 */
    char *out, *err;                /* the whole stdout/stderr once proc_wait returns */
};

/* Started and not yet reaped, for the teardown. In CK_FORK mode Check also
 * kills the test's process group (where these and their children stay)
 * when a test ends, so a failed assertion leaves nothing behind either. */
static pid_t running[MAX_PROCS];

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Everything written to fd so far. */
static inline char *slurp(int fd)
{
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    ssize_t k;
    while ((k = pread(fd, s + n, cap - n - 1, (off_t)n)) != 0) {
        if (k < 0) {
            ck_assert_msg(errno == EINTR, "pread: %s", strerror(errno));
            continue;
        }
        n += (size_t)k;
        if (cap - n - 1 == 0) {
            cap *= 2;
            s = realloc(s, cap);
            ck_assert_ptr_nonnull(s);
        }
    }
    s[n] = '\0';
    return s;
}

/* A temporary file already unlinked: nothing is left behind however the
 * test ends. */
static inline int anon_file(void)
{
    char path[] = "/tmp/test_rl_XXXXXX";
    int fd = mkostemp(path, O_CLOEXEC);
    ck_assert_msg(fd >= 0, "mkostemp: %s", strerror(errno));
    unlink(path);
    return fd;
}

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
static inline void proc_start(struct proc *p, const char *bin, const char *const *args, const char *const *env)
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

    p->out_fd = anon_file();
    p->err_fd = anon_file();
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p->out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, p->err_fd, 2);
    /* Signals as a fresh program expects them, whatever ran this test. */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawn(&p->pid, bin, &fa, &at, (char *const *)argv, (char *const *)envp);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    ck_assert_msg(rc == 0, "posix_spawn %s: %s", bin, strerror(rc));
    for (int i = 0; i < MAX_PROCS; i++)
        if (!running[i]) {
            running[i] = p->pid;
            break;
        }
}

static inline void proc_collect(struct proc *p, int st)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (running[i] == p->pid) running[i] = 0;
    p->pid = 0;
    p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    free(p->out);
    free(p->err);
    p->out = slurp(p->out_fd);
    p->err = slurp(p->err_fd);
    close(p->out_fd);
    close(p->err_fd);
    p->out_fd = p->err_fd = -1;
}

/* SIGKILLs p (a tributary-train takes its observers along: they die with
 * their parent) and reaps it. */
static inline void proc_kill(struct proc *p)
{
    if (p->pid <= 0) return;
    kill(p->pid, SIGKILL);
    int st = 0;
    while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
    proc_collect(p, st);
}

/* Waits for p to exit (at most timeout_s, then kills it and fails the
 * test); returns its status and fills p->out and p->err. */
static inline int proc_wait(struct proc *p, double timeout_s)
{
    double t0 = now_s();
    for (;;) {
        int st = 0;
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            proc_collect(p, st);
            return p->status;
        }
        ck_assert_msg(r == 0, "waitpid %s: %s", p->name, strerror(errno));
        if (now_s() - t0 > timeout_s) {
            proc_kill(p);
            ck_abort_msg("%s did not finish within %.0f s (killed)\nstdout:\n%s\nstderr:\n%s", p->name, timeout_s,
                         tail(p->out), tail(p->err));
        }
        usleep(10000);
    }
}

/* Whether p still runs (without reaping it). */
static inline bool proc_running(struct proc *p)
{
    siginfo_t si = { 0 };
    return p->pid > 0 && waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
}

/* The fixture's teardown: kills and reaps what a test left running. */
static inline void kill_running(void)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (running[i] > 0) {
            kill(running[i], SIGKILL);
            while (waitpid(running[i], NULL, 0) < 0 && errno == EINTR) {}
            running[i] = 0;
        }
}

static inline void proc_free(struct proc *p)
{
    free(p->out);
    free(p->err);
    p->out = p->err = NULL;
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
static inline cJSON *summary(const struct proc *p)
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
                                        "episodes", "updates_per_s", "lag_mean", "lag_max", "observers_lost",
                                        "observers_rejoined", NULL };
    static const char *const strs[] = { "stopped_by", "mode", "algo", "env", NULL };
    jbool(j, "solved");
    for (int i = 0; nums[i]; i++) jnum(j, nums[i]);
    for (int i = 0; strs[i]; i++) jstr(j, strs[i]);
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
static inline long long wait_progress(struct proc *p)
{
    double t0 = now_s();
    for (;;) {
        char *out = slurp(p->out_fd);
        long long steps = last_progress_steps(out);
        free(out);
        if (steps > 0) return steps;
        if (!proc_running(p)) {
            proc_wait(p, 1);
            ck_abort_msg("%s exited (%d) before any progress line\nstdout:\n%s\nstderr:\n%s", p->name, p->status,
                         tail(p->out), tail(p->err));
        }
        if (now_s() - t0 > RUN_TIMEOUT_S) {
            proc_kill(p);
            ck_abort_msg("no progress line within %.0f s", RUN_TIMEOUT_S);
        }
        usleep(5000);
    }
}

/* Whether p's stderr file holds `what` yet. */
static inline bool err_has(const struct proc *p, const char *what)
{
    char *err = slurp(p->err_fd);
    bool r = strstr(err, what) != NULL;
    free(err);
    return r;
}

/* A free TCP port on 127.0.0.1 (free when this returns). */
static inline int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
    close(s);
    return ntohs(a.sin_port);
}

#endif
